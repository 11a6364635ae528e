namespace XfsWin.Cli.Commands;

/// <summary>
/// Whether a volume an offline tool is about to change is in use by Linux: a block device that is mounted, or an
/// image file attached to a loop device (mounted or not: whoever attached it may mount it while the tool writes).
/// Offline changes under a mounted file system would corrupt it, so grow, label and uuid refuse. Linux only: on
/// Windows, opening a physical disk for writing locks and dismounts the Windows volumes on the bytes it writes
/// (<see cref="XfsWin.Device.FileBlockDevice.ClaimForWriting"/>), refusing while one is in use.
/// </summary>
public static class MountGuard
{
    /// <summary>Why <paramref name="path"/> must not be changed now, or null when nothing uses it.</summary>
    public static string? InUse(string path)
    {
        if (!OperatingSystem.IsLinux()) return null;
        string full;
        try
        {
            full = Path.GetFullPath(path);
            if (new FileInfo(full).LinkTarget is not null) full = new FileInfo(full).ResolveLinkTarget(returnFinalTarget: true)?.FullName ?? full;
        }
        catch (IOException)
        {
            return null;
        }
        var mounts = ReadMounts();
        if (full.StartsWith("/dev/", StringComparison.Ordinal))
        {
            foreach (var (source, target, _, _) in mounts)
                if (source == full) return $"{path} is mounted at {target}; unmount it first";
            return null;
        }
        if (!Directory.Exists("/sys/block")) return null;
        foreach (var dir in Directory.EnumerateDirectories("/sys/block", "loop*"))
        {
            string backing = Path.Combine(dir, "loop", "backing_file");
            string? file = TryRead(backing)?.Trim();
            if (file is null || file != full) continue;
            string loop = "/dev/" + Path.GetFileName(dir);
            foreach (var (source, target, _, _) in mounts)
                if (source == loop) return $"{path} is mounted at {target} (through {loop}); unmount it and detach {loop} first";
            return $"{path} is attached to {loop}; detach it first (losetup -d {loop})";
        }
        return null;
    }

    /// <summary>A mount of the volume a path names: where, by what (the kernel's XFS, or an xfswin FUSE server), and whether read-write.</summary>
    public readonly record struct VolumeMount(string Target, bool ReadWrite, bool ByXfswin);

    /// <summary>
    /// Where the volume <paramref name="path"/> names is mounted: by the kernel (the block device itself, or the loop
    /// device an image file is attached to) or by an xfswin FUSE server (whose fsname is the source it was given,
    /// with or without a partition suffix). Empty when nothing has it mounted, and off Linux.
    /// </summary>
    public static List<VolumeMount> MountsOf(string path, int? partition = null)
    {
        var found = new List<VolumeMount>();
        if (!OperatingSystem.IsLinux()) return found;
        string full;
        try
        {
            full = Path.GetFullPath(path);
            if (new FileInfo(full).LinkTarget is not null) full = new FileInfo(full).ResolveLinkTarget(returnFinalTarget: true)?.FullName ?? full;
        }
        catch (IOException)
        {
            return found;
        }
        // The device nodes the kernel may have mounted: the disk itself or its partition's node (sdb2, nvme0n1p2), and for
        // an image file the loop devices attached to it (their partitions; one set to an offset may hold any of them).
        var sources = new HashSet<string>(StringComparer.Ordinal);
        void AddDevice(string dev)
        {
            if (partition is not int n) sources.Add(dev);
            else
            {
                sources.Add(dev + n);
                sources.Add(dev + "p" + n);
            }
        }
        if (full.StartsWith("/dev/", StringComparison.Ordinal)) AddDevice(full);
        else if (Directory.Exists("/sys/block"))
        {
            foreach (var dir in Directory.EnumerateDirectories("/sys/block", "loop*"))
            {
                if (TryRead(Path.Combine(dir, "loop", "backing_file"))?.Trim() != full) continue;
                string loop = "/dev/" + Path.GetFileName(dir);
                AddDevice(loop);
                if (partition is not null && TryRead(Path.Combine(dir, "loop", "offset"))?.Trim() is { } offset && offset != "0") sources.Add(loop);
            }
        }
        foreach (var m in ReadMounts())
        {
            bool rw = m.Options.Split(',').Contains("rw");
            if (m.Type == "fuse.xfswin")
            {
                string source;
                try
                {
                    source = Path.GetFullPath(Device.PartitionSpec.Parse(m.Source).Path);
                }
                catch (Exception e) when (e is ArgumentException or XfsException)
                {
                    continue;
                }
                if (source == full) found.Add(new VolumeMount(m.Target, rw, ByXfswin: true));
            }
            else if (sources.Contains(m.Source))
            {
                found.Add(new VolumeMount(m.Target, rw, ByXfswin: false));
            }
        }
        return found;
    }

    private static List<(string Source, string Target, string Type, string Options)> ReadMounts()
    {
        var list = new List<(string, string, string, string)>();
        string? text = TryRead("/proc/self/mounts");
        if (text is null) return list;
        foreach (var line in text.Split('\n'))
        {
            var f = line.Split(' ');
            if (f.Length >= 4) list.Add((Unescape(f[0]), Unescape(f[1]), f[2], f[3]));
        }
        return list;
    }

    /// <summary>/proc/self/mounts escapes space, tab, newline and backslash as three octal digits.</summary>
    private static string Unescape(string s)
    {
        if (!s.Contains('\\')) return s;
        var sb = new System.Text.StringBuilder();
        for (int i = 0; i < s.Length; i++)
        {
            if (s[i] == '\\' && IsOctal(s, i + 1))
            {
                sb.Append((char)Convert.ToInt32(s.Substring(i + 1, 3), 8));
                i += 3;
            }
            else sb.Append(s[i]);
        }
        return sb.ToString();
    }

    private static bool IsOctal(string s, int at) =>
        at + 3 <= s.Length && s[at] is >= '0' and <= '7' && s[at + 1] is >= '0' and <= '7' && s[at + 2] is >= '0' and <= '7';

    private static string? TryRead(string path)
    {
        try
        {
            return File.ReadAllText(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }
}

namespace XfsWin.Control.Server;

/// <summary>
/// Whether the Linux kernel has a device or image mounted, so format and check can refuse it: a
/// block device (or one of its partitions) that /proc/self/mountinfo names as a mount's source, or
/// an image file backing a loop device that is mounted (or whose partitions are). Elsewhere (Windows:
/// the service's own mounts are the ones it knows) there is nothing to ask, and the answer is null.
/// </summary>
public static class KernelMounts
{
    /// <summary>Where the kernel mounts <paramref name="path"/> ("/dev/loop3 (backed by it) at /mnt/x"), or null.</summary>
    public static string? FindMount(string path) => OperatingSystem.IsLinux() ? FindMount(path, ReadMountInfo(), LoopBackings()) : null;

    /// <summary>
    /// The same question over a mountinfo text and the loop devices' backing files (name, backing
    /// path), so the rule is testable on its own.
    /// </summary>
    public static string? FindMount(string path, string mountInfo, IReadOnlyList<(string Device, string Backing)> loops)
    {
        var mounts = Sources(mountInfo);
        string target = Resolve(path);
        if (target.StartsWith("/dev/", StringComparison.Ordinal))
            return MountOf(target, mounts) is { } m ? $"{target} is mounted by the kernel at {m}" : null;
        // A FUSE mount (another xfswin, for one) names the image itself, or "image@N", as its source.
        foreach (var (source, mountPoint) in mounts)
            if (source == target || source.StartsWith(target + "@", StringComparison.Ordinal))
                return $"{source} is mounted at {mountPoint}";
        foreach (var (device, backing) in loops)
        {
            if (!string.Equals(backing, target, StringComparison.Ordinal)) continue;
            if (MountOf(device, mounts) is { } m) return $"{device} (a loop device backed by {path}) is mounted by the kernel at {m}";
        }
        return null;
    }

    /// <summary>The mount point of <paramref name="device"/> or of a partition of it (sda1, nvme0n1p2, loop3p1).</summary>
    private static string? MountOf(string device, List<(string Source, string MountPoint)> mounts)
    {
        foreach (var (source, mountPoint) in mounts)
        {
            if (source == device) return mountPoint;
            if (source.Length <= device.Length || !source.StartsWith(device, StringComparison.Ordinal)) continue;
            // Partition names: sda -> sda1; a name ending in a digit takes a 'p' (nvme0n1p2, loop3p1).
            var rest = source.AsSpan(device.Length);
            if (char.IsAsciiDigit(device[^1]))
            {
                if (rest[0] != 'p') continue;
                rest = rest[1..];
            }
            if (IsDigits(rest)) return mountPoint;
        }
        return null;
    }

    private static bool IsDigits(ReadOnlySpan<char> s)
    {
        foreach (char c in s)
            if (!char.IsAsciiDigit(c)) return false;
        return s.Length > 0;
    }

    /// <summary>(source, mount point) of every mount: a mountinfo line is "id parent maj:min root mountpoint opts [tags] - fstype source superopts".</summary>
    private static List<(string, string)> Sources(string mountInfo)
    {
        var result = new List<(string, string)>();
        foreach (var line in mountInfo.Split('\n', StringSplitOptions.RemoveEmptyEntries))
        {
            var fields = line.Split(' ');
            int dash = Array.IndexOf(fields, "-");
            if (dash < 5 || dash + 2 >= fields.Length) continue;
            result.Add((Unescape(fields[dash + 2]), Unescape(fields[4])));
        }
        return result;
    }

    /// <summary>mountinfo writes space, tab, newline and backslash as \ooo octal escapes.</summary>
    private static string Unescape(string field)
    {
        if (!field.Contains('\\')) return field;
        var b = new System.Text.StringBuilder(field.Length);
        for (int i = 0; i < field.Length; i++)
        {
            if (field[i] == '\\' && i + 3 < field.Length
                && field[i + 1] is >= '0' and <= '7' && field[i + 2] is >= '0' and <= '7' && field[i + 3] is >= '0' and <= '7')
            {
                b.Append((char)((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0')));
                i += 3;
            }
            else b.Append(field[i]);
        }
        return b.ToString();
    }

    private static string Resolve(string path)
    {
        try
        {
            var full = Path.GetFullPath(path);
            return File.ResolveLinkTarget(full, returnFinalTarget: true)?.FullName ?? full;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException)
        {
            return path;
        }
    }

    private static string ReadMountInfo()
    {
        try
        {
            return File.ReadAllText("/proc/self/mountinfo");
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return "";
        }
    }

    /// <summary>Every attached loop device with its backing file (/sys/block/loopN/loop/backing_file).</summary>
    private static List<(string, string)> LoopBackings()
    {
        var loops = new List<(string, string)>();
        try
        {
            foreach (var dir in Directory.EnumerateDirectories("/sys/block", "loop*"))
            {
                string file = Path.Combine(dir, "loop", "backing_file");
                if (!File.Exists(file)) continue;
                string backing = File.ReadAllText(file).TrimEnd('\n');
                if (backing.EndsWith(" (deleted)", StringComparison.Ordinal)) continue;
                loops.Add(("/dev/" + Path.GetFileName(dir), backing));
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
        }
        return loops;
    }
}

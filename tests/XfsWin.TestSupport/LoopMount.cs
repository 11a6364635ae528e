namespace XfsWin.TestSupport;

/// <summary>
/// An image mounted by the Linux kernel through a loop device. Dispose always unmounts, detaches the
/// loop device and removes the mount point, even when the test failed.
/// </summary>
public sealed class LoopMount : IDisposable
{
    private bool _disposed;

    private LoopMount(string image, string loopDevice, string mountPoint, bool readOnly)
    {
        Image = image;
        LoopDevice = loopDevice;
        MountPoint = mountPoint;
        ReadOnly = readOnly;
    }

    public string Image { get; }
    public string LoopDevice { get; }
    public string MountPoint { get; }
    public bool ReadOnly { get; }

    /// <summary>Mounts <paramref name="image"/> (XFS) read-only or read-write; extra options are appended to -o.</summary>
    public static LoopMount Mount(string image, bool readOnly, string? extraOptions = null)
    {
        if (!File.Exists(image))
            throw new FileNotFoundException($"image {image} does not exist", image);
        var loop = Shell.RunChecked("losetup", "--find", "--show", readOnly ? "--read-only" : "--nooverlap", image)
            .StandardOutput.Trim();
        if (!loop.StartsWith("/dev/loop", StringComparison.Ordinal))
        {
            throw new InvalidOperationException($"losetup gave '{loop}' for {image}; loop devices are needed (run as root on a machine with /dev/loop-control).");
        }
        string? dir = null;
        try
        {
            dir = Directory.CreateTempSubdirectory("xfswin-mnt.").FullName;
            // nouuid: tests run in parallel and may mount an image and a copy of it (same UUID) at once.
            var opts = (readOnly ? "ro" : "rw") + ",nouuid";
            if (!string.IsNullOrEmpty(extraOptions))
                opts += "," + extraOptions;
            Shell.RunChecked("mount", "-t", "xfs", "-o", opts, loop, dir);
            return new LoopMount(image, loop, dir, readOnly);
        }
        catch
        {
            Shell.Run("losetup", "-d", loop);
            if (dir is not null)
                TryDeleteDirectory(dir);
            throw;
        }
    }

    public void Dispose()
    {
        if (_disposed)
            return;
        _disposed = true;
        var errors = new List<string>();
        ShellResult? umount = null;
        for (var attempt = 0; attempt < 20; attempt++)
        {
            umount = Shell.Run("umount", MountPoint);
            if (umount.ExitCode == 0 || !IsMounted(MountPoint))
                break;
            Thread.Sleep(250);
        }
        if (IsMounted(MountPoint))
            errors.Add($"umount {MountPoint}: {umount?.StandardError.Trim()}");
        var detach = Shell.Run("losetup", "-d", LoopDevice);
        if (detach.ExitCode != 0 && !detach.StandardError.Contains("No such device", StringComparison.Ordinal))
            errors.Add($"losetup -d {LoopDevice}: {detach.StandardError.Trim()}");
        if (!IsMounted(MountPoint))
            TryDeleteDirectory(MountPoint);
        if (errors.Count > 0)
            throw new InvalidOperationException("could not clean up a loop mount: " + string.Join("; ", errors));
    }

    public static bool IsMounted(string mountPoint)
    {
        var full = Path.GetFullPath(mountPoint).TrimEnd('/');
        foreach (var line in File.ReadLines("/proc/self/mounts"))
        {
            var fields = line.Split(' ');
            if (fields.Length > 1 && fields[1].Replace("\\040", " ", StringComparison.Ordinal) == full)
                return true;
        }
        return false;
    }

    private static void TryDeleteDirectory(string dir)
    {
        try { Directory.Delete(dir); } catch (IOException) { } catch (UnauthorizedAccessException) { }
    }
}

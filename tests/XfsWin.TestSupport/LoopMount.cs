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
        // No --nooverlap: it would hand back (or refuse over) a device of an earlier mount still being released.
        var loop = Shell.RunChecked("losetup", readOnly ? ["--find", "--show", "--read-only", image] : ["--find", "--show", image])
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
            Detach(loop);
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
        var detachError = Detach(LoopDevice);
        if (detachError is not null)
            errors.Add(detachError);
        if (!IsMounted(MountPoint))
            TryDeleteDirectory(MountPoint);
        if (errors.Count > 0)
            throw new InvalidOperationException("could not clean up a loop mount: " + string.Join("; ", errors));
    }

    /// <summary>
    /// Detaches <paramref name="loopDevice"/> and waits until the kernel has let go of its backing file. While anything
    /// (udev's probe of a new device, say) still has the device open, `losetup -d` only marks it to go at the last
    /// close; the image stays attached until then, and a test that next opens the image (our mount refuses attached
    /// images) or attaches it again would see the old device. Returns an error message, or null.
    /// </summary>
    public static string? Detach(string loopDevice)
    {
        var detach = Shell.Run("losetup", "-d", loopDevice);
        if (detach.ExitCode != 0 && !detach.StandardError.Contains("No such device", StringComparison.Ordinal))
            return $"losetup -d {loopDevice}: {detach.StandardError.Trim()}";
        string backingFile = $"/sys/block/{Path.GetFileName(loopDevice)}/loop/backing_file";
        for (var waited = 0; File.Exists(backingFile); waited++)
        {
            if (waited == 600)
                return $"{loopDevice} was still attached 30 s after losetup -d";
            Thread.Sleep(50);
        }
        return null;
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

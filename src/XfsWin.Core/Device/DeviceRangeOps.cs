using System.Runtime.InteropServices;

namespace XfsWin.Device;

/// <summary>
/// Whole-range operations on an image file or block device that plain writes cannot express: zeroing
/// without allocating (punched holes in files, BLKZEROOUT on devices), discard (BLKDISCARD), and what a
/// block device reports about itself. Linux only (but for telling a Windows device path from a file);
/// elsewhere every call answers "not done" and callers fall back to writing zeros or skip the step.
/// </summary>
public static partial class DeviceRangeOps
{
    private const int O_RDWR = 2, O_RDONLY = 0, O_CLOEXEC = 0x80000;
    private const int FallocPunchHole = 0x2, FallocKeepSize = 0x1;
    private const ulong BLKDISCARD = 0x1277, BLKZEROOUT = 0x127f, BLKPBSZGET = 0x127b;
    private const ulong BLKIOMIN = 0x1278, BLKIOOPT = 0x1279, BLKALIGNOFF = 0x127a;

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int open(string path, int flags);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int close(int fd);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int fallocate(int fd, int mode, long offset, long length);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int ioctl(int fd, ulong request, [In] ulong[] range);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int ioctl(int fd, ulong request, out int value);

    /// <summary>
    /// True for a disk rather than an image file: a Linux block device node (it has a /sys/class/block entry), or on
    /// Windows a device path (<see cref="IsWindowsDevicePath"/>).
    /// </summary>
    public static bool IsBlockDevice(string path) =>
        OperatingSystem.IsWindows() ? IsWindowsDevicePath(path) : SysfsDir(path) is not null;

    /// <summary>
    /// A Windows device path: <c>\\.\PhysicalDriveN</c> (a whole disk; its partitions are named <c>\\.\PhysicalDriveN@K</c>),
    /// a volume <c>\\.\X:</c> or <c>\\?\Volume{GUID}</c>, or another <c>\\.\</c> device. File paths, UNC shares
    /// (<c>\\server\share</c>) and long file paths (<c>\\?\C:\dir\file</c>) are not.
    /// </summary>
    public static bool IsWindowsDevicePath(string path)
    {
        ArgumentNullException.ThrowIfNull(path);
        if (path.StartsWith(@"\\.\", StringComparison.Ordinal)) return path.Length > 4 && path.IndexOf('\\', 4) < 0;
        return path.StartsWith(@"\\?\Volume{", StringComparison.OrdinalIgnoreCase) && path.TrimEnd('\\').IndexOf('\\', 4) < 0;
    }

    /// <summary>Makes [offset, offset+length) read as zeros without writing data: a hole in a file, BLKZEROOUT on a device.</summary>
    public static bool TryZeroRange(string path, bool blockDevice, long offset, long length)
    {
        if (!OperatingSystem.IsLinux() || length <= 0) return length <= 0;
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) return false;
        try
        {
            if (!blockDevice) return fallocate(fd, FallocPunchHole | FallocKeepSize, offset, length) == 0;
            return RangeIoctl(fd, BLKZEROOUT, offset, length);
        }
        finally
        {
            close(fd);
        }
    }

    /// <summary>Tells the device the range holds nothing (BLKDISCARD), in steps of at most 2 GiB as mkfs.xfs does.</summary>
    public static bool TryDiscard(string path, long offset, long length, Action<long>? progress = null)
    {
        if (!OperatingSystem.IsLinux()) return false;
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) return false;
        try
        {
            const long step = 2L << 30;
            for (long done = 0; done < length; done += step)
            {
                if (!RangeIoctl(fd, BLKDISCARD, offset + done, Math.Min(step, length - done))) return false;
                progress?.Invoke(Math.Min(length, done + step));
            }
            return true;
        }
        finally
        {
            close(fd);
        }
    }

    private static bool RangeIoctl(int fd, ulong request, long offset, long length) =>
        ioctl(fd, request, [(ulong)offset, (ulong)length]) == 0;

    /// <summary>The physical sector size a block device reports, or null.</summary>
    public static int? PhysicalSectorSize(string path)
    {
        if (!OperatingSystem.IsLinux()) return null;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return null;
        try
        {
            return ioctl(fd, BLKPBSZGET, out int size) == 0 && size >= 512 ? size : null;
        }
        finally
        {
            close(fd);
        }
    }

    /// <summary>
    /// The I/O topology a block device reports (what blkid reads): its minimum and optimal I/O sizes in bytes (a RAID's
    /// chunk and full-stripe sizes; 0 when it reports none) and how far its start is from a physical sector boundary.
    /// Null for anything else, or off Linux.
    /// </summary>
    public static BlockDeviceTopology? Topology(string path)
    {
        if (!OperatingSystem.IsLinux()) return null;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return null;
        try
        {
            if (ioctl(fd, BLKIOMIN, out int min) != 0 || ioctl(fd, BLKIOOPT, out int opt) != 0 || ioctl(fd, BLKALIGNOFF, out int off) != 0)
                return null;
            return new BlockDeviceTopology((uint)min, (uint)opt, off);
        }
        finally
        {
            close(fd);
        }
    }

    /// <summary>False when the block device says it is not rotational (an SSD, or a loop device over one); null when unknown.</summary>
    public static bool? IsRotational(string path)
    {
        var dir = SysfsDir(path);
        if (dir is null) return null;
        foreach (var candidate in new[] { Path.Combine(dir, "queue", "rotational"), Path.Combine(dir, "..", "queue", "rotational") })
        {
            if (File.Exists(candidate)) return File.ReadAllText(candidate).Trim() != "0";
        }
        return null;
    }

    private static string? SysfsDir(string path)
    {
        if (!OperatingSystem.IsLinux() || !path.StartsWith("/dev/", StringComparison.Ordinal)) return null;
        string full = Path.GetFullPath(path);
        try
        {
            var target = new FileInfo(full).ResolveLinkTarget(returnFinalTarget: true);
            if (target is not null) full = target.FullName;
        }
        catch (IOException)
        {
        }
        string dir = Path.Combine("/sys/class/block", Path.GetFileName(full));
        return Directory.Exists(dir) ? dir : null;
    }
}

/// <summary>A block device's I/O topology: minimum and optimal I/O sizes (bytes, 0 = none) and its alignment offset (bytes; -1 when it cannot be aligned).</summary>
public readonly record struct BlockDeviceTopology(uint MinimumIoBytes, uint OptimalIoBytes, int AlignmentOffset);

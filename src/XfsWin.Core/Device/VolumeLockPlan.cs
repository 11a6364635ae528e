namespace XfsWin.Device;

/// <summary>One extent of a Windows volume on a disk (DISK_EXTENT of IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS).</summary>
public readonly record struct DiskExtent(uint DiskNumber, long StartingOffset, long Length)
{
    public bool Overlaps(uint disk, long start, long length) =>
        DiskNumber == disk && length > 0 && Length > 0 && StartingOffset < start + length && start < StartingOffset + Length;
}

/// <summary>
/// A Windows volume (<c>\\?\Volume{GUID}</c>): its name, where it is mounted (drive letters and folders, for messages)
/// and the disk extents it lives on (more than one for a spanned or striped dynamic volume).
/// </summary>
public sealed record WindowsVolume(string Name, IReadOnlyList<string> MountPoints, IReadOnlyList<DiskExtent> Extents)
{
    /// <summary>"E:\ (\\?\Volume{…}\)" or the bare name when it has no mount point.</summary>
    public string Display => MountPoints.Count > 0 ? $"{string.Join(", ", MountPoints)} ({Name})" : Name;
}

/// <summary>
/// Which Windows volumes must be locked and dismounted before XfsWin writes to part of a physical disk, and in what
/// order, as platform-neutral decisions (<c>WindowsDevice</c> carries them out). Windows refuses writes to sectors of
/// a mounted volume, and a volume that Windows has mounted (even as RAW, on a partition of a type it does not know)
/// may cache or write those sectors itself; so every volume with an extent that shares bytes with the range XfsWin
/// writes is locked (FSCTL_LOCK_VOLUME: refused while any other program has a file open on it) and then dismounted
/// (FSCTL_DISMOUNT_VOLUME), and stays locked while XfsWin has the disk open. All locks are taken before the first
/// dismount, so a volume in use stops the open with nothing dismounted. Order: by where each volume starts on this
/// disk, then by name, so two XfsWin processes never lock the same volumes in opposite orders.
/// </summary>
public static class VolumeLockPlan
{
    public const int ErrorAccessDenied = 5, ErrorSharingViolation = 32, ErrorLockViolation = 33, ErrorNotReady = 21;

    /// <summary>The volumes sharing bytes with [<paramref name="start"/>, +<paramref name="length"/>) of disk <paramref name="diskNumber"/>, in locking order.</summary>
    public static IReadOnlyList<WindowsVolume> VolumesToLock(IEnumerable<WindowsVolume> volumes, uint diskNumber, long start, long length)
    {
        ArgumentNullException.ThrowIfNull(volumes);
        return [.. volumes
            .Where(v => v.Extents.Any(e => e.Overlaps(diskNumber, start, length)))
            .OrderBy(v => v.Extents.Where(e => e.DiskNumber == diskNumber).Min(e => e.StartingOffset))
            .ThenBy(v => v.Name, StringComparer.OrdinalIgnoreCase)];
    }

    /// <summary>The disk number in <c>\\.\PhysicalDriveN</c>, or null for any other path.</summary>
    public static uint? PhysicalDriveNumber(string path)
    {
        const string Prefix = @"\\.\PhysicalDrive";
        if (!path.StartsWith(Prefix, StringComparison.OrdinalIgnoreCase)) return null;
        return uint.TryParse(path.AsSpan(Prefix.Length), System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out uint n)
            ? n : null;
    }

    /// <summary>What a failed step (open, lock or dismount) of <paramref name="volume"/> means for the user; nothing was written.</summary>
    public static XfsException Failure(WindowsVolume volume, string step, int win32Error, string disk) => win32Error switch
    {
        ErrorAccessDenied when step == "lock" => new XfsException(XfsError.IoError,
            $"Windows volume {volume.Display} on {disk} is in use: close the programs and Explorer windows that use it " +
            "(or take its drive letter away in Disk Management) and try again. Nothing was written."),
        ErrorAccessDenied => new XfsException(XfsError.NotPermitted,
            $"opening Windows volume {volume.Display} on {disk} to lock it needs administrator rights: run from an elevated prompt or use the XfsWin service. Nothing was written."),
        ErrorSharingViolation or ErrorLockViolation => new XfsException(XfsError.IoError,
            $"Windows volume {volume.Display} on {disk} is held by another program (Win32 error {win32Error}): close it and try again. Nothing was written."),
        ErrorNotReady => new XfsException(XfsError.IoError,
            $"Windows volume {volume.Display} on {disk} is not ready (Win32 error {win32Error}). Nothing was written."),
        _ => new XfsException(XfsError.IoError,
            $"could not {step} Windows volume {volume.Display} on {disk} (Win32 error {win32Error}); it shares bytes with what XfsWin would write. Nothing was written."),
    };
}

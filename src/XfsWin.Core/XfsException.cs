namespace XfsWin;

/// <summary>What went wrong, in the terms every host maps to its own error codes.</summary>
public enum XfsError
{
    None = 0,
    NotFound,
    NotADirectory,
    IsADirectory,
    NotASymlink,
    NameTooLong,
    InvalidArgument,
    /// <summary>Metadata failed verification; the volume is unhealthy (EUCLEAN / STATUS_FILE_CORRUPT_ERROR).</summary>
    Corrupt,
    /// <summary>The device failed a read or write (EIO).</summary>
    IoError,
    /// <summary>The volume or file is read-only (EROFS / STATUS_MEDIA_WRITE_PROTECTED).</summary>
    ReadOnly,
    /// <summary>The volume uses something this build cannot handle safely.</summary>
    Unsupported,
    /// <summary>The requested extended attribute does not exist (ENODATA).</summary>
    NoAttribute,
    /// <summary>Too many symbolic links while resolving a path (ELOOP).</summary>
    SymlinkLoop,
    /// <summary>The source is not an XFS volume at all.</summary>
    NotXfs,
    /// <summary>The volume needs xfs_repair before it can be opened.</summary>
    NeedsRepair,
    /// <summary>The name exists already (EEXIST).</summary>
    Exists,
    /// <summary>A directory to remove or replace still has entries (ENOTEMPTY).</summary>
    NotEmpty,
    /// <summary>No free blocks or inodes left for the change (ENOSPC); nothing was changed.</summary>
    NoSpace,
    /// <summary>The inode has the most links it can have (EMLINK).</summary>
    TooManyLinks,
    /// <summary>The operation is not allowed on this file (EPERM: immutable or append-only, a directory hard link).</summary>
    NotPermitted,
    /// <summary>The file is larger than the format or the operation allows (EFBIG).</summary>
    FileTooLarge,
    /// <summary>A rename would move a directory under itself (EINVAL is what rename(2) answers).</summary>
    WouldLoop,
    /// <summary>The change would cross a boundary the file system keeps (EXDEV: a link or rename out of a directory tree of another project).</summary>
    CrossDevice,
    /// <summary>
    /// The change would take a user's or group's dquot past an enforced limit (EDQUOT / STATUS_DISK_QUOTA_EXCEEDED);
    /// nothing was changed. An enforced project limit answers <see cref="NoSpace"/>, as the kernel does.
    /// </summary>
    QuotaExceeded,
    /// <summary>The file changed since the caller sampled it (EBUSY: a range commit whose file 2 is no longer fresh).</summary>
    Changed,
}

/// <summary>
/// An error from the engine. Hosts translate <see cref="Error"/>; <see cref="Errno"/> is the Linux value.
/// </summary>
public class XfsException : IOException
{
    public XfsException(XfsError error, string message, Exception? inner = null) : base(message, inner)
    {
        Error = error;
        HResult = unchecked((int)0x80070000) | Errno;
    }

    public XfsError Error { get; }

    /// <summary>The Linux errno for this error (for FUSE and exit codes).</summary>
    public int Errno => ToErrno(Error);

    public static int ToErrno(XfsError error) => error switch
    {
        XfsError.None => 0,
        XfsError.NotFound => 2,          // ENOENT
        XfsError.NotADirectory => 20,    // ENOTDIR
        XfsError.IsADirectory => 21,     // EISDIR
        XfsError.NotASymlink => 22,      // EINVAL (readlink on non-link)
        XfsError.NameTooLong => 36,      // ENAMETOOLONG
        XfsError.InvalidArgument => 22,  // EINVAL
        XfsError.Corrupt => 117,         // EUCLEAN (EFSCORRUPTED)
        XfsError.IoError => 5,           // EIO
        XfsError.ReadOnly => 30,         // EROFS
        XfsError.Unsupported => 95,      // EOPNOTSUPP
        XfsError.NoAttribute => 61,      // ENODATA
        XfsError.SymlinkLoop => 40,      // ELOOP
        XfsError.NotXfs => 22,           // EINVAL (mount(2) answers this for a wrong fs)
        XfsError.NeedsRepair => 117,     // EUCLEAN
        XfsError.Exists => 17,           // EEXIST
        XfsError.NotEmpty => 39,         // ENOTEMPTY
        XfsError.NoSpace => 28,          // ENOSPC
        XfsError.TooManyLinks => 31,     // EMLINK
        XfsError.NotPermitted => 1,      // EPERM
        XfsError.FileTooLarge => 27,     // EFBIG
        XfsError.WouldLoop => 22,        // EINVAL
        XfsError.CrossDevice => 18,      // EXDEV
        XfsError.QuotaExceeded => 122,   // EDQUOT
        XfsError.Changed => 16,          // EBUSY
        _ => 5,
    };
}

/// <summary>
/// Metadata that failed verification. Names the structure and where it lives so a user can
/// look at it with xfs_db; the volume that raised it is marked unhealthy.
/// </summary>
public sealed class XfsCorruptionException : XfsException
{
    public XfsCorruptionException(string structure, long byteOffset, string problem)
        : base(XfsError.Corrupt, $"corrupt {structure} at byte offset {byteOffset} (daddr {byteOffset / 512}): {problem}. " +
                                 "Run xfs_repair on this volume from Linux; XfsWin has stopped writing to it.")
    {
        Structure = structure;
        ByteOffset = byteOffset;
        Problem = problem;
    }

    public string Structure { get; }
    public long ByteOffset { get; }
    public string Problem { get; }
}

using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Driver;

/// <summary>
/// One open of a file or directory: what WinFsp's FileContext points to. Holds the inode, where it
/// was reached from (for symlink targets and hidden names) and, for directories, where the last
/// enumeration batch stopped so the next one resumes without rescanning.
/// </summary>
public sealed class OpenFile
{
    internal OpenFile(ulong inode, InodeAttributes attributes, byte[] name, ulong[] ancestors, string path)
    {
        Inode = inode;
        Attributes = attributes;
        Name = name;
        Ancestors = ancestors;
        Path = path;
    }

    /// <summary>The inode; a reparse point set or deleted on a read-write mount replaces it with a new one.</summary>
    public ulong Inode { get; internal set; }

    /// <summary>
    /// Attributes read at open. On a read-only mount they stay valid for the open; on a read-write one every
    /// change made through the adapter refreshes them.
    /// </summary>
    public InodeAttributes Attributes { get; internal set; }

    /// <summary>The XFS bytes of the last path component (empty for the root); a rename through this open updates it.</summary>
    public byte[] Name { get; internal set; }

    /// <summary>
    /// On case-insensitive mounts, the path with every component spelled as stored (WinFsp's
    /// FSP_FSCTL_OPEN_FILE_INFO.NormalizedName, so Windows reports the true case); null otherwise.
    /// </summary>
    public string? NormalizedPath { get; init; }

    /// <summary>Inodes of the directories from the root down to this file's parent.</summary>
    internal ulong[] Ancestors { get; set; }

    /// <summary>The Windows path it was opened by (or renamed to through this open).</summary>
    public string Path { get; internal set; }

    /// <summary>Guards <see cref="Attributes"/> and <see cref="Information"/> while a read-write mount refreshes them (WinFsp may run a read, a write and a query on one open at once).</summary>
    internal readonly Lock InfoGate = new();

    /// <summary>Whether this open holds its inode in the engine (read-write mounts: the inode outlives an unlink while open).</summary>
    internal bool Held;

    /// <summary>The name was removed through this open (delete-on-close or POSIX delete done); later cleanups leave the directory alone.</summary>
    internal bool Unlinked;

    /// <summary>WSL's $LXDEV (major, minor) set as an EA before the LX_CHR/LX_BLK reparse point turns the file into a device.</summary>
    internal (uint Major, uint Minor)? PendingDevice;

    /// <summary>FSP_FSCTL_FILE_INFO for this open, computed when it was opened.</summary>
    public Semantics.FileInformation Information { get; internal set; }

    public bool IsDirectory => Attributes.FileType == XfsFileType.Directory;

    /// <summary>Number of directories between the root and this file's parent directory.</summary>
    internal int ParentDepth => Ancestors.Length - 1;

    // Name-marker resume state: the last entry a batch returned and the cookie after it.
    internal readonly Lock MarkerGate = new();
    internal readonly byte[] LastName = new byte[WindowsNamesLimits.MaxNameBytes];
    // Filled while a batch is listed (under MarkerGate), then copied to LastName.
    internal readonly byte[] PendingName = new byte[WindowsNamesLimits.MaxNameBytes];
    internal int LastNameLength = -1;
    internal long LastNextCookie;
}

internal static class WindowsNamesLimits
{
    public const int MaxNameBytes = 255;
}

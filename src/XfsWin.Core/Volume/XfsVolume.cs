using XfsWin.Device;

namespace XfsWin.Volume;

/// <summary>
/// An opened XFS volume: the POSIX-style API every host (CLI, FUSE, WinFsp) uses.
/// Thread-safe: concurrent calls are normal. Inode numbers are the XFS inode numbers.
/// Every method throws <see cref="XfsException"/> (or <see cref="XfsCorruptionException"/>) on failure.
/// </summary>
public sealed partial class XfsVolume : IDisposable
{
    /// <summary>Opens a source: an image file or disk path, optionally with a partition suffix (<c>disk.img@2</c>).</summary>
    public static XfsVolume Open(string source, VolumeOpenOptions? options = null) => throw Pending();

    /// <summary>Opens a volume on a device the caller owns (it is disposed with the volume when <paramref name="ownsDevice"/>).</summary>
    public static XfsVolume Open(IBlockDevice device, VolumeOpenOptions? options = null, bool ownsDevice = true) => throw Pending();

    public VolumeInfo Info => throw Pending();

    public ulong RootInode => throw Pending();

    /// <summary>True when this open cannot write (always, until the write path lands).</summary>
    public bool IsReadOnly => true;

    /// <summary>Set once any corruption was found; the volume then stays read-only.</summary>
    public bool IsHealthy => throw Pending();

    public InodeAttributes GetAttributes(ulong inode) => throw Pending();

    /// <summary>Looks a name up in a directory by hash (not by scanning). False when absent.</summary>
    public bool TryLookup(ulong directoryInode, ReadOnlySpan<byte> name, out ulong inode) => throw Pending();

    /// <summary>Resolves a '/'-separated path from the root. Symlinks in the middle are followed (within the volume); the last one only when asked.</summary>
    public ulong ResolvePath(string path, bool followFinalSymlink = false) => throw Pending();

    /// <summary>
    /// Enumerates entries after <paramref name="cookie"/> (0 = from the start, including "." and "..").
    /// Cookies are stable XFS directory offsets: valid across calls while the directory is unchanged.
    /// </summary>
    public void ReadDirectory<TVisitor>(ulong directoryInode, long cookie, ref TVisitor visitor)
        where TVisitor : IDirectoryVisitor => throw Pending();

    /// <summary>All entries (convenience; allocates). Includes "." and "..".</summary>
    public IReadOnlyList<DirectoryEntry> ListDirectory(ulong directoryInode) => throw Pending();

    /// <summary>Reads file data at <paramref name="offset"/>; returns bytes read (0 at or past EOF). Holes and unwritten extents read as zeros.</summary>
    public int Read(ulong inode, long offset, Span<byte> destination) => throw Pending();

    public ValueTask<int> ReadAsync(ulong inode, long offset, Memory<byte> destination, CancellationToken cancellationToken = default) => throw Pending();

    /// <summary>The target of a symlink, as stored (bytes, not NUL-terminated).</summary>
    public byte[] ReadLink(ulong inode) => throw Pending();

    /// <summary>Extended attributes of an inode, parent pointers excluded unless asked.</summary>
    public IReadOnlyList<XattrEntry> ListXattrs(ulong inode, bool includeParentPointers = false) => throw Pending();

    /// <summary>Value of one extended attribute; false when absent.</summary>
    public bool TryGetXattr(ulong inode, XattrNamespace ns, ReadOnlySpan<byte> name, out byte[] value) => throw Pending();

    public FileSystemStats GetStats() => throw Pending();

    public void Dispose() { }

    private static XfsException Pending() => new(XfsError.Unsupported, "the read path is being built");
}

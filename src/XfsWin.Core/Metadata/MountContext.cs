using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Metadata;

/// <summary>
/// Everything the layers above share about one opened volume (the role of the kernel's xfs_mount):
/// geometry, device, verified-buffer cache and health. One per volume; never process-global.
/// </summary>
public sealed class MountContext
{
    public MountContext(IBlockDevice device, Superblock superblock, long cacheBytes)
    {
        Device = device;
        Superblock = superblock;
        Health = new VolumeHealth();
        Buffers = new BufferCache(device, Health, cacheBytes);
    }

    public IBlockDevice Device { get; }
    public Superblock Superblock { get; }
    public VolumeHealth Health { get; }
    public BufferCache Buffers { get; }

    private long _mappingChanges;

    /// <summary>
    /// Counts changes of any inode fork's mapping written on this volume (an extent list or bmbt saved, a fork laid out
    /// again): a mapping kept in memory from one transaction to the next is still the fork's while the count has not
    /// moved since it was saved or loaded.
    /// </summary>
    public long MappingChanges => Interlocked.Read(ref _mappingChanges);

    /// <summary>A fork's mapping is about to change on disk (see <see cref="MappingChanges"/>); returns the new count.</summary>
    public long NoteMappingChange() => Interlocked.Increment(ref _mappingChanges);

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
        Health.Report(structure, byteOffset, problem);
}

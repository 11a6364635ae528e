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

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
        Health.Report(structure, byteOffset, problem);
}

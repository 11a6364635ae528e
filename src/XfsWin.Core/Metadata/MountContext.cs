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
    // Per-inode change numbers, folded into a fixed table: slot SlotOf(ino) holds the highest change number given to
    // any inode that hashes to it. An inode's mapping is unchanged since change number n while its slot is still n or
    // less; an unrelated inode sharing the slot can only make that answer "changed" (a reload), never "unchanged".
    private readonly long[] _mappingChangeSlots = new long[MappingChangeSlotCount];
    private const int MappingChangeSlotBits = 12;
    private const int MappingChangeSlotCount = 1 << MappingChangeSlotBits;

    private static int SlotOf(ulong ino) => (int)((ino * 0x9E3779B97F4A7C15UL) >> (64 - MappingChangeSlotBits));

    /// <summary>
    /// The number of the last change of <paramref name="ino"/>'s mapping (either fork: an extent list or bmbt saved, a
    /// fork laid out again) written on this volume, or a later number: a mapping kept in memory from one transaction to
    /// the next is still the fork's while this has not moved since it was saved or loaded. Changes of other inodes move it
    /// only when they share its slot.
    /// </summary>
    public long LastMappingChange(ulong ino) => Volatile.Read(ref _mappingChangeSlots[SlotOf(ino)]);

    /// <summary>
    /// <paramref name="ino"/>'s mapping is about to change on disk (see <see cref="LastMappingChange"/>); returns the
    /// change's number, which <see cref="LastMappingChange"/> answers for it from now on until its next change.
    /// </summary>
    public long NoteMappingChange(ulong ino)
    {
        long number = Interlocked.Increment(ref _mappingChanges);
        ref long slot = ref _mappingChangeSlots[SlotOf(ino)];
        long seen = Volatile.Read(ref slot);
        while (seen < number)
        {
            long previous = Interlocked.CompareExchange(ref slot, number, seen);
            if (previous == seen) break;
            seen = previous;
        }
        return number;
    }

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
        Health.Report(structure, byteOffset, problem);
}

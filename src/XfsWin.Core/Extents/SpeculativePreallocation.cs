using XfsWin.Format;

namespace XfsWin.Extents;

/// <summary>
/// Speculative preallocation past EOF for a file growing by writes at its end, sized as the kernel's
/// xfs_iomap_prealloc_size sizes it: twice the run of contiguous extents the write continues (so a streaming file's
/// allocations double in size and stay few and large even when other files are written at the same time), at least
/// the minimum allocation size (64 KiB), at most the largest extent. The kernel reserves it as delayed allocation; here
/// it is allocated at once, unwritten, and the writes that reach it convert it, as the kernel's conversion of delayed
/// allocation past EOF does. What is left past EOF goes back at the first writable close, the last hold or unmount
/// (xfs_free_eofblocks).
/// <para>
/// None for files smaller than the minimum allocation (most small files are written once), and none when less than 5%
/// of the volume is free (the kernel throttles it down from there; stopping is the simple, safe end of that); never
/// more than an eighth of the free space.
/// </para>
/// </summary>
public static class SpeculativePreallocation
{
    /// <summary>The kernel's default allocsize: 64 KiB (XFS_WRITEIO_LOG_LARGE).</summary>
    public const int MinimumBytes = 64 << 10;

    /// <summary>
    /// The blocks to preallocate after a write at EOF of a file of <paramref name="fileSize"/> bytes (before the write)
    /// that starts at file block <paramref name="writeStart"/>, continuing a run of <paramref name="previousRun"/>
    /// file- and disk-contiguous mapped blocks that ends exactly there (0 when the write does not continue one).
    /// </summary>
    public static ulong Blocks(ulong fileSize, ulong writeStart, ulong previousRun, int blockLog, ulong freeBlocks, ulong dataBlocks)
    {
        ulong minimum = Math.Max(1UL, (ulong)MinimumBytes >> blockLog);
        if (fileSize < MinimumBytes) return 0;
        if (freeBlocks < dataBlocks / 20) return 0;
        ulong blocks;
        if (previousRun == 0)
        {
            blocks = minimum;
        }
        else
        {
            blocks = previousRun * 2;
            // A run longer than half the largest extent: the file's size (in blocks) is the basis, so large files keep
            // preallocating whole extents.
            if (blocks > BmbtRecord.MaxBlockCount) blocks = writeStart;
            blocks = Math.Min(blocks, System.Numerics.BitOperations.RoundUpToPowerOf2(BmbtRecord.MaxBlockCount));
            blocks = blocks == 0 ? 0 : 1UL << System.Numerics.BitOperations.Log2(blocks);
            blocks = Math.Min(blocks, BmbtRecord.MaxBlockCount);
            blocks = Math.Max(blocks, minimum);
        }
        return Math.Min(blocks, freeBlocks / 8);
    }
}

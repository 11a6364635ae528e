using XfsWin.Format;
using XfsWin.Inodes;

namespace XfsWin.Extents;

/// <summary>
/// Extent size hints as the kernel's allocator applies them to file data (xfs_get_extsz_hint, xfs_bmap_extsize_align):
/// a new allocation for a hole is rounded out to the hint's boundaries, as far as the neighbouring extents allow, so a
/// file with a hint grows in pieces of the hint's size. The caller maps the rounded-out allocation unwritten and marks
/// written only the blocks it writes, as the kernel's direct-allocation path (XFS_BMAPI_PREALLOC, then conversion of the
/// written range) does.
/// </summary>
public static class ExtentSizeHint
{
    private const ushort DiExtSize = 0x800;

    /// <summary>xfs_get_extsz_hint for a regular file's data: di_extsize when XFS_DIFLAG_EXTSIZE is set, else 0 (no hint).</summary>
    public static uint Of(Inode inode) =>
        (inode.Attributes.Flags & DiExtSize) != 0 && inode.IsRegular ? new DinodeView(inode.Raw).ExtSize : 0;

    /// <summary>XFS_DEFAULT_COWEXTSZ_HINT: the copy-on-write extent size hint of a file that sets neither hint, in blocks.</summary>
    public const uint DefaultCopyOnWrite = 32;

    /// <summary>
    /// xfs_get_cowextsz_hint: how far a copy-on-write allocation is rounded out, in blocks: the larger of di_cowextsize
    /// (when XFS_DIFLAG2_COWEXTSIZE is set) and the extent size hint, <see cref="DefaultCopyOnWrite"/> when neither is set.
    /// </summary>
    public static uint CopyOnWrite(Inode inode)
    {
        uint cow = (inode.Flags2 & DinodeView.Flag2CowExtSize) != 0 && inode.Version >= 3
            ? System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(inode.Raw.AsSpan(DinodeView.OffCowextsize)) : 0;
        uint hint = Math.Max(cow, Of(inode));
        return hint == 0 ? DefaultCopyOnWrite : hint;
    }

    /// <summary>
    /// xfs_bmap_extsize_align: the allocation for the hole request [<paramref name="offset"/>, +<paramref name="length"/>)
    /// rounded out to multiples of <paramref name="extsize"/> blocks, then moved or cut so it stays between the end of the
    /// previous extent (<paramref name="previousEnd"/>, 0 when none) and the start of the next one
    /// (<paramref name="nextStart"/>, <see cref="ulong.MaxValue"/> when the request is past the last extent). The result
    /// always covers the request and never overlaps a mapped block.
    /// </summary>
    public static (ulong Offset, ulong Length) Align(ulong offset, ulong length, uint extsize, ulong previousEnd, ulong nextStart)
    {
        if (extsize == 0) return (offset, length);
        ulong end = offset + length;
        ulong alignOffset = offset - offset % extsize;
        ulong alignLength = length + offset % extsize;
        if (alignLength % extsize != 0) alignLength += extsize - alignLength % extsize;
        // One extent record holds at most MaxBlockCount blocks: give back whole hints until it fits (the allocation
        // loop maps the rest in later pieces).
        while (alignLength > BmbtRecord.MaxBlockCount) alignLength -= extsize;
        bool eof = nextStart == ulong.MaxValue;
        // The previous extent overlaps: the start moves up, the length stays.
        if (alignOffset != offset && alignOffset < previousEnd) alignOffset = previousEnd;
        // The next extent overlaps: the start moves down (not below 0), the length stays.
        if (!eof && alignOffset + alignLength != end && alignOffset + alignLength > nextStart)
            alignOffset = nextStart > alignLength ? nextStart - alignLength : 0;
        // No room for a whole hint between the neighbours: from the first free block to the next extent.
        if (alignOffset != offset && alignOffset < previousEnd) alignOffset = previousEnd;
        if (!eof && alignOffset + alignLength != end && alignOffset + alignLength > nextStart) alignLength = nextStart - alignOffset;
        return (alignOffset, alignLength);
    }
}

namespace XfsWin.Format;

/// <summary>
/// xfs_rmap_rec: one reverse mapping, 24 bytes big-endian: start block (u32), block count (u32), owner (u64:
/// an inode number, or one of the XFS_RMAP_OWN_* values below), and offset (u64: the file offset in the low 54
/// bits, flags in the top three). Keys (xfs_rmap_key) are start block, owner and offset, 20 bytes; nodes of this
/// overlapping tree hold a low and a high key per child.
/// </summary>
public static class RmapRecord
{
    public const int Size = 24, KeySize = 20;

    /// <summary>rm_offset flags: attribute fork, extent-btree block, unwritten extent.</summary>
    public const ulong AttrForkFlag = 1UL << 63, BmbtBlockFlag = 1UL << 62, UnwrittenFlag = 1UL << 61;
    public const ulong OffsetMask = (1UL << 54) - 1;

    /// <summary>
    /// XFS_RMAP_OWN_NULL (a change whose reverse mapping is updated elsewhere, by an rmap intent) and XFS_RMAP_OWN_UNKNOWN
    /// (log recovery freeing an extent whose owner it does not know): never stored in a record.
    /// </summary>
    public const ulong OwnNull = unchecked((ulong)-1L), OwnUnknown = unchecked((ulong)-2L);

    /// <summary>XFS_RMAP_OWN_*: static AG metadata, the log, AG btree blocks and the AGFL, inode btrees, inode chunks, refcount btree, CoW staging.</summary>
    public const ulong OwnFs = unchecked((ulong)-3L), OwnLog = unchecked((ulong)-4L), OwnAg = unchecked((ulong)-5L),
        OwnInobt = unchecked((ulong)-6L), OwnInodes = unchecked((ulong)-7L), OwnRefcount = unchecked((ulong)-8L), OwnCow = unchecked((ulong)-9L);

    /// <summary>True for the XFS_RMAP_OWN_* owners (small negative numbers), which map no file offset.</summary>
    public static bool IsNonInodeOwner(ulong owner) => owner >= 0xFFFF_FFFF_FFFF_FFF0UL;
}

/// <summary>Encodes xfs_rmap_rec (layout in <see cref="RmapRecord"/>).</summary>
public static class RmapRecordWriter
{
    public static void Write(Span<byte> rec, uint startBlock, uint blockCount, ulong owner, ulong offset = 0)
    {
        System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(rec, startBlock);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(rec[4..], blockCount);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(rec[8..], owner);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(rec[16..], offset);
    }
}

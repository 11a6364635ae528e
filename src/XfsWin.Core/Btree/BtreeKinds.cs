using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Btree;

/// <summary>
/// What differs between B+tree kinds. Implemented by empty structs so <see cref="BtreeCursor{TOps}"/> is
/// specialised per kind by the JIT (no boxing, no virtual calls on the hot path).
/// <para>
/// Keys are the on-disk big-endian key bytes (<see cref="KeySize"/> of them). A node entry of an overlapping
/// tree (rmapbt) holds the child's low key followed by its high key (the largest high key of any record below);
/// every other tree's node entry holds the low key alone.
/// </para>
/// </summary>
public interface IBtreeOps
{
    string Name { get; }
    /// <summary>Long (64-bit file system block, bmbt) or short (32-bit AG block) pointers.</summary>
    bool LongPointers { get; }
    /// <summary>True when records cover ranges of keys that may overlap (rmapbt): nodes then carry high keys too.</summary>
    bool Overlapping { get; }
    int RecordSize { get; }
    int KeySize { get; }
    uint Magic(bool v5);
    int MaxLevels { get; }
    /// <summary>The key the record sorts by.</summary>
    void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key);
    /// <summary>The largest key the record covers (the low key for trees that do not overlap).</summary>
    void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key);
    /// <summary>Orders two keys as the kernel's key comparison for this tree does.</summary>
    int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b);
}

/// <summary>The file extent map B+tree (bmbt): long pointers, keyed by file block offset (xfs_bmbt_key: u64).</summary>
public readonly struct BmbtOps : IBtreeOps
{
    public string Name => "extent btree (bmbt)";
    public bool LongPointers => true;
    public bool Overlapping => false;
    public int RecordSize => BmbtRecord.Size;
    public int KeySize => 8;
    public uint Magic(bool v5) => v5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4;
    public int MaxLevels => 10;
    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key) =>
        BinaryPrimitives.WriteUInt64BigEndian(key, (BinaryPrimitives.ReadUInt64BigEndian(record) & 0x7FFF_FFFF_FFFF_FFFFUL) >> 9);
    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key) => RecordLowKey(record, key);
    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b) =>
        BinaryPrimitives.ReadUInt64BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt64BigEndian(b));
}

/// <summary>The inode allocation B+tree (inobt): short pointers, keyed by the chunk's first AG inode.</summary>
public readonly struct InobtOps : IBtreeOps
{
    public string Name => "inode btree (inobt)";
    public bool LongPointers => false;
    public bool Overlapping => false;
    public int RecordSize => InobtRecord.Size;
    public int KeySize => InobtRecord.KeySize;
    public uint Magic(bool v5) => v5 ? BtreeMagic.InoV5 : BtreeMagic.InoV4;
    public int MaxLevels => 9;
    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..4].CopyTo(key);
    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..4].CopyTo(key);
    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b) =>
        BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
}

/// <summary>The free inode B+tree (finobt): the inobt's records, only chunks with free inodes.</summary>
public readonly struct FinobtOps : IBtreeOps
{
    public string Name => "free inode btree (finobt)";
    public bool LongPointers => false;
    public bool Overlapping => false;
    public int RecordSize => InobtRecord.Size;
    public int KeySize => InobtRecord.KeySize;
    public uint Magic(bool v5) => v5 ? BtreeMagic.FinoV5 : BtreeMagic.FinoV4;
    public int MaxLevels => 9;
    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..4].CopyTo(key);
    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..4].CopyTo(key);
    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b) =>
        BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
}

/// <summary>The free space by block number B+tree (bnobt): records and keys (startblock u32, blockcount u32), ordered by start.</summary>
public readonly struct BnobtOps : IBtreeOps
{
    public string Name => "free space btree (bnobt)";
    public bool LongPointers => false;
    public bool Overlapping => false;
    public int RecordSize => 8;
    public int KeySize => 8;
    public uint Magic(bool v5) => v5 ? BtreeMagic.BnoV5 : BtreeMagic.BnoV4;
    public int MaxLevels => 9;
    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..8].CopyTo(key);
    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..8].CopyTo(key);
    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b) =>
        BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
}

/// <summary>The free space by size B+tree (cntbt): the bnobt's records, ordered by block count, then start block.</summary>
public readonly struct CntbtOps : IBtreeOps
{
    public string Name => "free space btree (cntbt)";
    public bool LongPointers => false;
    public bool Overlapping => false;
    public int RecordSize => 8;
    public int KeySize => 8;
    public uint Magic(bool v5) => v5 ? BtreeMagic.CntV5 : BtreeMagic.CntV4;
    public int MaxLevels => 9;
    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..8].CopyTo(key);
    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..8].CopyTo(key);
    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b)
    {
        int byCount = BinaryPrimitives.ReadUInt32BigEndian(a[4..]).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b[4..]));
        return byCount != 0 ? byCount : BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
    }
}

/// <summary>
/// The reference count B+tree (refcountbt): records (startblock u32, blockcount u32, refcount u32), keyed by
/// start block; copy-on-write staging records carry <see cref="RefcountRecord.CowFlag"/> in the start block and so
/// sort after every shared-extent record.
/// </summary>
public readonly struct RefcountbtOps : IBtreeOps
{
    public string Name => "reference count btree (refcountbt)";
    public bool LongPointers => false;
    public bool Overlapping => false;
    public int RecordSize => RefcountRecord.Size;
    public int KeySize => RefcountRecord.KeySize;
    public uint Magic(bool v5) => BtreeMagic.RefcountV5;
    public int MaxLevels => 9;
    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..4].CopyTo(key);
    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key) => record[..4].CopyTo(key);
    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b) =>
        BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
}

/// <summary>
/// The reverse mapping B+tree (rmapbt), an overlapping interval tree: records (startblock u32, blockcount u32,
/// owner u64, offset-and-flags u64); keys (startblock, owner, offset) of 20 bytes, ordered by start block, owner,
/// then file offset without flags. A record's high key is its last block and, for file data, its last file offset.
/// </summary>
public readonly struct RmapbtOps : IBtreeOps
{
    public string Name => "reverse mapping btree (rmapbt)";
    public bool LongPointers => false;
    public bool Overlapping => true;
    public int RecordSize => RmapRecord.Size;
    public int KeySize => RmapRecord.KeySize;
    public uint Magic(bool v5) => BtreeMagic.RmapV5;
    public int MaxLevels => 9;

    public void RecordLowKey(ReadOnlySpan<byte> record, Span<byte> key)
    {
        record[..4].CopyTo(key);
        record.Slice(8, 8).CopyTo(key[4..]);
        // The unwritten state is not part of the key (the kernel clears it when it makes keys from records).
        BinaryPrimitives.WriteUInt64BigEndian(key[12..], BinaryPrimitives.ReadUInt64BigEndian(record[16..]) & ~RmapRecord.UnwrittenFlag);
    }

    public void RecordHighKey(ReadOnlySpan<byte> record, Span<byte> key)
    {
        RecordLowKey(record, key);
        uint adjust = BinaryPrimitives.ReadUInt32BigEndian(record[4..]) - 1;
        BinaryPrimitives.WriteUInt32BigEndian(key, BinaryPrimitives.ReadUInt32BigEndian(record) + adjust);
        ulong owner = BinaryPrimitives.ReadUInt64BigEndian(record[8..]);
        ulong offset = BinaryPrimitives.ReadUInt64BigEndian(key[12..]);
        if (!RmapRecord.IsNonInodeOwner(owner) && (offset & RmapRecord.BmbtBlockFlag) == 0)
            BinaryPrimitives.WriteUInt64BigEndian(key[12..], ((offset & RmapRecord.OffsetMask) + adjust) | (offset & ~RmapRecord.OffsetMask));
    }

    public int CompareKeys(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b)
    {
        int c = BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
        if (c != 0) return c;
        c = BinaryPrimitives.ReadUInt64BigEndian(a[4..]).CompareTo(BinaryPrimitives.ReadUInt64BigEndian(b[4..]));
        if (c != 0) return c;
        return (BinaryPrimitives.ReadUInt64BigEndian(a[12..]) & RmapRecord.OffsetMask)
            .CompareTo(BinaryPrimitives.ReadUInt64BigEndian(b[12..]) & RmapRecord.OffsetMask);
    }
}

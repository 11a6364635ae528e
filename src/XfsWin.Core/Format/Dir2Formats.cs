using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>Directory address-space constants (xfs_da_format.h).</summary>
public static class Dir2Space
{
    /// <summary>Byte offset in the directory's address space where leaf blocks start (32 GiB).</summary>
    public const long LeafOffset = 1L << 35;
    /// <summary>Byte offset where free-index blocks start (64 GiB).</summary>
    public const long FreeOffset = 2L << 35;
    public const int DataAlign = 8;
    public const ushort FreeTag = 0xFFFF;
}

/// <summary>
/// xfs_dir2_sf_hdr + entries: a short-form directory inside the inode's data fork.
/// Header: count (u8), i8count (u8), parent (4 or 8 bytes). Entry: namelen (u8), offset (u16),
/// name, [ftype u8], inumber (4 or 8 bytes).
/// </summary>
public readonly ref struct ShortformDirectoryView
{
    private readonly ReadOnlySpan<byte> _b;
    private readonly bool _ftype;

    public ShortformDirectoryView(ReadOnlySpan<byte> fork, bool hasFtype)
    {
        _b = fork;
        _ftype = hasFtype;
    }

    public int Count => _b[0];
    public int I8Count => _b[1];
    public int InodeSize => I8Count != 0 ? 8 : 4;
    public int HeaderSize => 2 + InodeSize;
    public ulong Parent => ReadIno(2);

    public ulong ReadIno(int offset) => InodeSize == 8
        ? BinaryPrimitives.ReadUInt64BigEndian(_b[offset..]) & 0x00FF_FFFF_FFFF_FFFFUL
        : BinaryPrimitives.ReadUInt32BigEndian(_b[offset..]);

    public int EntrySize(int nameLength) => 3 + nameLength + (_ftype ? 1 : 0) + InodeSize;

    /// <summary>
    /// The kernel's xfs_dir2_sf_verify: every entry inside <paramref name="size"/> bytes, and each entry's offset (where
    /// it would lie in a data block) at or past the end of the one before, the first past the data block header and
    /// the "." and ".." entries (<paramref name="crc"/>: the V5 header).
    /// </summary>
    public VerifyResult Verify(int size, bool crc)
    {
        if (size < 6 || _b.Length < size) return VerifyResult.Fail("short-form directory shorter than its header");
        if (I8Count > Count) return VerifyResult.Fail("more 8-byte inode entries than entries", 1);
        int off = HeaderSize;
        int nextOffset = (crc ? 64 : 16) + DirectoryDataBlock.EntrySize(1, _ftype) + DirectoryDataBlock.EntrySize(2, _ftype);
        for (int i = 0; i < Count; i++)
        {
            if (off + 3 > size) return VerifyResult.Fail($"entry {i} runs past the fork", off);
            int len = _b[off];
            if (len == 0) return VerifyResult.Fail($"entry {i} has an empty name", off);
            int entryOffset = BinaryPrimitives.ReadUInt16BigEndian(_b[(off + 1)..]);
            if (entryOffset < nextOffset) return VerifyResult.Fail($"entry {i} offsets out of order (offset {entryOffset}, at least {nextOffset})", off + 1);
            nextOffset = entryOffset + DirectoryDataBlock.EntrySize(len, _ftype);
            if (off + EntrySize(len) > size) return VerifyResult.Fail($"entry {i} runs past the fork", off);
            if (_ftype && _b[off + 3 + len] > 8) return VerifyResult.Fail($"entry {i} has file type {_b[off + 3 + len]}", off + 3 + len);
            off += EntrySize(len);
        }
        return VerifyResult.Ok;
    }
}

/// <summary>
/// Directory data and single-block blocks: xfs_dir2_data_hdr (V4 "XD2D"/"XD2B", 16 bytes) and
/// xfs_dir3_data_hdr (V5 "XDD3"/"XDB3", 64 bytes). Entries: inumber (u64), namelen (u8), name,
/// [ftype], padding to 8, tag (u16, the entry's own offset). Unused space: 0xFFFF, length, ..., tag.
/// A single-block directory ends with a leaf array and xfs_dir2_block_tail (count, stale).
/// </summary>
public static class DirectoryDataBlock
{
    public const uint BlockMagicV4 = 0x58443242, DataMagicV4 = 0x58443244; // XD2B, XD2D
    public const uint BlockMagicV5 = 0x58444233, DataMagicV5 = 0x58444433; // XDB3, XDD3
    public const int HeaderSizeV4 = 16, HeaderSizeV5 = 64;
    public const int OffMagic = 0, OffCrc = 4, OffBlkno = 8, OffLsn = 16, OffUuid = 24, OffOwner = 40;
    public const int BlockTailSize = 8;

    public static int HeaderSize(bool v5) => v5 ? HeaderSizeV5 : HeaderSizeV4;

    /// <summary>Size of a data entry holding a name of <paramref name="nameLength"/> bytes.</summary>
    public static int EntrySize(int nameLength, bool hasFtype) => (8 + 1 + nameLength + (hasFtype ? 1 : 0) + 2 + 7) & ~7;

    public static VerifyResult VerifyHeader(ReadOnlySpan<byte> block, bool singleBlock, Superblock sb, long byteOffset, ulong ownerIno)
    {
        uint magic = BinaryPrimitives.ReadUInt32BigEndian(block);
        uint expected = sb.IsV5 ? (singleBlock ? BlockMagicV5 : DataMagicV5) : (singleBlock ? BlockMagicV4 : DataMagicV4);
        if (magic != expected) return VerifyResult.Fail($"bad magic 0x{magic:x8}, expected 0x{expected:x8}", OffMagic);
        if (sb.IsV5)
        {
            if (!XfsCrc.Verify(block, OffCrc)) return VerifyResult.Fail("CRC mismatch", OffCrc);
            if (BinaryPrimitives.ReadUInt64BigEndian(block[OffBlkno..]) != (ulong)(byteOffset >> 9))
                return VerifyResult.Fail("block records a different disk address", OffBlkno);
            if (SuperblockView.ReadUuid(block.Slice(OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("block UUID does not match the volume", OffUuid);
            ulong owner = BinaryPrimitives.ReadUInt64BigEndian(block[OffOwner..]);
            if (owner != ownerIno) return VerifyResult.Fail($"block owned by inode {owner}, expected {ownerIno}", OffOwner);
        }
        return singleBlock ? VerifyShape(block, singleBlock, sb.IsV5) : VerifyResult.Ok;
    }

    /// <summary>
    /// What <see cref="VerifyHeader"/> checks besides the CRC and the self-description: the magic of the kind asked for
    /// (single-block or data block) and, for a single block, a leaf count that fits.
    /// </summary>
    public static VerifyResult VerifyShape(ReadOnlySpan<byte> block, bool singleBlock, bool v5)
    {
        uint magic = BinaryPrimitives.ReadUInt32BigEndian(block);
        uint expected = v5 ? (singleBlock ? BlockMagicV5 : DataMagicV5) : (singleBlock ? BlockMagicV4 : DataMagicV4);
        if (magic != expected) return VerifyResult.Fail($"bad magic 0x{magic:x8}, expected 0x{expected:x8}", OffMagic);
        if (singleBlock)
        {
            uint count = BinaryPrimitives.ReadUInt32BigEndian(block[^BlockTailSize..]);
            if ((long)count * 8 + BlockTailSize + HeaderSize(v5) > block.Length)
                return VerifyResult.Fail($"block tail claims {count} leaf entries", block.Length - BlockTailSize);
        }
        return VerifyResult.Ok;
    }

    /// <summary>End of the entry area: the block tail's leaf array for single-block directories.</summary>
    public static int EntriesEnd(ReadOnlySpan<byte> block, bool singleBlock)
    {
        if (!singleBlock) return block.Length;
        uint count = BinaryPrimitives.ReadUInt32BigEndian(block[^BlockTailSize..]);
        return block.Length - BlockTailSize - (int)count * 8;
    }
}

/// <summary>
/// Directory leaf blocks: xfs_dir2_leaf_hdr (V4, 16 bytes) / xfs_dir3_leaf_hdr (V5, 64 bytes),
/// then (hashval, address) entries sorted by hash; address is the entry's byte offset in the data
/// space divided by 8 (0 = stale). LEAF1 blocks end with bests[] and a u32 bestcount.
/// </summary>
public readonly ref struct DirectoryLeafView
{
    public const int EntrySize = 8;
    private readonly ReadOnlySpan<byte> _b;
    private readonly bool _v5;

    public DirectoryLeafView(ReadOnlySpan<byte> block, bool v5)
    {
        _b = block;
        _v5 = v5;
    }

    public int HeaderSize => _v5 ? 64 : 16;
    public ushort Count => BinaryPrimitives.ReadUInt16BigEndian(_b[(_v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4)..]);
    public ushort Stale => BinaryPrimitives.ReadUInt16BigEndian(_b[(_v5 ? DaBlockInfoView.SizeV5 + 2 : DaBlockInfoView.SizeV4 + 2)..]);
    public uint HashVal(int i) => BinaryPrimitives.ReadUInt32BigEndian(_b[(HeaderSize + i * EntrySize)..]);
    public uint Address(int i) => BinaryPrimitives.ReadUInt32BigEndian(_b[(HeaderSize + i * EntrySize + 4)..]);

    /// <summary>Room for entries: LEAF1 blocks keep bests[] and bestcount at the end.</summary>
    public int MaxEntries(bool leaf1)
    {
        int end = _b.Length;
        if (leaf1)
        {
            uint bestCount = BinaryPrimitives.ReadUInt32BigEndian(_b[^4..]);
            end -= 4 + (int)Math.Min(bestCount * 2, (uint)_b.Length);
        }
        return Math.Max(0, (end - HeaderSize) / EntrySize);
    }
}

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

    /// <summary>
    /// The consistency of a data or single-block block's contents (the kernel's __xfs_dir3_data_check, which its read and
    /// write verifiers run): the bestfree table sorted, its empty slots zero, and each of its entries exactly one unused
    /// region of the block, no unused region larger than the smallest entry left out of it; unused regions tagged with
    /// their offset, never two in a row, inside the entry area; entries with a name, a valid inode number, their tag and
    /// a known file type, inside the entry area. A single block also needs a leaf count that fits, leaf hashes in order,
    /// each entry found in its leaf under its name's hash, as many live leaf entries as entries and as many stale ones as
    /// the tail says. The directory editor relies on all of it when it places a new entry.
    /// </summary>
    public static VerifyResult VerifyContents(ReadOnlySpan<byte> block, bool singleBlock, Superblock sb)
    {
        bool v5 = sb.IsV5, ftype = sb.HasFtype;
        int start = HeaderSize(v5);
        int bestFree = v5 ? 48 : 4;
        int end = block.Length;
        int leafCount = 0, leafStart = 0;
        if (singleBlock)
        {
            uint count = BinaryPrimitives.ReadUInt32BigEndian(block[^BlockTailSize..]);
            if (count >= (uint)((block.Length - BlockTailSize - start) / 8))
                return VerifyResult.Fail($"block tail claims {count} leaf entries", block.Length - BlockTailSize);
            leafCount = (int)count;
            leafStart = block.Length - BlockTailSize - leafCount * 8;
            end = leafStart;
        }
        Span<ushort> bfOffset = stackalloc ushort[3], bfLength = stackalloc ushort[3];
        int seen = 0;
        for (int i = 0; i < 3; i++)
        {
            bfOffset[i] = BinaryPrimitives.ReadUInt16BigEndian(block[(bestFree + i * 4)..]);
            bfLength[i] = BinaryPrimitives.ReadUInt16BigEndian(block[(bestFree + i * 4 + 2)..]);
            if (bfLength[i] == 0)
            {
                if (bfOffset[i] != 0) return VerifyResult.Fail($"bestfree entry {i} has an offset but no length", bestFree + i * 4);
                seen |= 1 << i;
            }
            else if (i > 0 && bfLength[i - 1] == 0)
            {
                return VerifyResult.Fail($"bestfree entry {i} follows an empty one", bestFree + i * 4);
            }
            if (i > 0 && bfLength[i] > bfLength[i - 1]) return VerifyResult.Fail("bestfree entries out of order", bestFree + i * 4 + 2);
        }
        int entries = 0;
        bool lastFree = false;
        int offset = start;
        while (offset < end)
        {
            if (offset + 4 > end) return VerifyResult.Fail($"entry at {offset} runs past the entry area", offset);
            if (BinaryPrimitives.ReadUInt16BigEndian(block[offset..]) == 0xFFFF)
            {
                int length = BinaryPrimitives.ReadUInt16BigEndian(block[(offset + 2)..]);
                if (lastFree) return VerifyResult.Fail($"two unused regions in a row at {offset}", offset);
                if (length < 4 || offset + length > end) return VerifyResult.Fail($"unused region at {offset} of {length} bytes", offset + 2);
                if (BinaryPrimitives.ReadUInt16BigEndian(block[(offset + length - 2)..]) != offset)
                    return VerifyResult.Fail($"unused region at {offset} has the wrong tag", offset + length - 2);
                int match = -1;
                for (int i = 0; i < 3; i++)
                {
                    if (bfLength[i] == 0) continue;
                    if (bfOffset[i] == offset)
                    {
                        if (bfLength[i] != length) return VerifyResult.Fail($"bestfree entry {i} says {bfLength[i]} bytes free at {offset}, the block {length}", bestFree + i * 4 + 2);
                        match = i;
                    }
                    else if (bfOffset[i] < offset ? bfOffset[i] + bfLength[i] > offset : offset + length > bfOffset[i])
                    {
                        return VerifyResult.Fail($"bestfree entry {i} overlaps the unused region at {offset}", bestFree + i * 4);
                    }
                }
                if (match >= 0)
                {
                    if ((seen & (1 << match)) != 0) return VerifyResult.Fail($"bestfree entry {match} found twice", bestFree + match * 4);
                    seen |= 1 << match;
                }
                else if (length > bfLength[2])
                {
                    return VerifyResult.Fail($"unused region at {offset} of {length} bytes is missing from the bestfree table", bestFree);
                }
                offset += length;
                lastFree = true;
                continue;
            }
            ulong ino = BinaryPrimitives.ReadUInt64BigEndian(block[offset..]);
            int nameLength = block[offset + 8];
            int size = EntrySize(nameLength, ftype);
            if (nameLength == 0) return VerifyResult.Fail($"entry at {offset} has no name", offset + 8);
            if (offset + size > end) return VerifyResult.Fail($"entry at {offset} runs past the entry area", offset);
            if (!sb.IsValidInode(ino)) return VerifyResult.Fail($"entry at {offset} names inode {ino}, outside the volume", offset);
            if (BinaryPrimitives.ReadUInt16BigEndian(block[(offset + size - 2)..]) != offset)
                return VerifyResult.Fail($"entry at {offset} has the wrong tag", offset + size - 2);
            if (ftype && block[offset + 9 + nameLength] >= 9) return VerifyResult.Fail($"entry at {offset} has file type {block[offset + 9 + nameLength]}", offset + 9 + nameLength);
            if (singleBlock)
            {
                var name = block.Slice(offset + 9, nameLength);
                uint hash = sb.HasAsciiCi ? DaHash.HashAsciiCi(name) : DaHash.Hash(name);
                if (!LeafHolds(block, leafStart, leafCount, hash, (uint)(offset >> 3)))
                    return VerifyResult.Fail($"entry at {offset} is missing from the block's leaf", offset);
            }
            entries++;
            offset += size;
            lastFree = false;
        }
        if (seen != 7) return VerifyResult.Fail("a bestfree entry names no unused region", bestFree);
        if (singleBlock)
        {
            int stale = 0;
            for (int i = 0; i < leafCount; i++)
            {
                if (BinaryPrimitives.ReadUInt32BigEndian(block[(leafStart + i * 8 + 4)..]) == 0) stale++;
                if (i > 0 && BinaryPrimitives.ReadUInt32BigEndian(block[(leafStart + i * 8)..]) < BinaryPrimitives.ReadUInt32BigEndian(block[(leafStart + i * 8 - 8)..]))
                    return VerifyResult.Fail($"leaf entry {i} is out of hash order", leafStart + i * 8);
            }
            uint tailStale = BinaryPrimitives.ReadUInt32BigEndian(block[(block.Length - 4)..]);
            if (stale != tailStale) return VerifyResult.Fail($"the block tail counts {tailStale} stale leaf entries, the leaf {stale}", block.Length - 4);
            if (entries != leafCount - stale) return VerifyResult.Fail($"{entries} entries but {leafCount - stale} live leaf entries", block.Length - BlockTailSize);
        }
        return VerifyResult.Ok;
    }

    /// <summary>Whether the hash-ordered leaf of a single block holds (<paramref name="hash"/>, <paramref name="address"/>).</summary>
    private static bool LeafHolds(ReadOnlySpan<byte> block, int leafStart, int count, uint hash, uint address)
    {
        int lo = 0, hi = count;
        while (lo < hi)
        {
            int mid = (lo + hi) >>> 1;
            if (BinaryPrimitives.ReadUInt32BigEndian(block[(leafStart + mid * 8)..]) < hash) lo = mid + 1; else hi = mid;
        }
        for (int i = lo; i < count && BinaryPrimitives.ReadUInt32BigEndian(block[(leafStart + i * 8)..]) == hash; i++)
            if (BinaryPrimitives.ReadUInt32BigEndian(block[(leafStart + i * 8 + 4)..]) == address) return true;
        return false;
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

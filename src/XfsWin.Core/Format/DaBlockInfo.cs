using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>
/// xfs_da_blkinfo (V4, 12 bytes) and xfs_da3_blkinfo (V5, 56 bytes): the common header of
/// directory leaf/node/free blocks and attribute leaf/node blocks, with sibling links.
/// </summary>
public readonly ref struct DaBlockInfoView
{
    public const int OffForw = 0, OffBack = 4, OffMagic = 8, OffPad = 10;
    public const int OffCrc = 12, OffBlkno = 16, OffLsn = 24, OffUuid = 32, OffOwner = 48;
    public const int SizeV4 = 12, SizeV5 = 56;

    // magic16 values
    public const ushort DaNodeV4 = 0xFEBE, DaNodeV5 = 0x3EBE;
    public const ushort Dir2Leaf1V4 = 0xD2F1, Dir3Leaf1V5 = 0x3DF1;
    public const ushort Dir2LeafNV4 = 0xD2FF, Dir3LeafNV5 = 0x3DFF;
    public const ushort AttrLeafV4 = 0xFBEE, AttrLeafV5 = 0x3BEE;

    private readonly ReadOnlySpan<byte> _b;

    public DaBlockInfoView(ReadOnlySpan<byte> block) => _b = block;

    public uint Forw => BinaryPrimitives.ReadUInt32BigEndian(_b[OffForw..]);
    public uint Back => BinaryPrimitives.ReadUInt32BigEndian(_b[OffBack..]);
    public ushort Magic => BinaryPrimitives.ReadUInt16BigEndian(_b[OffMagic..]);

    /// <summary>CRC over the whole block, blkno, UUID and owner inode (V5 only).</summary>
    public static VerifyResult VerifyV5(ReadOnlySpan<byte> block, Superblock sb, long byteOffset, ulong ownerIno)
    {
        if (!XfsCrc.Verify(block, OffCrc)) return VerifyResult.Fail("CRC mismatch", OffCrc);
        if (BinaryPrimitives.ReadUInt64BigEndian(block[OffBlkno..]) != (ulong)(byteOffset >> 9))
            return VerifyResult.Fail("block records a different disk address", OffBlkno);
        if (SuperblockView.ReadUuid(block.Slice(OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("block UUID does not match the volume", OffUuid);
        ulong owner = BinaryPrimitives.ReadUInt64BigEndian(block[OffOwner..]);
        if (owner != ownerIno) return VerifyResult.Fail($"block owned by inode {owner}, expected {ownerIno}", OffOwner);
        return VerifyResult.Ok;
    }
}

/// <summary>
/// xfs_da_intnode / xfs_da3_intnode: an interior node of a directory or attribute hash B+tree:
/// (hashval, before) pairs, each naming the child block holding hashes up to hashval.
/// </summary>
public readonly ref struct DaNodeView
{
    public const int EntrySize = 8;
    private readonly ReadOnlySpan<byte> _b;
    private readonly int _hdr;

    public DaNodeView(ReadOnlySpan<byte> block, bool v5)
    {
        _b = block;
        _hdr = v5 ? 64 : 16;
    }

    /// <summary>Offsets of count and level: right after the block info.</summary>
    public ushort Count => BinaryPrimitives.ReadUInt16BigEndian(_b[(_hdr == 64 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4)..]);
    public ushort Level => BinaryPrimitives.ReadUInt16BigEndian(_b[(_hdr == 64 ? DaBlockInfoView.SizeV5 + 2 : DaBlockInfoView.SizeV4 + 2)..]);
    public int HeaderSize => _hdr;
    public int MaxEntries => (_b.Length - _hdr) / EntrySize;
    public uint HashVal(int i) => BinaryPrimitives.ReadUInt32BigEndian(_b[(_hdr + i * EntrySize)..]);
    public uint Before(int i) => BinaryPrimitives.ReadUInt32BigEndian(_b[(_hdr + i * EntrySize + 4)..]);
}

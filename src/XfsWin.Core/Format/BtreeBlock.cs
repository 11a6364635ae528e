using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>
/// xfs_btree_block: header of every B+tree block. Short form (AG btrees: 32-bit sibling pointers,
/// 16 bytes on V4, 56 on V5) and long form (bmbt: 64-bit siblings, 24 on V4, 72 on V5).
/// </summary>
public readonly ref struct BtreeBlockView
{
    public const int OffMagic = 0, OffLevel = 4, OffNumrecs = 6, OffLeftSib = 8;
    // short form
    public const int ShortOffRightSib = 12, ShortOffBlkno = 16, ShortOffLsn = 24, ShortOffUuid = 32, ShortOffOwner = 48, ShortOffCrc = 52;
    public const int ShortHeaderV4 = 16, ShortHeaderV5 = 56;
    // long form
    public const int LongOffRightSib = 16, LongOffBlkno = 24, LongOffLsn = 32, LongOffUuid = 40, LongOffOwner = 56, LongOffCrc = 64;
    public const int LongHeaderV4 = 24, LongHeaderV5 = 72;

    public const uint NullShortPtr = 0xFFFFFFFF;
    public const ulong NullLongPtr = 0xFFFFFFFFFFFFFFFF;

    private readonly ReadOnlySpan<byte> _b;

    public BtreeBlockView(ReadOnlySpan<byte> block) => _b = block;

    public uint Magic => BinaryPrimitives.ReadUInt32BigEndian(_b);
    public ushort Level => BinaryPrimitives.ReadUInt16BigEndian(_b[OffLevel..]);
    public ushort NumRecs => BinaryPrimitives.ReadUInt16BigEndian(_b[OffNumrecs..]);
    public uint ShortLeftSib => BinaryPrimitives.ReadUInt32BigEndian(_b[OffLeftSib..]);
    public uint ShortRightSib => BinaryPrimitives.ReadUInt32BigEndian(_b[ShortOffRightSib..]);
    public ulong LongLeftSib => BinaryPrimitives.ReadUInt64BigEndian(_b[OffLeftSib..]);
    public ulong LongRightSib => BinaryPrimitives.ReadUInt64BigEndian(_b[LongOffRightSib..]);

    public static int HeaderSize(bool longForm, bool v5) => longForm ? (v5 ? LongHeaderV5 : LongHeaderV4) : (v5 ? ShortHeaderV5 : ShortHeaderV4);

    /// <summary>
    /// Checks magic, CRC and self-description (blkno in 512-byte units, UUID, owner) of a btree block.
    /// <paramref name="owner"/> is the AG number (short form) or inode number (long form).
    /// </summary>
    public static VerifyResult Verify(ReadOnlySpan<byte> block, uint expectedMagic, bool longForm, Superblock sb, long byteOffset, ulong owner)
    {
        var v = new BtreeBlockView(block);
        if (v.Magic != expectedMagic) return VerifyResult.Fail($"bad magic 0x{v.Magic:x8}, expected 0x{expectedMagic:x8}", OffMagic);
        int header = HeaderSize(longForm, sb.IsV5);
        if (sb.IsV5)
        {
            int crcOff = longForm ? LongOffCrc : ShortOffCrc;
            if (!XfsCrc.Verify(block, crcOff)) return VerifyResult.Fail("CRC mismatch", crcOff);
            int blknoOff = longForm ? LongOffBlkno : ShortOffBlkno;
            if (BinaryPrimitives.ReadUInt64BigEndian(block[blknoOff..]) != (ulong)(byteOffset >> 9))
                return VerifyResult.Fail("block records a different disk address", blknoOff);
            int uuidOff = longForm ? LongOffUuid : ShortOffUuid;
            if (SuperblockView.ReadUuid(block.Slice(uuidOff, 16)) != sb.MetaUuid)
                return VerifyResult.Fail("block UUID does not match the volume", uuidOff);
            ulong recordedOwner = longForm ? BinaryPrimitives.ReadUInt64BigEndian(block[LongOffOwner..]) : BinaryPrimitives.ReadUInt32BigEndian(block[ShortOffOwner..]);
            if (recordedOwner != owner)
                return VerifyResult.Fail($"block owned by {recordedOwner}, expected {owner}", longForm ? LongOffOwner : ShortOffOwner);
        }
        if (v.Level > 20) return VerifyResult.Fail($"impossible level {v.Level}", OffLevel);
        if (v.NumRecs == 0 && v.Level > 0) return VerifyResult.Fail("empty interior node", OffNumrecs);
        _ = header;
        return VerifyResult.Ok;
    }
}

/// <summary>Magic numbers of the B+tree kinds (V4 / V5).</summary>
public static class BtreeMagic
{
    public const uint BnoV4 = 0x41425442, BnoV5 = 0x41423342;      // ABTB / AB3B
    public const uint CntV4 = 0x41425443, CntV5 = 0x41423343;      // ABTC / AB3C
    public const uint InoV4 = 0x49414254, InoV5 = 0x49414233;      // IABT / IAB3
    public const uint FinoV4 = 0x46494254, FinoV5 = 0x46494233;    // FIBT / FIB3
    public const uint BmapV4 = 0x424D4150, BmapV5 = 0x424D4133;    // BMAP / BMA3
    public const uint RmapV5 = 0x524D4233;                          // RMB3
    public const uint RefcountV5 = 0x52334643;                      // R3FC
}

/// <summary>
/// xfs_bmdr_block: the root of a bmbt kept in an inode fork: level, numrecs, then keys and
/// pointers whose positions depend on how many fit in the fork (not on numrecs).
/// </summary>
public readonly ref struct BmdrBlockView
{
    public const int HeaderSize = 4;
    private readonly ReadOnlySpan<byte> _b;

    public BmdrBlockView(ReadOnlySpan<byte> fork) => _b = fork;

    public ushort Level => BinaryPrimitives.ReadUInt16BigEndian(_b);
    public ushort NumRecs => BinaryPrimitives.ReadUInt16BigEndian(_b[2..]);
    public int MaxRecs => (_b.Length - HeaderSize) / 16;
    public ulong Key(int i) => BinaryPrimitives.ReadUInt64BigEndian(_b[(HeaderSize + i * 8)..]);
    public ulong Pointer(int i) => BinaryPrimitives.ReadUInt64BigEndian(_b[(HeaderSize + MaxRecs * 8 + i * 8)..]);
}

/// <summary>
/// Writes the header of a short-form (per-AG) btree block; records follow at <see cref="BtreeBlockView.ShortHeaderV5"/>
/// (V5) or <see cref="BtreeBlockView.ShortHeaderV4"/> (V4).
/// </summary>
public static class ShortBtreeBlockWriter
{
    /// <summary>The V4 header: magic, level, record count and null siblings (16 bytes, no self-description or CRC).</summary>
    public static void WriteHeaderV4(Span<byte> block, uint magic, ushort level, ushort numRecs)
    {
        BinaryPrimitives.WriteUInt32BigEndian(block, magic);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffLevel..], level);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffNumrecs..], numRecs);
        BinaryPrimitives.WriteUInt32BigEndian(block[BtreeBlockView.OffLeftSib..], BtreeBlockView.NullShortPtr);
        BinaryPrimitives.WriteUInt32BigEndian(block[BtreeBlockView.ShortOffRightSib..], BtreeBlockView.NullShortPtr);
    }

    /// <summary>Magic, level, record count, null siblings and the self-description (disk address in 512-byte units, UUID, owning AG).</summary>
    public static void WriteHeader(Span<byte> block, uint magic, ushort level, ushort numRecs, long byteOffset, Guid uuid, uint agno)
    {
        BinaryPrimitives.WriteUInt32BigEndian(block, magic);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffLevel..], level);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffNumrecs..], numRecs);
        BinaryPrimitives.WriteUInt32BigEndian(block[BtreeBlockView.OffLeftSib..], BtreeBlockView.NullShortPtr);
        BinaryPrimitives.WriteUInt32BigEndian(block[BtreeBlockView.ShortOffRightSib..], BtreeBlockView.NullShortPtr);
        BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.ShortOffBlkno..], (ulong)(byteOffset >> 9));
        BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.ShortOffLsn..], 0);
        uuid.TryWriteBytes(block.Slice(BtreeBlockView.ShortOffUuid, 16), bigEndian: true, out _);
        BinaryPrimitives.WriteUInt32BigEndian(block[BtreeBlockView.ShortOffOwner..], agno);
    }

    public static void StampCrc(Span<byte> block) => XfsCrc.Stamp(block, BtreeBlockView.ShortOffCrc);
}

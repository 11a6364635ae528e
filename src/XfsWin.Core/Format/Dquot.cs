using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>
/// xfs_dqblk: one dquot record of a quota file (136 bytes: xfs_disk_dquot, 104 bytes, then fill, crc, lsn, uuid). The
/// quota file of a type holds the dquot of id N at record N % per-block of file block N / per-block, where
/// per-block is the block size / 136 (the tail of a block is unused).
/// </summary>
public readonly ref struct DquotView
{
    public const int Size = 136;
    public const ushort Magic = 0x4451; // "DQ"
    public const byte Version = 1;
    public const byte TypeUser = 0x1, TypeProject = 0x2, TypeGroup = 0x4, TypeMask = 0x7, TypeBigtime = 0x80;
    public const int OffMagic = 0, OffVersion = 2, OffType = 3, OffId = 4, OffBlkHardlimit = 8, OffBlkSoftlimit = 16, OffInoHardlimit = 24,
        OffInoSoftlimit = 32, OffBcount = 40, OffIcount = 48, OffItimer = 56, OffBtimer = 60, OffIwarns = 64, OffBwarns = 66,
        OffRtbHardlimit = 72, OffRtbSoftlimit = 80, OffRtbcount = 88, OffRtbtimer = 96, OffRtbwarns = 100, OffCrc = 108, OffLsn = 112, OffUuid = 120;

    private readonly ReadOnlySpan<byte> _b;

    public DquotView(ReadOnlySpan<byte> record) => _b = record;

    public ushort MagicNumber => BinaryPrimitives.ReadUInt16BigEndian(_b);
    public byte Ver => _b[OffVersion];
    public byte Type => _b[OffType];
    public uint Id => BinaryPrimitives.ReadUInt32BigEndian(_b[OffId..]);
    public ulong BlockCount => BinaryPrimitives.ReadUInt64BigEndian(_b[OffBcount..]);
    public ulong InodeCount => BinaryPrimitives.ReadUInt64BigEndian(_b[OffIcount..]);
    public ulong RealtimeBlockCount => BinaryPrimitives.ReadUInt64BigEndian(_b[OffRtbcount..]);

    /// <summary>Dquot records per block of <paramref name="blockSize"/> bytes.</summary>
    public static int PerBlock(uint blockSize) => (int)(blockSize / Size);

    /// <summary>
    /// xfs_dquot_verify and xfs_dqblk_verify: magic, version, a type of the quota file's kind (bigtime only on bigtime
    /// volumes), the id the record's place implies, and on V5 the CRC and the volume's UUID.
    /// </summary>
    public static VerifyResult Verify(ReadOnlySpan<byte> record, byte type, uint id, Superblock sb)
    {
        var d = new DquotView(record);
        if (sb.IsV5)
        {
            if (!XfsCrc.Verify(record[..Size], OffCrc)) return VerifyResult.Fail("CRC mismatch", OffCrc);
            if (SuperblockView.ReadUuid(record.Slice(OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("UUID does not match the volume", OffUuid);
        }
        if (d.MagicNumber != Magic) return VerifyResult.Fail($"bad magic 0x{d.MagicNumber:x4}", OffMagic);
        if (d.Ver != Version) return VerifyResult.Fail($"version {d.Ver}", OffVersion);
        if ((d.Type & ~(TypeMask | TypeBigtime)) != 0 || (d.Type & TypeMask) != type) return VerifyResult.Fail($"type 0x{d.Type:x2}, expected 0x{type:x2}", OffType);
        if ((d.Type & TypeBigtime) != 0 && !sb.HasBigtime) return VerifyResult.Fail("bigtime timers on a volume without bigtime", OffType);
        if ((d.Type & TypeBigtime) != 0 && d.Id == 0) return VerifyResult.Fail("bigtime timers on the default dquot (id 0)", OffType);
        if (d.Id != id) return VerifyResult.Fail($"id {d.Id} in the place of id {id}", OffId);
        return VerifyResult.Ok;
    }
}

/// <summary>
/// Writes the fields of one xfs_dqblk (136 bytes, big-endian) as the kernel's xfs_dquot_to_disk and
/// xfs_qm_init_dquot_blk do; <see cref="Seal"/> stamps the LSN and CRC as its dquot flush does.
/// </summary>
public static class DquotRecord
{
    /// <summary>A fresh record of a new dquot chunk: magic, version, type (bigtime timers for ids above 0 on bigtime volumes), id, UUID, CRC.</summary>
    public static void Init(Span<byte> record, byte type, uint id, Superblock sb)
    {
        record[..DquotView.Size].Clear();
        BinaryPrimitives.WriteUInt16BigEndian(record, DquotView.Magic);
        record[DquotView.OffVersion] = DquotView.Version;
        record[DquotView.OffType] = (byte)(type | (id > 0 && sb.HasBigtime ? DquotView.TypeBigtime : 0));
        BinaryPrimitives.WriteUInt32BigEndian(record[DquotView.OffId..], id);
        if (sb.IsV5)
        {
            sb.MetaUuid.TryWriteBytes(record.Slice(DquotView.OffUuid, 16), bigEndian: true, out _);
            XfsCrc.Stamp(record[..DquotView.Size], DquotView.OffCrc);
        }
    }

    public static ulong U64(ReadOnlySpan<byte> record, int offset) => BinaryPrimitives.ReadUInt64BigEndian(record[offset..]);
    public static void SetU64(Span<byte> record, int offset, ulong value) => BinaryPrimitives.WriteUInt64BigEndian(record[offset..], value);
    public static uint U32(ReadOnlySpan<byte> record, int offset) => BinaryPrimitives.ReadUInt32BigEndian(record[offset..]);
    public static void SetU32(Span<byte> record, int offset, uint value) => BinaryPrimitives.WriteUInt32BigEndian(record[offset..], value);

    /// <summary>The LSN (dd_lsn) and CRC of a V5 record going in place.</summary>
    public static void Seal(Span<byte> record, ulong lsn)
    {
        BinaryPrimitives.WriteUInt64BigEndian(record[DquotView.OffLsn..], lsn);
        XfsCrc.Stamp(record[..DquotView.Size], DquotView.OffCrc);
    }
}

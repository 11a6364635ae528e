using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>xfs_dq_logformat (24 bytes, host order); region 1 is the big-endian xfs_disk_dquot.</summary>
public readonly ref struct DquotLogFormat
{
    public const int Size = 24;
    public const int OffType = 0, OffSize = 2, OffId = 4, OffBlkno = 8, OffLen = 16, OffBoffset = 20;
    /// <summary>xfs_disk_dquot is 104 bytes; a V5 xfs_dqblk (136 bytes) adds fill, crc at 108, lsn at 112, uuid at 120.</summary>
    public const int DiskDquotSize = 104, DqblkSize = 136, DqblkOffCrc = 108, DqblkOffLsn = 112, DqblkOffUuid = 120;
    /// <summary>xfs_disk_dquot (big-endian): be16 d_magic "DQ", u8 d_version (1), u8 d_type, be32 d_id.</summary>
    public const ushort Magic = 0x4451;
    public const byte Version = 1;
    public const int OffVersion = 2, OffDiskType = 3, OffDiskId = 4;

    private readonly ReadOnlySpan<byte> _b;
    public DquotLogFormat(ReadOnlySpan<byte> b) => _b = b;

    public uint Id => BinaryPrimitives.ReadUInt32LittleEndian(_b[OffId..]);
    public long Blkno => BinaryPrimitives.ReadInt64LittleEndian(_b[OffBlkno..]);
    public int Len => BinaryPrimitives.ReadInt32LittleEndian(_b[OffLen..]);
    public int Boffset => BinaryPrimitives.ReadInt32LittleEndian(_b[OffBoffset..]);
}

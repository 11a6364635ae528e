using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// xfs_inode_log_format (56 bytes, host order; the legacy 32-bit form is 52 bytes without ilf_pad).
/// Region 1 is the log dinode, then the data fork, then the attribute fork, each if logged.
/// </summary>
public readonly ref struct InodeLogFormat
{
    public const int Size = 56, Size32 = 52;
    public const int OffType = 0, OffSize = 2, OffFields = 4, OffAsize = 8, OffDsize = 10, OffPad = 12, OffIno = 16,
        OffRdev = 24, OffBlkno = 40, OffLen = 48, OffBoffset = 52;
    public const uint FieldCore = 0x1, FieldDdata = 0x2, FieldDext = 0x4, FieldDbroot = 0x8, FieldDev = 0x10,
        FieldUuid = 0x20, FieldAdata = 0x40, FieldAext = 0x80, FieldAbroot = 0x100, FieldDowner = 0x200, FieldAowner = 0x400;
    public const uint DataForkMask = FieldDdata | FieldDext | FieldDbroot | FieldDev | FieldUuid;
    public const uint DataForkContentMask = FieldDdata | FieldDext | FieldDbroot;
    public const uint AttrForkMask = FieldAdata | FieldAext | FieldAbroot;

    private readonly ReadOnlySpan<byte> _b;
    private readonly int _shift; // -4 for the 52-byte form

    public InodeLogFormat(ReadOnlySpan<byte> b)
    {
        _b = b;
        _shift = b.Length == Size32 ? -4 : 0;
    }

    public ushort RegionCount => BinaryPrimitives.ReadUInt16LittleEndian(_b[OffSize..]);
    public uint Fields => BinaryPrimitives.ReadUInt32LittleEndian(_b[OffFields..]);
    public ushort Asize => BinaryPrimitives.ReadUInt16LittleEndian(_b[OffAsize..]);
    public ushort Dsize => BinaryPrimitives.ReadUInt16LittleEndian(_b[OffDsize..]);
    public ulong Ino => BinaryPrimitives.ReadUInt64LittleEndian(_b[(OffIno + _shift)..]);
    public uint Rdev => BinaryPrimitives.ReadUInt32LittleEndian(_b[(OffRdev + _shift)..]);
    public long Blkno => BinaryPrimitives.ReadInt64LittleEndian(_b[(OffBlkno + _shift)..]);
    public int Len => BinaryPrimitives.ReadInt32LittleEndian(_b[(OffLen + _shift)..]);
    public int Boffset => BinaryPrimitives.ReadInt32LittleEndian(_b[(OffBoffset + _shift)..]);
}

using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>xfs_trans_header (16 bytes, host order = little-endian): the first region of each transaction.</summary>
public static class TransactionHeader
{
    public const int Size = 16;
    public const int OffMagic = 0, OffType = 4, OffTid = 8, OffNumItems = 12;
    public const uint Magic = 0x5452414E; // "TRAN"
    public const uint TypeCheckpoint = 40;

    public static uint ReadMagic(ReadOnlySpan<byte> b) => BinaryPrimitives.ReadUInt32LittleEndian(b[OffMagic..]);
}

using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>xlog_op_header (12 bytes, big-endian): introduces each region of a transaction in a record.</summary>
public readonly ref struct LogOpHeader
{
    public const int Size = 12;
    public const int OffTid = 0, OffLen = 4, OffClientId = 8, OffFlags = 9, OffRes2 = 10;
    public const byte ClientTransaction = 0x69, ClientLog = 0xAA;
    public const byte FlagStart = 0x01, FlagCommit = 0x02, FlagContinue = 0x04, FlagWasContinued = 0x08, FlagEnd = 0x10, FlagUnmount = 0x20;

    private readonly ReadOnlySpan<byte> _b;
    public LogOpHeader(ReadOnlySpan<byte> b) => _b = b;

    public uint Tid => BinaryPrimitives.ReadUInt32BigEndian(_b[OffTid..]);
    public int Len => BinaryPrimitives.ReadInt32BigEndian(_b[OffLen..]);
    public byte ClientId => _b[OffClientId];
    public byte Flags => _b[OffFlags];

    public static void Write(Span<byte> b, uint tid, int len, byte client, byte flags)
    {
        BinaryPrimitives.WriteUInt32BigEndian(b[OffTid..], tid);
        BinaryPrimitives.WriteInt32BigEndian(b[OffLen..], len);
        b[OffClientId] = client;
        b[OffFlags] = flags;
        BinaryPrimitives.WriteUInt16BigEndian(b[OffRes2..], 0);
    }
}

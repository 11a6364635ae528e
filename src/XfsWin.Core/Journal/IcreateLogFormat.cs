using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>xfs_icreate_log (28 bytes): type/size host order, the rest big-endian. A new inode chunk.</summary>
public readonly ref struct IcreateLogFormat
{
    public const int Size = 28;
    public const int OffType = 0, OffSize = 2, OffAg = 4, OffAgbno = 8, OffCount = 12, OffIsize = 16, OffLength = 20, OffGen = 24;

    private readonly ReadOnlySpan<byte> _b;
    public IcreateLogFormat(ReadOnlySpan<byte> b) => _b = b;

    public uint Ag => BinaryPrimitives.ReadUInt32BigEndian(_b[OffAg..]);
    public uint Agbno => BinaryPrimitives.ReadUInt32BigEndian(_b[OffAgbno..]);
    public uint Count => BinaryPrimitives.ReadUInt32BigEndian(_b[OffCount..]);
    public uint Isize => BinaryPrimitives.ReadUInt32BigEndian(_b[OffIsize..]);
    /// <summary>Chunk length in filesystem blocks.</summary>
    public uint Length => BinaryPrimitives.ReadUInt32BigEndian(_b[OffLength..]);
    public uint Gen => BinaryPrimitives.ReadUInt32BigEndian(_b[OffGen..]);
}

using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>
/// xfs_bmbt_rec: one extent of a file fork, 128 bits packed big-endian:
/// [127] unwritten flag, [126..73] file offset (54 bits), [72..21] start block (52 bits, AG-encoded),
/// [20..0] length in blocks (21 bits).
/// </summary>
public readonly record struct BmbtRecord(ulong FileOffset, ulong StartBlock, uint BlockCount, bool Unwritten)
{
    public const int Size = 16;
    public const uint MaxBlockCount = (1u << 21) - 1;

    public static BmbtRecord Decode(ReadOnlySpan<byte> rec)
    {
        ulong l0 = BinaryPrimitives.ReadUInt64BigEndian(rec);
        ulong l1 = BinaryPrimitives.ReadUInt64BigEndian(rec[8..]);
        return new BmbtRecord(
            FileOffset: (l0 & 0x7FFF_FFFF_FFFF_FFFFUL) >> 9,
            StartBlock: ((l0 & 0x1FFUL) << 43) | (l1 >> 21),
            BlockCount: (uint)(l1 & 0x1FFFFF),
            Unwritten: (l0 >> 63) != 0);
    }

    public void Encode(Span<byte> rec)
    {
        ulong l0 = (Unwritten ? 1UL << 63 : 0) | (FileOffset << 9) | (StartBlock >> 43);
        ulong l1 = (StartBlock << 21) | BlockCount;
        BinaryPrimitives.WriteUInt64BigEndian(rec, l0);
        BinaryPrimitives.WriteUInt64BigEndian(rec[8..], l1);
    }

    public ulong FileEnd => FileOffset + BlockCount;
}

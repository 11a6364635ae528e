using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>
/// xfs_alloc_rec: one free extent in the by-block (bnobt) and by-size (cntbt) free-space btrees: start
/// block and length, both u32 big-endian, AG-relative. Keys have the same layout; pointers are u32.
/// </summary>
public readonly record struct AllocRecord(uint StartBlock, uint BlockCount)
{
    public const int Size = 8, KeySize = 8, PointerSize = 4;

    public static AllocRecord Decode(ReadOnlySpan<byte> rec) =>
        new(BinaryPrimitives.ReadUInt32BigEndian(rec), BinaryPrimitives.ReadUInt32BigEndian(rec[4..]));

    public void Encode(Span<byte> rec)
    {
        BinaryPrimitives.WriteUInt32BigEndian(rec, StartBlock);
        BinaryPrimitives.WriteUInt32BigEndian(rec[4..], BlockCount);
    }
}

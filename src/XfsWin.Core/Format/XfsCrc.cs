using System.Buffers.Binary;
using System.Numerics;

namespace XfsWin.Format;

/// <summary>
/// CRC32C as XFS uses it: seed ~0, the 4-byte checksum field counted as zeros, result inverted and
/// stored little-endian (unlike every other field).
/// </summary>
public static class XfsCrc
{
    public static uint Compute(ReadOnlySpan<byte> buffer, int crcOffset)
    {
        uint crc = Update(0xFFFFFFFFu, buffer[..crcOffset]);
        crc = BitOperations.Crc32C(crc, 0u);
        crc = Update(crc, buffer[(crcOffset + 4)..]);
        return ~crc;
    }

    public static bool Verify(ReadOnlySpan<byte> buffer, int crcOffset) =>
        BinaryPrimitives.ReadUInt32LittleEndian(buffer[crcOffset..]) == Compute(buffer, crcOffset);

    public static void Stamp(Span<byte> buffer, int crcOffset) =>
        BinaryPrimitives.WriteUInt32LittleEndian(buffer[crcOffset..], Compute(buffer, crcOffset));

    /// <summary>Raw CRC32C update (no inversion), 8 bytes at a time.</summary>
    public static uint Update(uint crc, ReadOnlySpan<byte> data)
    {
        while (data.Length >= 8)
        {
            crc = BitOperations.Crc32C(crc, BinaryPrimitives.ReadUInt64LittleEndian(data));
            data = data[8..];
        }
        foreach (byte b in data)
        {
            crc = BitOperations.Crc32C(crc, b);
        }
        return crc;
    }
}

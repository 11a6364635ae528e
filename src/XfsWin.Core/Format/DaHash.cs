using System.Numerics;

namespace XfsWin.Format;

/// <summary>xfs_da_hashname: the name hash that orders directory and attribute B+trees.</summary>
public static class DaHash
{
    public static uint Hash(ReadOnlySpan<byte> name)
    {
        uint hash = 0;
        while (name.Length >= 4)
        {
            hash = (uint)(name[0] << 21) ^ (uint)(name[1] << 14) ^ (uint)(name[2] << 7) ^ name[3] ^ BitOperations.RotateLeft(hash, 7 * 4);
            name = name[4..];
        }
        return name.Length switch
        {
            3 => (uint)(name[0] << 14) ^ (uint)(name[1] << 7) ^ name[2] ^ BitOperations.RotateLeft(hash, 7 * 3),
            2 => (uint)(name[0] << 7) ^ name[1] ^ BitOperations.RotateLeft(hash, 7 * 2),
            1 => name[0] ^ BitOperations.RotateLeft(hash, 7),
            _ => hash,
        };
    }

    /// <summary>The case-insensitive hash of ascii-ci volumes (xfs_ascii_ci_hashname): ASCII letters folded to lower case.</summary>
    public static uint HashAsciiCi(ReadOnlySpan<byte> name)
    {
        Span<byte> folded = name.Length <= 256 ? stackalloc byte[name.Length] : new byte[name.Length];
        for (int i = 0; i < name.Length; i++)
        {
            byte c = name[i];
            folded[i] = c is >= (byte)'A' and <= (byte)'Z' ? (byte)(c + 32) : c;
        }
        return Hash(folded);
    }
}

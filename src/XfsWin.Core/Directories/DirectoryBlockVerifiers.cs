using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Directories;

/// <summary>
/// Verifies a block of an attribute hash B+tree (leaf or node): the magic must be
/// one of the kinds allowed at that position; V5 blocks must carry a valid CRC and self-description.
/// </summary>
internal readonly struct DaTreeBlockVerifier(Superblock sb, ulong owner, ushort magicA, ushort magicB, ushort magicC, string structure, int kind) : IBufferVerifier
{
    public int Kind => kind;
    public string Structure => $"{structure} of inode {owner}";
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
    {
        ushort magic = BinaryPrimitives.ReadUInt16BigEndian(buffer[DaBlockInfoView.OffMagic..]);
        if (magic != magicA && magic != magicB && magic != magicC)
            return VerifyResult.Fail($"bad magic 0x{magic:x4}", DaBlockInfoView.OffMagic);
        return sb.IsV5 ? DaBlockInfoView.VerifyV5(buffer, sb, byteOffset, owner) : VerifyResult.Ok;
    }
}

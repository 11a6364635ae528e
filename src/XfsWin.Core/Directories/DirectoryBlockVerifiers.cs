using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Directories;

/// <summary>Verifies a directory data block (multi-block form) or the single block of a block-form directory.</summary>
internal readonly struct DirectoryDataVerifier(Superblock sb, ulong owner, bool singleBlock) : IBufferVerifier
{
    public int Kind => singleBlock ? 10 : 11;
    public string Structure => singleBlock ? $"directory block of inode {owner}" : $"directory data block of inode {owner}";
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) =>
        DirectoryDataBlock.VerifyHeader(buffer, singleBlock, sb, byteOffset, owner);
}

/// <summary>
/// Verifies a block of a hash B+tree (directory leaf/node, attribute leaf/node): the magic must be
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

using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Directories;

/// <summary>
/// Verifies any block of a directory the editor changes: a data or single-block block (XDB3/XDD3, XD2B/XD2D), a
/// free-index block (XDF3/XD2F) or a hash-tree block (leaf1, leafN, da node). A block changes kind inside one
/// transaction (block form becomes a data block and back), so the editor reads and writes them all as one kind.
/// Data and single blocks are also checked whole (<see cref="DirectoryDataBlock.VerifyContents"/>), as the kernel's
/// verifiers check them on read and before write: the editor places entries by their bestfree table and leaf counts.
/// </summary>
internal readonly struct DirectoryAnyBlockVerifier(Superblock sb, ulong owner) : IBufferVerifier
{
    public const uint FreeMagicV4 = 0x58443246, FreeMagicV5 = 0x58444633; // XD2F, XDF3

    public int Kind => 24;
    public string Structure => $"directory block of inode {owner}";

    public static bool IsDataHeader(uint magic) => magic is DirectoryDataBlock.BlockMagicV4 or DirectoryDataBlock.DataMagicV4
        or DirectoryDataBlock.BlockMagicV5 or DirectoryDataBlock.DataMagicV5 or FreeMagicV4 or FreeMagicV5;

    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
    {
        uint magic = BinaryPrimitives.ReadUInt32BigEndian(buffer);
        if (IsDataHeader(magic))
        {
            bool v5Magic = magic is DirectoryDataBlock.BlockMagicV5 or DirectoryDataBlock.DataMagicV5 or FreeMagicV5;
            if (v5Magic != sb.IsV5) return VerifyResult.Fail($"magic 0x{magic:x8} of the other format version", 0);
            if (sb.IsV5)
            {
                if (!XfsCrc.Verify(buffer, DirectoryDataBlock.OffCrc)) return VerifyResult.Fail("CRC mismatch", DirectoryDataBlock.OffCrc);
                if (BinaryPrimitives.ReadUInt64BigEndian(buffer[DirectoryDataBlock.OffBlkno..]) != (ulong)(byteOffset >> 9))
                    return VerifyResult.Fail("block records a different disk address", DirectoryDataBlock.OffBlkno);
                if (SuperblockView.ReadUuid(buffer.Slice(DirectoryDataBlock.OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("block UUID does not match the volume", DirectoryDataBlock.OffUuid);
                ulong o = BinaryPrimitives.ReadUInt64BigEndian(buffer[DirectoryDataBlock.OffOwner..]);
                if (o != owner) return VerifyResult.Fail($"block owned by inode {o}, expected {owner}", DirectoryDataBlock.OffOwner);
            }
            if (magic is FreeMagicV4 or FreeMagicV5) return VerifyResult.Ok;
            return DirectoryDataBlock.VerifyContents(buffer, magic is DirectoryDataBlock.BlockMagicV4 or DirectoryDataBlock.BlockMagicV5, sb);
        }
        ushort m16 = BinaryPrimitives.ReadUInt16BigEndian(buffer[DaBlockInfoView.OffMagic..]);
        bool ok = sb.IsV5
            ? m16 is DaBlockInfoView.Dir3Leaf1V5 or DaBlockInfoView.Dir3LeafNV5 or DaBlockInfoView.DaNodeV5
            : m16 is DaBlockInfoView.Dir2Leaf1V4 or DaBlockInfoView.Dir2LeafNV4 or DaBlockInfoView.DaNodeV4;
        if (!ok) return VerifyResult.Fail($"bad magic 0x{magic:x8}", 0);
        return sb.IsV5 ? DaBlockInfoView.VerifyV5(buffer, sb, byteOffset, owner) : VerifyResult.Ok;
    }
}

/// <summary>
/// The write verifier of every directory block: the LSN and CRC go where the block's kind keeps them (data, block
/// and free-index headers: CRC at 4, LSN at 16; hash-tree blocks: CRC at 12, LSN at 24), then the block is checked
/// as it is read.
/// </summary>
internal sealed class DirectoryBlockWriteVerifier(Superblock sb, ulong owner) : IBufferWriteVerifier
{
    public string Structure => $"directory block of inode {owner}";

    public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
    {
        if (sb.IsV5)
        {
            bool dataHeader = DirectoryAnyBlockVerifier.IsDataHeader(BinaryPrimitives.ReadUInt32BigEndian(block));
            int lsnOffset = dataHeader ? DirectoryDataBlock.OffLsn : DaBlockInfoView.OffLsn;
            int crcOffset = dataHeader ? DirectoryDataBlock.OffCrc : DaBlockInfoView.OffCrc;
            if (lsn != 0) BinaryPrimitives.WriteUInt64BigEndian(block[lsnOffset..], lsn);
            XfsCrc.Stamp(block, crcOffset);
        }
        return new DirectoryAnyBlockVerifier(sb, owner).Verify(block, byteOffset);
    }
}

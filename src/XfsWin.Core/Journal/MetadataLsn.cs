using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// Where a V5 metadata block keeps its LSN, UUID and CRC, found from its magic number (as
/// xlog_recover_get_buf_lsn and the write verifiers do). Used to decide whether a logged buffer is
/// older than the block on disk, and to stamp the replaying transaction's LSN and a fresh CRC into
/// a replayed block when it is written back.
/// </summary>
public static class MetadataLsn
{
    public const uint DirFreeMagicV5 = 0x58444633; // XDF3
    public const ushort DquotMagic = 0x4451;       // "DQ"

    /// <summary>Layout of the self-describing header of one block kind.</summary>
    public readonly record struct Layout(int LsnOffset, int UuidOffset, int CrcOffset, bool PerFsBlock);

    public static Layout? Find(ReadOnlySpan<byte> block, bool metaUuidFeature)
    {
        if (block.Length < 64) return null;
        uint magic = BinaryPrimitives.ReadUInt32BigEndian(block);
        switch (magic)
        {
            case BtreeMagic.BnoV5 or BtreeMagic.CntV5 or BtreeMagic.InoV5 or BtreeMagic.FinoV5 or BtreeMagic.RmapV5 or BtreeMagic.RefcountV5:
                return new Layout(BtreeBlockView.ShortOffLsn, BtreeBlockView.ShortOffUuid, BtreeBlockView.ShortOffCrc, false);
            case BtreeMagic.BmapV5:
                return new Layout(BtreeBlockView.LongOffLsn, BtreeBlockView.LongOffUuid, BtreeBlockView.LongOffCrc, false);
            case AgfView.Magic:
                return new Layout(AgfView.OffLsn, AgfView.OffUuid, AgfView.OffCrc, false);
            case AgiView.Magic:
                return new Layout(AgiView.OffLsn, AgiView.OffUuid, AgiView.OffCrc, false);
            case AgflLayout.Magic:
                return new Layout(AgflLayout.OffLsn, AgflLayout.OffUuid, AgflLayout.OffCrc, false);
            case RemoteBlockHeader.SymlinkMagic:
                return new Layout(RemoteBlockHeader.OffLsn, RemoteBlockHeader.OffUuid, RemoteBlockHeader.OffCrc, false);
            case DirectoryDataBlock.BlockMagicV5 or DirectoryDataBlock.DataMagicV5 or DirFreeMagicV5:
                return new Layout(DirectoryDataBlock.OffLsn, DirectoryDataBlock.OffUuid, DirectoryDataBlock.OffCrc, false);
            case RemoteBlockHeader.AttrMagic:
                return new Layout(RemoteBlockHeader.OffLsn, RemoteBlockHeader.OffUuid, RemoteBlockHeader.OffCrc, true);
            case SuperblockView.Magic:
                return new Layout(SuperblockView.OffLsn, metaUuidFeature ? SuperblockView.OffMetaUuid : SuperblockView.OffUuid, SuperblockView.OffCrc, false);
        }
        ushort da = BinaryPrimitives.ReadUInt16BigEndian(block[DaBlockInfoView.OffMagic..]);
        if (da is DaBlockInfoView.DaNodeV5 or DaBlockInfoView.Dir3Leaf1V5 or DaBlockInfoView.Dir3LeafNV5 or DaBlockInfoView.AttrLeafV5)
            return new Layout(DaBlockInfoView.OffLsn, DaBlockInfoView.OffUuid, DaBlockInfoView.OffCrc, false);
        return null;
    }

    /// <summary>
    /// The LSN recovery compares against (xlog_recover_get_buf_lsn): ulong.MaxValue (-1) means
    /// "always replay": V4, remote attribute blocks, inodes, dquots, unknown contents, foreign UUIDs.
    /// </summary>
    public static ulong BufferLsn(ReadOnlySpan<byte> block, Superblock sb)
    {
        if (!sb.IsV5) return ulong.MaxValue;
        var layout = Find(block, (sb.Incompat & SuperblockFeatures.IncompatMetaUuid) != 0);
        if (layout is not { } l || l.PerFsBlock) return ulong.MaxValue;
        var uuid = SuperblockView.ReadUuid(block.Slice(l.UuidOffset, 16));
        if (uuid != sb.MetaUuid) return ulong.MaxValue;
        return BinaryPrimitives.ReadUInt64BigEndian(block[l.LsnOffset..]);
    }

    /// <summary>
    /// What the write verifier does when a replayed V5 block goes to disk: stamp <paramref name="lsn"/>
    /// and recompute the CRC (per filesystem block for remote attribute blocks). Blocks with no known
    /// self-describing header (inodes, dquots, unknown) are left exactly as logged.
    /// </summary>
    public static bool Stamp(Span<byte> block, Superblock sb, ulong lsn)
    {
        var layout = Find(block, (sb.Incompat & SuperblockFeatures.IncompatMetaUuid) != 0);
        if (layout is not { } l) return false;
        if (l.PerFsBlock)
        {
            int bs = (int)sb.BlockSize;
            for (int off = 0; off + bs <= block.Length; off += bs)
            {
                var b = block.Slice(off, bs);
                if (BinaryPrimitives.ReadUInt32BigEndian(b) != RemoteBlockHeader.AttrMagic) continue;
                BinaryPrimitives.WriteUInt64BigEndian(b[l.LsnOffset..], lsn);
                XfsCrc.Stamp(b, l.CrcOffset);
            }
            return true;
        }
        BinaryPrimitives.WriteUInt64BigEndian(block[l.LsnOffset..], lsn);
        XfsCrc.Stamp(block, l.CrcOffset);
        return true;
    }
}

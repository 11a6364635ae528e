using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// One dquot as the log carries it (XFS_LI_DQUOT, the kernel's xfs_qm_dquot_logitem_format): an xfs_dq_logformat naming
/// the dquot's id, the daddr of the quota file block holding it (qlf_len 1: one file system block) and its byte offset
/// there, then the 104-byte xfs_disk_dquot. The item keeps the whole 136-byte xfs_dqblk as it is after the change;
/// writeback puts it in place with dd_lsn and the CRC stamped (xfs_qm_dqflush). Recovery (ours and the kernel's)
/// replays it only while quota accounting is on and no quota-off item switched its type off.
/// </summary>
public sealed class DquotLogItem : JournalItem
{
    private byte[] _record;

    /// <param name="record">The whole xfs_dqblk after the change (136 bytes, big-endian); the item keeps the array, the caller never changes it.</param>
    public DquotLogItem(byte type, uint id, long blockDaddr, int offsetInBlock, byte[] record)
    {
        if (record.Length != DquotLogFormat.DqblkSize) throw new ArgumentException($"a dquot record of {record.Length} bytes", nameof(record));
        DquotType = type;
        Id = id;
        BlockDaddr = blockDaddr;
        OffsetInBlock = offsetInBlock;
        _record = record;
    }

    /// <summary>d_type's quota type bits (user 1, project 2, group 4).</summary>
    public byte DquotType { get; }
    public uint Id { get; }
    /// <summary>qlf_blkno: the daddr of the quota file block holding the dquot.</summary>
    public long BlockDaddr { get; }
    /// <summary>qlf_boffset: the dquot's byte offset in that block.</summary>
    public int OffsetInBlock { get; }
    /// <summary>The newest xfs_dqblk image (before LSN and CRC are stamped at writeback).</summary>
    public ReadOnlySpan<byte> Record => _record;

    public override LogItemKey Key => new(LogItemType.Dquot, ((long)DquotType << 32) | Id, 0);

    public override int RegionCount => 2;
    public override int FormattedBytes => DquotLogFormat.Size + DquotLogFormat.DiskDquotSize;

    public override void Format(List<ReadOnlyMemory<byte>> regions, LogFormatArena arena)
    {
        var format = arena.Take(DquotLogFormat.Size);
        var f = format.Span;
        BinaryPrimitives.WriteUInt16LittleEndian(f[DquotLogFormat.OffType..], LogItemType.Dquot);
        BinaryPrimitives.WriteUInt16LittleEndian(f[DquotLogFormat.OffSize..], 2);
        BinaryPrimitives.WriteUInt32LittleEndian(f[DquotLogFormat.OffId..], Id);
        BinaryPrimitives.WriteInt64LittleEndian(f[DquotLogFormat.OffBlkno..], BlockDaddr);
        BinaryPrimitives.WriteInt32LittleEndian(f[DquotLogFormat.OffLen..], 1);
        BinaryPrimitives.WriteInt32LittleEndian(f[DquotLogFormat.OffBoffset..], OffsetInBlock);
        regions.Add(format);
        regions.Add(new ReadOnlyMemory<byte>(_record, 0, DquotLogFormat.DiskDquotSize));
    }

    public override void MergeNewer(JournalItem newer)
    {
        var n = (DquotLogItem)newer;
        if (n.Key != Key) throw new ArgumentException($"cannot merge {n.Key} into {Key}", nameof(newer));
        _record = n._record;
    }

    public override JournalItem Snapshot() => new DquotLogItem(DquotType, Id, BlockDaddr, OffsetInBlock, _record) { Lsn = Lsn };

    /// <summary>
    /// Writes dquot items in place, after everything else of the same writeback went out: each touched quota file block
    /// is read, its logged dquots are patched in (in the order given, stamped with their item's LSN and, on V5, the
    /// CRC) and the block is written back. Only the dquots logged change: the rest of the block stays as on disk, so
    /// nothing reaches the disk ahead of the log.
    /// </summary>
    internal static void WriteInPlace(IBlockDevice data, Superblock sb, List<DquotLogItem> items)
    {
        if (items.Count == 0) return;
        int blockSize = (int)sb.BlockSize;
        foreach (var group in items.GroupBy(i => i.BlockDaddr).OrderBy(g => g.Key))
        {
            using var block = new AlignedBuffer(blockSize);
            long offset = group.Key << LogArea.BBShift;
            data.Read(offset, block.Span);
            foreach (var item in group)
            {
                var record = block.Span.Slice(item.OffsetInBlock, DquotLogFormat.DqblkSize);
                item._record.CopyTo(record);
                if (sb.IsV5) DquotRecord.Seal(record, item.Lsn);
            }
            data.Write(offset, block.Span);
        }
    }
}

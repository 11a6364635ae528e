using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// Writeback of the images log items carry, straight to the data device: a buffer's logged image with its LSN
/// stamped and CRC recomputed where its type has them (the write verifier's job), an inode's image with di_lsn and
/// the inode CRC. Used where no buffer cache owns the metadata (tools, tests); the buffer layer writes its own
/// buffers instead.
/// </summary>
public sealed class DeviceImageWriteback : ILogWriteback
{
    private readonly IBlockDevice _data;
    private readonly Superblock _sb;

    public DeviceImageWriteback(IBlockDevice data, Superblock sb)
    {
        _data = data;
        _sb = sb;
    }

    public long BuffersWritten { get; private set; }
    public long InodesWritten { get; private set; }

    public void WriteBack(IReadOnlyList<JournalItem> items)
    {
        var batch = new WritebackBatch();
        List<DquotLogItem>? dquots = null;
        foreach (var item in items)
        {
            switch (item)
            {
                case BufferLogItem { IsCancel: false } buf:
                    var image = buf.Image.ToArray();
                    if (_sb.IsV5) MetadataLsn.Stamp(image, _sb, buf.Lsn);
                    batch.Add(buf.Daddr << LogArea.BBShift, image);
                    BuffersWritten++;
                    break;
                case InodeLogItem inode:
                    batch.Add(inode.Cluster.InodeByte, PrepareInode(inode));
                    InodesWritten++;
                    break;
                case IcreateLogItem chunk:
                    batch.Add(chunk.Daddr << LogArea.BBShift, chunk.ChunkImage(_sb));
                    break;
                case DquotLogItem dquot:
                    (dquots ??= new()).Add(dquot);
                    break;
            }
        }
        batch.WriteOut(_data);
        if (dquots is not null) DquotLogItem.WriteInPlace(_data, _sb, dquots);
    }

    public void Flush() => _data.Flush();

    /// <summary>An inode item's image as it goes in place: its LSN (di_lsn) and CRC stamped (V3 inodes).</summary>
    internal static byte[] PrepareInode(InodeLogItem inode)
    {
        var disk = inode.DiskImage.ToArray();
        if (disk[DinodeView.OffVersion] >= 3)
        {
            BinaryPrimitives.WriteUInt64BigEndian(disk.AsSpan(DinodeView.OffLsn), inode.Lsn);
            XfsCrc.Stamp(disk, DinodeView.OffCrc);
        }
        return disk;
    }
}

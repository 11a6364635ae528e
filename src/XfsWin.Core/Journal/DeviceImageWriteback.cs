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
        foreach (var item in items)
        {
            switch (item)
            {
                case BufferLogItem { IsCancel: false } buf:
                    var image = buf.Image.ToArray();
                    if (_sb.IsV5) MetadataLsn.Stamp(image, _sb, buf.Lsn);
                    _data.Write(buf.Daddr << LogArea.BBShift, image);
                    BuffersWritten++;
                    break;
                case InodeLogItem inode:
                    WriteInode(_data, inode);
                    InodesWritten++;
                    break;
            }
        }
    }

    public void Flush() => _data.Flush();

    /// <summary>Writes an inode item's image in place with its LSN (di_lsn) and CRC stamped (V3 inodes).</summary>
    internal static void WriteInode(IBlockDevice data, InodeLogItem inode)
    {
        var disk = inode.DiskImage.ToArray();
        if (disk[DinodeView.OffVersion] >= 3)
        {
            BinaryPrimitives.WriteUInt64BigEndian(disk.AsSpan(DinodeView.OffLsn), inode.Lsn);
            XfsCrc.Stamp(disk, DinodeView.OffCrc);
        }
        data.Write(inode.Cluster.InodeByte, disk);
    }
}

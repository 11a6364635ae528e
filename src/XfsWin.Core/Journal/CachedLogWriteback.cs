using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Journal;

/// <summary>
/// The AIL's writeback for a read-write volume: each item's logged image goes in place (the state its checkpoint
/// logged, so metadata on disk never runs ahead of the log), a buffer through the write verifier its cached buffer
/// carries (structure checked, LSN stamped, CRC computed), an inode with its LSN and CRC. A write verifier that
/// refuses an image is our bug, not the disk's: it throws <see cref="InvalidOperationException"/> naming the
/// structure and address, and nothing of that item is written.
/// <para>
/// The cache keeps every buffer a transaction changed (dirty, never evicted) until <see cref="ReleaseCleanBuffers"/>
/// is called with the log empty of unwritten work: a dirty buffer dropped earlier would be read back from disk
/// older than the log says it is.
/// </para>
/// </summary>
public sealed class CachedLogWriteback : ILogWriteback
{
    private readonly IBlockDevice _data;
    private readonly Superblock _sb;
    private readonly BufferCache _cache;

    public CachedLogWriteback(IBlockDevice data, Superblock sb, BufferCache cache)
    {
        _data = data;
        _sb = sb;
        _cache = cache;
    }

    public long BuffersWritten { get; private set; }
    public long InodesWritten { get; private set; }
    public long DquotsWritten { get; private set; }

    public void WriteBack(IReadOnlyList<JournalItem> items)
    {
        // Images in the AIL's order, combined into cluster-sized and larger writes (see WritebackBatch); dquots are
        // patched into their quota file blocks after those (a new chunk's logged buffer goes in place first).
        List<DquotLogItem>? dquots = null;
        foreach (var item in items)
        {
            switch (item)
            {
                case BufferLogItem { IsCancel: false } buf:
                    _batch.Add(buf.Daddr << LogArea.BBShift, PrepareBuffer(buf));
                    BuffersWritten++;
                    break;
                case InodeLogItem inode:
                    _batch.Add(inode.Cluster.InodeByte, DeviceImageWriteback.PrepareInode(inode));
                    InodesWritten++;
                    break;
                case IcreateLogItem chunk:
                    _batch.Add(chunk.Daddr << LogArea.BBShift, chunk.ChunkImage(_sb));
                    break;
                case DquotLogItem dquot:
                    (dquots ??= new()).Add(dquot);
                    break;
            }
        }
        _batch.WriteOut(_data);
        DeviceWrites += _batch.Writes;
        if (dquots is not null)
        {
            DquotLogItem.WriteInPlace(_data, _sb, dquots);
            DquotsWritten += dquots.Count;
        }
    }

    private readonly WritebackBatch _batch = new();

    /// <summary>Device writes the writebacks took (fewer than items: neighbours go out together).</summary>
    public long DeviceWrites { get; private set; }

    private byte[] PrepareBuffer(BufferLogItem buf)
    {
        long offset = buf.Daddr << LogArea.BBShift;
        var image = buf.Image.ToArray();
        var verifier = _cache.Find(offset, image.Length)?.WriteVerifierForLog;
        if (verifier is not null)
        {
            var result = verifier.PrepareForWrite(image, offset, buf.Lsn);
            if (!result.IsOk)
                throw new InvalidOperationException($"{verifier.Structure} at byte {offset} failed its write verifier ({result}): not written");
        }
        else if (_sb.IsV5)
        {
            MetadataLsn.Stamp(image, _sb, buf.Lsn);
        }
        return image;
    }

    public void Flush() => _data.Flush();

    /// <summary>
    /// Every change is written in place (CIL and AIL empty): the cache may drop the buffers transactions changed
    /// again. Call only then, with no transaction committing.
    /// </summary>
    public void ReleaseCleanBuffers() => _cache.ForgetDelayedWrites();
}

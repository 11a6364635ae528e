using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>
/// The AGI unlinked lists (the kernel's xfs_iunlink / xfs_iunlink_remove): an inode whose last link goes while it is
/// still held stays allocated, and sits on the singly linked list of bucket agino % 64 of its AG (head in
/// agi_unlinked[bucket], next in di_next_unlinked) until it is freed. After a crash, log recovery (the kernel's
/// mount, XfsWin's in-place recovery) frees every inode left on these lists.
/// <para>
/// Logging: a bucket head is an AGI buffer range; a di_next_unlinked change is an INODE_BUF buffer item of the
/// inode's cluster (<see cref="Transaction.LogInodeUnlinkedField"/>), because recovery of inode items keeps the
/// on-disk di_next_unlinked.
/// </para>
/// </summary>
public sealed class UnlinkedList(Superblock sb, InodeCache inodes)
{
    public const uint NullAgino = 0xFFFFFFFF;
    public const int Buckets = AgiView.UnlinkedBuckets;

    /// <summary>
    /// Puts <paramref name="inode"/> (nlink 0, being logged by the caller in <paramref name="tx"/>) at the head of its
    /// bucket.
    /// </summary>
    public void Add(Transaction tx, InodeUpdate inode)
    {
        uint agno = sb.InoToAgno(inode.Number), agino = sb.InoToAgino(inode.Number);
        var agi = InodeAllocator.JoinAgi(tx, sb, agno);
        int bucketOffset = AgiView.OffUnlinked + 4 * (int)(agino % Buckets);
        uint head = BinaryPrimitives.ReadUInt32BigEndian(agi.Contents.AsSpan(bucketOffset));
        if (head == agino)
            throw tx.Mount.Corrupt($"AGI {agno} unlinked bucket {agino % Buckets}", agi.Offset, $"inode {inode.Number} is already its head");
        if (head != NullAgino) SetNext(tx, inode.Number, head, inode);
        BinaryPrimitives.WriteUInt32BigEndian(agi.Contents.AsSpan(bucketOffset), agino);
        tx.LogRange(agi, bucketOffset, bucketOffset + 3);
    }

    /// <summary>
    /// Takes <paramref name="inode"/> (being freed and logged by the caller in <paramref name="tx"/>) off its bucket's
    /// list: the bucket or its predecessor then points at its successor, and its own di_next_unlinked becomes null.
    /// </summary>
    public void Remove(Transaction tx, InodeUpdate inode)
    {
        uint agno = sb.InoToAgno(inode.Number), agino = sb.InoToAgino(inode.Number);
        var agi = InodeAllocator.JoinAgi(tx, sb, agno);
        int bucket = (int)(agino % Buckets);
        int bucketOffset = AgiView.OffUnlinked + 4 * bucket;
        uint next = BinaryPrimitives.ReadUInt32BigEndian(inode.Image.AsSpan(DinodeView.OffNextUnlinked));
        uint current = BinaryPrimitives.ReadUInt32BigEndian(agi.Contents.AsSpan(bucketOffset));
        if (current == agino)
        {
            BinaryPrimitives.WriteUInt32BigEndian(agi.Contents.AsSpan(bucketOffset), next);
            tx.LogRange(agi, bucketOffset, bucketOffset + 3);
        }
        else
        {
            // Walk the chain to the predecessor; a list longer than the AG's inodes is a cycle.
            for (long steps = 0; ; steps++)
            {
                if (current == NullAgino || steps > (long)sb.AgBlocks << sb.InoPBlog)
                    throw tx.Mount.Corrupt($"AGI {agno} unlinked bucket {bucket}", agi.Offset, $"inode {inode.Number} is not on the list");
                ulong ino = ((ulong)agno << sb.AgInoLog) | current;
                uint after = ReadNext(tx, ino);
                if (after == agino)
                {
                    SetNext(tx, ino, next, null);
                    break;
                }
                current = after;
            }
        }
        if (next != NullAgino) SetNext(tx, inode.Number, NullAgino, inode);
    }

    private uint ReadNext(Transaction tx, ulong ino)
    {
        var (cluster, offset) = inodes.JoinCluster(tx, ino);
        return BinaryPrimitives.ReadUInt32BigEndian(cluster.Contents.AsSpan(offset + DinodeView.OffNextUnlinked));
    }

    /// <summary>
    /// Sets di_next_unlinked of <paramref name="ino"/> in its cluster buffer (CRC restamped) and logs it; with
    /// <paramref name="update"/> its image too (the caller logs that image, which is copied over the cluster bytes).
    /// </summary>
    private void SetNext(Transaction tx, ulong ino, uint next, InodeUpdate? update)
    {
        var (cluster, offset) = inodes.JoinCluster(tx, ino);
        var slot = cluster.Contents.AsSpan(offset, sb.InodeSize);
        BinaryPrimitives.WriteUInt32BigEndian(slot[DinodeView.OffNextUnlinked..], next);
        if (sb.IsV5) XfsCrc.Stamp(slot, DinodeView.OffCrc);
        if (update is not null) BinaryPrimitives.WriteUInt32BigEndian(update.Image.AsSpan(DinodeView.OffNextUnlinked), next);
        tx.LogInodeUnlinkedField(cluster, offset + DinodeView.OffNextUnlinked, InodeClusterLocation.Of(sb, ino));
        tx.OnCommit(() => inodes.Invalidate(ino));
    }
}

using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Allocation;

/// <summary>
/// Blocks of the bnobt, cntbt and rmapbt: taken from the AGFL and put back on it (xfs_allocbt_alloc_block,
/// xfs_rmapbt_alloc_block). They stay OWN_AG in the reverse map either way; agf_btreeblks counts every such block
/// but the roots, agf_rmap_blocks every rmapbt block. A block put back is busy; one taken is reused as metadata.
/// The allocator fixes the AGFL before every operation, so it holds what a split at every level needs.
/// </summary>
internal sealed class FreeListSpace(AgAllocator allocator, uint agno, bool rmap) : IBtreeSpace
{
    public ulong Allocate(Transaction tx, ulong near)
    {
        var w = allocator.Join(tx, agno);
        uint bno = allocator.TakeFromFreeList(tx, w, btreeBlock: true);
        if (rmap) AgAllocator.AddAgf(tx, w, AgfView.OffRmapBlocks, 1);
        allocator.ReuseBusy(agno, bno);
        return bno;
    }

    public void Free(Transaction tx, ulong pointer)
    {
        var w = allocator.Join(tx, agno);
        allocator.PutOnFreeList(tx, w, (uint)pointer, btreeBlock: true);
        if (rmap) AgAllocator.AddAgf(tx, w, AgfView.OffRmapBlocks, -1);
        allocator.MarkBusy(tx, agno, (uint)pointer, 1);
    }
}

/// <summary>
/// Blocks of the inobt, finobt (OWN_INOBT) and refcountbt (OWN_REFC): single blocks allocated from the AG's free
/// space near the block asking, and freed back to it. The tree's block counter follows (agi_iblocks / agi_fblocks
/// with the inobtcount feature, agf_refcount_blocks). The finobt and refcountbt may use the AG's metadata
/// reservation, which exists for them. An inode tree's caller has joined the AGI before this joins the AGF.
/// </summary>
internal sealed class AgTreeSpace(AgAllocator allocator, uint agno, RmapOwner owner, AgReservation reservation, int agiCounter) : IBtreeSpace
{
    public ulong Allocate(Transaction tx, ulong near)
    {
        var sb = allocator.Superblock;
        var got = allocator.Allocate(tx, new AllocationRequest
        {
            Target = ((ulong)agno << sb.AgBlkLog) | (uint)near,
            MinLength = 1, MaxLength = 1,
            Mode = AllocationMode.Near, Scope = AllocationScope.ThisAg,
            Owner = owner, Reservation = reservation,
        });
        Count(tx, +1);
        return got.AgBlock;
    }

    public void Free(Transaction tx, ulong pointer)
    {
        allocator.FreeInAg(tx, agno, (uint)pointer, 1, owner);
        Count(tx, -1);
    }

    private void Count(Transaction tx, int delta)
    {
        var sb = allocator.Superblock;
        if (agiCounter < 0)
        {
            AgAllocator.AddAgf(tx, allocator.Join(tx, agno), AgfView.OffRefcountBlocks, delta);
            return;
        }
        if ((sb.RoCompat & SuperblockFeatures.RoCompatInobtCount) == 0) return;
        var verifier = new AgiBufferVerifier(sb, agno);
        var agi = tx.Read(allocator.AgfOffset(agno) + sb.SectorSize, sb.SectorSize, agno, verifier, verifier.ForWrite(), BufType.Agi);
        var span = agi.Contents.AsSpan(agiCounter);
        BinaryPrimitives.WriteUInt32BigEndian(span, checked((uint)(BinaryPrimitives.ReadUInt32BigEndian(span) + delta)));
        tx.LogRange(agi, agiCounter, agiCounter + 3);
    }
}

/// <summary>
/// Blocks of one inode's extent tree (bmbt): allocated near the block asking (any AG from there, upwards only once
/// the transaction holds an AGF), mapped to the inode with the BMBT flag, freed back. <see cref="BlocksDelta"/> is
/// what the caller adds to di_nblocks.
/// </summary>
public sealed class BmbtSpace : IBtreeSpace
{
    private readonly AgAllocator _allocator;
    private readonly RmapOwner _owner;

    internal BmbtSpace(AgAllocator allocator, ulong ino, bool attrFork)
    {
        _allocator = allocator;
        _owner = RmapOwner.InodeBmbt(ino, attrFork);
    }

    /// <summary>Blocks allocated less blocks freed through this space.</summary>
    public long BlocksDelta { get; private set; }

    public ulong Allocate(Transaction tx, ulong near)
    {
        var got = _allocator.Allocate(tx, new AllocationRequest
        {
            Target = near != 0 && _allocator.Superblock.IsValidFsb(near) ? near : _allocator.RotorTarget,
            MinLength = 1, MaxLength = 1,
            Mode = AllocationMode.Near, Scope = AllocationScope.StartAg,
            Owner = _owner,
        });
        BlocksDelta++;
        return got.StartBlock;
    }

    public void Free(Transaction tx, ulong pointer)
    {
        _allocator.Free(tx, pointer, 1, _owner);
        BlocksDelta--;
    }
}

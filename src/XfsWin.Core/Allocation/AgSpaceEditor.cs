using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Allocation;

/// <summary>
/// Returns blocks of one AG to free space and drops their reverse mappings, as the kernel's
/// xfs_free_ag_extent and xfs_rmap_unmap do, on a V5 volume, through metadata buffers joined to a
/// <see cref="MetadataChangeSet"/> (the AGF, the AGFL and every tree block it touches).
/// <para>
/// Invariants kept: both free-space trees hold the same extents, merged with their neighbours (a
/// freed extent touching free space on either side becomes one record); agf_freeblks counts them
/// and agf_longest is the largest. Tree changes that would split or join blocks are refused (see
/// The free-space and reverse-map trees take the blocks they grow by from the AG free list (AGFL)
/// and give back the blocks they shrink by, as the kernel's allocbt/rmapbt block hooks do:
/// agf_btreeblks and agf_rmap_blocks follow, and the reverse mapping (OWN_AG covers both the AGFL
/// and those trees) does not change. The AGF and AGFL are logged by <see cref="Commit"/>; the change
/// set's commit publishes them and the cache's writeback writes them; the superblock counters are the
/// caller's to rebuild.
/// </para>
/// </summary>
public sealed class AgSpaceEditor : IAgBtreeHost
{

    private readonly MetadataChangeSet _changes;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly byte[] _agf;
    private readonly long _agfOffset;
    private readonly byte[] _agfl;
    private readonly long _agflOffset;
    private readonly int _agflSlots;

    /// <summary>Joins the AG's AGF and AGFL (verified on first read) to <paramref name="changes"/>.</summary>
    public AgSpaceEditor(MetadataChangeSet changes, Superblock sb, uint agno)
    {
        if (!sb.IsV5) throw new XfsException(XfsError.Unsupported, "changing free space of V4 volumes is not supported");
        _changes = changes;
        _sb = sb;
        _agno = agno;
        _agfOffset = sb.AgBlockToByte(agno, 0) + sb.SectorSize;
        var agf = new AgfBufferVerifier(sb, agno);
        _agf = changes.Read(_agfOffset, sb.SectorSize, agno, agf, agf.ForWrite()).Contents;
        _agflOffset = sb.AgBlockToByte(agno, 0) + 3L * sb.SectorSize;
        var agfl = new AgflBufferVerifier(sb, agno);
        _agfl = changes.Read(_agflOffset, sb.SectorSize, agno, agfl, agfl.ForWrite()).Contents;
        _agflSlots = (sb.SectorSize - AgflLayout.SizeV5) / 4;
    }

    private uint AgfU32(int offset) => BinaryPrimitives.ReadUInt32BigEndian(_agf.AsSpan(offset));
    private void SetAgfU32(int offset, uint value) => BinaryPrimitives.WriteUInt32BigEndian(_agf.AsSpan(offset), value);

    private AgBtreeEditor ByBlock => new(_changes, _sb, _agno, AgBtreeKind.FreeSpaceByBlock, AgfU32(AgfView.OffBnoRoot), (int)AgfU32(AgfView.OffBnoLevel), this);
    private AgBtreeEditor ByCount => new(_changes, _sb, _agno, AgBtreeKind.FreeSpaceByCount, AgfU32(AgfView.OffCntRoot), (int)AgfU32(AgfView.OffCntLevel), this);
    private AgBtreeEditor ReverseMap => new(_changes, _sb, _agno, AgBtreeKind.ReverseMap, AgfU32(AgfView.OffRmapRoot), (int)AgfU32(AgfView.OffRmapLevel), this);

    private static (int Root, int Level) RootFields(AgBtreeKind kind) => kind switch
    {
        AgBtreeKind.FreeSpaceByBlock => (AgfView.OffBnoRoot, AgfView.OffBnoLevel),
        AgBtreeKind.FreeSpaceByCount => (AgfView.OffCntRoot, AgfView.OffCntLevel),
        AgBtreeKind.ReverseMap => (AgfView.OffRmapRoot, AgfView.OffRmapLevel),
        AgBtreeKind.RefCount => (AgfView.OffRefcountRoot, AgfView.OffRefcountLevel),
        _ => throw new ArgumentOutOfRangeException(nameof(kind), "not a tree of the AGF"),
    };

    uint IAgBtreeHost.TakeBlock(AgBtreeKind kind)
    {
        if (kind == AgBtreeKind.RefCount)
        {
            // xfs_refcountbt_alloc_block: from free space, not the AGFL.
            uint block = AllocateBlock(RmapRecord.OwnRefcount);
            SetAgfU32(AgfView.OffRefcountBlocks, AgfU32(AgfView.OffRefcountBlocks) + 1);
            return block;
        }
        _ = RootFields(kind);
        uint count = AgfU32(AgfView.OffFlcount);
        if (count == 0)
            throw new XfsException(XfsError.Unsupported, $"the free list of AG {_agno} is empty, and a {kind} block must split");
        uint first = AgfU32(AgfView.OffFlfirst);
        if (first >= _agflSlots) throw new XfsCorruptionException($"AGF of AG {_agno}", _agfOffset, $"flfirst {first} is outside the free list");
        uint bno = BinaryPrimitives.ReadUInt32BigEndian(_agfl.AsSpan(AgflLayout.OffBno + 4 * (int)first));
        if (bno == 0 || bno >= AgfU32(AgfView.OffLength))
            throw new XfsCorruptionException($"AGFL of AG {_agno}", _agflOffset, $"slot {first} holds block {bno}, outside the AG");
        SetAgfU32(AgfView.OffFlfirst, (first + 1) % (uint)_agflSlots);
        SetAgfU32(AgfView.OffFlcount, count - 1);
        SetAgfU32(AgfView.OffBtreeblks, AgfU32(AgfView.OffBtreeblks) + 1);
        if (kind == AgBtreeKind.ReverseMap) SetAgfU32(AgfView.OffRmapBlocks, AgfU32(AgfView.OffRmapBlocks) + 1);
        return bno;
    }

    void IAgBtreeHost.ReleaseBlock(AgBtreeKind kind, uint agbno)
    {
        if (kind == AgBtreeKind.RefCount)
        {
            UnmapReverse(agbno, 1, RmapRecord.OwnRefcount, 0, 0);
            FreeExtent(agbno, 1);
            BlocksFreed--; // a tree block, not file data
            SetAgfU32(AgfView.OffRefcountBlocks, AgfU32(AgfView.OffRefcountBlocks) - 1);
            return;
        }
        _ = RootFields(kind);
        uint count = AgfU32(AgfView.OffFlcount);
        if (count >= _agflSlots)
            throw new XfsException(XfsError.Unsupported, $"the free list of AG {_agno} is full, and a {kind} block must be freed");
        uint last = (AgfU32(AgfView.OffFllast) + 1) % (uint)_agflSlots;
        BinaryPrimitives.WriteUInt32BigEndian(_agfl.AsSpan(AgflLayout.OffBno + 4 * (int)last), agbno);
        SetAgfU32(AgfView.OffFllast, last);
        SetAgfU32(AgfView.OffFlcount, count + 1);
        SetAgfU32(AgfView.OffBtreeblks, AgfU32(AgfView.OffBtreeblks) - 1);
        if (kind == AgBtreeKind.ReverseMap) SetAgfU32(AgfView.OffRmapBlocks, AgfU32(AgfView.OffRmapBlocks) - 1);
    }

    void IAgBtreeHost.SetRoot(AgBtreeKind kind, uint root, int levels)
    {
        var (rootField, levelField) = RootFields(kind);
        SetAgfU32(rootField, root);
        SetAgfU32(levelField, (uint)levels);
    }

    /// <summary>Blocks freed through this editor so far.</summary>
    public long BlocksFreed { get; private set; }

    /// <summary>Makes [<paramref name="agbno"/>, +<paramref name="length"/>) free space, merged with free neighbours.</summary>
    public void FreeExtent(uint agbno, uint length)
    {
        if (length == 0 || agbno == 0 || (ulong)agbno + length > AgfU32(AgfView.OffLength))
            throw new XfsCorruptionException($"free space of AG {_agno} (AGF)", _agfOffset, $"cannot free blocks {agbno}+{length}: outside the AG");
        EnsureFreeList();
        var byBlock = ByBlock;
        Span<byte> key = stackalloc byte[8];
        uint end = agbno + length;

        // The free extent at or before agbno, and the one at or before the end.
        Rec(key, agbno, 0);
        var at = byBlock.FindLessOrEqual(key);
        (uint Start, uint Length)? left = null, right = null;
        if (at.LeafIndex >= 0)
        {
            var r = Decode(byBlock.RecordAt(at));
            if ((ulong)r.Start + r.Length > agbno)
                throw new XfsCorruptionException($"free space btree of AG {_agno} (AGF)", _agfOffset, $"blocks {agbno}+{length} are already free (bnobt record {r.Start}+{r.Length})");
            if (r.Start + r.Length == agbno) left = r;
        }
        var next = byBlock.RecordAfter(at); // with no record at or before agbno: the first record
        if (next is not null)
        {
            var r = Decode(next);
            if (r.Start < end)
                throw new XfsCorruptionException($"free space btree of AG {_agno} (AGF)", _agfOffset, $"blocks {agbno}+{length} overlap free space (bnobt record {r.Start}+{r.Length})");
            if (r.Start == end) right = r;
        }

        uint newStart = left?.Start ?? agbno;
        uint newLength = (left?.Length ?? 0) + length + (right?.Length ?? 0);

        // By block: the merged record replaces its neighbours.
        if (left is { } l)
        {
            if (right is { } r0) Delete(ByBlock, r0.Start, r0.Length);
            Replace(ByBlock, l.Start, l.Length, newStart, newLength);
        }
        else if (right is { } r1)
        {
            Replace(ByBlock, r1.Start, r1.Length, newStart, newLength);
        }
        else
        {
            Span<byte> rec = stackalloc byte[8];
            Rec(rec, newStart, newLength);
            ByBlock.Insert(rec);
        }

        // By count: neighbours leave, the merged extent enters at its size's place.
        if (left is { } l2) Delete(ByCount, l2.Start, l2.Length);
        if (right is { } r2) Delete(ByCount, r2.Start, r2.Length);
        Span<byte> merged = stackalloc byte[8];
        Rec(merged, newStart, newLength);
        ByCount.Insert(merged);

        SetAgfU32(AgfView.OffFreeblks, AgfU32(AgfView.OffFreeblks) + length);
        var longest = ByCount.LastRecord();
        SetAgfU32(AgfView.OffLongest, longest is null ? 0 : Decode(longest).Length);
        BlocksFreed += length;
    }

    /// <summary>
    /// Removes the reverse mapping of [<paramref name="agbno"/>, +<paramref name="length"/>) for
    /// <paramref name="owner"/>: file data at <paramref name="fileOffset"/> (with the attr-fork and
    /// unwritten flags in <paramref name="flags"/>), or extent-btree blocks (<see cref="RmapRecord.BmbtBlockFlag"/>).
    /// The mapping may be part of a longer record, which keeps the rest.
    /// </summary>
    public void UnmapReverse(uint agbno, uint length, ulong owner, ulong fileOffset, ulong flags)
    {
        if (!_sb.HasRmapbt) return;
        EnsureFreeList();
        var rmap = ReverseMap;
        // Extent-btree blocks and non-file owners (XFS_RMAP_OWN_*, small negative numbers) have no file offset.
        bool bmbt = (flags & RmapRecord.BmbtBlockFlag) != 0 || RmapRecord.IsNonInodeOwner(owner);
        Span<byte> key = stackalloc byte[20];
        BinaryPrimitives.WriteUInt32BigEndian(key, agbno);
        BinaryPrimitives.WriteUInt64BigEndian(key[4..], owner);
        BinaryPrimitives.WriteUInt64BigEndian(key[12..], (bmbt ? 0 : fileOffset) | (flags & ~RmapRecord.UnwrittenFlag));
        var pos = rmap.FindLessOrEqual(key);
        if (pos.LeafIndex < 0) throw NoMapping(agbno, length, owner);
        var rec = rmap.RecordAt(pos);
        uint start = BinaryPrimitives.ReadUInt32BigEndian(rec);
        uint count = BinaryPrimitives.ReadUInt32BigEndian(rec.AsSpan(4));
        ulong recOwner = BinaryPrimitives.ReadUInt64BigEndian(rec.AsSpan(8));
        ulong recOffsetField = BinaryPrimitives.ReadUInt64BigEndian(rec.AsSpan(16));
        ulong recFlags = recOffsetField & ~RmapRecord.OffsetMask;
        ulong recOffset = recOffsetField & RmapRecord.OffsetMask;
        const ulong forkAndBmbt = RmapRecord.AttrForkFlag | RmapRecord.BmbtBlockFlag;
        if (recOwner != owner || start > agbno || (ulong)start + count < (ulong)agbno + length ||
            (recFlags & forkAndBmbt) != (flags & forkAndBmbt) || (!bmbt && recOffset + (agbno - start) != fileOffset))
            throw NoMapping(agbno, length, owner);

        uint before = agbno - start, after = start + count - (agbno + length);
        var piece = new byte[24];
        if (before == 0 && after == 0)
        {
            rmap.Delete(pos);
            return;
        }
        if (before > 0)
        {
            rec.CopyTo(piece, 0);
            BinaryPrimitives.WriteUInt32BigEndian(piece.AsSpan(4), before);
            rmap.Update(pos, piece);
        }
        if (after > 0)
        {
            rec.CopyTo(piece, 0);
            BinaryPrimitives.WriteUInt32BigEndian(piece, agbno + length);
            BinaryPrimitives.WriteUInt32BigEndian(piece.AsSpan(4), after);
            if (!bmbt) BinaryPrimitives.WriteUInt64BigEndian(piece.AsSpan(16), (recOffset + before + length) | recFlags);
            if (before > 0) rmap.Insert(piece);
            else rmap.Update(pos, piece);
        }
    }

    private bool _refilling;

    /// <summary>The kernel's xfs_alloc_min_freelist: two blocks per level a split could add to the bno, cnt and rmap trees.</summary>
    private uint MinFreeList() =>
        2 * AgfU32(AgfView.OffBnoLevel) + 2 * AgfU32(AgfView.OffCntLevel) + (_sb.HasRmapbt ? 2 * AgfU32(AgfView.OffRmapLevel) : 0);

    /// <summary>
    /// Brings the free list to its minimum before a tree change, as xfs_alloc_fix_freelist does:
    /// blocks beyond it go back to free space (from the head of the list, losing their OWN_AG
    /// mapping), so the blocks joins park there never overflow the list; missing blocks come from
    /// the smallest free extent that holds them (or the largest there is), gaining an OWN_AG mapping,
    /// so splits always find blocks.
    /// </summary>
    private void EnsureFreeList()
    {
        if (_refilling) return;
        _refilling = true;
        Span<byte> key = stackalloc byte[8];
        try
        {
            for (int guard = 0; guard < 64; guard++)
            {
                uint need = MinFreeList(), count = AgfU32(AgfView.OffFlcount);
                if (count > need)
                {
                    TrimOne();
                    continue;
                }
                if (count == need) return;
                uint want = need - count;
                Rec(key, 0, want);
                var byCount = ByCount;
                var at = byCount.FindLessOrEqual(key);
                var pick = byCount.RecordAfter(at) ?? byCount.LastRecord();
                if (pick is null) throw new XfsException(XfsError.Unsupported, $"AG {_agno} has no free space to refill its free list");
                var (start, length) = Decode(pick);
                uint take = Math.Min(want, length);
                TakeFromFreeSpace(start, length, take);
                MapOwner(start, take, RmapRecord.OwnAg);
                for (uint b = start; b < start + take; b++)
                {
                    uint last = (AgfU32(AgfView.OffFllast) + 1) % (uint)_agflSlots;
                    BinaryPrimitives.WriteUInt32BigEndian(_agfl.AsSpan(AgflLayout.OffBno + 4 * (int)last), b);
                    SetAgfU32(AgfView.OffFllast, last);
                    SetAgfU32(AgfView.OffFlcount, AgfU32(AgfView.OffFlcount) + 1);
                }
            }
            throw new XfsCorruptionException($"AGF of AG {_agno}", _agfOffset, "the free list does not fill up to its minimum");
        }
        finally
        {
            _refilling = false;
        }
    }

    /// <summary>Removes the first <paramref name="take"/> blocks of free extent (<paramref name="start"/>, <paramref name="length"/>) from both trees and the AGF counters.</summary>
    private void TakeFromFreeSpace(uint start, uint length, uint take)
    {
        if (take == length) Delete(ByBlock, start, length);
        else Replace(ByBlock, start, length, start + take, length - take);
        Delete(ByCount, start, length);
        if (take < length)
        {
            Span<byte> rest = stackalloc byte[8];
            Rec(rest, start + take, length - take);
            ByCount.Insert(rest);
        }
        SetAgfU32(AgfView.OffFreeblks, AgfU32(AgfView.OffFreeblks) - take);
        var longest = ByCount.LastRecord();
        SetAgfU32(AgfView.OffLongest, longest is null ? 0 : Decode(longest).Length);
    }

    /// <summary>
    /// One block from free space for a tree that is not fed by the AGFL (the inode btrees), with
    /// its reverse mapping to <paramref name="owner"/>: the first block of the smallest free extent.
    /// </summary>
    public uint AllocateBlock(ulong owner)
    {
        EnsureFreeList();
        Span<byte> key = stackalloc byte[8];
        Rec(key, 0, 1);
        var byCount = ByCount;
        var pick = byCount.RecordAfter(byCount.FindLessOrEqual(key))
                   ?? throw new XfsException(XfsError.Unsupported, $"AG {_agno} has no free block for an inode btree block");
        var (start, length) = Decode(pick);
        TakeFromFreeSpace(start, length, 1);
        MapOwner(start, 1, owner);
        return start;
    }

    /// <summary>
    /// Adds the reverse mapping of [<paramref name="agbno"/>, +<paramref name="length"/>) to a
    /// non-file owner (XFS_RMAP_OWN_*), merged with neighbours of the same owner (xfs_rmap_map).
    /// </summary>
    private void MapOwner(uint agbno, uint length, ulong owner)
    {
        if (!_sb.HasRmapbt) return;
        var rmap = ReverseMap;
        Span<byte> key = stackalloc byte[20];
        BinaryPrimitives.WriteUInt32BigEndian(key, agbno);
        BinaryPrimitives.WriteUInt64BigEndian(key[4..], owner);
        BinaryPrimitives.WriteUInt64BigEndian(key[12..], 0);
        var pos = rmap.FindLessOrEqual(key);
        byte[]? left = pos.LeafIndex >= 0 ? rmap.RecordAt(pos) : null;
        byte[]? right = rmap.RecordAfter(pos);
        bool IsAg(byte[]? r) => r is not null && BinaryPrimitives.ReadUInt64BigEndian(r.AsSpan(8)) == owner;
        static uint Start(byte[] r) => BinaryPrimitives.ReadUInt32BigEndian(r);
        static uint Count(byte[] r) => BinaryPrimitives.ReadUInt32BigEndian(r.AsSpan(4));
        if (left is not null && (ulong)Start(left) + Count(left) > agbno)
            throw new XfsCorruptionException($"reverse mapping btree of AG {_agno} (AGF)", _agfOffset, $"free blocks {agbno}+{length} already have a reverse mapping");
        bool mergeLeft = IsAg(left) && Start(left!) + Count(left!) == agbno;
        bool mergeRight = IsAg(right) && Start(right!) == agbno + length;
        var record = new byte[24];
        if (mergeLeft)
        {
            left!.CopyTo(record, 0);
            BinaryPrimitives.WriteUInt32BigEndian(record.AsSpan(4), Count(left) + length + (mergeRight ? Count(right!) : 0));
            if (mergeRight)
            {
                BinaryPrimitives.WriteUInt32BigEndian(key, Start(right!));
                rmap.Delete(rmap.FindLessOrEqual(key));
                BinaryPrimitives.WriteUInt32BigEndian(key, Start(left));
                pos = rmap.FindLessOrEqual(key);
            }
            rmap.Update(pos, record);
        }
        else if (mergeRight)
        {
            right!.CopyTo(record, 0);
            BinaryPrimitives.WriteUInt32BigEndian(record, agbno);
            BinaryPrimitives.WriteUInt32BigEndian(record.AsSpan(4), Count(right) + length);
            BinaryPrimitives.WriteUInt32BigEndian(key, Start(right));
            rmap.Update(rmap.FindLessOrEqual(key), record);
        }
        else
        {
            BinaryPrimitives.WriteUInt32BigEndian(record, agbno);
            BinaryPrimitives.WriteUInt32BigEndian(record.AsSpan(4), length);
            BinaryPrimitives.WriteUInt64BigEndian(record.AsSpan(8), owner);
            rmap.Insert(record);
        }
    }

    /// <summary>Leaves the free list at the kernel's minimum (see <see cref="EnsureFreeList"/>); call before <see cref="Commit"/>.</summary>
    public void TrimFreeList() => EnsureFreeList();

    /// <summary>Moves the block at the head of the free list to free space (inside <see cref="EnsureFreeList"/>: no nested fix-up).</summary>
    private void TrimOne()
    {
        uint first = AgfU32(AgfView.OffFlfirst);
        uint bno = BinaryPrimitives.ReadUInt32BigEndian(_agfl.AsSpan(AgflLayout.OffBno + 4 * (int)first));
        SetAgfU32(AgfView.OffFlfirst, (first + 1) % (uint)_agflSlots);
        SetAgfU32(AgfView.OffFlcount, AgfU32(AgfView.OffFlcount) - 1);
        UnmapReverse(bno, 1, RmapRecord.OwnAg, 0, 0);
        FreeExtent(bno, 1);
        BlocksFreed--; // not a file's block: it only moved from the free list to free space
    }

    /// <summary>
    /// Removes every copy-on-write staging extent of the AG, as the kernel's xfs_reflink_recover_cow does at
    /// mount: staging extents hold no file data once the system stopped (the writes that used them either
    /// finished remapping them into their files or never completed). Each is freed, loses its OWN_COW
    /// mapping and its record in the CoW domain of the refcount btree. Returns how many there were.
    /// </summary>
    public int RemoveCowStaging()
    {
        if (!_sb.HasReflink) return 0;
        int removed = 0;
        Span<byte> key = stackalloc byte[4];
        for (int guard = 0; guard < 10_000_000; guard++)
        {
            var tree = RefCounts;
            var last = tree.LastRecord();
            if (last is null) return removed;
            uint start = BinaryPrimitives.ReadUInt32BigEndian(last);
            if ((start & RefcountRecord.CowFlag) == 0) return removed;
            uint length = BinaryPrimitives.ReadUInt32BigEndian(last.AsSpan(4));
            BinaryPrimitives.WriteUInt32BigEndian(key, start);
            var pos = tree.FindLessOrEqual(key);
            if (pos.LeafIndex < 0 || !tree.RecordAt(pos).AsSpan().SequenceEqual(last))
                throw new XfsCorruptionException($"{tree.Name} of AG {_agno} (AGF)", _agfOffset, "its last record cannot be found again");
            tree.Delete(pos);
            UnmapReverse(start & ~RefcountRecord.CowFlag, length, RmapRecord.OwnCow, 0, 0);
            FreeExtent(start & ~RefcountRecord.CowFlag, length);
            BlocksFreed -= length; // staging blocks, not a file's
            removed++;
        }
        throw new XfsCorruptionException($"refcount btree of AG {_agno} (AGF)", _agfOffset, "the CoW staging records do not run out");
    }

    private AgBtreeEditor RefCounts => new(_changes, _sb, _agno, AgBtreeKind.RefCount, AgfU32(AgfView.OffRefcountRoot), (int)AgfU32(AgfView.OffRefcountLevel), this);

    /// <summary>Logs the AGF and AGFL (counters, roots and free list changed through this editor) in its change set.</summary>
    public void Commit()
    {
        _changes.LogRange(_agflOffset, _sb.SectorSize, 0, _sb.SectorSize - 1);
        _changes.LogRange(_agfOffset, _sb.SectorSize, 0, _sb.SectorSize - 1);
    }

    private XfsCorruptionException NoMapping(uint agbno, uint length, ulong owner) =>
        new($"reverse mapping btree of AG {_agno} (AGF)", _agfOffset, $"no record for blocks {agbno}+{length} of owner {owner}");

    private void Delete(AgBtreeEditor tree, uint start, uint length) => tree.Delete(Exact(tree, start, length));

    private void Replace(AgBtreeEditor tree, uint start, uint length, uint newStart, uint newLength)
    {
        var pos = Exact(tree, start, length);
        Span<byte> rec = stackalloc byte[8];
        Rec(rec, newStart, newLength);
        tree.Update(pos, rec);
    }

    private AgBtreeEditor.Position Exact(AgBtreeEditor tree, uint start, uint length)
    {
        Span<byte> key = stackalloc byte[8];
        Rec(key, start, length);
        var pos = tree.FindLessOrEqual(key);
        if (pos.LeafIndex < 0 || Decode(tree.RecordAt(pos)) != (start, length))
            throw new XfsCorruptionException($"{tree.Name} of AG {_agno} (AGF)", _agfOffset, $"no record for free extent {start}+{length}");
        return pos;
    }

    private static void Rec(Span<byte> rec, uint start, uint length)
    {
        BinaryPrimitives.WriteUInt32BigEndian(rec, start);
        BinaryPrimitives.WriteUInt32BigEndian(rec[4..], length);
    }

    private static (uint Start, uint Length) Decode(ReadOnlySpan<byte> rec) =>
        (BinaryPrimitives.ReadUInt32BigEndian(rec), BinaryPrimitives.ReadUInt32BigEndian(rec[4..]));
}

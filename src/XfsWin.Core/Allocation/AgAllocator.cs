using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Allocation;

/// <summary>
/// The space allocator of a read-write volume (the kernel's xfs_alloc.c with xfs_rmap.c, xfs_extent_busy.c and
/// xfs_ag_resv.c behind it). Every change goes through a <see cref="Transaction"/>: the AGF, the AGFL, the free-space
/// trees (bnobt, cntbt) and the reverse-map tree (rmapbt, where the volume has one) are joined, changed with
/// <see cref="BtreeCursor{TOps}"/> and logged; in-core state follows at commit.
/// <para>
/// Per AG it keeps the committed AGF counters (free blocks, longest extent, AGFL count, tree blocks), the busy
/// extents (freed, not reusable until the freeing transaction's checkpoint is on disk), and the reservations the
/// AG's trees may grow into. Per volume it keeps <see cref="FreeBlocks"/>, the superblock's fdblocks exactly as the
/// kernel's lazy counters do (Σ agf_freeblks + agf_flcount + agf_btreeblks, moved by each transaction at commit),
/// which whoever unmounts writes to the primary superblock (<see cref="LogSuperblockCounters"/>).
/// </para>
/// <para>
/// Locks, in the order they are taken: the AG header buffers a transaction joins, held until it commits or cancels
/// (these are the per-AG allocation locks: one transaction at a time changes an AG's space) in ascending AG order,
/// the AGI before the AGF of one AG, then the AGFL and tree blocks; then an AG's in-core lock
/// (<see cref="AgState.Sync"/>), a leaf lock held only to read or change in-core state, never while waiting for a
/// buffer or the log; then the log's lock (inside <see cref="MountedLog.Force"/>). An allocation that may cross AGs
/// while its transaction already holds an AGF only moves upwards from the highest AG it holds.
/// </para>
/// </summary>
public sealed class AgAllocator
{
    private readonly MountContext _mount;
    private readonly Superblock _sb;
    private readonly MountedLog _log;
    // Replaced whole (never shrunk) by an online grow, before the superblock shows the new AG count.
    private volatile AgState[] _ags;
    private readonly int _agflSlots;
    private readonly uint _firstUsable;
    private readonly int _allocMaxLevels, _rmapMaxLevels;
    private long _freeBlocks;
    private int _rotor;

    /// <summary>Committed in-core state of one AG. Guarded by <see cref="Sync"/>.</summary>
    internal sealed class AgState(uint agno)
    {
        public readonly object Sync = new();
        public readonly uint Agno = agno;
        public uint Length, FreeBlocks, Longest, FlCount, BtreeBlocks, RmapBlocks, RefcountBlocks;
        public uint MetadataAsk, RmapAsk;
        public readonly BusyExtents Busy = new();
        /// <summary>The durable checkpoint sequence <see cref="Busy"/> was last pruned to.</summary>
        public long BusyPrunedTo;
        /// <summary>Objects every transaction joining the AG uses, made once (none holds state of a transaction).</summary>
        public IBufferWriteVerifier? AgfWrite, AgflWrite;
        public FreeListSpace? FreeList, RmapFreeList;

        /// <summary>Drops the busy extents whose checkpoint is durable now, unless none became durable since the last time. Caller holds <see cref="Sync"/>.</summary>
        public void PruneBusyLocked(long durable)
        {
            if (durable <= BusyPrunedTo) return;
            Busy.Prune(durable);
            BusyPrunedTo = durable;
        }
    }

    /// <summary>
    /// One transaction's view of the AGs it joined, from the first AG it joins in a part to that part's commit or
    /// cancel. Kept with the transaction object (<see cref="Transaction.Scratch{T}"/>), so a pooled transaction reuses
    /// it, its table and its <see cref="AgWork"/> objects part after part.
    /// </summary>
    private sealed class TxWork : ITransactionScratch, ICommitCallback
    {
        public readonly Dictionary<uint, AgWork> Ags = new();
        public int HighestAgf = -1;
        /// <summary>The allocator whose part is open in the transaction (null between parts).</summary>
        public AgAllocator? Owner;
        private Transaction? _tx;
        private Action? _cancelled;
        public Transaction Transaction => _tx!;
        private readonly Stack<AgWork> _spare = new();

        /// <summary>Opens this view for the current part of <paramref name="tx"/>: it ends with the part's commit or cancel.</summary>
        public void Begin(AgAllocator owner, Transaction tx)
        {
            Owner = owner;
            if (!ReferenceEquals(tx, _tx))
            {
                _tx = tx;
                _cancelled = Cancelled;
            }
            tx.OnCommit(this);
            tx.OnCancel(_cancelled!);
        }

        public AgWork NewAg(uint agno, MetadataBuffer agf) =>
            _spare.TryPop(out var w) ? w.Reset(agno, agf) : new AgWork(agno, agf);

        /// <summary>
        /// Takes back the join of an AG that this transaction has not changed: its AGF is unlocked at once (released,
        /// as the kernel's xfs_trans_brelse), and the AG no longer counts for the lock order, which falls back to
        /// <paramref name="highestBefore"/>.
        /// </summary>
        public void Forget(uint agno, int highestBefore)
        {
            if (Ags.Remove(agno, out var w))
            {
                _tx!.Release(w.Agf);
                _spare.Push(w.Reset(0, null));
            }
            HighestAgf = highestBefore;
        }

        void ICommitCallback.Committed()
        {
            Owner?.Committed(_tx!, this);
            End();
        }

        private void Cancelled()
        {
            Owner?.Cancelled(this);
            End();
        }

        private void End()
        {
            foreach (var w in Ags.Values) _spare.Push(w.Reset(0, null));
            Ags.Clear();
            HighestAgf = -1;
            Owner = null;
        }

        void ITransactionScratch.TransactionEnded()
        {
            if (Owner is not null) End();
        }
    }

    /// <summary>One AG inside one transaction: its joined AGF (and AGFL), the tree stores, and what it started with.</summary>
    internal sealed class AgWork(uint agno, MetadataBuffer agf)
    {
        public uint Agno { get; private set; } = agno;
        public MetadataBuffer Agf { get; private set; } = agf;
        /// <summary>
        /// What this transaction's changes to the AGF's free, free-list and btree block counts add up to (kept by
        /// <see cref="SetAgf"/>, their only writer): the free blocks the volume gains or loses when the part commits.
        /// </summary>
        public long SumDelta;
        public MetadataBuffer? Agfl;
        public TransactionBtreeStore? Bno, Cnt, Rmap, Refcount;
        public bool BusySkipped;
        /// <summary>The request's window of AG blocks (<see cref="AllocationRequest.MinAgBlock"/>, <see cref="AllocationRequest.EndAgBlock"/>): what a search weighs is clipped to it.</summary>
        public uint WindowStart, WindowEnd = uint.MaxValue;
        /// <summary>The parts of one free extent that are not busy, as a search weighs it (filled and used by one candidate at a time).</summary>
        public readonly List<(uint Start, uint Length)> FreeParts = new();

        /// <summary>Makes this object the view of another AG (or, with a null AGF, drops every reference to buffers and stores).</summary>
        public AgWork Reset(uint agno, MetadataBuffer? agf)
        {
            Agno = agno;
            Agf = agf!;
            SumDelta = 0;
            Agfl = null;
            Bno = Cnt = Rmap = Refcount = null;
            BusySkipped = false;
            WindowStart = 0;
            WindowEnd = uint.MaxValue;
            return this;
        }
    }

    public AgAllocator(MountContext mount, MountedLog log)
    {
        _mount = mount;
        _sb = mount.Superblock;
        _log = log;
        if (!_sb.IsV5) throw new XfsException(XfsError.Unsupported, "the allocator writes V5 (CRC) volumes only; this volume stays read-only");
        _agflSlots = (_sb.SectorSize - AgflLayout.SizeV5) / 4;
        _firstUsable = (uint)((4L * _sb.SectorSize + _sb.BlockSize - 1) / _sb.BlockSize);
        int bs = (int)_sb.BlockSize;
        // The kernel's m_alloc_maxlevels / m_rmap_maxlevels: the tallest tree that can hold an AG's worth of records at minimum fill.
        _allocMaxLevels = MaxLevels((bs - 56) / 8 / 2, (bs - 56) / 12 / 2, (_sb.AgBlocks + 1) / 2);
        _rmapMaxLevels = _sb.HasReflink
            ? MaxLevels((bs - 56) / 24 / 2, (bs - 56) / 44 / 2, uint.MaxValue)
            : MaxLevels((bs - 56) / 24 / 2, (bs - 56) / 44 / 2, _sb.AgBlocks);
        _ags = new AgState[_sb.AgCount];
        long sum = 0;
        for (uint ag = 0; ag < _sb.AgCount; ag++)
        {
            var s = _ags[ag] = new AgState(ag);
            var agf = ReadCommittedAgf(ag);
            LoadCommitted(s, agf);
            s.Length = U32(agf, AgfView.OffLength);
            ComputeReservationAsks(s);
            sum += (long)s.FreeBlocks + s.FlCount + s.BtreeBlocks;
        }
        _freeBlocks = sum;
        ExtentFrees = new ExtentFreeWork(this);
        RmapUpdates = new RmapUpdateWork(this);
        RefcountUpdates = new RefcountUpdateWork(this);
    }

    public Superblock Superblock => _sb;

    /// <summary>Extent frees as deferred work (EFI/EFD).</summary>
    public ExtentFreeWork ExtentFrees { get; }

    /// <summary>Reverse-map updates of file mappings as deferred work (RUI/RUD).</summary>
    public RmapUpdateWork RmapUpdates { get; }

    /// <summary>Reference-count updates as deferred work (CUI/CUD).</summary>
    public RefcountUpdateWork RefcountUpdates { get; }

    /// <summary>
    /// An online grow or tail shrink committed and wrote in place: the old last AG's AGF (longer with more free space,
    /// or shorter with less) and the AGFs of AGs <c>[old count, <paramref name="newAgCount"/>)</c>. Their committed
    /// state is read again from disk (the caller dropped the cached headers), the new AGs join, and
    /// <see cref="FreeBlocks"/> moves by the difference. Busy extents past a shortened AG's end are dropped (the space
    /// is gone). Called with every change to the volume excluded (no transaction joined any AG) and the log forced,
    /// before the superblock shows the new size.
    /// </summary>
    internal void Resized(uint newAgCount)
    {
        var old = _ags;
        if (newAgCount < old.Length) throw new InvalidOperationException("AGs are never removed while mounted");
        var ags = new AgState[newAgCount];
        Array.Copy(old, ags, old.Length);
        long delta = 0;
        for (uint ag = (uint)old.Length - 1; ag < newAgCount; ag++)
        {
            var s = ags[ag] ??= new AgState(ag);
            var agf = ReadCommittedAgf(ag);
            lock (s.Sync)
            {
                delta -= (long)s.FreeBlocks + s.FlCount + s.BtreeBlocks;
                LoadCommitted(s, agf);
                s.Length = U32(agf, AgfView.OffLength);
                s.Busy.Remove(s.Length, uint.MaxValue - s.Length);
                ComputeReservationAsks(s);
                delta += (long)s.FreeBlocks + s.FlCount + s.BtreeBlocks;
            }
        }
        _ags = ags;
        Interlocked.Add(ref _freeBlocks, delta);
    }

    /// <summary>The superblock's free block count (sb_fdblocks), exact: what the committed AGFs add up to.</summary>
    public long FreeBlocks => Interlocked.Read(ref _freeBlocks);

    /// <summary>Free blocks ordinary allocations may use: <see cref="FreeBlocks"/> less what the AG reservations hold back.</summary>
    public long AvailableBlocks
    {
        get
        {
            long reserved = 0;
            for (uint ag = 0; ag < _ags.Length; ag++) reserved += AgInfo(ag).ReservedBlocks;
            return Math.Max(0, FreeBlocks - reserved);
        }
    }

    /// <summary>Σ agf_freeblks: the free extents' blocks (what xfs_db freesp counts).</summary>
    public long FreeExtentBlocks
    {
        get
        {
            long sum = 0;
            foreach (var s in _ags) lock (s.Sync) sum += s.FreeBlocks;
            return sum;
        }
    }

    public AgSpaceInfo AgInfo(uint agno)
    {
        var s = _ags[agno];
        lock (s.Sync)
        {
            uint reserved = Remaining(s.MetadataAsk, s.RefcountBlocks + FinobtBlocks(agno)) + Remaining(s.RmapAsk, s.RmapBlocks);
            return new AgSpaceInfo(agno, s.FreeBlocks, s.Longest, s.FlCount, s.BtreeBlocks, s.RmapBlocks, s.Busy.Count, reserved);
        }
    }

    // ---- public operations ----------------------------------------------------------------------

    /// <summary>
    /// Allocates between <see cref="AllocationRequest.MinLength"/> and <see cref="AllocationRequest.MaxLength"/>
    /// blocks in <paramref name="tx"/>, with the reverse mapping for the request's owner. Throws
    /// <see cref="XfsException"/> (<see cref="XfsError.NoSpace"/>) when no AG it may use has room; the transaction
    /// then holds only consistent changes (AGFL fixes) and may be committed or cancelled.
    /// </summary>
    public AllocatedExtent Allocate(Transaction tx, AllocationRequest request) =>
        TryAllocate(tx, request) ?? throw new XfsException(XfsError.NoSpace,
            $"no space left on the volume: {request.MinLength} block(s) wanted" +
            (request.Scope == AllocationScope.ThisAg ? $" in AG {AgOf(request.Target)}" : "") +
            $", {AvailableBlocks} of {FreeBlocks} free blocks usable and none in a large enough extent; free some space and retry");

    /// <summary>As <see cref="Allocate"/>, but null when there is no room.</summary>
    public AllocatedExtent? TryAllocate(Transaction tx, AllocationRequest request)
    {
        Validate(request);
        var work = WorkOf(tx);
        uint targetAg = AgOf(request.Target);
        uint targetBno = (uint)(request.Target & ((1UL << _sb.AgBlkLog) - 1));
        if (targetAg >= _sb.AgCount) throw new ArgumentOutOfRangeException(nameof(request), $"target block {request.Target} is outside the volume");

        // AGs in the order the kernel tries them; never below an AGF this transaction already holds (lock order): the
        // target AG alone, or from the first AG allowed up to the last, then (only for a transaction holding no AGF
        // yet) around from AG 0 up to that first one.
        uint first = targetAg;
        if (request.Scope != AllocationScope.ThisAg && work.HighestAgf > (int)first) first = (uint)work.HighestAgf;
        uint tries;
        if (request.Scope == AllocationScope.ThisAg)
        {
            if (work.HighestAgf > (int)targetAg && !work.Ags.ContainsKey(targetAg))
                throw new InvalidOperationException($"allocation in AG {targetAg} while the transaction holds the AGF of AG {work.HighestAgf}: AGFs are locked in ascending order");
            tries = 1;
        }
        else tries = request.Scope == AllocationScope.StartAg && work.HighestAgf < 0 ? _sb.AgCount : _sb.AgCount - first;

        for (uint i = 0; i < tries; i++)
        {
            uint ag = (first + i) % _sb.AgCount;
            var r = TryAllocateInAg(tx, work, ag, ag == targetAg ? request.Mode : AllocationMode.BySize, ag == targetAg ? targetBno : 0, request);
            if (r is not null)
            {
                Interlocked.Exchange(ref _rotor, (int)((ag + 1) % _sb.AgCount));
                return r;
            }
            if (request.Mode == AllocationMode.Exact) break; // exact means this block or nothing
        }
        return null;
    }

    /// <summary>The highest AG whose AGF <paramref name="tx"/> holds, or -1: it may allocate or free only there and above (lock order).</summary>
    public int HighestAgLocked(Transaction tx) => tx.Scratch<TxWork>() is { Owner: not null } w && ReferenceEquals(w.Owner, this) ? w.HighestAgf : -1;

    /// <summary>A target for an allocation with no locality wish: the AG after the last one allocated from (the kernel's rotor).</summary>
    public ulong RotorTarget => (ulong)(uint)Volatile.Read(ref _rotor) << _sb.AgBlkLog;

    /// <summary>Frees <paramref name="length"/> blocks at file system block <paramref name="startBlock"/>, removing <paramref name="owner"/>'s reverse mapping.</summary>
    public void Free(Transaction tx, ulong startBlock, uint length, RmapOwner owner) =>
        FreeInAg(tx, AgOf(startBlock), (uint)(startBlock & ((1UL << _sb.AgBlkLog) - 1)), length, owner);

    /// <summary>
    /// Frees an extent of one AG (xfs_free_extent): merged with its neighbours in both free-space trees, its
    /// reverse mapping removed (split where it covered more), and marked busy until this transaction's checkpoint
    /// is on disk.
    /// </summary>
    public void FreeInAg(Transaction tx, uint agno, uint agbno, uint length, RmapOwner owner)
    {
        if (agno >= _sb.AgCount) throw new ArgumentOutOfRangeException(nameof(agno), $"AG {agno} does not exist");
        var s = _ags[agno];
        if (length == 0 || agbno < _firstUsable || (ulong)agbno + length > s.Length)
            throw new ArgumentOutOfRangeException(nameof(agbno), $"extent {agbno}+{length} is not inside the usable blocks of AG {agno}");
        var work = WorkOf(tx);
        if (work.HighestAgf > (int)agno && !work.Ags.ContainsKey(agno))
            throw new InvalidOperationException($"free in AG {agno} while the transaction holds the AGF of AG {work.HighestAgf}: AGFs are locked in ascending order");
        var w = Join(tx, work, agno);
        FixFreelist(tx, w, freeing: true);
        if (_sb.HasRmapbt && !owner.SkipsReverseMap)
        {
            if (owner.Owner == RmapRecord.OwnUnknown) ReverseMap.UnmapAny(this, tx, w, agbno, length);
            else ReverseMap.Unmap(this, tx, w, agbno, length, owner);
        }
        FreeExtentInTrees(tx, w, agbno, length);
        lock (s.Sync) s.Busy.Add(agbno, length, tx);
    }

    /// <summary>
    /// The reverse-map half of a mapping change made elsewhere (the work of an rmap intent, xfs_rmap_finish_one): adds
    /// (<see cref="RmapUpdateKind.Map"/>, <see cref="RmapUpdateKind.Alloc"/>), removes, or converts between written and
    /// unwritten (the owner's flags give the new state) <paramref name="owner"/>'s mapping of <paramref name="length"/>
    /// blocks at <paramref name="startBlock"/>, merging and splitting records as the kernel does. The AGFL is fixed first:
    /// the rmapbt takes its blocks from it.
    /// </summary>
    public void UpdateReverseMap(Transaction tx, RmapUpdateKind kind, ulong startBlock, uint length, RmapOwner owner)
    {
        if (!_sb.HasRmapbt) throw new InvalidOperationException("a reverse-map update on a volume without an rmapbt");
        uint agno = AgOf(startBlock);
        uint agbno = (uint)(startBlock & ((1UL << _sb.AgBlkLog) - 1));
        if (agno >= _sb.AgCount || length == 0 || (ulong)agbno + length > _ags[agno].Length)
            throw new ArgumentOutOfRangeException(nameof(startBlock), $"extent {startBlock}+{length} is not inside the volume");
        var work = WorkOf(tx);
        if (work.HighestAgf > (int)agno && !work.Ags.ContainsKey(agno))
            throw new InvalidOperationException($"rmap update in AG {agno} while the transaction holds the AGF of AG {work.HighestAgf}: AGFs are locked in ascending order");
        var w = Join(tx, work, agno);
        FixFreelist(tx, w, freeing: true);
        switch (kind)
        {
            case RmapUpdateKind.Map or RmapUpdateKind.MapShared or RmapUpdateKind.Alloc:
                ReverseMap.Map(this, tx, w, agbno, length, owner);
                break;
            case RmapUpdateKind.Unmap or RmapUpdateKind.UnmapShared or RmapUpdateKind.Free:
                ReverseMap.Unmap(this, tx, w, agbno, length, owner);
                break;
            case RmapUpdateKind.Convert or RmapUpdateKind.ConvertShared:
                // From the other state to the owner's: the part leaves its record (split as needed) and joins its new neighbours.
                ReverseMap.Unmap(this, tx, w, agbno, length, owner with { Flags = owner.Flags ^ RmapFlags.Unwritten });
                ReverseMap.Map(this, tx, w, agbno, length, owner);
                break;
            default:
                throw new ArgumentOutOfRangeException(nameof(kind), $"rmap update kind {kind}");
        }
    }

    /// <summary>
    /// The refcount-btree half of sharing and copy-on-write (the work of a refcount intent, xfs_refcount_finish_one):
    /// counts go up or down by one over the extent (blocks no file uses any more are freed through an EFI), or a
    /// copy-on-write staging extent is added or removed. Returns what is left of the update when it touched so many
    /// records that the rest needs a fresh transaction.
    /// </summary>
    public RefcountUpdate? UpdateRefcount(Transaction tx, RefcountUpdate update)
    {
        if (!_sb.HasReflink) throw new InvalidOperationException("a refcount update on a volume without a refcount btree");
        uint agno = AgOf(update.StartBlock);
        uint agbno = (uint)(update.StartBlock & ((1UL << _sb.AgBlkLog) - 1));
        if (agno >= _sb.AgCount || update.Length == 0 || (ulong)agbno + update.Length > _ags[agno].Length)
            throw new ArgumentOutOfRangeException(nameof(update), $"extent {update.StartBlock}+{update.Length} is not inside the volume");
        var work = WorkOf(tx);
        if (work.HighestAgf > (int)agno && !work.Ags.ContainsKey(agno))
            throw new InvalidOperationException($"refcount update in AG {agno} while the transaction holds the AGF of AG {work.HighestAgf}: AGFs are locked in ascending order");
        var w = Join(tx, work, agno);
        FixFreelist(tx, w, freeing: true);
        switch (update.Kind)
        {
            case RefcountUpdateKind.Increase or RefcountUpdateKind.Decrease:
                var rest = ReferenceCounts.Adjust(this, tx, w, agbno, update.Length, update.Kind == RefcountUpdateKind.Increase ? 1 : -1);
                return rest is { } r ? update with { StartBlock = Fsb(agno, r.Bno), Length = r.Len } : null;
            case RefcountUpdateKind.AllocCow:
                ReferenceCounts.AllocCow(this, tx, w, agbno, update.Length);
                return null;
            case RefcountUpdateKind.FreeCow:
                ReferenceCounts.FreeCow(this, tx, w, agbno, update.Length);
                return null;
            default:
                throw new ArgumentOutOfRangeException(nameof(update), $"refcount update kind {update.Kind}");
        }
    }

    /// <summary>
    /// The shared runs (reference count two or more) of the extent at <paramref name="startBlock"/>, read in
    /// <paramref name="tx"/> (which joins the AG's AGF); empty on a volume without a refcount btree.
    /// </summary>
    public List<(ulong StartBlock, uint Length)> SharedRuns(Transaction tx, ulong startBlock, uint length)
    {
        var found = new List<(ulong, uint)>();
        if (!_sb.HasReflink || length == 0) return found;
        uint agno = AgOf(startBlock);
        uint agbno = (uint)(startBlock & ((1UL << _sb.AgBlkLog) - 1));
        if (agno >= _sb.AgCount || (ulong)agbno + length > _ags[agno].Length)
            throw new ArgumentOutOfRangeException(nameof(startBlock), $"extent {startBlock}+{length} is not inside the volume");
        var w = Join(tx, WorkOf(tx), agno);
        foreach (var (bno, len) in ReferenceCounts.SharedRuns(this, tx, w, agbno, length)) found.Add((Fsb(agno, bno), len));
        return found;
    }

    /// <summary>The copy-on-write staging extents of AG <paramref name="agno"/> (records of the refcount btree's CoW domain), read in <paramref name="tx"/>.</summary>
    public List<(ulong StartBlock, uint Length)> CowStagingExtents(Transaction tx, uint agno)
    {
        var found = new List<(ulong, uint)>();
        if (!_sb.HasReflink) return found;
        var w = Join(tx, WorkOf(tx), agno);
        var cur = RefcountStore(tx, w).Cursor<RefcountbtOps>();
        Span<byte> key = stackalloc byte[RefcountRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(key, RefcountRecord.CowFlag);
        for (bool ok = cur.Lookup(key, BtreeLookup.GreaterOrEqual); ok; ok = cur.Increment())
        {
            uint start = BinaryPrimitives.ReadUInt32BigEndian(cur.Record);
            if ((start & RefcountRecord.CowFlag) == 0) continue;
            found.Add((Fsb(agno, start & ~RefcountRecord.CowFlag), BinaryPrimitives.ReadUInt32BigEndian(cur.Record[4..])));
        }
        return found;
    }

    /// <summary>
    /// The tail shrink of AG <paramref name="agno"/> (xfs_ag_shrink_space) inside <paramref name="tx"/>: with the AG's
    /// reservations set aside (the kernel frees them for the shrink), its free list is fixed as for any allocation,
    /// then blocks [length − <paramref name="delta"/>, length) are taken exactly from free space with no reverse mapping
    /// (the space stops existing), and the AGI's and AGF's lengths shrink. The in-core length follows only through
    /// <see cref="Resized"/> once the change is written in place. The caller checked the kernel's limits first; a tail
    /// that is not free throws <see cref="XfsError.NoSpace"/> (cancel the transaction then).
    /// </summary>
    internal void RemoveTail(Transaction tx, uint agno, uint delta)
    {
        var work = WorkOf(tx);
        if (work.Ags.Count > 0) throw new InvalidOperationException("a tail shrink runs in a transaction of its own");
        // Lock order: the AGI before the AGF.
        var agiVerifier = new AgiBufferVerifier(_sb, agno);
        var agi = tx.Read(AgfOffset(agno) + _sb.SectorSize, _sb.SectorSize, agno, agiVerifier, agiVerifier.ForWrite(), BufType.Agi);
        var w = Join(tx, work, agno);
        var s = _ags[agno];
        uint length = U32(w.Agf.Contents, AgfView.OffLength);
        if (U32(agi.Contents, AgiView.OffLength) != length) throw _mount.Corrupt($"AGI of AG {agno}", agi.Offset + AgiView.OffLength, $"length differs from the AGF's {length}");
        if (delta == 0 || delta >= length) throw new ArgumentOutOfRangeException(nameof(delta), $"{delta} of the {length} blocks of AG {agno}");
        var req = new AllocationRequest
        {
            Target = ((ulong)agno << _sb.AgBlkLog) | (length - delta), MinLength = delta, MaxLength = delta,
            Mode = AllocationMode.Exact, Scope = AllocationScope.ThisAg, Owner = RmapOwner.Ag,
        };
        for (int attempt = 0; ; attempt++)
        {
            if (!SpaceAvailable(w, req, out _, ignoreReservations: true) || !FixFreelist(tx, w, freeing: false)
                || !SpaceAvailable(w, req, out _, ignoreReservations: true))
                throw new XfsException(XfsError.NoSpace, $"AG {agno} cannot give its last {delta} blocks (too little free space after its free list's needs)");
            w.BusySkipped = false;
            if (SearchExact(tx, w, length - delta, delta, delta) is { } c)
            {
                RemoveFromTrees(tx, w, c.Fbno, c.Flen, c.Bno, c.Len);
                break;
            }
            if (!w.BusySkipped || attempt >= 2 || !WaitForBusy(s))
                throw new XfsException(XfsError.NoSpace, $"the last {delta} blocks of AG {agno} are not one free extent");
        }
        SetAgf(tx, w, AgfView.OffLength, length - delta);
        BinaryPrimitives.WriteUInt32BigEndian(agi.Contents.AsSpan(AgiView.OffLength), length - delta);
        tx.LogRange(agi, AgiView.OffLength, AgiView.OffLength + 3);
    }

    /// <summary>Logs the primary superblock with the exact free block count (what unmount writes; the kernel's xfs_log_sb).</summary>
    public void LogSuperblockCounters(Transaction tx)
    {
        var verifier = new SuperblockBufferVerifier(_sb);
        var sb = tx.Read(0, _sb.SectorSize, 0, verifier, verifier.ForWrite(), BufType.Superblock);
        BinaryPrimitives.WriteUInt64BigEndian(sb.Contents.AsSpan(SuperblockView.OffFdblocks), (ulong)FreeBlocks);
        tx.LogRange(sb, SuperblockView.OffFdblocks, SuperblockView.OffFdblocks + 7);
    }

    /// <summary>Where a tree of AG <paramref name="agno"/> gets and returns its blocks, for a <see cref="TransactionBtreeStore"/>.</summary>
    public IBtreeSpace TreeSpace(AgTree tree, uint agno) => tree switch
    {
        AgTree.Bnobt or AgTree.Cntbt => FreeListOf(agno, rmap: false),
        AgTree.Rmapbt => FreeListOf(agno, rmap: true),
        AgTree.Inobt => new AgTreeSpace(this, agno, RmapOwner.Inobt, AgReservation.None, AgiView.OffIblocks),
        AgTree.Finobt => new AgTreeSpace(this, agno, RmapOwner.Inobt, AgReservation.Metadata, AgiView.OffFblocks),
        AgTree.Refcountbt => new AgTreeSpace(this, agno, RmapOwner.Refcount, AgReservation.Metadata, -1),
        _ => throw new ArgumentOutOfRangeException(nameof(tree)),
    };

    private FreeListSpace FreeListOf(uint agno, bool rmap)
    {
        var s = _ags[agno];
        return rmap ? s.RmapFreeList ??= new FreeListSpace(this, agno, rmap: true) : s.FreeList ??= new FreeListSpace(this, agno, rmap: false);
    }

    /// <summary>Where inode <paramref name="ino"/>'s extent tree (bmbt) gets its blocks; the space counts them for di_nblocks.</summary>
    public BmbtSpace InodeTreeSpace(ulong ino, bool attrFork = false) => new(this, ino, attrFork);

    // ---- per transaction ------------------------------------------------------------------------

    private TxWork WorkOf(Transaction tx)
    {
        var w = tx.Scratch<TxWork>();
        if (w.Owner is null) w.Begin(this, tx);
        else if (!ReferenceEquals(w.Owner, this)) throw new InvalidOperationException("a transaction joined AGs of two allocators at once");
        return w;
    }

    internal AgWork Join(Transaction tx, uint agno) => Join(tx, WorkOf(tx), agno);

    private AgWork Join(Transaction tx, TxWork work, uint agno)
    {
        if (work.Ags.TryGetValue(agno, out var w)) return w;
        // Frees whose checkpoint reached the disk since the AG was last looked at stop being busy before this
        // transaction searches it (the kernel clears them as each checkpoint completes).
        var s = _ags[agno];
        long durable = _log.DurableSequence;
        lock (s.Sync) s.PruneBusyLocked(durable);
        var verifier = new AgfBufferVerifier(_sb, agno);
        var agf = tx.Read(AgfOffset(agno), _sb.SectorSize, agno, verifier, s.AgfWrite ??= verifier.ForWrite(), BufType.Agf);
        var a = agf.Contents;
        CheckFreeList(agno, a);
        w = work.NewAg(agno, agf);
        work.Ags.Add(agno, w);
        work.HighestAgf = Math.Max(work.HighestAgf, (int)agno);
        return w;
    }

    private void Committed(Transaction tx, TxWork work)
    {
        long delta = 0;
        // Extents whose checkpoint is on disk stop being busy (the kernel clears them as each checkpoint completes), so
        // the list holds only what the checkpoints not yet durable freed.
        long durable = _log.DurableSequence;
        foreach (var (agno, w) in work.Ags)
        {
            delta += w.SumDelta;
            var s = _ags[agno];
            lock (s.Sync)
            {
                // Read under the AG's lock: the state loaded last is the AGF committed last, whichever change's
                // callback runs first.
                LoadCommitted(s, ReadCommittedAgf(agno));
                s.Busy.Committed(tx, tx.CommitSequence);
                s.PruneBusyLocked(durable);
            }
        }
        Interlocked.Add(ref _freeBlocks, delta);
    }

    private void Cancelled(TxWork work)
    {
        foreach (var agno in work.Ags.Keys)
        {
            var s = _ags[agno];
            lock (s.Sync) s.Busy.Cancelled(work.Transaction);
        }
    }

    // ---- allocation inside one AG ---------------------------------------------------------------

    private readonly record struct Candidate(uint Fbno, uint Flen, uint Bno, uint Len, ulong Diff);

    private AllocatedExtent? TryAllocateInAg(Transaction tx, TxWork work, uint agno, AllocationMode mode, uint targetBno, AllocationRequest req)
    {
        var s = _ags[agno];
        bool joinedHere = !work.Ags.ContainsKey(agno);
        if (joinedHere)
        {
            // The committed counters say whether the AG is worth locking (xfs_alloc_space_available on pagf_*, with the
            // request's alignment: an AG whose longest extent cannot hold an aligned run is not locked).
            long allocLen = (long)req.MinLength + req.Alignment - 1;
            lock (s.Sync)
            {
                if (s.Longest < allocLen || (long)s.FreeBlocks + s.FlCount < allocLen + req.MinLeft) return null;
            }
        }
        int highestBefore = work.HighestAgf;
        var w = Join(tx, work, agno);
        for (int attempt = 0; ; attempt++)
        {
            if (!SpaceAvailable(w, req, out uint maxLength))
            {
                // Nothing of the AG changed yet: it is let go as the kernel's xfs_alloc_fix_freelist lets a clean AGF go
                // (xfs_trans_brelse), so it does not keep this transaction out of lower AGs nor other changes out of it.
                if (joinedHere && attempt == 0) work.Forget(agno, highestBefore);
                return null;
            }
            if (!FixFreelist(tx, w, freeing: false)) return null;
            // The freelist fix changed the counters: check again with what it left.
            if (!SpaceAvailable(w, req, out maxLength)) return null;
            w.BusySkipped = false;
            // The request's window holds for its own search only (not for the freelist's refill above).
            w.WindowStart = req.MinAgBlock;
            w.WindowEnd = req.EndAgBlock;
            var found = mode switch
            {
                AllocationMode.Exact => SearchExact(tx, w, targetBno, req.MinLength, maxLength),
                AllocationMode.Near => SearchNear(tx, w, targetBno, req.MinLength, maxLength, req.Alignment),
                _ => SearchBySize(tx, w, req.MinLength, maxLength, req.Alignment),
            };
            w.WindowStart = 0;
            w.WindowEnd = uint.MaxValue;
            if (found is { } c)
            {
                Take(tx, w, c, req.Owner);
                return new AllocatedExtent(agno, c.Bno, c.Len, ((ulong)agno << _sb.AgBlkLog) | c.Bno);
            }
            if (!w.BusySkipped || attempt >= 2 || !WaitForBusy(s)) return null;
        }
    }

    /// <summary>Only busy space stood in the way: force the log so committed frees become durable, and drop them (xfs_extent_busy_flush).</summary>
    private bool WaitForBusy(AgState s)
    {
        lock (s.Sync)
            if (!s.Busy.AnyCommitted) return false;
        _log.Force();
        long durable = _log.DurableSequence;
        lock (s.Sync) s.Busy.Prune(durable);
        return true;
    }

    /// <summary>xfs_alloc_space_available: room for the request after the freelist's needs, the reservations and minleft.</summary>
    private bool SpaceAvailable(AgWork w, AllocationRequest req, out uint maxLength, bool ignoreReservations = false)
    {
        var a = w.Agf.Contents;
        uint minFree = MinFreelist(a);
        uint reserved = ignoreReservations ? 0 : ReservationNeeded(w.Agno, a, req.Reservation);
        uint freeblks = U32(a, AgfView.OffFreeblks), flcount = U32(a, AgfView.OffFlcount), longest = U32(a, AgfView.OffLongest);
        maxLength = req.MaxLength;
        long allocLen = (long)req.MinLength + req.Alignment - 1;
        if (LongestUsable(freeblks, flcount, longest, minFree, reserved) < allocLen) return false;
        long available = (long)freeblks + Math.Min(flcount, minFree) - reserved - minFree - req.MinLeft;
        if (available < Math.Max(req.Total, allocLen)) return false;
        if (available < maxLength) maxLength = (uint)available;
        return maxLength >= req.MinLength;
    }

    /// <summary>xfs_alloc_longest_free_extent: the longest extent left once the freelist refill and the reservations took theirs.</summary>
    private static long LongestUsable(uint freeblks, uint flcount, uint longest, uint need, uint reserved)
    {
        long delta = need > flcount ? need - flcount : 0;
        if ((long)freeblks - longest < reserved) delta += reserved - ((long)freeblks - longest);
        if (longest > delta) return Math.Min(longest - delta, freeblks);
        return flcount > 0 || longest > 0 ? 1 : 0;
    }

    private Candidate? SearchBySize(Transaction tx, AgWork w, uint minLength, uint maxLength, uint align)
    {
        var s = _ags[w.Agno];
        var cnt = CntStore(tx, w).Cursor<CntbtOps>();
        Span<byte> key = stackalloc byte[8];
        var parts = w.FreeParts;
        Candidate? best = null;
        // Extents at least maxlen (+ alignment slop) long, smallest first; then the largest ones downwards.
        BinaryPrimitives.WriteUInt32BigEndian(key, 0);
        BinaryPrimitives.WriteUInt32BigEndian(key[4..], (uint)Math.Min(uint.MaxValue, (ulong)maxLength + align - 1));
        if (cnt.Lookup(key, BtreeLookup.GreaterOrEqual))
        {
            do
            {
                var (fbno, flen) = Rec(cnt.Record);
                Consider(s, w, fbno, flen, minLength, maxLength, align, uint.MaxValue, parts, ref best);
                if (best is { } b && b.Len >= maxLength) return best;
            }
            while (cnt.Increment());
        }
        key.Fill(0xFF);
        if (!cnt.Lookup(key, BtreeLookup.LessOrEqual)) return best;
        do
        {
            var (fbno, flen) = Rec(cnt.Record);
            if (best is { } b && flen <= b.Len) break;
            if (flen < minLength) break;
            Consider(s, w, fbno, flen, minLength, maxLength, align, uint.MaxValue, parts, ref best);
        }
        while (cnt.Decrement());
        return best;
    }

    private Candidate? SearchNear(Transaction tx, AgWork w, uint target, uint minLength, uint maxLength, uint align)
    {
        var s = _ags[w.Agno];
        uint longest = U32(w.Agf.Contents, AgfView.OffLongest);
        uint effMax = Math.Min(maxLength, longest);
        var store = BnoStore(tx, w);
        var left = store.Cursor<BnobtOps>();
        var right = store.Cursor<BnobtOps>();
        Span<byte> key = stackalloc byte[8];
        BinaryPrimitives.WriteUInt32BigEndian(key, target);
        bool haveLeft = left.Lookup(key, BtreeLookup.LessOrEqual);
        bool haveRight;
        if (haveLeft)
        {
            right.Lookup(key, BtreeLookup.LessOrEqual);
            haveRight = right.Increment();
        }
        else
        {
            haveRight = right.Lookup(key, BtreeLookup.GreaterOrEqual);
        }
        var parts = w.FreeParts;
        Candidate? best = null;
        while (haveLeft || haveRight)
        {
            if (haveLeft)
            {
                var (fbno, flen) = Rec(left.Record);
                ulong end = (ulong)fbno + flen;
                ulong bound = end > target ? 0 : target - end + 1;
                if (best is { } b && b.Len >= effMax && bound >= b.Diff) haveLeft = false;
                else
                {
                    Consider(s, w, fbno, flen, minLength, maxLength, align, target, parts, ref best);
                    haveLeft = left.Decrement();
                }
            }
            if (haveRight)
            {
                var (fbno, flen) = Rec(right.Record);
                ulong bound = fbno > target ? fbno - target : 0;
                if (best is { } b && b.Len >= effMax && bound >= b.Diff) haveRight = false;
                else
                {
                    Consider(s, w, fbno, flen, minLength, maxLength, align, target, parts, ref best);
                    haveRight = right.Increment();
                }
            }
        }
        return best;
    }

    private Candidate? SearchExact(Transaction tx, AgWork w, uint target, uint minLength, uint maxLength)
    {
        var s = _ags[w.Agno];
        var bno = BnoStore(tx, w).Cursor<BnobtOps>();
        Span<byte> key = stackalloc byte[8];
        BinaryPrimitives.WriteUInt32BigEndian(key, target);
        if (!bno.Lookup(key, BtreeLookup.LessOrEqual)) return null;
        var (fbno, flen) = Rec(bno.Record);
        if ((ulong)fbno + flen <= target) return null;
        var parts = w.FreeParts;
        lock (s.Sync) w.BusySkipped |= s.Busy.NonBusyParts(fbno, flen, parts);
        foreach (var (ps, pl) in parts)
        {
            if (ps > target || (ulong)ps + pl <= target) continue;
            uint len = (uint)Math.Min(maxLength, (ulong)ps + pl - target);
            return len >= minLength ? new Candidate(fbno, flen, target, len, 0) : null;
        }
        return null;
    }

    /// <summary>
    /// Weighs free extent [fbno, fbno+flen) less its busy parts: each part, aligned, gives a candidate as long as it
    /// can be (up to maxlen) and as close to <paramref name="target"/> as alignment allows; longer wins, then closer.
    /// </summary>
    private void Consider(AgState s, AgWork w, uint fbno, uint flen, uint minLength, uint maxLength, uint align, uint target,
        List<(uint Start, uint Length)> parts, ref Candidate? best)
    {
        lock (s.Sync) w.BusySkipped |= s.Busy.NonBusyParts(fbno, flen, parts);
        foreach (var (partStart, partLength) in parts)
        {
            ulong ps = Math.Max(partStart, w.WindowStart);
            ulong end = Math.Min((ulong)partStart + partLength, w.WindowEnd);
            if (ps >= end) continue;
            ulong aligned = (ps + align - 1) / align * align;
            if (aligned >= end || end - aligned < minLength) continue;
            uint len = (uint)Math.Min(maxLength, end - aligned);
            ulong last = (end - len) / align * align; // the highest aligned start that still fits len
            ulong start = aligned;
            ulong diff = 0;
            if (target != uint.MaxValue)
            {
                ulong want = Math.Clamp((ulong)target, aligned, last);
                ulong down = want / align * align, up = (want + align - 1) / align * align;
                if (down < aligned) down = aligned;
                if (up > last) up = last;
                start = Dist(down, target) <= Dist(up, target) ? down : up;
                diff = Dist(start, target);
            }
            var c = new Candidate(fbno, flen, (uint)start, len, diff);
            if (best is not { } b || c.Len > b.Len || (c.Len == b.Len && c.Diff < b.Diff)) best = c;
        }
    }

    private static ulong Dist(ulong a, ulong b) => a > b ? a - b : b - a;

    /// <summary>Carves the candidate out of both free-space trees (xfs_alloc_fixup_trees), updates the AGF, adds the reverse mapping.</summary>
    private void Take(Transaction tx, AgWork w, Candidate c, RmapOwner owner)
    {
        RemoveFromTrees(tx, w, c.Fbno, c.Flen, c.Bno, c.Len);
        if (_sb.HasRmapbt && !owner.SkipsReverseMap) ReverseMap.Map(this, tx, w, c.Bno, c.Len, owner);
    }

    private void RemoveFromTrees(Transaction tx, AgWork w, uint fbno, uint flen, uint bno, uint len)
    {
        var cnt = CntStore(tx, w).Cursor<CntbtOps>();
        var bnoCur = BnoStore(tx, w).Cursor<BnobtOps>();
        Span<byte> rec = stackalloc byte[8];
        uint leftLen = bno - fbno;
        uint rightStart = bno + len, rightLen = fbno + flen - rightStart;
        Write(rec, fbno, flen);
        if (!cnt.Lookup(rec, BtreeLookup.Equal))
            throw Corrupt(w, "cntbt", $"free extent {fbno}+{flen} of the bnobt is missing from the cntbt");
        cnt.Delete();
        if (leftLen > 0) InsertNew(cnt, w, "cntbt", fbno, leftLen);
        if (rightLen > 0) InsertNew(cnt, w, "cntbt", rightStart, rightLen);
        if (!bnoCur.Lookup(rec, BtreeLookup.Equal))
            throw Corrupt(w, "bnobt", $"free extent {fbno}+{flen} is missing from the bnobt");
        if (leftLen == 0 && rightLen == 0) bnoCur.Delete();
        else if (leftLen > 0)
        {
            Write(rec, fbno, leftLen);
            bnoCur.Update(rec);
            if (rightLen > 0) InsertNew(bnoCur, w, "bnobt", rightStart, rightLen);
        }
        else
        {
            Write(rec, rightStart, rightLen);
            bnoCur.Update(rec);
        }
        AddAgf(tx, w, AgfView.OffFreeblks, -(long)len);
        UpdateLongest(tx, w);
    }

    /// <summary>xfs_free_ag_extent: [bno, bno+len) back into both trees, merged with a free neighbour on either side.</summary>
    private void FreeExtentInTrees(Transaction tx, AgWork w, uint bno, uint len)
    {
        var bnoCur = BnoStore(tx, w).Cursor<BnobtOps>();
        var cnt = CntStore(tx, w).Cursor<CntbtOps>();
        Span<byte> rec = stackalloc byte[8];
        Write(rec, bno, len);
        uint lbno = 0, llen = 0, rbno = 0, rlen = 0;
        bool haveLeft = false, haveRight = false;
        if (bnoCur.Lookup(rec, BtreeLookup.LessOrEqual))
        {
            (lbno, llen) = Rec(bnoCur.Record);
            if ((ulong)lbno + llen > bno)
                throw Corrupt(w, "bnobt", $"freeing blocks {bno}+{len}, but free extent {lbno}+{llen} already covers block {bno}");
            haveLeft = lbno + llen == bno;
        }
        if (bnoCur.Lookup(rec, BtreeLookup.GreaterOrEqual))
        {
            (rbno, rlen) = Rec(bnoCur.Record);
            if (rbno < (ulong)bno + len)
                throw Corrupt(w, "bnobt", $"freeing blocks {bno}+{len}, but free extent {rbno}+{rlen} already covers block {rbno}");
            haveRight = rbno == bno + len;
        }
        if (haveLeft) DeleteExact(cnt, w, "cntbt", lbno, llen);
        if (haveRight) DeleteExact(cnt, w, "cntbt", rbno, rlen);
        uint nbno = haveLeft ? lbno : bno;
        uint nlen = len + (haveLeft ? llen : 0) + (haveRight ? rlen : 0);
        if (haveLeft && haveRight)
        {
            DeleteExact(bnoCur, w, "bnobt", rbno, rlen);
            PositionExact(bnoCur, w, "bnobt", lbno, llen);
            Write(rec, nbno, nlen);
            bnoCur.Update(rec);
        }
        else if (haveLeft)
        {
            PositionExact(bnoCur, w, "bnobt", lbno, llen);
            Write(rec, nbno, nlen);
            bnoCur.Update(rec);
        }
        else if (haveRight)
        {
            PositionExact(bnoCur, w, "bnobt", rbno, rlen);
            Write(rec, nbno, nlen);
            bnoCur.Update(rec);
        }
        else InsertNew(bnoCur, w, "bnobt", nbno, nlen);
        InsertNew(cnt, w, "cntbt", nbno, nlen);
        AddAgf(tx, w, AgfView.OffFreeblks, len);
        UpdateLongest(tx, w);
    }

    private void UpdateLongest(Transaction tx, AgWork w)
    {
        var cnt = CntStore(tx, w).Cursor<CntbtOps>();
        Span<byte> key = stackalloc byte[8];
        key.Fill(0xFF);
        uint longest = cnt.Lookup(key, BtreeLookup.LessOrEqual) ? Rec(cnt.Record).Length : 0;
        SetAgf(tx, w, AgfView.OffLongest, longest);
    }

    private void PositionExact<TOps>(BtreeCursor<TOps> cur, AgWork w, string tree, uint start, uint length) where TOps : struct, IBtreeOps
    {
        Span<byte> rec = stackalloc byte[8];
        Write(rec, start, length);
        if (!cur.Lookup(rec, BtreeLookup.Equal) || Rec(cur.Record) != (start, length))
            throw Corrupt(w, tree, $"free extent {start}+{length} is not in the {tree}");
    }

    private void DeleteExact<TOps>(BtreeCursor<TOps> cur, AgWork w, string tree, uint start, uint length) where TOps : struct, IBtreeOps
    {
        PositionExact(cur, w, tree, start, length);
        cur.Delete();
    }

    private void InsertNew<TOps>(BtreeCursor<TOps> cur, AgWork w, string tree, uint start, uint length) where TOps : struct, IBtreeOps
    {
        Span<byte> rec = stackalloc byte[8];
        Write(rec, start, length);
        if (!cur.Insert(rec)) throw Corrupt(w, tree, $"free extent {start}+{length} is already in the {tree}");
    }

    // ---- the AG free list -----------------------------------------------------------------------

    /// <summary>
    /// xfs_alloc_min_freelist: blocks the AGFL must hold so that a split at every level of the bnobt, cntbt (and
    /// rmapbt), one level taller than now, can be fed from it.
    /// </summary>
    private uint MinFreelist(byte[] agf)
    {
        uint need = (uint)(Math.Min((int)U32(agf, AgfView.OffBnoLevel) + 1, _allocMaxLevels) * 2 - 2)
            + (uint)(Math.Min((int)U32(agf, AgfView.OffCntLevel) + 1, _allocMaxLevels) * 2 - 2);
        if (_sb.HasRmapbt) need += (uint)(Math.Min((int)U32(agf, AgfView.OffRmapLevel) + 1, _rmapMaxLevels) * 2 - 2);
        return need;
    }

    /// <summary>
    /// xfs_alloc_fix_freelist: trims the AGFL down to what the trees need (blocks back to free space, OWN_AG mapping
    /// removed), or refills it from free space (OWN_AG mapping added). False when the AG cannot refill it.
    /// </summary>
    private bool FixFreelist(Transaction tx, AgWork w, bool freeing)
    {
        var s = _ags[w.Agno];
        var a = w.Agf.Contents;
        while (U32(a, AgfView.OffFlcount) > MinFreelist(a))
        {
            uint bno = TakeFromFreeList(tx, w, btreeBlock: false);
            if (_sb.HasRmapbt) ReverseMap.Unmap(this, tx, w, bno, 1, RmapOwner.Ag);
            FreeExtentInTrees(tx, w, bno, 1);
            lock (s.Sync) s.Busy.Add(bno, 1, tx);
        }
        for (int attempt = 0; U32(a, AgfView.OffFlcount) < MinFreelist(a); )
        {
            uint want = MinFreelist(a) - U32(a, AgfView.OffFlcount);
            w.BusySkipped = false;
            var c = SearchBySize(tx, w, 1, want, 1);
            if (c is null)
            {
                if (w.BusySkipped && attempt++ < 2 && WaitForBusy(s)) continue;
                if (freeing) return true; // a free makes room on its own; the kernel lets it proceed
                return false;
            }
            var got = c.Value;
            RemoveFromTrees(tx, w, got.Fbno, got.Flen, got.Bno, got.Len);
            if (_sb.HasRmapbt) ReverseMap.Map(this, tx, w, got.Bno, got.Len, RmapOwner.Ag);
            for (uint b = got.Bno; b < got.Bno + got.Len; b++) PutOnFreeList(tx, w, b, btreeBlock: false);
        }
        return true;
    }

    private MetadataBuffer Agfl(Transaction tx, AgWork w)
    {
        if (w.Agfl is { } b) return b;
        var verifier = new AgflBufferVerifier(_sb, w.Agno);
        var s = _ags[w.Agno];
        return w.Agfl = tx.Read(AgfOffset(w.Agno) + 2L * _sb.SectorSize, _sb.SectorSize, w.Agno, verifier, s.AgflWrite ??= verifier.ForWrite(), BufType.Agfl);
    }

    /// <summary>xfs_alloc_get_freelist: the block at flfirst. A tree block taken counts in agf_btreeblks.</summary>
    internal uint TakeFromFreeList(Transaction tx, AgWork w, bool btreeBlock)
    {
        var a = w.Agf.Contents;
        uint count = U32(a, AgfView.OffFlcount);
        if (count == 0) throw new InvalidOperationException($"the AGFL of AG {w.Agno} is empty: the freelist was not fixed before a tree change");
        uint first = U32(a, AgfView.OffFlfirst);
        var agfl = Agfl(tx, w);
        uint bno = BinaryPrimitives.ReadUInt32BigEndian(agfl.Contents.AsSpan(AgflLayout.OffBno + 4 * (int)first));
        if (bno < _firstUsable || bno >= _ags[w.Agno].Length)
            throw _mount.Corrupt($"AGFL of AG {w.Agno}", agfl.Offset + AgflLayout.OffBno + 4 * first, $"slot {first} holds block {bno}, outside the AG's usable blocks");
        SetAgf(tx, w, AgfView.OffFlfirst, (first + 1) % (uint)_agflSlots);
        SetAgf(tx, w, AgfView.OffFlcount, count - 1);
        if (btreeBlock) AddAgf(tx, w, AgfView.OffBtreeblks, 1);
        return bno;
    }

    /// <summary>xfs_alloc_put_freelist: appends a block after fllast.</summary>
    internal void PutOnFreeList(Transaction tx, AgWork w, uint bno, bool btreeBlock)
    {
        var a = w.Agf.Contents;
        uint count = U32(a, AgfView.OffFlcount);
        if (count >= _agflSlots) throw new InvalidOperationException($"the AGFL of AG {w.Agno} is full");
        uint last = (U32(a, AgfView.OffFllast) + 1) % (uint)_agflSlots;
        var agfl = Agfl(tx, w);
        int off = AgflLayout.OffBno + 4 * (int)last;
        BinaryPrimitives.WriteUInt32BigEndian(agfl.Contents.AsSpan(off), bno);
        tx.LogRange(agfl, off, off + 3);
        SetAgf(tx, w, AgfView.OffFllast, last);
        SetAgf(tx, w, AgfView.OffFlcount, count + 1);
        if (btreeBlock) AddAgf(tx, w, AgfView.OffBtreeblks, -1);
    }

    /// <summary>The AGFL's ring must agree with the AGF (xfs_agfl_needs_reset); this writer refuses one that does not.</summary>
    private void CheckFreeList(uint agno, byte[] agf)
    {
        uint f = U32(agf, AgfView.OffFlfirst), l = U32(agf, AgfView.OffFllast), c = U32(agf, AgfView.OffFlcount);
        bool ok = f < _agflSlots && l < _agflSlots && c <= _agflSlots;
        if (ok && c > 0) ok = (l >= f ? l - f + 1 : _agflSlots - f + l + 1) == c;
        if (!ok) throw _mount.Corrupt($"AGF of AG {agno}", AgfOffset(agno) + AgfView.OffFlfirst, $"free list ring first {f}, last {l}, count {c} does not fit {_agflSlots} slots");
    }

    // ---- reservations ---------------------------------------------------------------------------

    /// <summary>
    /// The per-AG reservations (xfs_ag_resv_init): the metadata reservation holds room for the largest finobt and
    /// refcountbt the AG can need, the rmapbt reservation for its largest rmapbt (at least 1% of the AG); what the
    /// trees already use counts against them.
    /// </summary>
    private void ComputeReservationAsks(AgState s)
    {
        int bs = (int)_sb.BlockSize;
        uint agblocks = s.Length;
        long meta = 0;
        if (_sb.HasReflink) meta += TreeSize((bs - 56) / 12 / 2, (bs - 56) / 8 / 2, agblocks);
        if (_sb.HasFinobt) meta += TreeSize((bs - 56) / 16 / 2, (bs - 56) / 8 / 2, (ulong)agblocks * (ulong)_sb.InodesPerBlock / 64);
        s.MetadataAsk = (uint)Math.Min(meta, agblocks);
        if (_sb.HasRmapbt)
        {
            uint usable = agblocks;
            if (_sb.LogStart != 0 && AgOf(_sb.LogStart) == s.Agno) usable -= Math.Min(usable, _sb.LogBlocks);
            s.RmapAsk = (uint)Math.Min(Math.Max(usable / 100, TreeSize((bs - 56) / 24 / 2, (bs - 56) / 44 / 2, usable)), agblocks);
        }
    }

    private uint ReservationNeeded(uint agno, byte[] agf, AgReservation kind)
    {
        var s = _ags[agno];
        uint meta = Remaining(s.MetadataAsk, U32(agf, AgfView.OffRefcountBlocks) + FinobtBlocks(agno));
        uint rmap = Remaining(s.RmapAsk, U32(agf, AgfView.OffRmapBlocks));
        return kind == AgReservation.Metadata ? rmap : meta + rmap;
    }

    private uint FinobtBlocks(uint agno)
    {
        if (!_sb.HasFinobt || (_sb.RoCompat & SuperblockFeatures.RoCompatInobtCount) == 0) return 0;
        var agi = _mount.Buffers.Read(AgfOffset(agno) + _sb.SectorSize, _sb.SectorSize, agno, new AgiBufferVerifier(_sb, agno));
        return U32(agi, AgiView.OffFblocks);
    }

    private static uint Remaining(uint ask, uint used) => ask > used ? ask - used : 0;

    /// <summary>xfs_btree_calc_size: blocks of a tree holding <paramref name="records"/> records at minimum fill.</summary>
    private static long TreeSize(int leafMin, int nodeMin, ulong records)
    {
        long blocks = 0;
        int per = leafMin;
        ulong n = records;
        while (n > 1)
        {
            n = (n + (ulong)per - 1) / (ulong)per;
            blocks += (long)n;
            per = nodeMin;
        }
        return blocks;
    }

    /// <summary>xfs_btree_compute_maxlevels: the height of a tree holding <paramref name="records"/> records at minimum fill.</summary>
    private static int MaxLevels(int leafMin, int nodeMin, ulong records)
    {
        ulong n = (records + (ulong)leafMin - 1) / (ulong)leafMin;
        int levels = 1;
        while (n > 1)
        {
            n = (n + (ulong)nodeMin - 1) / (ulong)nodeMin;
            levels++;
        }
        return levels;
    }

    // ---- helpers --------------------------------------------------------------------------------

    internal TransactionBtreeStore BnoStore(Transaction tx, AgWork w) =>
        w.Bno ??= TransactionBtreeStore.ForAgTree<BnobtOps>(tx, w.Agno, w.Agf, AgfView.OffBnoRoot, AgfView.OffBnoLevel, FreeListOf(w.Agno, rmap: false));

    internal TransactionBtreeStore CntStore(Transaction tx, AgWork w) =>
        w.Cnt ??= TransactionBtreeStore.ForAgTree<CntbtOps>(tx, w.Agno, w.Agf, AgfView.OffCntRoot, AgfView.OffCntLevel, FreeListOf(w.Agno, rmap: false));

    internal TransactionBtreeStore RefcountStore(Transaction tx, AgWork w) =>
        w.Refcount ??= TransactionBtreeStore.ForAgTree<RefcountbtOps>(tx, w.Agno, w.Agf, AgfView.OffRefcountRoot, AgfView.OffRefcountLevel,
            TreeSpace(AgTree.Refcountbt, w.Agno));

    /// <summary>The file system block of AG block <paramref name="agbno"/> of AG <paramref name="agno"/>.</summary>
    internal ulong Fsb(uint agno, uint agbno) => ((ulong)agno << _sb.AgBlkLog) | agbno;

    internal TransactionBtreeStore RmapStore(Transaction tx, AgWork w) =>
        w.Rmap ??= TransactionBtreeStore.ForAgTree<RmapbtOps>(tx, w.Agno, w.Agf, AgfView.OffRmapRoot, AgfView.OffRmapLevel, FreeListOf(w.Agno, rmap: true));

    internal void ReuseBusy(uint agno, uint bno)
    {
        var s = _ags[agno];
        lock (s.Sync) s.Busy.Remove(bno, 1);
    }

    internal void MarkBusy(Transaction tx, uint agno, uint bno, uint length)
    {
        var s = _ags[agno];
        lock (s.Sync) s.Busy.Add(bno, length, tx);
    }

    internal uint AgOf(ulong fsb) => (uint)(fsb >> _sb.AgBlkLog);
    internal long AgfOffset(uint agno) => _sb.AgBlockToByte(agno, 0) + _sb.SectorSize;

    private byte[] ReadCommittedAgf(uint agno) =>
        _mount.Buffers.Read(AgfOffset(agno), _sb.SectorSize, agno, new AgfBufferVerifier(_sb, agno));

    private static void LoadCommitted(AgState s, byte[] agf)
    {
        s.FreeBlocks = U32(agf, AgfView.OffFreeblks);
        s.Longest = U32(agf, AgfView.OffLongest);
        s.FlCount = U32(agf, AgfView.OffFlcount);
        s.BtreeBlocks = U32(agf, AgfView.OffBtreeblks);
        s.RmapBlocks = U32(agf, AgfView.OffRmapBlocks);
        s.RefcountBlocks = U32(agf, AgfView.OffRefcountBlocks);
    }

    internal static uint U32(byte[] b, int off) => BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(off));

    internal static void SetAgf(Transaction tx, AgWork w, int off, uint value)
    {
        if (off is AgfView.OffFreeblks or AgfView.OffFlcount or AgfView.OffBtreeblks)
            w.SumDelta += (long)value - U32(w.Agf.Contents, off);
        BinaryPrimitives.WriteUInt32BigEndian(w.Agf.Contents.AsSpan(off), value);
        tx.LogRange(w.Agf, off, off + 3);
    }

    internal static void AddAgf(Transaction tx, AgWork w, int off, long delta) =>
        SetAgf(tx, w, off, checked((uint)(U32(w.Agf.Contents, off) + delta)));

    internal XfsCorruptionException Corrupt(AgWork w, string tree, string problem) =>
        _mount.Corrupt($"{tree} of AG {w.Agno}", w.Agf.Offset, problem);

    private static (uint Start, uint Length) Rec(ReadOnlySpan<byte> r) =>
        (BinaryPrimitives.ReadUInt32BigEndian(r), BinaryPrimitives.ReadUInt32BigEndian(r[4..]));

    private static void Write(Span<byte> rec, uint start, uint length)
    {
        BinaryPrimitives.WriteUInt32BigEndian(rec, start);
        BinaryPrimitives.WriteUInt32BigEndian(rec[4..], length);
    }

    private static void Validate(AllocationRequest r)
    {
        if (r.MinLength == 0 || r.MaxLength < r.MinLength)
            throw new ArgumentOutOfRangeException(nameof(r), $"allocation of {r.MinLength}..{r.MaxLength} blocks");
        if (r.Alignment == 0 || (r.Mode == AllocationMode.Exact && r.Alignment != 1))
            throw new ArgumentOutOfRangeException(nameof(r), $"alignment {r.Alignment} with mode {r.Mode}");
    }
}

/// <summary>The trees of an AG, for <see cref="AgAllocator.TreeSpace"/>.</summary>
public enum AgTree { Bnobt, Cntbt, Rmapbt, Inobt, Finobt, Refcountbt }

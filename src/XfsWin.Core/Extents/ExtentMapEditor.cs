using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Extents;

/// <summary>
/// Where a file's blocks come from and go back to (the block allocator's answer), and the reverse-map, refcount and
/// free work that follows a mapping change (queued as deferred work on the transaction, as the kernel's xfs_bmap.c
/// queues rmap, refcount and extent-free intents).
/// </summary>
public interface IFileSpace
{
    /// <summary>
    /// Allocates between <paramref name="minBlocks"/> and <paramref name="maxBlocks"/> contiguous blocks for file block
    /// <paramref name="fileBlock"/> of <paramref name="ino"/>, preferably at <paramref name="nearFsb"/> (0: near the inode).
    /// Returns the first file system block and the count; throws <see cref="XfsError.NoSpace"/> when no run fits. The
    /// reverse mapping of the new extent (<paramref name="unwritten"/> or not) follows as deferred work.
    /// </summary>
    (ulong Fsb, uint Blocks) Allocate(Transaction tx, ulong ino, ulong fileBlock, ulong nearFsb, uint minBlocks, uint maxBlocks,
        ForkKind fork = ForkKind.Data, bool unwritten = false);

    /// <summary>
    /// The file no longer maps <paramref name="extent"/>: its reverse mapping goes, and its blocks are freed (reused
    /// only once the free is on disk) or, for blocks a reflinked file may share (<paramref name="shared"/>), their
    /// reference count drops (freed when it reaches zero). Deferred work.
    /// </summary>
    void Free(Transaction tx, ulong ino, BmbtRecord extent, ForkKind fork = ForkKind.Data, bool shared = false);

    /// <summary>
    /// <paramref name="extent"/> came into (<paramref name="mapped"/>) or left the file without being allocated or freed
    /// (a remap or an exchange of mappings): only its reverse mapping follows. Deferred work.
    /// </summary>
    void Remapped(Transaction tx, ulong ino, BmbtRecord extent, ForkKind fork, bool mapped, bool shared);

    /// <summary><paramref name="extent"/> (in its new state) changed between unwritten and written: its reverse mapping follows. Deferred work.</summary>
    void Converted(Transaction tx, ulong ino, BmbtRecord extent, ForkKind fork, bool shared);

    /// <summary>The block space of the file's extent btree.</summary>
    IBtreeSpace BtreeSpace(ulong ino, ForkKind fork = ForkKind.Data);
}

/// <summary>
/// Changes one inode fork's mapping (data or attribute fork) inside a transaction, as the kernel's xfs_bmap.c does: the extents are kept
/// sorted and merged with their neighbours (same state, contiguous on disk and in the file, at most
/// <see cref="BmbtRecord.MaxBlockCount"/> blocks); an extent list that outgrows the inode fork becomes an extent btree
/// rooted in the fork (xfs_bmap_extents_to_btree), and a btree whose extents fit the fork again becomes a list
/// (xfs_bmap_btree_to_extents). In btree form each change is a cursor update, insert or delete, so a transaction
/// logs only the blocks it touches. di_nextents (di_anextents) and di_nblocks follow; the caller logs the inode.
/// </summary>
public sealed class ExtentMapEditor
{
    private Transaction _tx;
    private InodeUpdate _inode;
    private readonly IFileSpace _space;
    private readonly Superblock _sb;
    private readonly List<BmbtRecord> _extents;
    private readonly ForkKind _fork;

    public ExtentMapEditor(Transaction tx, InodeUpdate inode, IFileSpace space, ForkKind fork = ForkKind.Data)
    {
        _tx = tx;
        _inode = inode;
        _space = space;
        _fork = fork;
        _sb = tx.Mount.Superblock;
        // Sized for what the fork says it holds and a split or two (a corrupt count is refused below, not allocated for).
        _extents = new List<BmbtRecord>((int)Math.Min(ExtentCount, 4096) + 2);
        _matchesAt = tx.Mount.LastMappingChange(inode.Number);
        Load(_extents);
    }

    // The inode's mapping-change number (MountContext.LastMappingChange) at which this editor's list was last known to be
    // the fork's: when it loaded the fork, or right after its own Save.
    private long _matchesAt;
    // What the fork held when the caller kept this editor past its commit (MarkKept), for TryKeep; _kept false otherwise.
    private bool _kept;
    private ulong _keptIno, _keptNblocks, _keptCount;
    private byte _keptForkOffset;
    private ForkFormat _keptFormat;
    private byte[] _keptFork = [];

    /// <summary>
    /// The transaction that saved this editor's changes committed: keeps its mapping for <see cref="TryKeep"/> in a
    /// later transaction, unless the inode's mapping changed since this editor loaded or saved it (deferred work or a
    /// follow-up change of the same commit), when nothing is kept.
    /// </summary>
    public void MarkKept()
    {
        _kept = false;
        if (_pending.Count != 0 || _tx.Mount.LastMappingChange(_inode.Number) != _matchesAt) return;
        var fork = Fork;
        if (_keptFork.Length != fork.Length) _keptFork = new byte[fork.Length];
        fork.CopyTo(_keptFork);
        _keptIno = _inode.Number;
        _keptNblocks = _inode.Nblocks;
        _keptCount = ExtentCount;
        _keptForkOffset = _inode.ForkOffset;
        _keptFormat = Format;
        _kept = true;
    }

    /// <summary>Whether this editor holds a mark of <see cref="MarkKept"/> for inode <paramref name="ino"/> (not yet checked against the inode).</summary>
    public bool IsKeptFor(ulong ino) => _kept && _keptIno == ino;

    /// <summary>
    /// Takes up the mapping <see cref="MarkKept"/> kept, in <paramref name="tx"/> through <paramref name="inode"/> (the
    /// same inode read again), instead of loading the fork: true when the inode's mapping did not change since (every
    /// change of one saves through an editor, which numbers it per inode) and the inode's fork bytes, format, extent count,
    /// block count and fork offset are what they were. False otherwise (nothing changed; load with
    /// <see cref="Reload"/>). A mark is taken up at most once: a transaction that fails after this leaves none.
    /// </summary>
    public bool TryKeep(Transaction tx, InodeUpdate inode)
    {
        bool kept = _kept;
        _kept = false;
        if (!kept || _pending.Count != 0 || inode.Number != _keptIno || !ReferenceEquals(tx.Mount.Superblock, _sb) ||
            tx.Mount.LastMappingChange(inode.Number) != _matchesAt) return false;
        if (inode.Nblocks != _keptNblocks || inode.ForkOffset != _keptForkOffset ||
            (IsAttr ? inode.AttrExtentCount : inode.DataExtentCount) != _keptCount ||
            (IsAttr ? inode.AttrFormat : inode.DataFormat) != _keptFormat ||
            !(IsAttr ? inode.AttrFork : inode.DataFork).SequenceEqual(_keptFork))
            return false;
        _tx = tx;
        _inode = inode;
        return true;
    }

    private bool IsAttr => _fork == ForkKind.Attr;

    /// <summary>
    /// Starts this editor over on <paramref name="inode"/>'s fork in <paramref name="tx"/> (what the constructor makes),
    /// its lists kept: for a caller that changes fork after fork with one editor, each only after the transaction of
    /// the previous one committed or was cancelled (nothing loaded or pending is kept).
    /// </summary>
    public ExtentMapEditor Reload(Transaction tx, InodeUpdate inode)
    {
        _tx = tx;
        _inode = inode;
        _pending.Clear();
        _extents.Clear();
        _kept = false;
        _matchesAt = tx.Mount.LastMappingChange(inode.Number);
        Load(_extents);
        return this;
    }

    /// <summary>
    /// Goes on editing the same fork in another transaction (or another part of one) through <paramref name="inode"/>,
    /// keeping the extents already loaded: true when <paramref name="inode"/> is this editor's inode or holds exactly
    /// the fork and counts this editor last left; false (nothing changed) when the inode changed otherwise meanwhile.
    /// </summary>
    public bool TryRebind(Transaction tx, InodeUpdate inode)
    {
        if (_pending.Count != 0 || inode.Number != _inode.Number) return false;
        if (!ReferenceEquals(inode, _inode))
        {
            var old = _inode;
            var oldFork = IsAttr ? old.AttrFork : old.DataFork;
            var newFork = IsAttr ? inode.AttrFork : inode.DataFork;
            if (!oldFork.SequenceEqual(newFork) || old.Nblocks != inode.Nblocks || old.ForkOffset != inode.ForkOffset ||
                (IsAttr ? old.AttrExtentCount != inode.AttrExtentCount : old.DataExtentCount != inode.DataExtentCount))
                return false;
        }
        _tx = tx;
        _inode = inode;
        return true;
    }

    private Span<byte> Fork => IsAttr ? _inode.AttrFork : _inode.DataFork;

    private ForkFormat Format
    {
        get => IsAttr ? _inode.AttrFormat : _inode.DataFormat;
        set
        {
            if (IsAttr) _inode.AttrFormat = value;
            else _inode.DataFormat = value;
        }
    }

    private ulong ExtentCount
    {
        get => IsAttr ? _inode.AttrExtentCount : _inode.DataExtentCount;
        set
        {
            if (IsAttr) _inode.AttrExtentCount = value;
            else _inode.DataExtentCount = value;
        }
    }

    private InodeLogParts ForkPart => IsAttr ? InodeLogParts.AttrFork : InodeLogParts.DataFork;

    private IInodeRootHolder RootHolder => IsAttr ? _inode.AttrRoot : _inode;

    /// <summary>The mapping, sorted by file offset.</summary>
    public IReadOnlyList<BmbtRecord> Extents => _extents;

    private int ListCapacity => Fork.Length / BmbtRecord.Size;

    /// <summary>Whether the mapping fits the fork as an extent list (after the fork's size changed).</summary>
    public bool FitsAsList => _extents.Count <= ListCapacity;

    private void Load(List<BmbtRecord> list)
    {
        switch (Format)
        {
            case ForkFormat.Extents:
                var fork = Fork;
                if (ExtentCount > (ulong)ListCapacity) throw Corrupt($"{ExtentCount} extents in a fork with room for {ListCapacity}");
                int n = (int)ExtentCount;
                for (int i = 0; i < n; i++) list.Add(BmbtRecord.Decode(fork[(i * BmbtRecord.Size)..]));
                break;
            case ForkFormat.Btree:
                var cursor = Cursor();
                if (cursor.MoveToFirst())
                    do list.Add(BmbtRecord.Decode(cursor.Record)); while (cursor.Increment());
                break;
            default:
                throw new InvalidOperationException($"inode {_inode.Number}: a {Format} {_fork} fork has no extents");
        }
        ulong end = 0;
        foreach (var e in list)
        {
            if (e.FileOffset < end || !_sb.IsValidExtent(e.StartBlock, e.BlockCount))
                throw Corrupt($"extent at file block {e.FileOffset} ({e.BlockCount} blocks at {e.StartBlock}) is out of order or outside the volume");
            end = e.FileEnd;
        }
        if ((ulong)list.Count != ExtentCount)
            throw Corrupt($"the fork's extent count is {ExtentCount} but it holds {list.Count} extents");
    }

    private XfsCorruptionException Corrupt(string problem) => _tx.Mount.Corrupt($"{(IsAttr ? "attribute" : "data")} fork of inode {_inode.Number}", _inode.ByteOffset, problem);

    private BtreeCursor<BmbtOps> Cursor() =>
        TransactionBtreeStore.ForInodeRoot<BmbtOps>(_tx, _inode.Number, RootHolder, _inode.ByteOffset, TreeSpace()).Cursor<BmbtOps>();

    /// <summary>The extent btree's block space; every block it takes or gives back counts in di_nblocks.</summary>
    private IBtreeSpace TreeSpace() => new CountingSpace(_space.BtreeSpace(_inode.Number, _fork), _inode);

    private sealed class CountingSpace(IBtreeSpace inner, InodeUpdate inode) : IBtreeSpace
    {
        public ulong Allocate(Transaction tx, ulong near)
        {
            ulong block = inner.Allocate(tx, near);
            inode.Nblocks += 1;
            return block;
        }

        public void Free(Transaction tx, ulong pointer)
        {
            inner.Free(tx, pointer);
            inode.Nblocks -= 1;
        }
    }

    /// <summary>Maps an extent the caller allocated (a directory block) at its file offset; di_nblocks counts it.</summary>
    public void AddMapped(BmbtRecord extent)
    {
        Add(extent);
        _inode.Nblocks += extent.BlockCount;
    }

    /// <summary>The extent holding <paramref name="fileBlock"/>, or the index where one would go (negative: ~index).</summary>
    private int Find(ulong fileBlock)
    {
        int lo = 0, hi = _extents.Count - 1;
        while (lo <= hi)
        {
            int mid = (lo + hi) >>> 1;
            var e = _extents[mid];
            if (fileBlock < e.FileOffset) hi = mid - 1;
            else if (fileBlock >= e.FileEnd) lo = mid + 1;
            else return mid;
        }
        return ~lo;
    }

    /// <summary>The extent mapping <paramref name="fileBlock"/>, if any.</summary>
    public bool TryMap(ulong fileBlock, out BmbtRecord extent)
    {
        int i = Find(fileBlock);
        extent = i >= 0 ? _extents[i] : default;
        return i >= 0;
    }

    /// <summary>The first mapped block at or after <paramref name="fileBlock"/> (ulong.MaxValue when none).</summary>
    public ulong NextMapped(ulong fileBlock)
    {
        int i = Find(fileBlock);
        if (i >= 0) return fileBlock;
        i = ~i;
        return i < _extents.Count ? _extents[i].FileOffset : ulong.MaxValue;
    }

    /// <summary>
    /// Where unmapping must start so that [that, <paramref name="end"/>) holds the last <paramref name="extents"/> mapped
    /// extents below <paramref name="end"/>, but not below <paramref name="fileBlock"/>; <paramref name="end"/> when
    /// nothing is mapped in [<paramref name="fileBlock"/>, <paramref name="end"/>).
    /// </summary>
    public ulong TailStart(ulong fileBlock, ulong end, int extents)
    {
        // The last extent starting below end.
        int lo = 0, hi = _extents.Count - 1, last = -1;
        while (lo <= hi)
        {
            int mid = (lo + hi) >>> 1;
            if (_extents[mid].FileOffset < end) { last = mid; lo = mid + 1; }
            else hi = mid - 1;
        }
        if (last < 0 || _extents[last].FileEnd <= fileBlock) return end;
        int first = Math.Max(0, last - extents + 1);
        return Math.Max(fileBlock, _extents[first].FileOffset);
    }

    /// <summary>The disk block just after the extent that ends at or before <paramref name="fileBlock"/> (where a sequential write continues), or 0.</summary>
    public ulong ContinuationHint(ulong fileBlock)
    {
        int i = Find(fileBlock);
        if (i >= 0) return _extents[i].StartBlock + (fileBlock - _extents[i].FileOffset);
        i = ~i;
        if (i == 0) return 0;
        var prev = _extents[i - 1];
        return prev.StartBlock + prev.BlockCount + (fileBlock - prev.FileEnd);
    }

    /// <summary>
    /// The blocks of the run of extents, contiguous in the file and on disk (written or not), that ends exactly at
    /// <paramref name="fileBlock"/>; 0 when no extent ends there.
    /// </summary>
    public ulong ContiguousRunBefore(ulong fileBlock)
    {
        int i = Find(fileBlock);
        if (i >= 0) return 0;
        i = ~i - 1;
        if (i < 0 || _extents[i].FileEnd != fileBlock) return 0;
        ulong run = _extents[i].BlockCount;
        for (; i > 0; i--)
        {
            var left = _extents[i - 1];
            var right = _extents[i];
            if (left.FileEnd != right.FileOffset || left.StartBlock + left.BlockCount != right.StartBlock) break;
            run += left.BlockCount;
        }
        return run;
    }

    /// <summary>
    /// Maps [<paramref name="fileBlock"/>, +<paramref name="count"/>) to new blocks where it is a hole (allocated here,
    /// written or unwritten); returns the new extents, in file order. Existing mappings are kept.
    /// </summary>
    public List<BmbtRecord> AllocateHoles(ulong fileBlock, ulong count, bool unwritten) => AllocateHoles(fileBlock, count, unwritten, new List<BmbtRecord>());

    /// <summary>As <see cref="AllocateHoles(ulong, ulong, bool)"/>, adding the new extents to <paramref name="added"/> (returned).</summary>
    public List<BmbtRecord> AllocateHoles(ulong fileBlock, ulong count, bool unwritten, List<BmbtRecord> added)
    {
        ulong pos = fileBlock, end = fileBlock + count;
        while (pos < end)
        {
            int i = Find(pos);
            if (i >= 0)
            {
                pos = _extents[i].FileEnd;
                continue;
            }
            ulong holeEnd = Math.Min(end, NextMapped(pos));
            uint want = (uint)Math.Min(holeEnd - pos, BmbtRecord.MaxBlockCount);
            var (fsb, got) = _space.Allocate(_tx, _inode.Number, pos, ContinuationHint(pos), 1, want, _fork, unwritten);
            var extent = new BmbtRecord(pos, fsb, got, unwritten);
            Add(extent);
            _inode.Nblocks += got;
            added.Add(extent);
            pos += got;
        }
        return added;
    }

    /// <summary>
    /// Maps the holes of [<paramref name="fileBlock"/>, +<paramref name="count"/>) as a file with an extent size hint of
    /// <paramref name="extsize"/> blocks has them mapped (xfs_bmapi_write with the hint): each hole's allocation rounded
    /// out by <see cref="ExtentSizeHint.Align"/> against its neighbouring extents, all of it unwritten (the caller marks
    /// written what it writes). Returns the new extents, in file order.
    /// </summary>
    public List<BmbtRecord> AllocateHolesAligned(ulong fileBlock, ulong count, uint extsize)
    {
        var added = new List<BmbtRecord>();
        ulong pos = fileBlock, end = fileBlock + count;
        while (pos < end)
        {
            int i = Find(pos);
            if (i >= 0)
            {
                pos = _extents[i].FileEnd;
                continue;
            }
            i = ~i;
            ulong previousEnd = i > 0 ? _extents[i - 1].FileEnd : 0;
            ulong nextStart = i < _extents.Count ? _extents[i].FileOffset : ulong.MaxValue;
            ulong want = Math.Min(Math.Min(end, nextStart) - pos, BmbtRecord.MaxBlockCount);
            var (offset, length) = ExtentSizeHint.Align(pos, want, extsize, previousEnd, nextStart);
            added.AddRange(AllocateHoles(offset, length, unwritten: true));
            // The rounded-out allocation covers pos (so the loop always moves on).
            pos = Math.Max(pos + 1, offset + length);
        }
        return added;
    }

    /// <summary>Marks [<paramref name="fileBlock"/>, +<paramref name="count"/>) written (converting unwritten extents, split as needed).</summary>
    public void MarkWritten(ulong fileBlock, ulong count)
    {
        ulong pos = fileBlock, end = fileBlock + count;
        while (pos < end)
        {
            int i = Find(pos);
            if (i < 0)
            {
                pos = Math.Min(end, NextMapped(pos));
                continue;
            }
            var e = _extents[i];
            ulong stop = Math.Min(end, e.FileEnd);
            if (e.Unwritten)
            {
                Remove(i);
                if (e.FileOffset < pos) Add(e with { BlockCount = (uint)(pos - e.FileOffset) });
                var written = new BmbtRecord(pos, e.StartBlock + (pos - e.FileOffset), (uint)(stop - pos), false);
                Add(written);
                if (stop < e.FileEnd) Add(new BmbtRecord(stop, e.StartBlock + (stop - e.FileOffset), (uint)(e.FileEnd - stop), true));
                _space.Converted(_tx, _inode.Number, written, _fork, Shared);
            }
            pos = stop;
        }
    }

    /// <summary>True when the fork's blocks may be shared with other files (a reflinked file's data fork).</summary>
    private bool Shared => !IsAttr && (_inode.Flags2 & DinodeView.Flag2Reflink) != 0;

    /// <summary>Unmaps [<paramref name="fileBlock"/>, +<paramref name="count"/>) and frees its blocks; returns the blocks freed.</summary>
    public ulong Unmap(ulong fileBlock, ulong count) => Unmap(fileBlock, count, free: true);

    /// <summary>
    /// Maps <paramref name="extent"/> into a hole without allocating (xfs_bmapi_remap: the blocks come from elsewhere, a
    /// mapping exchange or a reflink); di_nblocks counts them, their reverse mapping follows.
    /// </summary>
    public void Remap(BmbtRecord extent)
    {
        if (extent.BlockCount == 0) return;
        if (TryMap(extent.FileOffset, out _) || NextMapped(extent.FileOffset) < extent.FileEnd)
            throw new InvalidOperationException($"inode {_inode.Number}: remapping file blocks {extent.FileOffset}+{extent.BlockCount} over mapped blocks");
        Add(extent);
        _inode.Nblocks += extent.BlockCount;
        _space.Remapped(_tx, _inode.Number, extent, _fork, mapped: true, Shared);
    }

    /// <summary>
    /// Unmaps [<paramref name="fileBlock"/>, +<paramref name="count"/>) without freeing the blocks (__xfs_bunmapi with
    /// XFS_BMAPI_REMAP: they move elsewhere); only their reverse mapping goes. Returns the blocks unmapped.
    /// </summary>
    public ulong UnmapRemap(ulong fileBlock, ulong count) => Unmap(fileBlock, count, free: false);

    private ulong Unmap(ulong fileBlock, ulong count, bool free)
    {
        ulong freed = 0, pos = fileBlock, end = count == ulong.MaxValue ? ulong.MaxValue : fileBlock + count;
        while (pos < end)
        {
            int i = Find(pos);
            if (i < 0)
            {
                i = ~i;
                if (i >= _extents.Count) break;
                pos = _extents[i].FileOffset;
                if (pos >= end) break;
                continue;
            }
            var e = _extents[i];
            ulong stop = Math.Min(end, e.FileEnd);
            Remove(i);
            if (e.FileOffset < pos) Add(e with { BlockCount = (uint)(pos - e.FileOffset) });
            if (stop < e.FileEnd) Add(new BmbtRecord(stop, e.StartBlock + (stop - e.FileOffset), (uint)(e.FileEnd - stop), e.Unwritten));
            uint n = (uint)(stop - pos);
            var gone = new BmbtRecord(pos, e.StartBlock + (pos - e.FileOffset), n, e.Unwritten);
            if (free) _space.Free(_tx, _inode.Number, gone, _fork, Shared);
            else _space.Remapped(_tx, _inode.Number, gone, _fork, mapped: false, Shared);
            _inode.Nblocks -= n;
            freed += n;
            pos = stop;
        }
        return freed;
    }

    // ---- the representation: every change goes through Add and Remove ------------------------------------------

    private readonly List<(bool Insert, BmbtRecord Record)> _pending = new();

    /// <summary>Inserts an extent (which must not overlap any), merging it with contiguous neighbours of the same state.</summary>
    private void Add(BmbtRecord e)
    {
        int i = ~Find(e.FileOffset);
        if (i < 0) throw new InvalidOperationException($"inode {_inode.Number}: extent at file block {e.FileOffset} overlaps the mapping");
        if (i > 0)
        {
            var left = _extents[i - 1];
            if (left.FileEnd == e.FileOffset && left.StartBlock + left.BlockCount == e.StartBlock && left.Unwritten == e.Unwritten &&
                (ulong)left.BlockCount + e.BlockCount <= BmbtRecord.MaxBlockCount)
            {
                Remove(i - 1);
                e = left with { BlockCount = left.BlockCount + e.BlockCount };
                i--;
            }
        }
        if (i < _extents.Count)
        {
            var right = _extents[i];
            if (e.FileEnd == right.FileOffset && e.StartBlock + e.BlockCount == right.StartBlock && e.Unwritten == right.Unwritten &&
                (ulong)e.BlockCount + right.BlockCount <= BmbtRecord.MaxBlockCount)
            {
                Remove(i);
                e = e with { BlockCount = e.BlockCount + right.BlockCount };
            }
        }
        _extents.Insert(i, e);
        _pending.Add((true, e));
    }

    private void Remove(int index)
    {
        _pending.Add((false, _extents[index]));
        _extents.RemoveAt(index);
    }

    /// <summary>
    /// Writes the mapping into the fork: an extent list when it fits (converting a btree back), else the btree (created
    /// from the list when it first overflows; changed record by record afterwards). Sets di_nextents and the fork format.
    /// </summary>
    public void Save()
    {
        if (_pending.Count == 0) return;
        _kept = false;
        // Counted before the fork changes, so that a save that fails half-way still tells kept mappings they are stale.
        _matchesAt = _tx.Mount.NoteMappingChange(_inode.Number);
        bool fits = _extents.Count <= ListCapacity;
        if (Format == ForkFormat.Btree)
        {
            ApplyToTree();
            if (fits) BtreeToList();
        }
        else if (fits)
        {
            WriteList();
        }
        else
        {
            ListToBtree();
        }
        _pending.Clear();
        ExtentCount = (ulong)_extents.Count;
        _inode.Parts |= ForkPart;
    }

    /// <summary>
    /// Lays the mapping out again after the fork's size changed (di_forkoff moved; <paramref name="oldRoot"/> is the
    /// fork's previous bytes): an extent list is rewritten, or becomes a btree when it no longer fits
    /// (xfs_bmap_add_attrfork_extents); a btree root is laid out for the new size (keys, then pointers at the new
    /// maximum record count), as the kernel's xfs_bmbt_to_bmdr does when it writes the root back.
    /// </summary>
    public void FitFork(ReadOnlySpan<byte> oldRoot)
    {
        _kept = false;
        _tx.Mount.NoteMappingChange(_inode.Number);
        _matchesAt = -1;
        if (Format == ForkFormat.Extents)
        {
            if (FitsAsList) WriteList();
            else ListToBtree();
            ExtentCount = (ulong)_extents.Count;
        }
        else if (Format == ForkFormat.Btree)
        {
            var old = new BmdrBlockView(oldRoot);
            int n = old.NumRecs;
            int oldMax = (oldRoot.Length - BmdrBlockView.HeaderSize) / 16;
            var fork = Fork;
            int newMax = (fork.Length - BmdrBlockView.HeaderSize) / 16;
            var copy = oldRoot.ToArray();
            if (n > newMax)
            {
                PushRootIntoBlock(copy, oldMax);
                return;
            }
            fork.Clear();
            copy.AsSpan(0, BmdrBlockView.HeaderSize).CopyTo(fork);
            copy.AsSpan(BmdrBlockView.HeaderSize, n * 8).CopyTo(fork[BmdrBlockView.HeaderSize..]);
            copy.AsSpan(BmdrBlockView.HeaderSize + oldMax * 8, n * 8).CopyTo(fork[(BmdrBlockView.HeaderSize + newMax * 8)..]);
        }
        _inode.Parts |= ForkPart;
    }

    /// <summary>
    /// The root's records move into a new tree block one level down and the fork's root points at it alone (what
    /// xfs_bmap_add_attrfork_btree does when the smaller fork cannot hold the root).
    /// </summary>
    private void PushRootIntoBlock(byte[] oldRoot, int oldMax)
    {
        var root = new BmdrBlockView(oldRoot);
        int n = root.NumRecs, level = root.Level;
        var space = TreeSpace();
        ulong near = root.Pointer(0);
        ulong child = space.Allocate(_tx, near);
        int blockSize = (int)_sb.BlockSize;
        long at = _sb.FsbToByte(child);
        var buffer = _tx.GetNew(at, blockSize, unchecked((int)BtreeMagic.BmapV5), _inode.Number, new BmbtLeafWriteVerifier(_sb, _inode.Number), BufType.Btree);
        var block = buffer.Contents.AsSpan();
        int header = _sb.IsV5 ? BtreeBlockView.LongHeaderV5 : BtreeBlockView.LongHeaderV4;
        int blockMax = (blockSize - header) / 16;
        BinaryPrimitives.WriteUInt32BigEndian(block, _sb.IsV5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffLevel..], (ushort)level);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffNumrecs..], (ushort)n);
        BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.OffLeftSib..], BtreeBlockView.NullLongPtr);
        BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffRightSib..], BtreeBlockView.NullLongPtr);
        if (_sb.IsV5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffBlkno..], (ulong)(at >> 9));
            _sb.MetaUuid.TryWriteBytes(block.Slice(BtreeBlockView.LongOffUuid, 16), bigEndian: true, out _);
            BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffOwner..], _inode.Number);
        }
        oldRoot.AsSpan(BmdrBlockView.HeaderSize, n * 8).CopyTo(block[header..]);
        oldRoot.AsSpan(BmdrBlockView.HeaderSize + oldMax * 8, n * 8).CopyTo(block[(header + blockMax * 8)..]);
        _tx.LogRange(buffer, 0, blockSize - 1);

        var fork = Fork;
        fork.Clear();
        int rootMax = (fork.Length - BmdrBlockView.HeaderSize) / 16;
        BinaryPrimitives.WriteUInt16BigEndian(fork, (ushort)(level + 1));
        BinaryPrimitives.WriteUInt16BigEndian(fork[2..], 1);
        BinaryPrimitives.WriteUInt64BigEndian(fork[BmdrBlockView.HeaderSize..], root.Key(0));
        BinaryPrimitives.WriteUInt64BigEndian(fork[(BmdrBlockView.HeaderSize + rootMax * 8)..], child);
        _inode.Parts |= ForkPart;
    }

    /// <summary>Records a btree root with room for <paramref name="records"/> record pairs takes (xfs_bmdr_space_calc).</summary>
    public static int RootSpace(int records) => BmdrBlockView.HeaderSize + records * 16;

    /// <summary>The bytes the fork's current btree root needs (its header and records), or its extent list's bytes.</summary>
    public int UsedForkBytes(ReadOnlySpan<byte> fork) =>
        Format == ForkFormat.Btree ? RootSpace(new BmdrBlockView(fork).NumRecs) : _extents.Count * BmbtRecord.Size;

    private void WriteList()
    {
        var fork = Fork;
        fork.Clear();
        for (int i = 0; i < _extents.Count; i++) _extents[i].Encode(fork[(i * BmbtRecord.Size)..]);
        Format = ForkFormat.Extents;
    }

    /// <summary>Replays the pending removals and insertions on the tree (net of pairs that cancel out).</summary>
    private void ApplyToTree()
    {
        var removed = new Dictionary<ulong, BmbtRecord>();
        var inserted = new Dictionary<ulong, BmbtRecord>();
        foreach (var (insert, record) in _pending)
        {
            if (insert) inserted[record.FileOffset] = record;
            else if (!inserted.Remove(record.FileOffset)) removed[record.FileOffset] = record;
        }
        var cursor = Cursor();
        Span<byte> key = stackalloc byte[8];
        Span<byte> raw = stackalloc byte[BmbtRecord.Size];
        foreach (var (offset, _) in removed.OrderBy(kv => kv.Key))
        {
            BinaryPrimitives.WriteUInt64BigEndian(key, offset);
            if (inserted.Remove(offset, out var replacement))
            {
                if (!cursor.Lookup(key, BtreeLookup.Equal)) throw Corrupt($"the extent btree has no record at file block {offset}");
                replacement.Encode(raw);
                cursor.Update(raw);
                continue;
            }
            if (!cursor.Lookup(key, BtreeLookup.Equal)) throw Corrupt($"the extent btree has no record at file block {offset}");
            cursor.Delete();
        }
        foreach (var (_, record) in inserted.OrderBy(kv => kv.Key))
        {
            record.Encode(raw);
            if (!cursor.Insert(raw)) throw new InvalidOperationException($"inode {_inode.Number}: extent at file block {record.FileOffset} inserted twice");
        }
    }

    /// <summary>xfs_bmap_extents_to_btree: one leaf block takes the extents, the fork becomes a level-1 root pointing at it.</summary>
    private void ListToBtree()
    {
        var space = TreeSpace();
        ulong near = _extents.Count > 0 ? _extents[0].StartBlock : 0;
        ulong leaf = space.Allocate(_tx, near);
        int blockSize = (int)_sb.BlockSize;
        long at = _sb.FsbToByte(leaf);
        var verifierKind = unchecked((int)BtreeMagic.BmapV5);
        var buffer = _tx.GetNew(at, blockSize, verifierKind, _inode.Number, new BmbtLeafWriteVerifier(_sb, _inode.Number), BufType.Btree);
        var block = buffer.Contents.AsSpan();
        int header = _sb.IsV5 ? BtreeBlockView.LongHeaderV5 : BtreeBlockView.LongHeaderV4;
        int leafMax = (blockSize - header) / BmbtRecord.Size;
        if (_extents.Count > leafMax) throw new InvalidOperationException($"inode {_inode.Number}: {_extents.Count} extents overflow one bmbt leaf");
        BinaryPrimitives.WriteUInt32BigEndian(block, _sb.IsV5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffLevel..], 0);
        BinaryPrimitives.WriteUInt16BigEndian(block[BtreeBlockView.OffNumrecs..], (ushort)_extents.Count);
        BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.OffLeftSib..], BtreeBlockView.NullLongPtr);
        BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffRightSib..], BtreeBlockView.NullLongPtr);
        if (_sb.IsV5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffBlkno..], (ulong)(at >> 9));
            _sb.MetaUuid.TryWriteBytes(block.Slice(BtreeBlockView.LongOffUuid, 16), bigEndian: true, out _);
            BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffOwner..], _inode.Number);
        }
        for (int i = 0; i < _extents.Count; i++) _extents[i].Encode(block[(header + i * BmbtRecord.Size)..]);
        _tx.LogRange(buffer, 0, blockSize - 1);

        var fork = Fork;
        fork.Clear();
        int rootMax = (fork.Length - BmdrBlockView.HeaderSize) / 16;
        BinaryPrimitives.WriteUInt16BigEndian(fork, 1);
        BinaryPrimitives.WriteUInt16BigEndian(fork[2..], 1);
        BinaryPrimitives.WriteUInt64BigEndian(fork[BmdrBlockView.HeaderSize..], _extents.Count > 0 ? _extents[0].FileOffset : 0);
        BinaryPrimitives.WriteUInt64BigEndian(fork[(BmdrBlockView.HeaderSize + rootMax * 8)..], leaf);
        Format = ForkFormat.Btree;
    }

    /// <summary>xfs_bmap_btree_to_extents: every tree block is freed, the extents go back into the fork.</summary>
    private void BtreeToList()
    {
        var space = TreeSpace();
        var blocks = new List<ulong>();
        CollectTreeBlocks(blocks);
        foreach (var fsb in blocks)
        {
            _tx.Invalidate(_sb.FsbToByte(fsb), (int)_sb.BlockSize);
            space.Free(_tx, fsb);
        }
        WriteList();
    }

    /// <summary>Every block below the inode root, level by level.</summary>
    private void CollectTreeBlocks(List<ulong> blocks)
    {
        var fork = Fork;
        var root = new BmdrBlockView(fork);
        var level = new List<ulong>();
        for (int i = 0; i < root.NumRecs; i++) level.Add(root.Pointer(i));
        int height = root.Level;
        var reader = TransactionBtreeStore.ForInodeRoot<BmbtOps>(_tx, _inode.Number, RootHolder, _inode.ByteOffset, TreeSpace());
        uint magic = _sb.IsV5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4;
        int header = _sb.IsV5 ? BtreeBlockView.LongHeaderV5 : BtreeBlockView.LongHeaderV4;
        for (int h = height - 1; h >= 0 && level.Count > 0; h--)
        {
            blocks.AddRange(level);
            if (h == 0) break;
            var next = new List<ulong>();
            foreach (var ptr in level)
            {
                var b = reader.Read(ptr, magic, _inode.ByteOffset);
                int n = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(BtreeBlockView.OffNumrecs));
                int max = ((int)_sb.BlockSize - header) / 16;
                for (int i = 0; i < n; i++) next.Add(BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(header + max * 8 + i * 8)));
            }
            level = next;
        }
    }

    /// <summary>The write verifier of a new bmbt block (checks the block as the read cursor would, stamps LSN and CRC).</summary>
    private sealed class BmbtLeafWriteVerifier(Superblock sb, ulong ino) : Metadata.IBufferWriteVerifier
    {
        public string Structure => $"extent btree block of inode {ino}";

        public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
        {
            if (sb.IsV5)
            {
                if (lsn != 0) BinaryPrimitives.WriteUInt64BigEndian(block[BtreeBlockView.LongOffLsn..], lsn);
                XfsCrc.Stamp(block, BtreeBlockView.LongOffCrc);
            }
            return BtreeBlockView.Verify(block, sb.IsV5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4, true, sb, byteOffset, ino);
        }
    }
}

using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Btree;

/// <summary>How a lookup positions the cursor when no record has the key (xfs_lookup_t).</summary>
public enum BtreeLookup
{
    /// <summary>At the last record whose key is at most the key.</summary>
    LessOrEqual,
    /// <summary>At the record with the key; when there is none, where it would be inserted.</summary>
    Equal,
    /// <summary>At the first record whose key is at least the key.</summary>
    GreaterOrEqual,
}

/// <summary>
/// A cursor over any XFS B+tree, for reading and writing, in the shape of the kernel's xfs_btree.c: a path of
/// (block, index) pairs from the root down to a leaf record.
/// <para>
/// Reading: lookups descend by key; <see cref="Increment"/> and <see cref="Decrement"/> move along the path (never
/// by sibling pointers, so a sibling cycle in a corrupt tree cannot trap a walk). Every block is checked before use:
/// magic (and, by the store, CRC and self-description), level exactly one below its parent (levels strictly
/// decrease, so a descent cannot loop), and a record count within the block's capacity.
/// </para>
/// <para>
/// Writing keeps the kernel's invariants: records in key order; every node entry's low key equals its child's
/// first key, and in overlapping trees its high key equals the largest high key below; blocks at one level linked
/// left to right by sibling pointers; every block but the root holds between half its capacity (minrecs) and its
/// capacity (maxrecs), except the only child of a root kept in an inode. A full block splits in two (a full root
/// block gets a new root above it; a full root in an inode moves into a new block below the inode); a block under
/// minrecs borrows one entry from a sibling under the same parent, or else joins it; an AG root node left with one
/// child is replaced by that child, and an inode root with one child takes the child's entries when they fit.
/// After <see cref="Insert"/> or <see cref="Delete"/> the cursor has no position: look the next record up again.
/// </para>
/// Borrowing and joining use the siblings under the same parent (every non-root node has at least two children,
/// since a node holds at least four entries in every block size XFS allows); the kernel also reaches across parents.
/// One cursor per tree at a time changes it (the transaction holds the tree's buffers locked).
/// </summary>
public sealed class BtreeCursor<TOps> where TOps : struct, IBtreeOps
{
    private static readonly TOps Ops = default;
    private const int MaxPath = 12;

    // Set by Init (the constructor, or Reuse for a cursor a transaction's store lends again).
    private IBtreeBlockStore _store = null!;
    private bool _v5;
    private int _blockSize, _header, _leafMax, _nodeMax, _ptrSize, _entryKeyBytes, _rootMax;
    private uint _magic;
    // Fixed for the tree's life: where the root lives (read once, off the hot path's interface calls).
    private bool _rootInInode;
    private ArraySegment<byte> _inodeRoot;
    private int _levels;
    // The path from the leaf (level 0) up: block pointers, their bytes and the index in each (inline in the cursor).
    private PathPointers _ptr;
    private PathBlocks _block;
    private PathIndexes _index;
    // Scratch keys: four of Ops.KeySize bytes (low and high, twice) in one array.
    private readonly byte[] _keys;
    private Span<byte> LowA => _keys.AsSpan(0, Ops.KeySize);
    private Span<byte> HighA => _keys.AsSpan(Ops.KeySize, Ops.KeySize);
    private Span<byte> LowB => _keys.AsSpan(2 * Ops.KeySize, Ops.KeySize);
    private Span<byte> HighB => _keys.AsSpan(3 * Ops.KeySize, Ops.KeySize);

    [System.Runtime.CompilerServices.InlineArray(MaxPath)]
    private struct PathPointers { private ulong _element; }

    [System.Runtime.CompilerServices.InlineArray(MaxPath)]
    private struct PathBlocks { private byte[]? _element; }

    [System.Runtime.CompilerServices.InlineArray(MaxPath)]
    private struct PathIndexes { private int _element; }

    // One pending entry per level for inserts that propagate up.
    // Made at the first insert (most cursors only look up, update or delete).
    private byte[][]? _pending;
    private bool _positioned;

    public BtreeCursor(IBtreeBlockStore store)
    {
        _keys = new byte[4 * Ops.KeySize];
        Init(store);
    }

    /// <summary>
    /// Makes this cursor a new cursor over <paramref name="store"/>, as the constructor would, keeping its scratch
    /// arrays: for <see cref="TransactionBtreeStore.Cursor{TOps}"/>, whose cursors live no longer than their transaction.
    /// </summary>
    internal void Reuse(IBtreeBlockStore store)
    {
        _ptr = default;
        _block = default;
        _index = default;
        _positioned = false;
        _inodeRoot = default;
        _rootMax = 0;
        Init(store);
    }

    private void Init(IBtreeBlockStore store)
    {
        _store = store;
        _v5 = store.IsV5;
        _blockSize = store.BlockSize;
        _magic = Ops.Magic(_v5);
        _header = BtreeBlockView.HeaderSize(Ops.LongPointers, _v5);
        _ptrSize = Ops.LongPointers ? 8 : 4;
        _entryKeyBytes = Ops.Overlapping ? 2 * Ops.KeySize : Ops.KeySize;
        _leafMax = LeafMaxRecs(_blockSize, _v5);
        _nodeMax = NodeMaxRecs(_blockSize, _v5);
        _levels = store.Levels;
        _rootInInode = store.RootInInode;
        if (_rootInInode) _inodeRoot = store.InodeRoot;
        // Joins look for siblings under the same parent; a non-root node has two children or more only when minrecs is 2 or more.
        if (_nodeMax < 4 || _leafMax < 2)
            throw new ArgumentException($"{Ops.Name} blocks of {_blockSize} bytes hold too few entries ({_leafMax} records, {_nodeMax} node entries)", nameof(store));
        if (store.RootInInode)
        {
            if (!Ops.LongPointers) throw new InvalidOperationException($"{Ops.Name} cannot be rooted in an inode");
            _rootMax = (store.InodeRoot.Count - BmdrBlockView.HeaderSize) / (_entryKeyBytes + 8);
            var root = store.InodeRoot.AsSpan();
            int level = BinaryPrimitives.ReadUInt16BigEndian(root), n = BinaryPrimitives.ReadUInt16BigEndian(root[2..]);
            if (_rootMax < 1 || level == 0 || level + 1 != _levels || level >= Ops.MaxLevels || n == 0 || n > _rootMax)
                throw store.Corrupt($"{Ops.Name} root in inode {store.Owner}", -1, $"level {level} with {n} records (room for {_rootMax})");
        }
        else if (_levels <= 0 || _levels > Ops.MaxLevels)
        {
            throw store.Corrupt($"{Ops.Name} root", store.ByteOffset(store.RootPointer), $"{_levels} levels");
        }
    }

    /// <summary>Records a leaf of <paramref name="blockSize"/> bytes holds (xfs_btree maxrecs for level 0).</summary>
    public static int LeafMaxRecs(int blockSize, bool v5) =>
        (blockSize - BtreeBlockView.HeaderSize(Ops.LongPointers, v5)) / Ops.RecordSize;

    /// <summary>Entries a node of <paramref name="blockSize"/> bytes holds.</summary>
    public static int NodeMaxRecs(int blockSize, bool v5) =>
        (blockSize - BtreeBlockView.HeaderSize(Ops.LongPointers, v5)) / ((Ops.Overlapping ? 2 : 1) * Ops.KeySize + (Ops.LongPointers ? 8 : 4));

    public int Levels => _levels;
    public int LeafMaxRecords => _leafMax;
    public int NodeMaxRecords => _nodeMax;
    /// <summary>Entries the root in the inode holds (0 for trees rooted in AG headers).</summary>
    public int InodeRootMaxRecords => _rootMax;

    /// <summary>The current record (valid after a positioning call returned true).</summary>
    public ReadOnlySpan<byte> Record =>
        _positioned ? _block[0].AsSpan(_header + _index[0] * Ops.RecordSize, Ops.RecordSize) : throw new InvalidOperationException("the cursor has no position");

    /// <summary>Device byte offset of the leaf holding the current record.</summary>
    public long RecordBlockOffset => _store.ByteOffset(_ptr[0]);

    // ---- blocks of the path -------------------------------------------------------------------------

    /// <summary>One block (or the inode root) with where its entries live.</summary>
    private readonly struct Node
    {
        public readonly ulong Ptr;
        public readonly byte[] Array;
        public readonly int Base, Length, Header, Max, Level;
        public readonly bool InInode;

        public Node(ulong ptr, byte[] array, int @base, int length, int header, int max, int level, bool inInode)
        {
            Ptr = ptr; Array = array; Base = @base; Length = length; Header = header; Max = max; Level = level; InInode = inInode;
        }

        public Span<byte> Span => Array.AsSpan(Base, Length);
        public int NumRecs => BinaryPrimitives.ReadUInt16BigEndian(Span[(InInode ? 2 : BtreeBlockView.OffNumrecs)..]);
        public void SetNumRecs(int n) => BinaryPrimitives.WriteUInt16BigEndian(Span[(InInode ? 2 : BtreeBlockView.OffNumrecs)..], (ushort)n);
        public int NumRecsOffset => InInode ? 2 : BtreeBlockView.OffNumrecs;
    }

    private bool IsInodeRoot(int level) => _rootInInode && level == _levels - 1;

    private Node PathNode(int level)
    {
        if (IsInodeRoot(level))
        {
            return new Node(0, _inodeRoot.Array!, _inodeRoot.Offset, _inodeRoot.Count, BmdrBlockView.HeaderSize, _rootMax, level, true);
        }
        return BlockNode(_ptr[level], _block[level]!, level);
    }

    private Node BlockNode(ulong ptr, byte[] block, int level) =>
        new(ptr, block, 0, _blockSize, _header, level == 0 ? _leafMax : _nodeMax, level, false);

    private int RecOffset(in Node n, int i) => n.Header + i * Ops.RecordSize;
    private int KeyOffset(in Node n, int i) => n.Header + i * _entryKeyBytes;
    private int PtrOffset(in Node n, int i) => n.Header + n.Max * _entryKeyBytes + i * _ptrSize;

    private ulong Ptr(in Node n, int i) => Ops.LongPointers
        ? BinaryPrimitives.ReadUInt64BigEndian(n.Span[PtrOffset(n, i)..])
        : BinaryPrimitives.ReadUInt32BigEndian(n.Span[PtrOffset(n, i)..]);

    private void SetPtr(in Node n, int i, ulong p)
    {
        if (Ops.LongPointers) BinaryPrimitives.WriteUInt64BigEndian(n.Span[PtrOffset(n, i)..], p);
        else BinaryPrimitives.WriteUInt32BigEndian(n.Span[PtrOffset(n, i)..], (uint)p);
    }

    private ReadOnlySpan<byte> EntryLowKey(in Node n, int i) =>
        n.Level == 0 ? default : n.Span.Slice(KeyOffset(n, i), Ops.KeySize);

    private ulong NullPtr => Ops.LongPointers ? BtreeBlockView.NullLongPtr : BtreeBlockView.NullShortPtr;

    private ulong LeftSibling(byte[] b) => Ops.LongPointers ? BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(BtreeBlockView.OffLeftSib)) : BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(BtreeBlockView.OffLeftSib));
    private ulong RightSibling(byte[] b) => Ops.LongPointers ? BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(BtreeBlockView.LongOffRightSib)) : BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(BtreeBlockView.ShortOffRightSib));
    private int RightSibOffset => Ops.LongPointers ? BtreeBlockView.LongOffRightSib : BtreeBlockView.ShortOffRightSib;

    private void SetLeftSibling(ulong ptr, byte[] b, ulong sib)
    {
        if (Ops.LongPointers) BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(BtreeBlockView.OffLeftSib), sib);
        else BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(BtreeBlockView.OffLeftSib), (uint)sib);
        _store.Changed(ptr, b, BtreeBlockView.OffLeftSib, _ptrSize);
    }

    private void SetRightSibling(ulong ptr, byte[] b, ulong sib)
    {
        if (Ops.LongPointers) BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(RightSibOffset), sib);
        else BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(RightSibOffset), (uint)sib);
        _store.Changed(ptr, b, RightSibOffset, _ptrSize);
    }

    private void Dirty(in Node n, int offset, int length)
    {
        if (length <= 0) return;
        if (n.InInode) _store.InodeRootChanged(offset, length);
        else _store.Changed(n.Ptr, n.Array, offset, length);
    }

    /// <summary>Marks entries [from, to) of a node (keys and pointers) or leaf (records) changed.</summary>
    private void DirtyEntries(in Node n, int from, int to)
    {
        if (to <= from) return;
        if (n.Level == 0)
        {
            Dirty(n, RecOffset(n, from), (to - from) * Ops.RecordSize);
            return;
        }
        Dirty(n, KeyOffset(n, from), (to - from) * _entryKeyBytes);
        Dirty(n, PtrOffset(n, from), (to - from) * _ptrSize);
    }

    private void DirtyNumRecs(in Node n) => Dirty(n, n.NumRecsOffset, 2);

    /// <summary>Reads and checks the block at <paramref name="ptr"/> (held by <paramref name="parent"/>) into path slot <paramref name="level"/>.</summary>
    private void Load(int level, ulong ptr, in Node parent)
    {
        if (_block[level] is not null && _ptr[level] == ptr) return;
        _block[level] = ReadChecked(ptr, level, AddressOf(parent));
        _ptr[level] = ptr;
    }

    private byte[] ReadChecked(ulong ptr, int level, long referrer)
    {
        if (ptr == NullPtr)
            throw _store.Corrupt($"{Ops.Name} block", referrer, "null child pointer");
        var b = _store.Read(ptr, _magic, referrer);
        var view = new BtreeBlockView(b);
        if (view.Magic != _magic)
            throw _store.Corrupt($"{Ops.Name} block", _store.ByteOffset(ptr), $"bad magic 0x{view.Magic:x8}");
        if (view.Level != level)
            throw _store.Corrupt($"{Ops.Name} block", _store.ByteOffset(ptr), $"level {view.Level} where level {level} belongs (a loop or misplaced block)");
        int max = level == 0 ? _leafMax : _nodeMax;
        if (view.NumRecs > max)
            throw _store.Corrupt($"{Ops.Name} block", _store.ByteOffset(ptr), $"{view.NumRecs} records, room for {max}");
        if (view.NumRecs == 0 && level > 0)
            throw _store.Corrupt($"{Ops.Name} block", _store.ByteOffset(ptr), "empty interior node");
        return b;
    }

    /// <summary>Device byte offset of a block, or -1 for the root in the inode (the store names the inode).</summary>
    private long AddressOf(in Node n) => n.InInode ? -1 : _store.ByteOffset(n.Ptr);

    /// <summary>The child below entry <paramref name="index"/> of the path node at <paramref name="level"/>, loaded into the path.</summary>
    private void Descend(int level, int index)
    {
        var n = PathNode(level);
        _index[level] = index;
        Load(level - 1, Ptr(n, index), n);
    }

    private void LoadRoot()
    {
        if (_rootInInode) return;
        ulong root = _store.RootPointer;
        if (_block[_levels - 1] is not null && _ptr[_levels - 1] == root) return;
        _block[_levels - 1] = ReadChecked(root, _levels - 1, -1);
        _ptr[_levels - 1] = root;
    }

    // ---- keys ---------------------------------------------------------------------------------------

    /// <summary>The low key (and high key, for overlapping trees) of everything in a node or leaf.</summary>
    private void NodeKeys(in Node n, Span<byte> low, Span<byte> high)
    {
        int count = n.NumRecs;
        var s = n.Span;
        if (n.Level == 0)
        {
            Ops.RecordLowKey(s.Slice(RecOffset(n, 0), Ops.RecordSize), low);
            if (!Ops.Overlapping) return;
            Ops.RecordHighKey(s.Slice(RecOffset(n, 0), Ops.RecordSize), high);
            Span<byte> h = stackalloc byte[Ops.KeySize];
            for (int i = 1; i < count; i++)
            {
                Ops.RecordHighKey(s.Slice(RecOffset(n, i), Ops.RecordSize), h);
                if (Ops.CompareKeys(h, high) > 0) h.CopyTo(high);
            }
            return;
        }
        s.Slice(KeyOffset(n, 0), Ops.KeySize).CopyTo(low);
        if (!Ops.Overlapping) return;
        s.Slice(KeyOffset(n, 0) + Ops.KeySize, Ops.KeySize).CopyTo(high);
        for (int i = 1; i < count; i++)
        {
            var h = s.Slice(KeyOffset(n, i) + Ops.KeySize, Ops.KeySize);
            if (Ops.CompareKeys(h, high) > 0) h.CopyTo(high);
        }
    }

    /// <summary>
    /// Brings the parent entry of <paramref name="child"/> (entry <paramref name="parentIndex"/> of the path node one
    /// level up) and every ancestor's entry on the path up to date, stopping at the first that is already right.
    /// </summary>
    private void UpdateKeys(in Node child, int parentIndex)
    {
        var node = child;
        int pidx = parentIndex;
        for (int level = child.Level + 1; level < _levels; level++)
        {
            if (node.NumRecs == 0) return;
            var parent = PathNode(level);
            NodeKeys(node, LowA, HighA);
            var entry = parent.Span.Slice(KeyOffset(parent, pidx), _entryKeyBytes);
            bool same = entry[..Ops.KeySize].SequenceEqual(LowA) && (!Ops.Overlapping || entry[Ops.KeySize..].SequenceEqual(HighA));
            if (same) return;
            LowA.CopyTo(entry);
            if (Ops.Overlapping) HighA.CopyTo(entry[Ops.KeySize..]);
            Dirty(parent, KeyOffset(parent, pidx), _entryKeyBytes);
            node = parent;
            if (level + 1 < _levels) pidx = _index[level + 1];
        }
    }

    private void UpdatePathKeys(int level)
    {
        if (level + 1 < _levels) UpdateKeys(PathNode(level), _index[level + 1]);
    }

    // ---- lookups and movement -----------------------------------------------------------------------

    /// <summary>
    /// Positions the cursor for <paramref name="key"/> (a key of this tree, <see cref="IBtreeOps.KeySize"/> bytes) and
    /// says whether a record is there: for <see cref="BtreeLookup.Equal"/> one with that key; otherwise one in the
    /// asked direction. After a failed <see cref="BtreeLookup.LessOrEqual"/> lookup <see cref="Increment"/> moves
    /// to the first record; after a failed Equal lookup the cursor sits where the key would be inserted.
    /// </summary>
    public bool Lookup(ReadOnlySpan<byte> key, BtreeLookup mode)
    {
        _positioned = false;
        LoadRoot();
        for (int level = _levels - 1; level > 0; level--)
        {
            var n = PathNode(level);
            int count = n.NumRecs;
            int lo = 0, hi = count - 1;
            while (lo < hi)
            {
                int mid = (lo + hi + 1) >> 1;
                if (Ops.CompareKeys(EntryLowKey(n, mid), key) <= 0) lo = mid; else hi = mid - 1;
            }
            Descend(level, lo);
        }
        var leaf = PathNode(0);
        int nrecs = leaf.NumRecs;
        int first = 0, last = nrecs;
        Span<byte> k = stackalloc byte[Ops.KeySize];
        int cmp = 1;
        // Lower bound: the first record whose key is not below the key.
        while (first < last)
        {
            int mid = (first + last) >> 1;
            Ops.RecordLowKey(leaf.Span.Slice(RecOffset(leaf, mid), Ops.RecordSize), k);
            if (Ops.CompareKeys(k, key) < 0) first = mid + 1; else last = mid;
        }
        if (first < nrecs)
        {
            Ops.RecordLowKey(leaf.Span.Slice(RecOffset(leaf, first), Ops.RecordSize), k);
            cmp = Ops.CompareKeys(k, key);
        }
        _index[0] = first;
        _positioned = true;
        switch (mode)
        {
            case BtreeLookup.Equal:
                return first < nrecs && cmp == 0;
            case BtreeLookup.LessOrEqual:
                if (first < nrecs && cmp == 0) return true;
                _index[0] = first - 1;
                return first > 0;
            default:
                if (first < nrecs) return true;
                _index[0] = nrecs - 1;
                return nrecs > 0 ? Increment() : false;
        }
    }

    /// <summary>Positions at the first record in key order; false for an empty tree.</summary>
    public bool MoveToFirst()
    {
        _positioned = false;
        LoadRoot();
        for (int level = _levels - 1; level > 0; level--) Descend(level, 0);
        _index[0] = 0;
        _positioned = true;
        return PathNode(0).NumRecs > 0;
    }

    /// <summary>Moves to the next record in key order; false after the last (the cursor then sits past it).</summary>
    public bool Increment()
    {
        if (!_positioned) throw new InvalidOperationException("the cursor has no position");
        if (_index[0] + 1 < PathNode(0).NumRecs)
        {
            _index[0]++;
            return true;
        }
        int level = 1;
        while (level < _levels && _index[level] + 1 >= PathNode(level).NumRecs) level++;
        if (level >= _levels)
        {
            _index[0] = PathNode(0).NumRecs;
            return false;
        }
        Descend(level, _index[level] + 1);
        for (level--; level > 0; level--) Descend(level, 0);
        _index[0] = 0;
        if (PathNode(0).NumRecs == 0)
            throw _store.Corrupt($"{Ops.Name} block", _store.ByteOffset(_ptr[0]), "empty leaf inside the tree");
        return true;
    }

    /// <summary>Moves to the previous record in key order; false before the first.</summary>
    public bool Decrement()
    {
        if (!_positioned) throw new InvalidOperationException("the cursor has no position");
        if (_index[0] > 0)
        {
            _index[0]--;
            return true;
        }
        int level = 1;
        while (level < _levels && _index[level] == 0) level++;
        if (level >= _levels)
        {
            _index[0] = -1;
            return false;
        }
        Descend(level, _index[level] - 1);
        for (level--; level > 0; level--) Descend(level, PathNode(level).NumRecs - 1);
        int n = PathNode(0).NumRecs;
        if (n == 0)
            throw _store.Corrupt($"{Ops.Name} block", _store.ByteOffset(_ptr[0]), "empty leaf inside the tree");
        _index[0] = n - 1;
        return true;
    }

    /// <summary>True when the cursor is at a record (not before the first or after the last).</summary>
    public bool AtRecord => _positioned && _index[0] >= 0 && _index[0] < PathNode(0).NumRecs;

    /// <summary>
    /// Visits every record that may overlap the key range [<paramref name="low"/>, <paramref name="high"/>]: records
    /// whose low key is at most <paramref name="high"/> and whose high key is at least <paramref name="low"/>
    /// (xfs_btree_query_range). In an overlapping tree whole subtrees are skipped by their entries' high keys.
    /// Stops when <paramref name="visit"/> returns false. The cursor has no position afterwards.
    /// </summary>
    public void QueryRange<TState>(ReadOnlySpan<byte> low, ReadOnlySpan<byte> high, ref TState state, RecordVisitor<TState> visit)
    {
        _positioned = false;
        if (!Ops.Overlapping)
        {
            // Records do not overlap: start at the last record at or below the low key (it may cover it), then walk.
            bool at = Lookup(low, BtreeLookup.LessOrEqual);
            if (!at && !Increment()) return;
            Span<byte> k = stackalloc byte[Ops.KeySize];
            do
            {
                var rec = Record;
                Ops.RecordLowKey(rec, k);
                if (Ops.CompareKeys(k, high) > 0) break;
                Ops.RecordHighKey(rec, k);
                if (Ops.CompareKeys(k, low) >= 0 && !visit(rec, ref state)) break;
            }
            while (Increment());
            _positioned = false;
            return;
        }
        LoadRoot();
        QueryOverlapping(_levels - 1, low, high, ref state, visit);
        _positioned = false;
    }

    public delegate bool RecordVisitor<TState>(ReadOnlySpan<byte> record, ref TState state);

    /// <summary>Depth-first over the subtree at the path node of <paramref name="level"/>; false when the visitor stopped.</summary>
    private bool QueryOverlapping<TState>(int level, ReadOnlySpan<byte> low, ReadOnlySpan<byte> high, ref TState state, RecordVisitor<TState> visit)
    {
        var n = PathNode(level);
        int count = n.NumRecs;
        Span<byte> k = stackalloc byte[Ops.KeySize];
        for (int i = 0; i < count; i++)
        {
            n = PathNode(level);
            if (level == 0)
            {
                var rec = n.Span.Slice(RecOffset(n, i), Ops.RecordSize);
                Ops.RecordLowKey(rec, k);
                if (Ops.CompareKeys(k, high) > 0) return true;
                Ops.RecordHighKey(rec, k);
                if (Ops.CompareKeys(k, low) >= 0 && !visit(rec, ref state)) return false;
                continue;
            }
            var entry = n.Span.Slice(KeyOffset(n, i), _entryKeyBytes);
            if (Ops.CompareKeys(entry[..Ops.KeySize], high) > 0) return true;
            if (Ops.CompareKeys(entry[Ops.KeySize..], low) < 0) continue;
            Descend(level, i);
            if (!QueryOverlapping(level - 1, low, high, ref state, visit)) return false;
        }
        return true;
    }

    // ---- changes ------------------------------------------------------------------------------------

    /// <summary>Rewrites the current record; its key must keep its place among its neighbours.</summary>
    public void Update(ReadOnlySpan<byte> record)
    {
        if (!AtRecord) throw new InvalidOperationException("the cursor is not at a record");
        var leaf = PathNode(0);
        record[..Ops.RecordSize].CopyTo(leaf.Span[RecOffset(leaf, _index[0])..]);
        Dirty(leaf, RecOffset(leaf, _index[0]), Ops.RecordSize);
        if (_index[0] == 0 || Ops.Overlapping) UpdatePathKeys(0);
    }

    /// <summary>Inserts <paramref name="record"/>; false (nothing changed) when a record with its key exists.</summary>
    public bool Insert(ReadOnlySpan<byte> record)
    {
        Span<byte> key = stackalloc byte[Ops.KeySize];
        Ops.RecordLowKey(record, key);
        if (Lookup(key, BtreeLookup.Equal)) return false;
        _positioned = false;
        var entry = (_pending ??= new byte[MaxPath][])[0] ??= new byte[Math.Max(Ops.RecordSize, _entryKeyBytes)];
        record[..Ops.RecordSize].CopyTo(entry);
        InsertAt(0, _index[0], entry, 0);
        return true;
    }

    /// <summary>Deletes the current record.</summary>
    public void Delete()
    {
        if (!AtRecord) throw new InvalidOperationException("the cursor is not at a record");
        _positioned = false;
        DeleteAt(0, _index[0]);
    }

    /// <summary>Puts an entry (a record at level 0, a key or key pair at a node) into a node that has room for it.</summary>
    private void PutEntry(in Node n, int index, ReadOnlySpan<byte> entry, ulong child)
    {
        int count = n.NumRecs;
        var s = n.Span;
        if (n.Level == 0)
        {
            s.Slice(RecOffset(n, index), (count - index) * Ops.RecordSize).CopyTo(s[RecOffset(n, index + 1)..]);
            entry[..Ops.RecordSize].CopyTo(s[RecOffset(n, index)..]);
        }
        else
        {
            s.Slice(KeyOffset(n, index), (count - index) * _entryKeyBytes).CopyTo(s[KeyOffset(n, index + 1)..]);
            s.Slice(PtrOffset(n, index), (count - index) * _ptrSize).CopyTo(s[PtrOffset(n, index + 1)..]);
            entry[.._entryKeyBytes].CopyTo(s[KeyOffset(n, index)..]);
            SetPtr(n, index, child);
        }
        n.SetNumRecs(count + 1);
        DirtyNumRecs(n);
        DirtyEntries(n, index, count + 1);
    }

    /// <summary>Removes entry <paramref name="index"/> of a node.</summary>
    private void RemoveEntry(in Node n, int index)
    {
        int count = n.NumRecs;
        var s = n.Span;
        if (n.Level == 0)
        {
            s.Slice(RecOffset(n, index + 1), (count - index - 1) * Ops.RecordSize).CopyTo(s[RecOffset(n, index)..]);
        }
        else
        {
            s.Slice(KeyOffset(n, index + 1), (count - index - 1) * _entryKeyBytes).CopyTo(s[KeyOffset(n, index)..]);
            s.Slice(PtrOffset(n, index + 1), (count - index - 1) * _ptrSize).CopyTo(s[PtrOffset(n, index)..]);
        }
        n.SetNumRecs(count - 1);
        DirtyNumRecs(n);
        DirtyEntries(n, index, count - 1);
    }

    /// <summary>Copies <paramref name="count"/> entries from <paramref name="src"/>[si..] to <paramref name="dst"/>[di..] (same level; may be the same node).</summary>
    private void CopyEntries(in Node src, int si, in Node dst, int di, int count)
    {
        if (count <= 0) return;
        if (src.Level == 0)
        {
            src.Span.Slice(RecOffset(src, si), count * Ops.RecordSize).CopyTo(dst.Span[RecOffset(dst, di)..]);
        }
        else
        {
            src.Span.Slice(KeyOffset(src, si), count * _entryKeyBytes).CopyTo(dst.Span[KeyOffset(dst, di)..]);
            src.Span.Slice(PtrOffset(src, si), count * _ptrSize).CopyTo(dst.Span[PtrOffset(dst, di)..]);
        }
        DirtyEntries(dst, di, di + count);
    }

    /// <summary>A new block at <paramref name="level"/>, header written, no entries.</summary>
    private Node NewBlock(int level, ulong near)
    {
        ulong ptr = _store.Allocate(near, out var b);
        var s = b.AsSpan(0, _blockSize);
        s[.._header].Clear();
        BinaryPrimitives.WriteUInt32BigEndian(s, _magic);
        BinaryPrimitives.WriteUInt16BigEndian(s[BtreeBlockView.OffLevel..], (ushort)level);
        BinaryPrimitives.WriteUInt16BigEndian(s[BtreeBlockView.OffNumrecs..], 0);
        if (Ops.LongPointers)
        {
            BinaryPrimitives.WriteUInt64BigEndian(s[BtreeBlockView.OffLeftSib..], BtreeBlockView.NullLongPtr);
            BinaryPrimitives.WriteUInt64BigEndian(s[BtreeBlockView.LongOffRightSib..], BtreeBlockView.NullLongPtr);
            if (_v5)
            {
                BinaryPrimitives.WriteUInt64BigEndian(s[BtreeBlockView.LongOffBlkno..], (ulong)(_store.ByteOffset(ptr) >> 9));
                _store.MetadataUuid.CopyTo(s[BtreeBlockView.LongOffUuid..]);
                BinaryPrimitives.WriteUInt64BigEndian(s[BtreeBlockView.LongOffOwner..], _store.Owner);
            }
        }
        else
        {
            BinaryPrimitives.WriteUInt32BigEndian(s[BtreeBlockView.OffLeftSib..], BtreeBlockView.NullShortPtr);
            BinaryPrimitives.WriteUInt32BigEndian(s[BtreeBlockView.ShortOffRightSib..], BtreeBlockView.NullShortPtr);
            if (_v5)
            {
                BinaryPrimitives.WriteUInt64BigEndian(s[BtreeBlockView.ShortOffBlkno..], (ulong)(_store.ByteOffset(ptr) >> 9));
                _store.MetadataUuid.CopyTo(s[BtreeBlockView.ShortOffUuid..]);
                BinaryPrimitives.WriteUInt32BigEndian(s[BtreeBlockView.ShortOffOwner..], (uint)_store.Owner);
            }
        }
        _store.Changed(ptr, b, 0, _header);
        return BlockNode(ptr, b, level);
    }

    private void FreeBlock(ulong ptr)
    {
        for (int i = 0; i < MaxPath; i++)
            if (_block[i] is not null && _ptr[i] == ptr) _block[i] = null;
        _store.Free(ptr);
    }

    /// <summary>Writes the keys of <paramref name="n"/> into <paramref name="entry"/> (low, then high for overlapping trees).</summary>
    private void EntryFor(in Node n, byte[] entry)
    {
        NodeKeys(n, LowB, HighB);
        LowB.CopyTo(entry);
        if (Ops.Overlapping) HighB.CopyTo(entry.AsSpan(Ops.KeySize));
    }

    /// <summary>
    /// Inserts an entry at <paramref name="index"/> of the path node at <paramref name="level"/> (xfs_btree_insrec),
    /// splitting full blocks and growing the tree as needed. The path above <paramref name="level"/> must lead to it.
    /// </summary>
    private void InsertAt(int level, int index, byte[] entry, ulong child)
    {
        var n = PathNode(level);
        if (n.NumRecs < n.Max)
        {
            PutEntry(n, index, entry, child);
            if (index == 0 || Ops.Overlapping) UpdatePathKeys(level);
            return;
        }
        if (n.InInode)
        {
            NewInodeRoot();
            InsertAt(level, index, entry, child);
            return;
        }
        // xfs_btree_make_block_unfull: an entry moves to a sibling with room before the block is split, so that
        // blocks filled in order (appending) stay nearly full, as the kernel keeps them.
        if (TryShiftRight(level, index) || TryShiftLeft(level, ref index))
        {
            n = PathNode(level);
            PutEntry(n, index, entry, child);
            if (index == 0 || Ops.Overlapping) UpdatePathKeys(level);
            return;
        }

        // Split (xfs_btree_split): the upper entries move to a new right sibling.
        int count = n.NumRecs;
        int leftCount = count / 2;
        if ((count & 1) != 0 && index <= leftCount) leftCount++;
        var right = NewBlock(level, n.Ptr);
        CopyEntries(n, leftCount, right, 0, count - leftCount);
        right.SetNumRecs(count - leftCount);
        DirtyNumRecs(right);
        n.SetNumRecs(leftCount);
        DirtyNumRecs(n);
        ulong oldRight = RightSibling(n.Array);
        SetLeftSibling(right.Ptr, right.Array, n.Ptr);
        SetRightSibling(right.Ptr, right.Array, oldRight);
        SetRightSibling(n.Ptr, n.Array, right.Ptr);
        if (oldRight != NullPtr)
        {
            var far = ReadChecked(oldRight, level, _store.ByteOffset(n.Ptr));
            SetLeftSibling(oldRight, far, right.Ptr);
        }
        if (index > leftCount) PutEntry(right, index - leftCount, entry, child);
        else PutEntry(n, index, entry, child);

        var up = (_pending ??= new byte[MaxPath][])[level + 1] ??= new byte[Math.Max(Ops.RecordSize, _entryKeyBytes)];
        if (level == _levels - 1)
        {
            // The root split: a new root above the two halves (xfs_btree_new_root).
            if (_levels + 1 > Ops.MaxLevels)
                throw new InvalidOperationException($"{Ops.Name} would grow beyond {Ops.MaxLevels} levels");
            var root = NewBlock(level + 1, n.Ptr);
            EntryFor(n, up);
            PutEntry(root, 0, up, n.Ptr);
            EntryFor(right, up);
            PutEntry(root, 1, up, right.Ptr);
            _levels++;
            _store.SetRoot(root.Ptr, _levels);
            _ptr[level + 1] = root.Ptr;
            _block[level + 1] = root.Array;
            _index[level + 1] = 0;
            return;
        }
        UpdatePathKeys(level);
        EntryFor(right, up);
        InsertAt(level + 1, _index[level + 1] + 1, up, right.Ptr);
    }

    /// <summary>
    /// xfs_btree_rshift: the full path node at <paramref name="level"/> gives its last entry to its right sibling (under
    /// the same parent) when that has room and the insert does not go at or after that last entry. True when it did.
    /// </summary>
    private bool TryShiftRight(int level, int index)
    {
        int p = level + 1;
        if (p >= _levels) return false;
        var n = PathNode(level);
        int count = n.NumRecs;
        if (index >= count - 1) return false;
        var parent = PathNode(p);
        int pidx = _index[p];
        if (pidx + 1 >= parent.NumRecs) return false;
        ulong rptr = Ptr(parent, pidx + 1);
        var right = BlockNode(rptr, ReadChecked(rptr, level, AddressOf(parent)), level);
        int rcount = right.NumRecs;
        if (rcount >= right.Max) return false;
        CopyEntries(right, 0, right, 1, rcount);
        CopyEntries(n, count - 1, right, 0, 1);
        right.SetNumRecs(rcount + 1);
        DirtyNumRecs(right);
        n.SetNumRecs(count - 1);
        DirtyNumRecs(n);
        UpdateKeys(right, pidx + 1);
        if (Ops.Overlapping) UpdatePathKeys(level);
        return true;
    }

    /// <summary>
    /// xfs_btree_lshift: the full path node at <paramref name="level"/> gives its first entry to its left sibling (under
    /// the same parent) when that has room and the insert does not go in front; <paramref name="index"/> follows.
    /// </summary>
    private bool TryShiftLeft(int level, ref int index)
    {
        int p = level + 1;
        if (p >= _levels || index == 0) return false;
        var n = PathNode(level);
        var parent = PathNode(p);
        int pidx = _index[p];
        if (pidx == 0) return false;
        ulong lptr = Ptr(parent, pidx - 1);
        var left = BlockNode(lptr, ReadChecked(lptr, level, AddressOf(parent)), level);
        int lcount = left.NumRecs;
        if (lcount >= left.Max) return false;
        CopyEntries(n, 0, left, lcount, 1);
        left.SetNumRecs(lcount + 1);
        DirtyNumRecs(left);
        RemoveEntry(n, 0);
        index--;
        UpdatePathKeys(level);
        UpdateKeys(left, pidx - 1);
        return true;
    }

    /// <summary>
    /// The inode root is full: its entries move to a new block one level down, and the root keeps one entry
    /// pointing at it (xfs_btree_new_iroot). The path's slot for the root's old level now holds the new block.
    /// </summary>
    private void NewInodeRoot()
    {
        int level = _levels - 1;
        var root = PathNode(level);
        if (_levels + 1 > Ops.MaxLevels)
            throw new InvalidOperationException($"{Ops.Name} would grow beyond {Ops.MaxLevels} levels");
        var child = NewBlock(level, NullPtr);
        int count = root.NumRecs;
        CopyEntries(root, 0, child, 0, count);
        child.SetNumRecs(count);
        DirtyNumRecs(child);
        var s = root.Span;
        BinaryPrimitives.WriteUInt16BigEndian(s, (ushort)(level + 1));
        _ptr[level] = child.Ptr;
        _block[level] = child.Array;
        _levels++;
        _store.SetRoot(0, _levels);
        var newRoot = PathNode(level + 1);
        var up = (_pending ??= new byte[MaxPath][])[level + 1] ??= new byte[Math.Max(Ops.RecordSize, _entryKeyBytes)];
        EntryFor(child, up);
        newRoot.SetNumRecs(0);
        PutEntry(newRoot, 0, up, child.Ptr);
        Dirty(newRoot, 0, 2);
        _index[level + 1] = 0;
    }

    private int MinRecs(int level) => (level == 0 ? _leafMax : _nodeMax) / 2;

    /// <summary>Removes entry <paramref name="index"/> of the path node at <paramref name="level"/> (xfs_btree_delrec).</summary>
    private void DeleteAt(int level, int index)
    {
        var n = PathNode(level);
        RemoveEntry(n, index);
        if (level == _levels - 1)
        {
            if (n.InInode)
            {
                TryKillInodeRoot();
                return;
            }
            if (level > 0 && n.NumRecs == 1)
            {
                // Root collapse (xfs_btree_kill_root): the only child becomes the root.
                ulong only = Ptr(n, 0);
                _levels--;
                _store.SetRoot(only, _levels);
                FreeBlock(n.Ptr);
            }
            return;
        }
        if (index == 0 || Ops.Overlapping) UpdatePathKeys(level);

        int p = level + 1;
        if (IsInodeRoot(p) && PathNode(p).NumRecs == 1)
        {
            if (TryKillInodeRoot()) return;
            return; // The only child of an inode root has no sibling to borrow from or join.
        }
        int count = n.NumRecs;
        int min = MinRecs(level);
        if (count >= min) return;

        var parent = PathNode(p);
        int pidx = _index[p];
        int pcount = parent.NumRecs;
        long here = _store.ByteOffset(n.Ptr);
        if (pidx + 1 < pcount)
        {
            ulong rptr = Ptr(parent, pidx + 1);
            var right = BlockNode(rptr, ReadChecked(rptr, level, AddressOf(parent)), level);
            int rcount = right.NumRecs;
            if (rcount - 1 >= min)
            {
                // Borrow the right sibling's first entry (xfs_btree_lshift).
                CopyEntries(right, 0, n, count, 1);
                n.SetNumRecs(count + 1);
                DirtyNumRecs(n);
                RemoveEntry(right, 0);
                UpdatePathKeys(level);
                UpdateKeys(right, pidx + 1);
                return;
            }
        }
        if (pidx > 0)
        {
            ulong lptr = Ptr(parent, pidx - 1);
            var left = BlockNode(lptr, ReadChecked(lptr, level, AddressOf(parent)), level);
            int lcount = left.NumRecs;
            if (lcount - 1 >= min)
            {
                // Borrow the left sibling's last entry (xfs_btree_rshift).
                CopyEntries(n, 0, n, 1, count);
                CopyEntries(left, lcount - 1, n, 0, 1);
                n.SetNumRecs(count + 1);
                DirtyNumRecs(n);
                left.SetNumRecs(lcount - 1);
                DirtyNumRecs(left);
                UpdatePathKeys(level);
                UpdateKeys(left, pidx - 1);
                return;
            }
            if (lcount + count <= n.Max)
            {
                // Join this block into its left sibling.
                CopyEntries(n, 0, left, lcount, count);
                left.SetNumRecs(lcount + count);
                DirtyNumRecs(left);
                ulong far = RightSibling(n.Array);
                SetRightSibling(left.Ptr, left.Array, far);
                if (far != NullPtr) SetLeftSibling(far, ReadChecked(far, level, here), left.Ptr);
                UpdateKeys(left, pidx - 1);
                FreeBlock(n.Ptr);
                DeleteAt(p, pidx);
                return;
            }
        }
        if (pidx + 1 < pcount)
        {
            ulong rptr = Ptr(parent, pidx + 1);
            var right = BlockNode(rptr, ReadChecked(rptr, level, AddressOf(parent)), level);
            int rcount = right.NumRecs;
            if (count + rcount <= n.Max)
            {
                // Join the right sibling into this block.
                CopyEntries(right, 0, n, count, rcount);
                n.SetNumRecs(count + rcount);
                DirtyNumRecs(n);
                ulong far = RightSibling(right.Array);
                SetRightSibling(n.Ptr, n.Array, far);
                if (far != NullPtr) SetLeftSibling(far, ReadChecked(far, level, _store.ByteOffset(rptr)), n.Ptr);
                UpdatePathKeys(level);
                FreeBlock(rptr);
                DeleteAt(p, pidx + 1);
                return;
            }
        }
        throw _store.Corrupt($"{Ops.Name} block", here, $"{count} entries under minrecs {min} and no sibling to borrow from or join");
    }

    /// <summary>
    /// An inode root with one child at level 2 or above takes that child's entries when they fit
    /// (xfs_btree_kill_iroot); roots at level 1 keep their leaves below them.
    /// </summary>
    private bool TryKillInodeRoot()
    {
        int level = _levels - 1;
        var root = PathNode(level);
        if (level < 2 || root.NumRecs != 1) return false;
        ulong cptr = Ptr(root, 0);
        var child = BlockNode(cptr, ReadChecked(cptr, level - 1, -1), level - 1);
        int count = child.NumRecs;
        if (count > _rootMax) return false;
        BinaryPrimitives.WriteUInt16BigEndian(root.Span, (ushort)(level - 1));
        _levels--;
        var lowered = PathNode(level - 1);
        CopyEntries(child, 0, lowered, 0, count);
        lowered.SetNumRecs(count);
        Dirty(lowered, 0, 4);
        _store.SetRoot(0, _levels);
        FreeBlock(cptr);
        return true;
    }
    // ---- whole-tree check ---------------------------------------------------------------------------

    /// <summary>
    /// Walks the whole tree and checks every structural invariant the writer keeps: levels, record counts
    /// (maxrecs everywhere, minrecs except at the root and below an inode root's only child), keys strictly
    /// ascending across the tree, every node entry's keys equal to its child's (low key; high key in
    /// overlapping trees), sibling pointers linking each level left to right. Returns the first problem found,
    /// naming its block, rather than throwing. When <paramref name="records"/> is given, every record is appended
    /// to it in key order.
    /// </summary>
    public BtreeCheckResult CheckStructure(List<byte[]>? records = null)
    {
        var state = new CheckState(_levels, Ops.KeySize);
        try
        {
            if (_rootInInode)
            {
                CheckNode(PathNode(_levels - 1), true, ref state, records);
            }
            else
            {
                var rootBlock = ReadChecked(_store.RootPointer, _levels - 1, -1);
                CheckNode(BlockNode(_store.RootPointer, rootBlock, _levels - 1), true, ref state, records);
            }
            for (int level = 0; level < _levels && state.Problem is null; level++)
            {
                if (level == _levels - 1 && _rootInInode) break;
                if (state.LastBlock[level] is { } last && RightSibling(last) != NullPtr)
                    state.Fail(_store.ByteOffset(state.LastPtr[level]), $"level {level}: last block has right sibling {RightSibling(last)}");
            }
        }
        catch (XfsCorruptionException e)
        {
            state.Fail(e.ByteOffset, e.Problem);
        }
        return new BtreeCheckResult(state.Problem, state.ProblemOffset, state.Records, state.Blocks, _levels);
    }

    private struct CheckState
    {
        public string? Problem;
        public long ProblemOffset;
        public long Records;
        public int Blocks;
        public readonly byte[]?[] LastBlock;
        public readonly ulong[] LastPtr;
        public readonly byte[] PreviousKey;
        public bool HavePrevious;

        public CheckState(int levels, int keySize)
        {
            LastBlock = new byte[]?[levels];
            LastPtr = new ulong[levels];
            PreviousKey = new byte[keySize];
        }

        public void Fail(long offset, string problem)
        {
            if (Problem is not null) return;
            Problem = problem;
            ProblemOffset = offset;
        }
    }

    private void CheckNode(in Node n, bool isRoot, ref CheckState st, List<byte[]>? records, bool onlyChildOfInodeRoot = false)
    {
        if (st.Problem is not null) return;
        long at = AddressOf(n);
        int count = n.NumRecs;
        if (!n.InInode)
        {
            st.Blocks++;
            // Sibling links at this level, left to right.
            ulong expectLeft = st.LastBlock[n.Level] is null ? NullPtr : st.LastPtr[n.Level];
            if (LeftSibling(n.Array) != expectLeft)
            {
                st.Fail(at, $"level {n.Level}: left sibling {LeftSibling(n.Array)}, expected {expectLeft}");
                return;
            }
            if (st.LastBlock[n.Level] is { } prev && RightSibling(prev) != n.Ptr)
            {
                st.Fail(_store.ByteOffset(st.LastPtr[n.Level]), $"level {n.Level}: right sibling {RightSibling(prev)}, expected {n.Ptr}");
                return;
            }
            st.LastBlock[n.Level] = n.Array;
            st.LastPtr[n.Level] = n.Ptr;
        }
        if (count > n.Max) { st.Fail(at, $"{count} entries, room for {n.Max}"); return; }
        int min = isRoot ? (n.InInode ? 1 : (n.Level > 0 ? 2 : 0)) : onlyChildOfInodeRoot ? (n.Level > 0 ? 1 : 0) : MinRecs(n.Level);
        if (count < min) { st.Fail(at, $"{count} entries, fewer than {min}"); return; }
        Span<byte> k = stackalloc byte[Ops.KeySize];
        if (n.Level == 0)
        {
            for (int i = 0; i < count; i++)
            {
                var rec = n.Span.Slice(RecOffset(n, i), Ops.RecordSize);
                Ops.RecordLowKey(rec, k);
                if (st.HavePrevious && Ops.CompareKeys(st.PreviousKey, k) >= 0)
                {
                    st.Fail(at, $"record {i} is not after the record before it");
                    return;
                }
                k.CopyTo(st.PreviousKey);
                st.HavePrevious = true;
                st.Records++;
                records?.Add(rec.ToArray());
            }
            return;
        }
        Span<byte> low = stackalloc byte[Ops.KeySize];
        Span<byte> high = stackalloc byte[Ops.KeySize];
        for (int i = 0; i < count; i++)
        {
            n.Span.Slice(KeyOffset(n, i), Ops.KeySize).CopyTo(k);
            if (i > 0 && Ops.CompareKeys(n.Span.Slice(KeyOffset(n, i - 1), Ops.KeySize), k) >= 0)
            {
                st.Fail(at, $"key {i} is not after the key before it");
                return;
            }
            ulong cptr = Ptr(n, i);
            var child = BlockNode(cptr, ReadChecked(cptr, n.Level - 1, at), n.Level - 1);
            if (child.NumRecs > 0)
            {
                NodeKeys(child, low, high);
                if (!low.SequenceEqual(k))
                {
                    st.Fail(at, $"key {i} differs from the first key of its child {cptr}");
                    return;
                }
                if (Ops.Overlapping && !high.SequenceEqual(n.Span.Slice(KeyOffset(n, i) + Ops.KeySize, Ops.KeySize)))
                {
                    st.Fail(at, $"high key {i} differs from the largest high key below it (child {cptr})");
                    return;
                }
            }
            CheckNode(child, false, ref st, records, n.InInode && count == 1);
            if (st.Problem is not null) return;
        }
    }
}

/// <summary>What <see cref="BtreeCursor{TOps}.CheckStructure"/> found: the first problem (null when none) and its block.</summary>
public readonly record struct BtreeCheckResult(string? Problem, long ProblemByteOffset, long Records, int Blocks, int Levels)
{
    public bool Ok => Problem is null;
}

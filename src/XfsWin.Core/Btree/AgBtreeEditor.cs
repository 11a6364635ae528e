using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Btree;

/// <summary>The short-pointer AG B+trees <see cref="AgBtreeEditor"/> can change.</summary>
public enum AgBtreeKind
{
    FreeSpaceByBlock,
    FreeSpaceByCount,
    Inodes,
    FreeInodes,
    ReverseMap,
    RefCount,
}

/// <summary>
/// What an <see cref="AgBtreeEditor"/> needs from the AG header that owns its tree: blocks for
/// splits, a place for blocks that joins free, and the root when the tree grows or shrinks.
/// </summary>
public interface IAgBtreeHost
{
    /// <summary>A block for a new tree block (the kernel takes bno/cnt/rmap blocks from the AGFL).</summary>
    uint TakeBlock(AgBtreeKind kind);

    /// <summary>Takes back a block the tree no longer uses.</summary>
    void ReleaseBlock(AgBtreeKind kind, uint agbno);

    void SetRoot(AgBtreeKind kind, uint root, int levels);
}

/// <summary>
/// Changes records of one V5 AG B+tree through metadata buffers joined to a
/// <see cref="MetadataChangeSet"/>: insert, delete or rewrite a leaf record, then bring every
/// ancestor's keys up to date (low keys, and the high keys of the overlapping reverse-map tree).
/// Every block it changes is logged whole; blocks the tree gives up are invalidated (never written
/// back); the change set's commit publishes the blocks and the cache's writeback writes them through
/// the tree's write verifier (structure, LSN, CRC).
/// <para>
/// Invariants kept, as the kernel's xfs_btree.c keeps them: every non-root block holds between half
/// its capacity and its capacity; a full block splits in two (a full root makes the tree one level
/// taller); a block under half full borrows an entry from a sibling under the same parent or joins
/// it; a root node left with one child is replaced by that child. Siblings stay linked left to right.
/// Blocks come from and go back to the <see cref="IAgBtreeHost"/>.
/// </para>
/// Not for hot paths: every call descends from the root and reads whole blocks.
/// </summary>
public sealed class AgBtreeEditor
{
    private const int HeaderSize = BtreeBlockView.ShortHeaderV5;

    private readonly MetadataChangeSet _changes;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly AgBtreeKind _kind;
    private readonly IAgBtreeHost _host;
    private uint _root;
    private int _levels;
    private readonly int _blockSize;
    private readonly AgBtreeBlockVerifier _verifier;
    private readonly IBufferWriteVerifier _writeVerifier;

    public AgBtreeEditor(MetadataChangeSet changes, Superblock sb, uint agno, AgBtreeKind kind, uint root, int levels, IAgBtreeHost host)
    {
        _host = host;
        if (!sb.IsV5) throw new XfsException(XfsError.Unsupported, "changing B+trees of V4 volumes is not supported");
        _changes = changes;
        _sb = sb;
        _agno = agno;
        _kind = kind;
        _root = root;
        _levels = levels;
        _blockSize = (int)sb.BlockSize;
        _verifier = new AgBtreeBlockVerifier(sb, agno, Magic, $"{Name} of AG {agno}");
        _writeVerifier = _verifier.ForWrite();
        if (levels is < 1 or > 9 || root == 0 || root >= sb.AgBlocks)
            throw Corrupt(root, $"root {root} with {levels} levels is not a valid tree");
    }

    public string Name => _kind switch
    {
        AgBtreeKind.FreeSpaceByBlock => "free space btree (bnobt)",
        AgBtreeKind.FreeSpaceByCount => "free space btree (cntbt)",
        AgBtreeKind.Inodes => "inode btree (inobt)",
        AgBtreeKind.FreeInodes => "free inode btree (finobt)",
        AgBtreeKind.RefCount => "reference count btree (refcountbt)",
        _ => "reverse mapping btree (rmapbt)",
    };

    private uint Magic => _kind switch
    {
        AgBtreeKind.FreeSpaceByBlock => BtreeMagic.BnoV5,
        AgBtreeKind.FreeSpaceByCount => BtreeMagic.CntV5,
        AgBtreeKind.Inodes => BtreeMagic.InoV5,
        AgBtreeKind.FreeInodes => BtreeMagic.FinoV5,
        AgBtreeKind.RefCount => BtreeMagic.RefcountV5,
        _ => BtreeMagic.RmapV5,
    };

    public int RecordSize => _kind switch
    {
        AgBtreeKind.FreeSpaceByBlock or AgBtreeKind.FreeSpaceByCount => 8,
        AgBtreeKind.Inodes or AgBtreeKind.FreeInodes => InobtRecord.Size,
        AgBtreeKind.RefCount => RefcountRecord.Size,
        _ => RmapRecord.Size,
    };

    /// <summary>Bytes of one key (the low key; overlapping trees store a high key of the same size after it).</summary>
    private int KeySize => _kind switch
    {
        AgBtreeKind.FreeSpaceByBlock or AgBtreeKind.FreeSpaceByCount => 8,
        AgBtreeKind.Inodes or AgBtreeKind.FreeInodes => InobtRecord.KeySize,
        AgBtreeKind.RefCount => RefcountRecord.KeySize,
        _ => RmapRecord.KeySize,
    };

    private bool Overlapping => _kind == AgBtreeKind.ReverseMap;
    private int NodeEntryKeys => Overlapping ? 2 * KeySize : KeySize;
    private int LeafMax => (_blockSize - HeaderSize) / RecordSize;
    private int NodeMax => (_blockSize - HeaderSize) / (NodeEntryKeys + 4);

    /// <summary>A leaf record's place: the blocks from the root down and the index in each.</summary>
    public sealed class Position
    {
        internal readonly uint[] Blocks;
        internal readonly byte[][] Data;
        internal readonly int[] Index;

        internal Position(int levels)
        {
            Blocks = new uint[levels];
            Data = new byte[levels][];
            Index = new int[levels];
        }

        /// <summary>Index in the leaf; -1 when every record is greater than the key looked up.</summary>
        public int LeafIndex => Index[0];
    }

    // ---- keys -----------------------------------------------------------------------------------

    /// <summary>The key a record sorts by (what a node holds as its child's low key).</summary>
    public void LowKey(ReadOnlySpan<byte> record, Span<byte> key)
    {
        switch (_kind)
        {
            case AgBtreeKind.Inodes or AgBtreeKind.FreeInodes or AgBtreeKind.RefCount:
                record[..4].CopyTo(key);
                break;
            case AgBtreeKind.ReverseMap:
                record[..4].CopyTo(key);                    // startblock
                record.Slice(8, 8).CopyTo(key[4..]);        // owner
                BinaryPrimitives.WriteUInt64BigEndian(key[12..], BinaryPrimitives.ReadUInt64BigEndian(record[16..]) & ~RmapRecord.UnwrittenFlag);
                break;
            default:
                record[..8].CopyTo(key);
                break;
        }
    }

    /// <summary>The reverse-map tree's high key of a record: its last block and, for file data, last file offset.</summary>
    private void HighKey(ReadOnlySpan<byte> record, Span<byte> key)
    {
        LowKey(record, key);
        uint adjust = BinaryPrimitives.ReadUInt32BigEndian(record[4..]) - 1;
        BinaryPrimitives.WriteUInt32BigEndian(key, BinaryPrimitives.ReadUInt32BigEndian(record) + adjust);
        ulong owner = BinaryPrimitives.ReadUInt64BigEndian(record[8..]);
        ulong offset = BinaryPrimitives.ReadUInt64BigEndian(key[12..]);
        if (!RmapRecord.IsNonInodeOwner(owner) && (offset & RmapRecord.BmbtBlockFlag) == 0)
            BinaryPrimitives.WriteUInt64BigEndian(key[12..], ((offset & RmapRecord.OffsetMask) + adjust) | (offset & ~RmapRecord.OffsetMask));
    }

    /// <summary>Orders keys as the kernel's key comparison for this tree does.</summary>
    public int Compare(ReadOnlySpan<byte> a, ReadOnlySpan<byte> b)
    {
        switch (_kind)
        {
            case AgBtreeKind.FreeSpaceByBlock:
                return BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
            case AgBtreeKind.FreeSpaceByCount:
                int byCount = BinaryPrimitives.ReadUInt32BigEndian(a[4..]).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b[4..]));
                return byCount != 0 ? byCount : BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
            case AgBtreeKind.Inodes or AgBtreeKind.FreeInodes or AgBtreeKind.RefCount:
                // Refcount keys carry the CoW-staging domain in their top bit, so staging records sort last.
                return BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
            default:
                int c = BinaryPrimitives.ReadUInt32BigEndian(a).CompareTo(BinaryPrimitives.ReadUInt32BigEndian(b));
                if (c != 0) return c;
                c = BinaryPrimitives.ReadUInt64BigEndian(a[4..]).CompareTo(BinaryPrimitives.ReadUInt64BigEndian(b[4..]));
                if (c != 0) return c;
                return (BinaryPrimitives.ReadUInt64BigEndian(a[12..]) & RmapRecord.OffsetMask).CompareTo(BinaryPrimitives.ReadUInt64BigEndian(b[12..]) & RmapRecord.OffsetMask);
        }
    }

    // ---- lookups --------------------------------------------------------------------------------

    /// <summary>Descends to the last record whose key is at most <paramref name="key"/> (leaf index -1 when there is none).</summary>
    public Position FindLessOrEqual(ReadOnlySpan<byte> key)
    {
        var pos = new Position(_levels);
        uint bno = _root;
        Span<byte> entryKey = stackalloc byte[KeySize];
        for (int level = _levels - 1; level >= 0; level--)
        {
            var block = ReadBlock(bno, level);
            pos.Blocks[level] = bno;
            pos.Data[level] = block;
            int n = NumRecs(block);
            int found = -1;
            for (int i = 0; i < n; i++)
            {
                if (level == 0) LowKey(RecordSpan(block, i), entryKey);
                else NodeLowKey(block, i).CopyTo(entryKey);
                if (Compare(entryKey, key) <= 0) found = i;
                else break;
            }
            if (level == 0)
            {
                pos.Index[0] = found;
                break;
            }
            if (n == 0) throw Corrupt(bno, "an interior block has no entries");
            pos.Index[level] = Math.Max(found, 0);
            bno = NodePointer(block, pos.Index[level]);
        }
        return pos;
    }

    /// <summary>The record at a position (a copy).</summary>
    public byte[] RecordAt(Position pos) => RecordSpan(pos.Data[0], pos.Index[0]).ToArray();

    /// <summary>The record after a position, following the right sibling when the leaf ends; null at the end of the tree.</summary>
    public byte[]? RecordAfter(Position pos)
    {
        var leaf = pos.Data[0];
        int next = pos.Index[0] + 1;
        if (next < NumRecs(leaf)) return RecordSpan(leaf, next).ToArray();
        uint right = BinaryPrimitives.ReadUInt32BigEndian(leaf.AsSpan(BtreeBlockView.ShortOffRightSib));
        if (right == BtreeBlockView.NullShortPtr) return null;
        var sibling = ReadBlock(right, 0);
        return NumRecs(sibling) > 0 ? RecordSpan(sibling, 0).ToArray() : null;
    }

    /// <summary>The last record of the tree, or null when the tree is empty.</summary>
    public byte[]? LastRecord()
    {
        uint bno = _root;
        for (int level = _levels - 1; level >= 0; level--)
        {
            var block = ReadBlock(bno, level);
            int n = NumRecs(block);
            if (n == 0) return null;
            if (level == 0) return RecordSpan(block, n - 1).ToArray();
            bno = NodePointer(block, n - 1);
        }
        return null;
    }

    // ---- changes --------------------------------------------------------------------------------

    /// <summary>Rewrites the record at <paramref name="pos"/>; its key may change only within its neighbours' order.</summary>
    public void Update(Position pos, ReadOnlySpan<byte> record)
    {
        var leaf = pos.Data[0];
        CheckOrder(leaf, pos.Index[0], record, replacing: true);
        record.CopyTo(RecordSpan(leaf, pos.Index[0]));
        WriteBlock(pos.Blocks[0], leaf);
        RefreshPath(pos, 0);
    }

    /// <summary>Removes the record at <paramref name="pos"/> (the position is spent afterwards).</summary>
    public void Delete(Position pos)
    {
        if (pos.Index[0] < 0 || pos.Index[0] >= NumRecs(pos.Data[0])) throw new ArgumentOutOfRangeException(nameof(pos));
        DeleteEntry(pos, 0);
    }

    public void Insert(ReadOnlySpan<byte> record)
    {
        Span<byte> key = stackalloc byte[KeySize];
        LowKey(record, key);
        var pos = FindLessOrEqual(key);
        int at = pos.Index[0] + 1;
        CheckOrder(pos.Data[0], at, record, replacing: false);
        InsertEntry(pos, 0, at, record, 0);
    }

    /// <summary>Removes entry pos.Index[level] of the path's block at <paramref name="level"/>, then restores the invariants.</summary>
    private void DeleteEntry(Position pos, int level)
    {
        var block = pos.Data[level];
        RemoveEntries(block, level, pos.Index[level], 1);
        int n = NumRecs(block);
        WriteBlock(pos.Blocks[level], block);
        if (level == _levels - 1)
        {
            if (level > 0 && n == 1)
            {
                // A root node with one child: the child becomes the root.
                uint child = NodePointer(block, 0);
                _host.ReleaseBlock(_kind, pos.Blocks[level]);
                InvalidateBlock(pos.Blocks[level]);
                _root = child;
                _levels--;
                _host.SetRoot(_kind, _root, _levels);
            }
            return;
        }
        if (n >= MinEntries(level))
        {
            RefreshPath(pos, level);
            return;
        }

        var parent = pos.Data[level + 1];
        int pi = pos.Index[level + 1];
        int pn = NumRecs(parent);
        byte[]? right = null, left = null;
        uint rightBno = 0, leftBno = 0;
        if (pi + 1 < pn)
        {
            rightBno = NodePointer(parent, pi + 1);
            right = ReadBlock(rightBno, level);
            if (NumRecs(right) > MinEntries(level))
            {
                MoveEntries(right, 0, block, n, level, 1);
                WriteBlock(rightBno, right);
                WriteBlock(pos.Blocks[level], block);
                RefreshEntry(parent, pi + 1, right, level);
                RefreshPath(pos, level);
                return;
            }
        }
        if (pi > 0)
        {
            leftBno = NodePointer(parent, pi - 1);
            left = ReadBlock(leftBno, level);
            if (NumRecs(left) > MinEntries(level))
            {
                MoveEntries(left, NumRecs(left) - 1, block, 0, level, 1);
                WriteBlock(leftBno, left);
                WriteBlock(pos.Blocks[level], block);
                RefreshEntry(parent, pi - 1, left, level);
                RefreshPath(pos, level);
                return;
            }
        }
        if (left is not null)
        {
            // Join this block into its left sibling; the parent loses this block's entry.
            MoveEntries(block, 0, left, NumRecs(left), level, n);
            Unlink(pos.Blocks[level], block, leftBno, left);
            WriteBlock(leftBno, left);
            _host.ReleaseBlock(_kind, pos.Blocks[level]);
            InvalidateBlock(pos.Blocks[level]);
            RefreshEntry(parent, pi - 1, left, level);
            DeleteEntry(pos, level + 1);
        }
        else if (right is not null)
        {
            // Join the right sibling into this block; the parent loses the sibling's entry.
            MoveEntries(right, 0, block, n, level, NumRecs(right));
            Unlink(rightBno, right, pos.Blocks[level], block);
            WriteBlock(pos.Blocks[level], block);
            _host.ReleaseBlock(_kind, rightBno);
            InvalidateBlock(rightBno);
            RefreshEntry(parent, pi, block, level);
            pos.Index[level + 1] = pi + 1;
            DeleteEntry(pos, level + 1);
        }
        else
        {
            throw Corrupt(pos.Blocks[level + 1], "an interior block has a single child below the root");
        }
    }

    /// <summary>Inserts one entry (a record, or a node key and pointer) at index <paramref name="at"/> of the path's block, splitting as needed.</summary>
    private void InsertEntry(Position pos, int level, int at, ReadOnlySpan<byte> entry, uint pointer)
    {
        var block = pos.Data[level];
        int n = NumRecs(block);
        if (n < MaxEntries(level))
        {
            PutEntry(block, level, at, entry, pointer);
            WriteBlock(pos.Blocks[level], block);
            pos.Index[level] = at;
            RefreshPath(pos, level);
            return;
        }

        // Split: the upper half moves to a new right sibling; the entry goes where it belongs.
        uint newBno = _host.TakeBlock(_kind);
        var sibling = NewBlock(newBno, level);
        int keep = (n + 1) / 2;
        MoveEntries(block, keep, sibling, 0, level, n - keep);
        uint oldRight = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(BtreeBlockView.ShortOffRightSib));
        BinaryPrimitives.WriteUInt32BigEndian(sibling.AsSpan(BtreeBlockView.OffLeftSib), pos.Blocks[level]);
        BinaryPrimitives.WriteUInt32BigEndian(sibling.AsSpan(BtreeBlockView.ShortOffRightSib), oldRight);
        BinaryPrimitives.WriteUInt32BigEndian(block.AsSpan(BtreeBlockView.ShortOffRightSib), newBno);
        if (oldRight != BtreeBlockView.NullShortPtr)
        {
            var farRight = ReadBlock(oldRight, level);
            BinaryPrimitives.WriteUInt32BigEndian(farRight.AsSpan(BtreeBlockView.OffLeftSib), newBno);
            WriteBlock(oldRight, farRight);
        }
        if (at <= keep) PutEntry(block, level, at, entry, pointer);
        else PutEntry(sibling, level, at - keep, entry, pointer);
        WriteBlock(pos.Blocks[level], block);
        WriteBlock(newBno, sibling);

        Span<byte> siblingKey = stackalloc byte[NodeEntryKeys];
        EntryKeys(sibling, level, siblingKey);
        if (level == _levels - 1)
        {
            // The root split: a new root above the two halves.
            uint rootBno = _host.TakeBlock(_kind);
            var root = NewBlock(rootBno, level + 1);
            Span<byte> keys = stackalloc byte[NodeEntryKeys];
            EntryKeys(block, level, keys);
            PutEntry(root, level + 1, 0, keys, pos.Blocks[level]);
            PutEntry(root, level + 1, 1, siblingKey, newBno);
            WriteBlock(rootBno, root);
            _root = rootBno;
            _levels++;
            _host.SetRoot(_kind, _root, _levels);
            return;
        }
        RefreshEntry(pos.Data[level + 1], pos.Index[level + 1], block, level);
        InsertEntry(pos, level + 1, pos.Index[level + 1] + 1, siblingKey, newBno);
    }

    /// <summary>Takes <paramref name="gone"/> out of the sibling chain; <paramref name="keeper"/> is its neighbour that stays.</summary>
    private void Unlink(uint goneBno, byte[] gone, uint keeperBno, byte[] keeper)
    {
        uint goneLeft = BinaryPrimitives.ReadUInt32BigEndian(gone.AsSpan(BtreeBlockView.OffLeftSib));
        uint goneRight = BinaryPrimitives.ReadUInt32BigEndian(gone.AsSpan(BtreeBlockView.ShortOffRightSib));
        int level = BinaryPrimitives.ReadUInt16BigEndian(gone.AsSpan(BtreeBlockView.OffLevel));
        if (goneLeft == keeperBno)
        {
            BinaryPrimitives.WriteUInt32BigEndian(keeper.AsSpan(BtreeBlockView.ShortOffRightSib), goneRight);
            if (goneRight != BtreeBlockView.NullShortPtr)
            {
                var far = ReadBlock(goneRight, level);
                BinaryPrimitives.WriteUInt32BigEndian(far.AsSpan(BtreeBlockView.OffLeftSib), keeperBno);
                WriteBlock(goneRight, far);
            }
        }
        else if (goneRight == keeperBno)
        {
            BinaryPrimitives.WriteUInt32BigEndian(keeper.AsSpan(BtreeBlockView.OffLeftSib), goneLeft);
            if (goneLeft != BtreeBlockView.NullShortPtr)
            {
                var far = ReadBlock(goneLeft, level);
                BinaryPrimitives.WriteUInt32BigEndian(far.AsSpan(BtreeBlockView.ShortOffRightSib), keeperBno);
                WriteBlock(goneLeft, far);
            }
        }
        else
        {
            throw Corrupt(goneBno, $"its sibling pointers do not name block {keeperBno}");
        }
    }

    // ---- entries --------------------------------------------------------------------------------

    private int MaxEntries(int level) => level == 0 ? LeafMax : NodeMax;
    private int MinEntries(int level) => MaxEntries(level) / 2;

    private void RemoveEntries(byte[] block, int level, int at, int count)
    {
        int n = NumRecs(block);
        if (level == 0)
        {
            var recs = block.AsSpan(HeaderSize, n * RecordSize);
            recs[((at + count) * RecordSize)..].CopyTo(recs[(at * RecordSize)..]);
            recs[((n - count) * RecordSize)..].Clear();
        }
        else
        {
            var keys = block.AsSpan(HeaderSize, n * NodeEntryKeys);
            keys[((at + count) * NodeEntryKeys)..].CopyTo(keys[(at * NodeEntryKeys)..]);
            keys[((n - count) * NodeEntryKeys)..].Clear();
            var ptrs = block.AsSpan(PointerBase, n * 4);
            ptrs[((at + count) * 4)..].CopyTo(ptrs[(at * 4)..]);
            ptrs[((n - count) * 4)..].Clear();
        }
        SetNumRecs(block, n - count);
    }

    private void PutEntry(byte[] block, int level, int at, ReadOnlySpan<byte> entry, uint pointer)
    {
        int n = NumRecs(block);
        if (level == 0)
        {
            var recs = block.AsSpan(HeaderSize, (n + 1) * RecordSize);
            recs[(at * RecordSize)..(n * RecordSize)].CopyTo(recs[((at + 1) * RecordSize)..]);
            entry.CopyTo(recs[(at * RecordSize)..]);
        }
        else
        {
            var keys = block.AsSpan(HeaderSize, (n + 1) * NodeEntryKeys);
            keys[(at * NodeEntryKeys)..(n * NodeEntryKeys)].CopyTo(keys[((at + 1) * NodeEntryKeys)..]);
            entry.CopyTo(keys[(at * NodeEntryKeys)..]);
            var ptrs = block.AsSpan(PointerBase, (n + 1) * 4);
            ptrs[(at * 4)..(n * 4)].CopyTo(ptrs[((at + 1) * 4)..]);
            BinaryPrimitives.WriteUInt32BigEndian(ptrs[(at * 4)..], pointer);
        }
        SetNumRecs(block, n + 1);
    }

    /// <summary>Moves <paramref name="count"/> entries from one block of a level to another, at the given indexes.</summary>
    private void MoveEntries(byte[] from, int fromAt, byte[] to, int toAt, int level, int count)
    {
        int size = level == 0 ? RecordSize : NodeEntryKeys;
        for (int k = 0; k < count; k++)
        {
            var entry = from.AsSpan(HeaderSize + (fromAt + k) * size, size).ToArray();
            uint pointer = level == 0 ? 0 : NodePointer(from, fromAt + k);
            PutEntry(to, level, toAt + k, entry, pointer);
        }
        RemoveEntries(from, level, fromAt, count);
    }

    /// <summary>The keys a parent holds for a child block: its lowest key and (overlapping trees) its highest key.</summary>
    private void EntryKeys(byte[] child, int childLevel, Span<byte> keys)
    {
        Span<byte> candidate = stackalloc byte[KeySize];
        var low = keys[..KeySize];
        if (childLevel == 0) LowKey(RecordSpan(child, 0), low);
        else NodeLowKey(child, 0).CopyTo(low);
        if (!Overlapping) return;
        var high = keys[KeySize..];
        int n = NumRecs(child);
        for (int k = 0; k < n; k++)
        {
            if (childLevel == 0) HighKey(RecordSpan(child, k), candidate);
            else NodeKeys(child, k)[KeySize..].CopyTo(candidate);
            if (k == 0 || Compare(candidate, high) > 0) candidate.CopyTo(high);
        }
    }

    private void RefreshEntry(byte[] parent, int index, byte[] child, int childLevel) =>
        EntryKeys(child, childLevel, NodeKeys(parent, index));

    /// <summary>From <paramref name="level"/> up, every block on the path gets its parent's entry refreshed and written.</summary>
    private void RefreshPath(Position pos, int level)
    {
        for (int l = level; l < _levels - 1; l++)
        {
            if (NumRecs(pos.Data[l]) == 0) throw Corrupt(pos.Blocks[l], "a non-root block would be empty");
            RefreshEntry(pos.Data[l + 1], pos.Index[l + 1], pos.Data[l], l);
            WriteBlock(pos.Blocks[l + 1], pos.Data[l + 1]);
        }
    }

    private byte[] NewBlock(uint agbno, int level)
    {
        if (agbno == 0 || agbno >= _sb.AgBlocks) throw Corrupt(agbno, "a new block would lie outside the AG");
        var block = _changes.GetNew(_sb.AgBlockToByte(_agno, agbno), _blockSize, _verifier.Kind, _agno, _writeVerifier).Contents;
        BinaryPrimitives.WriteUInt32BigEndian(block, Magic);
        BinaryPrimitives.WriteUInt16BigEndian(block.AsSpan(BtreeBlockView.OffLevel), (ushort)level);
        BinaryPrimitives.WriteUInt32BigEndian(block.AsSpan(BtreeBlockView.OffLeftSib), BtreeBlockView.NullShortPtr);
        BinaryPrimitives.WriteUInt32BigEndian(block.AsSpan(BtreeBlockView.ShortOffRightSib), BtreeBlockView.NullShortPtr);
        BinaryPrimitives.WriteUInt64BigEndian(block.AsSpan(BtreeBlockView.ShortOffBlkno), (ulong)(_sb.AgBlockToByte(_agno, agbno) >> 9));
        _sb.MetaUuid.TryWriteBytes(block.AsSpan(BtreeBlockView.ShortOffUuid, 16), bigEndian: true, out _);
        BinaryPrimitives.WriteUInt32BigEndian(block.AsSpan(BtreeBlockView.ShortOffOwner), _agno);
        return block;
    }

    /// <summary>A new or rewritten record must sort between its neighbours (a wrong order would corrupt the tree).</summary>
    private void CheckOrder(byte[] leaf, int at, ReadOnlySpan<byte> record, bool replacing)
    {
        Span<byte> mine = stackalloc byte[KeySize], other = stackalloc byte[KeySize];
        LowKey(record, mine);
        int n = NumRecs(leaf);
        if (at > 0)
        {
            LowKey(RecordSpan(leaf, at - 1), other);
            if (Compare(other, mine) > 0) throw Corrupt(0, $"a record would be out of order in {Name} of AG {_agno}");
        }
        int next = replacing ? at + 1 : at;
        if (next < n)
        {
            LowKey(RecordSpan(leaf, next), other);
            if (Compare(mine, other) > 0) throw Corrupt(0, $"a record would be out of order in {Name} of AG {_agno}");
        }
    }

    // ---- blocks ---------------------------------------------------------------------------------

    /// <summary>The block's bytes as this change sees them: read and verified on first use, then the joined buffer's private copy.</summary>
    private byte[] ReadBlock(uint agbno, int level)
    {
        if (agbno == 0 || agbno >= _sb.AgBlocks) throw Corrupt(agbno, "a pointer leads outside the AG");
        var block = _changes.Read(_sb.AgBlockToByte(_agno, agbno), _blockSize, _agno, _verifier, _writeVerifier).Contents;
        if (BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BtreeBlockView.OffLevel)) != level) throw Corrupt(agbno, $"level is not {level}");
        if (NumRecs(block) > MaxEntries(level)) throw Corrupt(agbno, "more entries than fit");
        return block;
    }

    /// <summary>Logs the whole block as changed (its CRC and LSN are stamped at writeback).</summary>
    private void WriteBlock(uint agbno, byte[] block)
    {
        long offset = _sb.AgBlockToByte(_agno, agbno);
        if (!ReferenceEquals(_changes.Read(offset, _blockSize, _agno, _verifier, _writeVerifier).Contents, block))
            throw new InvalidOperationException($"{Name} of AG {_agno}: block {agbno} was changed outside its buffer");
        _changes.LogRange(offset, _blockSize, 0, _blockSize - 1);
    }

    /// <summary>A block the tree gave up: its buffer goes stale and is never written back.</summary>
    private void InvalidateBlock(uint agbno) => _changes.Invalidate(_sb.AgBlockToByte(_agno, agbno), _blockSize);

    private static int NumRecs(byte[] block) => BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BtreeBlockView.OffNumrecs));
    private static void SetNumRecs(byte[] block, int n) => BinaryPrimitives.WriteUInt16BigEndian(block.AsSpan(BtreeBlockView.OffNumrecs), (ushort)n);
    private Span<byte> RecordSpan(byte[] leaf, int i) => leaf.AsSpan(HeaderSize + i * RecordSize, RecordSize);
    private Span<byte> NodeKeys(byte[] node, int i) => node.AsSpan(HeaderSize + i * NodeEntryKeys, NodeEntryKeys);
    private ReadOnlySpan<byte> NodeLowKey(byte[] node, int i) => NodeKeys(node, i)[..KeySize];
    private int PointerBase => HeaderSize + NodeMax * NodeEntryKeys;
    private uint NodePointer(byte[] node, int i) => BinaryPrimitives.ReadUInt32BigEndian(node.AsSpan(PointerBase + i * 4));

    /// <summary>Corruption of this tree: at <paramref name="agbno"/>, or (0) of the tree as a whole, named at its AG header.</summary>
    private XfsCorruptionException Corrupt(uint agbno, string problem) =>
        new($"{Name} of AG {_agno}" + (agbno != 0 ? $", block {agbno}" : " (AG header)"),
            agbno != 0 ? _sb.AgBlockToByte(_agno, agbno) : _sb.AgBlockToByte(_agno, 0) + (_kind is AgBtreeKind.Inodes or AgBtreeKind.FreeInodes ? 2L : 1L) * _sb.SectorSize,
            problem);

}

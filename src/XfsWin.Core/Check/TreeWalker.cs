using System.Buffers;
using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>Sort key of a btree record or node key, as a number compared by the check.</summary>
internal delegate UInt128 TreeKeyOf(ReadOnlySpan<byte> keyOrRecord);

/// <summary>Receives what <see cref="TreeWalker"/> finds, in key order.</summary>
internal interface ITreeVisitor
{
    /// <summary>A leaf record; <paramref name="blockByteOffset"/> is where its block lies.</summary>
    void Record(ReadOnlySpan<byte> record, long blockByteOffset);

    /// <summary>
    /// A block of the tree is about to be read (root included): claim it; false stops the walk from
    /// entering it (already used by something else, so reading it could loop).
    /// </summary>
    bool Block(ulong pointer, long byteOffset, int level);
}

/// <summary>
/// Walks a whole B+tree (an AG btree from its root block, or an inode's bmbt from the root in the
/// fork), depth first in key order, checking every block: magic, CRC, self-address, owner and UUID
/// (through <see cref="BtreeBlockView.Verify"/>), level one below its parent, record counts between
/// the minimum and the maximum, keys in order, sibling pointers linking each level in order with NULL
/// ends, pointers inside the AG or volume. Problems are reported, never thrown; a bad block is not
/// entered. Every block is claimed through the visitor before it is read, so a pointer to a block
/// already seen (a cycle, or two trees sharing a block) stops there: the walk is bounded by the
/// volume's size.
/// </summary>
internal sealed class TreeWalker
{
    private readonly CheckContext _cx;
    private readonly string _name;
    private readonly uint _magic;
    private readonly bool _long;
    private readonly int _recordSize, _keyEntrySize, _pointerSize, _headerSize, _blockSize;
    private readonly ulong _owner;
    private readonly uint _agno;
    private readonly TreeKeyOf _recordKey, _nodeKey;
    private readonly ITreeVisitor _visitor;
    private readonly ulong[] _lastAtLevel = new ulong[MaxLevels];
    private readonly ulong[] _lastRightAtLevel = new ulong[MaxLevels];
    private readonly bool[] _seenLevel = new bool[MaxLevels];
    private bool _rootChildrenExempt;

    public const int MaxLevels = 12;

    public int BlocksVisited { get; private set; }
    public long RecordsVisited { get; private set; }

    /// <param name="keyEntrySize">Bytes per child in a node's key area (two keys for overlapping trees such as the rmapbt).</param>
    public TreeWalker(CheckContext cx, string name, uint magic, bool longPointers, int recordSize, int keyEntrySize, ulong owner, uint agno,
        TreeKeyOf recordKey, TreeKeyOf nodeKey, ITreeVisitor visitor)
    {
        _cx = cx;
        _name = name;
        _magic = magic;
        _long = longPointers;
        _recordSize = recordSize;
        _keyEntrySize = keyEntrySize;
        _pointerSize = longPointers ? 8 : 4;
        _headerSize = BtreeBlockView.HeaderSize(longPointers, cx.Sb.IsV5);
        _blockSize = (int)cx.Sb.BlockSize;
        _owner = owner;
        _agno = agno;
        _recordKey = recordKey;
        _nodeKey = nodeKey;
        _visitor = visitor;
        Array.Fill(_lastAtLevel, NullPointer);
        Array.Fill(_lastRightAtLevel, NullPointer);
    }

    private ulong NullPointer => _long ? BtreeBlockView.NullLongPtr : BtreeBlockView.NullShortPtr;

    private int LeafMax => (_blockSize - _headerSize) / _recordSize;
    private int NodeMax => (_blockSize - _headerSize) / (_keyEntrySize + _pointerSize);

    /// <summary>Walks an AG btree whose root block is <paramref name="root"/> with <paramref name="levels"/> levels.</summary>
    public void WalkFromAgRoot(uint root, uint levels, uint agLength)
    {
        if (levels == 0 || levels >= MaxLevels)
        {
            _cx.Report(_name, _agno, null, $"root level count {levels} is impossible");
            return;
        }
        if (root == 0 || root >= agLength)
        {
            _cx.Report(_name, _agno, null, $"root block {root} is outside the AG");
            return;
        }
        Visit(root, (int)levels - 1, isRoot: true, parentByteOffset: -1);
        CheckLevelEnds();
    }

    /// <summary>Walks a bmbt whose root (xfs_bmdr_block) is <paramref name="fork"/>, of the inode at <paramref name="inodeByteOffset"/>.</summary>
    public void WalkFromInodeRoot(ReadOnlySpan<byte> fork, long inodeByteOffset)
    {
        if (fork.Length < BmdrBlockView.HeaderSize + 16)
        {
            _cx.ReportAt(_name, inodeByteOffset, "btree root does not fit in the fork");
            return;
        }
        var root = new BmdrBlockView(fork);
        int level = root.Level;
        if (level == 0 || level >= MaxLevels - 1 || root.NumRecs == 0 || root.NumRecs > root.MaxRecs)
        {
            _cx.ReportAt(_name, inodeByteOffset, $"root in the inode has level {level} and {root.NumRecs} records (room for {root.MaxRecs})");
            return;
        }
        UInt128 previous = 0;
        // The children of an in-inode root may hold fewer than half the records (xfs_repair exempts them).
        _rootChildrenExempt = true;
        for (int i = 0; i < root.NumRecs; i++)
        {
            UInt128 key = root.Key(i);
            if (i > 0 && key <= previous)
                _cx.ReportAt(_name, inodeByteOffset, $"keys of the root in the inode out of order at {i}");
            previous = key;
            ulong child = root.Pointer(i);
            if (!CheckPointer(child, inodeByteOffset)) continue;
            if (Visit(child, level - 1, isRoot: false, parentByteOffset: inodeByteOffset, rootChild: true) is { } childFirst && childFirst != key)
                _cx.ReportAt(_name, inodeByteOffset, $"key {i} of the root in the inode does not match the first key of its child");
        }
        CheckLevelEnds();
    }

    private bool CheckPointer(ulong pointer, long parentByteOffset)
    {
        bool ok = _long ? _cx.Sb.IsValidFsb(pointer) && (pointer & ((1UL << _cx.Sb.AgBlkLog) - 1)) > 0
                        : pointer != 0 && pointer < _cx.AgLength(_agno);
        if (!ok) Report(parentByteOffset, $"child pointer {pointer} is outside the {(_long ? "volume" : "AG")}");
        return ok;
    }

    private long ByteOffsetOf(ulong pointer) => _long ? _cx.Sb.FsbToByte(pointer) : _cx.Sb.AgBlockToByte(_agno, (uint)pointer);

    private void Report(long byteOffset, string message)
    {
        if (byteOffset >= 0) _cx.ReportAt(_name, byteOffset, message);
        else _cx.Report(_name, _agno, null, message);
    }

    /// <summary>Checks the block and what is below it; returns its first key (what its parent's key must be), or null when it could not be read.</summary>
    private UInt128? Visit(ulong pointer, int expectedLevel, bool isRoot, long parentByteOffset, bool rootChild = false)
    {
        long offset = ByteOffsetOf(pointer);
        if (!_visitor.Block(pointer, offset, expectedLevel)) return null;
        BlocksVisited++;
        byte[] block = ArrayPool<byte>.Shared.Rent(_blockSize);
        try
        {
            var span = block.AsSpan(0, _blockSize);
            if (!_cx.TryRead(offset, span, _name)) return null;
            var verdict = BtreeBlockView.Verify(span, _magic, _long, _cx.Sb, offset, _owner);
            if (!verdict.IsOk)
            {
                Report(offset, verdict.ToString());
                return null;
            }
            _cx.CheckLsn(_name, offset, span, _long ? BtreeBlockView.LongOffLsn : BtreeBlockView.ShortOffLsn);
            var view = new BtreeBlockView(span);
            if (view.Level != expectedLevel)
            {
                Report(offset, $"level {view.Level} where level {expectedLevel} belongs");
                return null;
            }
            int n = view.NumRecs;
            int max = expectedLevel == 0 ? LeafMax : NodeMax;
            if (n > max)
            {
                Report(offset, $"{n} records, room for {max}");
                return null;
            }
            if (!isRoot && !(rootChild && _rootChildrenExempt) && n < max / 2)
                Report(offset, $"{n} records, fewer than the minimum {max / 2} of a non-root block");
            CheckSiblings(view, pointer, expectedLevel, offset, isRoot);
            if (expectedLevel == 0)
            {
                for (int i = 0; i < n; i++)
                {
                    _visitor.Record(span.Slice(_headerSize + i * _recordSize, _recordSize), offset);
                    RecordsVisited++;
                }
                return n > 0 ? _recordKey(span.Slice(_headerSize, _recordSize)) : null;
            }
            UInt128 previous = 0;
            UInt128? first = null;
            int pointerArea = _headerSize + NodeMax * _keyEntrySize;
            for (int i = 0; i < n; i++)
            {
                UInt128 key = _nodeKey(span.Slice(_headerSize + i * _keyEntrySize, _keyEntrySize));
                if (i > 0 && key < previous) Report(offset, $"node keys out of order at {i}");
                previous = key;
                first ??= key;
                var p = span[(pointerArea + i * _pointerSize)..];
                ulong child = _long ? BinaryPrimitives.ReadUInt64BigEndian(p) : BinaryPrimitives.ReadUInt32BigEndian(p);
                if (!CheckPointer(child, offset)) continue;
                // Each key is the first key of its child (the low key, in overlapping trees).
                if (Visit(child, expectedLevel - 1, isRoot: false, parentByteOffset: offset) is { } childFirst && childFirst != key)
                    Report(offset, $"node key {i} does not match the first key of its child");
            }
            return first;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(block);
        }
    }

    /// <summary>
    /// Sibling pointers. Every AG btree block's must be NULL or another block of the AG (the kernel's read verifier, which
    /// xfs_repair applies); how they link a level matters to the extent btree only (xfs_repair's scan_bmapbt: the first
    /// block of a level has no left sibling, each left sibling is the block before, each right sibling the block after;
    /// the last block's right sibling is not looked at). AG btrees are rebuilt whole by xfs_repair, which does not count
    /// their links: broken links there are noted, not counted.
    /// </summary>
    private void CheckSiblings(BtreeBlockView view, ulong pointer, int level, long offset, bool isRoot)
    {
        ulong left = _long ? view.LongLeftSib : view.ShortLeftSib;
        ulong right = _long ? view.LongRightSib : view.ShortRightSib;
        if (!_long)
        {
            uint firstBlock = (uint)((4L * _cx.Sb.SectorSize + _blockSize - 1) / _blockSize);
            foreach (var (which, sibling) in new[] { ("left", left), ("right", right) })
            {
                if (sibling != NullPointer && (sibling < firstBlock || sibling >= _cx.AgLength(_agno) || sibling == pointer))
                    Report(offset, $"{which} sibling {sibling} is not another block of the AG");
            }
        }
        if (isRoot)
        {
            _seenLevel[level] = true;
            return;
        }
        if (!_seenLevel[level])
        {
            if (left != NullPointer) Linkage(offset, $"first block of level {level} has left sibling {left}");
        }
        else
        {
            if (left != _lastAtLevel[level]) Linkage(offset, $"left sibling {left}, but the block before it on level {level} is {_lastAtLevel[level]}");
            if (_lastRightAtLevel[level] != pointer) Linkage(offset, $"the block before it on level {level} names right sibling {_lastRightAtLevel[level]}");
        }
        _seenLevel[level] = true;
        _lastAtLevel[level] = pointer;
        _lastRightAtLevel[level] = right;
    }

    private void Linkage(long offset, string message)
    {
        if (_long) Report(offset, message);
        else _cx.Note($"{_name}: {message} (xfs_repair rebuilds this btree without counting it)");
    }

    private void CheckLevelEnds()
    {
        if (_long) return;
        for (int level = 0; level < MaxLevels; level++)
        {
            if (_seenLevel[level] && _lastRightAtLevel[level] != NullPointer)
                Linkage(-1, $"last block of level {level} has right sibling {_lastRightAtLevel[level]} instead of none");
        }
    }
}

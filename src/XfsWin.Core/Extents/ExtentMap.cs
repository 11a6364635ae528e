using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Metadata;

namespace XfsWin.Extents;

/// <summary>Which fork of an inode.</summary>
public enum ForkKind
{
    Data,
    Attr,
}

/// <summary>
/// Maps file blocks of one inode fork to disk blocks. Extent-list forks are searched in place in the
/// inode; B+tree forks are descended on demand (only the blocks on the path are read, and those come
/// from the verified-buffer cache), never loaded whole. Every record handed out is checked: non-empty,
/// inside one AG of the volume, and ordered after the one before it when walked in sequence.
/// </summary>
public sealed class ExtentMap
{
    private readonly MountContext _mount;
    private readonly Inode _inode;
    private readonly ForkKind _fork;
    private readonly ForkFormat _format;
    private readonly int _forkOffset, _forkSize;
    private readonly ulong _count;
    private BtreeCursor<BmbtOps>? _cursor;

    public Inode Inode => _inode;

    /// <summary>The revision of <see cref="Inode"/> this map was made from (<see cref="Inode.Revision"/>): a later one may map otherwise.</summary>
    public long Revision { get; }

    public ExtentMap(MountContext mount, Inode inode, ForkKind fork)
    {
        _mount = mount;
        _inode = inode;
        Revision = inode.Revision;
        _fork = fork;
        _format = fork == ForkKind.Data ? inode.DataFormat : inode.AttrFormat;
        _forkOffset = fork == ForkKind.Data ? inode.CoreSize : inode.AttrForkOffset;
        _forkSize = fork == ForkKind.Data ? inode.DataForkSize : inode.AttrForkSize;
        _count = fork == ForkKind.Data ? inode.DataExtentCount : inode.AttrExtentCount;
        if (_format == ForkFormat.Extents && _count * BmbtRecord.Size > (ulong)_forkSize)
            throw mount.Corrupt($"inode {inode.Number}", inode.ByteOffset, $"{_count} extents do not fit in the {_fork} fork ({_forkSize} bytes)");
        if (_format is not (ForkFormat.Extents or ForkFormat.Btree))
            throw mount.Corrupt($"inode {inode.Number}", inode.ByteOffset, $"its {_fork} fork is read as a file's blocks but its format ({_format}) maps none");
    }

    /// <summary>
    /// Finds the extent holding <paramref name="fileBlock"/>. When none does (a hole), returns false
    /// and <paramref name="nextStart"/> is where the next extent begins (ulong.MaxValue if none).
    /// </summary>
    public bool TryFind(ulong fileBlock, out BmbtRecord extent, out ulong nextStart)
    {
        extent = default;
        nextStart = ulong.MaxValue;
        if (_format == ForkFormat.Extents)
        {
            int n = (int)_count;
            if (n == 0) return false;
            var fork = _inode.Raw.AsSpan(_forkOffset, _forkSize);
            int lo = 0, hi = n - 1;
            while (lo < hi)
            {
                int mid = (lo + hi + 1) >> 1;
                if (BmbtRecord.Decode(fork[(mid * BmbtRecord.Size)..]).FileOffset <= fileBlock) lo = mid; else hi = mid - 1;
            }
            var rec = Checked(BmbtRecord.Decode(fork[(lo * BmbtRecord.Size)..]), _inode.ByteOffset);
            if (Classify(rec, fileBlock, out extent, out nextStart)) return true;
            if (nextStart == ulong.MaxValue && lo + 1 < n)
                nextStart = NextStart(rec, BmbtRecord.Decode(fork[((lo + 1) * BmbtRecord.Size)..]), _inode.ByteOffset);
            return false;
        }

        var cursor = _cursor ??= NewCursor();
        lock (cursor)
        {
            if (!SeekLessOrEqual(cursor, fileBlock)) return false;
            var rec = Checked(BmbtRecord.Decode(cursor.Record), cursor.RecordBlockOffset);
            if (Classify(rec, fileBlock, out extent, out nextStart)) return true;
            if (nextStart == ulong.MaxValue && cursor.Increment())
                nextStart = NextStart(rec, Checked(BmbtRecord.Decode(cursor.Record), cursor.RecordBlockOffset), cursor.RecordBlockOffset);
            return false;
        }
    }

    /// <summary>
    /// Given the last extent starting at or before <paramref name="fileBlock"/> (or the first extent),
    /// true when it holds the block; otherwise <paramref name="nextStart"/> is set when that extent lies
    /// after the block, and left at ulong.MaxValue when the caller must look at the following extent.
    /// </summary>
    private static bool Classify(in BmbtRecord rec, ulong fileBlock, out BmbtRecord extent, out ulong nextStart)
    {
        extent = default;
        nextStart = ulong.MaxValue;
        if (rec.FileOffset <= fileBlock && fileBlock < rec.FileEnd)
        {
            extent = rec;
            return true;
        }
        if (rec.FileOffset > fileBlock) nextStart = rec.FileOffset;
        return false;
    }

    private ulong NextStart(in BmbtRecord rec, in BmbtRecord next, long where) =>
        next.FileOffset < rec.FileEnd ? throw OutOfOrder(where) : next.FileOffset;

    /// <summary>
    /// The end of the last extent that ends at or before <paramref name="fileBlock"/> (0 when none): where the hole
    /// holding <paramref name="fileBlock"/> begins, when it is in one.
    /// </summary>
    public ulong PreviousEnd(ulong fileBlock)
    {
        if (_format == ForkFormat.Extents)
        {
            var fork = _inode.Raw.AsSpan(_forkOffset, _forkSize);
            int lo = 0, hi = (int)_count - 1;
            ulong end = 0;
            while (lo <= hi)
            {
                int mid = (lo + hi) >>> 1;
                var rec = BmbtRecord.Decode(fork[(mid * BmbtRecord.Size)..]);
                if (rec.FileEnd <= fileBlock) { end = rec.FileEnd; lo = mid + 1; }
                else hi = mid - 1;
            }
            return end;
        }
        var cursor = _cursor ??= NewCursor();
        lock (cursor)
        {
            if (!SeekLessOrEqual(cursor, fileBlock)) return 0;
            var rec = Checked(BmbtRecord.Decode(cursor.Record), cursor.RecordBlockOffset);
            if (rec.FileEnd <= fileBlock) return rec.FileEnd;
            if (rec.FileOffset > fileBlock || !cursor.Decrement()) return 0;
            return Checked(BmbtRecord.Decode(cursor.Record), cursor.RecordBlockOffset).FileEnd;
        }
    }

    /// <summary>
    /// Visits extents in file order starting with the one holding or following <paramref name="fromBlock"/>.
    /// Stops when <paramref name="visit"/> returns false.
    /// </summary>
    public void Walk(ulong fromBlock, Func<BmbtRecord, bool> visit)
    {
        ulong previousEnd = 0;
        if (_format == ForkFormat.Extents)
        {
            var raw = _inode.Raw;
            for (int i = 0; i < (int)_count; i++)
            {
                var rec = Checked(BmbtRecord.Decode(raw.AsSpan(_forkOffset + i * BmbtRecord.Size)), _inode.ByteOffset);
                if (rec.FileOffset < previousEnd) throw OutOfOrder(_inode.ByteOffset);
                previousEnd = rec.FileEnd;
                if (rec.FileEnd <= fromBlock) continue;
                if (!visit(rec)) return;
            }
            return;
        }
        // A private cursor: walks may interleave with lookups from other threads.
        var cursor = NewCursor();
        if (!SeekLessOrEqual(cursor, fromBlock)) return;
        ulong seen = 0;
        do
        {
            var rec = Checked(BmbtRecord.Decode(cursor.Record), cursor.RecordBlockOffset);
            if (rec.FileOffset < previousEnd) throw OutOfOrder(cursor.RecordBlockOffset);
            previousEnd = rec.FileEnd;
            if (++seen > _count + 1 && _count != 0)
                throw _mount.Corrupt($"extent btree of inode {_inode.Number}", cursor.RecordBlockOffset, $"more records than the {_count} extents the inode records");
            if (rec.FileEnd <= fromBlock) continue;
            if (!visit(rec)) return;
        }
        while (cursor.Increment());
    }

    private BtreeCursor<BmbtOps> NewCursor() =>
        new(MountedBtreeStore.ForInodeRoot<BmbtOps>(_mount, _inode.Number, _inode.Raw, _forkOffset, _forkSize, _inode.ByteOffset));

    /// <summary>Positions at the last extent starting at or before <paramref name="fileBlock"/>, or the first extent when all start after it; false when the tree holds none.</summary>
    private static bool SeekLessOrEqual(BtreeCursor<BmbtOps> cursor, ulong fileBlock)
    {
        Span<byte> key = stackalloc byte[8];
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(key, fileBlock);
        return cursor.Lookup(key, BtreeLookup.LessOrEqual) || cursor.Increment();
    }

    private BmbtRecord Checked(BmbtRecord rec, long where)
    {
        var sb = _mount.Superblock;
        if (rec.BlockCount == 0)
            throw _mount.Corrupt($"extent record of inode {_inode.Number}", where, "zero-length extent");
        ulong last = rec.StartBlock + rec.BlockCount - 1;
        if (!sb.IsValidFsb(rec.StartBlock) || !sb.IsValidFsb(last) || (rec.StartBlock >> sb.AgBlkLog) != (last >> sb.AgBlkLog))
            throw _mount.Corrupt($"extent record of inode {_inode.Number}", where,
                $"blocks {rec.StartBlock}..{last} are outside the volume or cross an allocation group");
        if (rec.FileOffset + rec.BlockCount > 1UL << 54)
            throw _mount.Corrupt($"extent record of inode {_inode.Number}", where, "file offset beyond the largest file");
        if (rec.Unwritten && _fork == ForkKind.Attr)
            throw _mount.Corrupt($"extent record of inode {_inode.Number}", where, "unwritten extent in an attribute fork");
        return rec;
    }

    private XfsCorruptionException OutOfOrder(long where) =>
        _mount.Corrupt($"extent map of inode {_inode.Number}", where, "extents overlap or are out of order");
}

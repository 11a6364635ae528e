using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Directories;

/// <summary>
/// Node-form directories. The hash entries live in leafN blocks (sorted by hash, stale entries allowed) under da-node
/// blocks whose entries name each child with the last hash it holds; the root is always the first leaf-space block,
/// and leaves and nodes of one level are doubly linked in hash order. The best free length of every data block is
/// kept in free-index blocks (one entry per data block, free-index block k covering data blocks k*max to
/// (k+1)*max-1). Every step follows the kernel (xfs_dir2_node.c, xfs_da_btree.c): where the new entry goes, when a
/// leaf or node splits and how the entries are divided, when blocks join and which one survives, when the root
/// splits or collapses, and when the directory goes back to leaf form.
/// </summary>
public sealed partial class DirectoryEditor
{
    /// <summary>Deepest hash tree the kernel builds (XFS_DA_NODE_MAXDEPTH).</summary>
    private const int MaxDaDepth = 5;

    private int InfoSize => _v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4;
    private ushort LeafNMagic => _v5 ? DaBlockInfoView.Dir3LeafNV5 : DaBlockInfoView.Dir2LeafNV4;
    private ushort NodeMagic => _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4;
    private uint FreeMagic => _v5 ? DirectoryAnyBlockVerifier.FreeMagicV5 : DirectoryAnyBlockVerifier.FreeMagicV4;

    /// <summary>Directory-block number of the first free-index block.</summary>
    private long FirstFreeDb => (long)(_freeFsb / (ulong)_fsbPer);

    /// <summary>Where the free-index header's firstdb, nvalid and nused start (after the V5 self-describing header).</summary>
    private int FreeFields => _v5 ? 48 : 4;

    /// <summary>One block on a path from the root down (xfs_da_state_blk): the entry index taken and the last hash it holds.</summary>
    private sealed class PathBlk
    {
        public ulong Blkno;
        public byte[] B = [];
        public int Index;
        public uint Hash;
        public bool Node;
        public PathBlk Copy() => (PathBlk)MemberwiseClone();
    }

    private static List<PathBlk> CopyPath(List<PathBlk> path) => path.Select(p => p.Copy()).ToList();

    // ================================================================ block fields

    private static uint Forw(byte[] b) => BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(DaBlockInfoView.OffForw));
    private static uint Back(byte[] b) => BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(DaBlockInfoView.OffBack));
    private static void SetForw(byte[] b, ulong v) => BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(DaBlockInfoView.OffForw), checked((uint)v));
    private static void SetBack(byte[] b, ulong v) => BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(DaBlockInfoView.OffBack), checked((uint)v));

    /// <summary>Entries of a leafN or node block (leafN: count; node: count, level; same offset).</summary>
    private int DaCount(byte[] b) => U16(b, InfoSize);
    private int NodeLevel(byte[] b) => U16(b, InfoSize + 2);
    private uint LastHash(byte[] b)
    {
        int n = DaCount(b);
        return n == 0 ? 0 : BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(_leafHdr + (n - 1) * 8));
    }

    private List<(uint Hash, uint Address)> DaEntries(byte[] b) => ReadEntries(b, _leafHdr, DaCount(b));

    private void WriteLeafN(byte[] b, List<(uint Hash, uint Address)> ents, int stale)
    {
        if (ents.Count > _daMax) throw new InvalidOperationException($"directory {_dir.Number}: {ents.Count} hash entries overflow a leaf block");
        int old = DaCount(b);
        SetU16(b, InfoSize, ents.Count);
        SetU16(b, InfoSize + 2, stale);
        WriteEntries(b, _leafHdr, ents);
        if (old > ents.Count) b.AsSpan(_leafHdr + ents.Count * 8, (old - ents.Count) * 8).Clear();
    }

    /// <summary>Writes a node's (hash, child) entries; the slots it no longer uses are zeroed as xfs_da3_node_remove does.</summary>
    private void WriteNodeEntries(byte[] b, List<(uint Hash, uint Address)> ents)
    {
        if (ents.Count > _daMax) throw new InvalidOperationException($"directory {_dir.Number}: {ents.Count} entries overflow a da node");
        int old = DaCount(b);
        SetU16(b, InfoSize, ents.Count);
        WriteEntries(b, _leafHdr, ents);
        if (old > ents.Count) b.AsSpan(_leafHdr + ents.Count * 8, (old - ents.Count) * 8).Clear();
    }

    private (long FirstDb, int NValid, int NUsed) FreeHeader(byte[] b) =>
        (BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(FreeFields)), (int)BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(FreeFields + 4)),
         (int)BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(FreeFields + 8)));

    private void SetFreeHeader(byte[] b, long firstDb, int nvalid, int nused)
    {
        BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(FreeFields), checked((uint)firstDb));
        BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(FreeFields + 4), (uint)nvalid);
        BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(FreeFields + 8), (uint)nused);
    }

    private ushort Best(byte[] free, int i) => U16(free, _freeHdr + i * 2);
    private void SetBest(byte[] free, int i, int v) => SetU16(free, _freeHdr + i * 2, v);

    private long DbOf(uint address) => ((long)address << 3) / _blk;
    private ulong FsbOfDb(long db) => (ulong)db * (ulong)_fsbPer;

    // ================================================================ reading hash-tree and free-index blocks

    /// <summary>A leafN or da-node block of the hash tree, joined with the buffer type its magic says.</summary>
    private byte[] ReadDa(ulong blkno, out bool node)
    {
        var b = ReadBlock(blkno, BufType.DaNode);
        ushort magic = U16(b, DaBlockInfoView.OffMagic);
        if (magic == NodeMagic)
        {
            node = true;
            if (DaCount(b) == 0 || DaCount(b) > _daMax)
                throw _tx.Mount.Corrupt($"directory node block of inode {_dir.Number}", ByteOffsetOf(blkno), $"{DaCount(b)} entries");
            return b;
        }
        if (magic != LeafNMagic)
            throw _tx.Mount.Corrupt($"directory hash block of inode {_dir.Number}", ByteOffsetOf(blkno), $"magic 0x{magic:x4} is neither a leafN nor a node block");
        if (DaCount(b) > _daMax || LeafStale(b) > DaCount(b))
            throw _tx.Mount.Corrupt($"directory leafN block of inode {_dir.Number}", ByteOffsetOf(blkno), $"{DaCount(b)} entries, {LeafStale(b)} stale");
        node = false;
        ReadBlock(blkno, BufType.DirLeafN);
        return b;
    }

    private byte[] ReadDa(ulong blkno) => ReadDa(blkno, out _);

    /// <summary>The free-index block of directory block <paramref name="fdb"/>, or null for a hole (xfs_dir2_free_try_read).</summary>
    private byte[]? TryReadFree(long fdb)
    {
        ulong fb = FsbOfDb(fdb);
        if (_space.Map(_dir, fb) < 0) return null;
        var b = ReadBlock(fb, BufType.DirFree);
        var (firstDb, nvalid, nused) = FreeHeader(b);
        if (BinaryPrimitives.ReadUInt32BigEndian(b) != FreeMagic || firstDb != (fdb - FirstFreeDb) * _maxBests || nvalid > _maxBests || nused > nvalid)
            throw _tx.Mount.Corrupt($"directory free-index block of inode {_dir.Number}", ByteOffsetOf(fb), $"header (firstdb {firstDb}, nvalid {nvalid}, nused {nused}) does not fit block {fdb}");
        return b;
    }

    private byte[] ReadFree(long fdb) =>
        TryReadFree(fdb) ?? throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"free-index block {fdb} is missing");

    private byte[] NewFreeBlock(ulong fileBlock, long firstDb)
    {
        long at = _space.Allocate(_tx, _dir, fileBlock, _fsbPer);
        var buffer = _tx.GetNew(at, _blk, new DirectoryAnyBlockVerifier(_sb, _dir.Number).Kind, _dir.Number,
            WriteVerifier, BufType.DirFree);
        _joined[at] = new Joined(buffer, null, NewBlockLogging.Prefix);
        var b = buffer.Contents;
        BinaryPrimitives.WriteUInt32BigEndian(b, FreeMagic);
        if (_v5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(DirectoryDataBlock.OffBlkno), (ulong)(at >> 9));
            _uuid.CopyTo(b, DirectoryDataBlock.OffUuid);
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(DirectoryDataBlock.OffOwner), _dir.Number);
        }
        SetFreeHeader(b, firstDb, 0, 0);
        return b;
    }

    /// <summary>xfs_da_grow_inode: the first unmapped directory block of the leaf space.</summary>
    private ulong NextDaBlock() => _space.FirstUnused(_dir, _leafFsb, _fsbPer);

    // ================================================================ lookup

    /// <summary>xfs_da3_node_lookup_int's descent: in each node the first entry whose hash is at least <paramref name="hash"/>, else the last.</summary>
    private List<PathBlk> Descend(uint hash)
    {
        var path = new List<PathBlk>();
        ulong blkno = _leafFsb;
        while (true)
        {
            if (path.Count == MaxDaDepth)
                throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"hash tree deeper than {MaxDaDepth} levels");
            var b = ReadDa(blkno, out bool node);
            var blk = new PathBlk { Blkno = blkno, B = b, Node = node };
            path.Add(blk);
            if (!node)
            {
                blk.Hash = LastHash(b);
                return path;
            }
            if (path.Count > 1 && NodeLevel(b) != NodeLevel(path[^2].B) - 1 || NodeLevel(b) == 0)
                throw _tx.Mount.Corrupt($"directory node block of inode {_dir.Number}", ByteOffsetOf(blkno), $"level {NodeLevel(b)} under its parent");
            int n = DaCount(b);
            int probe = FirstAtOrAbove(b, _leafHdr, n, hash);
            blk.Index = probe == n ? n - 1 : probe;
            blk.Hash = EntHash(b, _leafHdr, n - 1);
            blkno = EntAddress(b, _leafHdr, blk.Index);
        }
    }

    /// <summary>The data entry a live hash entry points at when it carries <paramref name="name"/>.</summary>
    private Hit? MatchData(uint address, ReadOnlySpan<byte> name, int hashIndex)
    {
        long byteAddress = (long)address << 3;
        ulong fileBlock = FsbOfDb(byteAddress / _blk);
        int off = (int)(byteAddress % _blk);
        if (fileBlock >= _leafFsb || off < _hdr || off + 12 > _blk)
            throw _tx.Mount.Corrupt($"directory hash entry of inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"address {address} outside the data blocks");
        var data = ReadBlock(fileBlock, BufType.DirData);
        int len = data[off + 8];
        return data.AsSpan(off + 9, len).SequenceEqual(name) ? new Hit(data, off, fileBlock, hashIndex) : null;
    }

    private sealed record NodeHit(List<PathBlk> Path, Hit Hit);

    /// <summary>xfs_dir2_leafn_lookup_for_entry over the leaves holding <paramref name="hash"/> (moving right while a leaf ends with it).</summary>
    private NodeHit? NodeLookup(uint hash, ReadOnlySpan<byte> name) => NodeLookup(hash, name, Descend(hash), out _);

    /// <summary>
    /// As <see cref="NodeLookup(uint, ReadOnlySpan{byte})"/> on a path <see cref="Descend"/> made; <paramref name="moved"/>
    /// says whether the search left the path's leaf (then the path no longer leads to where the hash goes first).
    /// </summary>
    private NodeHit? NodeLookup(uint hash, ReadOnlySpan<byte> name, List<PathBlk> path, out bool moved)
    {
        moved = false;
        while (true)
        {
            var leaf = path[^1];
            var b = leaf.B;
            int n = DaCount(b);
            for (int i = FirstAtOrAbove(b, _leafHdr, n, hash); i < n && EntHash(b, _leafHdr, i) == hash; i++)
            {
                uint address = EntAddress(b, _leafHdr, i);
                if (address == 0) continue;
                var hit = MatchData(address, name, i);
                if (hit is not null)
                {
                    leaf.Index = i;
                    return new NodeHit(path, hit.Value);
                }
            }
            if (leaf.Hash != hash) return null;
            moved = true;
            if (!PathShift(path, path.Count, forward: true)) return null;
        }
    }

    /// <summary>
    /// Adds <paramref name="name"/> unless the directory has it (xfs_dir2_node_addname's lookup and insertion on one
    /// descent of the hash tree); false when the name exists.
    /// </summary>
    private bool NodeTryAdd(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        uint hash = Hash(name);
        var path = Descend(hash);
        if (NodeLookup(hash, name, path, out bool moved) is not null) return false;
        NodeAdd(name, ino, type, moved ? null : path);
        return true;
    }

    // ================================================================ leaf -> node

    /// <summary>xfs_dir2_leaf_to_node: the best-free table moves to the first free-index block; the leaf becomes a leafN root.</summary>
    private void LeafToNode(byte[] leaf, List<ushort> bests)
    {
        ulong fb = _space.FirstUnused(_dir, _freeFsb, _fsbPer);
        if (fb != _freeFsb)
            throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"a leaf directory already maps free-index space at {_freeFsb}");
        if (bests.Count > _maxBests) throw new InvalidOperationException($"directory {_dir.Number}: {bests.Count} best-free entries overflow a free-index block");
        var free = NewFreeBlock(fb, 0);
        int used = 0;
        for (int i = 0; i < bests.Count; i++)
        {
            SetBest(free, i, bests[i]);
            if (bests[i] != NullDataOff) used++;
        }
        SetFreeHeader(free, 0, bests.Count, used);
        SetU16(leaf, DaBlockInfoView.OffMagic, LeafNMagic);
        ReadBlock(_leafFsb, BufType.DirLeafN);
    }

    // ================================================================ add

    private void NodeAdd(ReadOnlySpan<byte> name, ulong ino, XfsFileType type, List<PathBlk>? descended = null)
    {
        uint hash = Hash(name);
        int len = EntSize(name.Length);
        var path = descended ?? Descend(hash);

        // xfs_dir2_leafn_lookup_for_addname: the insertion point, and a data block already holding this hash with room.
        long fitDb = -1, seenFdb = -1;
        int index;
        while (true)
        {
            var leaf = path[^1];
            var lb = leaf.B;
            int n = DaCount(lb);
            long curDb = -1;
            for (index = FirstAtOrAbove(lb, _leafHdr, n, hash); index < n && EntHash(lb, _leafHdr, index) == hash; index++)
            {
                uint entryAddress = EntAddress(lb, _leafHdr, index);
                if (entryAddress == 0) continue;
                long db = DbOf(entryAddress);
                if (db == curDb) continue;
                curDb = db;
                seenFdb = FirstFreeDb + db / _maxBests;
                ushort best = Best(ReadFree(seenFdb), (int)(db % _maxBests));
                if (best == NullDataOff)
                    throw _tx.Mount.Corrupt($"directory free-index block of inode {_dir.Number}", ByteOffsetOf(FsbOfDb(seenFdb)), $"no best-free entry for data block {db}, which a hash entry names");
                if (best >= len)
                {
                    fitDb = db;
                    break;
                }
            }
            leaf.Index = index;
            if (fitDb >= 0 || leaf.Hash != hash || !PathShift(path, path.Count, forward: true)) break;
        }

        // xfs_dir2_node_addname_int: the data block, its free-index entry, the entry itself.
        long useDb = fitDb >= 0 ? fitDb : FindFreeBlock(len, seenFdb);
        byte[] data, free;
        int findex;
        if (useDb < 0) (useDb, data, free, findex) = AddDataBlock();
        else
        {
            data = ReadBlock(FsbOfDb(useDb), BufType.DirData);
            free = ReadFree(FirstFreeDb + useDb / _maxBests);
            findex = (int)(useDb % _maxBests);
        }
        int dup = BestFree(data, 0).Off;
        UseFree(data, dup, dup, len);
        PutEntry(data, dup, name, ino, (byte)type);
        FreeScan(data, _blk);
        SetBest(free, findex, BestFree(data, 0).Len);
        uint address = (uint)((useDb * _blk + dup) >> 3);

        if (LeafNAdd(path[^1].B, hash, address, path[^1].Index)) FixHashPath(path, path.Count);
        else Split(path, hash, address);
    }

    /// <summary>xfs_dir2_node_find_freeblk: the last data block (free-index blocks from the last, entries from the last) with room; -1 if none.</summary>
    private long FindFreeBlock(int len, long skipFdb)
    {
        long lastDb = (long)(_space.LastOffset(_dir) / (ulong)_fsbPer);
        for (long fdb = lastDb - 1; fdb >= FirstFreeDb; fdb--)
        {
            if (fdb == skipFdb) continue;
            var free = TryReadFree(fdb);
            if (free is null) continue;
            var (firstDb, nvalid, _) = FreeHeader(free);
            for (int i = nvalid - 1; i >= 0; i--)
            {
                ushort best = Best(free, i);
                if (best != NullDataOff && best >= len) return firstDb + i;
            }
        }
        return -1;
    }

    /// <summary>xfs_dir2_node_add_datablk: a new data block at the first hole of the data space and its free-index entry (a new free-index block when it has none).</summary>
    private (long Db, byte[] Data, byte[] Free, int Findex) AddDataBlock()
    {
        ulong fb = _space.FirstUnused(_dir, 0, _fsbPer);
        if (fb >= _leafFsb) throw new XfsException(XfsError.NoSpace, $"directory {_dir.Number}: its data space is full");
        long db = (long)(fb / (ulong)_fsbPer);
        var data = NewDataBlock(fb, block: false, out _);
        long fdb = FirstFreeDb + db / _maxBests;
        var free = TryReadFree(fdb);
        if (free is null)
        {
            ulong ffb = _space.FirstUnused(_dir, _freeFsb, _fsbPer);
            if (ffb != FsbOfDb(fdb))
                throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"data block {db} needs free-index block {fdb}, the first hole is at file block {ffb}");
            free = NewFreeBlock(ffb, (fdb - FirstFreeDb) * _maxBests);
        }
        int findex = (int)(db % _maxBests);
        var (firstDb, nvalid, nused) = FreeHeader(free);
        if (findex >= nvalid)
        {
            for (int i = nvalid; i <= findex; i++) SetBest(free, i, NullDataOff);
            nvalid = findex + 1;
        }
        if (Best(free, findex) == NullDataOff) nused++;
        SetFreeHeader(free, firstDb, nvalid, nused);
        SetBest(free, findex, BestFree(data, 0).Len);
        return (db, data, free, findex);
    }

    /// <summary>
    /// xfs_dir2_leafn_add: false when the leaf is full without stale entries (the caller splits). A full leaf with
    /// stale entries is compacted first; a stale entry nearest the insertion point is reused when there is one.
    /// </summary>
    private bool LeafNAdd(byte[] b, uint hash, uint address, int index)
    {
        int count = DaCount(b), stale = LeafStale(b);
        if (count == _daMax && stale == 0) return false;
        if (stale == 0)
        {
            // No stale entry to reuse (xfs_dir3_leaf_find_entry's common case): the entries from the insertion point
            // move up one slot and the new one goes in the gap.
            int at = _leafHdr + index * 8;
            b.AsSpan(at, (count - index) * 8).CopyTo(b.AsSpan(at + 8));
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(at), hash);
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(at + 4), address);
            SetU16(b, InfoSize, count + 1);
            return true;
        }
        var ents = DaEntries(b);
        if (count == _daMax && stale > 1)
        {
            // xfs_dir3_leaf_compact_x1 keeps one stale entry for the insert to take; dropping all and growing by one leaves the same entries.
            ents.RemoveAll(e => e.Address == 0);
            stale = 0;
            index = FirstAtOrAbove(ents, hash);
        }
        if (stale == 0) ents.Insert(index, (hash, address));
        else
        {
            InsertReusingStale(ents, hash, address);
            stale--;
        }
        WriteLeafN(b, ents, stale);
        return true;
    }

    /// <summary>xfs_da3_fixhashpath: the last hash of the path's bottom block carried up while the parents' entries disagree.</summary>
    private void FixHashPath(List<PathBlk> path, int active)
    {
        var bottom = path[active - 1];
        if (DaCount(bottom.B) == 0) return;
        uint last = LastHash(bottom.B);
        for (int level = active - 2; level >= 0; level--)
        {
            var blk = path[level];
            int at = _leafHdr + blk.Index * 8;
            if (BinaryPrimitives.ReadUInt32BigEndian(blk.B.AsSpan(at)) == last) break;
            blk.Hash = last;
            BinaryPrimitives.WriteUInt32BigEndian(blk.B.AsSpan(at), last);
            last = LastHash(blk.B);
        }
    }

    /// <summary>
    /// xfs_da3_path_shift: moves the bottom of <paramref name="path"/> to its sibling in the given direction through
    /// the lowest ancestor that has one, then down that subtree's near edge; false when there is no sibling.
    /// </summary>
    private bool PathShift(List<PathBlk> path, int active, bool forward)
    {
        int level = active - 2;
        ulong blkno = 0;
        for (; level >= 0; level--)
        {
            var blk = path[level];
            int count = DaCount(blk.B);
            if (forward && blk.Index < count - 1) blk.Index++;
            else if (!forward && blk.Index > 0) blk.Index--;
            else continue;
            blkno = BinaryPrimitives.ReadUInt32BigEndian(blk.B.AsSpan(_leafHdr + blk.Index * 8 + 4));
            break;
        }
        if (level < 0) return false;
        for (level++; level < active; level++)
        {
            var b = ReadDa(blkno, out bool node);
            var blk = new PathBlk { Blkno = blkno, B = b, Node = node };
            path[level] = blk;
            if (node)
            {
                var ents = DaEntries(b);
                blk.Hash = ents[^1].Hash;
                blk.Index = forward ? 0 : ents.Count - 1;
                blkno = ents[blk.Index].Address;
            }
            else blk.Hash = LastHash(b);
        }
        return true;
    }

    // ================================================================ split

    /// <summary>xfs_da3_split: the leaf splits; each parent takes the new sibling, splitting in turn when full; a split root moves down a level.</summary>
    private void Split(List<PathBlk> path, uint hash, uint address)
    {
        int max = path.Count - 1;
        PathBlk? add = path[max];
        for (int i = max; i >= 0 && add is not null; i--)
        {
            var old = path[i];
            add = old.Node ? NodeSplit(old, add, max - i) : LeafNSplit(old, hash, address);
            FixHashPath(path, i + 1);
        }
        if (add is not null) RootSplit(path[0], add);
    }

    /// <summary>xfs_dir2_leafn_split with xfs_dir2_leafn_rebalance: the top entries move to a new leaf after the old one; the new entry goes where the kernel puts it.</summary>
    private PathBlk LeafNSplit(PathBlk old, uint hash, uint address)
    {
        ulong blkno = NextDaBlock();
        var nb = NewDaBlock(blkno, LeafNMagic, BufType.DirLeafN);
        var added = new PathBlk { Blkno = blkno, B = nb };
        var ents = DaEntries(old.B);
        int stale = LeafStale(old.B);
        int oldSum = ents.Count, mid = oldSum >> 1;
        bool isLeft = (oldSum & 1) == 0 || hash <= ents[mid].Hash;
        int move = oldSum - mid + (isLeft ? 0 : 1);
        var moved = ents.GetRange(oldSum - move, move);
        ents.RemoveRange(oldSum - move, move);
        int movedStale = moved.Count(e => e.Address == 0);
        WriteLeafN(old.B, ents, stale - movedStale);
        WriteLeafN(nb, moved, movedStale);
        int h1 = ents.Count, h2 = moved.Count;
        bool inOld = h1 < h2 ? false : h1 > h2 || old.Index <= h1;
        if (!inOld)
        {
            added.Index = old.Index - h1;
            if (added.Index < 0)
            {
                inOld = true;
                added.Index = 0;
            }
        }
        LinkAfter(old, added);
        bool done = inOld ? LeafNAdd(old.B, hash, address, old.Index) : LeafNAdd(nb, hash, address, added.Index);
        if (!done) throw new InvalidOperationException($"directory {_dir.Number}: a leaf just split has no room");
        old.Hash = LastHash(old.B);
        added.Hash = LastHash(nb);
        return added;
    }

    /// <summary>xfs_da3_node_split: a full node gives its top half to a new node after it; the child entry goes after the split child's.</summary>
    private PathBlk? NodeSplit(PathBlk old, PathBlk add, int treeLevel)
    {
        PathBlk? added = null;
        if (DaCount(old.B) + 1 > _daMax)
        {
            ulong blkno = NextDaBlock();
            var nb = NewDaBlock(blkno, NodeMagic, BufType.DaNode);
            SetU16(nb, InfoSize + 2, treeLevel);
            added = new PathBlk { Blkno = blkno, B = nb, Node = true };
            // xfs_da3_node_rebalance towards an empty node: half the entries (rounded down) move.
            var ents = DaEntries(old.B);
            int move = ents.Count / 2;
            var moved = ents.GetRange(ents.Count - move, move);
            ents.RemoveRange(ents.Count - move, move);
            WriteNodeEntries(old.B, ents);
            WriteNodeEntries(nb, moved);
            old.Hash = ents[^1].Hash;
            added.Hash = moved[^1].Hash;
            if (old.Index >= ents.Count)
            {
                added.Index = old.Index - ents.Count;
                old.Index = ents.Count + 1;
            }
            LinkAfter(old, added);
        }
        if (old.Index <= DaCount(old.B))
        {
            old.Index++;
            NodeInsert(old, add);
        }
        else
        {
            added!.Index++;
            NodeInsert(added, add);
        }
        return added;
    }

    /// <summary>xfs_da3_node_add: (child's last hash, child) at the block's index; the block's last hash is carried up.</summary>
    private void NodeInsert(PathBlk blk, PathBlk child)
    {
        var ents = DaEntries(blk.B);
        ents.Insert(blk.Index, (child.Hash, checked((uint)child.Blkno)));
        WriteNodeEntries(blk.B, ents);
        blk.Hash = ents[^1].Hash;
    }

    /// <summary>xfs_da3_blk_link for a new block holding the higher hashes: it goes right after <paramref name="old"/>.</summary>
    private void LinkAfter(PathBlk old, PathBlk added)
    {
        uint forw = Forw(old.B);
        SetForw(added.B, forw);
        SetBack(added.B, old.Blkno);
        if (forw != 0) SetBack(ReadDa(forw), added.Blkno);
        SetForw(old.B, added.Blkno);
    }

    /// <summary>
    /// xfs_da3_root_split: the root's contents move to a new block (siblings repointed), and the root block becomes
    /// a node one level up naming that block and the block its split added.
    /// </summary>
    private void RootSplit(PathBlk root, PathBlk add)
    {
        ulong blkno = NextDaBlock();
        var copy = NewDaBlock(blkno, U16(root.B, DaBlockInfoView.OffMagic), root.Node ? BufType.DaNode : BufType.DirLeafN);
        int size = _leafHdr + DaCount(root.B) * 8;
        var self = copy.AsSpan(DaBlockInfoView.OffBlkno, 8).ToArray();
        Array.Copy(root.B, copy, size);
        if (_v5) self.CopyTo(copy, DaBlockInfoView.OffBlkno);
        int level = root.Node ? NodeLevel(root.B) : 0;
        uint forw = Forw(copy), back = Back(copy);
        if (forw != 0) SetBack(ReadDa(forw), blkno);
        if (back != 0) SetForw(ReadDa(back), blkno);

        // xfs_da3_node_create at the root: siblings none, level one up, the two children.
        var b = root.B;
        b.AsSpan(0, DaBlockInfoView.OffMagic).Clear();
        b.AsSpan(InfoSize).Clear();
        SetU16(b, DaBlockInfoView.OffMagic, NodeMagic);
        SetU16(b, InfoSize + 2, level + 1);
        WriteNodeEntries(b, [(root.Hash, checked((uint)blkno)), (add.Hash, checked((uint)add.Blkno))]);
        ReadBlock(_leafFsb, BufType.DaNode);
        root.Node = true;
    }

    // ================================================================ remove

    private ulong NodeRemove(ReadOnlySpan<byte> name)
    {
        var found = NodeLookup(Hash(name), name) ?? throw NotFound(name);
        var path = found.Path;
        var hit = found.Hit;
        var leaf = path[^1];
        var data = hit.Block;
        ulong ino = BinaryPrimitives.ReadUInt64BigEndian(data.AsSpan(hit.Offset));

        // xfs_dir2_leafn_remove: the hash entry goes stale (its address zeroed in place), the data entry becomes free space.
        int count = DaCount(leaf.B);
        if ((uint)hit.HashIndex >= (uint)count) throw new InvalidOperationException($"directory {_dir.Number}: hash entry {hit.HashIndex} of {count}");
        int stale = LeafStale(leaf.B) + 1;
        BinaryPrimitives.WriteUInt32BigEndian(leaf.B.AsSpan(_leafHdr + hit.HashIndex * 8 + 4), 0);
        SetU16(leaf.B, InfoSize + 2, stale);
        int longest = BestFree(data, 0).Len;
        MakeFree(data, hit.Offset, EntSize(data[hit.Offset + 8]), _blk);
        FreeScan(data, _blk);
        if (longest < BestFree(data, 0).Len)
        {
            long db = (long)(hit.FileBlock / (ulong)_fsbPer);
            long fdb = FirstFreeDb + db / _maxBests;
            var free = ReadFree(fdb);
            int findex = (int)(db % _maxBests);
            longest = BestFree(data, 0).Len;
            if (longest == _blk - _hdr)
            {
                FreeBlock(hit.FileBlock);
                DataBlockFreed(free, fdb, findex);
            }
            else SetBest(free, findex, longest);
        }
        bool join = _leafHdr + 8 * (count - stale) < _blk * 37 / 100;
        FixHashPath(path, path.Count);
        int active = path.Count;
        if (join && active > 1) active = Join(path);
        NodeToLeaf(path, active);
        return ino;
    }

    /// <summary>xfs_dir3_data_block_free for a freed data block: its entry is punched out (or the table trimmed past trailing holes); an unused free-index block goes too.</summary>
    private void DataBlockFreed(byte[] free, long fdb, int findex)
    {
        var (firstDb, nvalid, nused) = FreeHeader(free);
        nused--;
        if (findex == nvalid - 1)
        {
            int i = findex - 1;
            while (i >= 0 && Best(free, i) == NullDataOff) i--;
            nvalid = i + 1;
        }
        else SetBest(free, findex, NullDataOff);
        SetFreeHeader(free, firstDb, nvalid, nused);
        if (nused == 0) FreeBlock(FsbOfDb(fdb));
    }

    /// <summary>
    /// xfs_da3_join: while the bottom block of the path is small enough to merge into a sibling (keeping the lower
    /// block number), merge it, unlink and free it, and take its entry out of the parent; a root left with one
    /// child takes that child's contents. Returns how many path levels remain active (1 once the root was reached).
    /// </summary>
    private int Join(List<PathBlk> path)
    {
        int active = path.Count;
        for (; active >= 2; active--)
        {
            int action;
            List<PathBlk>? alt;
            if (!path[active - 1].Node)
            {
                (action, alt) = LeafNTooSmall(path, active);
                if (action == 0) return active;
                LeafNUnbalance(path[active - 1], alt![active - 1]);
            }
            else
            {
                NodeRemoveEntry(path[active - 1]);
                FixHashPath(path, active);
                (action, alt) = NodeTooSmall(path, active);
                if (action == 0) return active;
                NodeUnbalance(path[active - 1], alt![active - 1]);
            }
            FixHashPath(alt, active);
            BlkUnlink(path[active - 1], alt[active - 1]);
            FreeBlock(path[active - 1].Blkno);
        }
        NodeRemoveEntry(path[0]);
        FixHashPath(path, 1);
        RootJoin(path[0]);
        return 1;
    }

    /// <summary>
    /// xfs_dir2_leafn_toosmall: 0 (leave it) when the leaf's live entries fill more than half of it or neither
    /// sibling (the lower block number tried first) takes them with a quarter of a block to spare; else 1, with
    /// <c>path</c> ending at the block to drop and the returned path at the one to keep (the lower block number).
    /// A leaf whose entries are all stale is left in place, as the kernel leaves it when it has a sibling.
    /// </summary>
    private (int Action, List<PathBlk>? Alt) LeafNTooSmall(List<PathBlk> path, int active)
    {
        var blk = path[active - 1];
        int live = DaCount(blk.B) - LeafStale(blk.B);
        if (_leafHdr + live * 8 > _blk >> 1 || live == 0) return (0, null);
        uint forwNo = Forw(blk.B), backNo = Back(blk.B);
        bool forward = forwNo < backNo;
        uint blkno = 0;
        int i;
        for (i = 0; i < 2; forward = !forward, i++)
        {
            blkno = forward ? forwNo : backNo;
            if (blkno == 0) continue;
            var sib = ReadDa(blkno, out bool sibNode);
            if (sibNode) throw _tx.Mount.Corrupt($"directory leafN block of inode {_dir.Number}", ByteOffsetOf(blkno), "a leaf's sibling is a node block");
            int bytes = _blk - (_blk >> 2) - (live + DaCount(sib) - LeafStale(sib)) * 8;
            if (bytes >= 0) break;
        }
        if (i >= 2) return (0, null);
        var alt = CopyPath(path);
        bool shifted = blkno < blk.Blkno ? PathShift(alt, active, forward) : PathShift(path, active, forward);
        return (shifted ? 1 : 0, alt);
    }

    /// <summary>xfs_da3_node_toosmall: as for leaves, by entry counts (over half full: leave it; empty: drop it towards a sibling).</summary>
    private (int Action, List<PathBlk>? Alt) NodeTooSmall(List<PathBlk> path, int active)
    {
        var blk = path[active - 1];
        int count = DaCount(blk.B);
        if (count > _daMax >> 1) return (0, null);
        if (count == 0)
        {
            var keep = CopyPath(path);
            return PathShift(keep, active, Forw(blk.B) != 0) ? (2, keep) : (0, null);
        }
        uint forwNo = Forw(blk.B), backNo = Back(blk.B);
        bool forward = forwNo < backNo;
        uint blkno = 0;
        int i;
        for (i = 0; i < 2; forward = !forward, i++)
        {
            blkno = forward ? forwNo : backNo;
            if (blkno == 0) continue;
            var sib = ReadDa(blkno, out bool sibNode);
            if (!sibNode) throw _tx.Mount.Corrupt($"directory node block of inode {_dir.Number}", ByteOffsetOf(blkno), "a node's sibling is a leaf block");
            int spare = _daMax - (_daMax >> 2) - count - DaCount(sib);
            if (spare >= 0) break;
        }
        if (i >= 2) return (0, null);
        var alt = CopyPath(path);
        bool shifted = blkno < blk.Blkno ? PathShift(alt, active, forward) : PathShift(path, active, forward);
        return (shifted ? 1 : 0, alt);
    }

    /// <summary>xfs_dir2_leafn_unbalance: both leaves lose their stale entries; the dropped leaf's entries go before or after the kept one's, by hash order.</summary>
    private void LeafNUnbalance(PathBlk drop, PathBlk save)
    {
        var de = DaEntries(drop.B).Where(e => e.Address != 0).ToList();
        var se = DaEntries(save.B).Where(e => e.Address != 0).ToList();
        if (de.Count > 0) drop.Hash = de[^1].Hash;
        bool dropFirst = de.Count > 0 && se.Count > 0 && (de[0].Hash < se[0].Hash || de[^1].Hash < se[^1].Hash);
        List<(uint Hash, uint Address)> merged = dropFirst ? [.. de, .. se] : [.. se, .. de];
        WriteLeafN(save.B, merged, 0);
        WriteLeafN(drop.B, [], 0);
        save.Hash = LastHash(save.B);
    }

    /// <summary>xfs_da3_node_unbalance: the dropped node's entries go before or after the kept one's, by hash order.</summary>
    private void NodeUnbalance(PathBlk drop, PathBlk save)
    {
        var de = DaEntries(drop.B);
        var se = DaEntries(save.B);
        bool dropFirst = de.Count > 0 && se.Count > 0 && (de[0].Hash < se[0].Hash || de[^1].Hash < se[^1].Hash);
        List<(uint Hash, uint Address)> merged = dropFirst ? [.. de, .. se] : [.. se, .. de];
        WriteNodeEntries(save.B, merged);
        WriteNodeEntries(drop.B, []);
        save.Hash = LastHash(save.B);
    }

    /// <summary>xfs_da3_node_remove: the entry at the block's index goes; the block's last hash is carried up.</summary>
    private void NodeRemoveEntry(PathBlk blk)
    {
        var ents = DaEntries(blk.B);
        ents.RemoveAt(blk.Index);
        WriteNodeEntries(blk.B, ents);
        if (ents.Count > 0) blk.Hash = ents[^1].Hash;
    }

    /// <summary>xfs_da3_blk_unlink: the dropped block leaves its level's list; the kept block and the far neighbour point at each other.</summary>
    private void BlkUnlink(PathBlk drop, PathBlk save)
    {
        if (Back(save.B) == drop.Blkno)
        {
            uint back = Back(drop.B);
            SetBack(save.B, back);
            if (back != 0) SetForw(ReadDa(back), save.Blkno);
        }
        else
        {
            uint forw = Forw(drop.B);
            SetForw(save.B, forw);
            if (forw != 0) SetBack(ReadDa(forw), save.Blkno);
        }
    }

    /// <summary>xfs_da3_root_join: a root node with a single child takes the child's whole block (its own disk address kept) and the child is freed.</summary>
    private void RootJoin(PathBlk root)
    {
        if (DaCount(root.B) > 1) return;
        ulong child = BinaryPrimitives.ReadUInt32BigEndian(root.B.AsSpan(_leafHdr + 4));
        var cb = ReadDa(child, out bool childNode);
        if (Forw(cb) != 0 || Back(cb) != 0)
            throw _tx.Mount.Corrupt($"directory hash block of inode {_dir.Number}", ByteOffsetOf(child), "the root's only child has siblings");
        var self = root.B.AsSpan(DaBlockInfoView.OffBlkno, 8).ToArray();
        cb.CopyTo(root.B, 0);
        if (_v5) self.CopyTo(root.B, DaBlockInfoView.OffBlkno);
        ReadBlock(_leafFsb, childNode ? BufType.DaNode : BufType.DirLeafN);
        root.Node = childNode;
        FreeBlock(child);
    }

    // ================================================================ node -> leaf

    /// <summary>
    /// xfs_dir2_node_to_leaf: when the path reached only the root, empty trailing free-index blocks are trimmed and,
    /// if the root is the single leaf block and its live entries with the best-free table fit one leaf1 block, it
    /// becomes the leaf again and the free-index block goes; then leaf to block is tried.
    /// </summary>
    private void NodeToLeaf(List<PathBlk> path, int active)
    {
        if (active > 1) return;
        ulong fo = _space.LastOffset(_dir) - (ulong)_fsbPer;
        while (fo > _freeFsb)
        {
            // xfs_dir2_node_trim_free.
            if (_space.Map(_dir, fo) < 0) return;
            var trailing = ReadFree((long)(fo / (ulong)_fsbPer));
            if (FreeHeader(trailing).NUsed > 0) return;
            FreeBlock(fo);
            fo -= (ulong)_fsbPer;
        }
        if (_space.LastBefore(_dir, _freeFsb) > _leafFsb + (ulong)_fsbPer) return;
        var leaf = path[0].B;
        if (U16(leaf, DaBlockInfoView.OffMagic) != LeafNMagic) return;
        var free = ReadFree(FirstFreeDb);
        var (_, nvalid, _) = FreeHeader(free);
        int live = DaCount(leaf) - LeafStale(leaf);
        if (_leafHdr + live * 8 + nvalid * 2 + 4 > _blk) return;
        var ents = DaEntries(leaf).Where(e => e.Address != 0).ToList();
        var bests = new List<ushort>(nvalid + 1);
        for (int i = 0; i < nvalid; i++) bests.Add(Best(free, i));
        SetU16(leaf, DaBlockInfoView.OffMagic, _v5 ? DaBlockInfoView.Dir3Leaf1V5 : DaBlockInfoView.Dir2Leaf1V4);
        ReadBlock(_leafFsb, BufType.DirLeaf1);
        WriteLeaf(leaf, ents, 0, bests);
        FreeBlock(_freeFsb);
        LeafToBlock(leaf, ents, 0, bests);
    }
}

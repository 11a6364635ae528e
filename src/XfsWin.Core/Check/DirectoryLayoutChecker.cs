using System.Buffers.Binary;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;

namespace XfsWin.Check;

/// <summary>
/// The internal layout of a block, leaf or node directory, beyond what reading it needs: what the kernel's
/// verifiers (data, leaf, node and free blocks) and xfs_repair's directory phase check. Every mapped directory block
/// is read raw and checked by its region:
/// <list type="bullet">
/// <item>data blocks (and the single block of block form): the kernel's rules for the whole block
/// (<see cref="DirectoryDataBlock.VerifyContents"/>: entries and unused regions tiling the block, the bestfree table,
/// a single block's hash array and tail), unused regions in whole 8-byte units (xfs_repair's rule), and in block form
/// every entry named by exactly one hash entry;</item>
/// <item>the LEAF1 block: its entry count within the block and clear of the bests array, hashes in order, the stale
/// count, every non-stale address naming an entry whose name has that hash, bestcount equal to the data blocks and
/// each best equal to that block's longest unused region (0xffff for a missing block);</item>
/// <item>node form: da node blocks (count, level, hashes ordered, each child's last hash equal to its key, siblings
/// linked level by level), LEAFN blocks (as LEAF1 without bests, hashes ordered across the chain), free index
/// blocks (firstdb, nvalid, nused, each best equal to its data block's longest unused region);</item>
/// <item>across the directory: the hash entries that are not stale number the data entries.</item>
/// </list>
/// Problems are reported against the directory with the block's disk address. The entries of the data blocks are
/// listed from the same bytes for the namespace check, so each directory block is read once. Runs on one directory
/// at a time (the caller runs directories in parallel).
/// </summary>
internal sealed class DirectoryLayoutChecker
{
    private const ushort NullDataOffset = 0xFFFF;
    private const int FreeMagicV4 = 0x58443246, FreeMagicV5 = 0x58444633; // XD2F, XDF3
    private const int DaNodeMaxDepth = 5;
    private const int MaxExtents = 1_000_000;

    private readonly CheckContext _cx;
    private readonly Superblock _sb;
    private readonly bool _v5, _ftype;
    private readonly int _dirBlockSize, _fsbPerDirBlock;
    private readonly ulong _leafDa, _freeDa;
    private readonly int _dataHeader;

    public DirectoryLayoutChecker(CheckContext cx)
    {
        _cx = cx;
        _sb = cx.Sb;
        _v5 = _sb.IsV5;
        _ftype = _sb.HasFtype;
        _dirBlockSize = _sb.DirectoryBlockSize;
        _fsbPerDirBlock = 1 << _sb.DirBlockLog;
        _leafDa = (ulong)(Dir2Space.LeafOffset >> _sb.BlockLog);
        _freeDa = (ulong)(Dir2Space.FreeOffset >> _sb.BlockLog);
        _dataHeader = DirectoryDataBlock.HeaderSize(_v5);
    }

    private int BestFreeOffset => _v5 ? 48 : 4;
    private int LeafHeader => _v5 ? 64 : 16;
    private int FreeHeader => _v5 ? 64 : 16;
    private int MaxBests => (_dirBlockSize - FreeHeader) / 2;

    /// <summary>One directory block as read: its file offset (da block), disk address and bytes.</summary>
    private readonly record struct DirBlock(ulong Da, long ByteOffset, byte[] Bytes);

    private sealed class State(Inode dir, DirectoryListing listing)
    {
        public readonly Inode Dir = dir;
        /// <summary>The entries of the data blocks that passed their check, in directory order.</summary>
        public readonly DirectoryListing Listing = listing;
        /// <summary>More entries than a listing holds (<see cref="DirectoryListing.MaxEntries"/>), or more extents than are read.</summary>
        public bool Truncated;
        public readonly string Name = $"directory inode {dir.Number}";
        /// <summary>Per data block index: its longest unused region (bestfree[0].length), or -1 when it failed its check.</summary>
        public readonly Dictionary<ulong, int> Longest = new();
        /// <summary>
        /// Data entries by address (offset / 8): their name's hash in the low 32 bits, bit 32 set once a live hash entry
        /// names the entry (a second hash entry for the same address is a problem).
        /// </summary>
        public readonly Dictionary<uint, ulong> Entries = new();
        public long HashEntries;
        public bool Damaged;
        public int Reported;
    }

    private void Report(State st, long byteOffset, string message)
    {
        st.Damaged = true;
        if (st.Reported++ < 20) _cx.ReportAt(st.Name, byteOffset >= 0 ? byteOffset : st.Dir.ByteOffset, message);
    }

    /// <summary>
    /// Checks the directory's blocks and lists its entries into <paramref name="listing"/> (in directory order, as
    /// <see cref="Directories.DirectoryReader"/> enumerates them). Returns true when the listing is complete: every
    /// block read and no problem found. Otherwise what it holds is not to be used.
    /// </summary>
    public bool Check(Inode dir, ExtentMap map, DirectoryListing listing)
    {
        var st = new State(dir, listing);
        var blocks = ReadBlocks(st, map);
        if (blocks is null) return false;
        bool blockForm = blocks.Count == 1 && blocks[0].Da == 0 && dir.Size == _dirBlockSize;
        foreach (var b in blocks)
        {
            if (b.Da < _leafDa) CheckDataBlock(st, b, single: blockForm);
        }
        // The hash array was checked with the block; a damaged block makes the rest guesswork.
        if (blockForm || st.Damaged) return !st.Damaged && !st.Truncated;
        var leaves = blocks.Where(b => b.Da >= _leafDa && b.Da < _freeDa).ToList();
        var frees = blocks.Where(b => b.Da >= _freeDa).ToList();
        if (leaves.Count == 0)
        {
            Report(st, -1, "multi-block directory without a leaf block");
            return false;
        }
        var first = leaves.FirstOrDefault(b => b.Da == _leafDa);
        if (first.Bytes is null)
        {
            Report(st, -1, $"no leaf or node block at directory offset {Dir2Space.LeafOffset}");
            return false;
        }
        ushort magic = new DaBlockInfoView(first.Bytes).Magic;
        bool leaf1 = magic == (_v5 ? DaBlockInfoView.Dir3Leaf1V5 : DaBlockInfoView.Dir2Leaf1V4);
        if (leaf1)
        {
            var info = new DaBlockInfoView(first.Bytes);
            if (info.Forw != 0 || info.Back != 0) Report(st, first.ByteOffset, $"leaf block has sibling pointers {info.Back} and {info.Forw}");
            if (leaves.Count != 1) Report(st, leaves.First(b => b.Da != _leafDa).ByteOffset, "leaf-form directory with more than its one leaf block");
            CheckLeafBlock(st, first, leaf1: true);
            if (frees.Count > 0) Report(st, frees[0].ByteOffset, "leaf-form directory with a free index block");
        }
        else
        {
            CheckNodeTree(st, leaves);
            CheckFreeBlocks(st, frees);
        }
        if (!st.Damaged && st.HashEntries != st.Entries.Count)
            Report(st, first.ByteOffset, $"{st.HashEntries} live hash entries for {st.Entries.Count} directory entries");
        return !st.Damaged && !st.Truncated;
    }

    /// <summary>Every mapped directory block, in file order (pieces of one block gathered). Null when the mapping cannot be walked.</summary>
    private List<DirBlock>? ReadBlocks(State st, ExtentMap map)
    {
        var extents = new List<BmbtRecord>();
        try
        {
            map.Walk(0, e =>
            {
                extents.Add(e);
                return extents.Count < MaxExtents;
            });
        }
        catch (XfsCorruptionException e)
        {
            _cx.Report(e);
            return null;
        }
        if (extents.Count >= MaxExtents) st.Truncated = true; // only the blocks of the first extents are checked and listed
        // Each extent is read in runs of up to 1 MiB (one read per run, not per block), kept by file offset.
        var runs = new List<(ulong FileOffset, long ByteOffset, byte[] Bytes)>();
        int runBlocks = Math.Max(1, (1 << 20) >> _sb.BlockLog);
        foreach (var e in extents)
        {
            if (e.Unwritten)
            {
                Report(st, -1, $"unwritten extent at file block {e.FileOffset}");
                return null;
            }
            if (!_sb.IsValidFsb(e.StartBlock) || !_sb.IsValidFsb(e.StartBlock + e.BlockCount - 1)) return null; // the inode scan reported it
            for (ulong done = 0; done < e.BlockCount; done += (ulong)runBlocks)
            {
                int n = (int)Math.Min((ulong)runBlocks, e.BlockCount - done);
                long offset = _sb.FsbToByte(e.StartBlock + done);
                var bytes = new byte[n << _sb.BlockLog];
                if (!_cx.TryRead(offset, bytes, st.Name)) return null;
                runs.Add((e.FileOffset + done, offset, bytes));
            }
        }
        int fsbPer = _fsbPerDirBlock;
        int bs = (int)_sb.BlockSize;
        // The run holding file block f (runs are in file order and do not overlap: the inode scan checked the map).
        int Find(ulong f)
        {
            int lo = 0, hi = runs.Count - 1;
            while (lo <= hi)
            {
                int mid = (lo + hi) >> 1;
                var r = runs[mid];
                if (r.FileOffset + (ulong)(r.Bytes.Length / bs) <= f) lo = mid + 1;
                else if (r.FileOffset > f) hi = mid - 1;
                else return mid;
            }
            return -1;
        }
        var result = new List<DirBlock>();
        ulong lastStart = ulong.MaxValue;
        foreach (var r in runs)
        {
            ulong runEnd = r.FileOffset + (ulong)(r.Bytes.Length / bs);
            for (ulong f = r.FileOffset / (ulong)fsbPer * (ulong)fsbPer; f < runEnd; f += (ulong)fsbPer)
            {
                if (f == lastStart) continue;
                lastStart = f;
                int at = Find(f);
                if (at >= 0 && f + (ulong)fsbPer <= runs[at].FileOffset + (ulong)(runs[at].Bytes.Length / bs))
                {
                    // The whole directory block inside one run.
                    var whole = runs[at];
                    int from = (int)(f - whole.FileOffset) * bs;
                    result.Add(new DirBlock(f, whole.ByteOffset + from, whole.Bytes.AsSpan(from, _dirBlockSize).ToArray()));
                    continue;
                }
                var bytes = new byte[_dirBlockSize];
                long first = -1;
                for (int k = 0; k < fsbPer; k++)
                {
                    int x = Find(f + (ulong)k);
                    if (x < 0)
                    {
                        Report(st, -1, $"directory block at file block {f} is partly unmapped");
                        return null;
                    }
                    var piece = runs[x];
                    int from = (int)(f + (ulong)k - piece.FileOffset) * bs;
                    if (first < 0) first = piece.ByteOffset + from;
                    piece.Bytes.AsSpan(from, bs).CopyTo(bytes.AsSpan(k * bs));
                }
                result.Add(new DirBlock(f, first, bytes));
            }
        }
        return result;
    }

    // ---------------------------------------------------------------- data blocks

    private void CheckDataBlock(State st, DirBlock b, bool single)
    {
        var block = b.Bytes;
        ulong db = b.Da / (ulong)_fsbPerDirBlock;
        var header = DirectoryDataBlock.VerifyHeader(block, single, _sb, b.ByteOffset, st.Dir.Number);
        if (!header.IsOk)
        {
            Report(st, b.ByteOffset, $"{(single ? "directory block" : $"data block {db}")}: {header}");
            st.Longest[db] = -1;
            return;
        }
        if (_v5) _cx.CheckLsn(st.Name, b.ByteOffset, block, DirectoryDataBlock.OffLsn);
        string what = single ? "directory block" : $"data block {db}";
        // The kernel's rules for the whole block (bestfree table, unused regions, entries, a single block's leaf and
        // tail), which its verifiers apply on every read and write.
        var contents = DirectoryDataBlock.VerifyContents(block, single, _sb);
        if (!contents.IsOk)
        {
            Report(st, b.ByteOffset, $"{what}: {contents}");
            st.Longest[db] = -1;
            return;
        }
        int end = DirectoryDataBlock.EntriesEnd(block, single);
        int count = single ? (int)BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(block.Length - 8)) : 0;
        int leafStart = end;
        bool bad = false;
        void Bad(string message)
        {
            if (!bad) Report(st, b.ByteOffset, $"{what}: {message}");
            bad = true;
        }
        // The entries, in a block the rules above found well formed; xfs_repair also wants unused regions in whole
        // 8-byte units.
        var entries = new List<(int Offset, uint Hash)>();
        int pos = _dataHeader;
        while (pos < end)
        {
            if (BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(pos)) == Dir2Space.FreeTag)
            {
                int length = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(pos + 2));
                if (length < 8 || (length & 7) != 0) { Bad($"unused region at offset {pos} has length {length}"); break; }
                pos += length;
                continue;
            }
            int nameLength = block[pos + 8];
            var name = block.AsSpan(pos + 9, nameLength);
            entries.Add((pos, _sb.HasAsciiCi ? DaHash.HashAsciiCi(name) : DaHash.Hash(name)));
            pos += DirectoryDataBlock.EntrySize(nameLength, _ftype);
        }
        if (bad)
        {
            st.Longest[db] = -1;
            return;
        }
        st.Longest[db] = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BestFreeOffset + 2));
        long dbBase = (long)db * _dirBlockSize;
        foreach (var (off, hash) in entries)
        {
            st.Entries[(uint)((dbBase + off) >> 3)] = hash;
            if (st.Listing.Entries.Count >= DirectoryListing.MaxEntries)
            {
                st.Truncated = true;
                continue;
            }
            int nameLength = block[off + 8];
            var type = _ftype ? (XfsFileType)block[off + 9 + nameLength] : XfsFileType.Unknown; // at most 8: checked above
            st.Listing.Add(block.AsSpan(off + 9, nameLength), BinaryPrimitives.ReadUInt64BigEndian(block.AsSpan(off)), type);
        }
        if (!single) return;

        // Block form: every live hash entry names a different entry (the rules above found each entry under its hash,
        // and as many live hash entries as entries).
        for (int i = 0; i < count; i++)
        {
            uint hash = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(leafStart + i * 8));
            uint address = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(leafStart + i * 8 + 4));
            if (address != 0 && !NameOnce(st, address, hash))
            {
                Bad($"hash entry {i} (hash 0x{hash:x8}, address {address}) does not name an entry with that hash once");
                return;
            }
        }
    }

    // ---------------------------------------------------------------- leaf and node blocks

    /// <summary>
    /// One live hash entry: true when <paramref name="address"/> is a data entry whose name has <paramref name="hash"/>
    /// and no hash entry named it before; marks it named. With the live hash entries counted equal to the data entries,
    /// this makes every data entry named by exactly one hash entry of its hash: what a lookup of every name by its hash
    /// would find, in one pass over the hash entries (xfs_repair's way).
    /// </summary>
    private static bool NameOnce(State st, uint address, uint hash)
    {
        ref ulong e = ref System.Runtime.InteropServices.CollectionsMarshal.GetValueRefOrNullRef(st.Entries, address);
        if (System.Runtime.CompilerServices.Unsafe.IsNullRef(ref e) || (uint)e != hash || (e >> 32) != 0) return false;
        e |= 1UL << 32;
        return true;
    }

    /// <summary>A LEAF1 or LEAFN block: header counts, order, stale entries, addresses; for LEAF1 the bests array. Returns (first, last hash, ok).</summary>
    private (uint First, uint Last, bool Ok) CheckLeafBlock(State st, DirBlock b, bool leaf1)
    {
        var block = b.Bytes;
        ushort expected = leaf1 ? (_v5 ? DaBlockInfoView.Dir3Leaf1V5 : DaBlockInfoView.Dir2Leaf1V4) : (_v5 ? DaBlockInfoView.Dir3LeafNV5 : DaBlockInfoView.Dir2LeafNV4);
        string what = $"{(leaf1 ? "leaf" : "node leaf")} block at directory block {b.Da / (ulong)_fsbPerDirBlock}";
        if (!VerifyDaHeader(st, b, expected, what)) return (0, 0, false);
        var view = new DirectoryLeafView(block, _v5);
        int count = view.Count, stale = view.Stale;
        int room = (_dirBlockSize - LeafHeader) / 8;
        int bestsStart = _dirBlockSize;
        int bestCount = 0;
        if (leaf1)
        {
            bestCount = (int)BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(_dirBlockSize - 4));
            bestsStart = _dirBlockSize - 4 - bestCount * 2;
            if (bestCount < 0 || bestsStart < LeafHeader)
            {
                Report(st, b.ByteOffset, $"{what}: bestcount {bestCount} does not fit the block");
                return (0, 0, false);
            }
        }
        if (count > room || LeafHeader + count * 8 > bestsStart)
        {
            Report(st, b.ByteOffset, $"{what}: {count} entries{(leaf1 ? $" and {bestCount} bests" : "")} do not fit the block");
            return (0, 0, false);
        }
        int staleSeen = 0;
        uint previous = 0, first = 0;
        for (int i = 0; i < count; i++)
        {
            uint hash = view.HashVal(i), address = view.Address(i);
            if (i == 0) first = hash;
            if (i > 0 && hash < previous)
            {
                Report(st, b.ByteOffset, $"{what}: hashes out of order at entry {i}");
                return (0, 0, false);
            }
            previous = hash;
            if (address == 0)
            {
                staleSeen++;
                continue;
            }
            st.HashEntries++;
            if (!NameOnce(st, address, hash))
            {
                Report(st, b.ByteOffset, $"{what}: entry {i} (hash 0x{hash:x8}, address {address}) does not name an entry with that hash once");
                return (0, 0, false);
            }
        }
        if (staleSeen != stale)
        {
            Report(st, b.ByteOffset, $"{what}: stale count {stale}, {staleSeen} stale entries found");
            return (0, 0, false);
        }
        if (leaf1)
        {
            ulong dataBlocks = st.Longest.Count == 0 ? 0 : st.Longest.Keys.Max() + 1;
            if ((ulong)bestCount != dataBlocks)
            {
                Report(st, b.ByteOffset, $"{what}: bestcount {bestCount}, the directory has {dataBlocks} data blocks");
                return (first, previous, false);
            }
            for (int i = 0; i < bestCount; i++)
            {
                int best = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(bestsStart + i * 2));
                int actual = st.Longest.TryGetValue((ulong)i, out int l) ? l : NullDataOffset;
                if (actual >= 0 && best != actual)
                {
                    Report(st, b.ByteOffset, $"{what}: bests[{i}] is {best}, data block {i} has {(actual == NullDataOffset ? "no block" : $"a longest unused region of {actual}")}");
                    return (first, previous, false);
                }
            }
        }
        return (first, previous, true);
    }

    private bool VerifyDaHeader(State st, DirBlock b, ushort magic, string what)
    {
        var info = new DaBlockInfoView(b.Bytes);
        if (info.Magic != magic)
        {
            Report(st, b.ByteOffset, $"{what}: magic 0x{info.Magic:x4}, expected 0x{magic:x4}");
            return false;
        }
        if (_v5)
        {
            var v = DaBlockInfoView.VerifyV5(b.Bytes, _sb, b.ByteOffset, st.Dir.Number);
            if (!v.IsOk)
            {
                Report(st, b.ByteOffset, $"{what}: {v}");
                return false;
            }
            _cx.CheckLsn(st.Name, b.ByteOffset, b.Bytes, DaBlockInfoView.OffLsn);
        }
        return true;
    }

    /// <summary>
    /// Node form: the da btree from its root at the leaf offset down to the LEAFN blocks (each node's keys ordered and
    /// equal to its children's last hashes, levels one apart, siblings linked in order), then the LEAFN chain.
    /// </summary>
    private void CheckNodeTree(State st, List<DirBlock> leaves)
    {
        var byDa = leaves.ToDictionary(b => b.Da);
        var visited = new HashSet<ulong>();
        var lastAtLevel = new Dictionary<int, DirBlock>();
        var leafOrder = new List<DirBlock>();
        ushort nodeMagic = _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4;
        ushort leafMagic = _v5 ? DaBlockInfoView.Dir3LeafNV5 : DaBlockInfoView.Dir2LeafNV4;

        // Returns the last hash under the block, or null when it could not be checked.
        uint? Visit(ulong da, int expectedLevel, bool isRoot)
        {
            if (!byDa.TryGetValue(da, out var b))
            {
                Report(st, -1, $"the hash tree points at directory offset {da << _sb.BlockLog}, which holds no leaf-space block");
                return null;
            }
            if (!visited.Add(da))
            {
                Report(st, b.ByteOffset, $"the hash tree reaches directory block {da / (ulong)_fsbPerDirBlock} twice");
                return null;
            }
            var info = new DaBlockInfoView(b.Bytes);
            int level = info.Magic == nodeMagic ? new DaNodeView(b.Bytes, _v5).Level : 0;
            if (expectedLevel >= 0 && level != expectedLevel)
            {
                Report(st, b.ByteOffset, $"hash tree block at level {level} where level {expectedLevel} belongs");
                return null;
            }
            // Siblings: each block's back pointer names the previous block of its level, whose forward pointer names it.
            // (The root's back pointer is not looked at, as xfs_repair does not; its forward pointer must be 0.)
            if (lastAtLevel.TryGetValue(level, out var prev))
            {
                if (info.Back != prev.Da || new DaBlockInfoView(prev.Bytes).Forw != da)
                    Report(st, b.ByteOffset, $"hash tree block at level {level}: sibling pointers do not link it to block {prev.Da}");
            }
            else if (info.Back != 0 && !isRoot)
            {
                Report(st, b.ByteOffset, $"first hash tree block of level {level} has a back pointer");
            }
            lastAtLevel[level] = b;
            if (level == 0)
            {
                var (_, last, ok) = CheckLeafBlock(st, b, leaf1: false);
                leafOrder.Add(b);
                return ok ? last : null;
            }
            if (!VerifyDaHeader(st, b, nodeMagic, $"node block at directory block {da / (ulong)_fsbPerDirBlock}")) return null;
            var node = new DaNodeView(b.Bytes, _v5);
            int count = node.Count;
            if (count == 0 || count > node.MaxEntries || level > DaNodeMaxDepth)
            {
                Report(st, b.ByteOffset, $"node block: count {count}, level {level}");
                return null;
            }
            uint previous = 0, lastHash = 0;
            for (int i = 0; i < count; i++)
            {
                uint key = node.HashVal(i);
                if (i > 0 && key < previous)
                {
                    Report(st, b.ByteOffset, $"node block: keys out of order at {i}");
                    return null;
                }
                previous = key;
                var childLast = Visit(node.Before(i), level - 1, false);
                if (childLast is null) return null;
                if (childLast.Value != key)
                {
                    Report(st, b.ByteOffset, $"node block: key {i} is 0x{key:x8} but its child's last hash is 0x{childLast.Value:x8}");
                    return null;
                }
                lastHash = key;
            }
            return lastHash;
        }

        var root = byDa[_leafDa];
        if (new DaBlockInfoView(root.Bytes).Magic != nodeMagic)
        {
            Report(st, root.ByteOffset, $"node-form directory whose root at the leaf offset is not a node block (magic 0x{new DaBlockInfoView(root.Bytes).Magic:x4})");
            return;
        }
        if (Visit(_leafDa, -1, true) is null) return;
        foreach (var (level, last) in lastAtLevel)
        {
            if (new DaBlockInfoView(last.Bytes).Forw != 0)
                Report(st, last.ByteOffset, $"last hash tree block of level {level} has a forward pointer");
        }
        // Hashes never decrease along the leaf chain; every leaf-space block belongs to the tree.
        uint before = 0;
        foreach (var leaf in leafOrder)
        {
            var view = new DirectoryLeafView(leaf.Bytes, _v5);
            if (view.Count > 0)
            {
                if (view.HashVal(0) < before) Report(st, leaf.ByteOffset, "node leaf blocks' hashes decrease from one leaf to the next");
                before = view.HashVal(view.Count - 1);
            }
        }
        foreach (var b in leaves)
            if (!visited.Contains(b.Da)) Report(st, b.ByteOffset, $"leaf-space block at directory block {b.Da / (ulong)_fsbPerDirBlock} is not in the hash tree");
    }

    /// <summary>Free index blocks: header (firstdb, nvalid, nused) and each best against its data block.</summary>
    private void CheckFreeBlocks(State st, List<DirBlock> frees)
    {
        int maxBests = MaxBests;
        ulong dataBlocks = st.Longest.Count == 0 ? 0 : st.Longest.Keys.Max() + 1;
        var covered = new HashSet<ulong>();
        foreach (var b in frees)
        {
            var block = b.Bytes;
            ulong index = (b.Da - _freeDa) / (ulong)_fsbPerDirBlock;
            string what = $"free index block {index}";
            uint magic = BinaryPrimitives.ReadUInt32BigEndian(block);
            if (magic != (_v5 ? FreeMagicV5 : FreeMagicV4))
            {
                Report(st, b.ByteOffset, $"{what}: magic 0x{magic:x8}");
                continue;
            }
            if (_v5)
            {
                var v = RemoteLikeHeader(block, b.ByteOffset, st.Dir.Number);
                if (!v.IsOk)
                {
                    Report(st, b.ByteOffset, $"{what}: {v}");
                    continue;
                }
                _cx.CheckLsn(st.Name, b.ByteOffset, block, DirectoryDataBlock.OffLsn);
            }
            int h = _v5 ? 48 : 4;
            uint firstDb = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(h));
            int nvalid = (int)BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(h + 4));
            int nused = (int)BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(h + 8));
            if (firstDb != index * (ulong)maxBests || nvalid > maxBests || nvalid < nused || nvalid < 0 || nused < 0)
            {
                Report(st, b.ByteOffset, $"{what}: firstdb {firstDb}, nvalid {nvalid}, nused {nused} (expected firstdb {index * (ulong)maxBests}, at most {maxBests} bests)");
                continue;
            }
            int used = 0;
            for (int i = 0; i < nvalid; i++)
            {
                ulong db = firstDb + (ulong)i;
                int best = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(FreeHeader + i * 2));
                int actual = st.Longest.TryGetValue(db, out int l) ? l : NullDataOffset;
                if (best != NullDataOffset) used++;
                covered.Add(db);
                if (actual >= 0 && best != actual)
                {
                    Report(st, b.ByteOffset, $"{what}: bests[{i}] is {best}, data block {db} has {(actual == NullDataOffset ? "no block" : $"a longest unused region of {actual}")}");
                    break;
                }
            }
            if (used != nused) Report(st, b.ByteOffset, $"{what}: nused {nused}, {used} bests in use");
        }
        foreach (var db in st.Longest.Keys.Order())
        {
            if (!covered.Contains(db))
            {
                Report(st, -1, $"data block {db} has no entry in a free index block");
                break;
            }
        }
        _ = dataBlocks;
    }

    /// <summary>xfs_dir3_blk_hdr of a V5 free index block: CRC, self-address, UUID, owner.</summary>
    private VerifyResult RemoteLikeHeader(ReadOnlySpan<byte> block, long byteOffset, ulong owner)
    {
        if (!XfsCrc.Verify(block, 4)) return VerifyResult.Fail("CRC mismatch", 4);
        if (BinaryPrimitives.ReadUInt64BigEndian(block[8..]) != (ulong)(byteOffset >> 9)) return VerifyResult.Fail("block records a different disk address", 8);
        if (SuperblockView.ReadUuid(block.Slice(24, 16)) != _sb.MetaUuid) return VerifyResult.Fail("block UUID does not match the volume", 24);
        if (BinaryPrimitives.ReadUInt64BigEndian(block[40..]) != owner) return VerifyResult.Fail("block owned by another inode", 40);
        return VerifyResult.Ok;
    }
}

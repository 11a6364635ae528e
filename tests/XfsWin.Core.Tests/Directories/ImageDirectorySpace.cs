using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Tests.Directories;

/// <summary>
/// The directory space of the tests: blocks taken from the start of the first free extent of the directory's AG
/// that is long enough (bnobt and cntbt records changed through <see cref="BtreeCursor{TOps}"/> over a
/// <see cref="TransactionBtreeStore"/>, agf_freeblks, agf_longest and sb_fdblocks kept), freed blocks merged back
/// with their free neighbours; the directory's extent list (in the inode image's data fork, extents format only)
/// gains or loses the mapping, with di_nextents and di_nblocks. When the extent list outgrows the inode's fork it
/// moves to a bmbt (one leaf under a root in the fork, then changed through <see cref="BtreeCursor{TOps}"/>), and back
/// to the fork when it fits again, as xfs_repair expects. Volumes without rmapbt only: the reverse map is not kept
/// here. The free-space trees grow by blocks from the AGFL and shrink back onto it (agf_btreeblks follows); the AGFL
/// is refilled from free space before each allocation or free.
/// <paramref name="device"/> reads a bmbt-format fork's records the first time (the space keeps them afterwards).
/// </summary>
internal sealed class ImageDirectorySpace(Superblock sb, IBlockDevice? device = null) : IDirectorySpace, IBtreeSpace
{
    private readonly record struct Extent(ulong FileOffset, ulong StartBlock, uint Count);

    /// <summary>Records of bmbt-format forks, by inode.</summary>
    private readonly Dictionary<ulong, List<Extent>> _btreeExtents = new();

    private List<Extent> Extents(DirectoryInodeImage dir)
    {
        if (dir.DataFormat == ForkFormat.Btree)
        {
            if (!_btreeExtents.TryGetValue(dir.Number, out var cached)) _btreeExtents[dir.Number] = cached = ReadBtree(dir);
            return cached.ToList();
        }
        if (dir.DataFormat != ForkFormat.Extents) throw new InvalidOperationException($"test directory {dir.Number} has a {dir.DataFormat} data fork");
        var fork = dir.DataFork;
        var list = new List<Extent>();
        for (ulong i = 0; i < dir.DataExtentCount; i++)
        {
            var r = BmbtRecord.Decode(fork[(int)(i * BmbtRecord.Size)..]);
            list.Add(new Extent(r.FileOffset, r.StartBlock, r.BlockCount));
        }
        return list;
    }

    /// <summary>The records of a bmbt-format fork, read from the device (the tree as last written back).</summary>
    private List<Extent> ReadBtree(DirectoryInodeImage dir)
    {
        if (device is null) throw new InvalidOperationException($"test directory {dir.Number} has a bmbt fork and the space has no device to read it");
        var list = new List<Extent>();
        var root = new BmdrBlockView(dir.DataFork);
        int hdr = BtreeBlockView.HeaderSize(longForm: true, sb.IsV5);
        void Walk(ulong fsb)
        {
            var b = new byte[sb.BlockSize];
            device.Read(sb.FsbToByte(fsb), b);
            int level = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(BtreeBlockView.OffLevel));
            int n = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(BtreeBlockView.OffNumrecs));
            if (level == 0)
            {
                for (int i = 0; i < n; i++)
                {
                    var r = BmbtRecord.Decode(b.AsSpan(hdr + i * BmbtRecord.Size));
                    list.Add(new Extent(r.FileOffset, r.StartBlock, r.BlockCount));
                }
                return;
            }
            int max = ((int)sb.BlockSize - hdr) / 16;
            for (int i = 0; i < n; i++) Walk(BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(hdr + max * 8 + i * 8)));
        }
        for (int i = 0; i < root.NumRecs; i++) Walk(root.Pointer(i));
        return list;
    }

    /// <summary>The inode fork as a bmbt root holder: changes mark the fork dirty.</summary>
    private sealed class ForkRoot(DirectoryInodeImage dir) : IInodeRootHolder
    {
        private int CoreSize => dir.Image[DinodeView.OffVersion] >= 3 ? DinodeView.V3CoreSize : DinodeView.V2CoreSize;
        public ArraySegment<byte> Root => new(dir.Image, CoreSize, dir.DataForkSize);
        public void RootChanged(int offset, int length) => dir.MarkDataForkChanged();
    }

    /// <summary>Blocks for the bmbt itself: from the directory's AG, counted in di_nblocks.</summary>
    private sealed class BmbtSpace(ImageDirectorySpace owner, DirectoryInodeImage dir) : IBtreeSpace
    {
        public ulong Allocate(Transaction tx, ulong near)
        {
            ulong fsb = owner.Take(tx, owner.Sb.InoToAgno(dir.Number), 1);
            dir.BlockCount += 1;
            return fsb;
        }

        public void Free(Transaction tx, ulong pointer)
        {
            owner.GiveBack(tx, pointer, 1);
            dir.BlockCount -= 1;
        }
    }

    private Superblock Sb => sb;

    private TransactionBtreeStore BmbtStore(Transaction tx, DirectoryInodeImage dir) =>
        TransactionBtreeStore.ForInodeRoot<BmbtOps>(tx, dir.Number, new ForkRoot(dir), sb.InodeToByte(dir.Number), new BmbtSpace(this, dir));

    /// <summary>The fork after a change from <paramref name="before"/> to <paramref name="list"/>: extents while they fit, else a bmbt.</summary>
    private void Store(Transaction tx, DirectoryInodeImage dir, List<Extent> before, List<Extent> list)
    {
        int capacity = dir.DataForkSize / BmbtRecord.Size;
        var rec = new byte[BmbtRecord.Size];
        var key = new byte[8];
        if (dir.DataFormat == ForkFormat.Btree)
        {
            var store = BmbtStore(tx, dir);
            if (list.Count <= capacity)
            {
                // xfs_bmap_btree_to_extents: every tree block goes, the records return to the fork.
                var blocks = new List<ulong>();
                uint magic = new BmbtOps().Magic(sb.IsV5);
                int hdr = BtreeBlockView.HeaderSize(longForm: true, sb.IsV5);
                void Walk(ulong ptr)
                {
                    blocks.Add(ptr);
                    var b = store.Read(ptr, magic, -1);
                    int level = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(BtreeBlockView.OffLevel));
                    if (level == 0) return;
                    int n = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(BtreeBlockView.OffNumrecs));
                    int max = ((int)sb.BlockSize - hdr) / 16;
                    for (int i = 0; i < n; i++) Walk(BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(hdr + max * 8 + i * 8)));
                }
                var root = new BmdrBlockView(dir.DataFork);
                for (int i = 0; i < root.NumRecs; i++) Walk(root.Pointer(i));
                foreach (ulong ptr in blocks)
                {
                    store.Free(ptr);
                }
                _btreeExtents.Remove(dir.Number);
                dir.Image[DinodeView.OffFormat] = (byte)ForkFormat.Extents;
                WriteExtents(dir, list);
                return;
            }
            var cursor = new BtreeCursor<BmbtOps>(store);
            foreach (var gone in before.Except(list))
            {
                BinaryPrimitives.WriteUInt64BigEndian(key, gone.FileOffset);
                Assert(cursor.Lookup(key, BtreeLookup.Equal), $"bmbt lacks the record at {gone.FileOffset}");
                cursor.Delete();
            }
            foreach (var added in list.Except(before))
            {
                new BmbtRecord(added.FileOffset, added.StartBlock, added.Count, false).Encode(rec);
                Assert(cursor.Insert(rec), $"bmbt already has a record at {added.FileOffset}");
            }
            dir.DataExtentCount = (ulong)list.Count;
            _btreeExtents[dir.Number] = list.ToList();
            return;
        }
        if (list.Count <= capacity)
        {
            WriteExtents(dir, list);
            return;
        }
        // xfs_bmap_extents_to_btree: the records move to one leaf block under a root in the fork.
        var fork = dir.DataFork;
        fork.Clear();
        dir.Image[DinodeView.OffFormat] = (byte)ForkFormat.Btree;
        var view = new BmdrBlockView(fork);
        BinaryPrimitives.WriteUInt16BigEndian(fork, 1);
        BinaryPrimitives.WriteUInt16BigEndian(fork[2..], 1);
        BinaryPrimitives.WriteUInt64BigEndian(fork[BmdrBlockView.HeaderSize..], list[0].FileOffset);
        dir.DataExtentCount = (ulong)list.Count;
        dir.MarkDataForkChanged();
        var leafStore = BmbtStore(tx, dir);
        ulong leafFsb = leafStore.Allocate(0, out var leaf);
        BinaryPrimitives.WriteUInt64BigEndian(dir.DataFork[(BmdrBlockView.HeaderSize + view.MaxRecs * 8)..], leafFsb);
        InitBmbtLeaf(leafStore, leaf, leafFsb);
        int header = BtreeBlockView.HeaderSize(longForm: true, sb.IsV5);
        for (int i = 0; i < list.Count; i++)
            new BmbtRecord(list[i].FileOffset, list[i].StartBlock, list[i].Count, false).Encode(leaf.AsSpan(header + i * BmbtRecord.Size));
        BinaryPrimitives.WriteUInt16BigEndian(leaf.AsSpan(BtreeBlockView.OffNumrecs), (ushort)list.Count);
        leafStore.Changed(leafFsb, leaf, 0, leaf.Length);
        _btreeExtents[dir.Number] = list.ToList();
    }

    /// <summary>The header of a new bmbt leaf at <paramref name="fsb"/>: no siblings, V5 self-description.</summary>
    private void InitBmbtLeaf(TransactionBtreeStore store, byte[] leaf, ulong fsb)
    {
        BinaryPrimitives.WriteUInt32BigEndian(leaf, new BmbtOps().Magic(sb.IsV5));
        BinaryPrimitives.WriteUInt64BigEndian(leaf.AsSpan(BtreeBlockView.OffLeftSib), BtreeBlockView.NullLongPtr);
        BinaryPrimitives.WriteUInt64BigEndian(leaf.AsSpan(BtreeBlockView.LongOffRightSib), BtreeBlockView.NullLongPtr);
        if (sb.IsV5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(leaf.AsSpan(BtreeBlockView.LongOffBlkno), (ulong)(sb.FsbToByte(fsb) >> 9));
            store.MetadataUuid.CopyTo(leaf.AsSpan(BtreeBlockView.LongOffUuid));
            BinaryPrimitives.WriteUInt64BigEndian(leaf.AsSpan(BtreeBlockView.LongOffOwner), store.Owner);
        }
    }

    private static void WriteExtents(DirectoryInodeImage dir, List<Extent> list)
    {
        var fork = dir.DataFork;
        if (list.Count * BmbtRecord.Size > fork.Length) throw new InvalidOperationException($"test directory {dir.Number}: {list.Count} extents overflow the fork");
        fork.Clear();
        for (int i = 0; i < list.Count; i++) new BmbtRecord(list[i].FileOffset, list[i].StartBlock, list[i].Count, false).Encode(fork[(i * BmbtRecord.Size)..]);
        dir.DataExtentCount = (ulong)list.Count;
        dir.MarkDataForkChanged();
    }

    public long Map(DirectoryInodeImage dir, ulong fileBlock)
    {
        int per = 1 << sb.DirBlockLog;
        foreach (var e in Extents(dir))
            if (fileBlock >= e.FileOffset && fileBlock + (ulong)per <= e.FileOffset + e.Count)
                return sb.FsbToByte(e.StartBlock + (fileBlock - e.FileOffset));
        return -1;
    }

    public ulong FirstUnused(DirectoryInodeImage dir, ulong from, int count)
    {
        ulong pos = from;
        foreach (var e in Extents(dir).OrderBy(e => e.FileOffset))
        {
            if (e.FileOffset + e.Count <= pos) continue;
            if (e.FileOffset >= pos + (ulong)count) return pos;
            pos = e.FileOffset + e.Count;
        }
        return pos;
    }

    public ulong LastBefore(DirectoryInodeImage dir, ulong fileBlock) =>
        Extents(dir).Where(e => e.FileOffset < fileBlock).Select(e => Math.Min(e.FileOffset + e.Count, fileBlock)).DefaultIfEmpty(0UL).Max();

    /// <summary>Directory blocks mapped in [<paramref name="from"/>, <paramref name="to"/>) (file blocks).</summary>
    public int MappedBlocks(DirectoryInodeImage dir, ulong from, ulong to) =>
        (int)(Extents(dir).Select(e => (long)Math.Min(e.FileOffset + e.Count, to) - (long)Math.Max(e.FileOffset, from)).Where(n => n > 0).Sum() >> sb.DirBlockLog);

    public ulong LastOffset(DirectoryInodeImage dir) => Extents(dir).Select(e => e.FileOffset + e.Count).DefaultIfEmpty(0UL).Max();

    public long Allocate(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count)
    {
        ulong fsb = Take(tx, sb.InoToAgno(dir.Number), count);
        var before = Extents(dir);
        var list = before.ToList();
        int at = list.FindIndex(e => e.FileOffset + e.Count == fileBlock && e.StartBlock + e.Count == fsb && e.Count + (uint)count <= BmbtRecord.MaxBlockCount);
        if (at >= 0) list[at] = list[at] with { Count = list[at].Count + (uint)count };
        else
        {
            list.Add(new Extent(fileBlock, fsb, (uint)count));
            list.Sort((a, b) => a.FileOffset.CompareTo(b.FileOffset));
        }
        Store(tx, dir, before, list);
        dir.BlockCount += (ulong)count;
        return sb.FsbToByte(fsb);
    }

    /// <summary>The start of the first free extent of AG <paramref name="agno"/> holding <paramref name="count"/> blocks, taken out of the free-space trees.</summary>
    private ulong Take(Transaction tx, uint agno, int count)
    {
        FillFreeList(tx, agno);
        return TakeExtent(tx, agno, count, counted: true);
    }

    /// <summary>
    /// Keeps a few blocks on the AGFL for the free-space trees to grow by (xfs_alloc_fix_freelist, simplified): they
    /// leave the free-space trees (agf_freeblks) but stay counted free (sb_fdblocks).
    /// </summary>
    private void FillFreeList(Transaction tx, uint agno)
    {
        while (true)
        {
            var (agf, agfl, slots) = FreeList(tx, agno);
            var a = agf.Contents;
            uint count = BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFlcount));
            if (count >= 8) return;
            uint bno = (uint)(TakeExtent(tx, agno, 1, counted: false) & ((1UL << sb.AgBlkLog) - 1));
            PushFreeList(tx, agno, bno, adjustBtreeBlocks: false);
        }
    }

    private (MetadataBuffer Agf, MetadataBuffer Agfl, int Slots) FreeList(Transaction tx, uint agno)
    {
        var verifier = new AgfBufferVerifier(sb, agno);
        var agf = tx.Read(sb.AgBlockToByte(agno, 0) + sb.SectorSize, sb.SectorSize, agno, verifier, verifier.ForWrite(), BufType.Agf);
        var flVerifier = new AgflBufferVerifier(sb, agno);
        var agfl = tx.Read(sb.AgBlockToByte(agno, 0) + 3L * sb.SectorSize, sb.SectorSize, agno, flVerifier, flVerifier.ForWrite(), BufType.Agfl);
        return (agf, agfl, (sb.SectorSize - (sb.IsV5 ? AgflLayout.OffBno : 0)) / 4);
    }

    private void PushFreeList(Transaction tx, uint agno, uint bno, bool adjustBtreeBlocks)
    {
        var (agf, agfl, slots) = FreeList(tx, agno);
        var a = agf.Contents;
        uint last = (BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFllast)) + 1) % (uint)slots;
        uint count = BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFlcount)) + 1;
        Assert(count <= slots, "AGFL full");
        int slot = (sb.IsV5 ? AgflLayout.OffBno : 0) + (int)last * 4;
        BinaryPrimitives.WriteUInt32BigEndian(agfl.Contents.AsSpan(slot), bno);
        tx.LogRange(agfl, slot, slot + 3);
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffFllast), last);
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffFlcount), count);
        if (adjustBtreeBlocks)
            BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffBtreeblks), BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffBtreeblks)) - 1);
        tx.LogRange(agf, AgfView.OffFlfirst, AgfView.OffBtreeblks + 3);
    }

    private uint PopFreeList(Transaction tx, uint agno)
    {
        var (agf, agfl, slots) = FreeList(tx, agno);
        var a = agf.Contents;
        uint first = BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFlfirst));
        uint count = BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFlcount));
        Assert(count > 0, "AGFL empty");
        uint bno = BinaryPrimitives.ReadUInt32BigEndian(agfl.Contents.AsSpan((sb.IsV5 ? AgflLayout.OffBno : 0) + (int)first * 4));
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffFlfirst), (first + 1) % (uint)slots);
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffFlcount), count - 1);
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffBtreeblks), BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffBtreeblks)) + 1);
        tx.LogRange(agf, AgfView.OffFlfirst, AgfView.OffBtreeblks + 3);
        return bno;
    }

    private ulong TakeExtent(Transaction tx, uint agno, int count, bool counted)
    {
        var (agf, bno, cnt) = Trees(tx, agno);
        var key = new byte[8];
        Assert(bno.Lookup(key, BtreeLookup.GreaterOrEqual) || bno.AtRecord, "no free space in AG");
        uint start = 0, length = 0;
        do
        {
            if (!bno.AtRecord) break;
            start = BinaryPrimitives.ReadUInt32BigEndian(bno.Record);
            length = BinaryPrimitives.ReadUInt32BigEndian(bno.Record[4..]);
            if (length >= count) break;
        } while (bno.Increment());
        Assert(length >= count, $"no free extent of {count} blocks in AG {agno}");
        var rec = new byte[8];
        if (length == count) bno.Delete();
        else
        {
            Rec(rec, start + (uint)count, length - (uint)count);
            bno.Update(rec);
        }
        Rec(rec, start, length);
        Assert(cnt.Lookup(rec, BtreeLookup.Equal), "cntbt lacks the bnobt's record");
        cnt.Delete();
        if (length > count)
        {
            Rec(rec, start + (uint)count, length - (uint)count);
            cnt.Insert(rec);
        }
        ChangeFree(tx, agf, cnt, -count, counted);
        return ((ulong)agno << sb.AgBlkLog) | start;
    }

    public void Free(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count)
    {
        var before = Extents(dir);
        var list = before.ToList();
        int i = list.FindIndex(e => fileBlock >= e.FileOffset && fileBlock + (ulong)count <= e.FileOffset + e.Count);
        Assert(i >= 0, $"file block {fileBlock} is not mapped");
        var e = list[i];
        ulong fsb = e.StartBlock + (fileBlock - e.FileOffset);
        list.RemoveAt(i);
        ulong tail = e.FileOffset + e.Count - (fileBlock + (ulong)count);
        if (tail > 0) list.Insert(i, new Extent(fileBlock + (ulong)count, fsb + (ulong)count, (uint)tail));
        if (fileBlock > e.FileOffset) list.Insert(i, e with { Count = (uint)(fileBlock - e.FileOffset) });
        Store(tx, dir, before, list);
        dir.BlockCount -= (ulong)count;
        GiveBack(tx, fsb, count);
    }

    /// <summary>Returns <paramref name="count"/> blocks at <paramref name="fsb"/> to the free-space trees, merged with free neighbours.</summary>
    private void GiveBack(Transaction tx, ulong fsb, int count)
    {
        uint agno = (uint)(fsb >> sb.AgBlkLog);
        FillFreeList(tx, agno);
        uint start = (uint)(fsb & ((1UL << sb.AgBlkLog) - 1));
        uint length = (uint)count;
        var (agf, bno, cnt) = Trees(tx, agno);
        var key = new byte[8];
        var rec = new byte[8];
        // Merge with the free extent ending where this one starts and the one starting where it ends.
        Rec(key, start, 0);
        if (bno.Lookup(key, BtreeLookup.LessOrEqual))
        {
            uint ls = BinaryPrimitives.ReadUInt32BigEndian(bno.Record), ll = BinaryPrimitives.ReadUInt32BigEndian(bno.Record[4..]);
            Assert(ls + ll <= start, "freed block is already free");
            if (ls + ll == start)
            {
                bno.Delete();
                Rec(rec, ls, ll);
                Assert(cnt.Lookup(rec, BtreeLookup.Equal), "cntbt lacks the left neighbour");
                cnt.Delete();
                start = ls;
                length += ll;
            }
        }
        Rec(key, start + length, 0);
        if (bno.Lookup(key, BtreeLookup.Equal))
        {
            uint rl = BinaryPrimitives.ReadUInt32BigEndian(bno.Record[4..]);
            bno.Delete();
            Rec(rec, start + length, rl);
            Assert(cnt.Lookup(rec, BtreeLookup.Equal), "cntbt lacks the right neighbour");
            cnt.Delete();
            length += rl;
        }
        Rec(rec, start, length);
        Assert(bno.Insert(rec), "bnobt already has the merged record");
        Assert(cnt.Insert(rec), "cntbt already has the merged record");
        ChangeFree(tx, agf, cnt, count, counted: true);
    }

    /// <summary>The AG whose free-space trees are being changed (their new blocks come from its AGFL).</summary>
    private uint _treeAgno;

    private (MetadataBuffer Agf, BtreeCursor<BnobtOps> Bno, BtreeCursor<CntbtOps> Cnt) Trees(Transaction tx, uint agno)
    {
        _treeAgno = agno;
        var verifier = new AgfBufferVerifier(sb, agno);
        var agf = tx.Read(sb.AgBlockToByte(agno, 0) + sb.SectorSize, sb.SectorSize, agno, verifier, verifier.ForWrite(), BufType.Agf);
        var bno = new BtreeCursor<BnobtOps>(TransactionBtreeStore.ForAgTree<BnobtOps>(tx, agno, agf, AgfView.OffBnoRoot, AgfView.OffBnoLevel, this));
        var cnt = new BtreeCursor<CntbtOps>(TransactionBtreeStore.ForAgTree<CntbtOps>(tx, agno, agf, AgfView.OffCntRoot, AgfView.OffCntLevel, this));
        return (agf, bno, cnt);
    }

    /// <summary>agf_freeblks and agf_longest after a change of <paramref name="delta"/> blocks; sb_fdblocks too unless the blocks move to or from the AGFL.</summary>
    private void ChangeFree(Transaction tx, MetadataBuffer agf, BtreeCursor<CntbtOps> cnt, int delta, bool counted)
    {
        var a = agf.Contents;
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffFreeblks), (uint)((int)BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFreeblks)) + delta));
        uint longest = 0;
        var max = new byte[8];
        Rec(max, uint.MaxValue, uint.MaxValue);
        if (cnt.Lookup(max, BtreeLookup.LessOrEqual)) longest = BinaryPrimitives.ReadUInt32BigEndian(cnt.Record[4..]);
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffLongest), longest);
        tx.LogRange(agf, AgfView.OffFreeblks, AgfView.OffLongest + 3);
        if (!counted) return;
        var sbVerifier = new SuperblockVerifier();
        var super = tx.Read(0, sb.SectorSize, 0, sbVerifier, new SelfDescribingWriteVerifier<SuperblockVerifier>(sbVerifier, SuperblockView.OffLsn, SuperblockView.OffCrc), BufType.Superblock);
        var s = super.Contents;
        BinaryPrimitives.WriteUInt64BigEndian(s.AsSpan(SuperblockView.OffFdblocks), (ulong)((long)BinaryPrimitives.ReadUInt64BigEndian(s.AsSpan(SuperblockView.OffFdblocks)) + delta));
        tx.LogRange(super, SuperblockView.OffFdblocks, SuperblockView.OffFdblocks + 7);
    }

    private readonly struct SuperblockVerifier : IBufferVerifier
    {
        public int Kind => 77;
        public string Structure => "superblock";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) =>
            BinaryPrimitives.ReadUInt32BigEndian(buffer) == 0x58465342 ? VerifyResult.Ok : VerifyResult.Fail("bad magic", 0);
    }

    private static void Rec(byte[] r, uint start, uint length)
    {
        BinaryPrimitives.WriteUInt32BigEndian(r, start);
        BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), length);
    }

    private static void Assert(bool condition, string what)
    {
        if (!condition) throw new InvalidOperationException("test directory space: " + what);
    }

    ulong IBtreeSpace.Allocate(Transaction tx, ulong near) => PopFreeList(tx, _treeAgno);

    void IBtreeSpace.Free(Transaction tx, ulong pointer) => PushFreeList(tx, _treeAgno, (uint)pointer, adjustBtreeBlocks: true);
}

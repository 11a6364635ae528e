using System.Buffers.Binary;
using XfsWin.Btree;
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
/// gains or loses the mapping, with di_nextents and di_nblocks. Volumes without rmapbt only: the reverse map is not
/// kept here. The free-space trees must not need a new block (their blocks come from the AGFL, not kept here).
/// </summary>
internal sealed class ImageDirectorySpace(Superblock sb) : IDirectorySpace, IBtreeSpace
{
    private readonly record struct Extent(ulong FileOffset, ulong StartBlock, uint Count);

    private List<Extent> Extents(DirectoryInodeImage dir)
    {
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

    public ulong LastOffset(DirectoryInodeImage dir) => Extents(dir).Select(e => e.FileOffset + e.Count).DefaultIfEmpty(0UL).Max();

    public long Allocate(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count)
    {
        uint agno = sb.InoToAgno(dir.Number);
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
        ChangeFree(tx, agno, agf, cnt, -count);

        ulong fsb = ((ulong)agno << sb.AgBlkLog) | start;
        var list = Extents(dir);
        int at = list.FindIndex(e => e.FileOffset + e.Count == fileBlock && e.StartBlock + e.Count == fsb && e.Count + (uint)count <= BmbtRecord.MaxBlockCount);
        if (at >= 0) list[at] = list[at] with { Count = list[at].Count + (uint)count };
        else
        {
            list.Add(new Extent(fileBlock, fsb, (uint)count));
            list.Sort((a, b) => a.FileOffset.CompareTo(b.FileOffset));
        }
        WriteExtents(dir, list);
        dir.BlockCount += (ulong)count;
        return sb.FsbToByte(fsb);
    }

    public void Free(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count)
    {
        var list = Extents(dir);
        int i = list.FindIndex(e => fileBlock >= e.FileOffset && fileBlock + (ulong)count <= e.FileOffset + e.Count);
        Assert(i >= 0, $"file block {fileBlock} is not mapped");
        var e = list[i];
        ulong fsb = e.StartBlock + (fileBlock - e.FileOffset);
        list.RemoveAt(i);
        ulong tail = e.FileOffset + e.Count - (fileBlock + (ulong)count);
        if (tail > 0) list.Insert(i, new Extent(fileBlock + (ulong)count, fsb + (ulong)count, (uint)tail));
        if (fileBlock > e.FileOffset) list.Insert(i, e with { Count = (uint)(fileBlock - e.FileOffset) });
        WriteExtents(dir, list);
        dir.BlockCount -= (ulong)count;

        uint agno = (uint)(fsb >> sb.AgBlkLog);
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
        ChangeFree(tx, agno, agf, cnt, count);
    }

    private (MetadataBuffer Agf, BtreeCursor<BnobtOps> Bno, BtreeCursor<CntbtOps> Cnt) Trees(Transaction tx, uint agno)
    {
        var verifier = new AgfBufferVerifier(sb, agno);
        var agf = tx.Read(sb.AgBlockToByte(agno, 0) + sb.SectorSize, sb.SectorSize, agno, verifier, verifier.ForWrite(), BufType.Agf);
        var bno = new BtreeCursor<BnobtOps>(TransactionBtreeStore.ForAgTree<BnobtOps>(tx, agno, agf, AgfView.OffBnoRoot, AgfView.OffBnoLevel, this));
        var cnt = new BtreeCursor<CntbtOps>(TransactionBtreeStore.ForAgTree<CntbtOps>(tx, agno, agf, AgfView.OffCntRoot, AgfView.OffCntLevel, this));
        return (agf, bno, cnt);
    }

    private void ChangeFree(Transaction tx, uint agno, MetadataBuffer agf, BtreeCursor<CntbtOps> cnt, int delta)
    {
        var a = agf.Contents;
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffFreeblks), (uint)((int)BinaryPrimitives.ReadUInt32BigEndian(a.AsSpan(AgfView.OffFreeblks)) + delta));
        uint longest = 0;
        var max = new byte[8];
        Rec(max, uint.MaxValue, uint.MaxValue);
        if (cnt.Lookup(max, BtreeLookup.LessOrEqual)) longest = BinaryPrimitives.ReadUInt32BigEndian(cnt.Record[4..]);
        BinaryPrimitives.WriteUInt32BigEndian(a.AsSpan(AgfView.OffLongest), longest);
        tx.LogRange(agf, AgfView.OffFreeblks, AgfView.OffLongest + 3);
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

    ulong IBtreeSpace.Allocate(Transaction tx, ulong near) =>
        throw new InvalidOperationException("test directory space: a free-space tree needs a new block, which this test space does not take from the AGFL");

    void IBtreeSpace.Free(Transaction tx, ulong pointer) =>
        throw new InvalidOperationException("test directory space: a free-space tree gives back a block, which this test space does not return to the AGFL");
}

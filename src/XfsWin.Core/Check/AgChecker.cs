using System.Buffers.Binary;
using System.Numerics;
using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>A reverse mapping record as read from an rmapbt leaf.</summary>
internal readonly record struct RmapEntry(uint Start, uint Count, ulong Owner, ulong Offset);

/// <summary>A refcount btree record (start with the CoW flag removed).</summary>
internal readonly record struct RefcountEntry(uint Start, uint Count, uint Refcount, bool Cow);

/// <summary>
/// Checks one allocation group's own metadata: its superblock copy, AGF, AGI and AGFL, and every
/// AG btree (bnobt, cntbt, inobt, finobt, rmapbt, refcountbt), claiming every block they use in the
/// usage map. Keeps what later phases need: the inode chunks, rmap and refcount records, and the
/// counters the AG headers state.
/// </summary>
internal sealed class AgChecker
{
    private readonly CheckContext _cx;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly uint _length;
    private readonly byte[] _primarySb;

    public AgChecker(CheckContext cx, uint agno, byte[] primarySuperblock)
    {
        _cx = cx;
        _sb = cx.Sb;
        _agno = agno;
        _length = cx.AgLength(agno);
        _primarySb = primarySuperblock;
    }

    public List<InobtRecord> InodeChunks { get; } = [];
    public List<RmapEntry> Rmaps { get; } = [];
    public List<RefcountEntry> Refcounts { get; } = [];
    /// <summary>agf_freeblks + agf_flcount + agf_btreeblks as stated by the AGF (what sb_fdblocks sums).</summary>
    public ulong AgfFreeSum { get; private set; }
    public ulong AgiCount { get; private set; }
    public ulong AgiFreeCount { get; private set; }
    public ulong FreeBlocksCounted { get; private set; }
    public long BtreeBlocks { get; private set; }
    public bool AgfReadable { get; private set; }
    public bool AgiReadable { get; private set; }

    private string Where(string structure) => $"{structure} of AG {_agno}";

    private long Daddr(uint agbno) => _cx.AgDaddr(_agno, agbno);

    public void Run()
    {
        int sect = _sb.SectorSize;
        uint headerBlocks = (uint)((4L * sect + _sb.BlockSize - 1) >> _sb.BlockLog);
        _cx.Claim(_agno, 0, headerBlocks, BlockUse.AgHeaders, Where("AG headers"));
        _cx.Rmaps.Add(_agno, 0, headerBlocks, RmapRecord.OwnFs);
        if (_agno > 0) CheckSecondarySuperblock();
        CheckAgf();
        CheckAgi();
    }

    // ------------------------------------------------------------ superblock copies

    private void CheckSecondarySuperblock()
    {
        var sector = new byte[_sb.SectorSize];
        long offset = _sb.AgBlockToByte(_agno, 0);
        string name = Where("superblock copy");
        if (!_cx.TryRead(offset, sector, name)) return;
        foreach (var problem in SuperblockRules.Problems(sector, _primarySb, isPrimary: false).Take(4))
            _cx.Report(name, _agno, Daddr(0), problem);
    }

    // ------------------------------------------------------------ AGF, AGFL, free space, rmap, refcount

    private void CheckAgf()
    {
        var sector = new byte[_sb.SectorSize];
        long offset = _sb.AgBlockToByte(_agno, 0) + _sb.SectorSize;
        string name = Where("AGF");
        if (!_cx.TryRead(offset, sector, name)) return;
        var verdict = AgfView.Verify(sector, _sb, _agno);
        if (!verdict.IsOk)
        {
            _cx.ReportAt(name, offset, verdict.ToString());
            return;
        }
        var agf = new AgfView(sector);
        AgfReadable = true;
        _cx.CheckLsn(name, offset, sector, AgfView.OffLsn);
        uint agfVersion = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgfView.OffVersion));
        if (agfVersion != 1) _cx.ReportAt(name, offset, $"version {agfVersion}");
        if (agf.Length != _length) _cx.ReportAt(name, offset, $"length {agf.Length}, the AG has {_length} blocks");
        uint btreeblks = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgfView.OffBtreeblks));
        AgfFreeSum = (ulong)agf.FreeBlocks + agf.FlCount + btreeblks;

        CheckAgfl(agf, _sb.AgBlockToByte(_agno, 0) + 3L * _sb.SectorSize);

        var bno = new List<(uint Start, uint Count)>();
        var bnoWalk = WalkFreeSpace(agf.BnoRoot, agf.BnoLevel, byCount: false, bno);
        var cnt = new List<(uint Start, uint Count)>();
        var cntWalk = WalkFreeSpace(agf.CntRoot, agf.CntLevel, byCount: true, cnt);
        ulong free = 0;
        uint longest = 0;
        foreach (var (_, c) in bno)
        {
            free += c;
            longest = Math.Max(longest, c);
        }
        FreeBlocksCounted = free;
        if (free != agf.FreeBlocks) _cx.ReportAt(name, offset, $"freeblks {agf.FreeBlocks}, counted {free} in the bnobt");
        if (longest != agf.Longest) _cx.ReportAt(name, offset, $"longest {agf.Longest}, counted {longest}");
        cnt.Sort((a, b) => a.Start.CompareTo(b.Start));
        if (!bno.SequenceEqual(cnt))
        {
            var onlyBno = bno.Except(cnt).FirstOrDefault();
            var onlyCnt = cnt.Except(bno).FirstOrDefault();
            _cx.ReportAt(Where("free space btrees"), offset,
                $"bnobt and cntbt disagree ({bno.Count} and {cnt.Count} records; e.g. " +
                (onlyBno.Count != 0 ? $"[{onlyBno.Start}+{onlyBno.Count}] only in the bnobt" : $"[{onlyCnt.Start}+{onlyCnt.Count}] only in the cntbt") + ")");
        }
        long agfBtreeBlocks = bnoWalk - 1 + (cntWalk - 1);
        BtreeBlocks += bnoWalk + cntWalk;

        if (_sb.HasRmapbt)
        {
            uint rmapBlocks = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgfView.OffRmapBlocks));
            int walked = WalkRmap(agf.RmapRoot, agf.RmapLevel);
            BtreeBlocks += walked;
            agfBtreeBlocks += walked - 1;
            if (walked != rmapBlocks) _cx.ReportAt(name, offset, $"rmap_blocks {rmapBlocks}, counted {walked}");
        }
        if (_sb.HasReflink)
        {
            uint refBlocks = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgfView.OffRefcountBlocks));
            int walked = WalkRefcount(agf.RefcountRoot, agf.RefcountLevel);
            BtreeBlocks += walked;
            if (walked != refBlocks) _cx.ReportAt(name, offset, $"refcount_blocks {refBlocks}, counted {walked}");
        }
        if ((_sb.Features2 & SuperblockFeatures.F2LazySbCount) != 0 && agfBtreeBlocks != btreeblks)
            _cx.ReportAt(name, offset, $"btreeblks {btreeblks}, counted {agfBtreeBlocks}");
    }

    private void CheckAgfl(AgfView agf, long offset)
    {
        string name = Where("AGFL");
        var sector = new byte[_sb.SectorSize];
        if (!_cx.TryRead(offset, sector, name)) return;
        int header = 0;
        if (_sb.IsV5)
        {
            // xfs_repair -n rebuilds every AGFL in a repair, so a damaged AGFL header is reported but not counted.
            header = AgflLayout.SizeV5;
            string? bad = BinaryPrimitives.ReadUInt32BigEndian(sector) != AgflLayout.Magic ? "bad magic"
                : !XfsCrc.Verify(sector, AgflLayout.OffCrc) ? "CRC mismatch"
                : BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgflLayout.OffSeqno)) != _agno ? "sequence number is not the AG's"
                : SuperblockView.ReadUuid(sector.AsSpan(AgflLayout.OffUuid, 16)) != _sb.MetaUuid ? "UUID does not match the volume" : null;
            if (bad is not null)
                _cx.Note($"{name} (daddr 0x{offset >> 9:x}): {bad} (xfs_repair rebuilds free lists and does not count this as damage)");
            else
                _cx.CheckLsn(name, offset, sector, AgflLayout.OffLsn);
        }
        uint size = (uint)((_sb.SectorSize - header) / 4);
        uint first = agf.FlFirst, last = agf.FlLast, count = agf.FlCount;
        string agfName = Where("AGF");
        long agfOffset = offset - 2L * _sb.SectorSize;
        if (first >= size || last >= size || count > size)
        {
            _cx.ReportAt(agfName, agfOffset, $"free list indexes first {first}, last {last}, count {count} with {size} slots");
            return;
        }
        if (count > 0)
        {
            uint span = last >= first ? last - first + 1 : size - first + last + 1;
            if (span != count) _cx.ReportAt(agfName, agfOffset, $"free list count {count}, but first {first} to last {last} hold {span}");
        }
        for (uint i = 0, slot = first; i < count; i++, slot = (slot + 1) % size)
        {
            uint agbno = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(header + (int)slot * 4));
            if (agbno >= _length || agbno == 0) { _cx.ReportAt(name, offset, $"slot {slot} names block {agbno}, outside the AG"); continue; }
            _cx.Claim(_agno, agbno, 1, BlockUse.Agfl, name);
        }
    }

    internal delegate void RecordHandler(ReadOnlySpan<byte> record, long blockByteOffset);

    private sealed class ClaimingVisitor(CheckContext cx, uint agno, BlockUse use, string name, RecordHandler record) : ITreeVisitor
    {
        public void Record(ReadOnlySpan<byte> rec, long blockByteOffset) => record(rec, blockByteOffset);

        public bool Block(ulong pointer, long byteOffset, int level) => cx.Claim(agno, (uint)pointer, 1, use, name);
    }

    private static UInt128 Key32(ReadOnlySpan<byte> k) => BinaryPrimitives.ReadUInt32BigEndian(k);
    private static UInt128 KeyCnt(ReadOnlySpan<byte> k) => ((UInt128)BinaryPrimitives.ReadUInt32BigEndian(k[4..]) << 32) | BinaryPrimitives.ReadUInt32BigEndian(k);

    /// <summary>Walks the bnobt or cntbt, claiming its blocks and (bnobt) the free extents; returns the blocks walked.</summary>
    private int WalkFreeSpace(uint root, uint levels, bool byCount, List<(uint Start, uint Count)> records)
    {
        string name = Where(byCount ? "free space btree by size (cntbt)" : "free space btree by block (bnobt)");
        uint prevStart = 0, prevCount = 0;
        bool first = true;
        var visitor = new ClaimingVisitor(_cx, _agno, BlockUse.AgfBtree, name, (rec, blockOffset) =>
        {
            uint start = BinaryPrimitives.ReadUInt32BigEndian(rec), count = BinaryPrimitives.ReadUInt32BigEndian(rec[4..]);
            if (count == 0 || start == 0 || (ulong)start + count > _length)
            {
                _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] is empty or outside the AG");
                return;
            }
            if (!first)
            {
                bool ordered = byCount ? count > prevCount || (count == prevCount && start > prevStart) : start >= prevStart + prevCount;
                if (!ordered) _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] out of order after [{prevStart}+{prevCount}]");
            }
            first = false;
            prevStart = start;
            prevCount = count;
            records.Add((start, count));
            if (!byCount) _cx.Claim(_agno, start, count, BlockUse.Free, name);
        });
        uint magic = byCount ? (_sb.IsV5 ? BtreeMagic.CntV5 : BtreeMagic.CntV4) : (_sb.IsV5 ? BtreeMagic.BnoV5 : BtreeMagic.BnoV4);
        var walker = new TreeWalker(_cx, name, magic, false, 8, 8, _agno, _agno, byCount ? KeyCnt : Key32, byCount ? KeyCnt : Key32, visitor);
        walker.WalkFromAgRoot(root, levels, _length);
        return walker.BlocksVisited;
    }

    private static UInt128 RmapKey(ReadOnlySpan<byte> k) =>
        ((UInt128)BinaryPrimitives.ReadUInt32BigEndian(k) << 96) | ((UInt128)BinaryPrimitives.ReadUInt64BigEndian(k[8..]) << 32) |
        ((BinaryPrimitives.ReadUInt64BigEndian(k[16..]) & ~RmapRecord.UnwrittenFlag) >> 32);

    private static UInt128 RmapNodeKey(ReadOnlySpan<byte> k) =>
        ((UInt128)BinaryPrimitives.ReadUInt32BigEndian(k) << 96) | ((UInt128)BinaryPrimitives.ReadUInt64BigEndian(k[4..]) << 32) |
        ((BinaryPrimitives.ReadUInt64BigEndian(k[12..]) & ~RmapRecord.UnwrittenFlag) >> 32);

    private int WalkRmap(uint root, uint levels)
    {
        string name = Where("reverse mapping btree (rmapbt)");
        UInt128 prev = 0;
        bool first = true;
        var visitor = new ClaimingVisitor(_cx, _agno, BlockUse.AgfBtree, name, (rec, blockOffset) =>
        {
            uint start = BinaryPrimitives.ReadUInt32BigEndian(rec), count = BinaryPrimitives.ReadUInt32BigEndian(rec[4..]);
            ulong owner = BinaryPrimitives.ReadUInt64BigEndian(rec[8..]), off = BinaryPrimitives.ReadUInt64BigEndian(rec[16..]);
            if (count == 0 || (ulong)start + count > _length)
            {
                _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] is empty or outside the AG");
                return;
            }
            bool special = RmapRecord.IsNonInodeOwner(owner);
            if (special ? owner < RmapRecord.OwnCow || off != 0 : !_sb.IsValidInode(owner))
                _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] has owner 0x{owner:x} and offset 0x{off:x}, which cannot be");
            var key = RmapKey(rec);
            if (!first && key < prev) _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] owner 0x{owner:x} out of order");
            first = false;
            prev = key;
            Rmaps.Add(new RmapEntry(start, count, owner, off));
        });
        var walker = new TreeWalker(_cx, name, BtreeMagic.RmapV5, false, RmapRecord.Size, 2 * RmapRecord.KeySize, _agno, _agno, RmapKey, RmapNodeKey, visitor);
        walker.WalkFromAgRoot(root, levels, _length);
        return walker.BlocksVisited;
    }

    private int WalkRefcount(uint root, uint levels)
    {
        string name = Where("refcount btree");
        ulong prevEnd = 0;
        var visitor = new ClaimingVisitor(_cx, _agno, BlockUse.RefcountBtree, name, (rec, blockOffset) =>
        {
            uint raw = BinaryPrimitives.ReadUInt32BigEndian(rec), count = BinaryPrimitives.ReadUInt32BigEndian(rec[4..]);
            uint refcount = BinaryPrimitives.ReadUInt32BigEndian(rec[8..]);
            bool cow = (raw & RefcountRecord.CowFlag) != 0;
            uint start = raw & ~RefcountRecord.CowFlag;
            if (count == 0 || (ulong)start + count > _length)
            {
                _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] is empty or outside the AG");
                return;
            }
            ulong encodedStart = raw;
            if (encodedStart < prevEnd) _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] overlaps or precedes the one before it");
            prevEnd = encodedStart + count;
            if (cow ? refcount != 1 : refcount < 2)
                _cx.ReportAt(name, blockOffset, $"record [{start}+{count}] has reference count {refcount}{(cow ? " in the copy-on-write domain" : "")}");
            Refcounts.Add(new RefcountEntry(start, count, refcount, cow));
            if (cow)
            {
                if (!_cx.LogReplayed) _cx.ReportAt(name, blockOffset, $"leftover copy-on-write staging extent [{start}+{count}]");
                _cx.Claim(_agno, start, count, BlockUse.CowStaging, name);
            }
        });
        var walker = new TreeWalker(_cx, name, BtreeMagic.RefcountV5, false, RefcountRecord.Size, RefcountRecord.KeySize, _agno, _agno, Key32, Key32, visitor);
        walker.WalkFromAgRoot(root, levels, _length);
        return walker.BlocksVisited;
    }

    // ------------------------------------------------------------ AGI, inobt, finobt

    private void CheckAgi()
    {
        var sector = new byte[_sb.SectorSize];
        long offset = _sb.AgBlockToByte(_agno, 0) + 2L * _sb.SectorSize;
        string name = Where("AGI");
        if (!_cx.TryRead(offset, sector, name)) return;
        var verdict = AgiView.Verify(sector, _sb, _agno);
        if (!verdict.IsOk)
        {
            _cx.ReportAt(name, offset, verdict.ToString());
            return;
        }
        var agi = new AgiView(sector);
        AgiReadable = true;
        _cx.CheckLsn(name, offset, sector, AgiView.OffLsn);
        uint agiVersion = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgiView.OffVersion));
        if (agiVersion != 1) _cx.ReportAt(name, offset, $"version {agiVersion}");
        AgiCount = agi.Count;
        AgiFreeCount = agi.FreeCount;
        if (agi.Length != _length) _cx.ReportAt(name, offset, $"length {agi.Length}, the AG has {_length} blocks");
        for (int bucket = 0; bucket < AgiView.UnlinkedBuckets; bucket++)
        {
            if (agi.Unlinked(bucket) != AgiView.NullAgino && !_cx.UnlinkedExpected)
                _cx.ReportAt(name, offset, $"unlinked bucket {bucket} holds inode {agi.Unlinked(bucket)} (an inode was being deleted)");
        }

        int inobtBlocks = WalkInodeTree(agi.Root, agi.Level, finobt: false, InodeChunks);
        ulong count = 0, free = 0;
        foreach (var r in InodeChunks)
        {
            count += r.Count;
            free += r.FreeCount;
        }
        if (count != agi.Count) _cx.ReportAt(name, offset, $"count {agi.Count}, counted {count} in the inobt");
        if (free != agi.FreeCount) _cx.ReportAt(name, offset, $"freecount {agi.FreeCount}, counted {free} in the inobt");
        BtreeBlocks += inobtBlocks;
        int finobtBlocks = 0;
        if (_sb.HasFinobt)
        {
            var fin = new List<InobtRecord>();
            finobtBlocks = WalkInodeTree(agi.FreeRoot, agi.FreeLevel, finobt: true, fin);
            BtreeBlocks += finobtBlocks;
            var expected = InodeChunks.Where(r => r.FreeCount > 0).ToList();
            if (!expected.SequenceEqual(fin))
            {
                var missing = expected.Except(fin).Select(r => (uint?)r.StartIno).FirstOrDefault();
                var extra = fin.Except(expected).Select(r => (uint?)r.StartIno).FirstOrDefault();
                _cx.ReportAt(Where("free inode btree (finobt)"), offset,
                    $"does not hold exactly the inobt's chunks with free inodes ({fin.Count} records, {expected.Count} expected" +
                    (missing is { } m ? $"; chunk {m} missing" : "") + (extra is { } x ? $"; chunk {x} differs or is extra" : "") + ")");
            }
        }
        if ((_sb.RoCompat & SuperblockFeatures.RoCompatInobtCount) != 0)
        {
            uint iblocks = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgiView.OffIblocks));
            uint fblocks = BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgiView.OffFblocks));
            if (iblocks != inobtBlocks) _cx.ReportAt(name, offset, $"iblocks {iblocks}, counted {inobtBlocks}");
            if (_sb.HasFinobt && fblocks != finobtBlocks) _cx.ReportAt(name, offset, $"fblocks {fblocks}, counted {finobtBlocks}");
        }
    }

    private int WalkInodeTree(uint root, uint levels, bool finobt, List<InobtRecord> records)
    {
        string name = Where(finobt ? "free inode btree (finobt)" : "inode btree (inobt)");
        bool sparse = _sb.HasSparseInodes;
        uint prevStart = 0;
        bool first = true;
        uint maxAgino = _length << _sb.InoPBlog;
        var visitor = new ClaimingVisitor(_cx, _agno, BlockUse.InodeBtree, name, (rec, blockOffset) =>
        {
            var r = InobtRecord.Decode(rec, sparse);
            // A chunk starts on a block (on a chunk when blocks hold more than a chunk) and, where the
            // volume aligns inodes, on an inode-alignment boundary.
            uint alignInodes = (uint)Math.Min(_sb.InodesPerBlock, InobtRecord.InodesPerChunk);
            bool aligned = (_sb.VersionNum & SuperblockFeatures.VersionAlign) == 0 || _sb.InodeAlignment <= 1 ||
                           ((r.StartIno >> _sb.InoPBlog) % _sb.InodeAlignment == 0) || sparse;
            if (r.StartIno % alignInodes != 0 || !aligned || r.StartIno == 0 || (ulong)r.StartIno + InobtRecord.InodesPerChunk > maxAgino)
            {
                _cx.ReportAt(name, blockOffset, $"chunk at AG inode {r.StartIno} is misaligned or outside the AG");
                return;
            }
            if (!first && r.StartIno < prevStart + InobtRecord.InodesPerChunk)
                _cx.ReportAt(name, blockOffset, $"chunk at AG inode {r.StartIno} out of order or overlapping the one before");
            first = false;
            prevStart = r.StartIno;
            ulong holes = 0;
            for (int i = 0; i < 16; i++) if ((r.HoleMask & (1 << i)) != 0) holes |= 0xFUL << (i * 4);
            int present = 64 - BitOperations.PopCount(holes);
            int freeCount = BitOperations.PopCount(r.FreeMask & ~holes);
            if (sparse && r.Count != present) _cx.ReportAt(name, blockOffset, $"chunk {r.StartIno}: count {r.Count}, the hole mask leaves {present}");
            if (r.FreeCount != freeCount) _cx.ReportAt(name, blockOffset, $"chunk {r.StartIno}: freecount {r.FreeCount}, the free mask says {freeCount}");
            if ((r.FreeMask & holes) != holes) _cx.ReportAt(name, blockOffset, $"chunk {r.StartIno}: holes not marked free");
            if (finobt && freeCount == 0) _cx.ReportAt(name, blockOffset, $"chunk {r.StartIno} has no free inodes");
            records.Add(r);
            if (!finobt)
            {
                ClaimChunk(r, holes, name);
                ObserveChunk(r, holes);
            }
        });
        uint magic = finobt ? (_sb.IsV5 ? BtreeMagic.FinoV5 : BtreeMagic.FinoV4) : (_sb.IsV5 ? BtreeMagic.InoV5 : BtreeMagic.InoV4);
        var walker = new TreeWalker(_cx, name, magic, false, InobtRecord.Size, InobtRecord.KeySize, _agno, _agno, Key32, Key32, visitor);
        walker.WalkFromAgRoot(root, levels, _length);
        return walker.BlocksVisited;
    }

    /// <summary>The chunk's reverse mapping as xfs_repair expects it (rmap_add_fixed_ag_rec): from its first inode, as many blocks as its inodes fill.</summary>
    private void ObserveChunk(InobtRecord r, ulong holes)
    {
        int first = BitOperations.TrailingZeroCount(~holes);
        if (first >= 64) return;
        uint blocks = (uint)((64 - BitOperations.PopCount(holes)) >> _sb.InoPBlog);
        if (blocks == 0) blocks = 1;
        uint agino = r.StartIno + (uint)first;
        if ((agino & ((1u << _sb.InoPBlog) - 1)) != 0) return;
        _cx.Rmaps.Add(_agno, agino >> _sb.InoPBlog, blocks, RmapRecord.OwnInodes);
    }

    private void ClaimChunk(InobtRecord r, ulong holes, string name)
    {
        int log = _sb.InoPBlog;
        uint runStart = uint.MaxValue, runEnd = 0;
        for (int i = 0; i < 64; i++)
        {
            if ((holes & (1UL << i)) != 0) continue;
            uint block = (r.StartIno + (uint)i) >> log;
            if (runStart != uint.MaxValue && block < runEnd) continue;
            if (runStart != uint.MaxValue && block == runEnd) { runEnd++; continue; }
            if (runStart != uint.MaxValue) _cx.Claim(_agno, runStart, runEnd - runStart, BlockUse.InodeChunk, name);
            runStart = block;
            runEnd = block + 1;
        }
        if (runStart != uint.MaxValue) _cx.Claim(_agno, runStart, runEnd - runStart, BlockUse.InodeChunk, name);
    }
}

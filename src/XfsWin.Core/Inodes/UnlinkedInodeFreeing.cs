using System.Buffers.Binary;
using XfsWin.Allocation;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>
/// What the kernel does after replaying a log (xlog_recover_process_iunlinks, then inactivation):
/// every inode left on an AGI unlinked list (unlinked while still open when the system stopped) is
/// freed. Its data and attribute blocks and extent-btree blocks go back to free space with their
/// reverse mappings removed, it is marked free in the inode and free-inode btrees, its core is
/// cleared as xfs_ifree leaves it, and the AGI buckets are emptied.
/// <para>
/// Works on metadata buffers joined to one <see cref="MetadataChangeSet"/> (recovery's, over its
/// copy-on-write overlay of a V5 volume); the caller commits the change, writes the buffers back and
/// rebuilds the superblock counters. It runs alone (nothing else changes the volume meanwhile), so
/// the AG header lock order does not bind it. Anything it cannot do exactly as the kernel would is refused
/// with <see cref="XfsError.Unsupported"/> before the overlay reaches the disk: blocks that may be
/// shared (reflink inodes), realtime files, quota accounting (dquots would need the same change),
/// and sparse inode chunks whose hole mask does not fall on block boundaries.
/// </para>
/// </summary>
public static class UnlinkedInodeFreeing
{
    private const ushort QuotaAccountingFlags = 0x0001 | 0x0008 | 0x0040; // XFS_{U,P,G}QUOTA_ACCT
    private const int BmbtLongHeader = BtreeBlockView.LongHeaderV5;
    private const byte FormatExtents = 2, FormatBtree = 3;

    /// <summary>
    /// Frees every inode on the unlinked lists of the volume on <paramref name="device"/> and writes the
    /// result back to it (a buffer cache of its own, committed and written back); returns how many.
    /// </summary>
    public static int FreeAll(IBlockDevice device, Superblock sb)
    {
        using var cache = new BufferCache(device, new VolumeHealth(), 64L << 20);
        using var changes = new MetadataChangeSet(cache);
        int freed = FreeAll(changes, sb);
        changes.Commit();
        cache.Writeback();
        return freed;
    }

    /// <summary>Frees every inode on the unlinked lists, in <paramref name="changes"/>; returns how many.</summary>
    public static int FreeAll(MetadataChangeSet changes, Superblock sb)
    {
        if (!sb.IsV5)
            throw new XfsException(XfsError.Unsupported, "freeing unlinked inodes of V4 volumes is not supported");
        var sector = changes.Cache.Read(0, sb.SectorSize, 0, new RawBlockVerifier("superblock", 5));
        if ((BinaryPrimitives.ReadUInt16BigEndian(sector.AsSpan(SuperblockView.OffQflags)) & QuotaAccountingFlags) != 0)
            throw new XfsException(XfsError.Unsupported, "quota accounting is on: freeing the unlinked inodes would also change their owners' dquots");

        int freed = 0;
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            long agiOffset = sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize;
            var agiVerifier = new AgiBufferVerifier(sb, ag);
            var agi = changes.Read(agiOffset, sb.SectorSize, ag, agiVerifier, agiVerifier.ForWrite()).Contents;
            var chain = UnlinkedChain(changes, sb, ag, agi);
            if (chain.Count == 0) continue;
            var space = new AgSpaceEditor(changes, sb, ag);
            var spaces = new Dictionary<uint, AgSpaceEditor> { [ag] = space };
            foreach (var ino in chain)
            {
                FreeInode(changes, sb, ino, agi, spaces);
                freed++;
            }
            for (int b = 0; b < AgiView.UnlinkedBuckets; b++)
                BinaryPrimitives.WriteUInt32BigEndian(agi.AsSpan(AgiView.OffUnlinked + 4 * b), AgiView.NullAgino);
            changes.LogRange(agiOffset, sb.SectorSize, 0, sb.SectorSize - 1);
            foreach (var s in spaces.Values) s.Commit();
        }
        return freed;
    }

    /// <summary>The inode's bytes in its block's buffer, joined to <paramref name="changes"/>.</summary>
    private static Span<byte> InodeBytes(MetadataChangeSet changes, Superblock sb, ulong ino, out long blockOffset, out int at)
    {
        long offset = sb.InodeToByte(ino);
        blockOffset = offset & ~((long)sb.BlockSize - 1);
        at = (int)(offset - blockOffset);
        var verifier = new InodeBlockVerifier(sb);
        return changes.Read(blockOffset, (int)sb.BlockSize, 0, verifier, verifier).Contents.AsSpan(at, sb.InodeSize);
    }

    /// <summary>The inodes on all 64 buckets of an AGI, following di_next_unlinked (a cycle or bad link is corruption).</summary>
    private static List<ulong> UnlinkedChain(MetadataChangeSet changes, Superblock sb, uint ag, byte[] agi)
    {
        var inodes = new List<ulong>();
        var seen = new HashSet<uint>();
        for (int b = 0; b < AgiView.UnlinkedBuckets; b++)
        {
            uint agino = BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffUnlinked + 4 * b));
            while (agino != AgiView.NullAgino)
            {
                ulong ino = ((ulong)ag << sb.AgInoLog) | agino;
                if (!sb.IsValidInode(ino) || !seen.Add(agino))
                    throw new XfsCorruptionException($"AGI of AG {ag}", sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize, $"unlinked bucket {b} leads to a bad or repeated inode ({agino})");
                inodes.Add(ino);
                var core = InodeBytes(changes, sb, ino, out _, out _);
                agino = BinaryPrimitives.ReadUInt32BigEndian(core[DinodeView.OffNextUnlinked..]);
            }
        }
        return inodes;
    }

    private static void FreeInode(MetadataChangeSet changes, Superblock sb, ulong ino, byte[] agi, Dictionary<uint, AgSpaceEditor> spaces)
    {
        var raw = InodeBytes(changes, sb, ino, out long blockOffset, out int at);
        var d = new DinodeView(raw);
        if (BinaryPrimitives.ReadUInt16BigEndian(raw) != DinodeView.Magic || !XfsCrc.Verify(raw, DinodeView.OffCrc) ||
            BinaryPrimitives.ReadUInt64BigEndian(raw[DinodeView.OffIno..]) != ino)
            throw new XfsCorruptionException($"inode {ino} (on an unlinked list)", sb.InodeToByte(ino), "bad magic, CRC or inode number");
        if (d.Mode == 0) throw new XfsCorruptionException($"inode {ino} (on an unlinked list)", sb.InodeToByte(ino), "it is already free");
        if (d.LinkCount != 0) throw new XfsException(XfsError.Unsupported, $"inode {ino} is on an unlinked list but still has {d.LinkCount} link(s)");
        if ((d.Flags & DinodeView.FlagRealtime) != 0)
            throw new XfsException(XfsError.Unsupported, $"unlinked inode {ino} is a realtime file; freeing realtime extents is not supported");
        if (sb.HasReflink && (d.Flags2 & DinodeView.Flag2Reflink) != 0)
            throw new XfsException(XfsError.Unsupported, $"unlinked inode {ino} may share blocks with other files (reflink); freeing shared extents is not supported");

        int forkOffset = raw[DinodeView.OffForkoff] * 8;
        int literal = sb.InodeSize - DinodeView.V3CoreSize;
        Span<byte> dataFork = raw.Slice(DinodeView.V3CoreSize, forkOffset != 0 ? forkOffset : literal);
        Span<byte> attrFork = forkOffset != 0 ? raw.Slice(DinodeView.V3CoreSize + forkOffset, literal - forkOffset) : default;
        bool nrext64 = (d.Flags2 & DinodeView.Flag2Nrext64) != 0;
        ulong dataExtents = nrext64 ? BinaryPrimitives.ReadUInt64BigEndian(raw[DinodeView.OffBigNextents..]) : BinaryPrimitives.ReadUInt32BigEndian(raw[DinodeView.OffNextents..]);
        uint attrExtents = nrext64 ? BinaryPrimitives.ReadUInt32BigEndian(raw[DinodeView.OffBigAnextents..]) : BinaryPrimitives.ReadUInt16BigEndian(raw[DinodeView.OffAnextents..]);

        ulong blocksFreed = ReleaseFork(changes, sb, ino, raw[DinodeView.OffFormat], dataFork, dataExtents, attrFork: false, spaces);
        if (forkOffset != 0)
            blocksFreed += ReleaseFork(changes, sb, ino, raw[DinodeView.OffAformat], attrFork, attrExtents, attrFork: true, spaces);
        if (blocksFreed != d.Nblocks)
            throw new XfsCorruptionException($"inode {ino} (on an unlinked list)", sb.InodeToByte(ino), $"it maps {blocksFreed} blocks but counts {d.Nblocks}");

        MarkFree(changes, sb, ino, agi, SpaceOf(changes, sb, sb.InoToAgno(ino), spaces));
        ClearCore(raw, sb);
        changes.LogRange(blockOffset, (int)sb.BlockSize, at, at + sb.InodeSize - 1);
    }

    /// <summary>Frees what one fork maps (and its extent-btree blocks); returns the blocks freed.</summary>
    private static ulong ReleaseFork(MetadataChangeSet changes, Superblock sb, ulong ino, byte format, ReadOnlySpan<byte> fork, ulong extentCount,
        bool attrFork, Dictionary<uint, AgSpaceEditor> spaces)
    {
        ulong forkFlag = attrFork ? RmapRecord.AttrForkFlag : 0;
        var extents = new List<BmbtRecord>();
        var btreeBlocks = new List<ulong>();
        if (format == FormatExtents)
        {
            if (extentCount * BmbtRecord.Size > (ulong)fork.Length)
                throw new XfsCorruptionException($"inode {ino}", sb.InodeToByte(ino), $"{extentCount} extents do not fit its fork");
            for (int i = 0; i < (int)extentCount; i++) extents.Add(BmbtRecord.Decode(fork.Slice(i * BmbtRecord.Size, BmbtRecord.Size)));
        }
        else if (format == FormatBtree)
        {
            CollectBtree(changes.Cache, sb, ino, fork, extents, btreeBlocks);
        }
        ulong freed = 0;
        foreach (var e in extents)
        {
            var (ag, agbno) = Split(sb, e.StartBlock, ino);
            var space = SpaceOf(changes, sb, ag, spaces);
            space.UnmapReverse(agbno, e.BlockCount, ino, e.FileOffset, forkFlag | (e.Unwritten ? RmapRecord.UnwrittenFlag : 0));
            space.FreeExtent(agbno, e.BlockCount);
            freed += e.BlockCount;
        }
        foreach (var fsb in btreeBlocks)
        {
            var (ag, agbno) = Split(sb, fsb, ino);
            var space = SpaceOf(changes, sb, ag, spaces);
            space.UnmapReverse(agbno, 1, ino, 0, forkFlag | RmapRecord.BmbtBlockFlag);
            space.FreeExtent(agbno, 1);
            changes.Invalidate(sb.FsbToByte(fsb), (int)sb.BlockSize);
            freed++;
        }
        return freed;
    }

    /// <summary>Walks an extent btree rooted in the inode: every leaf record, and every block below the root.</summary>
    private static void CollectBtree(BufferCache cache, Superblock sb, ulong ino, ReadOnlySpan<byte> root, List<BmbtRecord> extents, List<ulong> blocks)
    {
        int level = BinaryPrimitives.ReadUInt16BigEndian(root);
        int numrecs = BinaryPrimitives.ReadUInt16BigEndian(root[2..]);
        int rootMax = (root.Length - BmdrBlockView.HeaderSize) / 16;
        if (level < 1 || numrecs < 1 || numrecs > rootMax)
            throw new XfsCorruptionException($"inode {ino}", sb.InodeToByte(ino), $"bad extent btree root (level {level}, {numrecs} entries)");
        var pending = new List<(ulong Fsb, int Level)>();
        for (int i = 0; i < numrecs; i++)
            pending.Add((BinaryPrimitives.ReadUInt64BigEndian(root[(BmdrBlockView.HeaderSize + rootMax * 8 + i * 8)..]), level - 1));
        int bs = (int)sb.BlockSize;
        int nodeMax = (bs - BmbtLongHeader) / 16, leafMax = (bs - BmbtLongHeader) / BmbtRecord.Size;
        var verifier = new BmbtBlockVerifier(sb, ino);
        for (int k = 0; k < pending.Count; k++)
        {
            var (fsb, expect) = pending[k];
            if (!sb.IsValidFsb(fsb) || blocks.Count > 1_000_000)
                throw new XfsCorruptionException($"extent btree of inode {ino}", sb.InodeToByte(ino), $"pointer {fsb} is not a valid block");
            blocks.Add(fsb);
            var block = cache.Read(sb.FsbToByte(fsb), bs, ino, verifier);
            if (BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BtreeBlockView.OffLevel)) != expect)
                throw new XfsCorruptionException($"extent btree block {fsb} of inode {ino}", sb.FsbToByte(fsb), $"level is not {expect}");
            int n = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BtreeBlockView.OffNumrecs));
            if (n > (expect == 0 ? leafMax : nodeMax))
                throw new XfsCorruptionException($"extent btree block {fsb} of inode {ino}", sb.FsbToByte(fsb), "more entries than fit");
            for (int i = 0; i < n; i++)
            {
                if (expect == 0) extents.Add(BmbtRecord.Decode(block.AsSpan(BmbtLongHeader + i * BmbtRecord.Size, BmbtRecord.Size)));
                else pending.Add((BinaryPrimitives.ReadUInt64BigEndian(block.AsSpan(BmbtLongHeader + nodeMax * 8 + i * 8)), expect - 1));
            }
        }
    }

    /// <summary>
    /// Sets the inode's free bit in the inode btree and the free-inode btree and counts it free in
    /// the AGI; when that leaves its whole chunk free, releases the chunk as the kernel does without
    /// the ikeep mount option (records deleted, blocks freed, OWN_INODES mapping removed).
    /// </summary>
    private static void MarkFree(MetadataChangeSet changes, Superblock sb, ulong ino, byte[] agi, AgSpaceEditor space)
    {
        uint ag = sb.InoToAgno(ino), agino = sb.InoToAgino(ino);
        var host = new InodeTreeHost(sb, agi, space);
        var inobt = new AgBtreeEditor(changes, sb, ag, AgBtreeKind.Inodes,
            BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffRoot)), (int)BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffLevel)), host);
        Span<byte> key = stackalloc byte[InobtRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(key, agino);
        var pos = inobt.FindLessOrEqual(key);
        if (pos.LeafIndex < 0) throw new XfsCorruptionException($"inode btree of AG {ag} (AGI)", sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize, $"no record holds inode {ino}");
        var old = inobt.RecordAt(pos);
        var rec = InobtRecord.Decode(old, sb.HasSparseInodes);
        int index = (int)(agino - rec.StartIno);
        if (agino < rec.StartIno || index >= InobtRecord.InodesPerChunk || !rec.IsAllocated(index))
            throw new XfsCorruptionException($"inode btree of AG {ag} (AGI)", sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize, $"inode {ino} is not recorded as in use");
        uint freeCount = rec.FreeCount + 1;
        bool chunkFree = freeCount >= rec.Count;
        var updated = (byte[])old.Clone();
        if (sb.HasSparseInodes) updated[7] = (byte)freeCount;
        else BinaryPrimitives.WriteUInt32BigEndian(updated.AsSpan(4), freeCount);
        BinaryPrimitives.WriteUInt64BigEndian(updated.AsSpan(8), rec.FreeMask | (1UL << index));
        if (chunkFree) inobt.Delete(pos);
        else inobt.Update(pos, updated);

        if (sb.HasFinobt)
        {
            var finobt = new AgBtreeEditor(changes, sb, ag, AgBtreeKind.FreeInodes,
                BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffFreeRoot)), (int)BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffFreeLevel)), host);
            if (rec.FreeCount == 0)
            {
                if (!chunkFree) finobt.Insert(updated);
            }
            else
            {
                BinaryPrimitives.WriteUInt32BigEndian(key, rec.StartIno);
                var at = finobt.FindLessOrEqual(key);
                if (at.LeafIndex < 0 || !finobt.RecordAt(at).AsSpan().SequenceEqual(old))
                    throw new XfsCorruptionException($"free inode btree of AG {ag} (AGI)", sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize, $"it disagrees with the inode btree about chunk {rec.StartIno} (inode {ino})");
                if (chunkFree) finobt.Delete(at);
                else finobt.Update(at, updated);
            }
        }

        if (chunkFree)
        {
            // xfs_difree_inobt: the chunk's inodes leave the counts (the one freed here was never counted free).
            AddToAgi(agi, AgiView.OffCount, -(int)rec.Count);
            AddToAgi(agi, AgiView.OffFreecount, -((int)rec.Count - 1));
            ReleaseChunk(sb, rec, space);
        }
        else
        {
            AddToAgi(agi, AgiView.OffFreecount, 1);
        }
    }

    /// <summary>Frees the blocks of an inode chunk that exist on disk (all of them, or the runs a sparse chunk's hole mask leaves).</summary>
    private static void ReleaseChunk(Superblock sb, InobtRecord rec, AgSpaceEditor space)
    {
        int perBlock = sb.InodesPerBlock;
        uint firstBlock = rec.StartIno >> sb.InoPBlog;
        int run = -1;
        for (int i = 0; i <= InobtRecord.InodesPerChunk; i += 4)
        {
            bool present = i < InobtRecord.InodesPerChunk && (rec.HoleMask & (1 << (i / 4))) == 0;
            if (present && run < 0) run = i;
            if (!present && run >= 0)
            {
                if (run % perBlock != 0 || i % perBlock != 0)
                    throw new XfsException(XfsError.Unsupported, $"inode chunk {rec.StartIno}: its hole mask does not fall on block boundaries");
                uint agbno = firstBlock + (uint)(run / perBlock);
                uint length = (uint)((i - run) / perBlock);
                space.UnmapReverse(agbno, length, RmapRecord.OwnInodes, 0, 0);
                space.FreeExtent(agbno, length);
                run = -1;
            }
        }
    }

    private static void AddToAgi(byte[] agi, int offset, int delta)
    {
        var field = agi.AsSpan(offset);
        BinaryPrimitives.WriteUInt32BigEndian(field, (uint)((int)BinaryPrimitives.ReadUInt32BigEndian(field) + delta));
    }

    /// <summary>The core as xfs_ifree leaves it: no mode, links, size, blocks or forks; a new generation; flags as for a new inode.</summary>
    private static void ClearCore(Span<byte> raw, Superblock sb)
    {
        var b = raw;
        BinaryPrimitives.WriteUInt16BigEndian(b[DinodeView.OffMode..], 0);
        b[DinodeView.OffFormat] = FormatExtents;
        BinaryPrimitives.WriteUInt16BigEndian(b[DinodeView.OffOnlink..], 0);
        BinaryPrimitives.WriteUInt32BigEndian(b[DinodeView.OffNlink..], 0);
        b[DinodeView.OffBigNextents..(DinodeView.OffBigNextents + 8)].Clear();
        BinaryPrimitives.WriteUInt64BigEndian(b[DinodeView.OffSize..], 0);
        BinaryPrimitives.WriteUInt64BigEndian(b[DinodeView.OffNblocks..], 0);
        BinaryPrimitives.WriteUInt32BigEndian(b[DinodeView.OffExtsize..], 0);
        b[DinodeView.OffNextents..(DinodeView.OffAnextents + 2)].Clear();
        b[DinodeView.OffForkoff] = 0;
        b[DinodeView.OffAformat] = FormatExtents;
        BinaryPrimitives.WriteUInt16BigEndian(b[DinodeView.OffFlags..], 0);
        uint gen = BinaryPrimitives.ReadUInt32BigEndian(b[DinodeView.OffGen..]);
        BinaryPrimitives.WriteUInt32BigEndian(b[DinodeView.OffGen..], gen + 1);
        BinaryPrimitives.WriteUInt32BigEndian(b[DinodeView.OffNextUnlinked..], AgiView.NullAgino);
        ulong flags2 = (sb.HasBigtime ? DinodeView.Flag2Bigtime : 0) | (sb.HasNrext64 ? DinodeView.Flag2Nrext64 : 0);
        BinaryPrimitives.WriteUInt64BigEndian(b[DinodeView.OffFlags2..], flags2);
        BinaryPrimitives.WriteUInt32BigEndian(b[DinodeView.OffCowextsize..], 0);
        b[DinodeView.V3CoreSize..].Clear();
        XfsCrc.Stamp(raw, DinodeView.OffCrc);
    }

    /// <summary>
    /// The inode trees take their blocks from free space (not the AGFL), owned by OWN_INOBT in the
    /// reverse map, counted in agi_iblocks/agi_fblocks on inobtcount volumes; their roots live in the AGI.
    /// </summary>
    private sealed class InodeTreeHost(Superblock sb, byte[] agi, AgSpaceEditor space) : IAgBtreeHost
    {
        public uint TakeBlock(AgBtreeKind kind)
        {
            uint bno = space.AllocateBlock(RmapRecord.OwnInobt);
            CountBlocks(kind, +1);
            return bno;
        }

        public void ReleaseBlock(AgBtreeKind kind, uint agbno)
        {
            space.UnmapReverse(agbno, 1, RmapRecord.OwnInobt, 0, 0);
            space.FreeExtent(agbno, 1);
            CountBlocks(kind, -1);
        }

        public void SetRoot(AgBtreeKind kind, uint root, int levels)
        {
            bool inobt = kind == AgBtreeKind.Inodes;
            BinaryPrimitives.WriteUInt32BigEndian(agi.AsSpan(inobt ? AgiView.OffRoot : AgiView.OffFreeRoot), root);
            BinaryPrimitives.WriteUInt32BigEndian(agi.AsSpan(inobt ? AgiView.OffLevel : AgiView.OffFreeLevel), (uint)levels);
        }

        private void CountBlocks(AgBtreeKind kind, int delta)
        {
            if ((sb.RoCompat & SuperblockFeatures.RoCompatInobtCount) != 0)
                AddToAgi(agi, kind == AgBtreeKind.Inodes ? AgiView.OffIblocks : AgiView.OffFblocks, delta);
        }
    }

    private static (uint Ag, uint Agbno) Split(Superblock sb, ulong fsb, ulong ino)
    {
        if (!sb.IsValidFsb(fsb)) throw new XfsCorruptionException($"inode {ino}", sb.InodeToByte(ino), $"it maps block {fsb}, outside the volume");
        return ((uint)(fsb >> sb.AgBlkLog), (uint)(fsb & ((1UL << sb.AgBlkLog) - 1)));
    }

    private static AgSpaceEditor SpaceOf(MetadataChangeSet changes, Superblock sb, uint ag, Dictionary<uint, AgSpaceEditor> spaces)
    {
        if (!spaces.TryGetValue(ag, out var space)) spaces[ag] = space = new AgSpaceEditor(changes, sb, ag);
        return space;
    }
}

using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>Where inode chunks get their blocks and what the inode trees grow by (the block allocator's answer).</summary>
public interface IInodeSpace
{
    /// <summary>
    /// Allocates <paramref name="blocks"/> blocks in AG <paramref name="agno"/> starting on a multiple of
    /// <paramref name="alignment"/>, owned by inodes (OWN_INODES in the reverse map); null when the AG has no such run.
    /// </summary>
    uint? AllocateChunk(Transaction tx, uint agno, uint blocks, uint alignment, uint minAgBlock = 0, uint endAgBlock = uint.MaxValue);

    /// <summary>Blocks for the inode btree (<paramref name="freeInodeTree"/>: the finobt) of AG <paramref name="agno"/>.</summary>
    IBtreeSpace TreeSpace(uint agno, bool freeInodeTree);

    /// <summary>Frees blocks of a released inode chunk (OWN_INODES), as deferred work (an EFI).</summary>
    void FreeChunk(Transaction tx, uint agno, uint agbno, uint blocks);
}

/// <summary>
/// Allocates and frees inodes as the kernel's xfs_ialloc.c does: a free inode is taken from a chunk the free inode
/// btree (finobt) or the inode btree names, its bit cleared in both trees' records, agi_freecount and the superblock's
/// in-core free inode count lowered; when the AG has none, a new chunk of 64 inodes (a sparse chunk where the volume
/// allows and only a smaller aligned run is free) is allocated, its inode clusters written initialised through the log,
/// and recorded in both trees with agi_count, agi_freecount and agi_newino. Freeing sets the bit again; a chunk whose
/// inodes are then all free is released as the kernel does without the ikeep mount option (xfs_difree_inobt,
/// xfs_ifree_cluster, xfs_difree_inode_chunk): its records leave both trees, its inodes the AGI counts, its inode
/// clusters are cancelled in the log, and its blocks (the runs a sparse chunk's hole mask leaves) are freed.
/// <para>
/// Lock order: the caller's inode locks, then the AGI (this class joins it first), then the AGF (inside the block
/// allocator), then tree blocks.
/// </para>
/// </summary>
public sealed class InodeAllocator
{
    private const uint NullAgino = 0xFFFFFFFF;
    private readonly Superblock _sb;
    private readonly IInodeSpace _space;
    private int _directoryRotor;

    private readonly InodeCache _inodes;

    public InodeAllocator(Superblock sb, InodeCache inodes, IInodeSpace space)
    {
        _sb = sb;
        _inodes = inodes;
        _space = space;
    }

    /// <summary>Blocks of one chunk allocation (the kernel's m_ialloc_blks).</summary>
    private uint ChunkBlocks => Math.Max(1u, (uint)(InobtRecord.InodesPerChunk >> _sb.InoPBlog));

    /// <summary>
    /// Inodes one chunk allocation makes (the kernel's m_ialloc_inos): a chunk record's 64, or a whole block when a block
    /// holds more (64 KiB blocks of 512-byte inodes: 128), which then takes a record for each 64 of them.
    /// </summary>
    public static int AllocationInodes(Superblock sb) => Math.Max(InobtRecord.InodesPerChunk, sb.InodesPerBlock);

    /// <summary>The AGI of <paramref name="agno"/>, joined to <paramref name="tx"/>.</summary>
    public static MetadataBuffer JoinAgi(Transaction tx, Superblock sb, uint agno)
    {
        var verifier = new AgiBufferVerifier(sb, agno);
        return tx.Read(AgiOffset(sb, agno), sb.SectorSize, agno, verifier, verifier.ForWrite(), BufType.Agi);
    }

    /// <summary>The byte offset of AG <paramref name="agno"/>'s AGI (its third sector).</summary>
    public static long AgiOffset(Superblock sb, uint agno) => sb.AgBlockToByte(agno, 0) + 2L * sb.SectorSize;

    private static uint Field(MetadataBuffer agi, int offset) => BinaryPrimitives.ReadUInt32BigEndian(agi.Contents.AsSpan(offset));

    private static void SetField(Transaction tx, MetadataBuffer agi, int offset, uint value)
    {
        BinaryPrimitives.WriteUInt32BigEndian(agi.Contents.AsSpan(offset), value);
        tx.LogRange(agi, offset, offset + 3);
    }

    /// <summary>
    /// A free inode for a new file, as the kernel's xfs_dialloc picks its AG: starting at <paramref name="parentIno"/>'s
    /// AG (new directories at the next AG of a rotor, so they spread), the first AG that has a free inode or room for a
    /// new chunk gives it, so a file goes into a new chunk near its directory before it takes a free inode elsewhere.
    /// With <paramref name="lowSpace"/> (less than 1% of the blocks free) a first pass takes free inodes only, sparing
    /// the space a chunk would take, and a second allows new chunks. <see cref="XfsError.NoSpace"/> when no AG has a
    /// free inode or room for a chunk. Returns the inode number; its on-disk slot is free (mode 0) until the caller
    /// logs the new inode.
    /// </summary>
    public (ulong Ino, int NewInodes) Allocate(Transaction tx, ulong parentIno, bool directory, bool lowSpace, Func<uint, bool> agHasSpaceForChunk)
    {
        uint agcount = _sb.AgCount;
        uint start = directory ? (uint)(Interlocked.Increment(ref _directoryRotor) % agcount) : _sb.InoToAgno(parentIno);
        for (int pass = lowSpace ? 0 : 1; pass < 2; pass++)
        {
            for (uint i = 0; i < agcount; i++)
            {
                uint agno = (start + i) % agcount;
                // An AG that gives nothing is let go at once (unless this transaction had joined its AGI already), as
                // the kernel's xfs_dialloc releases the AGI of an AG it passes over: only the AGI it takes from stays locked.
                var existing = tx.Mount.Buffers.Find(AgiOffset(_sb, agno), _sb.SectorSize);
                bool joinedBefore = existing is not null && tx.IsJoined(existing);
                var agi = JoinAgi(tx, _sb, agno);
                if (TryFromFreeInode(tx, agi, agno, out ulong ino)) return (ino, 0);
                if (pass == 1 && agHasSpaceForChunk(agno) && TryNewChunk(tx, agi, agno, out ino, out int count)) return (ino, count);
                if (!joinedBefore) tx.Release(agi);
            }
        }
        throw new XfsException(XfsError.NoSpace, "no free inode is left and no allocation group has room for a new inode chunk");
    }

    private bool TryFromFreeInode(Transaction tx, MetadataBuffer agi, uint agno, out ulong ino)
    {
        ino = 0;
        if (Field(agi, AgiView.OffFreecount) == 0) return false;
        InobtRecord rec;
        if (_sb.HasFinobt)
        {
            var finobt = TransactionBtreeStore.ForAgTree<FinobtOps>(tx, agno, agi, AgiView.OffFreeRoot, AgiView.OffFreeLevel,
                InodeTreeSpace(tx, agi, agno, freeInodeTree: true)).Cursor<FinobtOps>();
            if (!finobt.MoveToFirst() || !finobt.AtRecord)
                throw tx.Mount.Corrupt($"free inode btree of AG {agno}", agi.Offset, "agi_freecount counts free inodes but the finobt is empty");
            rec = InobtRecord.Decode(finobt.Record, _sb.HasSparseInodes);
        }
        else
        {
            bool found = false;
            rec = default;
            var inobt = TransactionBtreeStore.ForAgTree<InobtOps>(tx, agno, agi, AgiView.OffRoot, AgiView.OffLevel,
                InodeTreeSpace(tx, agi, agno, freeInodeTree: false)).Cursor<InobtOps>();
            if (inobt.MoveToFirst())
            {
                do
                {
                    rec = InobtRecord.Decode(inobt.Record, _sb.HasSparseInodes);
                    if (rec.FreeCount > 0) { found = true; break; }
                } while (inobt.Increment());
            }
            if (!found) throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, "agi_freecount counts free inodes but no inobt record has one");
        }
        int index = FirstFree(rec);
        if (index < 0) throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, $"record at inode {rec.StartIno} counts {rec.FreeCount} free inodes but has none");
        var updated = rec with { FreeCount = rec.FreeCount - 1, FreeMask = rec.FreeMask & ~(1UL << index) };
        UpdateRecords(tx, agi, agno, rec, updated);
        SetField(tx, agi, AgiView.OffFreecount, Field(agi, AgiView.OffFreecount) - 1);
        ino = ((ulong)agno << _sb.AgInoLog) | (rec.StartIno + (uint)index);
        return true;
    }

    /// <summary>The lowest free inode of a record that exists on disk (not in a sparse hole), or -1.</summary>
    private static int FirstFree(InobtRecord rec)
    {
        for (int i = 0; i < InobtRecord.InodesPerChunk; i++)
            if ((rec.FreeMask & (1UL << i)) != 0 && (rec.HoleMask & (1 << (i / 4))) == 0) return i;
        return -1;
    }

    /// <summary>Writes <paramref name="updated"/> over <paramref name="old"/> in the inobt, and in the finobt as free counts require.</summary>
    private void UpdateRecords(Transaction tx, MetadataBuffer agi, uint agno, InobtRecord old, InobtRecord updated)
    {
        Span<byte> key = stackalloc byte[InobtRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(key, old.StartIno);
        Span<byte> raw = stackalloc byte[InobtRecord.Size];
        Encode(updated, raw);
        var inobt = TransactionBtreeStore.ForAgTree<InobtOps>(tx, agno, agi, AgiView.OffRoot, AgiView.OffLevel,
            InodeTreeSpace(tx, agi, agno, freeInodeTree: false)).Cursor<InobtOps>();
        if (!inobt.Lookup(key, BtreeLookup.Equal))
            throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, $"no record for the chunk at AG inode {old.StartIno}");
        inobt.Update(raw);
        if (!_sb.HasFinobt) return;
        var finobt = TransactionBtreeStore.ForAgTree<FinobtOps>(tx, agno, agi, AgiView.OffFreeRoot, AgiView.OffFreeLevel,
            InodeTreeSpace(tx, agi, agno, freeInodeTree: true)).Cursor<FinobtOps>();
        bool present = finobt.Lookup(key, BtreeLookup.Equal);
        if (old.FreeCount > 0 && !present)
            throw tx.Mount.Corrupt($"free inode btree of AG {agno}", agi.Offset, $"the chunk at AG inode {old.StartIno} has free inodes but no finobt record");
        if (updated.FreeCount == 0)
        {
            if (present) finobt.Delete();
        }
        else if (present)
        {
            finobt.Update(raw);
        }
        else if (!finobt.Insert(raw))
        {
            throw new InvalidOperationException($"finobt of AG {agno}: record {updated.StartIno} inserted twice");
        }
    }

    private void Encode(InobtRecord rec, Span<byte> raw)
    {
        if (_sb.HasSparseInodes) rec.EncodeSparse(raw);
        else rec.EncodeFull(raw);
    }

    /// <summary>
    /// A new chunk in AG <paramref name="agno"/>: a full aligned chunk when one fits, else (sparse inodes) the largest
    /// sparse-aligned part of one. Its inodes are written initialised (free), the records inserted, the AGI counted;
    /// the first inode of the chunk is returned allocated.
    /// </summary>
    private bool TryNewChunk(Transaction tx, MetadataBuffer agi, uint agno, out ulong ino, out int inodes)
    {
        ino = 0;
        inodes = 0;
        uint chunkBlocks = ChunkBlocks;
        uint align = Math.Max(1u, _sb.InodeAlignment);
        uint? agbno = _space.AllocateChunk(tx, agno, chunkBlocks, align);
        ushort holeMask = 0;
        byte count = InobtRecord.InodesPerChunk;
        if (agbno is null && _sb.HasSparseInodes && _sb.SparseInodeAlignment > 0)
        {
            // A sparse chunk: the smallest allocation (sparse alignment) placed where a full chunk would align.
            uint sparseBlocks = _sb.SparseInodeAlignment;
            // The whole chunk the part belongs to stays inside the AG, past its first aligned chunk (xfs_ialloc_ag_alloc's
            // min_agbno and max_agbno).
            uint agBlocks = agno == _sb.AgCount - 1 ? (uint)(_sb.DataBlocks - (ulong)agno * _sb.AgBlocks) : _sb.AgBlocks;
            agbno = _space.AllocateChunk(tx, agno, sparseBlocks, _sb.SparseInodeAlignment, minAgBlock: align, endAgBlock: agBlocks / align * align);
            if (agbno is null) return false;
            uint chunkStart = agbno.Value / align * align;
            int firstInode = (int)((agbno.Value - chunkStart) << _sb.InoPBlog);
            int sparseInodes = (int)(sparseBlocks << _sb.InoPBlog);
            holeMask = 0xFFFF;
            for (int i = firstInode; i < firstInode + sparseInodes; i += 4) holeMask &= (ushort)~(1 << (i / 4));
            count = (byte)sparseInodes;
            InitialiseInodes(tx, agno, agbno.Value, sparseBlocks);
            inodes = count;
            ino = InsertChunk(tx, agi, agno, (uint)(chunkStart << _sb.InoPBlog), holeMask, count, firstInode);
            return true;
        }
        if (agbno is null) return false;
        InitialiseInodes(tx, agno, agbno.Value, chunkBlocks);
        uint startAgino = agbno.Value << _sb.InoPBlog;
        int total = AllocationInodes(_sb);
        inodes = total;
        ino = InsertChunk(tx, agi, agno, startAgino, holeMask, count, 0);
        // A block holding more than one record's inodes: a record, all free, for each further 64 (as xfs_ialloc_ag_alloc
        // inserts one per 64 inodes of the allocation).
        for (int next = InobtRecord.InodesPerChunk; next < total; next += InobtRecord.InodesPerChunk)
            InsertChunk(tx, agi, agno, startAgino + (uint)next, holeMask, count, firstIndex: -1);
        return true;
    }

    /// <summary>
    /// Records a new chunk at <paramref name="startAgino"/> in the inobt and finobt and counts its inodes in the AGI. The
    /// inode at <paramref name="firstIndex"/> is returned allocated (the AGI's newino points at the chunk); -1 leaves every
    /// inode free (a further record of the same allocation). Holes of a sparse chunk are marked free in ir_free, as the
    /// kernel keeps them. A sparse allocation into a chunk whose record another sparse allocation began is merged into that
    /// record (xfs_inobt_insert_sprec): holes where both have them, counts and free masks combined.
    /// </summary>
    private ulong InsertChunk(Transaction tx, MetadataBuffer agi, uint agno, uint startAgino, ushort holeMask, byte count, int firstIndex)
    {
        ulong free = ulong.MaxValue;
        uint used = firstIndex >= 0 ? 1u : 0u;
        if (firstIndex >= 0) free &= ~(1UL << firstIndex);
        var rec = new InobtRecord(startAgino, holeMask, count, count - used, free);
        if (!_sb.HasSparseInodes) rec = rec with { Count = InobtRecord.InodesPerChunk };
        Span<byte> key = stackalloc byte[InobtRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(key, startAgino);
        Span<byte> raw = stackalloc byte[InobtRecord.Size];
        var inobt = TransactionBtreeStore.ForAgTree<InobtOps>(tx, agno, agi, AgiView.OffRoot, AgiView.OffLevel,
            InodeTreeSpace(tx, agi, agno, freeInodeTree: false)).Cursor<InobtOps>();
        bool merged = false;
        if (inobt.Lookup(key, BtreeLookup.Equal))
        {
            var old = InobtRecord.Decode(inobt.Record, _sb.HasSparseInodes);
            // Only a sparse part that lands wholly in the existing record's holes can join it.
            ushort allocated = (ushort)~holeMask;
            if (!_sb.HasSparseInodes || holeMask == 0 || (allocated & ~old.HoleMask) != 0)
                throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, $"a record for the new chunk at AG inode {startAgino} exists already");
            rec = new InobtRecord(startAgino, (ushort)(old.HoleMask & holeMask), (byte)(old.Count + count), old.FreeCount + rec.FreeCount, old.FreeMask & rec.FreeMask);
            Encode(rec, raw);
            inobt.Update(raw);
            merged = true;
        }
        else
        {
            Encode(rec, raw);
            if (!inobt.Insert(raw))
                throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, $"a record for the new chunk at AG inode {startAgino} exists already");
        }
        if (_sb.HasFinobt && rec.FreeCount > 0)
        {
            var finobt = TransactionBtreeStore.ForAgTree<FinobtOps>(tx, agno, agi, AgiView.OffFreeRoot, AgiView.OffFreeLevel,
                InodeTreeSpace(tx, agi, agno, freeInodeTree: true)).Cursor<FinobtOps>();
            if (merged && finobt.Lookup(key, BtreeLookup.Equal)) finobt.Update(raw);
            else if (!finobt.Insert(raw))
                throw tx.Mount.Corrupt($"free inode btree of AG {agno}", agi.Offset, $"a record for the new chunk at AG inode {startAgino} exists already");
        }
        SetField(tx, agi, AgiView.OffCount, Field(agi, AgiView.OffCount) + count);
        SetField(tx, agi, AgiView.OffFreecount, Field(agi, AgiView.OffFreecount) + count - used);
        if (firstIndex < 0) return 0;
        SetField(tx, agi, AgiView.OffNewino, startAgino);
        return ((ulong)agno << _sb.AgInoLog) | (startAgino + (uint)firstIndex);
    }

    /// <summary>
    /// A new chunk's inodes, free and initialised (magic, version, number, UUID, the chunk's generation, CRC), in the
    /// cluster buffers readers use, and logged as the kernel logs them on V5: one icreate item standing for the
    /// clusters, which are not logged themselves; recovery and the AIL's writeback both write the same initialised
    /// chunk from it. V4 (no icreate in the format) logs the clusters as buffer ranges.
    /// </summary>
    private void InitialiseInodes(Transaction tx, uint agno, uint agbno, uint blocks)
    {
        uint generation = (uint)Random.Shared.Next();
        bool icreate = _sb.IsV5;
        foreach (var (buffer, offset, firstBlock, count) in _inodes.NewChunkClusters(tx, agno, agbno, blocks, logged: !icreate))
        {
            var bytes = buffer.Contents;
            for (uint b = 0; b < count; b++)
            {
                int at = offset + (int)(b << _sb.BlockLog);
                for (int i = 0; i < (int)_sb.BlockSize; i += _sb.InodeSize)
                {
                    ulong ino = ((ulong)agno << _sb.AgInoLog) | (((firstBlock + b) << _sb.InoPBlog) + (uint)(i / _sb.InodeSize));
                    IcreateLogItem.InitialiseInode(bytes.AsSpan(at + i, _sb.InodeSize), _sb, ino, generation);
                }
            }
            // Published at commit; logged as a buffer range only without icreate.
            tx.LogRange(buffer, offset, offset + (int)(count << _sb.BlockLog) - 1);
        }
        if (icreate) tx.Log(IcreateLogItem.Create(_sb, agno, agbno, blocks, generation));
    }

    /// <summary>
    /// Frees <paramref name="ino"/> in the trees and the AGI (the caller has logged its inode free: mode 0, forks empty).
    /// Returns how many inodes left the AG's count: 0, or the chunk's count when the chunk was released.
    /// </summary>
    public int Free(Transaction tx, ulong ino)
    {
        uint agno = _sb.InoToAgno(ino);
        uint agino = _sb.InoToAgino(ino);
        var agi = JoinAgi(tx, _sb, agno);
        var inobt = TransactionBtreeStore.ForAgTree<InobtOps>(tx, agno, agi, AgiView.OffRoot, AgiView.OffLevel,
            InodeTreeSpace(tx, agi, agno, freeInodeTree: false)).Cursor<InobtOps>();
        Span<byte> key = stackalloc byte[InobtRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(key, agino);
        if (!inobt.Lookup(key, BtreeLookup.LessOrEqual))
            throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, $"no chunk holds inode {ino}");
        var rec = InobtRecord.Decode(inobt.Record, _sb.HasSparseInodes);
        int index = (int)(agino - rec.StartIno);
        if (agino < rec.StartIno || index >= InobtRecord.InodesPerChunk || !rec.IsAllocated(index))
            throw tx.Mount.Corrupt($"inode btree of AG {agno}", agi.Offset, $"inode {ino} is not allocated in its chunk record");
        var updated = rec with { FreeCount = rec.FreeCount + 1, FreeMask = rec.FreeMask | (1UL << index) };
        // Holes count as free in ir_free: a chunk all of whose inodes are free goes, unless blocks hold more than a chunk.
        if (updated.FreeMask != ulong.MaxValue || _sb.InodesPerBlock > InobtRecord.InodesPerChunk)
        {
            UpdateRecords(tx, agi, agno, rec, updated);
            SetField(tx, agi, AgiView.OffFreecount, Field(agi, AgiView.OffFreecount) + 1);
            return 0;
        }
        inobt.Delete();
        if (_sb.HasFinobt && rec.FreeCount > 0)
        {
            var finobt = TransactionBtreeStore.ForAgTree<FinobtOps>(tx, agno, agi, AgiView.OffFreeRoot, AgiView.OffFreeLevel,
                InodeTreeSpace(tx, agi, agno, freeInodeTree: true)).Cursor<FinobtOps>();
            BinaryPrimitives.WriteUInt32BigEndian(key, rec.StartIno);
            if (!finobt.Lookup(key, BtreeLookup.Equal))
                throw tx.Mount.Corrupt($"free inode btree of AG {agno}", agi.Offset, $"the chunk at AG inode {rec.StartIno} has free inodes but no finobt record");
            finobt.Delete();
        }
        // The inode freed here was never counted free; the chunk's others were.
        SetField(tx, agi, AgiView.OffCount, Field(agi, AgiView.OffCount) - rec.Count);
        SetField(tx, agi, AgiView.OffFreecount, Field(agi, AgiView.OffFreecount) - (rec.Count - 1u));
        ReleaseChunk(tx, agno, rec);
        return rec.Count;
    }

    /// <summary>
    /// The blocks of a released chunk that exist on disk (all, or each run its hole mask leaves; a hole-mask bit covers
    /// four inodes, so a run starts and ends where the kernel's xfs_difree_inode_chunk computes it): their inode
    /// clusters cancelled in the log, our cached buffers over them invalidated, the blocks freed.
    /// </summary>
    private void ReleaseChunk(Transaction tx, uint agno, InobtRecord rec)
    {
        uint chunkStart = rec.StartIno >> _sb.InoPBlog;
        int perBlock = _sb.InodesPerBlock;
        const int InodesPerHoleBit = 4, HoleBits = 16;
        int bit = 0;
        while (bit < HoleBits)
        {
            if ((rec.HoleMask & (1 << bit)) != 0) { bit++; continue; }
            int end = bit;
            while (end < HoleBits && (rec.HoleMask & (1 << end)) == 0) end++;
            uint agbno = chunkStart + (uint)(bit * InodesPerHoleBit / perBlock);
            uint blocks = (uint)((end - bit) * InodesPerHoleBit / perBlock);
            if (blocks == 0) blocks = 1; // a run shorter than a block (more inodes per block than a hole bit covers)
            long previousCluster = -1;
            for (int i = bit * InodesPerHoleBit; i < end * InodesPerHoleBit; i++)
            {
                var cluster = InodeClusterLocation.Of(_sb, ((ulong)agno << _sb.AgInoLog) | (rec.StartIno + (uint)i));
                if (cluster.Daddr == previousCluster) continue;
                tx.LogCancel(cluster.Daddr, cluster.LengthBB);
                previousCluster = cluster.Daddr;
            }
            _inodes.ChunkReleased(tx, agno, agbno, blocks);
            _space.FreeChunk(tx, agno, agbno, blocks);
            bit = end;
        }
    }

    /// <summary>The inode tree's block space (the allocator keeps agi_iblocks / agi_fblocks where the volume counts them).</summary>
    private IBtreeSpace InodeTreeSpace(Transaction tx, MetadataBuffer agi, uint agno, bool freeInodeTree) => _space.TreeSpace(agno, freeInodeTree);
}

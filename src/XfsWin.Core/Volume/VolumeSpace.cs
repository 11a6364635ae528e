using XfsWin.Allocation;
using XfsWin.Btree;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

/// <summary>
/// The block allocator as the file, directory and inode layers ask for it: file data and directory blocks near the
/// inode (or where a file's last extent ends), inode chunks, tree blocks. AGFs are locked in ascending AG order within
/// a transaction part, so an allocation never targets an AG below the highest one the part holds. What follows a
/// mapping change is deferred work, as the kernel's xfs_bmap.c queues it: reverse mappings of file extents as rmap
/// intents (RUI), frees as extent-free intents (EFI, in ascending AG order), shared blocks of reflinked files as
/// refcount decreases (CUI); extent-btree blocks keep their reverse mapping inline and are freed through EFIs.
/// </summary>
internal sealed class VolumeSpace(AgAllocator allocator, Superblock sb, FileDataCache data) : IFileSpace, IInodeSpace
{
    public AgAllocator Allocator => allocator;

    /// <summary>A target no lower than the highest AG the transaction has locked.</summary>
    private ulong Target(Transaction tx, ulong near)
    {
        ulong target = near != 0 && sb.IsValidFsb(near) ? near : allocator.RotorTarget;
        int highest = allocator.HighestAgLocked(tx);
        if (highest >= 0 && (uint)(target >> sb.AgBlkLog) < (uint)highest) target = (ulong)(uint)highest << sb.AgBlkLog;
        return target;
    }

    public (ulong Fsb, uint Blocks) Allocate(Transaction tx, ulong ino, ulong fileBlock, ulong nearFsb, uint minBlocks, uint maxBlocks,
        ForkKind fork = ForkKind.Data, bool unwritten = false)
    {
        ulong near = nearFsb != 0 ? nearFsb : InodeBlock(ino);
        var owner = RmapOwner.InodeData(ino, fileBlock, attrFork: fork == ForkKind.Attr, unwritten: unwritten);
        var got = allocator.Allocate(tx, new AllocationRequest
        {
            Target = Target(tx, near),
            MinLength = minBlocks,
            MaxLength = maxBlocks,
            Mode = AllocationMode.Near,
            Scope = AllocationScope.StartAg,
            // The file extent's reverse mapping comes through an rmap intent (XFS_RMAP_OINFO_SKIP_UPDATE).
            Owner = RmapOwner.Null,
            // Room for the extent btree to grow by a split at every level in the same AG.
            MinLeft = 8,
        });
        if (sb.HasRmapbt)
            tx.Defer(allocator.RmapUpdates, new RmapUpdate(RmapUpdateKind.Map, got.StartBlock, got.Length, owner));
        return (got.StartBlock, got.Length);
    }

    /// <summary>
    /// Copy-on-write staging blocks for <paramref name="ino"/> (xfs_bmapi_write on the CoW fork): between
    /// <paramref name="minBlocks"/> and <paramref name="maxBlocks"/> contiguous blocks near <paramref name="nearFsb"/>,
    /// recorded as a staging extent in the refcount btree's CoW domain with an OWN_COW reverse mapping
    /// (xfs_refcount_alloc_cow_extent, deferred work), so that a crash before they are remapped into the file leaves
    /// them to the next mount's recovery to free. Null when no extent that long is free (the transaction changed
    /// nothing it cannot commit or cancel).
    /// </summary>
    public (ulong Fsb, uint Blocks)? TryAllocateCow(Transaction tx, ulong ino, ulong nearFsb, uint minBlocks, uint maxBlocks)
    {
        if (allocator.TryAllocate(tx, new AllocationRequest
        {
            Target = Target(tx, nearFsb != 0 ? nearFsb : InodeBlock(ino)),
            MinLength = minBlocks,
            MaxLength = maxBlocks,
            Mode = AllocationMode.Near,
            Scope = AllocationScope.StartAg,
            Owner = RmapOwner.Null,
            MinLeft = 8,
        }) is not { } got) return null;
        tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.AllocCow, got.StartBlock, got.Length));
        if (sb.HasRmapbt)
            tx.Defer(allocator.RmapUpdates, new RmapUpdate(RmapUpdateKind.Alloc, got.StartBlock, got.Length, RmapOwner.Cow));
        return (got.StartBlock, got.Length);
    }

    /// <summary>The file system block of the inode itself (where its data goes first).</summary>
    private ulong InodeBlock(ulong ino) =>
        ((ulong)sb.InoToAgno(ino) << sb.AgBlkLog) | (sb.InoToAgino(ino) >> sb.InoPBlog);

    private static RmapOwner OwnerOf(ulong ino, BmbtRecord extent, ForkKind fork) =>
        RmapOwner.InodeData(ino, extent.FileOffset, attrFork: fork == ForkKind.Attr, unwritten: extent.Unwritten);

    public void Free(Transaction tx, ulong ino, BmbtRecord extent, ForkKind fork = ForkKind.Data, bool shared = false)
    {
        // File data still held for blocks no file uses any more is dropped once the change that unmapped them commits
        // (shared blocks keep theirs: another file maps them).
        if (fork == ForkKind.Data && !shared)
            tx.OnCommit(() => data.Discard(sb.FsbToByte(extent.StartBlock), (long)extent.BlockCount << sb.BlockLog));
        if (sb.HasRmapbt)
            tx.Defer(allocator.RmapUpdates, new RmapUpdate(shared ? RmapUpdateKind.UnmapShared : RmapUpdateKind.Unmap,
                extent.StartBlock, extent.BlockCount, OwnerOf(ino, extent, fork)));
        if (shared)
            tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.Decrease, extent.StartBlock, extent.BlockCount));
        else
            tx.Defer(allocator.ExtentFrees, new ExtentToFree(extent.StartBlock, extent.BlockCount, RmapOwner.Null));
    }

    public void Remapped(Transaction tx, ulong ino, BmbtRecord extent, ForkKind fork, bool mapped, bool shared)
    {
        if (!sb.HasRmapbt) return;
        var kind = (mapped, shared) switch
        {
            (true, false) => RmapUpdateKind.Map, (true, true) => RmapUpdateKind.MapShared,
            (false, false) => RmapUpdateKind.Unmap, _ => RmapUpdateKind.UnmapShared,
        };
        tx.Defer(allocator.RmapUpdates, new RmapUpdate(kind, extent.StartBlock, extent.BlockCount, OwnerOf(ino, extent, fork)));
    }

    public void Converted(Transaction tx, ulong ino, BmbtRecord extent, ForkKind fork, bool shared)
    {
        if (!sb.HasRmapbt) return;
        tx.Defer(allocator.RmapUpdates, new RmapUpdate(shared ? RmapUpdateKind.ConvertShared : RmapUpdateKind.Convert,
            extent.StartBlock, extent.BlockCount, OwnerOf(ino, extent, fork)));
    }

    public IBtreeSpace BtreeSpace(ulong ino, ForkKind fork = ForkKind.Data) => new FileTreeSpace(this, ino, fork == ForkKind.Attr);

    /// <summary>A file's bmbt blocks: allocated near the asker (never below a locked AG) with their reverse mapping, freed through an EFI.</summary>
    private sealed class FileTreeSpace(VolumeSpace space, ulong ino, bool attrFork) : IBtreeSpace
    {
        public ulong Allocate(Transaction tx, ulong near)
        {
            var got = space.Allocator.Allocate(tx, new AllocationRequest
            {
                Target = space.Target(tx, near != 0 ? near : space.InodeBlock(ino)),
                MinLength = 1,
                MaxLength = 1,
                Mode = AllocationMode.Near,
                Scope = AllocationScope.StartAg,
                Owner = RmapOwner.InodeBmbt(ino, attrFork),
            });
            return got.StartBlock;
        }

        public void Free(Transaction tx, ulong pointer) =>
            tx.Defer(space.Allocator.ExtentFrees, new ExtentToFree(pointer, 1, RmapOwner.InodeBmbt(ino, attrFork)));
    }

    public uint? AllocateChunk(Transaction tx, uint agno, uint blocks, uint alignment, uint minAgBlock = 0, uint endAgBlock = uint.MaxValue)
    {
        int highest = allocator.HighestAgLocked(tx);
        if (highest > (int)agno) return null;
        var got = allocator.TryAllocate(tx, new AllocationRequest
        {
            Target = (ulong)agno << sb.AgBlkLog,
            MinLength = blocks,
            MaxLength = blocks,
            Alignment = Math.Max(1, alignment),
            Mode = AllocationMode.Near,
            Scope = AllocationScope.ThisAg,
            Owner = RmapOwner.Inodes,
            MinLeft = 4,
            MinAgBlock = minAgBlock,
            EndAgBlock = endAgBlock,
        });
        return got?.AgBlock;
    }

    public void FreeChunk(Transaction tx, uint agno, uint agbno, uint blocks) =>
        tx.Defer(allocator.ExtentFrees, new ExtentToFree(((ulong)agno << sb.AgBlkLog) | agbno, blocks, RmapOwner.Inodes));

    public IBtreeSpace TreeSpace(uint agno, bool freeInodeTree) => allocator.TreeSpace(freeInodeTree ? AgTree.Finobt : AgTree.Inobt, agno);

    /// <summary>Whether AG <paramref name="agno"/> may hold a new inode chunk (its longest free extent fits one, with room to spare).</summary>
    public bool HasRoomForChunk(uint agno)
    {
        uint chunkBlocks = Math.Max(1u, (uint)(InobtRecord.InodesPerChunk >> sb.InoPBlog));
        uint need = sb.HasSparseInodes && sb.SparseInodeAlignment > 0 ? sb.SparseInodeAlignment : chunkBlocks + Math.Max(1, sb.InodeAlignment) - 1;
        return allocator.AgInfo(agno).Longest >= need;
    }

    /// <summary>The directory layer's view: blocks of one directory inode, through its extent map.</summary>
    public IDirectorySpace ForDirectory(Transaction tx, InodeUpdate directory) => new DirectorySpace(this, tx, directory);

    private sealed class DirectorySpace(VolumeSpace space, Transaction transaction, InodeUpdate directory) : IDirectorySpace
    {
        // One mapping editor for the directory's allocations and frees while its fork keeps the form, extent count and
        // fork offset it was loaded with (the editor's own changes keep them in step): an operation that adds or frees
        // several blocks loads the mapping once.
        private ExtentMapEditor? _editor;
        private (ForkFormat Format, ulong Extents, byte ForkOffset) _editorOf;

        private ExtentMapEditor? Editor(Transaction? tx, DirectoryInodeImage dir)
        {
            if (!ReferenceEquals(dir.Image, directory.Image))
                throw new InvalidOperationException($"directory space of inode {directory.Number} asked about inode {dir.Number}");
            if (dir.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree) || tx is null) return null;
            if (!ReferenceEquals(tx, _tx)) return new ExtentMapEditor(tx, directory, space);
            var of = Shape(dir);
            if (_editor is null || of != _editorOf)
            {
                _editor = new ExtentMapEditor(tx, directory, space);
                _editorOf = of;
            }
            return _editor;
        }

        private static (ForkFormat, ulong, byte) Shape(DirectoryInodeImage dir) => (dir.DataFormat, dir.DataExtentCount, dir.Image[DinodeView.OffForkoff]);

        private readonly Transaction _tx = transaction;

        // Questions about the mapping (where a block is, where the mapping ends, the first hole) are answered from the
        // fork as the transaction sees it: the extent list in the inode image, or lookups in the bmbt through the
        // transaction's buffers. Only allocating or freeing loads the whole mapping into an editor: a directory of
        // many extents has a bmbt, and loading it for every entry added or removed decoded every record each time.
        // Allocate and Free save at once, so what a later question reads already holds their change.

        public long Map(DirectoryInodeImage dir, ulong fileBlock)
        {
            if (!TryLastAtOrBefore(dir, fileBlock, out var e) || fileBlock >= e.FileEnd) return -1;
            return space.sbFsbToByte(e.StartBlock + (fileBlock - e.FileOffset));
        }

        public ulong FirstUnused(DirectoryInodeImage dir, ulong from, int count)
        {
            ulong candidate = from;
            var walk = Walk(dir, from);
            while (walk.Next(out var e))
            {
                if (e.FileEnd <= candidate) continue;
                if (e.FileOffset >= candidate + (ulong)count) break;
                candidate = e.FileEnd;
            }
            return candidate;
        }

        public ulong LastBefore(DirectoryInodeImage dir, ulong fileBlock) =>
            fileBlock != 0 && TryLastAtOrBefore(dir, fileBlock - 1, out var e) ? Math.Min(e.FileEnd, fileBlock) : 0;

        public ulong LastOffset(DirectoryInodeImage dir) =>
            TryLastAtOrBefore(dir, ulong.MaxValue, out var e) ? e.FileEnd : 0;

        /// <summary>The last extent starting at or before <paramref name="fileBlock"/>; false when there is none.</summary>
        private bool TryLastAtOrBefore(DirectoryInodeImage dir, ulong fileBlock, out BmbtRecord extent)
        {
            extent = default;
            switch (Mapped(dir))
            {
                case ForkFormat.Extents:
                    var fork = dir.DataFork;
                    int lo = 0, hi = (int)dir.DataExtentCount - 1, found = -1;
                    while (lo <= hi)
                    {
                        int mid = (lo + hi) >>> 1;
                        if (BmbtRecord.Decode(fork[(mid * BmbtRecord.Size)..]).FileOffset <= fileBlock) { found = mid; lo = mid + 1; }
                        else hi = mid - 1;
                    }
                    if (found < 0) return false;
                    extent = Checked(BmbtRecord.Decode(fork[(found * BmbtRecord.Size)..]), directory.ByteOffset);
                    return true;
                case ForkFormat.Btree:
                    var cursor = QueryCursor();
                    Span<byte> key = stackalloc byte[8];
                    System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(key, fileBlock);
                    if (!cursor.Lookup(key, BtreeLookup.LessOrEqual)) return false;
                    extent = Checked(BmbtRecord.Decode(cursor.Record), cursor.RecordBlockOffset);
                    return true;
                default:
                    return false;
            }
        }

        /// <summary>The extents in file order from the one holding or following <paramref name="fileBlock"/> (or the one before it).</summary>
        private MappingWalk Walk(DirectoryInodeImage dir, ulong fileBlock)
        {
            switch (Mapped(dir))
            {
                case ForkFormat.Extents:
                    return new MappingWalk(this, dir, null, 0);
                case ForkFormat.Btree:
                    var cursor = QueryCursor();
                    Span<byte> key = stackalloc byte[8];
                    System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(key, fileBlock);
                    bool any = cursor.Lookup(key, BtreeLookup.LessOrEqual) || cursor.MoveToFirst();
                    return new MappingWalk(this, dir, any ? cursor : null, any ? 0 : -1);
                default:
                    return new MappingWalk(this, dir, null, -1);
            }
        }

        private struct MappingWalk(DirectorySpace owner, DirectoryInodeImage dir, BtreeCursor<BmbtOps>? cursor, int next)
        {
            private ulong _end;

            public bool Next(out BmbtRecord extent)
            {
                extent = default;
                if (next < 0) return false;
                long where;
                if (cursor is null)
                {
                    if ((ulong)next >= dir.DataExtentCount) return false;
                    extent = BmbtRecord.Decode(dir.DataFork[(next * BmbtRecord.Size)..]);
                    where = owner.DirectoryByteOffset;
                    next++;
                }
                else
                {
                    if (next > 0 && !cursor.Increment()) { next = -1; return false; }
                    extent = BmbtRecord.Decode(cursor.Record);
                    where = cursor.RecordBlockOffset;
                    next = 1;
                }
                owner.Checked(extent, where);
                if (extent.FileOffset < _end) throw owner.Corrupt(where, $"the extent at file block {extent.FileOffset} overlaps the one before it");
                _end = extent.FileEnd;
                return true;
            }
        }

        /// <summary>The directory's data fork format when it maps blocks (checked against the fork's room); Local otherwise.</summary>
        private ForkFormat Mapped(DirectoryInodeImage dir)
        {
            if (!ReferenceEquals(dir.Image, directory.Image))
                throw new InvalidOperationException($"directory space of inode {directory.Number} asked about inode {dir.Number}");
            var format = dir.DataFormat;
            if (format == ForkFormat.Extents && dir.DataExtentCount > (ulong)(dir.DataForkSize / BmbtRecord.Size))
                throw Corrupt(directory.ByteOffset, $"{dir.DataExtentCount} extents in a fork with room for {dir.DataForkSize / BmbtRecord.Size}");
            return format is ForkFormat.Extents or ForkFormat.Btree ? format : ForkFormat.Local;
        }

        private long DirectoryByteOffset => directory.ByteOffset;

        // Each question descends anew (the bmbt may have changed since the last one).
        private BtreeCursor<BmbtOps> QueryCursor() =>
            TransactionBtreeStore.ForInodeRootLookups<BmbtOps>(_tx, directory.Number, directory, directory.ByteOffset).Cursor<BmbtOps>();

        private BmbtRecord Checked(in BmbtRecord e, long where)
        {
            if (!space.Sb.IsValidExtent(e.StartBlock, e.BlockCount))
                throw Corrupt(where, $"extent at file block {e.FileOffset} ({e.BlockCount} blocks at {e.StartBlock}) is empty or outside the volume");
            return e;
        }

        private XfsCorruptionException Corrupt(long where, string problem) =>
            _tx.Mount.Corrupt($"data fork of directory inode {directory.Number}", where, problem);

        public long Allocate(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count)
        {
            var editor = Editor(tx, dir) ?? throw new InvalidOperationException($"directory {dir.Number}: blocks asked for while its fork is {dir.DataFormat}");
            var near = editor.ContinuationHint(fileBlock);
            var (fsb, got) = space.Allocate(tx, dir.Number, fileBlock, near, (uint)count, (uint)count);
            editor.AddMapped(new BmbtRecord(fileBlock, fsb, got, false));
            editor.Save();
            if (ReferenceEquals(editor, _editor)) _editorOf = Shape(dir);
            return space.sbFsbToByte(fsb);
        }

        public void Free(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count)
        {
            var editor = Editor(tx, dir) ?? throw new InvalidOperationException($"directory {dir.Number}: blocks freed while its fork is {dir.DataFormat}");
            editor.Unmap(fileBlock, (ulong)count);
            editor.Save();
            if (ReferenceEquals(editor, _editor)) _editorOf = Shape(dir);
        }
    }

    private long sbFsbToByte(ulong fsb) => sb.FsbToByte(fsb);

    private Superblock Sb => sb;
}

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
/// inode (or where a file's last extent ends), inode chunks, tree blocks. Two rules of the allocator are kept here:
/// AGFs are locked in ascending AG order within a transaction, so an allocation never targets an AG below the highest
/// one the transaction holds; and frees are deferred to the end of the transaction and done in ascending AG order
/// (the kernel defers them as EFIs for the same reason).
/// </summary>
internal sealed class VolumeSpace(AgAllocator allocator, Superblock sb, FileDataCache data) : IFileSpace, IInodeSpace
{
    private readonly Dictionary<Transaction, List<(ulong Fsb, uint Blocks, RmapOwner Owner)>> _deferred = new();

    public AgAllocator Allocator => allocator;

    /// <summary>A target no lower than the highest AG the transaction has locked.</summary>
    private ulong Target(Transaction tx, ulong near)
    {
        ulong target = near != 0 && sb.IsValidFsb(near) ? near : allocator.RotorTarget;
        int highest = allocator.HighestAgLocked(tx);
        if (highest >= 0 && (uint)(target >> sb.AgBlkLog) < (uint)highest) target = (ulong)(uint)highest << sb.AgBlkLog;
        return target;
    }

    public (ulong Fsb, uint Blocks) Allocate(Transaction tx, ulong ino, ulong fileBlock, ulong nearFsb, uint minBlocks, uint maxBlocks, ForkKind fork = ForkKind.Data)
    {
        ulong near = nearFsb != 0 ? nearFsb : InodeBlock(ino);
        var got = allocator.Allocate(tx, new AllocationRequest
        {
            Target = Target(tx, near),
            MinLength = minBlocks,
            MaxLength = maxBlocks,
            Mode = AllocationMode.Near,
            Scope = AllocationScope.StartAg,
            Owner = RmapOwner.InodeData(ino, fileBlock, attrFork: fork == ForkKind.Attr),
            // Room for the extent btree to grow by a split at every level in the same AG.
            MinLeft = 8,
        });
        return (got.StartBlock, got.Length);
    }

    /// <summary>The file system block of the inode itself (where its data goes first).</summary>
    private ulong InodeBlock(ulong ino) =>
        ((ulong)sb.InoToAgno(ino) << sb.AgBlkLog) | (sb.InoToAgino(ino) >> sb.InoPBlog);

    public void Free(Transaction tx, ulong ino, ulong fileBlock, ulong fsb, uint blocks, ForkKind fork = ForkKind.Data)
    {
        // File data still held for these blocks is dropped once the change that unmapped them commits.
        if (fork == ForkKind.Data) tx.OnCommit(() => data.Discard(sb.FsbToByte(fsb), (long)blocks << sb.BlockLog));
        Defer(tx, fsb, blocks, RmapOwner.InodeData(ino, fileBlock, attrFork: fork == ForkKind.Attr));
    }

    private void Defer(Transaction tx, ulong fsb, uint blocks, RmapOwner owner)
    {
        lock (_deferred)
        {
            if (!_deferred.TryGetValue(tx, out var list))
            {
                _deferred[tx] = list = new();
                tx.OnPrecommit(() => FreeDeferred(tx));
                tx.OnCancel(() => { lock (_deferred) _deferred.Remove(tx); });
            }
            list.Add((fsb, blocks, owner));
        }
    }

    private void FreeDeferred(Transaction tx)
    {
        List<(ulong Fsb, uint Blocks, RmapOwner Owner)> list;
        lock (_deferred)
        {
            if (!_deferred.Remove(tx, out list!)) return;
        }
        foreach (var (fsb, blocks, owner) in list.OrderBy(f => f.Fsb))
            allocator.Free(tx, fsb, blocks, owner);
    }

    public void FreePending(Transaction tx) => FreeDeferred(tx);

    public IBtreeSpace BtreeSpace(ulong ino, ForkKind fork = ForkKind.Data) => new FileTreeSpace(this, ino, fork == ForkKind.Attr);

    /// <summary>A file's bmbt blocks: allocated near the asker (never below a locked AG), freed at the end of the transaction.</summary>
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

        public void Free(Transaction tx, ulong pointer) => space.Defer(tx, pointer, 1, RmapOwner.InodeBmbt(ino, attrFork));
    }

    public uint? AllocateChunk(Transaction tx, uint agno, uint blocks, uint alignment)
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
        });
        return got?.AgBlock;
    }

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
        // One mapping editor for the directory while its fork keeps the form, extent count and fork offset it was
        // loaded with (the editor's own changes keep them in step): a directory operation asks for its mapping many
        // times, and loading it each time decoded the whole extent list or walked the bmbt.
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

        private IReadOnlyList<BmbtRecord> Extents(DirectoryInodeImage dir) =>
            (IReadOnlyList<BmbtRecord>?)Editor(_tx, dir)?.Extents ?? [];

        public long Map(DirectoryInodeImage dir, ulong fileBlock)
        {
            var editor = Editor(_tx, dir);
            if (editor is null || !editor.TryMap(fileBlock, out var e)) return -1;
            return space.sbFsbToByte(e.StartBlock + (fileBlock - e.FileOffset));
        }

        public ulong FirstUnused(DirectoryInodeImage dir, ulong from, int count)
        {
            ulong candidate = from;
            foreach (var e in Extents(dir))
            {
                if (e.FileEnd <= candidate) continue;
                if (e.FileOffset >= candidate + (ulong)count) break;
                candidate = e.FileEnd;
            }
            return candidate;
        }

        public ulong LastBefore(DirectoryInodeImage dir, ulong fileBlock)
        {
            ulong last = 0;
            foreach (var e in Extents(dir))
            {
                if (e.FileOffset >= fileBlock) break;
                last = Math.Min(e.FileEnd, fileBlock);
            }
            return last;
        }

        public ulong LastOffset(DirectoryInodeImage dir)
        {
            var list = Extents(dir);
            return list.Count == 0 ? 0 : list[^1].FileEnd;
        }

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
}

using System.Buffers;
using System.Buffers.Binary;
using XfsWin.Attributes;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

// The namespace and data operations of a read-write volume (the POSIX calls hosts translate). Each is one or more
// logged transactions; each throws XfsException: ReadOnly on a read-only open, NotFound, Exists, NotEmpty, NoSpace,
// NotADirectory, IsADirectory, NameTooLong, InvalidArgument as the matching POSIX call would fail. Nothing is changed
// when one fails (the transaction is cancelled before any buffer is published).
public sealed partial class XfsVolume
{
    private const ushort TypeMask = 0xF000, TypeDirectory = 0x4000, TypeRegular = 0x8000, TypeSymlink = 0xA000;
    private const ushort ModeSetgid = 0x400;
    private const uint MaxLinks = 0x7FFFFFFF;
    private const int MaxSymlinkTarget = 1024;
    /// <summary>Extents one transaction frees at most when a file shrinks (more are freed in following transactions).</summary>
    private const ulong ExtentsFreedPerTransaction = 16;

    /// <summary>
    /// mknod/creat: a regular file, fifo, socket or device node named <paramref name="name"/> in <paramref name="parent"/>
    /// (<paramref name="mode"/> holds the type bits and the permissions). Returns the new inode's attributes.
    /// </summary>
    public InodeAttributes CreateNode(ulong parent, ReadOnlySpan<byte> name, ushort mode, uint uid, uint gid, uint deviceMajor = 0, uint deviceMinor = 0)
    {
        var type = Inode.FileTypeOf(mode);
        if (type is XfsFileType.Directory or XfsFileType.Symlink or XfsFileType.Unknown)
            throw new XfsException(XfsError.InvalidArgument, $"mode 0{Convert.ToString(mode, 8)} is not a file, fifo, socket or device");
        if (deviceMajor > 0x3FFF || deviceMinor > 0x3FFFF)
            throw new XfsException(XfsError.InvalidArgument, $"device {deviceMajor}:{deviceMinor} does not fit XFS's device number (14-bit major, 18-bit minor)");
        return CreateCore(parent, name, mode, uid, gid, TransactionKind.Create, 0, (tx, inode) =>
        {
            if (type is XfsFileType.RegularFile)
            {
                inode.DataFormat = ForkFormat.Extents;
                return;
            }
            inode.DataFormat = ForkFormat.Device;
            uint rdev = type is XfsFileType.CharacterDevice or XfsFileType.BlockDevice ? deviceMajor << 18 | deviceMinor : 0;
            BinaryPrimitives.WriteUInt32BigEndian(inode.DataFork, rdev);
        });
    }

    /// <summary>mkdir.</summary>
    public InodeAttributes MakeDirectory(ulong parent, ReadOnlySpan<byte> name, ushort mode, uint uid, uint gid) =>
        CreateCore(parent, name, (ushort)(TypeDirectory | (mode & 0x0FFF)), uid, gid, TransactionKind.Mkdir, 0, (tx, inode) =>
        {
            // An empty short-form directory: no entries, ".." the parent (4 or 8 bytes).
            bool wide = parent > 0xFFFFFFFF;
            var fork = inode.DataFork;
            fork.Clear();
            fork[1] = (byte)(wide ? 1 : 0);
            if (wide) BinaryPrimitives.WriteUInt64BigEndian(fork[2..], parent);
            else BinaryPrimitives.WriteUInt32BigEndian(fork[2..], (uint)parent);
            inode.DataFormat = ForkFormat.Local;
            inode.Size = (ulong)(wide ? 10 : 6);
            inode.LinkCount = 2;
        });

    /// <summary>symlink: a link holding <paramref name="target"/> (stored in the inode when it fits, else in blocks).</summary>
    public InodeAttributes MakeSymlink(ulong parent, ReadOnlySpan<byte> name, ReadOnlySpan<byte> target, uint uid, uint gid)
    {
        if (target.Length is 0 or > MaxSymlinkTarget)
            throw new XfsException(target.Length == 0 ? XfsError.NotFound : XfsError.NameTooLong, $"a symbolic link target has 1 to {MaxSymlinkTarget} bytes, not {target.Length}");
        var targetCopy = target.ToArray();
        // xfs_symlink: a target longer than the inode's literal area goes to blocks (reserved with the create).
        var sb = _mount.Superblock;
        int literal = sb.InodeSize - (sb.IsV5 ? DinodeView.V3CoreSize : DinodeView.V2CoreSize);
        int perBlock = (int)sb.BlockSize - (sb.IsV5 ? RemoteBlockHeader.Size : 0);
        int targetBlocks = targetCopy.Length <= literal ? 0 : (targetCopy.Length + perBlock - 1) / perBlock;
        return CreateCore(parent, name, TypeSymlink | 0x1FF, uid, gid, TransactionKind.Symlink, targetBlocks, (tx, inode) =>
        {
            inode.Size = (ulong)targetCopy.Length;
            if (targetCopy.Length <= inode.DataFork.Length)
            {
                inode.DataFormat = ForkFormat.Local;
                inode.DataFork.Clear();
                targetCopy.CopyTo(inode.DataFork);
                return;
            }
            inode.DataFormat = ForkFormat.Extents;
            WriteRemoteSymlink(tx, inode, targetCopy);
        });
    }

    /// <summary>The target in blocks: one XSLM header (V5) per extent, as the kernel lays it out.</summary>
    private void WriteRemoteSymlink(Transaction tx, InodeUpdate inode, byte[] target)
    {
        var sb = _mount.Superblock;
        var w = _write!;
        int header = sb.IsV5 ? RemoteBlockHeader.Size : 0;
        int perBlock = (int)sb.BlockSize - header;
        uint blocks = (uint)((target.Length + perBlock - 1) / perBlock);
        var editor = new ExtentMapEditor(tx, inode, w.FileSpace);
        editor.AllocateHoles(0, blocks, unwritten: false);
        editor.Save();
        int done = 0;
        foreach (var extent in editor.Extents)
        {
            int length = (int)(extent.BlockCount << sb.BlockLog);
            long at = sb.FsbToByte(extent.StartBlock);
            var buffer = tx.GetNew(at, length, 40, inode.Number, new RemoteSymlinkWriteVerifier(sb), BufType.Symlink);
            var b = buffer.Contents.AsSpan();
            int bytes = Math.Min((int)extent.BlockCount * perBlock, target.Length - done);
            if (sb.IsV5)
            {
                BinaryPrimitives.WriteUInt32BigEndian(b, RemoteBlockHeader.SymlinkMagic);
                BinaryPrimitives.WriteUInt32BigEndian(b[RemoteBlockHeader.OffOffset..], (uint)done);
                BinaryPrimitives.WriteUInt32BigEndian(b[RemoteBlockHeader.OffBytes..], (uint)bytes);
                sb.MetaUuid.TryWriteBytes(b.Slice(RemoteBlockHeader.OffUuid, 16), bigEndian: true, out _);
                BinaryPrimitives.WriteUInt64BigEndian(b[RemoteBlockHeader.OffOwner..], inode.Number);
                BinaryPrimitives.WriteUInt64BigEndian(b[RemoteBlockHeader.OffBlkno..], (ulong)(at >> 9));
            }
            target.AsSpan(done, bytes).CopyTo(b[header..]);
            tx.LogRange(buffer, 0, length - 1);
            done += bytes;
        }
    }

    private sealed class RemoteSymlinkWriteVerifier(Superblock sb) : IBufferWriteVerifier
    {
        public string Structure => "symlink block";

        public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
        {
            if (!sb.IsV5) return VerifyResult.Ok;
            if (lsn != 0) BinaryPrimitives.WriteUInt64BigEndian(block[RemoteBlockHeader.OffLsn..], lsn);
            XfsCrc.Stamp(block, RemoteBlockHeader.OffCrc);
            return BinaryPrimitives.ReadUInt32BigEndian(block) == RemoteBlockHeader.SymlinkMagic ? VerifyResult.Ok : VerifyResult.Fail("bad magic", 0);
        }
    }

    /// <summary>
    /// The shared part of every create: a free inode initialised as the kernel's xfs_init_new_inode does (owner, group
    /// inherited from a setgid directory, inherited flags and project id, times now), shaped by
    /// <paramref name="shape"/>, then named in the parent directory; one transaction. The new inode's dquots are
    /// reserved one inode and the blocks the create may allocate (<paramref name="dataBlocks"/> of them its own data)
    /// first (xfs_trans_alloc_icreate).
    /// </summary>
    private InodeAttributes CreateCore(ulong parent, ReadOnlySpan<byte> name, ushort mode, uint uid, uint gid, TransactionKind kind,
        int dataBlocks, Action<Transaction, InodeUpdate> shape)
    {
        ValidateName(name);
        var w = Writer();
        using (w.Changes.Change())
        {
            var dir = DirectoryInode(parent);
            bool isDir = (mode & TypeMask) == TypeDirectory;
            RefuseIfLocked(dir, "a new name", appendAllowed: true);
            if (isDir && dir.Attributes.LinkCount >= MaxLinks)
                throw new XfsException(XfsError.TooManyLinks, $"directory {parent} has the most subdirectories it can have");
            // The new inode's dquots (owner, group as NewInode settles it, inherited project) exist before it is charged.
            const ushort ProjInherit = 0x200;
            uint newGid = (dir.Mode & ModeSetgid) != 0 ? dir.Attributes.Gid : gid;
            uint newProject = (dir.Attributes.Flags & ProjInherit) != 0 ? dir.Attributes.ProjectId : 0;
            PrepareDquots(w, uid, newGid, newProject);
            w.Quota?.Reserve(uid, newGid, newProject, w.Reservations.CreateSpaceBlocks(name.Length) + dataBlocks, 1);
            using var tx = Begin(w, kind);
            var dirUpdate = new InodeUpdate(dir, _mount.Superblock);
            var dirImage = new DirectoryInodeImage(_mount.Superblock, parent, dirUpdate.Image);
            var editor = new DirectoryEditor(tx, dirImage, w.DirectorySpace(tx, dirUpdate));
            ulong ino;
            int newInodes;
            try
            {
                (ino, newInodes) = w.AllocateInode(tx, parent, isDir);
            }
            catch (XfsException e) when (e.Error == XfsError.NoSpace && editor.TryLookup(name, out _))
            {
                // As the kernel's VFS answers: an existing name is EEXIST even on a volume out of inodes.
                throw new XfsException(XfsError.Exists, $"\"{Show(name)}\" exists already");
            }
            var now = Now();
            var inode = NewInode(ino, mode, uid, gid, dir, now);
            if (w.ParentPointerWork is not null || (_attrForkAtCreate && (mode & TypeMask) != TypeSymlink)) InitAttrFork(inode, Inode.FileTypeOf(mode));
            shape(tx, inode);
            // The name is looked up once, where it goes in; when it exists the transaction (inode allocation included) is cancelled.
            if (!editor.TryAddEntry(name, ino, Inode.FileTypeOf(mode)))
                throw new XfsException(XfsError.Exists, $"\"{Show(name)}\" exists already");
            DeferParentPointer(tx, w, AttrOperation.ParentSet, inode, name, dirUpdate);
            if (isDir) dirUpdate.LinkCount += 1;
            dirUpdate.Touch(now, modified: true);
            dirUpdate.Parts |= dirImage.LogParts;
            inode.Log(tx, _inodes);
            dirUpdate.Log(tx, _inodes);
            tx.OnCommit(() => w.CountInodes(newInodes, newInodes - 1));
            tx.Commit();
            AfterCommit(w);
            return _inodes.Get(ino).Attributes;
        }
    }

    /// <summary>A new inode's image (xfs_init_new_inode): everything the caller's shape does not set.</summary>
    private InodeUpdate NewInode(ulong ino, ushort mode, uint uid, uint gid, Inode parent, XfsTimestamp now)
    {
        var sb = _mount.Superblock;
        var image = new byte[sb.InodeSize];
        var w = new DinodeWriter(image);
        w.InitV3(ino, sb.MetaUuid);
        bool isDir = (mode & TypeMask) == TypeDirectory;
        // A setgid directory gives its group to what is made in it, and its setgid bit to subdirectories.
        if ((parent.Mode & ModeSetgid) != 0)
        {
            gid = parent.Attributes.Gid;
            if (isDir) mode |= ModeSetgid;
        }
        w.Mode = mode;
        w.Uid = uid;
        w.Gid = gid;
        w.LinkCount = 1;
        w.AttrFormat = ForkFormat.Extents;
        w.Generation = (uint)Random.Shared.Next();
        w.ChangeCount = 1;
        ulong flags2 = 0;
        if (sb.HasBigtime) flags2 |= DinodeView.Flag2Bigtime;
        if (sb.HasNrext64) flags2 |= DinodeView.Flag2Nrext64;
        w.Flags2 = flags2;
        ulong t = DinodeWriter.EncodeTime(now.Seconds, now.Nanoseconds, sb.HasBigtime);
        w.AccessTime = t;
        w.ModifyTime = t;
        w.ChangeTime = t;
        w.CreationTime = t;
        var update = new InodeUpdate(ino, sb.InodeToByte(ino), image, sb);
        // The project id of a project-inheriting parent (xfs_get_initial_prid), for every kind of inode; flags and hints
        // (xfs_inode_inherit_flags, _flags2) for regular files and directories only.
        const ushort ProjInherit = 0x200;
        if ((parent.Attributes.Flags & ProjInherit) != 0) update.ProjectId = parent.Attributes.ProjectId;
        if (isDir || (mode & TypeMask) == 0x8000) InheritFlags(update, parent, isDir);
        return update;
    }

    /// <summary>link: another name for <paramref name="inode"/> (not a directory).</summary>
    public InodeAttributes Link(ulong inode, ulong newParent, ReadOnlySpan<byte> newName)
    {
        ValidateName(newName);
        var w = Writer();
        using (w.Changes.Change())
        {
            var target = _inodes.Get(inode);
            if (target.IsDirectory) throw new XfsException(XfsError.NotPermitted, "directories cannot have hard links");
            if (target.Attributes.LinkCount >= MaxLinks) throw new XfsException(XfsError.TooManyLinks, $"inode {inode} has the most links it can have");
            if (target.Attributes.LinkCount == 0) throw new XfsException(XfsError.NotFound, $"inode {inode} has been removed");
            var dir = DirectoryInode(newParent);
            RefuseIfLocked(target, "a new link");
            RefuseIfLocked(dir, "a new name", appendAllowed: true);
            RefuseOtherProject(dir, target);
            // xfs_trans_alloc_dir: the directory's dquots are reserved what the new entry (and its parent pointer) may
            // allocate; when that is refused, the link goes ahead only if the entry fits the directory's blocks
            // (xfs_dir_canenter), and never on a parent-pointer volume (the attribute could not be backed out).
            var refused = TryReserveQuota(w, dir, w.Reservations.LinkSpaceBlocks(newName.Length));
            if (refused is not null && _mount.Superblock.HasParentPointers) throw refused;
            using var tx = BeginWithParentPointers(w, TransactionKind.Link, target);
            var dirUpdate = new InodeUpdate(dir, _mount.Superblock);
            var dirImage = new DirectoryInodeImage(_mount.Superblock, newParent, dirUpdate.Image);
            var editor = new DirectoryEditor(tx, dirImage, w.DirectorySpace(tx, dirUpdate));
            ulong dirBlocks = new DinodeView(dirUpdate.Image).Nblocks;
            if (!editor.TryAddEntry(newName, inode, target.FileType)) throw new XfsException(XfsError.Exists, $"\"{Show(newName)}\" exists already");
            // Refused a reservation and the entry needed a new block: the transaction is cancelled unchanged.
            if (refused is not null && new DinodeView(dirUpdate.Image).Nblocks != dirBlocks) throw refused;
            var now = Now();
            var update = new InodeUpdate(target, _mount.Superblock);
            update.LinkCount += 1;
            update.Touch(now, modified: false);
            dirUpdate.Touch(now, modified: true);
            dirUpdate.Parts |= dirImage.LogParts;
            DeferParentPointer(tx, w, AttrOperation.ParentSet, update, newName, dirUpdate);
            update.Log(tx, _inodes);
            dirUpdate.Log(tx, _inodes);
            tx.Commit();
            AfterCommit(w);
            return _inodes.Get(inode).Attributes;
        }
    }

    /// <summary>unlink: removes a name of a non-directory; the inode is freed when its last link and last use are gone.</summary>
    public void Unlink(ulong parent, ReadOnlySpan<byte> name) => RemoveName(parent, name, directory: false);

    /// <summary>rmdir: removes an empty directory.</summary>
    public void RemoveDirectory(ulong parent, ReadOnlySpan<byte> name) => RemoveName(parent, name, directory: true);

    private void RemoveName(ulong parent, ReadOnlySpan<byte> name, bool directory)
    {
        ValidateName(name);
        var w = Writer();
        using (w.Changes.Change())
        {
            var dir = DirectoryInode(parent);
            if (!_directories.TryLookup(dir, name, out ulong ino)) throw new XfsException(XfsError.NotFound, $"\"{Show(name)}\" does not exist");
            var target = _inodes.Get(ino);
            if (directory && !target.IsDirectory) throw new XfsException(XfsError.NotADirectory, $"\"{Show(name)}\" is not a directory");
            if (!directory && target.IsDirectory) throw new XfsException(XfsError.IsADirectory, $"\"{Show(name)}\" is a directory");
            if (directory && !IsEmptyDirectory(target)) throw new XfsException(XfsError.NotEmpty, $"directory \"{Show(name)}\" is not empty");
            RefuseIfLocked(dir, "removing a name");
            RefuseIfLocked(target, "removing it");
            // A large file loses its blocks first, in transactions of their own: a crash in between leaves it linked and shorter.
            bool last = target.Attributes.LinkCount <= 1 && !IsHeld(ino);
            if (last && target.IsRegular) ShrinkInSteps(w, ino, 0);

            target = _inodes.Get(ino);
            using var tx = BeginWithParentPointers(w, TransactionKind.Remove, target);
            var dirUpdate = new InodeUpdate(dir, _mount.Superblock);
            var dirImage = new DirectoryInodeImage(_mount.Superblock, parent, dirUpdate.Image);
            var editor = new DirectoryEditor(tx, dirImage, w.DirectorySpace(tx, dirUpdate));
            editor.RemoveEntry(name);
            var now = Now();
            var update = new InodeUpdate(target, _mount.Superblock);
            if (directory)
            {
                dirUpdate.LinkCount -= 1;
                update.LinkCount = 0;
            }
            else
            {
                update.LinkCount -= 1;
            }
            update.Touch(now, modified: false);
            dirUpdate.Touch(now, modified: true);
            dirUpdate.Parts |= dirImage.LogParts;
            bool free = update.LinkCount == 0 && !IsHeld(ino);
            // An inode freed here loses its whole attribute fork with it; one that stays (other names, or held open
            // on the unlinked list) loses the parent pointer of this name.
            if (!free) DeferParentPointer(tx, w, AttrOperation.ParentRemove, update, name, dirUpdate);
            if (free) FreeInode(tx, w, update);
            else if (update.LinkCount == 0)
            {
                w.Unlinked.Add(tx, update);
                w.Orphans.Add(ino);
            }
            update.Log(tx, _inodes);
            dirUpdate.Log(tx, _inodes);
            tx.Commit();
            AfterCommit(w);
        }
    }

    /// <summary>
    /// Frees what an inode holds and the inode itself in <paramref name="tx"/> (xfs_inactive + xfs_ifree): its data
    /// blocks (at most <see cref="ExtentsFreedPerTransaction"/> extents are left by the caller), its attribute fork,
    /// then its slot in the inode trees. The image becomes a free inode: mode 0, empty forks.
    /// </summary>
    private void FreeInode(Transaction tx, VolumeWriteState w, InodeUpdate update)
    {
        w.EofBlocks.Remove(update.Number);
        w.EofReleased.Remove(update.Number);
        if (update.DataFormat is ForkFormat.Extents or ForkFormat.Btree && update.DataExtentCount > 0)
        {
            var editor = new ExtentMapEditor(tx, update, w.FileSpace);
            // A remote symlink's blocks are metadata buffers (one per extent, as WriteRemoteSymlink made them): they are
            // invalidated before the blocks go, as xfs_inactive_symlink_rmt does, so that a buffer still dirty is never
            // written back over whatever the blocks hold next, and recovery replays none of its older images.
            if ((update.Mode & TypeMask) == TypeSymlink)
            {
                var sb = _mount.Superblock;
                foreach (var extent in editor.Extents)
                    tx.Invalidate(sb.FsbToByte(extent.StartBlock), checked((int)(extent.BlockCount << sb.BlockLog)));
            }
            editor.Unmap(0, ulong.MaxValue);
            editor.Save();
        }
        if (update.ForkOffset != 0 && update.AttrFormat is ForkFormat.Extents or ForkFormat.Btree && update.AttrExtentCount > 0)
            new AttributeEditor(tx, update, w.FileSpace).FreeAll();
        var view = new DinodeView(update.Image);
        ulong keepFlags2 = view.Flags2 & (DinodeView.Flag2Bigtime | DinodeView.Flag2Nrext64);
        var writer = new DinodeWriter(update.Image);
        writer.Mode = 0;
        writer.Flags = 0;
        writer.Flags2 = keepFlags2;
        writer.ForkOffset = 0;
        writer.AttrFormat = ForkFormat.Extents;
        writer.Format = ForkFormat.Extents;
        writer.Size = 0;
        update.Nblocks = 0;
        update.DataExtentCount = 0;
        update.Image.AsSpan(DinodeView.OffAnextents, 2).Clear();
        BinaryPrimitives.WriteUInt32BigEndian(update.Image.AsSpan(DinodeView.OffExtsize), 0);
        update.Image.AsSpan(view.CoreSize).Clear();
        writer.Generation = view.Generation + 1;
        update.Parts |= InodeLogParts.DataFork | InodeLogParts.AttrFork;
        int released = w.InodeAllocator.Free(tx, update.Number);
        tx.OnCommit(() => w.CountInodes(-released, released == 0 ? 1 : -(released - 1)));
    }

    /// <summary>
    /// rename / renameat2. A whiteout (<see cref="RenameFlags.Whiteout"/>) is owned by <paramref name="callerUid"/> and
    /// <paramref name="callerGid"/>, the caller's ids (the group of a setgid target directory wins, as for any new inode).
    /// </summary>
    public void Rename(ulong parent, ReadOnlySpan<byte> name, ulong newParent, ReadOnlySpan<byte> newName, RenameFlags flags = RenameFlags.None,
        uint callerUid = 0, uint callerGid = 0)
    {
        ValidateName(name);
        ValidateName(newName);
        if ((flags & RenameFlags.Exchange) != 0 && (flags & (RenameFlags.NoReplace | RenameFlags.Whiteout)) != 0)
            throw new XfsException(XfsError.InvalidArgument, "RENAME_EXCHANGE cannot be combined with RENAME_NOREPLACE or RENAME_WHITEOUT");
        var w = Writer();
        using (w.Changes.Change())
        {
            var fromDir = DirectoryInode(parent);
            var toDir = parent == newParent ? fromDir : DirectoryInode(newParent);
            if (!_directories.TryLookup(fromDir, name, out ulong source)) throw new XfsException(XfsError.NotFound, $"\"{Show(name)}\" does not exist");
            bool targetExists = _directories.TryLookup(toDir, newName, out ulong target);
            if ((flags & RenameFlags.NoReplace) != 0 && targetExists) throw new XfsException(XfsError.Exists, $"\"{Show(newName)}\" exists already");
            if ((flags & RenameFlags.Exchange) != 0 && !targetExists) throw new XfsException(XfsError.NotFound, $"\"{Show(newName)}\" does not exist");
            if (targetExists && target == source) return; // the same inode under both names: rename(2) does nothing
            var src = _inodes.Get(source);
            Inode? dst = targetExists ? _inodes.Get(target) : null;
            bool exchange = (flags & RenameFlags.Exchange) != 0;
            bool whiteout = (flags & RenameFlags.Whiteout) != 0;
            // may_delete and may_create of the VFS, then xfs_rename's project boundary.
            RefuseIfLocked(fromDir, "removing a name");
            RefuseIfLocked(src, "renaming it");
            RefuseIfLocked(toDir, "a new name", appendAllowed: dst is null);
            if (dst is not null) RefuseIfLocked(dst, "replacing it");
            RefuseOtherProject(toDir, src);
            if (src.IsDirectory && parent != newParent && IsAncestor(source, newParent))
                throw new XfsException(XfsError.WouldLoop, "a directory cannot be moved under itself");
            if (whiteout)
            {
                // xfs_rename_alloc_whiteout: the whiteout's dquots are reserved a new inode first.
                const ushort ProjInherit = 0x200;
                w.Quota?.Reserve(callerUid, (toDir.Mode & ModeSetgid) != 0 ? toDir.Attributes.Gid : callerGid,
                    (toDir.Attributes.Flags & ProjInherit) != 0 ? toDir.Attributes.ProjectId : 0, w.Reservations.InodeAllocSpaceBlocks, 1);
            }
            if (exchange && dst!.IsDirectory && parent != newParent && IsAncestor(target, parent))
                throw new XfsException(XfsError.WouldLoop, "a directory cannot be moved under itself");
            if (!exchange && dst is not null)
            {
                if (src.IsDirectory && !dst.IsDirectory) throw new XfsException(XfsError.NotADirectory, $"\"{Show(newName)}\" is not a directory");
                if (!src.IsDirectory && dst.IsDirectory) throw new XfsException(XfsError.IsADirectory, $"\"{Show(newName)}\" is a directory");
                // XFS answers EEXIST (not ENOTEMPTY) for a rename over a directory that has entries.
                if (dst.IsDirectory && !IsEmptyDirectory(dst)) throw new XfsException(XfsError.Exists, $"directory \"{Show(newName)}\" is not empty");
            }
            // xfs_rename: the target directory's dquots are reserved what the rename may allocate; when that is refused
            // the rename goes ahead only if a new entry fits the target directory's blocks, and never on a
            // parent-pointer volume (the attributes could not be backed out).
            var refused = TryReserveQuota(w, toDir, w.Reservations.RenameSpaceBlocks(name.Length, targetExists, newName.Length, whiteout));
            if (refused is not null && _mount.Superblock.HasParentPointers) throw refused;
            if (!exchange && dst is not null)
            {
                if (dst.Attributes.LinkCount <= 1 && dst.IsRegular && !IsHeld(target))
                {
                    ShrinkInSteps(w, target, 0);
                    dst = _inodes.Get(target); // its extents changed
                }
            }

            // The whiteout's dquots (the caller's, or the setgid group and inherited project NewInode gives it) exist first.
            if (whiteout)
            {
                const ushort ProjInherit = 0x200;
                PrepareDquots(w, callerUid, (toDir.Mode & ModeSetgid) != 0 ? toDir.Attributes.Gid : callerGid,
                    (toDir.Attributes.Flags & ProjInherit) != 0 ? toDir.Attributes.ProjectId : 0);
            }
            using var tx = BeginWithParentPointers(w, TransactionKind.Rename, src, dst);
            var now = Now();
            var fromUpdate = new InodeUpdate(_inodes.Get(parent), _mount.Superblock);
            var fromImage = new DirectoryInodeImage(_mount.Superblock, parent, fromUpdate.Image);
            var fromEditor = new DirectoryEditor(tx, fromImage, w.DirectorySpace(tx, fromUpdate));
            InodeUpdate toUpdate;
            DirectoryInodeImage toImage;
            DirectoryEditor toEditor;
            if (parent == newParent)
            {
                toUpdate = fromUpdate;
                toImage = fromImage;
                toEditor = fromEditor;
            }
            else
            {
                toUpdate = new InodeUpdate(_inodes.Get(newParent), _mount.Superblock);
                toImage = new DirectoryInodeImage(_mount.Superblock, newParent, toUpdate.Image);
                toEditor = new DirectoryEditor(tx, toImage, w.DirectorySpace(tx, toUpdate));
            }
            var srcUpdate = new InodeUpdate(src, _mount.Superblock);
            InodeUpdate? dstUpdate = dst is null ? null : new InodeUpdate(dst, _mount.Superblock);
            InodeUpdate? whiteUpdate = null;

            if (exchange)
            {
                fromEditor.ReplaceEntry(name, target, dst!.FileType);
                toEditor.ReplaceEntry(newName, source, src.FileType);
                if (parent != newParent)
                {
                    if (src.IsDirectory) RepointDotDot(tx, w, srcUpdate, newParent);
                    if (dst.IsDirectory) RepointDotDot(tx, w, dstUpdate!, parent);
                    if (src.IsDirectory != dst.IsDirectory)
                    {
                        // The directory's ".." moves between the parents.
                        if (src.IsDirectory) { fromUpdate.LinkCount -= 1; toUpdate.LinkCount += 1; }
                        else { fromUpdate.LinkCount += 1; toUpdate.LinkCount -= 1; }
                    }
                }
                dstUpdate!.Touch(now, modified: false);
            }
            else
            {
                if (dst is not null)
                {
                    toEditor.ReplaceEntry(newName, source, src.FileType);
                    if (dst.IsDirectory)
                    {
                        dstUpdate!.LinkCount = 0;
                        toUpdate.LinkCount -= 1;
                    }
                    else
                    {
                        dstUpdate!.LinkCount -= 1;
                    }
                    dstUpdate.Touch(now, modified: false);
                }
                else
                {
                    ulong toBlocks = new DinodeView(toUpdate.Image).Nblocks;
                    toEditor.AddEntry(newName, source, src.FileType);
                    // Refused a reservation and the entry needed a new block: the transaction is cancelled unchanged.
                    if (refused is not null && new DinodeView(toUpdate.Image).Nblocks > toBlocks) throw refused;
                }
                if (whiteout)
                {
                    // RENAME_WHITEOUT: the source name now names a whiteout (a 0:0 character device, mode 0). The kernel
                    // makes it as a temporary file of the target directory (xfs_rename_alloc_whiteout gets target_dp):
                    // it is allocated near that directory and takes its group when that directory is setgid.
                    var (wIno, wNew) = w.AllocateInode(tx, newParent, directory: false);
                    var white = NewInode(wIno, 0x2000, callerUid, callerGid, toDir, now);
                    if (w.ParentPointerWork is not null) InitAttrFork(white, XfsFileType.CharacterDevice);
                    white.DataFormat = ForkFormat.Device;
                    whiteUpdate = white;
                    BinaryPrimitives.WriteUInt32BigEndian(white.DataFork, 0);
                    fromEditor.ReplaceEntry(name, wIno, XfsFileType.CharacterDevice);
                    white.Log(tx, _inodes);
                    tx.OnCommit(() => w.CountInodes(wNew, wNew - 1));
                }
                else
                {
                    fromEditor.RemoveEntry(name);
                }
                if (src.IsDirectory && parent != newParent)
                {
                    RepointDotDot(tx, w, srcUpdate, newParent);
                    fromUpdate.LinkCount -= 1;
                    toUpdate.LinkCount += 1;
                }
            }
            srcUpdate.Touch(now, modified: false);
            fromUpdate.Touch(now, modified: true);
            fromUpdate.Parts |= fromImage.LogParts;
            if (!ReferenceEquals(toUpdate, fromUpdate))
            {
                toUpdate.Touch(now, modified: true);
                toUpdate.Parts |= toImage.LogParts;
            }
            // Parent pointers in the kernel's order (xfs_dir_rename_children, xfs_dir_exchange_children): the whiteout's
            // new one, the moved inode's replaced one, then the overwritten inode's removed one (unless it is freed here,
            // attribute fork and all) or, for an exchange, the other inode's replaced one.
            if (whiteUpdate is not null) DeferParentPointer(tx, w, AttrOperation.ParentSet, whiteUpdate, name, fromUpdate);
            DeferParentPointer(tx, w, AttrOperation.ParentReplace, srcUpdate, name, fromUpdate, newName, toUpdate);
            if (exchange) DeferParentPointer(tx, w, AttrOperation.ParentReplace, dstUpdate!, newName, toUpdate, name, fromUpdate);
            else if (dstUpdate is not null && (dstUpdate.LinkCount > 0 || IsHeld(target)))
                DeferParentPointer(tx, w, AttrOperation.ParentRemove, dstUpdate, newName, toUpdate);
            if (dstUpdate is not null && !exchange && dstUpdate.LinkCount == 0)
            {
                if (IsHeld(target))
                {
                    w.Unlinked.Add(tx, dstUpdate);
                    w.Orphans.Add(target);
                }
                else FreeInode(tx, w, dstUpdate);
            }
            srcUpdate.Log(tx, _inodes);
            dstUpdate?.Log(tx, _inodes);
            fromUpdate.Log(tx, _inodes);
            if (!ReferenceEquals(toUpdate, fromUpdate)) toUpdate.Log(tx, _inodes);
            tx.Commit();
            AfterCommit(w);
        }
    }

    // ---- parent pointers (xfs_parent.c) --------------------------------------------------------------------------
    // On a parent-pointer volume every name of an inode is mirrored by an attribute of that inode in the parent
    // namespace: its name is the entry's name, its value the directory's handle (xfs_parent_rec: inode number and
    // generation, big-endian). A namespace operation queues the change as deferred xattr work: its ATTRI is logged in
    // the part that changes the directory, the attribute changes in the next part with the ATTRD
    // (xfs_parent_addname, xfs_parent_removename, xfs_parent_replacename), so that a crash in between leaves an
    // intent that log recovery finishes.

    /// <summary>
    /// The transaction of a namespace operation that changes the parent pointers of <paramref name="children"/>: the
    /// operation's reservation, raised to what an attribute change of the child with the most attributes may log.
    /// </summary>
    private Transaction BeginWithParentPointers(VolumeWriteState w, TransactionKind kind, params ReadOnlySpan<Inode?> children)
    {
        if (w.ParentPointerWork is null) return Begin(w, kind);
        int bytes = 0;
        foreach (var child in children)
            if (child is not null) bytes = Math.Max(bytes, AttrReservation(w, child, ParentRecordSize));
        return Begin(w, kind, bytes);
    }

    private const int ParentRecordSize = 12;

    /// <summary>xfs_parent_rec of <paramref name="directory"/>.</summary>
    private static byte[] ParentRecord(InodeUpdate directory)
    {
        var record = new byte[ParentRecordSize];
        BinaryPrimitives.WriteUInt64BigEndian(record, directory.Number);
        BinaryPrimitives.WriteUInt32BigEndian(record.AsSpan(8), new DinodeView(directory.Image).Generation);
        return record;
    }

    /// <summary>
    /// Queues parent-pointer operation <paramref name="op"/> on <paramref name="child"/> for the name
    /// <paramref name="name"/> in <paramref name="directory"/> (and, for a replace, the new name and directory); does
    /// nothing on a volume without parent pointers.
    /// </summary>
    private static void DeferParentPointer(Transaction tx, VolumeWriteState w, uint op, InodeUpdate child, ReadOnlySpan<byte> name, InodeUpdate directory,
        ReadOnlySpan<byte> newName = default, InodeUpdate? newDirectory = null)
    {
        if (w.ParentPointerWork is not { } work) return;
        tx.Defer(work, new AttrOperation(op, child.Number, new DinodeView(child.Image).Generation, AttrOperation.FilterParent,
            name.ToArray(), ParentRecord(directory), newDirectory is null ? null : newName.ToArray(),
            newDirectory is null ? null : ParentRecord(newDirectory)));
    }

    /// <summary>
    /// A new inode starts with an empty attribute fork at the default offset where the kernel's create gives it one
    /// (XFS_ICREATE_INIT_XATTRS); its data fork is sized by it from the start. The kernel does so for every inode on a
    /// parent-pointer volume, and otherwise (current kernels: Linux 6.1 does not) for files, directories and device nodes
    /// when a security module keeps per-superblock state (xfs_create_need_xattr: attributes are then expected at once),
    /// as the kernels of common distributions do; never for symlinks, whiteouts and O_TMPFILE files without parent
    /// pointers. Both forms are valid XFS; this one keeps short-form directories, local symlinks and extent lists
    /// changing form where the kernel's do. <see cref="VolumeOpenOptions.AttrForkAtCreate"/> turns it off.
    /// </summary>
    private void InitAttrFork(InodeUpdate inode, XfsFileType type)
    {
        bool device = type is XfsFileType.CharacterDevice or XfsFileType.BlockDevice or XfsFileType.Fifo or XfsFileType.Socket;
        inode.ForkOffset = AttributeEditor.DefaultForkOffset(_mount.Superblock, inode.LiteralSize, device);
        inode.AttrFormat = ForkFormat.Extents;
        inode.AttrExtentCount = 0;
    }

    /// <summary>Points a moved directory's ".." at its new parent.</summary>
    private void RepointDotDot(Transaction tx, VolumeWriteState w, InodeUpdate directory, ulong newParent)
    {
        var image = new DirectoryInodeImage(_mount.Superblock, directory.Number, directory.Image);
        var editor = new DirectoryEditor(tx, image, w.DirectorySpace(tx, directory));
        editor.ReplaceEntry(".."u8, newParent, XfsFileType.Directory);
        directory.Parts |= image.LogParts;
    }

    /// <summary>True when <paramref name="ancestor"/> is <paramref name="directory"/> or one of its parents.</summary>
    private bool IsAncestor(ulong ancestor, ulong directory)
    {
        ulong current = directory;
        for (int hops = 0; hops < 4096; hops++)
        {
            if (current == ancestor) return true;
            if (current == _mount.Superblock.RootIno) return false;
            if (!_directories.TryLookup(_inodes.Get(current), ".."u8, out ulong up) || up == current) return false;
            current = up;
        }
        throw _mount.Corrupt($"directory {directory}", _mount.Superblock.InodeToByte(directory), "its parent chain does not reach the root (a loop)");
    }

    private bool IsEmptyDirectory(Inode directory)
    {
        var counter = new EntryCounter();
        _directories.Enumerate(directory, 0, ref counter);
        return counter.Count == 0;
    }

    private struct EntryCounter : IDirectoryVisitor
    {
        public int Count;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (name.SequenceEqual("."u8) || name.SequenceEqual(".."u8)) return true;
            Count++;
            return false;
        }
    }

    /// <summary>pwrite: writes <paramref name="data"/> at <paramref name="offset"/>, allocating blocks and moving EOF as needed; returns the bytes written.</summary>
    public int Write(ulong inode, long offset, ReadOnlySpan<byte> data) => Write(inode, offset, data, shortAtQuotaLimit: true);

    /// <summary>
    /// pwrite, with the choice of what a quota limit inside the range does: with <paramref name="shortAtQuotaLimit"/> the
    /// write ends short where the limit falls (write(2)'s answer, the bytes before it written); without, the whole
    /// write is refused and nothing is written (a Windows WriteFile's answer: NTFS allocates a write whole or fails it).
    /// </summary>
    public int Write(ulong inode, long offset, ReadOnlySpan<byte> data, bool shortAtQuotaLimit)
    {
        if (offset < 0) throw new XfsException(XfsError.InvalidArgument, "a write offset cannot be negative");
        if (data.IsEmpty) return 0;
        if (offset + (long)data.Length > MaxFileSize) throw new XfsException(XfsError.FileTooLarge, $"a write past {MaxFileSize} bytes");
        var w = Writer();
        if (TryOverwriteBesideOthers(w, inode, offset, data)) return data.Length;
        using (w.Changes.Change())
        {
            ObjectDisposedException.ThrowIf(w.Unmounted, this);
            var current = _inodes.Get(inode);
            if (current.IsDirectory) throw new XfsException(XfsError.IsADirectory, "a directory cannot be written as a file");
            if (!current.IsRegular) throw new XfsException(XfsError.InvalidArgument, "only regular files hold data");
            // An append-only file takes writes at its end only (the VFS refuses opening it for writing without O_APPEND).
            RefuseIfLocked(current, "writing inside it", appendAllowed: offset >= current.Size);
            var sb = _mount.Superblock;
            int blockSize = (int)sb.BlockSize;
            ulong first = (ulong)offset >> sb.BlockLog;
            ulong last = (ulong)(offset + data.Length - 1) >> sb.BlockLog;
            bool reflinked = (current.Attributes.Flags2 & DinodeView.Flag2Reflink) != 0;
            // With an extent size hint each hole's allocation is rounded out to the hint (xfs_bmap_extsize_align) and
            // mapped unwritten; only the blocks written here become written, as the kernel's direct allocation does
            // for a file with a hint (it never delays allocation for one).
            uint hint = ExtentSizeHint.Of(current);
            // The owner's dquots are reserved the blocks the write maps (holes, and copies of shared blocks), as the
            // kernel's delayed allocation reserves them: the data blocks only (mapping btree blocks are charged as
            // they are allocated, never refused). As the kernel's iomap walk, each hole is reserved in turn and a
            // refusal after some bytes ends the write short there (a reflinked file's write is reserved whole).
            if (w.Quota is { Enforced: not 0 } && (reflinked || !IsWrittenInFork(current, first, last)))
            {
                long reserved = 0;
                foreach (var (start, count) in HoleRuns(current, first, last + 1))
                {
                    try
                    {
                        ulong blocks = hint == 0 ? count : AlignedHole(current, start, count, hint);
                        ReserveQuota(w, current, reserved + (long)blocks);
                        reserved += (long)blocks;
                    }
                    catch (XfsException e) when (!reflinked && shortAtQuotaLimit && e.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
                    {
                        long keep = (long)(start << sb.BlockLog) - offset;
                        if (keep <= 0) throw;
                        data = data[..(int)keep];
                        last = (ulong)(offset + data.Length - 1) >> sb.BlockLog;
                        break;
                    }
                }
                if (reflinked)
                {
                    foreach (var run in SharedRuns(w, current, first, last + 1)) reserved += run.BlockCount;
                    ReserveQuota(w, current, reserved);
                }
            }
            if (reflinked)
            {
                // Shared blocks are copied on write first (new blocks holding the old bytes with these over them);
                // the write below then goes to blocks this file alone uses.
                current = ZeroTailOfShared(w, current, offset);
                Unshare(w, inode, first, last + 1, offset, data);
                current = _inodes.Get(inode);
            }
            // A write over blocks the inode's extent list already maps as written changes no mapping: no editor (it
            // would only load the list and log nothing), the blocks are looked up in the inode's own fork bytes.
            bool overwrite = IsWrittenInFork(current, first, last);
            var now = Now();
            if (overwrite && offset + data.Length <= (long)current.Size && !TimestampsBehind(current, now))
            {
                // Nothing of the inode changes (no mapping, no size, timestamps already in this granule): no
                // transaction, the data goes to its blocks (the kernel's file_update_time finds nothing to update).
                WriteFileBlocks(w, current, null, null, first, last, offset, data);
                return data.Length;
            }
            using var tx = Begin(w, TransactionKind.Write);
            var scratch = w.WriteScratch.TakeScratch();
            ExtentMapEditor? editor = null;
            try
            {
                var update = scratch.InodeFor(current, sb);
                // The file's mapping as its last write left it is taken up again when nothing changed it since (a stream
                // of writes into holes of a file would otherwise load its whole extent list or bmbt for every write).
                editor = overwrite ? null : w.WriteScratch.TakeEditor(tx, update, w.FileSpace);
                ulong preallocate = editor is null || hint != 0 || reflinked ? 0 : SpeculativePreallocationFor(w, current, editor, first, offset + data.Length);
                scratch.Fresh.Clear();
                var fresh = hint != 0 ? editor?.AllocateHolesAligned(first, last - first + 1, hint) : editor?.AllocateHoles(first, last - first + 1, unwritten: false, scratch.Fresh);
                bool preallocated = preallocate != 0 && fresh is not null && Covers(fresh, last) && Preallocate(editor!, last + 1, preallocate);
                // Data goes to its blocks before the transaction that maps them commits: no crash exposes stale blocks.
                WriteFileBlocks(w, current, editor, fresh, first, last, offset, data);
                if ((preallocated || (hint != 0 && fresh is { Count: > 0 })) && w.EofBlocks.Add(inode)) Volatile.Write(ref w.AnyEofBlocks, true);
                editor?.MarkWritten(first, last - first + 1);
                editor?.Save();
                long end = offset + data.Length;
                if (end > (long)update.Size) update.Size = (ulong)end;
                update.Touch(now, modified: true);
                update.Log(tx, _inodes);
                tx.Commit();
                AfterCommit(w);
                editor?.MarkKept();
                return data.Length;
            }
            finally
            {
                if (editor is not null) w.WriteScratch.ReturnEditor(editor);
                w.WriteScratch.ReturnScratch(scratch);
            }
        }
    }

    /// <summary>
    /// A write that changes nothing but file bytes, done holding the change lock shared (beside reads and other such
    /// writes, see <see cref="VolumeChangeLock"/>) and the file's data lock exclusively: a regular file of no reflinked,
    /// immutable or append-only kind, every block of the range written in its extent list, the range inside EOF, and
    /// timestamps already in this write's granule. No change can run meanwhile, so what the inode shows stays true
    /// until the data is with the data cache. False (nothing written) when any of that does not hold: the write then
    /// goes through a change, which also gives every refusal its error.
    /// </summary>
    private bool TryOverwriteBesideOthers(VolumeWriteState w, ulong inode, long offset, ReadOnlySpan<byte> data)
    {
        w.Changes.EnterRead();
        try
        {
            // An unmount that ran while this waited for the lock left nothing to write into.
            ObjectDisposedException.ThrowIf(w.Unmounted, this);
            var current = _inodes.Get(inode);
            if (!current.IsRegular || offset + data.Length > (long)current.Size) return false;
            if ((current.Attributes.Flags & (DiImmutable | DiAppend)) != 0 || (current.Attributes.Flags2 & DinodeView.Flag2Reflink) != 0) return false;
            var sb = _mount.Superblock;
            ulong first = (ulong)offset >> sb.BlockLog;
            ulong last = (ulong)(offset + data.Length - 1) >> sb.BlockLog;
            if (!IsWrittenInFork(current, first, last) || TimestampsBehind(current, Now())) return false;
            using var dataLock = w.Changes.WriteFileData(inode);
            WriteFileBlocks(w, current, null, null, first, last, offset, data);
            return true;
        }
        finally
        {
            w.Changes.ExitRead();
        }
    }

    /// <summary>Timestamps move at most once per this many nanoseconds of a file's writes (a coarse clock tick, as the kernel's).</summary>
    internal const uint TimestampGranuleNanoseconds = 4_000_000;

    /// <summary>
    /// True when a write at <paramref name="now"/> must update the inode's timestamps: the granule <paramref name="now"/>
    /// falls in begins after its mtime or its ctime. The kernel's file_update_time compares against a coarse clock
    /// (one tick: a few milliseconds), so a file written many times within a tick is updated once; timestamps never
    /// move back (a clock behind them updates nothing). Like the kernel's without a query in between, a stat between
    /// two writes of one granule sees the first's times.
    /// </summary>
    private static bool TimestampsBehind(Inode inode, XfsTimestamp now)
    {
        var granule = new XfsTimestamp(now.Seconds, now.Nanoseconds - now.Nanoseconds % TimestampGranuleNanoseconds);
        return IsBefore(inode.Attributes.ModifyTime, granule) || IsBefore(inode.Attributes.ChangeTime, granule);

        static bool IsBefore(XfsTimestamp a, XfsTimestamp b) => a.Seconds < b.Seconds || (a.Seconds == b.Seconds && a.Nanoseconds < b.Nanoseconds);
    }

    /// <summary>
    /// Writes <paramref name="data"/> (file bytes from <paramref name="offset"/>, blocks <paramref name="first"/> to
    /// <paramref name="last"/>) to the blocks that map it: through <paramref name="editor"/> when the write changes the
    /// mapping (<paramref name="fresh"/> the extents it allocated, read as zeros), otherwise from the inode's own fork.
    /// Partial blocks keep what they held (zeros for new or unwritten blocks and past EOF).
    /// </summary>
    private void WriteFileBlocks(VolumeWriteState w, Inode current, ExtentMapEditor? editor, List<BmbtRecord>? fresh,
        ulong first, ulong last, long offset, ReadOnlySpan<byte> data)
    {
        var sb = _mount.Superblock;
        int blockSize = (int)sb.BlockSize;
        ulong inode = current.Number;
        for (ulong fb = first; fb <= last;)
        {
            BmbtRecord extent;
            if (editor is null ? !TryFindInFork(current, fb, out extent) : !editor.TryMap(fb, out extent))
                throw new InvalidOperationException($"inode {inode}: block {fb} unmapped after allocation");
            long disk = sb.FsbToByte(extent.StartBlock + (fb - extent.FileOffset));
            long blockStart = (long)(fb << sb.BlockLog);
            int from = (int)Math.Max(0, offset - blockStart);
            if (from == 0)
            {
                // Whole blocks of this extent in one device write.
                ulong run = Math.Min(extent.FileEnd, last + 1) - fb;
                long runBytes = Math.Min((long)run << sb.BlockLog, offset + data.Length - blockStart) & ~((long)blockSize - 1);
                if (runBytes > 0)
                {
                    w.Data.Write(disk, data.Slice((int)(blockStart - offset), (int)runBytes));
                    fb += (ulong)(runBytes >> sb.BlockLog);
                    continue;
                }
            }
            int to = (int)Math.Min(blockSize, offset + data.Length - blockStart);
            var piece = data.Slice((int)(blockStart + from - offset), to - from);
            bool isNew = extent.Unwritten || (fresh is not null && Covers(fresh, fb));
            // Part of a block: what is not written reads as before (zeros for a new or unwritten block).
            byte[] rented = ArrayPool<byte>.Shared.Rent(blockSize);
            try
            {
                var block = rented.AsSpan(0, blockSize);
                if (isNew || blockStart >= (long)current.Size) block.Clear();
                else w.Data.Read(disk, block);
                if (!isNew && blockStart < (long)current.Size && blockStart + blockSize > (long)current.Size)
                    block[(int)((long)current.Size - blockStart)..].Clear();
                piece.CopyTo(block[from..]);
                w.Data.Write(disk, block);
            }
            finally
            {
                ArrayPool<byte>.Shared.Return(rented);
            }
            fb++;
        }
    }

    /// <summary>
    /// The speculative preallocation (<see cref="SpeculativePreallocation"/>) for a write ending at byte
    /// <paramref name="end"/> that starts in file block <paramref name="first"/>: for a write past EOF of a file that is
    /// neither preallocated with fallocate nor append-only (both keep blocks past EOF for good), on a volume whose
    /// quotas are not enforced (a preallocation must not be what passes a limit); 0 otherwise.
    /// </summary>
    private ulong SpeculativePreallocationFor(VolumeWriteState w, Inode current, ExtentMapEditor editor, ulong first, long end)
    {
        if (end <= current.Size || w.Quota is { Enforced: not 0 }) return 0;
        if ((current.Attributes.Flags & (DiFlagPrealloc | DiFlagAppend)) != 0) return 0;
        var sb = _mount.Superblock;
        // Where the file grows: past the block the write starts in when that one is mapped (an append inside the last block).
        ulong growFrom = editor.TryMap(first, out var at) ? at.FileEnd : first;
        ulong free = (ulong)Math.Max(0, w.FileSpace.Allocator.FreeBlocks);
        return SpeculativePreallocation.Blocks((ulong)current.Size, growFrom, editor.ContiguousRunBefore(growFrom), (int)sb.BlockLog, free, sb.DataBlocks);
    }

    /// <summary>
    /// Maps up to <paramref name="blocks"/> unwritten blocks from <paramref name="fileBlock"/> (a hole past EOF) up to the
    /// next mapped block and the largest file; true when any were mapped. Running out of space only shortens it.
    /// </summary>
    private bool Preallocate(ExtentMapEditor editor, ulong fileBlock, ulong blocks)
    {
        ulong limit = (ulong)MaxFileSize >> _mount.Superblock.BlockLog;
        if (fileBlock >= limit) return false;
        ulong count = Math.Min(Math.Min(blocks, limit - fileBlock), editor.NextMapped(fileBlock) - fileBlock);
        if (count == 0) return false;
        try
        {
            return editor.AllocateHoles(fileBlock, count, unwritten: true).Count > 0;
        }
        catch (XfsException e) when (e.Error == XfsError.NoSpace)
        {
            return editor.TryMap(fileBlock, out _);
        }
    }

    private static bool Covers(List<BmbtRecord> extents, ulong fileBlock)
    {
        foreach (var e in extents)
            if (fileBlock >= e.FileOffset && fileBlock < e.FileEnd) return true;
        return false;
    }

    /// <summary>True when the inode's data fork is an extent list mapping every block of [<paramref name="first"/>, <paramref name="last"/>] as written.</summary>
    private static bool IsWrittenInFork(Inode inode, ulong first, ulong last)
    {
        if (inode.DataFormat != ForkFormat.Extents) return false;
        for (ulong fb = first; fb <= last;)
        {
            if (!TryFindInFork(inode, fb, out var e) || e.Unwritten) return false;
            fb = e.FileEnd;
        }
        return true;
    }

    /// <summary>
    /// <see cref="ReserveQuota"/> for a change that may go ahead without the reservation (xfs_trans_alloc_dir's
    /// reservationless mode): the refusal (over a limit, or no space) is returned instead of thrown.
    /// </summary>
    private static XfsException? TryReserveQuota(VolumeWriteState w, Inode owner, long blocks)
    {
        try
        {
            ReserveQuota(w, owner, blocks);
            return null;
        }
        catch (XfsException e) when (e.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
        {
            return e;
        }
    }

    /// <summary>
    /// xfs_trans_reserve_quota_nblks for a change of <paramref name="owner"/>'s blocks: its dquots must take
    /// <paramref name="blocks"/> more (after <paramref name="freedBlocks"/> the change frees first), or the change is
    /// refused before it starts (<see cref="XfsError.QuotaExceeded"/>, <see cref="XfsError.NoSpace"/> for a project).
    /// </summary>
    private static void ReserveQuota(VolumeWriteState w, Inode owner, long blocks, long freedBlocks = 0) =>
        w.Quota?.Reserve(owner.Attributes.Uid, owner.Attributes.Gid, owner.Attributes.ProjectId, blocks, 0, freedBlocks);

    /// <summary>The data fork blocks of [<paramref name="first"/>, <paramref name="end"/>) mapped, written or unwritten.</summary>
    private ulong MappedBlocks(Inode inode, ulong first, ulong end)
    {
        if (inode.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree) || end <= first) return 0;
        var map = _maps.Get(inode, ForkKind.Data);
        ulong mapped = 0;
        for (ulong fb = first; fb < end;)
        {
            if (!map.TryFind(fb, out var e, out ulong next))
            {
                fb = next == ulong.MaxValue || next <= fb ? end : next;
                continue;
            }
            ulong stop = Math.Min(end, e.FileEnd);
            mapped += stop - fb;
            fb = stop;
        }
        return mapped;
    }

    /// <summary>The blocks an extent size hint of <paramref name="hint"/> blocks has allocated for the hole run [<paramref name="start"/>, +<paramref name="count"/>).</summary>
    private ulong AlignedHole(Inode inode, ulong start, ulong count, uint hint)
    {
        ulong previousEnd = 0, nextStart = ulong.MaxValue;
        if (inode.DataFormat is ForkFormat.Extents or ForkFormat.Btree)
        {
            var map = _maps.Get(inode, ForkKind.Data);
            map.TryFind(start, out _, out nextStart);
            previousEnd = map.PreviousEnd(start);
        }
        return ExtentSizeHint.Align(start, Math.Min(count, BmbtRecord.MaxBlockCount), hint, previousEnd, nextStart).Length;
    }

    /// <summary>The unmapped runs of data fork blocks [<paramref name="first"/>, <paramref name="end"/>), in order.</summary>
    private List<(ulong Start, ulong Count)> HoleRuns(Inode inode, ulong first, ulong end)
    {
        var holes = new List<(ulong, ulong)>();
        if (inode.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree))
        {
            if (end > first) holes.Add((first, end - first));
            return holes;
        }
        var map = _maps.Get(inode, ForkKind.Data);
        for (ulong fb = first; fb < end;)
        {
            if (map.TryFind(fb, out var e, out ulong next))
            {
                fb = Math.Min(end, e.FileEnd);
                continue;
            }
            ulong stop = next == ulong.MaxValue || next <= fb ? end : Math.Min(end, next);
            holes.Add((fb, stop - fb));
            fb = stop;
        }
        return holes;
    }

    /// <summary>The extent of an extent-list data fork that maps <paramref name="fileBlock"/> (a binary search of the sorted records).</summary>
    private static bool TryFindInFork(Inode inode, ulong fileBlock, out BmbtRecord extent)
    {
        var fork = inode.DataFork;
        int lo = 0, hi = (int)Math.Min(inode.DataExtentCount, (ulong)(fork.Length / BmbtRecord.Size)) - 1;
        while (lo <= hi)
        {
            int mid = (lo + hi) >>> 1;
            var e = BmbtRecord.Decode(fork.Slice(mid * BmbtRecord.Size, BmbtRecord.Size));
            if (fileBlock < e.FileOffset) hi = mid - 1;
            else if (fileBlock >= e.FileEnd) lo = mid + 1;
            else
            {
                extent = e;
                return true;
            }
        }
        extent = default;
        return false;
    }

    /// <summary>The largest size XFS files have (the kernel's MAX_LFS_FILESIZE on 64-bit).</summary>
    private const long MaxFileSize = long.MaxValue;

    /// <summary>fallocate.</summary>
    public void Allocate(ulong inode, long offset, long length, FallocateMode mode)
    {
        if (offset < 0 || length <= 0) throw new XfsException(XfsError.InvalidArgument, "fallocate needs a non-negative offset and a positive length");
        var w = Writer();
        using (w.Changes.Change())
        {
            var current = _inodes.Get(inode);
            if (!current.IsRegular) throw new XfsException(current.IsDirectory ? XfsError.IsADirectory : XfsError.InvalidArgument, "only regular files can be preallocated");
            // vfs_fallocate: append-only files may only have space added.
            RefuseIfLocked(current, "fallocate", appendAllowed: mode is FallocateMode.Allocate or FallocateMode.KeepSize);
            var sb = _mount.Superblock;
            switch (mode)
            {
                case FallocateMode.Allocate or FallocateMode.KeepSize:
                {
                    ulong first = (ulong)offset >> sb.BlockLog, last = (ulong)(offset + length - 1) >> sb.BlockLog;
                    // xfs_alloc_file_space: the whole range and a mapping split are reserved, mapped or not.
                    ReserveQuota(w, current, (long)(last - first + 1) + w.Reservations.ExtentAddSpaceBlocks);
                    using var tx = Begin(w, TransactionKind.Write);
                    var update = new InodeUpdate(current, sb);
                    var editor = new ExtentMapEditor(tx, update, w.FileSpace);
                    // xfs_alloc_file_space: with an extent size hint the allocation is rounded out to it.
                    AllocateUnwritten(editor, current, first, last - first + 1);
                    editor.Save();
                    // xfs_alloc_file_space marks the file preallocated: its blocks past EOF stay when it is closed.
                    update.Flags |= DiFlagPrealloc;
                    if (mode == FallocateMode.Allocate && offset + length > (long)update.Size) update.Size = (ulong)(offset + length);
                    update.Touch(Now(), modified: false);
                    update.Log(tx, _inodes);
                    tx.Commit();
                    AfterCommit(w);
                    return;
                }
                case FallocateMode.PunchHole:
                {
                    long end = Math.Min(offset + length, (long)current.Size);
                    if (end <= offset) return;
                    ZeroPartialBlocks(w, current, offset, end);
                    ulong firstWhole = (ulong)((offset + sb.BlockSize - 1) >> sb.BlockLog);
                    ulong endWhole = (ulong)(end >> sb.BlockLog);
                    if (end == (long)current.Size) endWhole = (ulong)((end + sb.BlockSize - 1) >> sb.BlockLog);
                    if (endWhole > firstWhole) UnmapInSteps(w, inode, firstWhole, endWhole - firstWhole);
                    TouchModified(w, inode);
                    return;
                }
                case FallocateMode.ZeroRange:
                {
                    // As the kernel: whole blocks are punched out, partial ones zeroed in place, then the whole
                    // block-rounded range is preallocated (unwritten, reading as zeros); the size grows to cover it.
                    long end = offset + length;
                    long inside = Math.Min(end, (long)current.Size);
                    // xfs_zero_file_space frees the whole blocks inside EOF, then reserves as fallocate does: the
                    // reservation is checked first here, with what the punch frees taken off the count.
                    if (w.Quota is { Enforced: not 0 })
                    {
                        ulong from = (ulong)((offset + sb.BlockSize - 1) >> sb.BlockLog), to = (ulong)(inside >> sb.BlockLog);
                        if (inside == (long)current.Size) to = (ulong)((inside + sb.BlockSize - 1) >> sb.BlockLog);
                        long freed = inside > offset && to > from ? (long)MappedBlocks(current, from, to) : 0;
                        ulong f = (ulong)offset >> sb.BlockLog, l = (ulong)(end - 1) >> sb.BlockLog;
                        ReserveQuota(w, current, (long)(l - f + 1) + w.Reservations.ExtentAddSpaceBlocks, freed);
                    }
                    if (inside > offset)
                    {
                        ZeroPartialBlocks(w, current, offset, inside);
                        ulong firstWhole = (ulong)((offset + sb.BlockSize - 1) >> sb.BlockLog);
                        ulong endWhole = (ulong)(inside >> sb.BlockLog);
                        if (inside == (long)current.Size) endWhole = (ulong)((inside + sb.BlockSize - 1) >> sb.BlockLog);
                        if (endWhole > firstWhole) UnmapInSteps(w, inode, firstWhole, endWhole - firstWhole);
                    }
                    using var tx = Begin(w, TransactionKind.Write);
                    var update = new InodeUpdate(_inodes.Get(inode), sb);
                    var editor = new ExtentMapEditor(tx, update, w.FileSpace);
                    ulong first = (ulong)offset >> sb.BlockLog, last = (ulong)(end - 1) >> sb.BlockLog;
                    AllocateUnwritten(editor, current, first, last - first + 1);
                    editor.Save();
                    // xfs_alloc_file_space marks the file preallocated: its blocks past EOF stay when it is closed.
                    update.Flags |= DiFlagPrealloc;
                    if (end > (long)update.Size) update.Size = (ulong)end;
                    update.Touch(Now(), modified: true);
                    update.Log(tx, _inodes);
                    tx.Commit();
                    AfterCommit(w);
                    return;
                }
                case FallocateMode.CollapseRange:
                    CollapseRange(w, current, offset, length);
                    return;
                case FallocateMode.InsertRange:
                    InsertRange(w, current, offset, length);
                    return;
                default:
                    throw new XfsException(XfsError.Unsupported, $"fallocate mode {mode} is not supported by this build; nothing was changed");
            }
        }
    }

    /// <summary>Maps the holes of [<paramref name="first"/>, +<paramref name="count"/>) unwritten, rounded out to the file's extent size hint if it has one.</summary>
    private static void AllocateUnwritten(ExtentMapEditor editor, Inode file, ulong first, ulong count)
    {
        uint hint = ExtentSizeHint.Of(file);
        if (hint != 0) editor.AllocateHolesAligned(first, count, hint);
        else editor.AllocateHoles(first, count, unwritten: true);
    }

    /// <summary>Writes zeros over the parts of the first and last blocks of [offset, end) that are not whole blocks (where mapped and written).</summary>
    private void ZeroPartialBlocks(VolumeWriteState w, Inode current, long offset, long end)
    {
        var sb = _mount.Superblock;
        int bs = (int)sb.BlockSize;
        if ((current.Attributes.Flags2 & DinodeView.Flag2Reflink) != 0 && end > offset)
        {
            // Zeros go over shared blocks only through copy-on-write.
            if (offset % bs != 0) Unshare(w, current.Number, (ulong)offset >> sb.BlockLog, ((ulong)offset >> sb.BlockLog) + 1, 0, default);
            if (end % bs != 0) Unshare(w, current.Number, (ulong)end >> sb.BlockLog, ((ulong)end >> sb.BlockLog) + 1, 0, default);
            current = _inodes.Get(current.Number);
        }
        var map = _maps.Get(current, ForkKind.Data);
        void Zero(long from, long to)
        {
            if (to <= from) return;
            ulong fb = (ulong)from >> sb.BlockLog;
            if (!map.TryFind(fb, out var e, out _) || e.Unwritten) return;
            long disk = sb.FsbToByte(e.StartBlock + (fb - e.FileOffset)) + (from & (bs - 1));
            Span<byte> zeros = stackalloc byte[(int)(to - from)];
            zeros.Clear();
            w.Data.WritePartial(disk, zeros);
        }
        long firstEnd = Math.Min(end, (offset + bs - 1) / bs * bs);
        if (offset % bs != 0) Zero(offset, firstEnd);
        long lastStart = end / bs * bs;
        if (end % bs != 0 && lastStart >= firstEnd) Zero(Math.Max(lastStart, offset), end);
    }

    private void TouchModified(VolumeWriteState w, ulong inode)
    {
        using var tx = Begin(w, TransactionKind.Ichange);
        var update = new InodeUpdate(_inodes.Get(inode), _mount.Superblock);
        update.Touch(Now(), modified: true);
        update.Log(tx, _inodes);
        tx.Commit();
    }

    /// <summary>
    /// Frees file blocks [fileBlock, +count) in one transaction that rolls (xfs_itruncate_extents): from the end backwards,
    /// at most <see cref="ExtentsFreedPerTransaction"/> extents are unmapped in a part, and their reverse mappings and
    /// frees are finished as deferred work before the next ones; a crash in between leaves the file shorter (blocks past
    /// EOF, which is consistent) and intents the next mount's recovery finishes. However many extents the file has, the
    /// transaction needs one part's log space at a time.
    /// </summary>
    private void UnmapInSteps(VolumeWriteState w, ulong inode, ulong fileBlock, ulong count)
    {
        ulong end = count == ulong.MaxValue ? ulong.MaxValue : fileBlock + count;
        var current = _inodes.Get(inode);
        if (current.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree)) return;
        // A fork without extents (a file never written) has nothing to unmap: no transaction, as xfs_inactive frees such
        // an inode without xfs_inactive_truncate.
        if (current.DataExtentCount == 0) return;
        using var tx = Begin(w, TransactionKind.Itruncate);
        var update = new InodeUpdate(current, _mount.Superblock);
        var editor = new ExtentMapEditor(tx, update, w.FileSpace);
        bool changed = false;
        while (true)
        {
            ulong from = editor.TailStart(fileBlock, end, (int)ExtentsFreedPerTransaction);
            if (from >= end) break;
            editor.Unmap(from, end == ulong.MaxValue ? ulong.MaxValue : end - from);
            editor.Save();
            update.Log(tx, _inodes);
            changed = true;
            if (from <= fileBlock) break;
            tx.FinishDeferred();
            end = from;
        }
        if (!changed)
        {
            tx.Cancel();
            return;
        }
        tx.Commit();
        AfterCommit(w);
    }

    /// <summary>Frees every block of a file at or past <paramref name="fromBlock"/> (truncate, and before an unlink frees the inode).</summary>
    private void ShrinkInSteps(VolumeWriteState w, ulong inode, ulong fromBlock) => UnmapInSteps(w, inode, fromBlock, ulong.MaxValue);

    /// <summary>
    /// setxattr: sets <paramref name="name"/> in <paramref name="ns"/> to <paramref name="value"/> (POSIX ACLs arrive as
    /// trusted SGI_ACL_FILE / SGI_ACL_DEFAULT in XFS's form). <see cref="XattrSetMode.Create"/> fails with
    /// <see cref="XfsError.Exists"/> when it exists, <see cref="XattrSetMode.Replace"/> with
    /// <see cref="XfsError.NoAttribute"/> when it does not. One transaction.
    /// </summary>
    public void SetXattr(ulong inode, XattrNamespace ns, ReadOnlySpan<byte> name, ReadOnlySpan<byte> value, XattrSetMode mode = XattrSetMode.Any)
    {
        ValidateXattr(ns, name);
        if (value.Length > AttributeReader.XattrMaxValueLength)
            throw new XfsException(XfsError.InvalidArgument, $"an extended attribute value has at most {AttributeReader.XattrMaxValueLength} bytes, not {value.Length}");
        var w = Writer();
        using (w.Changes.Change())
        {
            var current = _inodes.Get(inode);
            if (current.Attributes.LinkCount == 0 && !IsHeld(inode)) throw new XfsException(XfsError.NotFound, $"inode {inode} has been removed");
            RefuseIfLocked(current, "setting an extended attribute");
            // xfs_attr_set: the owner's dquots are reserved an attribute fork (if the inode has none) and what the
            // set may allocate; trusted attributes (XFS_ATTR_ROOT, POSIX ACLs among them) are reserved with force.
            if (ns != XattrNamespace.Trusted)
            {
                if (!current.HasAttrFork) ReserveQuota(w, current, w.Reservations.AddAttrForkSpaceBlocks);
                ReserveQuota(w, current, w.Reservations.AttrSetSpaceBlocks(name.Length, value.Length));
            }
            using var tx = Begin(w, TransactionKind.AttrSetM, AttrReservation(w, current, value.Length));
            var update = new InodeUpdate(current, _mount.Superblock);
            var editor = new AttributeEditor(tx, update, w.FileSpace, inode => MoveLocalData(tx, w, inode));
            bool exists = editor.Contains(ns, name);
            if (mode == XattrSetMode.Create && exists) throw new XfsException(XfsError.Exists, $"attribute \"{XattrNames.ToLinuxName(ns, name)}\" exists already");
            if (mode == XattrSetMode.Replace && !exists)
            {
                if (!current.HasAttrFork)
                {
                    editor.AddEmptyFork(name.Length, value.Length);
                    update.Log(tx, _inodes);
                    tx.Commit();
                    AfterCommit(w);
                }
                throw new XfsException(XfsError.NoAttribute, $"attribute \"{XattrNames.ToLinuxName(ns, name)}\" does not exist");
            }
            editor.Set(ns, name, value);
            update.Touch(Now(), modified: false);
            update.Log(tx, _inodes);
            tx.Commit();
            AfterCommit(w);
        }
    }

    /// <summary>removexattr: fails with <see cref="XfsError.NoAttribute"/> when there is no such attribute. One transaction.</summary>
    public void RemoveXattr(ulong inode, XattrNamespace ns, ReadOnlySpan<byte> name)
    {
        ValidateXattr(ns, name);
        var w = Writer();
        using (w.Changes.Change())
        {
            var current = _inodes.Get(inode);
            RefuseIfLocked(current, "removing an extended attribute");
            if (ns != XattrNamespace.Trusted) ReserveQuota(w, current, w.Reservations.AttrRemoveSpaceBlocks);
            using var tx = Begin(w, TransactionKind.AttrRm, AttrReservation(w, current, 0));
            var update = new InodeUpdate(current, _mount.Superblock);
            var editor = new AttributeEditor(tx, update, w.FileSpace, inode => MoveLocalData(tx, w, inode));
            if (!editor.Remove(ns, name)) throw new XfsException(XfsError.NoAttribute, $"attribute \"{XattrNames.ToLinuxName(ns, name)}\" does not exist");
            update.Touch(Now(), modified: false);
            update.Log(tx, _inodes);
            tx.Commit();
            AfterCommit(w);
        }
    }

    /// <summary>
    /// xfs_bmap_add_attrfork_local: what a short-form directory or a short symlink keeps in the inode moves into a block
    /// (a block directory; the target in a remote symlink block).
    /// </summary>
    private void MoveLocalData(Transaction tx, VolumeWriteState w, InodeUpdate inode)
    {
        if ((inode.Mode & TypeMask) == TypeDirectory)
        {
            var image = new DirectoryInodeImage(_mount.Superblock, inode.Number, inode.Image);
            new DirectoryEditor(tx, image, w.DirectorySpace(tx, inode)).MoveOutOfInode();
            inode.Parts |= image.LogParts | InodeLogParts.DataFork;
            return;
        }
        if ((inode.Mode & TypeMask) == TypeSymlink)
        {
            var target = inode.DataFork[..checked((int)inode.Size)].ToArray();
            inode.DataFork.Clear();
            inode.DataFormat = ForkFormat.Extents;
            inode.DataExtentCount = 0;
            WriteRemoteSymlink(tx, inode, target);
            inode.Parts |= InodeLogParts.DataFork;
            return;
        }
        throw new InvalidOperationException($"inode {inode.Number}: local data in an inode of mode 0{Convert.ToString(inode.Mode, 8)}");
    }

    private static void ValidateXattr(XattrNamespace ns, ReadOnlySpan<byte> name)
    {
        if (ns == XattrNamespace.Parent) throw new XfsException(XfsError.NotPermitted, "parent pointers are kept by the file system, not set as attributes");
        if (name.Length == 0) throw new XfsException(XfsError.InvalidArgument, "an extended attribute name is empty");
        if (name.Length > 255) throw new XfsException(XfsError.NameTooLong, $"an extended attribute name has at most 255 bytes, not {name.Length}");
        if (name.IndexOf((byte)0) >= 0) throw new XfsException(XfsError.InvalidArgument, "an extended attribute name holds a NUL byte");
    }

    /// <summary>
    /// The log space an attribute change may use: the kernel's attribute-set reservation, plus the leaf and node blocks
    /// a change may lay out again (the entries' name areas, leaves counted half full, and their nodes) and the new
    /// value's remote blocks.
    /// </summary>
    private int AttrReservation(VolumeWriteState w, Inode inode, int valueLength)
    {
        var sb = _mount.Superblock;
        int bs = (int)sb.BlockSize;
        long nameAreas = 0;
        if (inode.HasAttrFork && inode.AttrFormat is ForkFormat.Extents or ForkFormat.Btree)
            foreach (var e in _attributes.List(inode, includeParentPointers: true))
            {
                int local = (3 + e.Name.Length + e.ValueLength + 3) & ~3;
                nameAreas += 8 + (local < bs * 3 / 4 ? local : (11 + e.Name.Length + 3) & ~3);
            }
        long leaves = 2 * (nameAreas / (bs - 80) + 1);
        long blocks = leaves + leaves / Math.Max(1, (bs - 64) / 8) + 4 + (valueLength + bs - 1) / bs;
        long bytes = w.Reservations[TransactionKind.AttrSetM].LogRes + blocks * (bs + 256);
        return (int)Math.Min(bytes, int.MaxValue);
    }

    /// <summary>
    /// A host holds <paramref name="inode"/> (an open file, or an entry the kernel caches): an inode whose last name is
    /// removed stays until every hold is released.
    /// </summary>
    public void Retain(ulong inode, ulong count = 1)
    {
        var w = _write;
        if (w is null || count == 0) return;
        lock (w.Holds)
            w.Holds[inode] = (w.Holds.TryGetValue(inode, out var n) ? n : 0) + count;
    }

    /// <summary>Releases holds taken with <see cref="Retain"/>; an unlinked inode without holds is freed.</summary>
    public void Release(ulong inode, ulong count = 1)
    {
        var w = _write;
        if (w is null || count == 0) return;
        lock (w.Holds)
        {
            if (!w.Holds.TryGetValue(inode, out var n)) return;
            if (n > count)
            {
                w.Holds[inode] = n - count;
                return;
            }
            w.Holds.Remove(inode);
        }
        if (w.Unmounted || !_mount.Health.IsHealthy) return;
        using (w.Changes.Change())
        {
            if (w.Unmounted) return;
            if (!w.Orphans.Remove(inode))
            {
                InactivateEofBlocks(w, inode);
                return;
            }
            FreeOrphan(w, inode);
        }
    }

    private bool IsHeld(ulong inode)
    {
        var w = _write!;
        lock (w.Holds) return w.Holds.ContainsKey(inode);
    }

    /// <summary>An unlinked inode whose last hold went: its blocks, then the inode.</summary>
    private void FreeOrphan(VolumeWriteState w, ulong inode)
    {
        if (w.CowStaging.Has(inode)) CancelCowStaging(w, inode);
        var current = _inodes.Get(inode);
        if (current.Attributes.LinkCount != 0 || current.Mode == 0) return;
        // Nothing names it any more: its blocks go in a rolling transaction first (a directory's too), the inode after.
        if (current.IsRegular || current.IsDirectory) ShrinkInSteps(w, inode, 0);
        using var tx = Begin(w, TransactionKind.Ifree);
        var update = new InodeUpdate(_inodes.Get(inode), _mount.Superblock);
        w.Unlinked.Remove(tx, update);
        FreeInode(tx, w, update);
        update.Log(tx, _inodes);
        tx.Commit();
        AfterCommit(w);
    }

    private Inode DirectoryInode(ulong inode)
    {
        var dir = _inodes.Get(inode);
        if (!dir.IsDirectory) throw new XfsException(XfsError.NotADirectory, $"inode {inode} is not a directory");
        if (dir.Attributes.LinkCount == 0) throw new XfsException(XfsError.NotFound, $"directory {inode} has been removed");
        return dir;
    }

    private static void ValidateName(ReadOnlySpan<byte> name)
    {
        if (name.Length > 255) throw new XfsException(XfsError.NameTooLong, "names are at most 255 bytes in XFS");
        if (name.IsEmpty || name.IndexOfAny((byte)'/', (byte)0) >= 0 || name.SequenceEqual("."u8) || name.SequenceEqual(".."u8))
            throw new XfsException(XfsError.InvalidArgument, $"\"{Show(name)}\" cannot be a name");
    }

    private static string Show(ReadOnlySpan<byte> name) => System.Text.Encoding.UTF8.GetString(name);

    /// <summary>After every commit: bound the metadata the cache must keep until it is written back.</summary>
    private void AfterCommit(VolumeWriteState w) => LimitPinnedMetadata(w);
}

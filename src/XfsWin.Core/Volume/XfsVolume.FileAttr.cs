using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

/// <summary>
/// struct fsxattr as FS_IOC_FSGETXATTR returns it and FS_IOC_FSSETXATTR takes it: the FS_XFLAG_* flags, the extent size
/// hint in bytes, the data fork's extent count (read only), the project id and the copy-on-write extent size hint in bytes.
/// </summary>
public readonly record struct FileXattr(uint XFlags, uint ExtentSize, uint ExtentCount, uint ProjectId, uint CowExtentSize);

/// <summary>Who asks for a change of file attributes: the owner check and the privileged (root) exceptions use it.</summary>
public readonly record struct FileAttrCaller(uint Uid, bool Privileged)
{
    public static FileAttrCaller Root => new(0, true);
}

/// <summary>The FS_XFLAG_* bits of struct fsxattr (linux/fs.h) and the FS_*_FL bits of FS_IOC_GETFLAGS.</summary>
public static class FileXFlags
{
    public const uint Realtime = 0x1, Prealloc = 0x2, Immutable = 0x8, Append = 0x10, Sync = 0x20, NoAtime = 0x40, NoDump = 0x80,
        RtInherit = 0x100, ProjInherit = 0x200, NoSymlinks = 0x400, ExtSize = 0x800, ExtSzInherit = 0x1000, NoDefrag = 0x2000,
        Filestream = 0x4000, Dax = 0x8000, CowExtSize = 0x10000, HasAttr = 0x80000000;

    // FS_IOC_GETFLAGS / FS_IOC_SETFLAGS bits.
    public const uint FlSync = 0x8, FlImmutable = 0x10, FlAppend = 0x20, FlNoDump = 0x40, FlNoAtime = 0x80, FlDax = 0x02000000,
        FlProjInherit = 0x20000000;

    /// <summary>The xflags FS_IOC_SETFLAGS can change (FS_XFLAG_COMMON); the others keep their values.</summary>
    public const uint Common = Immutable | Append | Sync | NoAtime | NoDump | Dax | ProjInherit;

    /// <summary>The FS_*_FL flags of <paramref name="xflags"/> (fileattr_fill_xflags).</summary>
    public static uint ToFsFlags(uint xflags)
    {
        uint f = 0;
        if ((xflags & Immutable) != 0) f |= FlImmutable;
        if ((xflags & Append) != 0) f |= FlAppend;
        if ((xflags & Sync) != 0) f |= FlSync;
        if ((xflags & NoAtime) != 0) f |= FlNoAtime;
        if ((xflags & NoDump) != 0) f |= FlNoDump;
        if ((xflags & Dax) != 0) f |= FlDax;
        if ((xflags & ProjInherit) != 0) f |= FlProjInherit;
        return f;
    }

    /// <summary>The common xflags FS_*_FL <paramref name="flags"/> name (fileattr_fill_flags).</summary>
    public static uint FromFsFlags(uint flags)
    {
        uint x = 0;
        if ((flags & FlImmutable) != 0) x |= Immutable;
        if ((flags & FlAppend) != 0) x |= Append;
        if ((flags & FlSync) != 0) x |= Sync;
        if ((flags & FlNoAtime) != 0) x |= NoAtime;
        if ((flags & FlNoDump) != 0) x |= NoDump;
        if ((flags & FlDax) != 0) x |= Dax;
        if ((flags & FlProjInherit) != 0) x |= ProjInherit;
        return x;
    }
}

// File attributes of the FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR family (xfs_fileattr_get/set in the kernel's xfs_ioctl.c,
// with the VFS's checks of fileattr_set_prepare in front, so that hosts without a VFS of their own get them too):
// inode flags, project id (moving the inode's usage between project dquots), extent size and copy-on-write extent size
// hints. Every change is one logged inode transaction.
public sealed partial class XfsVolume
{
    private const uint MaxExtentLength = (1u << 21) - 1; // XFS_MAX_BMBT_EXTLEN

    // di_flags (XFS_DIFLAG_*), numbered as the FS_XFLAG_* bits they show as.
    private const ushort DiPrealloc = 0x2, DiImmutable = 0x8, DiAppend = 0x10, DiRtInherit = 0x100, DiProjInherit = 0x200,
        DiNoSymlinks = 0x400, DiExtSize = 0x800, DiExtSzInherit = 0x1000;

    /// <summary>FS_IOC_FSGETXATTR (xfs_fill_fsxattr for the data fork); of every kind of inode, as the kernel since 6.17 (file_getattr).</summary>
    public FileXattr GetFileXattr(ulong inode)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        return FileXattrOf(_inodes.Get(inode));
    }

    /// <summary>
    /// XFS_IOC_FSGETXATTRA: as <see cref="GetFileXattr"/>, with the attribute fork's extent count (xfs_fill_fsxattr for
    /// the attribute fork): its extents, a short-form fork's bytes in 16-byte records, 0 without a fork.
    /// </summary>
    public FileXattr GetFileXattrAttrFork(ulong inode)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        var node = _inodes.Get(inode);
        uint count = !node.HasAttrFork ? 0
            : node.AttrFormat == ForkFormat.Local ? (uint)System.Buffers.Binary.BinaryPrimitives.ReadUInt16BigEndian(node.AttrFork) / 16
            : node.AttrExtentCount;
        return FileXattrOf(node) with { ExtentCount = count };
    }

    private FileXattr FileXattrOf(Inode node)
    {
        var a = node.Attributes;
        var d = new DinodeView(node.Raw);
        uint xflags = a.Flags;
        if ((a.Flags2 & DinodeView.Flag2Dax) != 0) xflags |= FileXFlags.Dax;
        if ((a.Flags2 & DinodeView.Flag2CowExtSize) != 0) xflags |= FileXFlags.CowExtSize;
        if (d.ForkOffset != 0) xflags |= FileXFlags.HasAttr;
        uint blockLog = (uint)_mount.Superblock.BlockLog;
        uint extsize = (a.Flags & (DiExtSize | DiExtSzInherit)) != 0 ? d.ExtSize << (int)blockLog : 0;
        uint cow = (a.Flags2 & DinodeView.Flag2CowExtSize) != 0 ? CowExtSizeOf(node) << (int)blockLog : 0;
        // The kernel counts the in-memory extent records of the fork; a local fork's are its bytes in 16-byte records.
        ulong count = d.Format == ForkFormat.Local ? (ulong)a.Size / 16 : a.DataExtentCount;
        return new FileXattr(xflags, extsize, (uint)count, a.ProjectId, cow);
    }

    private static uint CowExtSizeOf(Inode node) =>
        new DinodeView(node.Raw).Version >= 3 ? System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(node.Raw.AsSpan(DinodeView.OffCowextsize)) : 0;

    /// <summary>FS_IOC_GETFLAGS: the FS_*_FL flags of the inode.</summary>
    public uint GetFileFlags(ulong inode) => FileXFlags.ToFsFlags(GetFileXattr(inode).XFlags);

    /// <summary>
    /// FS_IOC_SETFLAGS: sets the common flags <paramref name="flags"/> names (immutable, append, sync, noatime, nodump, dax,
    /// projinherit) and keeps the rest; other FS_*_FL bits are refused (<see cref="XfsError.Unsupported"/>, EOPNOTSUPP).
    /// </summary>
    public FileXattr SetFileFlags(ulong inode, uint flags, FileAttrCaller caller)
    {
        const uint Known = FileXFlags.FlImmutable | FileXFlags.FlAppend | FileXFlags.FlNoAtime | FileXFlags.FlNoDump |
                           FileXFlags.FlSync | FileXFlags.FlDax | FileXFlags.FlProjInherit;
        if ((flags & ~Known) != 0) throw new XfsException(XfsError.Unsupported, $"file flags 0x{flags & ~Known:x} are not XFS's");
        return SetFileAttrCore(inode, caller, old => old with { XFlags = (old.XFlags & ~FileXFlags.Common) | FileXFlags.FromFsFlags(flags) }, fsxValid: false);
    }

    /// <summary>
    /// FS_IOC_FSSETXATTR: sets the flags, extent size hint, project id and copy-on-write extent size hint of
    /// <paramref name="request"/> (its extent count is ignored), with the kernel's rules: only the owner or a privileged
    /// caller, only a privileged one changes immutable or append-only; hints are multiples of the block size, at most
    /// half an AG and 2^21-1 blocks, an extent size hint only on a regular file without extents (or a directory, to
    /// inherit), a copy-on-write hint only on reflink volumes; 32-bit project ids need projid32bit. An unprivileged
    /// change clears setuid and setgid. On a volume with project quota accounting the inode's usage moves to the new
    /// project's dquot; under an enforced project limit an unprivileged caller's move must fit the new project's
    /// quota (<see cref="XfsError.NoSpace"/>, ENOSPC, otherwise). Returns the attributes now.
    /// </summary>
    public FileXattr SetFileXattr(ulong inode, FileXattr request, FileAttrCaller caller) =>
        SetFileAttrCore(inode, caller, _ => request, fsxValid: true);

    private FileXattr SetFileAttrCore(ulong inode, FileAttrCaller caller, Func<FileXattr, FileXattr> change, bool fsxValid)
    {
        var w = Writer();
        var sb = _mount.Superblock;
        using (w.Changes.Change())
        {
            var node = _inodes.Get(inode);
            var old = FileXattrOf(node);
            var fa = change(old);
            bool dir = node.IsDirectory, reg = node.IsRegular;
            // The VFS's part (vfs_fileattr_set, fileattr_set_prepare).
            if (!caller.Privileged && caller.Uid != node.Attributes.Uid)
                throw new XfsException(XfsError.NotPermitted, "only the owner may change a file's attributes");
            if (((fa.XFlags ^ old.XFlags) & (FileXFlags.Immutable | FileXFlags.Append)) != 0 && !caller.Privileged)
                throw new XfsException(XfsError.NotPermitted, "only a privileged caller may change the immutable or append-only flag");
            if ((fa.XFlags & FileXFlags.ExtSize) != 0 && !reg) throw Invalid("an extent size hint is for regular files");
            if ((fa.XFlags & FileXFlags.ExtSzInherit) != 0 && !dir) throw Invalid("an inherited extent size hint is for directories");
            if ((fa.XFlags & FileXFlags.CowExtSize) != 0 && !reg && !dir) throw Invalid("a copy-on-write extent size hint is for files and directories");
            if ((fa.XFlags & FileXFlags.Dax) != 0 && !reg && !dir) throw Invalid("DAX is for files and directories");
            if (fa.ExtentSize == 0) fa = fa with { XFlags = fa.XFlags & ~(FileXFlags.ExtSize | FileXFlags.ExtSzInherit) };
            if (fa.CowExtentSize == 0) fa = fa with { XFlags = fa.XFlags & ~FileXFlags.CowExtSize };

            // XFS's part (xfs_fileattr_set).
            if (fsxValid && fa.ProjectId > ushort.MaxValue && (sb.Features2 & SuperblockFeatures.F2ProjId32) == 0)
                throw Invalid("project ids above 65535 need the projid32bit feature");
            if (fsxValid && fa.ProjectId != old.ProjectId)
            {
                PrepareDquots(w, node.Attributes.Uid, node.Attributes.Gid, fa.ProjectId);
                // xfs_ioctl_setattr_get_trans (xfs_trans_alloc_ichange with the new project's dquot): it is reserved the
                // inode's blocks and the inode, forced (unchecked) only for a caller with CAP_FOWNER; an enforced
                // limit refuses the change with ENOSPC before any other check of the request's hints and flags.
                if (!caller.Privileged && w.Quota is { Enforced: not 0 } quota)
                    quota.Reserve(node.Attributes.Uid, node.Attributes.Gid, fa.ProjectId, node.Attributes.AllocatedBytes >> sb.BlockLog, 1,
                        types: DquotView.TypeProject);
            }
            ushort newFlags = DiFlagsFor(node, fa.XFlags);
            ulong newFlags2 = (node.Attributes.Flags2 & ~(DinodeView.Flag2Dax | DinodeView.Flag2CowExtSize)) |
                              ((fa.XFlags & FileXFlags.Dax) != 0 ? DinodeView.Flag2Dax : 0) |
                              ((fa.XFlags & FileXFlags.CowExtSize) != 0 ? DinodeView.Flag2CowExtSize : 0);
            uint blockMask = sb.BlockSize - 1;
            if (fsxValid)
            {
                // xfs_ioctl_setattr_check_extsize and _cowextsize.
                if (reg && node.Attributes.DataExtentCount != 0 && old.ExtentSize != fa.ExtentSize)
                    throw Invalid("the extent size hint of a file with extents cannot change");
                if ((fa.ExtentSize & blockMask) != 0) throw Invalid($"the extent size hint {fa.ExtentSize} is not a multiple of the block size");
                if (ExtSizeProblem(fa.ExtentSize >> sb.BlockLog, dir, reg, newFlags) is { } e) throw Invalid(e);
                if ((fa.CowExtentSize & blockMask) != 0) throw Invalid($"the copy-on-write extent size hint {fa.CowExtentSize} is not a multiple of the block size");
                if (CowExtSizeProblem(fa.CowExtentSize >> sb.BlockLog, dir, reg, newFlags, newFlags2) is { } c) throw Invalid(c);
            }
            // xfs_ioctl_setattr_xflags.
            if ((fa.XFlags & FileXFlags.Realtime) != 0) throw Invalid("the volume has no realtime section");
            if ((fa.XFlags & FileXFlags.Dax) != 0 && (node.Attributes.Flags2 & DinodeView.Flag2Reflink) != 0)
                throw Invalid("a reflinked file cannot use DAX");
            if (!sb.IsV5 && (newFlags2 & (DinodeView.Flag2Dax | DinodeView.Flag2CowExtSize)) != 0)
                throw Invalid("V4 inodes have no DAX or copy-on-write hint flags");

            using var tx = Begin(w, TransactionKind.Ichange);
            var update = new InodeUpdate(node, sb);
            update.Flags = newFlags;
            if (sb.IsV5) update.Flags2 = newFlags2;
            if (fsxValid)
            {
                if ((update.Mode & (ModeSetuid | ModeSetgid)) != 0 && !caller.Privileged)
                    update.Mode = (ushort)(update.Mode & ~(ModeSetuid | ModeSetgid));
                // The dquots follow the inode's image: logging it moves its usage to the new project (xfs_qm_vop_chown).
                update.ProjectId = fa.ProjectId;
                update.ExtentSizeHint = (newFlags & (DiExtSize | DiExtSzInherit)) != 0 ? fa.ExtentSize >> sb.BlockLog : 0;
                if (sb.IsV5) update.CowExtentSizeHint = (newFlags2 & DinodeView.Flag2CowExtSize) != 0 ? fa.CowExtentSize >> sb.BlockLog : 0;
            }
            update.Touch(Now(), modified: false);
            update.Log(tx, _inodes);
            tx.Commit();
            return FileXattrOf(_inodes.Get(inode));
        }

        static XfsException Invalid(string why) => new(XfsError.InvalidArgument, why);
    }

    private const ushort ModeSetuid = 0x800;

    /// <summary>xfs_flags2diflags: the di_flags FS_XFLAG_* <paramref name="xflags"/> give this inode (preallocation kept).</summary>
    private static ushort DiFlagsFor(Inode node, uint xflags)
    {
        const uint Everyone = FileXFlags.Immutable | FileXFlags.Append | FileXFlags.Sync | FileXFlags.NoAtime | FileXFlags.NoDump |
                              FileXFlags.NoDefrag | FileXFlags.Filestream;
        uint flags = (uint)(node.Attributes.Flags & DiPrealloc) | (xflags & Everyone);
        if (node.IsDirectory) flags |= xflags & (FileXFlags.RtInherit | FileXFlags.NoSymlinks | FileXFlags.ExtSzInherit | FileXFlags.ProjInherit);
        else if (node.IsRegular) flags |= xflags & (FileXFlags.Realtime | FileXFlags.ExtSize);
        return (ushort)flags;
    }

    /// <summary>xfs_inode_validate_extsize (no realtime section here): why <paramref name="extsize"/> blocks cannot be the hint, or null.</summary>
    private string? ExtSizeProblem(ulong extsize, bool dir, bool reg, ushort flags)
    {
        bool hint = (flags & DiExtSize) != 0, inherit = (flags & DiExtSzInherit) != 0;
        if ((hint || inherit) && !dir && !reg) return "an extent size hint is for files and directories";
        if (hint && !reg) return "an extent size hint is for regular files";
        if (inherit && !dir) return "an inherited extent size hint is for directories";
        if ((hint || inherit) && extsize == 0) return "an extent size hint flag needs a hint";
        if (!(hint || inherit) && extsize != 0) return "an extent size hint needs its flag";
        if (extsize > MaxExtentLength) return $"the extent size hint of {extsize} blocks is longer than an extent can be";
        if (extsize > _mount.Superblock.AgBlocks / 2) return $"the extent size hint of {extsize} blocks is more than half an allocation group";
        return null;
    }

    /// <summary>xfs_inode_validate_cowextsize: why <paramref name="cowextsize"/> blocks cannot be the copy-on-write hint, or null.</summary>
    private string? CowExtSizeProblem(ulong cowextsize, bool dir, bool reg, ushort flags, ulong flags2)
    {
        bool hint = (flags2 & DinodeView.Flag2CowExtSize) != 0;
        if (hint && !_mount.Superblock.HasReflink) return "a copy-on-write extent size hint needs a reflink volume";
        if (hint && !dir && !reg) return "a copy-on-write extent size hint is for files and directories";
        if (hint && cowextsize == 0) return "a copy-on-write extent size hint flag needs a hint";
        if (!hint && cowextsize != 0) return "a copy-on-write extent size hint needs its flag";
        if (hint && (flags & DinodeView.FlagRealtime) != 0) return "a realtime file has no copy-on-write extent size hint";
        if (cowextsize > MaxExtentLength) return $"the copy-on-write extent size hint of {cowextsize} blocks is longer than an extent can be";
        if (cowextsize > _mount.Superblock.AgBlocks / 2) return $"the copy-on-write extent size hint of {cowextsize} blocks is more than half an allocation group";
        return null;
    }

    /// <summary>
    /// xfs_inode_inherit_flags and _flags2: what a new regular file or directory takes from its parent's flags and hints
    /// (hints that would not pass the inode verifier are dropped, as the kernel does).
    /// </summary>
    private void InheritFlags(InodeUpdate child, Inode parent, bool isDir)
    {
        ushort pf = parent.Attributes.Flags;
        var pd = new DinodeView(parent.Raw);
        const ushort Sync = 0x20, NoAtime = 0x40, NoDump = 0x80, NoDefrag = 0x2000, Filestream = 0x4000;
        ushort flags = (ushort)(pf & (Sync | NoAtime | NoDump | NoSymlinks | NoDefrag | Filestream));
        uint extsize = 0;
        if (isDir)
        {
            flags |= (ushort)(pf & (DiRtInherit | DiProjInherit));
            if ((pf & DiExtSzInherit) != 0) { flags |= DiExtSzInherit; extsize = pd.ExtSize; }
        }
        else if ((pf & DiExtSzInherit) != 0)
        {
            flags |= DiExtSize;
            extsize = pd.ExtSize;
        }
        child.Flags = flags;
        child.ExtentSizeHint = extsize;
        if (ExtSizeProblem(extsize, isDir, !isDir, flags) is not null)
        {
            child.Flags = (ushort)(flags & ~(DiExtSize | DiExtSzInherit));
            child.ExtentSizeHint = 0;
        }
        if (!_mount.Superblock.IsV5) return;
        ulong pf2 = parent.Attributes.Flags2;
        ulong flags2 = child.Flags2 | (pf2 & DinodeView.Flag2Dax);
        uint cow = 0;
        if ((pf2 & DinodeView.Flag2CowExtSize) != 0) { flags2 |= DinodeView.Flag2CowExtSize; cow = CowExtSizeOf(parent); }
        if (CowExtSizeProblem(cow, isDir, !isDir, child.Flags, flags2) is not null)
        {
            flags2 &= ~DinodeView.Flag2CowExtSize;
            cow = 0;
        }
        child.Flags2 = flags2;
        child.CowExtentSizeHint = cow;
    }

    private const ushort NoSymlinks = DiNoSymlinks;
}

public sealed partial class XfsVolume
{
    /// <summary>
    /// The VFS's rules for immutable and append-only inodes (IS_IMMUTABLE, IS_APPEND), kept by the engine because the
    /// hosts' kernels (FUSE, WinFsp) do not know the flags: an immutable inode refuses every change of its data, names,
    /// attributes and extended attributes; an append-only one refuses the same except appending (and, for a directory,
    /// adding names). <see cref="XfsError.NotPermitted"/> (EPERM).
    /// </summary>
    private static void RefuseIfLocked(Inode node, string change, bool appendAllowed = false)
    {
        ushort f = node.Attributes.Flags;
        if ((f & DiImmutable) != 0)
            throw new XfsException(XfsError.NotPermitted, $"inode {node.Number} is immutable: {change} is not allowed");
        if ((f & DiAppend) != 0 && !appendAllowed)
            throw new XfsException(XfsError.NotPermitted, $"inode {node.Number} is append-only: {change} is not allowed");
    }

    /// <summary>xfs_link and xfs_rename: an inode enters a project-inheriting directory only from its project (EXDEV).</summary>
    private static void RefuseOtherProject(Inode dir, Inode node)
    {
        if ((dir.Attributes.Flags & DiProjInherit) != 0 && dir.Attributes.ProjectId != node.Attributes.ProjectId)
            throw new XfsException(XfsError.CrossDevice,
                $"inode {node.Number} belongs to project {node.Attributes.ProjectId}, directory {dir.Number} to project {dir.Attributes.ProjectId}");
    }
}

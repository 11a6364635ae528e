using System.Runtime.InteropServices;
using System.Text;
using XfsWin.Attributes;
using XfsWin.Format;
using XfsWin.Fuse.Interop;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Fuse;

// The write side of the FUSE host: the requests a read-write mount serves. Each translates one
// request into one engine call (XfsVolume.Namespace / Write) and its result into the reply; the
// engine decides everything else (permissions are the kernel's, see OnInit; setgid directories,
// link counts, timestamps are the engine's).
//
// Lookup counts: every positive entry the kernel receives (lookup, readdirplus, create, mknod,
// mkdir, symlink, link) raises the kernel's lookup count of that node by one, and FORGET /
// BATCH_FORGET lower it. The host mirrors that count into the engine's holds (Retain before the
// reply, Release on forget), so an inode unlinked while the kernel still knows it (an open file)
// stays allocated until the kernel forgets it. Holds are tracked on read-write volumes only
// (_tracksHolds, fixed when the host is made so that every Retain has its Release).
//
// Cached state: the kernel updates its own copies for requests it sends (it drops the attributes
// of the inodes and directories a namespace request touched, and the lookup cache of the names).
// Where one of our operations changes an inode the kernel may hold under another name (the link
// count of a hard-linked file that was unlinked, linked or renamed over, a directory whose ".."
// moved), the host also drops that inode's cached attributes (InvalidateAttributes). Entry
// invalidations are never sent from inside a request: the kernel holds the parent directory's lock
// while it waits for the reply, and an entry notification takes that lock.
public sealed unsafe partial class FuseHost
{
    private const int EROFS = 30, EOPNOTSUPP = 95;

    /// <summary>Holds are taken and released only on read-write volumes (fixed at construction).</summary>
    private bool TracksHolds => _tracksHolds;

    /// <summary>
    /// Replies with a positive entry for <paramref name="a"/>; the engine's hold for the kernel's
    /// lookup count is taken first (a FORGET could follow the reply at once) and given back when the
    /// reply did not reach the kernel (the request was interrupted: the kernel counts nothing then).
    /// </summary>
    private void ReplyEntry(nint req, in InodeAttributes a)
    {
        FuseEntryParam e;
        FillEntry(a, &e);
        if (TracksHolds)
            _volume.Retain(a.Inode);
        if (FuseNative.fuse_reply_entry(req, &e) != 0 && TracksHolds)
            _volume.Release(a.Inode);
    }

    /// <summary>Drops the kernel's cached attributes of these inodes (not their pages); unknown nodes are ignored.</summary>
    private void InvalidateAttributes(ulong a, ulong b = 0, ulong c = 0)
    {
        var session = _session;
        if (session == 0)
            return;
        foreach (var inode in (ReadOnlySpan<ulong>)[a, b, c])
        {
            if (inode != 0)
                _ = FuseNative.fuse_lowlevel_notify_inval_inode(session, ToNodeId(inode), -1, 0);
        }
    }

    private static ReadOnlySpan<byte> NameOf(byte* name) => MemoryMarshal.CreateReadOnlySpanFromNullTerminated(name);

    private static string Printable(byte* name) => Encoding.UTF8.GetString(NameOf(name));

    private static FuseContext CallerOf(nint req) => *FuseNative.fuse_req_ctx(req);

    /// <summary>
    /// The mode a create, mknod or mkdir makes its inode with and the ACLs it sets on it afterwards, from the directory's
    /// default ACL or the caller's umask (the VFS's posix_acl_create, which FUSE leaves to the server: with
    /// FUSE_CAP_DONT_MASK the kernel passes the mode unmasked and the umask beside it). Without that capability the
    /// kernel has applied the umask already.
    /// </summary>
    private InheritedAcls InheritAcls(ulong directory, uint mode, FuseContext caller) =>
        _volume.InheritAcls(directory, (ushort)mode, _umaskToServer ? caller.umask : 0);

    /// <summary>glibc's major()/minor() of a dev_t (the inverse of <see cref="MakeDev"/>).</summary>
    internal static (uint Major, uint Minor) SplitDev(ulong dev) =>
        ((uint)(((dev >> 8) & 0xFFF) | ((dev >> 32) & 0xFFFFF000)), (uint)((dev & 0xFF) | ((dev >> 12) & 0xFFFFFF00)));

    /// <summary>The current time as a timestamp (for UTIME_NOW).</summary>
    private static XfsTimestamp Now()
    {
        var ticks = DateTime.UtcNow.Ticks - DateTime.UnixEpoch.Ticks;
        return new XfsTimestamp(ticks / TimeSpan.TicksPerSecond, (uint)(ticks % TimeSpan.TicksPerSecond * 100));
    }

    /// <summary>
    /// What a setattr request asks for, from libfuse's struct stat (in this architecture's layout)
    /// and the FUSE_SET_ATTR_* bits: UTIME_OMIT leaves a time out of the request, UTIME_NOW comes as
    /// ATIME_NOW / MTIME_NOW. Null when nothing the volume stores is asked for (ctime alone, say).
    /// </summary>
    internal static AttributeChanges? ChangesFor(void* stat, int toSet, Func<XfsTimestamp> now)
    {
        uint mode, uid, gid;
        long size, aSec, aNsec, mSec, mNsec;
        if (StatAbi.IsArm64)
        {
            var s = (NativeStatArm64*)stat;
            (mode, uid, gid, size, aSec, aNsec, mSec, mNsec) = (s->st_mode, s->st_uid, s->st_gid, s->st_size, s->st_atim_sec, s->st_atim_nsec, s->st_mtim_sec, s->st_mtim_nsec);
        }
        else
        {
            var s = (NativeStat*)stat;
            (mode, uid, gid, size, aSec, aNsec, mSec, mNsec) = (s->st_mode, s->st_uid, s->st_gid, s->st_size, s->st_atim_sec, s->st_atim_nsec, s->st_mtim_sec, s->st_mtim_nsec);
        }
        const int Relevant = FuseConstants.FUSE_SET_ATTR_MODE | FuseConstants.FUSE_SET_ATTR_UID | FuseConstants.FUSE_SET_ATTR_GID |
                             FuseConstants.FUSE_SET_ATTR_SIZE | FuseConstants.FUSE_SET_ATTR_ATIME | FuseConstants.FUSE_SET_ATTR_MTIME |
                             FuseConstants.FUSE_SET_ATTR_ATIME_NOW | FuseConstants.FUSE_SET_ATTR_MTIME_NOW;
        if ((toSet & Relevant) == 0)
            return null;
        XfsTimestamp? stamp = null;
        XfsTimestamp Stamp() => stamp ??= now();
        return new AttributeChanges
        {
            Mode = (toSet & FuseConstants.FUSE_SET_ATTR_MODE) != 0 ? (ushort)(mode & 0xFFF) : null,
            Uid = (toSet & FuseConstants.FUSE_SET_ATTR_UID) != 0 ? uid : null,
            Gid = (toSet & FuseConstants.FUSE_SET_ATTR_GID) != 0 ? gid : null,
            Size = (toSet & FuseConstants.FUSE_SET_ATTR_SIZE) != 0 ? size : null,
            AccessTime = (toSet & FuseConstants.FUSE_SET_ATTR_ATIME_NOW) != 0 ? Stamp()
                : (toSet & FuseConstants.FUSE_SET_ATTR_ATIME) != 0 ? new XfsTimestamp(aSec, (uint)aNsec) : null,
            ModifyTime = (toSet & FuseConstants.FUSE_SET_ATTR_MTIME_NOW) != 0 ? Stamp()
                : (toSet & FuseConstants.FUSE_SET_ATTR_MTIME) != 0 ? new XfsTimestamp(mSec, (uint)mNsec) : null,
            // Both NOW bits: utimes(NULL) or both UTIME_NOW (the kernel's FUSE sends MTIME_NOW without a writeback cache).
            TimesAreNow = (toSet & (FuseConstants.FUSE_SET_ATTR_ATIME_NOW | FuseConstants.FUSE_SET_ATTR_MTIME_NOW)) ==
                          (FuseConstants.FUSE_SET_ATTR_ATIME_NOW | FuseConstants.FUSE_SET_ATTR_MTIME_NOW),
        };
    }

    /// <summary>
    /// The times a truncate sets, which the kernel's FUSE leaves to the server (it sends no FATTR_MTIME for ftruncate or
    /// open(O_TRUNC), so that the server's clock sets them): ftruncate (the request names the open file) and open(O_TRUNC)
    /// set the modification and change times as the VFS's do_truncate asks the kernel's XFS to, truncate(2) sets none
    /// (then the engine changes a time only when the size moves). With atomic_o_trunc, open(O_TRUNC) truncates in its
    /// open request (<see cref="TruncateAtOpen"/>). Without it (<paramref name="openTruncatesHere"/>) the truncate of
    /// open(O_TRUNC) comes here as a setattr of size 0 that names no file, as truncate(2) to 0 does; it is taken for the
    /// open, the common case, whose truncate also takes setuid and setgid from an empty file that the kernel's XFS
    /// leaves alone when truncate(2) empties an empty file.
    /// </summary>
    internal static AttributeChanges? WithTruncateTimes(AttributeChanges? changes, bool hasFileHandle, bool openTruncatesHere, Func<XfsTimestamp> now) =>
        changes is { Size: long size, ModifyTime: null, TimesAreNow: false } && (hasFileHandle || (size == 0 && openTruncatesHere))
            ? changes with { ModifyTime = now() }
            : changes;

    /// <summary>
    /// The truncate of open(O_TRUNC) (with atomic_o_trunc, in the open request): to size 0 with the modification and
    /// change times, as the VFS's handle_truncate asks the kernel's XFS (which sets them even when the file was empty),
    /// and without setuid and setgid when the kernel marked the open FUSE_OPEN_KILL_SUIDGID (no CAP_FSETID).
    /// </summary>
    private void TruncateAtOpen(FuseContext caller, ulong inode)
    {
        var changes = new AttributeChanges { Size = 0, ModifyTime = Now() };
        if (t_requestKillsSuidgid)
            changes = WithoutSetuidSetgid(caller, inode, changes, callerPrivileged: false);
        _volume.SetAttributes(inode, changes);
    }

    /// <summary>
    /// The engine's fallocate mode for fallocate(2)'s bits, or null for a combination it has no
    /// mode for. FUSE passes only KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE (the kernel refuses the rest
    /// itself); ZERO_RANGE with KEEP_SIZE is served by the caller in two steps.
    /// </summary>
    internal static FallocateMode? AllocateModeFor(int mode) => mode switch
    {
        0 => FallocateMode.Allocate,
        FuseConstants.FALLOC_FL_KEEP_SIZE => FallocateMode.KeepSize,
        FuseConstants.FALLOC_FL_PUNCH_HOLE | FuseConstants.FALLOC_FL_KEEP_SIZE => FallocateMode.PunchHole,
        FuseConstants.FALLOC_FL_ZERO_RANGE => FallocateMode.ZeroRange,
        FuseConstants.FALLOC_FL_COLLAPSE_RANGE => FallocateMode.CollapseRange,
        FuseConstants.FALLOC_FL_INSERT_RANGE => FallocateMode.InsertRange,
        _ => null,
    };

    private static void AddWriteOps(ref FuseLowLevelOps ops)
    {
        ops.forget = (nint)(delegate* unmanaged<nint, ulong, ulong, void>)&OnForget;
        ops.forget_multi = (nint)(delegate* unmanaged<nint, nuint, FuseForgetData*, void>)&OnForgetMulti;
        ops.setattr = (nint)(delegate* unmanaged<nint, ulong, void*, int, FuseFileInfo*, void>)&OnSetAttr;
        ops.mknod = (nint)(delegate* unmanaged<nint, ulong, byte*, uint, ulong, void>)&OnMknod;
        ops.mkdir = (nint)(delegate* unmanaged<nint, ulong, byte*, uint, void>)&OnMkdir;
        ops.unlink = (nint)(delegate* unmanaged<nint, ulong, byte*, void>)&OnUnlink;
        ops.rmdir = (nint)(delegate* unmanaged<nint, ulong, byte*, void>)&OnRmdir;
        ops.symlink = (nint)(delegate* unmanaged<nint, byte*, ulong, byte*, void>)&OnSymlink;
        ops.rename = (nint)(delegate* unmanaged<nint, ulong, byte*, ulong, byte*, uint, void>)&OnRename;
        ops.link = (nint)(delegate* unmanaged<nint, ulong, ulong, byte*, void>)&OnLink;
        ops.write = (nint)(delegate* unmanaged<nint, ulong, byte*, nuint, long, FuseFileInfo*, void>)&OnWrite;
        // No flush: every write reached the engine before close(2), so a flush has nothing to do. libfuse answers
        // ENOSYS, after which the kernel stops sending FLUSH at every close (one round trip less per file).
        ops.release = (nint)(delegate* unmanaged<nint, ulong, FuseFileInfo*, void>)&OnRelease;
        ops.fsync = (nint)(delegate* unmanaged<nint, ulong, int, FuseFileInfo*, void>)&OnFsync;
        ops.fsyncdir = (nint)(delegate* unmanaged<nint, ulong, int, FuseFileInfo*, void>)&OnFsync;
        ops.setxattr = (nint)(delegate* unmanaged<nint, ulong, byte*, byte*, nuint, int, void>)&OnSetXattr;
        ops.removexattr = (nint)(delegate* unmanaged<nint, ulong, byte*, void>)&OnRemoveXattr;
        ops.create = (nint)(delegate* unmanaged<nint, ulong, byte*, uint, FuseFileInfo*, void>)&OnCreate;
        ops.fallocate = (nint)(delegate* unmanaged<nint, ulong, int, long, long, FuseFileInfo*, void>)&OnFallocate;
        ops.copy_file_range = (nint)(delegate* unmanaged<nint, ulong, long, FuseFileInfo*, ulong, long, FuseFileInfo*, nuint, int, void>)&OnCopyFileRange;
    }

    [UnmanagedCallersOnly]
    private static void OnForget(nint req, ulong ino, ulong nlookup)
    {
        try
        {
            HostOf(req).Forget(ino, nlookup);
        }
        catch (Exception ex)
        {
            LogForgetFailure(req, ex, ino);
        }
        FuseNative.fuse_reply_none(req);
    }

    [UnmanagedCallersOnly]
    private static void OnForgetMulti(nint req, nuint count, FuseForgetData* forgets)
    {
        for (nuint i = 0; i < count; i++)
        {
            try
            {
                HostOf(req).Forget(forgets[i].ino, forgets[i].nlookup);
            }
            catch (Exception ex)
            {
                LogForgetFailure(req, ex, forgets[i].ino);
            }
        }
        FuseNative.fuse_reply_none(req);
    }

    private void Forget(ulong nodeId, ulong nlookup)
    {
        // The root's count is the kernel's own, never raised by a reply of ours.
        if (TracksHolds && nodeId != FuseConstants.FUSE_ROOT_ID && nlookup > 0)
            _volume.Release(ToXfsInode(nodeId), nlookup);
    }

    private static void LogForgetFailure(nint req, Exception ex, ulong ino) => LogUnansweredFailure(req, ex, "forget", ino);

    /// <summary>Logs the failure of a request whose reply cannot carry an error (forget, release).</summary>
    private static void LogUnansweredFailure(nint req, Exception ex, string operation, ulong ino)
    {
        try
        {
            var host = HostOf(req);
            _ = host.ErrnoFor(ex, operation, host.ToXfsInode(ino));
        }
        catch (Exception)
        {
            // Nothing more can be done: the reply carries no error.
        }
    }

    [UnmanagedCallersOnly]
    private static void OnSetAttr(nint req, ulong ino, void* attr, int toSet, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            var inode = host.ToXfsInode(ino);
            var changes = WithTruncateTimes(ChangesFor(attr, toSet, Now), hasFileHandle: fi != null, openTruncatesHere: !host._truncatesAtOpen, Now);
            // FATTR_KILL_SUIDGID: a truncate by a caller without CAP_FSETID, or a chown (for every caller).
            if (changes is not null && (toSet & FuseConstants.FUSE_SET_ATTR_KILL_SUID) != 0)
                changes = host.WithoutSetuidSetgid(CallerOf(req), inode, changes,
                    callerPrivileged: changes.Size is null && CallerOf(req).uid == 0);
            // Only root may give files away freely: other callers' chown/chgrp is held to the new owner's quota (the
            // kernel's CAP_FOWNER test, approximated by the caller's uid).
            if (changes is not null && (changes.Uid is not null || changes.Gid is not null) && CallerOf(req).uid != 0)
                changes = changes with { CheckQuota = true };
            var result = changes is null ? host._volume.GetAttributes(inode) : host._volume.SetAttributes(inode, changes);
            NativeStat st;
            host.FillStat(result, &st);
            FuseNative.fuse_reply_attr(req, &st, host._options.AttributeTimeout);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "setattr", ino);
        }
    }

    /// <summary>
    /// Set (on the serving thread, before libfuse parses the request) when the FUSE_WRITE being served carries
    /// FUSE_WRITE_KILL_SUIDGID, or the FUSE_OPEN being served FUSE_OPEN_KILL_SUIDGID (an open with O_TRUNC): the caller
    /// has no CAP_FSETID and the file may have setuid or setgid to lose.
    /// </summary>
    [ThreadStatic] internal static bool t_requestKillsSuidgid;

    /// <summary>
    /// With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves setuid and setgid to the server: it marks a write
    /// (FUSE_WRITE_KILL_SUIDGID) or a truncate (FATTR_KILL_SUIDGID) by a caller without CAP_FSETID, and every chown of a
    /// file (FATTR_KILL_SUIDGID); it still removes security.capability itself. As the kernel's XFS does
    /// (setattr_should_drop_suidgid): setuid goes, and setgid when the file is group-executable or when the caller,
    /// not privileged, is not in the file's group. A chown's or truncate's bits go in its own change.
    /// </summary>
    internal AttributeChanges WithoutSetuidSetgid(FuseContext caller, ulong inode, AttributeChanges changes, bool callerPrivileged)
    {
        var current = _volume.GetAttributes(inode);
        if ((current.Mode & 0xF000) == 0x4000) return changes; // directories keep theirs
        uint mode = changes.Mode ?? (current.Mode & 0xFFF);
        uint kill = KillBits(caller, mode, current.Gid, callerPrivileged);
        return kill == 0 ? changes : changes with { Mode = (ushort)(mode & ~kill) };
    }

    /// <summary>A marked write's part of <see cref="WithoutSetuidSetgid"/>: a change of the mode alone, before the write.</summary>
    internal void KillSetuidSetgid(FuseContext caller, ulong inode, bool callerPrivileged)
    {
        var current = _volume.GetAttributes(inode);
        uint mode = current.Mode & 0xFFF;
        uint kill = KillBits(caller, mode, current.Gid, callerPrivileged);
        if (kill != 0) _volume.SetAttributes(inode, new AttributeChanges { Mode = (ushort)(mode & ~kill) });
    }

    /// <summary>
    /// fallocate and copy_file_range (into the file): the kernel's XFS takes setuid and setgid from a caller without
    /// CAP_FSETID here too (file_modified), but with FUSE_HANDLE_KILLPRIV_V2 the kernel's FUSE neither does it nor marks
    /// the request, so the host does, counting root (uid 0) as the holder of CAP_FSETID.
    /// </summary>
    internal void KillSetuidSetgidUnmarked(FuseContext caller, ulong inode)
    {
        if (caller.uid != 0 && _killPrivilegesNegotiated)
            KillSetuidSetgid(caller, inode, callerPrivileged: false);
    }

    private static uint KillBits(FuseContext caller, uint mode, uint gid, bool callerPrivileged) =>
        XfsVolume.SetuidSetgidToDrop(mode, gid, callerPrivileged, g => CallerGroups(caller).Contains(g));

    [UnmanagedCallersOnly]
    private static void OnMknod(nint req, ulong parent, byte* name, uint mode, ulong rdev)
    {
        try
        {
            var host = HostOf(req);
            var caller = CallerOf(req);
            var (major, minor) = SplitDev(rdev);
            var directory = host.ToXfsInode(parent);
            var inherit = host.InheritAcls(directory, mode, caller);
            var a = host._volume.CreateNode(directory, NameOf(name), inherit.Mode, caller.uid, caller.gid, major, minor);
            a = host._volume.SetInheritedAcls(directory, NameOf(name), a, inherit);
            host.ReplyEntry(req, a);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"mknod of '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnCreate(nint req, ulong parent, byte* name, uint mode, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            var caller = CallerOf(req);
            var directory = host.ToXfsInode(parent);
            var inherit = host.InheritAcls(directory, mode, caller);
            var a = host._volume.CreateNode(directory, NameOf(name), inherit.Mode, caller.uid, caller.gid);
            a = host._volume.SetInheritedAcls(directory, NameOf(name), a, inherit);
            FuseEntryParam e;
            host.FillEntry(a, &e);
            fi->bits |= FileOpenBits(host._options.ReadOnly);
            fi->fh = (ulong)(uint)fi->flags; // as OnOpen

            if (host.TracksHolds)
                host._volume.Retain(a.Inode);
            if (FuseNative.fuse_reply_create(req, &e, fi) != 0 && host.TracksHolds)
                host._volume.Release(a.Inode);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"create of '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnMkdir(nint req, ulong parent, byte* name, uint mode)
    {
        try
        {
            var host = HostOf(req);
            var caller = CallerOf(req);
            // The VFS passes permission bits (with setgid and sticky); the type is the engine's.
            var directory = host.ToXfsInode(parent);
            var inherit = host.InheritAcls(directory, 0x4000 | (mode & 0xFFF), caller);
            var a = host._volume.MakeDirectory(directory, NameOf(name), (ushort)(inherit.Mode & 0xFFF), caller.uid, caller.gid);
            a = host._volume.SetInheritedAcls(directory, NameOf(name), a, inherit);
            host.ReplyEntry(req, a);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"mkdir of '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnSymlink(nint req, byte* target, ulong parent, byte* name)
    {
        try
        {
            var host = HostOf(req);
            var caller = CallerOf(req);
            var a = host._volume.MakeSymlink(host.ToXfsInode(parent), NameOf(name), NameOf(target), caller.uid, caller.gid);
            host.ReplyEntry(req, a);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"symlink '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnLink(nint req, ulong ino, ulong newParent, byte* newName)
    {
        try
        {
            var host = HostOf(req);
            var a = host._volume.Link(host.ToXfsInode(ino), host.ToXfsInode(newParent), NameOf(newName));
            host.InvalidateAttributes(a.Inode);
            host.ReplyEntry(req, a);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"link as '{Printable(newName)}' of inode", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnUnlink(nint req, ulong parent, byte* name)
    {
        try
        {
            var host = HostOf(req);
            var dir = host.ToXfsInode(parent);
            var nameSpan = NameOf(name);
            host._volume.TryLookup(dir, nameSpan, out var victim);
            host._volume.Unlink(dir, nameSpan);
            host.InvalidateAttributes(victim);
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"unlink of '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnRmdir(nint req, ulong parent, byte* name)
    {
        try
        {
            var host = HostOf(req);
            host._volume.RemoveDirectory(host.ToXfsInode(parent), NameOf(name));
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"rmdir of '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnRename(nint req, ulong parent, byte* name, ulong newParent, byte* newName, uint flags)
    {
        try
        {
            var host = HostOf(req);
            const uint Known = FuseConstants.RENAME_NOREPLACE | FuseConstants.RENAME_EXCHANGE | FuseConstants.RENAME_WHITEOUT;
            if ((flags & ~Known) != 0)
            {
                FuseNative.fuse_reply_err(req, 22); // EINVAL, as renameat2 answers unknown flags
                return;
            }
            var from = host.ToXfsInode(parent);
            var to = host.ToXfsInode(newParent);
            var newNameSpan = NameOf(newName);
            // The inode a replacing rename (or an exchange) takes the name of loses a link or moves:
            // the kernel may hold its attributes under another name.
            host._volume.TryLookup(to, newNameSpan, out var displaced);
            host._volume.TryLookup(from, NameOf(name), out var moved);
            var caller = CallerOf(req);
            host._volume.Rename(from, NameOf(name), to, newNameSpan, (RenameFlags)flags, caller.uid, caller.gid);
            host.InvalidateAttributes(displaced, moved);
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"rename of '{Printable(name)}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnWrite(nint req, ulong ino, byte* buf, nuint size, long offset, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            var inode = host.ToXfsInode(ino);
            if (t_requestKillsSuidgid)
                host.KillSetuidSetgid(CallerOf(req), inode, callerPrivileged: false);
            var total = (int)Math.Min(size, (nuint)int.MaxValue);
            var done = 0;
            while (done < total)
            {
                int n;
                try
                {
                    n = host._volume.Write(inode, offset + done, new ReadOnlySpan<byte>(buf + done, total - done));
                }
                catch (XfsException e) when (done > 0 && e.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
                {
                    // A write stopped short by a quota limit (or a full volume) answers what it wrote, as write(2) does.
                    break;
                }
                if (n <= 0)
                    break;
                done += n;
            }
            FuseNative.fuse_reply_write(req, (nuint)done);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "write", ino);
        }
    }

    /// <summary>
    /// The last close of an open file (the open's flags are in fh, see OnOpen): a writable one lets the engine give back
    /// blocks past EOF (xfs_file_release); the node's hold lives until FORGET.
    /// </summary>
    [UnmanagedCallersOnly]
    private static void OnRelease(nint req, ulong ino, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            const ulong AccessMode = 3, ReadOnly = 0;
            host._volume.CloseFile(host.ToXfsInode(ino), writable: (fi->fh & AccessMode) != ReadOnly);
        }
        catch (Exception ex)
        {
            // close(2) has already returned: the failure is logged (a failed transaction has shut the volume down), and
            // blocks left past EOF go at unmount.
            LogUnansweredFailure(req, ex, "release", ino);
        }
        FuseNative.fuse_reply_err(req, 0);
    }

    /// <summary>fsync, fdatasync and fsync of a directory: the engine's changes so far become durable.</summary>
    [UnmanagedCallersOnly]
    private static void OnFsync(nint req, ulong ino, int datasync, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            host._volume.Flush(host.ToXfsInode(ino));
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "fsync", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnFallocate(nint req, ulong ino, int mode, long offset, long length, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            var inode = host.ToXfsInode(ino);
            host.KillSetuidSetgidUnmarked(CallerOf(req), inode);
            if (mode == (FuseConstants.FALLOC_FL_ZERO_RANGE | FuseConstants.FALLOC_FL_KEEP_SIZE))
            {
                // No engine mode: zeros inside EOF, preallocation (unwritten, reading as zeros) past it.
                var size = host._volume.GetAttributes(inode).Size;
                var end = offset + length;
                if (offset < size)
                    host._volume.Allocate(inode, offset, Math.Min(end, size) - offset, FallocateMode.ZeroRange);
                if (end > size)
                    host._volume.Allocate(inode, Math.Max(offset, size), end - Math.Max(offset, size), FallocateMode.KeepSize);
            }
            else if (AllocateModeFor(mode) is { } m)
            {
                host._volume.Allocate(inode, offset, length, m);
            }
            else
            {
                FuseNative.fuse_reply_err(req, EOPNOTSUPP);
                return;
            }
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "fallocate", ino);
        }
    }

    /// <summary>
    /// FUSE_COPY_FILE_RANGE: the engine's copy_file_range, which shares blocks where the volume has reflink and both
    /// offsets are block-aligned (as the kernel's XFS does) and copies bytes otherwise. The kernel has already checked
    /// the VFS's rules (flags, open modes, overlap, EOF clamping against its cached size) and invalidates its cache of
    /// the destination from the count we answer.
    /// </summary>
    [UnmanagedCallersOnly]
    private static void OnCopyFileRange(nint req, ulong inoIn, long offIn, FuseFileInfo* fiIn, ulong inoOut, long offOut, FuseFileInfo* fiOut, nuint len, int flags)
    {
        try
        {
            if (flags != 0)
            {
                FuseNative.fuse_reply_err(req, EINVAL);
                return;
            }
            var host = HostOf(req);
            host.KillSetuidSetgidUnmarked(CallerOf(req), host.ToXfsInode(inoOut));
            var copied = host._volume.CopyFileRange(host.ToXfsInode(inoIn), offIn, host.ToXfsInode(inoOut), offOut, (long)Math.Min((ulong)len, long.MaxValue));
            FuseNative.fuse_reply_write(req, (nuint)copied);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "copy_file_range to", inoOut);
        }
    }

    /// <summary>
    /// A name setxattr/removexattr can address, split as getxattr splits it; POSIX ACL values are
    /// converted from Linux's form to the one XFS stores. False: the reply is already sent.
    /// </summary>
    private static bool TryXattrName(nint req, byte* name, out string linuxName, out XattrNamespace ns, out byte[] xfsName)
    {
        linuxName = Encoding.UTF8.GetString(NameOf(name));
        if (XattrNames.TryParseLinuxName(linuxName, out ns, out xfsName))
            return true;
        // Like the kernel: a name outside the namespaces XFS knows has no handler.
        FuseNative.fuse_reply_err(req, EOPNOTSUPP);
        return false;
    }

    private const uint SetgidBit = 0x400; // S_ISGID

    [UnmanagedCallersOnly]
    private static void OnSetXattr(nint req, ulong ino, byte* name, byte* value, nuint size, int flags)
    {
        try
        {
            var host = HostOf(req);
            if (!TryXattrName(req, name, out var linuxName, out var ns, out var xfsName))
                return;
            var mode = (flags & (FuseConstants.XATTR_CREATE | FuseConstants.XATTR_REPLACE)) switch
            {
                0 => XattrSetMode.Any,
                FuseConstants.XATTR_CREATE => XattrSetMode.Create,
                FuseConstants.XATTR_REPLACE => XattrSetMode.Replace,
                _ => (XattrSetMode?)null,
            };
            if (mode is null || (flags & ~(FuseConstants.XATTR_CREATE | FuseConstants.XATTR_REPLACE)) != 0)
            {
                FuseNative.fuse_reply_err(req, 22); // EINVAL, as setxattr(2) answers both flags or unknown ones
                return;
            }
            var data = new ReadOnlySpan<byte>(value, (int)size);
            byte[]? stored = null;
            var inode = host.ToXfsInode(ino);
            if (linuxName.StartsWith("system.posix_acl_", StringComparison.Ordinal))
            {
                if (!PosixAcl.TryParseLinux(data, out var acl, out var problem))
                    throw new XfsException(XfsError.InvalidArgument, $"{linuxName}: not a POSIX ACL ({problem})");
                // With FUSE_CAP_POSIX_ACL the server keeps the mode in step with the access ACL (the kernel's
                // posix_acl_update_mode, as xfs_set_acl does): an ACL the mode bits express is not stored at all.
                if (linuxName == "system.posix_acl_access" && AccessAclMode(acl!, out bool equivalent) is var bits)
                {
                    if (equivalent)
                    {
                        try
                        {
                            host._volume.RemoveXattr(inode, ns, xfsName);
                        }
                        catch (XfsException e) when (e.Error == XfsError.NoAttribute)
                        {
                        }
                    }
                    else
                    {
                        host._volume.SetXattr(inode, ns, xfsName, acl!.ToXfs(), mode.Value);
                    }
                    var current = host._volume.GetAttributes(inode);
                    uint newMode = (current.Mode & 0xE00) | bits;
                    // posix_acl_update_mode: a caller outside the file's group and without CAP_FSETID (root's, here)
                    // also loses the setgid bit.
                    var caller = CallerOf(req);
                    if ((newMode & SetgidBit) != 0 && caller.uid != 0 && !CallerGroups(caller).Contains(current.Gid)) newMode &= ~SetgidBit;
                    if ((current.Mode & 0xFFF) != newMode)
                        host._volume.SetAttributes(inode, new AttributeChanges { Mode = (ushort)newMode });
                    host.InvalidateAttributes(inode);
                    FuseNative.fuse_reply_err(req, 0);
                    return;
                }
                stored = acl!.ToXfs();
            }
            host._volume.SetXattr(inode, ns, xfsName, stored ?? data, mode.Value);
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "setxattr", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnRemoveXattr(nint req, ulong ino, byte* name)
    {
        try
        {
            var host = HostOf(req);
            if (!TryXattrName(req, name, out var linuxName, out var ns, out var xfsName))
                return;
            try
            {
                host._volume.RemoveXattr(host.ToXfsInode(ino), ns, xfsName);
            }
            // Removing a POSIX ACL the file does not have succeeds (xfs_set_acl ignores ENOATTR for a removal; an access
            // ACL the mode bits express is not stored at all).
            catch (XfsException e) when (e.Error == XfsError.NoAttribute && linuxName.StartsWith("system.posix_acl_", StringComparison.Ordinal))
            {
            }
            FuseNative.fuse_reply_err(req, 0);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "removexattr", ino);
        }
    }

    /// <summary>posix_acl_equiv_mode: the rwx bits an access ACL gives the mode, and whether the mode says all of it.</summary>
    internal static uint AccessAclMode(PosixAcl acl, out bool equivalent)
    {
        uint bits = 0;
        equivalent = true;
        foreach (var e in acl.Entries)
        {
            uint perm = e.Permissions & 7u;
            switch (e.Tag)
            {
                case PosixAclTag.UserObj: bits |= perm << 6; break;
                case PosixAclTag.GroupObj: bits |= perm << 3; break;
                case PosixAclTag.Other: bits |= perm; break;
                case PosixAclTag.Mask: bits = (bits & ~0x38u) | (perm << 3); equivalent = false; break;
                default: equivalent = false; break;
            }
        }
        return bits;
    }
}

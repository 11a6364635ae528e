using System.Runtime.InteropServices;
using XfsWin.Fuse.Interop;
using XfsWin.Volume;

namespace XfsWin.Fuse;

// File ioctls (FUSE_IOCTL). The kernel forwards an ioctl of a FUSE file only in its "restricted" form: the argument's
// size and direction come from the command number, and the kernel copies it in and out. Its own fileattr ioctls
// (FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS) reach us the same way, after the VFS did
// its checks (owner, CAP_LINUX_IMMUTABLE, zero hints clearing their flags); the engine does them again, as a host
// without a VFS needs. Directory ioctls need FUSE_CAP_IOCTL_DIR (asked for in OnInit).
public sealed unsafe partial class FuseHost
{
    // linux/fs.h (the _IOC encoding is the same on x86-64 and arm64).
    internal const uint FS_IOC_GETFLAGS = 0x80086601, FS_IOC_SETFLAGS = 0x40086602;
    internal const uint FS_IOC_FSGETXATTR = 0x801C581F, FS_IOC_FSSETXATTR = 0x401C5820;
    // xfs_fs.h: _IOR('X', 45, struct fsxattr), the attribute fork's extent count in fsx_nextents.
    internal const uint XFS_IOC_FSGETXATTRA = 0x801C582D;
    internal const int FsxattrSize = 28; // struct fsxattr: xflags, extsize, nextents, projid, cowextsize, 8 bytes of padding
    // xfs_fs.h: _IOW('X', 129, struct xfs_exchange_range) (file1_fd, pad, file1_offset, file2_offset, length, flags).
    internal const uint XFS_IOC_EXCHANGE_RANGE = 0x40285881;
    internal const int ExchangeRangeSize = 40;
    // xfs_fs.h: struct xfs_commit_range, the exchange's fields then 48 bytes of file 2's freshness (opaque to callers;
    // laid out as the kernel's xfs_commit_range_fresh: fsid, ino, mtime, ctime, mtime_nsec, ctime_nsec, gen, magic).
    internal const uint XFS_IOC_START_COMMIT = 0x80585882, XFS_IOC_COMMIT_RANGE = 0x40585883;
    internal const int CommitRangeSize = 88;
    private const uint FreshMagic = 0x444F524B;
    private const int EBUSY = 16;
    private const int EBADF = 9, EXDEV = 18;
    private const int ENOTTY = 25;

    [UnmanagedCallersOnly]
    private static void OnIoctl(nint req, ulong ino, uint cmd, void* arg, FuseFileInfo* fi, uint flags, void* inBuf, nuint inSize, nuint outSize)
    {
        try
        {
            var host = HostOf(req);
            var inode = host.ToXfsInode(ino);
            var ctx = CallerOf(req);
            var caller = new FileAttrCaller(ctx.uid, ctx.uid == 0);
            switch (cmd)
            {
                case FS_IOC_FSGETXATTR when outSize >= FsxattrSize:
                    ReplyFsxattr(req, host._volume.GetFileXattr(inode));
                    return;
                case XFS_IOC_FSGETXATTRA when outSize >= FsxattrSize:
                    ReplyFsxattr(req, host._volume.GetFileXattrAttrFork(inode));
                    return;
                case FS_IOC_FSSETXATTR when inSize >= FsxattrSize:
                {
                    var b = new ReadOnlySpan<byte>(inBuf, FsxattrSize);
                    var request = new FileXattr(U32(b, 0), U32(b, 4), U32(b, 8), U32(b, 12), U32(b, 16));
                    host.RefuseOnReadOnlyMount();
                    host._volume.SetFileXattr(inode, request, caller);
                    host.InvalidateAttributes(inode); // ctime, and a mode without setuid/setgid
                    FuseNative.fuse_reply_ioctl(req, 0, null, 0);
                    return;
                }
                // The kernel passes the flags as an int (fuse_fileattr_get/set), whatever the command's size says.
                case FS_IOC_GETFLAGS when outSize >= 4:
                {
                    uint value = host._volume.GetFileFlags(inode);
                    FuseNative.fuse_reply_ioctl(req, 0, &value, 4);
                    return;
                }
                case FS_IOC_SETFLAGS when inSize >= 4:
                    host.RefuseOnReadOnlyMount();
                    host._volume.SetFileFlags(inode, *(uint*)inBuf, caller);
                    host.InvalidateAttributes(inode);
                    FuseNative.fuse_reply_ioctl(req, 0, null, 0);
                    return;
                case XFS_IOC_EXCHANGE_RANGE when inSize >= ExchangeRangeSize:
                {
                    var a = new ReadOnlySpan<byte>(inBuf, ExchangeRangeSize);
                    if (MemoryMarshal.Read<uint>(a[4..]) != 0) throw new FuseErrnoException(EINVAL); // the padding
                    host.RefuseOnReadOnlyMount();
                    host.ExchangeRange(inode, ctx, fi, a, freshness: null);
                    FuseNative.fuse_reply_ioctl(req, 0, null, 0);
                    return;
                }
                case XFS_IOC_START_COMMIT when outSize >= CommitRangeSize:
                {
                    // The kernel writes only the freshness; FUSE copies the whole reply out, so the request's other
                    // fields read back as zeros.
                    var f = host._volume.GetExchangeFreshness(inode);
                    var (fsid0, fsid1) = host._volume.FixedFileSystemId;
                    var b = stackalloc byte[CommitRangeSize];
                    var r = new Span<byte>(b, CommitRangeSize);
                    r.Clear();
                    var fresh = r[ExchangeRangeSize..];
                    MemoryMarshal.Write(fresh, fsid0);
                    MemoryMarshal.Write(fresh[4..], fsid1);
                    MemoryMarshal.Write(fresh[8..], f.Inode);
                    MemoryMarshal.Write(fresh[16..], f.MtimeSeconds);
                    MemoryMarshal.Write(fresh[24..], f.CtimeSeconds);
                    MemoryMarshal.Write(fresh[32..], f.MtimeNanoseconds);
                    MemoryMarshal.Write(fresh[36..], f.CtimeNanoseconds);
                    MemoryMarshal.Write(fresh[40..], f.Generation);
                    MemoryMarshal.Write(fresh[44..], FreshMagic);
                    FuseNative.fuse_reply_ioctl(req, 0, b, CommitRangeSize);
                    return;
                }
                case XFS_IOC_COMMIT_RANGE when inSize >= CommitRangeSize:
                {
                    // xfs_ioc_commit_range's order: flags (EINVAL), then the freshness record's magic and file system
                    // (EBUSY), then file 1; the padding is not checked.
                    var a = new ReadOnlySpan<byte>(inBuf, CommitRangeSize);
                    var fresh = a[ExchangeRangeSize..];
                    if ((MemoryMarshal.Read<ulong>(a[32..]) & ~(ulong)ExchangeRangeFlags.All) != 0) throw new FuseErrnoException(EINVAL);
                    var (fsid0, fsid1) = host._volume.FixedFileSystemId;
                    if (MemoryMarshal.Read<uint>(fresh[44..]) != FreshMagic || MemoryMarshal.Read<uint>(fresh) != fsid0 || MemoryMarshal.Read<uint>(fresh[4..]) != fsid1)
                        throw new FuseErrnoException(EBUSY);
                    var freshness = new ExchangeFreshness(MemoryMarshal.Read<ulong>(fresh[8..]), MemoryMarshal.Read<uint>(fresh[40..]),
                        MemoryMarshal.Read<long>(fresh[16..]), MemoryMarshal.Read<uint>(fresh[32..]), MemoryMarshal.Read<long>(fresh[24..]), MemoryMarshal.Read<uint>(fresh[36..]));
                    host.RefuseOnReadOnlyMount();
                    host.ExchangeRange(inode, ctx, fi, a[..ExchangeRangeSize], freshness);
                    FuseNative.fuse_reply_ioctl(req, 0, null, 0);
                    return;
                }
                case FS_IOC_FSGETXATTR or XFS_IOC_FSGETXATTRA or FS_IOC_FSSETXATTR or FS_IOC_GETFLAGS or FS_IOC_SETFLAGS or XFS_IOC_EXCHANGE_RANGE
                    or XFS_IOC_START_COMMIT or XFS_IOC_COMMIT_RANGE:
                    FuseNative.fuse_reply_err(req, EINVAL);
                    return;
                default:
                    FuseNative.fuse_reply_err(req, ENOTTY);
                    return;
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "ioctl", ino);
        }

        static uint U32(ReadOnlySpan<byte> b, int offset) => MemoryMarshal.Read<uint>(b[offset..]);
    }

    private static void ReplyFsxattr(nint req, FileXattr a)
    {
        var b = stackalloc uint[FsxattrSize / 4];
        new Span<uint>(b, FsxattrSize / 4).Clear();
        (b[0], b[1], b[2], b[3], b[4]) = (a.XFlags, a.ExtentSize, a.ExtentCount, a.ProjectId, a.CowExtentSize);
        FuseNative.fuse_reply_ioctl(req, 0, b, FsxattrSize);
    }

    private void RefuseOnReadOnlyMount()
    {
        if (_options.ReadOnly) throw new XfsException(XfsError.ReadOnly, "the volume is mounted read-only");
    }
}

public sealed unsafe partial class FuseHost
{
    private const int EPERM = 1;

    private const int O_ACCMODE = 3, O_TRUNC = 0x200; // O_TRUNC is 01000 on x86-64 and arm64

    /// <summary>An open for writing, or one that truncates (O_TRUNC asks for write permission too).</summary>
    internal static bool OpensForChange(int openFlags) => (openFlags & O_ACCMODE) != 0 || (openFlags & O_TRUNC) != 0;

    /// <summary>
    /// may_open's rules for an open that <see cref="OpensForChange"/>: an immutable file is not opened so, an
    /// append-only one only with O_APPEND and never truncated.
    /// </summary>
    internal static bool LockedAgainstOpen(ushort diFlags, int openFlags)
    {
        const ushort Immutable = 0x8, Append = 0x10;
        const int O_APPEND = 0x400; // 02000 on x86-64 and arm64
        return (diFlags & Immutable) != 0 || ((diFlags & Append) != 0 && ((openFlags & O_APPEND) == 0 || (openFlags & O_TRUNC) != 0));
    }

    private string? _mountDevice;

    /// <summary>
    /// XFS_IOC_EXCHANGE_RANGE and XFS_IOC_COMMIT_RANGE (with <paramref name="freshness"/>) on file 2 (the ioctl's file). File 1 is a descriptor of the calling process: the kernel
    /// passes only the number, so its file is found through /proc/PID/fd and /proc/PID/fdinfo (its inode, device and
    /// open flags; statx without sync, so no request comes back to this server). As the kernel's XFS: both files on
    /// this mount (EXDEV), both open for reading and writing and neither with O_APPEND (EBADF), no padding (EINVAL);
    /// the rest is the engine's.
    /// </summary>
    private void ExchangeRange(ulong inode2, FuseContext caller, FuseFileInfo* fi, ReadOnlySpan<byte> arg, ExchangeFreshness? freshness)
    {
        const int O_ACCMODE = 3, O_RDWR = 2, O_APPEND = 0x400;
        int fd1 = MemoryMarshal.Read<int>(arg);
        long offset1 = MemoryMarshal.Read<long>(arg[8..]), offset2 = MemoryMarshal.Read<long>(arg[16..]), length = MemoryMarshal.Read<long>(arg[24..]);
        ulong flags = MemoryMarshal.Read<ulong>(arg[32..]);
        if ((flags & ~(ulong)ExchangeRangeFlags.All) != 0) throw new FuseErrnoException(EINVAL);
        if (fd1 < 0 || caller.pid <= 0) throw new FuseErrnoException(EBADF);
        string fdinfo;
        try
        {
            fdinfo = File.ReadAllText($"/proc/{caller.pid}/fdinfo/{fd1}");
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw new FuseErrnoException(EBADF);
        }
        int flags1 = 0;
        foreach (var line in fdinfo.Split('\n'))
            if (line.StartsWith("flags:", StringComparison.Ordinal)) flags1 = Convert.ToInt32(line[6..].Trim(), 8);
        var statx = stackalloc byte[256];
        var path = System.Text.Encoding.UTF8.GetBytes($"/proc/{caller.pid}/fd/{fd1}\0");
        int rc;
        fixed (byte* p = path)
            rc = FuseNative.statx(FuseNative.AT_FDCWD, p, FuseNative.AT_STATX_DONT_SYNC, FuseNative.STATX_INO, statx);
        if (rc != 0) throw new FuseErrnoException(EBADF);
        string device = $"{*(uint*)(statx + 136)}:{*(uint*)(statx + 140)}";
        _mountDevice ??= _mountPoint is null ? null : MountDevice(_mountPoint);
        if (device != _mountDevice) throw new FuseErrnoException(EXDEV);
        ulong inode1 = ToXfsInode(*(ulong*)(statx + 32));
        // xfs_exchange_range's order: file types first, then how the files are open.
        foreach (var type in new[] { _volume.GetAttributes(inode1).FileType, _volume.GetAttributes(inode2).FileType })
        {
            if (type == Format.XfsFileType.Directory) throw new XfsException(XfsError.IsADirectory, "a directory's contents cannot be exchanged");
            if (type != Format.XfsFileType.RegularFile) throw new XfsException(XfsError.InvalidArgument, "only regular files' contents can be exchanged");
        }
        int flags2 = (int)fi->fh;
        if ((flags1 & O_ACCMODE) != O_RDWR || (flags2 & O_ACCMODE) != O_RDWR || ((flags1 | flags2) & O_APPEND) != 0)
            throw new FuseErrnoException(EBADF);
        _volume.ExchangeRange(inode1, offset1, inode2, offset2, length, (ExchangeRangeFlags)flags, privileged: caller.uid == 0,
            callerInGroup: CallerGroups(caller).Contains, freshness: freshness);
        // The kernel's caches of both files (pages, sizes, times) are stale now: it does not know what the ioctl did.
        // (It holds no lock of either inode while it waits for this reply.)
        InvalidateCaches(inode1);
        InvalidateCaches(inode2);
    }

    /// <summary>in_group_p's groups of the caller: its file-system gid and its supplementary groups (/proc/PID/status).</summary>
    private static HashSet<uint> CallerGroups(FuseContext caller)
    {
        var groups = new HashSet<uint> { caller.gid };
        try
        {
            foreach (var line in File.ReadLines($"/proc/{caller.pid}/status"))
                if (line.StartsWith("Groups:", StringComparison.Ordinal))
                    foreach (var g in line[7..].Split((char[])[' ', '\t'], StringSplitOptions.RemoveEmptyEntries))
                        groups.Add(uint.Parse(g, System.Globalization.CultureInfo.InvariantCulture));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // The caller is gone: its own gid is all that is known.
        }
        return groups;
    }

    private void InvalidateCaches(ulong inode)
    {
        if (_session != 0) _ = FuseNative.fuse_lowlevel_notify_inval_inode(_session, ToNodeId(inode), 0, 0);
    }
}

/// <summary>An errno a host check decided on its own (no engine error behind it).</summary>
internal sealed class FuseErrnoException(int errno) : Exception($"errno {errno}")
{
    public int Errno { get; } = errno;
}

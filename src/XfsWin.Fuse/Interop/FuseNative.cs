using System.Runtime.InteropServices;

namespace XfsWin.Fuse.Interop;

/// <summary>
/// The slice of libfuse3's low-level API the host uses (fuse_lowlevel.h, fuse_common.h), plus the
/// few libc calls the mount command needs. Every call is blittable: no marshalling stubs run.
/// </summary>
internal static unsafe partial class FuseNative
{
    public const string LibFuse = "libfuse3.so.3";
    private const string LibC = "libc";

    [LibraryImport(LibFuse)]
    public static partial nint fuse_session_new(FuseArgs* args, FuseLowLevelOps* ops, nuint opSize, nint userdata);

    [LibraryImport(LibFuse)]
    public static partial int fuse_session_mount(nint session, byte* mountPoint);

    [LibraryImport(LibFuse)]
    public static partial void fuse_session_unmount(nint session);

    [LibraryImport(LibFuse)]
    public static partial void fuse_session_destroy(nint session);

    [LibraryImport(LibFuse)]
    public static partial int fuse_session_fd(nint session);

    [LibraryImport(LibFuse)]
    public static partial int fuse_version();

    [LibraryImport(LibFuse)]
    public static partial nint fuse_req_userdata(nint req);

    /// <summary>Returns a struct fuse_ctx*: uid, gid, pid, umask of the calling process (4 x 32-bit).</summary>
    [LibraryImport(LibFuse)]
    public static partial FuseContext* fuse_req_ctx(nint req);

    [LibraryImport(LibFuse)]
    public static partial void fuse_opt_free_args(FuseArgs* args);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_err(nint req, int errno);

    [LibraryImport(LibFuse)]
    public static partial void fuse_reply_none(nint req);

    [LibraryImport(LibFuse, EntryPoint = "fuse_reply_entry")]
    private static partial int fuse_reply_entry_native(nint req, void* entry);

    /// <summary>fuse_reply_entry with the entry in its x86-64 form (converted on arm64, see StatAbi).</summary>
    public static int fuse_reply_entry(nint req, FuseEntryParam* entry)
    {
        if (!StatAbi.IsArm64)
            return fuse_reply_entry_native(req, entry);
        var arm = StatAbi.ToArm64(*entry);
        return fuse_reply_entry_native(req, &arm);
    }

    [LibraryImport(LibFuse, EntryPoint = "fuse_reply_attr")]
    private static partial int fuse_reply_attr_native(nint req, void* attr, double attrTimeout);

    /// <summary>fuse_reply_attr with the attributes in their x86-64 form (converted on arm64).</summary>
    public static int fuse_reply_attr(nint req, NativeStat* attr, double attrTimeout)
    {
        if (!StatAbi.IsArm64)
            return fuse_reply_attr_native(req, attr, attrTimeout);
        var arm = StatAbi.ToArm64(*attr);
        return fuse_reply_attr_native(req, &arm, attrTimeout);
    }

    [LibraryImport(LibFuse, EntryPoint = "fuse_reply_create")]
    private static partial int fuse_reply_create_native(nint req, void* entry, FuseFileInfo* fi);

    /// <summary>fuse_reply_create with the entry in its x86-64 form (converted on arm64).</summary>
    public static int fuse_reply_create(nint req, FuseEntryParam* entry, FuseFileInfo* fi)
    {
        if (!StatAbi.IsArm64)
            return fuse_reply_create_native(req, entry, fi);
        var arm = StatAbi.ToArm64(*entry);
        return fuse_reply_create_native(req, &arm, fi);
    }

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_write(nint req, nuint count);

    /// <summary>Drops the kernel's cached attributes of a node (offset &lt; 0) and, from offset on, its cached pages.</summary>
    [LibraryImport(LibFuse)]
    public static partial int fuse_lowlevel_notify_inval_inode(nint session, ulong ino, long offset, long length);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_readlink(nint req, byte* link);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_open(nint req, FuseFileInfo* fi);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_buf(nint req, byte* buf, nuint size);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_statfs(nint req, NativeStatvfs* stats);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_xattr(nint req, nuint count);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_lseek(nint req, long offset);

    [LibraryImport(LibFuse)]
    public static partial int fuse_reply_ioctl(nint req, int result, void* buf, nuint size);

    /// <summary>Packs a plain directory entry (libfuse reads st_ino and st_mode of the architecture's struct stat). The host packs its own; tests measure with this.</summary>
    [LibraryImport(LibFuse)]
    public static partial nuint fuse_add_direntry(nint req, byte* buf, nuint bufSize, byte* name, void* stat, long nextOffset);

    [LibraryImport(LibFuse, EntryPoint = "fuse_add_direntry_plus")]
    private static partial nuint fuse_add_direntry_plus_native(nint req, byte* buf, nuint bufSize, byte* name, void* entry, long nextOffset);

    /// <summary>fuse_add_direntry_plus with the entry in its x86-64 form (converted on arm64).</summary>
    public static nuint fuse_add_direntry_plus(nint req, byte* buf, nuint bufSize, byte* name, FuseEntryParam* entry, long nextOffset)
    {
        if (!StatAbi.IsArm64 || entry == null)
            return fuse_add_direntry_plus_native(req, buf, bufSize, name, entry, nextOffset);
        var arm = StatAbi.ToArm64(*entry);
        return fuse_add_direntry_plus_native(req, buf, bufSize, name, &arm, nextOffset);
    }

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int setsid();

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int umount2(byte* target, int flags);

    [LibraryImport(LibC)]
    public static partial uint geteuid();

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int access(byte* path, int mode);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int open(byte* path, int flags);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int ioctl(int fd, nuint request, void* argument);

    /// <summary>statx(2) into a 256-byte struct statx (stx_ino at 32, stx_dev_major and _minor at 136 and 140).</summary>
    [LibraryImport(LibC, SetLastError = true)]
    public static partial int statx(int dirfd, byte* path, int flags, uint mask, byte* buffer);

    public const int AT_FDCWD = -100, AT_STATX_DONT_SYNC = 0x4000;
    public const uint STATX_INO = 0x100;

    public const int O_RDWR = 2, O_CLOEXEC = 0x80000;
    public const int R_OK = 4;
    public const int W_OK = 2;

    public const int MNT_FORCE = 1;
    public const int MNT_DETACH = 2;
    public const int EBUSY = 16;
}

using System.Runtime.InteropServices;

namespace XfsWin.Fuse.Interop;

// Layouts of the libfuse3 (3.x, FUSE_USE_VERSION 312) and glibc structures the host exchanges with
// native code, for Linux on x86-64 and on arm64 (both LP64). Each one is declared once, here, with
// explicit offsets; tests/XfsWin.Fuse.Tests/NativeLayoutTests compiles a C program against the
// installed headers, natively and with the aarch64 cross compiler, and checks every size and offset
// below against what gcc computes. Only struct stat differs between the two (and with it
// fuse_entry_param, which holds one): the host fills the x86-64 form and StatAbi converts it at the
// calls into libfuse on arm64.

/// <summary>struct stat (glibc, x86-64).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct NativeStat
{
    public const int Size = 144;

    [FieldOffset(0)] public ulong st_dev;
    [FieldOffset(8)] public ulong st_ino;
    [FieldOffset(16)] public ulong st_nlink;
    [FieldOffset(24)] public uint st_mode;
    [FieldOffset(28)] public uint st_uid;
    [FieldOffset(32)] public uint st_gid;
    [FieldOffset(40)] public ulong st_rdev;
    [FieldOffset(48)] public long st_size;
    [FieldOffset(56)] public long st_blksize;
    [FieldOffset(64)] public long st_blocks;
    [FieldOffset(72)] public long st_atim_sec;
    [FieldOffset(80)] public long st_atim_nsec;
    [FieldOffset(88)] public long st_mtim_sec;
    [FieldOffset(96)] public long st_mtim_nsec;
    [FieldOffset(104)] public long st_ctim_sec;
    [FieldOffset(112)] public long st_ctim_nsec;
}

/// <summary>struct stat (glibc, arm64: the kernel's generic layout).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct NativeStatArm64
{
    public const int Size = 128;

    [FieldOffset(0)] public ulong st_dev;
    [FieldOffset(8)] public ulong st_ino;
    [FieldOffset(16)] public uint st_mode;
    [FieldOffset(20)] public uint st_nlink;
    [FieldOffset(24)] public uint st_uid;
    [FieldOffset(28)] public uint st_gid;
    [FieldOffset(32)] public ulong st_rdev;
    [FieldOffset(48)] public long st_size;
    [FieldOffset(56)] public int st_blksize;
    [FieldOffset(64)] public long st_blocks;
    [FieldOffset(72)] public long st_atim_sec;
    [FieldOffset(80)] public long st_atim_nsec;
    [FieldOffset(88)] public long st_mtim_sec;
    [FieldOffset(96)] public long st_mtim_nsec;
    [FieldOffset(104)] public long st_ctim_sec;
    [FieldOffset(112)] public long st_ctim_nsec;
}

/// <summary>struct fuse_entry_param on arm64 (its struct stat is shorter).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseEntryParamArm64
{
    public const int Size = 160;

    [FieldOffset(0)] public ulong ino;
    [FieldOffset(8)] public ulong generation;
    [FieldOffset(16)] public NativeStatArm64 attr;
    [FieldOffset(144)] public double attr_timeout;
    [FieldOffset(152)] public double entry_timeout;
}

/// <summary>
/// The host fills struct stat and fuse_entry_param in their x86-64 form; on arm64 these give the
/// form libfuse expects there. Nothing else the host passes differs between the two.
/// </summary>
internal static unsafe class StatAbi
{
    public static readonly bool IsArm64 = RuntimeInformation.ProcessArchitecture == Architecture.Arm64;

    public static NativeStatArm64 ToArm64(in NativeStat s) => new()
    {
        st_dev = s.st_dev,
        st_ino = s.st_ino,
        st_mode = s.st_mode,
        st_nlink = (uint)Math.Min(s.st_nlink, uint.MaxValue),
        st_uid = s.st_uid,
        st_gid = s.st_gid,
        st_rdev = s.st_rdev,
        st_size = s.st_size,
        st_blksize = (int)s.st_blksize,
        st_blocks = s.st_blocks,
        st_atim_sec = s.st_atim_sec,
        st_atim_nsec = s.st_atim_nsec,
        st_mtim_sec = s.st_mtim_sec,
        st_mtim_nsec = s.st_mtim_nsec,
        st_ctim_sec = s.st_ctim_sec,
        st_ctim_nsec = s.st_ctim_nsec,
    };

    public static FuseEntryParamArm64 ToArm64(in FuseEntryParam e) => new()
    {
        ino = e.ino,
        generation = e.generation,
        attr = ToArm64(e.attr),
        attr_timeout = e.attr_timeout,
        entry_timeout = e.entry_timeout,
    };
}

/// <summary>struct statvfs (glibc; the same on x86-64 and arm64).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct NativeStatvfs
{
    public const int Size = 112;

    [FieldOffset(0)] public ulong f_bsize;
    [FieldOffset(8)] public ulong f_frsize;
    [FieldOffset(16)] public ulong f_blocks;
    [FieldOffset(24)] public ulong f_bfree;
    [FieldOffset(32)] public ulong f_bavail;
    [FieldOffset(40)] public ulong f_files;
    [FieldOffset(48)] public ulong f_ffree;
    [FieldOffset(56)] public ulong f_favail;
    [FieldOffset(64)] public ulong f_fsid;
    [FieldOffset(72)] public ulong f_flag;
    [FieldOffset(80)] public ulong f_namemax;
}

/// <summary>struct fuse_entry_param: the reply to lookup (and each readdirplus entry).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseEntryParam
{
    public const int Size = 176;

    /// <summary>The FUSE node id (0 = negative entry).</summary>
    [FieldOffset(0)] public ulong ino;
    [FieldOffset(8)] public ulong generation;
    [FieldOffset(16)] public NativeStat attr;
    [FieldOffset(160)] public double attr_timeout;
    [FieldOffset(168)] public double entry_timeout;
}

/// <summary>struct fuse_file_info. The one-bit flags live in the word at <see cref="BitsOffset"/>.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseFileInfo
{
    public const int Size = 40;
    public const int BitsOffset = 4;

    // Bit positions inside the bit-field word (gcc allocates bit-fields from the least significant bit on x86-64).
    public const uint WritePageBit = 1u << 0;
    public const uint DirectIoBit = 1u << 1;
    public const uint KeepCacheBit = 1u << 2;
    public const uint FlushBit = 1u << 3;
    public const uint NonSeekableBit = 1u << 4;
    public const uint FlockReleaseBit = 1u << 5;
    public const uint CacheReaddirBit = 1u << 6;
    public const uint NoFlushBit = 1u << 7;

    [FieldOffset(0)] public int flags;
    [FieldOffset(BitsOffset)] public uint bits;
    [FieldOffset(16)] public ulong fh;
    [FieldOffset(24)] public ulong lock_owner;
    [FieldOffset(32)] public uint poll_events;
}

/// <summary>struct fuse_conn_info: negotiated in the init callback.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseConnInfo
{
    public const int Size = 128;

    [FieldOffset(0)] public uint proto_major;
    [FieldOffset(4)] public uint proto_minor;
    [FieldOffset(8)] public uint max_write;
    [FieldOffset(12)] public uint max_read;
    [FieldOffset(16)] public uint max_readahead;
    [FieldOffset(20)] public uint capable;
    [FieldOffset(24)] public uint want;
    [FieldOffset(28)] public uint max_background;
    [FieldOffset(32)] public uint congestion_threshold;
    [FieldOffset(36)] public uint time_gran;
}

/// <summary>struct fuse_args (fuse_opt.h).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal unsafe struct FuseArgs
{
    public const int Size = 24;

    [FieldOffset(0)] public int argc;
    [FieldOffset(8)] public byte** argv;
    [FieldOffset(16)] public int allocated;
}

/// <summary>struct fuse_ctx: who made a request.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseContext
{
    public const int Size = 16;

    [FieldOffset(0)] public uint uid;
    [FieldOffset(4)] public uint gid;
    [FieldOffset(8)] public int pid;
    [FieldOffset(12)] public uint umask;
}

/// <summary>struct fuse_forget_data: one node of a batched forget (FUSE_BATCH_FORGET).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseForgetData
{
    public const int Size = 16;

    [FieldOffset(0)] public ulong ino;
    [FieldOffset(8)] public ulong nlookup;
}

/// <summary>
/// struct fuse_lowlevel_ops: one function pointer per request kind, in the header's order. A null
/// entry makes libfuse answer ENOSYS (or a harmless default for forget/release/...).
/// </summary>
[StructLayout(LayoutKind.Sequential)]
internal struct FuseLowLevelOps
{
    public const int PointerCount = 44;
    public const int Size = PointerCount * 8;

    public nint init;
    public nint destroy;
    public nint lookup;
    public nint forget;
    public nint getattr;
    public nint setattr;
    public nint readlink;
    public nint mknod;
    public nint mkdir;
    public nint unlink;
    public nint rmdir;
    public nint symlink;
    public nint rename;
    public nint link;
    public nint open;
    public nint read;
    public nint write;
    public nint flush;
    public nint release;
    public nint fsync;
    public nint opendir;
    public nint readdir;
    public nint releasedir;
    public nint fsyncdir;
    public nint statfs;
    public nint setxattr;
    public nint getxattr;
    public nint listxattr;
    public nint removexattr;
    public nint access;
    public nint create;
    public nint getlk;
    public nint setlk;
    public nint bmap;
    public nint ioctl;
    public nint poll;
    public nint write_buf;
    public nint retrieve_reply;
    public nint forget_multi;
    public nint flock;
    public nint fallocate;
    public nint readdirplus;
    public nint copy_file_range;
    public nint lseek;
}

/// <summary>Constants from fuse_common.h / fuse_lowlevel.h.</summary>
internal static class FuseConstants
{
    public const ulong FUSE_ROOT_ID = 1;

    public const uint FUSE_CAP_ASYNC_READ = 1u << 0;
    public const uint FUSE_CAP_ATOMIC_O_TRUNC = 1u << 3;
    public const uint FUSE_CAP_EXPORT_SUPPORT = 1u << 4;
    public const uint FUSE_CAP_DONT_MASK = 1u << 6;
    public const uint FUSE_CAP_SPLICE_WRITE = 1u << 7;
    public const uint FUSE_CAP_SPLICE_MOVE = 1u << 8;
    public const uint FUSE_CAP_IOCTL_DIR = 1u << 11;
    public const uint FUSE_CAP_AUTO_INVAL_DATA = 1u << 12;
    public const uint FUSE_CAP_READDIRPLUS = 1u << 13;
    public const uint FUSE_CAP_READDIRPLUS_AUTO = 1u << 14;
    public const uint FUSE_CAP_ASYNC_DIO = 1u << 15;
    public const uint FUSE_CAP_PARALLEL_DIROPS = 1u << 18;
    public const uint FUSE_CAP_POSIX_ACL = 1u << 19;
    public const uint FUSE_CAP_HANDLE_KILLPRIV = 1u << 20;
    public const uint FUSE_CAP_CACHE_SYMLINKS = 1u << 23;

    // setattr's to_set bits (fuse_lowlevel.h).
    public const int FUSE_SET_ATTR_MODE = 1 << 0;
    public const int FUSE_SET_ATTR_UID = 1 << 1;
    public const int FUSE_SET_ATTR_GID = 1 << 2;
    public const int FUSE_SET_ATTR_SIZE = 1 << 3;
    public const int FUSE_SET_ATTR_ATIME = 1 << 4;
    public const int FUSE_SET_ATTR_MTIME = 1 << 5;
    public const int FUSE_SET_ATTR_ATIME_NOW = 1 << 7;
    public const int FUSE_SET_ATTR_MTIME_NOW = 1 << 8;
    /// <summary>libfuse's name for the kernel's FATTR_KILL_SUIDGID (kill setuid and setgid), sent with FUSE_HANDLE_KILLPRIV_V2.</summary>
    public const int FUSE_SET_ATTR_KILL_SUID = 1 << 11;

    // fallocate(2) mode bits (linux/falloc.h).
    public const int FALLOC_FL_KEEP_SIZE = 0x01;
    public const int FALLOC_FL_PUNCH_HOLE = 0x02;
    public const int FALLOC_FL_COLLAPSE_RANGE = 0x08;
    public const int FALLOC_FL_ZERO_RANGE = 0x10;
    public const int FALLOC_FL_INSERT_RANGE = 0x20;

    // setxattr(2) flags (linux/xattr.h) and renameat2(2) flags (linux/fs.h).
    public const int XATTR_CREATE = 1;
    public const int XATTR_REPLACE = 2;
    public const uint RENAME_NOREPLACE = 1;
    public const uint RENAME_EXCHANGE = 2;
    public const uint RENAME_WHITEOUT = 4;
}

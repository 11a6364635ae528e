using System.Runtime.InteropServices;

namespace XfsWin.Fuse.Interop;

// FUSE_STATX (protocol 7.39, Linux 6.6): the kernel asks for it when a caller of statx(2) wants more
// than the basic fields (birth time). libfuse 3.14 predates it, so these structures come from the
// kernel's include/uapi/linux/fuse.h; their sizes and offsets are pinned in NativeLayoutTests.

/// <summary>struct fuse_sx_time: a statx timestamp.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseSxTime
{
    public const int Size = 16;

    [FieldOffset(0)] public long tv_sec;
    [FieldOffset(8)] public uint tv_nsec;
    [FieldOffset(12)] public int reserved;
}

/// <summary>struct fuse_statx_in: the request body.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseStatxIn
{
    public const int Size = 24;

    [FieldOffset(0)] public uint getattr_flags;
    [FieldOffset(4)] public uint reserved;
    [FieldOffset(8)] public ulong fh;
    [FieldOffset(16)] public uint sx_flags;
    [FieldOffset(20)] public uint sx_mask;
}

/// <summary>struct fuse_statx: bit for bit the statx(2) result.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseStatx
{
    public const int Size = 256;

    [FieldOffset(0)] public uint mask;
    [FieldOffset(4)] public uint blksize;
    [FieldOffset(8)] public ulong attributes;
    [FieldOffset(16)] public uint nlink;
    [FieldOffset(20)] public uint uid;
    [FieldOffset(24)] public uint gid;
    [FieldOffset(28)] public ushort mode;
    [FieldOffset(32)] public ulong ino;
    [FieldOffset(40)] public ulong size;
    [FieldOffset(48)] public ulong blocks;
    [FieldOffset(56)] public ulong attributes_mask;
    [FieldOffset(64)] public FuseSxTime atime;
    [FieldOffset(80)] public FuseSxTime btime;
    [FieldOffset(96)] public FuseSxTime ctime;
    [FieldOffset(112)] public FuseSxTime mtime;
    [FieldOffset(128)] public uint rdev_major;
    [FieldOffset(132)] public uint rdev_minor;
    [FieldOffset(136)] public uint dev_major;
    [FieldOffset(140)] public uint dev_minor;
}

/// <summary>struct fuse_statx_out: the reply body.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseStatxOut
{
    public const int Size = 288;

    [FieldOffset(0)] public ulong attr_valid;
    [FieldOffset(8)] public uint attr_valid_nsec;
    [FieldOffset(12)] public uint flags;
    [FieldOffset(32)] public FuseStatx stat;
}

internal static class FuseStatxConstants
{
    public const uint FUSE_STATX = 52;
    public const uint STATX_BASIC_STATS = 0x7ff;
    public const uint STATX_BTIME = 0x800;
}

using System.Runtime.InteropServices;

namespace XfsWin.Fuse.Interop;

// The FUSE wire format the io_uring transport reads and writes itself (include/uapi/linux/fuse.h),
// and the libfuse3 entry points it hooks into. Linux x86-64, explicit offsets.
//
// The headers, in and out, and the INIT structures are checked by NativeLayoutTests against the
// installed <linux/fuse.h>. The io_uring structures of FUSE (protocol 7.42, kernel 6.14) are newer
// than the kernel headers many systems install (this one's are 7.38), so their sizes and offsets are
// pinned with the constants below, taken from the kernel's include/uapi/linux/fuse.h; the test
// checks the declarations against those numbers, and against the headers too when they have them.

/// <summary>struct fuse_in_header: starts every request.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseInHeader
{
    public const int Size = 40;

    /// <summary>Bytes of the request in /dev/fuse's format: this header, the opcode's own header and the rest.</summary>
    [FieldOffset(0)] public uint len;
    [FieldOffset(4)] public uint opcode;
    [FieldOffset(8)] public ulong unique;
    [FieldOffset(16)] public ulong nodeid;
    [FieldOffset(24)] public uint uid;
    [FieldOffset(28)] public uint gid;
    [FieldOffset(32)] public uint pid;
    [FieldOffset(36)] public ushort total_extlen;
}

/// <summary>struct fuse_out_header: starts every reply.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseOutHeader
{
    public const int Size = 16;

    [FieldOffset(0)] public uint len;
    [FieldOffset(4)] public int error;
    [FieldOffset(8)] public ulong unique;
}

/// <summary>struct fuse_init_in: what the kernel offers in FUSE_INIT.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseInitIn
{
    public const int Size = 64;

    [FieldOffset(0)] public uint major;
    [FieldOffset(4)] public uint minor;
    [FieldOffset(8)] public uint max_readahead;
    [FieldOffset(12)] public uint flags;
    /// <summary>Bits 32..63 of the flags; valid when <see cref="FuseUringConstants.FUSE_INIT_EXT"/> is set in <see cref="flags"/>.</summary>
    [FieldOffset(16)] public uint flags2;
}

/// <summary>struct fuse_init_out: the server's answer to FUSE_INIT (the fields up to flags2, which are all the transport reads or sets).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseInitOut
{
    public const int Size = 64;

    [FieldOffset(0)] public uint major;
    [FieldOffset(4)] public uint minor;
    [FieldOffset(8)] public uint max_readahead;
    [FieldOffset(12)] public uint flags;
    [FieldOffset(16)] public ushort max_background;
    [FieldOffset(18)] public ushort congestion_threshold;
    [FieldOffset(20)] public uint max_write;
    [FieldOffset(24)] public uint time_gran;
    [FieldOffset(28)] public ushort max_pages;
    [FieldOffset(30)] public ushort map_alignment;
    [FieldOffset(32)] public uint flags2;
}

/// <summary>
/// struct fuse_uring_ent_in_out: the last part of a ring entry's header buffer. The kernel fills it
/// with a request (commit id, payload bytes); the server sets payload_sz to its reply's size.
/// </summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseUringEntInOut
{
    public const int Size = 32;

    [FieldOffset(0)] public ulong flags;
    /// <summary>The request's unique id; the commit that answers it names it.</summary>
    [FieldOffset(8)] public ulong commit_id;
    /// <summary>Bytes used in the payload buffer, in either direction.</summary>
    [FieldOffset(16)] public uint payload_sz;
    [FieldOffset(20)] public uint padding;
    [FieldOffset(24)] public ulong reserved;
}

/// <summary>
/// struct fuse_uring_req_header: the first buffer a ring entry registers. in_out holds the
/// fuse_in_header of a request, and the server's fuse_out_header on commit; op_in holds the
/// opcode's own header (the request's first argument); everything else travels in the payload
/// buffer.
/// </summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseUringReqHeader
{
    public const int Size = 288;
    public const int InOutSize = 128;   // FUSE_URING_IN_OUT_HEADER_SZ
    public const int OpInSize = 128;    // FUSE_URING_OP_IN_OUT_SZ

    [FieldOffset(0)] public FuseInHeader in_out;
    [FieldOffset(128)] public byte op_in;
    [FieldOffset(256)] public FuseUringEntInOut ring_ent_in_out;
}

/// <summary>struct fuse_uring_cmd_req: what a FUSE uring command carries in the SQE's command area.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseUringCmdReq
{
    public const int Size = 24;

    [FieldOffset(0)] public ulong flags;
    /// <summary>0 for REGISTER; the unique id of the request answered for COMMIT_AND_FETCH.</summary>
    [FieldOffset(8)] public ulong commit_id;
    /// <summary>The queue, which is the number of the CPU whose requests it carries.</summary>
    [FieldOffset(16)] public ushort qid;
}

/// <summary>FUSE protocol numbers the transport needs (&lt;linux/fuse.h&gt;).</summary>
internal static class FuseUringConstants
{
    public const uint FUSE_LOOKUP = 1;
    public const uint FUSE_FORGET = 2;
    public const uint FUSE_OPEN = 14;
    public const uint FUSE_READ = 15;
    public const uint FUSE_WRITE = 16;
    public const uint FUSE_RELEASE = 18;
    public const uint FUSE_RELEASEDIR = 29;
    public const uint FUSE_INIT = 26;
    public const uint FUSE_INTERRUPT = 36;
    public const uint FUSE_BATCH_FORGET = 42;
    public const uint FUSE_INIT_EXT = 1u << 30;
    /// <summary>FUSE_HANDLE_KILLPRIV_V2 (protocol 7.33; libfuse 3.14 speaks 7.31 and never sets it).</summary>
    public const uint FUSE_HANDLE_KILLPRIV_V2 = 1u << 28;
    public const uint FUSE_MAX_PAGES = 1u << 22;
    /// <summary>FUSE_OVER_IO_URING is bit 41 of the 64-bit INIT flags: bit 9 of flags2.</summary>
    public const uint FUSE_OVER_IO_URING_FLAGS2 = 1u << (41 - 32);
    /// <summary>The kernel's FUSE_MIN_READ_BUFFER: no ring payload buffer is smaller.</summary>
    public const int FUSE_MIN_READ_BUFFER = 8192;
    /// <summary>The kernel's FUSE_DEFAULT_MAX_PAGES_PER_REQ, used when the init reply sets no max_pages.</summary>
    public const int FUSE_DEFAULT_MAX_PAGES_PER_REQ = 32;

    public const uint FUSE_IO_URING_CMD_REGISTER = 1;
    public const uint FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2;
}

/// <summary>struct fuse_buf (libfuse 3, fuse_common.h): a request handed to fuse_session_process_buf.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal unsafe struct FuseMemBuf
{
    public const int Size = 40;

    [FieldOffset(0)] public nuint size;
    [FieldOffset(8)] public int flags;
    [FieldOffset(16)] public void* mem;
    [FieldOffset(24)] public int fd;
    [FieldOffset(32)] public long pos;
}

/// <summary>struct fuse_custom_io (libfuse 3.14, fuse_lowlevel.h): replaces libfuse's read and writev on /dev/fuse.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct FuseCustomIo
{
    public const int Size = 32;

    /// <summary>ssize_t (*)(int fd, struct iovec *iov, int count, void *userdata)</summary>
    [FieldOffset(0)] public nint writev;
    /// <summary>ssize_t (*)(int fd, void *buf, size_t buf_len, void *userdata)</summary>
    [FieldOffset(8)] public nint read;
    [FieldOffset(16)] public nint splice_receive;
    [FieldOffset(24)] public nint splice_send;
}

/// <summary>The libfuse3 entry points of the io_uring transport.</summary>
internal static unsafe partial class FuseUringNative
{
    /// <summary>Installs read/writev callbacks for the session's device descriptor (libfuse 3.14 and later).</summary>
    [LibraryImport(FuseNative.LibFuse)]
    public static partial int fuse_session_custom_io(nint session, FuseCustomIo* io, int fd);

    /// <summary>Parses one request in /dev/fuse's format and runs its callback; replies go through the session's writev.</summary>
    [LibraryImport(FuseNative.LibFuse)]
    public static partial void fuse_session_process_buf(nint session, FuseMemBuf* buf);
}

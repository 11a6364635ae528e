using System.Runtime.InteropServices;

namespace XfsWin.Fuse.Interop;

// io_uring's user-space ABI (include/uapi/linux/io_uring.h), Linux x86-64 and arm64 (the same), declared once here with
// explicit offsets. tests/XfsWin.Fuse.Tests/NativeLayoutTests compiles a C program against the
// installed <linux/io_uring.h> and checks every size, offset and constant below.

/// <summary>struct io_sqring_offsets: where the submission ring's fields sit in its mapping.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct IoSqringOffsets
{
    public const int Size = 40;

    [FieldOffset(0)] public uint head;
    [FieldOffset(4)] public uint tail;
    [FieldOffset(8)] public uint ring_mask;
    [FieldOffset(12)] public uint ring_entries;
    [FieldOffset(16)] public uint flags;
    [FieldOffset(20)] public uint dropped;
    [FieldOffset(24)] public uint array;
}

/// <summary>struct io_cqring_offsets: where the completion ring's fields sit in its mapping.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct IoCqringOffsets
{
    public const int Size = 40;

    [FieldOffset(0)] public uint head;
    [FieldOffset(4)] public uint tail;
    [FieldOffset(8)] public uint ring_mask;
    [FieldOffset(12)] public uint ring_entries;
    [FieldOffset(16)] public uint overflow;
    [FieldOffset(20)] public uint cqes;
    [FieldOffset(24)] public uint flags;
}

/// <summary>struct io_uring_params: passed to io_uring_setup, filled in by the kernel.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct IoUringParams
{
    public const int Size = 120;

    [FieldOffset(0)] public uint sq_entries;
    [FieldOffset(4)] public uint cq_entries;
    [FieldOffset(8)] public uint flags;
    [FieldOffset(12)] public uint sq_thread_cpu;
    [FieldOffset(16)] public uint sq_thread_idle;
    [FieldOffset(20)] public uint features;
    [FieldOffset(24)] public uint wq_fd;
    [FieldOffset(40)] public IoSqringOffsets sq_off;
    [FieldOffset(80)] public IoCqringOffsets cq_off;
}

/// <summary>
/// struct io_uring_sqe, the 64-byte base. Rings set up with IORING_SETUP_SQE128 have 128-byte
/// entries whose last 80 bytes, from <see cref="CmdOffset"/>, are the command area of
/// IORING_OP_URING_CMD.
/// </summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct IoUringSqe
{
    public const int Size = 64;
    public const int Size128 = 128;
    public const int CmdOffset = 48;
    public const int CmdSize = 80;

    [FieldOffset(0)] public byte opcode;
    [FieldOffset(1)] public byte flags;
    [FieldOffset(2)] public ushort ioprio;
    [FieldOffset(4)] public int fd;
    /// <summary>Shares its place with off/addr2: the command of IORING_OP_URING_CMD.</summary>
    [FieldOffset(8)] public uint cmd_op;
    [FieldOffset(16)] public ulong addr;
    [FieldOffset(24)] public uint len;
    /// <summary>Shares its place with rw_flags, uring_cmd_flags, ...: the events of IORING_OP_POLL_ADD.</summary>
    [FieldOffset(28)] public uint poll32_events;
    [FieldOffset(32)] public ulong user_data;
    [FieldOffset(40)] public ushort buf_index;
    [FieldOffset(42)] public ushort personality;
    [FieldOffset(44)] public uint file_index;
    [FieldOffset(48)] public ulong addr3;
}

/// <summary>struct io_uring_cqe (16 bytes; the ring is not set up with CQE32).</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal struct IoUringCqe
{
    public const int Size = 16;

    [FieldOffset(0)] public ulong user_data;
    [FieldOffset(8)] public int res;
    [FieldOffset(12)] public uint flags;
}

/// <summary>struct iovec.</summary>
[StructLayout(LayoutKind.Explicit, Size = Size)]
internal unsafe struct IoVec
{
    public const int Size = 16;

    [FieldOffset(0)] public void* iov_base;
    [FieldOffset(8)] public nuint iov_len;
}

/// <summary>Constants of &lt;linux/io_uring.h&gt;, &lt;sys/syscall.h&gt;, &lt;sys/mman.h&gt; and &lt;poll.h&gt; (x86-64).</summary>
internal static class IoUringConstants
{
    public const long __NR_io_uring_setup = 425;
    public const long __NR_io_uring_enter = 426;
    // The io_uring calls have one number on every architecture (they came after the numbers were unified).

    public const uint IORING_SETUP_SUBMIT_ALL = 1u << 7;
    public const uint IORING_SETUP_COOP_TASKRUN = 1u << 8;
    public const uint IORING_SETUP_SQE128 = 1u << 10;
    public const uint IORING_SETUP_SINGLE_ISSUER = 1u << 12;
    public const uint IORING_SETUP_DEFER_TASKRUN = 1u << 13;

    public const uint IORING_FEAT_SINGLE_MMAP = 1u << 0;

    public const uint IORING_ENTER_GETEVENTS = 1u << 0;

    public const long IORING_OFF_SQ_RING = 0;
    public const long IORING_OFF_CQ_RING = 0x8000000;
    public const long IORING_OFF_SQES = 0x10000000;

    public const byte IORING_OP_POLL_ADD = 6;
    public const byte IORING_OP_URING_CMD = 46;

    public const int PROT_READ = 1;
    public const int PROT_WRITE = 2;
    public const int MAP_SHARED = 0x01;
    public const int MAP_POPULATE = 0x8000;

    public const int EFD_CLOEXEC = 0x80000;
    public const int EFD_NONBLOCK = 0x800;
    public const uint POLLIN = 1;

    public const int EINTR = 4;
    public const int EAGAIN = 11;
    public const int ENOTCONN = 107;
    public const int ECANCELED = 125;
}

/// <summary>The libc calls the io_uring transport makes. All blittable.</summary>
internal static unsafe partial class IoUringNative
{
    private const string LibC = "libc";

    /// <summary>glibc's syscall(2). It is variadic, but on x86-64 integer arguments travel in the same registers either way.</summary>
    [LibraryImport(LibC, SetLastError = true)]
    public static partial long syscall(long number, long a1, long a2, long a3, long a4, long a5, long a6);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial void* mmap(void* addr, nuint length, int prot, int flags, int fd, long offset);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int munmap(void* addr, nuint length);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int close(int fd);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial int eventfd(uint initval, int flags);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial nint read(int fd, void* buf, nuint count);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial nint write(int fd, void* buf, nuint count);

    [LibraryImport(LibC, SetLastError = true)]
    public static partial nint writev(int fd, IoVec* iov, int iovcnt);

    /// <summary>sched_setaffinity(2); pid 0 is the calling thread.</summary>
    [LibraryImport(LibC, SetLastError = true)]
    public static partial int sched_setaffinity(int pid, nuint cpusetsize, ulong* mask);

    /// <summary>statfs(2) into a buffer of at least 120 bytes (struct statfs).</summary>
    [LibraryImport(LibC, SetLastError = true)]
    public static partial int statfs(byte* path, void* buf);

    public static readonly void* MAP_FAILED = (void*)-1;

    /// <summary>io_uring_setup(2): the ring's file descriptor, or -errno.</summary>
    public static int IoUringSetup(uint entries, IoUringParams* p)
    {
        var r = syscall(IoUringConstants.__NR_io_uring_setup, entries, (long)p, 0, 0, 0, 0);
        return r < 0 ? -Marshal.GetLastPInvokeError() : (int)r;
    }

    /// <summary>io_uring_enter(2) without a signal mask: submissions consumed, or -errno.</summary>
    public static int IoUringEnter(int fd, uint toSubmit, uint minComplete, uint flags)
    {
        var r = syscall(IoUringConstants.__NR_io_uring_enter, fd, toSubmit, minComplete, flags, 0, 0);
        return r < 0 ? -Marshal.GetLastPInvokeError() : (int)r;
    }
}

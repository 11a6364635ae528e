using System.Runtime.InteropServices;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse;

/// <summary>
/// One io_uring instance driven by raw syscalls: the submission and completion rings and the
/// submission entries mapped into this process. Used by one thread only (the ring may be set up
/// with IORING_SETUP_SINGLE_ISSUER); nothing here locks.
/// </summary>
internal sealed unsafe class IoUringRing : IDisposable
{
    private readonly int _fd;
    private readonly bool _sqe128;
    private byte* _sqMap;
    private nuint _sqMapSize;
    private byte* _cqMap;
    private nuint _cqMapSize;
    private byte* _sqes;
    private nuint _sqesSize;
    private readonly uint* _sqHead;
    private readonly uint* _sqTail;
    private readonly uint _sqMask;
    private readonly uint* _sqArray;
    private readonly uint _sqEntries;
    private readonly uint* _cqHead;
    private readonly uint* _cqTail;
    private readonly uint _cqMask;
    private readonly IoUringCqe* _cqes;
    private uint _sqLocalTail;
    private int _disposed;

    private IoUringRing(int fd, in IoUringParams p, byte* sqMap, nuint sqMapSize, byte* cqMap, nuint cqMapSize, byte* sqes, nuint sqesSize)
    {
        _fd = fd;
        _sqe128 = (p.flags & IoUringConstants.IORING_SETUP_SQE128) != 0;
        _sqMap = sqMap;
        _sqMapSize = sqMapSize;
        _cqMap = cqMap;
        _cqMapSize = cqMapSize;
        _sqes = sqes;
        _sqesSize = sqesSize;
        _sqHead = (uint*)(sqMap + p.sq_off.head);
        _sqTail = (uint*)(sqMap + p.sq_off.tail);
        _sqMask = *(uint*)(sqMap + p.sq_off.ring_mask);
        _sqEntries = *(uint*)(sqMap + p.sq_off.ring_entries);
        _sqArray = (uint*)(sqMap + p.sq_off.array);
        _cqHead = (uint*)(cqMap + p.cq_off.head);
        _cqTail = (uint*)(cqMap + p.cq_off.tail);
        _cqMask = *(uint*)(cqMap + p.cq_off.ring_mask);
        _cqes = (IoUringCqe*)(cqMap + p.cq_off.cqes);
        _sqLocalTail = *_sqTail;
        // The index array maps ring slots to entries one to one, once and for all.
        for (uint i = 0; i < _sqEntries; i++)
            _sqArray[i] = i;
    }

    /// <summary>The flags the ring was set up with.</summary>
    public uint Flags { get; private init; }

    /// <summary>
    /// Sets up a ring of at least <paramref name="entries"/> submission entries. Returns null with
    /// <paramref name="errno"/> set when the kernel refuses (no io_uring, disabled by
    /// kernel.io_uring_disabled, a flag it does not know, seccomp...).
    /// </summary>
    public static IoUringRing? TryCreate(uint entries, uint flags, out int errno)
    {
        var p = new IoUringParams { flags = flags };
        var fd = IoUringNative.IoUringSetup(entries, &p);
        if (fd < 0)
        {
            errno = -fd;
            return null;
        }
        var sqeSize = (p.flags & IoUringConstants.IORING_SETUP_SQE128) != 0 ? IoUringSqe.Size128 : IoUringSqe.Size;
        var sqSize = (nuint)(p.sq_off.array + p.sq_entries * sizeof(uint));
        var cqSize = (nuint)(p.cq_off.cqes + p.cq_entries * IoUringCqe.Size);
        var single = (p.features & IoUringConstants.IORING_FEAT_SINGLE_MMAP) != 0;
        if (single)
            sqSize = cqSize = Math.Max(sqSize, cqSize);
        const int prot = IoUringConstants.PROT_READ | IoUringConstants.PROT_WRITE;
        const int map = IoUringConstants.MAP_SHARED | IoUringConstants.MAP_POPULATE;
        var sq = (byte*)IoUringNative.mmap(null, sqSize, prot, map, fd, IoUringConstants.IORING_OFF_SQ_RING);
        if (sq == IoUringNative.MAP_FAILED)
            return Fail(fd, out errno);
        var cq = sq;
        if (!single)
        {
            cq = (byte*)IoUringNative.mmap(null, cqSize, prot, map, fd, IoUringConstants.IORING_OFF_CQ_RING);
            if (cq == IoUringNative.MAP_FAILED)
            {
                var e = Fail(fd, out errno);
                IoUringNative.munmap(sq, sqSize);
                return e;
            }
        }
        var sqesSize = (nuint)(p.sq_entries * sqeSize);
        var sqes = (byte*)IoUringNative.mmap(null, sqesSize, prot, map, fd, IoUringConstants.IORING_OFF_SQES);
        if (sqes == IoUringNative.MAP_FAILED)
        {
            var e = Fail(fd, out errno);
            IoUringNative.munmap(sq, sqSize);
            if (!single)
                IoUringNative.munmap(cq, cqSize);
            return e;
        }
        errno = 0;
        return new IoUringRing(fd, p, sq, sqSize, cq, single ? 0 : cqSize, sqes, sqesSize) { Flags = p.flags };
    }

    private static IoUringRing? Fail(int fd, out int errno)
    {
        errno = Marshal.GetLastPInvokeError();
        IoUringNative.close(fd);
        return null;
    }

    /// <summary>
    /// The next free submission entry, zeroed, or null when every slot holds an entry not yet
    /// consumed by the kernel. It is submitted by the next <see cref="SubmitAndWait"/>.
    /// </summary>
    public IoUringSqe* NextSqe()
    {
        if (_sqLocalTail - Volatile.Read(ref *_sqHead) >= _sqEntries)
            return null;
        var size = _sqe128 ? IoUringSqe.Size128 : IoUringSqe.Size;
        var sqe = _sqes + (_sqLocalTail & _sqMask) * (uint)size;
        new Span<byte>(sqe, size).Clear();
        _sqLocalTail++;
        return (IoUringSqe*)sqe;
    }

    /// <summary>Entries prepared and not yet handed to the kernel.</summary>
    public uint PendingSubmissions => _sqLocalTail - Volatile.Read(ref *_sqTail);

    /// <summary>The 80-byte command area of a 128-byte entry.</summary>
    public static byte* CommandArea(IoUringSqe* sqe) => (byte*)sqe + IoUringSqe.CmdOffset;

    /// <summary>
    /// Hands every prepared entry to the kernel and, when <paramref name="waitFor"/> is not 0, waits
    /// until that many completions are ready (a signal ends the wait early: the caller looks at the
    /// completion ring and calls again). Returns 0 or -errno.
    /// </summary>
    public int SubmitAndWait(uint waitFor)
    {
        Volatile.Write(ref *_sqTail, _sqLocalTail);
        var pending = _sqLocalTail - Volatile.Read(ref *_sqHead);
        if (pending == 0 && waitFor == 0)
            return 0;
        var flags = waitFor > 0 ? IoUringConstants.IORING_ENTER_GETEVENTS : 0;
        var r = IoUringNative.IoUringEnter(_fd, pending, waitFor, flags);
        if (r == -IoUringConstants.EINTR)
            return 0;
        return r < 0 ? r : 0;
    }

    /// <summary>
    /// The user_data of the entries prepared and not consumed by the kernel (never submitted, or
    /// left in the ring by a failed io_uring_enter), which are then dropped: the ring submits
    /// nothing more. For retiring a ring whose commands must be issued again elsewhere.
    /// </summary>
    public List<ulong> TakeUnsubmitted()
    {
        var result = new List<ulong>();
        var head = Volatile.Read(ref *_sqHead);
        var size = _sqe128 ? IoUringSqe.Size128 : IoUringSqe.Size;
        for (var i = head; i != _sqLocalTail; i++)
            result.Add(((IoUringSqe*)(_sqes + (i & _sqMask) * (uint)size))->user_data);
        // The kernel consumes only up to the tail it is shown: show it nothing beyond what it took.
        _sqLocalTail = head;
        Volatile.Write(ref *_sqTail, head);
        return result;
    }

    /// <summary>
    /// Runs the ring's pending completion work (with DEFER_TASKRUN it runs only when asked) without
    /// submitting or waiting, so that what the kernel has finished shows in the completion ring.
    /// Returns 0 or -errno.
    /// </summary>
    public int Poll()
    {
        var r = IoUringNative.IoUringEnter(_fd, 0, 0, IoUringConstants.IORING_ENTER_GETEVENTS);
        return r is >= 0 or -IoUringConstants.EINTR ? 0 : r;
    }

    /// <summary>Copies the completions that are ready into <paramref name="into"/> and releases their slots.</summary>
    public int TakeCompletions(Span<IoUringCqe> into)
    {
        var head = *_cqHead;
        var tail = Volatile.Read(ref *_cqTail);
        var n = 0;
        while (head != tail && n < into.Length)
        {
            into[n++] = _cqes[head & _cqMask];
            head++;
        }
        Volatile.Write(ref *_cqHead, head);
        return n;
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        if (_sqes != null)
        {
            IoUringNative.munmap(_sqes, _sqesSize);
            _sqes = null;
        }
        if (_cqMapSize != 0 && _cqMap != null)
            IoUringNative.munmap(_cqMap, _cqMapSize);
        _cqMap = null;
        if (_sqMap != null)
        {
            IoUringNative.munmap(_sqMap, _sqMapSize);
            _sqMap = null;
        }
        // The ring is released when the last of its mappings and this descriptor are gone.
        IoUringNative.close(_fd);
    }
}

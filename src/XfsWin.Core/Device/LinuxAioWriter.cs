using System.Runtime.InteropServices;

namespace XfsWin.Device;

/// <summary>
/// Many writes handed to the kernel in one call through Linux asynchronous I/O (io_setup, io_submit, io_getevents), for
/// a file or disk opened with O_DIRECT: the block layer then queues them together (one notification of a virtual disk
/// for many requests, requests merged where they touch), where one pwrite per write pays a round trip to the disk
/// each. Used only for writes whose offset, length and memory are sector-aligned. One batch at a time per writer
/// (<see cref="_lock"/>, taken by nothing else and holding no other lock while the batch's I/O is in flight).
/// </summary>
internal sealed unsafe partial class LinuxAioWriter : IDisposable
{
    /// <summary>Writes the kernel took through asynchronous I/O so far (under the writer's lock).</summary>
    public long Submitted { get; private set; }

    /// <summary>Writes submitted at once; larger batches go in turns of this many.</summary>
    public const int MaxInFlight = 256;

    // struct iocb (linux/aio_abi.h, little-endian) and struct io_event.
    private const int IocbSize = 64, EventSize = 32;
    private const int OffData = 0, OffOpcode = 16, OffFd = 20, OffBuf = 24, OffBytes = 32, OffOffset = 40;
    private const ushort IocbCmdPwrite = 1;
    private const int EINTR = 4;

    private readonly object _lock = new();
    private ulong _context;
    private bool _disposed;
    private readonly byte* _iocbs;
    private readonly byte** _pointers;
    private readonly byte* _events;

    private LinuxAioWriter(ulong context)
    {
        _context = context;
        _iocbs = (byte*)NativeMemory.AllocZeroed(MaxInFlight * IocbSize);
        _pointers = (byte**)NativeMemory.AllocZeroed((nuint)(MaxInFlight * sizeof(byte*)));
        _events = (byte*)NativeMemory.AllocZeroed(MaxInFlight * EventSize);
        for (int i = 0; i < MaxInFlight; i++) _pointers[i] = _iocbs + i * IocbSize;
    }

    /// <summary>A writer with its own I/O context, or null where the kernel offers none (another architecture, AIO off, the system's limit reached).</summary>
    public static LinuxAioWriter? TryCreate()
    {
        if (!OperatingSystem.IsLinux() || Numbers is not { } n) return null;
        ulong context = 0;
        return syscall(n.Setup, MaxInFlight, (long)&context, 0, 0, 0) == 0 ? new LinuxAioWriter(context) : null;
    }

    /// <summary>
    /// Writes every piece of <paramref name="source"/> (sector-aligned, checked by the caller) to file descriptor
    /// <paramref name="fd"/> and returns when all are done. A piece the kernel would not take in the batch or wrote
    /// only in part is written (or finished) through <paramref name="writeOne"/>. Throws <see cref="XfsException"/>
    /// (IoError) naming the first failed piece once every piece has finished.
    /// </summary>
    public void Write(int fd, byte* source, ReadOnlySpan<WritePiece> pieces, WriteOne writeOne)
    {
        lock (_lock)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            string? failure = null;
            if (_context == 0)
            {
                // The context was torn down after a failed wait: every write goes one by one.
                foreach (var piece in pieces) writeOne(piece.Offset, source + piece.Start, piece.Length);
                return;
            }
            for (int first = 0; first < pieces.Length; first += MaxInFlight)
            {
                var turn = pieces.Slice(first, Math.Min(MaxInFlight, pieces.Length - first));
                for (int i = 0; i < turn.Length; i++)
                {
                    byte* cb = _iocbs + i * IocbSize;
                    new Span<byte>(cb, IocbSize).Clear();
                    *(ulong*)(cb + OffData) = (ulong)i;
                    *(ushort*)(cb + OffOpcode) = IocbCmdPwrite;
                    *(uint*)(cb + OffFd) = (uint)fd;
                    *(ulong*)(cb + OffBuf) = (ulong)(source + turn[i].Start);
                    *(ulong*)(cb + OffBytes) = (ulong)turn[i].Length;
                    *(long*)(cb + OffOffset) = turn[i].Offset;
                }
                int submitted = 0;
                while (submitted < turn.Length)
                {
                    long r = syscall(Numbers!.Value.Submit, (long)_context, turn.Length - submitted, (long)(_pointers + submitted), 0, 0);
                    if (r > 0) { submitted += (int)r; continue; }
                    if (r < 0 && Marshal.GetLastPInvokeError() == EINTR) continue;
                    break; // EAGAIN (no room for more) or another refusal: the rest are written one by one below
                }
                Submitted += submitted;
                Reap(submitted, turn, source, writeOne, ref failure);
                for (int i = submitted; i < turn.Length; i++)
                {
                    try
                    {
                        writeOne(turn[i].Offset, source + turn[i].Start, turn[i].Length);
                    }
                    catch (XfsException e)
                    {
                        failure ??= e.Message;
                    }
                }
            }
            if (failure is not null) throw new XfsException(XfsError.IoError, failure);
        }
    }

    /// <summary>Writes <paramref name="length"/> bytes at <paramref name="source"/> to <paramref name="offset"/> synchronously.</summary>
    public delegate void WriteOne(long offset, byte* source, int length);

    // Waits for the first `submitted` writes of the turn; finishes short ones; notes the first failure.
    private void Reap(int submitted, ReadOnlySpan<WritePiece> turn, byte* source, WriteOne writeOne, ref string? failure)
    {
        int reaped = 0;
        while (reaped < submitted)
        {
            long r = syscall(Numbers!.Value.GetEvents, (long)_context, 1, submitted - reaped, (long)_events, 0);
            if (r < 0)
            {
                int errno = Marshal.GetLastPInvokeError();
                if (errno == EINTR) continue;
                // The writes' state is unknown: tearing the context down waits for every one in flight, so that none
                // still reads the caller's memory when this throws.
                DestroyContext();
                throw new XfsException(XfsError.IoError, $"waiting for {submitted - reaped} asynchronous writes failed (errno {errno})");
            }
            for (int k = 0; k < r; k++)
            {
                byte* e = _events + k * EventSize;
                int i = (int)*(ulong*)e;
                long res = *(long*)(e + 16);
                var piece = turn[i];
                if (res == piece.Length) continue;
                if (res < 0)
                {
                    failure ??= $"write of {piece.Length} bytes at byte {piece.Offset} failed (errno {-res})";
                    continue;
                }
                try
                {
                    writeOne(piece.Offset + res, source + piece.Start + res, piece.Length - (int)res);
                }
                catch (XfsException ex)
                {
                    failure ??= ex.Message;
                }
            }
            reaped += (int)r;
        }
    }

    private void DestroyContext()
    {
        if (_context == 0) return;
        syscall(Numbers!.Value.Destroy, (long)_context, 0, 0, 0, 0);
        _context = 0;
    }

    public void Dispose()
    {
        lock (_lock)
        {
            if (_disposed) return;
            _disposed = true;
            DestroyContext();
            NativeMemory.Free(_iocbs);
            NativeMemory.Free(_pointers);
            NativeMemory.Free(_events);
        }
    }

    private readonly record struct SyscallNumbers(long Setup, long Destroy, long GetEvents, long Submit);

    // The AIO calls' numbers: x86-64 and the architectures of the generic table (arm64).
    private static SyscallNumbers? Numbers => RuntimeInformation.ProcessArchitecture switch
    {
        Architecture.X64 => new SyscallNumbers(206, 207, 208, 209),
        Architecture.Arm64 => new SyscallNumbers(0, 1, 4, 2),
        _ => null,
    };

    [LibraryImport("libc", SetLastError = true)]
    private static partial long syscall(long number, long a1, long a2, long a3, long a4, long a5);
}

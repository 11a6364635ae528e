using System.Runtime.InteropServices;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse;

/// <summary>
/// Serves a session's /dev/fuse descriptor with threads of our own, in place of libfuse's
/// multithreaded loop (fuse_session_loop_mt). Each thread reads a request with read(2) and hands it
/// to fuse_session_process_buf, which runs the host's callback on that thread; the callback's reply
/// goes out through the session's writev hook before process_buf returns.
/// <para>
/// Why not libfuse's loop: its workers are threads the .NET runtime did not create, which run
/// managed code only inside [UnmanagedCallersOnly] callbacks and spend the rest of their time in
/// libfuse between callbacks. Such a worker was found in cooperative GC mode on entering a callback
/// while a GC was suspending the runtime, and the runtime ends the process then ("Invalid Program:
/// attempted to call a UnmanagedCallersOnly method from managed code"; a FORGET's callback, under
/// thousands of unlinks). libfuse's loop also ends its workers with pthread_cancel, which unwinds a
/// worker blocked in a read through managed frames, something the runtime does not support; an
/// in-process host that mounts and unmounts repeatedly (the service, the tests) meets that at every
/// unmount. Here every callback is entered from a P/Invoke made by a thread the runtime created,
/// and the threads end by returning.
/// </para>
/// <para>
/// The threads block in read(2) on the device, where the kernel wakes one reader per request. They
/// end when the connection ends (unmount or abort: every reader gets ENODEV). With clone_fd each
/// thread reads its own clone of the descriptor (FUSE_DEV_IOC_CLONE), and the writev hook sends the
/// replies of its requests back through that clone (<see cref="ReplyDescriptor"/>): the kernel
/// matches a reply only on the descriptor its request was read from.
/// </para>
/// </summary>
internal sealed unsafe class FuseDeviceLoop
{
    private const int EINTR = 4, EIO = 5, ENOENT = 2, ENODEV = 19, EAGAIN = 11;
    /// <summary>libfuse's receive buffer: FUSE_MAX_MAX_PAGES pages of payload and FUSE_BUFFER_HEADER_SIZE for the headers.</summary>
    private static readonly int BufferSize = 256 * Environment.SystemPageSize + 4096;
    private const uint FUSE_DEV_IOC_CLONE = 0x8004E500; // _IOR(229, 0, uint32_t)

    /// <summary>The descriptor (plus one; 0 = none) this thread's requests came from, when it is a clone of the session's.</summary>
    [ThreadStatic]
    private static int t_cloneFdPlusOne;

    private readonly FuseHost _host;
    private readonly nint _session;
    private readonly int _sessionFd;
    private readonly TextWriter _log;
    private int _error;

    public FuseDeviceLoop(FuseHost host, nint session, TextWriter log)
    {
        _host = host;
        _session = session;
        _sessionFd = FuseNative.fuse_session_fd(session);
        _log = log;
    }

    /// <summary>
    /// The descriptor a reply written by this thread must go to: its clone, when it read the request
    /// from one, else <paramref name="fd"/> (what libfuse passes: the session's).
    /// </summary>
    internal static int ReplyDescriptor(int fd) => t_cloneFdPlusOne > 0 ? t_cloneFdPlusOne - 1 : fd;

    /// <summary>
    /// Serves with <paramref name="threads"/> threads until the connection ends; returns 0, or the
    /// negated errno of a read that failed otherwise (as libfuse's loop does).
    /// </summary>
    public int Run(int threads, bool cloneFd)
    {
        var workers = new Thread[Math.Max(1, threads)];
        for (var i = 0; i < workers.Length; i++)
        {
            var index = i;
            workers[i] = new Thread(() => Serve(index, cloneFd)) { IsBackground = true, Name = $"xfswin-fuse-{i}" };
            workers[i].Start();
        }
        foreach (var w in workers)
            w.Join();
        return Volatile.Read(ref _error);
    }

    private void Serve(int index, bool cloneFd)
    {
        var fd = _sessionFd;
        var buffer = (byte*)NativeMemory.AlignedAlloc((nuint)BufferSize, 4096);
        try
        {
            // The first thread keeps the session's descriptor (libfuse writes notifications there).
            if (cloneFd && index > 0)
            {
                var clone = Clone(out var errno);
                if (clone >= 0)
                {
                    fd = clone;
                    t_cloneFdPlusOne = clone + 1;
                }
                else
                {
                    _log.WriteLine($"xfswin: could not clone the FUSE descriptor (errno {errno}); this thread reads the session's.");
                }
            }
            while (true)
            {
                var n = IoUringNative.read(fd, buffer, (nuint)BufferSize);
                if (n < 0)
                {
                    var errno = Marshal.GetLastPInvokeError();
                    // ENOENT: the request was interrupted before we got it. EAGAIN: taken by another reader.
                    if (errno is EINTR or ENOENT or EAGAIN)
                        continue;
                    // ENODEV: unmounted, or the connection was aborted: every reader gets it.
                    if (errno != ENODEV)
                        Fail(-errno, $"reading the FUSE device failed (errno {errno})");
                    return;
                }
                if (n < FuseInHeader.Size)
                {
                    Fail(-EIO, $"short read on the FUSE device ({n} bytes)");
                    return;
                }
                if (FuseUringTransport.DeviceRequest(_host, fd, (FuseInHeader*)buffer, n))
                    continue; // answered here (FUSE_STATX)
                var request = new FuseMemBuf { size = (nuint)n, mem = buffer };
                FuseUringNative.fuse_session_process_buf(_session, &request);
            }
        }
        catch (Exception e)
        {
            // Nothing above throws by design; a bug must not take the process down silently.
            Fail(-EIO, $"a FUSE device thread failed: {e}");
        }
        finally
        {
            t_cloneFdPlusOne = 0;
            if (fd != _sessionFd)
                IoUringNative.close(fd);
            NativeMemory.AlignedFree(buffer);
        }
    }

    private void Fail(int error, string message)
    {
        Interlocked.CompareExchange(ref _error, error, 0);
        _log.WriteLine("xfswin: " + message);
    }

    /// <summary>A new descriptor on the session's connection (/dev/fuse, FUSE_DEV_IOC_CLONE), or -1.</summary>
    private int Clone(out int errno)
    {
        errno = 0;
        int fd;
        fixed (byte* dev = "/dev/fuse\0"u8)
            fd = FuseNative.open(dev, FuseNative.O_RDWR | FuseNative.O_CLOEXEC);
        if (fd < 0)
        {
            errno = Marshal.GetLastPInvokeError();
            return -1;
        }
        var master = (uint)_sessionFd;
        if (FuseNative.ioctl(fd, FUSE_DEV_IOC_CLONE, &master) != 0)
        {
            errno = Marshal.GetLastPInvokeError();
            IoUringNative.close(fd);
            return -1;
        }
        return fd;
    }
}

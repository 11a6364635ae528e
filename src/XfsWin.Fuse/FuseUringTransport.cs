using System.Collections.Concurrent;
using System.Globalization;
using System.Runtime.InteropServices;
using XfsWin.Device;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse;

/// <summary>How the kernel's requests reach a <see cref="FuseHost"/>.</summary>
public enum FuseTransport
{
    /// <summary>read and write on /dev/fuse, served by libfuse's multithreaded loop.</summary>
    DevFuse,

    /// <summary>FUSE over io_uring: one queue per CPU, served by a thread pinned to that CPU.</summary>
    IoUring,
}

/// <summary>
/// FUSE over io_uring (Linux 6.14+, enabled by root with
/// <c>echo Y &gt; /sys/module/fuse/parameters/enable_uring</c>) beside the classic /dev/fuse loop.
/// <para>
/// The kernel keeps one request queue per possible CPU and puts each request on the queue of the
/// CPU its caller runs on. For every queue this transport runs one thread pinned to that CPU, with
/// its own io_uring through which it registers a few ring entries (a header buffer and a payload
/// buffer each). A request arrives as the completion of an entry's command; the thread answers it
/// and fetches the next one with a single COMMIT_AND_FETCH. Caller and server thus stay on one CPU:
/// no cross-CPU wake-up per request, which on virtual machines costs tens of microseconds.
/// </para>
/// <para>
/// libfuse 3.14 knows nothing of io_uring, so the transport hooks into it instead of replacing it:
/// the /dev/fuse loop (<see cref="FuseDeviceLoop"/>) shows it the kernel's FUSE_INIT (does it offer
/// FUSE_OVER_IO_URING?), and the writev hook installed with fuse_session_custom_io adds the flag to
/// libfuse's INIT reply and, once the kernel has it, lets the queue threads register. A request
/// taken from a ring entry is laid out again in /dev/fuse's format (in header, opcode header,
/// payload) and handed to fuse_session_process_buf, so libfuse parses it and runs the host's
/// callback as usual. The callbacks reply before they return, on the same thread, so the writev
/// hook recognises the reply (same thread, same unique id) and copies it into the entry instead of
/// writing it to /dev/fuse. Everything else (FUSE_INIT, FORGET and INTERRUPT, which the kernel
/// always sends through /dev/fuse, requests made before the ring is ready) still goes through
/// the /dev/fuse loop.
/// </para>
/// <para>
/// Large reads are the exception to serving on the caller's CPU: a queue thread hands them to a few
/// unpinned bulk threads, so the readahead requests of a sequential read are served in parallel on
/// every CPU, and commits them when they are answered.
/// </para>
/// <para>
/// Unmounting ends every entry's command with an error (ENOTCONN); a queue thread ends when all its
/// entries have, or when <see cref="Stop"/> signals the eventfd each ring watches.
/// </para>
/// </summary>
internal sealed unsafe class FuseUringTransport
{
    private const string EnableParameter = "/sys/module/fuse/parameters/enable_uring";
    private const string PossibleCpus = "/sys/devices/system/cpu/possible";
    private const ulong StopTag = ulong.MaxValue;
    private const ulong DoneTag = ulong.MaxValue - 1;
    private const int MaxCpus = 1024;
    private const int ReadInSize = 40;          // sizeof(struct fuse_read_in)
    private const int ReadInSizeOffset = 16;    // offsetof(struct fuse_read_in, size)
    /// <summary>Reads at least this large are served off the queue's CPU (see <see cref="Worker.TryHandOff"/>).</summary>
    internal const int HandOffReadBytes = 128 * 1024;

    [ThreadStatic]
    private static Entry? t_entry;

    private static readonly FuseCustomIo s_io = new()
    {
        read = (nint)(delegate* unmanaged<int, void*, nuint, nint, nint>)&OnDeviceRead,
        writev = (nint)(delegate* unmanaged<int, IoVec*, int, nint, nint>)&OnDeviceWritev,
    };

    private readonly FuseHost _host;
    private readonly nint _session;
    private readonly int _fuseFd;
    private readonly TextWriter _log;
    private readonly bool _debug;
    private readonly Worker[] _workers;
    private readonly int _entriesPerQueue;
    private readonly int _failingQueue;
    private readonly IoUringLiveFault? _liveFault;
    private readonly int _stopFd;
    private readonly ManualResetEventSlim _go = new(false);
    private readonly CountdownEvent _setUp;
    private readonly BlockingCollection<Entry> _bulk = new(new ConcurrentQueue<Entry>());
    private readonly List<Thread> _bulkThreads = [];
    private int _payloadSize;
    private int _stopping;

    // FUSE_INIT, as seen by the device hooks.
    private int _initSeen;
    private bool _kernelOffers;
    private int _initReplied;
    private volatile bool _advertised;
    private volatile string? _fallbackReason;
    private int _registrationFailures;
    private int _workersRegistered;
    private int _unansweredLogged;
    private long _deviceRequests;
    private int _queueRestarts;
    private int _mountEnded;

    private FuseUringTransport(FuseHost host, nint session, int fuseFd, int queues, int entriesPerQueue, int stopFd, TextWriter log, bool debug, int failingQueue, IoUringLiveFault? liveFault)
    {
        _host = host;
        _failingQueue = failingQueue;
        _liveFault = liveFault;
        _session = session;
        _fuseFd = fuseFd;
        _entriesPerQueue = entriesPerQueue;
        _stopFd = stopFd;
        _log = log;
        _debug = debug;
        _workers = new Worker[queues];
        _setUp = new CountdownEvent(queues);
    }

    /// <summary>True once the kernel agreed to io_uring and every queue registered its entries without error.</summary>
    public bool IsActive => _advertised && Volatile.Read(ref _workersRegistered) == _workers.Length && Volatile.Read(ref _registrationFailures) == 0;

    /// <summary>True once it is known whether io_uring serves the mount: every queue registered, or a fallback to /dev/fuse.</summary>
    public bool IsSettled => IsActive || _fallbackReason is not null || Volatile.Read(ref _registrationFailures) != 0 ||
                             (Volatile.Read(ref _initReplied) != 0 && !_advertised);

    /// <summary>Number of queues (one per possible CPU).</summary>
    public int QueueCount => _workers.Length;

    /// <summary>Requests served through the ring so far.</summary>
    public long RingRequests => SumOverQueues(static w => Volatile.Read(ref w.Served));

    /// <summary>Large reads served by the bulk threads so far (part of <see cref="RingRequests"/>).</summary>
    public long HandedOffReads => SumOverQueues(static w => Volatile.Read(ref w.HandedOff));

    private long SumOverQueues(Func<Worker, long> counter)
    {
        long n = 0;
        foreach (var w in _workers)
            n += w is null ? 0 : counter(w);
        return n;
    }

    /// <summary>Times a queue whose ring failed was moved to a new ring (see <see cref="Worker.Recover"/>).</summary>
    public int QueueRestarts => Volatile.Read(ref _queueRestarts);

    /// <summary>Requests read from /dev/fuse so far (FUSE_INIT, FORGET, INTERRUPT, requests made before the ring was ready).</summary>
    public long DeviceRequests => Volatile.Read(ref _deviceRequests);

    /// <summary>What serves requests, in words (for logs and diagnostics).</summary>
    public string Description =>
        IsActive
            ? $"io_uring: {_workers.Length} queue(s), one per CPU, {_entriesPerQueue} entries each, {_payloadSize / 1024} KiB payload buffers"
            : "/dev/fuse: " + (_fallbackReason ?? (Volatile.Read(ref _initReplied) == 0 ? "waiting for FUSE_INIT" : "io_uring is not active"));

    /// <summary>True when this kernel has FUSE over io_uring but the fuse module's switch for it is off (the default).</summary>
    public static bool KernelSwitchedOff
    {
        get
        {
            try
            {
                return File.ReadAllText(EnableParameter).Trim() != "Y";
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                return false;
            }
        }
    }

    /// <summary>The fuse module's switch for FUSE over io_uring.</summary>
    public const string EnableSwitch = EnableParameter;

    /// <summary>True when the fuse module lets servers use io_uring (root sets it; the default is N).</summary>
    public static bool KernelEnabled(out string reason)
    {
        try
        {
            var value = File.ReadAllText(EnableParameter).Trim();
            reason = value == "Y" ? "" : $"io_uring is off in the kernel ({EnableParameter} is {value}; as root: echo Y > {EnableParameter})";
            return value == "Y";
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            reason = "this kernel has no FUSE over io_uring (Linux 6.14+ built with CONFIG_FUSE_IO_URING)";
            return false;
        }
    }

    /// <summary>Why an ordinary user's server without fusectl serves through /dev/fuse (see <see cref="CanEndAStalledMount"/>).</summary>
    public const string NoFusectlReason =
        "FUSE over io_uring is not used by an ordinary user while the fusectl file system is not mounted on " + FusectlMountPoint +
        ": a queue that failed for good could not end the mount, and callers on its CPU would wait until it is unmounted by hand " +
        "(as root: mount -t fusectl none " + FusectlMountPoint + ")";

    /// <summary>Where the fusectl file system is mounted (its connection directories hold the abort files).</summary>
    internal const string FusectlMountPoint = "/sys/fs/fuse/connections";

    /// <summary>
    /// FUSE over io_uring is used only where a queue that fails for good can end the mount (see
    /// FuseHost.AbortConnection): as root, by a forced unmount, or else through the fusectl file
    /// system. An ordinary user without fusectl could not, and a lost request would leave its caller
    /// waiting until someone unmounts by hand: slower metadata over /dev/fuse is the better deal.
    /// </summary>
    internal static bool CanEndAStalledMount(bool root, string mountInfo, out string reason)
    {
        var ok = root || FusectlMounted(mountInfo);
        reason = ok ? "" : NoFusectlReason;
        return ok;
    }

    /// <summary>Whether a /proc/self/mountinfo text has the fusectl file system mounted on /sys/fs/fuse/connections.</summary>
    internal static bool FusectlMounted(string mountInfo) =>
        MountInfo.Parse(mountInfo).Any(m => m.MountPoint == FusectlMountPoint && m.FileSystemType == "fusectl");

    /// <summary>
    /// Sets up the transport for a mounted session before its loop starts: one thread and ring per
    /// queue, and the device hooks. Returns null, with the reason, when io_uring is not wanted or
    /// cannot work here; the session is then served through /dev/fuse alone, untouched.
    /// </summary>
    public static FuseUringTransport? TryStart(FuseHost host, nint session, FuseMountOptions options, TextWriter log, out string reason)
    {
        if (!options.IoUring)
        {
            reason = "io_uring=no";
            return null;
        }
        if (!KernelEnabled(out reason))
            return null;
        if (!CanEndAStalledMount(FuseNative.geteuid() == 0, MountInfo.ReadCurrent(), out reason))
            return null;
        var queues = CountPossibleCpus();
        if (queues is < 1 or > MaxCpus)
        {
            reason = $"cannot tell the possible CPUs from {PossibleCpus}";
            return null;
        }
        var stopFd = IoUringNative.eventfd(0, IoUringConstants.EFD_CLOEXEC);
        if (stopFd < 0)
        {
            reason = $"eventfd failed (errno {Marshal.GetLastPInvokeError()})";
            return null;
        }
        var depth = Math.Clamp(options.IoUringQueueDepth, 1, 64);
        var t = new FuseUringTransport(host, session, FuseNative.fuse_session_fd(session), queues, depth, stopFd, log, options.Debug,
            options.IoUringQueueFailingForTests, options.IoUringLiveFaultForTests);
        for (var q = 0; q < queues; q++)
        {
            var w = new Worker(t, q);
            t._workers[q] = w;
            w.Thread = new Thread(w.Run, 256 * 1024) { IsBackground = true, Name = $"xfswin-uring-{q}" };
            w.Thread.Start();
        }
        if (Environment.ProcessorCount > 1)
        {
            for (var i = 0; i < Environment.ProcessorCount; i++)
            {
                var b = new Thread(t.ServeBulk, 256 * 1024) { IsBackground = true, Name = $"xfswin-bulk-{i}" };
                t._bulkThreads.Add(b);
                b.Start();
            }
        }
        // Every queue must be served, or the kernel never switches to the ring: give up unless all rings exist.
        if (!t._setUp.Wait(TimeSpan.FromSeconds(10)) || t._workers.Any(w => w.SetupError is not null))
        {
            reason = "cannot set up io_uring: " + (t._workers.Select(w => w.SetupError).FirstOrDefault(e => e is not null) ?? "a queue thread did not start");
            t.Stop();
            return null;
        }
        var rc = InstallDeviceHooks(session);
        if (rc != 0)
        {
            reason = $"libfuse refused custom I/O hooks (fuse_session_custom_io: {rc})";
            t.Stop();
            return null;
        }
        reason = "";
        return t;
    }

    /// <summary>Number of possible CPUs (the kernel's num_possible_cpus, its number of queues), from a list like "0-3,8-11".</summary>
    internal static int CountPossibleCpus()
    {
        try
        {
            return CountCpuList(File.ReadAllText(PossibleCpus));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException)
        {
            return -1;
        }
    }

    internal static int CountCpuList(string list)
    {
        var n = 0;
        foreach (var part in list.Trim().Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            var dash = part.IndexOf('-', StringComparison.Ordinal);
            if (dash < 0)
            {
                _ = int.Parse(part, NumberStyles.None, CultureInfo.InvariantCulture);
                n++;
            }
            else
            {
                var from = int.Parse(part[..dash], NumberStyles.None, CultureInfo.InvariantCulture);
                var to = int.Parse(part[(dash + 1)..], NumberStyles.None, CultureInfo.InvariantCulture);
                if (to < from)
                    throw new FormatException(list);
                n += to - from + 1;
            }
        }
        return n;
    }

    /// <summary>
    /// Ends the queue threads and waits for them. Called once the session loop has returned (the
    /// kernel has normally ended every entry by then), or when setting up failed.
    /// </summary>
    public void Stop()
    {
        if (Interlocked.Exchange(ref _stopping, 1) != 0)
            return;
        ulong one = 1;
        IoUringNative.write(_stopFd, &one, sizeof(ulong));
        _go.Set();
        foreach (var w in _workers)
            w?.Thread?.Join();
        // Reads handed off are finished (their answers go nowhere now) before any buffer is freed.
        _bulk.CompleteAdding();
        foreach (var b in _bulkThreads)
            b.Join();
        _bulk.Dispose();
        foreach (var w in _workers)
            w?.FreeBuffers();
        IoUringNative.close(_stopFd);
        _go.Dispose();
        _setUp.Dispose();
    }

    // ---- device hooks (libfuse calls them for /dev/fuse; userdata is the FuseHost's handle) -----

    /// <summary>
    /// Has libfuse write to /dev/fuse through <see cref="OnDeviceWritev"/>: with io_uring it watches
    /// the FUSE_INIT reply and routes replies to the ring, with clone_fd it sends each reply back
    /// through the descriptor its request came from, and it sees the init reply (readahead). Requests
    /// are read by <see cref="FuseDeviceLoop"/>, never by libfuse, so libfuse never calls the read
    /// hook (<see cref="OnDeviceRead"/>, a plain read: fuse_session_custom_io wants both).
    /// Returns libfuse's result (0 = installed).
    /// </summary>
    internal static int InstallDeviceHooks(nint session)
    {
        var io = s_io;
        return FuseUringNative.fuse_session_custom_io(session, &io, FuseNative.fuse_session_fd(session));
    }

    private static FuseHost? HostOf(nint userdata)
    {
        try
        {
            return GCHandle.FromIntPtr(userdata).Target as FuseHost;
        }
        catch (InvalidOperationException)
        {
            return null;
        }
    }

    [UnmanagedCallersOnly]
    private static nint OnDeviceRead(int fd, void* buffer, nuint length, nint userdata)
    {
        var n = IoUringNative.read(fd, buffer, length);
        Marshal.SetLastSystemError(Marshal.GetLastPInvokeError());
        return n;
    }

    /// <summary>
    /// Called by <see cref="FuseDeviceLoop"/> for each request read from /dev/fuse (on <paramref name="fd"/>),
    /// before libfuse sees it: notes FUSE_INIT (for the readahead and the io_uring offer) and answers
    /// FUSE_STATX, which libfuse does not know. True when the request is answered.
    /// </summary>
    internal static bool DeviceRequest(FuseHost host, int fd, FuseInHeader* request, nint length)
    {
        if (request->opcode == FuseUringConstants.FUSE_INIT)
            host.NoteInitRequest(request->unique, length >= FuseInHeader.Size + 16 ? ((FuseInitIn*)(request + 1))->flags : 0);
        NoteKillFlags(request, length);
        if (request->opcode == FuseStatxConstants.FUSE_STATX && TryAnswerOnDevice(host, fd, request))
            return true;
        host.Uring?.SawDeviceRequest(request, length);
        return false;
    }

    /// <summary>
    /// Before libfuse parses a request on this thread: whether it is a FUSE_WRITE marked FUSE_WRITE_KILL_SUIDGID or a
    /// FUSE_OPEN marked FUSE_OPEN_KILL_SUIDGID (libfuse 3.14 passes neither flag to the handler). See
    /// <see cref="FuseHost.t_requestKillsSuidgid"/>.
    /// </summary>
    internal const uint FuseWriteKillSuidgid = 1u << 2;
    internal const uint FuseOpenKillSuidgid = 1u << 0;

    internal static void NoteKillFlags(FuseInHeader* request, nint length)
    {
        const int WriteFlagsOffset = 20; // struct fuse_write_in: fh, offset, size, write_flags
        const int OpenFlagsOffset = 4;   // struct fuse_open_in: flags, open_flags
        var (offset, bit) = request->opcode switch
        {
            FuseUringConstants.FUSE_WRITE => (WriteFlagsOffset, FuseWriteKillSuidgid),
            FuseUringConstants.FUSE_OPEN => (OpenFlagsOffset, FuseOpenKillSuidgid),
            _ => (-1, 0u),
        };
        FuseHost.t_requestKillsSuidgid = offset >= 0 && length >= FuseInHeader.Size + offset + 4 &&
            (*(uint*)((byte*)(request + 1) + offset) & bit) != 0;
    }

    /// <summary>The host's answer to FUSE_STATX as iovecs (out header, then the body unless it is an error); returns their count.</summary>
    private static int StatxReply(FuseHost host, FuseInHeader* request, FuseOutHeader* header, FuseStatxOut* body, IoVec* iov)
    {
        var length = host.AnswerStatx(request, header, body);
        iov[0] = new IoVec { iov_base = header, iov_len = FuseOutHeader.Size };
        iov[1] = new IoVec { iov_base = body, iov_len = (nuint)(length - FuseOutHeader.Size) };
        return length > FuseOutHeader.Size ? 2 : 1;
    }

    /// <summary>Answers a request libfuse does not know straight on /dev/fuse; false leaves it to libfuse (which says ENOSYS).</summary>
    private static bool TryAnswerOnDevice(FuseHost host, int fd, FuseInHeader* request)
    {
        try
        {
            FuseOutHeader header;
            FuseStatxOut body;
            var iov = stackalloc IoVec[2];
            var count = StatxReply(host, request, &header, &body, iov);
            // A failed write means the request is gone (interrupted or unmounting): nothing to redo.
            IoUringNative.writev(fd, iov, count);
            return true;
        }
        catch (Exception)
        {
            return false;
        }
    }

    [UnmanagedCallersOnly]
    private static nint OnDeviceWritev(int fd, IoVec* iov, int count, nint userdata)
    {
        fd = FuseDeviceLoop.ReplyDescriptor(fd);
        FuseHost? host = null;
        nint n = -1;
        var written = false;
        try
        {
            var entry = t_entry;
            if (entry is not null && !entry.Replied && count >= 1 && iov[0].iov_len >= FuseOutHeader.Size &&
                ((FuseOutHeader*)iov[0].iov_base)->unique == entry.CommitId)
                return entry.Owner.AnswerOnRing(entry, iov, count);
            host = HostOf(userdata);
            if (host is not null && count >= 2 && iov[0].iov_len >= FuseOutHeader.Size && iov[1].iov_len >= 16 &&
                ((FuseOutHeader*)iov[0].iov_base)->error == 0 && host.IsInitReply(((FuseOutHeader*)iov[0].iov_base)->unique))
                host.AdjustInitReply((FuseInitOut*)iov[1].iov_base);
            if (host?.Uring is { } t)
            {
                n = t.WriteToDevice(fd, iov, count);
                written = true;
            }
        }
        catch (Exception)
        {
            // Fall through to a plain write.
        }
        if (!written)
        {
            n = IoUringNative.writev(fd, iov, count);
            Marshal.SetLastSystemError(Marshal.GetLastPInvokeError());
        }
        if (n >= 0 && host is not null && count >= 1 && iov[0].iov_len >= FuseOutHeader.Size)
        {
            var errno = Marshal.GetLastSystemError();
            try
            {
                host.AfterDeviceReply(((FuseOutHeader*)iov[0].iov_base)->unique);
            }
            catch (Exception)
            {
                // Best effort: the reply itself went out.
            }
            Marshal.SetLastSystemError(errno);
        }
        return n;
    }

    private void SawDeviceRequest(FuseInHeader* header, nint length)
    {
        Interlocked.Increment(ref _deviceRequests);
        if (header->opcode != FuseUringConstants.FUSE_INIT || Interlocked.Exchange(ref _initSeen, 1) != 0)
            return;
        if (length >= FuseInHeader.Size + 20)
        {
            var init = (FuseInitIn*)(header + 1);
            _kernelOffers = (init->flags & FuseUringConstants.FUSE_INIT_EXT) != 0 &&
                            (init->flags2 & FuseUringConstants.FUSE_OVER_IO_URING_FLAGS2) != 0;
        }
    }

    private nint WriteToDevice(int fd, IoVec* iov, int count)
    {
        var isInitReply = Volatile.Read(ref _initReplied) == 0 && count >= 1 && iov[0].iov_len >= FuseOutHeader.Size &&
                          _host.IsInitReply(((FuseOutHeader*)iov[0].iov_base)->unique);
        if (isInitReply)
            AdvertiseInInitReply(iov, count);
        var n = IoUringNative.writev(fd, iov, count);
        var errno = Marshal.GetLastPInvokeError();
        if (isInitReply && Interlocked.Exchange(ref _initReplied, 1) == 0)
        {
            if (n >= 0 && _advertised)
            {
                // The kernel has processed the reply (and now holds new requests until every queue is registered).
                _go.Set();
            }
            else
            {
                if (n < 0)
                {
                    _advertised = false;
                    _fallbackReason = $"writing the FUSE_INIT reply failed (errno {errno})";
                }
                Stop();
            }
        }
        Marshal.SetLastSystemError(errno);
        return n;
    }

    /// <summary>Adds FUSE_OVER_IO_URING to libfuse's FUSE_INIT reply when the kernel offered it, and learns the payload size.</summary>
    private void AdvertiseInInitReply(IoVec* iov, int count)
    {
        var header = (FuseOutHeader*)iov[0].iov_base;
        if (header->error != 0)
        {
            _fallbackReason = $"libfuse refused FUSE_INIT (error {-header->error})";
            return;
        }
        if (count < 2 || iov[1].iov_len < FuseInitOut.Size)
        {
            _fallbackReason = "libfuse's FUSE_INIT reply has no room for the io_uring flag";
            return;
        }
        if (!_kernelOffers)
        {
            _fallbackReason = "the kernel did not offer io_uring in FUSE_INIT";
            return;
        }
        var init = (FuseInitOut*)iov[1].iov_base;
        if ((init->flags & FuseUringConstants.FUSE_INIT_EXT) == 0)
        {
            _fallbackReason = "libfuse's FUSE_INIT reply has no extended flags";
            return;
        }
        if (Volatile.Read(ref _stopping) != 0)
        {
            _fallbackReason = "the transport is stopping";
            return;
        }
        // The kernel wants payload buffers of at least max(FUSE_MIN_READ_BUFFER, max_write, max_pages pages).
        var page = Environment.SystemPageSize;
        var maxPages = (init->flags & FuseUringConstants.FUSE_MAX_PAGES) != 0 ? Math.Max(1, (int)init->max_pages) : FuseUringConstants.FUSE_DEFAULT_MAX_PAGES_PER_REQ;
        var payload = Math.Max(FuseUringConstants.FUSE_MIN_READ_BUFFER, Math.Max((int)Math.Min(init->max_write, 64u << 20), maxPages * page));
        _payloadSize = (payload + page - 1) / page * page;
        init->flags2 |= FuseUringConstants.FUSE_OVER_IO_URING_FLAGS2;
        _advertised = true;
    }

    /// <summary>
    /// On a thread serving a ring entry: the entry's payload buffer when <paramref name="size"/>
    /// bytes fit, so a reply can be built where the kernel will read it (the writev hook then copies
    /// nothing). Null otherwise.
    /// </summary>
    internal static byte* ReplyBuffer(int size)
    {
        var e = t_entry;
        return e is not null && !e.Replied && size <= e.Owner.PayloadCapacity ? e.Payload : null;
    }

    private void LogUnanswered(uint opcode)
    {
        if (Interlocked.Increment(ref _unansweredLogged) <= 10)
            _log.WriteLine($"xfswin: request (opcode {opcode}) from the io_uring queue was not answered; replying EIO.");
    }

    /// <summary>
    /// A queue will not be registered: the mount is served through /dev/fuse, and
    /// <see cref="Description"/> says why from now on (callers may look as soon as the kernel falls back).
    /// </summary>
    private void RegistrationFailed(int qid, string reason)
    {
        if (Interlocked.Increment(ref _registrationFailures) == 1)
        {
            _fallbackReason = reason;
            _log.WriteLine($"xfswin: io_uring queue {qid} is not registered ({reason}); serving through /dev/fuse.");
        }
    }

    /// <summary>
    /// A request of our own on the queue of <paramref name="cpu"/>: a statfs of the mount point (the
    /// kernel always asks the server for it) from a short-lived thread pinned to that CPU. Used to
    /// give the waiting entries of a failed ring a request each (see <see cref="Worker.Recover"/>).
    /// </summary>
    private void RequestOnCpu(int cpu)
    {
        var mountPoint = _host.MountPoint;
        if (mountPoint is null)
            return;
        var th = new Thread(() =>
        {
            var mask = stackalloc ulong[MaxCpus / 64];
            new Span<ulong>(mask, MaxCpus / 64).Clear();
            mask[cpu / 64] = 1UL << (cpu % 64);
            _ = IoUringNative.sched_setaffinity(0, MaxCpus / 8, mask);
            var buf = stackalloc byte[256];
            var path = System.Text.Encoding.UTF8.GetBytes(mountPoint + "\0");
            fixed (byte* p = path)
                _ = IoUringNative.statfs(p, buf);
        }, 64 * 1024) { IsBackground = true, Name = $"xfswin-uring-kick-{cpu}" };
        th.Start();
    }

    /// <summary>
    /// A queue cannot be served any more: its callers would wait until the unmount. Ends the
    /// connection instead (they get ENOTCONN), and with it the session.
    /// </summary>
    private void EndMount(int qid, string reason)
    {
        if (Interlocked.Exchange(ref _mountEnded, 1) != 0)
            return;
        _fallbackReason = $"io_uring queue {qid} failed";
        _log.WriteLine($"xfswin: io_uring queue {qid} cannot be served any more ({reason}); ending the mount so that its callers get errors instead of waiting forever.");
        if (!_host.AbortConnection(out var how))
            _log.WriteLine($"xfswin: could not end the mount ({how}); requests made on CPU {qid} wait until it is unmounted (fusermount3 -uz).");
        else
            _log.WriteLine($"xfswin: mount ended ({how}).");
    }

    /// <summary>
    /// The threads that serve large reads handed off by the queue threads. They are not pinned:
    /// the scheduler runs them on whichever CPU is idle, so a sequential read keeps several CPUs busy.
    /// </summary>
    private void ServeBulk()
    {
        try
        {
            foreach (var e in _bulk.GetConsumingEnumerable())
                e.Owner.ServeHandedOff(e);
        }
        catch (Exception ex)
        {
            _log.WriteLine($"xfswin: io_uring read thread failed: {ex}");
        }
    }

    /// <summary>A ring entry: its header and payload buffers and the request it holds.</summary>
    private sealed class Entry(Worker owner, int index)
    {
        public readonly Worker Owner = owner;
        public readonly int Index = index;
        public FuseUringReqHeader* Header;
        public byte* Payload;
        public IoVec* Iov;
        public byte* Request;       // a handed-off request in /dev/fuse's format
        public int RequestLength;
        public ulong CommitId;
        public bool Replied;
        public bool Registered;
        public bool Dead;
        public uint LastCommand;
        public int Retries;
        public bool HandedOffNow;   // a bulk thread has it
        public uint Pending;        // while a ring is replaced: the command to issue on the new ring
    }

    /// <summary>One queue: its thread (pinned to the queue's CPU), ring and entries.</summary>
    private sealed class Worker(FuseUringTransport transport, int qid)
    {
        private readonly FuseUringTransport _t = transport;
        private readonly int _qid = qid;
        private IoUringRing? _ring;
        private Entry[] _entries = [];
        private byte* _headers;     // the entries' header buffers and iovecs, one block
        private byte* _payloads;    // the entries' payload buffers, one anonymous mapping
        private nuint _payloadsSize;
        private byte* _scratch;     // a request laid out in /dev/fuse's format
        private IoVec* _refusedIov; // the empty buffers of a registration made to be refused (GiveUpOnRing)
        private int _scratchSize;
        private int _live;          // entries registered and not yet ended by the kernel
        private int _doneFd = -1;   // signalled when handed-off requests are answered
        private readonly ConcurrentQueue<Entry> _done = new();
        private readonly List<IoUringCqe> _leftover = [];   // completions taken from a ring that failed before handling them
        private bool _connectionEnded;
        private int _faultsInjected;
        private long _faultAt = -1;
        private const int MaxRecoveries = 3;
        private static readonly TimeSpan DrainTime = TimeSpan.FromSeconds(3);

        public Thread? Thread;
        public string? SetupError;
        public long Served;
        public long HandedOff;
        public int PayloadCapacity;

        public void Run()
        {
            var setUp = false;
            var registering = false;
            try
            {
                Pin();
                var t = _t;
                _ring = CreateRing(out var errno);
                if (_ring is null)
                {
                    SetupError = $"io_uring_setup failed (errno {errno})";
                    return;
                }
                WatchStop();
                var rc = _ring.SubmitAndWait(0);
                if (rc < 0)
                {
                    SetupError = $"io_uring_enter failed (errno {-rc})";
                    return;
                }
                setUp = true;
                t._setUp.Signal();

                t._go.Wait();
                if (Volatile.Read(ref t._stopping) != 0 || !t._advertised)
                    return;
                registering = true;
                if (_qid == t._failingQueue)
                    throw new OutOfMemoryException("injected by a test: no payload buffers for this queue");
                AllocateEntries(t._entriesPerQueue, t._payloadSize);
                _doneFd = IoUringNative.eventfd(0, IoUringConstants.EFD_CLOEXEC | IoUringConstants.EFD_NONBLOCK);
                if (_doneFd < 0)
                    throw new IOException($"eventfd failed (errno {Marshal.GetLastPInvokeError()})");
                WatchDone();
                foreach (var e in _entries)
                    Register(e);
                if (Interlocked.Increment(ref t._workersRegistered) == t._workers.Length && t._debug)
                    t._log.WriteLine($"xfswin: serving through {t.Description}");
                ServeAndRecover();
            }
            catch (Exception e)
            {
                SetupError ??= e.Message;
                _t._log.WriteLine($"xfswin: io_uring queue {_qid} failed: {e}");
                if (registering && _live == 0)
                    GiveUpOnRing(e.Message);
            }
            finally
            {
                if (!setUp)
                    _t._setUp.Signal(); // TryStart sees SetupError
                t_entry = null;
                // Closing the ring cancels whatever is still registered (the kernel ends those entries).
                _ring?.Dispose();
            }
        }

        private IoUringRing? CreateRing(out int errno)
        {
            // One submission slot per entry, plus the polls of the stop and done eventfds.
            var slots = (uint)(_t._entriesPerQueue + 2);
            // SQE128: FUSE's commands need the large command area. Only this thread submits, and
            // completions are run when it asks for them (DEFER_TASKRUN): the kernel does not
            // interrupt it for io_uring work while it serves a request. Measured: the fastest of
            // the usual flag sets for a stat loop (plain, COOP_TASKRUN, SINGLE_ISSUER alone).
            const uint flags = IoUringConstants.IORING_SETUP_SQE128 | IoUringConstants.IORING_SETUP_SUBMIT_ALL |
                               IoUringConstants.IORING_SETUP_SINGLE_ISSUER | IoUringConstants.IORING_SETUP_DEFER_TASKRUN;
            return IoUringRing.TryCreate(slots, flags, out errno) ??
                   IoUringRing.TryCreate(slots, IoUringConstants.IORING_SETUP_SQE128, out errno);
        }

        /// <summary>A poll on the stop eventfd: its completion ends <see cref="Serve"/>.</summary>
        private void WatchStop()
        {
            var sqe = NextSqe();
            sqe->opcode = IoUringConstants.IORING_OP_POLL_ADD;
            sqe->fd = _t._stopFd;
            sqe->poll32_events = IoUringConstants.POLLIN;
            sqe->user_data = StopTag;
        }

        /// <summary>
        /// After FUSE_INIT promised io_uring, a queue that cannot register would leave the kernel
        /// holding every request back, waiting for the ring. A registration the kernel must refuse
        /// (empty buffers) makes it give up on io_uring for this mount and use /dev/fuse instead.
        /// The reason is recorded before that registration is submitted: once the kernel has
        /// refused it, requests flow and anyone may ask why the mount is on /dev/fuse.
        /// </summary>
        private void GiveUpOnRing(string why)
        {
            _t.RegistrationFailed(_qid, $"queue {_qid} could not be set up after FUSE_INIT ({why}), so its registration was refused on purpose");
            try
            {
                var sqe = _ring?.NextSqe();
                if (sqe == null)
                    return;
                // The kernel may read the iovecs after this call returns (a command it finishes
                // asynchronously): they live until the buffers are freed, not on this stack.
                _refusedIov = (IoVec*)NativeMemory.AllocZeroed(2, (nuint)IoVec.Size);
                sqe->opcode = IoUringConstants.IORING_OP_URING_CMD;
                sqe->fd = _t._fuseFd;
                sqe->cmd_op = FuseUringConstants.FUSE_IO_URING_CMD_REGISTER;
                sqe->addr = (ulong)_refusedIov;
                sqe->len = 2;
                sqe->user_data = StopTag - 2;
                ((FuseUringCmdReq*)IoUringRing.CommandArea(sqe))->qid = (ushort)_qid;
                _ring!.SubmitAndWait(0);
            }
            catch (Exception e)
            {
                _t._log.WriteLine($"xfswin: io_uring queue {_qid} could not hand back to /dev/fuse: {e.Message}");
            }
        }

        /// <summary>Keeps this thread on the queue's CPU; where that is not allowed (cpusets), it runs anywhere.</summary>
        private void Pin()
        {
            var mask = stackalloc ulong[MaxCpus / 64];
            new Span<ulong>(mask, MaxCpus / 64).Clear();
            mask[_qid / 64] = 1UL << (_qid % 64);
            if (IoUringNative.sched_setaffinity(0, MaxCpus / 8, mask) != 0 && _t._debug)
                _t._log.WriteLine($"xfswin: could not pin io_uring queue {_qid} to its CPU (errno {Marshal.GetLastPInvokeError()}).");
        }

        private void AllocateEntries(int count, int payloadSize)
        {
            // Per entry: fuse_uring_req_header (288 bytes, rounded up to 320), room for a handed-off
            // request (in header and fuse_read_in), then at the end of the block the iovec pairs.
            const int headerStride = 320;
            const int requestStride = 128;
            var perEntry = headerStride + requestStride + 2 * IoVec.Size;
            _headers = (byte*)NativeMemory.AlignedAlloc((nuint)(count * perEntry), 4096);
            new Span<byte>(_headers, count * perEntry).Clear();
            _payloadsSize = (nuint)count * (nuint)payloadSize;
            // Anonymous memory, committed when first written (by the huge page: reads go from the
            // device straight into these buffers, see TransferMemory).
            _payloads = (byte*)TransferMemory.Allocate(_payloadsSize);
            PayloadCapacity = payloadSize;
            _scratchSize = FuseInHeader.Size + FuseUringReqHeader.OpInSize + payloadSize;
            _scratch = (byte*)NativeMemory.AlignedAlloc((nuint)_scratchSize, 64);
            _entries = new Entry[count];
            var requests = _headers + count * headerStride;
            var iovs = (IoVec*)(requests + count * requestStride);
            for (var i = 0; i < count; i++)
            {
                var e = new Entry(this, i)
                {
                    Header = (FuseUringReqHeader*)(_headers + i * headerStride),
                    Payload = _payloads + (nuint)i * (nuint)payloadSize,
                    Iov = iovs + 2 * i,
                    Request = requests + i * requestStride,
                };
                e.Iov[0].iov_base = e.Header;
                e.Iov[0].iov_len = FuseUringReqHeader.Size;
                e.Iov[1].iov_base = e.Payload;
                e.Iov[1].iov_len = (nuint)payloadSize;
                _entries[i] = e;
            }
        }

        public void FreeBuffers()
        {
            if (_doneFd >= 0)
            {
                IoUringNative.close(_doneFd);
                _doneFd = -1;
            }
            // Only when the kernel has let go of every registered entry: until then it may still write to them.
            if (_live != 0)
                return;
            if (_payloads != null)
                TransferMemory.Free(_payloads, _payloadsSize);
            _payloads = null;
            NativeMemory.AlignedFree(_headers);
            _headers = null;
            NativeMemory.AlignedFree(_scratch);
            _scratch = null;
            NativeMemory.Free(_refusedIov);
            _refusedIov = null;
        }

        /// <summary>A free submission entry; when the kernel has not consumed earlier ones yet, they are submitted first.</summary>
        private IoUringSqe* NextSqe()
        {
            var sqe = _ring!.NextSqe();
            for (var tries = 0; sqe == null && tries < 100; tries++)
            {
                _ring.SubmitAndWait(0);
                sqe = _ring.NextSqe();
                if (sqe == null)
                    Thread.Sleep(1);
            }
            return sqe != null ? sqe : throw new InvalidOperationException("the io_uring submission ring stays full");
        }

        private IoUringSqe* Command(Entry e, uint command, ulong commitId)
        {
            var sqe = NextSqe();
            sqe->opcode = IoUringConstants.IORING_OP_URING_CMD;
            sqe->fd = _t._fuseFd;
            sqe->cmd_op = command;
            sqe->user_data = (ulong)e.Index;
            var cmd = (FuseUringCmdReq*)IoUringRing.CommandArea(sqe);
            cmd->commit_id = commitId;
            cmd->qid = (ushort)_qid;
            e.LastCommand = command;
            return sqe;
        }

        private void Register(Entry e)
        {
            var sqe = Command(e, FuseUringConstants.FUSE_IO_URING_CMD_REGISTER, 0);
            sqe->addr = (ulong)e.Iov;
            sqe->len = 2;
            if (!e.Registered)
            {
                e.Registered = true;
                _live++;
            }
        }

        private void CommitAndFetch(Entry e) => Command(e, FuseUringConstants.FUSE_IO_URING_CMD_COMMIT_AND_FETCH, e.CommitId);

        /// <summary>A one-shot poll on the done eventfd: its completion says handed-off requests have their answers.</summary>
        private void WatchDone()
        {
            var sqe = NextSqe();
            sqe->opcode = IoUringConstants.IORING_OP_POLL_ADD;
            sqe->fd = _doneFd;
            sqe->poll32_events = IoUringConstants.POLLIN;
            sqe->user_data = DoneTag;
        }

        /// <summary>Commits the handed-off requests that have been answered (only this thread submits to its ring).</summary>
        private void CommitHandedOff()
        {
            ulong count;
            _ = IoUringNative.read(_doneFd, &count, sizeof(ulong)); // resets the eventfd before the queue is drained
            while (_done.TryDequeue(out var e))
            {
                e.HandedOffNow = false;
                CommitAndFetch(e);
            }
            WatchDone();
        }

        /// <summary>
        /// A large read is served by a bulk thread instead: one queue thread serving 1 MiB reads one
        /// after the other would keep a sequential read on the reader's CPU alone, while the kernel
        /// has several readahead requests in flight. Small requests stay on this CPU, where they are
        /// fastest; for a large read the wake-up of another CPU is small beside the copying.
        /// </summary>
        private bool TryHandOff(Entry e)
        {
            var h = e.Header;
            if (_t._bulkThreads.Count == 0 || h->in_out.opcode != FuseUringConstants.FUSE_READ || h->ring_ent_in_out.payload_sz != 0 ||
                h->in_out.len != FuseInHeader.Size + ReadInSize ||
                *(uint*)(&h->op_in + ReadInSizeOffset) < HandOffReadBytes)
                return false;
            e.CommitId = h->ring_ent_in_out.commit_id;
            e.Replied = false;
            *(FuseInHeader*)e.Request = h->in_out;
            Buffer.MemoryCopy(&h->op_in, e.Request + FuseInHeader.Size, ReadInSize, ReadInSize);
            e.RequestLength = FuseInHeader.Size + ReadInSize;
            try
            {
                e.HandedOffNow = true;
                _t._bulk.Add(e);
                Interlocked.Increment(ref HandedOff);
                return true;
            }
            catch (InvalidOperationException)
            {
                e.HandedOffNow = false;
                return false; // stopping: serve it here
            }
        }

        /// <summary>On a bulk thread: serves a handed-off request, then gives the entry back to the queue thread.</summary>
        public void ServeHandedOff(Entry e)
        {
            Process(e, e.Request, e.RequestLength);
            _done.Enqueue(e);
            ulong one = 1;
            IoUringNative.write(_doneFd, &one, sizeof(ulong));
        }

        /// <summary>
        /// Serves the queue; when its ring fails, moves the queue to a new ring and serves on (see
        /// <see cref="Recover"/>), a few times at most. A queue that cannot be served any more ends
        /// the mount: its callers then get errors instead of waiting until the unmount.
        /// </summary>
        private void ServeAndRecover()
        {
            var recent = 0;
            var lastFailure = System.Diagnostics.Stopwatch.GetTimestamp();
            while (true)
            {
                var failure = Serve();
                if (failure is null || Volatile.Read(ref _t._stopping) != 0)
                    return;
                // Failures far apart (a minute) are counted afresh: only a queue failing again and again gives up.
                var now = System.Diagnostics.Stopwatch.GetTimestamp();
                if (System.Diagnostics.Stopwatch.GetElapsedTime(lastFailure, now) > TimeSpan.FromMinutes(1))
                    recent = 0;
                lastFailure = now;
                if (++recent > MaxRecoveries)
                {
                    _t.EndMount(_qid, $"{failure}, {MaxRecoveries + 1} times in a row");
                    return;
                }
                _t._log.WriteLine($"xfswin: io_uring queue {_qid}: {failure}; moving the queue to a new ring (attempt {recent} of {MaxRecoveries}).");
                string? why;
                bool recovered;
                try
                {
                    recovered = Recover(out why);
                }
                catch (Exception e)
                {
                    recovered = false;
                    why = e.ToString();
                }
                if (Volatile.Read(ref _t._stopping) != 0 || _connectionEnded)
                    return;
                if (!recovered)
                {
                    _t.EndMount(_qid, why ?? failure);
                    return;
                }
                Interlocked.Increment(ref _t._queueRestarts);
                _t._log.WriteLine($"xfswin: io_uring queue {_qid} serves again through a new ring ({why}).");
            }
        }

        /// <summary>
        /// Serves requests until the unmount ends every entry (null), or until the ring fails (what
        /// failed). On failure, what the ring had not handled yet is kept for <see cref="Recover"/>.
        /// </summary>
        private string? Serve()
        {
            var cqes = stackalloc IoUringCqe[32];
            var ring = _ring!;
            Entry? current = null;
            var i = 0;
            var n = 0;
            try
            {
                while (_live > 0)
                {
                    if (InjectedFailure() is { } injected)
                        return injected;
                    var rc = ring.SubmitAndWait(1);
                    if (rc < 0)
                        return $"io_uring_enter failed (errno {-rc})";
                    n = ring.TakeCompletions(new Span<IoUringCqe>(cqes, 32));
                    for (i = 0; i < n; i++)
                    {
                        var c = cqes[i];
                        if (c.user_data == StopTag)
                        {
                            // Stopping: hand the last answers to the kernel before the ring goes away.
                            ring.SubmitAndWait(0);
                            return null;
                        }
                        if (c.user_data == DoneTag)
                        {
                            CommitHandedOff();
                            continue;
                        }
                        if (c.user_data >= (ulong)_entries.Length)
                            continue;
                        var e = _entries[(int)c.user_data];
                        if (c.res == 0)
                        {
                            e.Retries = 0;
                            current = e;
                            if (!TryHandOff(e))
                            {
                                Handle(e);
                                CommitAndFetch(e);
                            }
                            current = null;
                        }
                        else if ((c.res == -IoUringConstants.EAGAIN || c.res == -IoUringConstants.EINTR) && ++e.Retries <= 100)
                        {
                            // The command did not reach the kernel's queue: issue it again.
                            if (e.LastCommand == FuseUringConstants.FUSE_IO_URING_CMD_REGISTER)
                            {
                                Thread.Sleep(1);
                                Register(e);
                            }
                            else
                            {
                                CommitAndFetch(e);
                            }
                        }
                        else
                        {
                            // Unmounted (ENOTCONN), aborted, or refused: the kernel is done with this entry.
                            EntryEnded(e);
                            if (e.LastCommand == FuseUringConstants.FUSE_IO_URING_CMD_REGISTER && c.res != -IoUringConstants.ENOTCONN)
                                _t.RegistrationFailed(_qid, $"the kernel refused to register queue {_qid} (errno {-c.res})");
                        }
                    }
                    n = 0;
                }
                ring.SubmitAndWait(0);
                return null;
            }
            catch (Exception ex)
            {
                // Keep what was taken from the ring and not handled yet; the entry being served gets EIO.
                for (var j = i + 1; j < n; j++)
                    _leftover.Add(cqes[j]);
                if (current is not null && !current.HandedOffNow)
                {
                    if (!current.Replied)
                        ReplyError(current, 5);
                    current.Pending = FuseUringConstants.FUSE_IO_URING_CMD_COMMIT_AND_FETCH;
                }
                return $"failed: {ex.GetType().Name}: {ex.Message}";
            }
        }

        private void EntryEnded(Entry e)
        {
            if (!e.Dead)
            {
                e.Dead = true;
                _live--;
            }
            e.Pending = 0;
        }

        private const int InjectedErrno = 5; // EIO

        /// <summary>The failure a test asked for (<see cref="FuseMountOptions.IoUringLiveFaultForTests"/>), when it is due.</summary>
        private string? InjectedFailure()
        {
            if (_t._liveFault is not { } f || f.Queue != _qid || _faultsInjected >= f.Times)
                return null;
            var served = Volatile.Read(ref Served);
            if (_faultAt < 0)
                _faultAt = served + f.AfterRequests;
            if (served < _faultAt)
                return null;
            _faultsInjected++;
            _faultAt = served + f.AfterRequests;
            return $"io_uring_enter failed (errno {InjectedErrno}, injected by a test)";
        }

        /// <summary>
        /// Moves the queue from its failed ring to a new one, losing no request.
        /// <para>
        /// The kernel does not tie a queue to a ring: entries of one queue may be registered from
        /// any ring, and an entry holding a request is answered by a COMMIT_AND_FETCH with its
        /// commit id on whichever ring issues it (the entry then waits for its next request on that
        /// ring). Closing a ring ends its waiting entries with ENOTCONN. But a request the kernel has
        /// just given to a waiting entry, whose delivery (task work of the old ring) has not run yet,
        /// is lost when the ring closes: the kernel ends the entry with ECANCELED and the request
        /// waits until the unmount, its header never written anywhere.
        /// </para>
        /// <para>
        /// So the old ring is closed only once none of its entries waits: its pending work is run
        /// (io_uring_enter with nothing to submit), the requests it delivers are served (their
        /// answers kept), and the entries still waiting are given requests of our own (statfs of
        /// the mount point from threads on this CPU, whose requests go to this CPU's queue). Then the
        /// answers are committed through the new ring, which takes every entry over. When the old
        /// ring cannot be drained (in time, or at all), the queue is given up (false): an entry still
        /// waiting may hold a request that can no longer be delivered, and only ending the
        /// connection answers it.
        /// </para>
        /// </summary>
        internal bool Recover(out string? outcome)
        {
            var old = _ring!;
            var held = new HashSet<Entry>();
            foreach (var e in _entries)
            {
                if (e.Pending != 0)
                    held.Add(e);
            }
            foreach (var ud in old.TakeUnsubmitted())
            {
                if (ud < (ulong)_entries.Length && !_entries[(int)ud].Dead)
                {
                    var e = _entries[(int)ud];
                    e.Pending = e.LastCommand;
                    held.Add(e);
                }
            }
            var waiting = _entries.Where(e => e.Registered && !e.Dead && !e.HandedOffNow && !held.Contains(e)).ToHashSet();
            var carried = 0;
            var cqes = new IoUringCqe[32];

            void Take(IoUringCqe c)
            {
                if (c.user_data >= (ulong)_entries.Length)
                    return;
                var e = _entries[(int)c.user_data];
                if (!waiting.Remove(e))
                    return;
                if (c.res == 0)
                {
                    // A request: served now, answered through the new ring.
                    try
                    {
                        Handle(e);
                    }
                    catch (Exception)
                    {
                        ReplyError(e, 5);
                    }
                    e.Pending = FuseUringConstants.FUSE_IO_URING_CMD_COMMIT_AND_FETCH;
                    held.Add(e);
                    carried++;
                }
                else if (c.res == -IoUringConstants.EAGAIN || c.res == -IoUringConstants.EINTR)
                {
                    e.Pending = e.LastCommand;
                    held.Add(e);
                }
                else if (c.res == -IoUringConstants.ENOTCONN)
                {
                    _connectionEnded = true; // unmounted meanwhile
                    EntryEnded(e);
                }
                else
                {
                    EntryEnded(e); // a refused command (as in Serve)
                }
            }

            foreach (var c in _leftover)
                Take(c);
            _leftover.Clear();

            // Drain the old ring until none of its entries waits.
            var sw = System.Diagnostics.Stopwatch.StartNew();
            var helpers = 0;
            var nextHelpers = TimeSpan.FromMilliseconds(2);
            var drainError = 0;
            while (waiting.Count > 0 && !_connectionEnded && Volatile.Read(ref _t._stopping) == 0 && sw.Elapsed < DrainTime)
            {
                var rc = _t._liveFault is { Undrainable: true } f && f.Queue == _qid ? -InjectedErrno : old.Poll();
                if (rc < 0)
                {
                    drainError = -rc;
                    break;
                }
                var n = old.TakeCompletions(cqes);
                for (var i = 0; i < n; i++)
                    Take(cqes[i]);
                if (n == 0 && waiting.Count > 0)
                {
                    // Our own requests for the entries that still wait (more may be needed when callers take some first).
                    if (sw.Elapsed >= nextHelpers && helpers < 4 * _entries.Length)
                    {
                        for (var k = waiting.Count; k > 0; k--, helpers++)
                            _t.RequestOnCpu(_qid);
                        nextHelpers = sw.Elapsed + TimeSpan.FromMilliseconds(100);
                    }
                    Thread.Sleep(1);
                }
            }
            // Released only once unmapped: the mappings hold the ring, and the kernel cancels its
            // commands when it is released.
            old.Dispose();
            _ring = null;
            if (_connectionEnded || Volatile.Read(ref _t._stopping) != 0)
            {
                outcome = "unmounted";
                return false;
            }
            if (waiting.Count > 0)
            {
                // An entry still waiting may have been given a request whose delivery is task work
                // that only the old ring runs (DEFER_TASKRUN): released, the kernel cancels that work
                // and the request stays with the entry, unanswerable until the connection ends.
                // Nothing here can tell whether that happened, so the queue is given up.
                outcome = (drainError != 0 ? $"the failed ring could not be drained (errno {drainError})" : "the failed ring was not drained in time") +
                          $"; {waiting.Count} of its entries were still waiting, and a request the kernel may have given them can no longer be delivered";
                return false;
            }

            // The new ring: stop and done polls, then every entry's command.
            _ring = CreateRing(out var errno);
            if (_ring is null)
            {
                outcome = $"io_uring_setup failed (errno {errno})";
                return false;
            }
            WatchStop();
            WatchDone();
            var registered = 0;
            foreach (var e in held)
            {
                if (e.Pending == FuseUringConstants.FUSE_IO_URING_CMD_REGISTER)
                {
                    Register(e);
                    registered++;
                }
                else
                {
                    CommitAndFetch(e);
                }
                e.Pending = 0;
                e.Retries = 0;
            }
            var src = _ring.SubmitAndWait(0);
            if (src < 0)
            {
                outcome = $"io_uring_enter failed on the new ring (errno {src})";
                return false;
            }
            outcome = $"{carried} request(s) carried over, {held.Count - registered} answered through it, {registered} entr{(registered == 1 ? "y" : "ies")} registered again" +
                      (helpers > 0 ? $", {helpers} request(s) of its own to empty the old ring" : "");
            return true;
        }

        /// <summary>Serves the request an entry holds: the host's callback answers it into the entry.</summary>
        private void Handle(Entry e)
        {
            var h = e.Header;
            var inHeader = h->in_out;
            var payloadBytes = h->ring_ent_in_out.payload_sz;
            e.CommitId = h->ring_ent_in_out.commit_id;
            e.Replied = false;
            // in.len counts the request as /dev/fuse would deliver it, so what is left after the
            // header and the payload is the opcode's own header, which the kernel put in op_in.
            var opHeader = (long)inHeader.len - FuseInHeader.Size - payloadBytes;
            if (opHeader < 0 || opHeader > FuseUringReqHeader.OpInSize || payloadBytes > (uint)PayloadCapacity)
            {
                ReplyError(e, 5);
                return;
            }
            *(FuseInHeader*)_scratch = inHeader;
            Buffer.MemoryCopy(&h->op_in, _scratch + FuseInHeader.Size, opHeader, opHeader);
            Buffer.MemoryCopy(e.Payload, _scratch + FuseInHeader.Size + opHeader, payloadBytes, payloadBytes);
            Process(e, _scratch, (int)inHeader.len);
        }

        /// <summary>Has libfuse parse the request and run the host's callback, whose reply the writev hook puts into the entry.</summary>
        private void Process(Entry e, byte* request, int length)
        {
            if (((FuseInHeader*)request)->opcode == FuseStatxConstants.FUSE_STATX)
            {
                FuseOutHeader header;
                FuseStatxOut body;
                var iov = stackalloc IoVec[2];
                AnswerOnRing(e, iov, StatxReply(_t._host, (FuseInHeader*)request, &header, &body, iov));
                Interlocked.Increment(ref Served);
                return;
            }
            NoteKillFlags((FuseInHeader*)request, length);
            var buf = new FuseMemBuf { size = (nuint)length, mem = request };
            t_entry = e;
            try
            {
                FuseUringNative.fuse_session_process_buf(_t._session, &buf);
            }
            finally
            {
                t_entry = null;
            }
            if (!e.Replied)
            {
                _t.LogUnanswered(((FuseInHeader*)request)->opcode);
                ReplyError(e, 5);
            }
            Interlocked.Increment(ref Served);
        }

        private static void ReplyError(Entry e, int errno)
        {
            var h = e.Header;
            var o = (FuseOutHeader*)&h->in_out;
            o->len = FuseOutHeader.Size;
            o->error = -errno;
            o->unique = e.CommitId;
            h->ring_ent_in_out.payload_sz = 0;
            h->ring_ent_in_out.padding = 0;
            e.Replied = true;
        }

        /// <summary>Called by the writev hook on this thread: the reply goes into the entry (out header, then payload).</summary>
        public nint AnswerOnRing(Entry e, IoVec* iov, int count)
        {
            var h = e.Header;
            nuint body = 0;
            for (var i = 1; i < count; i++)
                body += iov[i].iov_len;
            if (body > (nuint)PayloadCapacity)
            {
                ReplyError(e, 5);
                return (nint)(iov[0].iov_len + body);
            }
            *(FuseOutHeader*)&h->in_out = *(FuseOutHeader*)iov[0].iov_base;
            var at = e.Payload;
            for (var i = 1; i < count; i++)
            {
                var n = iov[i].iov_len;
                if (iov[i].iov_base != at) // a reply built in the payload buffer is already in place
                    Buffer.MemoryCopy(iov[i].iov_base, at, n, n);
                at += n;
            }
            h->ring_ent_in_out.payload_sz = (uint)body;
            h->ring_ent_in_out.padding = 0; // protocol 7.46 gives it a meaning; zero is what older kernels expect too
            e.Replied = true;
            return (nint)(iov[0].iov_len + body);
        }
    }
}

using System.Diagnostics;
using System.Globalization;
using System.Numerics;
using System.Runtime.InteropServices;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse;

/// <summary>
/// Serves a lone caller on its own CPU when requests come through /dev/fuse.
/// <para>
/// A program that makes one request after another (stat of many files, find, ls) waits for each
/// answer. /dev/fuse wakes whichever worker has waited longest, wherever it last ran, and the
/// scheduler wakes the caller on an idle CPU rather than on the busy one that answered: so each
/// request pays two wake-ups of an idle CPU, which on a virtual machine cost tens of microseconds
/// each (measured here: 100k stat calls 4.1-4.5 s, against 2.0 s with caller and workers pinned to
/// one CPU by hand).
/// </para>
/// <para>
/// So while requests come from a single thread and none of them reads or writes file data (reads
/// are asynchronous: readahead keeps several in flight, served in parallel):
/// <list type="bullet">
/// <item>the workers move themselves to that thread's CPU, looked up in /proc/TID/stat every
/// millisecond while requests come, by a thread of its own that keeps off that CPU
/// (<see cref="DecideEveryMillisecond"/>), never by a worker;</item>
/// <item>one of them, the holder, alone reads /dev/fuse; the others wait (<see cref="BeforeRead"/>);</item>
/// <item>the holder hands its answers over as a SCHED_IDLE thread (<see cref="BeforeReply"/>), so
/// that the caller is woken on this CPU (see <see cref="SchedulerPolicy"/>), preempts the holder,
/// makes its next request and sleeps; the holder then runs again and finds the request waiting.
/// One context switch each way, nobody woken across CPUs.</item>
/// </list>
/// As soon as a second thread or a data read shows up, the workers go back to every CPU the server
/// may use and to SCHED_OTHER. Measured with bench/fuse-vs-kernel.sh: stat of 100k files 4.6-5.5 s
/// without, 2.1-2.5 s with.
/// </para>
/// <para>
/// Shared state is a handful of integers read and written without locks: a stale value costs at
/// worst a request served across CPUs or a short wait, never a wrong answer. The /proc/TID/stat
/// descriptor is used only by the deciding thread (<see cref="DecideEveryMillisecond"/>).
/// </para>
/// </summary>
internal sealed unsafe class CallerFollower : IDisposable
{
    private const int MaskWords = 1024 / 64;
    private const int ENODEV = 19;
    /// <summary>A waiting worker reads anyway once the holder has spent this long on one request.</summary>
    private const int HolderStuckMs = 10;
    /// <summary>No request for this long: idle-policy workers are turned back to normal.</summary>
    private const int RestMs = 10;
    private static readonly long s_ms = Stopwatch.Frequency / 1000;

    // The CPU a worker last pinned itself to, plus one; 0: its original affinity.
    [ThreadStatic]
    private static int t_pinnedPlusOne;

    // This worker is SCHED_IDLE (see BeforeReply), and its starvation watch.
    [ThreadStatic]
    private static WorkerState? t_worker;

    [ThreadStatic]
    private static StarvationWatch t_watch;

    // The node the last request this worker took was about (for a lookup: the directory).
    [ThreadStatic]
    private static ulong t_lastNode;

    // This thread has been through BeforeRead once (its inherited policy looked at).
    [ThreadStatic]
    private static bool t_started;

    /// <summary>A worker that has handed answers over as an idle thread: its thread id, and whether it is SCHED_IDLE now.</summary>
    private sealed class WorkerState
    {
        public int Tid;
        public int Idle;
    }

    private readonly List<WorkerState> _workers = [];
    private readonly ulong[] _allowed = new ulong[MaskWords];
    private readonly bool _mayUseIdlePolicy;
    private readonly TextWriter _log;
    // A futex word in native memory (stable address), bumped whenever the baton is let go. Freed by
    // Dispose, which runs once the session loop has ended (every worker gone).
    private readonly int* _batonGeneration = (int*)NativeMemory.AllocZeroed(sizeof(int));
    private int _windowCaller;          // 0: none yet; -1: not a lone synchronous caller
    private int _targetPlusOne;         // 0: no target (workers use every allowed CPU)
    private int _parked = 1;            // the deciding thread waits for a request (none for RestMs)
    private long _lastRequest;          // when the last request was read
    private readonly ManualResetEventSlim _decide = new(false);
    private Thread? _decider;
    private int _stopping;
    private int _statTid;
    private int _statFd = -1;
    private int _disabled;
    private int _holder;                // managed id of the worker that alone reads while following; 0: none
    private long _holderBusySince;      // when the holder took its current request; 0 while it reads
    private long _follows;
    private long _stops;
    private long _idleHandovers;
    private long _inheritedIdle;
    private readonly IdleBackoff _backoff = new();
    private readonly BackgroundThreads? _background;
    // What the deciding thread last did to the background threads: for which target, and how many had started.
    private readonly List<int> _backgroundIds = [];
    private int _backgroundTargetPlusOne;
    private int _backgroundStarted;

    private CallerFollower(TextWriter log, bool mayUseIdlePolicy, BackgroundThreads? background)
    {
        _log = log;
        _mayUseIdlePolicy = mayUseIdlePolicy;
        _background = background;
    }

    /// <summary>
    /// A follower for this process, or null when it cannot help: one usable CPU, or the process's
    /// affinity cannot be read.
    /// </summary>
    public static CallerFollower? TryCreate(TextWriter log, BackgroundThreads? background = null)
    {
        if (Environment.ProcessorCount < 2)
            return null;
        var f = new CallerFollower(log, SchedulerPolicy.MayLeaveIdlePolicy(), background);
        fixed (ulong* mask = f._allowed)
        {
            if (IoUringNative.sched_getaffinity(0, MaskWords * 8, mask) < 0)
            {
                f.Dispose();
                return null;
            }
        }
        if (f._allowed.Sum(w => BitOperations.PopCount(w)) < 2)
        {
            f.Dispose();
            return null;
        }
        f._decider = new Thread(f.DecideEveryMillisecond, 128 * 1024) { IsBackground = true, Name = "xfswin-follow" };
        f._decider.Start();
        return f;
    }

    /// <summary>Times the workers were moved to a lone caller's CPU (a new target chosen).</summary>
    public long Follows => Volatile.Read(ref _follows);

    /// <summary>Times following ended (a second caller, a data read, or no caller in a window).</summary>
    public long Stops => Volatile.Read(ref _stops);

    /// <summary>The deciding thread rests: no request came for <see cref="RestMs"/> ms.</summary>
    internal bool Resting => Volatile.Read(ref _parked) != 0;

    /// <summary>The CPU workers now move to, or -1.</summary>
    public int TargetCpu => Volatile.Read(ref _targetPlusOne) - 1;

    /// <summary>
    /// Called on a worker about to read /dev/fuse. While a lone caller is followed, one worker (the
    /// holder) reads alone and the others wait here, so that a request is taken by the worker on the
    /// caller's CPU without waking anybody: after handing its answer over as an idle thread, the
    /// holder is preempted by the woken caller, which makes its next request and sleeps; the holder
    /// then runs again and finds that request waiting. A waiter gives up waiting when following
    /// ends, when the holder has been busy with one request for over <see cref="HolderStuckMs"/> ms
    /// (a slow read must not hold other callers back), or when the device is gone.
    /// </summary>
    public void BeforeRead()
    {
        if (!t_started)
            Start();
        var me = Environment.CurrentManagedThreadId;
        while (Volatile.Read(ref _disabled) == 0)
        {
            var holder = Volatile.Read(ref _holder);
            if (Volatile.Read(ref _targetPlusOne) == 0)
            {
                if (holder == me)
                    ReleaseBaton();
                if (IsIdle)
                    BecomeNormal();
                return;
            }
            if (holder == me || (holder == 0 && Interlocked.CompareExchange(ref _holder, me, 0) == 0))
            {
                Volatile.Write(ref _holderBusySince, 0);
                return;
            }
            var busy = Volatile.Read(ref _holderBusySince);
            if (busy != 0 && Stopwatch.GetTimestamp() - busy > HolderStuckMs * s_ms)
                return;
            // Only the holder waits as an idle-policy thread (for its caller's next request).
            if (IsIdle)
                BecomeNormal();
            var generation = Volatile.Read(ref *_batonGeneration);
            if (Volatile.Read(ref _holder) == holder && Volatile.Read(ref _targetPlusOne) != 0)
                IoUringNative.FutexWait(_batonGeneration, generation, HolderStuckMs);
        }
    }

    /// <summary>
    /// A worker's first read. A thread starts under its creator's policy, and libfuse starts a new
    /// worker from the one that has just read a request, which may be the holder, SCHED_IDLE: such a
    /// worker is not registered as idle and nobody would turn it back. (A CI run found a worker left
    /// SCHED_IDLE after the requests stopped: this, and a request outlasting RestMs (see
    /// BeforeReply), are the two ways that could happen.)
    /// </summary>
    private void Start()
    {
        t_started = true;
        if (_mayUseIdlePolicy && SchedulerPolicy.IsIdle())
        {
            SchedulerPolicy.BecomeNormal();
            Interlocked.Increment(ref _inheritedIdle);
        }
    }

    /// <summary>Workers that started as SCHED_IDLE threads, inherited from the worker that started them, and were turned back.</summary>
    public long InheritedIdle => Volatile.Read(ref _inheritedIdle);

    /// <summary>Called when a read of /dev/fuse failed: the holder lets the others read (ENODEV at unmount ends following).</summary>
    public void ReadFailed(int errno)
    {
        if (errno == ENODEV)
            Volatile.Write(ref _disabled, 1);
        if (Volatile.Read(ref _holder) == Environment.CurrentManagedThreadId || errno == ENODEV)
            ReleaseBaton();
    }

    private void ReleaseBaton()
    {
        Volatile.Write(ref _holder, 0);
        Interlocked.Increment(ref *_batonGeneration);
        IoUringNative.FutexWakeAll(_batonGeneration);
    }

    /// <summary>
    /// Called on the worker that has just read a request from /dev/fuse, before libfuse handles it:
    /// notes who asked and when (waking the deciding thread after a quiet spell), and moves this
    /// worker to the target.
    /// </summary>
    public void OnRequest(FuseInHeader* header)
    {
        if (Volatile.Read(ref _disabled) != 0)
            return;
        if (Volatile.Read(ref _holder) == Environment.CurrentManagedThreadId)
            Volatile.Write(ref _holderBusySince, Stopwatch.GetTimestamp());
        var op = header->opcode;
        if (op is not (FuseUringConstants.FUSE_FORGET or FuseUringConstants.FUSE_BATCH_FORGET or FuseUringConstants.FUSE_INTERRUPT) &&
            !IsKernelsOwnRelease(op, header->pid))
        {
            var pid = (int)header->pid;
            var seen = Volatile.Read(ref _windowCaller);
            if (op is FuseUringConstants.FUSE_READ or FuseUringConstants.FUSE_WRITE || pid <= 0)
            {
                if (seen != -1)
                    Volatile.Write(ref _windowCaller, -1);
            }
            else if (seen == 0)
            {
                Interlocked.CompareExchange(ref _windowCaller, pid, 0);
            }
            else if (seen != pid && seen != -1)
            {
                Volatile.Write(ref _windowCaller, -1);
            }
        }
        var now = Stopwatch.GetTimestamp();
        // A full fence between this write and the read of _parked (the deciding thread writes
        // _parked, then reads _lastRequest): one of the two sees the other, so the deciding thread
        // never rests with a request unseen.
        Interlocked.Exchange(ref _lastRequest, now);
        if (Volatile.Read(ref _parked) != 0 && Interlocked.Exchange(ref _parked, 0) != 0)
            _decide.Set();
        var target = Volatile.Read(ref _targetPlusOne);
        var sameNode = header->nodeid == t_lastNode;
        t_lastNode = header->nodeid;
        if (IsIdle)
            CheckIdle(now, sameNode);
        if (target != t_pinnedPlusOne)
            Pin(target);
    }

    /// <summary>
    /// The kernel sends RELEASE and RELEASEDIR in the background once a file or directory is closed,
    /// on nobody's behalf (pid 0). Counted as a second caller, they ended following once per
    /// directory of a walk that lists directories (`find -ls`, `ls -lR`, `du`), which then never was
    /// followed at all. Other requests with pid 0 (a caller in a PID namespace the server cannot see)
    /// still count as a caller that cannot be followed.
    /// </summary>
    internal static bool IsKernelsOwnRelease(uint opcode, uint pid) =>
        pid == 0 && opcode is FuseUringConstants.FUSE_RELEASE or FuseUringConstants.FUSE_RELEASEDIR;

    /// <summary>
    /// Called on a worker about to write an answer: a worker on the followed caller's CPU becomes a
    /// SCHED_IDLE thread (if it is not one already) so that the caller is woken here, and stays one
    /// while it serves that caller: switching policy costs about 3 µs per change here, twice per
    /// request if done around every answer (measured: 100k stat calls 2.1-2.5 s that way, 1.7-2.0 s
    /// staying idle). <see cref="OnRequest"/> turns it back to SCHED_OTHER when it serves anyone
    /// else, when it looks starved, and for a request about another node than the last: the first
    /// lookup in a directory starts the engine's background reads, whose threads, woken by an idle
    /// CPU's only thread, would be placed on that CPU and hold the holder back (measured: 7 ms
    /// instead of 1.4 ms for the first stat in each directory of a cold volume).
    /// </summary>
    public void BeforeReply()
    {
        var idle = IsIdle;
        if (idle || t_pinnedPlusOne == 0 || Volatile.Read(ref _targetPlusOne) != t_pinnedPlusOne || !_mayUseIdlePolicy ||
            !_backoff.Allows(Stopwatch.GetTimestamp()) || Volatile.Read(ref _disabled) != 0 || Volatile.Read(ref _parked) != 0)
        {
            if (idle)
                Interlocked.Increment(ref _idleHandovers);
            return;
        }
        if (!t_watch.Start())
            return;
        var me = t_worker ??= Register();
        // Idle is published before the policy changes, and the deciding thread's rest looked at
        // after (full fences on both sides; it rests, then turns idle workers back): either it sees
        // this worker idle, or this worker sees it resting and turns itself back. A request that
        // took longer than RestMs (a slow disk read) would otherwise leave the worker SCHED_IDLE
        // after the deciding thread had gone to rest.
        Interlocked.Exchange(ref me.Idle, 1);
        SchedulerPolicy.BecomeIdle();
        if (Volatile.Read(ref _parked) != 0)
        {
            Volatile.Write(ref me.Idle, 0);
            SchedulerPolicy.BecomeNormal();
            return;
        }
        Interlocked.Increment(ref _idleHandovers);
    }

    /// <summary>
    /// While this worker is SCHED_IDLE: back to SCHED_OTHER for a request about another node than
    /// the last, when it no longer serves the followed caller on its CPU, or when it is starved
    /// (<see cref="StarvationWatch"/>; answers are then handed over normally for a while, see
    /// <see cref="IdleBackoff"/>).
    /// </summary>
    private void CheckIdle(long now, bool sameNode)
    {
        var keep = sameNode && t_pinnedPlusOne != 0 && Volatile.Read(ref _targetPlusOne) == t_pinnedPlusOne && Volatile.Read(ref _disabled) == 0;
        if (keep && t_watch.Starved(now))
        {
            keep = false;
            _backoff.Starved(now);
        }
        if (!keep)
            BecomeNormal();
    }

    /// <summary>This worker is SCHED_IDLE (the deciding thread may have turned it back meanwhile).</summary>
    private static bool IsIdle => t_worker is { } w && Volatile.Read(ref w.Idle) != 0;

    private WorkerState Register()
    {
        var w = new WorkerState { Tid = (int)IoUringNative.syscall(IoUringConstants.__NR_gettid, 0, 0, 0, 0, 0, 0) };
        lock (_workers)
            _workers.Add(w);
        return w;
    }

    /// <summary>
    /// Called by the deciding thread when no request came for a while: every worker left SCHED_IDLE
    /// goes back to SCHED_OTHER, so that none waits for the next caller as an idle-policy thread,
    /// which a busy neighbour would keep from the CPU when that request comes.
    /// </summary>
    private void NormalizeIdleWorkers()
    {
        lock (_workers)
        {
            foreach (var w in _workers)
            {
                if (Interlocked.CompareExchange(ref w.Idle, 0, 1) != 1)
                    continue;
                var param = 0;
                IoUringNative.sched_setscheduler(w.Tid, IoUringConstants.SCHED_OTHER, &param);
            }
        }
    }

    private void BecomeNormal()
    {
        if (t_worker is not { } me || Interlocked.CompareExchange(ref me.Idle, 0, 1) != 1)
            return; // already turned back by the deciding thread
        if (!SchedulerPolicy.BecomeNormal())
        {
            // Not expected (the permission was checked); do not risk it again.
            Volatile.Write(ref _disabled, 1);
            ReleaseBaton();
            _log.WriteLine($"xfswin: a worker thread could not leave SCHED_IDLE (errno {Marshal.GetLastPInvokeError()}); callers are no longer followed.");
        }
    }

    /// <summary>Answers handed over as an idle thread on the followed caller's CPU.</summary>
    public long IdleHandovers => Volatile.Read(ref _idleHandovers);

    /// <summary>Times an idle worker was found starved, and answers went out normally for a while.</summary>
    public long IdleStarved => _backoff.Count;

    /// <summary>
    /// The deciding thread. Reading another thread's /proc/TID/stat can block: while a thread of the
    /// caller's process runs execve, it waits for the caller's other threads to die, and one of them
    /// may be waiting for our answer (seen: a worker deciding inline waited on the reader's side
    /// forever, and so did the caller). So workers never read it: this thread does, and they serve on.
    /// <para>
    /// It looks every millisecond while it follows a caller, every 4 ms while requests come
    /// otherwise, and sleeps from 10 ms after the last one until the next. The scheduler still moves the caller now and then (when something else is
    /// runnable on its CPU as it is woken), and until the workers follow, every request pays two
    /// wake-ups across CPUs: 100k stat calls took 2.4-2.7 s looking every 4 ms, 2.1-2.2 s every
    /// 1 ms, 2.0-2.3 s every 0.25-0.5 ms, with this thread using about 3 %, 4 %, 7 % and 10 % of
    /// a CPU meanwhile. It wakes on its own timer: woken by the holder instead, it cost the same
    /// cold and 7 % more with the server's caches warm (1.94 s against 1.81 s).
    /// </para>
    /// </summary>
    private void DecideEveryMillisecond()
    {
        while (true)
        {
            if (Volatile.Read(ref _parked) != 0)
            {
                _decide.Wait();
                _decide.Reset();
            }
            else
            {
                // Its own timer, not a wake-up from the holder: a worker waking this thread on the
                // other CPU, just before it woke the caller, often had the caller woken over there.
                // Every millisecond while following (to catch up with a caller the scheduler moved),
                // every 4 otherwise: several callers or data reads keep the workers everywhere anyway.
                Thread.Sleep(Volatile.Read(ref _targetPlusOne) != 0 ? 1 : 4);
            }
            if (Volatile.Read(ref _stopping) != 0)
                return;
            var last = Volatile.Read(ref _lastRequest);
            if (Stopwatch.GetTimestamp() - last > RestMs * s_ms)
            {
                // Rest first, then turn idle workers back (see BeforeReply for the other side).
                Interlocked.Exchange(ref _parked, 1);
                NormalizeIdleWorkers();
                // A request read meanwhile may have seen this thread awake and not woken it.
                if (Volatile.Read(ref _lastRequest) != last)
                    Volatile.Write(ref _parked, 0);
                continue;
            }
            if (Volatile.Read(ref _windowCaller) == 0)
                continue; // no request since the last look: nothing new to go by
            try
            {
                Decide();
                PlaceBackgroundThreads();
            }
            catch (Exception e)
            {
                _log.WriteLine($"xfswin: following callers stopped: {e.Message}");
                Volatile.Write(ref _targetPlusOne, 0);
                Volatile.Write(ref _disabled, 1);
                ReleaseBaton();
                return;
            }
        }
    }

    private void Decide()
    {
        var caller = Interlocked.Exchange(ref _windowCaller, 0);
        var cpu = caller > 0 ? CpuOf(caller) : -1;
        if (cpu >= 0 && (cpu >= MaskWords * 64 || (_allowed[cpu / 64] & (1UL << (cpu % 64))) == 0))
            cpu = -1;
        var before = Volatile.Read(ref _targetPlusOne);
        Volatile.Write(ref _targetPlusOne, cpu + 1);
        if (before != cpu + 1)
        {
            if (cpu >= 0)
                Interlocked.Increment(ref _follows);
            else
                Interlocked.Increment(ref _stops);
            KeepOffTarget(cpu);
        }
    }

    /// <summary>
    /// The deciding thread runs on the other CPUs: woken on the target, where the holder looks idle
    /// while it hands answers over, it would preempt the holder and the caller every few milliseconds.
    /// </summary>
    private void KeepOffTarget(int target) => SetAffinity(only: -1, except: target);

    /// <summary>
    /// While a caller is followed, the volume's background threads (read-ahead) run on every allowed
    /// CPU but the target, like this thread. Woken there by a worker, the kernel would place them on
    /// the target, whose only runnable thread, the idle-policy holder, makes it look idle: they would
    /// run ahead of the holder while the caller waits for it (traced: the planner running 1.5 ms
    /// there while the other CPU idled, once per directory of a stat walk; keeping them off took a
    /// cold walk of 100k files, with the children's inodes decoded ahead on the planner, from 1.72 s
    /// to 1.53 s). Threads started since the last look are placed at the next (the volume starts
    /// them on first use). When following ends they get every allowed CPU back.
    /// </summary>
    private void PlaceBackgroundThreads()
    {
        if (_background is not { } background)
            return;
        var target = Volatile.Read(ref _targetPlusOne);
        var started = background.Started();
        if (target == _backgroundTargetPlusOne && started == _backgroundStarted)
            return;
        _backgroundIds.Clear();
        background.CopyIds(_backgroundIds);
        var mask = stackalloc ulong[MaskWords];
        FillMask(new Span<ulong>(mask, MaskWords), only: -1, except: target - 1);
        foreach (var tid in _backgroundIds)
        {
            // A thread that has ended answers ESRCH: nothing to place.
            if (tid > 0)
                IoUringNative.sched_setaffinity(tid, MaskWords * 8, mask);
        }
        _backgroundTargetPlusOne = target;
        _backgroundStarted = started;
    }

    /// <summary>Moves this worker to the target CPU, or back to every allowed CPU (0).</summary>
    private void Pin(int targetPlusOne)
    {
        // On failure the worker stays where it is, and tries again with its next request.
        if (SetAffinity(only: targetPlusOne - 1, except: -1))
            t_pinnedPlusOne = targetPlusOne;
    }

    /// <summary>The calling thread may run on CPU <paramref name="only"/> alone, or else on every allowed CPU but <paramref name="except"/>.</summary>
    private bool SetAffinity(int only, int except)
    {
        var mask = stackalloc ulong[MaskWords];
        FillMask(new Span<ulong>(mask, MaskWords), only, except);
        return IoUringNative.sched_setaffinity(0, MaskWords * 8, mask) == 0;
    }

    /// <summary>CPU <paramref name="only"/> alone, or else every allowed CPU but <paramref name="except"/> (-1: none).</summary>
    private void FillMask(Span<ulong> mask, int only, int except)
    {
        if (only >= 0)
        {
            mask.Clear();
            mask[only / 64] = 1UL << (only % 64);
        }
        else
        {
            _allowed.CopyTo(mask);
            if (except >= 0)
                mask[except / 64] &= ~(1UL << (except % 64));
        }
    }

    /// <summary>The CPU thread <paramref name="tid"/> last ran on (field 39 of /proc/TID/stat), or -1.</summary>
    private int CpuOf(int tid)
    {
        if (tid != _statTid || _statFd < 0)
        {
            if (_statFd >= 0)
                IoUringNative.close(_statFd);
            _statTid = tid;
            var path = System.Text.Encoding.ASCII.GetBytes($"/proc/{tid.ToString(CultureInfo.InvariantCulture)}/stat\0");
            fixed (byte* p = path)
                _statFd = IoUringNative.open(p, IoUringConstants.O_RDONLY | IoUringConstants.O_CLOEXEC);
            if (_statFd < 0)
                return -1;
        }
        var buf = stackalloc byte[1024];
        var n = (int)IoUringNative.pread(_statFd, buf, 1024, 0);
        if (n <= 0)
        {
            // The thread has ended (ESRCH): open afresh next time.
            IoUringNative.close(_statFd);
            _statFd = -1;
            return -1;
        }
        return ProcessorField(new ReadOnlySpan<byte>(buf, n));
    }

    /// <summary>
    /// Field 39 (processor) of a /proc/TID/stat line. The command name (field 2) is in parentheses
    /// and may itself hold spaces and parentheses, so fields are counted from the last ')'.
    /// </summary>
    internal static int ProcessorField(ReadOnlySpan<byte> stat)
    {
        var close = stat.LastIndexOf((byte)')');
        if (close < 0)
            return -1;
        // Field 3 (state) is the first after the name.
        var field = SchedulerPolicy.Field(stat[(close + 1)..], 39 - 3);
        return int.TryParse(field, NumberStyles.None, CultureInfo.InvariantCulture, out var cpu) && !field.IsEmpty ? cpu : -1;
    }

    public void Dispose()
    {
        Volatile.Write(ref _disabled, 1);
        ReleaseBaton();
        Volatile.Write(ref _stopping, 1);
        _decide.Set();
        // Bounded: a read of a stuck process's /proc file must not hold up the unmount.
        if (_decider is not null && !_decider.Join(TimeSpan.FromSeconds(5)))
            return; // the thread still owns the descriptor and the event; they go with the process
        _decide.Dispose();
        // The volume may outlive this follower (and its threads serve on): every allowed CPU again.
        if (_backgroundTargetPlusOne != 0)
        {
            Volatile.Write(ref _targetPlusOne, 0);
            PlaceBackgroundThreads();
        }
        if (_statFd >= 0)
            IoUringNative.close(_statFd);
        _statFd = -1;
        NativeMemory.Free(_batonGeneration);
    }
}

/// <summary>A volume's background threads, as the follower places them: how many have started, and their operating-system ids.</summary>
internal sealed record BackgroundThreads(Func<int> Started, Action<List<int>> CopyIds);

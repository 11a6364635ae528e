using System.Runtime.InteropServices;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// No worker is left a SCHED_IDLE thread once requests stop (see CallerFollower): neither one
/// libfuse started from the idle holder, nor one whose request outlasted the deciding thread's
/// wait. The follower is driven here as libfuse's workers drive it, without a mount, so that each
/// order of events happens for certain.
/// </summary>
public sealed unsafe partial class CallerFollowerPolicyTests
{
    private static int PolicyOf(int tid) => IoUringNative.sched_getscheduler(tid);

    private static int Tid() => (int)IoUringNative.syscall(IoUringConstants.__NR_gettid, 0, 0, 0, 0, 0, 0);

    private static CallerFollower NewFollower()
    {
        Assert.True(Environment.ProcessorCount >= 2, "these tests need at least 2 CPUs");
        Assert.True(SchedulerPolicy.MayLeaveIdlePolicy(), "these tests need the right to leave SCHED_IDLE (run as root)");
        var f = CallerFollower.TryCreate(TextWriter.Null);
        Assert.NotNull(f);
        return f;
    }

    /// <summary>Runs <paramref name="body"/> on a thread of its own (it changes that thread's policy and affinity).</summary>
    private static void OnOwnThread(Action body)
    {
        Exception? failure = null;
        var t = new Thread(() =>
        {
            try { body(); }
            catch (Exception e) { failure = e; }
        });
        t.Start();
        Assert.True(t.Join(TimeSpan.FromSeconds(30)), "the worker thread did not finish");
        if (failure is not null)
            throw new Xunit.Sdk.XunitException(failure.ToString());
    }

    private static void WaitFor(Func<bool> condition, string what)
    {
        var sw = System.Diagnostics.Stopwatch.StartNew();
        while (!condition())
        {
            Assert.True(sw.Elapsed < TimeSpan.FromSeconds(10), $"waited 10 s for {what}");
            Thread.Sleep(1);
        }
    }

    /// <summary>
    /// Makes the calling thread the followed holder: asks as a lone caller (itself) until the
    /// deciding thread targets a CPU, then reads and takes a request as libfuse's worker would.
    /// </summary>
    private static void Follow(CallerFollower f)
    {
        var request = new FuseInHeader { opcode = FuseUringConstants.FUSE_LOOKUP, nodeid = 1, pid = (uint)Tid() };
        f.BeforeRead();
        var sw = System.Diagnostics.Stopwatch.StartNew();
        do
        {
            Assert.True(sw.Elapsed < TimeSpan.FromSeconds(10), "the deciding thread did not follow a lone caller within 10 s");
            f.OnRequest(&request);
            Thread.Sleep(1);
        }
        while (f.TargetCpu < 0);
        f.BeforeRead();
        f.OnRequest(&request);
        Assert.Equal(f.TargetCpu, CallerFollower.ProcessorField(File.ReadAllBytes("/proc/thread-self/stat")));
    }

    [LibraryImport("libc")]
    private static partial int pthread_create(nint* thread, nint attr, delegate* unmanaged<nint, nint> start, nint arg);

    [LibraryImport("libc")]
    private static partial int pthread_join(nint thread, nint* result);

    /// <summary>What a worker started by libfuse saw: its policy as it started, and after its first read.</summary>
    private sealed class NativeWorker(CallerFollower follower)
    {
        public int Inherited = -1, AfterRead = -1;

        [UnmanagedCallersOnly]
        public static nint Run(nint state)
        {
            var w = (NativeWorker)GCHandle.FromIntPtr(state).Target!;
            w.Inherited = PolicyOf(0);
            w._follower.BeforeRead();
            w.AfterRead = PolicyOf(0);
            return 0;
        }


        private readonly CallerFollower _follower = follower;
    }

    [Fact]
    public void A_worker_started_by_an_idle_thread_reads_as_a_normal_thread()
    {
        using var f = NewFollower();
        var worker = new NativeWorker(f);
        var handle = GCHandle.Alloc(worker);
        try
        {
            OnOwnThread(() =>
            {
                SchedulerPolicy.BecomeIdle();
                // libfuse starts a worker (pthread_create, which keeps the creator's policy) from
                // the one that has just read a request: here, an idle one. (.NET's own threads
                // start as SCHED_OTHER whoever starts them.)
                nint thread;
                Assert.Equal(0, pthread_create(&thread, 0, &NativeWorker.Run, GCHandle.ToIntPtr(handle)));
                Assert.Equal(0, pthread_join(thread, null));
                Assert.True(SchedulerPolicy.BecomeNormal());
            });
        }
        finally
        {
            handle.Free();
        }
        Assert.Equal(IoUringConstants.SCHED_IDLE, worker.Inherited);
        Assert.Equal(IoUringConstants.SCHED_OTHER, worker.AfterRead);
        Assert.Equal(1, f.InheritedIdle);
    }

    [Fact]
    public void A_holder_idle_between_requests_is_turned_back_when_they_stop()
    {
        using var f = NewFollower();
        OnOwnThread(() =>
        {
            Follow(f);
            // A request, then its answer handed over as an idle thread. Retried: on a loaded machine
            // this thread may be held off the CPU for longer than the deciding thread waits before it
            // rests and turns idle workers back (10 ms), between the two steps or before the check.
            var request = new FuseInHeader { opcode = FuseUringConstants.FUSE_LOOKUP, nodeid = 1, pid = (uint)Tid() };
            var idle = false;
            for (var attempt = 0; attempt < 50 && !idle; attempt++)
            {
                f.OnRequest(&request);
                f.BeforeReply();
                idle = f.IdleHandovers > 0 && PolicyOf(0) == IoUringConstants.SCHED_IDLE;
            }
            Assert.True(idle, "the holder never handed an answer over as an idle thread");
            // The next read waits for the caller's next request, which does not come.
            WaitFor(() => f.Resting, "the deciding thread to rest");
            WaitFor(() => PolicyOf(0) == IoUringConstants.SCHED_OTHER, "the idle worker to be turned back");
        });
    }

    [Fact]
    public void A_holder_whose_request_outlasts_the_deciding_threads_wait_does_not_stay_idle()
    {
        using var f = NewFollower();
        OnOwnThread(() =>
        {
            Follow(f);
            // A request that takes long (a slow disk read): the deciding thread goes to rest
            // meanwhile, with the workers still pinned to the caller's CPU.
            WaitFor(() => f.Resting, "the deciding thread to rest");
            Assert.True(f.TargetCpu >= 0);
            f.BeforeReply();
            Assert.Equal(IoUringConstants.SCHED_OTHER, PolicyOf(0));
            Thread.Sleep(50);
            Assert.Equal(IoUringConstants.SCHED_OTHER, PolicyOf(0));
        });
        Assert.Equal(0, f.IdleHandovers);
    }

    /// <summary>The CPUs thread <paramref name="tid"/> may run on.</summary>
    private static List<int> CpusOf(int tid)
    {
        var mask = stackalloc ulong[16];
        Assert.Equal(0, IoUringNative.sched_getaffinity(tid, 16 * 8, mask));
        return Enumerable.Range(0, 1024).Where(c => (mask[c / 64] & (1UL << (c % 64))) != 0).ToList();
    }

    /// <summary>A thread that only waits, as a volume's read-ahead threads do between reads.</summary>
    private sealed class WaitingThread : IDisposable
    {
        private readonly ManualResetEventSlim _end = new();
        private readonly ManualResetEventSlim _started = new();
        private readonly Thread _thread;

        public WaitingThread()
        {
            _thread = new Thread(() =>
            {
                Tid = Tid();
                _started.Set();
                _end.Wait();
            });
            _thread.Start();
            _started.Wait();
        }

        public int Tid { get; private set; }

        public void Dispose()
        {
            _end.Set();
            _thread.Join();
        }
    }

    /// <summary>
    /// While a caller is followed the volume's background threads run anywhere but its CPU, one
    /// started meanwhile included; when following ends they may run everywhere again.
    /// </summary>
    [Fact]
    public void Background_threads_keep_off_the_followed_callers_cpu_until_following_ends()
    {
        var everywhere = CpusOf(0);
        var threads = new List<WaitingThread> { new() };
        try
        {
            using var f = CallerFollower.TryCreate(TextWriter.Null, new BackgroundThreads(
                () => { lock (threads) return threads.Count; },
                ids => { lock (threads) ids.AddRange(threads.Select(t => t.Tid)); }));
            Assert.NotNull(f);
            OnOwnThread(() =>
            {
                Follow(f);
                var target = f.TargetCpu;
                var elsewhere = everywhere.Where(c => c != target).ToList();
                WaitFor(() => CpusOf(threads[0].Tid).SequenceEqual(elsewhere), "the background thread to leave the caller's CPU");

                // Started meanwhile (by this worker, pinned to the target; .NET starts its threads
                // on every CPU of the process whoever starts them): placed too.
                var late = new WaitingThread();
                Assert.Contains(target, CpusOf(late.Tid));
                lock (threads)
                    threads.Add(late);
                var request = new FuseInHeader { opcode = FuseUringConstants.FUSE_LOOKUP, nodeid = 1, pid = (uint)Tid() };
                f.OnRequest(&request);
                WaitFor(() => CpusOf(late.Tid).SequenceEqual(elsewhere), "the thread started on the caller's CPU to leave it");

                // A read of file data ends following.
                var read = new FuseInHeader { opcode = FuseUringConstants.FUSE_READ, nodeid = 2, pid = (uint)Tid() };
                f.OnRequest(&read);
                WaitFor(() => f.TargetCpu < 0, "following to end");
                WaitFor(() => threads.All(t => CpusOf(t.Tid).SequenceEqual(everywhere)), "the background threads to get every CPU back");
            });
        }
        finally
        {
            foreach (var t in threads)
                t.Dispose();
        }
    }

    [Theory]
    [InlineData(FuseUringConstants.FUSE_RELEASEDIR, 0u, true)]
    [InlineData(FuseUringConstants.FUSE_RELEASE, 0u, true)]
    [InlineData(FuseUringConstants.FUSE_RELEASEDIR, 4242u, false)]
    [InlineData(FuseUringConstants.FUSE_LOOKUP, 0u, false)]
    public void Only_releases_the_kernel_sends_on_nobodys_behalf_are_not_a_caller(uint opcode, uint pid, bool kernels)
    {
        Assert.Equal(kernels, CallerFollower.IsKernelsOwnRelease(opcode, pid));
    }

    /// <summary>
    /// A walk that lists directories closes each one, and the kernel then sends RELEASEDIR with pid 0
    /// in the background: the caller is still alone, and following goes on.
    /// </summary>
    [Fact]
    public void The_kernels_own_releasedir_does_not_end_following_a_lone_caller()
    {
        using var f = NewFollower();
        OnOwnThread(() =>
        {
            Follow(f);
            var stops = f.Stops;
            var target = f.TargetCpu;
            var lookup = new FuseInHeader { opcode = FuseUringConstants.FUSE_LOOKUP, nodeid = 7, pid = (uint)Tid() };
            var release = new FuseInHeader { opcode = FuseUringConstants.FUSE_RELEASEDIR, nodeid = 7, pid = 0 };
            // Longer than several of the deciding thread's looks (every millisecond).
            var sw = System.Diagnostics.Stopwatch.StartNew();
            while (sw.ElapsedMilliseconds < 50)
            {
                f.OnRequest(&lookup);
                f.OnRequest(&release);
                Thread.Sleep(1);
            }
            Assert.Equal(stops, f.Stops);
            Assert.Equal(target, f.TargetCpu);

            // Another request with pid 0 is a caller the server cannot see: following ends.
            var unseen = new FuseInHeader { opcode = FuseUringConstants.FUSE_LOOKUP, nodeid = 7, pid = 0 };
            f.OnRequest(&unseen);
            WaitFor(() => f.TargetCpu < 0, "following to end for a caller in another PID namespace");
        });
    }
}

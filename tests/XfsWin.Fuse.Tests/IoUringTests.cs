using System.Diagnostics;
using System.Runtime.InteropServices;
using XfsWin.Volume;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The fuse module's switch for FUSE over io_uring (/sys/module/fuse/parameters/enable_uring),
/// which only root may flip. It is global to the machine: tests that set it restore it, and hold
/// a machine-wide lock meanwhile (several test processes may run at once on one machine).
/// <para>
/// XFSWIN_TEST_IO_URING=on runs the whole suite with it set to Y (and checks that the mounts really
/// serve through io_uring), =off with it set to N; unset leaves it as the machine has it. The old
/// value comes back when the test process exits.
/// </para>
/// </summary>
internal static partial class IoUringMode
{
    public const string Parameter = "/sys/module/fuse/parameters/enable_uring";
    private static readonly Lazy<string?> s_suiteMode = new(ApplySuiteMode);

    /// <summary>True when this kernel has FUSE over io_uring at all.</summary>
    public static bool KernelSupports => File.Exists(Parameter);

    /// <summary>"on", "off", or null (the machine's setting), from XFSWIN_TEST_IO_URING; applied on first use.</summary>
    public static string? SuiteMode => s_suiteMode.Value;

    public static bool SuiteRunsOnIoUring => SuiteMode == "on";

    private static string? ApplySuiteMode()
    {
        var mode = Environment.GetEnvironmentVariable("XFSWIN_TEST_IO_URING")?.Trim().ToLowerInvariant();
        if (mode is not ("on" or "off"))
            return null;
        RequireKernelSupport();
        string previous;
        using (SwitchLock.Take(exclusive: true))
        {
            previous = Read();
            Write(mode == "on");
        }
        AppDomain.CurrentDomain.ProcessExit += (_, _) =>
        {
            using (SwitchLock.Take(exclusive: true))
                File.WriteAllText(Parameter, previous);
        };
        return mode;
    }

    /// <summary>Fails, saying what is needed, when this kernel has no FUSE over io_uring.</summary>
    public static void RequireKernelSupport()
    {
        if (!KernelSupports)
            throw new InvalidOperationException(
                $"This kernel has no FUSE over io_uring ({Parameter} is missing): the io_uring tests need Linux 6.14 or later " +
                "built with CONFIG_FUSE_IO_URING=y.");
    }

    /// <summary>
    /// For a suite run on io_uring: while held, no other test process changes the switch, so a
    /// server started now gets io_uring. Null when this process already holds the switch itself.
    /// </summary>
    public static IDisposable? HoldSwitch() => SuiteRunsOnIoUring && !SwitchLock.HeldExclusively ? SwitchLock.Take(exclusive: false) : null;

    public static string Read() => File.ReadAllText(Parameter).Trim();

    public static void Write(bool enabled) => File.WriteAllText(Parameter, enabled ? "Y" : "N");

    /// <summary>Sets the switch until disposed, then puts back what it was; no other test process touches it meanwhile.</summary>
    public static IDisposable Set(bool enabled)
    {
        RequireKernelSupport();
        _ = SuiteMode;
        var held = SwitchLock.Take(exclusive: true);
        var previous = Read();
        Write(enabled);
        return new Restore(previous, held);
    }

    private sealed class Restore(string previous, SwitchLock held) : IDisposable
    {
        public void Dispose()
        {
            File.WriteAllText(Parameter, previous);
            held.Dispose();
        }
    }

    /// <summary>flock(2) on /tmp/xfswin-enable-uring.lock: exclusive to change the switch, shared to rely on it.</summary>
    private sealed partial class SwitchLock : IDisposable
    {
        private const string Path = "/tmp/xfswin-enable-uring.lock";
        private const int LOCK_SH = 1, LOCK_EX = 2, LOCK_NB = 4;
        private static int s_exclusive;
        private readonly bool _exclusive;
        private int _fd;

        private SwitchLock(int fd, bool exclusive)
        {
            _fd = fd;
            _exclusive = exclusive;
            if (exclusive)
                Interlocked.Increment(ref s_exclusive);
        }

        public static bool HeldExclusively => Volatile.Read(ref s_exclusive) > 0;

        public static SwitchLock Take(bool exclusive)
        {
            // libc's open, not FileStream: .NET takes its own flock on the files it opens.
            var fd = open(Path, 0x42 /* O_RDWR | O_CREAT */ | 0x80000 /* O_CLOEXEC */, 438 /* 0666 */);
            if (fd < 0)
                throw new IOException($"cannot open {Path} (errno {Marshal.GetLastPInvokeError()})");
            var sw = Stopwatch.StartNew();
            while (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0)
            {
                if (sw.Elapsed > TimeSpan.FromMinutes(10))
                {
                    close(fd);
                    throw new TimeoutException($"another test process has held {Path} for 10 minutes (it changes {Parameter})");
                }
                Thread.Sleep(20);
            }
            return new SwitchLock(fd, exclusive);
        }

        public void Dispose()
        {
            var fd = Interlocked.Exchange(ref _fd, -1);
            if (fd < 0)
                return;
            if (_exclusive)
                Interlocked.Decrement(ref s_exclusive);
            close(fd); // releases the lock
        }

        [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
        private static partial int open(string path, int flags, int mode);

        [LibraryImport("libc", SetLastError = true)]
        private static partial int flock(int fd, int operation);

        [LibraryImport("libc")]
        private static partial int close(int fd);
    }

    /// <summary>
    /// The io_uring queue threads of a server process (named xfswin-uring-N) and, for each, the
    /// system call it is in: 426 (io_uring_enter) once its entries are registered and it waits for
    /// requests.
    /// </summary>
    public static List<(string Name, long Syscall, string CpusAllowed)> QueueThreads(int pid)
    {
        var result = new List<(string, long, string)>();
        foreach (var task in Directory.EnumerateDirectories($"/proc/{pid}/task"))
        {
            try
            {
                var name = File.ReadAllText(Path.Combine(task, "comm")).Trim();
                if (!name.StartsWith("xfswin-uring-", StringComparison.Ordinal))
                    continue;
                var syscall = File.ReadAllText(Path.Combine(task, "syscall")).Split(' ')[0];
                var cpus = File.ReadLines(Path.Combine(task, "status")).First(l => l.StartsWith("Cpus_allowed_list:", StringComparison.Ordinal))
                    .Split(':')[1].Trim();
                result.Add((name, long.TryParse(syscall, out var n) ? n : -1, cpus));
            }
            catch (IOException)
            {
                // The thread ended while we looked.
            }
        }
        return result;
    }

    /// <summary>Waits until every queue thread of <paramref name="pid"/> waits in io_uring_enter; throws otherwise.</summary>
    public static void AssertServesThroughIoUring(int pid, string what)
    {
        var queues = FuseUringTransport.CountPossibleCpus();
        var sw = Stopwatch.StartNew();
        List<(string Name, long Syscall, string CpusAllowed)> threads;
        while (true)
        {
            threads = QueueThreads(pid);
            if (threads.Count == queues && threads.All(t => t.Syscall == 426))
                return;
            // Only tells a transport that never starts from a slow machine: returns as soon as it serves.
            if (sw.Elapsed > TimeSpan.FromSeconds(60))
                break;
            Thread.Sleep(50);
        }
        var all = Directory.Exists($"/proc/{pid}")
            ? string.Join(", ", Directory.EnumerateDirectories($"/proc/{pid}/task").Select(t => { try { return File.ReadAllText(Path.Combine(t, "comm")).Trim(); } catch (IOException) { return "?"; } }))
            : "(exited)";
        throw new InvalidOperationException(
            $"{what} (pid {pid}) does not serve through io_uring: expected {queues} queue threads waiting in io_uring_enter, found " +
            string.Join(", ", threads.Select(t => $"{t.Name} in syscall {t.Syscall}")) + $"; enable_uring is {Read()}; its threads: {all}");
    }
}

/// <summary>A <see cref="FuseHost"/> mounted and run in this process, so tests can look at it.</summary>
internal sealed class InProcessMount : IDisposable
{
    private readonly XfsVolume _volume;
    private readonly Thread _thread;
    private readonly StringWriter _log = new();
    private int _runResult = int.MinValue;

    public InProcessMount(string image, FuseMountOptions? options = null)
    {
        _ = IoUringMode.SuiteMode;
        MountPoint = Shell.MakeTempDirectory("xfswin-inproc");
        _volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = false });
        Host = new FuseHost(_volume, (options ?? new FuseMountOptions()) with { FileSystemName = image }, TextWriter.Synchronized(_log));
        try
        {
            Host.Mount(MountPoint);
        }
        catch
        {
            Host.Dispose();
            _volume.Dispose();
            Directory.Delete(MountPoint);
            throw;
        }
        _thread = new Thread(() => _runResult = Host.Run()) { IsBackground = true, Name = "test-fuse-run" };
        _thread.Start();
        // The first access waits for FUSE_INIT, so once it answers the transport is settled. Bounded:
        // a transport that leaves the kernel waiting must fail the test, not hang it.
        var answered = false;
        var probe = new Thread(() => answered = Directory.EnumerateFileSystemEntries(MountPoint).Any()) { IsBackground = true };
        probe.Start();
        if (!probe.Join(TimeSpan.FromSeconds(30)) || !answered)
        {
            Shell.Run("umount", ["-l", MountPoint]);
            throw new InvalidOperationException($"the mount did not answer its first request within 30 s ({Host.TransportDescription}):\n{Log}");
        }
    }

    public FuseHost Host { get; }

    public string MountPoint { get; }

    public string Log => _log.ToString();

    /// <summary>
    /// Unmounts with fusermount3 -u and waits for <see cref="FuseHost.Run"/> to return. The limit
    /// only tells a hang from a slow machine: the session ends as soon as the kernel ends it.
    /// </summary>
    public void Unmount(out int runResult)
    {
        var r = Shell.UnmountFuse(MountPoint);
        Assert.True(r.ExitCode == 0, r.Both);
        Assert.True(_thread.Join(TimeSpan.FromSeconds(60)), "FuseHost.Run did not return within 60 s of fusermount3 -u");
        runResult = _runResult;
    }

    /// <summary>Waits for <see cref="FuseHost.Run"/> to return on its own.</summary>
    public bool WaitForRun(TimeSpan limit) => _thread.Join(limit);

    public void Dispose()
    {
        if (Shell.IsMounted(MountPoint, "fuse.xfswin"))
            Shell.UnmountFuse(MountPoint);
        _thread.Join(TimeSpan.FromSeconds(20));
        Host.Dispose();
        _volume.Dispose();
        Directory.Delete(MountPoint);
    }
}

[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class EnableUringCollection
{
    /// <summary>Tests that flip the machine-wide enable_uring switch run alone, after the others.</summary>
    public const string Name = "enable_uring switch";
}

/// <summary>FUSE over io_uring: used when the kernel offers it, /dev/fuse otherwise, and both serve the same tree.</summary>
[Collection(EnableUringCollection.Name)]
public sealed class IoUringTransportTests
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    private static int CpuCount => FuseUringTransport.CountPossibleCpus();

    [Fact]
    public void With_enable_uring_requests_are_served_through_the_ring_by_threads_pinned_to_each_cpu()
    {
        using var on = IoUringMode.Set(true);
        using var m = new InProcessMount(TestImages.Tree);
        Assert.Equal(FuseTransport.IoUring, m.Host.Transport);
        Assert.Contains("io_uring", m.Host.TransportDescription, StringComparison.Ordinal);

        // Every lookup and getattr of a listing with attributes, from one process, then from one per CPU.
        var before = m.Host.IoUringRequests;
        var devBefore = m.Host.Uring!.DeviceRequests;
        var listing = Shell.Bash($"cd {Q(m.MountPoint)} && ls -lR --time-style=full-iso . | wc -l");
        Assert.True(int.Parse(listing.Trim(), System.Globalization.CultureInfo.InvariantCulture) > 6000);
        Shell.Bash(string.Join('\n', Enumerable.Range(0, CpuCount).Select(cpu =>
            $"taskset -c {cpu} cat {Q(m.MountPoint)}/fragmented.bin {Q(m.MountPoint)}/small.txt > /dev/null &")) + "\nwait");
        var served = m.Host.IoUringRequests - before;
        var throughDevice = m.Host.Uring.DeviceRequests - devBefore;
        Assert.True(served > 6000, $"only {served} requests came through the ring ({m.Host.TransportDescription})");
        // /dev/fuse still carries FORGET and INTERRUPT, never the bulk of the work.
        Assert.True(throughDevice < served / 10, $"{throughDevice} requests came through /dev/fuse, {served} through the ring");

        var threads = IoUringMode.QueueThreads(Environment.ProcessId);
        Assert.Equal(CpuCount, threads.Count);
        foreach (var (name, _, cpus) in threads)
            Assert.Equal(name["xfswin-uring-".Length..], cpus); // queue N runs on CPU N only

        m.Unmount(out var rc);
        Assert.Equal(0, rc);
        Assert.Empty(IoUringMode.QueueThreads(Environment.ProcessId));
    }

    [Fact]
    public void Files_read_through_the_ring_match_the_kernels_xfs()
    {
        using var on = IoUringMode.Set(true);
        using var k = new KernelMount(TestImages.Tree);
        using var m = new InProcessMount(TestImages.Tree);
        Assert.Equal(FuseTransport.IoUring, m.Host.Transport);
        // Whole files of every size (the big ones in 1 MiB reads and readahead), symlinks, xattrs, listings.
        const string script = """
            find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
            find . -type l -print0 | LC_ALL=C sort -z | xargs -0 readlink
            { getfattr -R -d -m - --absolute-names . 2>/dev/null || true; } | LC_ALL=C sort | sha256sum
            """;
        Assert.Equal(Shell.Bash($"cd {Q(k.MountPoint)}\n{script}"), Shell.Bash($"cd {Q(m.MountPoint)}\n{script}"));
        Assert.True(m.Host.IoUringRequests > 1000);
        // random.bin (3 MB) and sparse.bin (100 MB) are read in large requests, served by the bulk threads.
        Assert.True(m.Host.Uring!.HandedOffReads > 10, $"{m.Host.Uring.HandedOffReads} reads were handed off");
    }

    /// <summary>
    /// Once FUSE_INIT has promised io_uring, the kernel holds requests back until every queue is
    /// registered: a queue that fails then must make the kernel fall back, or the mount hangs.
    /// </summary>
    [Fact]
    public void A_queue_that_fails_after_init_leaves_the_mount_on_dev_fuse_instead_of_hanging()
    {
        using var on = IoUringMode.Set(true);
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { IoUringQueueFailingForTests = CpuCount - 1 });
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt")));
        Assert.Equal(FuseTransport.DevFuse, m.Host.Transport);
        // Said from the moment the kernel falls back (the reason is recorded before the refusal is submitted).
        Assert.Contains($"queue {CpuCount - 1} could not be set up after FUSE_INIT (injected by a test", m.Host.TransportDescription, StringComparison.Ordinal);
        Assert.Contains("injected by a test", m.Log, StringComparison.Ordinal);
        Assert.True(m.Host.Uring!.DeviceRequests > 2);
        m.Unmount(out var rc);
        Assert.Equal(0, rc);
    }

    /// <summary>What each caller of <see cref="RunOnEveryCpu"/> lists and reads: names, types, modes, sizes, owners, link targets, contents, xattrs.</summary>
    internal const string TreeWalk = """
        find . -printf '%p %y %m %s %U %G %l\n' | LC_ALL=C sort
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
        { getfattr -R -d -m - --absolute-names . 2>/dev/null || true; } | LC_ALL=C sort | sha256sum
        """;

    /// <summary>
    /// Runs <see cref="TreeWalk"/> <paramref name="rounds"/> times in <paramref name="perCpu"/>
    /// processes pinned to each CPU (taskset), all at once, killed after <paramref name="limit"/>.
    /// Returns each process's output and exit code, and whether they all ended in time.
    /// </summary>
    internal static (List<(int Cpu, int Exit, string Output)> Runs, bool InTime) RunOnEveryCpu(string mountPoint, int perCpu, int rounds, TimeSpan limit)
    {
        var dir = Shell.MakeTempDirectory("xfswin-percpu");
        try
        {
            var walk = Path.Combine(dir, "walk.sh");
            File.WriteAllText(walk, $"cd {Q(mountPoint)} || exit 1\nfor r in $(seq {rounds}); do\n{TreeWalk}\ndone\n");
            var jobs = new List<(int Cpu, string Out)>();
            var script = new System.Text.StringBuilder();
            for (var cpu = 0; cpu < CpuCount; cpu++)
            {
                for (var k = 0; k < perCpu; k++)
                {
                    var output = Path.Combine(dir, $"out.{cpu}.{k}");
                    jobs.Add((cpu, output));
                    // SIGKILL: a caller waiting for FUSE ends only on a fatal signal.
                    script.Append($"( timeout -s KILL {(int)limit.TotalSeconds} taskset -c {cpu} bash {Q(walk)} > {Q(output)} 2>&1; echo $? > {Q(output)}.rc ) &\n");
                }
            }
            script.Append("wait\n");
            var r = Shell.Run("bash", ["-c", script.ToString()], timeout: limit + TimeSpan.FromSeconds(60));
            Assert.True(r.ExitCode == 0, r.Both);
            var runs = jobs.Select(j => (j.Cpu, int.Parse(File.ReadAllText(j.Out + ".rc").Trim(), System.Globalization.CultureInfo.InvariantCulture), File.ReadAllText(j.Out))).ToList();
            return (runs, runs.All(x => x.Item2 != 137));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>
    /// An in-process mount serving through io_uring whose queue fails as <paramref name="fault"/> says,
    /// with attribute and name caching off, so that every pass asks the server again on each caller's CPU.
    /// </summary>
    private static InProcessMount MountWithLiveFault(IoUringLiveFault fault)
    {
        var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { AttributeTimeout = 0, EntryTimeout = 0, IoUringLiveFaultForTests = fault });
        try
        {
            Assert.Equal(FuseTransport.IoUring, m.Host.Transport);
            return m;
        }
        catch
        {
            m.Dispose();
            throw;
        }
    }

    /// <summary>
    /// A queue whose ring fails while the kernel serves through io_uring would leave the requests
    /// of its CPU waiting until the unmount: it moves to a new ring instead, and every request made
    /// meanwhile, on every CPU, is answered, with the same data as the kernel's own XFS.
    /// </summary>
    [Fact]
    public void A_queue_whose_ring_fails_while_live_moves_to_a_new_ring_and_every_request_is_answered()
    {
        using var on = IoUringMode.Set(true);
        using var k = new KernelMount(TestImages.Tree);
        var failing = CpuCount - 1;
        using var m = MountWithLiveFault(new IoUringLiveFault(failing, AfterRequests: 3000, Times: 2));
        var expected = Shell.Bash($"cd {Q(k.MountPoint)}\n{TreeWalk}");
        var sw = Stopwatch.StartNew();
        var (runs, inTime) = RunOnEveryCpu(m.MountPoint, perCpu: 3, rounds: 2, limit: TimeSpan.FromSeconds(120));
        Assert.True(inTime, $"callers were still waiting after 120 s:\n{m.Log}");
        foreach (var (cpu, exit, output) in runs)
        {
            Assert.True(exit == 0, $"a caller on CPU {cpu} failed ({exit}):\n{output}\n{m.Log}");
            Assert.True(expected + expected == output, $"a caller on CPU {cpu} read something else than the kernel's XFS:\n{m.Log}");
        }
        Assert.True(m.Host.Uring!.QueueRestarts == 2, $"{m.Host.Uring.QueueRestarts} restart(s) after {sw.Elapsed}:\n{m.Log}");
        Assert.Contains($"xfswin: io_uring queue {failing}: io_uring_enter failed (errno 5, injected by a test); moving the queue to a new ring (attempt 1 of 3).", m.Log, StringComparison.Ordinal);
        Assert.Contains($"xfswin: io_uring queue {failing} serves again through a new ring (", m.Log, StringComparison.Ordinal);
        // Still io_uring, every queue thread waiting for requests on its ring again.
        Assert.Equal(FuseTransport.IoUring, m.Host.Transport);
        IoUringMode.AssertServesThroughIoUring(Environment.ProcessId, "the in-process mount");
        var before = m.Host.IoUringRequests;
        Shell.Bash($"taskset -c {failing} stat {Q(m.MountPoint)}/small.txt > /dev/null");
        Assert.True(m.Host.IoUringRequests > before);
        m.Unmount(out var rc);
        Assert.Equal(0, rc);
    }

    /// <summary>
    /// A failed ring that cannot even be drained (every io_uring_enter on it fails) may hold a request
    /// the kernel gave to one of its waiting entries: its delivery is task work only that ring runs,
    /// and releasing the ring cancels it, leaving the caller waiting until the connection ends. So
    /// the mount is ended at once, and every caller gets an error instead of a hang.
    /// </summary>
    [Fact]
    public void A_failed_ring_that_cannot_be_drained_ends_the_mount_instead_of_leaving_a_caller_waiting()
    {
        using var on = IoUringMode.Set(true);
        var failing = CpuCount - 1;
        using var m = MountWithLiveFault(new IoUringLiveFault(failing, AfterRequests: 100, Times: 1, Undrainable: true));
        var walk = Shell.Run("timeout", ["-s", "KILL", "60", "taskset", "-c", $"{failing}", "bash", "-c",
            $"cd {Q(m.MountPoint)} && for r in 1 2 3; do find . -printf '%p %y %m %s\\n' > /dev/null; done"], timeout: TimeSpan.FromSeconds(120));
        Assert.True(walk.ExitCode != 137, $"the caller was still waiting after 60 s:\n{m.Log}");
        Assert.Contains("Transport endpoint is not connected", walk.Stderr, StringComparison.Ordinal);
        Assert.Equal(0, m.Host.Uring!.QueueRestarts);
        Assert.Contains($"xfswin: io_uring queue {failing}: io_uring_enter failed (errno 5, injected by a test); moving the queue to a new ring (attempt 1 of 3).", m.Log, StringComparison.Ordinal);
        Assert.Matches($@"xfswin: io_uring queue {failing} cannot be served any more \(the failed ring could not be drained \(errno 5\); [1-9]\d* of its entries were still waiting, and a request the kernel may have given them can no longer be delivered\); ending the mount", m.Log);
        Assert.Contains("xfswin: mount ended (", m.Log, StringComparison.Ordinal);
        Assert.True(m.WaitForRun(TimeSpan.FromSeconds(20)), $"FuseHost.Run did not return after the mount ended:\n{m.Log}");
    }

    /// <summary>
    /// A queue that keeps failing is given up after a few new rings: the mount then ends, so that
    /// callers get errors (ENOTCONN) at once instead of waiting until someone unmounts.
    /// </summary>
    [Fact]
    public void A_queue_that_keeps_failing_ends_the_mount_instead_of_leaving_callers_waiting()
    {
        using var on = IoUringMode.Set(true);
        var failing = CpuCount - 1;
        using var m = MountWithLiveFault(new IoUringLiveFault(failing, AfterRequests: 200, Times: 1000));
        var (runs, inTime) = RunOnEveryCpu(m.MountPoint, perCpu: 2, rounds: 3, limit: TimeSpan.FromSeconds(120));
        Assert.True(inTime, $"callers were still waiting after 120 s:\n{m.Log}");
        // The callers saw the mount end (find goes on past the errors, so its exit code says nothing).
        Assert.Contains(runs, r => r.Output.Contains("Transport endpoint is not connected", StringComparison.Ordinal));
        Assert.Equal(3, m.Host.Uring!.QueueRestarts);
        Assert.Contains($"xfswin: io_uring queue {failing} cannot be served any more (io_uring_enter failed (errno 5, injected by a test), 4 times in a row); " +
                        "ending the mount so that its callers get errors instead of waiting forever.", m.Log, StringComparison.Ordinal);
        Assert.Contains("xfswin: mount ended (", m.Log, StringComparison.Ordinal);
        // The session ends by itself.
        Assert.True(m.WaitForRun(TimeSpan.FromSeconds(20)), $"FuseHost.Run did not return after the mount ended:\n{m.Log}");
    }

    /// <summary>Over io_uring too, the mount's readahead is raised before `xfswin mount` returns.</summary>
    [Fact]
    public void The_mounts_readahead_is_raised_before_the_mount_command_returns()
    {
        using var on = IoUringMode.Set(true);
        using var m = new FuseMount(TestImages.Tree);
        var readAhead = File.ReadAllText($"/sys/class/bdi/{FuseHost.MountDevice(m.MountPoint)}/read_ahead_kb").Trim();
        IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount");
        Assert.Equal("4096", readAhead);
    }

    /// <summary>xfswin mount says which transport serves the mount, after the mount's own line.</summary>
    [Theory]
    [InlineData(true, "")]
    [InlineData(false, "")]
    [InlineData(false, "io_uring=no")]
    public void The_mount_command_says_which_transport_serves_the_mount(bool enabled, string option)
    {
        using var sw = IoUringMode.Set(enabled);
        using var m = new FuseMount(TestImages.Tree, option == "" ? [] : ["-o", option]);
        var lines = m.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        var mounted = Array.FindIndex(lines, l => l.Contains("mounted read-only on", StringComparison.Ordinal));
        Assert.True(mounted >= 0, m.Output);
        var next = mounted + 1 < lines.Length ? lines[mounted + 1] : "";
        if (enabled)
        {
            Assert.Equal($"xfswin: requests are served through FUSE over io_uring ({CpuCount} queue(s), one per CPU).", next);
            IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount");
        }
        else if (option == "")
        {
            Assert.StartsWith("xfswin: requests are served through /dev/fuse: this kernel has FUSE over io_uring, but it is switched off.", next, StringComparison.Ordinal);
            Assert.Contains("faster with it", next, StringComparison.Ordinal);
            Assert.EndsWith("echo Y > /sys/module/fuse/parameters/enable_uring", next, StringComparison.Ordinal);
        }
        else
        {
            // Asked for /dev/fuse: nothing to say.
            Assert.DoesNotContain("served through", m.Output, StringComparison.Ordinal);
        }
    }

    /// <summary>
    /// An ordinary user's server (no capabilities; fusermount3 mounts for it) is served through the
    /// ring like root's and reads the same tree as the kernel's XFS.
    /// /dev/fuse may be root's only on this machine: the user gets a 0666 node bound over it in a
    /// private mount namespace, where the mount then lives (entered with nsenter to use it).
    /// </summary>
    [Fact]
    public void An_unprivileged_server_serves_through_the_ring()
    {
        using var on = IoUringMode.Set(true);
        using var k = new KernelMount(TestImages.Tree);
        using var server = UnprivilegedServer.Start(TestImages.Tree);
        var pid = server.ProcessId;
        Assert.Contains($"xfswin: requests are served through FUSE over io_uring ({CpuCount} queue(s), one per CPU).", server.Stderr, StringComparison.Ordinal);
        var status = File.ReadAllLines($"/proc/{pid}/status");
        Assert.Contains(status, l => l.StartsWith("Uid:", StringComparison.Ordinal) && l.Split('\t')[1] == "65534");
        Assert.Contains(status, l => l == "CapEff:\t0000000000000000");
        IoUringMode.AssertServesThroughIoUring(pid, "the unprivileged server");

        long QueueSwitches() => Directory.EnumerateDirectories($"/proc/{pid}/task")
            .Where(t => File.ReadAllText(t + "/comm").StartsWith("xfswin-uring-", StringComparison.Ordinal))
            .Sum(t => long.Parse(File.ReadLines(t + "/status").First(l => l.StartsWith("voluntary_ctxt_switches:", StringComparison.Ordinal)).Split('\t')[1],
                System.Globalization.CultureInfo.InvariantCulture));

        // The same tree as the kernel's XFS, both read by the same user (user xattrs only: trusted ones are root's).
        const string walk = """
            find . -printf '%p %y %m %s %U %G %l\n' | LC_ALL=C sort
            find . -type f -readable -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
            { getfattr -R -d -m '^user\.' --absolute-names . 2>/dev/null || true; } | LC_ALL=C sort | sha256sum
            """;
        var switches = QueueSwitches();
        var expected = UnprivilegedServer.RunAsNobody(k.MountPoint, walk);
        var actual = server.RunInside(walk);
        Assert.Equal(expected, actual);
        Assert.True(expected.Length > 100000, "the walk read little");
        // The queue threads woke for thousands of requests: they came through the ring.
        var woken = QueueSwitches() - switches;
        Assert.True(woken > 3000, $"the queue threads woke {woken} times for the walk");
        IoUringMode.AssertServesThroughIoUring(pid, "the unprivileged server");
    }

    [Theory]
    [InlineData("42 23 0:39 / /sys/fs/fuse/connections rw,relatime - fusectl none rw", true)]
    [InlineData("36 25 0:32 / /sys/fs/fuse/connections rw,nosuid shared:14 - fusectl fusectl rw", true)]
    [InlineData("36 25 0:32 / /sys/fs/fuse/connections rw - sysfs sysfs rw", false)]
    [InlineData("36 25 0:32 / /mnt/elsewhere rw - fusectl none rw", false)]
    [InlineData("", false)]
    public void Fusectl_is_found_in_mountinfo_on_its_own_mount_point(string mountInfo, bool mounted)
    {
        var text = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" + mountInfo + "\n";
        Assert.Equal(mounted, FuseUringTransport.FusectlMounted(text));
        Assert.True(FuseUringTransport.CanEndAStalledMount(root: true, text, out _));
        Assert.Equal(mounted, FuseUringTransport.CanEndAStalledMount(root: false, text, out var reason));
        Assert.Equal(mounted ? "" : FuseUringTransport.NoFusectlReason, reason);
    }

    /// <summary>
    /// An ordinary user's server where fusectl is not mounted could not end a mount whose queue
    /// failed for good (see FuseUringTransport.CanEndAStalledMount): it serves through /dev/fuse,
    /// says why and how to change it, and reads the same tree as the kernel's XFS. fusectl is
    /// unmounted only in the server's private mount namespace.
    /// </summary>
    [Fact]
    public void An_unprivileged_server_without_fusectl_serves_through_dev_fuse_and_says_why()
    {
        using var on = IoUringMode.Set(true);
        using var k = new KernelMount(TestImages.Tree);
        using var server = UnprivilegedServer.Start(TestImages.Tree, asRootFirst: "umount /sys/fs/fuse/connections");
        Assert.Contains("xfswin: requests are served through /dev/fuse: " + FuseUringTransport.NoFusectlReason + ".", server.Stderr, StringComparison.Ordinal);
        Assert.DoesNotContain(Directory.EnumerateDirectories($"/proc/{server.ProcessId}/task"),
            t => File.ReadAllText(t + "/comm").StartsWith("xfswin-uring-", StringComparison.Ordinal));
        // Only the server's namespace lost fusectl.
        Assert.True(FuseUringTransport.FusectlMounted(File.ReadAllText("/proc/self/mountinfo")), "fusectl is gone from the test's own namespace");

        const string walk = "find . -printf '%p %y %m %s %U %G %l\\n' | LC_ALL=C sort; find . -type f -readable -print0 | LC_ALL=C sort -z | xargs -0 sha256sum";
        var expected = UnprivilegedServer.RunAsNobody(k.MountPoint, walk);
        Assert.Equal(expected, server.RunInside(walk));
        Assert.True(expected.Length > 100000, "the walk read little");
    }

    [Fact]
    public void With_enable_uring_off_the_host_serves_through_dev_fuse()
    {
        using var off = IoUringMode.Set(false);
        using var m = new InProcessMount(TestImages.Tree);
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt")));
        Assert.Equal(FuseTransport.DevFuse, m.Host.Transport);
        Assert.StartsWith("/dev/fuse", m.Host.TransportDescription, StringComparison.Ordinal);
        Assert.Contains("enable_uring is N", m.Host.TransportDescription, StringComparison.Ordinal);
        Assert.Equal(0, m.Host.IoUringRequests);
        Assert.Null(m.Host.Uring); // not even the device hooks are installed
        Assert.Empty(IoUringMode.QueueThreads(Environment.ProcessId));
        m.Unmount(out var rc);
        Assert.Equal(0, rc);
    }

    [Fact]
    public void Option_io_uring_no_keeps_dev_fuse_even_when_the_kernel_offers_io_uring()
    {
        using var on = IoUringMode.Set(true);
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { IoUring = false });
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt")));
        Assert.Equal(FuseTransport.DevFuse, m.Host.Transport);
        Assert.Equal("/dev/fuse: io_uring=no", m.Host.TransportDescription);
        Assert.Equal(0, m.Host.IoUringRequests);
    }

    [Theory]
    [InlineData("TERM")]
    [InlineData("INT")]
    public void Server_on_io_uring_unmounts_on_a_signal_and_exits(string signal)
    {
        using var on = IoUringMode.Set(true);
        using var m = new FuseMount(TestImages.Tree);
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt")));
        IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount");
        Shell.Bash($"kill -{signal} {m.ServerProcessId}");
        var sw = Stopwatch.StartNew();
        while (Directory.Exists($"/proc/{m.ServerProcessId}") && !File.ReadAllText($"/proc/{m.ServerProcessId}/stat").Contains(") Z ", StringComparison.Ordinal))
        {
            Assert.True(sw.Elapsed < TimeSpan.FromSeconds(60), $"the server is still running 60 s after SIG{signal}");
            Thread.Sleep(50);
        }
        Assert.False(Shell.IsMounted(m.MountPoint, "fuse.xfswin"));
    }

    [Fact]
    public void Io_uring_option_parses()
    {
        Assert.True(XfsWin.Cli.Commands.MountArguments.Parse(["a", "b"]).ToHostOptions().IoUring);
        Assert.False(XfsWin.Cli.Commands.MountArguments.Parse(["-o", "io_uring=no", "a", "b"]).ToHostOptions().IoUring);
        Assert.True(XfsWin.Cli.Commands.MountArguments.Parse(["-o", "io_uring=yes", "a", "b"]).ToHostOptions().IoUring);
        Assert.Throws<ArgumentException>(() => XfsWin.Cli.Commands.MountArguments.Parse(["-o", "io_uring=maybe", "a", "b"]));
        Assert.Equal(4, XfsWin.Cli.Commands.MountArguments.Parse(["a", "b"]).ToHostOptions().IoUringQueueDepth);
        Assert.Equal(8, XfsWin.Cli.Commands.MountArguments.Parse(["-o", "io_uring_depth=8", "a", "b"]).ToHostOptions().IoUringQueueDepth);
        Assert.Throws<ArgumentException>(() => XfsWin.Cli.Commands.MountArguments.Parse(["-o", "io_uring_depth=0", "a", "b"]));
    }

    [Theory]
    [InlineData("0", 1)]
    [InlineData("0-1\n", 2)]
    [InlineData("0-3,8-11", 8)]
    [InlineData("0,2,4-5", 4)]
    public void Possible_cpu_lists_are_counted(string list, int count) =>
        Assert.Equal(count, FuseUringTransport.CountCpuList(list));
}

/// <summary>
/// `xfswin mount` run by an ordinary user (uid 65534, no capabilities; fusermount3 mounts for it).
/// /dev/fuse may be root's only on this machine: the user gets a 0666 node bound over it in a
/// private mount namespace, where the mount then lives (entered with nsenter to use it).
/// </summary>
internal sealed class UnprivilegedServer : IDisposable
{
    private const string Nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp DOTNET_CLI_HOME=/tmp";
    private readonly string _dir;
    private readonly string _mountPoint;

    private UnprivilegedServer(string dir, string mountPoint, int processId, string stderr)
    {
        _dir = dir;
        _mountPoint = mountPoint;
        ProcessId = processId;
        Stderr = stderr;
    }

    public int ProcessId { get; }

    /// <summary>What the mount command printed.</summary>
    public string Stderr { get; }

    /// <summary>Mounts <paramref name="image"/>; <paramref name="asRootFirst"/> runs in the new namespace before the server starts.</summary>
    public static UnprivilegedServer Start(string image, string asRootFirst = "")
    {
        // An unprivileged server ends a stalled mount through fusectl, and uses io_uring only where
        // it is mounted (see FuseUringTransport.CanEndAStalledMount). Machines that boot with
        // systemd have it; a bare container or VM may not, so it is mounted here as on those.
        if (!FuseUringTransport.FusectlMounted(File.ReadAllText("/proc/self/mountinfo")))
            Shell.Bash($"mount -t fusectl fusectl {FuseUringTransport.FusectlMountPoint}");
        var dir = Shell.MakeTempDirectory("xfswin-nobody");
        var mp = dir + "/mnt";
        try
        {
            Shell.Bash($"chmod 0755 {Q(dir)}; mkdir {Q(mp)}; chown 65534:65534 {Q(mp)}");
            var (dotnet, _) = Shell.Xfswin;
            var dll = Path.Combine(XfsWin.TestSupport.UnprivilegedRun.OutputDirectory, "xfswin.dll");
            var r = Shell.Run("unshare", ["--mount", "--propagation", "private", "bash", "-euc",
                $"mknod -m 0666 {Q(dir)}/fuse c 10 229; mount --bind {Q(dir)}/fuse /dev/fuse; {asRootFirst}\n" +
                $"exec {Nobody} {Q(dotnet)} {Q(dll)} mount {Q(image)} {Q(mp)}"], timeout: TimeSpan.FromMinutes(2));
            var m = System.Text.RegularExpressions.Regex.Match(r.Stderr, @"server pid (\d+)");
            Assert.True(r.ExitCode == 0 && m.Success, r.Both);
            return new UnprivilegedServer(dir, mp, int.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture), r.Stderr);
        }
        catch
        {
            Directory.Delete(dir, recursive: true);
            throw;
        }
    }

    /// <summary>Runs a bash script as the user, in the mount's directory and namespace.</summary>
    public string RunInside(string script) =>
        Shell.Bash($"nsenter -t {ProcessId} -m {Nobody} bash -euo pipefail -c {Q($"cd {Q(_mountPoint)}\n{script}")}");

    /// <summary>Runs a bash script as the same user in <paramref name="directory"/> of this namespace.</summary>
    public static string RunAsNobody(string directory, string script) =>
        Shell.Bash($"cd {Q(directory)} && exec {Nobody} bash -euo pipefail -c {Q(script)}");

    public void Dispose()
    {
        if (Directory.Exists($"/proc/{ProcessId}"))
        {
            Shell.Run("nsenter", ["-t", ProcessId.ToString(System.Globalization.CultureInfo.InvariantCulture), "-m", "fusermount3", "-u", _mountPoint]);
            var sw = Stopwatch.StartNew();
            while (Directory.Exists($"/proc/{ProcessId}") && sw.Elapsed < TimeSpan.FromSeconds(10))
                Thread.Sleep(50);
        }
        Directory.Delete(_dir, recursive: true);
    }

    private static string Q(string s) => MountCommandProcessTests.Quote(s);
}

using System.Globalization;
using System.Text;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Serving a lone caller on its own CPU through /dev/fuse (see CallerFollower): the workers move to
/// the caller's CPU and hand their answers over so that it is woken there, and stop as soon as the
/// caller is not alone or reads file data.
/// </summary>
[Collection(QuietMachine.Collection)]
public sealed class CallerFollowerTests
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    [Theory]
    [InlineData("4567 (stat) S 1 4567 4567 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 3389 5861376 222 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0", 1)]
    [InlineData("12 (a) b (c) d) R 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 6 7 8 1 1 0 0 0 0 0 0 0 0 0 0 17 23 0 0 0 0 0\n", 23)]
    [InlineData("12 (x) S 1 2", -1)]
    [InlineData("no parenthesis here", -1)]
    public void The_cpu_a_thread_last_ran_on_is_field_39_of_its_stat_line(string line, int cpu)
    {
        Assert.Equal(cpu, CallerFollower.ProcessorField(Encoding.ASCII.GetBytes(line)));
    }

    [Fact]
    public void Field_39_of_this_threads_own_stat_line_names_a_cpu_it_may_run_on()
    {
        var cpu = CallerFollower.ProcessorField(File.ReadAllBytes($"/proc/thread-self/stat"));
        Assert.InRange(cpu, 0, Environment.ProcessorCount - 1);
    }

    [Theory]
    [InlineData("123456789 987654 321\n", 987654, 321)]
    [InlineData("5 0 1", 0, 1)]
    [InlineData("5 7", -1, -1)]
    public void The_run_queue_wait_and_slices_are_the_second_and_third_fields_of_schedstat(string line, long delay, long slices)
    {
        Assert.Equal((delay, slices), SchedulerPolicy.ParseSchedstat(Encoding.ASCII.GetBytes(line)));
    }

    [Theory]
    [InlineData("0.42 0.30 0.25 1/123 4567\n", 1)]
    [InlineData("3.00 2.00 1.00 17/900 1\n", 17)]
    [InlineData("garbage", -1)]
    public void The_running_count_of_loadavg_is_read(string loadavg, int running)
    {
        Assert.Equal(running, SchedulerPolicy.RunningCount(Encoding.ASCII.GetBytes(loadavg)));
    }

    /// <summary>
    /// A walk that stats every file, one after another, from one thread: many answers are
    /// handed over on the caller's CPU and the caller stays there. Without the follower, /dev/fuse
    /// answers from whichever worker waited longest and no answer is handed over this way. Needs a
    /// quiet machine, like the io_uring test of the same kind: with other work running the
    /// follower backs off (see CallerFollower.AfterReply).
    /// </summary>
    [Fact]
    [Trait(QuietMachine.Trait, QuietMachine.Value)]
    public void A_lone_caller_is_served_on_its_own_cpu_and_a_read_of_file_data_ends_that()
    {
        if (Environment.ProcessorCount < 2)
            Assert.Fail("This test needs at least 2 CPUs.");
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { IoUring = false });
        Assert.Equal(FuseTransport.DevFuse, m.Host.Transport);
        var follower = m.Host.Follower;
        Assert.NotNull(follower);
        string expected;
        using (var k = new KernelMount(TestImages.Tree))
            expected = Shell.Bash($"sha256sum < {Q(Path.Combine(k.MountPoint, "sparse.bin"))}").Split(' ')[0];
        var before = follower.IdleHandovers;
        var stopsBefore = follower.Stops;
        // Stat every file, one after another, then read a 100 MB file from the same thread.
        var others = new OtherCpuUse();
        var (files, migrations, readHash) = LoneCaller.WalkThenRead(m.MountPoint, "sparse.bin");
        var handedOver = follower.IdleHandovers - before;
        var busy = others.Since(Environment.ProcessId);
        Assert.True(files > 5000, $"only {files} files");
        Assert.True(follower.Follows >= 1, "the workers never moved to the caller's CPU");
        Assert.True(handedOver > files / 4, $"{handedOver} of {files} answers were handed over on the caller's CPU ({follower.IdleStarved} long waits); {busy}");
        Assert.True(migrations < files * 3 / 100, $"the caller moved between CPUs {migrations} times for {files} lookups; {busy}");

        // File data is read ahead, several requests at once: served on every CPU again.
        Assert.Equal(expected, readHash);
        Assert.True(follower.Stops > stopsBefore, "following did not end while the file was read");
        // Once the requests stop, no worker is left an idle-policy thread (after 10 ms: see
        // CallerFollower.NormalizeIdleWorkers).
        var quiet = System.Diagnostics.Stopwatch.StartNew();
        List<string> idle;
        do
        {
            Thread.Sleep(20);
            idle = Directory.EnumerateDirectories($"/proc/{Environment.ProcessId}/task")
                .Where(t => File.ReadLines(Path.Combine(t, "sched")).Any(l => l.StartsWith("policy", StringComparison.Ordinal) && l.EndsWith(" 5", StringComparison.Ordinal)))
                .Select(t => $"{Path.GetFileName(t)} {File.ReadAllText(Path.Combine(t, "comm")).Trim()}")
                .ToList();
        }
        while (idle.Count > 0 && quiet.Elapsed < TimeSpan.FromSeconds(1));
        Assert.True(idle.Count == 0, $"threads left SCHED_IDLE after {quiet.Elapsed}: {string.Join(", ", idle)} ({follower.InheritedIdle} workers started as idle threads and were turned back)");

        var elapsed = m.Unmount(out var rc);
        Assert.Equal(0, rc);
        Assert.True(elapsed < TimeSpan.FromSeconds(5), $"Run took {elapsed} to end after the unmount");
    }
}

/// <summary>The follower with other work on the machine: several callers at once, and busy CPUs.</summary>
[Collection(QuietMachine.Collection)]
public sealed class CallerFollowerUnderLoadTests
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    /// <summary>
    /// After a lone caller had the workers follow it, walks from several processes on every CPU at
    /// once (the workers must go back to every CPU, and waiting workers must take over) read the
    /// same tree as the kernel's XFS, in time.
    /// </summary>
    [Fact]
    public void Callers_on_every_cpu_after_a_lone_one_read_the_same_tree_as_the_kernel()
    {
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { IoUring = false, AttributeTimeout = 0, EntryTimeout = 0 });
        var follower = m.Host.Follower;
        Assert.NotNull(follower);
        var (files, _) = LoneCaller.Walk(m.MountPoint);
        Assert.True(files > 5000, $"only {files} files");
        Assert.True(follower.Follows >= 1, "the workers never followed the lone caller");

        string expected;
        using (var k = new KernelMount(TestImages.Tree))
            expected = Shell.Bash($"cd {Q(k.MountPoint)}\n{IoUringTransportTests.TreeWalk}");
        var (runs, inTime) = IoUringTransportTests.RunOnEveryCpu(m.MountPoint, perCpu: 2, rounds: 2, limit: TimeSpan.FromSeconds(120));
        Assert.True(inTime, "a walk did not finish within 120 s");
        foreach (var (cpu, exit, output) in runs)
        {
            Assert.True(exit == 0, $"the walk on CPU {cpu} failed ({exit}): {output[..Math.Min(output.Length, 2000)]}");
            Assert.True(expected + expected == output, $"the walk on CPU {cpu} read something else than the kernel's XFS");
        }
        var elapsed = m.Unmount(out var rc);
        Assert.Equal(0, rc);
        Assert.True(elapsed < TimeSpan.FromSeconds(5), $"Run took {elapsed} to end after the unmount");
    }

    /// <summary>
    /// With a busy loop on every CPU, a SCHED_IDLE holder would get almost no CPU: it must notice
    /// (its run-queue wait) and hand answers over normally, and the walk must finish. Runs in the
    /// quiet pass, where the busy loops disturb nothing else.
    /// </summary>
    [Fact]
    [Trait(QuietMachine.Trait, QuietMachine.Value)]
    public void A_busy_loop_on_every_cpu_makes_the_holder_stop_yielding_and_the_walk_finishes()
    {
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { IoUring = false });
        var follower = m.Host.Follower;
        Assert.NotNull(follower);
        var loops = Enumerable.Range(0, Environment.ProcessorCount)
            .Select(cpu => System.Diagnostics.Process.Start("taskset", ["-c", cpu.ToString(CultureInfo.InvariantCulture), "sh", "-c", "while :; do :; done"]))
            .ToList();
        try
        {
            var sw = System.Diagnostics.Stopwatch.StartNew();
            var (files, _) = LoneCaller.Walk(m.MountPoint);
            Assert.True(files > 5000, $"only {files} files");
            Assert.True(sw.Elapsed < TimeSpan.FromSeconds(60), $"the walk took {sw.Elapsed} beside the busy loops");
            Assert.True(follower.IdleStarved >= 1, $"the holder never noticed it was starved ({follower.IdleHandovers} answers handed over as an idle thread)");
        }
        finally
        {
            foreach (var p in loops)
            {
                p.Kill();
                p.WaitForExit();
                p.Dispose();
            }
        }
        var elapsed = m.Unmount(out var rc);
        Assert.Equal(0, rc);
        Assert.True(elapsed < TimeSpan.FromSeconds(5), $"Run took {elapsed} to end after the unmount");
    }
}

/// <summary>
/// A single-threaded Python caller that stats every file of a tree, one after another (a LOOKUP
/// each), and reports how often the kernel moved it between CPUs meanwhile.
/// </summary>
internal static class LoneCaller
{
    private const string StatWalk = """
        import os, sys, hashlib
        n = 0
        for d, dirs, files in os.walk(sys.argv[1]):
            for f in files:
                os.stat(os.path.join(d, f), follow_symlinks=False)
                n += 1
        sched = open('/proc/thread-self/sched').read().splitlines()
        print(n, next(l for l in sched if l.startswith('se.nr_migrations')).split(':')[1].strip())

        """;

    private const string ReadFile = """
        h = hashlib.sha256()
        with open(os.path.join(sys.argv[1], sys.argv[2]), 'rb') as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        print(h.hexdigest())
        """;

    public static (int Files, long Migrations) Walk(string root)
    {
        var (files, migrations, _) = Run(StatWalk, root, "");
        return (files, migrations);
    }

    /// <summary>The walk, then a read of <paramref name="file"/> by the same thread: its SHA-256 too.</summary>
    public static (int Files, long Migrations, string Sha256) WalkThenRead(string root, string file) => Run(StatWalk + ReadFile, root, file);

    private static (int, long, string) Run(string script, string root, string file)
    {
        var r = Shell.Run("python3", ["-c", script, root, file]);
        Assert.True(r.ExitCode == 0, r.Both);
        var lines = r.Stdout.Split('\n', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries);
        var fields = lines[0].Split(' ');
        return (int.Parse(fields[0], CultureInfo.InvariantCulture), long.Parse(fields[1], CultureInfo.InvariantCulture), lines.Length > 1 ? lines[1] : "");
    }
}

/// <summary>
/// CPU time every other process used between two moments: a scheduling test that fails names what
/// else was running (a CI run once failed because another test's busy loops ran beside it).
/// </summary>
internal sealed class OtherCpuUse
{
    private readonly Dictionary<int, (string Name, long Ticks)> _start = Read();

    private static Dictionary<int, (string, long)> Read()
    {
        var result = new Dictionary<int, (string, long)>();
        foreach (var dir in Directory.EnumerateDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), NumberStyles.None, CultureInfo.InvariantCulture, out var pid))
                continue;
            try
            {
                var line = File.ReadAllBytes(Path.Combine(dir, "stat"));
                var open = Array.IndexOf(line, (byte)'(');
                var close = Array.LastIndexOf(line, (byte)')');
                // Fields after the name start at 3 (state); utime and stime are fields 14 and 15.
                var rest = line.AsSpan(close + 1);
                var ticks = long.Parse(SchedulerPolicy.Field(rest, 14 - 3), CultureInfo.InvariantCulture) +
                            long.Parse(SchedulerPolicy.Field(rest, 15 - 3), CultureInfo.InvariantCulture);
                result[pid] = (Encoding.ASCII.GetString(line, open + 1, close - open - 1), ticks);
            }
            catch (IOException)
            {
                // The process ended meanwhile.
            }
        }
        return result;
    }

    /// <summary>The busiest processes since this was made, other than <paramref name="exclude"/>, with their CPU milliseconds and the load average.</summary>
    public string Since(params int[] exclude)
    {
        var tick = 1000 / 100; // USER_HZ is 100 on Linux.
        var busiest = Read()
            .Where(p => !exclude.Contains(p.Key))
            .Select(p => (Pid: p.Key, p.Value.Item1, Ms: (p.Value.Item2 - (_start.TryGetValue(p.Key, out var s) ? s.Ticks : 0)) * tick))
            .Where(p => p.Ms >= 50)
            .OrderByDescending(p => p.Ms)
            .Take(5)
            .Select(p => $"{p.Item2}({p.Pid}) {p.Ms} ms");
        return $"other CPU use: [{string.Join(", ", busiest)}], load average {File.ReadAllText("/proc/loadavg").Trim()}";
    }
}

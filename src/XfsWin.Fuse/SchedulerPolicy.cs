using System.Diagnostics;
using System.Globalization;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse;

/// <summary>
/// How a server thread gets the caller it answers woken on its own CPU.
/// <para>
/// When an answer is handed over, the kernel wakes the waiting caller while the server thread still
/// runs on its CPU. Seeing that CPU busy and another one idle, the scheduler puts the caller on the
/// idle one, and every request pays the wake-up of an idle CPU. But a CPU whose only runnable
/// thread has the SCHED_IDLE policy counts as idle for that choice: a server thread that hands its
/// answer over as a SCHED_IDLE thread has the caller woken on its CPU, where it runs at once, and
/// returns to SCHED_OTHER right after. The pair of policy changes costs about 4 µs, against about
/// 30 µs for an idle vCPU's wake-up here.
/// </para>
/// <para>
/// A SCHED_IDLE thread gets almost no CPU while a normal thread wants the same CPU (measured: woken
/// 3 ms late at the median, 25 ms at worst, beside a busy loop). So it is done only when the server
/// thread is the only runnable thread of the machine (the running count of /proc/loadavg): then
/// nothing can starve it during its few microseconds as an idle thread, and the caller could only
/// have moved to an idle CPU. Leaving SCHED_IDLE needs CAP_SYS_NICE (or an RLIMIT_NICE of 20):
/// without it a thread never enters it.
/// </para>
/// </summary>
internal static unsafe class SchedulerPolicy
{
    private const int CapSysNice = 23;

    /// <summary>Whether this thread could switch back from SCHED_IDLE: CAP_SYS_NICE, or an RLIMIT_NICE that allows nice 0.</summary>
    public static bool MayLeaveIdlePolicy()
    {
        try
        {
            foreach (var line in File.ReadLines("/proc/thread-self/status"))
            {
                if (line.StartsWith("CapEff:", StringComparison.Ordinal) &&
                    ulong.TryParse(line.AsSpan(7).Trim(), NumberStyles.HexNumber, CultureInfo.InvariantCulture, out var caps) &&
                    (caps & (1UL << CapSysNice)) != 0)
                    return true;
            }
            var limit = default(IoUringNative.RLimit);
            return IoUringNative.getrlimit(IoUringConstants.RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20;
        }
        catch (IOException)
        {
            return false;
        }
    }

    /// <summary>A descriptor of /proc/loadavg for <see cref="OnlyRunnableThread"/>, or -1.</summary>
    public static int OpenLoadAverage()
    {
        fixed (byte* path = "/proc/loadavg\0"u8)
            return IoUringNative.open(path, IoUringConstants.O_RDONLY | IoUringConstants.O_CLOEXEC);
    }

    /// <summary>The running count of /proc/loadavg ("0.00 0.01 0.05 1/123 4567") is 1: the calling thread alone.</summary>
    public static bool OnlyRunnableThread(int loadFd) => RunningThreads(loadFd) == 1;

    /// <summary>The running count of /proc/loadavg (runnable threads of the machine, the caller among them), or -1.</summary>
    public static int RunningThreads(int loadFd)
    {
        var buf = stackalloc byte[128];
        var n = (int)IoUringNative.pread(loadFd, buf, 128, 0);
        return n > 0 ? RunningCount(new ReadOnlySpan<byte>(buf, n)) : -1;
    }

    internal static int RunningCount(ReadOnlySpan<byte> loadavg)
    {
        var field = Field(loadavg, 3); // "running/total"
        var slash = field.IndexOf((byte)'/');
        return slash > 0 && int.TryParse(field[..slash], NumberStyles.None, CultureInfo.InvariantCulture, out var running) ? running : -1;
    }

    /// <summary>Field <paramref name="index"/> (from 0) of a line of space-separated fields, or empty.</summary>
    internal static ReadOnlySpan<byte> Field(ReadOnlySpan<byte> line, int index)
    {
        var i = 0;
        for (var f = 0; ; f++)
        {
            while (i < line.Length && line[i] == (byte)' ')
                i++;
            var start = i;
            while (i < line.Length && line[i] != (byte)' ' && line[i] != (byte)'\n')
                i++;
            if (i == start)
                return default;
            if (f == index)
                return line[start..i];
        }
    }

    public static void BecomeIdle()
    {
        var param = 0;
        IoUringNative.sched_setscheduler(0, IoUringConstants.SCHED_IDLE, &param);
    }

    /// <summary>The calling thread runs under SCHED_IDLE (for one it inherited from the thread that created it).</summary>
    public static bool IsIdle() => IoUringNative.sched_getscheduler(0) == IoUringConstants.SCHED_IDLE;

    /// <summary>Back to SCHED_OTHER; false (errno set) if the kernel refused.</summary>
    public static bool BecomeNormal()
    {
        var param = 0;
        return IoUringNative.sched_setscheduler(0, IoUringConstants.SCHED_OTHER, &param) == 0;
    }

    /// <summary>
    /// The calling thread's time spent waiting on a run queue (ns) and its number of time slices:
    /// the second and third fields of /proc/thread-self/schedstat; (-1, -1) if unreadable. Opened
    /// each time (callers look at most once a millisecond): a descriptor kept per thread would
    /// outlive libfuse's workers.
    /// </summary>
    public static (long DelayNs, long Slices) RunQueueWait()
    {
        int fd;
        fixed (byte* path = "/proc/thread-self/schedstat\0"u8)
            fd = IoUringNative.open(path, IoUringConstants.O_RDONLY | IoUringConstants.O_CLOEXEC);
        if (fd < 0)
            return (-1, -1);
        var buf = stackalloc byte[96];
        var n = (int)IoUringNative.pread(fd, buf, 96, 0);
        IoUringNative.close(fd);
        return n > 0 ? ParseSchedstat(new ReadOnlySpan<byte>(buf, n)) : (-1, -1);
    }

    /// <summary>The second and third numbers of a schedstat line ("run_ns delay_ns slices"), or (-1, -1).</summary>
    internal static (long DelayNs, long Slices) ParseSchedstat(ReadOnlySpan<byte> schedstat) =>
        long.TryParse(Field(schedstat, 1), NumberStyles.None, CultureInfo.InvariantCulture, out var delay) &&
        long.TryParse(Field(schedstat, 2), NumberStyles.None, CultureInfo.InvariantCulture, out var slices)
            ? (delay, slices)
            : (-1, -1);
}

/// <summary>
/// Watches one SCHED_IDLE thread for starvation, over each millisecond or more: its average wait on
/// a run queue per time slice. Waiting while the caller it serves runs between two requests is
/// expected (the woken caller preempts it): some microseconds per slice. Beside a normal thread
/// that keeps the CPU busy, a SCHED_IDLE thread waits milliseconds for each slice.
/// </summary>
internal struct StarvationWatch
{
    /// <summary>Waiting this long per slice on average (or the whole interval without a slice) is starving.</summary>
    private const long StarvedWaitNs = 500_000;
    private static readonly long s_interval = Stopwatch.Frequency / 1000;
    private long _wall;
    private long _delay;
    private long _slices;

    /// <summary>Starts watching the calling thread; false if its schedstat cannot be read.</summary>
    public bool Start()
    {
        var (delay, slices) = SchedulerPolicy.RunQueueWait();
        if (delay < 0)
            return false;
        _wall = Stopwatch.GetTimestamp();
        _delay = delay;
        _slices = slices;
        return true;
    }

    /// <summary>True when, since the last look (at least a millisecond ago), the thread waited long for each slice.</summary>
    public bool Starved(long now)
    {
        if (now - _wall < s_interval)
            return false;
        var (delay, slices) = SchedulerPolicy.RunQueueWait();
        if (delay < 0)
            return true;
        var waited = delay - _delay;
        var ran = slices - _slices;
        var starved = ran > 0 ? waited / ran > StarvedWaitNs : waited * (double)Stopwatch.Frequency / 1e9 > (now - _wall) * 0.8;
        _wall = now;
        _delay = delay;
        _slices = slices;
        return starved;
    }
}

/// <summary>
/// After a starved SCHED_IDLE thread, answers are handed over normally for a while: 5 ms, twice as
/// long each time it happens again within a second, up to a second, so that a busy neighbour costs
/// at most one long wait per period. Integers read and written without locks: a stale value costs
/// one answer handed over the other way, nothing more.
/// </summary>
internal sealed class IdleBackoff
{
    private const int MinBlockMs = 5;
    private const int MaxBlockMs = 1000;
    private static readonly long s_ms = Stopwatch.Frequency / 1000;
    private long _blockedUntil;
    private long _lastStarved;
    private int _blockMs;
    private long _starved;

    /// <summary>Times a starved idle thread was reported.</summary>
    public long Count => Volatile.Read(ref _starved);

    public bool Allows(long now)
    {
        if (now - Volatile.Read(ref _lastStarved) > Stopwatch.Frequency)
            Volatile.Write(ref _blockMs, 0); // a second without starvation: start afresh
        return now >= Volatile.Read(ref _blockedUntil);
    }

    public void Starved(long now)
    {
        Interlocked.Increment(ref _starved);
        var block = Math.Clamp(Volatile.Read(ref _blockMs) * 2, MinBlockMs, MaxBlockMs);
        Volatile.Write(ref _blockMs, block);
        Volatile.Write(ref _blockedUntil, now + block * s_ms);
        Volatile.Write(ref _lastStarved, now);
    }
}

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
        var spaces = 0;
        var i = 0;
        while (i < loadavg.Length && spaces < 3)
        {
            if (loadavg[i++] == (byte)' ')
                spaces++;
        }
        var slash = loadavg[i..].IndexOf((byte)'/');
        return slash > 0 && int.TryParse(loadavg.Slice(i, slash), NumberStyles.None, CultureInfo.InvariantCulture, out var running) ? running : -1;
    }

    public static void BecomeIdle()
    {
        var param = 0;
        IoUringNative.sched_setscheduler(0, IoUringConstants.SCHED_IDLE, &param);
    }

    /// <summary>Back to SCHED_OTHER; false (errno set) if the kernel refused.</summary>
    public static bool BecomeNormal()
    {
        var param = 0;
        return IoUringNative.sched_setscheduler(0, IoUringConstants.SCHED_OTHER, &param) == 0;
    }
}

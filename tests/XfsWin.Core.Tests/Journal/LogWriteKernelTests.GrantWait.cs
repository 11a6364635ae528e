using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using Xunit;

namespace XfsWin.Tests.Journal;

/// <summary>
/// Reservations short of log space: one waits while other threads' transactions hold the space and is granted when
/// they give it back; one that only its own thread's transactions stand in the way of fails at once.
/// </summary>
public sealed partial class LogWriteKernelTests
{
    // Generous: a grant that never wakes is the defect, not a slow one.
    private static readonly TimeSpan GrantWatchdog = TimeSpan.FromSeconds(60);

    /// <summary>A thread running one step of a test; what it threw is kept for the test to look at.</summary>
    private sealed class Helper
    {
        private readonly Thread _thread;
        public Exception? Failure { get; private set; }

        public Helper(Action body)
        {
            _thread = new Thread(() =>
            {
                try
                {
                    body();
                }
                catch (Exception e)
                {
                    Failure = e;
                }
            }) { IsBackground = true };
            _thread.Start();
        }

        public bool Ended => !_thread.IsAlive;

        /// <summary>Waits for the thread to end (asserting it does) and rethrows nothing: see <see cref="Failure"/>.</summary>
        public void Join(string what) => Assert.True(_thread.Join(GrantWatchdog), what);
    }

    /// <summary>Returns once <paramref name="count"/> reservations wait for log space (checked under the log's lock).</summary>
    private static void AwaitGrantWaiters(MountedLog log, int count, params Helper[] mustNotHaveEnded)
    {
        var deadline = DateTime.UtcNow + GrantWatchdog;
        while (log.GrantWaiters != count)
        {
            foreach (var t in mustNotHaveEnded)
                Assert.False(t.Ended, $"a reservation that had no room ended without waiting: {t.Failure?.Message}");
            Assert.True(DateTime.UtcNow < deadline, $"{log.GrantWaiters} reservation(s) waiting for log space, expected {count}");
            Thread.Sleep(5);
        }
    }

    /// <summary>An open log, the size of a part of about two fifths of it (two fit beside each other, a third does not), and two open transactions of this thread holding such a part each.</summary>
    private sealed record HeldLog(Superblock Sb, MountedLog Log, int Part, MetadataTransaction A, MetadataTransaction B);

    private static HeldLog OpenWithTwoFifthsHeld(FileBlockDevice device)
    {
        var sb = ReadSuperblock(device);
        var area = LogArea.For(device, null, sb);
        var log = MountedLog.Open(area, sb, new DeviceImageWriteback(device, sb));
        int part = (int)(area.Blocks * 2 / 5) << LogArea.BBShift;
        return new HeldLog(sb, log, part, log.Begin(part), log.Begin(part));
    }

    [Fact]
    public void A_reservation_short_of_log_space_waits_for_other_threads_and_fails_for_its_own()
    {
        var v = Make("");
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        {
            var (sb, log, part, a, b) = OpenWithTwoFifthsHeld(device);

            // Only this thread's own open transactions hold the space: waiting would never end.
            var refused = Assert.Throws<XfsException>(() => log.Begin(part));
            Assert.Equal(XfsError.IoError, refused.Error);
            Assert.Contains("this thread's open transactions", refused.Message, StringComparison.Ordinal);
            Assert.Equal(0, log.GrantWaiters);

            // Another thread's begin waits for a to give back what its items do not take.
            using var cGranted = new ManualResetEventSlim();
            using var cMayCommit = new ManualResetEventSlim();
            var c = new Helper(() =>
            {
                using var tx = log.Begin(part);
                cGranted.Set();
                Assert.True(cMayCommit.Wait(GrantWatchdog));
                tx.Log(Label(sb, device, "second"));
                tx.Commit();
            });
            AwaitGrantWaiters(log, 1, c);
            Assert.False(cGranted.IsSet);
            a.Log(Label(sb, device, "first"));
            a.Commit();
            Assert.True(cGranted.Wait(GrantWatchdog), "a commit that gave log space back did not wake the waiting reservation");
            Assert.Equal(0, log.GrantWaiters);

            // With b and c open, a third thread's begin checkpoints the CIL and writes the AIL back, and still has no room:
            // it waits until b is cancelled.
            var d = new Helper(() =>
            {
                using var tx = log.Begin(part);
                tx.Log(Unchanged(device, AgiDaddr(sb, 2), SectorBB(sb), BufType.Agi));
                tx.Commit();
            });
            AwaitGrantWaiters(log, 1, d);
            Assert.Equal(0, log.AilCount);
            Assert.Equal(0, log.CilCount);
            b.Dispose();
            d.Join("a cancel that gave log space back did not wake the waiting reservation");
            Assert.Null(d.Failure);
            cMayCommit.Set();
            c.Join("the first waiter did not commit");
            Assert.Null(c.Failure);
            log.Unmount();
        }
        Assert.Equal("second", KernelLabel(v));
        AssertRepairClean(v);
        WithKernelMount(v, _ => { });
        AssertRepairClean(v);
    }

    [Fact]
    public void A_reservation_waiting_for_log_space_gives_up_when_the_log_shuts_down()
    {
        var v = Make("");
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        {
            var (_, log, part, a, b) = OpenWithTwoFifthsHeld(device);
            var c = new Helper(() => log.Begin(part).Dispose());
            AwaitGrantWaiters(log, 1, c);
            log.Shutdown(new IOException("simulated device failure"));
            c.Join("a shutdown did not wake the waiting reservation");
            var shutdown = Assert.IsType<XfsException>(c.Failure);
            Assert.Contains("simulated device failure", shutdown.Message, StringComparison.Ordinal);
            Assert.Equal(0, log.GrantWaiters);
            a.Dispose();
            b.Dispose();
        }
        // Nothing was committed: the volume is as mkfs and the kernel left it.
        AssertRepairClean(v);
        WithKernelMount(v, _ => { });
    }
}

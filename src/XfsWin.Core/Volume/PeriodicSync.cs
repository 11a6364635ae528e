namespace XfsWin.Volume;

/// <summary>
/// The kernel's periodic log work (xfs_log_worker, run every fs.xfs.xfssyncd_centisecs, 30 s by default) together with
/// its flusher threads' expiry of dirty file data: a thread of a read-write open that, every interval, makes durable
/// what changed since the last time (held file data written, the device flushed, the log forced: see
/// <see cref="XfsVolume.Sync"/>). Without it a change nobody fsyncs would stay in memory until an eighth of the log
/// fills, and a crash or power cut would lose all of it; with it a crash loses at most the last interval's changes.
/// <para>
/// The round runs beside the volume's requests: sync takes neither the volume's change lock nor anything a change
/// holds while it waits (the data cache's and the log's own locks, as an fsync from any request does). It stops for
/// good when the volume is shut down, found corrupt or unmounted (the round's <c>false</c> or a refusal).
/// </para>
/// </summary>
internal sealed class PeriodicSync : IDisposable
{
    private readonly TimeSpan _interval;
    private readonly Func<bool> _round;
    private readonly ManualResetEventSlim _stop = new();
    private readonly Thread _thread;

    /// <param name="interval">Time between rounds (positive).</param>
    /// <param name="round">One round; returns false when there will be nothing more to sync (the volume shut down).</param>
    public PeriodicSync(TimeSpan interval, Func<bool> round)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(interval, TimeSpan.Zero);
        _interval = interval;
        _round = round;
        _thread = new Thread(Run) { IsBackground = true, Name = "xfswin-periodic-sync" };
        _thread.Start();
    }

    /// <summary>Rounds completed so far (for tests and diagnostics).</summary>
    public int Rounds => Volatile.Read(ref _rounds);
    private int _rounds;

    private void Run()
    {
        while (!_stop.Wait(_interval))
        {
            try
            {
                if (!_round()) return;
            }
            catch (Exception e) when (e is XfsException or ObjectDisposedException)
            {
                // The volume refused (shut down by a failed device write, read-only after corruption) or is going
                // away: the error reached, or will reach, the requests themselves.
                return;
            }
            Interlocked.Increment(ref _rounds);
        }
    }

    /// <summary>Stops the thread and waits for a round in progress to finish.</summary>
    public void Dispose()
    {
        _stop.Set();
        if (Thread.CurrentThread != _thread) _thread.Join();
        _stop.Dispose();
    }
}

using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// A log replayed into memory on its way to the device: <see cref="WriteReplay"/> writes the replayed
/// metadata and marks the log clean; <see cref="WriteReplayKeepingLog"/> writes it but leaves the log as it is
/// (its unfinished intents still between tail and head) for the write engine to go on logging from the head, as
/// the kernel's recovery does before it finishes intents and frees unlinked inodes. Nothing reaches the device
/// before either, so a refusal decided in between leaves it byte-identical. Also what in-memory replay builds its
/// result from (then never written).
/// </summary>
public sealed class InPlaceReplay
{
    private readonly LogArea? _area;
    private readonly LogPosition? _position;
    private readonly IBlockDevice? _target;
    private bool _replayWritten;

    internal InPlaceReplay(LogRecoveryResult result, Superblock superblock)
    {
        Result = result;
        Superblock = superblock;
    }

    internal InPlaceReplay(LogRecoveryResult result, Superblock superblock, OverlayDevice overlay, IReadOnlyList<uint> cowAgs,
        LogArea area, LogPosition position, IBlockDevice target, IReadOnlyList<RecoveredIntent> intents)
    {
        Result = result;
        Superblock = superblock;
        Overlay = overlay;
        AgsWithLeftoverCow = cowAgs;
        _area = area;
        _position = position;
        _target = target;
        RecoveredIntents = intents;
    }

    /// <summary>The intents the log holds without done items, in log order (what recovery must finish).</summary>
    public IReadOnlyList<RecoveredIntent> RecoveredIntents { get; } = [];

    /// <summary>Where the log's head and tail are (null when nothing was replayed).</summary>
    public LogPosition? Position => _position;

    public LogRecoveryResult Result { get; }

    /// <summary>The superblock after the replay (the geometry a logged grow left), or as read when nothing was replayed.</summary>
    public Superblock Superblock { get; }

    /// <summary>The replayed metadata over the device; null when there was nothing to replay (clean, external, not replayed).</summary>
    public OverlayDevice? Overlay { get; }

    /// <summary>AGs whose refcount btree still holds copy-on-write staging records after the replay.</summary>
    public IReadOnlyList<uint> AgsWithLeftoverCow { get; } = [];

    /// <summary>True when the log was dirty and replayed: there is something to write.</summary>
    public bool HasReplay => Overlay is not null;

    /// <summary>
    /// Writes the replay out, then an unmount record. The replay is idempotent, so a crash while it is
    /// written leaves the log dirty and replaying again finishes the job.
    /// </summary>
    public void WriteReplay(IProgress<double>? progress = null)
    {
        if (Overlay is null || _target is null || _area is null || _position is null)
            throw new InvalidOperationException("there is no replay to write: the log was clean or not replayed");
        if (_replayWritten) throw new InvalidOperationException("the replay was already written");
        // Lazy superblock counters are only exact at a clean unmount: rebuild them from the AG headers first.
        LogRecovery.RebuildSummaryCounters(Overlay, Superblock);
        Overlay.FlushTo(_target, (done, total) => progress?.Report(0.9 + 0.06 * done / Math.Max(1, total)));
        _target.Flush();
        LogWriter.WriteUnmountRecord(_area, Superblock, _position);
        _area.Device.Flush();
        _replayWritten = true;
        Result.State = LogState.ReplayedInPlace;
        Result.Device = _target;
    }

    /// <summary>
    /// Writes the replay out (superblock counters rebuilt from the AG headers) but leaves the log dirty: its tail and
    /// the unfinished intents stay where they are, the blocks just past the head that may hold records of the current
    /// cycle are cleared (xlog_clear_stale_blocks, stopping before the tail), and the write engine then appends its
    /// own transactions at the head (<see cref="MountedLog.OpenAfterReplay"/>). A crash before that engine's work is
    /// finished leaves a log that replays to the same point and still holds what is left to do.
    /// </summary>
    public LogPosition WriteReplayKeepingLog(IProgress<double>? progress = null)
    {
        if (Overlay is null || _target is null || _area is null || _position is null)
            throw new InvalidOperationException("there is no replay to write: the log was clean or not replayed");
        if (_replayWritten) throw new InvalidOperationException("the replay was already written");
        LogRecovery.RebuildSummaryCounters(Overlay, Superblock);
        Overlay.FlushTo(_target, (done, total) => progress?.Report(0.9 + 0.06 * done / Math.Max(1, total)));
        _target.Flush();
        LogWriter.ClearStaleBlocks(_area, Superblock, _position, _position.HeadBlock, _position.TailBlock);
        _area.Device.Flush();
        _replayWritten = true;
        Result.State = LogState.ReplayedInPlace;
        Result.Device = _target;
        return _position;
    }
}

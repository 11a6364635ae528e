using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// A log replayed into memory on its way to the device: <see cref="WriteReplay"/> writes the replayed
/// metadata and marks the log clean; <see cref="WriteUnloggedWork"/> then writes work no log describes
/// (computed by the caller in an overlay on top of <see cref="Overlay"/>), fenced by NEEDSREPAIR.
/// Nothing reaches the device before <see cref="WriteReplay"/>, so a refusal decided in between leaves it
/// byte-identical. Also what in-memory replay builds its result from (then never written).
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
        LogArea area, LogPosition position, IBlockDevice target)
    {
        Result = result;
        Superblock = superblock;
        Overlay = overlay;
        AgsWithLeftoverCow = cowAgs;
        _area = area;
        _position = position;
        _target = target;
    }

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
    /// Writes <paramref name="afterReplay"/> (an overlay over <see cref="Overlay"/> holding what the kernel does
    /// at mount after its replay) to the device. No log describes it, so it is fenced with NEEDSREPAIR, set on
    /// disk before its first write and cleared after its last: a crash in between leaves a clean log and a
    /// volume the kernel refuses to mount until xfs_repair has finished the job.
    /// </summary>
    public void WriteUnloggedWork(OverlayDevice afterReplay, IProgress<double>? progress = null)
    {
        ArgumentNullException.ThrowIfNull(afterReplay);
        if (!_replayWritten || _target is null) throw new InvalidOperationException("the replay must be written before the work that follows it");
        if (!ReferenceEquals(afterReplay.BaseDevice, Overlay))
            throw new ArgumentException("the after-replay work must be an overlay over this replay", nameof(afterReplay));
        LogRecovery.RebuildSummaryCounters(afterReplay, Superblock);
        LogRecovery.SetNeedsRepair(_target, afterReplay, Superblock.SectorSize, true);
        afterReplay.FlushTo(_target, (done, total) => progress?.Report(0.96 + 0.03 * done / Math.Max(1, total)));
        _target.Flush();
        LogRecovery.SetNeedsRepair(_target, null, Superblock.SectorSize, false);
    }
}

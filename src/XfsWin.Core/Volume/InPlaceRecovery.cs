using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

/// <summary>What an in-place replay left for the write engine: where the log goes on, its unfinished intents, the AGs with CoW staging extents.</summary>
internal sealed record RecoveryFollowUp(LogPosition Position, IReadOnlyList<RecoveredIntent> Intents, IReadOnlyList<uint> CowAgs);

/// <summary>An in-place replay written, and the work after it still to do (null when the replay was all).</summary>
internal sealed record PreparedRecovery(LogRecoveryResult Result, RecoveryFollowUp? FollowUp);

/// <summary>
/// In-place log recovery of a volume the write gate admitted, as the kernel's mount does it: the journal replays the
/// log into memory; anything this build cannot finish is refused before a byte is written; the replay is written;
/// then what the kernel does after its replay (finishing unfinished intents, freeing inodes unlinked while open,
/// removing leftover copy-on-write staging extents) is done by the volume's write engine, logging every change in the
/// same log (which stays dirty, its tail held by the intents, until that work is done), and the volume is unmounted
/// cleanly. Without such work, the replay is written and the log marked clean at once.
/// </summary>
public static class InPlaceRecovery
{
    public static LogRecoveryResult Run(WriteAccess access, IProgress<double>? progress = null)
    {
        ArgumentNullException.ThrowIfNull(access);
        try
        {
            var prepared = Prepare(access, progress);
            if (prepared.FollowUp is { } followUp)
            {
                using (var volume = XfsVolume.OpenForRecovery(access, followUp.Position, followUp.Intents))
                    volume.FinishRecovery(followUp.Intents, followUp.CowAgs, prepared.Result,
                        progress is null ? null : new Progress<double>(p => progress.Report(0.96 + 0.04 * p)));
                ReportFollowUp(prepared.Result);
            }
            progress?.Report(1.0);
            return prepared.Result;
        }
        catch (XfsCorruptionException e)
        {
            // Corruption the replay or the engine found is recorded as the read side records it (structure and daddr named).
            access.Health.Record(e);
            throw;
        }
    }

    /// <summary>
    /// Replays the log in memory, refuses (nothing written) what cannot be finished here, and writes the replay: with
    /// the log marked clean when nothing follows, or left dirty for the engine when something does.
    /// </summary>
    internal static PreparedRecovery Prepare(WriteAccess access, IProgress<double>? progress = null)
    {
        if (access.Purpose != WritePurpose.LogRecovery)
            throw new ArgumentException("the write access was granted for another purpose than log recovery", nameof(access));
        var replay = LogRecovery.BeginInPlace(access, progress);
        var result = replay.Result;
        if (!replay.HasReplay) return new PreparedRecovery(result, null);
        var intents = replay.RecoveredIntents;
        var cowAgs = replay.AgsWithLeftoverCow;
        bool followUp = intents.Count > 0 || result.UnlinkedInodes > 0 || cowAgs.Count > 0;
        if (followUp)
        {
            var refusal = Refusal(replay.Overlay!, replay.Superblock, intents, result.UnlinkedInodes);
            if (refusal is not null)
                throw new XfsException(XfsError.Unsupported,
                    $"the log holds work that this build cannot finish in place: {refusal}. Nothing was written. " +
                    "Mount the volume once with Linux (it replays and finishes it), or open it with --replay=memory.");
        }
        if (!followUp)
        {
            replay.WriteReplay(progress);
            return new PreparedRecovery(result, null);
        }
        var position = replay.WriteReplayKeepingLog(progress);
        return new PreparedRecovery(result, new RecoveryFollowUp(position, intents, cowAgs));
    }

    /// <summary>The warnings that say what the work after the replay did.</summary>
    internal static void ReportFollowUp(LogRecoveryResult result)
    {
        var warnings = (List<string>)result.Warnings;
        warnings.RemoveAll(w => w.Contains("unfinished", StringComparison.Ordinal) && w.Contains("intent", StringComparison.Ordinal));
        if (result.IntentsRecovered.Count > 0)
            warnings.Add("finished " + string.Join(", ", result.IntentsRecovered.Select(kv => $"{kv.Value} {kv.Key}")) +
                         " intent(s) the log left unfinished, as Linux does after its replay");
        if (result.UnlinkedInodesFreed > 0)
            warnings.Add($"freed {result.UnlinkedInodesFreed} inode(s) unlinked while open at the crash, as Linux does after its replay");
        if (result.CowStagingExtentsRemoved > 0)
            warnings.Add($"removed {result.CowStagingExtentsRemoved} leftover copy-on-write staging extent(s), as Linux does at mount");
    }

    /// <summary>
    /// Why the work after the replay of the volume on <paramref name="replayed"/> (the replayed view) cannot be done
    /// here, or null. The write path does not maintain realtime sections or the quota files of a metadata directory,
    /// so it refuses work that would need either; and exchanges that need short-form conversions afterwards.
    /// </summary>
    public static string? Refusal(IBlockDevice replayed, Superblock sb, IReadOnlyList<RecoveredIntent> intents, int unlinkedInodes)
    {
        ArgumentNullException.ThrowIfNull(replayed);
        ArgumentNullException.ThrowIfNull(intents);
        if (!sb.IsV5) return "the volume is V4";
        if (sb.RtBlocks != 0 && (intents.Count > 0 || unlinkedInodes > 0))
            return "the volume has a realtime section, which the write path does not maintain";
        var realtime = intents.Where(i => i.Type is LogItemType.EfiRt or LogItemType.RuiRt or LogItemType.CuiRt).ToList();
        if (realtime.Count > 0) return $"{realtime.Count} realtime intent(s) ({string.Join(", ", realtime.Select(i => i.Kind).Distinct())})";
        var sector = new byte[sb.SectorSize];
        replayed.Read(0, sector);
        bool quota = (BinaryPrimitives.ReadUInt16BigEndian(sector.AsSpan(SuperblockView.OffQflags)) & QuotaAccountingFlags) != 0;
        // Quota accounting: the engine charges the dquots of what it frees and maps (VolumeQuota) in the quota files the
        // superblock names; quota files inside a metadata directory it does not keep.
        if (quota && sb.HasMetadir && (intents.Count > 0 || unlinkedInodes > 0))
            return "quota accounting with the quota files in the metadata directory (finishing the work charges dquots there, which this build does not do)";
        foreach (var xmi in intents.Where(i => i.Type == LogItemType.Xmi))
        {
            var b = xmi.Regions[0].AsSpan();
            ulong flags = BinaryPrimitives.ReadUInt64LittleEndian(b[64..]);
            ulong ino2 = BinaryPrimitives.ReadUInt64LittleEndian(b[24..]);
            if ((flags & ExchangeState.AttrFork) != 0) return "an exchange of attribute forks (online repair's), which needs short-form conversions this build does not do";
            if (!sb.IsValidInode(ino2)) continue; // the engine reports it as corruption
            var core = new byte[DinodeView.V3CoreSize];
            replayed.Read(sb.InodeToByte(ino2), core);
            ushort type = (ushort)(BinaryPrimitives.ReadUInt16BigEndian(core.AsSpan(DinodeView.OffMode)) & 0xF000);
            if (type is 0x4000 or 0xA000)
                return $"an exchange into a {(type == 0x4000 ? "directory" : "symlink")} (inode {ino2}, online repair's), which needs short-form conversions this build does not do";
        }
        foreach (var bui in intents.Where(i => i.Type == LogItemType.Bui))
            if (Extents.BmapUpdateWork.IsRealtime(bui.MapExtents()[0])) return "a realtime bmap intent";
        return null;
    }

    /// <summary>sb_qflags accounting bits (XFS_UQUOTA_ACCT, XFS_PQUOTA_ACCT, XFS_GQUOTA_ACCT).</summary>
    private const ushort QuotaAccountingFlags = 0x0001 | 0x0008 | 0x0040;
}

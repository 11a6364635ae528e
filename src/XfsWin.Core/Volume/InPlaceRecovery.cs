using XfsWin.Allocation;
using XfsWin.Device;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

/// <summary>
/// In-place log recovery of a volume the write gate admitted: the journal replays the log into memory,
/// then what the kernel does at mount after its own replay is computed on a second overlay (freeing
/// inodes unlinked while open, removing leftover copy-on-write staging extents). If anything remains that
/// only the kernel's write path can finish (unfinished intents, inodes this build cannot free), recovery
/// is refused before a byte is written. Otherwise the replay is written and the log marked clean, then the
/// after-replay work, fenced with NEEDSREPAIR.
/// </summary>
public static class InPlaceRecovery
{
    public static LogRecoveryResult Run(WriteAccess access, IProgress<double>? progress = null)
    {
        ArgumentNullException.ThrowIfNull(access);
        try
        {
            return RunCore(access, progress);
        }
        catch (XfsCorruptionException e)
        {
            // Corruption the replay or the editors found is recorded as the read side records it (structure and daddr named).
            access.Health.Record(e);
            throw;
        }
    }

    private static LogRecoveryResult RunCore(WriteAccess access, IProgress<double>? progress)
    {
        if (access.Purpose != WritePurpose.LogRecovery)
            throw new ArgumentException("the write access was granted for another purpose than log recovery", nameof(access));
        var replay = LogRecovery.BeginInPlace(access, progress);
        var result = replay.Result;
        if (!replay.HasReplay)
        {
            progress?.Report(1.0);
            return result;
        }
        var sb = replay.Superblock;
        var refusals = new List<string>();
        if (result.UnfinishedIntents.Count > 0)
            refusals.Add("unfinished intents (" + string.Join(", ", result.UnfinishedIntents.Select(kv => $"{kv.Value} {kv.Key}")) + ")");
        // The after-replay work goes into a second overlay on top of the replay, so that a refusal still leaves the
        // disk untouched and the replay can be written out on its own first.
        OverlayDevice? afterReplay = null;
        var cowAgs = replay.AgsWithLeftoverCow;
        if ((result.UnlinkedInodes > 0 || cowAgs.Count > 0) && refusals.Count == 0)
        {
            afterReplay = new OverlayDevice(replay.Overlay!);
            // One change over metadata buffers of the second overlay: committed and written back (through the
            // write verifiers) only when nothing was refused, so a refusal leaves even the overlay untouched.
            using var buffers = new BufferCache(afterReplay, new VolumeHealth(), 64L << 20);
            using var changes = new MetadataChangeSet(buffers);
            try
            {
                if (result.UnlinkedInodes > 0)
                    result.UnlinkedInodesFreed = UnlinkedInodeFreeing.FreeAll(changes, sb);
            }
            catch (XfsException e) when (e.Error == XfsError.Unsupported)
            {
                refusals.Add($"{result.UnlinkedInodes} unlinked-but-open inode(s) to free ({e.Message})");
            }
            try
            {
                foreach (var ag in cowAgs)
                {
                    var space = new AgSpaceEditor(changes, sb, ag);
                    result.CowStagingExtentsRemoved += space.RemoveCowStaging();
                    space.Commit();
                }
            }
            catch (XfsException e) when (e.Error == XfsError.Unsupported)
            {
                refusals.Add($"leftover copy-on-write staging extents to remove in AG {string.Join(", ", cowAgs)} ({e.Message})");
            }
            if (refusals.Count == 0)
            {
                changes.Commit();
                buffers.Writeback();
            }
        }
        if (refusals.Count > 0)
            throw new XfsException(XfsError.Unsupported,
                "the log holds work that only the kernel's write path can finish: " + string.Join("; ", refusals) +
                ". xfswin cannot finish them yet, so nothing was written. Mount the volume once with Linux (it replays and finishes them), or open it with --replay=memory.");

        replay.WriteReplay(progress);
        if (afterReplay is not null)
        {
            replay.WriteUnloggedWork(afterReplay, progress);
            var warnings = (List<string>)result.Warnings;
            if (result.UnlinkedInodesFreed > 0)
                warnings.Add($"freed {result.UnlinkedInodesFreed} inode(s) unlinked while open at the crash, as Linux does after its replay");
            if (result.CowStagingExtentsRemoved > 0)
                warnings.Add($"removed {result.CowStagingExtentsRemoved} leftover copy-on-write staging extent(s), as Linux does at mount");
        }
        progress?.Report(1.0);
        return result;
    }
}

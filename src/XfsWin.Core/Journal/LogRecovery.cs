using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Journal;

/// <summary>
/// Log recovery: find the log's head and tail and replay every committed transaction into a
/// copy-on-write overlay of the data device. <see cref="Recover"/> keeps the overlay (in-memory replay:
/// the device is never written). <see cref="BeginInPlace"/> needs a <see cref="WriteAccess"/> from the
/// write gate and returns an <see cref="InPlaceReplay"/> that writes the overlay out and marks the log
/// clean with an unmount record; what the kernel does at mount after its replay (freeing unlinked inodes,
/// removing CoW staging extents) is the Volume layer's to decide and compute.
/// </summary>
public static class LogRecovery
{
    public static LogRecoveryResult Recover(IBlockDevice dataDevice, IBlockDevice? externalLogDevice, Superblock sb, LogReplayMode mode,
        IProgress<double>? progress = null) =>
        Recover(dataDevice, externalLogDevice, sb, mode, progress, honourQuotaOff: true);

    /// <param name="honourQuotaOff">False only in tests: replay dquots of types a quota-off item switched off (see <see cref="LogReplayer.HonourQuotaOff"/>).</param>
    internal static LogRecoveryResult Recover(IBlockDevice dataDevice, IBlockDevice? externalLogDevice, Superblock sb, LogReplayMode mode,
        IProgress<double>? progress, bool honourQuotaOff)
    {
        if (mode == LogReplayMode.InPlace)
            throw new ArgumentException("in-place recovery writes to the device: it starts at the write gate (WriteGate, then LogRecovery.BeginInPlace)", nameof(mode));
        var replay = Replay(dataDevice, externalLogDevice, sb, mode, progress, honourQuotaOff);
        var result = replay.Result;
        if (replay.Overlay is null) return result;
        var warnings = (List<string>)result.Warnings;
        if (result.UnlinkedInodes > 0)
            warnings.Add($"{result.UnlinkedInodes} inode(s) were unlinked while open at the crash; they are hidden here (in-place recovery frees them, as Linux does at mount)");
        if (replay.AgsWithLeftoverCow.Count > 0)
            warnings.Add($"leftover copy-on-write staging extents in AG {string.Join(", ", replay.AgsWithLeftoverCow)}: they hold no file data (in-place recovery removes them, as Linux does at mount)");
        result.State = LogState.ReplayedInMemory;
        result.Device = replay.Overlay;
        progress?.Report(1.0);
        return result;
    }

    /// <summary>
    /// Replays the log of the volume the gate admitted into memory, ready to be written in place by
    /// <see cref="InPlaceReplay.WriteReplay"/>. Nothing is written here.
    /// </summary>
    public static InPlaceReplay BeginInPlace(WriteAccess access, IProgress<double>? progress = null)
    {
        ArgumentNullException.ThrowIfNull(access);
        return Replay(access.Data, access.Log, access.Superblock, LogReplayMode.InPlace, progress, honourQuotaOff: true);
    }

    private static InPlaceReplay Replay(IBlockDevice dataDevice, IBlockDevice? externalLogDevice, Superblock sb, LogReplayMode mode,
        IProgress<double>? progress, bool honourQuotaOff)
    {
        var warnings = new List<string>();
        if (sb.LogStart == 0 && externalLogDevice is null)
        {
            warnings.Add("the log is on an external device that was not given; if Linux did not unmount cleanly, the view may be stale. " +
                         "Pass the log device to replay it (xfswin mount -o logdev=DEVICE; --log-device DEVICE for other commands).");
            return new InPlaceReplay(new LogRecoveryResult { State = LogState.External, Device = dataDevice, Warnings = warnings }, sb);
        }
        var area = LogArea.For(dataDevice, externalLogDevice, sb);
        var reader = new LogReader(area, sb.Uuid);
        LogPosition pos;
        try
        {
            pos = LogScanner.Find(reader, sb.HasLogV2 || sb.IsV5, sb.IsV5);
        }
        catch (XfsCorruptionException e) when (mode == LogReplayMode.None)
        {
            // Nothing is replayed anyway: an unreadable log only leaves the state unknown.
            warnings.Add($"the log could not be read ({e.Problem}) and was ignored: if Linux did not unmount cleanly, the view may be stale");
            return new InPlaceReplay(new LogRecoveryResult { State = LogState.Unknown, Device = dataDevice, Warnings = warnings }, sb);
        }
        warnings.AddRange(pos.Warnings);
        var result = new LogRecoveryResult
        {
            Device = dataDevice,
            HeadLsn = pos.HeadLsn,
            TailLsn = Lsn.Make(pos.HeadCycle, (uint)pos.TailBlock),
            Warnings = warnings,
        };
        if (pos.Clean || pos.TailBlock == pos.HeadBlock)
        {
            result.State = LogState.Clean;
            progress?.Report(1.0);
            return new InPlaceReplay(result, sb);
        }
        if (mode == LogReplayMode.None)
        {
            warnings.Add("the log is dirty (Linux did not unmount cleanly) and was not replayed: recent changes are missing from this view");
            result.State = LogState.Dirty;
            return new InPlaceReplay(result, sb);
        }
        // As xlog_recover: unknown incompatible log features only matter for a log that must be replayed.
        uint unknownLogIncompat = sb.LogIncompat & ~SuperblockFeatures.LogIncompatKnown;
        if (unknownLogIncompat != 0)
            throw new XfsException(XfsError.Unsupported,
                $"the log uses incompatible log features XfsWin does not know (0x{unknownLogIncompat:x}); mount the volume on Linux to replay it.");
        // xlog_valid_lsn: metadata can never carry an LSN beyond the head of the log that wrote it.
        if (sb.IsV5 && sb.Lsn != 0 && sb.Lsn != ulong.MaxValue && sb.Lsn > pos.HeadLsn)
            throw new XfsCorruptionException("superblock", 0, $"its LSN {Lsn.Format(sb.Lsn)} is ahead of the log head {Lsn.Format(pos.HeadLsn)}");

        long distance = LogScanner.Distance(area.Blocks, pos.TailBlock, pos.HeadBlock);
        result.LogBytesReplayed = distance << LogArea.BBShift;
        result.TailLsn = FindTailLsn(reader, pos);

        var overlay = new OverlayDevice(dataDevice);
        using var replayer = new LogReplayer(overlay, sb, (blk, problem) => reader.Corrupt(blk, problem)) { HonourQuotaOff = honourQuotaOff };

        // Pass 1: cancel table. Pass 2: apply.
        Walk(reader, pos, sb, warnings, replayer, pass: 1, progress, 0.0, 0.3);
        overlay.Prefetch(replayer.ReadAheadRanges());
        progress?.Report(0.45);
        Walk(reader, pos, sb, warnings, replayer, pass: 2, progress, 0.45, 0.9);
        replayer.FlushStamps();
        overlay.DropCleanPages();
        warnings.AddRange(replayer.Warnings);

        // The log may have changed the geometry (a grow is logged as a superblock buffer): everything after
        // the replay works from the superblock the replay left, never from the one read before it.
        var after = ReadReplayedSuperblock(overlay);

        result.TransactionsReplayed = replayer.TransactionsReplayed;
        result.QuotaAccounting = replayer.QuotaAccounting;
        result.DquotsReplayed = replayer.DquotsReplayed;
        result.QuotaOffItems = replayer.QuotaOffItems;
        result.QuotaTypesOff = replayer.QuotaTypesOff;
        result.DquotsSkippedQuotaOff = replayer.DquotsSkippedQuotaOff;
        result.IntentsLogged = replayer.IntentsLogged();
        result.IntentsFinished = replayer.IntentsFinished();
        result.UnfinishedIntents = replayer.UnfinishedIntents();
        result.PendingIntents = replayer.PendingIntents();
        result.UnlinkedInodes = RecoveryChecks.CountUnlinkedInodes(overlay, after, warnings);
        var cowAgs = RecoveryChecks.AgsWithLeftoverCow(overlay, after);
        foreach (var (kind, count) in result.UnfinishedIntents)
            warnings.Add($"{count} unfinished {kind} intent(s) in the log: they promise changes the log does not hold yet; " +
                "in-place recovery (and Linux, when it mounts the volume) finishes them");
        return new InPlaceReplay(result, after, overlay, cowAgs, area, pos, dataDevice, result.PendingIntents);
    }

    /// <summary>The primary superblock as the replay left it, verified.</summary>
    public static Superblock ReadReplayedSuperblock(IBlockDevice device)
    {
        ArgumentNullException.ThrowIfNull(device);
        var sector = new byte[512];
        device.Read(0, sector);
        int size = new SuperblockView(sector).SectSize;
        if (size is > 512 and <= 32768 && (size & (size - 1)) == 0)
        {
            sector = new byte[size];
            device.Read(0, sector);
        }
        var check = Superblock.Verify(sector);
        if (!check.IsOk) throw new XfsCorruptionException("primary superblock after log replay", 0, check.ToString());
        return Superblock.Decode(sector);
    }

    /// <summary>Sets or clears the NEEDSREPAIR incompatible feature in the primary superblock on disk (and in the overlay's copy), flushed.</summary>
    internal static void SetNeedsRepair(IBlockDevice disk, IBlockDevice? overlay, int sectorSize, bool on)
    {
        foreach (var device in overlay is null ? [disk] : new[] { disk, overlay })
        {
            var sector = new byte[sectorSize];
            device.Read(0, sector);
            var incompat = sector.AsSpan(SuperblockView.OffFeaturesIncompat);
            uint value = BinaryPrimitives.ReadUInt32BigEndian(incompat);
            value = on ? value | SuperblockFeatures.IncompatNeedsRepair : value & ~SuperblockFeatures.IncompatNeedsRepair;
            BinaryPrimitives.WriteUInt32BigEndian(incompat, value);
            XfsCrc.Stamp(sector, SuperblockView.OffCrc);
            device.Write(0, sector);
        }
        disk.Flush();
    }

    private static ulong FindTailLsn(LogReader reader, LogPosition pos)
    {
        Span<byte> bb = stackalloc byte[LogArea.BBSize];
        if (!reader.TryReadHeader(pos.TailBlock, bb)) throw reader.Corrupt(pos.TailBlock, "the tail of the log is not a record header");
        return new LogRecordHeader(bb).RecordLsn;
    }

    private static void Walk(LogReader reader, LogPosition pos, Superblock sb, List<string> warnings, LogReplayer replayer, int pass,
        IProgress<double>? progress, double from, double to)
    {
        var area = reader.Area;
        long distance = LogScanner.Distance(area.Blocks, pos.TailBlock, pos.HeadBlock);
        var assembler = pass == 1
            ? new TransactionAssembler(reader, replayer.CommitPass1, keepDataRegions: false, keepDataOf: LogReplayer.KeepsDataInPass1)
            : new TransactionAssembler(reader, replayer.CommitPass2);
        long walked = 0, blk = pos.TailBlock;
        int hblks = -1;
        double lastReport = -1;
        while (walked < distance)
        {
            var rec = reader.Read(blk);
            if (hblks < 0) hblks = rec.HeaderBlocks;
            else if (rec.HeaderBlocks != hblks)
                throw reader.Corrupt(blk, $"record has {rec.HeaderBlocks} header sectors but the tail record has {hblks}");
            if (!rec.CrcOk && !(rec.StoredCrc == 0 && !sb.IsV5))
            {
                if (sb.IsV5) throw reader.Corrupt(blk, $"record CRC mismatch (stored 0x{rec.StoredCrc:x8}) away from the head: the log is damaged. Mount with Linux or run xfs_repair");
                if (pass == 1) warnings.Add($"log record at block {rec.Block} has a bad CRC (V4: replayed anyway, as Linux does)");
            }
            walked += rec.TotalBlocks;
            if (walked > distance) throw reader.Corrupt(blk, "record runs past the head of the log");
            replayer.CurrentRecordBlock = rec.Block;
            assembler.Process(rec);
            blk = area.Wrap(blk + rec.TotalBlocks);
            double p = from + (to - from) * walked / distance;
            if (progress is not null && p - lastReport >= 0.01)
            {
                progress.Report(p);
                lastReport = p;
            }
        }
    }

    /// <summary>
    /// Lazy superblock counters are only exact at a clean unmount; after a dirty log the kernel rebuilds
    /// them from the AG headers (xfs_initialize_perag_data). Do the same before marking the log clean.
    /// </summary>
    internal static void RebuildSummaryCounters(IBlockDevice device, Superblock sb)
    {
        ulong icount = 0, ifree = 0, fdblocks = 0;
        var hdr = new byte[sb.SectorSize];
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            device.Read(RecoveryChecks.AgiOffset(sb, ag), hdr);
            icount += BinaryPrimitives.ReadUInt32BigEndian(hdr.AsSpan(AgiView.OffCount));
            ifree += BinaryPrimitives.ReadUInt32BigEndian(hdr.AsSpan(AgiView.OffFreecount));
            device.Read(RecoveryChecks.AgfOffset(sb, ag), hdr);
            fdblocks += (ulong)BinaryPrimitives.ReadUInt32BigEndian(hdr.AsSpan(AgfView.OffFreeblks))
                        + BinaryPrimitives.ReadUInt32BigEndian(hdr.AsSpan(AgfView.OffFlcount))
                        + BinaryPrimitives.ReadUInt32BigEndian(hdr.AsSpan(AgfView.OffBtreeblks));
        }
        var sector = new byte[sb.SectorSize];
        device.Read(0, sector);
        BinaryPrimitives.WriteUInt64BigEndian(sector.AsSpan(SuperblockView.OffIcount), icount);
        BinaryPrimitives.WriteUInt64BigEndian(sector.AsSpan(SuperblockView.OffIfree), ifree);
        BinaryPrimitives.WriteUInt64BigEndian(sector.AsSpan(SuperblockView.OffFdblocks), fdblocks);
        if (sb.IsV5) XfsCrc.Stamp(sector, SuperblockView.OffCrc);
        device.Write(0, sector);
    }
}

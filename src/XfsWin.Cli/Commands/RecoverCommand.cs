using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.Volume;

using XfsWin.Cli.Output;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin recover DEVICE [--dry-run] [--log-device LOGDEV] [--partition N]</c>: replays the log
/// Linux left dirty onto the device and marks it clean, or with --dry-run shows what replay would do
/// without writing anything. Exit codes: 0 done (or nothing to do), 1 error, 2 usage,
/// 3 (dry run) the log holds work xfswin would refuse to finish in place.
/// </summary>
public static class RecoverCommand
{
    public const string Usage =
        "usage: xfswin recover DEVICE [--dry-run] [--log-device LOGDEV] [--partition N]\n" +
        "  Replays the XFS log that Linux left dirty (after a crash or power loss) onto DEVICE and marks the log clean.\n" +
        "  --dry-run            replay in memory only and report what would be written; the device is not changed\n" +
        "  --log-device LOGDEV  the external log device, for volumes made with mkfs.xfs -l logdev=...\n" +
        "  --partition N        recover partition N of DEVICE (also written DEVICE@N)";

    public static int Run(string[] args) => Run(args, Console.Out, Console.Error);

    public static int Run(string[] args, TextWriter stdout, TextWriter stderr)
    {
        string? source = null, logSource = null;
        int? partition = null;
        bool dryRun = false;
        for (int i = 0; i < args.Length; i++)
        {
            string a = args[i];
            switch (a)
            {
                case "--dry-run" or "-n":
                    dryRun = true;
                    break;
                case "--log-device" or "-l" when i + 1 < args.Length:
                    logSource = args[++i];
                    break;
                case "--partition" when i + 1 < args.Length:
                    if (!int.TryParse(args[++i], out int p))
                    {
                        stderr.WriteLine($"xfswin recover: --partition needs a number, not '{args[i]}'");
                        return 2;
                    }
                    partition = p;
                    break;
                case "-h" or "--help":
                    stdout.WriteLine(Usage);
                    return 0;
                default:
                    if (a.StartsWith('-') || source is not null)
                    {
                        stderr.WriteLine($"xfswin recover: unexpected argument '{a}'");
                        stderr.WriteLine(Usage);
                        return 2;
                    }
                    source = a;
                    break;
            }
        }
        if (source is null)
        {
            stderr.WriteLine(Usage);
            return 2;
        }

        try
        {
            if (!dryRun)
            {
                // Everything that writes passes the write gate first: it refuses NEEDSREPAIR, unknown features and V4
                // volumes before a byte is written.
                using var access = WriteGate.Open(source, partition, logSource, WritePurpose.LogRecovery);
                if (access.Superblock.LogStart == 0 && access.Log is null)
                {
                    stderr.WriteLine($"xfswin recover: {source} has an external log; give it with --log-device LOGDEV. Nothing was written.");
                    return 2;
                }
                var recovered = RunWithProgress(stderr, "recovering", progress => InPlaceRecovery.Run(access, progress));
                Report(stdout, recovered);
                stdout.WriteLine(recovered.State == LogState.Clean
                    ? "The log is clean: there is nothing to recover."
                    : "Recovered: the replayed metadata and what finished the log's work are on the device, and the log is marked clean; " +
                      "Linux will mount it without recovery.");
                return 0;
            }

            using var data = PartitionSpec.Open(source, partition, writable: false);
            using var log = logSource is null ? null : PartitionSpec.Open(logSource, null, writable: false);
            var sector = new byte[Math.Max(4096, data.SectorSize)];
            data.Read(0, sector);
            var check = Superblock.Verify(sector);
            if (!check.IsOk)
            {
                stderr.WriteLine($"xfswin recover: {source} does not hold a usable XFS superblock ({check}); nothing was written.");
                return 1;
            }
            var sb = Superblock.Decode(sector);
            if (sb.LogStart == 0 && log is null)
            {
                stderr.WriteLine($"xfswin recover: {source} has an external log; give it with --log-device LOGDEV. Nothing was written.");
                return 2;
            }
            // A dry run says up front what the write gate would refuse.
            var refusal = WriteGate.Check(sector, WritePurpose.LogRecovery);
            if (refusal is not null)
            {
                stderr.WriteLine($"xfswin recover: recovery would be refused: {refusal.Message}");
                return 1;
            }
            var result = RunWithProgress(stderr, "replaying log in memory", progress => LogRecovery.Recover(data, log, sb, LogReplayMode.Memory, progress));
            Report(stdout, result);
            if (result.State == LogState.Clean)
            {
                stdout.WriteLine("The log is clean: there is nothing to recover.");
                return 0;
            }
            // What follows the replay (intents to finish, inodes to free) blocks in-place recovery only when this build
            // would refuse it.
            string? followUpRefusal = InPlaceRecovery.Refusal(result.Device, LogRecovery.ReadReplayedSuperblock(result.Device), result.PendingIntents, result.UnlinkedInodes);
            if (followUpRefusal is not null) stdout.WriteLine($"refused:       {followUpRefusal}");
            bool blocked = followUpRefusal is not null;
            long bytes = result.Device is OverlayDevice o ? o.DirtyBytes : 0;
            bool followUp = result.PendingIntents.Count > 0 || result.UnlinkedInodes > 0;
            stdout.WriteLine(blocked
                ? "Dry run: in-place recovery would be refused (see above): mount the volume once with Linux instead. Nothing was written."
                : $"Dry run: recovery would write {bytes / 1024} KiB of metadata" +
                  (followUp ? ", then finish what the log left (see above) through the log" : "") + " and mark the log clean. Nothing was written.");
            (result.Device as IDisposable)?.Dispose();
            return blocked ? 3 : 0;
        }
        catch (XfsException ex)
        {
            stderr.WriteLine($"xfswin recover: {ex.Message}");
            return 1;
        }
        catch (IOException ex)
        {
            stderr.WriteLine($"xfswin recover: {ex.Message}");
            return 1;
        }
        catch (UnauthorizedAccessException ex)
        {
            stderr.WriteLine($"xfswin recover: {ex.Message} (recovery writes to the device: run as administrator/root, or use --dry-run)");
            return 1;
        }
    }

    private static LogRecoveryResult RunWithProgress(TextWriter stderr, string label, Func<IProgress<double>, LogRecoveryResult> recover)
    {
        bool interactive = ReferenceEquals(stderr, Console.Error) && !Console.IsErrorRedirected;
        var bar = CliProgress.Start(stderr, interactive ? ProgressMode.Live : ProgressMode.Off, "recover");
        try
        {
            return recover(bar.ForFraction(label));
        }
        finally
        {
            bar.Finish();
        }
    }

    private static void Report(TextWriter o, LogRecoveryResult r)
    {
        o.WriteLine($"log state:     {r.State}");
        o.WriteLine($"head / tail:   {Lsn.Format(r.HeadLsn)} / {Lsn.Format(r.TailLsn)}");
        if (r.State != LogState.Clean)
        {
            o.WriteLine($"log replayed:  {r.LogBytesReplayed / 1024.0:F0} KiB, {r.TransactionsReplayed} transaction(s)");
            if (r.DquotsReplayed > 0 || r.QuotaOffItems > 0)
                o.WriteLine($"quota:         {r.DquotsReplayed} logged dquot(s) replayed" + (r.QuotaOffItems == 0 ? "" :
                    $"; {r.QuotaOffItems} quota-off item(s) switched off {(r.QuotaTypesOff.Count == 0 ? "no accounting" : string.Join(", ", r.QuotaTypesOff) + " quota")}, " +
                    $"whose {r.DquotsSkippedQuotaOff} logged dquot(s) and dquot buffer(s) were left out, as Linux does"));
            foreach (var (kind, count) in r.UnfinishedIntents)
                o.WriteLine($"unfinished:    {count} {kind} intent(s)" + (r.IntentsRecovered.TryGetValue(kind, out int n) ? $", {n} finished" : ""));
            if (r.UnlinkedInodes > 0)
                o.WriteLine($"unlinked:      {r.UnlinkedInodes} inode(s) unlinked while open" + (r.UnlinkedInodesFreed > 0 ? $", {r.UnlinkedInodesFreed} freed" : ""));
        }
        foreach (var w in r.Warnings) o.WriteLine($"warning:       {w}");
    }
}

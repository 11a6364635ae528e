using System.Diagnostics;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Crash consistency judged by the kernel. A workload runs through a read-write open on a
/// <see cref="RecordingBlockDevice"/>; crash images are then built for many points of its write stream: everything up
/// to the last flush before the point, and of the writes after that flush none, all, a prefix or a random subset (a
/// disk cache may write them in any order). At every point the kernel mounts the image (replaying our log), every
/// file whose fsync had returned before the last flush holds the content (and name) it had at that fsync or at a
/// later change, and after the kernel's unmount xfs_repair -n (6.13) finds nothing.
/// <para>
/// Torn points add writes that reached the disk only in part (some of their 512-byte sectors new, the others old):
/// log records and file data. Each torn image is judged twice: replayed by the kernel, and replayed by XfsWin's own
/// read-write open (then closed cleanly) before the kernel mounts it.
/// </para>
/// <para>
/// Points per workload: 10 plain and 4 torn (the CI sample, 70 in all) or XFSWIN_CRASH_POINTS and XFSWIN_CRASH_TORN
/// (bench/crash-points.sh runs the full counts). Seeds are fixed, so a run always judges the same points.
/// </para>
/// </summary>
public sealed class CrashPointTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-crash.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static int FromEnvironment(string name, int fallback) =>
        int.TryParse(Environment.GetEnvironmentVariable(name), out int n) && n >= 0 ? n : fallback;

    private static int PointsPerWorkload => FromEnvironment("XFSWIN_CRASH_POINTS", 10);
    private static int TornPointsPerWorkload => FromEnvironment("XFSWIN_CRASH_TORN", 4);
    /// <summary>Recordings of each workload, each with its own seed (a different random sequence, so other write streams).</summary>
    private static int Rounds => Math.Max(1, FromEnvironment("XFSWIN_CRASH_ROUNDS", 1));
    /// <summary>
    /// The CIL size that makes a commit take a checkpoint (XFSWIN_CRASH_CHECKPOINT_BYTES; 0, the default, is the
    /// volume's own: an eighth of the log, which these workloads never fill, so their checkpoints come from fsyncs). A
    /// few KiB makes commits take checkpoints that the log's worker writes behind the workload.
    /// </summary>
    private static int CheckpointBytes => FromEnvironment("XFSWIN_CRASH_CHECKPOINT_BYTES", 0);

    /// <summary>The seed of a workload's recording: the first round's are the CI sample's.</summary>
    private static int WorkloadSeed(int w, int round) => 1000 + w + 100 * round;

    private static readonly CrashSubset[] Subsets = [CrashSubset.None, CrashSubset.All, CrashSubset.Prefix, CrashSubset.Random];

    /// <summary>The points judged for one workload: seeded, distinct images only, always including the end.</summary>
    private static List<(CrashPoint Point, List<DurableWrite> Writes)> ChoosePoints(IReadOnlyList<DeviceEvent> events, int count, int seed)
    {
        var rng = new Random(seed);
        var seen = new HashSet<string>();
        var chosen = new List<(CrashPoint, List<DurableWrite>)>();
        var flushes = Enumerable.Range(0, events.Count).Where(i => events[i].IsFlush).ToList();
        for (int attempt = 0; chosen.Count < count && attempt < count * 20; attempt++)
        {
            int point = attempt == 0 ? events.Count
                // Half the points just before a flush (the most writes pending), half anywhere.
                : rng.Next(2) == 0 && flushes.Count > 0 ? flushes[rng.Next(flushes.Count)] : rng.Next(1, events.Count + 1);
            var crash = new CrashPoint(point, attempt == 0 ? CrashSubset.All : Subsets[attempt % Subsets.Length], rng.Next());
            var writes = CrashImage.DurableSectors(events, crash);
            if (seen.Add(string.Join(',', writes))) chosen.Add((crash, writes));
        }
        return chosen;
    }

    /// <summary>
    /// Torn points: two in three at a flush with log writes pending (a checkpoint's records, its commit record and the
    /// data it maps are written just before their flushes), the rest at any flush or anywhere; a prefix with the
    /// interrupted write torn, all with the last one torn, or a random subset with torn writes among it; only images
    /// that hold at least one torn write, each once.
    /// </summary>
    private static List<(CrashPoint Point, List<DurableWrite> Writes)> ChooseTornPoints(IReadOnlyList<DeviceEvent> events, int count, int seed,
        Func<DeviceEvent, bool> tearable, Func<DeviceEvent, bool> isLog)
    {
        var rng = new Random(seed);
        var seen = new HashSet<string>();
        var chosen = new List<(CrashPoint, List<DurableWrite>)>();
        var flushes = Enumerable.Range(0, events.Count).Where(i => events[i].IsFlush).ToList();
        var afterLogWrites = flushes.Where(f =>
        {
            for (int i = f - 1; i >= 0 && !events[i].IsFlush; i--)
                if (isLog(events[i]) && events[i].Data!.Length > CrashImage.SectorBytes) return true;
            return false;
        }).ToList();
        CrashSubset[] subsets = [CrashSubset.Prefix, CrashSubset.All, CrashSubset.Random];
        for (int attempt = 0; chosen.Count < count && attempt < count * 40; attempt++)
        {
            int point = rng.Next(3) switch
            {
                0 or 1 when afterLogWrites.Count > 0 => afterLogWrites[rng.Next(afterLogWrites.Count)],
                0 or 1 or 2 when rng.Next(2) == 0 && flushes.Count > 0 => flushes[rng.Next(flushes.Count)],
                _ => rng.Next(1, events.Count + 1),
            };
            var crash = new CrashPoint(point, subsets[attempt % subsets.Length], rng.Next(), Torn: true);
            var writes = CrashImage.DurableSectors(events, crash, tearable);
            if (writes.Any(w => w.IsTorn) && seen.Add(string.Join(',', writes))) chosen.Add((crash, writes));
        }
        return chosen;
    }

    /// <summary>Runs one workload on a recording device over a copy of <paramref name="baseImage"/>; its model and write stream.</summary>
    private (CrashModel Model, IReadOnlyList<DeviceEvent> Events) Record(string baseImage, int w, int seed)
    {
        var (name, run) = CrashWorkloads.All[w];
        string work = Path.Combine(_tmp, $"work-{name}.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, work);
        var dev = new RecordingBlockDevice(PartitionSpec.Open(work, null, writable: true));
        CrashModel model;
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = CheckpointBytes }, ownsDevice: true))
        {
            model = new CrashModel(v, dev);
            run(model, new Random(seed));
        }
        File.Delete(work);
        var events = dev.Snapshot();
        output.WriteLine($"{name}: {events.Count} events ({events.Count(e => e.IsFlush)} flushes), {model.Files.Values.Sum(t => t.Fsyncs.Count)} fsyncs");
        return (model, events);
    }

    private static void Keep(string baseImage, IReadOnlyList<DeviceEvent> events, List<DurableWrite> writes, string name, CrashPoint crash)
    {
        if (Environment.GetEnvironmentVariable("XFSWIN_CRASH_KEEP") is not { Length: > 0 } keep) return;
        Directory.CreateDirectory(keep);
        // Rebuilt: the judged copy has been through the kernel's mount.
        string kept = Path.Combine(keep, $"{name}-{crash.Point}-{crash.Subset}-{crash.Seed}{(crash.Torn ? "-torn" : "")}.img");
        File.Delete(kept);
        CrashImage.Build(baseImage, events, writes, kept);
    }

    [Fact]
    public void Every_crash_point_mounts_keeps_fsynced_files_and_repairs_clean()
    {
        string baseImage = CrashWorkloads.MakeBase(_tmp);
        int perWorkload = PointsPerWorkload;
        var failures = new List<string>();
        int judged = 0;
        var total = Stopwatch.StartNew();
        for (int round = 0; round < Rounds; round++)
        for (int w = 0; w < CrashWorkloads.All.Length; w++)
        {
            int seed = WorkloadSeed(w, round);
            string name = CrashWorkloads.All[w].Name + (round == 0 ? "" : $"#{round}");
            var sw = Stopwatch.StartNew();
            var (model, events) = Record(baseImage, w, seed);
            var points = ChoosePoints(events, perWorkload, seed: seed + 1000);
            output.WriteLine($"{name}: {points.Count} distinct points");
            string crashImage = Path.Combine(_tmp, "crash.img");
            foreach (var (crash, writes) in points)
            {
                File.Delete(crashImage);
                CrashImage.Build(baseImage, events, writes, crashImage);
                string? problem = CrashWorkloads.Judge(crashImage, model, events, crash);
                judged++;
                if (problem is null) continue;
                string failure = $"{name} (workload seed {seed}) {crash}: {problem}";
                failures.Add(failure);
                output.WriteLine("FAIL " + failure);
                Keep(baseImage, events, writes, name, crash);
            }
            if (w == 0 && round == 0)
            {
                // The judge must be able to fail: an image that lost the writes the first fsync flushed (a disk that
                // ignored that flush) is wrong about a file the fsync made durable.
                int fsyncEnd = model.Files.Values.SelectMany(t => t.Fsyncs).Min(f => f.Event);
                int before = CrashImage.LastFlushBefore(events, fsyncEnd - 1);
                var lossy = Enumerable.Range(0, fsyncEnd).Where(i => !events[i].IsFlush && (i < before || i > fsyncEnd - 1)).ToList();
                File.Delete(crashImage);
                CrashImage.Build(baseImage, events, lossy, crashImage);
                string? caught = CrashWorkloads.Judge(crashImage, model, events, new CrashPoint(fsyncEnd, CrashSubset.All, 0));
                output.WriteLine($"{name}: control with the first fsync's writes lost: {caught ?? "(nothing found)"}");
                Assert.NotNull(caught);
            }
            output.WriteLine($"{name}: judged in {sw.Elapsed.TotalSeconds:F1} s");
        }
        output.WriteLine($"total: {judged} points, {failures.Count} failures, {total.Elapsed.TotalSeconds:F1} s ({total.Elapsed.TotalSeconds / Math.Max(1, judged):F2} s per point)");
        Assert.True(failures.Count == 0, $"{failures.Count} of {judged} crash points failed:\n" + string.Join('\n', failures.Take(30)));
    }

    /// <summary>
    /// Which writes may tear: log writes, and file data (a write that is not a metadata block). Metadata written back
    /// in place does not tear here: XFS's recovery skips a logged buffer whose on-disk LSN is at least the item's, so a
    /// block whose first sector (with the LSN) reached the disk and whose other sectors did not is left torn by the
    /// kernel itself, whoever wrote it; the format relies on a metadata block write being atomic (see
    /// docs/crash-consistency.md). XFSWIN_CRASH_TEAR=all tears those too, to look at that.
    /// </summary>
    private static Func<DeviceEvent, bool> Tearable(string baseImage)
    {
        var sb = ReadSuperblock(baseImage);
        long logStart = sb.FsbToByte(sb.LogStart), logEnd = logStart + (long)sb.LogBlocks * sb.BlockSize;
        bool all = Environment.GetEnvironmentVariable("XFSWIN_CRASH_TEAR") == "all";
        return e => all || (e.Offset >= logStart && e.Offset < logEnd) || !CrashImage.IsMetadataBlock(e.Data!);
    }

    private static Superblock ReadSuperblock(string image)
    {
        var sector = new byte[512];
        using (var f = File.OpenRead(image)) f.ReadExactly(sector);
        return Superblock.Decode(sector);
    }

    [Fact]
    public void Torn_writes_at_crash_points_are_replayed_by_the_kernel_and_by_xfswin()
    {
        string baseImage = CrashWorkloads.MakeBase(_tmp);
        var tearable = Tearable(baseImage);
        var sb = ReadSuperblock(baseImage);
        long logStart = sb.FsbToByte(sb.LogStart), logEnd = logStart + (long)sb.LogBlocks * sb.BlockSize;
        bool IsLog(DeviceEvent e) => e.Offset >= logStart && e.Offset < logEnd;
        int perWorkload = TornPointsPerWorkload;
        var failures = new List<string>();
        int judged = 0, tornLog = 0, tornData = 0, replayedByUs = 0;
        var total = Stopwatch.StartNew();
        for (int round = 0; round < Rounds; round++)
        for (int w = 0; w < CrashWorkloads.All.Length; w++)
        {
            int seed = WorkloadSeed(w, round);
            string name = CrashWorkloads.All[w].Name + (round == 0 ? "" : $"#{round}");
            var sw = Stopwatch.StartNew();
            var (model, events) = Record(baseImage, w, seed);
            var points = ChooseTornPoints(events, perWorkload, seed: seed + 2000, tearable, IsLog);
            output.WriteLine($"{name}: {points.Count} distinct torn points");
            string kernelImage = Path.Combine(_tmp, "torn-kernel.img"), ourImage = Path.Combine(_tmp, "torn-xfswin.img");
            foreach (var (crash, writes) in points)
            {
                var torn = writes.Where(x => x.IsTorn).ToList();
                if (torn.Any(x => IsLog(events[x.Index]))) tornLog++;
                if (torn.Any(x => !IsLog(events[x.Index]))) tornData++;
                var problems = new List<string>();
                File.Delete(kernelImage);
                CrashImage.Build(baseImage, events, writes, kernelImage);
                if (CrashWorkloads.Judge(kernelImage, model, events, crash) is { } byKernel) problems.Add("kernel's replay: " + byKernel);
                // XfsWin's replay: a read-write open replays the log in place; closed cleanly, the kernel finds a clean log.
                File.Delete(ourImage);
                CrashImage.Build(baseImage, events, writes, ourImage);
                try
                {
                    using var v = XfsVolume.Open(ourImage, new VolumeOpenOptions { Writable = true });
                    if (v.RecoveredAtOpen is not null) replayedByUs++;
                }
                catch (Exception e)
                {
                    problems.Add($"xfswin's read-write open failed: {e.GetType().Name}: {e.Message}");
                }
                if (problems.Count == 0 && CrashWorkloads.Judge(ourImage, model, events, crash) is { } byUs) problems.Add("xfswin's replay: " + byUs);
                judged++;
                if (problems.Count == 0) continue;
                string failure = $"{name} (workload seed {seed}) {crash} torn {string.Join(' ', torn)}: {string.Join("; ", problems)}";
                failures.Add(failure);
                output.WriteLine("FAIL " + failure);
                Keep(baseImage, events, writes, name, crash);
            }
            output.WriteLine($"{name}: judged in {sw.Elapsed.TotalSeconds:F1} s");
        }
        output.WriteLine($"total: {judged} torn points ({tornLog} with a torn log write, {tornData} with another torn write; {replayedByUs} replayed by xfswin), " +
            $"{failures.Count} failures, {total.Elapsed.TotalSeconds:F1} s");
        Assert.True(failures.Count == 0, $"{failures.Count} of {judged} torn crash points failed:\n" + string.Join('\n', failures.Take(30)));
        // Torn log records must be among what was judged, and XfsWin's own recovery must have had logs to replay.
        Assert.True(tornLog > 0, "no judged image held a torn log write");
        Assert.True(replayedByUs > 0, "xfswin's open replayed no log");
    }
}

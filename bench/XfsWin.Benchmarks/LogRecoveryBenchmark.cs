using System.Diagnostics;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Columns;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Reports;
using BenchmarkDotNet.Running;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// In-memory replay of a log Linux left full of metadata work, on a sparse 1 TiB volume with its default
/// 512 MiB log and on a 16 GiB volume with the same log and workload: the time follows the log, not the
/// volume. The "Log MiB/s" column is log bytes between tail and head divided by the mean time.
/// Images are made once by make-log-bench-image.sh (root, loop devices) under $XFSWIN_CACHE/bench.
/// </summary>
[Config(typeof(LogRecoveryConfig))]
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 1, iterationCount: 5)]
public class LogRecoveryBenchmark
{
    public const string LogSize = "512m";

    [Params("16g", "1t")]
    public string VolumeSize { get; set; } = "1t";

    private FileBlockDevice? _device;
    private Superblock? _sb;

    public static string ImagePath(string size)
    {
        string cache = Environment.GetEnvironmentVariable("XFSWIN_CACHE") is { Length: > 0 } c ? c : "/var/cache/xfswin";
        return Path.Combine(cache, "bench", $"log-{size}-{LogSize}.img");
    }

    public static string BytesPath(string size) => ImagePath(size) + ".logbytes";

    [GlobalSetup]
    public void Setup()
    {
        string image = ImagePath(VolumeSize);
        if (!File.Exists(image))
        {
            string script = FindScript();
            using var p = Process.Start("bash", [script, VolumeSize, LogSize, image])!;
            p.WaitForExit();
            if (p.ExitCode != 0) throw new InvalidOperationException($"{script} failed ({p.ExitCode}); it needs root and loop devices");
        }
        _device = FileBlockDevice.Open(image, writable: false);
        var sector = new byte[4096];
        _device.Read(0, sector);
        _sb = Superblock.Decode(sector);
        var result = Replay();
        File.WriteAllText(BytesPath(VolumeSize), result.ToString(System.Globalization.CultureInfo.InvariantCulture));
    }

    /// <summary>The image script, found by walking up from the (generated) benchmark directory to the repository.</summary>
    private static string FindScript()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            string candidate = Path.Combine(dir.FullName, "bench", "XfsWin.Benchmarks", "make-log-bench-image.sh");
            if (File.Exists(candidate)) return candidate;
        }
        throw new FileNotFoundException("bench/XfsWin.Benchmarks/make-log-bench-image.sh not found above " + AppContext.BaseDirectory);
    }

    [GlobalCleanup]
    public void Cleanup() => _device?.Dispose();

    [Benchmark]
    public long Replay()
    {
        var result = LogRecovery.Recover(_device!, null, _sb!, LogReplayMode.Memory);
        if (result.State != LogState.ReplayedInMemory) throw new InvalidOperationException($"log state {result.State}: the benchmark image has no dirty log");
        (result.Device as IDisposable)?.Dispose();
        return result.LogBytesReplayed;
    }
}

public sealed class LogRecoveryConfig : ManualConfig
{
    public LogRecoveryConfig() => AddColumn(new LogThroughputColumn());
}

/// <summary>MiB of log replayed per second of mean time.</summary>
public sealed class LogThroughputColumn : IColumn
{
    public string Id => nameof(LogThroughputColumn);
    public string ColumnName => "Log MiB/s";
    public bool AlwaysShow => true;
    public ColumnCategory Category => ColumnCategory.Custom;
    public int PriorityInCategory => 0;
    public bool IsNumeric => true;
    public UnitType UnitType => UnitType.Dimensionless;
    public string Legend => "MiB of log (tail to head) replayed per second";
    public bool IsAvailable(Summary summary) => true;
    public bool IsDefault(Summary summary, BenchmarkCase benchmarkCase) => false;
    public string GetValue(Summary summary, BenchmarkCase benchmarkCase) => GetValue(summary, benchmarkCase, SummaryStyle.Default);

    public string GetValue(Summary summary, BenchmarkCase benchmarkCase, SummaryStyle style)
    {
        var report = summary[benchmarkCase];
        string size = (string)benchmarkCase.Parameters["VolumeSize"];
        string path = LogRecoveryBenchmark.BytesPath(size);
        if (report?.ResultStatistics is not { } stats || !File.Exists(path)) return "?";
        double bytes = double.Parse(File.ReadAllText(path), System.Globalization.CultureInfo.InvariantCulture);
        double seconds = stats.Mean / 1e9;
        return $"{bytes / (1 << 20) / seconds:F1} (log {bytes / (1 << 20):F1} MiB)";
    }
}

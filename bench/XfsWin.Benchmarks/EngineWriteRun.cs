using System.Diagnostics;
using System.Globalization;
using System.Text;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// The engine's write path once, outside BenchmarkDotNet, with what BenchmarkDotNet does not show: log blocks written
/// per create, and a raw O_DIRECT write of the same size on the same disk in the same run. Also the workload to put
/// under a profiler (<c>perf record</c>). Run: <c>XfsWin.Benchmarks engine-write [files] [MiB]</c>.
/// </summary>
internal static class EngineWriteRun
{
    public static void Run(int files, int mib)
    {
        string dir = "/var/tmp";
        string image = Path.Combine(dir, $"xfswin-engine-run-{Environment.ProcessId}.img");
        string raw = Path.Combine(dir, $"xfswin-engine-raw-{Environment.ProcessId}.img");
        try
        {
            EngineImage.MakeCopy(image, 4L << 30);
            if (files > 0) Creates(image, files);
            if (mib > 0)
            {
                EngineImage.MakeCopy(image, 4L << 30);
                SequentialWrite(image, raw, mib);
            }
        }
        finally
        {
            File.Delete(image);
            File.Delete(raw);
        }
    }

    private static void Creates(string image, int files)
    {
        // XFSWIN_BENCH_DIRS: how many directories the files are spread over (20 by default; 1 makes one large directory).
        int directories = int.TryParse(Environment.GetEnvironmentVariable("XFSWIN_BENCH_DIRS"), out int n) && n > 0 ? n : 20;
        var data = new byte[4096];
        new Random(1).NextBytes(data);
        var names = Enumerable.Range(0, files).Select(i => Encoding.ASCII.GetBytes($"file-{i:D5}")).ToArray();
        using var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        var dirs = Enumerable.Range(0, directories).Select(d => v.MakeDirectory(v.RootInode, Encoding.ASCII.GetBytes($"d{d}"), 0x1ED, 0, 0).Inode).ToArray();
        // A warm-up in a directory of its own (the code jitted and tiered before the timed run).
        ulong warm = v.MakeDirectory(v.RootInode, "warm-up"u8, 0x1ED, 0, 0).Inode;
        for (int i = 0; i < 2000; i++) v.Write(v.CreateNode(warm, Encoding.ASCII.GetBytes($"w{i}"), 0x81A4, 0, 0).Inode, 0, data);
        v.Sync();
        int gen0 = GC.CollectionCount(0), gen1 = GC.CollectionCount(1), gen2 = GC.CollectionCount(2);
        var pause0 = GC.GetTotalPauseDuration();
        long allocated0 = GC.GetTotalAllocatedBytes();
        using var sampler = Environment.GetEnvironmentVariable("XFSWIN_BENCH_ALLOC") == "1" ? new AllocationSampler() : null;
        sampler?.Start();
        var before = v.LogStatistics;
        var cpu0 = Process.GetCurrentProcess().TotalProcessorTime;
        var sw = Stopwatch.StartNew();
        // The slowest create and write, and how many took over a millisecond: a create whose commit had to write a
        // checkpoint itself waits for it.
        long slowest = 0, slow = 0, oneMs = Stopwatch.Frequency / 1000;
        for (int i = 0; i < files; i++)
        {
            long t0 = Stopwatch.GetTimestamp();
            ulong ino = v.CreateNode(dirs[i % directories], names[i], 0x81A4, 0, 0).Inode;
            v.Write(ino, 0, data);
            long took = Stopwatch.GetTimestamp() - t0;
            slowest = Math.Max(slowest, took);
            if (took > oneMs) slow++;
        }
        double slowestMs = slowest * 1000.0 / Stopwatch.Frequency;
        v.Sync();
        double s = sw.Elapsed.TotalSeconds;
        double cpu = (Process.GetCurrentProcess().TotalProcessorTime - cpu0).TotalSeconds;
        var after = v.LogStatistics;
        long logBytes = (after.BlocksWritten - before.BlocksWritten) * 512;
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"creates: {files} x 4 KiB + sync: {s:F3} s, {files / s:F0} creates/s (CPU {cpu:F3} s); log {logBytes} bytes = {logBytes / (double)files:F0} bytes/create in {after.Checkpoints - before.Checkpoints} checkpoint(s), {after.Records - before.Records} records; slowest create {slowestMs:F1} ms, {slow} over 1 ms"));
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  GC: {(GC.GetTotalAllocatedBytes() - allocated0) / files} bytes allocated per create; collections gen0 {GC.CollectionCount(0) - gen0}, gen1 {GC.CollectionCount(1) - gen1}, gen2 {GC.CollectionCount(2) - gen2}; pauses {(GC.GetTotalPauseDuration() - pause0).TotalSeconds:F3} s"));
        sampler?.Print(files);
        sampler?.Reset();

        // The same files unlinked (each one transaction: the name, the inode freed, its block given back), then sync.
        var cpuUnlink0 = Process.GetCurrentProcess().TotalProcessorTime;
        long allocatedUnlink0 = GC.GetTotalAllocatedBytes();
        sw.Restart();
        for (int i = 0; i < files; i++) v.Unlink(dirs[i % directories], names[i]);
        v.Sync();
        double us = sw.Elapsed.TotalSeconds;
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"unlinks: {files} + sync: {us:F3} s, {files / us:F0} unlinks/s (CPU {(Process.GetCurrentProcess().TotalProcessorTime - cpuUnlink0).TotalSeconds:F3} s); {(GC.GetTotalAllocatedBytes() - allocatedUnlink0) / files} bytes allocated per unlink"));
        sampler?.Print(files);
    }

    private static void SequentialWrite(string image, string rawPath, int mib)
    {
        // One sector-aligned 1 MiB buffer for both sides (as a host that receives requests into aligned memory has).
        using var aligned = new AlignedBuffer(1 << 20);
        new Random(2).NextBytes(aligned.Span);
        // Rounds alternate between the engine and the raw device, so that a drift of the disk's speed falls on both.
        const int Rounds = 3;
        var ratios = new double[Rounds];
        for (int round = 0; round < Rounds; round++)
        {
            if (round > 0) EngineImage.MakeCopy(image, 4L << 30);
            double engine;
            using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
            {
                ulong ino = v.CreateNode(v.RootInode, "big"u8, 0x81A4, 0, 0).Inode;
                var sw = Stopwatch.StartNew();
                for (long off = 0; off < (long)mib << 20; off += 1 << 20) v.Write(ino, off, aligned.Span);
                v.Flush(ino);
                engine = sw.Elapsed.TotalSeconds;
            }
            // The raw side writes a new sparse file each round, as the engine writes into a fresh sparse image: both pay
            // the host file system's block allocation.
            File.Delete(rawPath);
            using (var f = File.Create(rawPath)) f.SetLength((long)mib << 20);
            double rawSeconds;
            using (var dev = FileBlockDevice.Open(rawPath, writable: true))
            {
                var sw = Stopwatch.StartNew();
                for (long off = 0; off < (long)mib << 20; off += 1 << 20) dev.Write(off, aligned.Span);
                dev.Flush();
                rawSeconds = sw.Elapsed.TotalSeconds;
            }
            ratios[round] = rawSeconds / engine;
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"sequential write: {mib} MiB in 1 MiB writes + fsync: engine {engine:F3} s ({mib / engine:F0} MiB/s), raw O_DIRECT {rawSeconds:F3} s ({mib / rawSeconds:F0} MiB/s), engine/raw {ratios[round]:F2}x"));
        }
        Array.Sort(ratios);
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"sequential write: median engine/raw {ratios[Rounds / 2]:F2}x"));
    }
}

/// <summary>An empty volume made by mkfs.xfs (defaults) once per size, copied sparse for each run.</summary>
internal static class EngineImage
{
    public static void MakeCopy(string path, long size)
    {
        string baseImage = Path.Combine("/var/tmp", $"xfswin-engine-write-base-{size >> 30}g.img");
        if (!File.Exists(baseImage))
        {
            string tmp = baseImage + $".{Environment.ProcessId}.tmp";
            using (var f = File.Create(tmp)) f.SetLength(size);
            using var mkfs = Process.Start("mkfs.xfs", ["-q", "-f", tmp]);
            mkfs.WaitForExit();
            if (mkfs.ExitCode != 0) throw new InvalidOperationException("mkfs.xfs failed");
            File.Move(tmp, baseImage, overwrite: true);
        }
        using var copy = Process.Start("cp", ["--sparse=always", baseImage, path]);
        copy.WaitForExit();
        if (copy.ExitCode != 0) throw new InvalidOperationException("cp failed");
    }
}

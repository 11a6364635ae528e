using System.Diagnostics;
using System.Globalization;
using System.Text;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// Overwrites of written file data from several threads on one engine volume: each thread owns an 8 MiB file (what the data cache holds before it writes out: the run measures the engine, not the disk) and
/// writes 4 KiB at random block-aligned offsets inside it (timestamps move once per granule, as on Linux; the other
/// writes change only file bytes), then the same with half the threads reading 4 KiB instead. Reports operations per
/// second for one thread and for <c>threads</c> threads, so the scaling shows, and the reads (from the disk) alone and
/// beside the writes, each side timed on its own. Run:
/// <c>XfsWin.Benchmarks engine-overwrite [threads] [operations per thread]</c>.
/// </summary>
internal static class EngineOverwriteRun
{
    private const int FileBytes = 8 << 20;
    private const int IoBytes = 4096;

    public static void Run(int threads, int operations)
    {
        string image = Path.Combine("/var/tmp", $"xfswin-engine-overwrite-{Environment.ProcessId}.img");
        try
        {
            EngineImage.MakeCopy(image, 4L << 30);
            using var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
            var files = new ulong[threads];
            var fill = new byte[1 << 20];
            new Random(3).NextBytes(fill);
            for (int t = 0; t < threads; t++)
            {
                files[t] = v.CreateNode(v.RootInode, Encoding.ASCII.GetBytes($"file-{t}"), 0x81A4, 0, 0).Inode;
                for (int off = 0; off < FileBytes; off += fill.Length) v.Write(files[t], off, fill);
            }
            v.Sync();
            // A warm-up (the code compiled before the timed runs).
            Measure(v, files, 1, 0, Math.Min(operations, 20_000));
            foreach (int n in threads == 1 ? new[] { 1 } : new[] { 1, threads })
            {
                var (writes, _) = Measure(v, files, n, 0, operations);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"overwrites: {n} thread(s) x {operations} x 4 KiB: {writes:F0} writes/s"));
            }
            var (_, alone) = Measure(v, files, 1, 1, operations);
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"reads: 1 thread x {operations / 10} x 4 KiB: {alone:F0} reads/s"));
            if (threads > 1)
            {
                int readers = threads / 2;
                var (writes, reads) = Measure(v, files, threads, readers, operations);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"overwrites beside reads: {threads - readers} writer(s) and {readers} reader(s), 4 KiB each: {writes:F0} writes/s, {reads:F0} reads/s"));
            }
            v.Sync();
        }
        finally
        {
            File.Delete(image);
        }
    }

    /// <summary>
    /// Runs <paramref name="threads"/> threads (the first <paramref name="readers"/> reading, the others writing), each
    /// timed on its own; returns the writes per second (over the writers' time) and the reads per second (the readers').
    /// </summary>
    private static (double Writes, double Reads) Measure(XfsVolume v, ulong[] files, int threads, int readers, int operations)
    {
        using var start = new Barrier(threads);
        var workers = new Thread[threads];
        var rates = new double[threads];
        int readersLeft = readers;
        for (int t = 0; t < threads; t++)
        {
            int index = t;
            workers[t] = new Thread(() =>
            {
                var buffer = new byte[IoBytes];
                var random = new Random(index + 1);
                random.NextBytes(buffer);
                start.SignalAndWait();
                var sw = Stopwatch.StartNew();
                int done = 0;
                // Readers read a tenth as often (reads go to the disk); writers go on until every reader finished.
                if (index < readers)
                {
                    for (; done < operations / 10; done++) v.Read(files[index], (long)random.Next(FileBytes / IoBytes) * IoBytes, buffer);
                    Interlocked.Decrement(ref readersLeft);
                }
                else
                {
                    for (; done < operations || Volatile.Read(ref readersLeft) > 0; done++)
                        v.Write(files[index], (long)random.Next(FileBytes / IoBytes) * IoBytes, buffer);
                }
                rates[index] = done / sw.Elapsed.TotalSeconds;
            });
            workers[t].Start();
        }
        foreach (var w in workers) w.Join();
        double writes = 0, reads = 0;
        for (int t = 0; t < threads; t++)
        {
            if (t < readers) reads += rates[t];
            else writes += rates[t];
        }
        return (writes, reads);
    }
}

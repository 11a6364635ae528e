using System.Diagnostics;
using System.Globalization;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// How long reads of a volume wait while a large file is copied into it: one thread writes a new file sequentially in
/// 1 MiB pieces (each a change: blocks allocated, EOF moved) and then fsyncs it, while another asks for a small file's
/// attributes over and over (a read that only waits for the change lock: what Explorer or `ls` does meanwhile). Prints
/// the copy's rate, its writes' times, and the distribution of the attribute reads' times; then the same copy beside a
/// thread that times a short spin instead (the control: what the machine's scheduling alone costs a thread). Run:
/// <c>XfsWin.Benchmarks engine-copy-latency [MiB]</c> (with <c>DOTNET_TieredCompilation=0</c>).
/// </summary>
internal static class EngineCopyLatencyRun
{
    public static void Run(int mib)
    {
        Run(mib, control: false);
        Run(mib, control: true);
    }

    private static void Run(int mib, bool control)
    {
        string image = Path.Combine("/var/tmp", $"xfswin-engine-copy-{Environment.ProcessId}.img");
        try
        {
            EngineImage.MakeCopy(image, 4L << 30);
            using var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
            var piece = new byte[1 << 20];
            new Random(4).NextBytes(piece);
            ulong small = v.CreateNode(v.RootInode, "small"u8, 0x81A4, 0, 0).Inode;
            v.Write(small, 0, piece.AsSpan(0, 4096));
            // A warm-up copy (the code compiled before the timed one).
            ulong warm = v.CreateNode(v.RootInode, "warm-up"u8, 0x81A4, 0, 0).Inode;
            for (int i = 0; i < 64; i++) v.Write(warm, (long)i << 20, piece);
            v.Flush(warm);
            for (int i = 0; i < 1000; i++) v.GetAttributes(small);

            ulong big = v.CreateNode(v.RootInode, "big"u8, 0x81A4, 0, 0).Inode;
            // Sized for the whole run: growing it would copy megabytes (and collect) inside the measured calls.
            var times = new List<double>(16 << 20);
            int copying = 1;
            var reader = new Thread(() =>
            {
                var sw = new Stopwatch();
                while (Volatile.Read(ref copying) != 0)
                {
                    sw.Restart();
                    if (control) Thread.SpinWait(20);
                    else v.GetAttributes(small);
                    times.Add(sw.Elapsed.TotalMicroseconds);
                }
            });
            reader.Start();
            var pause0 = GC.GetTotalPauseDuration();
            int gen2 = GC.CollectionCount(2);
            var copy = Stopwatch.StartNew();
            var writeTimes = new double[mib];
            var each = new Stopwatch();
            for (int i = 0; i < mib; i++)
            {
                each.Restart();
                v.Write(big, (long)i << 20, piece);
                writeTimes[i] = each.Elapsed.TotalMicroseconds;
            }
            each.Restart();
            v.Flush(big);
            double flushTime = each.Elapsed.TotalMicroseconds;
            double seconds = copy.Elapsed.TotalSeconds;
            Volatile.Write(ref copying, 0);
            reader.Join();
            var pauses = GC.GetTotalPauseDuration() - pause0;
            gen2 = GC.CollectionCount(2) - gen2;
            times.Sort();
            var slowest = writeTimes.Select((t, i) => (t, i)).OrderByDescending(x => x.t).Take(8).ToList();
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"writes: median {writeTimes.Order().ElementAt(mib / 2):F0} us, slowest {string.Join(", ", slowest.Select(x => $"#{x.i} {x.t:F0} us"))}; fsync {flushTime:F0} us"));
            double At(double q) => times[Math.Min(times.Count - 1, (int)(q * times.Count))];
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"copy: {mib} MiB in 1 MiB writes + fsync: {seconds:F3} s ({mib / seconds:F0} MiB/s)"));
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"{(control ? "control (no volume call)" : "attribute reads")} beside it: {times.Count}; median {At(0.5):F1} us, 99% {At(0.99):F1} us, 99.9% {At(0.999):F1} us, longest {times[^1]:F0} us; " +
                $"{times.Count(t => t > 1000)} waited over 1 ms, {times.Where(t => t > 1000).Sum() / 1e6:F3} s in all; GC pauses meanwhile {pauses.TotalMilliseconds:F0} ms ({gen2} gen2)"));
        }
        finally
        {
            File.Delete(image);
        }
    }
}

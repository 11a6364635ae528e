using System.Diagnostics;
using System.Globalization;
using System.Text;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// The lookup benchmark measured in CPU time as well as wall time: on a machine shared with other
/// jobs (load far above the core count) wall time per lookup mostly measures the wait for a core,
/// while the process's CPU time per lookup still shows how lookup cost grows with directory size.
/// Same volume, directories and name draws as <see cref="DirectoryLookupBenchmarks"/>.
/// Run: <c>XfsWin.Benchmarks lookup-cpu [rounds]</c> (bench/run.sh does).
/// </summary>
internal static class LookupCpuTime
{
    private const int Lookups = 100_000;

    public static void Run(int rounds)
    {
        var image = BenchImage.Get();
        using var volume = XfsVolume.Open(image.ImagePath);
        Console.WriteLine($"| Directory | Names | median CPU ns/lookup | median wall ns/lookup | rounds of {Lookups:N0} lookups |");
        Console.WriteLine("|---|---|---:|---:|---:|");
        foreach (var directory in new[] { "d10k", "d100k", "d1m" })
        {
            ulong dir = volume.ResolvePath(image.Value(directory + ".path"));
            Check.That(dir == image.Inode(directory), $"XfsWin resolved /{directory} to another inode than the kernel");
            int entries = (int)image.Long(directory + ".entries");
            foreach (var names in new[] { "all", "30" })
            {
                var random = new Random(12345);
                int[] pool = names == "all" ? [] : Enumerable.Range(0, 30).Select(_ => random.Next(entries)).ToArray();
                var draws = new byte[Lookups][];
                for (int i = 0; i < Lookups; i++)
                    draws[i] = Encoding.UTF8.GetBytes($"f{(pool.Length == 0 ? random.Next(entries) : pool[random.Next(pool.Length)]):D7}");
                LookUpAll(volume, dir, draws); // warm the caches, as BenchmarkDotNet's warm-up does
                var cpu = new double[rounds];
                var wall = new double[rounds];
                using var process = Process.GetCurrentProcess();
                for (int r = 0; r < rounds; r++)
                {
                    process.Refresh();
                    var cpu0 = process.TotalProcessorTime;
                    var sw = Stopwatch.StartNew();
                    LookUpAll(volume, dir, draws);
                    wall[r] = sw.Elapsed.TotalNanoseconds / Lookups;
                    process.Refresh();
                    cpu[r] = (process.TotalProcessorTime - cpu0).TotalNanoseconds / Lookups;
                }
                Array.Sort(cpu);
                Array.Sort(wall);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"| {directory} | {names} | {cpu[rounds / 2]:F0} | {wall[rounds / 2]:F0} | {rounds} |"));
            }
        }
    }

    private static void LookUpAll(XfsVolume volume, ulong dir, byte[][] names)
    {
        foreach (var name in names)
        {
            if (!volume.TryLookup(dir, name, out _))
                throw new InvalidOperationException($"lookup of {Encoding.UTF8.GetString(name)} failed");
        }
    }
}

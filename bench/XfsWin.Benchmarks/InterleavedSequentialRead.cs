using System.Diagnostics;
using System.Globalization;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// The sequential-read ratio measured by alternation: each round reads /seq/big once per method
/// (raw O_DIRECT, XfsVolume.Read, XfsVolume.ReadAsync, raw async), in an order rotated per round, and
/// the ratio of each round is taken against the raw read of the same round. On a shared machine the
/// device's throughput drifts over minutes; BenchmarkDotNet measures one method after the other, so
/// its ratio carries that drift, while here both sides of a ratio are seconds apart.
/// Run: <c>XfsWin.Benchmarks interleaved [rounds]</c> (bench/run.sh does).
/// </summary>
internal static class InterleavedSequentialRead
{
    public static void Run(int rounds)
    {
        var image = BenchImage.Get();
        using var volume = XfsVolume.Open(image.ImagePath);
        using var raw = FileBlockDevice.Open(image.ImagePath);
        ulong inode = volume.ResolvePath(image.Value("big.path"));
        Check.That(inode == image.Inode("big"), "XfsWin resolved /seq/big to another inode than the kernel");
        long size = image.Long("big.size");
        var extents = image.Extents("big");
        Console.WriteLine($"interleaved sequential read of {size >> 20} MiB, {rounds} rounds per buffer size, device {raw.IoMode}");
        foreach (int bufferSize in new[] { 1 << 20, 4 << 20 })
        {
            var buffer = new PinnedAlignedBuffer(bufferSize);
            var methods = new (string Name, Func<Task<long>> Read)[]
            {
                ("raw O_DIRECT pread", () => Task.FromResult(ReadRaw(raw, extents, buffer))),
                ("XfsVolume.Read", () => Task.FromResult(ReadVolume(volume, inode, buffer))),
                ("XfsVolume.ReadAsync", () => ReadVolumeAsync(volume, inode, buffer)),
                ("raw O_DIRECT async", () => ReadRawAsync(raw, extents, buffer)),
            };
            var seconds = new double[methods.Length][];
            for (int m = 0; m < methods.Length; m++) seconds[m] = new double[rounds];
            methods[0].Read().GetAwaiter().GetResult(); // warm-up
            for (int round = 0; round < rounds; round++)
            {
                for (int k = 0; k < methods.Length; k++)
                {
                    int m = (k + round) % methods.Length;
                    var sw = Stopwatch.StartNew();
                    long bytes = methods[m].Read().GetAwaiter().GetResult();
                    seconds[m][round] = sw.Elapsed.TotalSeconds;
                    Check.That(bytes == size, $"{methods[m].Name} read {bytes} bytes");
                }
            }
            Console.WriteLine();
            Console.WriteLine($"buffer {bufferSize >> 20} MiB");
            Console.WriteLine("| Method | median MiB/s | min..max MiB/s | median ratio vs raw (same round) | min..max ratio |");
            Console.WriteLine("|---|---:|---:|---:|---:|");
            for (int m = 0; m < methods.Length; m++)
            {
                var mibs = seconds[m].Select(s => (size >> 20) / s).ToArray();
                var ratios = Enumerable.Range(0, rounds).Select(r => seconds[0][r] / seconds[m][r]).ToArray();
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"| {methods[m].Name} | {Median(mibs):F0} | {mibs.Min():F0}..{mibs.Max():F0} | {Median(ratios):F2} | {ratios.Min():F2}..{ratios.Max():F2} |"));
            }
        }
    }

    private static double Median(double[] values)
    {
        var sorted = values.Order().ToArray();
        int n = sorted.Length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    private static long ReadRaw(FileBlockDevice raw, IReadOnlyList<KernelExtent> extents, PinnedAlignedBuffer buffer) =>
        RawExtentReader.Read(raw, extents, buffer.Span);

    private static Task<long> ReadRawAsync(FileBlockDevice raw, IReadOnlyList<KernelExtent> extents, PinnedAlignedBuffer buffer) =>
        RawExtentReader.ReadAsync(raw, extents, buffer.Memory);

    private static long ReadVolume(XfsVolume volume, ulong inode, PinnedAlignedBuffer buffer)
    {
        long offset = 0;
        int n;
        while ((n = volume.Read(inode, offset, buffer.Span)) > 0) offset += n;
        return offset;
    }

    private static async Task<long> ReadVolumeAsync(XfsVolume volume, ulong inode, PinnedAlignedBuffer buffer)
    {
        long offset = 0;
        int n;
        while ((n = await volume.ReadAsync(inode, offset, buffer.Memory).ConfigureAwait(false)) > 0) offset += n;
        return offset;
    }
}

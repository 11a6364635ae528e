using System.Diagnostics;
using System.Globalization;
using System.Text;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// What a write that maps blocks costs on the calling thread: files filled in writes of 4 KiB, 64 KiB and 1 MiB in
/// three ways a file copy writes: appended (each write past the end), into a file whose size was set first (each
/// write fills holes inside it: a copy that sets the end of file first), and into a file preallocated first
/// (fallocate keeping the size, as Windows' allocation size: each write converts unwritten blocks). Reports the time
/// per write and the bytes the calling thread allocated per write (<see cref="GC.GetAllocatedBytesForCurrentThread"/>; the log's writer thread is not
/// counted: its work is per checkpoint, not per call). With XFSWIN_BENCH_ALLOC=1 the runtime's allocation samples name
/// the types. Run: <c>XfsWin.Benchmarks engine-append [MiB per size]</c>.
/// </summary>
internal static class EngineAppendRun
{
    public static void Run(int mibPerSize)
    {
        string image = Path.Combine("/var/tmp", $"xfswin-engine-append-{Environment.ProcessId}.img");
        try
        {
            EngineImage.MakeCopy(image, 4L << 30);
            using var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
            // A warm-up file (the code compiled before the timed runs).
            foreach (var way in new[] { Fill.Append, Fill.SizedFirst, Fill.PreallocatedFirst }) Write(v, $"warm-up-{way}", way, 65536, 64L << 20);
            using var sampler = Environment.GetEnvironmentVariable("XFSWIN_BENCH_ALLOC") == "1" ? new AllocationSampler() : null;
            foreach (var way in new[] { Fill.Append, Fill.SizedFirst, Fill.PreallocatedFirst })
            foreach (int size in new[] { 4096, 65536, 1 << 20 })
            {
                sampler?.Reset();
                sampler?.Start();
                var (writes, seconds, allocated) = Write(v, $"{way}-{size}", way, size, (long)mibPerSize << 20);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"{way} in {size / 1024} KiB writes: {writes} writes, {seconds * 1e6 / writes:F2} us/write, {allocated / (double)writes:F1} B allocated per write"));
                sampler?.Print(writes);
            }
        }
        finally
        {
            File.Delete(image);
        }
    }

    private enum Fill { Append, SizedFirst, PreallocatedFirst }

    private static (int Writes, double Seconds, long Allocated) Write(XfsVolume v, string name, Fill way, int size, long total)
    {
        ulong ino = v.CreateNode(v.RootInode, Encoding.ASCII.GetBytes(name), 0x81A4, 0, 0).Inode;
        if (way == Fill.SizedFirst) v.SetAttributes(ino, new AttributeChanges { Size = total });
        if (way == Fill.PreallocatedFirst) v.Allocate(ino, 0, total, FallocateMode.KeepSize);
        var data = new byte[size];
        new Random(size).NextBytes(data);
        int writes = (int)(total / size);
        long allocated0 = GC.GetAllocatedBytesForCurrentThread();
        var sw = Stopwatch.StartNew();
        for (int i = 0; i < writes; i++) v.Write(ino, (long)i * size, data);
        double seconds = sw.Elapsed.TotalSeconds;
        long allocated = GC.GetAllocatedBytesForCurrentThread() - allocated0;
        v.CloseFile(ino, writable: true);
        v.Sync();
        return (writes, seconds, allocated);
    }
}

using System.Text;
using BenchmarkDotNet.Attributes;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// The write engine alone (no FUSE): creates of 4 KiB files, and a sequential write of 1 GiB plus fsync next to a raw
/// O_DIRECT write of the same size to a new file on the same disk (the baseline). The engine runs on a fresh copy of an
/// empty volume made by mkfs.xfs (defaults, 4 GiB sparse image, cached under /var/tmp); the raw write goes to a new
/// sparse file, so that both pay the host file system's block allocation. The unmount (writeback of everything
/// logged) is outside the timing, as for the kernel's own numbers in bench/write-vs-kernel.sh. Both writes come from
/// one sector-aligned buffer. Needs xfsprogs. `XfsWin.Benchmarks engine-write` runs the same workloads once with log
/// traffic per create and alternating rounds.
/// </summary>
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 1, iterationCount: 5, invocationCount: 1)]
public class EngineWriteBenchmarks
{
    private const int Files = 20_000;
    private const int Directories = 20;
    private const long SequentialBytes = 1L << 30;
    private string _image = "";
    private string _raw = "";
    private XfsVolume? _volume;
    private readonly byte[] _file = new byte[4096];
    private AlignedBuffer? _chunk;
    private ulong[] _dirs = [];
    private readonly byte[][] _names = Enumerable.Range(0, Files).Select(i => Encoding.ASCII.GetBytes($"file-{i:D5}")).ToArray();

    [GlobalSetup]
    public void Setup()
    {
        _chunk = new AlignedBuffer(1 << 20);
        new Random(2).NextBytes(_chunk.Span);
        new Random(1).NextBytes(_file);
    }

    [GlobalCleanup]
    public void Cleanup() => _chunk?.Dispose();

    [IterationSetup(Targets = [nameof(Create4KiBFiles), nameof(SequentialWrite1GiB)])]
    public void Fresh()
    {
        _image = Path.Combine("/var/tmp", $"xfswin-engine-write-{Environment.ProcessId}.img");
        EngineImage.MakeCopy(_image, 4L << 30);
        _volume = XfsVolume.Open(_image, new VolumeOpenOptions { Writable = true });
        _dirs = Enumerable.Range(0, Directories).Select(d => _volume.MakeDirectory(_volume.RootInode, Encoding.ASCII.GetBytes($"d{d}"), 0x1ED, 0, 0).Inode).ToArray();
        _volume.Sync();
    }

    [IterationCleanup(Targets = [nameof(Create4KiBFiles), nameof(SequentialWrite1GiB)])]
    public void Unmount()
    {
        _volume?.Dispose();
        File.Delete(_image);
    }

    [IterationSetup(Target = nameof(RawWrite1GiB))]
    public void FreshRaw()
    {
        _raw = Path.Combine("/var/tmp", $"xfswin-engine-raw-{Environment.ProcessId}.img");
        File.Delete(_raw);
        using var f = File.Create(_raw);
        f.SetLength(SequentialBytes);
    }

    [IterationCleanup(Target = nameof(RawWrite1GiB))]
    public void DeleteRaw() => File.Delete(_raw);

    /// <summary>20,000 creates of a 4 KiB file across 20 directories, then sync (operations: files).</summary>
    [Benchmark(OperationsPerInvoke = Files)]
    public void Create4KiBFiles()
    {
        var v = _volume!;
        for (int i = 0; i < Files; i++)
        {
            ulong ino = v.CreateNode(_dirs[i % Directories], _names[i], 0x81A4, 0, 0).Inode;
            v.Write(ino, 0, _file);
        }
        v.Sync();
    }

    /// <summary>1 GiB written in 1 MiB pieces to one new file, then fsync.</summary>
    [Benchmark]
    public void SequentialWrite1GiB()
    {
        var v = _volume!;
        ulong ino = v.CreateNode(_dirs[0], "big"u8, 0x81A4, 0, 0).Inode;
        for (long off = 0; off < SequentialBytes; off += 1 << 20) v.Write(ino, off, _chunk!.Span);
        v.Flush(ino);
    }

    /// <summary>The baseline: 1 GiB in 1 MiB O_DIRECT writes to a new file on the same disk, then fsync.</summary>
    [Benchmark]
    public void RawWrite1GiB()
    {
        using var dev = FileBlockDevice.Open(_raw, writable: true);
        for (long off = 0; off < SequentialBytes; off += 1 << 20) dev.Write(off, _chunk!.Span);
        dev.Flush();
    }
}

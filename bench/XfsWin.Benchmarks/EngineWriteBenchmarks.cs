using System.Diagnostics;
using System.Text;
using BenchmarkDotNet.Attributes;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// The write engine alone (no FUSE): creates of 4 KiB files and a sequential write of 256 MiB plus a log force,
/// each on a fresh copy of an empty volume made by mkfs.xfs (defaults, 2 GiB sparse image, cached under
/// /var/tmp). The unmount (writeback of everything logged) is outside the timing, as for the kernel's own numbers
/// in bench/write-vs-kernel.sh. Needs xfsprogs.
/// </summary>
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 1, iterationCount: 5, invocationCount: 1)]
public class EngineWriteBenchmarks
{
    private const int Files = 20_000;
    private const int Directories = 20;
    private static readonly string Base = Path.Combine("/var/tmp", "xfswin-engine-write-base.img");
    private string _image = "";
    private XfsVolume? _volume;
    private readonly byte[] _file = new byte[4096];
    private readonly byte[] _chunk = new byte[1 << 20];
    private ulong[] _dirs = [];
    private readonly byte[][] _names = Enumerable.Range(0, Files).Select(i => Encoding.ASCII.GetBytes($"file-{i:D5}")).ToArray();

    [GlobalSetup]
    public void MakeBase()
    {
        if (File.Exists(Base)) return;
        string tmp = Base + ".tmp";
        using (var f = File.Create(tmp)) f.SetLength(2L << 30);
        using var mkfs = Process.Start("mkfs.xfs", ["-q", "-f", tmp]);
        mkfs.WaitForExit();
        if (mkfs.ExitCode != 0) throw new InvalidOperationException("mkfs.xfs failed");
        File.Move(tmp, Base);
    }

    [IterationSetup]
    public void Fresh()
    {
        _image = Path.Combine("/var/tmp", $"xfswin-engine-write-{Environment.ProcessId}.img");
        using (var copy = Process.Start("cp", ["--sparse=always", Base, _image])) copy.WaitForExit();
        _volume = XfsVolume.Open(_image, new VolumeOpenOptions { Writable = true });
        _dirs = Enumerable.Range(0, Directories).Select(d => _volume.MakeDirectory(_volume.RootInode, Encoding.ASCII.GetBytes($"d{d}"), 0x1ED, 0, 0).Inode).ToArray();
        new Random(1).NextBytes(_file);
        new Random(2).NextBytes(_chunk);
    }

    [IterationCleanup]
    public void Unmount()
    {
        _volume?.Dispose();
        File.Delete(_image);
    }

    /// <summary>20,000 creates of a 4 KiB file across 20 directories, then a log force (operations: files).</summary>
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

    /// <summary>256 MiB written in 1 MiB pieces to one new file, then a log force.</summary>
    [Benchmark]
    public void SequentialWrite256MiB()
    {
        var v = _volume!;
        ulong ino = v.CreateNode(_dirs[0], "big"u8, 0x81A4, 0, 0).Inode;
        for (long off = 0; off < 256L << 20; off += _chunk.Length) v.Write(ino, off, _chunk);
        v.Flush(ino);
    }
}

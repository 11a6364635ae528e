using BenchmarkDotNet.Attributes;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// Whole-file sequential read of /ext/frag (10,000 one-block extents, so its extent map is a bmbt)
/// against /ext/contig (same size, one extent), through XfsVolume.Read with a 1 MiB buffer; and
/// the raw O_DIRECT reads of the same extents for each, from the kernel's extent lists.
/// </summary>
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 2, iterationCount: 5)]
public class ExtentBenchmarks
{
    private const int BufferSize = 1 << 20;
    private XfsVolume _volume = null!;
    private FileBlockDevice _raw = null!;
    private PinnedAlignedBuffer _buffer = null!;
    private ulong _frag, _contig;
    private long _size;
    private IReadOnlyList<KernelExtent> _fragExtents = null!, _contigExtents = null!;

    [GlobalSetup]
    public void Setup()
    {
        var image = BenchImage.Get();
        _volume = XfsVolume.Open(image.ImagePath);
        _raw = FileBlockDevice.Open(image.ImagePath);
        _buffer = new PinnedAlignedBuffer(BufferSize);
        _frag = _volume.ResolvePath(image.Value("frag.path"));
        _contig = _volume.ResolvePath(image.Value("contig.path"));
        Check.That(_frag == image.Inode("frag") && _contig == image.Inode("contig"), "XfsWin resolved other inodes than the kernel");
        _size = image.Long("frag.size");
        Check.That(_size == image.Long("contig.size"), "the two files differ in size");
        _fragExtents = image.Extents("frag");
        _contigExtents = image.Extents("contig");
        var attributes = _volume.GetAttributes(_frag);
        Check.That(attributes.DataExtentCount == (ulong)_fragExtents.Count, $"XfsWin counts {attributes.DataExtentCount} extents, the kernel {_fragExtents.Count}");
        // Whole-file content check against the kernel's extent list.
        foreach (var (ino, extents) in new[] { (_frag, _fragExtents), (_contig, _contigExtents) })
        {
            var expected = new byte[_size];
            foreach (var e in extents) _raw.Read(e.ImageOffset, expected.AsSpan((int)e.FileOffset, (int)e.Length));
            var actual = new byte[_size];
            for (long at = 0; at < _size;) at += _volume.Read(ino, at, actual.AsSpan((int)at));
            Check.That(actual.AsSpan().SequenceEqual(expected), $"XfsWin read different bytes from inode {ino}");
        }
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _volume.Dispose();
        _raw.Dispose();
    }

    [Benchmark(Baseline = true, Description = "XfsWin contiguous (1 extent)")]
    public long Contiguous() => ReadWhole(_contig);

    [Benchmark(Description = "XfsWin fragmented (10k extents)")]
    public long Fragmented() => ReadWhole(_frag);

    [Benchmark(Description = "raw O_DIRECT contiguous")]
    public long RawContiguous() => ReadRaw(_contigExtents);

    [Benchmark(Description = "raw O_DIRECT fragmented")]
    public long RawFragmented() => ReadRaw(_fragExtents);

    private long ReadWhole(ulong inode)
    {
        var span = _buffer.Span;
        long offset = 0;
        int n;
        while ((n = _volume.Read(inode, offset, span)) > 0) offset += n;
        if (offset != _size) throw new InvalidOperationException($"read {offset} bytes, expected {_size}");
        return offset;
    }

    /// <summary>Reads the extents in file order, filling the 1 MiB buffer as XfsVolume.Read does.</summary>
    private long ReadRaw(IReadOnlyList<KernelExtent> extents) => RawExtentReader.Read(_raw, extents, _buffer.Span);
}

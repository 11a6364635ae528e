using BenchmarkDotNet.Attributes;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// Sequential read of the 1 GiB file /seq/big: XfsWin (XfsVolume.Read / ReadAsync into an aligned
/// buffer) against raw O_DIRECT reads of the same image byte ranges, taken from the kernel's own
/// extent list (xfs_bmap). Same buffer, same device class (FileBlockDevice), same run: the ratio is
/// what the engine costs on top of the device. Goal: XfsWin at least 0.9x the raw throughput.
/// Ten iterations: on a shared machine the device's throughput drifts between runs far more than
/// the engine's overhead, so the ratio needs more samples than the other classes.
/// </summary>
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 2, iterationCount: 10)]
public class SequentialReadBenchmarks
{
    private XfsVolume _volume = null!;
    private FileBlockDevice _raw = null!;
    private PinnedAlignedBuffer _buffer = null!;
    private IReadOnlyList<KernelExtent> _extents = null!;
    private ulong _inode;
    private long _size;

    [Params(1 << 20, 4 << 20)]
    public int BufferSize { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        var image = BenchImage.Get();
        _volume = XfsVolume.Open(image.ImagePath);
        _raw = FileBlockDevice.Open(image.ImagePath);
        Check.That(_raw.IoMode.Contains("O_DIRECT", StringComparison.Ordinal), $"raw device is not O_DIRECT: {_raw.IoMode}");
        Check.That(_volume.Info.IoMode.Contains("O_DIRECT", StringComparison.Ordinal), $"volume device is not O_DIRECT: {_volume.Info.IoMode}");
        _buffer = new PinnedAlignedBuffer(BufferSize);
        _inode = _volume.ResolvePath(image.Value("big.path"));
        _size = image.Long("big.size");
        _extents = image.Extents("big");
        Check.That(_inode == image.Inode("big"), $"XfsWin resolved /seq/big to inode {_inode}, the kernel says {image.Inode("big")}");
        Check.That(_volume.GetAttributes(_inode).Size == _size, "size differs from the kernel's");
        Check.That(_extents.Sum(e => e.Length) == _size, "kernel extents do not cover the file");
        // XfsWin must return the bytes the kernel placed at those extents (first, middle, last buffer).
        var expected = new byte[BufferSize];
        foreach (long at in new[] { 0L, _size / 2 & ~4095L, _size - BufferSize })
        {
            var e = _extents.Single(x => x.FileOffset <= at && at < x.FileOffset + x.Length);
            Check.That(at + BufferSize <= e.FileOffset + e.Length, "check window crosses an extent boundary");
            _raw.Read(e.ImageOffset + (at - e.FileOffset), expected);
            Check.That(_volume.Read(_inode, at, _buffer.Span) == BufferSize, "short read");
            Check.That(_buffer.Span.SequenceEqual(expected), $"XfsWin read different bytes at file offset {at}");
        }
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _volume.Dispose();
        _raw.Dispose();
    }

    [Benchmark(Baseline = true, Description = "raw O_DIRECT pread (kernel extents)")]
    public long RawODirect() => RawExtentReader.Read(_raw, _extents, _buffer.Span);

    [Benchmark(Description = "raw O_DIRECT async")]
    public Task<long> RawODirectAsync() => RawExtentReader.ReadAsync(_raw, _extents, _buffer.Memory);

    [Benchmark(Description = "XfsVolume.Read")]
    public long XfsWinRead()
    {
        var span = _buffer.Span;
        long offset = 0;
        int n;
        while ((n = _volume.Read(_inode, offset, span)) > 0) offset += n;
        if (offset != _size) throw new InvalidOperationException($"read {offset} bytes, expected {_size}");
        return offset;
    }

    [Benchmark(Description = "XfsVolume.ReadAsync")]
    public async Task<long> XfsWinReadAsync()
    {
        var memory = _buffer.Memory;
        long offset = 0;
        int n;
        while ((n = await _volume.ReadAsync(_inode, offset, memory).ConfigureAwait(false)) > 0) offset += n;
        if (offset != _size) throw new InvalidOperationException($"read {offset} bytes, expected {_size}");
        return offset;
    }
}

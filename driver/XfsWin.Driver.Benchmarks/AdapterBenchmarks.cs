using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Jobs;
using BenchmarkDotNet.Toolchains.InProcess.Emit;
using XfsWin.Driver.Semantics;
using XfsWin.Volume;

namespace XfsWin.Driver.Benchmarks;

/// <summary>
/// The adapter's hot paths as WinFsp drives them, on the driver tests' kernel-filled image: reads into
/// an unmanaged buffer, a full listing of a 100,000-entry directory resumed from markers through a
/// 64 KiB buffer (WinFsp's usual query size), and GetFileInfo. Steady state should not allocate.
/// Run: dotnet run -c Release --project driver/XfsWin.Driver.Benchmarks -- --filter '*' (as root: the image is made by a loop mount).
/// </summary>
[MemoryDiagnoser]
[Config(typeof(Config))]
public unsafe class AdapterBenchmarks
{
    private sealed class Config : ManualConfig
    {
        public Config() => AddJob(Job.ShortRun.WithToolchain(InProcessEmitToolchain.Instance));
    }

    private XfsVolume _volume = null!;
    private XfsWindowsFileSystem _fs = null!;
    private OpenFile _pattern = null!, _hello = null!, _big = null!, _names = null!;
    private byte* _readBuffer;
    private byte* _dirBuffer;
    private const int DirBufferSize = 64 * 1024;
    private long _patternSize;
    private ulong _offset;

    [GlobalSetup]
    public void Setup()
    {
        _volume = XfsVolume.Open(BenchmarkImage.Path());
        var options = new MountOptions();
        _fs = new XfsWindowsFileSystem(_volume, options, options.CreateIdentityMap(Sid.Parse("S-1-5-21-1-2-3-1001")), "X:");
        _pattern = Open(@"\pattern.bin");
        _hello = Open(@"\hello.txt");
        _big = Open(@"\big");
        _names = Open(@"\names");
        _patternSize = _pattern.Attributes.Size;
        _readBuffer = (byte*)NativeMemory.AlignedAlloc(1 << 20, 4096);
        _dirBuffer = (byte*)NativeMemory.AlignedAlloc(DirBufferSize, 4096);
    }

    private OpenFile Open(string path)
    {
        int status = _fs.Open(path, 0, 0, out var file, out _);
        return status == NtStatus.Success ? file! : throw new InvalidOperationException($"{path}: {NtStatus.Describe(status)}");
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        NativeMemory.AlignedFree(_readBuffer);
        NativeMemory.AlignedFree(_dirBuffer);
        _volume.Dispose();
    }

    private int ReadAt(int length)
    {
        if (_offset + (ulong)length > (ulong)_patternSize) _offset = 0;
        int status = _fs.Read(_pattern, new Span<byte>(_readBuffer, length), _offset, out int n);
        if (status != NtStatus.Success) throw new InvalidOperationException(NtStatus.Describe(status));
        _offset += (ulong)n;
        return n;
    }

    [Benchmark(Description = "Read 64 KiB into an unmanaged buffer")]
    public int Read64K() => ReadAt(64 * 1024);

    [Benchmark(Description = "Read 1 MiB into an unmanaged buffer")]
    public int Read1M() => ReadAt(1 << 20);

    [Benchmark(Description = "GetFileInfo")]
    public ulong GetFileInfo()
    {
        _fs.GetFileInfo(_hello, out var info);
        return info.IndexNumber;
    }

    /// <summary>Packs into the unmanaged query buffer the way FspFileSystemAddDirInfo does.</summary>
    private struct BufferSink(byte* buffer, int length) : IDirInfoSink
    {
        public int Used;
        public int Count;
        public ulong LastOffset;
        public bool Ended;

        public bool Add(in FileInformation info, ReadOnlySpan<char> name, ulong nextOffset)
        {
            Span<byte> record = stackalloc byte[DirInfoLayout.MaxEntrySize];
            DirInfoLayout.Write(record, info, name, nextOffset);
            if (!DirInfoLayout.Append(record, new Span<byte>(buffer, length), ref Used)) return false;
            Count++;
            LastOffset = nextOffset;
            return true;
        }

        public void End() => Ended = DirInfoLayout.AppendEnd(new Span<byte>(buffer, length), ref Used);
    }

    [Benchmark(Description = "List 100,000 entries, 64 KiB batches resumed by offset markers")]
    public int ListHugeDirectory()
    {
        int total = 0;
        ulong marker = 0;
        bool first = true;
        while (true)
        {
            var sink = new BufferSink(_dirBuffer, DirBufferSize);
            var resume = first ? DirectoryMarker.None : new DirectoryMarker(marker);
            int status = _fs.ReadDirectory(_big, resume, ref sink);
            if (status != NtStatus.Success) throw new InvalidOperationException(NtStatus.Describe(status));
            total += sink.Count;
            if (sink.Ended) return total;
            marker = sink.LastOffset;
            first = false;
        }
    }

    [Benchmark(Description = "List a 16-entry directory (inodes cached)")]
    public int ListSmallDirectory()
    {
        var sink = new BufferSink(_dirBuffer, DirBufferSize);
        int status = _fs.ReadDirectory(_names, DirectoryMarker.None, ref sink);
        return status == NtStatus.Success ? sink.Count : throw new InvalidOperationException(NtStatus.Describe(status));
    }

    [Benchmark(Description = "Name mapping: encode + decode a 40-byte UTF-8 name")]
    public int NameRoundTrip()
    {
        Span<char> w = stackalloc char[WindowsNames.MaxWindowsNameChars];
        Span<byte> b = stackalloc byte[WindowsNames.MaxXfsNameBytes];
        int n = WindowsNames.Encode("report-2026-11-22 (final) é draft.txt"u8, w);
        return WindowsNames.Decode(w[..n], b);
    }
}

/// <summary>Finds (or makes, as root) the driver tests' image in the shared test cache.</summary>
internal static class BenchmarkImage
{
    public static string Path()
    {
        if (Environment.GetEnvironmentVariable("XFSWIN_BENCH_IMAGE") is { Length: > 0 } given) return given;
        string script = System.IO.Path.Combine(AppContext.BaseDirectory, "Images", "make-driver-image.sh");
        string hash = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(script)))[..16].ToLowerInvariant();
        string cacheRoot = Environment.GetEnvironmentVariable("XFSWIN_TEST_CACHE") is { Length: > 0 } c ? c : "/tmp/xfswin-test-cache";
        string dir = System.IO.Path.Combine(cacheRoot, $"driver-{hash}");
        string image = System.IO.Path.Combine(dir, "volume.img"), manifest = System.IO.Path.Combine(dir, "manifest.json");
        if (File.Exists(manifest)) return image;
        Directory.CreateDirectory(dir);
        using var p = Process.Start(new ProcessStartInfo("bash", [script, image + ".tmp", manifest + ".tmp"]))!;
        p.WaitForExit();
        if (p.ExitCode != 0) throw new InvalidOperationException("make-driver-image.sh failed: the benchmark needs root, loop devices and the kernel's XFS driver (or set XFSWIN_BENCH_IMAGE).");
        File.Move(image + ".tmp", image, true);
        File.Move(manifest + ".tmp", manifest, true);
        return image;
    }
}

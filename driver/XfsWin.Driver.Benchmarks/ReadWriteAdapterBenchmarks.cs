using System.Diagnostics;
using System.Runtime.InteropServices;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Jobs;
using BenchmarkDotNet.Toolchains.InProcess.Emit;
using XfsWin.Driver.Semantics;
using XfsWin.Volume;

namespace XfsWin.Driver.Benchmarks;

/// <summary>
/// The adapter on a read-write mount, called as WinFsp calls it, on a fresh volume made by mkfs.xfs in a scratch
/// image: writes over existing data (WinFsp hands at most 64 KiB per call unless the program writes more at once),
/// appends (write to end of file, as a copy writes), reads, GetFileInfo, a create closed with delete-on-close, and a
/// small listing. Allocation per call is what <see cref="MemoryDiagnoserAttribute"/> reports: nothing on the read and
/// write paths, the adapter's share and the engine's (a write that changes the inode reuses the volume's working
/// objects and the journal's spent items).
/// Run: dotnet run -c Release --project driver/XfsWin.Driver.Benchmarks -- --filter '*ReadWrite*'
/// (mkfs.xfs needed; the scratch image goes to XFSWIN_BENCH_SCRATCH or /var/tmp).
/// </summary>
[MemoryDiagnoser]
[Config(typeof(Config))]
public unsafe class ReadWriteAdapterBenchmarks
{
    private sealed class Config : ManualConfig
    {
        public Config() => AddJob(Job.ShortRun.WithToolchain(InProcessEmitToolchain.Instance));
    }

    private const int FileBytes = 64 << 20;
    private string _dir = null!;
    private XfsVolume _volume = null!;
    private XfsWindowsFileSystem _fs = null!;
    private OpenFile _data = null!, _small = null!, _append = null!;
    private byte* _buffer;
    private ulong _writeOffset, _readOffset;

    [GlobalSetup]
    public void Setup()
    {
        var root = Environment.GetEnvironmentVariable("XFSWIN_BENCH_SCRATCH") is { Length: > 0 } s ? s : "/var/tmp";
        _dir = Directory.CreateDirectory(Path.Combine(root, "xfswin-bench-rw." + Guid.NewGuid().ToString("N"))).FullName;
        string image = Path.Combine(_dir, "rw.img");
        using (var f = File.Create(image)) f.SetLength(2L << 30);
        Run("mkfs.xfs", "-q", "-f", "-L", "BENCHRW", image);
        _volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        var options = new MountOptions { ReadWrite = true };
        _fs = new XfsWindowsFileSystem(_volume, options, options.CreateIdentityMap(Sid.Parse("S-1-5-21-1-2-3-1001")), "X:");
        _buffer = (byte*)NativeMemory.AlignedAlloc(1 << 20, 4096);
        new Span<byte>(_buffer, 1 << 20).Fill(0x5A);

        _data = Create(@"\data.bin", directory: false);
        for (ulong at = 0; at < FileBytes; at += 1 << 20) Check(_fs.Write(_data, new ReadOnlySpan<byte>(_buffer, 1 << 20), at, false, false, out _, out _));
        var dir = Create(@"\small", directory: true);
        Close(dir);
        for (int i = 0; i < 16; i++) Close(Create($@"\small\entry-{i:D2}.txt", directory: false));
        _small = Open(@"\small");
        _append = Create(@"\append.bin", directory: false);
        Check(_fs.Flush(null, out _));
    }

    private static void Run(string tool, params string[] args)
    {
        using var p = Process.Start(new ProcessStartInfo(tool, args) { RedirectStandardError = true })!;
        string err = p.StandardError.ReadToEnd();
        p.WaitForExit();
        if (p.ExitCode != 0) throw new InvalidOperationException($"{tool} failed: {err}");
    }

    private static void Check(int status)
    {
        if (status != NtStatus.Success) throw new InvalidOperationException(NtStatus.Describe(status));
    }

    private OpenFile Create(string path, bool directory)
    {
        Check(_fs.Create(path, directory ? XfsWindowsFileSystem.FileDirectoryFile : 0, 0, 0, default, 0, default, out var file, out _));
        return file!;
    }

    private OpenFile Open(string path)
    {
        Check(_fs.Open(path, 0, 0, out var file, out _));
        return file!;
    }

    private void Close(OpenFile file, bool delete = false)
    {
        _fs.Cleanup(file, file.Path, delete ? XfsWindowsFileSystem.CleanupDelete : 0);
        _fs.Close(file);
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        Close(_data);
        Close(_small);
        Close(_append);
        _volume.Dispose();
        NativeMemory.AlignedFree(_buffer);
        Directory.Delete(_dir, recursive: true);
    }

    private int WriteAt(int length)
    {
        if (_writeOffset + (ulong)length > FileBytes) _writeOffset = 0;
        Check(_fs.Write(_data, new ReadOnlySpan<byte>(_buffer, length), _writeOffset, false, false, out int n, out _));
        _writeOffset += (ulong)n;
        return n;
    }

    [Benchmark(Description = "RW: write 4 KiB over existing data")]
    public int Write4K() => WriteAt(4 * 1024);

    [Benchmark(Description = "RW: write 64 KiB over existing data")]
    public int Write64K() => WriteAt(64 * 1024);

    [Benchmark(Description = "RW: write 1 MiB over existing data")]
    public int Write1M() => WriteAt(1 << 20);

    /// <summary>Where appends start over (the file cut back to nothing): 256 MiB, so a cut is one call in 4,096.</summary>
    private const long AppendLimit = 256L << 20;
    private long _appended;

    [Benchmark(Description = "RW: append 64 KiB (write to end of file)")]
    public int Append64K()
    {
        if (_appended >= AppendLimit)
        {
            Check(_fs.SetFileSize(_append, 0, false, out _));
            _appended = 0;
        }
        Check(_fs.Write(_append, new ReadOnlySpan<byte>(_buffer, 64 * 1024), 0, true, false, out int n, out _));
        _appended += n;
        return n;
    }

    [Benchmark(Description = "RW: read 64 KiB")]
    public int Read64K()
    {
        if (_readOffset + 65536 > FileBytes) _readOffset = 0;
        Check(_fs.Read(_data, new Span<byte>(_buffer, 65536), _readOffset, out int n));
        _readOffset += (ulong)n;
        return n;
    }

    [Benchmark(Description = "RW: GetFileInfo (the inode's current attributes)")]
    public ulong GetFileInfo()
    {
        Check(_fs.GetFileInfo(_data, out var info));
        return info.FileSize;
    }

    [Benchmark(Description = "RW: create an empty file, close it with delete-on-close")]
    public ulong CreateAndDelete()
    {
        var file = Create(@"\small\created.tmp", directory: false);
        ulong inode = file.Inode;
        Check(_fs.SetDelete(file, file.Path, true));
        Close(file, delete: true);
        return inode;
    }

    /// <summary>Packs into the unmanaged buffer the way FspFileSystemAddDirInfo does.</summary>
    private struct BufferSink(byte* buffer, int length) : IDirInfoSink
    {
        public int Used;
        public int Count;

        public bool Add(in FileInformation info, ReadOnlySpan<char> name, ulong nextOffset)
        {
            Span<byte> record = stackalloc byte[DirInfoLayout.MaxEntrySize];
            DirInfoLayout.Write(record, info, name, nextOffset);
            if (!DirInfoLayout.Append(record, new Span<byte>(buffer, length), ref Used)) return false;
            Count++;
            return true;
        }

        public void End() => DirInfoLayout.AppendEnd(new Span<byte>(buffer, length), ref Used);
    }

    [Benchmark(Description = "RW: list a 16-entry directory")]
    public int ListSmallDirectory()
    {
        var sink = new BufferSink(_buffer, 64 * 1024);
        Check(_fs.ReadDirectory(_small, DirectoryMarker.None, ref sink));
        return sink.Count;
    }
}

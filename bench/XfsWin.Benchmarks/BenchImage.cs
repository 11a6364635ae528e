using System.Diagnostics;
using System.Globalization;

namespace XfsWin.Benchmarks;

/// <summary>One extent of a file as the Linux kernel reported it (xfs_bmap): bytes in the file, bytes in the image.</summary>
internal readonly record struct KernelExtent(long FileOffset, long ImageOffset, long Length);

/// <summary>The raw baseline: reads a file's extents straight off the image, buffer by buffer, as XfsVolume.Read fills its buffer.</summary>
internal static class RawExtentReader
{
    public static long Read(XfsWin.Device.IBlockDevice raw, IReadOnlyList<KernelExtent> extents, Span<byte> buffer)
    {
        long total = 0;
        foreach (var e in extents)
        {
            for (long done = 0; done < e.Length;)
            {
                int n = (int)Math.Min(buffer.Length, e.Length - done);
                raw.Read(e.ImageOffset + done, buffer[..n]);
                done += n;
                total += n;
            }
        }
        return total;
    }

    public static async Task<long> ReadAsync(XfsWin.Device.IBlockDevice raw, IReadOnlyList<KernelExtent> extents, Memory<byte> buffer)
    {
        long total = 0;
        foreach (var e in extents)
        {
            for (long done = 0; done < e.Length;)
            {
                int n = (int)Math.Min(buffer.Length, e.Length - done);
                await raw.ReadAsync(e.ImageOffset + done, buffer[..n]).ConfigureAwait(false);
                done += n;
                total += n;
            }
        }
        return total;
    }
}

/// <summary>
/// The benchmark volume built by <c>bench/make-bench-images.sh</c> (real mkfs.xfs, filled by the kernel)
/// and its manifest: inode numbers, sizes and extent lists as the kernel reported them. Found through
/// <c>XFSWIN_BENCH_DIR</c> (set by bench/run.sh) or built on demand by running the script.
/// </summary>
internal sealed class BenchImage
{
    private static readonly Lazy<BenchImage> Shared = new(Load);
    private readonly Dictionary<string, string> _values = new(StringComparer.Ordinal);
    private readonly Dictionary<string, List<KernelExtent>> _extents = new(StringComparer.Ordinal);

    private BenchImage(string directory) => Directory = directory;

    public string Directory { get; }

    public string ImagePath => Path.Combine(Directory, "bench.img");

    public static BenchImage Get() => Shared.Value;

    public string Value(string key) =>
        _values.TryGetValue(key, out var v) ? v : throw new InvalidOperationException($"the manifest in {Directory} has no '{key}': rebuild it (delete the directory and run bench/make-bench-images.sh)");

    public long Long(string key) => long.Parse(Value(key), CultureInfo.InvariantCulture);

    public ulong Inode(string name) => ulong.Parse(Value(name + ".ino"), CultureInfo.InvariantCulture);

    public IReadOnlyList<KernelExtent> Extents(string name) =>
        _extents.TryGetValue(name, out var list) ? list : throw new InvalidOperationException($"the manifest in {Directory} lists no extents for '{name}'");

    private static BenchImage Load()
    {
        string? dir = Environment.GetEnvironmentVariable("XFSWIN_BENCH_DIR");
        if (string.IsNullOrEmpty(dir)) dir = RunScript();
        string manifest = Path.Combine(dir, "manifest.txt");
        if (!File.Exists(manifest))
            throw new InvalidOperationException($"{manifest} does not exist: run bench/make-bench-images.sh (as root) and set XFSWIN_BENCH_DIR to the directory it prints");
        var image = new BenchImage(dir);
        foreach (var line in File.ReadLines(manifest))
        {
            if (line.Length == 0 || line[0] == '#') continue;
            int eq = line.IndexOf('=', StringComparison.Ordinal);
            if (eq <= 0) throw new InvalidOperationException($"{manifest}: malformed line '{line}'");
            string key = line[..eq], value = line[(eq + 1)..];
            if (key.EndsWith(".extent", StringComparison.Ordinal))
            {
                var parts = value.Split(' ');
                var name = key[..^".extent".Length];
                if (!image._extents.TryGetValue(name, out var list)) image._extents[name] = list = [];
                list.Add(new KernelExtent(long.Parse(parts[0], CultureInfo.InvariantCulture), long.Parse(parts[1], CultureInfo.InvariantCulture), long.Parse(parts[2], CultureInfo.InvariantCulture)));
            }
            else
            {
                image._values[key] = value;
            }
        }
        return image;
    }

    private static string RunScript()
    {
        string? script = null;
        for (var d = new DirectoryInfo(AppContext.BaseDirectory); d is not null; d = d.Parent)
        {
            var candidate = Path.Combine(d.FullName, "bench", "make-bench-images.sh");
            if (File.Exists(candidate))
            {
                script = candidate;
                break;
            }
        }
        if (script is null)
            throw new InvalidOperationException("bench/make-bench-images.sh was not found above " + AppContext.BaseDirectory + ": set XFSWIN_BENCH_DIR to a built benchmark image directory");
        var psi = new ProcessStartInfo("bash", [script]) { RedirectStandardOutput = true };
        using var process = Process.Start(psi) ?? throw new InvalidOperationException("could not start bash to run " + script);
        string output = process.StandardOutput.ReadToEnd();
        process.WaitForExit();
        if (process.ExitCode != 0)
            throw new InvalidOperationException($"{script} failed (exit {process.ExitCode}); run it by hand as root to see why");
        return output.Trim().Split('\n')[^1];
    }
}

/// <summary>A pinned managed buffer whose start is 4096-aligned, usable as Span and Memory for O_DIRECT.</summary>
internal sealed class PinnedAlignedBuffer
{
    private readonly byte[] _array;
    private readonly int _start;

    public unsafe PinnedAlignedBuffer(int length)
    {
        _array = GC.AllocateUninitializedArray<byte>(length + 4096, pinned: true);
        fixed (byte* p = _array)
        {
            _start = (int)((4096 - ((nuint)p & 4095)) & 4095);
        }
        Length = length;
    }

    public int Length { get; }

    public Span<byte> Span => _array.AsSpan(_start, Length);

    public Memory<byte> Memory => _array.AsMemory(_start, Length);
}

internal static class Check
{
    public static void That(bool condition, string message)
    {
        if (!condition) throw new InvalidOperationException("benchmark setup check failed: " + message);
    }
}

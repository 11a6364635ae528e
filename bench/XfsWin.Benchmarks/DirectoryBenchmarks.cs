using System.Text;
using BenchmarkDotNet.Attributes;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Volume;

namespace XfsWin.Benchmarks;

/// <summary>
/// Listing (ReadDirectory with cookies) and stat (GetAttributes per entry) of the 100,000-entry
/// directory /d100k. "Warm" reuses one opened volume (metadata in XfsWin's caches after the first
/// iteration); "cold" opens the volume inside the measured call, so every directory block and inode
/// cluster comes from the image with O_DIRECT.
/// </summary>
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 2, iterationCount: 5)]
public class DirectoryListingBenchmarks
{
    private BenchImage _image = null!;
    private XfsVolume _volume = null!;
    private ulong _dir;
    private long _entries;

    [GlobalSetup]
    public void Setup()
    {
        _image = BenchImage.Get();
        _volume = XfsVolume.Open(_image.ImagePath);
        _dir = _volume.ResolvePath(_image.Value("d100k.path"));
        _entries = _image.Long("d100k.entries");
        Check.That(_dir == _image.Inode("d100k"), "XfsWin resolved /d100k to another inode than the kernel");
        // Sizes must match what the kernel wrote (the script sets them from a seeded generator).
        var list = _volume.ListDirectory(_dir);
        Check.That(list.Count == _entries + 2, $"XfsWin lists {list.Count - 2} entries in /d100k, the kernel {_entries}");
        Check.That(ListAndStat(_volume, _dir, out long bytes) == _entries, "list+stat count differs");
        Check.That(bytes == _image.Long("d100k.totalsize"), $"XfsWin sums the sizes in /d100k to {bytes}, the kernel to {_image.Long("d100k.totalsize")}");
    }

    [GlobalCleanup]
    public void Cleanup() => _volume.Dispose();

    [Benchmark(Description = "list 100k (warm)")]
    public long ListOnly()
    {
        var visitor = new CountingVisitor();
        _volume.ReadDirectory(_dir, 0, ref visitor);
        if (visitor.Count != _entries) throw new InvalidOperationException($"listed {visitor.Count}");
        return visitor.Count;
    }

    [Benchmark(Baseline = true, Description = "list+stat 100k (warm)")]
    public long ListAndStatWarm()
    {
        long n = ListAndStat(_volume, _dir, out _);
        if (n != _entries) throw new InvalidOperationException($"listed {n}");
        return n;
    }

    [Benchmark(Description = "list+stat 100k (cold: open volume, O_DIRECT)")]
    public long ListAndStatCold()
    {
        using var volume = XfsVolume.Open(_image.ImagePath);
        long n = ListAndStat(volume, volume.ResolvePath("/d100k"), out _);
        if (n != _entries) throw new InvalidOperationException($"listed {n}");
        return n;
    }

    /// <summary>Lists the directory in pages of 1024 entries (resuming by cookie, as FUSE and WinFsp do) and stats every entry.</summary>
    private static long ListAndStat(XfsVolume volume, ulong dir, out long totalSize)
    {
        var page = new PageVisitor { Inodes = new ulong[1024] };
        long cookie = 0, count = 0, size = 0;
        while (true)
        {
            page.Count = 0;
            page.Cookie = -1;
            volume.ReadDirectory(dir, cookie, ref page);
            for (int i = 0; i < page.Count; i++)
            {
                var attributes = volume.GetAttributes(page.Inodes[i]);
                size += attributes.Size;
                count++;
            }
            if (page.Count < page.Inodes.Length || page.Cookie < 0) break;
            cookie = page.Cookie;
        }
        totalSize = size;
        return count;
    }

    private struct CountingVisitor : IDirectoryVisitor
    {
        public long Count;
        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (!IsDot(name)) Count++;
            return true;
        }
    }

    private struct PageVisitor : IDirectoryVisitor
    {
        public ulong[] Inodes;
        public int Count;
        public long Cookie;
        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (Count == Inodes.Length) return false;
            Cookie = nextCookie;
            if (!IsDot(name)) Inodes[Count++] = inode;
            return Count < Inodes.Length;
        }
    }

    internal static bool IsDot(ReadOnlySpan<byte> name) => name.SequenceEqual("."u8) || name.SequenceEqual(".."u8);
}

/// <summary>
/// 100,000 random name lookups (TryLookup, by hash through the directory's leaf/node blocks) in
/// directories of 10k, 100k and 1M entries. Reported per lookup: a logarithmic lookup grows by a
/// small constant per tenfold, a scan would grow tenfold. Each size is run twice: names drawn from the
/// whole directory, and from a hot set of 30 names (see <see cref="Names"/>).
/// </summary>
[MemoryDiagnoser]
[SimpleJob(launchCount: 1, warmupCount: 2, iterationCount: 5)]
public class DirectoryLookupBenchmarks
{
    private const int Lookups = 100_000;
    private XfsVolume _volume = null!;
    private ulong _dir;
    private byte[][] _names = null!;
    private ulong[] _expected = null!;

    [Params("d10k", "d100k", "d1m")]
    public string Directory { get; set; } = "d10k";

    /// <summary>
    /// How many distinct names the 100,000 lookups draw from: "all" (any entry: the working set is
    /// the whole directory's metadata) or "30" (a hot set: the same tree depth with a working set that
    /// stays in the CPU caches, separating the algorithm's growth from the memory hierarchy's).
    /// </summary>
    [Params("all", "30")]
    public string Names { get; set; } = "all";

    [GlobalSetup]
    public void Setup()
    {
        var image = BenchImage.Get();
        _volume = XfsVolume.Open(image.ImagePath);
        _dir = _volume.ResolvePath(image.Value(Directory + ".path"));
        Check.That(_dir == image.Inode(Directory), $"XfsWin resolved /{Directory} to another inode than the kernel");
        long entries = image.Long(Directory + ".entries");
        // Expected answers come from a full listing, so every timed lookup is checked.
        var byName = new Dictionary<string, ulong>((int)entries + 2, StringComparer.Ordinal);
        foreach (var e in _volume.ListDirectory(_dir)) byName[e.NameString] = e.Inode;
        Check.That(byName.Count == entries + 2, $"XfsWin lists {byName.Count - 2} entries in /{Directory}, the kernel {entries}");
        var random = new Random(12345);
        int[] pool = Names == "all" ? [] : Enumerable.Range(0, int.Parse(Names, System.Globalization.CultureInfo.InvariantCulture)).Select(_ => random.Next((int)entries)).ToArray();
        _names = new byte[Lookups][];
        _expected = new ulong[Lookups];
        for (int i = 0; i < Lookups; i++)
        {
            int index = pool.Length == 0 ? random.Next((int)entries) : pool[random.Next(pool.Length)];
            string name = $"f{index:D7}";
            _names[i] = Encoding.UTF8.GetBytes(name);
            _expected[i] = byName[name];
        }
        Check.That(!_volume.TryLookup(_dir, "no-such-name"u8, out _), "lookup of a missing name succeeded");
    }

    [GlobalCleanup]
    public void Cleanup() => _volume.Dispose();

    [Benchmark(OperationsPerInvoke = Lookups, Description = "TryLookup (per lookup)")]
    public ulong Lookup()
    {
        ulong sum = 0;
        var names = _names;
        for (int i = 0; i < names.Length; i++)
        {
            if (!_volume.TryLookup(_dir, names[i], out ulong ino) || ino != _expected[i])
                throw new InvalidOperationException($"lookup of {Encoding.UTF8.GetString(names[i])} gave {ino}, expected {_expected[i]}");
            sum += ino;
        }
        return sum;
    }
}

using System.Text;
using System.Text.Json;

namespace XfsWin.TestSupport;

/// <summary>
/// One entry of a manifest: what the Linux kernel (or, for V4 images, the protofile mkfs.xfs was fed)
/// reports for a path. Nullable fields are unknown to the producer and not compared.
/// </summary>
public sealed record ManifestEntry
{
    /// <summary>Path relative to the volume root as raw bytes ("" for the root).</summary>
    public required byte[] Path { get; init; }
    public required string Printable { get; init; }
    /// <summary>file, dir, symlink, chardev, blockdev, fifo, socket.</summary>
    public required string Type { get; init; }
    public required uint Mode { get; init; }
    public required ulong Ino { get; init; }
    public required uint Nlink { get; init; }
    public required uint Uid { get; init; }
    public required uint Gid { get; init; }
    public required long Size { get; init; }
    /// <summary>st_blocks (512-byte units).</summary>
    public long? Blocks { get; init; }
    // Times as (seconds, nanoseconds): bigtime reaches 2486, past what int64 nanoseconds can hold.
    public ManifestTime? Atime { get; init; }
    public ManifestTime? Mtime { get; init; }
    public ManifestTime? Ctime { get; init; }
    /// <summary>Creation time; null when the producer has none (V4 volumes have none).</summary>
    public ManifestTime? Btime { get; init; }
    /// <summary>False when the producer could not know the creation time (then it is not compared).</summary>
    public bool BtimeKnown { get; init; } = true;
    public uint RdevMajor { get; init; }
    public uint RdevMinor { get; init; }
    /// <summary>Lower-case hex SHA-256 of a regular file's contents.</summary>
    public string? Sha256 { get; init; }
    public byte[]? Target { get; init; }
    /// <summary>Linux xattr name ("user.x", "system.posix_acl_access") to value, as getxattr(2) returns it.</summary>
    public required IReadOnlyDictionary<string, byte[]> Xattrs { get; init; }
    /// <summary>Directory entries except "." and "..", name bytes to inode.</summary>
    public IReadOnlyList<(byte[] Name, ulong Ino)>? Children { get; init; }

    public bool IsDirectory => Type == "dir";

    public override string ToString() => Printable;
}

/// <summary>A timestamp: seconds since the epoch (may be negative) and 0..999,999,999 ns.</summary>
public readonly record struct ManifestTime(long Seconds, uint Nanoseconds)
{
    public override string ToString() => $"{Seconds}.{Nanoseconds:D9}";
}

/// <summary>A manifest JSON written by scripts/oracles/manifest.py (or proto.py for V4 images).</summary>
public sealed class KernelManifest
{
    private readonly Dictionary<string, ManifestEntry> _byPath;

    private KernelManifest(string source, List<ManifestEntry> entries)
    {
        Source = source;
        Entries = entries;
        _byPath = new Dictionary<string, ManifestEntry>(entries.Count, StringComparer.Ordinal);
        foreach (var e in entries)
            _byPath.Add(Convert.ToHexString(e.Path), e);
        Root = _byPath.TryGetValue("", out var root)
            ? root
            : throw new InvalidDataException("manifest has no root entry (path \"\")");
    }

    /// <summary>"kernel" (stat of a read-only kernel mount) or "protofile".</summary>
    public string Source { get; }
    public IReadOnlyList<ManifestEntry> Entries { get; }
    public ManifestEntry Root { get; }

    public ManifestEntry? Find(ReadOnlySpan<byte> path) =>
        _byPath.TryGetValue(Convert.ToHexString(path), out var e) ? e : null;

    public ManifestEntry? Find(string path) => Find(Encoding.UTF8.GetBytes(path.TrimStart('/')));

    public ManifestEntry Get(string path) =>
        Find(path) ?? throw new KeyNotFoundException($"manifest has no entry {path}");

    /// <summary>The same manifest with some entries replaced (matched by path) or removed: for testing the comparer itself.</summary>
    public KernelManifest With(IEnumerable<ManifestEntry> replacements, IEnumerable<string>? removePaths = null)
    {
        var map = replacements.ToDictionary(e => Convert.ToHexString(e.Path), StringComparer.Ordinal);
        var removed = new HashSet<string>((removePaths ?? []).Select(p => Convert.ToHexString(System.Text.Encoding.UTF8.GetBytes(p.TrimStart('/')))), StringComparer.Ordinal);
        var list = new List<ManifestEntry>();
        foreach (var e in Entries)
        {
            var key = Convert.ToHexString(e.Path);
            if (!removed.Contains(key))
                list.Add(map.TryGetValue(key, out var r) ? r : e);
        }
        return new KernelManifest(Source, list);
    }

    public static KernelManifest Load(string path)
    {
        using var stream = File.OpenRead(path);
        using var doc = JsonDocument.Parse(stream, new JsonDocumentOptions { MaxDepth = 16 });
        var root = doc.RootElement;
        var format = root.GetProperty("format").GetInt32();
        if (format != 1)
            throw new InvalidDataException($"{path}: manifest format {format} is not 1; rebuild the images (delete the cache dir).");
        var source = root.GetProperty("source").GetString() ?? "kernel";
        var entries = new List<ManifestEntry>();
        foreach (var e in root.GetProperty("entries").EnumerateArray())
            entries.Add(ParseEntry(e));
        return new KernelManifest(source, entries);
    }

    private static ManifestEntry ParseEntry(JsonElement e)
    {
        var xattrs = new Dictionary<string, byte[]>(StringComparer.Ordinal);
        foreach (var x in e.GetProperty("xattrs").EnumerateObject())
            xattrs.Add(x.Name, Convert.FromHexString(x.Value.GetString()!));
        List<(byte[], ulong)>? children = null;
        if (e.TryGetProperty("children", out var ch) && ch.ValueKind == JsonValueKind.Object)
        {
            children = [];
            foreach (var c in ch.EnumerateObject())
                children.Add((Convert.FromHexString(c.Name), c.Value.GetUInt64()));
        }
        return new ManifestEntry
        {
            Path = Convert.FromHexString(e.GetProperty("path").GetString()!),
            Printable = e.GetProperty("printable").GetString()!,
            Type = e.GetProperty("type").GetString()!,
            Mode = e.GetProperty("mode").GetUInt32(),
            Ino = e.GetProperty("ino").GetUInt64(),
            Nlink = e.GetProperty("nlink").GetUInt32(),
            Uid = e.GetProperty("uid").GetUInt32(),
            Gid = e.GetProperty("gid").GetUInt32(),
            Size = e.GetProperty("size").GetInt64(),
            Blocks = OptionalInt64(e, "blocks"),
            Atime = OptionalTime(e, "atime_ns"),
            Mtime = OptionalTime(e, "mtime_ns"),
            Ctime = OptionalTime(e, "ctime_ns"),
            Btime = OptionalTime(e, "btime_ns"),
            BtimeKnown = !e.TryGetProperty("btime_known", out var bk) || bk.GetBoolean(),
            RdevMajor = e.GetProperty("rdev_major").GetUInt32(),
            RdevMinor = e.GetProperty("rdev_minor").GetUInt32(),
            Sha256 = e.TryGetProperty("sha256", out var sha) && sha.ValueKind == JsonValueKind.String ? sha.GetString() : null,
            Target = e.TryGetProperty("target", out var t) && t.ValueKind == JsonValueKind.String ? Convert.FromHexString(t.GetString()!) : null,
            Xattrs = xattrs,
            Children = children,
        };
    }

    private static ManifestTime? OptionalTime(JsonElement e, string name)
    {
        if (!e.TryGetProperty(name, out var v) || v.ValueKind != JsonValueKind.Number)
            return null;
        var ns = System.Numerics.BigInteger.Parse(v.GetRawText(), System.Globalization.CultureInfo.InvariantCulture);
        var sec = System.Numerics.BigInteger.DivRem(ns, 1_000_000_000, out var rem);
        if (rem < 0)
        {
            sec -= 1;
            rem += 1_000_000_000;
        }
        return new ManifestTime((long)sec, (uint)rem);
    }

    private static long? OptionalInt64(JsonElement e, string name) =>
        e.TryGetProperty(name, out var v) && v.ValueKind == JsonValueKind.Number ? v.GetInt64() : null;
}

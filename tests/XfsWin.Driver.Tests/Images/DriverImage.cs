using System.Diagnostics;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using XfsWin.Driver.Semantics;
using XfsWin.Volume;

namespace XfsWin.Driver.Tests.Images;

/// <summary>What the Linux kernel reported for one file of the test volume (from the manifest).</summary>
public sealed record KernelEntry(byte[] Path, ulong Inode, uint Mode, uint Uid, uint Gid, long Size, long Blocks, uint LinkCount,
    long MtimeNs, long CtimeNs, long AtimeNs, long Birth, uint RdevMajor, uint RdevMinor, byte[]? Target,
    IReadOnlyDictionary<string, byte[]> Xattrs, string? Sha256, IReadOnlyList<byte[]> Children);

/// <summary>
/// The driver tests' volume: made by mkfs.xfs and filled by the kernel through a loop mount
/// (Images/make-driver-image.sh), cached per run under $XFSWIN_TEST_CACHE (default /tmp/xfswin-test-cache)
/// keyed by the script's hash. Needs root, loop devices and the kernel's XFS driver; fails loudly without them.
/// </summary>
public sealed class DriverImage : IDisposable
{
    public DriverImage()
    {
        string script = Path.Combine(AppContext.BaseDirectory, "Images", "make-driver-image.sh");
        string hash = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(script)))[..16].ToLowerInvariant();
        string cache = Path.Combine(Environment.GetEnvironmentVariable("XFSWIN_TEST_CACHE") is { Length: > 0 } c ? c : "/tmp/xfswin-test-cache", $"driver-{hash}");
        Directory.CreateDirectory(cache);
        ImagePath = Path.Combine(cache, "volume.img");
        string manifest = Path.Combine(cache, "manifest.json");
        using (var gate = new FileStream(Path.Combine(cache, ".lock"), FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None, 1, FileOptions.None))
        {
            if (!File.Exists(manifest))
            {
                string tmpImage = ImagePath + ".tmp", tmpManifest = manifest + ".tmp";
                var psi = new ProcessStartInfo("bash", [script, tmpImage, tmpManifest]) { RedirectStandardError = true, RedirectStandardOutput = true };
                using var p = Process.Start(psi)!;
                string stdout = p.StandardOutput.ReadToEnd(), stderr = p.StandardError.ReadToEnd();
                p.WaitForExit();
                if (p.ExitCode != 0)
                    throw new InvalidOperationException($"make-driver-image.sh failed ({p.ExitCode}); the driver tests need root, loop devices and the kernel's XFS driver.\n{stdout}\n{stderr}");
                File.Move(tmpImage, ImagePath, overwrite: true);
                File.Move(tmpManifest, manifest, overwrite: true);
            }
        }

        using var doc = JsonDocument.Parse(File.ReadAllBytes(manifest));
        var root = doc.RootElement;
        Uuid = Guid.Parse(root.GetProperty("uuid").GetString()!);
        var statfs = root.GetProperty("statfs");
        KernelBlockSize = statfs.GetProperty("bsize").GetInt64();
        KernelFreeBlocks = statfs.GetProperty("bfree").GetInt64();
        foreach (var p in root.GetProperty("entries").EnumerateObject())
        {
            var e = p.Value;
            var xattrs = new Dictionary<string, byte[]>();
            if (e.TryGetProperty("xattrs", out var xs))
                foreach (var x in xs.EnumerateObject()) xattrs[x.Name] = Convert.FromHexString(x.Value.GetString()!);
            var children = new List<byte[]>();
            if (e.TryGetProperty("children", out var cs))
                foreach (var ch in cs.EnumerateArray()) children.Add(Convert.FromHexString(ch.GetString()!));
            var path = Convert.FromHexString(p.Name);
            Entries[Encoding.Latin1.GetString(path)] = new KernelEntry(path, e.GetProperty("ino").GetUInt64(), e.GetProperty("mode").GetUInt32(),
                e.GetProperty("uid").GetUInt32(), e.GetProperty("gid").GetUInt32(), e.GetProperty("size").GetInt64(),
                e.GetProperty("blocks").GetInt64(), e.GetProperty("nlink").GetUInt32(), e.GetProperty("mtime").GetInt64(), e.GetProperty("ctime").GetInt64(),
                e.GetProperty("atime").GetInt64(), e.GetProperty("birth").GetInt64(), e.GetProperty("rdev_major").GetUInt32(),
                e.GetProperty("rdev_minor").GetUInt32(),
                e.TryGetProperty("target", out var t) ? Convert.FromHexString(t.GetString()!) : null,
                xattrs, e.TryGetProperty("sha256", out var h) ? h.GetString() : null, children);
        }
        Volume = XfsVolume.Open(ImagePath);
    }

    public string ImagePath { get; }
    public Guid Uuid { get; }
    public long KernelBlockSize { get; }
    public long KernelFreeBlocks { get; }
    public XfsVolume Volume { get; }

    /// <summary>Entries by path relative to the root, as Latin-1 of the raw bytes ("" is the root).</summary>
    public Dictionary<string, KernelEntry> Entries { get; } = [];

    public KernelEntry this[string utf8Path] => Entries[Encoding.Latin1.GetString(Encoding.UTF8.GetBytes(utf8Path))];

    public static readonly Sid MountingUser = Sid.Parse("S-1-5-21-1000-2000-3000-1001");

    public XfsWindowsFileSystem Adapter(MountOptions? options = null, IdMappingMode mode = IdMappingMode.Unix)
    {
        options ??= new MountOptions { IdMapping = mode };
        return new XfsWindowsFileSystem(Volume, options, options.CreateIdentityMap(MountingUser), "X:");
    }

    public void Dispose() => Volume.Dispose();
}

[CollectionDefinition(Name)]
public sealed class DriverImageCollection : ICollectionFixture<DriverImage>
{
    public const string Name = "driver image";
}

using System.Collections.Concurrent;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;

namespace XfsWin.TestSupport;

/// <summary>A volume made by the real mkfs.xfs and filled by the kernel, with its manifest.</summary>
public sealed record OracleImage(
    string Name,
    string ImagePath,
    string ManifestPath,
    /// <summary>"6.1" (the system's xfsprogs) or "6.13" (Debian trixie's, under the cache dir).</summary>
    string XfsprogsVersion,
    string MkfsOptions,
    /// <summary>False for ftype=0 volumes: directory entries then carry no file type.</summary>
    bool DirectoryFileTypes,
    /// <summary>"kernel" or "protofile" (V4 volumes, which this kernel cannot mount).</summary>
    string ManifestSource)
{
    private KernelManifest? _manifest;

    public KernelManifest Manifest => _manifest ??= KernelManifest.Load(ManifestPath);

    /// <summary>Path of an xfsprogs tool of the version that made this image (xfs_db, xfs_repair, ...).</summary>
    public string Tool(string name) => OracleImages.Tool(name, XfsprogsVersion);

    public override string ToString() => Name;
}

/// <summary>
/// The oracle image matrix (scripts/oracles/make-images.sh). Images are built on first use and cached
/// under <c>${XFSWIN_CACHE:-/var/cache/xfswin}/images/HASH/</c>, HASH being the content hash of
/// scripts/oracles/*, so editing a script rebuilds, and every later run reuses them.
/// Safe to call from parallel tests and from several test processes at once.
/// </summary>
public static class OracleImages
{
    /// <summary>Every image the matrix script knows.</summary>
    public static readonly IReadOnlyList<string> All =
        ["default", "v4", "v4-ftype0", "rmap-nrext64", "b1k", "b64k", "dir64k", "mkfs613"];

    /// <summary>Images the kernel filled (the V4 ones come from a protofile).</summary>
    public static readonly IReadOnlyList<string> KernelFilled =
        ["default", "rmap-nrext64", "b1k", "b64k", "dir64k", "mkfs613"];

    private static readonly ConcurrentDictionary<string, Lazy<OracleImage>> Built = new(StringComparer.Ordinal);
    private static readonly Lazy<string> LazyRepoRoot = new(FindRepoRoot);
    private static readonly Lazy<string> LazyHash = new(() => HashScripts(ScriptsDirectory));

    public static string CacheRoot =>
        Environment.GetEnvironmentVariable("XFSWIN_CACHE") is { Length: > 0 } c ? c : "/var/cache/xfswin";

    public static string RepoRoot => LazyRepoRoot.Value;

    public static string ScriptsDirectory => Path.Combine(RepoRoot, "scripts", "oracles");

    /// <summary>Content hash of scripts/oracles/* (first 16 hex digits).</summary>
    public static string ScriptsHash => LazyHash.Value;

    public static string ImageDirectory => Path.Combine(CacheRoot, "images", ScriptsHash);

    /// <summary>Builds the named image unless it is already cached; returns it.</summary>
    public static OracleImage Ensure(string name)
    {
        if (!All.Contains(name))
            throw new ArgumentException($"unknown oracle image '{name}'; known: {string.Join(", ", All)}", nameof(name));
        return Built.GetOrAdd(name, n => new Lazy<OracleImage>(() => Build(n), LazyThreadSafetyMode.ExecutionAndPublication)).Value;
    }

    /// <summary>
    /// A private sparse copy of an image (for tests that damage it) in <paramref name="directory"/>.
    /// </summary>
    public static string CopyTo(OracleImage image, string directory, string? fileName = null)
    {
        var dest = Path.Combine(directory, fileName ?? image.Name + ".img");
        Shell.RunChecked("cp", "--sparse=always", "--", image.ImagePath, dest);
        return dest;
    }

    /// <summary>
    /// Path of an xfsprogs tool: the system's for "6.1", the private Debian trixie build for "6.13"
    /// (installed by scripts/oracles/install.sh when missing).
    /// </summary>
    public static string Tool(string name, string xfsprogsVersion = "6.1")
    {
        switch (xfsprogsVersion)
        {
            case "6.1":
                foreach (var dir in new[] { "/usr/sbin", "/sbin", "/usr/bin" })
                {
                    var p = Path.Combine(dir, name);
                    if (File.Exists(p))
                        return p;
                }
                throw new FileNotFoundException($"{name} is not installed; run scripts/oracles/install.sh as root.");
            case "6.13":
                var wrapper = Path.Combine(CacheRoot, "xfsprogs-6.13", "bin", name);
                if (!File.Exists(wrapper))
                    InstallTools();
                return File.Exists(wrapper)
                    ? wrapper
                    : throw new FileNotFoundException($"{wrapper} is missing after scripts/oracles/install.sh ran; see its output.");
            default:
                throw new ArgumentException($"unknown xfsprogs version {xfsprogsVersion}", nameof(xfsprogsVersion));
        }
    }

    private static readonly object InstallLock = new();

    private static void InstallTools()
    {
        lock (InstallLock)
        {
            Shell.RunChecked("bash", [Path.Combine(ScriptsDirectory, "install.sh")], TimeSpan.FromMinutes(15), Env());
        }
    }

    private static Dictionary<string, string> Env() => new() { ["XFSWIN_CACHE"] = CacheRoot };

    private static OracleImage Build(string name)
    {
        var dir = ImageDirectory;
        Directory.CreateDirectory(dir);
        var meta = Path.Combine(dir, name + ".meta.json");
        if (!File.Exists(meta))
        {
            // Another test process may be building the same image: serialize on a lock file.
            using var lockFile = AcquireLock(Path.Combine(dir, name + ".lock"), TimeSpan.FromMinutes(30));
            if (!File.Exists(meta))
            {
                Shell.RunChecked("bash", [Path.Combine(ScriptsDirectory, "make-images.sh"), name, dir],
                    TimeSpan.FromMinutes(20), Env());
                if (!File.Exists(meta))
                    throw new InvalidOperationException($"make-images.sh {name} finished without writing {meta}");
            }
        }
        return LoadMeta(name, dir, meta);
    }

    private static OracleImage LoadMeta(string name, string dir, string metaPath)
    {
        using var doc = JsonDocument.Parse(File.ReadAllText(metaPath));
        var m = doc.RootElement;
        var image = new OracleImage(
            name,
            Path.Combine(dir, name + ".img"),
            Path.Combine(dir, name + ".json"),
            m.GetProperty("xfsprogs").GetString()!,
            m.GetProperty("mkfs_options").GetString()!,
            m.GetProperty("ftype").GetBoolean(),
            m.GetProperty("manifest_source").GetString()!);
        if (!File.Exists(image.ImagePath) || !File.Exists(image.ManifestPath))
            throw new InvalidOperationException($"{metaPath} exists but {image.ImagePath} or {image.ManifestPath} is missing; delete {dir} and rerun.");
        return image;
    }

    private static FileStream AcquireLock(string path, TimeSpan timeout)
    {
        var deadline = DateTime.UtcNow + timeout;
        while (true)
        {
            try
            {
                return new FileStream(path, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None);
            }
            catch (IOException) when (DateTime.UtcNow < deadline)
            {
                Thread.Sleep(500);
            }
        }
    }

    internal static string HashScripts(string scriptsDir)
    {
        if (!Directory.Exists(scriptsDir))
            throw new DirectoryNotFoundException($"{scriptsDir} not found; the tests must run from a checkout of the repository.");
        using var sha = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        foreach (var file in Directory.GetFiles(scriptsDir).Order(StringComparer.Ordinal))
        {
            sha.AppendData(Encoding.UTF8.GetBytes(Path.GetFileName(file) + "\0"));
            sha.AppendData(File.ReadAllBytes(file));
            sha.AppendData("\0"u8);
        }
        return Convert.ToHexStringLower(sha.GetHashAndReset())[..16];
    }

    private static string FindRepoRoot()
    {
        for (var d = new DirectoryInfo(AppContext.BaseDirectory); d is not null; d = d.Parent)
        {
            if (File.Exists(Path.Combine(d.FullName, "XfsWin.sln")) && Directory.Exists(Path.Combine(d.FullName, "scripts", "oracles")))
                return d.FullName;
        }
        throw new DirectoryNotFoundException($"no XfsWin.sln with scripts/oracles above {AppContext.BaseDirectory}");
    }
}

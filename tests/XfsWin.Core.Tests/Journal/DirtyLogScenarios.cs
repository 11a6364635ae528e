using Xunit;
using System.Collections.Concurrent;
using System.Security.Cryptography;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Journal;

/// <summary>A volume the kernel left with a dirty log, and the kernel's own replay of it.</summary>
public sealed record DirtyLogScenario(string Name, string DirtyImage, string KernelImage, string ManifestPath,
    string? DirtyLogDevice, string? KernelLogDevice)
{
    public KernelManifest Manifest => KernelManifest.Load(ManifestPath);
    public override string ToString() => Name;
}

/// <summary>
/// Builds the scenarios of dirty-logs.sh once per content hash of the script (and manifest.py) under
/// $XFSWIN_CACHE/journal/HASH, serialised across test processes by a lock file.
/// </summary>
public static class DirtyLogScenarios
{
    private static readonly ConcurrentDictionary<string, Lazy<DirtyLogScenario>> Built = new(StringComparer.Ordinal);

    public static string ScriptPath => Path.Combine(OracleImages.RepoRoot, "tests", "XfsWin.Core.Tests", "Journal", "dirty-logs.sh");
    public static string ManifestScript => Path.Combine(OracleImages.ScriptsDirectory, "manifest.py");

    private static readonly Lazy<string> Hash = new(() =>
    {
        var bytes = File.ReadAllBytes(ScriptPath).Concat(File.ReadAllBytes(ManifestScript)).ToArray();
        return Convert.ToHexString(SHA256.HashData(bytes))[..16].ToLowerInvariant();
    });

    public static string Directory_ => Path.Combine(OracleImages.CacheRoot, "journal", Hash.Value);

    public static DirtyLogScenario Ensure(string name) =>
        Built.GetOrAdd(name, n => new Lazy<DirtyLogScenario>(() => Build(n), LazyThreadSafetyMode.ExecutionAndPublication)).Value;

    private static DirtyLogScenario Build(string name)
    {
        string dir = Directory_;
        Directory.CreateDirectory(dir);
        string dirty = Path.Combine(dir, name + ".dirty");
        if (!File.Exists(dirty))
        {
            using var lockFile = AcquireLock(Path.Combine(dir, name + ".lock"));
            if (!File.Exists(dirty))
            {
                Shell.RunChecked("bash", [ScriptPath, name, dir], TimeSpan.FromMinutes(15),
                    new Dictionary<string, string> { ["XFSWIN_MANIFEST"] = ManifestScript, ["XFSWIN_CACHE"] = OracleImages.CacheRoot });
            }
        }
        string logDirty = Path.Combine(dir, name + ".logdev.dirty");
        return new DirtyLogScenario(name, dirty, Path.Combine(dir, name + ".kernel"), Path.Combine(dir, name + ".json"),
            File.Exists(logDirty) ? logDirty : null, File.Exists(logDirty) ? Path.Combine(dir, name + ".logdev.kernel") : null);
    }

    private static FileStream AcquireLock(string path)
    {
        var deadline = DateTime.UtcNow.AddMinutes(30);
        while (true)
        {
            try
            {
                return new FileStream(path, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None, 1, FileOptions.DeleteOnClose);
            }
            catch (IOException) when (DateTime.UtcNow < deadline)
            {
                Thread.Sleep(500);
            }
        }
    }

    /// <summary>A private sparse copy of a scenario file in <paramref name="directory"/>.</summary>
    public static string Copy(string source, string directory, string fileName)
    {
        string dest = Path.Combine(directory, fileName);
        Shell.RunChecked("cp", "--sparse=always", "--", source, dest);
        return dest;
    }

    public static Superblock ReadSuperblock(IBlockDevice device)
    {
        var sector = new byte[4096];
        device.Read(0, sector);
        return Superblock.Decode(sector);
    }

    public static bool FilesEqual(string a, string b) => Shell.Run("cmp", "-s", "--", a, b).ExitCode == 0;
}

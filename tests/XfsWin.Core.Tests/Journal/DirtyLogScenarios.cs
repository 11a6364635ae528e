using Xunit;
using System.Collections.Concurrent;
using System.Security.Cryptography;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Journal;

/// <summary>
/// A volume the kernel left with a dirty log, and the kernel's own replay of it. <see cref="QuotaReport"/> is
/// xfs_quota's report after that replay, for quota scenarios.
/// </summary>
public sealed record DirtyLogScenario(string Name, string DirtyImage, string KernelImage, string ManifestPath,
    string? DirtyLogDevice, string? KernelLogDevice, string? QuotaReport)
{
    public KernelManifest Manifest => KernelManifest.Load(ManifestPath);
    public override string ToString() => Name;
}

/// <summary>
/// Builds the scenarios of dirty-logs.sh once per content hash of the scripts (with uml.sh and manifest.py) under
/// $XFSWIN_CACHE/journal/HASH, serialised across test processes by a lock file.
/// </summary>
public static class DirtyLogScenarios
{
    private static readonly ConcurrentDictionary<string, Lazy<DirtyLogScenario>> Built = new(StringComparer.Ordinal);

    public static string ScriptPath => Path.Combine(OracleImages.RepoRoot, "tests", "XfsWin.Core.Tests", "Journal", "dirty-logs.sh");
    public static string UmlScript => Path.Combine(OracleImages.RepoRoot, "tests", "XfsWin.Core.Tests", "Journal", "uml.sh");
    public static string ManifestScript => Path.Combine(OracleImages.ScriptsDirectory, "manifest.py");

    private static readonly Lazy<string> Hash = new(() =>
    {
        var bytes = File.ReadAllBytes(ScriptPath).Concat(File.ReadAllBytes(UmlScript)).Concat(File.ReadAllBytes(ManifestScript)).ToArray();
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
                var env = Env();
                // Exit code 3: a timing-dependent scenario missed its moment, or the kernel wrote metadata back under it (see
                // dirty-logs.sh); try again a few times.
                for (int attempt = 1; ; attempt++)
                {
                    var r = Shell.Run("bash", [ScriptPath, name, dir], TimeSpan.FromMinutes(15), env);
                    if (r.ExitCode == 0) break;
                    if (r.ExitCode != 3 || attempt == 10)
                        throw new InvalidOperationException($"dirty-logs.sh {name} failed ({r.ExitCode}):\n{r.StandardError}\n{r.StandardOutput}");
                }
            }
        }
        string logDirty = Path.Combine(dir, name + ".logdev.dirty");
        string quota = Path.Combine(dir, name + ".quota");
        return new DirtyLogScenario(name, dirty, Path.Combine(dir, name + ".kernel"), Path.Combine(dir, name + ".json"),
            File.Exists(logDirty) ? logDirty : null, File.Exists(logDirty) ? Path.Combine(dir, name + ".logdev.kernel") : null,
            File.Exists(quota) ? quota : null);
    }

    private static Dictionary<string, string> Env() =>
        new() { ["XFSWIN_MANIFEST"] = ManifestScript, ["XFSWIN_CACHE"] = OracleImages.CacheRoot };

    /// <summary>
    /// Mounts <paramref name="image"/> read-only in user-mode Linux (a kernel with XFS quota, uml.sh: the scenario's
    /// kernel, 5.10 for quotaoff) with the scenario's mount options after replay and writes PREFIX.json (manifest),
    /// PREFIX.quota (xfs_quota report) and PREFIX.dmesg (the kernel's messages of that mount).
    /// </summary>
    public static void GuestReport(string scenario, string image, string prefix)
    {
        var r = Shell.Run("bash", [ScriptPath, "--report", scenario, image, prefix], TimeSpan.FromMinutes(10), Env());
        if (r.ExitCode != 0)
            throw new InvalidOperationException($"dirty-logs.sh --report of {image} failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
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

using System.Text;
using XfsWin.TestSupport;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Compares two manifests written by scripts/oracles/manifest.py: the kernel's XFS mount (expected)
/// and the FUSE mount of the same image (actual), every field of every entry.
/// </summary>
internal static class ManifestComparison
{
    /// <summary>Runs manifest.py over a mounted tree and loads the result.</summary>
    public static KernelManifest Take(string root)
    {
        var json = Path.Combine(Path.GetTempPath(), $"xfswin-manifest-{Guid.NewGuid():N}.json");
        try
        {
            var script = Path.Combine(OracleImages.RepoRoot, "scripts", "oracles", "manifest.py");
            var r = Shell.Run("python3", [script, root, json], timeout: TimeSpan.FromMinutes(10));
            Assert.True(r.ExitCode == 0, $"manifest.py {root} failed:\n{r.Both}");
            return KernelManifest.Load(json);
        }
        finally
        {
            File.Delete(json);
        }
    }

    /// <summary>
    /// Every difference, one line each. Birth time is not compared: libfuse 3.14's low-level API
    /// has no way to report it (statx through FUSE shows none).
    /// </summary>
    public static List<string> Differences(KernelManifest expected, KernelManifest actual)
    {
        var diffs = new List<string>();
        void Check<T>(ManifestEntry e, string field, T want, T got)
        {
            if (!EqualityComparer<T>.Default.Equals(want, got))
                diffs.Add($"{e.Printable}: {field}: kernel {want}, fuse {got}");
        }
        static string Hex(byte[]? b) => b is null ? "(none)" : Convert.ToHexString(b);

        foreach (var e in expected.Entries)
        {
            var a = actual.Find(e.Path);
            if (a is null)
            {
                diffs.Add($"{e.Printable}: missing from the FUSE mount");
                continue;
            }
            Check(e, "type", e.Type, a.Type);
            Check(e, "mode", e.Mode, a.Mode);
            Check(e, "ino", e.Ino, a.Ino);
            Check(e, "nlink", e.Nlink, a.Nlink);
            Check(e, "uid", e.Uid, a.Uid);
            Check(e, "gid", e.Gid, a.Gid);
            Check(e, "size", e.Size, a.Size);
            // Fields the expected manifest does not know (protofile manifests of V4 volumes) are not compared.
            if (e.Blocks is not null)
                Check(e, "blocks", e.Blocks, a.Blocks);
            if (e.Atime is not null)
                Check(e, "atime", e.Atime, a.Atime);
            if (e.Mtime is not null)
                Check(e, "mtime", e.Mtime, a.Mtime);
            if (e.Ctime is not null)
                Check(e, "ctime", e.Ctime, a.Ctime);
            Check(e, "rdev", (e.RdevMajor, e.RdevMinor), (a.RdevMajor, a.RdevMinor));
            Check(e, "sha256", e.Sha256, a.Sha256);
            Check(e, "target", Hex(e.Target), Hex(a.Target));
            var wantX = string.Join(' ', e.Xattrs.OrderBy(x => x.Key, StringComparer.Ordinal).Select(x => $"{x.Key}={Convert.ToHexString(x.Value)}"));
            var gotX = string.Join(' ', a.Xattrs.OrderBy(x => x.Key, StringComparer.Ordinal).Select(x => $"{x.Key}={Convert.ToHexString(x.Value)}"));
            Check(e, "xattrs", wantX, gotX);
            if (e.Children is not null)
            {
                // In on-disk (readdir) order: the FUSE mount must list entries exactly as XFS does.
                var wantC = string.Join(' ', e.Children.Select(c => $"{Convert.ToHexString(c.Name)}:{c.Ino}"));
                var gotC = a.Children is null ? "(none)" : string.Join(' ', a.Children.Select(c => $"{Convert.ToHexString(c.Name)}:{c.Ino}"));
                Check(e, "children", wantC, gotC);
            }
        }
        foreach (var a in actual.Entries)
        {
            if (expected.Find(a.Path) is null)
                diffs.Add($"{a.Printable}: only in the FUSE mount");
        }
        return diffs;
    }

    public static string Format(List<string> diffs, int max = 100)
    {
        var sb = new StringBuilder().Append(diffs.Count).Append(" difference(s):\n");
        foreach (var d in diffs.Take(max))
            sb.Append("  ").Append(d.Length > 400 ? d[..400] + "..." : d).Append('\n');
        return sb.ToString();
    }
}

using System.Text.Json;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// extract over the shared oracle matrix (scripts/oracles: every kernel-filled image, block sizes
/// 1k..64k, 64k directory blocks, rmapbt/nrext64, mkfs 6.13 features): the extracted tree, recorded
/// with the same manifest tool, must match the kernel's manifest of the image entry by entry.
/// </summary>
public class OracleMatrixExtractTests
{
    public static TheoryData<string> Images => new(OracleImages.KernelFilled);

    [Theory]
    [MemberData(nameof(Images))]
    public void Extract_matches_the_kernel_manifest(string name)
    {
        Assert.True(Sh.Check("id", "-u").Trim() == "0", "this test needs root (owners, device nodes, trusted.* xattrs)");
        var image = OracleImages.Ensure(name);
        using var dir = new TempDir();
        // DEST on a fresh XFS volume: other file systems hold fewer xattrs per file than the images do.
        string destImage = Path.Combine(dir.Path, "dest.img");
        Sh.Check("truncate", "-s", "2G", destImage);
        Sh.Check("mkfs.xfs", "-q", "-f", destImage);
        // noatime: hashing one name of a hard-linked file must not move the atime the others show.
        using var destMount = XfsWin.TestSupport.LoopMount.Mount(destImage, readOnly: false, "noatime");
        string dest = Path.Combine(destMount.MountPoint, "out");
        var r = Xfswin.Run("extract", image.ImagePath, dest);
        Assert.True(r.Code == 0, r.ToString());

        string json = Path.Combine(dir.Path, "extracted.json");
        Sh.Check("python3", Path.Combine(OracleImages.ScriptsDirectory, "manifest.py"), dest, json);
        // Compared as raw JSON: times past 2262 (bigtime) do not fit in a long of nanoseconds.
        using var oursDoc = JsonDocument.Parse(File.ReadAllText(json));
        using var kernelDoc = JsonDocument.Parse(File.ReadAllText(image.ManifestPath));
        var ours = oursDoc.RootElement.GetProperty("entries").EnumerateArray().ToDictionary(e => e.GetProperty("path").GetString()!);
        var kernel = kernelDoc.RootElement.GetProperty("entries").EnumerateArray().ToList();
        Assert.True(kernel.Count > 10, $"{name}: the kernel manifest has only {kernel.Count} entries");

        // Fields that must survive extraction; inode numbers, ctime, btime and block counts cannot.
        string[] fields = ["type", "mode", "uid", "gid", "atime_ns", "mtime_ns", "rdev_major", "rdev_minor", "sha256", "target"];
        var problems = new List<string>();
        var ourGroup = new Dictionary<string, string>();
        var kernelGroup = new Dictionary<string, string>();
        foreach (var k in kernel)
        {
            string path = k.GetProperty("path").GetString()!;
            string printable = k.GetProperty("printable").GetString()!;
            if (!ours.TryGetValue(path, out var o)) { problems.Add($"missing: {printable}"); continue; }
            bool isDir = k.GetProperty("type").GetString() == "dir";
            foreach (var f in isDir ? fields : [.. fields, "size", "nlink"])
            {
                string kv = k.TryGetProperty(f, out var a) ? a.GetRawText() : "(absent)";
                string ov = o.TryGetProperty(f, out var b) ? b.GetRawText() : "(absent)";
                if (kv != ov) problems.Add($"{printable}: {f} kernel={kv} extracted={ov}");
            }
            static string Xattrs(JsonElement e) => string.Join(' ', e.GetProperty("xattrs").EnumerateObject()
                .Where(x => x.Name is not ("trusted.SGI_ACL_FILE" or "trusted.SGI_ACL_DEFAULT"))
                .OrderBy(x => x.Name, StringComparer.Ordinal).Select(x => $"{x.Name}={x.Value.GetString()}"));
            if (Xattrs(k) != Xattrs(o)) problems.Add($"{printable}: xattrs kernel=[{Xattrs(k)}] extracted=[{Xattrs(o)}]");
            if (!isDir && k.GetProperty("nlink").GetUInt32() > 1)
            {
                // Hard links: paths sharing an inode in the image must share one in DEST, and vice versa.
                string kIno = k.GetProperty("ino").GetRawText(), oIno = o.GetProperty("ino").GetRawText();
                string kFirst = kernelGroup.TryAdd(kIno, printable) ? printable : kernelGroup[kIno];
                string oFirst = ourGroup.TryAdd(oIno, printable) ? printable : ourGroup[oIno];
                if (kFirst != oFirst) problems.Add($"{printable}: hard-link group kernel={kFirst} extracted={oFirst}");
            }
        }
        Assert.Equal(kernel.Count, ours.Count);
        Assert.True(problems.Count == 0, $"{name}: {problems.Count} differences:\n{string.Join('\n', problems.Take(40))}");
    }
}

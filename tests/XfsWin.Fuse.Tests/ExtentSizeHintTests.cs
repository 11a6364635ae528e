using System.Text;
using System.Text.RegularExpressions;
using XfsWin.TestSupport;
using TS = XfsWin.TestSupport.Shell;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Extent size hints through <c>xfswin mount -o rw</c> against the kernel's XFS on a copy of the same empty 6.13 volume
/// (Images/extsize-ops.sh): a write into an empty file with a 1 MiB hint, a write across a hint boundary, a hint
/// inherited from a directory, writes into a sparse file, a previous extent off a hint boundary, a hole too small for a
/// hint, fallocate. After both are unmounted, each file's extent map (xfs_io bmap -vp on a kernel mount: file offsets,
/// lengths, holes and the unwritten flag; not disk addresses, which are the allocator's choice) and its inode fields
/// (block count, extent count, flags) must be the kernel's, the contents the same, and xfs_repair -n clean.
/// </summary>
public sealed partial class ExtentSizeHintTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-extsize");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly string[] Files = ["a", "b", "d/c", "e", "f", "g", "h"];

    [Fact]
    public void Writes_to_files_with_extent_size_hints_map_what_the_kernel_maps()
    {
        string baseImage = Path.Combine(_tmp, "base.img"), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        TS.RunChecked("truncate", "-s", "300M", baseImage);
        TS.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-b", "size=4096", baseImage);
        TS.RunChecked("cp", "--sparse=always", baseImage, kernelImage);
        TS.RunChecked("cp", "--sparse=always", baseImage, ourImage);
        var env = new Dictionary<string, string> { ["XFS_IO"] = OracleImages.Tool("xfs_io", "6.13") };
        string script = Path.Combine(AppContext.BaseDirectory, "Images", "extsize-ops.sh");
        string Run(string root) => TS.Run("bash", [script, root], environment: env).StandardOutput;
        string kernel, ours;
        using (var k = LoopMount.Mount(kernelImage, readOnly: false)) kernel = Run(k.MountPoint);
        using (var m = new ReadWriteMount(ourImage))
        {
            ours = Run(m.MountPoint);
            m.Unmount();
        }
        output.WriteLine(ours);
        Assert.Equal(kernel, ours);
        Assert.Contains("[1048576] d/c", ours, StringComparison.Ordinal);

        string kernelMaps = Maps(kernelImage), ourMaps = Maps(ourImage);
        output.WriteLine(ourMaps);
        Assert.Equal(kernelMaps, ourMaps);
        // The shapes the hints make (512-byte units): one 1 MiB allocation for 4 KiB at 100 KiB, unwritten but for the
        // written block, trimmed at EOF when the file was closed; fallocate's rounded-out space stays (a preallocated file).
        Assert.Contains("a: 0..199 unwritten, 200..207 written", ourMaps, StringComparison.Ordinal);
        Assert.Contains("h: 0..2047 unwritten, 2048..4095 hole, 4096..6143 unwritten", ourMaps, StringComparison.Ordinal);

        Assert.Equal(InodeFields(kernelImage), InodeFields(ourImage));
        Assert.Equal(Hashes(kernelImage), Hashes(ourImage));
        var repair = KernelMadeImages.RepairProblems(ourImage, "6.13");
        Assert.True(repair.Count == 0, string.Join('\n', repair));
    }

    /// <summary>Each file's extent map as the kernel reports it, as runs of holes, written and unwritten blocks.</summary>
    private static string Maps(string image)
    {
        using var k = LoopMount.Mount(image, readOnly: true);
        var text = new StringBuilder();
        foreach (var f in Files)
        {
            var bmap = TS.RunChecked(OracleImages.Tool("xfs_io", "6.13"), "-r", "-c", "bmap -vp", Path.Combine(k.MountPoint, f)).StandardOutput;
            var runs = new List<(long Start, long End, string Kind)>();
            foreach (Match line in BmapLine().Matches(bmap))
            {
                long start = long.Parse(line.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture);
                long end = long.Parse(line.Groups[2].Value, System.Globalization.CultureInfo.InvariantCulture);
                string kind = line.Groups[3].Value == "hole" ? "hole"
                    : (Convert.ToInt32(line.Groups[4].Value, 8) & 0x1000) != 0 ? "unwritten" : "written"; // BMV_OF_PREALLOC (octal 010000)
                // Records split only by disk placement (an AG boundary, a discontiguous allocation) are one run here.
                if (runs.Count > 0 && runs[^1].Kind == kind && runs[^1].End + 1 == start) runs[^1] = (runs[^1].Start, end, kind);
                else runs.Add((start, end, kind));
            }
            text.Append(f).Append(": ").AppendJoin(", ", runs.Select(r => $"{r.Start}..{r.End} {r.Kind}")).Append('\n');
        }
        return text.ToString();
    }

    [GeneratedRegex(@"^\s*\d+: \[(\d+)\.\.(\d+)\]:\s+(hole|\S+)(?:.*\s(\d+))?\s*$", RegexOptions.Multiline)]
    private static partial Regex BmapLine();

    private static string InodeFields(string image)
    {
        const string Fields = "core.size core.nblocks core.nextents core.extsize core.prealloc core.extsz core.extszinherit";
        var lines = new List<string>();
        foreach (var p in Files.Append("d"))
            lines.Add(p + ": " + TS.Run(OracleImages.Tool("xfs_db", "6.13"), "-r", "-c", $"path /{p}", "-c", $"print {Fields}", image)
                .StandardOutput.ReplaceLineEndings(" ").Trim());
        return string.Join('\n', lines);
    }

    private static string Hashes(string image)
    {
        using var k = LoopMount.Mount(image, readOnly: true);
        return TS.RunChecked("sh", "-c", $"cd {k.MountPoint} && sha256sum {string.Join(' ', Files)}").StandardOutput;
    }
}

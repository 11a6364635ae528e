using System.Text.Json;
using XfsWin.Check;
using XfsWin.Cli;
using XfsWin.TestSupport;
using XfsDb = XfsWin.TestSupport.XfsDb;
using DirtyLogScenarios = XfsWin.Tests.Journal.DirtyLogScenarios;
using Xunit;
using Xunit.Abstractions;

namespace XfsWin.Tests.Check;

/// <summary>
/// <c>xfswin check</c> judged by <c>xfs_repair -n</c> on the same image: clean oracle images, images
/// damaged in the test with <c>xfs_db -x</c> (fields written with valid CRCs, and blocktrash with fixed
/// seeds), and a dirty-log volume. For every damaged image the expectation is what xfs_repair -n says
/// about that very image (exit 0 or 1), never a list written here.
/// </summary>
public sealed class VolumeCheckerTests(ITestOutputHelper output) : IDisposable
{
    private static readonly TimeSpan Limit = TimeSpan.FromMinutes(3);
    private readonly DirectoryInfo _dir = Directory.CreateTempSubdirectory("xfswin-check.");

    public void Dispose() => _dir.Delete(recursive: true);

    public static TheoryData<string> CleanImages() => new() { "default", "rmap-nrext64", "b1k", "b64k", "dir64k", "mkfs613", "v4" };

    private static int RepairExit(string tool, string image)
    {
        var r = Shell.Run(tool, ["-n", image], Limit);
        Assert.True(r.ExitCode is 0 or 1, $"xfs_repair -n exited {r.ExitCode}:\n{r.StandardOutput}\n{r.StandardError}");
        return r.ExitCode;
    }

    private CheckReport CheckWithLimit(string image) =>
        Watchdog.Run(Limit, $"checking {Path.GetFileName(image)}", () => VolumeChecker.Check(image));

    private void Log(CheckReport report)
    {
        foreach (var n in report.Notes) output.WriteLine($"note: {n}");
        foreach (var p in report.Problems.Take(20)) output.WriteLine(p.ToString());
    }

    [Theory]
    [MemberData(nameof(CleanImages))]
    public void CleanImageHasNoProblemsAndXfsRepairAgrees(string name)
    {
        var image = OracleImages.Ensure(name);
        var report = CheckWithLimit(image.ImagePath);
        Log(report);
        Assert.Equal(0, RepairExit(image.Tool("xfs_repair"), image.ImagePath));
        Assert.True(report.IsClean, $"{report.ProblemCount} problems on a volume xfs_repair -n finds clean");
        Assert.NotNull(report.Summary);
        Assert.True(report.Summary!.InUseInodes >= (ulong)image.Manifest.Entries.Select(e => e.Ino).Distinct().Count(),
            "fewer inodes in use than the kernel's tree holds");
    }

    /// <summary>A field written with xfs_db (CRCs recomputed): the inode/structure numbers come from the image's manifest.</summary>
    public sealed record FuzzCase(string Image, Func<OracleImage, string[]> Commands, string Structure);

    private static ulong Ino(OracleImage image, Func<ManifestEntry, bool> pick) => image.Manifest.Entries.First(pick).Ino;

    private static ulong FileIno(OracleImage i) => Ino(i, e => e.Type == "file" && e.Nlink == 1 && e.Size is > 100_000 and < 2_000_000);
    private static ulong ShortDirIno(OracleImage i) => Ino(i, e => e.IsDirectory && e.Size is > 6 and < 60 && e.Children is { Count: 1 });

    private static readonly Dictionary<string, FuzzCase> FuzzCases = new()
    {
        ["agf-freeblks"] = new("rmap-nrext64", i => ["agf 1", $"write freeblks {Field(i, "freeblks", "agf 1") + 1}"], "AG"),
        ["agi-count"] = new("rmap-nrext64", i => ["agi 2", "write count 128"], "AGI of AG 2"),
        ["inobt-freecount"] = new("rmap-nrext64", i => ["agi 0", "addr root", "write recs[1].freecount 3"], "inode btree (inobt) of AG 0"),
        ["bnobt-overlap"] = new("default", i => ["agf 2", "addr bnoroot", $"write recs[2].startblock {Field(i, "recs[1].startblock", "agf 2", "addr bnoroot") + 1}"], "AG 2"),
        ["inode-nlink"] = new("rmap-nrext64", i => [$"inode {FileIno(i)}", "write core.nlinkv2 5"], "inode"),
        ["inode-nextents"] = new("rmap-nrext64", i => [$"inode {FileIno(i)}", "write core.nextents 3"], "inode"),
        ["inode-nblocks"] = new("b1k", i => [$"inode {FileIno(i)}", "write core.nblocks 9"], "inode"),
        ["inode-size"] = new("rmap-nrext64", i => [$"inode {FileIno(i)}", "write core.size 99999999"], "inode"),
        ["inode-forkoff"] = new("rmap-nrext64", i => [$"inode {FileIno(i)}", "write core.forkoff 30"], "inode"),
        ["inode-uid"] = new("dir64k", i => [$"inode {FileIno(i)}", "write core.uid 4242"], "inode"),
        ["dirent-inumber"] = new("rmap-nrext64", i => [$"inode {ShortDirIno(i)}", $"write u3.sfdir3.list[0].inumber.i4 {FileIno(i)}"], "inode"),
        ["extent-in-log"] = new("rmap-nrext64", i => [$"inode {FileIno(i)}", $"write u3.bmx[0].startblock {LogStart(i)}"], "inode"),
        // A directory entry naming an ancestor: a second parent, and a loop a naive walk would follow forever.
        ["directory-loop"] = new("rmap-nrext64", i => [$"inode {ShortDirIno(i)}", $"write u3.sfdir3.list[0].inumber.i4 {ParentOf(i, ShortDirIno(i))}"], "directory inode"),
        // An extent btree pointer far outside the volume.
        ["bmbt-pointer"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/extents/many-extents")}", "write u3.bmbt.ptrs[1] 1099511627775"], "extent btree of inode"),
        // Parent pointers (mkfs613): the one pointer of a file below the root names the root instead of its directory,
        // or another generation of its directory, or stops being a parent pointer (a user attribute of the same name).
        ["pptr-parent-inode"] = new("mkfs613", i => [$"inode {PlainFileBelowRoot(i)}", "write a.sfattr.list[0].parent_dir.inumber 128"], "inode"),
        ["pptr-parent-gen"] = new("mkfs613", i => [$"inode {PlainFileBelowRoot(i)}", "write a.sfattr.list[0].parent_dir.gen 12345"], "inode"),
        ["pptr-missing"] = new("mkfs613", i => [$"inode {PlainFileBelowRoot(i)}", "write a.sfattr.list[0].parent 0"], "inode"),
        ["v4-dirent-inumber"] = new("v4", i => [$"inode {ShortDirIno(i)}", $"write u.sfdir3.list[0].inumber.i4 {FileIno(i)}"], "inode"),
        // A short-form entry's offset overlapping the next one's (xfs_dir2_sf_verify: each at or past the end of the one before).
        ["sf-dirent-offset"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/dirs/shortform")}",
            $"write u3.sfdir3.list[0].offset {Field(i, "u3.sfdir3.list[1].offset", $"inode {Ino(i, e => e.Printable == "/dirs/shortform")}") - 8}"], "inode"),
        // A leaf directory's size past the 32 GiB data space.
        ["dir-size-past-data-space"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/dirs/leaf")}", "write core.size 34359738369"], "inode"),
        // LSNs past the log's head (xfs_repair would format the log): a directory free index block and an AGF.
        ["free-block-lsn-ahead"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/dirs/node")}", "dblock 16777216", "write fhdr.hdr.lsn 0x500000000"], "inode"),
        // The DAX flag on a reflinked file: allowed (clean for both).
        ["reflink-dax"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/reflink/clone")}",
            $"write v3.flags2 {Field(i, "v3.flags2", $"inode {Ino(i, e => e.Printable == "/reflink/clone")}") | 1}"], "inode"),
        ["agf-lsn-ahead"] = new("rmap-nrext64", i => ["agf 1", "write lsn 0x500000000"], "AGF"),
        ["symlink-block-lsn-ahead"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/symlinks/remote-1000")}", "dblock 0", "write lsn 0x500000000"], "symlink block"),
        // A remote attribute value block's LSN is not compared with the log head by xfs_repair (clean for both).
        ["remote-attr-lsn-ahead"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/xattrs/remote")}", "ablock 1", "type attr3", "write -d hdr.lsn 0x500000000"], "remote attribute"),
        // Cycle 0x80000001: negative as xfs_repair compares it, so not past the head (clean for both).
        ["free-block-lsn-negative-cycle"] = new("rmap-nrext64", i => [$"inode {Ino(i, e => e.Printable == "/dirs/node")}", "dblock 16777216", "fuzz -d fhdr.hdr.lsn firstbit"], "inode"),
    };

    /// <summary>A file with one name, in a directory other than the root, with no attributes but its parent pointer.</summary>
    private static ulong PlainFileBelowRoot(OracleImage i) =>
        Ino(i, e => e.Type == "file" && e.Nlink == 1 && e.Xattrs.Count == 0 && e.Printable.LastIndexOf('/') > 0);

    private static ulong ParentOf(OracleImage image, ulong directory) =>
        image.Manifest.Entries.First(e => e.IsDirectory && e.Children is { } c && c.Any(x => x.Ino == directory)).Ino;

    private static long Field(OracleImage image, string field, params string[] position) =>
        XfsDb.Number(XfsDb.Fields(XfsDb.Run(image, [.. position, $"print {field}"]))[field]);

    private static ulong LogStart(OracleImage image) =>
        (ulong)XfsDb.Number(XfsDb.Fields(XfsDb.Run(image, "sb 0", "print logstart"))["logstart"]) + 2;

    public static TheoryData<string> FuzzCaseNames() => new(FuzzCases.Keys);

    [Theory]
    [MemberData(nameof(FuzzCaseNames))]
    public void FieldFuzzAgreesWithXfsRepair(string caseName)
    {
        var c = FuzzCases[caseName];
        var image = OracleImages.Ensure(c.Image);
        string copy = OracleImages.CopyTo(image, _dir.FullName, $"{caseName}.img");
        var commands = c.Commands(image);
        string written = XfsDb.Write(copy, image.XfsprogsVersion, commands);
        Assert.DoesNotContain("write error", written, StringComparison.Ordinal);
        Assert.False(DirtyLogScenarios.FilesEqual(copy, image.ImagePath), "xfs_db changed nothing");
        int repair = RepairExit(image.Tool("xfs_repair"), copy);
        var report = CheckWithLimit(copy);
        output.WriteLine($"{caseName}: xfs_db {string.Join(" ; ", commands)} -> xfs_repair -n exit {repair}, xfswin check {(report.IsClean ? "clean" : $"{report.ProblemCount} problems")}");
        Log(report);
        Assert.Equal(repair == 0, report.IsClean);
        if (repair != 0)
            Assert.Contains(report.Problems, p => p.Structure.Contains(c.Structure, StringComparison.Ordinal));
    }

    public static TheoryData<string, int, string> BlocktrashCases()
    {
        var data = new TheoryData<string, int, string>();
        for (int seed = 1; seed <= 3; seed++) data.Add("rmap-nrext64", seed, "-n 4 -3");
        for (int seed = 1; seed <= 8; seed++) data.Add("v4", seed, "-n 1 -2");
        foreach (var name in new[] { "default", "b1k", "dir64k", "mkfs613" })
        {
            for (int seed = 11; seed <= 14; seed++) data.Add(name, seed, "-n 3 -2");
        }
        return data;
    }

    /// <summary>
    /// Random metadata damage with a fixed seed (randomized or flipped bit runs in random metadata
    /// blocks). On V5 the CRCs then fail; V4 blocks (no CRC) get one flipped run, which xfs_repair
    /// finds harmless about half of the time.
    /// </summary>
    [Theory]
    [MemberData(nameof(BlocktrashCases))]
    public void BlocktrashAgreesWithXfsRepair(string name, int seed, string how)
    {
        var image = OracleImages.Ensure(name);
        string copy = OracleImages.CopyTo(image, _dir.FullName, $"{name}-trash{seed}.img");
        XfsDb.Write(copy, image.XfsprogsVersion, "blockget", $"blocktrash {how} -s {seed}");
        Assert.False(DirtyLogScenarios.FilesEqual(copy, image.ImagePath), "blocktrash changed nothing");
        int repair = RepairExit(image.Tool("xfs_repair"), copy);
        var report = CheckWithLimit(copy);
        output.WriteLine($"{name} seed {seed}: xfs_repair -n exit {repair}, xfswin check {(report.IsClean ? "clean" : $"{report.ProblemCount} problems")}");
        Log(report);
        Assert.Equal(repair == 0, report.IsClean);
    }

    /// <summary>A log Linux left dirty: checked after the in-memory replay, clean as the kernel's own replay is.</summary>
    /// <summary>
    /// Dirty-log scenarios of the log tests (a crash mid-workload; copy-on-write staging extents and files
    /// open but unlinked at the crash, which the kernel cleans up at mount; a wrapped log; 4 KiB log
    /// sectors), each judged by xfs_repair -n on the kernel's own replay of the same volume.
    /// </summary>
    [Theory]
    [InlineData("crash")]
    [InlineData("cow")]
    [InlineData("unlinked")]
    [InlineData("wrap")]
    [InlineData("xhdr4k")]
    public void DirtyLogIsCheckedAfterReplayAndCleanAsTheKernelsReplay(string name)
    {
        var scenario = DirtyLogScenarios.Ensure(name);
        Assert.Equal(0, RepairExit("xfs_repair", scenario.KernelImage));
        string copy = DirtyLogScenarios.Copy(scenario.DirtyImage, _dir.FullName, $"{name}.dirty");
        var report = CheckWithLimit(copy);
        Log(report);
        Assert.True(report.IsClean, $"{report.ProblemCount} problems after replay");
        Assert.Contains("replayed in memory", report.Summary!.LogState, StringComparison.Ordinal);
        Assert.True(DirtyLogScenarios.FilesEqual(copy, scenario.DirtyImage), "the check wrote to the volume");
    }

    /// <summary>
    /// Quota counts (the log tests' quota volume, made in user-mode Linux 6.1 with user, group and project quota and
    /// replayed by that kernel): clean as xfs_repair -n finds it; a dquot's counts or header written with xfs_db
    /// (CRC recomputed) are found as xfs_repair -n finds them, by the quota type and id.
    /// </summary>
    [Theory]
    [InlineData("clean", null)]
    [InlineData("dquot -u 1001", "write diskdq.bcount 31")]
    [InlineData("dquot -g 2001", "write diskdq.icount 0")]
    [InlineData("dquot -p 10", "write diskdq.bcount 0")]
    [InlineData("dquot -u 0", "write diskdq.icount 1")]
    [InlineData("dquot -u 1002", "write -d diskdq.id 1003")]
    [InlineData("dquot -g 3002", "write -d diskdq.magic 0x4452")]
    [InlineData("dquot -u 1001", "write diskdq.blk_hardlimit 1")]
    public void QuotaCountsAgreeWithXfsRepair(string position, string? write)
    {
        var scenario = DirtyLogScenarios.Ensure("quota");
        string copy = DirtyLogScenarios.Copy(scenario.KernelImage, _dir.FullName, "quota.img");
        if (write is not null)
        {
            string written = XfsDb.Write(copy, "6.13", position, write);
            Assert.DoesNotContain("error", written, StringComparison.OrdinalIgnoreCase);
            Assert.False(DirtyLogScenarios.FilesEqual(copy, scenario.KernelImage), "xfs_db changed nothing");
        }
        int repair = RepairExit(OracleImages.Tool("xfs_repair", "6.13"), copy);
        var report = CheckWithLimit(copy);
        output.WriteLine($"{position} {write}: xfs_repair -n exit {repair}, xfswin check {(report.IsClean ? "clean" : $"{report.ProblemCount} problems")}");
        Log(report);
        Assert.Equal(repair == 0, report.IsClean);
        if (repair != 0) Assert.Contains(report.Problems, p => p.Structure.Contains("quota file", StringComparison.Ordinal));
    }

    [Fact]
    public void CommandExitsOneWithJsonProblemsAndZeroWhenClean()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var clean = RunCli("check", image.ImagePath, "--json");
        Assert.Equal(0, clean.Code);
        using (var doc = JsonDocument.Parse(clean.Out))
        {
            Assert.True(doc.RootElement.GetProperty("clean").GetBoolean());
            Assert.Equal(0, doc.RootElement.GetProperty("problems").GetArrayLength());
            Assert.True(doc.RootElement.GetProperty("summary").GetProperty("inUseInodes").GetInt64() > 0);
        }
        string copy = OracleImages.CopyTo(image, _dir.FullName, "cli.img");
        XfsDb.Write(copy, image.XfsprogsVersion, "agi 1", "write count 192");
        var bad = RunCli("check", copy, "--json");
        Assert.Equal(1, bad.Code);
        using (var doc = JsonDocument.Parse(bad.Out))
        {
            Assert.False(doc.RootElement.GetProperty("clean").GetBoolean());
            var first = doc.RootElement.GetProperty("problems").EnumerateArray().First(p => p.GetProperty("structure").GetString() == "AGI of AG 1");
            Assert.Equal(1, first.GetProperty("ag").GetInt32());
            Assert.True(first.GetProperty("daddr").GetInt64() > 0);
            Assert.False(string.IsNullOrEmpty(first.GetProperty("message").GetString()));
        }
        var text = RunCli("check", copy, "--no-progress");
        Assert.Equal(1, text.Code);
        Assert.Contains("xfs_repair", text.Out, StringComparison.Ordinal);
    }

    private static (int Code, string Out, string Err) RunCli(params string[] args)
    {
        var stdout = new StringWriter();
        var stderr = new StringWriter();
        var console = new CliConsole { Out = stdout, Error = stderr, StdoutStream = Stream.Null };
        int code = Program.Run(args, console);
        return (code, stdout.ToString(), stderr.ToString());
    }
}

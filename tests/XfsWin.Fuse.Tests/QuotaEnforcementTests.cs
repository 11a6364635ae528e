using System.Globalization;
using System.Text.RegularExpressions;
using XfsWin.Check;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Quota enforcement judged by the kernel: a volume made by mkfs.xfs and given limits, grace periods and default
/// limits by a kernel with XFS quota (user-mode Linux, ../XfsWin.Core.Tests/Journal/uml.sh: the machine's kernel has
/// none) mounted with uquota,gquota,pquota; one copy goes to that kernel, one to <c>xfswin mount -o rw</c>, and the
/// same program (quota-edquot.py) runs against each as root, every step in a process of an ordinary user that writes,
/// creates, sets xattrs until the file system refuses. Where each step stopped and with which errno (EDQUOT, ENOSPC
/// for a project) must be the same; the dquots after (usage, limits, whether grace timers run, and when they expire:
/// the grace period after the crossing) must be what the kernel left on its copy; the kernel mounts our copy with
/// quota and trusts its counts (no quotacheck); xfs_repair -n and xfswin check find nothing.
/// </summary>
public sealed partial class QuotaEnforcementTests(ITestOutputHelper output) : IDisposable
{
    private const string Enforce = "uquota,gquota,pquota";
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-edquot");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string TestsPath(params string[] parts) => Path.Combine([OracleImages.RepoRoot, "tests", .. parts]);

    private static string Scenario => TestsPath("XfsWin.Fuse.Tests", "quota-edquot.py");

    /// <summary>Runs ../XfsWin.Core.Tests/Volume/quota-guest.sh in user-mode Linux with <paramref name="image"/> attached.</summary>
    internal static void Guest(string image, params string[] args)
    {
        var r = XfsWin.TestSupport.Shell.Run("bash", [TestsPath("XfsWin.Core.Tests", "Journal", "uml.sh"), "run", image, "--",
            TestsPath("XfsWin.Core.Tests", "Volume", "quota-guest.sh"), .. args], TimeSpan.FromMinutes(10),
            new Dictionary<string, string> { ["XFSWIN_CACHE"] = OracleImages.CacheRoot });
        if (r.ExitCode != 0) throw new InvalidOperationException($"quota-guest.sh {string.Join(' ', args)} failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
    }

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void Changes_are_refused_where_the_kernel_refuses_them(string xfsprogs)
    {
        string baseImage = Path.Combine(_tmp, "base.img");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "300M", baseImage);
        XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), "-f", "-q", baseImage);
        Guest(baseImage, "limits", Enforce);
        // User 1001 is past its soft block limit (its timer started when the limit was set): its grace time ran out long ago.
        XfsDb.Write(baseImage, "6.13", "dquot -u 1001", "write diskdq.btimer 1000");
        string kernel = Path.Combine(_tmp, "kernel.img"), ours = Path.Combine(_tmp, "ours.img");
        File.Copy(baseImage, kernel);
        File.Copy(baseImage, ours);

        long k0 = DateTimeOffset.UtcNow.ToUnixTimeSeconds();
        string kernelResult = Path.Combine(_tmp, "kernel.json");
        Guest(kernel, "scenario", Enforce, Scenario, kernelResult);
        long k1 = DateTimeOffset.UtcNow.ToUnixTimeSeconds();
        string oursResult = Path.Combine(_tmp, "ours.json");
        // The judge is Linux 6.1 (user-mode), which gives new inodes their attribute fork with their first attribute:
        // ours follow it, so that directories, extent lists and the blocks they take change form at the same points.
        using (var m = new ReadWriteMount(ours, "-o", "allow_other,default_permissions,attr_fork=first"))
        {
            output.WriteLine(m.Output.Trim());
            Assert.DoesNotContain("read-only", m.Output, StringComparison.Ordinal);
            XfsWin.TestSupport.Shell.RunChecked("python3", Scenario, m.MountPoint, oursResult);
            m.Unmount();
        }
        long o1 = DateTimeOffset.UtcNow.ToUnixTimeSeconds();

        string expected = File.ReadAllText(kernelResult), actual = File.ReadAllText(oursResult);
        output.WriteLine($"kernel:\n{expected}\nxfswin:\n{actual}");
        Assert.Equal(expected, actual);
        // The scenario reached every limit it was made for (a run that never hit one would compare nothing).
        Assert.Equal(14, Regex.Count(expected, "EDQUOT"));
        // A rename at the limit goes ahead where the entry fits and is refused where the directory must grow.
        Assert.Matches(@"""u1000 renames at its block limit"",\s*""ok""", expected);
        Assert.Matches(@"""u1000 renames into a full short-form directory at its block limit"",\s*""EDQUOT""", expected);
        Assert.Equal(5, Regex.Count(expected, "ENOSPC"));
        // copy_file_range stops where a piece of the remap no longer fits the quota and returns what it remapped (two
        // 64-block extents and the hole between; the size ends with the second extent).
        Assert.Matches(@"""u1006 copy_file_range of 194 blocks past its block limit"",\s*\[\s*532480,\s*528384,\s*true\s*\]", expected);
        // With the first piece past the limit the bytes are copied instead, up to the limit (32 blocks were left); at
        // the limit the copy fails.
        Assert.Matches(@"""u1006 copy_file_range with its first piece past its block limit"",\s*\[\s*131072,\s*131072,\s*true\s*\]", expected);
        Assert.Matches(@"""u1006 copy_file_range at its block limit"",\s*\[\s*""error"",\s*""EDQUOT""\s*\]", expected);
        Assert.Matches(@"""u1007 copy_file_range with its first piece past its block limit, 22 blocks left"",\s*\[\s*true,\s*true,\s*true,\s*true\s*\]", expected);

        var problems = KernelMadeImages.RepairProblems(ours, xfsprogs);
        Assert.True(problems.Count == 0, string.Join("\n", problems));
        var check = VolumeChecker.Check(ours);
        Assert.True(check.IsClean, string.Join("\n", check.Problems.Select(p => p.ToString())));

        // The kernel mounts our copy with quota and trusts its counts; its reports equal those of its own copy.
        string oursReport = Path.Combine(_tmp, "ours-report"), kernelReport = Path.Combine(_tmp, "kernel-report");
        Guest(ours, "report", Enforce, oursReport);
        Guest(kernel, "report", Enforce, kernelReport);
        Assert.DoesNotContain("Quotacheck", File.ReadAllText(oursReport + ".dmesg"), StringComparison.Ordinal);
        foreach (var t in new[] { "u", "g", "p" })
        {
            string a = File.ReadAllText($"{oursReport}.{t}"), b = File.ReadAllText($"{kernelReport}.{t}");
            output.WriteLine($"{t}: xfswin\n{a}\nkernel\n{b}");
            Assert.Equal(Normalise(b), Normalise(a));
        }

        // Grace timers: running for the same dquots, each expiring one grace period (the id 0 dquot's: 3 days for user
        // blocks, 2 days for user inodes; the 7-day default for groups and projects) after its run crossed the limit.
        foreach (var (type, id) in new[] { ("u", 1000), ("u", 1001), ("u", 1002), ("u", 1003), ("u", 1004), ("g", 1000), ("g", 1002), ("p", 20) })
        {
            var k = Timers(kernel, type, id);
            var o = Timers(ours, type, id);
            output.WriteLine($"{type} {id}: kernel btimer {k.B} itimer {k.I}; xfswin btimer {o.B} itimer {o.I}");
            long bGrace = type == "u" ? 3 * 86400 : 7 * 86400, iGrace = type == "u" ? 2 * 86400 : 7 * 86400;
            AssertTimer(k.B, o.B, bGrace, k0, k1, o1, $"{type} {id} block timer");
            AssertTimer(k.I, o.I, iGrace, k0, k1, o1, $"{type} {id} inode timer");
        }
    }

    /// <summary>
    /// Both stopped, or both running: the kernel's expiring a grace period after a moment of its run, ours after a moment
    /// of ours (bigtime timers hold seconds / 4, rounded up); the expired timer set before the runs stays as it was.
    /// </summary>
    private static void AssertTimer(long kernel, long ours, long grace, long k0, long k1, long o1, string what)
    {
        Assert.True((kernel == 0) == (ours == 0), $"{what}: kernel {kernel}, xfswin {ours}");
        if (kernel == 0) return;
        if (kernel < k0)
        {
            Assert.Equal(kernel, ours);
            return;
        }
        Assert.InRange(kernel, k0 + grace - 4, k1 + grace + 4);
        Assert.InRange(ours, k1 + grace - 4, o1 + grace + 4);
    }

    /// <summary>The block and inode timers of a dquot as seconds since the epoch (0: not running), from xfs_db.</summary>
    private static (long B, long I) Timers(string image, string type, int id)
    {
        var f = XfsDb.Fields(XfsDb.Run(image, "6.13", $"dquot -{type} {id}", "p diskdq.btimer diskdq.itimer"));
        static long Seconds(string v) => v == "0" ? 0 : long.TryParse(v, NumberStyles.None, CultureInfo.InvariantCulture, out long n) ? n
            : new DateTimeOffset(DateTime.ParseExact(Regex.Replace(v, @"\s+", " "), "ddd MMM d HH:mm:ss yyyy", CultureInfo.InvariantCulture), TimeSpan.Zero).ToUnixTimeSeconds();
        return (Seconds(f["diskdq.btimer"]), Seconds(f["diskdq.itimer"]));
    }

    /// <summary>
    /// xfs_quota's reports with running grace timers told apart from stopped ones only: their days depend on the hour,
    /// and xfs_quota pads the column to the widest text ("[1 day]", "[6 days]"), so the spaces before it go too.
    /// </summary>
    private static string Normalise(string report) =>
        GraceRegex().Replace(report.Trim(), m => m.Groups[1].Value == "[--------]" ? " " + m.Groups[1].Value : " [running]");

    [GeneratedRegex(@" +(\[[^\]]*\])")]
    private static partial Regex GraceRegex();
}

using System.Text.RegularExpressions;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Attributes;
using XfsWin.Device;
using XfsWin.Check;
using DirtyLogScenarios = XfsWin.Tests.Journal.DirtyLogScenarios;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Quota accounting kept by the write engine, judged by the kernel: volumes made by mkfs.xfs (6.1 and 6.13), filled
/// and given limits by a kernel with XFS quota (user-mode Linux, ../Journal/uml.sh: the machine's kernel has none)
/// mounted with uqnoenforce,gqnoenforce,pqnoenforce, are changed by the engine (creates by new and known owners,
/// writes, a truncate, chowns, an unlink, a directory, a remote symlink, an xattr block, a file in a project
/// directory, project ids changed through FS_IOC_FSSETXATTR); then the kernel mounts the result with the same
/// options. It must trust our counts (no quotacheck at that mount), and what xfs_quota reports must be what the
/// kernel's own quotacheck counts on a copy whose quota checked flags were cleared. xfs_repair -n (which checks the
/// counts with quotacheck's rules) and xfswin check find nothing, before and after.
/// </summary>
public sealed partial class QuotaKernelTests(ITestOutputHelper output) : IDisposable
{
    private const string NoEnforce = "uqnoenforce,gqnoenforce,pqnoenforce";
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-quota.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string GuestScript => Path.Combine(OracleImages.RepoRoot, "tests", "XfsWin.Core.Tests", "Volume", "quota-guest.sh");

    internal static void Guest(string image, params string[] args)
    {
        var r = Shell.Run("bash", [DirtyLogScenarios.UmlScript, "run", image, "--", GuestScript, .. args], TimeSpan.FromMinutes(10),
            new Dictionary<string, string> { ["XFSWIN_CACHE"] = OracleImages.CacheRoot });
        if (r.ExitCode != 0) throw new InvalidOperationException($"quota-guest.sh {string.Join(' ', args)} failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
    }

    private string Make(string xfsprogs, string mkfsOptions)
    {
        string image = Path.Combine(_tmp, $"q-{xfsprogs}.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        Guest(image, "fill", NoEnforce);
        return image;
    }

    /// <summary>The engine's changes: every kind of change that moves inodes or blocks between dquots, new dquots included.</summary>
    private static void Change(XfsVolume volume) => Change(volume, () => { });

    /// <summary>The changes, calling <paramref name="between"/> after each.</summary>
    private static void Change(XfsVolume volume, Action between)
    {
        Assert.False(volume.IsReadOnly, string.Join("; ", volume.Info.ReadOnlyReasons));
        ulong root = volume.RootInode;
        ulong n = 0, far = 0, p = 0, made = 0, sub = 0, big = 0;
        Action[] steps =
        [
            // New owners (their dquots are made first: 123456's chunk lies far into the quota file).
            () => n = volume.CreateNode(root, "new5000"u8, 0x81A4, 5000, 6000).Inode,
            () => volume.Write(n, 0, new byte[65536]),
            () => far = volume.CreateNode(root, "far"u8, 0x81A4, 123456, 654321).Inode,
            () => volume.Write(far, 0, new byte[3 * 4096 + 17]),
            // A known owner past its soft block limit (its timer starts), an inode of a known owner.
            () => volume.Write(volume.ResolvePath("/u1001"), 10010, new byte[200_000]),
            () => volume.CreateNode(volume.ResolvePath("/d"), "in-d"u8, 0x81A4, 1001, 2001),
            // The project directory: what is made in it counts for project 10.
            () => made = volume.CreateNode(p = volume.ResolvePath("/p"), "made"u8, 0x81A4, 1002, 2002).Inode,
            () => volume.Write(made, 0, new byte[9000]),
            () => sub = volume.MakeDirectory(p, "sub"u8, 0x41ED, 1002, 2002).Inode,
            () => volume.MakeSymlink(sub, "link"u8, System.Text.Encoding.ASCII.GetBytes(new string('t', 900)), 1002, 2002),
            // An xattr too big for the inode: an attribute block.
            () => volume.SetXattr(far, XattrNamespace.User, "big"u8, new byte[3000]),
            // Truncate, chown to new owners, chown + truncate together, chgrp, unlink.
            () => volume.SetAttributes(volume.ResolvePath("/u1002"), new AttributeChanges { Size = 0 }),
            () => volume.SetAttributes(n, new AttributeChanges { Uid = 7000, Gid = 7001 }),
            () => big = volume.CreateNode(root, "big"u8, 0x81A4, 5000, 6000).Inode,
            () => volume.Write(big, 0, new byte[300_000]),
            () => volume.SetAttributes(big, new AttributeChanges { Uid = 1002, Size = 4096 }),
            () => volume.SetAttributes(volume.ResolvePath("/p/inproj"), new AttributeChanges { Gid = 2002 }),
            () => volume.Unlink(p, "made"u8),
            // A rename leaving a whiteout (a new inode of root's, in the project directory).
            () => volume.Rename(p, "inproj"u8, p, "moved"u8, RenameFlags.Whiteout),
            // FS_IOC_FSSETXATTR: a file with blocks into a new project (its dquot is made first), a directory out of one.
            () => ChangeProject(volume, volume.ResolvePath("/u1001"), 20),
            () => ChangeProject(volume, sub, 0),
        ];
        foreach (var step in steps)
        {
            step();
            between();
        }
    }

    private static void ChangeProject(XfsVolume volume, ulong inode, uint project) =>
        volume.SetFileXattr(inode, volume.GetFileXattr(inode) with { ProjectId = project }, FileAttrCaller.Root);

    /// <summary>xfs_quota's reports with running grace timers told apart from stopped ones only (their days depend on the hour).</summary>
    private static string Normalise(string report) => GraceRegex().Replace(report.Trim(), m => m.Value == "[--------]" ? m.Value : "[running]");

    [GeneratedRegex(@"\[[^\]]*\]")]
    private static partial Regex GraceRegex();

    /// <summary>
    /// The kernel mounts <paramref name="image"/> (replaying its log when dirty) with quota and must need no quotacheck;
    /// its reports must equal those of the kernel's own quotacheck of a copy.
    /// </summary>
    private void AssertKernelCountsAgree(string image)
    {
        string ours = Path.Combine(_tmp, "ours");
        Guest(image, "report", NoEnforce, ours);
        string dmesg = File.ReadAllText(ours + ".dmesg");
        output.WriteLine(dmesg);
        Assert.DoesNotContain("Quotacheck", dmesg, StringComparison.Ordinal);
        // The truth: a copy with the checked flags cleared, which the kernel counts again from the inodes.
        string copy = Path.Combine(_tmp, "recount.img");
        File.Copy(image, copy, overwrite: true);
        long qflags = XfsDb.Number(XfsDb.Fields(XfsDb.Run(copy, "6.13", "sb 0", "p qflags"))["qflags"]);
        Assert.Equal(0x54DL, qflags & 0x54D); // accounting and checked bits of all three types, no enforcement
        XfsDb.Write(copy, "6.13", "sb 0", $"write -d qflags {qflags & ~0x524L}");
        string truth = Path.Combine(_tmp, "truth");
        Guest(copy, "report", NoEnforce, truth);
        Assert.Contains("Quotacheck", File.ReadAllText(truth + ".dmesg"), StringComparison.Ordinal);
        foreach (var t in new[] { "u", "g", "p" })
        {
            string a = File.ReadAllText($"{ours}.{t}"), b = File.ReadAllText($"{truth}.{t}");
            output.WriteLine($"{t}: ours\n{a}\nquotacheck\n{b}");
            Assert.Equal(Normalise(b), Normalise(a));
            // Grace timers (xfs_quota shows none without enforcement): running or not as after the kernel's quotacheck.
            var ids = IdRegex().Matches(a).Select(m => m.Groups[1].Value).Distinct().ToList();
            Assert.Equal(Timers(copy, t, ids), Timers(image, t, ids));
        }
    }

    [GeneratedRegex(@"^#(\d+)", RegexOptions.Multiline)]
    private static partial Regex IdRegex();

    /// <summary>For each id, whether its dquot's block and inode timers run (xfs_db).</summary>
    private static List<string> Timers(string image, string type, List<string> ids)
    {
        var commands = ids.SelectMany(id => new[] { $"dquot -{type} {id}", "p diskdq.id diskdq.btimer diskdq.itimer" }).ToArray();
        var lines = XfsDb.Run(image, "6.13", commands).Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        return lines.Select(l => l.StartsWith("diskdq.id", StringComparison.Ordinal) ? l : l.EndsWith(" = 0", StringComparison.Ordinal) ? l : l.Split(" = ")[0] + " running").ToList();
    }

    private void AssertRepairClean(string image, string xfsprogs)
    {
        foreach (var version in new[] { "6.1", "6.13" }.Where(v => v == "6.13" || xfsprogs == "6.1"))
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            output.WriteLine($"xfs_repair -n ({version}): exit {repair.ExitCode}\n{repair.StandardOutput}{repair.StandardError}");
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version} found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
        var check = VolumeChecker.Check(image);
        Assert.True(check.IsClean, string.Join("\n", check.Problems.Select(p => p.ToString())));
    }

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    [InlineData("6.13", "-b size=1024 -m rmapbt=1")]
    public void Counts_kept_by_the_engine_are_what_the_kernel_counts(string xfsprogs, string mkfsOptions)
    {
        string image = Make(xfsprogs, mkfsOptions);
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
            Change(volume);
        AssertRepairClean(image, xfsprogs);
        // The user past its soft block limit has a running block timer; the new owners' dquots are there.
        var dq = XfsDb.Fields(XfsDb.Run(image, "6.13", "dquot -u 1001", "p"));
        Assert.NotEqual("0", dq["diskdq.btimer"]);
        Assert.Equal("0", XfsDb.Fields(XfsDb.Run(image, "6.13", "dquot -u 1002", "p"))["diskdq.btimer"]);
        Assert.Equal("1", XfsDb.Fields(XfsDb.Run(image, "6.13", "dquot -u 123456", "p"))["diskdq.icount"]);
        AssertKernelCountsAgree(image);
        AssertRepairClean(image, xfsprogs);
    }

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void Counts_forced_to_the_log_survive_a_crash(string xfsprogs)
    {
        string image = Make(xfsprogs, "");
        string crashed = Path.Combine(_tmp, "crashed.img");
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Change(volume);
            volume.Sync();
            // The machine dies here: the dquots are in the log, not yet in place.
            File.Copy(image, crashed);
        }
        // Our own replay (in memory) already agrees with quotacheck's rules.
        var check = VolumeChecker.Check(crashed);
        Assert.True(check.IsClean, string.Join("\n", check.Problems.Select(p => p.ToString())));
        // The kernel replays our dquot items at its quota mount and trusts the counts.
        AssertKernelCountsAgree(crashed);
        AssertRepairClean(crashed, xfsprogs);
    }

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void Unlinked_inodes_freed_by_in_place_recovery_leave_their_dquots(string xfsprogs)
    {
        // The kernel crashes with two files unlinked while open; our read-write open replays its log in place and
        // frees them (as the kernel's mount does after its replay), taking them off their owners' dquots.
        string image = Make(xfsprogs, "");
        Guest(image, "crash-unlinked", NoEnforce);
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.False(volume.IsReadOnly, string.Join("; ", volume.Info.ReadOnlyReasons));
            Assert.Equal(2, volume.RecoveredAtOpen?.UnlinkedInodesFreed);
            Change(volume);
        }
        AssertRepairClean(image, xfsprogs);
        AssertKernelCountsAgree(image);
    }

    [Fact]
    public void Crash_points_of_quota_changes_recover_to_exact_counts()
    {
        // The changes run on a recording device with a sync after each; crash images are built at every flush and at
        // points between (all writes since the last flush, none, or a random subset of them). Each is recovered by our
        // read-write open (replaying our log in place, finishing its work, unmounting cleanly); then xfs_repair -n,
        // which checks every dquot's counts against the inodes, and xfswin check must find nothing. The last image
        // goes to the kernel too, which must trust the counts.
        string baseImage = Make("6.13", "");
        string work = Path.Combine(_tmp, "work.img");
        File.Copy(baseImage, work);
        var dev = new RecordingBlockDevice(PartitionSpec.Open(work, null, writable: true));
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true))
            Change(v, v.Sync);
        var events = dev.Snapshot();
        var flushes = Enumerable.Range(0, events.Count).Where(i => events[i].IsFlush).ToList();
        var rng = new Random(4242);
        var points = new List<CrashPoint>();
        for (int i = 0; i < flushes.Count; i += Math.Max(1, flushes.Count / 8))
            points.Add(new CrashPoint(flushes[i], CrashSubset.All, rng.Next()));
        for (int i = 0; i < 6; i++)
            points.Add(new CrashPoint(rng.Next(1, events.Count), i % 2 == 0 ? CrashSubset.Random : CrashSubset.None, rng.Next()));
        points.Add(new CrashPoint(events.Count, CrashSubset.All, 0));
        string image = Path.Combine(_tmp, "crash.img");
        var failures = new List<string>();
        foreach (var crash in points)
        {
            File.Delete(image);
            CrashImage.Build(baseImage, events, CrashImage.DurableSectors(events, crash), image);
            using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
                Assert.False(v.IsReadOnly);
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
            var check = VolumeChecker.Check(image);
            if (repair.ExitCode != 0 || !check.IsClean)
                failures.Add($"{crash}: xfs_repair -n exit {repair.ExitCode}\n{repair.StandardOutput}\n" + string.Join("\n", check.Problems.Take(10)));
        }
        output.WriteLine($"{points.Count} crash points of {events.Count} events ({flushes.Count} flushes)");
        Assert.True(failures.Count == 0, string.Join("\n\n", failures));
        AssertKernelCountsAgree(image);
    }

    [Fact]
    public void A_volume_with_enforced_limits_is_written_with_its_counts_kept()
    {
        // Last mounted with enforcement (the superblock's enforcement bits set): read-write; the changes stay within
        // the limits the fill set (a soft limit passed starts a timer, no hard limit is reached), so all succeed.
        string image = Path.Combine(_tmp, "enforced.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        Guest(image, "fill", "uquota,gquota,pquota");
        Assert.Equal(0x282L, XfsDb.Number(XfsDb.Fields(XfsDb.Run(image, "6.13", "sb 0", "p qflags"))["qflags"]) & 0x282); // user, group and project enforcement
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
            Change(volume);
        AssertRepairClean(image, "6.13");
        Assert.NotEqual("0", XfsDb.Fields(XfsDb.Run(image, "6.13", "dquot -u 1001", "p"))["diskdq.btimer"]);
        AssertKernelCountsAgree(image);
    }
}

using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text.RegularExpressions;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The differential harness (<see cref="DifferentialTests"/>: every operation kind, the kernel's XFS against
/// <c>xfswin mount -o rw</c>) on the geometries the default volumes do not have: 1 KiB and 64 KiB blocks, 64 KiB
/// directory blocks, the smallest log the geometry allows (2.5 MiB: 1 KiB blocks, no reflink) with a sequence long enough to wrap
/// it (xfs_logprint must find records of a later cycle), a nearly full volume whose free space is in 64 KiB pieces, and mkfs.xfs 6.13 with
/// exchange-range and the metadata directory tree (its defaults add rmapbt and reflink), with and without parent
/// pointers, parent pointers under a sequence weighted to links, renames, exchanges and whiteouts, and user quota
/// accounted and enforced (the engine charges and checks its dquots; the machine's kernel, without quota support,
/// does neither, and with no limit reached both trees must still agree).
/// <para>
/// A geometry whose volume carries a feature the write path does not keep (<see cref="WriteGate.Unmaintained"/>) checks
/// the refusal instead (the mount says why, a create fails with EROFS, the image is unchanged): quota files in the
/// metadata directory here. Parent pointers are kept, and their cases compare them as the kernel lists them.
/// </para>
/// </summary>
public sealed partial class DifferentialGeometryTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-diffgeo");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>A volume to run on; <see cref="Weighted"/> are drawn that many times more often (fsyncs: a checkpoint each);
    /// <see cref="ReadOnlyFor"/> names the unmaintained feature the mount must refuse the volume for.</summary>
    private sealed record Geometry(string Xfsprogs, string[] MkfsOptions, string Size, int Seed, int Operations, VfsOp[]? Weighted = null,
        string? ReadOnlyFor = null);

    private static readonly Dictionary<string, Geometry> Geometries = new()
    {
        ["b1k"] = new("6.1", ["-b", "size=1024"], "300M", 31, 300),
        ["b64k"] = new("6.13", ["-b", "size=65536"], "1G", 32, 300),
        ["dir64k"] = new("6.1", ["-n", "size=65536"], "300M", 33, 300),
        ["small-log"] = new("6.1", ["-b", "size=1024", "-m", "reflink=0"], "300M", 34, 32000,
            [.. Enumerable.Repeat(VfsOp.Fsync, 12), .. Enumerable.Repeat(VfsOp.Write, 4), .. Enumerable.Repeat(VfsOp.Chmod, 4), VfsOp.Chown, VfsOp.Chown,
             VfsOp.Utime, VfsOp.Utime, VfsOp.Create, VfsOp.Mkdir, VfsOp.SetXattr]),
        ["nearly-full"] = new("6.1", [], "300M", 35, 300),
        ["exchange-metadir"] = new("6.13", ["-i", "exchange=1", "-m", "metadir=1"], "300M", 36, 300),
        ["parent-exchange-metadir"] = new("6.13", ["-n", "parent=1", "-i", "exchange=1", "-m", "metadir=1"], "300M", 37, 300),
        // Parent pointers under a sequence weighted to the operations that change them.
        ["parent-namespace"] = new("6.13", ["-n", "parent=1"], "300M", 38, 300,
            [.. Enumerable.Repeat(VfsOp.Create, 4), .. Enumerable.Repeat(VfsOp.Mkdir, 2), .. Enumerable.Repeat(VfsOp.Link, 6),
             .. Enumerable.Repeat(VfsOp.Rename, 3), .. Enumerable.Repeat(VfsOp.RenameExchange, 3), .. Enumerable.Repeat(VfsOp.RenameWhiteout, 2),
             VfsOp.Symlink, VfsOp.Symlink]),
        // User, group and project quota accounted and enforced, with default limits (a kernel with quota mounted the
        // filled volume with uquota,gquota,pquota: quotacheck, then limits on the id 0 dquots): kept.
        ["quota-enforced"] = new("6.1", [], "300M", 39, 300),
        // Quota files in the metadata directory (mkfs -m metadir=1,uquota): not kept, so the mount must refuse.
        ["metadir-quota"] = new("6.13", ["-m", "metadir=1,uquota"], "300M", 40, 0, ReadOnlyFor: "quota files in the metadata directory"),
    };

    public static TheoryData<string> Names => [.. Geometries.Keys];

    [Theory]
    [MemberData(nameof(Names))]
    public void Every_operation_kind_matches_the_kernel_on(string geometry)
    {
        var g = Geometries[geometry];
        var options = g.MkfsOptions.ToList();
        if (geometry == "small-log") options.AddRange(["-l", $"size={MinimumLogBlocks(g.Xfsprogs, g.MkfsOptions)}b"]);
        var baseImage = KernelMadeImages.Make(_tmp, g.Xfsprogs, "base.img", options, g.Size);
        if (geometry == "nearly-full") FillFragmented(baseImage, leaveFree: 48L << 20);
        // The kernel here has no quota support. For quota-enforced, one that has (user-mode Linux) counts the filled
        // volume and sets default limits; the counts are marked checked, so xfs_repair -n checks ours at the end.
        if (geometry == "quota-enforced")
        {
            QuotaEnforcementTests.Guest(baseImage, "defaults", "uquota,gquota,pquota");
            Assert.Equal("0x7cf", XfsWin.TestSupport.XfsDb.Fields(XfsWin.TestSupport.XfsDb.Run(baseImage, g.Xfsprogs, "sb 0", "p qflags"))["qflags"]);
        }
        // The fill's mount turned quota off; accounting and enforcement go back on as a quota mount leaves them
        // (counts not marked checked: nothing claims they are exact).
        if (geometry == "metadir-quota")
            XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("xfs_db", g.Xfsprogs), "-x", "-c", "sb 0", "-c", "write qflags 3", baseImage);

        var unmaintained = WriteGate.Unmaintained(ReadSector(baseImage));
        Assert.Equal(g.ReadOnlyFor is not null, unmaintained.Count > 0);
        if (g.ReadOnlyFor is not null)
        {
            Assert.Contains(unmaintained, f => f.Name == g.ReadOnlyFor);
            AssertRefusedReadOnly(baseImage, g.Xfsprogs, unmaintained);
            return;
        }

        using var harness = new DifferentialTests(output);
        Action<string>? check = geometry == "small-log" ? AssertLogWrapped : null;
        harness.RunOn(baseImage, g.Seed, [.. DifferentialTests.All, .. g.Weighted ?? []], g.Xfsprogs, g.Operations, afterOurUnmount: check);
    }

    private static byte[] ReadSector(string image)
    {
        var sector = new byte[512];
        using var f = File.OpenRead(image);
        f.ReadExactly(sector);
        return sector;
    }

    /// <summary>The smallest log mkfs.xfs accepts for a 300 MiB volume with <paramref name="mkfsOptions"/>, in blocks (it names it when asked for less).</summary>
    private int MinimumLogBlocks(string xfsprogs, string[] mkfsOptions)
    {
        string probe = Path.Combine(_tmp, "probe.img");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "300M", probe);
        var r = XfsWin.TestSupport.Shell.Run(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions, "-l", "size=2m", probe], environment: KernelMadeImages.MkfsTestMode);
        File.Delete(probe);
        var m = MinimumLog().Match(r.StandardOutput + r.StandardError);
        Assert.True(m.Success, $"mkfs did not name its minimum log size:\n{r.StandardOutput}{r.StandardError}");
        output.WriteLine($"smallest log: {m.Groups[1].Value} blocks");
        return int.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture);
    }

    [GeneratedRegex(@"(?:minimum size is|must be at least) (\d+) blocks")]
    private static partial Regex MinimumLog();

    /// <summary>Our log, after our clean unmount, holds records of a cycle after the first: the sequence wrapped it (xfs_logprint's view).</summary>
    private void AssertLogWrapped(string image)
    {
        var print = XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("xfs_logprint", "6.13"), "-d", image).StandardOutput;
        var headers = HeaderCycle().Matches(print)
            .Select(m => (Block: long.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture), Cycle: int.Parse(m.Groups[2].Value, System.Globalization.CultureInfo.InvariantCulture)))
            .ToList();
        int maxCycle = headers.Select(h => h.Cycle).DefaultIfEmpty(0).Max();
        long head = headers.Where(h => h.Cycle == maxCycle).Select(h => h.Block).DefaultIfEmpty(0).Max();
        output.WriteLine($"{headers.Count} log records; the head is in cycle {maxCycle} at block {head}");
        Assert.True(maxCycle >= 2, $"the log never wrapped (records of cycle {maxCycle} at most)");
    }

    [GeneratedRegex(@"(\d+) HEADER Cycle (\d+)")]
    private static partial Regex HeaderCycle();

    /// <summary>
    /// Fills the volume with 64 KiB files through a kernel mount until it is full, then removes files spread over the
    /// whole volume until <paramref name="leaveFree"/> bytes are free: what is left free is in pieces of about 64 KiB in
    /// every AG.
    /// </summary>
    private void FillFragmented(string image, long leaveFree)
    {
        using var mount = LoopMount.Mount(image, readOnly: false);
        string dir = Path.Combine(mount.MountPoint, "filler");
        Directory.CreateDirectory(dir);
        var piece = new byte[65536];
        new Random(7).NextBytes(piece);
        int count = 0;
        try
        {
            for (; ; count++) File.WriteAllBytes(Path.Combine(dir, $"p{count:D5}"), piece);
        }
        catch (IOException)
        {
            // ENOSPC: full.
        }
        long Free() => new DriveInfo(mount.MountPoint).AvailableFreeSpace;
        int removed = 0;
        for (int stride = 8; Free() < leaveFree && stride >= 1; stride /= 2)
        {
            for (int i = stride / 2; i < count && Free() < leaveFree; i += stride)
            {
                string p = Path.Combine(dir, $"p{i:D5}");
                if (!File.Exists(p)) continue;
                File.Delete(p);
                removed++;
                if (removed % 64 == 0) XfsWin.TestSupport.Shell.RunChecked("sync", "-f", mount.MountPoint);
            }
            XfsWin.TestSupport.Shell.RunChecked("sync", "-f", mount.MountPoint);
        }
        output.WriteLine($"filled with {count} files of 64 KiB, removed {removed}: {Free() >> 20} MiB free");
        Assert.True(Free() >= leaveFree && Free() < leaveFree + (16L << 20), $"free space after the fill: {Free()} bytes");
    }

    /// <summary>
    /// A volume with a feature the write path does not keep: <c>xfswin mount -o rw</c> mounts it read-only and says
    /// why, changes through it fail with EROFS, and nothing of the image changes.
    /// </summary>
    private unsafe void AssertRefusedReadOnly(string image, string xfsprogs, IReadOnlyList<UnmaintainedFeature> unmaintained)
    {
        string before = Hash(image);
        using (var m = new ReadWriteMount(image))
        {
            output.WriteLine(m.Output.Trim());
            Assert.Contains("mounting read-only although 'rw' was asked for", m.Output, StringComparison.Ordinal);
            foreach (var f in unmaintained) Assert.Contains(f.Name, m.Output, StringComparison.Ordinal);
            int fd = Libc.open(m["new-file"], Libc.O_CREAT | Libc.O_WRONLY, 0x1A4);
            int errno = Marshal.GetLastPInvokeError();
            if (fd >= 0) Libc.close(fd);
            Assert.True(fd < 0 && errno == 30, $"create through the read-only mount: fd {fd}, errno {errno} (EROFS expected)");
            Assert.NotEqual(0, Libc.mkdir(m["new-dir"], 0x1ED));
            Assert.Equal("alpha", File.ReadAllText(m["a"]));
            m.Unmount();
        }
        Assert.Equal(before, Hash(image));
        var problems = KernelMadeImages.RepairProblems(image, xfsprogs);
        Assert.True(problems.Count == 0, string.Join("\n", problems));
    }

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(SHA256.HashData(f));
    }
}

using System.Security.Cryptography;
using XfsWin.TestSupport;
using XfsDb = XfsWin.TestSupport.XfsDb;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>xfswin grow MOUNTPOINT</c> on a volume <c>xfswin mount -o rw</c> serves: a kernel-made 300 MiB volume (four
/// whole AGs) grows while mounted, first by new AGs whose last is short, then by extending that short last AG in
/// place; files written through the mount afterwards take more space than the volume had free before (so they land
/// in the new space) until it is full. After the unmount xfs_repair -n (6.1 and 6.13) is clean and the kernel
/// mounts the image with the new size and every file, byte for byte. A mounted volume shrinks the free tail of its
/// last AG and changes its imaxpct as the kernel's xfs_growfs does on the same starting image, and a volume in a
/// partition grows online once the partition was extended.
/// </summary>
public sealed class OnlineGrowTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-onlinegrow");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    private static (long Blocks, long Free, long BlockSize) Statfs(string path)
    {
        var f = Shell.Bash($"stat -f -c '%b %f %S' {Q(path)}").Trim().Split(' ');
        return (long.Parse(f[0]), long.Parse(f[1]), long.Parse(f[2]));
    }

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void A_mounted_volume_grows_by_new_AGs_and_its_short_last_AG_and_writes_fill_the_new_space(string xfsprogs)
    {
        var image = KernelMadeImages.Make(_tmp, xfsprogs);
        const long Mib = 1024 * 1024;
        var hashes = new Dictionary<string, string>();
        long blocksBefore, blocksAfterFirst, blocksAfterSecond, freeBeforeGrow, written = 0;
        using (var m = new ReadWriteMount(image))
        {
            File.WriteAllBytes(m["before"], RandomNumberGenerator.GetBytes(3_000_000));
            hashes["before"] = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(m["before"])));
            (blocksBefore, freeBeforeGrow, _) = Statfs(m.MountPoint);

            // 300 MiB -> 420 MiB: AG 4 whole, AG 5 short (11520 of 19200 blocks).
            Shell.Bash($"truncate -s 430M {Q(image)}");
            var first = Shell.RunXfswin(["grow", "--no-progress", "-D", "420m", m.MountPoint]);
            output.WriteLine(first.Both);
            Assert.True(first.ExitCode == 0, first.Both);
            Assert.Contains("(online)", first.Stdout, StringComparison.Ordinal);
            blocksAfterFirst = Statfs(m.MountPoint).Blocks;
            Assert.Equal(blocksBefore + 120 * Mib / 4096, blocksAfterFirst);

            // Without -D: the rest of the (extended) image, into the short last AG.
            var second = Shell.RunXfswin(["grow", "--no-progress", m.MountPoint]);
            output.WriteLine(second.Both);
            Assert.True(second.ExitCode == 0, second.Both);
            blocksAfterSecond = Statfs(m.MountPoint).Blocks;
            Assert.Equal(blocksAfterFirst + 10 * Mib / 4096, blocksAfterSecond);

            // A mounted volume sheds no whole AG (375 MiB is AGs 0-4 exactly: AG 5 would go).
            var shrink = Shell.RunXfswin(["grow", "--no-progress", "-D", "375m", m.MountPoint]);
            Assert.NotEqual(0, shrink.ExitCode);
            Assert.Contains("would remove whole allocation groups", shrink.Both, StringComparison.Ordinal);

            // Fill: 8 MiB files until ENOSPC; together more than was free before the grow.
            for (int i = 0; ; i++)
            {
                var data = RandomNumberGenerator.GetBytes(8 * (int)Mib);
                try
                {
                    File.WriteAllBytes(m[$"fill{i}"], data);
                }
                catch (IOException)
                {
                    File.Delete(m[$"fill{i}"]);
                    break;
                }
                hashes[$"fill{i}"] = Convert.ToHexString(SHA256.HashData(data));
                written += data.Length;
            }
            output.WriteLine($"written after the grows: {written / Mib} MiB; free before them: {freeBeforeGrow * 4096 / Mib} MiB");
            Assert.True(written > freeBeforeGrow * 4096 + 100 * Mib, $"{written} bytes written, {freeBeforeGrow * 4096} were free before the grow");
            m.Unmount();
        }

        var problems = KernelMadeImages.RepairProblems(image, xfsprogs);
        Assert.True(problems.Count == 0, string.Join("\n", problems));
        using var k = LoopMount.Mount(image, readOnly: true);
        Assert.Equal(blocksAfterSecond, Statfs(k.MountPoint).Blocks);
        foreach (var (name, hash) in hashes)
            Assert.Equal(hash, Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(Path.Combine(k.MountPoint, name)))));
        Assert.Equal("alpha", File.ReadAllText(Path.Combine(k.MountPoint, "a")));
        Assert.Equal(70000, new FileInfo(Path.Combine(k.MountPoint, "big")).Length);
    }

    private static string Db(string image, params string[] commands) =>
        Shell.Run(OracleImages.Tool("xfs_db", "6.13"), ["-r", .. commands.SelectMany(c => new[] { "-c", c }), image]).Stdout;

    private static Dictionary<string, string> Sb(string image, uint ag = 0) => XfsDb.Fields(Db(image, $"sb {ag}", "print"));

    /// <summary>AGF and AGI of <paramref name="ag"/> as xfs_db prints them, without CRCs and LSNs.</summary>
    private static string[] AgHeaders(string image, uint ag) =>
        Db(image, $"agf {ag}", "print", $"agi {ag}", "print").Split('\n')
            .Where(l => !l.StartsWith("crc", StringComparison.Ordinal) && !l.StartsWith("lsn", StringComparison.Ordinal)).ToArray();

    private static void KernelGrowfs(string image, params string[] args)
    {
        using var k = LoopMount.Mount(image, readOnly: false);
        var r = Shell.Run(OracleImages.Tool("xfs_growfs", "6.13"), [.. args, k.MountPoint]);
        Assert.True(r.ExitCode == 0, $"xfs_growfs {string.Join(' ', args)}: {r.Both}");
    }

    private static string CopyImage(string from, string to)
    {
        Shell.Bash($"cp --sparse=always {Q(from)} {Q(to)}");
        return to;
    }

    private static readonly string[] SbFields = ["dblocks", "agcount", "agblocks", "fdblocks", "icount", "ifree", "imax_pct"];

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void A_mounted_volume_shrinks_its_last_AGs_free_tail_and_sets_imaxpct_as_the_kernels_xfs_growfs_does(string xfsprogs)
    {
        // 300 MiB (four AGs of 19200 blocks), grown by the kernel by 3000 blocks: a new AG 4 that is free by construction.
        var image = KernelMadeImages.Make(_tmp, xfsprogs);
        const ulong Grown = 76800 + 3000;
        Shell.Bash($"truncate -s {Grown * 4096} {Q(image)}");
        KernelGrowfs(image, "-D", Grown.ToString());
        var free = Db(image, "freesp -d -a 4").Split('\n').Select(l => l.Split(' ', StringSplitOptions.RemoveEmptyEntries))
            .Where(f => f.Length == 3 && f[0] == "4").Select(f => (Start: uint.Parse(f[1]), Length: uint.Parse(f[2]))).ToList();
        Assert.Contains(free, e => e.Start + e.Length == 3000 && e.Length > 2900);

        // Our mount writes first (its allocator then holds the state the shrink starts from); the kernel's copy is taken after.
        var hashes = new Dictionary<string, string>();
        using (var m = new ReadWriteMount(image))
        {
            var data = RandomNumberGenerator.GetBytes(4_000_000);
            File.WriteAllBytes(m["written"], data);
            hashes["written"] = Convert.ToHexString(SHA256.HashData(data));
            m.Unmount();
        }
        string theirs = CopyImage(image, Path.Combine(_tmp, "theirs.img")), beyond = CopyImage(image, Path.Combine(_tmp, "beyond.img"));
        // The smallest size, as the offline shrink of a copy finds it (the limit named when 64 blocks are too few).
        string probeCopy = CopyImage(image, Path.Combine(_tmp, "probe.img"));
        var offline = Shell.RunXfswin(["grow", "--no-progress", "-D", (76800 + 64).ToString(), probeCopy]);
        var named = System.Text.RegularExpressions.Regex.Match(offline.Both, @"smallest size is (\d+)");
        Assert.True(offline.ExitCode == 0 || named.Success, offline.Both);
        ulong smallest = offline.ExitCode == 0 ? 76800 + 64 : ulong.Parse(named.Groups[1].Value);
        Assert.True(smallest < Grown - 2000, $"smallest size {smallest}: most of AG 4 should go");
        long blocksBefore;
        using (var m = new ReadWriteMount(image))
        {
            blocksBefore = Statfs(m.MountPoint).Blocks;
            // Less than the smallest size is refused (a whole AG, or past the limit named), and changes nothing.
            var probe = Shell.RunXfswin(["grow", "--no-progress", "-D", (smallest - 1).ToString(), m.MountPoint]);
            Assert.NotEqual(0, probe.ExitCode);
            Assert.Contains(smallest == 76800 + 64 ? "would remove whole allocation groups" : $"smallest size is {smallest}", probe.Both, StringComparison.Ordinal);
            Assert.Equal(blocksBefore, Statfs(m.MountPoint).Blocks);

            var shrink = Shell.RunXfswin(["grow", "--no-progress", "-D", smallest.ToString(), "-m", "40", m.MountPoint]);
            output.WriteLine(shrink.Both);
            Assert.True(shrink.ExitCode == 0, shrink.Both);
            Assert.Contains("(shrunk, online)", shrink.Stdout, StringComparison.Ordinal);
            Assert.Contains("inode max percent changed from 25 to 40", shrink.Stdout, StringComparison.Ordinal);
            Assert.Equal(blocksBefore - (long)(Grown - smallest), Statfs(m.MountPoint).Blocks);
            m.Unmount();
        }
        // The kernel on the same starting image: the same size, and a block less refused.
        KernelGrowfs(theirs, "-D", smallest.ToString(), "-m", "40");
        using (var k = LoopMount.Mount(beyond, readOnly: false))
            Assert.NotEqual(0, Shell.Run(OracleImages.Tool("xfs_growfs", "6.13"), ["-D", (smallest - 1).ToString(), k.MountPoint]).ExitCode);
        var ours = Sb(image);
        var kernel = Sb(theirs);
        foreach (var f in SbFields) Assert.True(ours[f] == kernel[f], $"sb {f}: ours {ours[f]}, the kernel's {kernel[f]}");
        Assert.Equal(AgHeaders(theirs, 4), AgHeaders(image, 4));
        for (uint ag = 1; ag < 5; ag++)
        {
            var copy = Sb(image, ag);
            Assert.True(copy["dblocks"] == ours["dblocks"] && copy["imax_pct"] == "40", $"secondary superblock {ag}: {copy["dblocks"]} blocks, imax_pct {copy["imax_pct"]}");
        }
        Assert.Empty(KernelMadeImages.RepairProblems(image, xfsprogs));

        // Mounted again: it fills up within the new size; the kernel then shows it and every file.
        using (var m = new ReadWriteMount(image))
        {
            for (int i = 0; ; i++)
            {
                var data = RandomNumberGenerator.GetBytes(4 << 20);
                try
                {
                    File.WriteAllBytes(m[$"fill{i}"], data);
                }
                catch (IOException)
                {
                    File.Delete(m[$"fill{i}"]);
                    break;
                }
                hashes[$"fill{i}"] = Convert.ToHexString(SHA256.HashData(data));
            }
            m.Unmount();
        }
        var problems = KernelMadeImages.RepairProblems(image, xfsprogs);
        Assert.True(problems.Count == 0, string.Join("\n", problems));
        using var km = LoopMount.Mount(image, readOnly: true);
        Assert.Equal(blocksBefore - (long)(Grown - smallest), Statfs(km.MountPoint).Blocks);
        foreach (var (name, hash) in hashes)
            Assert.Equal(hash, Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(Path.Combine(km.MountPoint, name)))));
    }

    [Fact]
    public void A_volume_in_a_partition_grows_online_once_the_partition_was_extended()
    {
        // A kernel-made volume copied into partition 2 of a GPT disk image.
        var volume = KernelMadeImages.Make(_tmp, "6.13", "part.img");
        string disk = Path.Combine(_tmp, "disk.img");
        Shell.Bash($"truncate -s 400M {Q(disk)} && sgdisk -n 1:2048:+40M -n 2:0:+300M {Q(disk)} >/dev/null");
        long start = long.Parse(Shell.Bash($"sgdisk -i 2 {Q(disk)} | sed -n 's/^First sector: \\([0-9]*\\).*/\\1/p'").Trim()) * 512;
        Shell.Bash($"dd if={Q(volume)} of={Q(disk)} bs=1M seek={start} oflag=seek_bytes conv=notrunc,sparse status=none");
        string firstPartition = Shell.Bash($"dd if={Q(disk)} bs=1M skip=1 count=40 status=none | sha256sum");
        string theirs = CopyImage(volume, Path.Combine(_tmp, "theirs.img"));
        string ours = Path.Combine(_tmp, "ours.img");
        long partitionBytes = 0;
        void ExtractPartition() =>
            Shell.Bash($"rm -f {Q(ours)}; dd if={Q(disk)} of={Q(ours)} bs=1M skip={start} iflag=skip_bytes,count_bytes count={partitionBytes} conv=sparse status=none");

        using (var m = new ReadWriteMount(disk + "@2"))
        {
            long before = Statfs(m.MountPoint).Blocks;
            // The disk grows, and partition 2 with it: the same start, to the end of the disk.
            Shell.Bash($"truncate -s 600M {Q(disk)} && sgdisk -e -d 2 -n 2:{start / 512}:0 {Q(disk)} >/dev/null");
            partitionBytes = long.Parse(Shell.Bash($"sgdisk -i 2 {Q(disk)} | sed -n 's/^Partition size: \\([0-9]*\\) sectors.*/\\1/p'").Trim()) * 512;
            Assert.True(partitionBytes > 500L << 20, $"partition 2 is {partitionBytes} bytes");
            var grow = Shell.RunXfswin(["grow", "--no-progress", m.MountPoint]);
            output.WriteLine(grow.Both);
            Assert.True(grow.ExitCode == 0, grow.Both);
            Assert.Contains("(online)", grow.Stdout, StringComparison.Ordinal);
            Assert.True(Statfs(m.MountPoint).Blocks > before + (200L << 20 >> 12), "statfs does not show the grown size");
            m.Unmount();
        }
        Assert.Contains("No problems found", Shell.Bash($"sgdisk -v {Q(disk)}"), StringComparison.Ordinal);
        Assert.Equal(firstPartition, Shell.Bash($"dd if={Q(disk)} bs=1M skip=1 count=40 status=none | sha256sum"));
        ExtractPartition();

        // The kernel grows the same volume to the same size: the same geometry, counters and new AG headers.
        ulong target = (ulong)partitionBytes / 512 / 2 * 2 / 8;
        Shell.Bash($"truncate -s {partitionBytes} {Q(theirs)}");
        KernelGrowfs(theirs, "-D", target.ToString());
        var a = Sb(ours);
        var b = Sb(theirs);
        Assert.Equal(target.ToString(), a["dblocks"]);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        for (uint ag = 3; ag < uint.Parse(a["agcount"]); ag++) Assert.Equal(AgHeaders(theirs, ag), AgHeaders(ours, ag));
        Assert.Empty(KernelMadeImages.RepairProblems(ours, "6.13"));

        // Mounted again, it writes into the new size; the kernel sees the file.
        using (var m = new ReadWriteMount(disk + "@2"))
        {
            File.WriteAllBytes(m["after"], new byte[200 << 20]);
            m.Unmount();
        }
        ExtractPartition();
        Assert.Empty(KernelMadeImages.RepairProblems(ours, "6.13"));
        using var k = LoopMount.Mount(ours, readOnly: true);
        Assert.Equal(200 << 20, new FileInfo(Path.Combine(k.MountPoint, "after")).Length);
        Assert.Equal("alpha", File.ReadAllText(Path.Combine(k.MountPoint, "a")));
    }
}

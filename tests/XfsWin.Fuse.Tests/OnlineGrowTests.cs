using System.Security.Cryptography;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>xfswin grow MOUNTPOINT</c> on a volume <c>xfswin mount -o rw</c> serves: a kernel-made 300 MiB volume (four
/// whole AGs) grows while mounted, first by new AGs whose last is short, then by extending that short last AG in
/// place; files written through the mount afterwards take more space than the volume had free before (so they land
/// in the new space) until it is full. After the unmount xfs_repair -n (6.1 and 6.13) is clean and the kernel
/// mounts the image with the new size and every file, byte for byte.
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

            // A mounted volume does not shrink.
            var shrink = Shell.RunXfswin(["grow", "--no-progress", "-D", "400m", m.MountPoint]);
            Assert.NotEqual(0, shrink.ExitCode);
            Assert.Contains("only grows", shrink.Both, StringComparison.Ordinal);

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
}

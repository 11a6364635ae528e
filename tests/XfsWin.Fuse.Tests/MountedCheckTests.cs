using System.Security.Cryptography;
using System.Text.Json;
using XfsWin.TestSupport;
using XfsDb = XfsWin.TestSupport.XfsDb;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>xfswin check MOUNTPOINT</c> on a volume <c>xfswin mount -o rw</c> serves: the server holds every other request off,
/// writes everything in place and checks the device; a clean volume in use (files being written meanwhile, a file
/// unlinked while open) is clean, as <c>xfs_repair -n</c> finds it after the unmount, and damage written behind the
/// mount's back is found. A source Linux mounted read-write is refused, as <c>xfs_repair -n</c> refuses a mounted
/// device; one mounted read-only is checked; an image an xfswin server has mounted read-write is checked through its
/// mount point only.
/// </summary>
public sealed class MountedCheckTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-mountedcheck");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void A_volume_in_use_checks_clean_through_its_mount_point_and_damage_behind_it_is_found(string xfsprogs)
    {
        var image = KernelMadeImages.Make(_tmp, xfsprogs);
        using (var m = new ReadWriteMount(image))
        {
            // A file unlinked while open stays on the AGI unlinked lists until its last close: expected while mounted.
            using var held = new FileStream(m["held"], FileMode.CreateNew, FileAccess.ReadWrite);
            held.Write(RandomNumberGenerator.GetBytes(300_000));
            held.Flush();
            File.Delete(m["held"]);

            // Writers keep going while the check runs; their requests wait for it.
            using var stop = new CancellationTokenSource();
            int written = 0;
            Exception? failed = null;
            var writer = new Thread(() =>
            {
                try
                {
                    Directory.CreateDirectory(m["busy"]);
                    for (int i = 0; !stop.IsCancellationRequested; i++)
                    {
                        File.WriteAllBytes(m[$"busy/f{i % 40}"], new byte[1000 + i % 5000]);
                        if (i % 3 == 0) File.Delete(m[$"busy/f{(i + 7) % 40}"]);
                        Interlocked.Increment(ref written);
                    }
                }
                catch (Exception e) when (e is IOException or UnauthorizedAccessException)
                {
                    failed = e;
                }
            });
            writer.Start();
            SpinWait.SpinUntil(() => Volatile.Read(ref written) > 50, TimeSpan.FromMinutes(1));
            var check = Shell.RunXfswin(["check", "--no-progress", m.MountPoint]);
            var json = Shell.RunXfswin(["check", "--json", m.MountPoint]);
            int before = Volatile.Read(ref written);
            SpinWait.SpinUntil(() => Volatile.Read(ref written) > before + 20, TimeSpan.FromMinutes(1));
            stop.Cancel();
            writer.Join();
            Assert.Null(failed);
            output.WriteLine(check.Both);
            Assert.True(check.ExitCode == 0, check.Both);
            Assert.Contains("checked while mounted read-write by xfswin", check.Stdout, StringComparison.Ordinal);
            Assert.Contains("no problems found", check.Stdout, StringComparison.Ordinal);
            Assert.True(json.ExitCode == 0, json.Both);
            using (var doc = JsonDocument.Parse(json.Stdout))
            {
                Assert.True(doc.RootElement.GetProperty("clean").GetBoolean());
                Assert.Contains("in use by this mount", doc.RootElement.GetProperty("summary").GetProperty("logState").GetString(), StringComparison.Ordinal);
                Assert.True(doc.RootElement.GetProperty("summary").GetProperty("inUseInodes").GetInt64() >= 8);
            }
            Assert.True(Volatile.Read(ref written) > before, "the writer did not go on after the check");

            // Damage behind the mount's back, in an AG the mount has no reason to touch: the check reads the device.
            string count = XfsDb.Fields(XfsDb.Run(image, "6.13", "agi 3", "print count"))["count"];
            XfsDb.Write(image, "6.13", "agi 3", "write count 128");
            var bad = Shell.RunXfswin(["check", "--no-progress", m.MountPoint]);
            output.WriteLine(bad.Both);
            Assert.Equal(1, bad.ExitCode);
            Assert.Contains("AGI of AG 3", bad.Stdout, StringComparison.Ordinal);
            XfsDb.Write(image, "6.13", "agi 3", $"write count {count}");
            Assert.Equal(0, Shell.RunXfswin(["check", "--no-progress", m.MountPoint]).ExitCode);

            // The image itself, while xfswin serves it read-write, is checked only through the mount point.
            var direct = Shell.RunXfswin(["check", "--no-progress", image]);
            Assert.Equal(4, direct.ExitCode);
            Assert.Contains($"xfswin check {m.MountPoint}", direct.Both, StringComparison.Ordinal);
            held.Dispose();
            m.Unmount();
        }
        var problems = KernelMadeImages.RepairProblems(image, xfsprogs);
        Assert.True(problems.Count == 0, string.Join("\n", problems));
        Assert.Equal(0, Shell.RunXfswin(["check", "--no-progress", image]).ExitCode);
    }

    [Fact]
    public void A_source_Linux_mounted_read_write_is_refused_and_one_mounted_read_only_is_checked()
    {
        var image = KernelMadeImages.Make(_tmp, "6.13");
        var repair = OracleImages.Tool("xfs_repair", "6.13");
        using (var k = LoopMount.Mount(image, readOnly: false))
        {
            string loop = Shell.Bash($"findmnt -n -o SOURCE {Q(k.MountPoint)}").Trim();
            // xfs_repair -n refuses the mounted device; so do we, for the device and for the image behind it.
            Assert.NotEqual(0, Shell.Run(repair, ["-n", loop]).ExitCode);
            foreach (var source in new[] { loop, image })
            {
                var r = Shell.RunXfswin(["check", "--no-progress", source]);
                output.WriteLine(r.Both);
                Assert.Equal(4, r.ExitCode);
                Assert.Contains($"mounted read-write at {k.MountPoint} by Linux", r.Both, StringComparison.Ordinal);
                Assert.Contains("xfs_scrub", r.Both, StringComparison.Ordinal);
            }
            // A directory no xfswin server serves: refused with what to do instead.
            var dir = Shell.RunXfswin(["check", "--no-progress", k.MountPoint]);
            Assert.Equal(1, dir.ExitCode);
            Assert.Contains("no read-write xfswin mount serves it", dir.Both, StringComparison.Ordinal);
        }
        using (var k = LoopMount.Mount(image, readOnly: true))
        {
            string loop = Shell.Bash($"findmnt -n -o SOURCE {Q(k.MountPoint)}").Trim();
            Assert.Equal(0, Shell.Run(repair, ["-n", loop]).ExitCode);
            var r = Shell.RunXfswin(["check", "--no-progress", loop]);
            output.WriteLine(r.Both);
            Assert.True(r.ExitCode == 0, r.Both);
            Assert.Contains($"mounted read-only at {k.MountPoint} by Linux", r.Stdout, StringComparison.Ordinal);
        }
    }
}

using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>-o sync_interval=S</c> of a read-write mount: what nobody fsynced becomes durable by itself. A file is written
/// through the mount and never fsynced; copies of the live image (what a power cut would leave, give or take writes in
/// flight) are mounted by the kernel, which replays the log, until one shows the file with all its bytes (a sync that
/// falls between the file's create and its write makes the empty file durable first); then the server is killed with
/// SIGKILL and the kernel must show the file with its bytes on the image itself, and xfs_repair -n finds nothing.
/// Without the periodic sync the log would hold none of it: this small change stays far below a checkpoint's threshold.
/// </summary>
public sealed class PeriodicSyncMountTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-psync");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Sync_interval_option_parses()
    {
        Assert.Equal(TimeSpan.FromSeconds(30), XfsWin.Cli.Commands.MountArguments.Parse(["a", "b"]).SyncInterval);
        Assert.Equal(TimeSpan.FromSeconds(5), XfsWin.Cli.Commands.MountArguments.Parse(["-o", "rw,sync_interval=5", "a", "b"]).SyncInterval);
        Assert.Equal(TimeSpan.Zero, XfsWin.Cli.Commands.MountArguments.Parse(["-o", "sync_interval=0", "a", "b"]).SyncInterval);
        Assert.Throws<ArgumentException>(() => XfsWin.Cli.Commands.MountArguments.Parse(["-o", "sync_interval=soon", "a", "b"]));
        Assert.Throws<ArgumentException>(() => XfsWin.Cli.Commands.MountArguments.Parse(["-o", "sync_interval=-1", "a", "b"]));
    }

    [Fact]
    public void Unsynced_file_survives_a_kill_after_an_interval()
    {
        string image = KernelMadeImages.Make(_tmp, "6.13");
        var content = Enumerable.Range(0, 50_000).Select(i => (byte)(i % 251)).ToArray();
        var mount = new ReadWriteMount(image, "-o", "sync_interval=1");
        try
        {
            Directory.CreateDirectory(mount["later"]);
            File.WriteAllBytes(mount["later/unsynced"], content);
            string copy = Path.Combine(_tmp, "copy.img");
            var deadline = DateTime.UtcNow.AddMinutes(2);
            for (int attempt = 1; ; attempt++)
            {
                Assert.True(DateTime.UtcNow < deadline, "no copy of the live image showed the unsynced file's bytes within two minutes");
                Thread.Sleep(500);
                XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", image, copy);
                bool shown = false;
                try
                {
                    using var k = LoopMount.Mount(copy, readOnly: false);
                    string path = Path.Combine(k.MountPoint, "later", "unsynced");
                    if (File.Exists(path))
                    {
                        var seen = File.ReadAllBytes(path);
                        shown = seen.AsSpan().SequenceEqual(content);
                        if (!shown) output.WriteLine($"copy {attempt} shows the file with {seen.Length} bytes, not yet all of them");
                    }
                }
                catch (ShellException e)
                {
                    // A copy taken while the server wrote can be torn; the next one is taken with the server idle.
                    output.WriteLine($"copy {attempt} did not mount: {e.Message}");
                }
                File.Delete(copy);
                if (shown)
                {
                    output.WriteLine($"copy {attempt} shows the file and its bytes");
                    break;
                }
            }
        }
        finally
        {
            mount.KillServer();
        }
        using (var k = LoopMount.Mount(image, readOnly: false))
            Assert.Equal(content, File.ReadAllBytes(Path.Combine(k.MountPoint, "later", "unsynced")));
        Assert.Empty(KernelMadeImages.RepairProblems(image, "6.13"));
    }
}

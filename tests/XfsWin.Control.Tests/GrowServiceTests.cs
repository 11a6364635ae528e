using System.Collections.Concurrent;
using System.Security.Cryptography;
using XfsWin.Control.Protocol;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// Read-write mounts and grow over the channel (protocol version 3), on kernel-filled volumes: what the service
/// writes through its FUSE mount and how it grows a volume (offline, and while mounted read-write) is judged by
/// xfs_repair -n and by the kernel mounting the image afterwards.
/// </summary>
public sealed class GrowServiceTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-control-grow.").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private static void AssertRepairClean(string image)
    {
        var r = TestVolumes.Repair(image);
        Assert.True(r.ExitCode == 0, $"xfs_repair -n exit {r.ExitCode}:\n{r.StandardOutput}{r.StandardError}");
    }

    private static long KernelStatfsBlocks(string image)
    {
        using var kernel = LoopMount.Mount(image, readOnly: true);
        return long.Parse(Shell.RunChecked("stat", "-f", "-c", "%b", kernel.MountPoint).StandardOutput.Trim());
    }

    [Fact]
    public async Task A_read_write_mount_takes_writes_the_kernel_then_shows_and_repair_finds_clean()
    {
        var image = TestVolumes.Make(_dir, "rw.img", "rwvol", m => File.WriteAllText(Path.Combine(m, "old.txt"), "from the kernel\n"));
        var mountPoint = Path.Combine(_dir, "mnt");
        var data = RandomNumberGenerator.GetBytes(5_000_000);
        await using (var server = new TestServer([image]))
        {
            await using var client = await server.Connect();
            var mount = (await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint, ReadOnly = false })).Mount!;
            Assert.False(mount.ReadOnly);
            Directory.CreateDirectory(Path.Combine(mountPoint, "new"));
            File.WriteAllBytes(Path.Combine(mountPoint, "new", "blob"), data);
            File.AppendAllText(Path.Combine(mountPoint, "old.txt"), "and from the service\n");
            await client.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });
            Assert.False(TestVolumes.IsMountPoint(mountPoint));

            // A read-only mount (the default) refuses writes.
            var ro = (await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint })).Mount!;
            Assert.True(ro.ReadOnly);
            Assert.ThrowsAny<IOException>(() => File.WriteAllText(Path.Combine(mountPoint, "refused.txt"), "x"));
            await client.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });
        }
        AssertRepairClean(image);
        using var kernel = LoopMount.Mount(image, readOnly: true);
        Assert.Equal(data, File.ReadAllBytes(Path.Combine(kernel.MountPoint, "new", "blob")));
        Assert.Equal("from the kernel\nand from the service\n", File.ReadAllText(Path.Combine(kernel.MountPoint, "old.txt")));
        Assert.False(File.Exists(Path.Combine(kernel.MountPoint, "refused.txt")));
    }

    [Fact]
    public async Task Grow_offline_and_while_mounted_read_write_reaches_the_sizes_asked_with_progress_and_events()
    {
        var image = TestVolumes.Make(_dir, "grow.img", "growvol", m => File.WriteAllBytes(Path.Combine(m, "kept"), new byte[3 << 20]));
        var mountPoint = Path.Combine(_dir, "gmnt");
        long blocks320 = KernelStatfsBlocks(image);
        using (var f = new FileStream(image, FileMode.Open)) f.SetLength(480L << 20);
        var fill = RandomNumberGenerator.GetBytes(8 << 20);
        await using (var server = new TestServer([image]))
        {
            await using var client = await server.Connect();
            await client.SubscribeAsync();

            // The dry run: current size, the device's, and the shrink limit; nothing written.
            var dry = (await client.CallAsync(new ControlRequest { Op = Operations.Grow, Source = image, DryRun = true })).Grow!;
            Assert.Equal(320UL << 20 >> 12, dry.OldDataBlocks);
            Assert.Equal(480UL << 20 >> 12, dry.DeviceBlocks);
            Assert.True(dry.SmallestBlocks < dry.OldDataBlocks && dry.SmallestBlocks > dry.OldDataBlocks - dry.AgBlocks, $"shrink limit {dry.SmallestBlocks}");
            Assert.False(dry.Written);

            // Offline: to 400 MiB, with progress and the finished event.
            var stages = new ConcurrentQueue<string>();
            var offline = (await client.CallAsync(new ControlRequest { Op = Operations.Grow, Source = image, Size = "400m" },
                new Progress(p => stages.Enqueue(p.Stage)))).Grow!;
            Assert.True(offline.Written);
            Assert.False(offline.Online);
            Assert.Equal(400UL << 20 >> 12, offline.NewDataBlocks);
            Assert.NotEmpty(stages);
            var done = await Events.WaitFor(client, e => e.Kind == EventKinds.OperationFinished && e.Op == Operations.Grow);
            Assert.True(done.Ok, done.Message);

            // Online: mounted read-write, grown to the whole device, then written into the new space.
            await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint, ReadOnly = false });
            var online = (await client.CallAsync(new ControlRequest { Op = Operations.Grow, Source = image })).Grow!;
            Assert.True(online.Online);
            Assert.Equal(400UL << 20 >> 12, online.OldDataBlocks);
            Assert.Equal(480UL << 20 >> 12, online.NewDataBlocks);
            var onlineDone = await Events.WaitFor(client, e => e.Kind == EventKinds.OperationFinished && e.Op == Operations.Grow && e.MountPoint == mountPoint);
            Assert.True(onlineDone.Ok, onlineDone.Message);
            long statfs = long.Parse(Shell.RunChecked("stat", "-f", "-c", "%b", mountPoint).StandardOutput.Trim());
            Assert.Equal(blocks320 + (160L << 20 >> 12), statfs);
            // More than the volume had free at 320 MiB: some of it is in the new space.
            for (int i = 0; i < 45; i++) File.WriteAllBytes(Path.Combine(mountPoint, $"fill{i}"), fill);

            // A read-only mount does not grow.
            await client.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });
            await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint });
            var refused = await client.SendAsync(new ControlRequest { Op = Operations.Grow, Source = image, Size = "500m" });
            Assert.False(refused.Ok);
            Assert.Equal(ErrorCodes.InUse, refused.Error!.Code);
            await client.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });
        }
        AssertRepairClean(image);
        Assert.Equal(blocks320 + (160L << 20 >> 12), KernelStatfsBlocks(image));
        using var kernel = LoopMount.Mount(image, readOnly: true);
        for (int i = 0; i < 45; i++) Assert.Equal(fill, File.ReadAllBytes(Path.Combine(kernel.MountPoint, $"fill{i}")));
        Assert.Equal(3 << 20, new FileInfo(Path.Combine(kernel.MountPoint, "kept")).Length);
    }

    private sealed class Progress(Action<ProgressMessage> report) : IProgress<ProgressMessage>
    {
        public void Report(ProgressMessage value) => report(value);
    }
}

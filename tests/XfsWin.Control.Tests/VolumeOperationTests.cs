using XfsWin.Control.Protocol;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// list, info, mount, unmount and recover over the channel, on volumes made by mkfs.xfs and filled
/// by the kernel; the kernel (statfs, mount table, its own replay) and xfs_repair judge the results.
/// </summary>
public sealed class VolumeOperationTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-control-volumes.").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private static Dictionary<string, string> Superblock(string image) =>
        XfsDb.Fields(Shell.RunChecked("xfs_db", "-r", "-c", "sb 0", "-c", "print uuid fname dblocks blocksize", image).StandardOutput);

    [Fact]
    public async Task List_shows_images_partitions_and_volumes_as_the_superblock_and_the_kernel_do()
    {
        var plain = TestVolumes.Make(_dir, "plain.img", "plainvol", m => File.WriteAllBytes(Path.Combine(m, "blob"), new byte[20 << 20]));
        var disk = TestVolumes.MakeGptDisk(_dir, "disk.img", "partvol");
        var notXfs = Path.Combine(_dir, "zeros.img");
        using (var f = File.Create(notXfs)) f.SetLength(1 << 20);
        await using var server = new TestServer([plain, disk, notXfs]);
        await using var client = await server.Connect();
        var list = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!;
        Assert.Equal([plain, disk, notXfs], list.Disks.Select(d => d.Path));

        var p = list.Disks[0];
        Assert.Equal("image", p.Kind);
        Assert.Equal("none", p.PartitionTable);
        var v = p.Volume!;
        var sb = Superblock(plain);
        Assert.StartsWith("\"plainvol", sb["fname"]);
        Assert.Equal("plainvol", v.Label);
        Assert.Equal(Guid.Parse(sb["uuid"]), v.Uuid);
        Assert.Equal(long.Parse(sb["dblocks"]) * long.Parse(sb["blocksize"]), v.SizeBytes);
        Assert.Equal("clean", v.LogState);
        Assert.Equal(Health.Healthy, v.Health);
        using (var kernel = LoopMount.Mount(plain, readOnly: true))
        {
            var statfs = Shell.RunChecked("stat", "-f", "-c", "%f %S", kernel.MountPoint).StandardOutput.Split(' ');
            Assert.Equal(long.Parse(statfs[0]) * long.Parse(statfs[1]), v.FreeBytes);
        }

        var d = list.Disks[1];
        Assert.Equal("gpt", d.PartitionTable);
        Assert.Null(d.Volume);
        var part = Assert.Single(d.Partitions);
        Assert.Equal(1, part.Number);
        Assert.Equal(1L << 20, part.StartByte);
        Assert.Equal(330L << 20, part.LengthBytes);
        Assert.Equal("data", part.Name);
        Assert.Equal($"{disk}@1", part.Volume!.Source);
        Assert.Equal("partvol", part.Volume.Label);

        var z = list.Disks[2];
        Assert.Null(z.Volume);
        Assert.Empty(z.Partitions);

        var info = (await client.CallAsync(new ControlRequest { Op = Operations.Info, Source = $"{disk}@1" })).Volume!;
        Assert.Equal("partvol", info.Summary.Label);
        Assert.Equal(4096, info.BlockSize);
        Assert.Contains("crc (V5)", info.Features);
        Assert.Equal(5, info.Summary.FormatVersion);
    }

    [Fact]
    public async Task Mount_serves_the_kernels_files_through_fuse_and_unmount_releases_it()
    {
        var image = TestVolumes.Make(_dir, "m.img", "mountme", m =>
        {
            Directory.CreateDirectory(Path.Combine(m, "docs"));
            File.WriteAllText(Path.Combine(m, "docs", "hello.txt"), "hello from the kernel\n");
        });
        var mountPoint = Path.Combine(_dir, "mnt", "here");
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        await client.SubscribeAsync();

        var mounted = (await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint })).Mount!;
        try
        {
            Assert.Equal(mountPoint, mounted.MountPoint);
            Assert.Equal("FUSE", mounted.Host);
            Assert.True(TestVolumes.IsMountPoint(mountPoint));
            Assert.Equal("hello from the kernel\n", File.ReadAllText(Path.Combine(mountPoint, "docs", "hello.txt")));
            var e = await Events.WaitFor(client, e => e.Kind == EventKinds.Mounted);
            Assert.Equal(image, e.Source);

            // The list shows where it is mounted; a second mount and a recovery are refused while it is.
            var listed = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!.Disks.Single().Volume!;
            Assert.Equal(mountPoint, listed.MountPoint);
            Assert.Equal(ErrorCodes.AlreadyMounted, (await client.SendAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint + "2" })).Error!.Code);
            Assert.Equal(ErrorCodes.AlreadyMounted, (await client.SendAsync(new ControlRequest { Op = Operations.Recover, Source = image })).Error!.Code);
        }
        finally
        {
            var unmounted = await client.SendAsync(new ControlRequest { Op = Operations.Unmount, MountPoint = mountPoint });
            Assert.True(unmounted.Ok, unmounted.Error?.Message);
        }
        Assert.False(TestVolumes.IsMountPoint(mountPoint));
        Assert.False(Directory.Exists(mountPoint)); // the server made it, the server removed it
        var gone = await Events.WaitFor(client, e => e.Kind == EventKinds.Unmounted);
        Assert.Equal(mountPoint, gone.MountPoint);
        Assert.Null((await client.CallAsync(new ControlRequest { Op = Operations.List })).List!.Disks.Single().Volume!.MountPoint);
    }

    [Fact]
    public async Task Mount_with_readOnly_false_serves_the_volume_read_write()
    {
        var image = TestVolumes.Make(_dir, "rw.img", "rwmount", m => File.WriteAllText(Path.Combine(m, "old.txt"), "old\n"));
        var mountPoint = Path.Combine(_dir, "rwmnt");
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        var mounted = (await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint, ReadOnly = false })).Mount!;
        try
        {
            Assert.False(mounted.ReadOnly);
            File.WriteAllText(Path.Combine(mountPoint, "new.txt"), "written through the service\n");
            File.Delete(Path.Combine(mountPoint, "old.txt"));
        }
        finally
        {
            var unmounted = await client.SendAsync(new ControlRequest { Op = Operations.Unmount, MountPoint = mountPoint });
            Assert.True(unmounted.Ok, unmounted.Error?.Message);
        }
        using (var kernel = LoopMount.Mount(image, readOnly: true))
        {
            Assert.Equal(["new.txt"], Directory.GetFileSystemEntries(kernel.MountPoint).Select(Path.GetFileName));
            Assert.Equal("written through the service\n", File.ReadAllText(Path.Combine(kernel.MountPoint, "new.txt")));
        }
        var repair = Shell.Run("xfs_repair", "-n", image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
    }

    [Fact]
    public async Task An_unmount_from_outside_is_noticed_and_reported()
    {
        var image = TestVolumes.Make(_dir, "o.img", "outside");
        var mountPoint = Path.Combine(_dir, "outside");
        Directory.CreateDirectory(mountPoint);
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        await client.SubscribeAsync();
        await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint });
        Shell.RunChecked("umount", mountPoint);
        var e = await Events.WaitFor(client, e => e.Kind == EventKinds.Unmounted);
        Assert.Contains("outside", e.Message);
        Assert.Empty(server.Volumes.Mounts());
        Assert.True(Directory.Exists(mountPoint)); // it existed before: left in place
    }

    [Fact]
    public async Task Corruption_found_while_mounted_raises_the_read_only_event()
    {
        var image = TestVolumes.Make(_dir, "c.img", "corrupt", m =>
        {
            var dir = Directory.CreateDirectory(Path.Combine(m, "blockdir")).FullName;
            for (int i = 0; i < 40; i++) File.WriteAllText(Path.Combine(dir, $"entry_with_a_long_name_{i}"), "x");
        });
        var ino = XfsDb.Fields(Shell.RunChecked("xfs_db", "-r", "-c", "path /blockdir", "-c", "print core.format", "-c", "inode", image).StandardOutput);
        Assert.Equal("2 (extents)", ino["core.format"]);
        var number = System.Text.RegularExpressions.Regex.Match(
            Shell.RunChecked("xfs_db", "-r", "-c", "path /blockdir", "-c", "inode", image).StandardOutput, @"current inode number is (\d+)").Groups[1].Value;
        // A directory data block with a wrong magic and a valid CRC: only the structure check can catch it.
        XfsDb.Write(image, "6.1", $"inode {number}", "dblock 0", "write -d bhdr.hdr.magic 0x12345678");
        var mountPoint = Path.Combine(_dir, "cmnt");
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        await client.SubscribeAsync();
        await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint });
        try
        {
            var error = Assert.ThrowsAny<IOException>(() => Directory.GetFileSystemEntries(Path.Combine(mountPoint, "blockdir")));
            var e = await Events.WaitFor(client, e => e.Kind == EventKinds.VolumeReadOnly);
            Assert.False(e.Ok);
            Assert.Equal(image, e.Source);
            Assert.Contains("directory", e.Message);
            var listed = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!.Disks.Single().Volume!;
            Assert.Equal(Health.Corrupt, listed.Health);
        }
        finally
        {
            await client.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });
        }
    }

    [Fact]
    public async Task Recover_streams_progress_and_leaves_what_the_kernel_would_after_its_own_replay()
    {
        var image = TestVolumes.MakeDirty(_dir, "dirty.img", "dirtyvol");
        Assert.NotEqual(0, TestVolumes.Repair(image).ExitCode); // xfs_repair -n refuses a dirty log
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        await client.SubscribeAsync();
        Assert.Equal("dirty", (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!.Disks.Single().Volume!.LogState);

        var dry = (await client.CallAsync(new ControlRequest { Op = Operations.Recover, Source = image, DryRun = true })).Recover!;
        Assert.Equal("dirty", dry.LogStateBefore);
        Assert.False(dry.Written);
        Assert.True(dry.BytesToWrite > 0);
        Assert.NotEqual(0, TestVolumes.Repair(image).ExitCode); // still dirty: the dry run wrote nothing

        var progress = new List<ProgressMessage>();
        var result = (await client.CallAsync(new ControlRequest { Op = Operations.Recover, Source = image },
            new SynchronousProgress<ProgressMessage>(p => { lock (progress) progress.Add(p); }))).Recover!;
        Assert.True(result.Written, result.Message);
        Assert.True(result.TransactionsReplayed > 0);
        lock (progress)
        {
            Assert.NotEmpty(progress);
            Assert.All(progress, p => Assert.Equal(Operations.Recover, p.Op));
        }
        var finished = await Events.WaitFor(client, e => e.Kind == EventKinds.OperationFinished && e.Op == Operations.Recover && e.Message.Contains("recovered"));
        Assert.True(finished.Ok);

        var repair = TestVolumes.Repair(image);
        Assert.True(repair.ExitCode == 0, repair.StandardError + repair.StandardOutput);
        using (var kernel = LoopMount.Mount(image, readOnly: true, extraOptions: "norecovery"))
        {
            Assert.Equal("written before the sync\n", File.ReadAllText(Path.Combine(kernel.MountPoint, "before.txt")));
            for (int i = 0; i < 200; i++)
                Assert.True(File.Exists(Path.Combine(kernel.MountPoint, "late", $"file{i}")), $"late/file{i} is missing after recovery");
        }
        Assert.Equal("clean", (await client.CallAsync(new ControlRequest { Op = Operations.Info, Source = image })).Volume!.Summary.LogState);
        var again = (await client.CallAsync(new ControlRequest { Op = Operations.Recover, Source = image })).Recover!;
        Assert.Equal("clean", again.LogStateBefore);
        Assert.False(again.Written);
    }

    private sealed class SynchronousProgress<T>(Action<T> report) : IProgress<T>
    {
        public void Report(T value) => report(value);
    }
}

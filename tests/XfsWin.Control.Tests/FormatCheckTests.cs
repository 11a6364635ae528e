using System.Security.Cryptography;
using XfsWin.Control.Protocol;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// format and check over the channel (protocol version 2) on real images: what format makes is judged
/// by xfs_repair -n and a kernel mount, and its geometry by mkfs.xfs 6.13's own dry run; refusals name
/// what the target holds (XFS made by mkfs.xfs, ext4 made by mkfs.ext4, a GPT table); check's verdict
/// agrees with xfs_repair -n on a clean volume and on one corrupted with xfs_db; mounted volumes and
/// hostile requests are refused.
/// </summary>
public sealed class FormatCheckTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-control-format.").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private string Zeros(string name, long bytes)
    {
        var path = Path.Combine(_dir, name);
        using (var f = File.Create(path)) f.SetLength(bytes);
        return path;
    }

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(SHA256.HashData(f));
    }

    private sealed class Recorder : IProgress<ProgressMessage>
    {
        private readonly List<ProgressMessage> _seen = [];

        public void Report(ProgressMessage value)
        {
            lock (_seen) _seen.Add(value);
        }

        public List<ProgressMessage> Seen
        {
            get
            {
                lock (_seen) return [.. _seen];
            }
        }
    }

    private static async Task<ControlResponse> Format(ControlClient client, string source, FormatOptions options, IProgress<ProgressMessage>? progress = null) =>
        await client.SendAsync(new ControlRequest { Op = Operations.Format, Source = source, Format = options }, progress);

    [Fact]
    public async Task Format_makes_the_volume_mkfs_xfs_would_and_xfs_repair_and_the_kernel_accept_it()
    {
        var image = Zeros("scratch.img", 512L << 20);
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        await client.SubscribeAsync();

        // The dry run's geometry is mkfs.xfs 6.13's for the same file and options.
        var dry = (await client.CallAsync(new ControlRequest { Op = Operations.Format, Source = image, Format = new FormatOptions { Label = "fresh", DryRun = true } })).Format!;
        Assert.False(dry.Written);
        Assert.Null(dry.Existing);
        Assert.Equal(new byte[512], File.ReadAllBytes(image).AsSpan(0, 512).ToArray());
        var oracle = Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-N", "-f", "-L", "fresh", image).StandardOutput;
        Assert.Equal(Geometry(oracle), Geometry(dry.Summary));

        var progress = new Recorder();
        var made = (await Format(client, image, new FormatOptions { Label = "fresh" }, progress)).Format!;
        Assert.True(made.Written);
        Assert.Equal("fresh", made.Label);
        Assert.Equal(dry.Agcount, made.Agcount);
        Assert.Contains("reflink", made.Features);
        Assert.NotEmpty(progress.Seen);
        Assert.All(progress.Seen, p => Assert.Equal(Operations.Format, p.Op));
        var finished = await Events.WaitFor(client, e => e.Kind == EventKinds.OperationFinished && e.Op == Operations.Format);
        Assert.True(finished.Ok);
        Assert.Equal(image, finished.Source);

        var repair = TestVolumes.Repair(image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
        var sb = XfsDb.Fields(Shell.RunChecked("xfs_db", "-r", "-c", "sb 0", "-c", "print uuid fname agcount", image).StandardOutput);
        Assert.Equal(made.Uuid, Guid.Parse(sb["uuid"]));
        Assert.Equal(made.Agcount.ToString(System.Globalization.CultureInfo.InvariantCulture), sb["agcount"]);
        using (var kernel = LoopMount.Mount(image, readOnly: false))
        {
            File.WriteAllText(Path.Combine(kernel.MountPoint, "hello.txt"), "written by the kernel\n");
        }
        repair = TestVolumes.Repair(image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);

        // And check agrees: clean.
        var check = (await client.CallAsync(new ControlRequest { Op = Operations.Check, Source = image })).Check!;
        Assert.True(check.Clean, string.Join("\n", check.Problems.Select(p => p.Message)));
    }

    /// <summary>The geometry lines of a mkfs.xfs report, without the target's name and the features our report spells out differently.</summary>
    private static string Geometry(string report)
    {
        var lines = report.Split('\n').Where(l => l.Contains("agcount=") || l.Contains("blocks=") || l.Contains("bsize=")).ToList();
        return string.Join("\n", lines.Select(l => l.Contains("meta-data=") ? l[l.IndexOf("isize=", StringComparison.Ordinal)..] : l));
    }

    [Fact]
    public async Task Format_makes_a_new_image_file_of_the_size_asked_and_lists_it()
    {
        var image = Path.Combine(_dir, "new.img");
        await using var server = new TestServer([]);
        await using var client = await server.Connect();
        var made = (await client.CallAsync(new ControlRequest { Op = Operations.Format, Source = image, Format = new FormatOptions { DataSize = "400m", LogSize = "64m", Agcount = 2 } })).Format!;
        Assert.False(made.TargetExists);
        Assert.Equal(400L << 20, new FileInfo(image).Length);
        Assert.Equal(2u, made.Agcount);
        Assert.Equal((64u << 20) / 4096, made.LogBlocks);
        var repair = TestVolumes.Repair(image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
        var list = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!;
        Assert.Equal(image, Assert.Single(list.Disks).Path);
        Assert.Equal(Health.Healthy, list.Disks[0].Volume!.Health);
    }

    /// <summary>A V4 format (crc off) as mkfs -m crc=0 makes it: xfs_repair accepts it and the list shows it (read-only to XfsWin's writes).</summary>
    [Fact]
    public async Task Format_makes_a_v4_volume_when_crc_is_off()
    {
        var image = Path.Combine(_dir, "v4.img");
        await using var server = new TestServer([]);
        await using var client = await server.Connect();
        var made = (await client.CallAsync(new ControlRequest { Op = Operations.Format, Source = image, Format = new FormatOptions { DataSize = "400m", Crc = false } })).Format!;
        Assert.Contains("crc=0", made.Summary, StringComparison.Ordinal);
        var sector = new byte[512];
        using (var f = File.OpenRead(image)) f.ReadExactly(sector);
        Assert.Equal(4, System.Buffers.Binary.BinaryPrimitives.ReadUInt16BigEndian(sector.AsSpan(100)) & 0xF);
        var repair = TestVolumes.Repair(image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
        var list = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!;
        Assert.Equal(Health.Healthy, Assert.Single(list.Disks).Volume!.Health);
    }

    [Fact]
    public async Task Format_refuses_an_existing_xfs_ext4_or_partition_table_without_force_naming_it()
    {
        var xfs = TestVolumes.Make(_dir, "xfs.img", "keepme");
        var ext4 = Zeros("ext4.img", 320L << 20);
        Shell.RunChecked("mkfs.ext4", "-q", "-F", "-L", "extdata", ext4);
        var disk = TestVolumes.MakeGptDisk(_dir, "disk.img", "inpart");
        await using var server = new TestServer([xfs, ext4, disk]);
        await using var client = await server.Connect();

        foreach (var (target, named) in new[]
                 {
                     (xfs, "an XFS file system labelled 'keepme'"), (ext4, "an ext4 file system labelled 'extdata'"),
                     (disk, "a GPT partition table"), (disk + "@1", "an XFS file system labelled 'inpart'"),
                 })
        {
            string before = Hash(PartitionSpecPath(target));
            var dry = (await client.CallAsync(new ControlRequest { Op = Operations.Format, Source = target, Format = new FormatOptions { DryRun = true } })).Format!;
            Assert.Equal(named, dry.Existing);
            Assert.Contains("this destroys " + named, dry.Message);
            var refused = await Format(client, target, new FormatOptions { Label = "new" });
            Assert.False(refused.Ok);
            Assert.Equal(ErrorCodes.NotEmpty, refused.Error!.Code);
            Assert.Contains(named, refused.Error.Message);
            Assert.Contains("nothing was written", refused.Error.Message);
            Assert.Equal(before, Hash(PartitionSpecPath(target)));
        }

        // With force the ext4 image becomes XFS.
        var forced = (await client.CallAsync(new ControlRequest { Op = Operations.Format, Source = ext4, Format = new FormatOptions { Force = true, Label = "was-ext4" } })).Format!;
        Assert.Equal("an ext4 file system labelled 'extdata'", forced.Existing);
        var repair = TestVolumes.Repair(ext4);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
        Assert.Contains("xfs", Shell.RunChecked("blkid", "-p", "-o", "value", "-s", "TYPE", ext4).StandardOutput);

        // A partition with force: the GPT table and the partition's neighbours stay.
        var part = (await client.CallAsync(new ControlRequest { Op = Operations.Format, Source = disk + "@1", Format = new FormatOptions { Force = true, Label = "repart" } })).Format!;
        Assert.True(part.Written);
        var list = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!;
        var p = Assert.Single(list.Disks.Single(d => d.Path == disk).Partitions);
        Assert.Equal("repart", p.Volume!.Label);
    }

    private static string PartitionSpecPath(string source) => source.Contains('@') ? source[..source.LastIndexOf('@')] : source;

    [Fact]
    public async Task Format_and_check_refuse_a_volume_mounted_here_or_by_the_kernel()
    {
        var image = TestVolumes.Make(_dir, "busy.img", "busy");
        var mountPoint = Path.Combine(_dir, "fuse");
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        string before = Hash(image);

        await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint });
        var format = await Format(client, image, new FormatOptions { Force = true });
        Assert.Equal(ErrorCodes.AlreadyMounted, format.Error!.Code);
        Assert.Contains(mountPoint, format.Error.Message);
        var check = await client.SendAsync(new ControlRequest { Op = Operations.Check, Source = image });
        Assert.Equal(ErrorCodes.AlreadyMounted, check.Error!.Code);
        await client.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });

        using (var kernel = LoopMount.Mount(image, readOnly: true))
        {
            format = await Format(client, image, new FormatOptions { Force = true });
            Assert.Equal(ErrorCodes.InUse, format.Error!.Code);
            Assert.Contains(kernel.LoopDevice, format.Error.Message);
            Assert.Contains(kernel.MountPoint, format.Error.Message);
            check = await client.SendAsync(new ControlRequest { Op = Operations.Check, Source = image });
            Assert.Equal(ErrorCodes.InUse, check.Error!.Code);
        }
        Assert.Equal(before, Hash(image));
    }

    [Fact]
    public async Task Check_finds_a_clean_volume_clean_and_the_problems_xfs_repair_finds_in_a_corrupted_one()
    {
        var clean = TestVolumes.Make(_dir, "clean.img", "clean", m =>
        {
            Directory.CreateDirectory(Path.Combine(m, "d"));
            for (int i = 0; i < 50; i++) File.WriteAllText(Path.Combine(m, "d", $"f{i}"), new string('x', i * 100));
        });
        var broken = Path.Combine(_dir, "broken.img");
        File.Copy(clean, broken);
        // -d: past the AGF's write verifier (which refuses the value), CRC recomputed, as a bug or bit rot would leave it.
        Shell.RunChecked("xfs_db", "-x", "-c", "agf 0", "-c", "write -d freeblks 7", broken);
        var repair = TestVolumes.Repair(broken);
        Assert.NotEqual(0, repair.ExitCode);
        Assert.Equal(0, TestVolumes.Repair(clean).ExitCode);

        await using var server = new TestServer([clean, broken]);
        await using var client = await server.Connect();
        await client.SubscribeAsync();

        var progress = new Recorder();
        var ok = (await client.CallAsync(new ControlRequest { Op = Operations.Check, Source = clean }, progress)).Check!;
        Assert.True(ok.Clean);
        Assert.Empty(ok.Problems);
        Assert.Equal(0, ok.ProblemCount);
        Assert.Equal(4u, ok.AgCount);
        Assert.True(ok.Directories >= 2);
        Assert.Contains("clean", ok.Message);
        Assert.NotEmpty(progress.Seen);
        var e = await Events.WaitFor(client, x => x.Kind == EventKinds.OperationFinished && x.Op == Operations.Check && x.Source == clean);
        Assert.True(e.Ok);

        var bad = (await client.CallAsync(new ControlRequest { Op = Operations.Check, Source = broken })).Check!;
        Assert.False(bad.Clean);
        Assert.True(bad.ProblemCount >= 1);
        // xfs_repair -n reports AG 0's free block count; so does check, at the AGF's address (sector 1 of AG 0).
        Assert.Contains("agf_freeblks 7, counted", repair.StandardOutput + repair.StandardError);
        var agf = bad.Problems.Where(p => p.Ag == 0 && p.Structure.Contains("AGF", StringComparison.OrdinalIgnoreCase)).ToList();
        Assert.True(agf.Count > 0, string.Join("\n", bad.Problems.Select(p => $"{p.Structure} ag={p.Ag} daddr={p.Daddr}: {p.Message}")));
        Assert.Contains(agf, p => p.Daddr == 1 && p.Message.Contains('7'));
        Assert.Contains("problem", bad.Message);
        // Nothing was changed: xfs_repair still finds the same.
        Assert.NotEqual(0, TestVolumes.Repair(broken).ExitCode);
    }

    [Fact]
    public async Task Bad_and_hostile_format_and_check_requests_get_errors_and_write_nothing()
    {
        var image = Zeros("target.img", 400L << 20);
        await using var server = new TestServer([image]);
        await using var client = await server.Connect();
        async Task<string> Code(ControlRequest r) => (await client.SendAsync(r)).Error!.Code;
        ControlRequest F(FormatOptions o, string? source = null) => new() { Op = Operations.Format, Source = source ?? image, Format = o };

        Assert.Equal(ErrorCodes.BadRequest, await Code(new ControlRequest { Op = Operations.Format }));
        Assert.Equal(ErrorCodes.BadRequest, await Code(new ControlRequest { Op = Operations.Check }));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { BlockSize = 3 })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { BlockSize = -4096 })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { InodeSize = 100000 })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { Agcount = -1 })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { Agcount = long.MaxValue })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { Label = "a label far longer than twelve bytes" })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { LogSize = "12zz" })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { LogSize = "99999999999999999999999t" })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { LogSize = "1k" })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { Crc = false, Reflink = true })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { Reflink = true, Rmapbt = false, Finobt = false, Inobtcount = true })));
        Assert.Equal(ErrorCodes.BadRequest, await Code(F(new FormatOptions { DataSize = "1m" })));
        Assert.Equal(ErrorCodes.NotFound, await Code(F(new FormatOptions(), Path.Combine(_dir, "absent.img"))));
        Assert.Equal(ErrorCodes.NotFound, await Code(F(new FormatOptions { DataSize = "400m" }, "/no/such/dir/x.img")));
        Assert.Equal(ErrorCodes.NotFound, await Code(F(new FormatOptions(), Path.Combine(_dir, "absent.img") + "@2")));
        Assert.Equal(ErrorCodes.NotFound, await Code(F(new FormatOptions(), image + "@1")));
        Assert.Equal(ErrorCodes.NotFound, await Code(new ControlRequest { Op = Operations.Check, Source = "/no/such.img" }));
        Assert.Equal(ErrorCodes.VolumeError, await Code(new ControlRequest { Op = Operations.Check, Source = image }));
        Assert.Equal(ErrorCodes.VolumeError, await Code(new ControlRequest { Op = Operations.Check, Source = "/etc/hostname" }));
        Assert.True(AllZero(image), "a refused format wrote to the image");
        Assert.False(File.Exists(Path.Combine(_dir, "absent.img")));
    }

    private static bool AllZero(string path)
    {
        using var f = File.OpenRead(path);
        var buffer = new byte[1 << 20];
        int n;
        while ((n = f.Read(buffer)) > 0)
            if (buffer.AsSpan(0, n).ContainsAnyExcept((byte)0)) return false;
        return true;
    }

    [Fact]
    public void The_kernel_mount_rule_matches_a_device_its_partitions_and_loops_over_an_image_only()
    {
        const string info =
            "36 25 8:1 / /boot rw - ext4 /dev/sda1 rw\n" +
            "37 25 259:2 / /data rw - xfs /dev/nvme0n1p2 rw\n" +
            "38 25 7:3 / /mnt/with\\040space rw shared:9 - xfs /dev/loop3 rw\n" +
            "39 25 0:50 / /mnt/fuse rw - fuse.xfswin /srv/a.img@1 rw\n";
        var loops = new List<(string, string)> { ("/dev/loop3", "/srv/b.img"), ("/dev/loop4", "/srv/c.img") };
        Assert.Contains("/boot", Server.KernelMounts.FindMount("/dev/sda", info, loops));
        Assert.Contains("/boot", Server.KernelMounts.FindMount("/dev/sda1", info, loops));
        Assert.Null(Server.KernelMounts.FindMount("/dev/sda2", info, loops));
        Assert.Null(Server.KernelMounts.FindMount("/dev/sdab", info, loops));
        Assert.Contains("/data", Server.KernelMounts.FindMount("/dev/nvme0n1", info, loops));
        Assert.Null(Server.KernelMounts.FindMount("/dev/nvme0n11", info, loops));
        Assert.Contains("/mnt/with space", Server.KernelMounts.FindMount("/srv/b.img", info, loops));
        Assert.Null(Server.KernelMounts.FindMount("/srv/c.img", info, loops));
        Assert.Contains("/mnt/fuse", Server.KernelMounts.FindMount("/srv/a.img", info, loops));
        Assert.Null(Server.KernelMounts.FindMount("/srv/a.im", info, loops));
    }
}

using System.Security.Cryptography;
using XfsWin.Admin;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// Kernel-filled volumes (mkfs.xfs 6.13 and 6.1 defaults, filled through a loop mount) made once per run: a
/// 300 MiB + 4 KiB data section, so the last AG is a few blocks short and a grow can extend it in place.
/// </summary>
public sealed class GrowVolumes : IDisposable
{
    public string Directory { get; } = Sh.Check("mktemp", "-d", "/tmp/xfswin-grow.XXXXXX").Trim();
    private readonly Dictionary<string, (string Image, string Manifest)> _made = [];
    private readonly object _lock = new();

    /// <summary>The filled volume made by mkfs.xfs <paramref name="version"/> and its kernel manifest (do not change it: copy it).</summary>
    public (string Image, string Manifest) Get(string version) => Make(version, $"base-{version}", 300L * 1024 * 1024 + 4096, []);

    /// <summary>AG size and free tail of <see cref="GetShrinkable"/>'s volume, in blocks.</summary>
    public const uint ShrinkableAgBlocks = 20000, ShrinkableTail = 3000;

    /// <summary>
    /// A volume whose last AG ends in free space by construction: mkfs.xfs 6.13 makes 300 MiB in AGs of 20000 blocks
    /// (the last one 16800 blocks), the kernel fills it as <see cref="Get"/>'s, then the image grows by
    /// <see cref="ShrinkableTail"/> blocks and the kernel's xfs_growfs extends the last AG into them: whatever the
    /// kernel's allocator did while filling, the last AG's last 3000 blocks are free.
    /// </summary>
    public (string Image, string Manifest) GetShrinkable() =>
        Make("6.13", "shrinkable", 300L * 1024 * 1024, ["-d", $"agsize={ShrinkableAgBlocks * 4096}"], ShrinkableTail);

    private (string Image, string Manifest) Make(string version, string name, long bytes, string[] mkfsOptions, uint grownBy = 0)
    {
        lock (_lock)
        {
            if (_made.TryGetValue(name, out var done)) return done;
            string image = Path.Combine(Directory, $"{name}.img"), manifest = Path.Combine(Directory, $"{name}.json");
            Shell.RunChecked("truncate", "-s", bytes.ToString(), image);
            Shell.RunChecked(OracleImages.Tool("mkfs.xfs", version), ["-q", "-f", .. mkfsOptions, image]);
            using (var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: false))
            {
                string root = m.MountPoint;
                Shell.RunChecked("cp", "-a", Path.Combine(OracleImages.RepoRoot, "src", "XfsWin.Core"), Path.Combine(root, "core"));
                Shell.RunChecked("dd", "if=/dev/urandom", $"of={root}/big.bin", "bs=1M", "count=24", "status=none");
                Shell.RunChecked("ln", $"{root}/big.bin", $"{root}/hard.bin");
                Shell.RunChecked("ln", "-s", "core/Admin", $"{root}/link");
                Shell.RunChecked("setfattr", "-n", "user.grow", "-v", "kept", $"{root}/big.bin");
                if (version == "6.13") Shell.RunChecked("cp", "--reflink=always", $"{root}/big.bin", $"{root}/shared.bin");
                for (int i = 0; i < 300; i++) File.WriteAllText($"{root}/core/f{i}.txt", new string('x', i * 37));
            }
            if (grownBy > 0)
            {
                long blocks = bytes / 4096 + grownBy;
                Shell.RunChecked("truncate", "-s", (blocks * 4096).ToString(), image);
                using var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: false);
                Shell.RunChecked(OracleImages.Tool("xfs_growfs", "6.13"), "-D", blocks.ToString(), m.MountPoint);
            }
            using (var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: true))
                Shell.RunChecked("python3", Path.Combine(OracleImages.ScriptsDirectory, "manifest.py"), m.MountPoint, manifest);
            _made[name] = (image, manifest);
            return (image, manifest);
        }
    }

    public void Dispose() => Shell.Run("rm", "-rf", Directory);
}

/// <summary>
/// <c>xfswin grow</c> against the kernel's own xfs_growfs: the same filled volume grown both ways must give the
/// same superblock geometry and counters and the same AGF/AGI of every new AG and of the old last AG; ours must
/// pass xfs_repair -n (6.1 and 6.13), mount with the kernel showing the new size, and hold the same files.
/// A grow stopped after its log commit is finished by the kernel's log recovery. Refusals leave the device
/// byte-identical. Label and UUID changes equal xfs_admin's (xfs_db's label and uuid commands) on every superblock.
/// </summary>
public sealed class GrowTests(GrowVolumes volumes) : IClassFixture<GrowVolumes>
{
    private static readonly string[] SbFields = ["dblocks", "agcount", "agblocks", "fdblocks", "icount", "ifree"];

    private static string Db(string image, params string[] commands)
    {
        var args = new List<string> { "-r" };
        foreach (var c in commands) { args.Add("-c"); args.Add(c); }
        args.Add(image);
        return Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), args).StandardOutput;
    }

    /// <summary>AGF and AGI of AGs [first, end) as xfs_db prints them, without CRCs and LSNs, in one xfs_db run.</summary>
    private static string AgHeaders(string image, uint first, uint end)
    {
        var commands = new List<string>();
        for (uint ag = first; ag < end; ag++) commands.AddRange([$"agf {ag}", "print", $"agi {ag}", "print"]);
        return string.Join('\n', Db(image, [.. commands]).Split('\n')
            .Where(l => !l.StartsWith("crc", StringComparison.Ordinal) && !l.StartsWith("lsn", StringComparison.Ordinal)));
    }

    private static void AssertSameAgHeaders(string theirs, string ours, uint first, uint end)
    {
        var t = AgHeaders(theirs, first, end).Split('\n');
        var o = AgHeaders(ours, first, end).Split('\n');
        Assert.Equal(t.Length, o.Length);
        for (int i = 0; i < t.Length; i++)
            Assert.True(t[i] == o[i], $"AG headers {first}..{end - 1}, line {i}: the kernel's '{t[i]}', ours '{o[i]}'");
    }

    private static Dictionary<string, string> Sb(string image) => XfsDb.Fields(Db(image, "sb 0", "print"));

    private static void AssertRepairClean(string image, params string[] versions)
    {
        foreach (var version in versions.Length > 0 ? versions : ["6.1", "6.13"])
        {
            var r = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            Assert.True(r.ExitCode == 0, $"xfs_repair -n ({version}) exit {r.ExitCode}:\n{r.StandardOutput}\n{r.StandardError}");
        }
    }

    private static string Copy(string from, string dir, string name)
    {
        string to = Path.Combine(dir, name);
        Shell.RunChecked("cp", "--sparse=always", from, to);
        return to;
    }

    private static long StatfsBlocks(string image)
    {
        using var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: true);
        return StatfsBlocksOf(m.MountPoint);
    }

    private static long StatfsBlocksOf(string mountPoint) => long.Parse(Shell.RunChecked("stat", "-f", "-c", "%b", mountPoint).StandardOutput.Trim());

    /// <summary>The kernel grows a copy (mount, xfs_growfs -D, unmount): the oracle.</summary>
    private static void KernelGrow(string image, ulong blocks)
    {
        using var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: false);
        Shell.RunChecked(OracleImages.Tool("xfs_growfs", "6.13"), "-D", blocks.ToString(), m.MountPoint);
    }

    private void AssertSameFiles(string image, string manifestPath)
    {
        var manifest = KernelManifest.Load(manifestPath);
        using (var volume = XfsVolume.Open(image))
        {
            var diff = TreeComparer.Compare(volume, manifest);
            Assert.True(diff.TotalDifferences == 0, diff.Format());
        }
        // And what the kernel shows of the grown volume is what it showed before.
        string after = Path.Combine(volumes.Directory, Guid.NewGuid() + ".json");
        using (var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: true))
            Shell.RunChecked("python3", Path.Combine(OracleImages.ScriptsDirectory, "manifest.py"), m.MountPoint, after);
        var kernel = KernelManifest.Load(after);
        Assert.Equal(manifest.Entries.Count, kernel.Entries.Count);
        File.Delete(after);
    }

    [Theory]
    [InlineData("6.13", 1000)]        // within the short last AG
    [InlineData("6.13", 76801 + 40000)] // fills the last AG, adds a short one past two more
    [InlineData("6.1", 76801 + 40000)]
    [InlineData("6.1", 300)]
    public void Grow_matches_the_kernels_xfs_growfs(string version, long addBlocks)
    {
        var (baseImage, manifest) = volumes.Get(version);
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img"), theirs = Copy(baseImage, dir.Path, "theirs.img");
        var before = Sb(ours);
        ulong target = ulong.Parse(before["dblocks"]) + (ulong)addBlocks;
        long bytes = (long)target * 4096;
        Shell.RunChecked("truncate", "-s", bytes.ToString(), ours);
        Shell.RunChecked("truncate", "-s", bytes.ToString(), theirs);

        var r = Xfswin.Run("grow", ours);
        Assert.True(r.Code == 0, r.ToString());
        Assert.Contains($"data blocks changed from {before["dblocks"]} to {target}", r.Out, StringComparison.Ordinal);
        KernelGrow(theirs, target);

        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        uint oldCount = uint.Parse(before["agcount"]), newCount = uint.Parse(a["agcount"]);
        AssertSameAgHeaders(theirs, ours, oldCount - 1, newCount);
        for (uint ag = 1; ag < newCount; ag++)
        {
            var s = XfsDb.Fields(Db(ours, $"sb {ag}", "print"));
            Assert.True(s["dblocks"] == a["dblocks"] && s["agcount"] == a["agcount"] && s["inprogress"] == "0", $"secondary superblock {ag}: {s["dblocks"]} blocks, {s["agcount"]} AGs");
        }
        AssertRepairClean(ours);
        Assert.Equal(StatfsBlocks(theirs), StatfsBlocks(ours));
        AssertSameFiles(ours, manifest);
        var check = Xfswin.Run("check", "--no-progress", ours);
        Assert.True(check.Code == 0, check.ToString());
    }

    [Fact]
    public void Secondary_superblocks_rewritten_after_the_commit_as_the_kernel_does_are_right_too()
    {
        var (baseImage, manifest) = volumes.Get("6.1");
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img");
        ulong target = 76801 + 50000;
        Shell.RunChecked("truncate", "-s", ((long)target * 4096).ToString(), ours);
        using (var access = WriteGate.Open(ours, null, null, WritePurpose.Grow))
        {
            var result = VolumeGrower.Run(access, target, options: new GrowOptions { SecondariesInLog = false });
            Assert.Equal(target, result.Plan.NewDataBlocks);
        }
        var a = Sb(ours);
        for (uint ag = 1; ag < uint.Parse(a["agcount"]); ag++)
        {
            var s = XfsDb.Fields(Db(ours, $"sb {ag}", "print"));
            Assert.True(s["dblocks"] == a["dblocks"] && s["agcount"] == a["agcount"] && s["inprogress"] == "0", $"secondary superblock {ag}");
        }
        AssertRepairClean(ours);
        AssertSameFiles(ours, manifest);
    }

    [Fact]
    public void A_volume_in_a_GPT_partition_grows_to_the_partition_and_nothing_else_changes()
    {
        var (baseImage, manifest) = volumes.Get("6.13");
        using var dir = new TempDir();
        string disk = Path.Combine(dir.Path, "disk.img");
        Shell.RunChecked("truncate", "-s", "800M", disk);
        Shell.RunChecked("sgdisk", "-n", "1:2048:+100M", "-n", "2:0:0", disk);
        long start, length;
        using (var d = XfsWin.Device.FileBlockDevice.Open(disk))
        {
            var p2 = XfsWin.Device.PartitionTable.Read(d).Get(2);
            (start, length) = (p2.StartByte, p2.LengthBytes);
        }
        Shell.RunChecked("dd", $"if={baseImage}", $"of={disk}", "bs=1M", $"seek={start}", "oflag=seek_bytes", "conv=notrunc,sparse", "status=none");
        string before = HashRange(disk, 0, start);

        var r = Xfswin.Run("grow", disk + "@2");
        Assert.True(r.Code == 0, r.ToString());
        Assert.Equal(before, HashRange(disk, 0, start));
        Assert.Contains("No problems found", Shell.RunChecked("sgdisk", "-v", disk).StandardOutput, StringComparison.Ordinal);

        string ours = Path.Combine(dir.Path, "part2.img");
        Shell.RunChecked("dd", $"if={disk}", $"of={ours}", "bs=1M", $"skip={start}", "iflag=skip_bytes", "conv=sparse", "status=none");
        string theirs = Copy(baseImage, dir.Path, "theirs.img");
        Shell.RunChecked("truncate", "-s", length.ToString(), theirs);
        ulong target = VolumeGrower.DeviceBlocks(length, 4096);
        KernelGrow(theirs, target);
        var a = Sb(ours);
        var b = Sb(theirs);
        Assert.Equal(target.ToString(), a["dblocks"]);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        AssertSameAgHeaders(theirs, ours, 3, uint.Parse(a["agcount"]));
        AssertRepairClean(ours);
        AssertSameFiles(ours, manifest);
    }

    private static string HashRange(string file, long offset, long length)
    {
        using var s = File.OpenRead(file);
        s.Position = offset;
        using var sha = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        var buffer = new byte[1 << 20];
        for (long left = length; left > 0;)
        {
            int n = s.Read(buffer, 0, (int)Math.Min(buffer.Length, left));
            if (n == 0) break;
            sha.AppendData(buffer, 0, n);
            left -= n;
        }
        return Convert.ToHexString(sha.GetHashAndReset());
    }

    [Fact]
    public void Sizes_are_blocks_or_suffixed_bytes_and_a_dry_run_writes_nothing()
    {
        Assert.Equal(1000UL, Commands.GrowCommand.ParseSize("1000", 4096));
        Assert.Equal(2621440UL, Commands.GrowCommand.ParseSize("10g", 4096));
        Assert.Equal(128UL, Commands.GrowCommand.ParseSize("512K", 4096));
        Assert.Equal(1UL << 30, Commands.GrowCommand.ParseSize("4t", 4096));
        Assert.Throws<FormatException>(() => Commands.GrowCommand.ParseSize("10x", 4096));
        Assert.Throws<FormatException>(() => Commands.GrowCommand.ParseSize("-5", 4096));

        var (baseImage, _) = volumes.Get("6.13");
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img");
        Shell.RunChecked("truncate", "-s", "1G", ours);
        string hash = Hash(ours);
        var r = Xfswin.Run("grow", "-n", ours);
        Assert.True(r.Code == 0, r.ToString());
        Assert.Matches(@"(?m)^data blocks\s+76801\s+262144$", r.Out);
        Assert.Matches(@"(?m)^allocation groups\s+4\s+14$", r.Out);
        Assert.Contains("Dry run: nothing was written.", r.Out, StringComparison.Ordinal);
        Assert.Equal(hash, Hash(ours));
        var suffixed = Xfswin.Run("grow", "--progress", ours, "-D", "800m");
        Assert.True(suffixed.Code == 0, suffixed.ToString());
        // Forced onto a pipe, progress is plain: one line per finished stage, on stderr only.
        Assert.Equal("grow: extending the last allocation group: done\ngrow: writing new allocation groups: done\ngrow: committing through the log: done\n",
            suffixed.Err.Replace("\r\n", "\n"));
        Assert.Contains("data blocks changed from 76801 to 204800", suffixed.Out, StringComparison.Ordinal);
        var tooBig = Xfswin.Run("grow", ours, "-D", "2g");
        Assert.NotEqual(0, tooBig.Code);
        Assert.Contains("truncate -s", tooBig.Err, StringComparison.Ordinal);
    }

    [Fact]
    public void A_metadir_volume_with_parent_pointers_grows_as_the_kernel_grows_it()
    {
        // The mkfs613 oracle image: mkfs.xfs 6.13 -n parent=1 -i exchange=1 -m metadir=1, filled by the kernel.
        var image = OracleImages.Ensure("mkfs613");
        using var dir = new TempDir();
        string ours = OracleImages.CopyTo(image, dir.Path, "ours.img"), theirs = OracleImages.CopyTo(image, dir.Path, "theirs.img");
        foreach (var f in new[] { ours, theirs }) Shell.RunChecked("truncate", "-s", "1300M", f);
        var before = Sb(ours);
        var r = Xfswin.Run("grow", ours);
        Assert.True(r.Code == 0, r.ToString());
        KernelGrow(theirs, VolumeGrower.DeviceBlocks(1300L << 20, 4096));
        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        AssertSameAgHeaders(theirs, ours, uint.Parse(before["agcount"]) - 1, uint.Parse(a["agcount"]));
        AssertRepairClean(ours, "6.13"); // 6.1 does not know metadir
        AssertSameFiles(ours, image.ManifestPath);
    }

    [Fact]
    public void A_full_volume_grows_as_the_kernel_grows_it()
    {
        var (baseImage, _) = volumes.Get("6.13");
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img");
        using (var m = XfsWin.TestSupport.LoopMount.Mount(ours, readOnly: false))
        {
            // Fill it until the kernel says it is full (its per-AG reservations keep the rest).
            Shell.Run("dd", "if=/dev/zero", $"of={m.MountPoint}/fill", "bs=1M", "status=none");
            for (int i = 0; i < 64; i++) Shell.Run("dd", "if=/dev/zero", $"of={m.MountPoint}/small{i}", "bs=4k", "count=1", "status=none");
        }
        string theirs = Copy(ours, dir.Path, "theirs.img");
        var before = Sb(ours);
        ulong target = ulong.Parse(before["dblocks"]) + 25000;
        foreach (var f in new[] { ours, theirs }) Shell.RunChecked("truncate", "-s", ((long)target * 4096).ToString(), f);
        var r = Xfswin.Run("grow", ours);
        Assert.True(r.Code == 0, r.ToString());
        KernelGrow(theirs, target);
        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        AssertSameAgHeaders(theirs, ours, 3, uint.Parse(a["agcount"]));
        Assert.Equal(Db(theirs, "agf 3", "freesp -s"), Db(ours, "agf 3", "freesp -s"));
        AssertRepairClean(ours);
        Assert.Equal(StatfsBlocks(theirs), StatfsBlocks(ours));
    }

    [Fact]
    public void A_hundredfold_grow_of_a_sparse_image_matches_the_kernel()
    {
        var (baseImage, _) = volumes.Get("6.13");
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img"), theirs = Copy(baseImage, dir.Path, "theirs.img");
        ulong target = 76801UL * 100;
        foreach (var f in new[] { ours, theirs }) Shell.RunChecked("truncate", "-s", ((long)target * 4096).ToString(), f);
        var r = Xfswin.Run("grow", ours, "-D", target.ToString());
        Assert.True(r.Code == 0, r.ToString());
        KernelGrow(theirs, target);
        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        Assert.Equal("400", a["agcount"]);
        AssertSameAgHeaders(theirs, ours, 3, 400);
        AssertRepairClean(ours);
        Assert.Equal(StatfsBlocks(theirs), StatfsBlocks(ours));
    }

    [Fact]
    public void A_grow_stopped_after_its_log_commit_is_finished_by_the_kernels_log_recovery()
    {
        var (baseImage, manifest) = volumes.Get("6.13");
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img"), theirs = Copy(baseImage, dir.Path, "theirs.img");
        ulong target = 76801 + 30000;
        foreach (var f in new[] { ours, theirs }) Shell.RunChecked("truncate", "-s", ((long)target * 4096).ToString(), f);
        var before = File.ReadAllBytes(ours).AsSpan(0, 512).ToArray();
        using (var access = WriteGate.Open(ours, null, null, WritePurpose.Grow))
        {
            var result = VolumeGrower.Run(access, target, options: new GrowOptions { StopAfterLogCommit = true });
            Assert.True(result.StoppedAfterLogCommit);
        }
        // Nothing in place yet: the primary superblock is as it was, and the log is dirty.
        Assert.Equal(before, File.ReadAllBytes(ours).AsSpan(0, 512).ToArray());
        var dirty = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", ours);
        Assert.NotEqual(0, dirty.ExitCode);
        KernelGrow(theirs, target);

        // xfswin's own recovery finishes it too.
        string recovered = Copy(ours, dir.Path, "recovered.img");
        var rec = Xfswin.Run("recover", recovered);
        Assert.True(rec.Code == 0, rec.ToString());
        Assert.Equal(target.ToString(), Sb(recovered)["dblocks"]);
        AssertRepairClean(recovered);

        // The kernel replays the commit at mount and sees the new size.
        long replayed;
        using (var m = XfsWin.TestSupport.LoopMount.Mount(ours, readOnly: false)) replayed = StatfsBlocksOf(m.MountPoint);
        Assert.Equal(StatfsBlocks(theirs), replayed);
        Assert.Equal(StatfsBlocks(theirs), StatfsBlocks(ours));
        var a = Sb(ours);
        Assert.Equal(target.ToString(), a["dblocks"]);
        Assert.Equal(Sb(theirs)["agcount"], a["agcount"]);
        AssertRepairClean(ours);
        AssertSameFiles(ours, manifest);
    }

    /// <summary>
    /// The kernel's online shrink of <paramref name="image"/> to <paramref name="smallest"/> blocks succeeds, and of
    /// <paramref name="copy"/> (the same volume) to one block less is refused.
    /// </summary>
    internal static void KernelShrinkTakesExactly(string image, string copy, ulong smallest)
    {
        var growfs = OracleImages.Tool("xfs_growfs", "6.13");
        using (var m = XfsWin.TestSupport.LoopMount.Mount(copy, readOnly: false))
        {
            var beyond = Shell.Run(growfs, "-D", (smallest - 1).ToString(), m.MountPoint);
            Assert.True(beyond.ExitCode != 0, $"the kernel shrank to {smallest - 1} blocks, below the smallest size we named");
        }
        using (var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: false))
        {
            var at = Shell.Run(growfs, "-D", smallest.ToString(), m.MountPoint);
            Assert.True(at.ExitCode == 0, $"the kernel refused to shrink to {smallest} blocks, the smallest size we named: {at.StandardError}");
        }
    }

    /// <summary>The free extents of AG <paramref name="ag"/> as xfs_db's freesp -d lists them (the AGFL's blocks among them).</summary>
    private static List<(uint Start, uint Length)> FreeExtents(string image, uint ag) =>
        Db(image, $"freesp -d -a {ag}").Split('\n').Select(l => l.Split(' ', StringSplitOptions.RemoveEmptyEntries))
            .Where(f => f.Length == 3 && f[0] == ag.ToString() && uint.TryParse(f[1], out _)).Select(f => (uint.Parse(f[1]), uint.Parse(f[2]))).ToList();

    /// <summary>The shrinkable volume's last AG (AG 3) ends in at least <see cref="GrowVolumes.ShrinkableTail"/> free blocks: xfs_db says so.</summary>
    internal static void AssertFreeTail(string image, uint agLength)
    {
        var tail = FreeExtents(image, 3).Where(e => e.Start + e.Length == agLength).ToList();
        Assert.True(tail.Count == 1 && tail[0].Length >= GrowVolumes.ShrinkableTail,
            $"AG 3 ({agLength} blocks) does not end in {GrowVolumes.ShrinkableTail} free blocks: {string.Join(", ", FreeExtents(image, 3).TakeLast(3))}");
    }

    [Fact]
    public void Shrink_removes_the_free_tail_of_the_last_AG_as_the_kernel_does_and_refuses_more()
    {
        var (baseImage, manifest) = volumes.GetShrinkable();
        var before = Sb(baseImage);
        ulong dblocks = ulong.Parse(before["dblocks"]), agblocks = ulong.Parse(before["agblocks"]);
        Assert.Equal(GrowVolumes.ShrinkableAgBlocks.ToString(), before["agblocks"]);
        Assert.Equal("4", before["agcount"]);
        uint lastLength = (uint)(dblocks - 3 * agblocks);
        AssertFreeTail(baseImage, lastLength);

        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img"), theirs = Copy(baseImage, dir.Path, "theirs.img");
        ulong target = dblocks - 200;
        var r = Xfswin.Run("grow", ours, "-D", target.ToString());
        Assert.True(r.Code == 0, r.ToString());
        Assert.Contains("(shrunk)", r.Out, StringComparison.Ordinal);
        KernelGrow(theirs, target);
        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        AssertSameAgHeaders(theirs, ours, 3, 4);
        AssertRepairClean(ours);
        AssertSameFiles(ours, manifest);

        // Removing an AG, or more than its free tail, is refused by name and writes nothing.
        string hash = Hash(ours);
        var whole = Xfswin.Run("grow", ours, "-D", (3 * agblocks).ToString());
        Assert.NotEqual(0, whole.Code);
        Assert.Contains("end of the last AG", whole.Err, StringComparison.Ordinal);
        var tooMuch = Xfswin.Run("grow", ours, "-D", (3 * agblocks + 100).ToString());
        Assert.NotEqual(0, tooMuch.Code);
        Assert.Contains("smallest size is", tooMuch.Err, StringComparison.Ordinal);
        Assert.Equal(hash, Hash(ours));

        // The smallest size named is the kernel's own limit: its shrink takes exactly that and refuses a block more.
        // (A refused shrink still commits the kernel's AGFL fix-up, so each kernel attempt gets its own copy.)
        string edge = Copy(baseImage, dir.Path, "edge.img"), kernelEdge = Copy(baseImage, dir.Path, "kedge.img"), kernelBeyond = Copy(baseImage, dir.Path, "kbeyond.img");
        var probe = Xfswin.Run("grow", edge, "-D", (3 * agblocks + 64).ToString());
        Assert.NotEqual(0, probe.Code);
        ulong smallest = ulong.Parse(System.Text.RegularExpressions.Regex.Match(probe.Err, @"smallest size is (\d+)").Groups[1].Value);
        Assert.True(smallest <= dblocks - GrowVolumes.ShrinkableTail / 2, $"smallest size {smallest} of {dblocks} blocks: most of the free tail should go");
        var atLimit = Xfswin.Run("grow", edge, "-D", smallest.ToString());
        Assert.True(atLimit.Code == 0, atLimit.ToString());
        KernelShrinkTakesExactly(kernelEdge, kernelBeyond, smallest);
        var e = Sb(edge);
        var k = Sb(kernelEdge);
        foreach (var f in SbFields) Assert.True(e[f] == k[f], $"sb {f} at the limit: ours {e[f]}, the kernel's {k[f]}");
        AssertSameAgHeaders(kernelEdge, edge, 3, 4);
        AssertRepairClean(edge);
    }

    /// <summary>
    /// A full volume grown by the kernel by 10000 blocks (a new AG): nearly all its free space is the new tail, so what a
    /// shrink may take is bounded by the kernel's free block counter (reservations, reserve pool, set-aside), not by
    /// the tail.
    /// </summary>
    [Fact]
    public void The_shrink_limit_of_a_full_volume_is_the_kernels_free_block_counter()
    {
        var (baseImage, _) = volumes.Get("6.13");
        using var dir = new TempDir();
        string full = Copy(baseImage, dir.Path, "full.img");
        using (var m = XfsWin.TestSupport.LoopMount.Mount(full, readOnly: false))
            Shell.Run("dd", "if=/dev/zero", $"of={m.MountPoint}/fill", "bs=1M", "status=none");
        ulong dblocks = ulong.Parse(Sb(full)["dblocks"]) + 10000;
        Shell.RunChecked("truncate", "-s", ((long)dblocks * 4096).ToString(), full);
        KernelGrow(full, dblocks);
        var sb = Sb(full);
        Assert.Equal(dblocks.ToString(), sb["dblocks"]);
        uint lastAg = uint.Parse(sb["agcount"]) - 1;
        uint lastLength = (uint)(dblocks - lastAg * ulong.Parse(sb["agblocks"]));
        var tail = FreeExtents(full, lastAg).Single(e => e.Start + e.Length == lastLength);
        // Besides the tail only what the kernel keeps back when full is free (its reserve pool of 5% and the AG reservations).
        Assert.True(ulong.Parse(sb["fdblocks"]) < tail.Length + dblocks / 20 + 2500, $"fdblocks {sb["fdblocks"]}: the volume is not full besides its {tail.Length}-block tail");

        string ours = Copy(full, dir.Path, "ours.img"), theirs = Copy(full, dir.Path, "theirs.img"), beyond = Copy(full, dir.Path, "beyond.img");
        var probe = Xfswin.Run("grow", ours, "-D", (dblocks - lastLength + VolumeGrower.MinAgBlocks).ToString());
        Assert.NotEqual(0, probe.Code);
        ulong smallest = ulong.Parse(System.Text.RegularExpressions.Regex.Match(probe.Err, @"smallest size is (\d+)").Groups[1].Value);
        Assert.True(smallest < dblocks, probe.ToString());
        Xfswin.Ok("grow", ours, "-D", smallest.ToString());
        KernelShrinkTakesExactly(theirs, beyond, smallest);
        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        AssertSameAgHeaders(theirs, ours, lastAg, lastAg + 1);
        AssertRepairClean(ours);
    }

    [Fact]
    public void Imaxpct_changes_alone_and_with_a_grow_as_xfs_growfs_m_does()
    {
        var (baseImage, manifest) = volumes.Get("6.13");
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img"), theirs = Copy(baseImage, dir.Path, "theirs.img");
        var before = Sb(ours);
        Assert.Equal("25", before["imax_pct"]);
        // -m alone: only the inode limit changes (the image is larger, but the data section stays).
        foreach (var f in new[] { ours, theirs }) Shell.RunChecked("truncate", "-s", "400M", f);
        var r = Xfswin.Run("grow", "-m", "7", ours);
        Assert.True(r.Code == 0, r.ToString());
        Assert.Contains("inode max percent changed from 25 to 7", r.Out, StringComparison.Ordinal);
        Assert.DoesNotContain("data blocks changed", r.Out, StringComparison.Ordinal);
        using (var m = XfsWin.TestSupport.LoopMount.Mount(theirs, readOnly: false))
            Shell.RunChecked(OracleImages.Tool("xfs_growfs", "6.13"), "-m", "7", m.MountPoint);
        var a = Sb(ours);
        var b = Sb(theirs);
        foreach (var f in SbFields.Append("imax_pct")) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        Assert.Equal(before["dblocks"], a["dblocks"]);
        AssertSecondariesAgree(ours, a);
        AssertRepairClean(ours);

        // -m with -D: both, in one transaction (the kernel changes imaxpct first, then grows).
        r = Xfswin.Run("grow", "-m", "50", "-D", "90000", ours);
        Assert.True(r.Code == 0, r.ToString());
        Assert.Contains("data blocks changed from", r.Out, StringComparison.Ordinal);
        Assert.Contains("inode max percent changed from 7 to 50", r.Out, StringComparison.Ordinal);
        using (var m = XfsWin.TestSupport.LoopMount.Mount(theirs, readOnly: false))
            Shell.RunChecked(OracleImages.Tool("xfs_growfs", "6.13"), "-m", "50", "-D", "90000", m.MountPoint);
        a = Sb(ours);
        b = Sb(theirs);
        foreach (var f in SbFields.Append("imax_pct")) Assert.True(a[f] == b[f], $"sb {f}: ours {a[f]}, the kernel's {b[f]}");
        AssertSecondariesAgree(ours, a);
        AssertRepairClean(ours);
        AssertSameFiles(ours, manifest);

        // Out of range is refused before anything is written.
        string hash = Hash(ours);
        var bad = Xfswin.Run("grow", "-m", "101", ours);
        Assert.Equal(ExitCodes.Usage, bad.Code);
        Assert.Contains("0 to 100", bad.Err, StringComparison.Ordinal);
        Assert.Equal(hash, Hash(ours));
    }

    /// <summary>Every secondary superblock repeats the primary's size, AG count and imax_pct, and none is left in progress.</summary>
    private static void AssertSecondariesAgree(string image, Dictionary<string, string> primary)
    {
        for (uint ag = 1; ag < uint.Parse(primary["agcount"]); ag++)
        {
            var s = XfsDb.Fields(Db(image, $"sb {ag}", "print"));
            foreach (var f in new[] { "dblocks", "agcount", "imax_pct", "inprogress" })
                Assert.True(s[f] == (f == "inprogress" ? "0" : primary[f]), $"secondary superblock {ag}: {f} {s[f]}");
        }
    }

    private static string Hash(string file)
    {
        using var s = File.OpenRead(file);
        return Convert.ToHexString(SHA256.HashData(s));
    }

    [Fact]
    public void Needsrepair_and_a_dirty_log_are_refused_with_the_device_unchanged()
    {
        var (baseImage, _) = volumes.Get("6.13");
        using var dir = new TempDir();
        string needs = Copy(baseImage, dir.Path, "needs.img");
        var incompat = Convert.ToUInt32(XfsDb.Fields(Db(needs, "sb 0", "print features_incompat"))["features_incompat"], 16);
        Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), "-x", "-c", "sb 0", "-c", $"write features_incompat {incompat | 0x10}", needs);
        Shell.RunChecked("truncate", "-s", "400M", needs);
        string hash = Hash(needs);
        var r = Xfswin.Run("grow", needs);
        Assert.NotEqual(0, r.Code);
        Assert.Contains("needsrepair", r.Err, StringComparison.Ordinal);
        var l = Xfswin.Run("label", needs, "x");
        Assert.NotEqual(0, l.Code);
        Assert.Equal(hash, Hash(needs));

        string dirty = Copy(baseImage, dir.Path, "dirty.img");
        using (var m = XfsWin.TestSupport.LoopMount.Mount(dirty, readOnly: false))
        {
            File.WriteAllText(Path.Combine(m.MountPoint, "new.txt"), "unreplayed");
            Shell.RunChecked(OracleImages.Tool("xfs_io", "6.13"), "-x", "-c", "shutdown -f", m.MountPoint);
        }
        Shell.RunChecked("truncate", "-s", "400M", dirty);
        hash = Hash(dirty);
        r = Xfswin.Run("grow", dirty);
        Assert.NotEqual(0, r.Code);
        Assert.Contains("replay it first: xfswin recover", r.Err, StringComparison.Ordinal);
        var u = Xfswin.Run("uuid", dirty, "generate");
        Assert.NotEqual(0, u.Code);
        Assert.Contains("replay it first: xfswin recover", u.Err, StringComparison.Ordinal);
        Assert.Equal(hash, Hash(dirty));

        var mounted = Xfswin.Run("grow", dir.Path);
        Assert.NotEqual(0, mounted.Code);
        Assert.Contains("no read-write xfswin mount serves it", mounted.Err, StringComparison.Ordinal);

        // An image the kernel has mounted is refused, for grow and for label alike.
        string busy = Copy(baseImage, dir.Path, "busy.img");
        Shell.RunChecked("truncate", "-s", "400M", busy);
        hash = Hash(busy);
        using (var m = XfsWin.TestSupport.LoopMount.Mount(busy, readOnly: true))
        {
            var g = Xfswin.Run("grow", busy);
            Assert.Equal(ExitCodes.Refused, g.Code);
            Assert.Contains("is mounted at " + m.MountPoint, g.Err, StringComparison.Ordinal);
            var lb = Xfswin.Run("label", busy, "nope");
            Assert.Equal(ExitCodes.Refused, lb.Code);
        }
        Assert.Equal(hash, Hash(busy));
    }

    private static string Identity(string image, uint agcount)
    {
        var lines = new List<string>();
        for (uint ag = 0; ag < agcount; ag++)
            lines.Add($"sb {ag}: " + Db(image, $"sb {ag}", "print uuid meta_uuid features_incompat fname").Replace('\n', ' '));
        return string.Join('\n', lines);
    }

    [Theory]
    [InlineData("6.13")]
    [InlineData("6.1")]
    public void Label_and_uuid_change_every_superblock_as_xfs_admin_does(string version)
    {
        var (baseImage, manifest) = volumes.Get(version);
        using var dir = new TempDir();
        string ours = Copy(baseImage, dir.Path, "ours.img"), theirs = Copy(baseImage, dir.Path, "theirs.img");
        uint agcount = uint.Parse(Sb(ours)["agcount"]);
        string original = Xfswin.Ok("uuid", ours).Out.Trim();
        Assert.StartsWith("UUID = ", original, StringComparison.Ordinal);
        Assert.Equal("label = \"\"", Xfswin.Ok("label", ours).Out.Trim());

        var xfsDb = OracleImages.Tool("xfs_db", "6.13");
        foreach (var (ourArgs, dbCommand) in new (string[], string)[]
        {
            (["label", ours, "twelve-bytes"], "label twelve-bytes"),
            (["uuid", ours, "11111111-2222-3333-4444-555555555555"], "uuid 11111111-2222-3333-4444-555555555555"),
            (["uuid", ours, "nil"], "uuid nil"),
            (["uuid", ours, "restore"], "uuid restore"),
            (["uuid", ours, "restore"], "uuid restore"),
            (["label", ours, "--"], "label --"),
        })
        {
            Xfswin.Ok(ourArgs);
            Shell.RunChecked(xfsDb, "-x", "-c", dbCommand, theirs);
            Assert.Equal(Identity(theirs, agcount), Identity(ours, agcount));
        }
        Assert.Equal(original, Xfswin.Ok("uuid", ours).Out.Trim());

        var g = Xfswin.Ok("uuid", ours, "generate");
        Assert.Contains("new UUID = ", g.Out, StringComparison.Ordinal);
        Xfswin.Ok("label", ours, "grown");
        var tooLong = Xfswin.Run("label", ours, "thirteen-byte");
        Assert.NotEqual(0, tooLong.Code);
        Assert.Contains("at most 12", tooLong.Err, StringComparison.Ordinal);
        AssertRepairClean(ours);
        using (var m = XfsWin.TestSupport.LoopMount.Mount(ours, readOnly: false))
            Assert.Equal("grown", Shell.RunChecked(OracleImages.Tool("xfs_io", "6.13"), "-c", "label", m.MountPoint).StandardOutput.Trim().Split('"')[1]);
        AssertRepairClean(ours);
        AssertSameFiles(ours, manifest);
    }
}

using System.Security.Cryptography;
using System.Text;
using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Files, directories, links and data written through a read-write open, judged by the kernel: after a clean unmount
/// (and, in the crash case, after the kernel replays our log) the kernel shows exactly the tree the engine was told to
/// make, and xfs_repair -n (6.1 and 6.13) finds nothing.
/// </summary>
public sealed class NamespaceKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-ns.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private string Make(string xfsprogs, string mkfsOptions, string size = "512M")
    {
        string image = Path.Combine(_tmp, $"v-{xfsprogs}-{Guid.NewGuid():N}.img");
        Shell.RunChecked("truncate", "-s", size, image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            // Something the kernel made, so our changes land next to its own.
            File.WriteAllText(Path.Combine(mount.MountPoint, "kernel-file"), "made by Linux");
            Directory.CreateDirectory(Path.Combine(mount.MountPoint, "kernel-dir"));
        }
        return image;
    }

    private void AssertRepairClean(string image, string xfsprogs)
    {
        foreach (var version in new[] { "6.1", "6.13" }.Where(v => v == "6.13" || xfsprogs == "6.1"))
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            if (repair.ExitCode != 0) output.WriteLine($"xfs_repair -n ({version}):\n{repair.StandardOutput}{repair.StandardError}");
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version} found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
    }

    /// <summary>What the tree should be: path -> "d", "l:target", or "f:sha256:size"; plus link counts of files.</summary>
    private sealed class Expected
    {
        public readonly SortedDictionary<string, string> Entries = new(StringComparer.Ordinal);
    }

    private static string Hash(byte[] data) => Convert.ToHexString(SHA256.HashData(data)).ToLowerInvariant();

    private static Expected KernelTree(string mountPoint)
    {
        var e = new Expected();
        foreach (var path in Directory.EnumerateFileSystemEntries(mountPoint, "*", SearchOption.AllDirectories))
        {
            string rel = "/" + Path.GetRelativePath(mountPoint, path);
            var info = new FileInfo(path);
            if (info.LinkTarget is { } target) e.Entries[rel] = "l:" + target;
            else if (Directory.Exists(path)) e.Entries[rel] = "d";
            else if (Shell.RunChecked("stat", "-c", "%F", path).StandardOutput.Trim() == "fifo")
            {
                // Opening a fifo would wait for a writer.
                e.Entries[rel] = "p:" + Shell.RunChecked("stat", "-c", "%h %a %u %g", path).StandardOutput.Trim();
            }
            else
            {
                var bytes = File.ReadAllBytes(path);
                string links = Shell.RunChecked("stat", "-c", "%h %a %u %g", path).StandardOutput.Trim();
                e.Entries[rel] = $"f:{Hash(bytes)}:{bytes.Length}:{links}";
            }
        }
        return e;
    }

    private static void AssertSame(Expected expected, Expected actual)
    {
        var missing = expected.Entries.Where(kv => !actual.Entries.TryGetValue(kv.Key, out var v) || v != kv.Value).Select(kv => $"{kv.Key}: expected {kv.Value}, kernel {(actual.Entries.TryGetValue(kv.Key, out var v) ? v : "(absent)")}");
        var extra = actual.Entries.Keys.Except(expected.Entries.Keys).Select(k => $"{k}: unexpected {actual.Entries[k]}");
        var problems = missing.Concat(extra).ToList();
        Assert.True(problems.Count == 0, string.Join('\n', problems.Take(40)));
    }

    /// <summary>
    /// A fixed workload that crosses the forms a change can take: short-form directories grown into block and leaf
    /// form, files written in place, appended, sparse and large enough for several extents, truncated, unlinked with
    /// other links left, renamed across directories and over other files, symlinks short and long, rmdir.
    /// </summary>
    private static Expected Workload(XfsVolume v, int seed)
    {
        var rng = new Random(seed);
        var expected = new Expected();
        expected.Entries["/kernel-file"] = $"f:{Hash("made by Linux"u8.ToArray())}:13:1 644 0 0";
        expected.Entries["/kernel-dir"] = "d";
        ulong root = v.RootInode;
        byte[] N(string s) => Encoding.UTF8.GetBytes(s);

        var a = v.MakeDirectory(root, N("a"), 0x1ED, 0, 0).Inode;
        expected.Entries["/a"] = "d";
        var b = v.MakeDirectory(a, N("b"), 0x1ED, 0, 0).Inode;
        expected.Entries["/a/b"] = "d";
        // Enough entries for block and then leaf form.
        var files = new Dictionary<string, (ulong Ino, byte[] Data)>();
        for (int i = 0; i < 300; i++)
        {
            string name = $"file-{i:D4}-{new string('x', rng.Next(1, 40))}";
            var ino = v.CreateNode(b, N(name), 0x81A4, 1000, 1000).Inode;
            byte[] data = new byte[rng.Next(0, 3) switch { 0 => 0, 1 => rng.Next(1, 5000), _ => rng.Next(5000, 200_000) }];
            rng.NextBytes(data);
            if (data.Length > 0) Assert.Equal(data.Length, v.Write(ino, 0, data));
            files[name] = (ino, data);
        }
        // A sparse file, overwritten in the middle, extended.
        var sparse = v.CreateNode(a, N("sparse"), 0x81B6, 0, 0).Inode;
        var sparseData = new byte[3 << 20];
        var chunk = new byte[10000];
        rng.NextBytes(chunk);
        v.Write(sparse, 1 << 20, chunk);
        chunk.CopyTo(sparseData, 1 << 20);
        rng.NextBytes(chunk);
        v.Write(sparse, (1 << 20) + 3000, chunk.AsSpan(0, 5000));
        chunk.AsSpan(0, 5000).CopyTo(sparseData.AsSpan((1 << 20) + 3000));
        v.SetAttributes(sparse, new AttributeChanges { Size = 3 << 20 });
        // Many small extents: every other block written backwards (neighbours do not merge).
        var frag = v.CreateNode(a, N("fragmented"), 0x81A4, 0, 0).Inode;
        var fragData = new byte[200 * 4096];
        for (int blk = 198; blk >= 0; blk -= 2)
        {
            var piece = new byte[4096];
            rng.NextBytes(piece);
            v.Write(frag, blk * 4096L, piece);
            piece.CopyTo(fragData, blk * 4096);
        }
        v.SetAttributes(frag, new AttributeChanges { Size = fragData.Length });
        // Truncate one file down.
        var first = files.First();
        if (first.Value.Data.Length > 10)
        {
            v.SetAttributes(first.Value.Ino, new AttributeChanges { Size = 10 });
            files[first.Key] = (first.Value.Ino, first.Value.Data[..10]);
        }
        // Hard links, then removing one name.
        var linked = files.ElementAt(5);
        v.Link(linked.Value.Ino, a, N("hard-link"));
        v.Link(linked.Value.Ino, root, N("hard-link-2"));
        v.Unlink(root, N("hard-link-2"));
        // Removes: a third of the files.
        foreach (var name in files.Keys.Where((_, i) => i % 3 == 1).ToList())
        {
            if (name == linked.Key) continue;
            v.Unlink(b, N(name));
            files.Remove(name);
        }
        // Renames: within the directory, across directories, over an existing file.
        var moved = files.Keys.Where(n => n != linked.Key).Skip(10).Take(3).ToList();
        v.Rename(b, N(moved[0]), b, N("renamed-here"));
        files["renamed-here"] = files[moved[0]];
        files.Remove(moved[0]);
        v.Rename(b, N(moved[1]), root, N("moved-to-root"));
        var toRoot = files[moved[1]];
        files.Remove(moved[1]);
        v.Rename(b, N(moved[2]), b, N("renamed-here"));
        files["renamed-here"] = files[moved[2]];
        files.Remove(moved[2]);
        var e = Assert.Throws<XfsException>(() => v.Rename(b, N("renamed-here"), a, N("hard-link"), RenameFlags.NoReplace));
        Assert.Equal(XfsError.Exists, e.Error);
        // Symlinks, one in the inode and one in a block.
        v.MakeSymlink(a, N("short-link"), N("b/renamed-here"), 0, 0);
        string longTarget = string.Join('/', Enumerable.Range(0, 60).Select(i => $"dir{i:D3}"));
        v.MakeSymlink(a, N("long-link"), N(longTarget), 0, 0);
        // A directory made and removed, one moved under another.
        var gone = v.MakeDirectory(root, N("gone"), 0x1ED, 0, 0).Inode;
        v.CreateNode(gone, N("inside"), 0x81A4, 0, 0);
        var notEmpty = Assert.Throws<XfsException>(() => v.RemoveDirectory(root, N("gone")));
        Assert.Equal(XfsError.NotEmpty, notEmpty.Error);
        v.Unlink(gone, N("inside"));
        v.RemoveDirectory(root, N("gone"));
        var c = v.MakeDirectory(root, N("c"), 0x1C0, 0, 0).Inode;
        v.Rename(root, N("c"), a, N("c-moved"));
        v.CreateNode(c, N("fifo"), 0x11A4, 0, 0);

        foreach (var (name, (ino, data)) in files)
        {
            string links = ino == linked.Value.Ino ? "2" : "1";
            expected.Entries["/a/b/" + name] = $"f:{Hash(data)}:{data.Length}:{links} 644 1000 1000";
        }
        expected.Entries["/a/hard-link"] = $"f:{Hash(linked.Value.Data)}:{linked.Value.Data.Length}:2 644 1000 1000";
        expected.Entries["/moved-to-root"] = $"f:{Hash(toRoot.Data)}:{toRoot.Data.Length}:1 644 1000 1000";
        expected.Entries["/a/sparse"] = $"f:{Hash(sparseData)}:{sparseData.Length}:1 666 0 0";
        expected.Entries["/a/fragmented"] = $"f:{Hash(fragData)}:{fragData.Length}:1 644 0 0";
        expected.Entries["/a/short-link"] = "l:b/renamed-here";
        expected.Entries["/a/long-link"] = "l:" + longTarget;
        expected.Entries["/a/c-moved"] = "d";
        expected.Entries["/a/c-moved/fifo"] = "p:1 644 0 0";
        return expected;
    }

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    [InlineData("6.13", "-b size=1024")]
    [InlineData("6.13", "-i sparse=1 -d agcount=2")]
    public void A_workload_written_through_the_engine_is_what_the_kernel_shows(string xfsprogs, string mkfsOptions)
    {
        string image = Make(xfsprogs, mkfsOptions);
        Expected expected;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
            expected = Workload(v, seed: 7);
        AssertRepairClean(image, xfsprogs);
        using (var mount = LoopMount.Mount(image, readOnly: true))
            AssertSame(expected, KernelTree(mount.MountPoint));
        // The kernel then writes to what we made, and repair still finds nothing.
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            File.WriteAllText(Path.Combine(mount.MountPoint, "a", "b", "after"), "kernel again");
            foreach (var f in Directory.GetFiles(Path.Combine(mount.MountPoint, "a", "b")).Take(20)) File.Delete(f);
        }
        AssertRepairClean(image, xfsprogs);
    }

    /// <summary>
    /// 64 KiB blocks of 512-byte inodes: one block holds 128 inodes, so a chunk allocation is one block and takes two
    /// inobt records of 64 (as mkfs and the kernel's xfs_ialloc_ag_alloc make them). 400 creates fill the root chunk and
    /// allocate new ones, whose second records must exist for the inodes the engine hands out from them.
    /// </summary>
    [Fact]
    public void On_blocks_holding_128_inodes_a_new_chunk_takes_a_record_for_each_64()
    {
        string image = Make("6.13", "-b size=65536", size: "1G");
        var created = new List<ulong>();
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.Equal(128, v.Info.BlockSize / v.Info.InodeSize);
            ulong dir = v.MakeDirectory(v.RootInode, "many"u8, 0x1ED, 0, 0).Inode;
            for (int i = 0; i < 400; i++)
            {
                ulong ino = v.CreateNode(dir, Encoding.ASCII.GetBytes($"f{i:D3}"), 0x81A4, 0, 0).Inode;
                v.Write(ino, 0, Encoding.ASCII.GetBytes($"file {i}"));
                created.Add(ino);
            }
        }
        // Inodes handed out from the second half of a block: the record for them is there to hand them out.
        Assert.Contains(created, ino => (ino & 127) >= 64);
        AssertRepairClean(image, "6.13");
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            var names = Directory.GetFiles(Path.Combine(mount.MountPoint, "many")).Select(Path.GetFileName).Order(StringComparer.Ordinal).ToList();
            Assert.Equal(Enumerable.Range(0, 400).Select(i => $"f{i:D3}"), names);
            Assert.Equal("file 399", File.ReadAllText(Path.Combine(mount.MountPoint, "many", "f399")));
            // The kernel takes the free inodes the engine's records hold, and allocates chunks of its own beside them.
            for (int i = 0; i < 300; i++) File.WriteAllText(Path.Combine(mount.MountPoint, "many", $"k{i:D3}"), "kernel");
        }
        AssertRepairClean(image, "6.13");
    }

    [Fact]
    public void A_workload_forced_to_the_log_survives_a_crash()
    {
        string image = Make("6.13", "");
        string crashed = Path.Combine(_tmp, "crashed.img");
        Expected expected;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            expected = Workload(v, seed: 11);
            v.Sync();
            File.Copy(image, crashed);
        }
        using (var mount = LoopMount.Mount(crashed, readOnly: false))
            AssertSame(expected, KernelTree(mount.MountPoint));
        AssertRepairClean(crashed, "6.13");
    }

    [Fact]
    public void Our_replay_of_our_log_gives_what_the_kernels_replay_gives()
    {
        string image = Make("6.13", "");
        string forKernel = Path.Combine(_tmp, "for-kernel.img"), forUs = Path.Combine(_tmp, "for-us.img");
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Workload(v, seed: 5);
            v.Sync();
            File.Copy(image, forKernel);
            File.Copy(image, forUs);
            if (Environment.GetEnvironmentVariable("XFSWIN_KEEP") is { } keep) File.Copy(image, keep, true);
        }
        // Our in-place replay of the crashed image, then the kernel reads both.
        using (var replayed = XfsVolume.Open(forUs, new VolumeOpenOptions { Replay = XfsWin.Journal.LogReplayMode.InPlace }))
            Assert.Equal(XfsWin.Journal.LogState.ReplayedInPlace, replayed.Info.LogState);
        AssertRepairClean(forUs, "6.13");
        Expected kernelView, ourView;
        using (var mount = LoopMount.Mount(forKernel, readOnly: false)) kernelView = KernelTree(mount.MountPoint);
        using (var mount = LoopMount.Mount(forUs, readOnly: true)) ourView = KernelTree(mount.MountPoint);
        AssertSame(kernelView, ourView);
    }

    [Fact]
    public void A_file_unlinked_while_held_lives_until_released_or_unmount()
    {
        string image = Make("6.13", "");
        var data = new byte[300_000];
        new Random(3).NextBytes(data);
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong root = v.RootInode;
            ulong held = v.CreateNode(root, "held"u8, 0x81A4, 0, 0).Inode;
            ulong released = v.CreateNode(root, "released"u8, 0x81A4, 0, 0).Inode;
            v.Write(held, 0, data);
            v.Write(released, 0, data);
            v.Retain(held);
            v.Retain(released);
            v.Unlink(root, "held"u8);
            v.Unlink(root, "released"u8);
            // Still readable through the hold, as an open file is.
            var back = new byte[data.Length];
            Assert.Equal(data.Length, v.Read(held, 0, back));
            Assert.Equal(data, back);
            Assert.Equal(0u, v.GetAttributes(held).LinkCount);
            long freeBefore = (long)v.GetStats().FreeBlocks;
            v.Release(released);
            Assert.True((long)v.GetStats().FreeBlocks > freeBefore, "releasing the last hold of an unlinked file freed nothing");
        }
        AssertRepairClean(image, "6.13");
        using var mount = LoopMount.Mount(image, readOnly: true);
        Assert.Equal("kernel-dir kernel-file", string.Join(" ", Directory.GetFileSystemEntries(mount.MountPoint).Select(p => Path.GetFileName(p)).Order()));
    }

    /// <summary>
    /// RENAME_WHITEOUT into a setgid directory: the kernel makes the whiteout as a temporary file of the target directory,
    /// so it takes that directory's group (found by the differential harness: ours kept the caller's). The same rename by
    /// the kernel on a copy gives the same owner and mode.
    /// </summary>
    [Fact]
    public void A_whiteout_takes_the_group_of_a_setgid_target_directory_as_the_kernels_does()
    {
        string image = Make("6.1", "");
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            string P(string r) => Path.Combine(mount.MountPoint, r);
            Shell.RunChecked("mknod", P("dev"), "c", "0", "0");
            Directory.CreateDirectory(P("sgid"));
            Shell.RunChecked("chown", "5:1", P("sgid"));
            Shell.RunChecked("chmod", "2755", P("sgid"));
        }
        string kernelCopy = Path.Combine(_tmp, "kernel-copy.img");
        Shell.RunChecked("cp", "--sparse=always", image, kernelCopy);
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong root = v.RootInode;
            v.TryLookup(root, "sgid"u8, out ulong sgid);
            v.Rename(root, "dev"u8, sgid, "moved"u8, RenameFlags.Whiteout);
        }
        AssertRepairClean(image, "6.1");
        using (var mount = LoopMount.Mount(kernelCopy, readOnly: false))
        {
            var rename = Shell.Run("python3", "-c",
                "import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); sys.exit(0 if l.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 4) == 0 else ctypes.get_errno())",
                Path.Combine(mount.MountPoint, "dev"), Path.Combine(mount.MountPoint, "sgid", "moved"));
            Assert.Equal(0, rename.ExitCode);
        }
        string Owners(string img)
        {
            using var mount = LoopMount.Mount(img, readOnly: true);
            return Shell.RunChecked("stat", "-c", "%n %F %a %u %g %t:%T", Path.Combine(mount.MountPoint, "dev"), Path.Combine(mount.MountPoint, "sgid", "moved"))
                .StandardOutput.Replace(mount.MountPoint, "", StringComparison.Ordinal).Trim();
        }
        string kernel = Owners(kernelCopy), ours = Owners(image);
        output.WriteLine(kernel);
        Assert.Contains("/dev character special file 0 0 1 0:0", kernel, StringComparison.Ordinal);
        Assert.Equal(kernel, ours);
    }

    [Fact]
    public void Running_out_of_space_and_inodes_leaves_a_consistent_volume()
    {
        string image = Make("6.13", "-i maxpct=1", size: "300M");
        var chunk = new byte[1 << 20];
        new Random(9).NextBytes(chunk);
        long written = 0;
        int created = 0;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong root = v.RootInode;
            ulong big = v.CreateNode(root, "big"u8, 0x81A4, 0, 0).Inode;
            var full = Assert.Throws<XfsException>((Action)(() =>
            {
                for (; ; written += chunk.Length) v.Write(big, written, chunk);
            }));
            Assert.Equal(XfsError.NoSpace, full.Error);
            Assert.Equal(written, v.GetAttributes(big).Size);
            // Space comes back when the file shrinks; then inodes run out (imaxpct 1%).
            v.SetAttributes(big, new AttributeChanges { Size = written / 2 });
            var noInodes = Assert.Throws<XfsException>((Action)(() =>
            {
                for (; ; created++) v.CreateNode(root, Encoding.ASCII.GetBytes($"f{created:D6}"), 0x81A4, 0, 0);
            }));
            Assert.Equal(XfsError.NoSpace, noInodes.Error);
            Assert.True(created > 1000, $"only {created} inodes before ENOSPC");
            // The volume still works after both.
            v.Unlink(root, "f000000"u8);
            v.CreateNode(root, "after"u8, 0x81A4, 0, 0);
        }
        output.WriteLine($"{written >> 20} MiB written, {created} files created before ENOSPC");
        AssertRepairClean(image, "6.13");
        using var mount = LoopMount.Mount(image, readOnly: false);
        Assert.Equal(written / 2, new FileInfo(Path.Combine(mount.MountPoint, "big")).Length);
        // The kernel writes into the space the shrink gave back (its inodes are at imaxpct, as ours were).
        using (var f = new FileStream(Path.Combine(mount.MountPoint, "big"), FileMode.Append)) f.Write(chunk);
    }

    /// <summary>
    /// A remote symlink's target block is a metadata buffer that stays dirty until the log's writeback pushes it. Removed
    /// and its block reused for file data in the same open, the buffer must be invalidated with the free (as the kernel's
    /// xfs_inactive_symlink_rmt does): written back at unmount it would overwrite the file's data with the old target.
    /// </summary>
    [Fact]
    public void A_removed_remote_symlink_never_overwrites_the_data_its_block_holds_next()
    {
        string image = Make("6.1", "");
        byte[] N(string s) => Encoding.UTF8.GetBytes(s);
        var data = new byte[8 * 4096];
        new Random(9).NextBytes(data);
        var linkBlocks = new HashSet<ulong>();
        int reused = 0;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }))
        {
            // Targets longer than the inode's literal area: a block each, whose buffers stay dirty.
            for (int i = 0; i < 8; i++)
            {
                var link = v.MakeSymlink(v.RootInode, N($"long-link-{i}"), N(new string((char)('a' + i), 1000)), 0, 0).Inode;
                Assert.True(Map(v, link).TryFind(0, out var extent, out _));
                linkBlocks.Add(extent.StartBlock);
            }
            for (int i = 0; i < 8; i++) v.Unlink(v.RootInode, N($"long-link-{i}"));
            // The frees are on disk (the blocks are no longer busy); nothing is written back in place yet.
            v.Sync();
            var file = v.CreateNode(v.RootInode, N("file"), 0x81A4, 0, 0).Inode;
            // A block per write, each placed near the file's last one: the small free pieces the symlinks left.
            for (int b = 0; b < 8; b++) v.Write(file, b * 4096, data.AsSpan(b * 4096, 4096));
            var map = Map(v, file);
            for (ulong fileBlock = 0; fileBlock < 8; fileBlock++)
            {
                if (map.TryFind(fileBlock, out var extent, out _) && linkBlocks.Contains(extent.StartBlock + (fileBlock - extent.FileOffset)))
                    reused++;
            }
        }
        // The form this test is about: the file's data went to blocks the symlinks' targets had.
        Assert.True(reused > 0, $"the file's blocks are none of the symlinks' ({string.Join(", ", linkBlocks)})");
        AssertRepairClean(image, "6.1");
        using var mount = LoopMount.Mount(image, readOnly: true);
        Assert.Equal(data, File.ReadAllBytes(Path.Combine(mount.MountPoint, "file")));
    }

    private static XfsWin.Extents.ExtentMap Map(XfsVolume v, ulong ino) =>
        new(v.Mount, new XfsWin.Inodes.InodeCache(v.Mount).Get(ino), XfsWin.Extents.ForkKind.Data);

    /// <summary>
    /// With 2 KiB inodes a chunk of 64 inodes is 128 KiB, which the inode cache reads as one buffer: releasing a chunk
    /// whose last inode is freed cancels that buffer in the log in pieces one log item can carry (64 KiB each, the
    /// kernel's inode clusters here). The chunk is gone from the inode btree; the kernel replays the log of a crash
    /// right after, and repair finds nothing after either.
    /// </summary>
    [Fact]
    public void Releasing_a_chunk_of_large_inodes_cancels_its_buffer_in_loggable_pieces()
    {
        string image = Make("6.13", "-i size=2048");
        string crashed = Path.Combine(_tmp, "crashed.img");
        long Count(string img, uint agno) => XfsDb.Number(XfsDb.Fields(XfsDb.Run(img, "6.13", $"agi {agno}", "print count"))["count"]);
        var emptyAgs = Enumerable.Range(0, 4).Select(a => (uint)a).Where(a => Count(image, a) == 0).ToHashSet();
        var released = new HashSet<uint>();
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            byte[] N(string s) => Encoding.UTF8.GetBytes(s);
            // New directories rotor across the AGs: one in an AG without inodes takes a chunk of its own there.
            for (int i = 0; i < 4; i++)
            {
                uint ag = v.Mount.Superblock.InoToAgno(v.MakeDirectory(v.RootInode, N($"d{i}"), 0x1ED, 0, 0).Inode);
                if (emptyAgs.Contains(ag)) released.Add(ag);
            }
            for (int i = 0; i < 4; i++) v.RemoveDirectory(v.RootInode, N($"d{i}"));
            v.Sync();
            File.Copy(image, crashed);
        }
        Assert.True(released.Count > 0, $"empty AGs {string.Join(",", emptyAgs)}");
        foreach (var img in new[] { image, crashed })
        {
            using (var mount = LoopMount.Mount(img, readOnly: false))
                Assert.Empty(Directory.GetDirectories(mount.MountPoint, "d?"));
            AssertRepairClean(img, "6.13");
            // Those chunks were released: their AGs' inode btrees count no inodes again.
            foreach (var ag in released) Assert.Equal(0, Count(img, ag));
        }
    }

    [Fact]
    public void Renaming_over_a_file_with_blocks_frees_them_once()
    {
        string image = Make("6.13", "");
        byte[] N(string s) => Encoding.UTF8.GetBytes(s);
        var data = new byte[3000];
        new Random(5).NextBytes(data);
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            var d = v.MakeDirectory(v.RootInode, N("d"), 0x1ED, 0, 0).Inode;
            var e = v.MakeDirectory(v.RootInode, N("e"), 0x1ED, 0, 0).Inode;
            var a = v.CreateNode(d, N("a"), 0x81A4, 0, 0).Inode;
            v.Write(a, 0, data);
            var b = v.CreateNode(e, N("b"), 0x81A4, 0, 0).Inode;
            v.Write(b, 0, new byte[20000]);
            // The replaced file's blocks go in transactions of their own before the rename's; the rename must not free them again.
            v.Rename(d, N("a"), e, N("b"));
        }
        AssertRepairClean(image, "6.13");
        using var mount = LoopMount.Mount(image, readOnly: true);
        Assert.False(File.Exists(Path.Combine(mount.MountPoint, "d", "a")));
        Assert.Equal(data, File.ReadAllBytes(Path.Combine(mount.MountPoint, "e", "b")));
    }

    [Fact]
    public void Thousands_of_inodes_split_the_inode_trees_and_stay_consistent()
    {
        // 1 KiB blocks: an inobt leaf holds 60 chunk records, so 5,000 inodes split the inobt and the finobt.
        string image = Make("6.13", "-b size=1024");
        var data = new byte[1500];
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            var dirs = Enumerable.Range(0, 50).Select(d => v.MakeDirectory(v.RootInode, Encoding.ASCII.GetBytes($"d{d:D2}"), 0x1ED, 0, 0).Inode).ToArray();
            for (int i = 0; i < 5000; i++)
            {
                ulong ino = v.CreateNode(dirs[i % dirs.Length], Encoding.ASCII.GetBytes($"f{i:D5}"), 0x81A4, 0, 0).Inode;
                if (i % 7 == 0) v.Write(ino, 0, data);
            }
            // Free every third one again: the finobt gains records back.
            for (int i = 0; i < 5000; i += 3) v.Unlink(dirs[i % dirs.Length], Encoding.ASCII.GetBytes($"f{i:D5}"));
        }
        AssertRepairClean(image, "6.13");
        using var mount = LoopMount.Mount(image, readOnly: false);
        Assert.Equal(5000 - 1667, Directory.EnumerateFiles(mount.MountPoint, "*", SearchOption.AllDirectories).Count() - 1);
        File.WriteAllText(Path.Combine(mount.MountPoint, "d00", "kernel"), "after");
    }

    [Fact]
    public void Creating_then_removing_thousands_of_files_with_data_leaves_a_consistent_volume()
    {
        string image = Make("6.13", "");
        var data = new byte[4096];
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            var dirs = Enumerable.Range(0, 20).Select(d => v.MakeDirectory(v.RootInode, Encoding.ASCII.GetBytes($"d{d}"), 0x1ED, 0, 0).Inode).ToArray();
            for (int i = 0; i < 2000; i++)
            {
                ulong ino = v.CreateNode(dirs[i % 20], Encoding.ASCII.GetBytes($"file-{i:D5}"), 0x81A4, 0, 0).Inode;
                v.Write(ino, 0, data);
                // Held as the kernel holds what it looked up (FUSE: until FORGET).
                v.Retain(ino);
            }
            for (int d = 0; d < 20; d++)
                foreach (var entry in v.ListDirectory(dirs[d]).Where(e => e.Name.Length > 2).ToList())
                {
                    v.Unlink(dirs[d], entry.Name);
                    if (entry.Inode % 2 == 0) v.Release(entry.Inode);
                }
            Assert.True(v.IsHealthy, v.FirstCorruption?.Message);
            for (int d = 0; d < 20; d++) v.CreateNode(dirs[d], "after"u8, 0x81A4, 0, 0);
            Assert.True(v.IsHealthy, v.FirstCorruption?.Message);
        }
        AssertRepairClean(image, "6.13");
    }
}

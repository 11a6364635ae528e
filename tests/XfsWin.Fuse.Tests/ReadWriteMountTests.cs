using System.Runtime.InteropServices;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>xfswin mount -o rw</c> judged by the kernel: real tools change a kernel-made volume through the
/// FUSE mount; after a clean unmount (or a SIGKILL of the server after fsync) the kernel's XFS mounts
/// the image and shows exactly those changes, and xfs_repair -n finds nothing.
/// </summary>
public sealed class ReadWriteMountTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-rwtest");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    private static string Stat(string path, string format) => Shell.Bash($"stat -c {Q(format)} {Q(path)}").Trim();

    private void AssertRepairClean(string image, string xfsprogs)
    {
        var problems = KernelMadeImages.RepairProblems(image, xfsprogs);
        Assert.True(problems.Count == 0, string.Join("\n", problems));
    }

    [Theory]
    [InlineData("6.1")]
    [InlineData("6.13")]
    public void Chmod_chown_touch_truncate_and_fsync_through_the_mount_are_what_the_kernel_shows(string xfsprogs)
    {
        var image = KernelMadeImages.Make(_tmp, xfsprogs);
        var before = DateTimeOffset.UtcNow.ToUnixTimeSeconds() - 2;
        using (var m = new ReadWriteMount(image))
        {
            Assert.Contains("mounted read-write", m.Output, StringComparison.Ordinal);
            Shell.Bash($"""
                chmod 0751 {Q(m["a"])}
                chown 1234:5678 {Q(m["a"])}
                touch -a -d @1000000000.123456789 {Q(m["b"])}
                touch -m -d @4000000000.000000005 {Q(m["b"])}
                touch {Q(m["d/e"])}
                truncate -s 1M {Q(m["d/c"])}
                sync {Q(m["d/c"])}
                """);
            // The mount itself shows the changes at once (the kernel's cached attributes follow its requests).
            Assert.Equal("751 1234 5678", Stat(m["a"], "%a %u %g"));
            Assert.Equal("751 1234 5678", Stat(m["d/h"], "%a %u %g"));
            Assert.Equal("1000000000 4000000000", Stat(m["b"], "%X %Y"));
            Assert.Equal("1048576", Stat(m["d/c"], "%s"));
            Assert.True(long.Parse(Stat(m["d/e"], "%Y"), System.Globalization.CultureInfo.InvariantCulture) >= before, "touch (UTIME_NOW) did not move the directory's mtime");
            var mount = Shell.Bash($"stat -f -c '%b %f %c %d' {Q(m.MountPoint)}").Trim();
            output.WriteLine($"statfs through the mount: {mount}");
            m.Unmount();
        }

        // A read-only loop device: the kernel refuses to mount it if our unmount left the log dirty.
        using (var k = LoopMount.Mount(image, readOnly: true))
        {
            string P(string r) => Path.Combine(k.MountPoint, r);
            Assert.Equal("751 1234 5678", Stat(P("a"), "%a %u %g"));
            Assert.Equal("alpha", File.ReadAllText(P("a")));
            Assert.Equal("1000000000 4000000000", Stat(P("b"), "%X %Y"));
            Assert.Equal("123456789", Stat(P("b"), "%x")[20..29]);
            Assert.Equal("644 0 0", Stat(P("b"), "%a %u %g"));
            Assert.True(long.Parse(Stat(P("d/e"), "%Y"), System.Globalization.CultureInfo.InvariantCulture) >= before);
            Assert.Equal("644 1048576", Stat(P("d/c"), "%a %s"));
            var c = File.ReadAllBytes(P("d/c"));
            Assert.Equal("gamma"u8.ToArray(), c[..5]);
            Assert.All(c[5..], x => Assert.Equal(0, x));
            Assert.Equal("2", Stat(P("a"), "%h"));
        }
        AssertRepairClean(image, xfsprogs);
    }

    /// <summary>
    /// The work of one process of <see cref="Processes_changing_the_mount_at_once_leave_what_the_kernel_finds"/>:
    /// <c>create K</c> makes, renames and removes files in directory pK; <c>overwrite K</c> writes its blocks of the
    /// first half of /shared (block b belongs to writer b % 2) and its 64-byte pieces of the second half (piece p to
    /// writer p % 2, so every block there is patched by both), three rounds each, byte value 16 * (round + 1) + K;
    /// <c>read</c> reads /shared whole while a writer runs and reports a piece that is not all one byte.
    /// </summary>
    private const string Worker = """
        import os, sys
        role, root = sys.argv[1], sys.argv[2]
        SIZE, BLOCK, PIECE = 1 << 20, 4096, 64
        def fill(k, r): return 16 * (r + 1) + k
        if role == "create":
            k = int(sys.argv[3]); d = os.path.join(root, "p%d" % k)
            for i in range(200):
                name = os.path.join(d, "n%d" % i)
                with open(name, "wb") as f: f.write((("p%d-%d;" % (k, i)) * (1 + i * 7)).encode())
                if i % 3 == 0: os.rename(name, os.path.join(d, "r%d" % i)); name = os.path.join(d, "r%d" % i)
                if i % 5 == 0: os.unlink(name)
        elif role == "overwrite":
            k = int(sys.argv[3]); fd = os.open(os.path.join(root, "shared"), os.O_WRONLY)
            for r in range(3):
                for b in range(k, SIZE // 2 // BLOCK, 2): os.pwrite(fd, bytes([fill(k, r)]) * BLOCK, b * BLOCK)
                for p in range(k, SIZE // 2 // PIECE, 2): os.pwrite(fd, bytes([fill(k, r)]) * PIECE, SIZE // 2 + p * PIECE)
            os.close(fd)
        elif role == "read":
            torn = 0
            for n in range(int(sys.argv[3])):
                with open(os.path.join(root, "shared"), "rb") as f: data = f.read()
                if len(data) != SIZE: print("read %d bytes" % len(data)); sys.exit(1)
                for at in range(0, SIZE, PIECE):
                    if data[at:at + PIECE].count(data[at]) != PIECE: torn += 1
            if torn: print("%d torn pieces" % torn); sys.exit(1)
        """;

    /// <summary>
    /// Five processes change and read one read-write mount at once: two create, rename and remove files in their own
    /// directories, two overwrite one shared file (whole blocks, and pieces of the same blocks), one reads it throughout.
    /// Every process succeeds, no read sees a piece half written, and after the unmount the kernel finds exactly the
    /// files, names and bytes they left; xfs_repair -n finds nothing.
    /// </summary>
    [Fact]
    public void Processes_changing_the_mount_at_once_leave_what_the_kernel_finds()
    {
        var image = KernelMadeImages.Make(_tmp, "6.13");
        var worker = Path.Combine(_tmp, "worker.py");
        File.WriteAllText(worker, Worker);
        using (var m = new ReadWriteMount(image))
        {
            Shell.Bash($"mkdir {Q(m["p0"])} {Q(m["p1"])} && head -c 1048576 /dev/zero > {Q(m["shared"])} && sync {Q(m["shared"])}");
            var r = Shell.Bash($"""
                pids=""
                for a in "create 0" "create 1" "overwrite 0" "overwrite 1" "read 20"; do
                    set -- $a
                    python3 {Q(worker)} "$1" {Q(m.MountPoint)} "$2" & pids="$pids $!"
                done
                for p in $pids; do wait $p; done
                echo all done
                """);
            Assert.Contains("all done", r, StringComparison.Ordinal);
            m.Unmount();
        }
        var shared = new byte[1 << 20];
        for (int b = 0; b < 128; b++) shared.AsSpan(b * 4096, 4096).Fill((byte)(16 * 3 + b % 2));
        for (int p = 0; p < (1 << 19) / 64; p++) shared.AsSpan((1 << 19) + p * 64, 64).Fill((byte)(16 * 3 + p % 2));
        using (var k = LoopMount.Mount(image, readOnly: true))
        {
            string P(string relative) => Path.Combine(k.MountPoint, relative);
            Assert.True(shared.AsSpan().SequenceEqual(File.ReadAllBytes(P("shared"))), "the kernel read another /shared than the writers left");
            for (int d = 0; d < 2; d++)
            {
                var expected = new SortedDictionary<string, string>(StringComparer.Ordinal);
                for (int i = 0; i < 200; i++)
                    if (i % 5 != 0) expected[(i % 3 == 0 ? "r" : "n") + i] = string.Concat(Enumerable.Repeat($"p{d}-{i};", 1 + i * 7));
                var found = Directory.GetFiles(P($"p{d}")).Select(Path.GetFileName).Order(StringComparer.Ordinal).ToList();
                Assert.Equal(expected.Keys, found!);
                foreach (var (name, content) in expected) Assert.Equal(content, File.ReadAllText(P($"p{d}/{name}")));
            }
        }
        AssertRepairClean(image, "6.13");
    }

    [Fact]
    public void After_fsync_and_a_killed_server_the_kernel_replays_our_log_and_shows_the_change()
    {
        var image = KernelMadeImages.Make(_tmp, "6.1");
        var m = new ReadWriteMount(image);
        try
        {
            Shell.Bash($"""
                chmod 0700 {Q(m["big"])}
                chown 42:43 {Q(m["big"])}
                python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.close(fd)' {Q(m["big"])}
                """);
            m.KillServer();
        }
        finally
        {
            m.Dispose();
        }
        // The image's log is dirty: the kernel replays it at mount.
        using (var k = LoopMount.Mount(image, readOnly: false))
        {
            Assert.Equal("700 42 43 70000", Stat(Path.Combine(k.MountPoint, "big"), "%a %u %g %s"));
            Assert.Equal(Enumerable.Range(0, 70000).Select(i => (byte)(i * 7)).ToArray(), File.ReadAllBytes(Path.Combine(k.MountPoint, "big")));
        }
        AssertRepairClean(image, "6.1");
    }

    /// <summary>
    /// SIGTERM or SIGINT to the server unmounts and closes the volume cleanly: the kernel then mounts
    /// it from a read-only loop device, which it refuses for a log that needs replaying.
    /// </summary>
    [Theory]
    [InlineData("TERM")]
    [InlineData("INT")]
    public void A_signal_to_the_server_unmounts_and_leaves_the_log_clean(string signal)
    {
        var image = KernelMadeImages.Make(_tmp, "6.1");
        var m = new ReadWriteMount(image);
        try
        {
            Shell.Bash($"chmod 0600 {Q(m["a"])} && chown 7:8 {Q(m["d/c"])}");
            Shell.Bash($"kill -{signal} {m.ServerProcessId}");
            m.WaitForExit(TimeSpan.FromSeconds(120));
            Assert.False(Shell.IsMounted(m.MountPoint, "fuse.xfswin"), $"SIG{signal} ended the server but left the mount");
        }
        finally
        {
            m.Dispose();
        }
        using (var k = LoopMount.Mount(image, readOnly: true))
        {
            Assert.Equal("600", Stat(Path.Combine(k.MountPoint, "a"), "%a"));
            Assert.Equal("7 8", Stat(Path.Combine(k.MountPoint, "d/c"), "%u %g"));
        }
        AssertRepairClean(image, "6.1");
    }

    [Fact]
    public void A_volume_opened_read_only_despite_rw_mounts_read_only_naming_why()
    {
        // Quota accounting (mkfs 6.13 -m uquota) is a feature the write path does not maintain.
        var image = Path.Combine(_tmp, "quota.img");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "300M", image);
        XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-m", "uquota", image);
        using var m = new ReadWriteMount(image);
        Assert.Contains("mounting read-only although 'rw' was asked for", m.Output, StringComparison.Ordinal);
        Assert.Contains("mounted read-only", m.Output, StringComparison.Ordinal);
        var options = File.ReadLines("/proc/self/mountinfo").Single(l => l.Split(' ')[4] == m.MountPoint).Split(' ')[5].Split(',');
        Assert.Equal("ro", options[0]);
        var r = Shell.Run("touch", [m["new"]]);
        Assert.Contains("Read-only file system", r.Stderr, StringComparison.Ordinal);
    }

    /// <summary>
    /// A full volume through the mount: writes fail with ENOSPC (never EIO) and the file keeps what was written;
    /// once a truncate gives space back, creates run out of inodes (imaxpct 1%) with ENOSPC too; the volume still
    /// takes changes afterwards, unmounts cleanly, and the kernel finds it consistent with every byte written.
    /// </summary>
    [Fact]
    public unsafe void Running_out_of_space_and_inodes_through_the_mount_answers_ENOSPC_and_leaves_a_consistent_volume()
    {
        var image = KernelMadeImages.Make(_tmp, "6.13", "full.img", ["-i", "maxpct=1"]);
        var chunk = new byte[1 << 20];
        new Random(11).NextBytes(chunk);
        long written = 0;
        int created = 0, writeErrno, createErrno;
        using (var m = new ReadWriteMount(image))
        {
            int fd = Libc.open(m["fill"], Libc.O_CREAT | Libc.O_WRONLY, 0x1A4);
            Assert.True(fd >= 0, $"create: errno {Marshal.GetLastPInvokeError()}");
            try
            {
                while (true)
                {
                    nint n;
                    fixed (byte* p = chunk)
                        n = Libc.pwrite(fd, p, chunk.Length, written);
                    if (n <= 0)
                    {
                        writeErrno = Marshal.GetLastPInvokeError();
                        break;
                    }
                    written += n;
                }
                Assert.Equal(0, Libc.fsync(fd));
            }
            finally
            {
                Libc.close(fd);
            }
            Assert.Equal(28, writeErrno);
            Assert.Equal(written, new FileInfo(m["fill"]).Length);
            // Space back; then inodes run out.
            Assert.Equal(0, Libc.truncate(m["fill"], written / 2));
            Directory.CreateDirectory(m["many"]);
            while (true)
            {
                int f = Libc.open(m[$"many/f{created:D6}"], Libc.O_CREAT | Libc.O_EXCL | Libc.O_WRONLY, 0x1A4);
                if (f < 0)
                {
                    createErrno = Marshal.GetLastPInvokeError();
                    break;
                }
                Libc.close(f);
                created++;
            }
            Assert.Equal(28, createErrno);
            Assert.True(created > 1000, $"only {created} files before ENOSPC");
            // Still writable: an inode freed is an inode to use. The server frees an unlinked file's inode when the
            // kernel forgets it (docs/fuse.md); the kernel forgets an inode without links once nothing holds it (its
            // FORGET is queued, hence the wait). Nothing here drops the kernel's caches: that is machine-wide, and
            // would change what the tests running beside this one see.
            File.Delete(m["many/f000000"]);
            var deadline = DateTime.UtcNow.AddSeconds(60);
            int after;
            while ((after = Libc.open(m["after"], Libc.O_CREAT | Libc.O_WRONLY, 0x1A4)) < 0 && Marshal.GetLastPInvokeError() == 28 && DateTime.UtcNow < deadline)
                Thread.Sleep(50);
            Assert.True(after >= 0, $"no inode came back after the unlink: errno {Marshal.GetLastPInvokeError()}");
            Libc.close(after);
            File.WriteAllText(m["after"], "still writable");
            m.Unmount();
        }
        output.WriteLine($"{written >> 20} MiB written, {created} files created before ENOSPC");
        AssertRepairClean(image, "6.13");
        using var k = LoopMount.Mount(image, readOnly: true);
        Assert.Equal(written / 2, new FileInfo(Path.Combine(k.MountPoint, "fill")).Length);
        var back = File.ReadAllBytes(Path.Combine(k.MountPoint, "fill"));
        for (long off = 0; off < back.Length; off += chunk.Length)
            Assert.True(back.AsSpan((int)off, (int)Math.Min(chunk.Length, back.Length - off)).SequenceEqual(chunk.AsSpan(0, (int)Math.Min(chunk.Length, back.Length - off))), $"bytes at {off} differ");
        Assert.Equal(created - 1, Directory.GetFiles(Path.Combine(k.MountPoint, "many")).Length);
        Assert.Equal("still writable", File.ReadAllText(Path.Combine(k.MountPoint, "after")));
    }
}

using System.Diagnostics;

namespace XfsWin.Fuse.Tests;

/// <summary>Mounting, serving and unmounting the ways users do it, and sources that must not mount.</summary>
public sealed class FuseLifecycleTests
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    private static void WaitForExit(int pid, string what)
    {
        var sw = Stopwatch.StartNew();
        while (Directory.Exists($"/proc/{pid}") && !File.ReadAllText($"/proc/{pid}/stat").Contains(") Z ", StringComparison.Ordinal))
        {
            // The limit only tells a hang from a slow machine.
            Assert.True(sw.Elapsed < TimeSpan.FromSeconds(60), $"the server (pid {pid}) is still running 60 s after {what}");
            Thread.Sleep(50);
        }
    }

    [Fact]
    public void Background_mount_returns_once_mounted_and_fusermount_u_ends_the_server()
    {
        using var m = new FuseMount(TestImages.Tree);
        Assert.True(m.ServerProcessId > 0, "xfswin mount did not name the server process: " + m.Output);
        Assert.True(Directory.Exists($"/proc/{m.ServerProcessId}"));
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt")));
        var r = Shell.UnmountFuse(m.MountPoint);
        Assert.True(r.ExitCode == 0, r.Both);
        WaitForExit(m.ServerProcessId, "fusermount3 -u");
        Assert.False(Shell.IsMounted(m.MountPoint, "fuse.xfswin"));
    }

    [Theory]
    [InlineData("TERM")]
    [InlineData("INT")]
    public void A_signal_to_the_server_unmounts_cleanly(string signal)
    {
        using var m = new FuseMount(TestImages.Tree);
        Assert.True(Directory.Exists(Path.Combine(m.MountPoint, "dirs")));
        Shell.Bash($"kill -{signal} {m.ServerProcessId}");
        WaitForExit(m.ServerProcessId, "SIG" + signal);
        Assert.False(Shell.IsMounted(m.MountPoint, "fuse.xfswin"), $"still mounted after SIG{signal}");
    }

    /// <summary>
    /// The kernel sets a FUSE mount's readahead to 128 KiB when it processes FUSE_INIT; the server
    /// raises it (4096 KiB by default) right after, and before `xfswin mount` returns, so that a
    /// read started at once does not run with the small window (1 MiB requests one at a time).
    /// </summary>
    [Theory]
    [InlineData("io_uring=no")]
    [InlineData("read_ahead_kb=2048")]
    public void The_mounts_readahead_is_raised_before_the_mount_command_returns(string option)
    {
        using var m = new FuseMount(TestImages.Tree, "-o", option);
        var device = FuseHost.MountDevice(m.MountPoint);
        Assert.NotNull(device);
        var expected = option.StartsWith("read_ahead_kb=", StringComparison.Ordinal) ? option["read_ahead_kb=".Length..] : "4096";
        Assert.Equal(expected, File.ReadAllText($"/sys/class/bdi/{device}/read_ahead_kb").Trim());
    }

    /// <summary>
    /// Scripts and CI runners start background commands with SIGINT ignored (a shell without job
    /// control does so), and the server inherits that; "kill -INT" must still unmount.
    /// </summary>
    [Fact]
    public void A_server_started_with_SIGINT_ignored_still_unmounts_on_SIGINT()
    {
        var mp = Shell.MakeTempDirectory("xfswin-sigign");
        var (file, prefix) = Shell.Xfswin;
        try
        {
            var command = string.Join(' ', prefix.Prepend(file).Concat(["mount", TestImages.Tree, mp]).Select(Q));
            var output = Shell.Bash($"trap '' INT; grep '^SigIgn:' /proc/self/status; {command} 2>&1");
            var ignored = Convert.ToUInt64(output.Split('\n')[0].Split('\t')[1], 16);
            Assert.True((ignored & 0b10) != 0, "the test did not start the server with SIGINT ignored: " + output);
            var pid = int.Parse(System.Text.RegularExpressions.Regex.Match(output, @"server pid (\d+)").Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture);
            Assert.True(Directory.Exists(Path.Combine(mp, "dirs")), output);
            Shell.Bash($"kill -INT {pid}");
            WaitForExit(pid, "SIGINT (started with SIGINT ignored)");
            Assert.False(Shell.IsMounted(mp, "fuse.xfswin"), "still mounted after SIGINT");
        }
        finally
        {
            if (Shell.IsMounted(mp, "fuse.xfswin"))
                Shell.UnmountFuse(mp);
            Directory.Delete(mp);
        }
    }

    [Fact]
    public async Task Foreground_mode_serves_until_ctrl_c_and_exits_0()
    {
        var mp = Shell.MakeTempDirectory("xfswin-fg");
        var (file, prefix) = Shell.Xfswin;
        var psi = new ProcessStartInfo(file) { UseShellExecute = false, RedirectStandardError = true, RedirectStandardOutput = true };
        foreach (var a in prefix.Concat(["mount", "-f", TestImages.Tree, mp]))
            psi.ArgumentList.Add(a);
        using var p = Process.Start(psi)!;
        var stderr = p.StandardError.ReadToEndAsync();
        try
        {
            var sw = Stopwatch.StartNew();
            while (!Shell.IsMounted(mp, "fuse.xfswin"))
            {
                if (p.HasExited)
                    Assert.Fail("xfswin mount -f exited early: " + await stderr);
                Assert.True(sw.Elapsed < TimeSpan.FromSeconds(120), "the mount did not appear in 120 s");
                Thread.Sleep(50);
            }
            Assert.Equal("bottom\n", File.ReadAllText(Path.Combine(mp, "deep/a/b/c/d/e/f/g/h/leaf.txt")));
            Shell.Bash($"kill -INT {p.Id}");
            Assert.True(p.WaitForExit(60_000), "xfswin mount -f did not exit after SIGINT");
            var messages = await stderr;
            Assert.True(p.ExitCode == 0, messages);
            Assert.False(Shell.IsMounted(mp, "fuse.xfswin"));
            Assert.Contains("mounted read-only on", messages, StringComparison.Ordinal);
        }
        finally
        {
            if (!p.HasExited)
                p.Kill();
            Shell.UnmountFuse(mp);
            Directory.Delete(mp);
        }
    }

    [Fact]
    public void Owner_override_and_allow_other_options_take_effect()
    {
        using var m = new FuseMount(TestImages.Tree, "-o", "uid=4242,gid=4343,allow_other,default_permissions");
        var owners = Shell.Bash($"stat --printf '%u:%g\\n' {Q(m.MountPoint)}/modes/owned {Q(m.MountPoint)}/small.txt");
        Assert.Equal("4242:4343\n4242:4343\n", owners);
        var line = File.ReadLines("/proc/self/mountinfo").Single(l => l.Split(' ')[4] == m.MountPoint);
        Assert.Contains("allow_other", line, StringComparison.Ordinal);
        Assert.Contains("default_permissions", line, StringComparison.Ordinal);
        // default_permissions: the kernel enforces modes, so another user cannot read a 0400 file owned by 4242.
        var r = Shell.Run("setpriv", ["--reuid=1000", "--regid=1000", "--clear-groups", "cat", Path.Combine(m.MountPoint, "modes/m0400")]);
        Assert.NotEqual(0, r.ExitCode);
        Assert.Contains("Permission denied", r.Stderr, StringComparison.Ordinal);
        r = Shell.Run("setpriv", ["--reuid=1000", "--regid=1000", "--clear-groups", "cat", Path.Combine(m.MountPoint, "small.txt")]);
        Assert.True(r.ExitCode == 0, r.Both);
    }

    [Fact]
    public void The_mounts_readahead_window_is_raised_as_asked()
    {
        using var m = new FuseMount(TestImages.Tree, "-o", "read_ahead_kb=2048");
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt"))); // init has completed
        var device = FuseHost.MountDevice(m.MountPoint);
        Assert.NotNull(device);
        // Raised once the init reply is written, before xfswin mount reports the mount (FuseHost.WaitForTransport).
        Assert.Equal("2048", File.ReadAllText($"/sys/class/bdi/{device}/read_ahead_kb").Trim());
    }

    [Fact]
    public void A_source_that_is_not_xfs_does_not_mount()
    {
        var dir = Shell.MakeTempDirectory("xfswin-bad");
        try
        {
            var img = Path.Combine(dir, "zeros.img");
            var mp = Directory.CreateDirectory(Path.Combine(dir, "mnt")).FullName;
            Shell.Bash($"truncate -s 64M {Q(img)}");
            var r = Shell.RunXfswin(["mount", img, mp]);
            Assert.Equal(1, r.ExitCode);
            Assert.Contains("not an XFS volume", r.Stderr, StringComparison.Ordinal);
            Assert.False(Shell.IsMounted(mp, "fuse.xfswin"));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void A_truncated_image_does_not_mount()
    {
        var dir = Shell.MakeTempDirectory("xfswin-trunc");
        try
        {
            var img = Path.Combine(dir, "truncated.img");
            var mp = Directory.CreateDirectory(Path.Combine(dir, "mnt")).FullName;
            Shell.Bash($"head -c 8M {Q(TestImages.Tree)} > {Q(img)}");
            var r = Shell.RunXfswin(["mount", img, mp]);
            Assert.Equal(1, r.ExitCode);
            Assert.Contains("truncated", r.Stderr, StringComparison.Ordinal);
            Assert.False(Shell.IsMounted(mp, "fuse.xfswin"));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>
    /// One inode's core is damaged (its CRC no longer matches): the kernel's XFS and the FUSE mount
    /// must both refuse exactly that file with the same error, and serve everything else.
    /// </summary>
    [Fact]
    public void Corrupt_inode_fails_only_that_file_with_the_kernels_error()
    {
        var dir = Shell.MakeTempDirectory("xfswin-corrupt");
        try
        {
            var img = Path.Combine(dir, "corrupt.img");
            _ = CopyWithSmallTxtDamaged(img);

            const string probe = """
                { stat -c %s small.txt || true; } 2>&1 | sed 's/^.*: //'
                cat hard1 'héllo wörld.txt'
                ls | wc -l
                """;
            string kernel;
            using (var k = new KernelMount(img))
                kernel = Shell.Bash($"cd {Q(k.MountPoint)}\n{probe}");
            using var f = new FuseMount(img);
            var fuse = Shell.Bash($"cd {Q(f.MountPoint)}\n{probe}");
            Assert.Contains("Structure needs cleaning", kernel, StringComparison.Ordinal);
            Assert.Equal(kernel, fuse);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>
    /// A copy of the tree image in <paramref name="img"/> whose small.txt inode is damaged (a byte of its mode cleared,
    /// so its CRC no longer matches); returns that inode's number.
    /// </summary>
    private static string CopyWithSmallTxtDamaged(string img)
    {
        Shell.Bash($"cp --sparse=always {Q(TestImages.Tree)} {Q(img)}");
        // Find small.txt's inode and its byte address with xfs_db, then clear the mode's low byte on disk.
        var small = Shell.Bash($"mp=$(mktemp -d); mount -o loop,ro,nouuid {Q(img)} $mp; stat -c %i $mp/small.txt; umount $mp; rmdir $mp").Trim();
        var daddr = Shell.Bash($"xfs_db -r -c 'inode {small}' -c 'daddr' {Q(img)}").Trim();
        var sector = long.Parse(daddr.Split(' ')[^1], System.Globalization.CultureInfo.InvariantCulture);
        // daddr names the inode's 512-byte sector; with 512-byte inodes the inode starts there.
        Shell.Bash($"printf '\\x00' | dd of={Q(img)} bs=1 seek={sector * 512 + 3} conv=notrunc status=none");
        return small;
    }

    /// <summary>
    /// A background server keeps its messages in the file of -o log=PATH: a request that failed on a damaged inode is
    /// there, stamped with the time and the server's pid, between the mount's line and the unmount's.
    /// </summary>
    [Fact]
    public void A_background_server_writes_its_messages_to_the_log_file()
    {
        var dir = Shell.MakeTempDirectory("xfswin-serverlog");
        try
        {
            var img = Path.Combine(dir, "corrupt.img");
            var small = CopyWithSmallTxtDamaged(img);
            var logFile = Path.Combine(dir, "server.log");
            int pid;
            using (var f = new FuseMount(img, "-o", $"log={logFile}"))
            {
                pid = f.ServerProcessId;
                var stat = Shell.Bash($"stat -c %s {Q(Path.Combine(f.MountPoint, "small.txt"))} 2>&1 || true");
                Assert.Contains("Structure needs cleaning", stat, StringComparison.Ordinal);
            }
            // The server writes its last line as it exits, after the unmount (bounded: a hang fails).
            var deadline = DateTime.UtcNow.AddMinutes(1);
            while (Directory.Exists($"/proc/{pid}") && !File.ReadAllText($"/proc/{pid}/stat").Contains(") Z ", StringComparison.Ordinal))
            {
                Assert.True(DateTime.UtcNow < deadline, $"the server (pid {pid}) did not exit after the unmount");
                Thread.Sleep(20);
            }
            var lines = File.ReadAllLines(logFile);
            var stamp = $@"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}}Z \[{pid}\] ";
            Assert.True(lines.Length >= 3, string.Join('\n', lines));
            Assert.Matches(stamp + "xfswin: .*corrupt.img mounted read-only on ", lines[0]);
            Assert.Contains(lines[1..^1], l => System.Text.RegularExpressions.Regex.IsMatch(l, stamp + $"xfswin: .*failed: .*inode {small}"));
            Assert.Matches(stamp + "xfswin: .* unmounted$", lines[^1]);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

/// <summary>The committed sample (samples/sample.xfs.zst) mounts and shows what the kernel shows.</summary>
public sealed class SampleVolumeTests
{
    [Fact]
    public void Bundled_sample_mounts_and_matches_the_kernel()
    {
        var dir = Shell.MakeTempDirectory("xfswin-sample-test");
        try
        {
            var img = Path.Combine(dir, "sample.xfs.img");
            var zst = Path.Combine(XfsWin.TestSupport.OracleImages.RepoRoot, "samples", "sample.xfs.zst");
            Assert.True(new FileInfo(zst).Length < 1_000_000, "the committed sample must stay under 1 MB");
            var r = Shell.Run("zstd", ["-d", "-q", zst, "-o", img]);
            Assert.True(r.ExitCode == 0, r.Both);
            XfsWin.TestSupport.KernelManifest kernel;
            using (var k = new KernelMount(img))
                kernel = ManifestComparison.Take(k.MountPoint);
            using var f = new FuseMount(img);
            var diffs = ManifestComparison.Differences(kernel, ManifestComparison.Take(f.MountPoint));
            Assert.True(diffs.Count == 0, ManifestComparison.Format(diffs));
            Assert.Contains(kernel.Entries, e => e.Printable.Contains("日本語", StringComparison.Ordinal));
            Assert.Equal("docs/hello.txt", new FileInfo(Path.Combine(f.MountPoint, "hello-link")).LinkTarget);
            Assert.Equal("Hello from XFS!\n", File.ReadAllText(Path.Combine(f.MountPoint, "hello-link")));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

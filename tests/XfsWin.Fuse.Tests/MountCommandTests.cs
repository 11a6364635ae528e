using XfsWin.Cli.Commands;
using XfsWin.Journal;
using XfsWin.Volume;

namespace XfsWin.Fuse.Tests;

public sealed class MountArgumentsTests
{
    [Fact]
    public void Options_map_to_the_host_and_the_volume()
    {
        var m = MountArguments.Parse(["-o", "ro,allow_other,default_permissions,uid=1000,gid=100,attr_timeout=5,entry_timeout=2.5,max_threads=3,clone_fd,readdirplus=yes,read_ahead_kb=1024,log=server.log,max_read=131072",
            "--replay=none", "-f", "img", "mnt"]);
        Assert.True(m.Foreground);
        Assert.Equal(LogReplayMode.None, m.Replay);
        Assert.Equal(Path.GetFullPath("img"), m.Source);
        Assert.Equal(Path.GetFullPath("mnt"), m.MountPoint);
        Assert.Equal(Path.GetFullPath("server.log"), m.LogFile);
        var o = m.ToHostOptions();
        Assert.True(o.AllowOther);
        Assert.True(o.DefaultPermissions);
        Assert.Equal(1000u, o.UidOverride);
        Assert.Equal(100u, o.GidOverride);
        Assert.Equal(5, o.AttributeTimeout);
        Assert.Equal(2.5, o.EntryTimeout);
        Assert.Equal(3, o.MaxThreads);
        Assert.True(o.CloneFd);
        Assert.True(o.ReaddirPlus);
        Assert.Equal(1024, o.ReadAheadKiB);
        Assert.Equal(["max_read=131072"], o.ExtraOptions);
        Assert.Equal(Path.GetFullPath("img"), o.FileSystemName);
    }

    [Theory]
    [InlineData("memory", LogReplayMode.Memory)]
    [InlineData("place", LogReplayMode.InPlace)]
    [InlineData("none", LogReplayMode.None)]
    public void Replay_modes(string value, LogReplayMode expected)
    {
        Assert.Equal(expected, MountArguments.Parse(["--replay", value, "a", "b"]).Replay);
        Assert.Equal(expected, MountArguments.Parse([$"--replay={value}", "a", "b"]).Replay);
    }

    [Fact]
    public void Defaults_are_background_read_only_with_long_cache_timeouts()
    {
        var m = MountArguments.Parse(["a", "b"]);
        Assert.False(m.Foreground);
        Assert.Equal(LogReplayMode.Memory, m.Replay);
        var o = m.ToHostOptions();
        Assert.False(o.AllowOther);
        Assert.Null(o.UidOverride);
        Assert.False(o.ReaddirPlus);
        Assert.True(o.ReadOnly);
        Assert.True(o.AttributeTimeout >= 60);
        Assert.True(o.EntryTimeout >= 60);
    }

    [Fact]
    public void Rw_asks_for_a_writable_volume_with_short_cache_timeouts_unless_given()
    {
        var m = MountArguments.Parse(["-o", "rw", "a", "b"]);
        Assert.True(m.ReadWrite);
        var o = m.ToHostOptions(writable: true);
        Assert.False(o.ReadOnly);
        Assert.Equal(MountArguments.ReadWriteTimeout, o.AttributeTimeout);
        Assert.Equal(MountArguments.ReadWriteTimeout, o.EntryTimeout);
        // Requests are served on as many threads as on a read-only mount (ConcurrentChangesTests runs them side by side).
        Assert.Equal(new FuseMountOptions().MaxThreads, o.MaxThreads);
        Assert.True(o.MaxThreads >= 4);
        // A volume the engine opened read-only despite rw is served read-only, with the long timeouts.
        Assert.True(m.ToHostOptions(writable: false).ReadOnly);
        Assert.Equal(MountArguments.ReadOnlyTimeout, m.ToHostOptions(writable: false).AttributeTimeout);
        var given = MountArguments.Parse(["-o", "rw,attr_timeout=7,entry_timeout=0", "a", "b"]).ToHostOptions(writable: true);
        Assert.Equal(7, given.AttributeTimeout);
        Assert.Equal(0, given.EntryTimeout);
        Assert.False(MountArguments.Parse(["-o", "rw", "-o", "ro", "a", "b"]).ReadWrite);
    }

    [Theory]
    [InlineData("uid=bob", "numeric")]
    [InlineData("fsname=x", "set by xfswin")]
    [InlineData("attr_timeout=-1", "seconds")]
    [InlineData("readdirplus=maybe", "yes or no")]
    [InlineData("follow_caller=no", "scheduler places")]
    [InlineData("read_ahead_kb=lots", "KiB")]
    public void Bad_options_say_what_is_wrong(string option, string expected)
    {
        var e = Assert.Throws<ArgumentException>(() => MountArguments.Parse(["-o", option, "a", "b"]));
        Assert.Contains(expected, e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Wrong_argument_counts_and_unknown_options_are_refused()
    {
        Assert.Throws<ArgumentException>(() => MountArguments.Parse(["only-one"]));
        Assert.Throws<ArgumentException>(() => MountArguments.Parse(["a", "b", "c"]));
        Assert.Throws<ArgumentException>(() => MountArguments.Parse(["--bogus", "a", "b"]));
        Assert.Throws<ArgumentException>(() => MountArguments.Parse(["--replay=later", "a", "b"]));
        Assert.True(MountArguments.Parse(["--help"]).Help);
    }

    [Fact]
    public void Commas_and_backslashes_in_the_source_name_are_escaped_for_libfuse()
    {
        Assert.Equal("/a\\,b\\\\c", FuseHost.EscapeOption("/a,b\\c"));
    }
}

/// <summary>The command as users run it: a separate process, real /dev/fuse and libfuse3.</summary>
public sealed class MountCommandProcessTests
{
    [Fact]
    public void Usage_errors_exit_2_with_a_hint()
    {
        var r = Shell.RunXfswin(["mount", "just-one-argument"]);
        Assert.Equal(2, r.ExitCode);
        Assert.Contains("MOUNTPOINT", r.Stderr, StringComparison.Ordinal);
        Assert.Contains("--help", r.Stderr, StringComparison.Ordinal);
    }

    [Fact]
    public void Missing_mount_point_is_reported_before_anything_is_opened()
    {
        var r = Shell.RunXfswin(["mount", "/nonexistent.img", "/nonexistent-mount-point-xfswin"]);
        Assert.Equal(1, r.ExitCode);
        Assert.Contains("mkdir -p /nonexistent-mount-point-xfswin", r.Stderr, StringComparison.Ordinal);
    }

    /// <summary>
    /// Runs xfswin in a private mount namespace where /dev is a fresh tmpfs holding only the
    /// character devices the runtime needs: there is no /dev/fuse, exactly as on a machine without
    /// the module. The host's /dev is not touched.
    /// </summary>
    [Fact]
    public void Without_dev_fuse_the_mount_fails_with_a_clear_message()
    {
        var mp = Shell.MakeTempDirectory("xfswin-nofuse");
        try
        {
            var (file, prefix) = Shell.Xfswin;
            var command = string.Join(' ', new[] { file }.Concat(prefix).Concat(["mount", "-f", "/nonexistent.img", mp]).Select(Quote));
            var r = Shell.Run("unshare", ["--mount", "--propagation", "private", "bash", "-euc",
                "mount -t tmpfs -o mode=755 xfswin-test-dev /dev; " +
                "mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; " +
                "test ! -e /dev/fuse; exec " + command]);
            Assert.True(r.ExitCode == 1, r.Both);
            Assert.Contains("/dev/fuse does not exist", r.Stderr, StringComparison.Ordinal);
            Assert.Contains("modprobe fuse", r.Stderr, StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(mp);
        }
    }

    /// <summary>Same, with libfuse3.so.3 replaced (inside a private namespace) by an empty file.</summary>
    [Fact]
    public void Without_libfuse3_the_mount_fails_with_a_clear_message()
    {
        var mp = Shell.MakeTempDirectory("xfswin-nolib");
        try
        {
            var (file, prefix) = Shell.Xfswin;
            var command = string.Join(' ', new[] { file }.Concat(prefix).Concat(["mount", "-f", "/nonexistent.img", mp]).Select(Quote));
            var r = Shell.Run("unshare", ["--mount", "--propagation", "private", "bash", "-euc",
                "lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libfuse3.so.3); mount --bind /dev/null \"$lib\"; exec " + command]);
            Assert.True(r.ExitCode == 1, r.Both);
            Assert.Contains("libfuse3", r.Stderr, StringComparison.Ordinal);
            Assert.Contains("apt-get install fuse3", r.Stderr, StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(mp);
        }
    }

    /// <summary>
    /// /dev/fuse readable by root only (a 0600 node bound over it in a private mount namespace) and
    /// an ordinary user: the message says how to get access instead of libfuse's bare EACCES.
    /// </summary>
    [Fact]
    public void A_user_without_access_to_dev_fuse_is_told_how_to_get_it()
    {
        var dir = Shell.MakeTempDirectory("xfswin-noaccess");
        try
        {
            Shell.Bash($"chmod 0755 {Quote(dir)}; mkdir {Quote(dir)}/mnt; chown 1000:1000 {Quote(dir)}/mnt");
            var (file, _) = Shell.Xfswin;
            // The user must be able to read the program: run a world-readable copy of it.
            var dll = Path.Combine(XfsWin.TestSupport.UnprivilegedRun.OutputDirectory, "xfswin.dll");
            var command = string.Join(' ', new[] { file, dll, "mount", "-f", "/nonexistent.img", dir + "/mnt" }.Select(Quote));
            var r = Shell.Run("unshare", ["--mount", "--propagation", "private", "bash", "-euc",
                $"mknod -m 0600 {Quote(dir)}/fuse c 10 229; mount --bind {Quote(dir)}/fuse /dev/fuse; " +
                $"exec setpriv --reuid=1000 --regid=1000 --clear-groups env HOME={Quote(dir)} DOTNET_CLI_HOME={Quote(dir)} {command}"]);
            Assert.True(r.ExitCode == 1, r.Both);
            Assert.Contains("/dev/fuse cannot be opened", r.Stderr, StringComparison.Ordinal);
            Assert.Contains("chmod 0666 /dev/fuse", r.Stderr, StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    internal static string Quote(string s) => "'" + s.Replace("'", "'\\''", StringComparison.Ordinal) + "'";
}

using System.Security.Cryptography;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// A volume Linux did not unmount cleanly (changes in the log only, made with xfs_io's forced
/// shutdown): --replay=memory (the default) and --replay=place must show what the kernel shows after
/// its own log recovery; memory must leave the device untouched, place must leave a clean volume;
/// --replay=none shows the stale, pre-log view.
/// </summary>
public sealed class DirtyLogTests : IDisposable
{
    private readonly string _dir = Shell.MakeTempDirectory("xfswin-dirty");
    private readonly string _dirty;

    public DirtyLogTests()
    {
        _dirty = Path.Combine(_dir, "dirty.img");
        Shell.Bash($"""
            cd {Q(_dir)}
            truncate -s 512M dirty.img
            mkfs.xfs -q -f dirty.img
            mkdir m
            mount -o loop dirty.img m
            echo before > m/before.txt
            umount m
            mount -o loop dirty.img m
            mkdir m/newdir
            for i in 1 2 3; do echo "new $i" > m/newdir/f$i; done
            setfattr -n user.k -v v m/newdir/f1
            ln -s before.txt m/link-after
            xfs_io -x -c 'shutdown -f' m
            umount m
            rmdir m
            if xfs_repair -n dirty.img >/dev/null 2>&1; then echo 'the log is not dirty' >&2; exit 1; fi
            """);
    }

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    private string Copy(string name)
    {
        var path = Path.Combine(_dir, name);
        Shell.Bash($"cp --sparse=always {Q(_dirty)} {Q(path)}");
        return path;
    }

    /// <summary>The kernel's view: its own recovery (a read-write mount), then a read-only mount for the manifest.</summary>
    private XfsWin.TestSupport.KernelManifest KernelAfterRecovery()
    {
        var copy = Copy("kernel.img");
        var mp = Shell.MakeTempDirectory("xfswin-recover");
        try
        {
            Shell.Bash($"mount -o loop,nouuid {Q(copy)} {Q(mp)} && umount {Q(mp)}");
        }
        finally
        {
            Directory.Delete(mp);
        }
        using var k = new KernelMount(copy);
        return ManifestComparison.Take(k.MountPoint);
    }

    private static string Hash(string path)
    {
        using var s = File.OpenRead(path);
        return Convert.ToHexString(SHA256.HashData(s));
    }

    [Fact]
    public void Memory_replay_shows_the_recovered_tree_and_writes_nothing()
    {
        var expected = KernelAfterRecovery();
        Assert.NotNull(expected.Find("newdir/f3"));
        var img = Copy("memory.img");
        var before = Hash(img);
        using (var f = new FuseMount(img))
        {
            Assert.Contains("replayed in memory", f.Output, StringComparison.Ordinal);
            var diffs = ManifestComparison.Differences(expected, ManifestComparison.Take(f.MountPoint));
            Assert.True(diffs.Count == 0, ManifestComparison.Format(diffs));
        }
        Assert.Equal(before, Hash(img));
    }

    [Fact]
    public void Replay_in_place_writes_the_recovery_and_leaves_a_clean_volume()
    {
        var expected = KernelAfterRecovery();
        var img = Copy("place.img");
        using (var f = new FuseMount(img, "--replay=place"))
        {
            var diffs = ManifestComparison.Differences(expected, ManifestComparison.Take(f.MountPoint));
            Assert.True(diffs.Count == 0, ManifestComparison.Format(diffs));
        }
        var repair = Shell.Run("xfs_repair", ["-n", img]);
        Assert.True(repair.ExitCode == 0, "xfs_repair -n does not accept the volume after replay in place:\n" + repair.Both);
    }

    [Fact]
    public void No_replay_shows_the_stale_view()
    {
        var img = Copy("none.img");
        using var f = new FuseMount(img, "--replay=none");
        Assert.Equal("before\n", File.ReadAllText(Path.Combine(f.MountPoint, "before.txt")));
        Assert.False(Directory.Exists(Path.Combine(f.MountPoint, "newdir")), "the changes that were only in the log are visible without replay");
    }
}

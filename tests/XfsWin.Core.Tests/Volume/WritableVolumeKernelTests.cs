using Xunit;
using Xunit.Abstractions;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// A read-write open judged by the kernel: volumes made by mkfs.xfs (6.1 and 6.13 defaults) and filled by the kernel
/// are opened read-write, changed through the engine (every change a logged transaction), then either unmounted
/// cleanly or abandoned after a log force (a crash). The kernel mounts the result (replaying our log in the crash
/// case) and shows the changes, and xfs_repair -n of both versions finds nothing.
/// </summary>
public sealed class WritableVolumeKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-rw.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>A 300 MiB volume holding /a (file), /b (file), /d (directory) and /d/c (file), all mode 0644/0755 and owned by root.</summary>
    private string Make(string xfsprogs, string mkfsOptions)
    {
        string image = Path.Combine(_tmp, $"v-{xfsprogs}.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        using var mount = LoopMount.Mount(image, readOnly: false);
        File.WriteAllText(Path.Combine(mount.MountPoint, "a"), "alpha");
        File.WriteAllBytes(Path.Combine(mount.MountPoint, "b"), new byte[10000]);
        Directory.CreateDirectory(Path.Combine(mount.MountPoint, "d"));
        File.WriteAllText(Path.Combine(mount.MountPoint, "d", "c"), "gamma");
        Shell.RunChecked("chmod", "0644", Path.Combine(mount.MountPoint, "a"), Path.Combine(mount.MountPoint, "b"), Path.Combine(mount.MountPoint, "d", "c"));
        return image;
    }

    private static readonly XfsTimestamp Past = new(1_000_000_000, 123_456_789);
    private static readonly XfsTimestamp Future = new(4_000_000_000, 5); // past 2038: bigtime on these volumes

    /// <summary>chmod, chown, utimes and a size change on three inodes, each its own transaction.</summary>
    private static void Change(XfsVolume volume)
    {
        ulong a = volume.ResolvePath("/a"), b = volume.ResolvePath("/b"), c = volume.ResolvePath("/d/c");
        volume.SetAttributes(a, new AttributeChanges { Mode = 0x1ED /* 0755 */, Uid = 1234, Gid = 5678 });
        volume.SetAttributes(b, new AttributeChanges { AccessTime = Past, ModifyTime = Future });
        volume.SetAttributes(c, new AttributeChanges { Size = 1 << 20, Mode = 0x180 /* 0600 */ });
    }

    private void AssertKernelSees(string image, string xfsprogs)
    {
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            string Stat(string name, string format) =>
                Shell.RunChecked("stat", "-c", format, Path.Combine(mount.MountPoint, name)).StandardOutput.Trim();
            Assert.Equal("755 1234 5678", Stat("a", "%a %u %g"));
            Assert.Equal("alpha", File.ReadAllText(Path.Combine(mount.MountPoint, "a")));
            Assert.Equal("1000000000 4000000000", Stat("b", "%X %Y"));
            Assert.Equal("123456789", Shell.RunChecked("stat", "-c", "%x", Path.Combine(mount.MountPoint, "b")).StandardOutput.Trim()[20..29]);
            Assert.Equal("600 1048576", Stat("d/c", "%a %s"));
            var content = File.ReadAllBytes(Path.Combine(mount.MountPoint, "d", "c"));
            Assert.Equal("gamma"u8.ToArray(), content[..5]);
            Assert.All(content[5..], x => Assert.Equal(0, x));
        }
        AssertRepairClean(image, xfsprogs);
    }

    private void AssertRepairClean(string image, string xfsprogs)
    {
        foreach (var version in new[] { "6.1", "6.13" }.Where(v => v == "6.13" || xfsprogs == "6.1"))
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            output.WriteLine($"xfs_repair -n ({version}): exit {repair.ExitCode}\n{repair.StandardOutput}{repair.StandardError}");
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version} found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
    }

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    [InlineData("6.13", "-b size=1024 -m rmapbt=1")]
    public void Attribute_changes_unmounted_cleanly_are_what_the_kernel_shows(string xfsprogs, string mkfsOptions)
    {
        string image = Make(xfsprogs, mkfsOptions);
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.False(volume.IsReadOnly);
            Change(volume);
            // The engine's own view follows its changes at once.
            var a = volume.GetAttributes(volume.ResolvePath("/a"));
            Assert.Equal((1234u, 5678u, 0x81EDu), (a.Uid, a.Gid, (uint)a.Mode));
        }
        // A clean unmount leaves a clean log: xfs_logprint says so, and the kernel needs no recovery.
        var print = Shell.RunChecked(OracleImages.Tool("xfs_logprint", "6.13"), "-t", image).StandardOutput;
        Assert.Contains("state: <CLEAN>", print, StringComparison.Ordinal);
        AssertRepairClean(image, xfsprogs);
        AssertKernelSees(image, xfsprogs);
    }

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    public void Attribute_changes_forced_to_the_log_survive_a_crash(string xfsprogs, string mkfsOptions)
    {
        string image = Make(xfsprogs, mkfsOptions);
        string crashed = Path.Combine(_tmp, "crashed.img");
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Change(volume);
            volume.Sync();
            // The machine dies here: the device holds what was flushed, and nothing of the changes is in place yet.
            File.Copy(image, crashed);
        }
        var repairDirty = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", crashed);
        Assert.NotEqual(0, repairDirty.ExitCode); // a dirty log: only a replay makes it consistent
        // The kernel replays our log at mount, then shows the changes; after its unmount repair finds nothing.
        AssertKernelSees(crashed, xfsprogs);
    }

    /// <summary>
    /// Truncates that change nothing on the kernel's XFS (xfs_setattr_size): truncate(2) by an unprivileged caller to 0
    /// of an empty setuid file that maps nothing keeps its mode and times, and a truncate to a file's own size sets no
    /// time; an empty file with blocks preallocated past EOF loses setuid. The kernel's answers are taken from a copy
    /// it truncates itself; the engine gets what a host passes (the size, and the mode without setuid and setgid).
    /// </summary>
    [Fact]
    public void Truncates_that_change_nothing_on_the_kernels_xfs_change_nothing()
    {
        string image = Path.Combine(_tmp, "t.img"), kernelCopy = Path.Combine(_tmp, "t-kernel.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            string M(string name) => Path.Combine(mount.MountPoint, name);
            File.WriteAllBytes(M("e"), []);
            File.WriteAllBytes(M("p"), []);
            File.WriteAllText(M("s"), "12345");
            Shell.RunChecked("fallocate", "--keep-size", "--length", "8192", M("p"));
            Shell.RunChecked("chmod", "6777", M("e"), M("p"));
        }
        Shell.RunChecked("cp", "--sparse=always", image, kernelCopy);
        string kernelModes;
        using (var mount = LoopMount.Mount(kernelCopy, readOnly: false))
        {
            string M(string name) => Path.Combine(mount.MountPoint, name);
            foreach (var name in new[] { "e", "p" })
                // truncate(2) by path (coreutils' truncate opens the file and calls ftruncate, which sets the times).
                Shell.RunChecked("python3", "-c",
                    "import os, sys; os.setgroups([]); os.setgid(65534); os.setuid(65534); os.truncate(sys.argv[1], 0)", M(name));
            kernelModes = Shell.RunChecked("stat", "-c", "%a", M("e"), M("p")).StandardOutput.Trim().ReplaceLineEndings(" ");
        }
        Assert.Equal("6777 777", kernelModes);

        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong e = volume.ResolvePath("/e"), p = volume.ResolvePath("/p"), s = volume.ResolvePath("/s");
            var eBefore = volume.GetAttributes(e);
            var sBefore = volume.GetAttributes(s);
            Thread.Sleep(20); // a later clock reading than the files' times
            var eAfter = volume.SetAttributes(e, new AttributeChanges { Size = 0, Mode = 0x1FF });
            var pAfter = volume.SetAttributes(p, new AttributeChanges { Size = 0, Mode = 0x1FF });
            var sAfter = volume.SetAttributes(s, new AttributeChanges { Size = 5 });
            Assert.Equal(kernelModes, $"{Convert.ToString(eAfter.Mode & 0xFFF, 8)} {Convert.ToString(pAfter.Mode & 0xFFF, 8)}");
            Assert.Equal((eBefore.ModifyTime, eBefore.ChangeTime), (eAfter.ModifyTime, eAfter.ChangeTime));
            Assert.Equal((sBefore.ModifyTime, sBefore.ChangeTime, 5L), (sAfter.ModifyTime, sAfter.ChangeTime, sAfter.Size));
            // A truncate that moves the size sets both times.
            var grown = volume.SetAttributes(s, new AttributeChanges { Size = 9 });
            Assert.True(grown.ModifyTime.ToFileTime() > sBefore.ModifyTime.ToFileTime() && grown.ChangeTime.ToFileTime() > sBefore.ChangeTime.ToFileTime());
        }
        AssertRepairClean(image, "6.13");
        using (var mount = LoopMount.Mount(image, readOnly: true))
            Assert.Equal("6777 777 9", Shell.RunChecked("stat", "-c", "%a", Path.Combine(mount.MountPoint, "e"), Path.Combine(mount.MountPoint, "p")).StandardOutput.Trim().ReplaceLineEndings(" ")
                + " " + new FileInfo(Path.Combine(mount.MountPoint, "s")).Length);
    }

    [Fact]
    public void A_read_write_open_of_an_unmaintained_feature_is_read_only_and_names_it()
    {
        // Quota files in the metadata directory (mkfs 6.13 -m metadir=1,uquota) are a feature the write path does not maintain.
        string image = Path.Combine(_tmp, "quota.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-m", "metadir=1,uquota", image);
        byte[] before = File.ReadAllBytes(image);
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.True(volume.IsReadOnly);
            Assert.Contains(volume.Info.ReadOnlyReasons, r => r.Contains("quota files in the metadata directory", StringComparison.Ordinal));
            var e = Assert.Throws<XfsException>(() => volume.SetAttributes(volume.RootInode, new AttributeChanges { Mode = 0x1FF }));
            Assert.Equal(XfsError.ReadOnly, e.Error);
            Assert.Contains("quota files in the metadata directory", e.Message, StringComparison.Ordinal);
        }
        Assert.True(before.AsSpan().SequenceEqual(File.ReadAllBytes(image)), "a read-only open changed the image");
    }

    [Fact]
    public void A_dirty_log_is_replayed_at_a_read_write_open_then_written_over()
    {
        string image = Make("6.13", "");
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            // Data made durable by fsync; the new name and inode are in the log only when the kernel shuts down.
            Shell.RunChecked(OracleImages.Tool("xfs_io", "6.13"), "-f", "-c", "pwrite -q -S 0x6c 0 15", "-c", "fsync", Path.Combine(mount.MountPoint, "late"));
            Shell.RunChecked(OracleImages.Tool("xfs_io", "6.13"), "-x", "-c", "shutdown -f", mount.MountPoint);
        }
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.NotNull(volume.RecoveredAtOpen);
            ulong late = volume.ResolvePath("/late");
            volume.SetAttributes(late, new AttributeChanges { Mode = 0x124 /* 0444 */ });
        }
        AssertRepairClean(image, "6.13");
        using var check = LoopMount.Mount(image, readOnly: true);
        Assert.Equal("444", Shell.RunChecked("stat", "-c", "%a", Path.Combine(check.MountPoint, "late")).StandardOutput.Trim());
        Assert.Equal(new string('l', 15), File.ReadAllText(Path.Combine(check.MountPoint, "late")));
    }
}

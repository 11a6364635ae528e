using XfsWin.Driver.Semantics;
using XfsWin.Journal;
using XfsWin.Volume;

namespace XfsWin.Driver.Tests;

public class MountOptionsTests
{
    [Fact]
    public void DefaultsAreReadOnlyFriendly()
    {
        var o = new MountOptions();
        Assert.Equal(LogReplayMode.Memory, o.Replay);
        Assert.False(o.CaseInsensitive);
        Assert.Equal("XFS", o.FileSystemName);
        Assert.Equal(IdMappingMode.MountingUser, o.IdMapping);
        Assert.False(WindowsMount.OpenOptions(o).Writable);
        Assert.Equal(LogReplayMode.Memory, WindowsMount.OpenOptions(o).Replay);
    }

    [Fact]
    public void TheLogDeviceReachesTheVolumeOpenReadOnlyAndReadWrite()
    {
        var ro = MountOptions.Parse(["--log-device", @"\\.\PhysicalDrive2@1"]);
        Assert.Equal(@"\\.\PhysicalDrive2@1", WindowsMount.OpenOptions(ro).LogDevice);
        var rw = MountOptions.Parse(["-o", "rw", "--log-device=log.img"]);
        Assert.True(WindowsMount.OpenOptions(rw).Writable);
        Assert.Equal("log.img", WindowsMount.OpenOptions(rw).LogDevice);
        Assert.True(MountOptions.TakesValue("--log-device"));
    }

    [Fact]
    public void ParsesEveryOption()
    {
        var o = MountOptions.Parse([
            "--partition", "2", "--replay=place", "--case-insensitive", "--hide-dot-files", "--fs-name=NTFS",
            "--absolute-symlinks=mountpoint", "--no-lx", "--id-map", "unix", "--uid-map", "0=S-1-5-18",
            "--gid-map=100=S-1-5-32-545", "--owner", "S-1-5-21-1-2-3-1001", "--file-info-timeout", "0", "--debug"]);
        Assert.Equal(2, o.Partition);
        Assert.Equal(@"\\.\PhysicalDrive1@2", o.VolumeSource(@"\\.\PhysicalDrive1"));
        Assert.Equal(LogReplayMode.InPlace, o.Replay);
        Assert.Equal(LogReplayMode.InPlace, WindowsMount.OpenOptions(o).Replay);
        Assert.Null(WindowsMount.OpenOptions(o).LogDevice);
        Assert.True(o.CaseInsensitive && o.HideDotFiles && !o.LxSpecialFiles);
        Assert.Equal("NTFS", o.FileSystemName);
        Assert.Equal(AbsoluteSymlinkMode.MountPoint, o.AbsoluteSymlinks);
        Assert.Equal(IdMappingMode.Unix, o.IdMapping);
        Assert.Equal("S-1-5-18", o.UidMap[0]);
        Assert.Equal("S-1-5-32-545", o.GidMap[100]);
        Assert.Equal(0u, o.FileInfoTimeoutMs);
        Assert.Equal(uint.MaxValue, o.DebugLog);
        var ids = o.CreateIdentityMap(Sid.Parse("S-1-5-21-9-9-9-500"));
        Assert.Equal("S-1-5-21-1-2-3-1001", ids.MountingUser.ToString());
        Assert.Equal(Sid.LocalSystem, ids.OwnerSid(0));
        Assert.Equal(Sid.UnixUser(7), ids.OwnerSid(7));
    }

    [Fact]
    public void ReadWriteReachesTheVolumeOpenAndTheVolumeParameters()
    {
        var ro = new MountOptions();
        Assert.NotEqual(0u, (uint)(Interop.VolumeParameters.FlagsFor(ro) & Interop.VolumeFlags.ReadOnlyVolume));
        Assert.Equal(0u, (uint)(Interop.VolumeParameters.FlagsFor(ro) & Interop.VolumeFlags.SupportsPosixUnlinkRename));
        foreach (var args in new[] { new[] { "-o", "rw" }, ["--rw"], ["-o", "ro,rw"] })
        {
            var o = MountOptions.Parse(args);
            Assert.True(o.ReadWrite);
            Assert.True(WindowsMount.OpenOptions(o).Writable);
            var flags = Interop.VolumeParameters.FlagsFor(o);
            Assert.Equal(0u, (uint)(flags & Interop.VolumeFlags.ReadOnlyVolume));
            Assert.NotEqual(0u, (uint)(flags & Interop.VolumeFlags.SupportsPosixUnlinkRename));
        }
        Assert.False(MountOptions.Parse(["-o", "rw,ro"]).ReadWrite);
        Assert.Throws<ArgumentException>(() => MountOptions.Parse(["-o", "allow_other"]));
    }

    [Fact]
    public void IdentityMapFileAndCreatorIdsMapBothWays()
    {
        string file = Path.Combine(Path.GetTempPath(), $"xfswin-idmap-{Guid.NewGuid():N}.txt");
        File.WriteAllText(file, "# ids\nuid 1000 S-1-5-21-1-2-3-1001  # me\ngid 100 S-1-5-32-545\n\n");
        try
        {
            var o = MountOptions.Parse(["--id-map-file", file, "--uid", "501", "--gid", "20"]);
            var me = Sid.Parse("S-1-5-21-1-2-3-1001");
            var ids = o.CreateIdentityMap(Sid.Parse("S-1-5-21-9-9-9-500"));
            Assert.Equal(me, ids.OwnerSid(1000));
            Assert.Equal(1000u, ids.UidOf(me));
            Assert.Equal(100u, ids.GidOf(Sid.Parse("S-1-5-32-545")));
            Assert.Equal(501u, ids.UidOf(Sid.Parse("S-1-5-21-9-9-9-500"))); // the mounting user owns what it creates
            Assert.Equal(20u, ids.GidOf(Sid.Parse("S-1-5-21-9-9-9-500")));
            Assert.Equal(77u, ids.UidOf(Sid.UnixUser(77)));
            Assert.Equal(88u, ids.GidOf(Sid.UnixGroup(88)));
            Assert.Null(ids.UidOf(Sid.Parse("S-1-5-21-4-4-4-4")));
            File.WriteAllText(file, "uid x S-1-5-18\n");
            var e = Assert.Throws<ArgumentException>(() => MountOptions.Parse(["--id-map-file", file]));
            Assert.Contains("line 1", e.Message);
        }
        finally
        {
            File.Delete(file);
        }
        var posix = new Semantics.IdentityMap(IdMappingMode.WinFspPosix, Sid.Parse("S-1-5-21-1-2-3-1001"));
        foreach (uint id in new uint[] { 0, 18, 544, 1000, 0x30000 + 1002, 0x60000 + 0x2000, 0x10000 + 0x100 + 0 })
            Assert.Equal(id, posix.UidOf(posix.OwnerSid(id)));
    }

    [Theory]
    [InlineData("--replay=later")]
    [InlineData("--partition=0")]
    [InlineData("--fs-name=ext4")]
    [InlineData("--uid-map=abc")]
    [InlineData("--uid-map=5=notasid")]
    [InlineData("--bogus")]
    [InlineData("--partition")]
    public void RejectsBadOptionsWithAClearMessage(string arg)
    {
        var e = Assert.ThrowsAny<Exception>(() => MountOptions.Parse([arg]));
        Assert.True(e is ArgumentException or FormatException);
        Assert.False(string.IsNullOrWhiteSpace(e.Message));
    }

    [Theory]
    [InlineData("X:", true)]
    [InlineData("z:", true)]
    [InlineData("*", true)]
    [InlineData("/mnt/x", false)]
    [InlineData("XY:", false)]
    [InlineData("1:", false)]
    public void RecognizesDriveLetters(string mountPoint, bool expected) =>
        Assert.Equal(expected, WindowsMount.IsDriveLetter(mountPoint));
}

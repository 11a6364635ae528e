using XfsWin.Format;
using XfsWin.Fuse.Interop;
using XfsWin.Volume;

namespace XfsWin.Fuse.Tests;

/// <summary>How the host turns FUSE's write-side arguments into engine calls.</summary>
public sealed unsafe class WriteTranslationTests
{
    private static readonly XfsTimestamp Now = new(1_700_000_000, 42);

    private static AttributeChanges? Changes(int toSet)
    {
        // Filled in this architecture's struct stat, as libfuse passes it.
        var stat = stackalloc byte[Math.Max(NativeStat.Size, NativeStatArm64.Size)];
        new Span<byte>(stat, NativeStat.Size).Clear();
        if (StatAbi.IsArm64)
        {
            var s = (NativeStatArm64*)stat;
            (s->st_mode, s->st_uid, s->st_gid, s->st_size) = (0x89ED, 7, 8, 12345);
            (s->st_atim_sec, s->st_atim_nsec, s->st_mtim_sec, s->st_mtim_nsec) = (-5, 6, 4_000_000_000, 999_999_999);
        }
        else
        {
            var s = (NativeStat*)stat;
            (s->st_mode, s->st_uid, s->st_gid, s->st_size) = (0x89ED, 7, 8, 12345);
            (s->st_atim_sec, s->st_atim_nsec, s->st_mtim_sec, s->st_mtim_nsec) = (-5, 6, 4_000_000_000, 999_999_999);
        }
        return FuseHost.ChangesFor(stat, toSet, () => Now);
    }

    [Fact]
    public void Setattr_takes_only_the_fields_the_kernel_set()
    {
        var c = Changes(FuseConstants.FUSE_SET_ATTR_MODE | FuseConstants.FUSE_SET_ATTR_GID)!;
        Assert.Equal((ushort)0x9ED, c.Mode); // permission, setuid, setgid, sticky bits; never the type
        Assert.Null(c.Uid);
        Assert.Equal(8u, c.Gid);
        Assert.Null(c.Size);
        Assert.Null(c.AccessTime);
        Assert.Null(c.ModifyTime);
        Assert.Equal(12345, Changes(FuseConstants.FUSE_SET_ATTR_SIZE)!.Size);
        Assert.Equal(7u, Changes(FuseConstants.FUSE_SET_ATTR_UID)!.Uid);
    }

    [Fact]
    public void Utime_now_and_omit_follow_the_kernels_bits()
    {
        // utimensat(times) with both given
        var both = Changes(FuseConstants.FUSE_SET_ATTR_ATIME | FuseConstants.FUSE_SET_ATTR_MTIME)!;
        Assert.Equal(new XfsTimestamp(-5, 6), both.AccessTime);
        Assert.Equal(new XfsTimestamp(4_000_000_000, 999_999_999), both.ModifyTime);
        // UTIME_NOW comes as ATIME|ATIME_NOW; UTIME_OMIT leaves the bit out
        var nowAndOmit = Changes(FuseConstants.FUSE_SET_ATTR_ATIME | FuseConstants.FUSE_SET_ATTR_ATIME_NOW)!;
        Assert.Equal(Now, nowAndOmit.AccessTime);
        Assert.Null(nowAndOmit.ModifyTime);
        Assert.False(nowAndOmit.TimesAreNow);
        Assert.False(both.TimesAreNow);
        var touch = Changes(FuseConstants.FUSE_SET_ATTR_ATIME | FuseConstants.FUSE_SET_ATTR_ATIME_NOW |
                            FuseConstants.FUSE_SET_ATTR_MTIME | FuseConstants.FUSE_SET_ATTR_MTIME_NOW)!;
        Assert.Equal(Now, touch.AccessTime);
        Assert.Equal(Now, touch.ModifyTime);
        Assert.True(touch.TimesAreNow); // what an append-only file allows
        // Nothing the volume stores (a ctime-only request): no change, just the attributes.
        Assert.Null(Changes(1 << 10));
    }

    [Fact]
    public void Truncates_get_the_times_the_kernel_leaves_to_the_server()
    {
        var toSize = new AttributeChanges { Size = 12345 };
        var toZero = new AttributeChanges { Size = 0, Mode = 0x1FF };
        foreach (bool openTruncatesHere in new[] { true, false })
        {
            // ftruncate names the open file: modification and change times, as do_truncate asks with ATTR_MTIME | ATTR_CTIME.
            Assert.Equal(Now, FuseHost.WithTruncateTimes(toSize, hasFileHandle: true, openTruncatesHere, () => Now)!.ModifyTime);
            // truncate(2) to a size other than 0: no time (the engine changes them when the size moves).
            Assert.Same(toSize, FuseHost.WithTruncateTimes(toSize, hasFileHandle: false, openTruncatesHere, () => Now));
            // Times the kernel sent, and changes that are not truncates, stay as they are.
            var explicitTime = new AttributeChanges { Size = 0, ModifyTime = new XfsTimestamp(5, 6) };
            Assert.Same(explicitTime, FuseHost.WithTruncateTimes(explicitTime, hasFileHandle: true, openTruncatesHere, () => Now));
            var chmod = new AttributeChanges { Mode = 0x1ED };
            Assert.Same(chmod, FuseHost.WithTruncateTimes(chmod, hasFileHandle: true, openTruncatesHere, () => Now));
            Assert.Null(FuseHost.WithTruncateTimes(null, hasFileHandle: true, openTruncatesHere, () => Now));
        }
        // To 0 without a file, where open(O_TRUNC) truncates through setattr: open(O_TRUNC) or truncate(2), taken for the
        // open; the mode the caller set goes with it.
        var zeroed = FuseHost.WithTruncateTimes(toZero, hasFileHandle: false, openTruncatesHere: true, () => Now)!;
        Assert.Equal(Now, zeroed.ModifyTime);
        Assert.Equal((ushort)0x1FF, zeroed.Mode);
        // Where open(O_TRUNC) truncates in its open request (atomic_o_trunc), it is truncate(2): no time.
        Assert.Same(toZero, FuseHost.WithTruncateTimes(toZero, hasFileHandle: false, openTruncatesHere: false, () => Now));
    }

    [Theory]
    [InlineData(0u, 0u)]
    [InlineData(8u, 1u)]
    [InlineData(300u, 70000u)]
    [InlineData(4095u, 1048575u)]
    public void Device_numbers_round_trip_through_dev_t(uint major, uint minor) =>
        Assert.Equal((major, minor), FuseHost.SplitDev(FuseHost.MakeDev(major, minor)));

    [Theory]
    [InlineData(0, FallocateMode.Allocate)]
    [InlineData(1, FallocateMode.KeepSize)]
    [InlineData(3, FallocateMode.PunchHole)]
    [InlineData(0x10, FallocateMode.ZeroRange)]
    [InlineData(0x08, FallocateMode.CollapseRange)]
    [InlineData(0x20, FallocateMode.InsertRange)]
    [InlineData(2, null)]      // PUNCH_HOLE needs KEEP_SIZE
    [InlineData(0x40, null)]   // UNSHARE_RANGE
    public void Fallocate_modes_map_to_the_engines(int mode, FallocateMode? expected) =>
        Assert.Equal(expected, FuseHost.AllocateModeFor(mode));
}

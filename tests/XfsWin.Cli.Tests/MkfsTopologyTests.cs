using XfsWin.Device;
using XfsWin.Mkfs;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// The stripe a block device reports (a RAID's minimum and optimal I/O sizes, as blkid reads them) stands in for
/// -d su/sw when none is given, with mkfs.xfs's rules for ignoring nonsense. No device here reports a stripe (loop
/// devices report none, and there is no md or device mapper), so the reading is checked against sysfs on a loop
/// device, and the geometry from a reported stripe against mkfs.xfs given the same stripe as options.
/// </summary>
public sealed partial class MkfsTests
{
    private static MkfsDeviceFacts BlockDevice(long size, long unit = 0, long width = 0) =>
        new() { SizeBytes = size, IsFile = false, StripeUnitBytes = unit, StripeWidthBytes = width };

    [Theory]
    [InlineData("16G", 64 * 1024, 256 * 1024, "su=64k,sw=4")]
    [InlineData("2T", 1024 * 1024, 8 * 1024 * 1024, "su=1m,sw=8")]
    [InlineData("1G", 512 * 1024, 512 * 1024, "su=512k,sw=1")]
    public void AReportedStripeMakesWhatMkfsXfsMakesWithThatStripeGiven(string size, long unit, long width, string asOptions)
    {
        string image = Path.Combine(_dir, "topology.img");
        Shell.RunChecked("truncate", "-s", size, image);
        long bytes = new FileInfo(image).Length;
        var uuid = Guid.NewGuid();
        var reported = MkfsGeometry.Calculate(new MkfsOptions { Uuid = uuid }, BlockDevice(bytes, unit, width));
        var given = MkfsGeometry.Calculate(MkfsOptionParser.Parse(["-d", asOptions, "-m", $"uuid={uuid}", image]), BlockDevice(bytes));
        Assert.Equal(given, reported);
        Assert.NotEqual(0u, reported.StripeUnit);
        // The same geometry mkfs.xfs prints for that stripe given as options (on a file: no solid-state sizing either side).
        var theirs = Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-N", "-d", asOptions, image]).StandardOutput;
        Assert.Equal(theirs, MkfsSummary.Format(reported, image));
    }

    [Theory]
    [InlineData("16G", 64 * 1024, 0)]              // a unit without a width
    [InlineData("16G", 0, 256 * 1024)]             // a width without a unit
    [InlineData("16G", 64 * 1024, 96 * 1024)]      // a width that is no multiple of the unit
    [InlineData("16G", 256 * 1024, 64 * 1024)]     // a unit larger than the width
    [InlineData("16G", 1536, 6144)]                // not whole blocks: dropped, and no alignment
    [InlineData("900M", 64 * 1024, 256 * 1024)]    // under 1 GiB: not worth it
    public void AStripeMkfsXfsWouldIgnoreIsIgnored(string size, long unit, long width)
    {
        long bytes = long.Parse(size[..^1]) << (size[^1] == 'G' ? 30 : 20);
        var uuid = Guid.NewGuid();
        var reported = MkfsGeometry.Calculate(new MkfsOptions { Uuid = uuid }, BlockDevice(bytes, unit, width));
        var none = MkfsGeometry.Calculate(new MkfsOptions { Uuid = uuid }, BlockDevice(bytes));
        Assert.Equal(none, reported);
        Assert.Equal(0u, reported.StripeUnit);
    }

    [Fact]
    public void OptionsWinOverTheDevicesStripe()
    {
        var uuid = Guid.NewGuid();
        var facts = BlockDevice(16L << 30, 64 * 1024, 256 * 1024);
        var noalign = MkfsGeometry.Calculate(MkfsOptionParser.Parse(["-d", "noalign", "-m", $"uuid={uuid}", "x"]), facts);
        Assert.Equal((0u, 0u), (noalign.StripeUnit, noalign.StripeWidth));
        var own = MkfsGeometry.Calculate(MkfsOptionParser.Parse(["-d", "su=128k,sw=2", "-m", $"uuid={uuid}", "x"]), facts);
        Assert.Equal((32u, 64u), (own.StripeUnit, own.StripeWidth));
    }

    /// <summary>The device's topology as the kernel gives it (BLKIOMIN, BLKIOOPT, BLKALIGNOFF) is what sysfs shows for it.</summary>
    [Fact]
    public void TheTopologyOfALoopDeviceIsWhatSysfsShows()
    {
        string backing = Path.Combine(_dir, "topo-loop.img");
        Shell.RunChecked("truncate", "-s", "64M", backing);
        string loop = Shell.RunChecked("losetup", "--find", "--show", backing).StandardOutput.Trim();
        try
        {
            var t = DeviceRangeOps.Topology(loop);
            Assert.NotNull(t);
            string queue = Path.Combine("/sys/class/block", Path.GetFileName(loop));
            uint Sys(string file) => uint.Parse(File.ReadAllText(Path.Combine(queue, file)).Trim());
            Assert.Equal(Sys("queue/minimum_io_size"), t.Value.MinimumIoBytes);
            Assert.Equal(Sys("queue/optimal_io_size"), t.Value.OptimalIoBytes);
            Assert.Equal((int)Sys("alignment_offset"), t.Value.AlignmentOffset);
            Assert.Null(DeviceRangeOps.Topology(backing)); // a file has no I/O topology
        }
        finally
        {
            XfsWin.TestSupport.LoopMount.Detach(loop);
        }
    }
}

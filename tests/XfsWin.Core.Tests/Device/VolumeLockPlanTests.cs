using XfsWin.Device;
using Xunit;

namespace XfsWin.Tests.Device;

/// <summary>
/// Which Windows volumes a write to part of a physical disk must lock and dismount first, in which order, and what a
/// failure tells the user (the platform-neutral half of <c>WindowsDevice.LockVolumes</c>).
/// </summary>
public sealed class VolumeLockPlanTests
{
    private const long MiB = 1 << 20;

    private static WindowsVolume V(string name, params DiskExtent[] extents) => new(name, [], extents);

    [Fact]
    public void Volumes_sharing_bytes_with_the_range_are_locked_in_disk_order()
    {
        var volumes = new[]
        {
            V(@"\\?\Volume{c}\", new DiskExtent(1, 600 * MiB, 400 * MiB)),                   // partition 3 of disk 1
            V(@"\\?\Volume{a}\", new DiskExtent(1, 1 * MiB, 299 * MiB)),                     // partition 1 of disk 1
            V(@"\\?\Volume{b}\", new DiskExtent(1, 300 * MiB, 300 * MiB)),                   // partition 2 of disk 1
            V(@"\\?\Volume{system}\", new DiskExtent(0, 1 * MiB, 100_000 * MiB)),            // another disk
            V(@"\\?\Volume{spanned}\", new DiskExtent(2, 0, 10 * MiB), new DiskExtent(1, 2000 * MiB, 10 * MiB)), // dynamic, two disks
        };
        // Partition 2 exactly: only its volume (the neighbours end and start at its edges).
        Assert.Equal([@"\\?\Volume{b}\"], VolumeLockPlan.VolumesToLock(volumes, 1, 300 * MiB, 300 * MiB).Select(v => v.Name));
        // A partition reaching one byte into its neighbours: both of them too, in disk order.
        Assert.Equal([@"\\?\Volume{a}\", @"\\?\Volume{b}\", @"\\?\Volume{c}\"],
            VolumeLockPlan.VolumesToLock(volumes, 1, 300 * MiB - 1, 300 * MiB + 2).Select(v => v.Name));
        // The whole disk: every volume on it, the spanned one included; never another disk's.
        Assert.Equal([@"\\?\Volume{a}\", @"\\?\Volume{b}\", @"\\?\Volume{c}\", @"\\?\Volume{spanned}\"],
            VolumeLockPlan.VolumesToLock(volumes, 1, 0, 4000 * MiB).Select(v => v.Name));
        // Free space between volumes, and an empty range: nothing to lock.
        Assert.Empty(VolumeLockPlan.VolumesToLock(volumes, 1, 1000 * MiB, 1000 * MiB));
        Assert.Empty(VolumeLockPlan.VolumesToLock(volumes, 1, 300 * MiB, 0));
        Assert.Empty(VolumeLockPlan.VolumesToLock(volumes, 7, 0, long.MaxValue / 2));
    }

    [Fact]
    public void Volumes_starting_at_the_same_place_are_ordered_by_name()
    {
        var volumes = new[] { V("vol-B", new DiskExtent(3, 0, MiB)), V("vol-a", new DiskExtent(3, 0, MiB)) };
        Assert.Equal(["vol-a", "vol-B"], VolumeLockPlan.VolumesToLock(volumes, 3, 0, MiB).Select(v => v.Name));
    }

    [Fact]
    public void Physical_drive_numbers_come_from_the_path()
    {
        Assert.Equal(2u, VolumeLockPlan.PhysicalDriveNumber(@"\\.\PhysicalDrive2"));
        Assert.Equal(13u, VolumeLockPlan.PhysicalDriveNumber(@"\\.\physicaldrive13"));
        Assert.Null(VolumeLockPlan.PhysicalDriveNumber(@"\\.\PhysicalDrive"));
        Assert.Null(VolumeLockPlan.PhysicalDriveNumber(@"\\.\PhysicalDrive-1"));
        Assert.Null(VolumeLockPlan.PhysicalDriveNumber(@"\\.\C:"));
        Assert.Null(VolumeLockPlan.PhysicalDriveNumber(@"C:\images\disk.img"));
        Assert.Null(VolumeLockPlan.PhysicalDriveNumber("/dev/sdb"));
    }

    [Fact]
    public void A_failure_names_the_volume_where_it_is_mounted_and_what_to_do()
    {
        var e = new WindowsVolume(@"\\?\Volume{1234}\", [@"E:\"], [new DiskExtent(1, 0, MiB)]);
        var inUse = VolumeLockPlan.Failure(e, "lock", VolumeLockPlan.ErrorAccessDenied, @"\\.\PhysicalDrive1");
        Assert.Equal(XfsError.IoError, inUse.Error);
        Assert.Contains(@"E:\ (\\?\Volume{1234}\)", inUse.Message);
        Assert.Contains("in use", inUse.Message);
        Assert.Contains("Nothing was written", inUse.Message);
        var rights = VolumeLockPlan.Failure(e, "open", VolumeLockPlan.ErrorAccessDenied, @"\\.\PhysicalDrive1");
        Assert.Equal(XfsError.NotPermitted, rights.Error);
        Assert.Contains("administrator", rights.Message);
        Assert.Contains("another program", VolumeLockPlan.Failure(e, "open", VolumeLockPlan.ErrorSharingViolation, "d").Message);
        var other = VolumeLockPlan.Failure(V(@"\\?\Volume{9}\"), "dismount", 1117, @"\\.\PhysicalDrive1");
        Assert.Contains("could not dismount", other.Message);
        Assert.Contains("1117", other.Message);
        Assert.Equal(@"\\?\Volume{9}\", V(@"\\?\Volume{9}\").Display);
    }
}

using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// The periodic sync (<see cref="VolumeOpenOptions.SyncInterval"/>): changes nobody fsynced become durable at the next
/// round. Each test changes a volume made by mkfs.xfs through a device that records every write and flush, then
/// builds the image a power cut would leave (only what the last flush made durable) and lets the kernel mount it: it
/// replays the log and must show the changes, and xfs_repair -n finds nothing. The control: the image of a cut just
/// before the round has none of them (the log never got them), so the round is what made them durable.
/// </summary>
public sealed class PeriodicSyncTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-psync.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly byte[] Content = Enumerable.Range(0, 20_000).Select(i => (byte)(i * 7 + 3)).ToArray();

    private string MakeBase()
    {
        string image = Path.Combine(_tmp, "base.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        return image;
    }

    /// <summary>A directory, a file with <see cref="Content"/> in it, and a second file written in place (held data).</summary>
    private static void Change(XfsVolume v)
    {
        ulong dir = v.MakeDirectory(v.RootInode, "kept"u8, 0x1ED, 0, 0).Inode;
        ulong file = v.CreateNode(dir, "data"u8, 0x81A4, 0, 0).Inode;
        Assert.Equal(Content.Length, v.Write(file, 0, Content));
        ulong small = v.CreateNode(dir, "small"u8, 0x81A4, 0, 0).Inode;
        Assert.Equal(4096, v.Write(small, 0, Content.AsSpan(0, 4096)));
    }

    /// <summary>The image of a power cut after the first <paramref name="point"/> events; what the kernel shows of the changes in it.</summary>
    private (bool Dir, byte[]? Data, byte[]? Small) CrashAndMount(string baseImage, IReadOnlyList<DeviceEvent> events, int point, string name)
    {
        string image = Path.Combine(_tmp, name);
        CrashImage.Build(baseImage, events, CrashImage.DurableSectors(events, new CrashPoint(point, CrashSubset.None, 0)), image);
        (bool, byte[]?, byte[]?) seen;
        using (var kernel = LoopMount.Mount(image, readOnly: false))
        {
            string dir = Path.Combine(kernel.MountPoint, "kept");
            string data = Path.Combine(dir, "data"), small = Path.Combine(dir, "small");
            seen = (Directory.Exists(dir), File.Exists(data) ? File.ReadAllBytes(data) : null, File.Exists(small) ? File.ReadAllBytes(small) : null);
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems in {name}:\n{repair.StandardOutput}{repair.StandardError}");
        return seen;
    }

    [Fact]
    public void A_round_makes_unsynced_changes_durable()
    {
        string baseImage = MakeBase();
        string work = Path.Combine(_tmp, "work.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, work);
        var dev = new RecordingBlockDevice(PartitionSpec.Open(work, null, writable: true));
        int before, after;
        IReadOnlyList<DeviceEvent> events;
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true))
        {
            Assert.Equal(0, v.PeriodicSyncRounds);
            Change(v);
            before = dev.EventCount;
            Assert.True(v.PeriodicSyncRound());
            after = dev.EventCount;
            // Nothing changed since: a round writes nothing.
            Assert.True(v.PeriodicSyncRound());
            Assert.Equal(after, dev.EventCount);
            events = dev.Snapshot();
        }
        output.WriteLine($"{before} events before the round, {after} after");

        var cutBefore = CrashAndMount(baseImage, events, before, "before.img");
        Assert.False(cutBefore.Dir, "a cut before the round already holds the changes: the test cannot tell what the round does");

        var cutAfter = CrashAndMount(baseImage, events, after, "after.img");
        Assert.True(cutAfter.Dir);
        Assert.Equal(Content, cutAfter.Data);
        Assert.Equal(Content.AsSpan(0, 4096).ToArray(), cutAfter.Small);
    }

    [Fact]
    public void The_thread_runs_rounds_by_itself()
    {
        string baseImage = MakeBase();
        string work = Path.Combine(_tmp, "work.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, work);
        var dev = new RecordingBlockDevice(PartitionSpec.Open(work, null, writable: true));
        IReadOnlyList<DeviceEvent> events;
        int point;
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.FromMilliseconds(50) }, ownsDevice: true))
        {
            Change(v);
            // Two rounds completed after the change: the second started after it, whatever the first saw.
            int rounds = v.PeriodicSyncRounds;
            var deadline = DateTime.UtcNow.AddMinutes(2);
            while (v.PeriodicSyncRounds < rounds + 2)
            {
                Assert.True(DateTime.UtcNow < deadline, "the periodic sync ran no round in two minutes");
                Thread.Sleep(20);
            }
            point = dev.EventCount;
            events = dev.Snapshot();
        }
        var cut = CrashAndMount(baseImage, events, point, "cut.img");
        Assert.True(cut.Dir);
        Assert.Equal(Content, cut.Data);
        Assert.Equal(Content.AsSpan(0, 4096).ToArray(), cut.Small);
    }
}

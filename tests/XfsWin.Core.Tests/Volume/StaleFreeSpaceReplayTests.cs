using System.Text.RegularExpressions;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// New directory blocks are logged as the kernel logs them: only what the structure reads (headers, entries, the
/// headers and tags of free regions, hash arrays, tails), not the free space between. On replay the rest of such a
/// block keeps whatever the disk held. This test makes the disk hold something: the volume's free space is filled with
/// a pattern by the kernel (a file written and removed), then directories in block and leaf form are made on it and
/// fsynced, and the crash image keeps the log but none of the directory blocks' own writes. The precondition is
/// checked (a logged directory block's disk bytes still hold the pattern), then the kernel replays the log, lists every
/// entry, and xfs_repair -n is clean.
/// </summary>
public sealed partial class StaleFreeSpaceReplayTests(ITestOutputHelper output) : IDisposable
{
    private const byte Pattern = 0xA5;
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-stale.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Directory_blocks_logged_in_part_over_stale_free_space_replay_clean()
    {
        string baseImage = Path.Combine(_tmp, "base.img");
        Shell.RunChecked("truncate", "-s", "512M", baseImage);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", baseImage);
        using (var mount = LoopMount.Mount(baseImage, readOnly: false))
        {
            // Most of the free space, leaving room for the log's own needs; then removed (no discard: the bytes stay).
            var stat = Shell.RunChecked("stat", "-f", "-c", "%a %S", mount.MountPoint).StandardOutput.Split(' ');
            long free = long.Parse(stat[0], System.Globalization.CultureInfo.InvariantCulture) * long.Parse(stat[1], System.Globalization.CultureInfo.InvariantCulture);
            var chunk = new byte[1 << 20];
            Array.Fill(chunk, Pattern);
            string fill = Path.Combine(mount.MountPoint, "fill");
            using (var f = File.Create(fill))
                for (long written = 0; written + chunk.Length <= free - (24L << 20); written += chunk.Length) f.Write(chunk);
            Shell.RunChecked("sync");
            File.Delete(fill);
        }

        string work = Path.Combine(_tmp, "work.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, work);
        var dev = new RecordingBlockDevice(PartitionSpec.Open(work, null, writable: true));
        CrashModel model;
        var expected = new Dictionary<string, int>();
        ulong last = 0;
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true))
        {
            model = new CrashModel(v, dev);
            // Block form (100 short names each) and leaf form (600 long names: data blocks and a leaf block).
            foreach (var (dir, count, name) in Enumerable.Range(0, 8).Select(i => ($"b{i}", 100, "f-{0:D3}")).Append(("leaf", 600, "entry-{0:D4}-with-a-longer-name")))
            {
                string d = model.Mkdir("", dir);
                for (int i = 0; i < count; i++) last = model.Create(d, string.Format(System.Globalization.CultureInfo.InvariantCulture, name, i), []);
                expected[dir] = count;
            }
            model.Fsync(last);
        }
        var events = dev.Snapshot();
        File.Delete(work);
        // The crash: right after the fsync returned, before anything the close wrote.
        var crash = new CrashPoint(model.Files[last].Fsyncs[^1].Event, CrashSubset.None, 0);
        string image = Path.Combine(_tmp, "crash.img");
        CrashImage.Build(baseImage, events, CrashImage.DurableSectors(events, crash), image);

        var (block, data) = StaleLoggedDirectoryBlocks(image);
        output.WriteLine($"{events.Count} events, crash at {crash.Point}; logged directory blocks still holding the pattern on disk: {block} block form, {data} data");
        Assert.True(block > 0 && data > 0, "no logged block-form or data block was over stale free space: the test's precondition does not hold");

        Assert.Null(CrashWorkloads.Judge(image, model, events, crash));
        using var kernel = LoopMount.Mount(image, readOnly: true);
        foreach (var (dir, count) in expected)
            Assert.Equal(count, Directory.GetFiles(Path.Combine(kernel.MountPoint, dir)).Length);
    }

    /// <summary>Block-form and data blocks of directories in the image's log (xfs_logprint) whose own disk bytes still hold a run of the pattern.</summary>
    private static (int Block, int Data) StaleLoggedDirectoryBlocks(string image)
    {
        string print = Shell.RunChecked(OracleImages.Tool("xfs_logprint", "6.13"), "-t", image).StandardOutput;
        var run = new byte[256];
        Array.Fill(run, Pattern);
        int block = 0, data = 0;
        using var f = File.OpenRead(image);
        var bytes = new byte[4096];
        foreach (Match m in LoggedBuffer().Matches(print).DistinctBy(m => m.Groups[1].Value))
        {
            // blf_flags carry the buffer type from bit 11: XFS_BLFT_DIR_BLOCK_BUF 10, XFS_BLFT_DIR_DATA_BUF 11.
            int type = (Convert.ToInt32(m.Groups[2].Value, 16) >> 11) & 0x1f;
            if (type is not (10 or 11)) continue;
            f.Position = Convert.ToInt64(m.Groups[1].Value, 16) * 512;
            f.ReadExactly(bytes);
            if (bytes.AsSpan().IndexOf(run) < 0) continue;
            if (type == 10) block++;
            else data++;
        }
        return (block, data);
    }

    [GeneratedRegex(@"start blkno:(0x[0-9a-f]+)\s+len:8\s+bmap size:\d+\s+flags:0x([0-9a-f]+)")]
    private static partial Regex LoggedBuffer();
}

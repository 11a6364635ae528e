using Xunit;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Journal;

/// <summary>
/// Replays logs the Linux kernel left dirty (dirty-logs.sh) and checks the result against the kernel's
/// own replay of the same volume: block by block for what the log touched, and as a whole tree.
/// </summary>
public sealed class KernelLogReplayTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-journal.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    public static TheoryData<string> TreeScenarios => new() { "crash", "cow", "wrap", "xhdr4k", "extlog", "mkfs613" };

    private static LogRecoveryResult Recover(DirtyLogScenario s, FileBlockDevice data, FileBlockDevice? log, LogReplayMode mode) =>
        LogRecovery.Recover(data, log, DirtyLogScenarios.ReadSuperblock(data), mode);

    [Theory]
    [MemberData(nameof(TreeScenarios))]
    public void InMemoryReplayShowsWhatTheKernelShows(string name)
    {
        var s = DirtyLogScenarios.Ensure(name);
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        using var log = s.DirtyLogDevice is null ? null : FileBlockDevice.Open(s.DirtyLogDevice, writable: false);
        var result = Recover(s, data, log, LogReplayMode.Memory);
        Assert.Equal(LogState.ReplayedInMemory, result.State);
        Assert.True(result.TransactionsReplayed > 0);
        Assert.IsType<OverlayDevice>(result.Device);

        using var volume = XfsVolume.Open(result.Device, new VolumeOpenOptions { Replay = LogReplayMode.None }, ownsDevice: false);
        var comparison = TreeComparer.Compare(volume, s.Manifest);
        Assert.True(comparison.Identical, comparison.Format());
        Assert.True(comparison.EntriesCompared > 500, $"only {comparison.EntriesCompared} entries compared");
    }

    [Fact]
    public void OpeningADirtyVolumeReplaysItInMemory()
    {
        var s = DirtyLogScenarios.Ensure("crash");
        using var volume = XfsVolume.Open(s.DirtyImage, new VolumeOpenOptions { Replay = LogReplayMode.Memory });
        Assert.Equal(LogState.ReplayedInMemory, volume.Info.LogState);
        var comparison = TreeComparer.Compare(volume, s.Manifest);
        Assert.True(comparison.Identical, comparison.Format());
    }

    [Fact]
    public void WithoutReplayTheDirtyViewDiffersFromTheKernel()
    {
        // Guards the tree test above: the unreplayed volume must not already look like the kernel's view.
        var s = DirtyLogScenarios.Ensure("crash");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.None);
        Assert.Equal(LogState.Dirty, result.State);
        Assert.Same(data, result.Device);
        using var volume = XfsVolume.Open(data, new VolumeOpenOptions { Replay = LogReplayMode.None }, ownsDevice: false);
        var comparison = TreeComparer.Compare(volume, s.Manifest, new TreeComparisonOptions { CompareContents = false });
        Assert.False(comparison.Identical);
    }

    [Theory]
    [InlineData("crash")]
    [InlineData("xhdr4k")]
    [InlineData("wrap")]
    public void ReplayedBlocksEqualTheKernelsBlocks(string name)
    {
        var s = DirtyLogScenarios.Ensure(name);
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        using var kernel = FileBlockDevice.Open(s.KernelImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        var overlay = Assert.IsType<OverlayDevice>(result.Device);
        var sb = DirtyLogScenarios.ReadSuperblock(data);
        AssertReplayedBlocksMatch(overlay, kernel);
        Assert.True(overlay.DirtyBytes < (long)sb.DataBlocks * sb.BlockSize / 4);
    }

    /// <summary>Every sector the replay wrote equals the kernel's after its replay.</summary>
    private static void AssertReplayedBlocksMatch(OverlayDevice overlay, IBlockDevice kernel)
    {
        var a = new byte[512];
        var b = new byte[512];
        var differing = new List<long>();
        long compared = 0;
        foreach (var (offset, length) in overlay.DirtyRanges())
        {
            for (long o = offset; o < offset + length; o += 512)
            {
                overlay.Read(o, a);
                kernel.Read(o, b);
                compared++;
                if (o == 0)
                {
                    // At unmount the kernel rewrites the summary counters (rebuilt after a dirty log), the LSN and the CRC.
                    MaskSuperblockCounters(a);
                    MaskSuperblockCounters(b);
                }
                if (!a.AsSpan().SequenceEqual(b)) differing.Add(o / 512);
            }
        }
        Assert.True(compared > 100, $"only {compared} sectors replayed");
        Assert.True(differing.Count == 0, $"{differing.Count} of {compared} replayed sectors differ from the kernel's, first daddrs: {string.Join(", ", differing.Take(20))}");
    }

    private static void MaskSuperblockCounters(Span<byte> sector)
    {
        sector.Slice(SuperblockView.OffIcount, 24).Clear();
        sector.Slice(SuperblockView.OffCrc, 4).Clear();
        sector.Slice(SuperblockView.OffLsn, 8).Clear();
    }

    [Fact]
    public void InMemoryReplayWritesNothing()
    {
        var s = DirtyLogScenarios.Ensure("crash");
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "crash.img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var result = Recover(s, data, null, LogReplayMode.Memory);
            Assert.Equal(LogState.ReplayedInMemory, result.State);
            var overlay = Assert.IsType<OverlayDevice>(result.Device);
            Assert.True(overlay.DirtyBytes > 0);
        }
        Assert.True(DirtyLogScenarios.FilesEqual(copy, s.DirtyImage), "in-memory replay changed the image");
    }

    [Theory]
    [InlineData("crash", "6.1")]
    [InlineData("wrap", "6.1")]
    [InlineData("xhdr4k", "6.1")]
    [InlineData("extlog", "6.1")]
    [InlineData("mkfs613", "6.13")]
    public void InPlaceRecoveryLeavesACleanConsistentVolume(string name, string xfsprogs)
    {
        var s = DirtyLogScenarios.Ensure(name);
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, name + ".img");
        string? logCopy = s.DirtyLogDevice is null ? null : DirtyLogScenarios.Copy(s.DirtyLogDevice, _tmp, name + ".log");
        LogRecoveryResult result;
        using (var data = FileBlockDevice.Open(copy, writable: true))
        using (var log = logCopy is null ? null : FileBlockDevice.Open(logCopy, writable: true))
        {
            result = Recover(s, data, log, LogReplayMode.InPlace);
            Assert.Equal(LogState.ReplayedInPlace, result.State);
            Assert.Same(data, result.Device);
            // Our own scanner now finds a clean log.
            var again = Recover(s, data, log, LogReplayMode.Memory);
            Assert.Equal(LogState.Clean, again.State);
        }

        var repairArgs = new List<string> { "-n" };
        if (logCopy is not null) repairArgs.AddRange(["-l", logCopy]);
        repairArgs.Add(copy);
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", xfsprogs), repairArgs);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");

        // The kernel mounts it without recovery and shows the same tree as after its own replay.
        string? logLoop = null;
        try
        {
            string extra = "norecovery";
            if (logCopy is not null)
            {
                logLoop = Shell.RunChecked("losetup", "--find", "--show", logCopy).StandardOutput.Trim();
                extra += ",logdev=" + logLoop;
            }
            // norecovery refuses a dirty log outright only when mounting rw; ro + norecovery would hide a dirty log,
            // so xfs_repair above (which refuses dirty logs) is what proves the log is clean.
            using var mount = LoopMount.Mount(copy, readOnly: true, extra);
            string json = Path.Combine(_tmp, name + ".inplace.json");
            Shell.RunChecked("python3", DirtyLogScenarios.ManifestScript, mount.MountPoint, json);
            Assert.Equal(File.ReadAllText(s.ManifestPath), File.ReadAllText(json));
        }
        finally
        {
            if (logLoop is not null) Shell.Run("losetup", "-d", logLoop);
        }
    }

    [Fact]
    public void InPlaceRefusesUnlinkedOpenInodesAndWritesNothing()
    {
        var s = DirtyLogScenarios.Ensure("cow");
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "cow.img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var ex = Assert.Throws<XfsException>(() => Recover(s, data, null, LogReplayMode.InPlace));
            Assert.Equal(XfsError.Unsupported, ex.Error);
            Assert.Contains("unlinked", ex.Message);
            Assert.Contains("--replay=memory", ex.Message);

            var memory = Recover(s, data, null, LogReplayMode.Memory);
            Assert.Equal(1, memory.UnlinkedInodes);
        }
        Assert.True(DirtyLogScenarios.FilesEqual(copy, s.DirtyImage), "a refused in-place recovery changed the image");
    }

    [Fact]
    public void WrappedLogIsFoundAndReplayed()
    {
        var s = DirtyLogScenarios.Ensure("wrap");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        // The live part of the log runs across the physical end: the tail is one cycle behind the head.
        Assert.True(Lsn.Cycle(result.HeadLsn) >= 3, $"the log did not wrap twice (head {Lsn.Format(result.HeadLsn)})");
        Assert.Equal(Lsn.Cycle(result.HeadLsn) - 1, Lsn.Cycle(result.TailLsn));
        Assert.True(Lsn.Block(result.TailLsn) > Lsn.Block(result.HeadLsn));
        Assert.True(result.TransactionsReplayed > 1);
    }

    [Fact]
    public void LargeRecordsWithExtendedHeadersOn4KLogSectors()
    {
        // xhdr4k is mounted with logbsize=256k on 4 KiB sectors: every record has 8 header sectors.
        var s = DirtyLogScenarios.Ensure("xhdr4k");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var sb = DirtyLogScenarios.ReadSuperblock(data);
        Assert.Equal(4096, sb.LogSectorSize);
        var pos = Position(data, out _);
        Assert.Equal(256 * 1024, pos.RecordSize);
        Assert.Equal(8, pos.HeaderBlocks);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        Assert.True(result.LogBytesReplayed > 256 * 1024);
    }

    [Fact]
    public void ExternalLogWithoutItsDeviceIsReportedNotReplayed()
    {
        var s = DirtyLogScenarios.Ensure("extlog");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        Assert.Equal(LogState.External, result.State);
        Assert.Same(data, result.Device);
        Assert.Contains(result.Warnings, w => w.Contains("external", StringComparison.Ordinal));
    }

    [Fact]
    public void KernelReplayedVolumeHasACleanLog()
    {
        var s = DirtyLogScenarios.Ensure("crash");
        using var data = FileBlockDevice.Open(s.KernelImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.InPlace);
        Assert.Equal(LogState.Clean, result.State);
        Assert.Equal(0, result.TransactionsReplayed);
    }

    /// <summary>Finds the last record before the head with our scanner (checked against xfs_logprint below).</summary>
    private static LogPosition Position(FileBlockDevice data, out LogArea area)
    {
        var sb = DirtyLogScenarios.ReadSuperblock(data);
        area = LogArea.For(data, null, sb);
        return LogScanner.Find(new LogReader(area, sb.Uuid), true, true);
    }

    [Fact]
    public void TornLastRecordIsCutAsTheKernelDoes()
    {
        // A torn record's checkpoint is dropped by both; metadata the kernel already wrote back from it stays,
        // so the oracle is the replayed blocks, compared with the kernel's replay of the same torn log.
        var s = DirtyLogScenarios.Ensure("crash");
        string torn = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "torn.img");
        long lastRecord;
        using (var data = FileBlockDevice.Open(torn, writable: true))
        {
            var pos = Position(data, out var area);
            Assert.False(pos.Clean);
            lastRecord = pos.LastRecordBlock;
            // Damage the last record's data sectors but keep their cycle words: a write torn inside the sectors.
            var bb = new byte[512];
            for (long blk = lastRecord + pos.HeaderBlocks; blk < pos.HeadBlock; blk++)
            {
                area.Read(blk, bb);
                for (int i = 16; i < 512; i++) bb[i] ^= 0x5A;
                area.Write(blk, bb);
            }
        }
        var logprint = Shell.RunChecked(OracleImages.Tool("xfs_logprint"), "-d", torn).StandardOutput;
        Assert.Contains($"{lastRecord} HEADER", logprint);

        string kernelCopy = DirtyLogScenarios.Copy(torn, _tmp, "torn-kernel.img");
        using (LoopMount.Mount(kernelCopy, readOnly: false)) { }

        using var dev = FileBlockDevice.Open(torn, writable: false);
        using var kernel = FileBlockDevice.Open(kernelCopy, writable: false);
        var result = LogRecovery.Recover(dev, null, DirtyLogScenarios.ReadSuperblock(dev), LogReplayMode.Memory);
        Assert.Contains(result.Warnings, w => w.Contains("torn write", StringComparison.Ordinal));
        Assert.Equal((uint)lastRecord, Lsn.Block(result.HeadLsn));
        Assert.True(result.TransactionsReplayed > 0, "nothing left to replay before the torn record");
        AssertReplayedBlocksMatch(Assert.IsType<OverlayDevice>(result.Device), kernel);
    }

    [Theory]
    [InlineData(LogReplayMode.Memory)]
    [InlineData(LogReplayMode.InPlace)]
    public void CorruptRecordAwayFromTheHeadIsAnErrorAndNothingIsWritten(LogReplayMode mode)
    {
        var s = DirtyLogScenarios.Ensure("crash");
        string bad = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "corrupt.img");
        long tailRecord;
        using (var data = FileBlockDevice.Open(bad, writable: true))
        {
            var pos = Position(data, out var area);
            tailRecord = pos.TailBlock;
            long records = LogScanner.Distance(area.Blocks, pos.TailBlock, pos.HeadBlock) / (pos.HeaderBlocks + pos.RecordSize / 512);
            Assert.True(records > 2 * LogScanner.TornRecords, $"the scenario's log holds about {records} records; the damaged one must be far from the head");
            var bb = new byte[512];
            area.Read(tailRecord + pos.HeaderBlocks, bb);
            bb[100] ^= 0xFF;
            area.Write(tailRecord + pos.HeaderBlocks, bb);
        }
        string before = DirtyLogScenarios.Copy(bad, _tmp, "corrupt-before.img");
        using (var data = FileBlockDevice.Open(bad, writable: true))
        {
            var ex = Assert.Throws<XfsCorruptionException>(() => LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), mode));
            Assert.Contains($"log block {tailRecord}", ex.Message);
            Assert.Contains("CRC", ex.Message);
        }
        Assert.True(DirtyLogScenarios.FilesEqual(bad, before), "a failed recovery changed the image");
        // The kernel refuses it too.
        var mount = Shell.Run("bash", "-c", $"d=$(mktemp -d); l=$(losetup -f --show '{bad}'); mount -t xfs $l $d; rc=$?; mountpoint -q $d && umount $d; losetup -d $l; rmdir $d; exit $rc");
        Assert.NotEqual(0, mount.ExitCode);
    }

    [Fact]
    public void ReportsTheLogBytesBetweenTailAndHead()
    {
        var s = DirtyLogScenarios.Ensure("crash");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var sb = DirtyLogScenarios.ReadSuperblock(data);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        Assert.True(result.LogBytesReplayed > 0 && result.LogBytesReplayed <= (long)sb.LogBlocks * sb.BlockSize);
        Assert.Equal(result.LogBytesReplayed, (long)(Lsn.Block(result.HeadLsn) - Lsn.Block(result.TailLsn)) * 512);
    }
}

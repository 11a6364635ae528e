using System.Buffers.Binary;
using Xunit;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
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

    public static TheoryData<string> TreeScenarios => new() { "crash", "cow", "wrap", "xhdr4k", "extlog", "mkfs613", "intents", "quota", "quotaoff", "pairs" };

    private static LogRecoveryResult Recover(DirtyLogScenario s, FileBlockDevice data, FileBlockDevice? log, LogReplayMode mode) =>
        Recover(data, log, mode);

    /// <summary>In place through the write gate, as every writer goes; otherwise the journal's replay alone.</summary>
    private static LogRecoveryResult Recover(IBlockDevice data, IBlockDevice? log, LogReplayMode mode) =>
        mode == LogReplayMode.InPlace
            ? InPlaceRecovery.Run(WriteGate.Admit(data, log, WritePurpose.LogRecovery))
            : LogRecovery.Recover(data, log, DirtyLogScenarios.ReadSuperblock(data), mode);

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
        var manifest = s.Manifest;
        var comparison = TreeComparer.Compare(volume, manifest);
        Assert.True(comparison.Identical, comparison.Format());
        Assert.Equal(manifest.Entries.Count, comparison.EntriesCompared);
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
    [InlineData("quota")]
    [InlineData("quotaoff")]
    [InlineData("pairs")]
    public void ReplayedBlocksEqualTheKernelsBlocks(string name)
    {
        var s = DirtyLogScenarios.Ensure(name);
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        using var kernel = FileBlockDevice.Open(s.KernelImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        var overlay = Assert.IsType<OverlayDevice>(result.Device);
        var sb = DirtyLogScenarios.ReadSuperblock(data);
        // quotaoff's kernel is Linux 5.10, which gives a replayed inode the di_lsn logged with it; 6.1, whose rule
        // XfsWin follows, gives it the LSN of the transaction replayed.
        AssertReplayedBlocksMatch(overlay, kernel, maskInodeLsn: name == "quotaoff");
        Assert.True(overlay.DirtyBytes < (long)sb.DataBlocks * sb.BlockSize / 4);
    }

    /// <summary>
    /// Every sector the replay wrote equals the kernel's after its replay; with <paramref name="maskInodeLsn"/>, but
    /// for the di_lsn and di_crc of V3 inodes (512 bytes, one a sector, as mkfs makes them).
    /// </summary>
    private static void AssertReplayedBlocksMatch(OverlayDevice overlay, IBlockDevice kernel, bool maskInodeLsn = false)
    {
        var a = new byte[512];
        var b = new byte[512];
        var differing = new List<long>();
        string? firstBytes = null;
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
                if (maskInodeLsn && IsV3Inode(a) && IsV3Inode(b))
                {
                    foreach (var sector in new[] { a, b })
                    {
                        sector.AsSpan(DinodeView.OffCrc, 4).Clear();
                        sector.AsSpan(DinodeView.OffLsn, 8).Clear();
                    }
                }
                if (a.AsSpan().SequenceEqual(b)) continue;
                differing.Add(o / 512);
                firstBytes ??= $"daddr {o / 512} differs at bytes " +
                    string.Join(", ", Enumerable.Range(0, 512).Where(i => a[i] != b[i]).Take(12).Select(i => $"{i} (ours 0x{a[i]:x2}, kernel 0x{b[i]:x2})"));
            }
        }
        Assert.True(compared > 100, $"only {compared} sectors replayed");
        Assert.True(differing.Count == 0, $"{differing.Count} of {compared} replayed sectors differ from the kernel's, first daddrs: {string.Join(", ", differing.Take(20))}; {firstBytes}");
    }

    private static bool IsV3Inode(ReadOnlySpan<byte> sector) =>
        BinaryPrimitives.ReadUInt16BigEndian(sector) == DinodeView.Magic && sector[DinodeView.OffVersion] == 3;

    private static void MaskSuperblockCounters(Span<byte> sector)
    {
        // "No quota inode" is 0 as mkfs 6.13 writes it, NULLFSINO as the kernel writes the superblock back.
        foreach (int off in new[] { SuperblockView.OffUquotIno, SuperblockView.OffGquotIno, SuperblockView.OffPquotIno })
            if (BinaryPrimitives.ReadUInt64BigEndian(sector[off..]) == 0) BinaryPrimitives.WriteUInt64BigEndian(sector[off..], ulong.MaxValue);
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
    [InlineData("pairs", "6.13")]
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
            if (logLoop is not null) LoopMount.Detach(logLoop);
        }
    }

    [Theory]
    [InlineData("intents", "6.1", new[] { "EFI", "RUI" })]
    [InlineData("intents613", "6.13", new[] { "XMI", "BUI" })]
    public void UnfinishedIntentsAreFinishedInPlaceAsTheKernelFinishesThem(string name, string xfsprogs, string[] expectedKinds)
    {
        // intents: a truncate of 20000 extents cut short (EFI/RUI; dirty-logs.sh retries until one is in the log);
        // intents613: an exchange of 20000 extents cut short (XMI/BUI; retried until both are unfinished).
        var s = DirtyLogScenarios.Ensure(name);
        var logprint = LogprintIntents.Of(s.DirtyImage);
        Assert.Contains(expectedKinds, k => logprint.Unfinished.ContainsKey(k));
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, name + ".img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var memory = Recover(s, data, null, LogReplayMode.Memory);
            Assert.Equal(LogState.ReplayedInMemory, memory.State);
            Assert.Equal(LogprintIntents.Format(logprint.Unfinished), LogprintIntents.Format(memory.UnfinishedIntents));
            Assert.Equal(LogprintIntents.Format(logprint.Logged), LogprintIntents.Format(memory.IntentsLogged));
            foreach (var kind in memory.UnfinishedIntents.Keys)
                Assert.Contains(memory.Warnings, w => w.Contains($"unfinished {kind} intent", StringComparison.Ordinal));

            var result = Recover(s, data, null, LogReplayMode.InPlace);
            Assert.Equal(LogState.ReplayedInPlace, result.State);
            Assert.Equal(LogprintIntents.Format(logprint.Unfinished), LogprintIntents.Format(result.IntentsRecovered));
            Assert.Contains(result.Warnings, w => w.StartsWith("finished ", StringComparison.Ordinal));
            Assert.Equal(LogState.Clean, Recover(s, data, null, LogReplayMode.Memory).State);
        }
        AssertCleanAndAsTheKernelLeftIt(s, copy, xfsprogs);
    }

    /// <summary>
    /// xfs_repair -n finds nothing, the kernel mounts the image without recovery and shows the tree of its own replay,
    /// and the superblock's free block and inode counts equal what the kernel left after its recovery.
    /// </summary>
    private void AssertCleanAndAsTheKernelLeftIt(DirtyLogScenario s, string copy, string xfsprogs)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", xfsprogs), "-n", copy);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");
        var ours = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(copy, xfsprogs, "sb 0", "print fdblocks icount ifree"));
        var kernels = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(s.KernelImage, xfsprogs, "sb 0", "print fdblocks icount ifree"));
        Assert.Equal(kernels, ours);
        using var mount = LoopMount.Mount(copy, readOnly: true, "norecovery");
        string json = Path.Combine(_tmp, s.Name + ".inplace.json");
        Shell.RunChecked("python3", DirtyLogScenarios.ManifestScript, mount.MountPoint, json);
        Assert.Equal(File.ReadAllText(s.ManifestPath), File.ReadAllText(json));
    }

    [Fact]
    public void DquotsAreReplayedAsTheKernelReplaysThem()
    {
        // The quota scenario was made by a kernel mounted with uquota,gquota,pquota (user-mode Linux: this machine's
        // kernel has no XFS quota) and replayed by it with the same options. Quota was switched on by that very mount,
        // so the superblock on disk still says "no quota": only the logged superblock does.
        var s = DirtyLogScenarios.Ensure("quota");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        using var kernel = FileBlockDevice.Open(s.KernelImage, writable: false);
        var sector = new byte[512];
        data.Read(0, sector);
        Assert.Equal(0, new SuperblockView(sector).Qflags);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        Assert.True(result.QuotaAccounting, "the replayed superblock has quota accounting on");
        Assert.True(result.DquotsReplayed > 0, "no logged dquot was replayed");
        Assert.Equal(0, result.QuotaOffItems); // Linux 6.1 logs none
        Assert.Equal(0, result.DquotsSkippedQuotaOff);
        var overlay = Assert.IsType<OverlayDevice>(result.Device);
        AssertQuotaFilesMatch(CompareQuotaFiles(overlay, data, kernel, s.KernelImage));
    }

    [Fact]
    public void QuotaOffItemsAreHonouredAsTheKernelHonoursThem()
    {
        // The quotaoff scenario was made by Linux 5.10 (user-mode Linux), mounted with uquota,gquota,pquota: dquots of
        // every type are logged, then user quota is switched off (5.10 logs a quotaoff item when the switch-off starts
        // and one when it ends), then only group and project dquots are logged. The kernel then replayed it (mounted
        // with gquota,pquota, as the superblock now says) skipping every logged user dquot and user dquot buffer.
        var s = DirtyLogScenarios.Ensure("quotaoff");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        using var kernel = FileBlockDevice.Open(s.KernelImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.Memory);

        // As many quotaoff items as xfs_logprint decodes (the machine's 6.1 and 6.13 agree), all for user quota.
        foreach (var xfsprogs in new[] { "6.1", "6.13" })
        {
            var logprint = Shell.RunChecked(OracleImages.Tool("xfs_logprint", xfsprogs), "-t", s.DirtyImage).StandardOutput;
            var items = System.Text.RegularExpressions.Regex.Matches(logprint, @"^\s*QUOTAOFF: #regs:.*type:\s*(.*?)\s*$",
                System.Text.RegularExpressions.RegexOptions.Multiline);
            Assert.True(items.Count >= 2, $"xfs_logprint {xfsprogs} shows {items.Count} quotaoff items");
            Assert.All(items, m => Assert.Equal("USER", m.Groups[1].Value));
            Assert.Equal(items.Count, result.QuotaOffItems);
        }
        Assert.Equal(["user"], result.QuotaTypesOff);
        Assert.True(result.QuotaAccounting, "group and project quota are still on");
        Assert.True(result.DquotsSkippedQuotaOff > 0, "no logged user dquot was left out");
        Assert.True(result.DquotsReplayed > 0, "no logged group or project dquot was replayed");

        var overlay = Assert.IsType<OverlayDevice>(result.Device);
        AssertQuotaFilesMatch(CompareQuotaFiles(overlay, data, kernel, s.KernelImage));
    }

    [Fact]
    public void ReplayingSwitchedOffDquotsDiffersFromTheKernel()
    {
        // Guards the test above: replaying the user dquots the log switched off (what XfsWin did before it honoured
        // quotaoff items) gives user quota file blocks the kernel's replay does not have, and nothing else changes.
        var s = DirtyLogScenarios.Ensure("quotaoff");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        using var kernel = FileBlockDevice.Open(s.KernelImage, writable: false);
        var result = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory, null, honourQuotaOff: false);
        Assert.Equal(0, result.DquotsSkippedQuotaOff);
        var c = CompareQuotaFiles(Assert.IsType<OverlayDevice>(result.Device), data, kernel, s.KernelImage);
        Assert.NotEmpty(c.Differing);
        Assert.All(c.Differing, d => Assert.Equal("uquotino", d.File));
    }

    /// <summary>
    /// Every block of the three quota files (located by xfs_db in the kernel's replay) equals the kernel's, and the
    /// log, not the disk, is what made some of them so.
    /// </summary>
    private static void AssertQuotaFilesMatch(QuotaFileComparison c)
    {
        Assert.True(c.Blocks >= 3, $"xfs_db found {c.Blocks} quota file blocks");
        Assert.True(c.Differing.Count == 0, $"{c.Differing.Count} of {c.Blocks} dquot blocks differ from the kernel's: {c.Format()}");
        Assert.True(c.ChangedByLog > 0, "no dquot block differs between the dirty volume and the kernel's replay: the log carried nothing to check");
    }

    private sealed record QuotaFileComparison(int Blocks, int ChangedByLog, List<(string File, long Daddr)> Differing)
    {
        public string Format() => string.Join(", ", Differing.Select(d => $"{d.File} daddr {d.Daddr}"));
    }

    /// <summary>Compares our replay with the kernel's, block by block, over the quota files of the kernel's replay.</summary>
    private static QuotaFileComparison CompareQuotaFiles(IBlockDevice ours, IBlockDevice dirty, IBlockDevice kernel, string kernelImage)
    {
        var files = QuotaFileBlocks(kernelImage);
        int blockSize = (int)DirtyLogScenarios.ReadSuperblock(kernel).BlockSize;
        var a = new byte[blockSize];
        var b = new byte[blockSize];
        var before = new byte[blockSize];
        var differing = new List<(string, long)>();
        int blocks = 0, changedByLog = 0;
        foreach (var (file, offsets) in files)
        {
            foreach (long offset in offsets)
            {
                blocks++;
                ours.Read(offset, a);
                kernel.Read(offset, b);
                dirty.Read(offset, before);
                if (!a.AsSpan().SequenceEqual(b)) differing.Add((file, offset / 512));
                if (!before.AsSpan().SequenceEqual(b)) changedByLog++;
            }
        }
        return new QuotaFileComparison(blocks, changedByLog, differing);
    }

    /// <summary>Byte offsets of every block of the user, group and project quota files, from xfs_db, by file ("uquotino", ...).</summary>
    private static List<(string File, List<long> Offsets)> QuotaFileBlocks(string image)
    {
        var xfsDb = OracleImages.Tool("xfs_db");
        var sb = Shell.RunChecked(xfsDb, "-r", "-c", "sb 0", "-c", "print uquotino gquotino pquotino blocksize agblocks", image).StandardOutput;
        var fields = sb.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(" = "))
            .Where(p => p.Length == 2).ToDictionary(p => p[0].Trim(), p => p[1].Trim());
        long blockSize = long.Parse(fields["blocksize"]), agBlocks = long.Parse(fields["agblocks"]);
        var files = new List<(string, List<long>)>();
        foreach (var q in new[] { "uquotino", "gquotino", "pquotino" })
        {
            var offsets = new List<long>();
            files.Add((q, offsets));
            ulong ino = ulong.Parse(fields[q]);
            Assert.True(ino != 0 && ino != ulong.MaxValue, $"the kernel's replay has no {q}");
            var bmap = Shell.RunChecked(xfsDb, "-r", "-c", $"inode {ino}", "-c", "bmap", image).StandardOutput;
            // "data offset 0 startblock 15 (0/15) count 1 flag 0"
            foreach (System.Text.RegularExpressions.Match m in System.Text.RegularExpressions.Regex.Matches(bmap, @"\((\d+)/(\d+)\) count (\d+)"))
            {
                long ag = long.Parse(m.Groups[1].Value), agbno = long.Parse(m.Groups[2].Value), count = long.Parse(m.Groups[3].Value);
                for (long i = 0; i < count; i++) offsets.Add((ag * agBlocks + agbno + i) * blockSize);
            }
        }
        return files;
    }

    [Theory]
    [InlineData("quota", "#1001")]
    [InlineData("quotaoff", "#3005")]
    public void InPlaceRecoveryWithQuotaIsCleanForTheKernelWithQuota(string name, string reportedId)
    {
        var s = DirtyLogScenarios.Ensure(name);
        Assert.NotNull(s.QuotaReport);
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, name + ".img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var result = Recover(s, data, null, LogReplayMode.InPlace);
            Assert.Equal(LogState.ReplayedInPlace, result.State);
            Assert.True(result.DquotsReplayed > 0);
            Assert.Equal(name == "quotaoff", result.DquotsSkippedQuotaOff > 0);
            Assert.Equal(LogState.Clean, Recover(s, data, null, LogReplayMode.Memory).State);
        }
        // xfs_repair also checks every dquot's counts against the files it finds (of the types still on).
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", copy);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");

        // The scenario's kernel with quota mounts it (read-only, with the quota options of its replay) without
        // recovery and without a quotacheck (which would rebuild the counts and hide wrong dquots); it shows the same
        // tree and the same quota report as after its own replay.
        string prefix = Path.Combine(_tmp, name + ".inplace");
        DirtyLogScenarios.GuestReport(name, copy, prefix);
        string dmesg = File.ReadAllText(prefix + ".dmesg");
        Assert.Contains("XFS (ubda): Mounting V5", dmesg);
        Assert.DoesNotContain("recovery", dmesg, StringComparison.OrdinalIgnoreCase);
        Assert.DoesNotContain("Quotacheck", dmesg, StringComparison.Ordinal);
        Assert.Equal(File.ReadAllText(s.ManifestPath), File.ReadAllText(prefix + ".json"));
        string report = File.ReadAllText(prefix + ".quota");
        Assert.Contains(reportedId, report);
        Assert.Equal(File.ReadAllText(s.QuotaReport!), report);
    }

    [Fact]
    public void PairedIntentsOfEveryKindAreSeenAndFinished()
    {
        // A 6.13 volume with parent pointers and exchange-range: reflink and copy-on-write give BUI/CUI/RUI, the
        // exchange XMI, parent pointers ATTRI, each finished by its done item in the log (dirty-logs.sh checks).
        var s = DirtyLogScenarios.Ensure("pairs");
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var result = Recover(s, data, null, LogReplayMode.Memory);
        var logprint = LogprintIntents.Of(s.DirtyImage);
        foreach (var kind in new[] { "BUI", "CUI", "RUI", "ATTRI", "XMI" })
            Assert.True(logprint.Finished.GetValueOrDefault(kind) > 0, $"xfs_logprint shows no finished {kind}");
        Assert.Empty(logprint.Unfinished);
        Assert.Equal(LogprintIntents.Format(logprint.Logged), LogprintIntents.Format(result.IntentsLogged));
        Assert.Equal(LogprintIntents.Format(logprint.Finished), LogprintIntents.Format(result.IntentsFinished));
        Assert.Empty(result.UnfinishedIntents);
        Assert.Equal(0, result.UnlinkedInodes);
        Assert.DoesNotContain(result.Warnings, w => w.Contains("unfinished", StringComparison.Ordinal) || w.Contains("copy-on-write", StringComparison.Ordinal));
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
        string copy = DirtyLogScenarios.Copy(s.KernelImage, _tmp, "kernel-replayed.img");
        using var data = FileBlockDevice.Open(copy, writable: true);
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
        // The kernel frees inodes left on the unlinked lists after its replay, which would change blocks beyond the
        // replay; the crash workload ends with work that unlinks nothing, so that cutting its last record leaves none.
        Assert.True(result.UnlinkedInodes == 0, $"the cut left {result.UnlinkedInodes} inode(s) on the unlinked lists");
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
            var ex = Assert.Throws<XfsCorruptionException>(() => Recover(data, null, mode));
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

/// <summary>
/// Intents and done items as xfs_logprint (6.13, which knows every kind) decodes a dirty log: each item's line
/// with "#regs" carries its id; in log order, a done item finishes the pending intent of its kind with that id.
/// </summary>
internal sealed record LogprintIntents(Dictionary<string, int> Logged, Dictionary<string, int> Finished, Dictionary<string, int> Unfinished)
{
    private static readonly Dictionary<string, string> IntentOfDone = new(StringComparer.Ordinal)
    {
        ["EFD"] = "EFI", ["RUD"] = "RUI", ["CUD"] = "CUI", ["BUD"] = "BUI", ["ATTRD"] = "ATTRI", ["XMD"] = "XMI",
    };

    public static LogprintIntents Of(string image)
    {
        var text = Shell.RunChecked(OracleImages.Tool("xfs_logprint", "6.13"), "-t", image).StandardOutput;
        var logged = new Dictionary<string, int>(StringComparer.Ordinal);
        var finished = new Dictionary<string, int>(StringComparer.Ordinal);
        var pending = new List<(string Kind, string Id)>();
        foreach (System.Text.RegularExpressions.Match m in System.Text.RegularExpressions.Regex.Matches(text,
                     @"^\s*([A-Z]+):\s+#regs:.*\bid:\s*(0x[0-9a-f]+)", System.Text.RegularExpressions.RegexOptions.Multiline))
        {
            string kind = m.Groups[1].Value, id = m.Groups[2].Value;
            if (IntentOfDone.ContainsValue(kind))
            {
                logged[kind] = logged.GetValueOrDefault(kind) + 1;
                pending.Add((kind, id));
            }
            else if (IntentOfDone.TryGetValue(kind, out var intent) && pending.Remove((intent, id)))
            {
                finished[intent] = finished.GetValueOrDefault(intent) + 1;
            }
        }
        var unfinished = pending.GroupBy(p => p.Kind).ToDictionary(g => g.Key, g => g.Count(), StringComparer.Ordinal);
        return new LogprintIntents(logged, finished, unfinished);
    }

    /// <summary>"KIND=count" pairs sorted by kind, for readable comparisons.</summary>
    public static string Format(IReadOnlyDictionary<string, int> counts) =>
        string.Join(", ", counts.Where(kv => kv.Value != 0).OrderBy(kv => kv.Key, StringComparer.Ordinal).Select(kv => $"{kv.Key}={kv.Value}"));
}

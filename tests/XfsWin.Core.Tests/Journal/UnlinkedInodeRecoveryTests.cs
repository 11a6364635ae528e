using System.Buffers.Binary;
using System.Text.RegularExpressions;
using Xunit;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Journal;

/// <summary>
/// The `unlinked` scenario of dirty-logs.sh: at the shutdown a process holds open six inodes already unlinked (a
/// one-extent file, a file of thousands of extents in a btree data fork, a file with remote and local xattrs, an
/// O_TMPFILE file with data, a removed directory that is its cwd, a remote symlink held by an O_PATH fd). The kernel
/// frees them when it mounts the volume, after its replay; in-place recovery must leave what the kernel leaves.
/// Every expected value comes from the kernel's replay (KernelImage), read with xfs_db.
/// </summary>
public sealed partial class UnlinkedInodeRecoveryTests : IDisposable
{
    private const string Scenario = "unlinked";
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-unlinked.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>The inodes the workload's holder kept open, unlinked, until the shutdown (name → inode number, from fstat).</summary>
    private static Dictionary<string, ulong> Held(DirtyLogScenario s)
    {
        string path = Path.Combine(Path.GetDirectoryName(s.DirtyImage)!, s.Name + ".held");
        return File.ReadAllLines(path).Where(l => l.Length > 0).Select(l => l.Split(' '))
            .ToDictionary(p => p[0], p => ulong.Parse(p[1]), StringComparer.Ordinal);
    }

    [Fact]
    public void ScenarioLeavesEveryKindOfInodeOnTheUnlinkedLists()
    {
        var s = DirtyLogScenarios.Ensure(Scenario);
        var held = Held(s);
        Assert.Equal(["attrs", "dir", "frag", "small", "symlink", "tmpfile"], held.Keys.Order(StringComparer.Ordinal));

        // Before the unlinks the holder froze the volume, so the dirty image shows each inode as it was then.
        var core = held.ToDictionary(kv => kv.Key, kv => XfsDb.Fields(s.DirtyImage, $"inode {kv.Value}",
            "print core.mode core.nlinkv2 core.format core.aformat core.nextents core.naextents"));
        Assert.Equal("1", core["small"]["core.nextents"]);
        Assert.StartsWith("3 ", core["frag"]["core.format"]);                      // btree
        Assert.True(long.Parse(core["frag"]["core.nextents"]) > 1000, $"frag has {core["frag"]["core.nextents"]} extents");
        Assert.StartsWith("2 ", core["attrs"]["core.aformat"]);                    // extents: a leaf block and remote value blocks
        Assert.True(BmapBlocks(s.DirtyImage, held["attrs"], attr: true) >= 2, "the attr fork has no remote value blocks");
        Assert.StartsWith("040", core["dir"]["core.mode"]);
        Assert.StartsWith("0120", core["symlink"]["core.mode"]);
        Assert.StartsWith("2 ", core["symlink"]["core.format"]);                   // remote symlink block
        Assert.StartsWith("0100", core["tmpfile"]["core.mode"]);
        Assert.Equal("0", core["tmpfile"]["core.nlinkv2"]);                        // never linked
        Assert.True(long.Parse(core["tmpfile"]["core.nextents"]) >= 1, "the O_TMPFILE file has no data extents");
        foreach (var name in new[] { "small", "frag", "attrs", "symlink" })
            Assert.Equal("1", core[name]["core.nlinkv2"]);                         // their unlinks are only in the log

        // After our replay (in memory) the AGI unlinked lists hold exactly those inodes.
        using (var data = FileBlockDevice.Open(s.DirtyImage, writable: false))
        {
            var result = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
            Assert.Equal(LogState.ReplayedInMemory, result.State);
            Assert.Equal(held.Count, result.UnlinkedInodes);
            Assert.Equal(held.Values.Order(), UnlinkedListInodes(result.Device, DirtyLogScenarios.ReadSuperblock(data)).Order());
            Assert.Empty(result.UnfinishedIntents);
            Assert.DoesNotContain(result.Warnings, w => w.Contains("copy-on-write", StringComparison.Ordinal));
        }

        // The kernel's replay freed them all, and left no inode on any unlinked list.
        int agCount = AgCount(s.KernelImage);
        Assert.Empty(NonNullUnlinkedBuckets(s.KernelImage, agCount));
        foreach (var (name, ino) in held)
        {
            Assert.True(XfsDb.Fields(s.KernelImage, $"inode {ino}", "print core.mode")["core.mode"] == "0", $"the kernel left {name} ({ino}) allocated");
            Assert.True(IsFreeInInobt(s.KernelImage, ino, agCount), $"{name} ({ino}) is not free in the kernel's inobt");
        }
        // Their inode chunks stay in use (other files live in them): the kernel freed no chunk. The unlinks do not
        // change the AGI inode counts, which the freeze wrote back before them.
        for (int ag = 0; ag < agCount; ag++)
            Assert.Equal(XfsDb.Fields(s.DirtyImage, $"agi {ag}", "print count")["count"], XfsDb.Fields(s.KernelImage, $"agi {ag}", "print count")["count"]);
    }

    [Fact]
    public void InPlaceRecoveryFreesUnlinkedInodesAsTheKernelDoes()
    {
        var s = DirtyLogScenarios.Ensure(Scenario);
        var held = Held(s);
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, Scenario + ".img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var result = InPlaceRecovery.Run(WriteGate.Admit(data, null, WritePurpose.LogRecovery));
            Assert.Equal(LogState.ReplayedInPlace, result.State);
            Assert.Equal(held.Count, result.UnlinkedInodes);
            Assert.Equal(LogState.Clean, LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory).State);
        }

        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", copy);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");

        var differences = DifferencesFromKernel(copy, s.KernelImage, held);
        Assert.True(differences.Count == 0, $"{differences.Count} difference(s) from the kernel's replay:\n" + string.Join("\n", differences));

        // The kernel mounts it without recovery (xfs_repair above refuses a dirty log) and shows the tree of its own replay.
        using var mount = LoopMount.Mount(copy, readOnly: true, "norecovery");
        string json = Path.Combine(_tmp, Scenario + ".inplace.json");
        Shell.RunChecked("python3", DirtyLogScenarios.ManifestScript, mount.MountPoint, json);
        Assert.Equal(File.ReadAllText(s.ManifestPath), File.ReadAllText(json));
    }

    [Fact]
    public void InPlaceRecoveryOfThousandsOfUnlinkedInodesReshapesTheTreesAsTheKernelDoes()
    {
        // 2000 separate one-block extents and 187 whole inode chunks come free: the free-space btrees split (their
        // blocks come from the AGFL, refilled from free space), the inode btrees join blocks and the inobt root shrinks.
        var s = DirtyLogScenarios.Ensure("unlinkedmany");
        var held = Held(s);
        Assert.Equal("2", XfsDb.Fields(s.DirtyImage, "agi 0", "print level")["level"]);
        Assert.Equal("1", XfsDb.Fields(s.KernelImage, "agi 0", "print level")["level"]);
        Assert.Equal("1", XfsDb.Fields(s.DirtyImage, "agf 0", "print bnolevel")["bnolevel"]);
        Assert.Equal("2", XfsDb.Fields(s.KernelImage, "agf 0", "print bnolevel")["bnolevel"]);

        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "unlinkedmany.img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var result = InPlaceRecovery.Run(WriteGate.Admit(data, null, WritePurpose.LogRecovery));
            Assert.Equal(LogState.ReplayedInPlace, result.State);
            Assert.Equal(14000, result.UnlinkedInodes);
            Assert.Equal(14000, result.UnlinkedInodesFreed);
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", copy);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");
        var differences = DifferencesFromKernel(copy, s.KernelImage, held);
        Assert.True(differences.Count == 0, $"{differences.Count} difference(s) from the kernel's replay:\n" + string.Join("\n", differences));
        Assert.Equal("1", XfsDb.Fields(copy, "agi 0", "print level")["level"]);
        Assert.Equal("2", XfsDb.Fields(copy, "agf 0", "print bnolevel")["bnolevel"]);
    }

    [Fact]
    public void InPlaceRecoveryRemovesCopyOnWriteStagingExtentsAsTheKernelDoes()
    {
        // cow ends with a copy-on-write over a reflinked file (default CoW extent size hint: speculative staging
        // extents outlive the write, in the refcount btree's CoW domain with OWN_COW mappings) and a file unlinked
        // while open. The kernel removes the staging extents at mount (xfs_reflink_recover_cow); so does in-place recovery.
        var s = DirtyLogScenarios.Ensure("cow");
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "cow.img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var sb = DirtyLogScenarios.ReadSuperblock(data);
            var memory = LogRecovery.Recover(data, null, sb, LogReplayMode.Memory);
            Assert.Equal(1, memory.UnlinkedInodes);
            Assert.Contains(memory.Warnings, w => w.Contains("leftover copy-on-write staging extents", StringComparison.Ordinal));
            var cowAgs = RecoveryChecks.AgsWithLeftoverCow(memory.Device, sb);
            Assert.NotEmpty(cowAgs);

            var result = InPlaceRecovery.Run(WriteGate.Admit(data, null, WritePurpose.LogRecovery));
            Assert.Equal(LogState.ReplayedInPlace, result.State);
            Assert.Equal(1, result.UnlinkedInodesFreed);
            Assert.True(result.CowStagingExtentsRemoved > 0);
            Assert.Empty(RecoveryChecks.AgsWithLeftoverCow(data, sb));
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", copy);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");
        var differences = DifferencesFromKernel(copy, s.KernelImage, []);
        Assert.True(differences.Count == 0, $"{differences.Count} difference(s) from the kernel's replay:\n" + string.Join("\n", differences));
        using var mount = LoopMount.Mount(copy, readOnly: true, "norecovery");
        string json = Path.Combine(_tmp, "cow.inplace.json");
        Shell.RunChecked("python3", DirtyLogScenarios.ManifestScript, mount.MountPoint, json);
        Assert.Equal(File.ReadAllText(s.ManifestPath), File.ReadAllText(json));
    }

    [Fact]
    public void ACrashWhileFreeingLeavesALogThatTheKernelAndWeFinish()
    {
        // The freeing is logged like any change: a crash part way leaves a dirty log whose replay gets back to where it
        // stopped, with what is left still on the unlinked lists or promised by intents. Cut it short at flushes spread
        // over the freeing; the kernel and in-place recovery must each finish the job, to the same result.
        var s = DirtyLogScenarios.Ensure(Scenario);
        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, Scenario + ".crash.img");
        var device = new RecordingBlockDevice(FileBlockDevice.Open(copy, writable: true));
        using (device)
        {
            var result = InPlaceRecovery.Run(WriteGate.Admit(device, null, WritePurpose.LogRecovery));
            Assert.Equal(6, result.UnlinkedInodesFreed);
        }
        var events = device.Snapshot();
        Superblock sb;
        using (var dirtyImage = FileBlockDevice.Open(s.DirtyImage, writable: false)) sb = DirtyLogScenarios.ReadSuperblock(dirtyImage);
        var flushes = Enumerable.Range(0, events.Count).Where(i => events[i].IsFlush).ToList();
        Assert.True(flushes.Count > 8, $"only {flushes.Count} flushes");
        var problems = new List<string>();
        int dirty = 0;
        foreach (int k in new[] { 3, 5, 7 })
        {
            int flush = flushes[flushes.Count * k / 10];
            string image = Path.Combine(_tmp, $"cut{flush}.img");
            CrashImage.Build(s.DirtyImage, events, CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0)), image);
            using (var data = FileBlockDevice.Open(image, writable: false))
                if (LogRecovery.Recover(data, null, sb, LogReplayMode.Memory).State == LogState.ReplayedInMemory) dirty++;
            if (IntentChainTests.RecoverBothWays(image, $"cut at event {flush + 1}") is { } problem) problems.Add(problem);
        }
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
        Assert.Equal(3, dirty);
    }

    [Fact]
    public void InPlaceRecoveryRefusesWhatItCannotFinishBeforeWritingAnything()
    {
        // The write path keeps no realtime section: realtime intents, and exchanges that need short-form work afterwards,
        // are refused, naming why. Quota accounting is no reason: the engine charges the dquots of what it frees.
        var s = DirtyLogScenarios.Ensure(Scenario);
        using var data = FileBlockDevice.Open(s.DirtyImage, writable: false);
        var sb = DirtyLogScenarios.ReadSuperblock(data);
        var memory = LogRecovery.Recover(data, null, sb, LogReplayMode.Memory);
        var replayed = LogRecovery.ReadReplayedSuperblock(memory.Device);
        Assert.Null(InPlaceRecovery.Refusal(memory.Device, replayed, [], memory.UnlinkedInodes));

        var quota = new OverlayDevice(memory.Device);
        var sector = new byte[sb.SectorSize];
        quota.Read(0, sector);
        BinaryPrimitives.WriteUInt16BigEndian(sector.AsSpan(SuperblockView.OffQflags), 0x0001); // XFS_UQUOTA_ACCT
        quota.Write(0, sector);
        Assert.Null(InPlaceRecovery.Refusal(quota, replayed, [], memory.UnlinkedInodes));
        Assert.Null(InPlaceRecovery.Refusal(quota, replayed, [], 0));

        var efiRt = IntentLogItem.ExtentFree(done: false, 7, [new IntentExtent(100, 1)], realtime: true);
        Assert.Contains("realtime", InPlaceRecovery.Refusal(memory.Device, replayed, [Recovered(efiRt)], 0));
        var attrForks = IntentLogItem.ExchangeMapping(8, 131, 132, 1, 1, 0, 0, 4, flags: 1, -1, -1);
        Assert.Contains("attribute forks", InPlaceRecovery.Refusal(memory.Device, replayed, [Recovered(attrForks)], 0));
    }

    private static RecoveredIntent Recovered(IntentLogItem item)
    {
        var regions = new List<ReadOnlyMemory<byte>>();
        item.Format(regions);
        return new RecoveredIntent(item.ItemType, item.Id, Lsn.Make(1, 2), regions.Select(r => r.ToArray()).ToArray());
    }

    [Fact]
    public void ComparisonWithTheKernelSeesUnfreedInodes()
    {
        // Guards the test above: the kernel's image compares equal to itself, and the replay alone (our in-memory replay
        // written to a copy, the held inodes not freed) differs from it wherever freeing them changes the volume.
        var s = DirtyLogScenarios.Ensure(Scenario);
        var held = Held(s);
        Assert.Empty(DifferencesFromKernel(s.KernelImage, s.KernelImage, held));

        string copy = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, Scenario + ".replayed.img");
        using (var data = FileBlockDevice.Open(copy, writable: true))
        {
            var result = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
            Assert.IsType<OverlayDevice>(result.Device).FlushTo(data, null);
        }
        var differences = DifferencesFromKernel(copy, s.KernelImage, held);
        string all = string.Join("\n", differences);
        var sb = XfsDb.Fields(s.KernelImage, "sb 0", "print agblklog inopblog");
        int agInoLog = int.Parse(sb["agblklog"]) + int.Parse(sb["inopblog"]);
        foreach (var (name, ino) in held)
        {
            Assert.Contains(differences, d => d.StartsWith($"{name} ({ino}) still has mode", StringComparison.Ordinal));
            Assert.Contains($"{name} ({ino}) is not free in the inobt", all);
            Assert.Contains($"agi {ino >> agInoLog} freecount:", all);
            Assert.Contains($"AG {ino >> agInoLog} finobt records:", all);
        }
        Assert.Contains("still holds agino", all);
        ulong fragAg = held["frag"] >> agInoLog;   // its thousands of blocks lie in its inode's AG
        Assert.Contains($"agf {fragAg} freeblks + flcount + btreeblks:", all);
        Assert.Contains("reverse mappings other than OWN_AG", all);
    }

    /// <summary>
    /// Where <paramref name="image"/> differs from the kernel's replay in free space, inode counts, free-space and inode
    /// btrees, reverse mappings and superblock counters, and held inodes it has not freed (xfs_db on both).
    /// </summary>
    private static List<string> DifferencesFromKernel(string image, string kernelImage, Dictionary<string, ulong> held)
    {
        int agCount = AgCount(kernelImage);
        var differences = new List<string>();
        void Same(string what, string mine, string kernels)
        {
            if (mine != kernels) differences.Add($"{what}:\n  ours:   {Shorten(mine)}\n  kernel: {Shorten(kernels)}");
        }
        for (int ag = 0; ag < agCount; ag++)
        {
            var ours = XfsDb.Fields(image, $"agi {ag}", "print count freecount");
            var theirs = XfsDb.Fields(kernelImage, $"agi {ag}", "print count freecount");
            foreach (var f in new[] { "count", "freecount" }) Same($"agi {ag} {f}", ours[f], theirs[f]);
            // Free space, blocks parked on the AGFL and blocks of the AGFL-fed trees (bno, cnt, rmap) are one pool:
            // how it divides depends on the order of the changes. Each of the kernel's transactions refills or trims
            // the AGFL for the trees' heights at its start, and splits and joins then take from it or give to it, so
            // the AGFL's fill, the trees' shapes and the longest extent may differ; their sum may not.
            static long SpacePool(string img, int ag)
            {
                var f = XfsDb.Fields(img, $"agf {ag}", "print freeblks flcount btreeblks");
                return long.Parse(f["freeblks"]) + long.Parse(f["flcount"]) + long.Parse(f["btreeblks"]);
            }
            Same($"agf {ag} freeblks + flcount + btreeblks", SpacePool(image, ag).ToString(), SpacePool(kernelImage, ag).ToString());
            Same($"AG {ag} inobt records", string.Join(" ", BtreeRecords(image, $"agi {ag}", "root")), string.Join(" ", BtreeRecords(kernelImage, $"agi {ag}", "root")));
            Same($"AG {ag} refcount records (shared and CoW staging)", string.Join(" ", BtreeRecords(image, $"agf {ag}", "refcntroot")), string.Join(" ", BtreeRecords(kernelImage, $"agf {ag}", "refcntroot")));
            Same($"AG {ag} finobt records", string.Join(" ", BtreeRecords(image, $"agi {ag}", "free_root")), string.Join(" ", BtreeRecords(kernelImage, $"agi {ag}", "free_root")));
        }
        var sbOurs = XfsDb.Fields(image, "sb 0", "print icount ifree fdblocks");
        var sbKernel = XfsDb.Fields(kernelImage, "sb 0", "print icount ifree fdblocks");
        foreach (var f in new[] { "icount", "ifree", "fdblocks" }) Same("sb " + f, sbOurs[f], sbKernel[f]);
        // Every reverse mapping but OWN_AG's. Which blocks the AG free list and the free-space and rmap btrees occupy
        // depends on the order of the kernel's many small transactions (see above), so OWN_AG blocks and free
        // extents may sit elsewhere; with every other owner's blocks equal and that pool equal above, the blocks
        // it holds are the same set.
        Same("reverse mappings other than OWN_AG (xfs_db fsmap)", MappingsExceptSpaceManagement(image), MappingsExceptSpaceManagement(kernelImage));

        foreach (var (bucket, value) in NonNullUnlinkedBuckets(image, agCount)) differences.Add($"{bucket} still holds agino {value}");
        foreach (var (name, ino) in held)
        {
            // A freed inode's core reads mode 0, unless freeing it released its whole chunk: the kernel then writes
            // nothing more to the chunk (its clusters are stale), and the core keeps what it last wrote there.
            string mode = XfsDb.Fields(image, $"inode {ino}", "print core.mode")["core.mode"];
            string kernelMode = XfsDb.Fields(kernelImage, $"inode {ino}", "print core.mode")["core.mode"];
            if (mode != "0" && mode != kernelMode) differences.Add($"{name} ({ino}) still has mode {mode}");
            if (!IsFreeInInobt(image, ino, agCount)) differences.Add($"{name} ({ino}) is not free in the inobt");
        }
        return differences;
    }

    /// <summary>xfs_db fsmap without its record numbers and without OWN_AG (-5) records.</summary>
    private static string MappingsExceptSpaceManagement(string image) =>
        string.Join("\n", XfsDb.Run(image, "fsmap").Split('\n')
            .Select(line => Regex.Replace(line.Trim(), "^[0-9]+: ", ""))
            .Where(line => line.Length > 0 && !line.Contains(" owner -5 ", StringComparison.Ordinal)));

    private static string Shorten(string text)
    {
        text = text.Replace("\n", " | ");
        return text.Length <= 2000 ? text : text[..2000] + " ...";
    }

    private static int AgCount(string image) => int.Parse(XfsDb.Fields(image, "sb 0", "print agcount")["agcount"]);

    /// <summary>Blocks mapped by an inode's data or attr fork (xfs_db bmap).</summary>
    private static long BmapBlocks(string image, ulong ino, bool attr) =>
        BmapCount().Matches(XfsDb.Run(image, $"inode {ino}", attr ? "bmap -a" : "bmap")).Sum(m => long.Parse(m.Groups[1].Value));

    [GeneratedRegex(@"count (\d+) flag")]
    private static partial Regex BmapCount();

    /// <summary>"agi N unlinked[B]" → agino for every bucket xfs_db shows as not null.</summary>
    private static List<(string Bucket, string Value)> NonNullUnlinkedBuckets(string image, int agCount)
    {
        var found = new List<(string, string)>();
        for (int ag = 0; ag < agCount; ag++)
        {
            var line = XfsDb.Fields(image, $"agi {ag}", "print unlinked").Single().Value;
            foreach (Match m in Regex.Matches(line, @"(\d+):(\S+)"))
                if (m.Groups[2].Value != "null") found.Add(($"agi {ag} unlinked[{m.Groups[1].Value}]", m.Groups[2].Value));
        }
        return found;
    }

    /// <summary>Whether the inobt record that covers <paramref name="ino"/> marks it free (xfs_db, records walked from the root).</summary>
    /// <summary>Free in the inobt: its free bit is set, or no chunk record covers it any more.</summary>
    private static bool IsFreeInInobt(string image, ulong ino, int agCount)
    {
        var sb = XfsDb.Fields(image, "sb 0", "print agblklog inopblog");
        int agInoLog = int.Parse(sb["agblklog"]) + int.Parse(sb["inopblog"]);
        ulong ag = ino >> agInoLog, agino = ino & ((1UL << agInoLog) - 1);
        Assert.True(ag < (ulong)agCount);
        foreach (var rec in BtreeRecords(image, $"agi {ag}", "root"))
        {
            // [startino,holemask,count,freecount,free]
            var f = rec.Trim('[', ']').Split(',');
            ulong start = ulong.Parse(f[0]);
            if (agino < start || agino >= start + 64) continue;
            ulong free = f[4].StartsWith("0x", StringComparison.Ordinal) ? Convert.ToUInt64(f[4][2..], 16) : ulong.Parse(f[4]);
            return (free >> (int)(agino - start) & 1) != 0;
        }
        // No record holds it: its whole chunk was released (no inode of it is in use), as the kernel does without ikeep.
        return true;
    }

    /// <summary>Every record of a short-pointer btree, in key order, as xfs_db prints it ("[a,b,...]").</summary>
    private static List<string> BtreeRecords(string image, string header, string rootField)
    {
        var records = new List<string>();
        void Walk(List<string> path)
        {
            var text = XfsDb.Run(image, [.. path, "print level numrecs"]);
            var fields = XfsDb.Parse(text);
            int level = int.Parse(fields["level"]);
            if (fields["numrecs"] == "0") return;
            if (level == 0)
            {
                records.AddRange(Regex.Matches(XfsDb.Run(image, [.. path, "print recs"]), @"\d+:(\[[^\]]*\])").Select(m => m.Groups[1].Value));
                return;
            }
            int ptrs = Regex.Count(XfsDb.Run(image, [.. path, "print ptrs"]), @"\d+:\d+");
            for (int i = 1; i <= ptrs; i++) Walk([.. path, $"addr ptrs[{i}]"]);
        }
        Walk([header, "addr " + rootField]);
        return records;
    }

    /// <summary>Inodes on every AGI unlinked list of a (replayed) device, following di_next_unlinked.</summary>
    private static List<ulong> UnlinkedListInodes(IBlockDevice device, Superblock sb)
    {
        var inodes = new List<ulong>();
        var agi = new byte[sb.SectorSize];
        var inode = new byte[sb.InodeSize];
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            device.Read(RecoveryChecks.AgiOffset(sb, ag), agi);
            for (int b = 0; b < AgiView.UnlinkedBuckets; b++)
            {
                uint agino = BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffUnlinked + 4 * b));
                while (agino != AgiView.NullAgino && inodes.Count < 1000)
                {
                    ulong ino = ((ulong)ag << sb.AgInoLog) | agino;
                    inodes.Add(ino);
                    device.Read(sb.InodeToByte(ino), inode);
                    agino = BinaryPrimitives.ReadUInt32BigEndian(inode.AsSpan(DinodeView.OffNextUnlinked));
                }
            }
        }
        return inodes;
    }
}

/// <summary>xfs_db -r on an image: raw output, or its "name = value" lines.</summary>
internal static class XfsDb
{
    public static string Run(string image, params string[] commands)
    {
        var args = new List<string> { "-r" };
        foreach (var c in commands) args.AddRange(["-c", c]);
        args.Add(image);
        return Shell.RunChecked(OracleImages.Tool("xfs_db"), args).StandardOutput;
    }

    public static Dictionary<string, string> Fields(string image, params string[] commands) => Parse(Run(image, commands));

    public static Dictionary<string, string> Parse(string text)
    {
        var fields = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var line in text.Split('\n'))
        {
            int eq = line.IndexOf(" = ", StringComparison.Ordinal);
            if (eq > 0) fields[line[..eq].Trim()] = line[(eq + 3)..].Trim();
        }
        return fields;
    }
}

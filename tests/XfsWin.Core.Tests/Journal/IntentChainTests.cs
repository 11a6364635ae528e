using System.Text.RegularExpressions;
using Xunit;
using XfsWin.Allocation;
using XfsWin.Attributes;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Journal;

/// <summary>
/// The write engine's deferred work, judged by the kernel: a truncate of a file of thousands of extents runs as one
/// transaction that rolls, its frees and reverse-map updates chained as EFI/EFD and RUI/RUD; xfs_logprint (6.13) pairs
/// the intents and done items we log; crash images cut in the middle of those chains are recovered by the kernel
/// (which finishes our intents) and by our in-place recovery alike, both clean under xfs_repair -n and equal; and a
/// truncate of more than 100,000 extents succeeds on the smallest log mkfs makes.
/// </summary>
public sealed class IntentChainTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-intents.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly Dictionary<string, string> SmallLogEnv = new() { ["TEST_DIR"] = "/tmp", ["TEST_DEV"] = "/dev/null", ["QA_CHECK_FS"] = "xfs" };

    /// <summary>
    /// A volume made by mkfs.xfs 6.13 (defaults: rmapbt, reflink) with <paramref name="mkfsOptions"/>, where the kernel
    /// wrote <paramref name="extents"/> one-block extents (every other block) to "frag" and a few small files.
    /// </summary>
    private string MakeVolume(string name, string size, string[] mkfsOptions, int extents, int blockSize)
    {
        string img = Path.Combine(_tmp, name);
        Shell.RunChecked("truncate", "-s", size, img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-q", "-f", .. mkfsOptions, img], environment: SmallLogEnv);
        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            string script = $$"""
                import os, sys
                d = sys.argv[1]
                fd = os.open(os.path.join(d, "frag"), os.O_WRONLY | os.O_CREAT, 0o644)
                block = b"z" * {{blockSize}}
                for i in range(0, {{2 * extents}}, 2): os.pwrite(fd, block, i * {{blockSize}})
                os.fsync(fd); os.close(fd)
                for i in range(20):
                    with open(os.path.join(d, f"small{i}"), "wb") as f: f.write(bytes([i]) * (i * 700 + 1))
                """;
            Shell.RunChecked("python3", "-c", script, mount.MountPoint);
        }
        return img;
    }

    private static void AssertRepairClean(string image)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n {image} failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");
    }

    private static long ExtentCount(string image, string path)
    {
        var ino = Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), "-r", "-c", $"path /{path}", "-c", "print core.nextents", image).StandardOutput;
        return long.Parse(Regex.Match(ino, @"core\.nextents = (\d+)").Groups[1].Value);
    }

    [Fact]
    public void ATruncateOfMoreThan100kExtentsRollsOnTheSmallestLog()
    {
        // 1 KiB blocks, the smallest log mkfs 6.13 accepts for them: one transaction's reservation is a sizeable part of
        // it, and the truncate's frees and rmap updates would take hundreds of times the log.
        string img = MakeVolume("big.img", "600M", ["-b", "size=1024", "-l", "size=5600b"], 102_000, 1024);
        Assert.True(ExtentCount(img, "frag") > 100_000, $"frag has {ExtentCount(img, "frag")} extents");
        LogWriteStatistics stats;
        using (var volume = XfsVolume.Open(img, new VolumeOpenOptions { Writable = true }))
        {
            ulong frag = volume.ResolvePath("/frag");
            volume.SetAttributes(frag, new AttributeChanges { Size = 0 });
            Assert.Equal(0, volume.GetAttributes(frag).Size);
            stats = volume.WriteLogStatistics!;
        }
        AssertRepairClean(img);
        Assert.Equal(0, ExtentCount(img, "frag"));
        // One transaction of thousands of parts (16 extents unmapped a part, their rmap updates and frees in the next
        // ones): each part's reservation, never the whole truncate's.
        Assert.True(stats.Transactions > 3 * 100_000 / 16, $"{stats.Transactions} transaction parts");
        using var mount = LoopMount.Mount(img, readOnly: true);
        Assert.Equal(0, new FileInfo(Path.Combine(mount.MountPoint, "frag")).Length);
        Assert.Equal(19 * 700 + 1, new FileInfo(Path.Combine(mount.MountPoint, "small19")).Length);
    }

    [Fact]
    public void RemovingReflinkedFilesLowersReferenceCountsAndFreesOnlyUnsharedBlocks()
    {
        // a shares all its blocks with b and its first half with c: removing b and c through the engine must leave a
        // whole (its blocks' counts go down through refcount intents; only blocks nobody uses any more are freed).
        string img = Path.Combine(_tmp, "reflink.img");
        Shell.RunChecked("truncate", "-s", "256M", img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-q", "-f", img], environment: SmallLogEnv);
        byte[] content;
        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            string a = Path.Combine(mount.MountPoint, "a");
            Shell.RunChecked("python3", "-c", "import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT,0o644)\n" +
                "for i in range(0,4000,2): os.pwrite(fd, bytes([i % 251]) * 4096, i * 4096)\nos.fsync(fd)", a);
            Shell.RunChecked("cp", "--reflink=always", a, Path.Combine(mount.MountPoint, "b"));
            Shell.RunChecked(OracleImages.Tool("xfs_io", "6.13"), "-f", "-c", $"reflink {a} 0 0 {2000 * 4096}", Path.Combine(mount.MountPoint, "c"));
            content = File.ReadAllBytes(a);
        }
        var before = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(img, "6.13", "sb 0", "print fdblocks"));
        using (var volume = XfsVolume.Open(img, new VolumeOpenOptions { Writable = true }))
        {
            volume.Unlink(volume.RootInode, "b"u8);
            volume.Unlink(volume.RootInode, "c"u8);
        }
        AssertRepairClean(img);
        // No data block was only b's or c's: what came free is their extent-btree blocks and refcount-btree blocks, far
        // fewer than the 2,000 data blocks they shared.
        var after = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(img, "6.13", "sb 0", "print fdblocks"));
        Assert.InRange(long.Parse(after["fdblocks"]) - long.Parse(before["fdblocks"]), 1, 100);
        using var check = LoopMount.Mount(img, readOnly: true);
        Assert.Equal(content, File.ReadAllBytes(Path.Combine(check.MountPoint, "a")));
        Assert.False(File.Exists(Path.Combine(check.MountPoint, "b")));
    }

    /// <summary>
    /// Shares every written extent of /a with the empty /b as reflink would, through the deferred work kinds the framework
    /// provides: a refcount increase (CUI) and a mapping into b (BUI, whose rmap update is an RUI) per extent, both
    /// files flagged reflinked, b sized as a. Checkpoints are small, so intents and done items land apart.
    /// </summary>
    private static void ShareThroughIntents(IBlockDevice device)
    {
        var sector = new byte[4096];
        device.Read(0, sector);
        var sb = Superblock.Decode(sector);
        var mount = new MountContext(device, sb, 64L << 20);
        var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers),
            new MountedLogOptions { CheckpointThresholdBytes = 16 * 1024 });
        var allocator = new AgAllocator(mount, log);
        var space = new VolumeSpace(allocator, sb, new FileDataCache(device, (int)sb.BlockSize));
        var inodes = new InodeCache(mount);
        var bmaps = new BmapUpdateWork(inodes, space);
        var volume = XfsVolume.Open(device, new VolumeOpenOptions { Replay = LogReplayMode.None }, ownsDevice: false);
        ulong a = volume.ResolvePath("/a"), b = volume.ResolvePath("/b");
        volume.Dispose();
        var reservation = new TransactionReservations(ReservationGeometry.From(sb))[TransactionKind.Write];
        using (var tx = new Transaction(mount, log, reservation.LogRes, reservation.LogCount))
        {
            var ia = InodeUpdate.Find(tx, inodes, a);
            var ib = InodeUpdate.Find(tx, inodes, b);
            ia.Flags2 |= DinodeView.Flag2Reflink;
            ib.Flags2 |= DinodeView.Flag2Reflink;
            ib.Size = ia.Size;
            ia.Log(tx, inodes);
            ib.Log(tx, inodes);
            // Written extents only, as reflink shares them: unwritten ones are never shared (b reads zeros there anyway).
            var extents = new ExtentMapEditor(tx, ia, space).Extents.Where(e => !e.Unwritten).ToList();
            Assert.True(extents.Count > 100, $"a has {extents.Count} extents");
            foreach (var e in extents)
            {
                tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.Increase, e.StartBlock, e.BlockCount));
                tx.Defer(bmaps, new BmapUpdate(BmapUpdateKind.Map, b, ForkKind.Data, e));
            }
            tx.Commit();
        }
        using (var tx = new Transaction(mount, log, 64 * 1024))
        {
            allocator.LogSuperblockCounters(tx);
            tx.Commit();
        }
        log.Unmount();
    }

    private string MakeSharingVolume()
    {
        string img = Path.Combine(_tmp, "share.img");
        Shell.RunChecked("truncate", "-s", "256M", img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-q", "-f", img], environment: SmallLogEnv);
        using var mount = LoopMount.Mount(img, readOnly: false);
        Shell.RunChecked("python3", "-c", "import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT,0o644)\n" +
            "for i in range(0,600,2): os.pwrite(fd, bytes([i % 251]) * 4096, i * 4096)\nos.fsync(fd)", Path.Combine(mount.MountPoint, "a"));
        File.WriteAllBytes(Path.Combine(mount.MountPoint, "b"), []);
        return img;
    }

    [Fact]
    public void SharingThroughBmapAndRefcountIntentsIsWhatTheKernelReads()
    {
        string img = MakeSharingVolume();
        using (var device = FileBlockDevice.Open(img, writable: true)) ShareThroughIntents(device);
        AssertRepairClean(img); // refcounts against reverse mappings and mappings
        using var mount = LoopMount.Mount(img, readOnly: true);
        var a = File.ReadAllBytes(Path.Combine(mount.MountPoint, "a"));
        Assert.Equal(600 * 4096 - 4096, a.Length);
        Assert.Equal(a, File.ReadAllBytes(Path.Combine(mount.MountPoint, "b")));
    }

    [Fact]
    public void CrashesInTheMiddleOfBmapRefcountAndRmapChainsAreFinishedByTheKernelAndByUs()
    {
        string img = MakeSharingVolume();
        string baseImage = Path.Combine(_tmp, "share.base.img");
        Shell.RunChecked("cp", "--sparse=always", img, baseImage);
        var device = new RecordingBlockDevice(FileBlockDevice.Open(img, writable: true));
        using (device) ShareThroughIntents(device);
        var events = device.Snapshot();
        var kinds = new HashSet<string>();
        var problems = new List<string>();
        foreach (var (point, image) in CrashImages(baseImage, events, 0, 5))
        {
            using (var data = FileBlockDevice.Open(image, writable: false))
            {
                var memory = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
                kinds.UnionWith(memory.UnfinishedIntents.Keys);
            }
            if (RecoverBothWays(image, $"point {point}") is { } problem) problems.Add(problem);
        }
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
        foreach (var kind in new[] { "BUI", "CUI" }) Assert.Contains(kind, kinds);
    }

    /// <summary>
    /// On a parent-pointer volume, renames /f to /g as the kernel's rename does: the directory entry changes in the
    /// transaction, and the child's parent pointer follows through a deferred xattr operation (ATTRI, a parent-pointer
    /// replace of (f, root) by (g, root)), done after a roll with its ATTRD.
    /// </summary>
    private static void RenameWithParentPointerIntent(IBlockDevice device)
    {
        var sector = new byte[4096];
        device.Read(0, sector);
        var sb = Superblock.Decode(sector);
        var mount = new MountContext(device, sb, 64L << 20);
        var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers),
            new MountedLogOptions { CheckpointThresholdBytes = 1 }); // a checkpoint after every part
        var space = new VolumeSpace(new AgAllocator(mount, log), sb, new FileDataCache(device, (int)sb.BlockSize));
        var inodes = new InodeCache(mount);
        var attrs = new AttrIntentWork(inodes, space, null);
        ulong root = sb.RootIno, f;
        using (var volume = XfsVolume.Open(device, new VolumeOpenOptions { Replay = LogReplayMode.None }, ownsDevice: false))
            f = volume.ResolvePath("/f");
        var reservation = new TransactionReservations(ReservationGeometry.From(sb))[TransactionKind.Rename];
        using (var tx = new Transaction(mount, log, reservation.LogRes, reservation.LogCount))
        {
            var dir = InodeUpdate.Find(tx, inodes, root);
            var image = new DirectoryInodeImage(sb, root, dir.Image);
            var editor = new DirectoryEditor(tx, image, space.ForDirectory(tx, dir));
            Assert.Equal(f, editor.RemoveEntry("f"u8));
            editor.AddEntry("g"u8, f, XfsFileType.RegularFile);
            dir.Parts |= image.LogParts;
            dir.Log(tx, inodes);
            var child = InodeUpdate.Find(tx, inodes, f);
            var parent = new byte[12];
            System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(parent, root);
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(parent.AsSpan(8), new DinodeView(dir.Image).Generation);
            tx.Defer(attrs, new AttrOperation(AttrOperation.ParentReplace, f, new DinodeView(child.Image).Generation,
                AttrOperation.FilterParent, "f"u8.ToArray(), parent, "g"u8.ToArray(), parent));
            tx.Commit();
        }
        log.Unmount();
    }

    private string MakeParentPointerVolume()
    {
        string img = Path.Combine(_tmp, "pptr.img");
        Shell.RunChecked("truncate", "-s", "256M", img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-q", "-f", "-n", "parent=1", img], environment: SmallLogEnv);
        using var mount = LoopMount.Mount(img, readOnly: false);
        File.WriteAllText(Path.Combine(mount.MountPoint, "f"), "parent pointers follow renames");
        for (int i = 0; i < 30; i++) File.WriteAllText(Path.Combine(mount.MountPoint, $"other{i}"), "x");
        return img;
    }

    [Fact]
    public void AParentPointerIntentWeLogIsWhatTheKernelChecks()
    {
        string img = MakeParentPointerVolume();
        using (var device = FileBlockDevice.Open(img, writable: true)) RenameWithParentPointerIntent(device);
        AssertRepairClean(img); // xfs_repair checks every parent pointer against the directory entries
        using var mount = LoopMount.Mount(img, readOnly: true);
        Assert.False(File.Exists(Path.Combine(mount.MountPoint, "f")));
        Assert.Equal("parent pointers follow renames", File.ReadAllText(Path.Combine(mount.MountPoint, "g")));
    }

    [Fact]
    public void ACrashBeforeTheParentPointerIntentIsDoneIsFinishedByTheKernelAndByUs()
    {
        string img = MakeParentPointerVolume();
        string baseImage = Path.Combine(_tmp, "pptr.base.img");
        Shell.RunChecked("cp", "--sparse=always", img, baseImage);
        var device = new RecordingBlockDevice(FileBlockDevice.Open(img, writable: true));
        using (device) RenameWithParentPointerIntent(device);
        var events = device.Snapshot();
        // Each point just after a flush: the one where the ATTRI is on disk and its ATTRD is not is the one that matters.
        var problems = new List<string>();
        bool unfinished = false;
        foreach (int flush in Enumerable.Range(0, events.Count).Where(i => events[i].IsFlush))
        {
            string image = Path.Combine(_tmp, $"pptr{flush}.img");
            CrashImage.Build(baseImage, events, CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0)), image);
            using (var data = FileBlockDevice.Open(image, writable: false))
            {
                var memory = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
                if (!memory.UnfinishedIntents.ContainsKey("ATTRI")) continue;
            }
            unfinished = true;
            if (RecoverBothWays(image, $"point {flush + 1}", ignoreChangeTimes: true) is { } problem) problems.Add(problem);
        }
        Assert.True(unfinished, "no crash point left the ATTRI without its ATTRD");
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
    }

    [Fact]
    public void CowStagingExtentsWeAddAreRemovedAlikeByTheKernelsRecoveryAndOurs()
    {
        // Staging extents as a copy-on-write write sets them up (xfs_refcount_alloc_cow_extent): blocks allocated with
        // no reverse mapping of their own, then an OWN_COW mapping (RUI, alloc) and a CoW-domain record (CUI, alloc cow).
        string img = Path.Combine(_tmp, "cow.img");
        Shell.RunChecked("truncate", "-s", "256M", img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-q", "-f", img], environment: SmallLogEnv);
        using (var device = FileBlockDevice.Open(img, writable: true))
        {
            var sector = new byte[4096];
            device.Read(0, sector);
            var sb = Superblock.Decode(sector);
            var mount = new MountContext(device, sb, 64L << 20);
            var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers));
            var allocator = new AgAllocator(mount, log);
            using (var tx = new Transaction(mount, log, 256 * 1024, 2))
            {
                for (int i = 0; i < 3; i++)
                {
                    var got = allocator.Allocate(tx, new AllocationRequest
                    {
                        Target = (ulong)(i + 1) << sb.AgBlkLog, MinLength = 8, MaxLength = 8, Scope = AllocationScope.ThisAg, Owner = RmapOwner.Null,
                    });
                    tx.Defer(allocator.RmapUpdates, new RmapUpdate(RmapUpdateKind.Alloc, got.StartBlock, got.Length, RmapOwner.Cow));
                    tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.AllocCow, got.StartBlock, got.Length));
                }
                tx.Commit();
            }
            // A crash after the log force: the kernel removes leftover staging extents when it recovers a log.
            log.Force();
        }
        using (var data = FileBlockDevice.Open(img, writable: false))
        {
            var memory = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
            Assert.Equal(3, RecoveryChecks.AgsWithLeftoverCow(memory.Device, LogRecovery.ReadReplayedSuperblock(memory.Device)).Count);
        }
        // Both recoveries find our CoW records and OWN_COW mappings consistent, remove them, and agree.
        Assert.Null(RecoverBothWays(img, "staging extents"));
        using var check = FileBlockDevice.Open(img + ".ours", writable: false);
        Assert.Empty(RecoveryChecks.AgsWithLeftoverCow(check, DirtyLogScenarios.ReadSuperblock(check)));
    }

    /// <summary>A truncate of 20,000 extents on a small log, every device write and flush recorded.</summary>
    private (string BaseImage, IReadOnlyList<DeviceEvent> Events, int TruncateStart) RecordTruncate()
    {
        string img = MakeVolume("chain.img", "512M", ["-l", "size=3200b"], 20_000, 4096);
        string baseImage = Path.Combine(_tmp, "chain.base.img");
        Shell.RunChecked("cp", "--sparse=always", img, baseImage);
        var device = new RecordingBlockDevice(FileBlockDevice.Open(img, writable: true));
        int start;
        // A checkpoint every 8 KiB of log items, so the truncate's intent chains span checkpoints and flushes (the
        // default limit, an eighth of the log, lets a few checkpoints hold whole chains, whose intents then cancel).
        using (var volume = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 8 * 1024 }, ownsDevice: true))
        {
            start = device.EventCount;
            ulong frag = volume.ResolvePath("/frag");
            volume.SetAttributes(frag, new AttributeChanges { Size = 0 });
        }
        AssertRepairClean(img);
        return (baseImage, device.Snapshot(), start);
    }

    /// <summary>Crash images at flushes spread over the truncate (every write up to the flush on disk).</summary>
    private List<(int Point, string Image)> CrashImages(string baseImage, IReadOnlyList<DeviceEvent> events, int from, int count)
    {
        var flushes = Enumerable.Range(from, events.Count - from).Where(i => events[i].IsFlush).ToList();
        var images = new List<(int, string)>();
        for (int k = 1; k <= count; k++)
        {
            int flush = flushes[(int)((long)k * (flushes.Count - 1) / (count + 1))];
            string image = Path.Combine(_tmp, $"crash{flush}.img");
            CrashImage.Build(baseImage, events, CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0)), image);
            images.Add((flush + 1, image));
        }
        return images;
    }

    [Fact]
    public void LogprintPairsTheIntentsAndDoneItemsWeLog()
    {
        var (baseImage, events, start) = RecordTruncate();
        var (point, image) = CrashImages(baseImage, events, start, 3)[1];
        var print = Shell.Run(OracleImages.Tool("xfs_logprint", "6.13"), "-t", image);
        Assert.True(print.ExitCode == 0, $"xfs_logprint -t failed at point {point}:\n{print.StandardError}");
        var pairs = LogprintIntents.Of(image);
        // Intents and their done items in different checkpoints: paired by id, as recovery pairs them.
        foreach (var kind in new[] { "EFI", "RUI" })
        {
            Assert.True(pairs.Logged.GetValueOrDefault(kind) > 0, $"no {kind} in the log at point {point}");
            Assert.True(pairs.Finished.GetValueOrDefault(kind) > 0, $"no {kind} paired with its done item at point {point}");
        }
        using var data = FileBlockDevice.Open(image, writable: false);
        var ours = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
        Assert.Equal(LogprintIntents.Format(pairs.Logged), LogprintIntents.Format(ours.IntentsLogged));
        Assert.Equal(LogprintIntents.Format(pairs.Unfinished), LogprintIntents.Format(ours.UnfinishedIntents));
    }

    [Fact]
    public void CrashesInTheMiddleOfIntentChainsAreFinishedByTheKernelAndByUs()
    {
        var (baseImage, events, start) = RecordTruncate();
        int withIntents = 0;
        var problems = new List<string>();
        foreach (var (point, image) in CrashImages(baseImage, events, start, 6))
        {
            using (var data = FileBlockDevice.Open(image, writable: false))
            {
                var memory = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
                if (memory.UnfinishedIntents.Count > 0) withIntents++;
            }
            string? problem = RecoverBothWays(image, $"point {point}");
            if (problem is not null) problems.Add(problem);
        }
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
        Assert.True(withIntents >= 3, $"only {withIntents} of the crash images hold unfinished intents");
    }

    /// <summary>
    /// The kernel recovers one copy of <paramref name="image"/> (mount, unmount), our in-place recovery another; both
    /// must pass xfs_repair -n and show the same tree and superblock counters. Null when they do; else what differs.
    /// </summary>
    /// <param name="ignoreChangeTimes">Leave ctimes out of the comparison: recovery finishing an xattr intent sets the inode's ctime to the time it runs.</param>
    internal static string? RecoverBothWays(string image, string what, bool ignoreChangeTimes = false)
    {
        string kernelCopy = image + ".kernel", ourCopy = image + ".ours";
        Shell.RunChecked("cp", "--sparse=always", image, kernelCopy);
        Shell.RunChecked("cp", "--sparse=always", image, ourCopy);
        string kernelJson = image + ".kernel.json", ourJson = image + ".ours.json";
        using (var mount = LoopMount.Mount(kernelCopy, readOnly: false))
            Shell.RunChecked("python3", DirtyLogScenarios.ManifestScript, mount.MountPoint, kernelJson);
        using (var data = FileBlockDevice.Open(ourCopy, writable: true))
            InPlaceRecovery.Run(WriteGate.Admit(data, null, WritePurpose.LogRecovery));
        foreach (var copy in new[] { kernelCopy, ourCopy })
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", copy);
            if (repair.ExitCode != 0) return $"{what}: xfs_repair -n {Path.GetFileName(copy)} failed ({repair.ExitCode}):\n{repair.StandardOutput}";
        }
        using (var mount = LoopMount.Mount(ourCopy, readOnly: true, "norecovery"))
            Shell.RunChecked("python3", DirtyLogScenarios.ManifestScript, mount.MountPoint, ourJson);
        string kernelTree = File.ReadAllText(kernelJson), ourTree = File.ReadAllText(ourJson);
        if (ignoreChangeTimes)
        {
            kernelTree = Regex.Replace(kernelTree, "\"ctime_ns\":\\d+", "\"ctime_ns\":0");
            ourTree = Regex.Replace(ourTree, "\"ctime_ns\":\\d+", "\"ctime_ns\":0");
        }
        if (kernelTree != ourTree)
        {
            int at = 0;
            while (at < kernelTree.Length && at < ourTree.Length && kernelTree[at] == ourTree[at]) at++;
            int from = Math.Max(0, at - 200);
            return $"{what}: the tree after our recovery differs from the kernel's at character {at}:\n" +
                   $"kernel: ...{kernelTree[from..Math.Min(kernelTree.Length, at + 200)]}\nours:   ...{ourTree[from..Math.Min(ourTree.Length, at + 200)]}";
        }
        var k = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(kernelCopy, "6.13", "sb 0", "print fdblocks icount ifree"));
        var o = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(ourCopy, "6.13", "sb 0", "print fdblocks icount ifree"));
        if (!k.OrderBy(kv => kv.Key).SequenceEqual(o.OrderBy(kv => kv.Key)))
            return $"{what}: counters after the kernel's recovery {string.Join(", ", k)}, after ours {string.Join(", ", o)}";
        return null;
    }
}

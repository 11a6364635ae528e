using XfsWin.Journal;
using System.Buffers.Binary;
using System.Diagnostics;
using XfsWin.Attributes;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Check;

/// <summary>Options of <see cref="VolumeChecker.Check"/>.</summary>
public sealed record CheckOptions
{
    /// <summary>Threads checking allocation groups at once; 0 means one per processor.</summary>
    public int Parallelism { get; init; }
    public int? Partition { get; init; }
    public string? LogDevice { get; init; }
    public IProgress<CheckProgress>? Progress { get; init; }
}

/// <summary>
/// <c>xfs_repair -n</c> for a volume that is not mounted: reads every piece of metadata and reports
/// each inconsistency (<see cref="CheckProblem"/>) without changing anything. A dirty log is replayed
/// in memory first (the volume is checked as the kernel would see it after its own replay).
/// Phases: (1) superblocks, AG headers and AG btrees, every AG in parallel, claiming blocks in the
/// usage map; (2) every inode of every chunk, AGs in parallel, claiming file and bmbt blocks;
/// (3) per AG, the usage map against the rmapbt and refcountbt; (4) summary counters; (5) the
/// namespace: directories, link counts, connectivity, attributes, parent pointers; (6) quota counts.
/// </summary>
public static class VolumeChecker
{
    /// <summary>Checks <paramref name="source"/> (image, device, <c>disk.img@N</c>). Throws <see cref="XfsException"/> only when it is not an XFS volume or cannot be read.</summary>
    public static CheckReport Check(string source, CheckOptions? options = null, CancellationToken cancel = default)
    {
        options ??= new CheckOptions();
        var clock = Stopwatch.StartNew();
        XfsVolume volume;
        try
        {
            volume = XfsVolume.Open(source, new VolumeOpenOptions { Partition = options.Partition, LogDevice = options.LogDevice, Replay = LogReplayMode.Memory });
        }
        catch (XfsCorruptionException e) when (e.Structure.StartsWith("log record", StringComparison.Ordinal) && e.Problem.Contains("another file system", StringComparison.Ordinal))
        {
            // xfs_repair -n prints "mismatched uuid in log" without counting it (the log is for xfs_repair -L to clear):
            // the metadata is checked without the log, and the report says why.
            using var withoutLog = XfsVolume.Open(source, new VolumeOpenOptions { Partition = options.Partition, LogDevice = options.LogDevice, Replay = LogReplayMode.None });
            return Check(source, withoutLog, options, clock, inUse: false, cancel,
                $"the log's records carry another volume's UUID ({e.Problem}): Linux refuses to mount the volume until the log is cleared " +
                "(xfs_repair -L); xfs_repair -n reports this without counting it as damage. The metadata was checked without the log.");
        }
        catch (XfsCorruptionException e)
        {
            return new CheckReport(source, [new CheckProblem(e.Structure, null, e.ByteOffset >> 9, e.Problem)], 0, null,
                ["the volume could not be opened, so nothing else was checked"]);
        }
        catch (XfsException e) when (e.Error == XfsError.NeedsRepair)
        {
            return new CheckReport(source, [new CheckProblem("primary superblock", 0, 0, e.Message)], 0, null, []);
        }
        using (volume)
        {
            return Check(source, volume, options, clock, inUse: false, cancel);
        }
    }

    /// <summary>
    /// Checks a volume this process has open read-write and in use (a mount <c>xfswin mount -o rw</c> serves): every
    /// other request to it is held off while the check runs (<see cref="XfsVolume.WhileQuiesced{T}"/>: the in-core
    /// counters logged into the superblock, everything committed written in place), and the check reads the device
    /// as it then is, through a read-only open of its own. Files unlinked while open are expected on the AGI unlinked
    /// lists. <paramref name="source"/> names the volume in the report.
    /// </summary>
    public static CheckReport CheckMounted(XfsVolume volume, string source, CheckOptions? options = null, CancellationToken cancel = default)
    {
        ArgumentNullException.ThrowIfNull(volume);
        options ??= new CheckOptions();
        return volume.WhileQuiesced(q =>
        {
            var clock = Stopwatch.StartNew();
            using var view = XfsVolume.Open(q.Data, new VolumeOpenOptions { Replay = LogReplayMode.None }, ownsDevice: false);
            return Check(source, view, options, clock, inUse: true, cancel);
        });
    }

    private static CheckReport Check(string source, XfsVolume volume, CheckOptions options, Stopwatch clock, bool inUse, CancellationToken cancel,
        string? firstNote = null)
    {
        var mount = volume.Mount;
        var notes = new List<string>();
        if (firstNote is not null) notes.Add(firstNote);
        // The superblock as the check sees it: read again from the (possibly replayed) device.
        var primary = new byte[Math.Max(mount.Superblock.SectorSize, SuperblockView.Size)];
        mount.Device.Read(0, primary.AsSpan(0, mount.Superblock.SectorSize));
        var sb = Superblock.Decode(primary);
        var cx = new CheckContext(mount, sb, volume.Info.LogState == LogState.ReplayedInMemory, cancel, inUse)
        {
            LogHeadLsn = inUse ? 0 : volume.Info.LogHeadLsn,
            RealtimeBitmapIno = new SuperblockView(primary).RbmIno,
            RtExtSize = new SuperblockView(primary).RtExtSize,
            InternalInodes = InternalInodesOf(new SuperblockView(primary)),
        };
        var parallel = new ParallelOptions
        {
            MaxDegreeOfParallelism = options.Parallelism > 0 ? options.Parallelism : Environment.ProcessorCount,
            CancellationToken = cancel,
        };
        var progress = options.Progress;
        string logState = inUse ? "in use by this mount: every change written in place and held off while checking" : volume.Info.LogState switch
        {
            LogState.Clean => "clean",
            LogState.ReplayedInMemory => "dirty: replayed in memory before checking (nothing was written)",
            LogState.External => "external log (not checked)",
            LogState.Unknown => "unreadable (ignored)",
            var s => s.ToString(),
        };
        if (inUse)
            notes.Add("checked while mounted read-write by xfswin: the volume's changes were written in place and held off until the check finished");
        else if (volume.Info.LogState == LogState.ReplayedInMemory)
            notes.Add("Linux did not unmount this volume cleanly; its log was replayed in memory and the result checked, as the kernel would see it at its next mount");
        notes.AddRange(volume.Info.Warnings.Where(w => !w.StartsWith("Linux did not unmount", StringComparison.Ordinal) && !(inUse && w.Contains("log", StringComparison.OrdinalIgnoreCase))));

        CheckPrimarySuperblock(cx, primary);
        if (sb.LogStart != 0)
        {
            if (!sb.IsValidFsb(sb.LogStart) || !sb.IsValidFsb(sb.LogStart + sb.LogBlocks - 1))
                cx.Report("primary superblock", 0, 0, $"internal log at block {sb.LogStart} ({sb.LogBlocks} blocks) is outside the volume");
            else
            {
                uint logAg = (uint)(sb.LogStart >> sb.AgBlkLog), logStart = (uint)(sb.LogStart & ((1UL << sb.AgBlkLog) - 1));
                cx.Claim(logAg, logStart, sb.LogBlocks, BlockUse.Log, "internal log");
                cx.Rmaps.Add(logAg, logStart, sb.LogBlocks, RmapRecord.OwnLog);
            }
        }

        var phases = new List<CheckPhaseTime>();
        var phaseClock = Stopwatch.StartNew();
        void PhaseDone(string phase)
        {
            phases.Add(new CheckPhaseTime(phase, phaseClock.Elapsed.TotalSeconds));
            phaseClock.Restart();
        }

        // Phase 1: AG headers and btrees.
        var ags = new AgChecker[sb.AgCount];
        long agsDone = 0;
        progress?.Report(new CheckProgress("allocation groups", 0, sb.AgCount));
        Parallel.For(0, (int)sb.AgCount, parallel, ag =>
        {
            var checker = new AgChecker(cx, (uint)ag, primary);
            ags[ag] = checker;
            Guarded(cx, $"AG {ag}", () => checker.Run());
            progress?.Report(new CheckProgress("allocation groups", Interlocked.Increment(ref agsDone), sb.AgCount));
        });

        PhaseDone("allocation groups");

        // Phase 2: inodes.
        long chunksTotal = ags.Sum(a => (long)a.InodeChunks.Count), chunksDone = 0;
        // Work items of up to 32 chunks (2,048 inodes) from any AG, so that one AG holding most
        // inodes does not leave the other threads idle.
        const int ChunksPerItem = 32;
        var items = new List<(uint Ag, int From, int To)>();
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            for (int from = 0; from < ags[ag].InodeChunks.Count; from += ChunksPerItem)
                items.Add((ag, from, Math.Min(from + ChunksPerItem, ags[ag].InodeChunks.Count)));
        }
        var scanners = new InodeScanner[items.Count];
        progress?.Report(new CheckProgress("inodes", 0, chunksTotal));
        Parallel.For(0, items.Count, parallel, i =>
        {
            var (ag, from, to) = items[i];
            var scanner = new InodeScanner(cx, ag);
            scanners[i] = scanner;
            Guarded(cx, $"inodes of AG {ag}", () => scanner.Scan(ags[ag].InodeChunks, from, to));
            progress?.Report(new CheckProgress("inodes", Interlocked.Add(ref chunksDone, to - from), chunksTotal));
        });
        PhaseDone("inodes");

        // Phase 3: block usage against the rmap and refcount btrees.
        progress?.Report(new CheckProgress("block usage", 0, sb.AgCount));
        Parallel.For(0, (int)sb.AgCount, parallel, ag =>
        {
            Guarded(cx, $"block usage of AG {ag}", () =>
            {
                if (sb.HasRmapbt && ags[ag].AgfReadable)
                {
                    CrossCheckRmap(cx, (uint)ag, ags[ag].Rmaps);
                    cx.Rmaps.CheckAgainstRmapbt(cx, (uint)ag, ags[ag].Rmaps);
                }
                if (sb.HasReflink && ags[ag].AgfReadable)
                {
                    cx.Rmaps.CheckRefcounts(cx, (uint)ag, ags[ag].Refcounts);
                }
            });
        });

        PhaseDone("block usage");

        // Phase 4: summary counters (xfs_repair recounts them whether or not they are lazy).
        ulong icount = 0, ifree = 0, fdblocks = 0, freeCounted = 0, btreeBlocks = 0;
        bool headersReadable = true;
        foreach (var a in ags)
        {
            headersReadable &= a.AgfReadable && a.AgiReadable;
            icount += a.AgiCount;
            ifree += a.AgiFreeCount;
            fdblocks += a.AgfFreeSum;
            freeCounted += a.FreeBlocksCounted;
            btreeBlocks += (ulong)a.BtreeBlocks;
        }
        bool lazy = (sb.Features2 & SuperblockFeatures.F2LazySbCount) != 0;
        if (headersReadable)
        {
            if (lazy && volume.Info.LogState == LogState.ReplayedInMemory)
            {
                notes.Add("summary counters not compared: with lazy counters the kernel recomputes them when it replays the log");
            }
            else
            {
                if (sb.Icount != icount) cx.Report("primary superblock", 0, 0, $"icount {sb.Icount}, counted {icount}");
                if (sb.Ifree != ifree) cx.Report("primary superblock", 0, 0, $"ifree {sb.Ifree}, counted {ifree}");
                if (sb.Fdblocks != fdblocks) cx.Report("primary superblock", 0, 0, $"fdblocks {sb.Fdblocks}, counted {fdblocks}");
            }
        }

        // Phase 5: the namespace.
        var inodes = scanners.Where(s => s is not null).SelectMany(s => s.InUse).ToArray();
        Array.Sort(inodes, (x, y) => x.Ino.CompareTo(y.Ino));
        var maps = new ExtentMapCache(mount);
        var names = new NamespaceChecker(cx, inodes, new InodeCache(mount), new DirectoryReader(mount, maps), new AttributeReader(mount, maps) { ReadAsXfsRepair = true }, maps);
        var roots = new List<ulong> { sb.RootIno };
        if (sb.HasMetadir) roots.Add(sb.MetadirIno);
        var unnamed = new HashSet<ulong>();
        var pv = new SuperblockView(primary);
        foreach (ulong ino in new[] { pv.RbmIno, pv.RsumIno, pv.UquotIno, pv.GquotIno, sb.IsV5 ? pv.PquotIno : 0 })
        {
            if (ino != 0 && ino != ulong.MaxValue) unnamed.Add(ino);
        }
        progress?.Report(new CheckProgress("directories", 0, 0));
        Guarded(cx, "namespace", () => names.Run(roots, unnamed, parallel, done => progress?.Report(new CheckProgress("directories", done, 0))));

        PhaseDone("namespace");

        // Phase 6: quota counts against the dquots.
        progress?.Report(new CheckProgress("quota", 0, 1));
        var directoryReader = new DirectoryReader(mount, maps);
        Guarded(cx, "quota", () => new QuotaChecker(cx, new InodeCache(mount), maps, directoryReader).Run(primary, inodes));
        PhaseDone("quota");
        var problems = cx.Problems.OrderBy(p => p.Ag ?? uint.MaxValue).ThenBy(p => p.Daddr ?? long.MaxValue)
            .ThenBy(p => p.Structure, StringComparer.Ordinal).ThenBy(p => p.Message, StringComparer.Ordinal).ToList();
        var summary = new CheckSummary
        {
            AgCount = sb.AgCount,
            DataBlocks = sb.DataBlocks,
            FreeBlocksCounted = freeCounted,
            InodesCounted = icount,
            FreeInodesCounted = ifree,
            InUseInodes = (ulong)inodes.Length,
            Directories = (ulong)names.DirectoriesWalked,
            DirectoryEntries = (ulong)names.Entries,
            BtreeBlocks = btreeBlocks,
            LogState = logState,
            ElapsedSeconds = clock.Elapsed.TotalSeconds,
            Phases = phases,
        };
        notes.AddRange(cx.Notes);
        return new CheckReport(source, problems, cx.NotListed, summary, notes);
    }

    /// <summary>
    /// Runs one unit of the check; data no verifier anticipated (an index out of range in a reader)
    /// becomes a problem of that unit rather than ending the check.
    /// </summary>
    private static void Guarded(CheckContext cx, string unit, Action action)
    {
        try
        {
            action();
        }
        catch (XfsCorruptionException e)
        {
            cx.Report(e);
        }
        catch (Exception e) when (e is XfsException or InvalidOperationException or IndexOutOfRangeException or ArgumentException or OverflowException)
        {
            cx.Report(unit, null, null, $"could not be checked: {e.Message}");
        }
    }

    private static void CheckPrimarySuperblock(CheckContext cx, byte[] primary)
    {
        var v = new SuperblockView(primary);
        foreach (var problem in SuperblockRules.Problems(primary.AsSpan(0, cx.Sb.SectorSize), default, isPrimary: true).Take(4))
            cx.Report("primary superblock", 0, 0, problem);
        // xfs_repair: a bad_features2 of zero is left alone (older kernels wrote features2 only); any other that
        // differs from features2 is "a features2 mismatch".
        if ((v.VersionNum & SuperblockFeatures.VersionMoreBits) != 0 && v.BadFeatures2 != 0 && v.Features2 != v.BadFeatures2)
            cx.Report("primary superblock", 0, 0, $"features2 0x{v.Features2:x} and bad_features2 0x{v.BadFeatures2:x} differ");
        if (cx.Sb.IsV5 && (v.FeaturesIncompat & SuperblockFeatures.IncompatNeedsRepair) != 0)
            cx.Report("primary superblock", 0, 0, "marked as needing repair");
    }

    private static bool RmapAllows(RmapEntry r, BlockUse use) => r.Owner switch
    {
        RmapRecord.OwnFs => use == BlockUse.AgHeaders,
        RmapRecord.OwnLog => use == BlockUse.Log,
        RmapRecord.OwnAg => use is BlockUse.AgfBtree or BlockUse.Agfl,
        RmapRecord.OwnInobt => use == BlockUse.InodeBtree,
        RmapRecord.OwnInodes => use == BlockUse.InodeChunk,
        RmapRecord.OwnRefcount => use == BlockUse.RefcountBtree,
        RmapRecord.OwnCow => use == BlockUse.CowStaging,
        _ when (r.Offset & RmapRecord.BmbtBlockFlag) != 0 => use == BlockUse.BmbtBlock,
        _ when (r.Offset & RmapRecord.AttrForkFlag) != 0 => use == BlockUse.AttrData,
        _ => use is BlockUse.FileData or BlockUse.OtherData,
    };

    private static HashSet<ulong> InternalInodesOf(SuperblockView v)
    {
        var set = new HashSet<ulong>();
        foreach (ulong ino in new[] { v.RbmIno, v.RsumIno, v.UquotIno, v.GquotIno, v.PquotIno })
        {
            if (ino != 0 && ino != ulong.MaxValue) set.Add(ino);
        }
        return set;
    }

    /// <summary>Every used block has a reverse mapping of the right kind, and every reverse mapping covers blocks used that way.</summary>
    private static void CrossCheckRmap(CheckContext cx, uint agno, List<RmapEntry> rmaps)
    {
        var usage = cx.Usage;
        int length = usage.AgLength(agno);
        var covered = new bool[length];
        string name = $"reverse mapping btree (rmapbt) of AG {agno}";
        foreach (var r in rmaps)
        {
            bool reported = false;
            for (uint b = r.Start; b < r.Start + r.Count && b < length; b++)
            {
                var use = usage.Get(agno, b);
                if (!reported && !RmapAllows(r, use))
                {
                    cx.Report(name, agno, cx.AgDaddr(agno, b),
                        $"record [{r.Start}+{r.Count}] owner 0x{r.Owner:x} maps block {b}, which is {BlockUsageMap.Describe(use)}");
                    reported = true;
                }
                if (covered[b] && use != BlockUse.FileData && !reported)
                {
                    cx.Report(name, agno, cx.AgDaddr(agno, b), $"block {b} has more than one reverse mapping");
                    reported = true;
                }
                covered[b] = true;
            }
        }
        int missing = 0;
        for (uint b = 0; b < length; b++)
        {
            var use = usage.Get(agno, b);
            if (use is BlockUse.Unseen or BlockUse.Free || covered[b]) continue;
            if (missing++ == 0)
            {
                uint end = b;
                while (end + 1 < length && !covered[end + 1] && usage.Get(agno, end + 1) == use) end++;
                cx.Report(name, agno, cx.AgDaddr(agno, b), $"blocks {b}-{end} ({BlockUsageMap.Describe(use)}) have no reverse mapping");
                b = end;
            }
        }
    }
}

using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.Mkfs;
using XfsWin.Volume;

namespace XfsWin.Admin;

/// <summary>
/// What a grow (or shrink) of the data section will do, as xfs_growfs_data_private decides it, and the inode limit
/// before (<see cref="OldImaxPct"/>) and after (<see cref="ImaxPct"/>), as xfs_growfs_imaxpct sets it.
/// </summary>
public sealed record GrowPlan(ulong RequestedBlocks, ulong OldDataBlocks, ulong NewDataBlocks, uint OldAgCount, uint NewAgCount, uint AgBlocks, uint BlockSize, int ImaxPct, int InoPBlog, uint InodeChunkBlocks, int OldImaxPct)
{
    public bool Changes => NewDataBlocks != OldDataBlocks || ImaxPct != OldImaxPct;
    public bool Resizes => NewDataBlocks != OldDataBlocks;
    public bool Shrinks => NewDataBlocks < OldDataBlocks;
    /// <summary>Length of the last AG before and after.</summary>
    public uint OldLastAgLength => (uint)(OldDataBlocks - (ulong)(OldAgCount - 1) * AgBlocks);
    public uint NewLastAgLength => (uint)(NewDataBlocks - (ulong)(NewAgCount - 1) * AgBlocks);

    /// <summary>The kernel's in-memory inode limit (m_maxicount) for the new size: imaxpct of the blocks, in whole inode chunks.</summary>
    public ulong MaxInodes => ImaxPct == 0 ? 0 : NewDataBlocks * (ulong)ImaxPct / 100 / InodeChunkBlocks * InodeChunkBlocks << InoPBlog;
}

/// <summary>Progress of a grow: a stage and how far it is.</summary>
public readonly record struct GrowProgress(string Stage, long Done, long Total);

/// <summary>What a grow did.</summary>
public sealed record GrowResult(GrowPlan Plan, ulong FreeBlocksBefore, ulong FreeBlocksAfter, bool StoppedAfterLogCommit);

/// <summary>Options of <see cref="VolumeGrower.Run"/>.</summary>
public sealed record GrowOptions
{
    /// <summary>
    /// Crash simulation for tests: stop once the grow transaction's commit record is durable in the log, before
    /// anything is written back in place, before the unmount record and the secondary superblocks. The volume is
    /// then what a crash at that instant leaves: the kernel's log recovery finishes the grow.
    /// </summary>
    public bool StopAfterLogCommit { get; init; }

    /// <summary>
    /// Whether the secondary superblocks go into the grow transaction (true) or are rewritten after it, unlogged, as
    /// the kernel does (false). Null: logged while they fit a quarter of the log.
    /// </summary>
    public bool? SecondariesInLog { get; init; }

    /// <summary>A new sb_imax_pct (0 to 100: the most of the data section inodes may take; 0 is no limit), as xfs_growfs -m sets it; null keeps it.</summary>
    public int? ImaxPct { get; init; }
}

/// <summary>
/// Offline grow (and tail shrink) of an XFS data section, as the kernel's xfs_growfs_data_private does it on a
/// mounted volume. Order, as the kernel's: new AG headers are written in place first (nothing reaches them until
/// the superblock says so); then one logged transaction extends the old last AG (agf/agi length, the new space
/// freed into its bnobt/cntbt, merged with a free extent at the old end) and changes the primary superblock
/// (dblocks, agcount, fdblocks) and, while they fit a quarter of the log, every secondary superblock; the log is
/// forced, written back and unmounted (a clean log). Secondaries too many for the log are rewritten from the new
/// primary after that, unlogged, as the kernel does. A crash before the commit leaves unused headers
/// beyond the old end; after it, log recovery (the kernel's or <c>xfswin recover</c>) completes the grow.
/// Free space has no reverse mapping, so the rmapbt does not change (OINFO_SKIP_UPDATE); new AGs carry the
/// rmap records of their headers and roots.
/// </summary>
public static class VolumeGrower
{
    /// <summary>XFS_MIN_AG_BLOCKS: a grow adds a last AG only when it gets at least this many blocks.</summary>
    public const uint MinAgBlocks = 64;
    private const ulong MaxAgCount = uint.MaxValue; // XFS_MAX_AGNUMBER + 1

    /// <summary>The size xfs_growfs grows to by default: the device's 512-byte sectors rounded down to an even count, in blocks.</summary>
    public static ulong DeviceBlocks(long deviceBytes, uint blockSize)
    {
        ulong sectors = (ulong)deviceBytes >> 9 & ~1UL;
        return sectors / (blockSize >> 9);
    }

    /// <summary>
    /// The plan for <paramref name="requestedBlocks"/> (xfs_growfs_data_private's arithmetic): a remainder past
    /// the last whole AG of at least <see cref="MinAgBlocks"/> makes a new (short) AG, a smaller one is dropped.
    /// Refuses what the kernel refuses: removing whole AGs and leaving fewer than two.
    /// </summary>
    public static GrowPlan Plan(Superblock sb, ulong requestedBlocks, int? imaxPct = null)
    {
        if (imaxPct is < 0 or > 100)
            throw new XfsException(XfsError.InvalidArgument, $"imaxpct {imaxPct} is not a percentage from 0 to 100 (0: no limit). Nothing was written.");
        ulong agblocks = sb.AgBlocks;
        ulong nb = requestedBlocks;
        ulong count = nb / agblocks, rest = nb % agblocks;
        if (rest >= MinAgBlocks) count++;
        else if (rest != 0) nb = count * agblocks;
        if (count > MaxAgCount)
        {
            count = MaxAgCount;
            nb = count * agblocks;
        }
        uint chunkBlocks = (uint)Math.Max(1, 64 >> sb.InoPBlog);
        var plan = new GrowPlan(requestedBlocks, sb.DataBlocks, nb, sb.AgCount, (uint)count, sb.AgBlocks, sb.BlockSize, imaxPct ?? sb.ImaxPct, sb.InoPBlog,
            chunkBlocks, sb.ImaxPct);
        if (nb < sb.DataBlocks)
        {
            ulong lastAgStart = (ulong)(sb.AgCount - 1) * agblocks;
            ulong smallest = lastAgStart + MinAgBlocks;
            if (count < 2 || count < sb.AgCount)
                throw new XfsException(XfsError.InvalidArgument,
                    $"{requestedBlocks} blocks would remove whole allocation groups: XFS can shrink only by removing free space at the end of " +
                    $"the last AG (AG {sb.AgCount - 1}, blocks {lastAgStart}..{sb.DataBlocks - 1}), and the last AG keeps at least {MinAgBlocks} blocks, " +
                    $"so no size below {smallest} blocks is possible. Nothing was written.");
        }
        return plan;
    }

    /// <summary>
    /// Grows (or shrinks) the volume <paramref name="access"/> was granted for to <paramref name="requestedBlocks"/>
    /// (see <see cref="Plan"/>). The log must be clean. Nothing is written when the plan changes nothing or a check
    /// refuses; a refusal names its reason.
    /// </summary>
    public static GrowResult Run(WriteAccess access, ulong requestedBlocks, IProgress<GrowProgress>? progress = null, GrowOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(access);
        options ??= new GrowOptions();
        var device = access.Data;
        var sb = access.Superblock;
        if (!sb.IsV5) throw new XfsException(XfsError.Unsupported, "growing a V4 volume is not supported. Nothing was written.");
        var primary = new byte[sb.SectorSize];
        device.Read(0, primary);
        var sbView = new SuperblockView(primary);
        if (sbView.InProgress != 0)
            throw new XfsException(XfsError.Unsupported, "the superblock says mkfs did not finish (sb_inprogress): make the volume again. Nothing was written.");

        if (sb.LogStart == 0 && access.Log is null)
            throw new XfsException(XfsError.InvalidArgument, "the volume has an external log: give its device (--log-device LOGDEV). Nothing was written.");
        var area = LogArea.For(device, access.Log, sb);
        if (MountedLog.NeedsReplay(area, sb))
            throw new XfsException(XfsError.ReadOnly, "the log is dirty: replay it first: xfswin recover (or mount the volume once with Linux). Nothing was written.");

        var plan = Plan(sb, requestedBlocks, options.ImaxPct);
        if (!plan.Changes) return new GrowResult(plan, sb.Fdblocks, sb.Fdblocks, false);
        if (plan.Shrinks)
        {
            // A shrink takes the tail through the allocator, as the kernel's does (its free-list fix included): the
            // volume is opened read-write for that alone, and unmounted cleanly afterwards. Refusals come first, with
            // nothing written.
            CheckShrink(device, sb, plan, sbView.Fdblocks);
            using var volume = XfsVolume.OpenWritable(device, access.Log, new VolumeOpenOptions { Writable = true, SpaceChangesOnly = true }, ownsDevices: false);
            return RunMounted(volume, requestedBlocks, progress, options.ImaxPct);
        }
        var (items, fdDelta, logSecondaries) = Prepare(device, sb, area, primary, plan, progress, options);
        ulong freeBefore = sbView.Fdblocks;

        progress?.Report(new GrowProgress("committing through the log", 0, 1));
        var log = MountedLog.Open(area, sb, new DeviceImageWriteback(device, sb));
        long reservation = 0;
        foreach (var item in items) reservation += item.FormattedBytes + (long)item.RegionCount * LogOpHeader.Size;
        using (var tx = log.Begin(checked((int)reservation)))
        {
            foreach (var item in items) tx.Log(item);
            tx.Commit();
        }
        log.Force();
        if (options.StopAfterLogCommit) return new GrowResult(plan, freeBefore, (ulong)((long)freeBefore + fdDelta), true);

        log.Unmount();
        progress?.Report(new GrowProgress("committing through the log", 1, 1));
        if (!logSecondaries) UpdateSecondarySuperblocks(device, sb, plan.NewAgCount, progress);
        return new GrowResult(plan, freeBefore, (ulong)((long)freeBefore + fdDelta), false);
    }

    /// <summary>
    /// Grows (or shrinks, or changes the imaxpct of) a volume opened read-write and in use (xfs_growfs on a mounted
    /// volume) to <paramref name="requestedBlocks"/> (see <see cref="Plan"/>; null: what the device holds now, re-read
    /// so an image file, disk or partition extended since the open counts; with <paramref name="imaxPct"/> alone the
    /// size stays). The same steps and limits as <see cref="Run"/>, through the volume's own log, with every other
    /// change to the volume held off while it runs (<see cref="XfsVolume.ChangeDataSection{T}"/>); afterwards the
    /// volume allocates from the new space (or no longer from the removed tail).
    /// </summary>
    public static GrowResult RunMounted(XfsVolume volume, ulong? requestedBlocks, IProgress<GrowProgress>? progress = null, int? imaxPct = null,
        bool keepSize = false)
    {
        ArgumentNullException.ThrowIfNull(volume);
        return volume.ChangeDataSection(q =>
        {
            var device = q.Data;
            var sb = q.Superblock;
            device.RefreshLength();
            ulong requested = keepSize ? sb.DataBlocks : requestedBlocks ?? DeviceBlocks(device.Length, sb.BlockSize);
            var primary = new byte[sb.SectorSize];
            device.Read(0, primary);
            ulong freeBefore = new SuperblockView(primary).Fdblocks;
            if (requestedBlocks is null && !keepSize && requested < sb.DataBlocks)
                throw new XfsException(XfsError.InvalidArgument,
                    $"the device holds {requested} blocks but the volume has {sb.DataBlocks}: was the image or partition made smaller? " +
                    "Nothing was written. To shrink the volume, give the new size with -D.");
            var plan = Plan(sb, requested, imaxPct);
            if (!plan.Changes)
                return new DataSectionChange<GrowResult>(new GrowResult(plan, freeBefore, freeBefore, false), sb.DataBlocks, sb.AgCount, sb.ImaxPct);
            if (plan.Shrinks) return ShrinkLastAg(q, plan, primary, progress);
            var options = new GrowOptions { ImaxPct = imaxPct };
            var (items, fdDelta, logSecondaries) = Prepare(device, sb, q.Log.Area, primary, plan, progress, options);
            progress?.Report(new GrowProgress("committing through the log", 0, 1));
            long reservation = 0;
            foreach (var item in items) reservation += item.FormattedBytes + (long)item.RegionCount * LogOpHeader.Size;
            using (var tx = q.Log.Begin(checked((int)reservation)))
            {
                foreach (var item in items) tx.Log(item);
                tx.Commit();
            }
            // Durable and written in place before anyone allocates from the new space (the volume's next quiesce
            // writes it back too; the secondaries below read the new primary from the device).
            q.Log.PushAll();
            progress?.Report(new GrowProgress("committing through the log", 1, 1));
            if (!logSecondaries) UpdateSecondarySuperblocks(device, sb, plan.NewAgCount, progress);
            var result = new GrowResult(plan, freeBefore, (ulong)((long)freeBefore + fdDelta), false);
            return new DataSectionChange<GrowResult>(result, plan.NewDataBlocks, plan.NewAgCount, plan.ImaxPct);
        });
    }

    /// <summary>
    /// Everything of a grow (or shrink) but its commit: the device-size check, the old last AG's change (in memory),
    /// the new AGs' headers written in place, and the log items of the transaction (the primary superblock from
    /// <paramref name="primary"/> with the new geometry and free count, the changed free-space buffers, and the
    /// secondary superblocks while they fit a quarter of the log). Returns the items, the change of sb_fdblocks and
    /// whether the secondaries are in the transaction.
    /// </summary>
    private static (List<JournalItem> Items, long FdDelta, bool LogSecondaries) Prepare(IBlockDevice device, Superblock sb, LogArea area, byte[] primary,
        GrowPlan plan, IProgress<GrowProgress>? progress, GrowOptions options)
    {
        if (plan.NewDataBlocks > DeviceBlocks(device.Length, sb.BlockSize))
            throw new XfsException(XfsError.InvalidArgument,
                $"the device holds {DeviceBlocks(device.Length, sb.BlockSize)} blocks of {sb.BlockSize} bytes; {plan.NewDataBlocks} do not fit " +
                "(extend the image file first, e.g. truncate -s SIZE FILE, or give a smaller -D). Nothing was written.");

        var buffers = new LoggedBuffers(device);
        uint lastOld = sb.AgCount - 1;
        var last = new AgFreeSpace(buffers, sb, lastOld);
        if (last.Length != plan.OldLastAgLength || last.AgiLength != plan.OldLastAgLength)
            throw new XfsCorruptionException($"AGF of AG {lastOld}", sb.AgBlockToByte(lastOld, 0) + sb.SectorSize,
                $"the last AG is {last.Length} blocks long (AGI: {last.AgiLength}) but the superblock's {sb.DataBlocks} blocks make it {plan.OldLastAgLength}");

        ulong freeBefore = new SuperblockView(primary).Fdblocks;
        long fdDelta;
        if (plan.Shrinks) throw new InvalidOperationException("a shrink goes through ShrinkLastAg");
        if (!plan.Resizes)
        {
            fdDelta = 0; // imaxpct alone
        }
        else
        {
            // The last sector of the new size must be there (the kernel reads it before anything else).
            var probe = new byte[Math.Max(512, device.SectorSize)];
            device.Read((long)plan.NewDataBlocks * sb.BlockSize - probe.Length, probe);
            // The old last AG's extension first, in memory only: whatever refuses it refuses before a byte is written.
            fdDelta = 0;
            uint extension = plan.NewAgCount > plan.OldAgCount ? sb.AgBlocks - plan.OldLastAgLength : plan.NewLastAgLength - plan.OldLastAgLength;
            if (extension > 0)
            {
                progress?.Report(new GrowProgress("extending the last allocation group", 0, 1));
                uint oldLength = last.Length;
                last.SetLength(oldLength + extension);
                last.Free(oldLength, extension);
                fdDelta += extension;
            }
            fdDelta += WriteNewAgs(device, sb, primary, plan, progress);
        }

        // The primary superblock: the new geometry and free count, logged whole.
        var newPrimary = (byte[])primary.Clone();
        var w = new SuperblockWriter(newPrimary);
        w.DataBlocks = plan.NewDataBlocks;
        w.AgCount = plan.NewAgCount;
        w.ImaxPct = (byte)plan.ImaxPct;
        w.Fdblocks = (ulong)((long)freeBefore + fdDelta);
        w.StampCrc(sb.SectorSize);
        int sectorBB = sb.SectorSize >> LogArea.BBShift;
        var items = new List<JournalItem> { BufferLogItem.Create(0, sectorBB, BufType.Superblock, newPrimary, 0, SuperblockView.Size) };
        items.AddRange(buffers.Items());
        // The secondary superblocks join the same transaction while they fit a quarter of the log: a crash then leaves
        // them all agreeing with the primary, before the commit and after it (xfs_repair compares them). Beyond that
        // they are rewritten after the commit, unlogged, as the kernel's xfs_update_secondary_sbs does.
        long secondaryBytes = (plan.NewAgCount - 1L) * (sb.SectorSize + 256);
        bool logSecondaries = options.SecondariesInLog ?? secondaryBytes <= (area.Blocks << LogArea.BBShift) / 4;
        if (logSecondaries)
        {
            for (uint agno = 1; agno < plan.NewAgCount; agno++)
                items.Add(BufferLogItem.Create(sb.AgBlockToByte(agno, 0) >> LogArea.BBShift, sectorBB, BufType.Superblock, newPrimary, 0, SuperblockView.Size));
        }
        return (items, fdDelta, logSecondaries);
    }

    /// <summary>
    /// The free extent at the end of the last AG and how many of its blocks a shrink can remove: what the kernel's
    /// exact allocation of the tail can take (no more than one allocation may take, m_ag_max_usable, leaving the
    /// free list its minimum), while the AG keeps its metadata reservation at its new length (xfs_ag_resv_init) and
    /// at least <see cref="MinAgBlocks"/> blocks, and the mounted kernel's free block counter can give the shrink's
    /// transaction that many blocks (<see cref="AgReservations.TransactionFreeLimit"/>).
    /// </summary>
    private static (AllocRecord? Tail, ulong Removable) RemovableTail(IBlockDevice device, Superblock sb, ulong fdblocks, AgFreeSpace last, uint lastLength)
    {
        uint agno = sb.AgCount - 1;
        var tail = last.TailExtent();
        ulong removable = tail?.BlockCount ?? 0;
        removable = Math.Min(removable, AgReservations.MaxUsable(sb));
        if (removable > 0) removable = Math.Min(removable, AgReservations.TransactionFreeLimit(device, sb, fdblocks));
        ulong spare = (ulong)last.FreeBlocks + last.FreeListCount;
        uint need = AgReservations.MinFreelist(sb, last);
        removable = Math.Min(removable, spare > need ? spare - need : 0);
        // xfs_alloc_longest_free_extent: an AGFL short of its minimum is refilled from the longest extent first.
        ulong refill = need > last.FreeListCount ? need - last.FreeListCount : 0;
        removable = Math.Min(removable, last.Longest > refill ? last.Longest - refill : 0);
        while (removable > 0 && !AgReservations.Fits(sb, last, agno, (uint)(lastLength - removable), last.FreeBlocks - removable))
            removable--;
        removable = Math.Min(removable, lastLength - MinAgBlocks);
        return (tail, removable);
    }

    /// <summary>
    /// The smallest size (in blocks) the unmounted volume on <paramref name="device"/> can shrink to: its size less
    /// what <see cref="RemovableTail"/> allows at the end of the last AG. Reads, writes nothing.
    /// </summary>
    public static ulong SmallestSize(IBlockDevice device, Superblock sb)
    {
        ArgumentNullException.ThrowIfNull(device);
        ArgumentNullException.ThrowIfNull(sb);
        uint lastLength = (uint)(sb.DataBlocks - (ulong)(sb.AgCount - 1) * sb.AgBlocks);
        var last = new AgFreeSpace(new LoggedBuffers(device), sb, sb.AgCount - 1);
        var primary = new byte[sb.SectorSize];
        device.Read(0, primary);
        return sb.DataBlocks - RemovableTail(device, sb, new SuperblockView(primary).Fdblocks, last, lastLength).Removable;
    }

    /// <summary>
    /// The smallest size (in blocks) a volume opened read-write and in use can shrink to (see <see cref="SmallestSize"/>),
    /// read while its changes are held off and written in place.
    /// </summary>
    public static ulong SmallestSizeMounted(XfsVolume volume)
    {
        ArgumentNullException.ThrowIfNull(volume);
        return volume.WhileQuiesced(q => SmallestSize(q.Data, q.Superblock));
    }

    /// <summary>A size as xfs_growfs -D takes it: a plain number is file system blocks; k, m, g, t, p, e suffixes (powers of 1024) are bytes.</summary>
    public static ulong ParseSize(string text, uint blockSize)
    {
        ArgumentNullException.ThrowIfNull(text);
        string t = text.Trim().ToLowerInvariant();
        int shift = 0;
        if (t.Length > 1 && "kmgtpe".IndexOf(t[^1]) is int u and >= 0)
        {
            shift = 10 * (u + 1);
            t = t[..^1];
        }
        if (!ulong.TryParse(t, System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out ulong n))
            throw new FormatException($"a size is blocks or bytes with a k/m/g/t suffix, not '{text}'");
        if (shift == 0) return n;
        if (n > ulong.MaxValue >> shift) throw new FormatException($"the size {text} is too large");
        return (n << shift) / blockSize;
    }

    /// <summary>
    /// Refuses a shrink the kernel would refuse, reading only: the removed blocks must be free space at the end of the
    /// last AG that the kernel would give (<see cref="RemovableTail"/>), and no inode chunk may reach into them.
    /// </summary>
    private static void CheckShrink(IBlockDevice device, Superblock sb, GrowPlan plan, ulong fdblocks)
    {
        uint agno = sb.AgCount - 1;
        uint remove = plan.OldLastAgLength - plan.NewLastAgLength;
        var last = new AgFreeSpace(new LoggedBuffers(device), sb, agno);
        if (last.Length != plan.OldLastAgLength || last.AgiLength != plan.OldLastAgLength)
            throw new XfsCorruptionException($"AGF of AG {agno}", sb.AgBlockToByte(agno, 0) + sb.SectorSize,
                $"the last AG is {last.Length} blocks long (AGI: {last.AgiLength}) but the superblock's {sb.DataBlocks} blocks make it {plan.OldLastAgLength}");
        var (tail, removable) = RemovableTail(device, sb, fdblocks, last, plan.OldLastAgLength);
        if (tail is null || removable < remove)
        {
            ulong smallest = (ulong)agno * sb.AgBlocks + plan.OldLastAgLength - removable;
            throw new XfsException(XfsError.InvalidArgument,
                $"only free space at the end of the last AG can be removed: AG {agno} ends with {tail?.BlockCount ?? 0} free blocks, of which " +
                $"{removable} can go (the kernel's limits: one allocation's largest extent, the free list's minimum, the AG's metadata reservation " +
                $"and the free blocks a transaction may take), so the smallest size is {smallest} blocks ({plan.RequestedBlocks} asked). Nothing was written.");
        }
        if (last.InodeChunkReaches(plan.NewLastAgLength))
            throw new XfsException(XfsError.InvalidArgument,
                $"an inode chunk of AG {agno} reaches past block {plan.NewLastAgLength} of the AG; the volume cannot shrink to {plan.NewDataBlocks} blocks. Nothing was written.");
    }

    /// <summary>
    /// The tail shrink (xfs_growfs_data_private with a smaller size, xfs_ag_shrink_space) of a quiesced read-write
    /// volume: refused, with nothing written, unless the removed blocks are free space at the end of the last AG that
    /// the kernel would give (<see cref="RemovableTail"/>) and no inode chunk reaches into them; then one transaction
    /// through the volume's log takes them out of free space (the allocator fixes the AG's free list first, as any
    /// allocation does), shortens the AGF and AGI and sets the primary superblock's dblocks, fdblocks and imax_pct, and
    /// the secondary superblocks while they fit a quarter of the log (else they are rewritten after the commit).
    /// </summary>
    private static DataSectionChange<GrowResult> ShrinkLastAg(QuiescedVolume q, GrowPlan plan, byte[] primary, IProgress<GrowProgress>? progress)
    {
        var device = q.Data;
        var sb = q.Superblock;
        uint agno = sb.AgCount - 1;
        uint remove = plan.OldLastAgLength - plan.NewLastAgLength;
        ulong freeBefore = new SuperblockView(primary).Fdblocks;
        CheckShrink(device, sb, plan, freeBefore);

        progress?.Report(new GrowProgress("shrinking the last allocation group", 0, 1));
        long secondaryBytes = (plan.NewAgCount - 1L) * (sb.SectorSize + 256);
        bool logSecondaries = secondaryBytes <= (q.Log.Area.Blocks << LogArea.BBShift) / 4;
        // tr_growdata's reservation (free-space and rmap tree changes of one AG) plus the superblocks.
        int reservation = checked(64 * (int)sb.BlockSize + (int)(plan.NewAgCount + 4) * (sb.SectorSize + 256));
        ulong freeAfter;
        using (var tx = q.BeginTransaction(reservation))
        {
            q.Allocator.RemoveTail(tx, agno, remove);
            freeAfter = (ulong)(q.Allocator.FreeBlocks - remove);
            var verifier = new SuperblockBufferVerifier(sb);
            var buffer = tx.Read(0, sb.SectorSize, 0, verifier, verifier.ForWrite(), BufType.Superblock);
            var w = new SuperblockWriter(buffer.Contents);
            w.DataBlocks = plan.NewDataBlocks;
            w.ImaxPct = (byte)plan.ImaxPct;
            w.Fdblocks = freeAfter;
            tx.LogRange(buffer, 0, SuperblockView.Size - 1);
            if (logSecondaries)
            {
                var image = buffer.Contents.AsSpan(0, sb.SectorSize).ToArray();
                new SuperblockWriter(image).StampCrc(sb.SectorSize);
                int sectorBB = sb.SectorSize >> LogArea.BBShift;
                for (uint ag = 1; ag < plan.NewAgCount; ag++)
                    tx.Log(BufferLogItem.Create(sb.AgBlockToByte(ag, 0) >> LogArea.BBShift, sectorBB, BufType.Superblock, image, 0, SuperblockView.Size));
            }
            tx.Commit();
        }
        q.Log.PushAll();
        progress?.Report(new GrowProgress("shrinking the last allocation group", 1, 1));
        if (!logSecondaries) UpdateSecondarySuperblocks(device, sb, plan.NewAgCount, progress);
        return new DataSectionChange<GrowResult>(new GrowResult(plan, freeBefore, freeAfter, false), plan.NewDataBlocks, plan.NewAgCount, plan.ImaxPct);
    }

    /// <summary>
    /// Writes the new AGs' headers in place, from the last down (xfs_resizefs_init_new_ags), each with a superblock
    /// copy of the old geometry marked in progress: unreachable until the primary superblock's commit. Returns the
    /// free blocks they bring.
    /// </summary>
    private static long WriteNewAgs(IBlockDevice device, Superblock sb, byte[] primary, GrowPlan plan, IProgress<GrowProgress>? progress)
    {
        if (plan.NewAgCount == plan.OldAgCount) return 0;
        var view = new SuperblockView(primary);
        var g = MkfsGeometry.OfVolume(sb, view.Unit, view.Width, view.RtExtSize, plan.NewDataBlocks, plan.NewAgCount);
        var copy = (byte[])primary.Clone();
        var cw = new SuperblockWriter(copy);
        cw.InProgress = 1;
        cw.StampCrc(sb.SectorSize);
        long free = 0;
        long total = plan.NewAgCount - plan.OldAgCount, done = 0;
        for (uint agno = plan.NewAgCount - 1; agno >= plan.OldAgCount; agno--)
        {
            uint length = g.AgLength(agno);
            var ag = MkfsLayout.GrownAg(g, agno, length);
            device.Write(sb.AgBlockToByte(agno, 0), copy);
            MkfsWriter.WriteAgHeaders(device.Write, g, ag, g.InodesPerChunkAllocation);
            free += ag.FreeBlocks;
            done++;
            if (done % 64 == 0 || done == total) progress?.Report(new GrowProgress("writing new allocation groups", done, total));
        }
        device.Flush();
        return free;
    }

    /// <summary>Rewrites the superblock copy of every AG but the first from the primary on disk (xfs_update_secondary_sbs).</summary>
    private static void UpdateSecondarySuperblocks(IBlockDevice device, Superblock sb, uint agCount, IProgress<GrowProgress>? progress)
    {
        var primary = new byte[sb.SectorSize];
        device.Read(0, primary);
        for (uint agno = 1; agno < agCount; agno++)
        {
            device.Write((long)agno * sb.AgBlocks * sb.BlockSize, primary);
            if (agno % 256 == 0 || agno == agCount - 1) progress?.Report(new GrowProgress("updating secondary superblocks", agno, agCount - 1));
        }
        device.Flush();
    }
}

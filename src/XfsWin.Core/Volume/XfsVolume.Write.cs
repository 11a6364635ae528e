using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

/// <summary>What <see cref="XfsVolume.SetAttributes"/> changes; null fields stay as they are.</summary>
public sealed record AttributeChanges
{
    /// <summary>Permission bits and setuid/setgid/sticky (the file type bits are kept).</summary>
    public ushort? Mode { get; init; }
    public uint? Uid { get; init; }
    public uint? Gid { get; init; }
    public XfsTimestamp? AccessTime { get; init; }
    public XfsTimestamp? ModifyTime { get; init; }
    /// <summary>A new size (truncate). Growing only moves EOF: the new range reads as zeros.</summary>
    public long? Size { get; init; }
    /// <summary>
    /// The caller lacks CAP_FOWNER (hosts set it for callers other than root): a new owner's or group's dquots must
    /// have room for the file's blocks and inode under enforced limits (xfs_trans_alloc_ichange without force).
    /// Unset, a chown or chgrp is charged without that check, as the kernel does for a privileged caller.
    /// </summary>
    public bool CheckQuota { get; init; }
    /// <summary>
    /// Both times are set to the current time, the ctime's (utimes with no times or both UTIME_NOW: the VFS's
    /// ATTR_TOUCH), whatever <see cref="AccessTime"/> and <see cref="ModifyTime"/> say. An append-only file allows this
    /// change alone; explicit times, one time only, or any other change are refused on it (may_setattr). An immutable
    /// file refuses every change.
    /// </summary>
    public bool TimesAreNow { get; init; }
}

/// <summary>
/// The write side of a volume opened read-write: the log it writes its transactions to, the lock that orders its
/// changes, and the in-core superblock counters (the kernel's lazy counters, written to the primary superblock at
/// a clean unmount).
/// <para>
/// Lock order: <see cref="Changes"/> (one change to the namespace or an inode at a time, reads shared), then buffer locks as
/// <see cref="Transaction"/> documents (AG headers ascending, AGI before AGF, then other buffers), then the log's
/// own lock inside commit.
/// </para>
/// </summary>
internal sealed class VolumeWriteState(WriteAccess access, MountedLog log, CachedLogWriteback writeback, VolumeSpace space, InodeAllocator inodes)
{
    public readonly WriteAccess Access = access;
    public readonly MountedLog Log = log;
    public readonly CachedLogWriteback Writeback = writeback;
    /// <summary>Blocks for files, directories, trees and inode chunks.</summary>
    public readonly VolumeSpace FileSpace = space;
    public readonly InodeAllocator InodeAllocator = inodes;
    /// <summary>The AGI unlinked lists: every inode in <see cref="Orphans"/> is on them, so a crash leaves it for recovery to free.</summary>
    public required UnlinkedList Unlinked { get; init; }
    /// <summary>File data held until the checkpoint that maps it (see <see cref="FileDataCache"/>).</summary>
    public required FileDataCache Data { get; init; }
    /// <summary>The periodic sync's thread (null when <see cref="VolumeOpenOptions.SyncInterval"/> is zero); stopped before unmount.</summary>
    public PeriodicSync? PeriodicSync;
    /// <summary>Mapping updates as deferred work (BUI/BUD): the remaps of reflink and copy-on-write.</summary>
    public required Extents.BmapUpdateWork Bmaps { get; init; }
    /// <summary>Changes hold it exclusively, reads shared (see <see cref="VolumeChangeLock"/>).</summary>
    public readonly VolumeChangeLock Changes = new();
    /// <summary>Transaction objects reused from one change to the next (thread-safe).</summary>
    public required TransactionPool Transactions { get; init; }
    /// <summary>The inode copies, extent lists and mapping editors writes that allocate reuse (thread-safe).</summary>
    public readonly WriteScratchPool WriteScratch = new();
    /// <summary>Holds hosts keep on inodes (open files, cached entries), by inode; lock this dictionary itself.</summary>
    public readonly Dictionary<ulong, ulong> Holds = new();
    /// <summary>Inodes a write may have given blocks past EOF (an extent size hint's rounding): trimmed when inactivated.</summary>
    public readonly InodeSet EofBlocks = new();
    /// <summary>Set once any inode went into <see cref="EofBlocks"/> (read without a lock): until then a close has nothing to give back.</summary>
    public bool AnyEofBlocks;
    /// <summary>XFS_EOFBLOCKS_RELEASED: inodes whose post-EOF blocks a close already gave back; later closes keep them.</summary>
    public readonly InodeSet EofReleased = new();
    /// <summary>Copy-on-write staging blocks kept for the writes that follow (under <see cref="Changes"/>).</summary>
    public readonly CowStaging CowStaging = new();
    /// <summary>Inodes with no name left that are kept while held; freed at their last release.</summary>
    public readonly InodeSet Orphans = new();

    public Directories.IDirectorySpace DirectorySpace(Transaction tx, InodeUpdate directory) => FileSpace.ForDirectory(tx, directory);

    /// <summary>The deferred parent-pointer updates of namespace operations (ATTRI/ATTRD chains); set when the writer starts.</summary>
    public Attributes.AttrIntentWork? ParentPointerWork;

    /// <summary>A free inode for a new file in <paramref name="parent"/> (see <see cref="InodeAllocator.Allocate"/>).</summary>
    public (ulong Ino, int NewInodes) AllocateInode(Transaction tx, ulong parent, bool directory) =>
        InodeAllocator.Allocate(tx, parent, directory, lowSpace: FileSpace.Allocator.FreeBlocks < (long)(Access.Superblock.DataBlocks / 100),
            ag => InodeCount + InodeAllocator.AllocationInodes(Access.Superblock) <= MaxInodes && FileSpace.HasRoomForChunk(ag));

    /// <summary>
    /// The most inodes the volume may have (the kernel's m_maxicount): sb_imax_pct percent of the data blocks, in whole
    /// inode chunks; no limit when imax_pct is 0. A new chunk past it is ENOSPC, as on Linux. An online grow, shrink
    /// or imaxpct change sets it again (under <see cref="Changes"/>), as the kernel's growfs does: then without the
    /// rounding to whole chunks its mount applies.
    /// </summary>
    public long MaxInodes = MaxInodesOf(access.Superblock, wholeChunks: true);

    public static long MaxInodesOf(Superblock sb, bool wholeChunks)
    {
        if (sb.ImaxPct == 0) return long.MaxValue;
        ulong chunkBlocks = wholeChunks ? Math.Max(1UL, (ulong)InobtRecord.InodesPerChunk >> sb.InoPBlog) : 1;
        ulong blocks = sb.DataBlocks * (ulong)sb.ImaxPct / 100 / chunkBlocks * chunkBlocks;
        return (long)(blocks << sb.InoPBlog);
    }
    public readonly TransactionReservations Reservations = new(ReservationGeometry.From(access.Superblock));
    /// <summary>The volume's inodes and free inodes (the superblock's icount and ifree), changed by <see cref="CountInodes"/>.</summary>
    public long InodeCount, FreeInodes;

    /// <summary>Counts a committed change's inodes (made or released) and free inodes; changes on several threads may count at once.</summary>
    public void CountInodes(long inodes, long freeInodes)
    {
        if (inodes != 0) Interlocked.Add(ref InodeCount, inodes);
        if (freeInodes != 0) Interlocked.Add(ref FreeInodes, freeInodes);
    }
    /// <summary>Set by the first write or flush the device failed: the volume is shut down (see <see cref="ShutdownOnFailureDevice"/>).</summary>
    public required DeviceShutdown Shutdown { get; init; }
    /// <summary>The dquots, when the volume accounts quota (the log's <see cref="MountedLog.Dquots"/>).</summary>
    public VolumeQuota? Quota { get; init; }
    /// <summary>Dirty metadata the cache may hold before a full writeback lets it go (bounded memory).</summary>
    public const long PinnedBytesLimit = 256L << 20;
    public bool Unmounted;
}

public sealed partial class XfsVolume
{
    private VolumeWriteState? _write;

    /// <summary>
    /// Opens a source read-write: the write gate first (NEEDSREPAIR, unknown features and V4 are refused with the device
    /// untouched), then a log Linux left dirty is replayed in place (as the kernel does at mount), then the log is opened
    /// for our transactions. A volume with a feature the write path does not maintain opens read-only, naming it in
    /// <see cref="VolumeInfo.ReadOnlyReasons"/>.
    /// </summary>
    private static XfsVolume OpenWritable(string source, VolumeOpenOptions options)
    {
        var data = PartitionSpec.Open(source, options.Partition, writable: true);
        IBlockDevice? logDevice = null;
        try
        {
            logDevice = options.LogDevice is null ? null : PartitionSpec.Open(options.LogDevice, null, writable: true);
            return OpenWritable(data, logDevice, options, ownsDevices: true);
        }
        catch
        {
            logDevice?.Dispose();
            data.Dispose();
            throw;
        }
    }

    /// <summary>
    /// The read-write open on devices already opened for writing (see <see cref="OpenWritable(string, VolumeOpenOptions)"/>
    /// for the order of gate, replay and log). With <paramref name="ownsDevices"/> the volume closes them when it is
    /// disposed (and this method closes them when it throws); otherwise the caller keeps them.
    /// </summary>
    internal static XfsVolume OpenWritable(IBlockDevice data, IBlockDevice? logDevice, VolumeOpenOptions options, bool ownsDevices)
    {
        var sector = ReadSuperblockSector(data);
        var unmaintained = WriteGate.Unmaintained(sector);
        // The gate's hard refusals (needsrepair, unknown features, V4) throw here, before anything is written.
        _ = WriteGate.Admit(data, logDevice, WritePurpose.LogRecovery);
        if (unmaintained.Count > 0 && !options.SpaceChangesOnly)
        {
            if (ownsDevices) logDevice?.Dispose();
            var reasons = unmaintained.Select(f => $"it uses {f.Name}, which XfsWin cannot keep consistent when it writes ({f.Why})").ToList();
            var readOnly = OpenDevice(data, options with { Writable = false, Replay = LogReplayMode.Memory, LogDevice = null }, ownsDevice: ownsDevices);
            readOnly._extraReadOnlyReasons = reasons;
            readOnly._info = readOnly._info with { ReadOnlyReasons = [.. reasons, .. readOnly._info.ReadOnlyReasons] };
            return readOnly;
        }
        // Everything this open writes, from the log replay on, goes through devices that shut it down at the first write
        // or flush the device fails.
        var shutdown = new DeviceShutdown();
        data = new ShutdownOnFailureDevice(data, shutdown);
        if (logDevice is not null) logDevice = new ShutdownOnFailureDevice(logDevice, shutdown);
        var probe = WriteGate.Admit(data, logDevice, WritePurpose.LogRecovery);
        // A log Linux left dirty is replayed onto the device first, as the kernel's mount does; what the replay leaves to
        // finish (intents, unlinked inodes, CoW staging extents) this volume's own engine finishes once its log is open.
        var prepared = InPlaceRecovery.Prepare(probe);
        var recovery = prepared.Result;
        var access = WriteGate.Admit(data, logDevice, WritePurpose.Modify, ownsDevices: ownsDevices);
        try
        {
            var volume = OpenDevice(data, options with { Replay = LogReplayMode.None, LogDevice = null }, ownsDevice: false);
            volume._checkpointThresholdBytes = options.CheckpointThresholdBytes;
            volume._attrForkAtCreate = options.AttrForkAtCreate;
            try
            {
                if (prepared.FollowUp is { } followUp)
                {
                    volume.StartWriting(access, recovery, followUp.Position, followUp.Intents);
                    volume.FinishRecovery(followUp.Intents, followUp.CowAgs, recovery, null);
                    InPlaceRecovery.ReportFollowUp(recovery);
                    // The open saw the log still dirty (the engine had yet to finish it); it is now this open's log, as after
                    // a replay that left nothing to do (what recovery did is in RecoveredAtOpen).
                    volume._info = volume._info with
                    {
                        LogState = LogState.Clean,
                        Warnings = [.. volume._info.Warnings.Where(w => !w.StartsWith("the log is dirty", StringComparison.Ordinal))],
                    };
                }
                else volume.StartWriting(access, recovery);
                if (options.SyncInterval > TimeSpan.Zero)
                    volume._write!.PeriodicSync = new PeriodicSync(options.SyncInterval, volume.PeriodicSyncRound);
                return volume;
            }
            catch
            {
                volume.Dispose();
                throw;
            }
        }
        catch
        {
            access.Dispose();
            throw;
        }
    }

    private IReadOnlyList<string>? _extraReadOnlyReasons;
    private long _checkpointThresholdBytes;
    private bool _attrForkAtCreate = true;

    private static byte[] ReadSuperblockSector(IBlockDevice device)
    {
        var sector = new byte[Math.Max(512, Math.Min(device.SectorSize, 4096))];
        if (device.Length < sector.Length) throw new XfsException(XfsError.NotXfs, $"the source is only {device.Length} bytes: not an XFS volume");
        device.Read(0, sector);
        return sector;
    }

    /// <summary>
    /// Starts the write side: the log opened at its head (clean), or, after an in-place replay that left work to
    /// finish, at the head that replay found with its unfinished <paramref name="intents"/> holding the tail
    /// (<paramref name="after"/>).
    /// </summary>
    private void StartWriting(WriteAccess access, LogRecoveryResult? recovery, LogPosition? after = null, IReadOnlyList<RecoveredIntent>? intents = null)
    {
        var sb = _mount.Superblock;
        var area = LogArea.For(access.Data, access.Log, sb);
        var writeback = new CachedLogWriteback(access.Data, sb, _mount.Buffers);
        var data = new FileDataCache(access.Data, (int)sb.BlockSize);
        var buffers = _mount.Buffers;
        var logOptions = new MountedLogOptions
        {
            BeforeCheckpoint = () =>
            {
                long written = data.HandOff();
                return () => data.WaitFor(written);
            },
            CheckpointThresholdBytes = _checkpointThresholdBytes,
            // A relogged buffer's older image goes back to its buffer for the next private copy (see CommittedItemList).
            ImageReleased = (daddr, image) => buffers.Find(daddr << LogArea.BBShift, image.Length)?.OfferSpare(image),
        };
        var log = after is null
            ? MountedLog.Open(area, sb, writeback, logOptions)
            : MountedLog.OpenAfterReplay(area, sb, writeback, after, intents ?? [], logOptions);
        var space = new VolumeSpace(new Allocation.AgAllocator(_mount, log), sb, data);
        // Quota accounting on: every transaction on this log charges the dquots (set before the first transaction).
        var quota = VolumeQuota.Create(ReadSuperblockSector(access.Data), _mount, _inodes, _maps);
        log.Dquots = quota;
        _write = new VolumeWriteState(access, log, writeback, space, new InodeAllocator(sb, _inodes, space))
        {
            Data = data,
            Transactions = new TransactionPool(_mount, log),
            Bmaps = new Extents.BmapUpdateWork(_inodes, space),
            Shutdown = access.Data is ShutdownOnFailureDevice guarded ? guarded.Shutdown : new DeviceShutdown(),
            Unlinked = new UnlinkedList(sb, _inodes),
            Quota = quota,
            InodeCount = (long)_agSummary.Inodes,
            FreeInodes = (long)_agSummary.FreeInodes,
        };
        var w = _write;
        if (sb.HasParentPointers)
            w.ParentPointerWork = new Attributes.AttrIntentWork(_inodes, space, (tx, inode) => MoveLocalData(tx, w, inode)) { TouchInode = false };
        if (recovery?.State == LogState.ReplayedInPlace)
            _recoveredAtOpen = recovery;
    }

    private LogRecoveryResult? _recoveredAtOpen;

    /// <summary>What the write log has done so far (null on a read-only open); for tests and diagnostics.</summary>
    internal LogWriteStatistics? WriteLogStatistics => _write?.Log.Statistics;

    /// <summary>The volume's change lock (see <see cref="VolumeChangeLock"/>); for tests.</summary>
    internal VolumeChangeLock ChangeLock => Writer().Changes;

    /// <summary>The log replay a read-write open ran before writing (null when the log was clean).</summary>
    public LogRecoveryResult? RecoveredAtOpen => _recoveredAtOpen;

    private VolumeWriteState Writer()
    {
        ThrowIfDisposed();
        var w = _write ?? throw new XfsException(XfsError.ReadOnly,
            "the volume is open read-only" + (_extraReadOnlyReasons is { Count: > 0 } r ? ": " + string.Join("; ", r) : ""));
        if (!_mount.Health.IsHealthy)
            throw new XfsException(XfsError.ReadOnly,
                $"the volume found corrupt metadata and stays read-only until xfs_repair has run ({_mount.Health.FirstCorruption?.Message})");
        if (w.Unmounted) throw new ObjectDisposedException(nameof(XfsVolume));
        if (w.Shutdown.Reason is not null) throw w.Shutdown.Refusal("the change was refused");
        return w;
    }

    /// <summary>The current time as the volume stores it (whole nanoseconds; clamped to what the inode format can hold).</summary>
    internal XfsTimestamp Now() => Clock?.Invoke() ?? SystemNow();

    /// <summary>The clock the volume's timestamps come from instead of the system's (tests).</summary>
    internal Func<XfsTimestamp>? Clock { get; set; }

    /// <summary>The system's current time as the volume stores it.</summary>
    internal static XfsTimestamp SystemNow()
    {
        long ticks = DateTime.UtcNow.Ticks - DateTime.UnixEpoch.Ticks;
        return new XfsTimestamp(ticks / TimeSpan.TicksPerSecond, (uint)(ticks % TimeSpan.TicksPerSecond * 100));
    }

    /// <summary>
    /// A transaction on the write log with the reservation of <paramref name="kind"/> (the kernel's sizing: tr_logres for
    /// each of tr_logcount parts, so that its deferred work rolls without waiting for log space).
    /// </summary>
    private static Transaction Begin(VolumeWriteState w, TransactionKind kind) =>
        w.Transactions.Begin(w.Reservations[kind].LogRes, Math.Max(1, w.Reservations[kind].LogCount));

    private static Transaction Begin(VolumeWriteState w, TransactionKind kind, int logReservationBytes) =>
        w.Transactions.Begin(Math.Max(w.Reservations[kind].LogRes, logReservationBytes), Math.Max(1, w.Reservations[kind].LogCount));

    /// <summary>
    /// chmod, chown, utimes and truncate (setattr): changes what <paramref name="changes"/> names and sets ctime, in one
    /// logged transaction. Growing the size only moves EOF; shrinking a file that has blocks past the new size is
    /// done by the truncate path. A new mode is then followed by the inode's access ACL, if it has one.
    /// </summary>
    public InodeAttributes SetAttributes(ulong inode, AttributeChanges changes)
    {
        ArgumentNullException.ThrowIfNull(changes);
        var result = SetAttributesCore(inode, changes);
        if (changes.Mode is null) return result;
        FollowModeInAccessAcl(inode, (ushort)result.Mode);
        return GetAttributes(inode);
    }

    private InodeAttributes SetAttributesCore(ulong inode, AttributeChanges changes)
    {
        var w = Writer();
        using (w.Changes.Change())
        {
            var current = _inodes.Get(inode);
            // may_setattr: an immutable inode keeps its attributes, an append-only one all but both times set to now.
            bool touchOnly = changes is { TimesAreNow: true, Mode: null, Uid: null, Gid: null, Size: null };
            RefuseIfLocked(current, touchOnly ? "setting its times to now" : "changing its attributes", appendAllowed: touchOnly);
            if (changes.Size is long size)
            {
                if (size < 0) throw new XfsException(XfsError.InvalidArgument, "a size cannot be negative");
                if (current.IsDirectory) throw new XfsException(XfsError.IsADirectory, "a directory has no size to set");
                if (!current.IsRegular) throw new XfsException(XfsError.InvalidArgument, "only regular files can be truncated");
                // xfs_setattr_size's short cut: a truncate to 0 of a file that is empty and maps nothing, with no time
                // to set (truncate(2), not ftruncate or O_TRUNC), changes nothing at all, not even the setuid and
                // setgid bits a truncate by an unprivileged caller drops (the mode such a truncate carries).
                if (size == 0 && current.Size == 0 && current.DataExtentCount == 0 && changes is
                    { ModifyTime: null, AccessTime: null, TimesAreNow: false, Uid: null, Gid: null })
                    return current.Attributes;
            }
            // A new owner's dquots exist before the change charges them (xfs_qm_vop_dqalloc).
            if (changes.Uid is not null || changes.Gid is not null)
                PrepareDquots(w, changes.Uid ?? current.Attributes.Uid, changes.Gid ?? current.Attributes.Gid, current.Attributes.ProjectId);
            // xfs_trans_alloc_ichange: the dquots the file moves to are reserved its blocks and its inode, unforced only
            // for an unprivileged caller.
            if (changes.CheckQuota && w.Quota is { Enforced: not 0 } quota)
            {
                byte types = 0;
                if (changes.Uid is uint u && u != current.Attributes.Uid) types |= DquotView.TypeUser;
                if (changes.Gid is uint g && g != current.Attributes.Gid) types |= DquotView.TypeGroup;
                if (types != 0)
                    quota.Reserve(changes.Uid ?? current.Attributes.Uid, changes.Gid ?? current.Attributes.Gid, current.Attributes.ProjectId,
                        current.Attributes.AllocatedBytes >> _mount.Superblock.BlockLog, 1, types: types);
            }
            // xfs_setattr_size: a truncate to the size the file has also gives back the blocks mapped past EOF.
            if (changes.Size is long newSize && newSize <= current.Size)
            {
                // XFS_ITRUNCATED: the next writable close gives back blocks past EOF again.
                w.EofReleased.Remove(inode);
                return Truncate(w, current, newSize, changes);
            }
            // EOF moving up zeroes the old last block's tail, copying it first when it is shared (reflink).
            if (changes.Size is long grownSize) current = ZeroTailOfShared(w, current, grownSize);
            using var tx = Begin(w, TransactionKind.Ichange);
            var update = new InodeUpdate(current, _mount.Superblock);
            Apply(update, changes);
            update.Log(tx, _inodes);
            tx.Commit();
            return _inodes.Get(inode).Attributes;
        }
    }

    /// <summary>
    /// Creates the dquots of <paramref name="uid"/>, <paramref name="gid"/> and <paramref name="projectId"/> that do not
    /// exist yet, each chunk in its own transaction, before the transaction that charges them (no-op without quota).
    /// </summary>
    private void PrepareDquots(VolumeWriteState w, uint uid, uint gid, uint projectId)
    {
        if (w.Quota is not { } quota) return;
        quota.Prepare(() => new Transaction(_mount, w.Log, w.Reservations[TransactionKind.QmDqAlloc].LogRes,
            Math.Max(1, w.Reservations[TransactionKind.QmDqAlloc].LogCount)), w.FileSpace, uid, gid, projectId);
    }

    private void Apply(InodeUpdate update, AttributeChanges changes)
    {
        var now = Now();
        if (changes.Mode is ushort mode) update.Mode = (ushort)((update.Mode & 0xF000) | (mode & 0x0FFF));
        if (changes.Uid is uint uid) update.Uid = uid;
        if (changes.Gid is uint gid) update.Gid = gid;
        var atime = changes.TimesAreNow ? now : changes.AccessTime;
        var mtime = changes.TimesAreNow ? now : changes.ModifyTime;
        if (atime is { } a) update.SetAccessTime(a.Seconds, a.Nanoseconds);
        if (mtime is { } m) update.SetModifyTime(m.Seconds, m.Nanoseconds);
        bool sizeChanged = changes.Size is long s && (ulong)s != update.Size;
        if (changes.Size is long size) update.Size = (ulong)size;
        // A truncate to the size the file has, with no time to set (truncate(2): do_truncate without time attributes),
        // changes no time (xfs_setattr_size sets them only when the size moves); every other change sets the ctime.
        bool sameSizeTruncate = changes is { Size: not null, Uid: null, Gid: null } && !sizeChanged && atime is null && mtime is null;
        if (!sameSizeTruncate) update.Touch(now, modified: sizeChanged && mtime is null);
    }

    /// <summary>fsync / fdatasync: file data written so far reaches the disk, then the log is forced.</summary>
    public void Flush(ulong inode)
    {
        _ = inode;
        Sync();
    }

    /// <summary>What the log writer did so far (benchmarks report log traffic per operation from it).</summary>
    internal LogWriteStatistics LogStatistics => Writer().Log.Statistics;

    /// <summary>Checkpoints taken from the CIL so far (<see cref="LogStatistics"/> counts those written); for tests.</summary>
    internal long LogCheckpointsTaken => Writer().Log.CheckpointsTaken;

    /// <summary>
    /// A round of the periodic sync (<see cref="VolumeOpenOptions.SyncInterval"/>): <see cref="Sync"/> when anything
    /// changed since the last (the log holds committed items no checkpoint has written, or file data is held); false
    /// once the volume can no longer change (shut down, found corrupt, unmounted).
    /// </summary>
    /// <summary>Rounds the periodic sync has completed (0 without one); for tests.</summary>
    internal int PeriodicSyncRounds => _write?.PeriodicSync?.Rounds ?? 0;

    /// <summary>Writes that took up their file's kept mapping instead of loading the file's fork again.</summary>
    internal long WriteMappingsKept => _write?.WriteScratch.MappingsKept ?? 0;

    internal bool PeriodicSyncRound()
    {
        var w = _write;
        if (w is null || w.Unmounted || w.Shutdown.Reason is not null || w.Log.ShutdownReason is not null || !_mount.Health.IsHealthy) return false;
        if (w.Log.CilCount == 0 && w.Data.Count == 0) return true;
        Sync();
        return true;
    }

    /// <summary>sync(2): everything committed is durable (held file data written, the device flushed, the log forced).</summary>
    public void Sync()
    {
        var w = Writer();
        w.Data.WriteOut();
        w.Access.Data.Flush();
        w.Log.Force();
    }

    /// <summary>
    /// Clean unmount of a read-write open: the in-core counters go into the primary superblock (logged, as the kernel's
    /// xfs_log_sbcount), every change is written in place, and the log gets its unmount record.
    /// </summary>
    private void FinishWriting()
    {
        var w = _write;
        if (w is null || w.Unmounted) return;
        // No periodic round runs beside (or after) the unmount.
        w.PeriodicSync?.Dispose();
        using (w.Changes.Change())
        {
            w.Unmounted = true;
            try
            {
                // A volume shut down by a failed device write or flush is left as it is: its log's replay is what the disk holds.
                if (_mount.Health.IsHealthy && w.Log.ShutdownReason is null && w.Shutdown.Reason is null)
                {
                    // Holds end with the unmount: inodes unlinked while held are freed (and leave the unlinked lists).
                    lock (w.Holds) w.Holds.Clear();
                    // Every inode is inactivated at unmount: staged copy-on-write blocks and post-EOF blocks writes
                    // left go (xfs_inactive, xfs_reflink_cancel_cow_range, xfs_free_eofblocks).
                    foreach (ulong ino in w.CowStaging.Inodes()) CancelCowStaging(w, ino);
                    foreach (ulong ino in w.EofBlocks.Ascending()) InactivateEofBlocks(w, ino);
                    foreach (ulong orphan in w.Orphans.Ascending())
                    {
                        w.Orphans.Remove(orphan);
                        FreeOrphan(w, orphan);
                    }
                    LogSuperblockCounters(w);
                    w.Data.WriteOut();
                    w.Access.Data.Flush();
                    w.Log.Unmount();
                    w.Writeback.ReleaseCleanBuffers();
                }
            }
            finally
            {
                // A checkpoint still being written (of a volume not unmounted cleanly) finishes before the devices close.
                w.Log.Quiesce();
                w.Data.Dispose();
                w.Access.Dispose();
            }
        }
    }

    private void LogSuperblockCounters(VolumeWriteState w)
    {
        var sb = _mount.Superblock;
        using var tx = Begin(w, TransactionKind.Sb);
        var verifier = new SuperblockBufferVerifier(sb);
        var buffer = tx.Read(0, sb.SectorSize, 0, verifier, verifier.ForWrite(), BufType.Superblock);
        LogCounters(w, tx, buffer);
        tx.Commit();
    }

    /// <summary>The in-core inode and free block counters into the primary superblock <paramref name="buffer"/> joined to <paramref name="tx"/>.</summary>
    private static void LogCounters(VolumeWriteState w, Transaction tx, MetadataBuffer buffer)
    {
        var s = buffer.Contents.AsSpan();
        BinaryPrimitives.WriteUInt64BigEndian(s[SuperblockView.OffIcount..], (ulong)w.InodeCount);
        BinaryPrimitives.WriteUInt64BigEndian(s[SuperblockView.OffIfree..], (ulong)w.FreeInodes);
        tx.LogRange(buffer, SuperblockView.OffIcount, SuperblockView.OffIfree + 7);
        w.FileSpace.Allocator.LogSuperblockCounters(tx);
    }

    /// <summary>After a commit: when the cache pins too much dirty metadata, write everything back so it may be dropped.</summary>
    private void LimitPinnedMetadata(VolumeWriteState w)
    {
        if (_mount.Buffers.DelayedWriteCount * 4096L < VolumeWriteState.PinnedBytesLimit) return;
        w.Log.PushAll();
        w.Writeback.ReleaseCleanBuffers();
    }
}

public sealed partial class XfsVolume
{
    /// <summary>
    /// Truncate down: the size moves to <paramref name="size"/> first (the tail of the new last block zeroed, so a
    /// later extension reads zeros), then the blocks wholly past the new EOF go back to free space, a bounded number of
    /// extents per transaction (a crash in between leaves blocks past EOF, which is consistent).
    /// </summary>
    private InodeAttributes Truncate(VolumeWriteState w, Inode current, long size, AttributeChanges changes)
    {
        var sb = _mount.Superblock;
        long blockEnd = (size + sb.BlockSize - 1) & ~((long)sb.BlockSize - 1);
        if (size % sb.BlockSize != 0)
        {
            ZeroPartialBlocks(w, current, size, Math.Min(blockEnd, (long)current.Size));
            // Zeroing a shared block copies it on write, which changes the mapping.
            current = _inodes.Get(current.Number);
        }
        using (var tx = Begin(w, TransactionKind.Itruncate))
        {
            var update = new InodeUpdate(current, sb);
            Apply(update, changes);
            update.Log(tx, _inodes);
            tx.Commit();
        }
        ShrinkInSteps(w, current.Number, (ulong)(blockEnd >> sb.BlockLog));
        AfterCommit(w);
        return _inodes.Get(current.Number).Attributes;
    }
}

/// <summary>
/// What an online change of the data section's size works on, with every other change to the volume excluded and
/// every committed change written in place (the device holds the current metadata; the cache holds no AG header,
/// free-space tree block or superblock the change could make stale). Its transactions go through
/// <see cref="Log"/>, the volume's own log.
/// </summary>
public sealed class QuiescedVolume
{
    private readonly MountContext _mount;

    internal QuiescedVolume(IBlockDevice data, IBlockDevice? log, Superblock superblock, MountedLog mountedLog, MountContext mount,
        Allocation.AgAllocator allocator)
    {
        Data = data;
        LogDevice = log;
        Superblock = superblock;
        Log = mountedLog;
        _mount = mount;
        Allocator = allocator;
    }

    public IBlockDevice Data { get; }
    public IBlockDevice? LogDevice { get; }
    /// <summary>The in-core superblock: the geometry before the change.</summary>
    public Superblock Superblock { get; }
    public MountedLog Log { get; }
    /// <summary>The volume's space allocator (its committed state is what the device holds).</summary>
    internal Allocation.AgAllocator Allocator { get; }

    /// <summary>A transaction through the volume's buffer cache and log (for changes the allocator makes).</summary>
    internal Transaction BeginTransaction(int logReservationBytes) => new(_mount, Log, logReservationBytes);
}

/// <summary>What <see cref="XfsVolume.ChangeDataSection{T}"/>'s change returns: its result and the new geometry and inode limit.</summary>
public readonly record struct DataSectionChange<T>(T Result, ulong DataBlocks, uint AgCount, int ImaxPct);

public sealed partial class XfsVolume
{
    /// <summary>
    /// Runs an online change of the data section (xfs_growfs on a mounted volume: a grow, a shrink of the last AG's
    /// free tail, a new imaxpct): holding the change lock exclusively, the in-core counters go to the primary superblock and
    /// everything committed is written in place; then <paramref name="change"/> writes any new AG headers and commits
    /// its transaction through this volume's log; that is written in place too, the cached metadata it may have made
    /// stale is dropped, and the in-core geometry follows: the allocator's per-AG state (the longer or shorter last
    /// AG, the new AGs, the free count), then the superblock's size and imaxpct (which the allocator, inode allocator,
    /// statfs and the verifiers read), the inode limit, then <see cref="Info"/>.
    /// A change that throws leaves the in-core geometry as it was (it must then have committed nothing).
    /// </summary>
    public T ChangeDataSection<T>(Func<QuiescedVolume, DataSectionChange<T>> change)
    {
        ArgumentNullException.ThrowIfNull(change);
        var w = Writer();
        using (w.Changes.Change())
        {
            if (w.Unmounted) throw new ObjectDisposedException(nameof(XfsVolume));
            var sb = _mount.Superblock;
            Quiesce(w, logCounters: true);
            var outcome = change(new QuiescedVolume(w.Access.Data, w.Access.Log, sb, w.Log, _mount, w.FileSpace.Allocator));
            if (outcome.DataBlocks == sb.DataBlocks && outcome.AgCount == sb.AgCount && outcome.ImaxPct == sb.ImaxPct) return outcome.Result;
            Quiesce(w, logCounters: false);
            w.FileSpace.Allocator.Resized(outcome.AgCount);
            sb.Resized(outcome.DataBlocks, outcome.AgCount, outcome.ImaxPct);
            w.MaxInodes = VolumeWriteState.MaxInodesOf(sb, wholeChunks: false);
            _info = _info with
            {
                DataBlocks = outcome.DataBlocks,
                AgCount = outcome.AgCount,
                FreeBlocks = (ulong)Math.Max(0, w.FileSpace.Allocator.FreeBlocks),
            };
            return outcome.Result;
        }
    }

    /// <summary>
    /// Runs <paramref name="action"/> on the volume as its device holds it, with every other request to the volume
    /// held off meanwhile (holding the change lock exclusively, which reads on a read-write open share): the in-core counters are
    /// logged into the primary superblock, everything committed is written in place and made durable, and cached
    /// metadata is dropped first, so the device holds exactly the volume's current, consistent metadata. The log has
    /// no unmount record (the volume stays mounted); everything in it is also in place. <paramref name="action"/> must
    /// only read (a check, a dry run); changes go through <see cref="ChangeDataSection{T}"/>.
    /// </summary>
    public T WhileQuiesced<T>(Func<QuiescedVolume, T> action)
    {
        ArgumentNullException.ThrowIfNull(action);
        var w = Writer();
        using (w.Changes.Change())
        {
            if (w.Unmounted) throw new ObjectDisposedException(nameof(XfsVolume));
            Quiesce(w, logCounters: true);
            return action(new QuiescedVolume(w.Access.Data, w.Access.Log, _mount.Superblock, w.Log, _mount, w.FileSpace.Allocator));
        }
    }

    /// <summary>
    /// The size of the device the volume is on, in bytes; with <paramref name="refresh"/> asked of the file or disk
    /// again (an image file extended since the open counts: what an online grow can grow into).
    /// </summary>
    public long DeviceLength(bool refresh)
    {
        ThrowIfDisposed();
        return refresh ? _device.RefreshLength() : _device.Length;
    }

    /// <summary>
    /// Every committed change written in place and made durable, the log's tail at its head, and every cached buffer
    /// that can be dropped dropped (so later reads see what a change made on the device). Under <see cref="VolumeWriteState.Changes"/>.
    /// </summary>
    private void Quiesce(VolumeWriteState w, bool logCounters)
    {
        if (logCounters) LogSuperblockCounters(w);
        w.Data.WriteOut();
        w.Access.Data.Flush();
        w.Log.PushAll();
        w.Writeback.ReleaseCleanBuffers();
        _mount.Buffers.Clear();
    }
}

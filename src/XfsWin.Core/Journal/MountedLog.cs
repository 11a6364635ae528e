using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>Options of the log writer.</summary>
public sealed record MountedLogOptions
{
    /// <summary>h_size (the kernel's logbsize): 0 = max(32 KiB, log stripe unit); up to 256 KiB.</summary>
    public int RecordSize { get; init; }
    /// <summary>CIL size that triggers a checkpoint; 0 = an eighth of the log (XLOG_CIL_SPACE_LIMIT).</summary>
    public long CheckpointThresholdBytes { get; init; }
    /// <summary>First checkpoint tid; later ones count up from it (0 = derived from the head LSN).</summary>
    public uint FirstTid { get; init; }
    /// <summary>
    /// The file system UUID the records written carry (h_fs_uuid); null = the superblock's. A UUID change
    /// opens the log of the old UUID and appends its unmount record with the new one, so the head the kernel
    /// finds at mount names the volume it mounts.
    /// </summary>
    public Guid? RecordUuid { get; init; }

    /// <summary>
    /// Runs under the log's lock before a checkpoint's items are taken: starts the file data the checkpoint's
    /// transactions map (and that is still held in memory) on its way to the device, and returns what the thread that
    /// writes the checkpoint calls before the checkpoint's first record, to wait until that data is written (null:
    /// nothing to wait for). The pre-flush of the commit record then makes the data durable first (data before the
    /// metadata that exposes it). Taking the checkpoint does not wait for the device.
    /// </summary>
    public Func<Action?>? BeforeCheckpoint { get; init; }

    /// <summary>
    /// Runs under the log's lock with the (daddr, image) of a buffer item the CIL relogged (see
    /// <see cref="CommittedItemList"/>), or of an AIL item a newer checkpoint of the same buffer replaced: the array the
    /// item held until then, which nothing in the log references any more (the buffer published newer bytes since, or
    /// the change relogging it is about to: its items reach the CIL before it publishes); the buffer cache takes it back
    /// for the buffer's later private copies.
    /// </summary>
    public Action<long, byte[]>? ImageReleased { get; init; }
}

/// <summary>Counters of what the log writer did.</summary>
public sealed record LogWriteStatistics(long Transactions, long Checkpoints, long Records, long BlocksWritten, long Wraps,
    long AilPushes, long ItemsWrittenBack, long Forces, long IntentsRelogged = 0, long Whiteouts = 0);

/// <summary>
/// The log of a mounted volume, written as the kernel writes it (delayed logging). Transactions reserve log space
/// on the grant heads, commit their items into the CIL (<see cref="CommittedItemList"/>), and a checkpoint writes
/// the CIL as one log transaction (start op, transaction header, one op per item region, commit op) into records
/// at the head. Checkpointed items enter the AIL (<see cref="ActiveItemList"/>) at the checkpoint's start LSN; when
/// the log runs short of space the AIL is pushed (items written in place through <see cref="ILogWriteback"/>, a
/// flush, then the tail moves). A log force writes the CIL and makes its commit record durable; unmount forces,
/// writes everything back and appends an unmount record.
/// <para>
/// Grant heads, in 512-byte blocks counted from the cycle the log was opened in: the write head is the physical
/// head; the reserve head is the write head plus every reservation still held (open transactions and the CIL's).
/// A reservation is granted only while reserve head + reservation ≤ tail + log size, so the head never overwrites
/// the tail. Ordering: the data device is flushed before the tail moves (after writeback), the records of a
/// checkpoint are durable before the record holding its commit op is written, and that record is flushed (FUA).
/// </para>
/// <para>
/// Checkpoints are written behind the committing threads, as the kernel's CIL push work writes them: the commit that
/// fills the CIL takes it whole (after the file data its transactions map is written out) and queues the checkpoint
/// to a thread-pool worker; commits go on into the emptied CIL while the worker formats the items and writes the
/// records. One checkpoint is written at a time, in the order they were taken (the sequence numbers), so a checkpoint
/// is durable only after every earlier one. A checkpoint taken while another is being written waits for it; a thread
/// that needs one written (a log force, a commit finding the previous checkpoint not yet started, a grant short of log
/// space) writes it itself instead of waiting for the worker. While a checkpoint is written its blocks already count as
/// written for log space (the accounted head is past them, its reservation given back) and the tail cannot pass its
/// start. A failed checkpoint shuts the log down.
/// </para>
/// <para>
/// A reservation short of log space waits, as the kernel's grant heads do, while transactions of other threads hold
/// reservations: their commits and cancels wake it, and their committed items can then be checkpointed and written back.
/// When only the asking thread's own open transactions stand in the way (a transaction begun inside another, on the
/// same thread), waiting would never end: the reservation fails with an error instead.
/// </para>
/// Thread safety: every public member takes the log lock; lock order is log lock, then writeback's locks. The lock is
/// released only by the thread writing a checkpoint, around its formatting and device writes, which touch the record
/// writer and the checkpoint's own items and nothing else the lock guards, and by a reservation waiting for log space.
/// A thread reserves before it locks what its change touches (the kernel's order), except that a roll's regrant waits
/// holding the transaction's locks: a thread holding a reservation must therefore never wait for a lock held by a thread
/// that is waiting for log space without one (none does: a begin waits before it locks anything).
/// </summary>
public sealed class MountedLog
{
    private readonly object _lock = new();
    private readonly LogArea _area;
    private readonly LogRecordWriter _writer;
    private readonly ILogWriteback _writeback;
    private readonly CommittedItemList _cil;
    // Given the image arrays the log no longer holds (see MountedLogOptions.ImageReleased); null when nobody takes them.
    private readonly Action<long, byte[]>? _imageReleased;
    // Images of AIL items the checkpoint being written replaces (kept list, empty between checkpoints).
    private readonly List<(long Daddr, byte[] Image)> _replacedImages = new();
    private readonly ActiveItemList _ail = new();
    private readonly uint _baseCycle;
    private readonly long _thresholdBytes;
    private readonly Func<Action?>? _beforeCheckpoint;
    private long _outstandingBlocks;
    // The part of _outstandingBlocks open transactions hold, by the managed thread that began each (the rest is the CIL's
    // and the taken checkpoint's): what tells a reservation whether waiting for other threads can free log space.
    private readonly Dictionary<int, long> _heldByThread = new();
    // Reservations waiting for log space (woken by commits, cancels, checkpoints and shutdown).
    private int _grantWaiters;
    // The checkpoint being written: its start (the tail cannot pass it) while its records go out.
    private ulong? _checkpointStartLsn;
    // The checkpoint taken from the CIL and not yet being written, and whether one is being written (by the worker or by
    // a thread that needed it done). At most one of each: a checkpoint is taken only when none is pending.
    private TakenCheckpoint? _pending;
    private bool _writing;
    // The regions of the checkpoint being written and the memory its items format into; both the writing
    // checkpoint's alone (_writing), reused by the next.
    private readonly List<ReadOnlyMemory<byte>> _checkpointRegions = [];
    private readonly LogFormatArena _formatArena = new();
    // Checkpoints taken from the CIL (the sequence of the newest) and checkpoints durable (_checkpoints, below).
    private long _taken;
    // The head for log space: the record writer's head, or while a checkpoint is written the head after it. Only the
    // writing thread touches the record writer, so nothing else reads its head or counters; they are published here.
    private ulong _headLsn;
    private long _headBlocks;
    private long _recordsWritten, _blocksWritten, _wraps;
    private uint _nextTid;
    private ulong _intentId;
    private long _transactions, _checkpoints, _ailPushes, _itemsWrittenBack, _forces;
    private bool _unmounted;

    /// <summary>A checkpoint taken from the CIL: its items, the log space they hold, its sequence, and the wait for the file data it maps.</summary>
    private sealed record TakenCheckpoint(List<JournalItem> Items, long ReservedBlocks, long Sequence, Action? DataWritten);

    private MountedLog(LogArea area, LogRecordWriter writer, ILogWriteback writeback, MountedLogOptions options)
    {
        _area = area;
        _writer = writer;
        _writeback = writeback;
        _baseCycle = writer.HeadCycle;
        _beforeCheckpoint = options.BeforeCheckpoint;
        var released = options.ImageReleased;
        _imageReleased = released;
        _cil = new CommittedItemList { ImageReleased = released is null ? null : (item, image) => released(item.Daddr, image) };
        _thresholdBytes = options.CheckpointThresholdBytes > 0 ? options.CheckpointThresholdBytes : (area.Blocks << LogArea.BBShift) / 8;
        _nextTid = options.FirstTid != 0 ? options.FirstTid : (uint)(writer.HeadLsn * 0x9E3779B97F4A7C15UL >> 32) | 1;
        _intentId = (writer.HeadLsn * 0xC2B2AE3D27D4EB4FUL) & 0xFFFFFFFF00000000UL;
        PublishHead();
    }

    /// <summary>Takes the record writer's head and counters as the published ones (by the writing thread, under the lock).</summary>
    private void PublishHead()
    {
        _headLsn = _writer.HeadLsn;
        _headBlocks = Absolute(_headLsn);
        _recordsWritten = _writer.RecordsWritten;
        _blocksWritten = _writer.BlocksWritten;
        _wraps = _writer.Wraps;
    }

    /// <summary>
    /// Opens the log for writing at its head. The log must be clean (unmounted, or replayed and marked clean): a dirty
    /// log may hold work only its replay finishes.
    /// </summary>
    public static MountedLog Open(LogArea area, Superblock sb, ILogWriteback writeback, MountedLogOptions? options = null)
    {
        options ??= new MountedLogOptions();
        if (!sb.IsV5 && !sb.HasLogV2) throw new XfsException(XfsError.Unsupported, "writing a version 1 log is not supported; the volume stays read-only");
        var pos = Scan(area, sb);
        if (IsDirty(pos))
            throw new XfsException(XfsError.Unsupported, "the log is dirty: replay it (mount with Linux, or xfswin recover) before writing to the volume");
        uint su = sb.LogStripeUnit > 1 ? sb.LogStripeUnit : 0;
        int roundoff = Math.Max(Math.Max((int)su, LogArea.BBSize), area.SectorBlocks << LogArea.BBShift);
        int recordSize = options.RecordSize > 0 ? options.RecordSize : Math.Max(LogRecordHeader.CycleSize, (int)su);
        recordSize = (recordSize + roundoff - 1) / roundoff * roundoff;
        long head = pos.Empty ? 0 : pos.HeadBlock;
        uint cycle = pos.Empty ? 1 : pos.HeadCycle;
        var writer = new LogRecordWriter(area, options.RecordUuid ?? sb.Uuid, recordSize, roundoff, head, cycle, pos.Empty ? -1 : pos.LastRecordBlock);
        return new MountedLog(area, writer, writeback, options);
    }

    /// <summary>
    /// Opens a log whose replay was just written in place (<see cref="InPlaceReplay.WriteReplayKeepingLog"/>) but that
    /// still holds <paramref name="intents"/> without done items: records are appended at the head found by the replay
    /// (same record size as the records between tail and head, which recovery reads with the tail's size), and the
    /// intents sit in the AIL at the LSNs of the transactions that logged them, holding the tail there until the done
    /// items that recovery logs for them are checkpointed, as in the kernel's recovery.
    /// </summary>
    public static MountedLog OpenAfterReplay(LogArea area, Superblock sb, ILogWriteback writeback, LogPosition position,
        IReadOnlyList<RecoveredIntent> intents, MountedLogOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(position);
        ArgumentNullException.ThrowIfNull(intents);
        options ??= new MountedLogOptions();
        if (!sb.IsV5 && !sb.HasLogV2) throw new XfsException(XfsError.Unsupported, "writing a version 1 log is not supported; the volume stays read-only");
        uint su = sb.LogStripeUnit > 1 ? sb.LogStripeUnit : 0;
        int roundoff = Math.Max(Math.Max((int)su, LogArea.BBSize), area.SectorBlocks << LogArea.BBShift);
        int recordSize = position.RecordSize > 0 ? position.RecordSize : Math.Max(LogRecordHeader.CycleSize, (int)su);
        var writer = new LogRecordWriter(area, options.RecordUuid ?? sb.Uuid, recordSize, roundoff, position.HeadBlock, position.HeadCycle,
            position.LastRecordBlock);
        var log = new MountedLog(area, writer, writeback, options);
        foreach (var intent in intents)
        {
            var item = intent.Item;
            log._ail.Insert(item, intent.Lsn);
            log._reservedIds.Add(intent.Id);
        }
        return log;
    }

    /// <summary>True when the log holds work only a replay finishes (what <see cref="Open"/> refuses). Reads only.</summary>
    public static bool NeedsReplay(LogArea area, Superblock sb) => IsDirty(Scan(area, sb));

    private static LogPosition Scan(LogArea area, Superblock sb) =>
        LogScanner.Find(new LogReader(area, sb.Uuid), v2: true, crcFilesystem: sb.IsV5);

    private static bool IsDirty(LogPosition pos) => !pos.Clean && pos.TailBlock != pos.HeadBlock;

    public LogArea Area => _area;

    /// <summary>
    /// The volume's quota accounting, when its superblock has quota accounting on: every transaction on this log charges
    /// its inode changes to the dquots through it (set once, right after the log opens, before any transaction).
    /// </summary>
    public IDquotAccounting? Dquots { get; set; }
    public int RecordSize => _writer.RecordSize;
    public int HeaderBlocks => _writer.HeaderBlocks;

    /// <summary>The LSN the next record will carry.</summary>
    public ulong HeadLsn { get { lock (_lock) return _headLsn; } }

    /// <summary>The tail: the oldest checkpoint not yet all in place, or the head when the AIL is empty.</summary>
    public ulong TailLsn { get { lock (_lock) return CurrentTailLsn(); } }

    public int AilCount { get { lock (_lock) return _ail.Count; } }
    public int CilCount { get { lock (_lock) return _cil.Count; } }

    public LogWriteStatistics Statistics
    {
        get
        {
            lock (_lock)
                return new LogWriteStatistics(_transactions, _checkpoints, _recordsWritten, _blocksWritten, _wraps,
                    _ailPushes, _itemsWrittenBack, _forces, _relogs, _cil.Whiteouts);
        }
    }

    private ulong CurrentTailLsn() => _ail.MinimumLsn ?? _checkpointStartLsn ?? _headLsn;

    /// <summary>A position in blocks counted from block 0 of the cycle the log was opened in.</summary>
    private long Absolute(ulong lsn) => ((long)Lsn.Cycle(lsn) - _baseCycle) * _area.Blocks + Lsn.Block(lsn);

    private long WriteHead => _headBlocks;
    private long FreeBlocks => _area.Blocks - (WriteHead - Absolute(CurrentTailLsn()));

    /// <summary>
    /// Log space a transaction whose items take <paramref name="logReservationBytes"/> needs, in blocks, with the
    /// overhead the kernel adds (xfs_log_calc_unit_res): start and transaction-header ops, an op header for each
    /// record the data may be split over, those records' headers, a record for the commit, and two roundoffs.
    /// </summary>
    public int UnitReservationBlocks(int logReservationBytes)
    {
        long bytes = logReservationBytes + 2L * LogOpHeader.Size + TransactionHeader.Size;
        int space = _writer.DataCapacity;
        long records = Math.Max(1, (bytes + space - 1) / space);
        bytes += records * LogOpHeader.Size;
        while ((bytes + space - 1) / space > records) { bytes += LogOpHeader.Size; records++; }
        bytes += (records + 1) * ((long)_writer.HeaderBlocks << LogArea.BBShift);
        bytes += 2L * _writer.Roundoff;
        return checked((int)((bytes + LogArea.BBSize - 1) >> LogArea.BBShift));
    }

    /// <summary>
    /// Starts a transaction holding <paramref name="logReservationBytes"/> of log space (the operation's tr_logres) for
    /// each of <paramref name="logCount"/> parts: a permanent reservation (tr_logcount above one) is granted for that many
    /// rolls up front, as the kernel's xfs_log_reserve does, and <see cref="MetadataTransaction.Roll"/> regrants a part
    /// when they are used up.
    /// </summary>
    public MetadataTransaction Begin(int logReservationBytes, int logCount = 1)
    {
        int blocks = Reserve(logReservationBytes, ref logCount);
        return new MetadataTransaction(this, blocks, logCount, Environment.CurrentManagedThreadId);
    }

    /// <summary>Reservations waiting for other threads' transactions to give log space back (for tests).</summary>
    internal int GrantWaiters { get { lock (_lock) return _grantWaiters; } }

    /// <summary>
    /// Reserves what <see cref="Begin"/> reserves, for a transaction of the calling thread; returns the blocks of one
    /// part, and in <paramref name="logCount"/> the parts granted up front.
    /// </summary>
    internal int Reserve(int logReservationBytes, ref int logCount)
    {
        if (logReservationBytes <= 0) throw new ArgumentOutOfRangeException(nameof(logReservationBytes));
        if (logCount <= 0) throw new ArgumentOutOfRangeException(nameof(logCount));
        int blocks = UnitReservationBlocks(logReservationBytes);
        lock (_lock)
        {
            ThrowIfUnmounted();
            if ((long)blocks * logCount >= _area.Blocks / 2)
            {
                // A count that does not fit is granted a part at a time (the kernel's logs are sized for it).
                if (blocks >= _area.Blocks / 2)
                    throw new XfsException(XfsError.Unsupported, $"a transaction reservation of {logReservationBytes} bytes does not fit a log of {_area.Blocks} blocks");
                logCount = 1;
            }
            Grant((long)blocks * logCount, Environment.CurrentManagedThreadId);
        }
        return blocks;
    }

    /// <summary>
    /// Waits (pushing the AIL, writing checkpoints, waiting for other threads' transactions) until <paramref name="blocks"/>
    /// more can be reserved, then reserves them for a transaction of thread <paramref name="thread"/>.
    /// </summary>
    private void Grant(long blocks, int thread)
    {
        // Grant only while the reserve head stays behind the tail by a whole log.
        while (WriteHead + _outstandingBlocks + blocks >= Absolute(CurrentTailLsn()) + _area.Blocks)
        {
            if (MakeSpaceGuarded(blocks)) continue;
            if (!OtherThreadsHoldReservations(thread))
                throw new XfsException(XfsError.IoError,
                    $"the log cannot free {blocks} blocks for a transaction: {_ail.PinnedCount} intent item(s) hold its tail" +
                    (HeldBy(thread) > 0 ? $" and this thread's open transactions hold {HeldBy(thread)} blocks" : ""));
            _grantWaiters++;
            try
            {
                Monitor.Wait(_lock);
            }
            finally
            {
                _grantWaiters--;
            }
            ThrowIfUnmounted();
        }
        _outstandingBlocks += blocks;
        AddHeld(thread, blocks);
    }

    private long HeldBy(int thread) => _heldByThread.GetValueOrDefault(thread);

    private bool OtherThreadsHoldReservations(int thread)
    {
        foreach (var (owner, held) in _heldByThread)
            if (owner != thread && held > 0) return true;
        return false;
    }

    /// <summary>Counts <paramref name="blocks"/> (negative: given back or moved to the CIL) as held by <paramref name="thread"/>'s transactions.</summary>
    private void AddHeld(int thread, long blocks)
    {
        if (blocks == 0) return;
        ref long held = ref System.Runtime.InteropServices.CollectionsMarshal.GetValueRefOrAddDefault(_heldByThread, thread, out _);
        held += blocks;
        // Wakes reservations waiting for log space when a transaction gives some back.
        if (blocks < 0 && _grantWaiters > 0) Monitor.PulseAll(_lock);
    }

    // Apart from Grant so that a grant with room (every transaction's begin) creates no closure.
    private bool MakeSpaceGuarded(long blocks)
    {
        bool freed = false;
        Guarded(() => freed = MakeSpace(blocks));
        return freed;
    }

    /// <summary>
    /// Frees log space: push the AIL; when that cannot move the tail (nothing to write back, or only intents waiting for
    /// their done items hold it), checkpoint the CIL, whose done items release intents and whose reservation becomes
    /// written blocks. False when neither can make progress.
    /// </summary>
    private bool MakeSpace(long wantedBlocks)
    {
        // A checkpoint taken or being written: once written, its items can be pushed and the CIL taken next.
        if (_pending is not null || _writing)
        {
            DrainLocked();
            return true;
        }
        ulong tailBefore = CurrentTailLsn();
        if (!_ail.IsEmpty)
        {
            PushAil(wantedBlocks + _outstandingBlocks);
            if (CurrentTailLsn() != tailBefore) return true;
        }
        if (!_cil.IsEmpty)
        {
            TakeCheckpointLocked();
            DrainLocked();
            return true;
        }
        return false;
    }

    /// <summary>
    /// Checkpoints written and durable so far: the sequence of the last checkpoint whose commit record is on disk.
    /// A transaction committed with sequence <c>s</c> (<see cref="MetadataTransaction.CommitSequence"/>) is durable
    /// once this is at least <c>s</c> (the kernel's CIL sequence, as busy extents wait for it).
    /// </summary>
    public long DurableSequence { get { lock (_lock) return _checkpoints; } }

    /// <summary>Checkpoints taken from the CIL so far, written or not (at least <see cref="DurableSequence"/>).</summary>
    internal long CheckpointsTaken { get { lock (_lock) return _taken; } }

    /// <summary>
    /// Waits until no checkpoint is taken or being written, writing a taken one itself when no thread has started it
    /// (under the lock, which a write releases around its device I/O). Throws when a checkpoint failed (the log is then
    /// shut down).
    /// </summary>
    private void DrainLocked()
    {
        WriteTakenLocked(untilIdle: true);
        ThrowIfUnmounted();
    }

    /// <summary>
    /// Returns once no checkpoint is taken (and with <paramref name="untilIdle"/> none is being written either), writing
    /// a taken one itself whenever none is being written, waiting otherwise.
    /// </summary>
    private void WriteTakenLocked(bool untilIdle)
    {
        while (_pending is not null || (untilIdle && _writing))
        {
            if (_writing) Monitor.Wait(_lock);
            else WritePendingLocked();
        }
    }

    /// <summary>
    /// Takes the CIL whole as the next checkpoint (the kernel's CIL push), once the file data its transactions map is on
    /// its way to the device (<see cref="MountedLogOptions.BeforeCheckpoint"/>; the checkpoint's writer waits for it);
    /// under the lock. A checkpoint taken before is written first (the lock may be released meanwhile). False when the
    /// CIL was empty by then (nothing taken).
    /// </summary>
    private bool TakeCheckpointLocked()
    {
        WriteTakenLocked(untilIdle: false);
        ThrowIfUnmounted();
        if (_cil.IsEmpty) return false;
        // The CIL cannot change while the lock is held: the data the hook starts writing covers every transaction in it.
        Action? dataWritten = _beforeCheckpoint is { } hook ? StartData(hook) : null;
        long reserved = _cil.ReservedBlocks;
        _pending = new TakenCheckpoint(_cil.TakeAll(), reserved, ++_taken, dataWritten);
        return true;
    }

    private Action? StartData(Func<Action?> hook)
    {
        Action? wait = null;
        Guarded(() => wait = hook());
        return wait;
    }

    /// <summary>Queues the taken checkpoint to a thread-pool worker (the commit that took it goes on).</summary>
    private void QueueWriter() => ThreadPool.UnsafeQueueUserWorkItem(static log => log.WriteQueued(), this, preferLocal: false);

    private void WriteQueued()
    {
        lock (_lock)
        {
            try
            {
                while (_pending is not null && !_writing) WritePendingLocked();
            }
            catch (Exception)
            {
                // Recorded as the log's shutdown reason: the next commit, force or unmount reports it.
            }
        }
    }

    /// <summary>
    /// Hands a transaction part's items to the CIL; returns the sequence of the checkpoint that will carry them. The
    /// part's unit of reservation is used: what its items take moves to the CIL, the rest is given back. With
    /// <paramref name="regrant"/> the transaction goes on (a roll) and a further unit is reserved when the ones granted
    /// up front are used up; otherwise every unit still held is given back.
    /// </summary>
    internal long Commit(MetadataTransaction tx, List<JournalItem> items, bool regrant)
    {
        lock (_lock)
        {
            ThrowIfUnmounted();
            // The CIL's items go out in the next checkpoint; an empty transaction needs nothing written.
            long sequence = items.Count > 0 ? _taken + 1 : _taken;
            long usedBlocks = 0;
            if (items.Count > 0)
            {
                // The CIL keeps log space for what its merged items will take in the checkpoint: an item logged again
                // takes only what it grew by, as the kernel's CIL steals from a transaction's ticket only the change in
                // its formatted size. The rest of this part's unit goes back.
                _cil.Commit(items);
                usedBlocks = Math.Clamp(CheckpointBlocks(_cil.FormattedBytes) - _cil.ReservedBlocks, 0, tx.ReservedBlocks);
                _cil.Reserve(usedBlocks);
            }
            _outstandingBlocks -= tx.ReservedBlocks - usedBlocks;
            long givenUp = tx.ReservedBlocks;
            _transactions++;
            tx.UnitsLeft--;
            if (!regrant)
            {
                _outstandingBlocks -= (long)tx.UnitsLeft * tx.ReservedBlocks;
                givenUp += (long)tx.UnitsLeft * tx.ReservedBlocks;
                tx.UnitsLeft = 0;
            }
            AddHeld(tx.OwnerThread, -givenUp);
            if (_cil.FormattedBytes >= _thresholdBytes && TakeCheckpointLocked()) QueueWriter();
            if (regrant && tx.UnitsLeft == 0)
            {
                Grant(tx.ReservedBlocks, tx.OwnerThread);
                tx.UnitsLeft = 1;
            }
            return sequence;
        }
    }

    internal void Cancel(MetadataTransaction tx)
    {
        lock (_lock)
        {
            _outstandingBlocks -= (long)tx.UnitsLeft * tx.ReservedBlocks;
            AddHeld(tx.OwnerThread, -(long)tx.UnitsLeft * tx.ReservedBlocks);
            tx.UnitsLeft = 0;
        }
    }

    /// <summary>Log force (fsync): writes the CIL as a checkpoint and returns once its commit record is durable.</summary>
    public void Force()
    {
        lock (_lock)
        {
            ThrowIfUnmounted();
            _forces++;
            if (!_cil.IsEmpty) TakeCheckpointLocked();
            DrainLocked();
        }
    }

    /// <summary>Writes back every checkpointed item and moves the tail to the head (what unmount and freeze do).</summary>
    public void PushAll()
    {
        lock (_lock)
        {
            ThrowIfUnmounted();
            if (!_cil.IsEmpty) TakeCheckpointLocked();
            DrainLocked();
            Guarded(() => PushAil(long.MaxValue));
        }
    }

    /// <summary>
    /// Waits for the checkpoints taken to be written (none is left half written when the devices close); a failure is
    /// left recorded as the shutdown reason. For closing a volume that is not unmounted cleanly.
    /// </summary>
    public void Quiesce()
    {
        lock (_lock)
        {
            try
            {
                DrainLocked();
            }
            catch (Exception) when (_shutdown is not null || _unmounted)
            {
                // Reported by the shutdown reason.
            }
        }
    }

    /// <summary>Clean unmount: force the log, write everything back (AIL empty), then append the unmount record and flush.</summary>
    public void Unmount()
    {
        lock (_lock)
        {
            ThrowIfUnmounted();
            if (!_cil.IsEmpty) TakeCheckpointLocked();
            DrainLocked();
            Guarded(() =>
            {
                PushAil(long.MaxValue);
                EnsureSpace(_writer.BlocksFor(UnmountRecord.Size));
                var payload = _writer.AppendOp(UnmountRecord.Tid, UnmountRecord.PayloadSize, LogOpHeader.ClientLog, LogOpHeader.FlagUnmount);
                payload.Clear();
                BinaryPrimitives.WriteUInt16LittleEndian(payload, UnmountRecord.Magic);
                _writer.Submit(_writer.HeadLsn);
                PublishHead();
                _area.Device.Flush();
            });
            _unmounted = true;
            Monitor.PulseAll(_lock);
        }
    }

    private void ThrowIfUnmounted()
    {
        if (_unmounted) throw new ObjectDisposedException(nameof(MountedLog), "the log was unmounted");
        if (_shutdown is not null)
            throw new XfsException(XfsError.IoError,
                $"the volume was shut down ({_shutdown.Message}); nothing more is written. " +
                "Unmount it; Linux (or xfswin) replays its log at the next mount.");
    }

    private Exception? _shutdown;

    /// <summary>
    /// Stops the log (the kernel's xfs_force_shutdown): a chain of transactions failed half way, leaving intents in the
    /// log without done items; nothing more is written, and the next mount's recovery finishes them.
    /// </summary>
    public void Shutdown(Exception reason)
    {
        ArgumentNullException.ThrowIfNull(reason);
        lock (_lock)
        {
            _shutdown ??= reason;
            // Reservations waiting for log space give up.
            Monitor.PulseAll(_lock);
        }
    }

    /// <summary>Why the log shut down (a device write or flush failed), or null while it runs.</summary>
    public Exception? ShutdownReason { get { lock (_lock) return _shutdown; } }

    /// <summary>
    /// Runs log or writeback I/O; a failure shuts the log down as the kernel's xfs_force_shutdown does: what is on
    /// disk is whatever the log covers, and no further transaction or writeback happens.
    /// </summary>
    private void Guarded(Action io)
    {
        try
        {
            io();
        }
        catch (Exception e) when (e is not XfsCorruptionException and not InvalidOperationException)
        {
            _shutdown ??= e;
            Monitor.PulseAll(_lock);
            ThrowIfUnmounted();
            throw;
        }
    }

    /// <summary>
    /// Writes the AIL back in LSN order until at least <paramref name="wantedBlocks"/> are free beyond the head (or
    /// the AIL is empty, or only intents are left in front), then flushes and moves the tail. Intents cannot be written
    /// back: the tail stops at the oldest one.
    /// </summary>
    private void PushAil(long wantedBlocks)
    {
        if (_ail.IsEmpty) return;
        ulong? pinned = _ail.MinimumPinnedLsn;
        // Free space once every LSN up to a candidate is written back: the tail becomes the next LSN (or the head).
        ulong target = 0;
        var lsns = _ail.Lsns.ToList();
        for (int i = 0; i < lsns.Count; i++)
        {
            target = lsns[i];
            if (pinned is ulong p && target >= p) break;
            ulong nextTail = i + 1 < lsns.Count ? lsns[i + 1] : _checkpointStartLsn ?? _headLsn;
            long free = _area.Blocks - (WriteHead - Absolute(nextTail));
            long keep = Math.Max(_area.Blocks / 4, 256);
            if (wantedBlocks != long.MaxValue && free > wantedBlocks + Math.Min(keep, _area.Blocks / 2)) break;
        }
        var items = _ail.ItemsUpTo(target);
        if (items.Count == 0) return;
        _writeback.WriteBack(items);
        _writeback.Flush();
        _ail.RemoveWritten(items);
        _ailPushes++;
        _itemsWrittenBack += items.Count;
    }

    /// <summary>Makes sure <paramref name="blocks"/> can be written at the head without reaching the tail.</summary>
    private void EnsureSpace(long blocks)
    {
        if (blocks >= _area.Blocks) throw new XfsException(XfsError.Unsupported, $"a checkpoint of {blocks} blocks does not fit a log of {_area.Blocks} blocks");
        while (FreeBlocks <= blocks)
        {
            if (_ail.IsEmpty) throw new InvalidOperationException($"log space accounting: {blocks} blocks needed, {FreeBlocks} free and nothing to write back");
            ulong tail = CurrentTailLsn();
            PushAil(blocks);
            if (CurrentTailLsn() == tail)
                throw new InvalidOperationException($"log space accounting: {blocks} blocks needed, {FreeBlocks} free and {_ail.PinnedCount} intent(s) hold the tail");
        }
    }

    /// <summary>
    /// The LSN an intent still waiting for its done item should be logged again below, so that the tail can move on
    /// (the kernel's xfs_ail_get_push_target as xfs_defer_relog uses it): the tail plus a quarter of the log (at least
    /// 256 blocks), once less than that is free beyond the reserve head; null while the log has that much room.
    /// </summary>
    public ulong? RelogThreshold()
    {
        lock (_lock)
        {
            long tail = Absolute(CurrentTailLsn());
            long threshold = Math.Max(_area.Blocks / 4, 256);
            long free = _area.Blocks - (WriteHead + _outstandingBlocks - tail);
            if (free >= threshold) return null;
            long target = Math.Min(tail + threshold, WriteHead);
            return Lsn.Make((uint)(_baseCycle + target / _area.Blocks), (uint)(target % _area.Blocks));
        }
    }

    /// <summary>The LSN of the checkpoint an intent (or other item) is held in the AIL at; null while it is only in the CIL, or gone.</summary>
    public ulong? AilLsnOf(LogItemKey key)
    {
        lock (_lock) return _ail.LsnOf(key);
    }

    /// <summary>A fresh id for an intent item (the kernel uses the item's address; ids only need to differ while in the log).</summary>
    public ulong NextIntentId()
    {
        lock (_lock)
        {
            // Never the id of an intent recovery still holds: its done item would finish the wrong one.
            do _intentId++; while (_reservedIds.Contains(_intentId));
            return _intentId;
        }
    }

    private readonly HashSet<ulong> _reservedIds = new();
    private long _relogs;

    /// <summary>Counts an intent logged again to let the tail move (<see cref="LogWriteStatistics.IntentsRelogged"/>).</summary>
    internal void NoteRelog()
    {
        lock (_lock) _relogs++;
    }

    /// <summary>
    /// Log blocks a checkpoint of <paramref name="formattedBytes"/> (payloads and op headers) takes at most: with a record
    /// header for every 32 KiB of it (a sixty-fourth, doubled for op headers of regions split across records) and room
    /// for the start and commit records.
    /// </summary>
    private static long CheckpointBlocks(long formattedBytes) =>
        ((formattedBytes + formattedBytes / 32 + LogArea.BBSize - 1) >> LogArea.BBShift) + 2;

    /// <summary>
    /// Writes the taken checkpoint as one log transaction starting in a new record: START, the transaction header, every
    /// item's regions (split across records with CONTINUE / WAS_CONT op headers), COMMIT. Its items then enter the AIL
    /// at the checkpoint's start LSN. Called under the lock with a checkpoint taken and none being written; releases the
    /// lock around formatting and device writes. A failure shuts the log down (the checkpoint's items are lost to the
    /// log: nothing more may be written after them).
    /// </summary>
    private void WritePendingLocked()
    {
        var taken = _pending!;
        _pending = null;
        _writing = true;
        try
        {
            ThrowIfUnmounted();
            var items = taken.Items;
            _replacedImages.Clear();
            // A buffer, inode or dquot logged again while an older copy waits in the AIL moves to this checkpoint's LSN,
            // and the tail may then pass the older copy: this copy must carry every region the older one did (the
            // newest bytes of each), as the kernel's buffer and inode items keep their dirty regions until written back.
            for (int i = 0; i < items.Count; i++)
            {
                if (items[i] is not (BufferLogItem or InodeLogItem or DquotLogItem) || _ail.Find(items[i].Key) is not { } older) continue;
                if (older is BufferLogItem { IsCancel: true } || items[i] is BufferLogItem { IsCancel: true }) continue;
                var merged = older.Snapshot();
                merged.MergeNewer(items[i]);
                items[i] = merged;
                // The older image is left to the AIL item this one replaces: free once the insert below has replaced it
                // (until then a push of the AIL may write it back).
                if (_imageReleased is not null && older is BufferLogItem olderBuffer && merged is BufferLogItem mergedBuffer &&
                    olderBuffer.ImageArray is { Length: > 0 } olderImage && !ReferenceEquals(olderImage, mergedBuffer.ImageArray))
                    _replacedImages.Add((olderBuffer.Daddr, olderImage));
            }
            uint tid = _nextTid++;
            if (tid == 0 || tid == UnmountRecord.Tid) tid = _nextTid++;

            // Formatting reads only the checkpoint's own items (which no commit reaches any more) and the record writer.
            var regions = _checkpointRegions;
            regions.Clear();
            _formatArena.Reset();
            long blocks;
            Monitor.Exit(_lock);
            try
            {
                // The file data the checkpoint maps reaches the device before any of its records.
                taken.DataWritten?.Invoke();
                foreach (var item in items) item.Format(regions, _formatArena);
                _writer.BeginSimulation();
                EmitCheckpoint(tid, regions, 0, simulate: true);
                (blocks, _) = _writer.EndSimulation();
            }
            finally
            {
                Monitor.Enter(_lock);
            }
            EnsureSpace(blocks);

            // From here the checkpoint's blocks count as written: the accounted head moves past them and the reservation
            // that covered them is given back; the tail stays at or before the checkpoint's start until its items are in
            // the AIL. The tail its records carry is the one now: the real tail only moves on, and a record may name an
            // older tail than the real one (recovery then starts earlier), never a newer one.
            ulong start = _writer.HeadLsn;
            _checkpointStartLsn = start;
            ulong tail = CurrentTailLsn();
            _headBlocks = Absolute(start) + blocks;
            _outstandingBlocks -= taken.ReservedBlocks;
            Monitor.Exit(_lock);
            try
            {
                EmitCheckpoint(tid, regions, tail, simulate: false);
            }
            finally
            {
                Monitor.Enter(_lock);
            }
            if (Absolute(_writer.HeadLsn) != _headBlocks)
                throw new InvalidOperationException($"log space accounting: a checkpoint of {blocks} blocks from {Lsn.Format(start)} ended at {Lsn.Format(_writer.HeadLsn)}");
            PublishHead();
            _checkpointStartLsn = null;
            _checkpoints = taken.Sequence;

            List<BufferLogItem>? cancels = null;
            foreach (var item in items)
            {
                // An intent holds the tail until its done item is in the log; a done item has nothing to write back.
                if (item is IntentLogItem intent && IntentLogFormat.IntentOf(intent.ItemType) is var finished and not 0)
                    _ail.Remove(new LogItemKey(finished, (long)intent.Id, 0));
                else
                    _ail.Insert(item.Snapshot(), start);
                if (item is BufferLogItem { IsCancel: true } cancel) (cancels ??= new()).Add(cancel);
            }
            // Inodes of a released chunk (its clusters cancelled) have nothing left to write back.
            if (cancels is not null)
                foreach (var c in cancels) _ail.RemoveInodesIn(c.Daddr, c.LengthBB);
            // Nothing holds the images the replaced AIL items had: their buffers make later copies in them.
            foreach (var (daddr, image) in _replacedImages) _imageReleased!(daddr, image);
            _replacedImages.Clear();
        }
        catch (Exception e)
        {
            _shutdown ??= e;
            _checkpointStartLsn = null;
            if (e is XfsCorruptionException or InvalidOperationException) throw;
            ThrowIfUnmounted();
            throw;
        }
        finally
        {
            _checkpointRegions.Clear();
            _writing = false;
            Monitor.PulseAll(_lock);
        }
    }

    private void EmitCheckpoint(uint tid, List<ReadOnlyMemory<byte>> regions, ulong tailLsn, bool simulate)
    {
        int recordsOfCheckpoint = 0;
        void Next()
        {
            _writer.Submit(simulate ? 0 : tailLsn);
            recordsOfCheckpoint++;
        }

        _writer.AppendOp(tid, 0, LogOpHeader.ClientTransaction, LogOpHeader.FlagStart);
        var th = _writer.AppendOp(tid, TransactionHeader.Size, LogOpHeader.ClientTransaction, 0);
        BinaryPrimitives.WriteUInt32LittleEndian(th[TransactionHeader.OffMagic..], TransactionHeader.Magic);
        BinaryPrimitives.WriteUInt32LittleEndian(th[TransactionHeader.OffType..], TransactionHeader.TypeCheckpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(th[TransactionHeader.OffTid..], tid);
        BinaryPrimitives.WriteUInt32LittleEndian(th[TransactionHeader.OffNumItems..], (uint)regions.Count);

        foreach (var region in regions)
        {
            var payload = region.Span;
            // An op header is never split, and a first piece carries at least the item's type and size words.
            if (_writer.Remaining < LogOpHeader.Size + Math.Min(payload.Length, 4)) Next();
            if (LogOpHeader.Size + payload.Length <= _writer.Remaining)
            {
                payload.CopyTo(_writer.AppendOp(tid, payload.Length, LogOpHeader.ClientTransaction, 0));
                continue;
            }
            int piece = (_writer.Remaining - LogOpHeader.Size) & ~3;
            payload[..piece].CopyTo(_writer.AppendOp(tid, piece, LogOpHeader.ClientTransaction, LogOpHeader.FlagContinue));
            payload = payload[piece..];
            while (payload.Length > 0)
            {
                Next();
                piece = Math.Min(payload.Length, (_writer.Remaining - LogOpHeader.Size) & ~3);
                byte flags = (byte)(LogOpHeader.FlagWasContinued | (piece == payload.Length ? LogOpHeader.FlagEnd : LogOpHeader.FlagContinue));
                payload[..piece].CopyTo(_writer.AppendOp(tid, piece, LogOpHeader.ClientTransaction, flags));
                payload = payload[piece..];
            }
        }

        if (_writer.Remaining < LogOpHeader.Size) Next();
        // The commit op goes last, and the record holding it is written only after a flush (the kernel's
        // REQ_PREFLUSH on the commit record): the checkpoint's earlier records, and file data written before the
        // transactions that map it committed, are durable first; for an external log the data device is flushed
        // too. That record is then flushed itself, so a commit on disk means the whole checkpoint and its data are.
        if (!simulate)
        {
            if (_area.External) _writeback.Flush();
            _area.Device.Flush();
        }
        _writer.AppendOp(tid, 0, LogOpHeader.ClientTransaction, LogOpHeader.FlagCommit);
        if (simulate)
        {
            return; // EndSimulation submits the last record
        }
        _writer.Submit(tailLsn);
        _area.Device.Flush();
    }
}

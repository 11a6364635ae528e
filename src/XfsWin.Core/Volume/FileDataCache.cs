using System.Runtime.InteropServices;
using XfsWin.Device;

namespace XfsWin.Volume;

/// <summary>
/// File data on its way to the device, the role the page cache's dirty pages play for the kernel's XFS:
/// <list type="bullet">
/// <item>Small writes (up to <see cref="HeldWriteLimit"/>) are held in memory until the log writes the checkpoint whose
/// transactions map them: a 4 KiB file written by itself is then one of many blocks that go out together, sorted by
/// disk address and merged into large writes, instead of one synchronous device write per file.</item>
/// <item>Large writes are copied into one of <see cref="StreamSlots"/> aligned buffers and written by the cache's writer
/// thread while the caller goes on (write-behind): a sequential writer's next piece arrives while the last one is on its
/// way to the disk. With every buffer in flight a large write waits for the oldest to finish.</item>
/// <item>Held blocks handed off (<see cref="HandOff"/>) join the same queue as one batch: the writer thread writes them
/// sorted and merged, their arrays still in the batch until the writes returned.</item>
/// </list>
/// <para>
/// Ordering rule: every block held or in flight belongs to a transaction that mapped it and committed (or is committing)
/// into the CIL. Before a checkpoint is taken (<see cref="Journal.MountedLogOptions.BeforeCheckpoint"/>, under the log's
/// lock once the CIL is fixed) the held blocks are handed off, and the thread that writes the checkpoint waits for every
/// write queued up to then (<see cref="WaitFor"/>) before the checkpoint's first record: the data reaches the device
/// before the commit record, whose pre-flush makes it durable first, so no crash exposes a mapping without its data.
/// Every sync path calls <see cref="WriteOut"/> (every write in flight, then the held blocks, written before it returns)
/// before flushing the device. Writing data out early is always allowed (the blocks are allocated to the file), so the
/// cache also hands its blocks off when it holds <see cref="LimitBytes"/>, once the batch handed off before is written
/// (so that at most one batch of that size is in flight besides what is held).
/// </para>
/// <para>
/// Device order: writes in flight go out one at a time in the order they were queued; held blocks are written only
/// after every write queued before them finished (<see cref="WriteOut"/> and <see cref="WritePartial"/> wait, and a
/// batch handed off is queued behind them), and a large write drops the held blocks it covers. Blocks freed while a
/// write to them is in flight (a discard drops held blocks, not queued ones) stay busy (not reusable) until the freeing
/// transaction's checkpoint is on disk, and that checkpoint waits for the write first: a stale write lands before the
/// block can belong to anything else.
/// </para>
/// <para>
/// Reads of file data overlay what is in flight and held here (<see cref="Read"/>); blocks a committed change unmapped
/// are dropped (<see cref="Discard"/>) so that a file removed before its data went out costs no data write.
/// </para>
/// <para>
/// A failed write in flight is reported by the next call that waits for it or queues another (the device has already
/// shut the volume down, see <see cref="ShutdownOnFailureDevice"/>), and by every one after.
/// </para>
/// <para>
/// Held blocks live in <see cref="ShardCount"/> shards, each a table with its own lock, so that threads overwriting
/// different files copy into the cache side by side: a block belongs to the shard of its run of
/// 2^<see cref="ShardRunLog"/> neighbouring blocks (one write of a few neighbouring blocks takes one shard lock).
/// </para>
/// Thread safety and lock order: the queue lock (<c>_lock</c>: writes in flight, the writer thread, the counters) comes
/// before the shard locks, and shard locks are taken in ascending index; no shard lock is held while the queue lock is
/// taken. Both are leaf locks (taken inside the volume's change lock and inside the log's lock, never the other way
/// round). A short write takes only the shard locks of its blocks. The writer thread takes the queue lock only to pick
/// up and retire a write, never across a device call; a read takes it only around its device read (which runs
/// unlocked, so that concurrent reads reach the device together) and then the shard locks of its range.
/// </summary>
internal sealed class FileDataCache : IDisposable
{
    /// <summary>Writes at most this long are held; longer ones go to the device at once.</summary>
    public const int HeldWriteLimit = 64 << 10;
    /// <summary>Held bytes past which the cache writes itself out.</summary>
    public const long LimitBytes = 32L << 20;
    private const int WriteOutBufferSize = 1 << 20;
    /// <summary>Large writes in flight at most, each at most <see cref="StreamSlotSize"/> bytes.</summary>
    public const int StreamSlots = 4;
    public const int StreamSlotSize = 1 << 20;

    private readonly IBlockDevice _device;
    private readonly int _blockSize;
    private readonly int _blockLog;
    /// <summary>Held-block shards (a power of two).</summary>
    public const int ShardCount = 16;
    /// <summary>Runs of 2^this neighbouring blocks share a shard.</summary>
    public const int ShardRunLog = 4;

    private readonly object _lock = new();
    private readonly Shard[] _shards = new Shard[ShardCount];
    // Blocks held in all shards (changed under a shard lock, read without one).
    private int _heldCount;
    // Each shard keeps at most this many block arrays no longer held, for reuse: together twice what the cache can
    // hold at once (LimitBytes plus one held write), so a steady stream of small writes reuses the same arrays
    // checkpoint after checkpoint and allocates none, and what the shards retain is bounded.
    private readonly int _freeLimitPerShard;

    // Write-behind: writes queued for the writer thread, oldest first; an entry leaves the queue when its device
    // write has returned. Sequence numbers count queued writes; _completed is the last one retired.
    private readonly Queue<InFlightWrite> _inFlight = new();
    private readonly Stack<AlignedBuffer> _freeSlots = new();
    private int _slotsAllocated;
    private long _queued, _completed;
    // Counts the moves of data from memory to the device (retired writes, write-outs, partial writes), under _lock.
    private long _movedToDevice;
    private Exception? _writeFailure;
    // Write-outs waiting for the queue to empty; while there is one, nothing new is queued.
    private int _writeOutsDraining;
    private Thread? _writer;
    private bool _stopping;

    // A large write's piece in a slot (Buffer), or a batch of handed-off held blocks (Batch, Buffer null); Offset and
    // Length span the whole batch.
    private readonly record struct InFlightWrite(long Offset, long Length, AlignedBuffer? Buffer, HeldBatch? Batch, long Sequence);

    /// <summary>
    /// Held blocks handed off to the writer thread: the first <see cref="Count"/> block numbers ascending and their
    /// arrays, owned by the batch until its writes returned (then the block arrays go back to their shards for reuse,
    /// and the batch to the spares).
    /// </summary>
    private sealed class HeldBatch(int capacity)
    {
        public readonly long[] Blocks = new long[capacity];
        public readonly byte[][] Arrays = new byte[capacity][];
        public int Count;

        /// <summary>The index of the first block at or after <paramref name="block"/> (Count when none).</summary>
        public int FirstAtOrAfter(long block)
        {
            int i = Array.BinarySearch(Blocks, 0, Count, block);
            return i >= 0 ? i : ~i;
        }
    }

    // The sequence of the last batch handed off because the cache was full (0 none): the next one waits for it.
    private long _lastLimitBatch;
    // Batches written and emptied, for reuse (under _lock): a stream of hand-offs allocates no batch.
    private readonly Stack<HeldBatch> _spareBatches = new();
    private const int MaxSpareBatches = 2;
    // The buffer a batch's neighbouring blocks are merged in for one device write: the writer thread's, and a
    // write-out's (which runs under _lock once nothing is in flight, so never beside the writer thread's use).
    private AlignedBuffer? _batchBuffer;

    /// <summary>
    /// Held blocks by device block number (device byte offset >> block log), and arrays for reuse; under the shard's
    /// own monitor. Padded to 128 bytes, so that the monitors (in the object headers) of neighbouring shards, taken
    /// by different threads on every short write, never share a cache line.
    /// </summary>
    private sealed class Shard
    {
        public readonly Dictionary<long, byte[]> Blocks = new();
        public readonly Stack<byte[]> Free = new();
#pragma warning disable CS0169, IDE0051 // padding, never read
        private long _pad0, _pad1, _pad2, _pad3, _pad4, _pad5, _pad6, _pad7, _pad8, _pad9, _pad10, _pad11, _pad12;
#pragma warning restore CS0169, IDE0051
    }

    private static int ShardOf(long block) => (int)((block >> ShardRunLog) & (ShardCount - 1));

    /// <summary>The first block after <paramref name="block"/>'s run (the next block that may belong to another shard).</summary>
    private static long RunEnd(long block) => ((block >> ShardRunLog) + 1) << ShardRunLog;

    public FileDataCache(IBlockDevice device, int blockSize)
    {
        _device = device;
        _blockSize = blockSize;
        _blockLog = System.Numerics.BitOperations.Log2((uint)blockSize);
        _freeLimitPerShard = (int)(2 * ((LimitBytes + HeldWriteLimit) >> _blockLog) / ShardCount);
        for (int i = 0; i < ShardCount; i++) _shards[i] = new Shard();
    }

    /// <summary>Blocks held now.</summary>
    public int Count => Volatile.Read(ref _heldCount);

    /// <summary>Blocks written out so far, and the device writes they took.</summary>
    public long BlocksWritten { get; private set; }
    public long DeviceWrites { get; private set; }

    /// <summary>
    /// Writes whole blocks at <paramref name="offset"/> (block-aligned, a multiple of the block size): held when short,
    /// otherwise queued for the writer thread (dropping held blocks they cover).
    /// </summary>
    public void Write(long offset, ReadOnlySpan<byte> data)
    {
        if ((offset & (_blockSize - 1)) != 0 || (data.Length & (_blockSize - 1)) != 0)
            throw new ArgumentException($"file data at {offset} (+{data.Length}) is not whole blocks");
        if (data.Length > HeldWriteLimit)
        {
            lock (_lock)
            {
                Drop(offset, data.Length);
                for (int done = 0; done < data.Length; done += StreamSlotSize)
                {
                    var piece = data.Slice(done, Math.Min(StreamSlotSize, data.Length - done));
                    QueueLocked(offset + done, piece);
                }
            }
            return;
        }
        long first = offset >> _blockLog, end = first + (data.Length >> _blockLog);
        for (long runStart = first; runStart < end;)
        {
            long runEnd = Math.Min(RunEnd(runStart), end);
            var shard = _shards[ShardOf(runStart)];
            lock (shard)
            {
                for (long block = runStart; block < runEnd; block++)
                {
                    ref var slot = ref CollectionsMarshal.GetValueRefOrAddDefault(shard.Blocks, block, out bool exists);
                    if (!exists)
                    {
                        slot = shard.Free.Count > 0 ? shard.Free.Pop() : GC.AllocateUninitializedArray<byte>(_blockSize);
                        Interlocked.Increment(ref _heldCount);
                    }
                    data.Slice((int)((block - first) << _blockLog), _blockSize).CopyTo(slot);
                }
            }
            runStart = runEnd;
        }
        if ((long)Volatile.Read(ref _heldCount) << _blockLog >= LimitBytes) HandOffFull();
    }

    /// <summary>
    /// The cache is full: hands the held blocks off once the batch the last such call handed off is written (so a writer
    /// faster than the device waits for it rather than filling memory).
    /// </summary>
    private void HandOffFull()
    {
        lock (_lock)
        {
            while (_completed < _lastLimitBatch) Monitor.Wait(_lock);
            ThrowIfWriteFailedLocked();
            if ((long)Volatile.Read(ref _heldCount) << _blockLog < LimitBytes) return;
            _lastLimitBatch = HandOffLocked();
        }
    }

    /// <summary>
    /// Queues every held block for the writer thread as one batch, and returns the sequence to wait for with
    /// <see cref="WaitFor"/>: that of the last write queued (the batch, or an earlier write when nothing was held).
    /// Does not wait for the device. A write that failed in flight is reported here.
    /// </summary>
    public long HandOff()
    {
        lock (_lock)
        {
            ThrowIfWriteFailedLocked();
            return HandOffLocked();
        }
    }

    private long HandOffLocked()
    {
        WaitWhileWriteOutsDrainLocked();
        if (Volatile.Read(ref _heldCount) == 0) return _queued;
        int locked = 0;
        try
        {
            // Every shard, so that no read sees a block neither held nor queued.
            for (; locked < ShardCount; locked++) Monitor.Enter(_shards[locked]);
            if (CollectHeldLocked() is not { } batch) return _queued;
            foreach (var shard in _shards) shard.Blocks.Clear();
            Interlocked.Add(ref _heldCount, -batch.Count);
            long first = batch.Blocks[0] << _blockLog, end = (batch.Blocks[batch.Count - 1] + 1) << _blockLog;
            _inFlight.Enqueue(new InFlightWrite(first, end - first, null, batch, ++_queued));
            StartWriterLocked();
            Monitor.PulseAll(_lock);
            return _queued;
        }
        finally
        {
            while (locked > 0) Monitor.Exit(_shards[--locked]);
        }
    }

    /// <summary>
    /// A batch (a spare, or a new one) of every held block, ascending; the shards still hold them. Null when nothing is
    /// held. Caller holds <see cref="_lock"/> and every shard's monitor.
    /// </summary>
    private HeldBatch? CollectHeldLocked()
    {
        int count = 0;
        foreach (var shard in _shards) count += shard.Blocks.Count;
        if (count == 0) return null;
        var batch = _spareBatches.Count > 0 && _spareBatches.Peek().Blocks.Length >= count
            ? _spareBatches.Pop()
            : new HeldBatch(Math.Max(count, (int)((LimitBytes + HeldWriteLimit) >> _blockLog)));
        int n = 0;
        foreach (var shard in _shards)
        {
            foreach (var (block, bytes) in shard.Blocks)
            {
                batch.Blocks[n] = block;
                batch.Arrays[n] = bytes;
                n++;
            }
        }
        Array.Sort(batch.Blocks, batch.Arrays, 0, n);
        batch.Count = n;
        return batch;
    }

    /// <summary>Waits until the write queued with <paramref name="sequence"/> and every one before it left the device; reports a failed one.</summary>
    public void WaitFor(long sequence)
    {
        lock (_lock)
        {
            while (_completed < sequence) Monitor.Wait(_lock);
            ThrowIfWriteFailedLocked();
        }
    }

    /// <summary>Copies <paramref name="piece"/> into a free slot (waiting for one while all are in flight) and queues it.</summary>
    private void QueueLocked(long offset, ReadOnlySpan<byte> piece)
    {
        WaitWhileWriteOutsDrainLocked();
        ThrowIfWriteFailedLocked();
        AlignedBuffer slot;
        while (true)
        {
            if (_freeSlots.Count > 0) { slot = _freeSlots.Pop(); break; }
            if (_slotsAllocated < StreamSlots) { slot = new AlignedBuffer(StreamSlotSize); _slotsAllocated++; break; }
            Monitor.Wait(_lock);
            ThrowIfWriteFailedLocked();
        }
        piece.CopyTo(slot.Span);
        _inFlight.Enqueue(new InFlightWrite(offset, piece.Length, slot, null, ++_queued));
        StartWriterLocked();
        Monitor.PulseAll(_lock);
    }

    private void StartWriterLocked()
    {
        if (_writer is not null) return;
        _writer = new Thread(WriterLoop) { IsBackground = true, Name = "xfswin-data-writer" };
        _writer.Start();
    }

    /// <summary>The writer thread: the oldest queued write to the device, retired (its slot freed) once the device returned.</summary>
    private void WriterLoop()
    {
        while (true)
        {
            InFlightWrite next;
            lock (_lock)
            {
                while (_inFlight.Count == 0 && !_stopping) Monitor.Wait(_lock);
                if (_inFlight.Count == 0) return;
                next = _inFlight.Peek();
            }
            Exception? failure = null;
            int deviceWrites = 0;
            try
            {
                if (next.Batch is { } batch)
                {
                    deviceWrites = WriteBatch(batch);
                }
                else
                {
                    _device.Write(next.Offset, next.Buffer!.Span[..(int)next.Length]);
                    deviceWrites = 1;
                }
            }
            catch (Exception e)
            {
                failure = e;
            }
            lock (_lock)
            {
                _inFlight.Dequeue();
                _movedToDevice++;
                _completed = next.Sequence;
                DeviceWrites += deviceWrites;
                if (next.Batch is { } batch)
                {
                    if (failure is null) BlocksWritten += batch.Count;
                    ReleaseBatchLocked(batch);
                }
                else
                {
                    _freeSlots.Push(next.Buffer!);
                    if (failure is null) BlocksWritten += next.Length >> _blockLog;
                }
                if (failure is not null) _writeFailure ??= failure;
                Monitor.PulseAll(_lock);
            }
        }
    }

    /// <summary>
    /// Writes a batch's blocks in ascending order, neighbours merged into one write, the writes of up to 1 MiB of blocks
    /// handed to the device together (<see cref="IBlockDevice.WritePieces"/>; on the writer thread without the lock, since
    /// nothing changes a batch's blocks while it is queued; or by a write-out). Returns the device writes made.
    /// </summary>
    private int WriteBatch(HeldBatch batch)
    {
        _batchBuffer ??= new AlignedBuffer(WriteOutBufferSize);
        var buffer = _batchBuffer.Span;
        var pieces = _batchPieces;
        int blocksPerBuffer = WriteOutBufferSize >> _blockLog;
        int writes = 0, used = 0, count = 0;
        for (int i = 0; i < batch.Count;)
        {
            if (used == blocksPerBuffer || count == pieces.Length)
            {
                _device.WritePieces(buffer[..(used << _blockLog)], pieces.AsSpan(0, count));
                used = 0;
                count = 0;
            }
            long start = batch.Blocks[i];
            int run = 0;
            while (i < batch.Count && used + run < blocksPerBuffer && batch.Blocks[i] == start + run)
            {
                batch.Arrays[i].CopyTo(buffer[((used + run) << _blockLog)..]);
                run++;
                i++;
            }
            pieces[count++] = new WritePiece(start << _blockLog, used << _blockLog, run << _blockLog);
            used += run;
            writes++;
        }
        if (count != 0) _device.WritePieces(buffer[..(used << _blockLog)], pieces.AsSpan(0, count));
        return writes;
    }

    // The pieces of one WritePieces call of WriteBatch (used with _batchBuffer, by one batch at a time).
    private readonly WritePiece[] _batchPieces = new WritePiece[256];

    /// <summary>Gives a written (or failed) batch's block arrays back to their shards, and the emptied batch to the spares.</summary>
    private void ReleaseBatchLocked(HeldBatch batch)
    {
        for (int i = 0; i < batch.Count; i++)
        {
            var shard = _shards[ShardOf(batch.Blocks[i])];
            lock (shard)
                if (shard.Free.Count < _freeLimitPerShard) shard.Free.Push(batch.Arrays[i]);
        }
        SpareBatchLocked(batch);
    }

    /// <summary>Empties <paramref name="batch"/> (its arrays are someone else's now) and keeps it for reuse. Caller holds <see cref="_lock"/>.</summary>
    private void SpareBatchLocked(HeldBatch batch)
    {
        Array.Clear(batch.Arrays, 0, batch.Count);
        batch.Count = 0;
        if (_spareBatches.Count < MaxSpareBatches) _spareBatches.Push(batch);
    }

    /// <summary>
    /// Waits until no write is in flight, then reports a failed one. It returns holding <see cref="_lock"/> with the
    /// queue empty, so the writer thread is idle until the lock is let go: a write-out then owns the batch buffer, and
    /// the held blocks it writes land after every older write of theirs. Nothing is queued while a write-out waits here
    /// (<see cref="WaitWhileWriteOutsDrainLocked"/>), so a stream of large writes from other threads cannot keep it waiting.
    /// </summary>
    private void WaitForInFlightLocked()
    {
        _writeOutsDraining++;
        try
        {
            while (_completed < _queued) Monitor.Wait(_lock);
        }
        finally
        {
            if (--_writeOutsDraining == 0) Monitor.PulseAll(_lock);
        }
        ThrowIfWriteFailedLocked();
    }

    /// <summary>Before a write is queued: waits while a write-out waits for the queue to empty (see <see cref="WaitForInFlightLocked"/>).</summary>
    private void WaitWhileWriteOutsDrainLocked()
    {
        while (_writeOutsDraining > 0) Monitor.Wait(_lock);
    }

    /// <summary>Waits for the writes in flight that overlap [<paramref name="offset"/>, +<paramref name="length"/>).</summary>
    private void WaitForOverlappingLocked(long offset, long length)
    {
        long target = 0;
        foreach (var w in _inFlight)
            if (w.Offset < offset + length && offset < w.Offset + w.Length && (w.Batch is not { } batch || BatchOverlaps(batch, offset, length)))
                target = w.Sequence;
        while (_completed < target) Monitor.Wait(_lock);
        ThrowIfWriteFailedLocked();
    }

    private bool BatchOverlaps(HeldBatch batch, long offset, long length)
    {
        int i = batch.FirstAtOrAfter(offset >> _blockLog);
        return i < batch.Count && batch.Blocks[i] << _blockLog < offset + length;
    }

    private void ThrowIfWriteFailedLocked()
    {
        if (_writeFailure is { } failure)
            throw failure as XfsException ?? new XfsException(XfsError.IoError, $"a file data write failed: {failure.Message}", failure);
    }

    /// <summary>
    /// Writes <paramref name="data"/> at any byte <paramref name="offset"/> inside one block: into the held block when
    /// there is one, otherwise to the device (after any write in flight to it).
    /// </summary>
    public void WritePartial(long offset, ReadOnlySpan<byte> data)
    {
        long block = offset >> _blockLog;
        var shard = _shards[ShardOf(block)];
        lock (_lock)
        {
            lock (shard)
            {
                if (shard.Blocks.TryGetValue(block, out var held))
                {
                    int at = (int)(offset & (_blockSize - 1));
                    data.CopyTo(held.AsSpan(at));
                    return;
                }
            }
            WaitForOverlappingLocked(offset, data.Length);
            _movedToDevice++;
            _device.Write(offset, data);
        }
    }

    /// <summary>
    /// Reads device bytes with the writes in flight, then the held blocks, laid over them. The device read runs outside
    /// the lock (reads of several threads reach the device together); when data moved from memory to the device
    /// meanwhile (a write in flight retired, held blocks written out, a partial write), what the read saw may predate
    /// it, and it reads again under the lock.
    /// </summary>
    public void Read(long offset, Span<byte> destination)
    {
        long moved;
        lock (_lock) moved = _movedToDevice;
        _device.Read(offset, destination);
        lock (_lock)
        {
            if (_movedToDevice != moved) _device.Read(offset, destination);
            if (destination.IsEmpty) return;
            // Oldest first, so the newest bytes of a block land last; a write in flight stays queued (and its slot
            // untouched) until it retires under this lock, whatever the device read above saw of it.
            foreach (var w in _inFlight)
            {
                long from = Math.Max(w.Offset, offset), to = Math.Min(w.Offset + w.Length, offset + destination.Length);
                if (from >= to) continue;
                if (w.Batch is { } batch)
                {
                    long lastBlock = (to - 1) >> _blockLog;
                    for (int i = batch.FirstAtOrAfter(from >> _blockLog); i < batch.Count && batch.Blocks[i] <= lastBlock; i++)
                        Overlay(batch.Blocks[i], batch.Arrays[i], offset, destination);
                }
                else
                {
                    w.Buffer!.Span[(int)(from - w.Offset)..(int)(to - w.Offset)].CopyTo(destination[(int)(from - offset)..]);
                }
            }
            if (Volatile.Read(ref _heldCount) == 0) return;
            long first = offset >> _blockLog, last = (offset + destination.Length - 1) >> _blockLog;
            for (long runStart = first; runStart <= last;)
            {
                long runEnd = Math.Min(RunEnd(runStart), last + 1);
                var shard = _shards[ShardOf(runStart)];
                lock (shard)
                {
                    if (shard.Blocks.Count > 0)
                        for (long block = runStart; block < runEnd; block++)
                            if (shard.Blocks.TryGetValue(block, out var bytes)) Overlay(block, bytes, offset, destination);
                }
                runStart = runEnd;
            }
        }
    }

    private void Overlay(long block, byte[] bytes, long offset, Span<byte> destination)
    {
        long start = block << _blockLog;
        long from = Math.Max(start, offset), to = Math.Min(start + _blockSize, offset + destination.Length);
        bytes.AsSpan((int)(from - start), (int)(to - from)).CopyTo(destination[(int)(from - offset)..]);
    }

    /// <summary>Drops the held blocks in [<paramref name="offset"/>, +<paramref name="length"/>) (blocks a committed change freed).</summary>
    public void Discard(long offset, long length) => Drop(offset, length);

    /// <summary>Drops the held blocks in a byte range, one shard lock at a time.</summary>
    private void Drop(long offset, long length)
    {
        if (Volatile.Read(ref _heldCount) == 0) return;
        long first = offset >> _blockLog, end = (offset + length + _blockSize - 1) >> _blockLog;
        if (end - first > Volatile.Read(ref _heldCount))
        {
            // A range longer than what is held: each shard's table, not every block of the range.
            foreach (var shard in _shards)
            {
                lock (shard)
                {
                    if (shard.Blocks.Count == 0) continue;
                    foreach (var (block, bytes) in shard.Blocks)
                        if (block >= first && block < end)
                        {
                            shard.Blocks.Remove(block);
                            Release(shard, bytes);
                        }
                }
            }
            return;
        }
        for (long runStart = first; runStart < end;)
        {
            long runEnd = Math.Min(RunEnd(runStart), end);
            var shard = _shards[ShardOf(runStart)];
            lock (shard)
            {
                for (long block = runStart; block < runEnd && shard.Blocks.Count > 0; block++)
                    if (shard.Blocks.Remove(block, out var bytes)) Release(shard, bytes);
            }
            runStart = runEnd;
        }
    }

    /// <summary>Takes a block array out of the held count and keeps it for reuse (under its shard's lock).</summary>
    private void Release(Shard shard, byte[] bytes)
    {
        Interlocked.Decrement(ref _heldCount);
        if (shard.Free.Count < _freeLimitPerShard) shard.Free.Push(bytes);
    }

    /// <summary>
    /// Waits for every write in flight, then writes every held block to the device in ascending order, neighbours
    /// merged into writes of up to 1 MiB, and empties the cache. The device is not flushed: the checkpoint's pre-flush
    /// (or the caller) orders that. When a device write fails, every block stays held (a later write-out tries again).
    /// </summary>
    public void WriteOut()
    {
        lock (_lock)
        {
            WaitForInFlightLocked();
            if (Volatile.Read(ref _heldCount) == 0) return;
            int locked = 0;
            HeldBatch? batch = null;
            try
            {
                // Every shard, so that no read sees a block neither held nor on the device.
                for (; locked < ShardCount; locked++) Monitor.Enter(_shards[locked]);
                batch = CollectHeldLocked();
                if (batch is null) return;
                DeviceWrites += WriteBatch(batch);
                BlocksWritten += batch.Count;
                foreach (var shard in _shards)
                {
                    foreach (var bytes in shard.Blocks.Values) Release(shard, bytes);
                    shard.Blocks.Clear();
                }
                _movedToDevice++;
            }
            finally
            {
                if (batch is not null) SpareBatchLocked(batch);
                while (locked > 0) Monitor.Exit(_shards[--locked]);
            }
        }
    }

    /// <summary>Lets the writes in flight finish (a failure among them is not reported here), then frees the buffers.</summary>
    public void Dispose()
    {
        Thread? writer;
        lock (_lock)
        {
            _stopping = true;
            writer = _writer;
            Monitor.PulseAll(_lock);
        }
        writer?.Join();
        lock (_lock)
        {
            _batchBuffer?.Dispose();
            _batchBuffer = null;
            while (_freeSlots.Count > 0) _freeSlots.Pop().Dispose();
            _slotsAllocated = 0;
        }
    }
}

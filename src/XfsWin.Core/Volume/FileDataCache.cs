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
/// </list>
/// <para>
/// Ordering rule: every block held or in flight belongs to a transaction that mapped it and committed (or is committing)
/// into the CIL. <see cref="WriteOut"/> runs before each checkpoint is written (<see cref="Journal.MountedLogOptions.BeforeCheckpoint"/>),
/// under the log's lock once the CIL it writes is fixed: it waits for every write in flight, then writes the held
/// blocks, so the data reaches the device before the checkpoint's commit record, whose pre-flush makes it durable
/// first: no crash exposes a mapping without its data. Every sync path calls it before flushing the device. Writing
/// data out early is always allowed (the blocks are allocated to the file), so the cache also writes itself out when
/// it holds <see cref="LimitBytes"/>.
/// </para>
/// <para>
/// Device order: writes in flight go out one at a time in the order they were queued; held blocks are written only
/// after every write queued before them finished (<see cref="WriteOut"/> and <see cref="WritePartial"/> wait), and a
/// large write drops the held blocks it covers. Blocks freed while a write to them is in flight stay busy (not
/// reusable) until the freeing transaction's checkpoint is on disk, and that checkpoint waits for the write first.
/// </para>
/// <para>
/// Reads of file data overlay what is in flight and held here (<see cref="Read"/>); blocks a committed change unmapped
/// are dropped (<see cref="Discard"/>) so that a file removed before its data went out costs no data write.
/// </para>
/// <para>
/// A failed write in flight is reported by the next call that waits for it or queues another (the device has already
/// shut the volume down, see <see cref="ShutdownOnFailureDevice"/>), and by every one after.
/// </para>
/// Thread safety: every member takes the cache's own lock, a leaf lock (taken inside the volume's change lock and
/// inside the log's lock, never the other way round); the writer thread takes it only to pick up and retire a write,
/// never across a device call, and a read only around its device read (which runs unlocked, so that concurrent reads
/// reach the device together).
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
    private readonly object _lock = new();
    // Held blocks by device block number (device byte offset >> block log).
    private readonly Dictionary<long, byte[]> _blocks = new();
    // Block arrays no longer held, for reuse. It keeps as many as the cache can hold at once (LimitBytes plus one
    // held write), so a steady stream of small writes reuses the same arrays checkpoint after checkpoint and
    // allocates none; what it retains is bounded by that peak.
    private readonly Stack<byte[]> _free = new();
    private readonly int _freeLimit;
    private readonly List<long> _order = new();
    private AlignedBuffer? _writeBuffer;

    // Write-behind: writes queued for the writer thread, oldest first; an entry leaves the queue when its device
    // write has returned. Sequence numbers count queued writes; _completed is the last one retired.
    private readonly Queue<InFlightWrite> _inFlight = new();
    private readonly Stack<AlignedBuffer> _freeSlots = new();
    private int _slotsAllocated;
    private long _queued, _completed;
    // Counts the moves of data from memory to the device (retired writes, write-outs, partial writes), under _lock.
    private long _movedToDevice;
    private Exception? _writeFailure;
    private Thread? _writer;
    private bool _stopping;

    private readonly record struct InFlightWrite(long Offset, int Length, AlignedBuffer Buffer, long Sequence);

    public FileDataCache(IBlockDevice device, int blockSize)
    {
        _device = device;
        _blockSize = blockSize;
        _blockLog = System.Numerics.BitOperations.Log2((uint)blockSize);
        _freeLimit = (int)((LimitBytes + HeldWriteLimit) >> _blockLog);
    }

    /// <summary>Blocks held now.</summary>
    public int Count
    {
        get { lock (_lock) return _blocks.Count; }
    }

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
        bool writeOut;
        lock (_lock)
        {
            if (data.Length > HeldWriteLimit)
            {
                DropLocked(offset, data.Length);
                for (int done = 0; done < data.Length; done += StreamSlotSize)
                {
                    var piece = data.Slice(done, Math.Min(StreamSlotSize, data.Length - done));
                    QueueLocked(offset + done, piece);
                }
                return;
            }
            for (int done = 0; done < data.Length; done += _blockSize)
            {
                long block = (offset + done) >> _blockLog;
                ref var slot = ref CollectionsMarshal.GetValueRefOrAddDefault(_blocks, block, out bool exists);
                if (!exists) slot = _free.Count > 0 ? _free.Pop() : GC.AllocateUninitializedArray<byte>(_blockSize);
                data.Slice(done, _blockSize).CopyTo(slot);
            }
            writeOut = (long)_blocks.Count << _blockLog >= LimitBytes;
        }
        if (writeOut) WriteOut();
    }

    /// <summary>Copies <paramref name="piece"/> into a free slot (waiting for one while all are in flight) and queues it.</summary>
    private void QueueLocked(long offset, ReadOnlySpan<byte> piece)
    {
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
        _inFlight.Enqueue(new InFlightWrite(offset, piece.Length, slot, ++_queued));
        if (_writer is null)
        {
            _writer = new Thread(WriterLoop) { IsBackground = true, Name = "xfswin-data-writer" };
            _writer.Start();
        }
        Monitor.PulseAll(_lock);
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
            try
            {
                _device.Write(next.Offset, next.Buffer.Span[..next.Length]);
            }
            catch (Exception e)
            {
                failure = e;
            }
            lock (_lock)
            {
                _inFlight.Dequeue();
                _movedToDevice++;
                _freeSlots.Push(next.Buffer);
                _completed = next.Sequence;
                if (failure is null)
                {
                    DeviceWrites++;
                    BlocksWritten += next.Length >> _blockLog;
                }
                else
                {
                    _writeFailure ??= failure;
                }
                Monitor.PulseAll(_lock);
            }
        }
    }

    /// <summary>Waits until every write queued so far has left the device, then reports a failed one.</summary>
    private void WaitForInFlightLocked()
    {
        long target = _queued;
        while (_completed < target) Monitor.Wait(_lock);
        ThrowIfWriteFailedLocked();
    }

    /// <summary>Waits for the writes in flight that overlap [<paramref name="offset"/>, +<paramref name="length"/>).</summary>
    private void WaitForOverlappingLocked(long offset, long length)
    {
        long target = 0;
        foreach (var w in _inFlight)
            if (w.Offset < offset + length && offset < w.Offset + w.Length) target = w.Sequence;
        while (_completed < target) Monitor.Wait(_lock);
        ThrowIfWriteFailedLocked();
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
        lock (_lock)
        {
            long block = offset >> _blockLog;
            if (_blocks.TryGetValue(block, out var held))
            {
                int at = (int)(offset & (_blockSize - 1));
                data.CopyTo(held.AsSpan(at));
                return;
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
                if (from < to) w.Buffer.Span[(int)(from - w.Offset)..(int)(to - w.Offset)].CopyTo(destination[(int)(from - offset)..]);
            }
            if (_blocks.Count == 0) return;
            long first = offset >> _blockLog, last = (offset + destination.Length - 1) >> _blockLog;
            if (last - first + 1 > _blocks.Count)
            {
                foreach (var (block, bytes) in _blocks)
                    if (block >= first && block <= last) Overlay(block, bytes, offset, destination);
                return;
            }
            for (long block = first; block <= last; block++)
                if (_blocks.TryGetValue(block, out var bytes)) Overlay(block, bytes, offset, destination);
        }
    }

    private void Overlay(long block, byte[] bytes, long offset, Span<byte> destination)
    {
        long start = block << _blockLog;
        long from = Math.Max(start, offset), to = Math.Min(start + _blockSize, offset + destination.Length);
        bytes.AsSpan((int)(from - start), (int)(to - from)).CopyTo(destination[(int)(from - offset)..]);
    }

    /// <summary>Drops the held blocks in [<paramref name="offset"/>, +<paramref name="length"/>) (blocks a committed change freed).</summary>
    public void Discard(long offset, long length)
    {
        lock (_lock) DropLocked(offset, length);
    }

    private void DropLocked(long offset, long length)
    {
        if (_blocks.Count == 0) return;
        long first = offset >> _blockLog, end = (offset + length + _blockSize - 1) >> _blockLog;
        if (end - first > _blocks.Count)
        {
            _order.Clear();
            foreach (var block in _blocks.Keys)
                if (block >= first && block < end) _order.Add(block);
            foreach (var block in _order) Release(block);
            _order.Clear();
            return;
        }
        for (long block = first; block < end; block++) Release(block);
    }

    private void Release(long block)
    {
        if (_blocks.Remove(block, out var bytes) && _free.Count < _freeLimit) _free.Push(bytes);
    }

    /// <summary>
    /// Waits for every write in flight, then writes every held block to the device in ascending order, neighbours
    /// merged into writes of up to 1 MiB, and empties the cache. The device is not flushed: the checkpoint's pre-flush
    /// (or the caller) orders that.
    /// </summary>
    public void WriteOut()
    {
        lock (_lock)
        {
            WaitForInFlightLocked();
            if (_blocks.Count == 0) return;
            _order.Clear();
            _order.AddRange(_blocks.Keys);
            _order.Sort();
            _writeBuffer ??= new AlignedBuffer(WriteOutBufferSize);
            var buffer = _writeBuffer.Span;
            int perWrite = WriteOutBufferSize >> _blockLog;
            int i = 0;
            while (i < _order.Count)
            {
                long start = _order[i];
                int run = 0;
                while (i < _order.Count && run < perWrite && _order[i] == start + run)
                {
                    _blocks[_order[i]].CopyTo(buffer[(run << _blockLog)..]);
                    run++;
                    i++;
                }
                _device.Write(start << _blockLog, buffer[..(run << _blockLog)]);
                DeviceWrites++;
                BlocksWritten += run;
            }
            foreach (var bytes in _blocks.Values)
                if (_free.Count < _freeLimit) _free.Push(bytes);
            _blocks.Clear();
            _order.Clear();
            _movedToDevice++;
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
            _writeBuffer?.Dispose();
            _writeBuffer = null;
            while (_freeSlots.Count > 0) _freeSlots.Pop().Dispose();
            _slotsAllocated = 0;
        }
    }
}

using System.Runtime.InteropServices;
using XfsWin.Device;

namespace XfsWin.Volume;

/// <summary>
/// File data written in small pieces, kept in memory until the log writes the checkpoint whose transactions map it
/// (the role the page cache's dirty pages play for the kernel's XFS): a 4 KiB file written by itself is then one of
/// many blocks that go out together, sorted by disk address and merged into large writes, instead of one synchronous
/// device write per file. Large writes go straight to the device.
/// <para>
/// Ordering rule: every block held here belongs to a transaction that mapped it and committed (or is committing)
/// into the CIL. <see cref="WriteOut"/> runs before each checkpoint is written (<see cref="Journal.MountedLogOptions.BeforeCheckpoint"/>),
/// under the log's lock once the CIL it writes is fixed, so the data reaches the device before the checkpoint's
/// commit record, whose pre-flush makes it durable first: no crash exposes a mapping without its data. Writing data
/// out early is always allowed (the blocks are allocated to the file), so the cache also writes itself out when it
/// holds <see cref="LimitBytes"/>.
/// </para>
/// <para>
/// Reads of file data overlay what is held here (<see cref="Read"/>); a write that goes to the device drops the
/// held blocks it covers; blocks a committed change unmapped are dropped (<see cref="Discard"/>) so that a file
/// removed before its data went out costs no data write.
/// </para>
/// Thread safety: every member takes the cache's own lock, a leaf lock (taken inside the volume's change lock and
/// inside the log's lock, never the other way round).
/// </summary>
internal sealed class FileDataCache : IDisposable
{
    /// <summary>Writes at most this long are held; longer ones go to the device at once.</summary>
    public const int HeldWriteLimit = 64 << 10;
    /// <summary>Held bytes past which the cache writes itself out.</summary>
    public const long LimitBytes = 32L << 20;
    private const int WriteOutBufferSize = 1 << 20;

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
    /// otherwise written to the device at once (dropping held blocks they cover).
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
                _device.Write(offset, data);
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

    /// <summary>
    /// Writes <paramref name="data"/> at any byte <paramref name="offset"/> inside one block: into the held block when
    /// there is one, otherwise to the device.
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
            _device.Write(offset, data);
        }
    }

    /// <summary>Reads device bytes with the held blocks laid over them.</summary>
    public void Read(long offset, Span<byte> destination)
    {
        lock (_lock)
        {
            _device.Read(offset, destination);
            if (_blocks.Count == 0 || destination.IsEmpty) return;
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
    /// Writes every held block to the device in ascending order, neighbours merged into writes of up to 1 MiB, and
    /// empties the cache. The device is not flushed: the checkpoint's pre-flush (or the caller) orders that.
    /// </summary>
    public void WriteOut()
    {
        lock (_lock)
        {
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
        }
    }

    public void Dispose()
    {
        lock (_lock)
        {
            _writeBuffer?.Dispose();
            _writeBuffer = null;
        }
    }
}

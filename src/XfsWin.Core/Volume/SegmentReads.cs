using System.Runtime.ExceptionServices;
using XfsWin.Device;

namespace XfsWin.Volume;

/// <summary>
/// The pieces of one file read that lie in different places on disk (a fragmented file's extents), read concurrently:
/// the calling thread and up to <see cref="Width"/> - 1 helper threads of the volume take pieces in turn until none is left,
/// and the call returns once every piece is in its buffer. A read of many small extents then keeps the device busy at
/// the queue depth it can serve, as the kernel's submission of all of a read's bios at once does, instead of paying one
/// round trip per extent. The caller takes part, so the read finishes even when no helper gets a thread.
/// <para>
/// A batch is rented from its volume's <see cref="SegmentReadPool"/> and goes back when the caller and every helper
/// queued for it are done with it (a helper that starts after the pieces ran out finds nothing to do), so a late
/// helper never sees the next read's pieces, and a read allocates nothing once the pool holds batches.
/// </para>
/// </summary>
internal sealed unsafe class SegmentReadBatch
{
    /// <summary>Pieces read at once at most (the caller and its helpers).</summary>
    public const int Width = 8;

    private readonly SegmentReadPool _pool;
    private (long Disk, int Destination, int Length)[] _pieces = new (long, int, int)[16];
    private int _count, _next, _done, _references;
    private byte* _destination;
    private IBlockDevice? _device;
    private FileDataCache? _data;
    private Exception? _failure;
    private readonly object _finished = new();

    public SegmentReadBatch(SegmentReadPool pool) => _pool = pool;

    /// <summary>Starts a batch that reads through <paramref name="data"/> when given (a read-write open), else <paramref name="device"/>.</summary>
    public void Start(IBlockDevice device, FileDataCache? data)
    {
        _device = device;
        _data = data;
        _count = 0;
    }

    /// <summary>Adds the piece of <paramref name="length"/> bytes at device byte <paramref name="disk"/> that goes to <paramref name="destination"/> bytes into the buffer.</summary>
    public void Add(long disk, int destination, int length)
    {
        if (_count == _pieces.Length) Array.Resize(ref _pieces, _pieces.Length * 2);
        _pieces[_count++] = (disk, destination, length);
    }

    /// <summary>Reads every piece into <paramref name="buffer"/> (pinned by the caller until this returns), then gives the batch back.</summary>
    public void Run(byte* buffer)
    {
        _destination = buffer;
        _next = -1;
        _done = 0;
        int helpers = Math.Min(Width - 1, _count - 1);
        _references = 1 + helpers;
        _pool.Queue(this, helpers);
        Work();
        lock (_finished)
            while (Volatile.Read(ref _done) < _count) Monitor.Wait(_finished);
        var failure = _failure;
        Release();
        if (failure is not null) ExceptionDispatchInfo.Throw(failure);
    }

    /// <summary>A helper's turn: pieces until none is left.</summary>
    public void Help()
    {
        Work();
        Release();
    }

    private void Work()
    {
        while (true)
        {
            int i = Interlocked.Increment(ref _next);
            if (i >= _count) return;
            var (disk, at, length) = _pieces[i];
            try
            {
                var target = new Span<byte>(_destination + at, length);
                if (_data is { } data) data.Read(disk, target);
                else _device!.Read(disk, target);
            }
            catch (Exception e)
            {
                Interlocked.CompareExchange(ref _failure, e, null);
            }
            if (Interlocked.Increment(ref _done) == _count)
                lock (_finished) Monitor.PulseAll(_finished);
        }
    }

    private void Release()
    {
        if (Interlocked.Decrement(ref _references) != 0) return;
        _device = null;
        _data = null;
        _destination = null;
        _failure = null;
        _pool.Return(this);
    }
}

/// <summary>
/// A volume's spare <see cref="SegmentReadBatch"/>es (as many as reads ever ran at once) and its helper threads:
/// <see cref="SegmentReadBatch.Width"/> - 1 background threads, started with the first read that needs them, that take
/// turns on queued batches. Their own threads rather than the thread pool's: a pool with as many threads as CPUs would
/// run one or two of the blocking device reads at a time.
/// </summary>
internal sealed class SegmentReadPool : IDisposable
{
    private readonly Stack<SegmentReadBatch> _spare = new();
    private readonly Queue<SegmentReadBatch> _turns = new();
    private Thread[]? _helpers;
    private bool _stopping;

    public SegmentReadBatch Rent()
    {
        lock (_spare)
            if (_spare.Count > 0) return _spare.Pop();
        return new SegmentReadBatch(this);
    }

    public void Return(SegmentReadBatch batch)
    {
        lock (_spare) _spare.Push(batch);
    }

    /// <summary>Queues <paramref name="turns"/> helper turns on <paramref name="batch"/> (each takes pieces until none is left, then releases the batch).</summary>
    public void Queue(SegmentReadBatch batch, int turns)
    {
        lock (_turns)
        {
            if (_stopping)
            {
                // The volume is closing: the caller reads every piece itself.
                for (int i = 0; i < turns; i++) batch.Help();
                return;
            }
            if (_helpers is null)
            {
                _helpers = new Thread[SegmentReadBatch.Width - 1];
                for (int i = 0; i < _helpers.Length; i++)
                {
                    _helpers[i] = new Thread(HelperLoop) { IsBackground = true, Name = "xfswin-read" };
                    _helpers[i].Start();
                }
            }
            for (int i = 0; i < turns; i++) _turns.Enqueue(batch);
            Monitor.PulseAll(_turns);
        }
    }

    private void HelperLoop()
    {
        while (true)
        {
            SegmentReadBatch batch;
            lock (_turns)
            {
                while (_turns.Count == 0 && !_stopping) Monitor.Wait(_turns);
                if (_turns.Count == 0) return;
                batch = _turns.Dequeue();
            }
            batch.Help();
        }
    }

    /// <summary>Stops the helper threads once the turns queued are done.</summary>
    public void Dispose()
    {
        Thread[]? helpers;
        lock (_turns)
        {
            _stopping = true;
            helpers = _helpers;
            Monitor.PulseAll(_turns);
        }
        if (helpers is null) return;
        foreach (var t in helpers) t.Join();
    }
}

namespace XfsWin.Volume;

/// <summary>
/// The lock of a volume opened read-write: a change (a namespace operation, a write, an attribute change, recovery of
/// orphans, unmount) holds it exclusively from its first look at an inode to its commit; a read (attributes, lookup,
/// listing, file data, links, xattrs) holds it shared, so reads run side by side and never see a change half made.
/// <para>
/// Why reads need it at all: a reader that follows a mapping (extent list, directory block, inode cluster) while a
/// change frees or rewrites it would read a freed or half-made block (the kernel's readers hold the inode lock for
/// the same reason). Metadata buffers publish a change's bytes only at commit, so readers sharing the lock see
/// committed states only.
/// </para>
/// <para>
/// File data locks: a write that changes nothing but file bytes (an overwrite of written blocks inside EOF, in a
/// timestamp granule the inode already shows) needs no transaction; it holds this lock shared, beside reads and other
/// such writes, and its file's data lock (<see cref="WriteFileData"/>) exclusively. A read of file data holds its
/// file's data lock shared (<see cref="ReadFileData"/>), so it never sees a write half made (the kernel's XFS holds
/// the inode's I/O lock the same way), and two writes into one block never lose each other's bytes. A change holding
/// this lock exclusively needs no data lock: nothing else runs.
/// </para>
/// <para>
/// Recursion: a change may read (shared inside exclusive, for instance a rename resolving names) and re-enter itself;
/// a read may read again; a read never starts a change (taking it exclusively while holding it shared throws). Lock
/// order: this lock first, then a file data lock (one at a time, only while holding this one shared or exclusive), then
/// buffer locks (see <see cref="Metadata.Transaction"/>), then the log's lock, then leaf locks (the file data cache,
/// the holds table).
/// </para>
/// <para>
/// How it is made: shared holders are counted per stripe, each on its own cache line, chosen by the processor the
/// thread runs on, so that reads and overwrites on different processors touch no common line (a reader-writer lock
/// with one counter makes every shared acquisition a contended write). A change announces itself
/// (<c>_exclusive</c>), then waits until every stripe is empty; a reader that finds a change announced steps back
/// and waits for it to end, so a change is never starved by a stream of reads. The reader's increment and the change's
/// announcement are both full fences: either the reader sees the change or the change sees the reader. Each thread
/// keeps its own shared holds (the stripe it counted in, the depth), so that a read inside a read is not made to wait
/// behind a change that waits for the outer one.
/// </para>
/// </summary>
internal sealed class VolumeChangeLock
{
    /// <summary>Shared-holder stripes (a power of two; a thread counts in the stripe of the processor it runs on).</summary>
    private const int SharedStripes = 16;

    [System.Runtime.InteropServices.StructLayout(System.Runtime.InteropServices.LayoutKind.Explicit, Size = 128)]
    private struct PaddedCount
    {
        // In the middle of 128 bytes: no neighbour's count shares its cache line (nor the adjacent line prefetched with it).
        [System.Runtime.InteropServices.FieldOffset(64)] public int Value;
    }

    private readonly PaddedCount[] _shared = new PaddedCount[SharedStripes];

    // Exclusive holders queue here, waiting readers and changes sleep here. _exclusive, _owner and _readersWaiting
    // change only under it (_exclusive is read without it).
    private readonly object _gate = new();
    private int _exclusive;      // 1 from a change's announcement until its end
    private int _owner;          // the managed thread id of the change in progress, 0 none
    private int _ownerDepth;     // its re-entries (only its own thread touches it)
    private int _readersWaiting;

    /// <summary>One thread's shared hold on one lock: the stripe it counted in and how deep it is.</summary>
    private sealed class SharedHold
    {
        public VolumeChangeLock? Lock;
        public int Stripe;
        public int Depth;
    }

    // This thread's shared holds, on any volume (rarely more than one at a time).
    [ThreadStatic] private static SharedHold[]? t_holds;

    private SharedHold? HeldByThisThread()
    {
        var holds = t_holds;
        if (holds is null) return null;
        foreach (var hold in holds)
            if (hold.Depth > 0 && ReferenceEquals(hold.Lock, this)) return hold;
        return null;
    }

    private static SharedHold FreeHold()
    {
        var holds = t_holds ??= [new SharedHold(), new SharedHold()];
        foreach (var hold in holds)
            if (hold.Depth == 0) return hold;
        var grown = new SharedHold[holds.Length * 2];
        holds.CopyTo(grown, 0);
        for (int i = holds.Length; i < grown.Length; i++) grown[i] = new SharedHold();
        t_holds = grown;
        return grown[holds.Length];
    }


    /// <summary>File data locks, striped by inode number (files whose numbers share a stripe share a lock).</summary>
    private readonly ReaderWriterLockSlim[] _fileData = CreateStripes();

    /// <summary>How many file data locks there are (a power of two; see <see cref="FileDataStripe"/>).</summary>
    public const int FileDataStripes = 64;

    private static ReaderWriterLockSlim[] CreateStripes()
    {
        var stripes = new ReaderWriterLockSlim[FileDataStripes];
        for (int i = 0; i < stripes.Length; i++) stripes[i] = new ReaderWriterLockSlim(LockRecursionPolicy.SupportsRecursion);
        return stripes;
    }

    /// <summary>
    /// The stripe of <paramref name="inode"/>'s file data lock: the top bits of the number times 2^64 / φ (Fibonacci
    /// hashing), so that files with neighbouring numbers, often written at the same time, get stripes far apart, and
    /// so locks that were allocated far apart: neighbouring lock objects share cache lines, and two threads taking
    /// them would contend for those lines as if for one lock.
    /// </summary>
    public static int FileDataStripe(ulong inode) => (int)((inode * 0x9E3779B97F4A7C15UL) >> (64 - 6));

    private ReaderWriterLockSlim FileDataLock(ulong inode) => _fileData[FileDataStripe(inode)];

    /// <summary>Holds <paramref name="inode"/>'s file data lock shared (a read of its bytes) until the scope is disposed.</summary>
    public FileDataRead ReadFileData(ulong inode)
    {
        var held = FileDataLock(inode);
        held.EnterReadLock();
        return new FileDataRead(held);
    }

    /// <summary>Holds <paramref name="inode"/>'s file data lock exclusively (a write of its bytes) until the scope is disposed.</summary>
    public FileDataWrite WriteFileData(ulong inode)
    {
        var held = FileDataLock(inode);
        held.EnterWriteLock();
        return new FileDataWrite(held);
    }

    /// <summary>Threads waiting for <paramref name="inode"/>'s file data lock shared.</summary>
    public int FileDataReadersWaiting(ulong inode) => FileDataLock(inode).WaitingReadCount;

    public readonly ref struct FileDataRead(ReaderWriterLockSlim held)
    {
        public void Dispose() => held.ExitReadLock();
    }

    public readonly ref struct FileDataWrite(ReaderWriterLockSlim held)
    {
        public void Dispose() => held.ExitWriteLock();
    }

    /// <summary>Holds the lock exclusively until the returned scope is disposed.</summary>
    public Exclusive Change()
    {
        int me = Environment.CurrentManagedThreadId;
        if (Volatile.Read(ref _owner) == me)
        {
            _ownerDepth++;
            return new Exclusive(this);
        }
        if (HeldByThisThread() is not null) throw new LockRecursionException("a read of the volume cannot start a change");
        if (Volatile.Read(ref _readersWaiting) > 0) LetWaitingReadersIn();
        lock (_gate)
        {
            while (_exclusive != 0) Monitor.Wait(_gate);
            Interlocked.Exchange(ref _exclusive, 1);
            _owner = me;
            _ownerDepth = 1;
            while (SharedCount() != 0) Monitor.Wait(_gate);
        }
        return new Exclusive(this);
    }

    private int SharedCount()
    {
        int total = 0;
        for (int i = 0; i < SharedStripes; i++) total += Volatile.Read(ref _shared[i].Value);
        return total;
    }

    private void ExitChange()
    {
        if (--_ownerDepth > 0) return;
        lock (_gate)
        {
            _owner = 0;
            Volatile.Write(ref _exclusive, 0);
            Monitor.PulseAll(_gate);
        }
    }

    /// <summary>The longest a change lets readers that were waiting go first (<see cref="LetWaitingReadersIn"/>): 2 ms.</summary>
    public TimeSpan ReaderHandOff
    {
        get => System.Diagnostics.Stopwatch.GetElapsedTime(0, _handOffTicks);
        set => _handOffTicks = (long)(value.TotalSeconds * System.Diagnostics.Stopwatch.Frequency);
    }

    private long _handOffTicks = System.Diagnostics.Stopwatch.Frequency / 500;

    /// <summary>True from a change's announcement (it may still wait for reads to end) until its end.</summary>
    public bool ChangeAnnounced => Volatile.Read(ref _exclusive) != 0;

    /// <summary>Threads waiting to take the lock shared.</summary>
    public int ReadersWaiting => Volatile.Read(ref _readersWaiting);

    /// <summary>
    /// Readers that waited for the last change go before the next one: the lock's release wakes them, but a thread
    /// making change after change would take the lock back before they run and keep them waiting for as long as it
    /// goes on (reads stalled for a tenth of a second by a file copied in 1 MiB writes). The change spins, outside the
    /// lock, until they are in or <see cref="ReaderHandOff"/> passed; then it queues as always, and readers that come
    /// after it wait for it (the lock prefers a waiting writer).
    /// </summary>
    private void LetWaitingReadersIn()
    {
        long deadline = System.Diagnostics.Stopwatch.GetTimestamp() + Volatile.Read(ref _handOffTicks);
        var spin = new SpinWait();
        while (Volatile.Read(ref _readersWaiting) > 0 && System.Diagnostics.Stopwatch.GetTimestamp() < deadline) spin.SpinOnce(sleep1Threshold: -1);
    }

    /// <summary>Takes the lock shared (a read; <see cref="ExitRead"/> releases it).</summary>
    public void EnterRead()
    {
        var held = HeldByThisThread();
        if (held is not null)
        {
            held.Depth++;
            return;
        }
        // Inside this thread's own change: nothing else runs, nothing to count.
        if (Volatile.Read(ref _owner) == Environment.CurrentManagedThreadId) return;
        int stripe = Thread.GetCurrentProcessorId() & (SharedStripes - 1);
        Interlocked.Increment(ref _shared[stripe].Value);
        if (Volatile.Read(ref _exclusive) != 0)
        {
            // A change is announced or in progress: step back and wait for its end, then count in under the gate,
            // where no change can announce itself meanwhile.
            LeaveStripe(stripe);
            lock (_gate)
            {
                _readersWaiting++;
                while (_exclusive != 0) Monitor.Wait(_gate);
                Interlocked.Increment(ref _shared[stripe].Value);
                _readersWaiting--;
            }
        }
        var hold = FreeHold();
        hold.Lock = this;
        hold.Stripe = stripe;
        hold.Depth = 1;
    }

    public void ExitRead()
    {
        var held = HeldByThisThread();
        if (held is null)
        {
            // A read inside this thread's own change counted nothing; anything else is an exit without an entry.
            if (Volatile.Read(ref _owner) == Environment.CurrentManagedThreadId) return;
            throw new SynchronizationLockException("the volume's change lock is not held shared by this thread");
        }
        if (--held.Depth > 0) return;
        held.Lock = null;
        LeaveStripe(held.Stripe);
    }

    /// <summary>Counts a shared holder out; the last one out of a stripe wakes a change waiting for the stripes to empty.</summary>
    private void LeaveStripe(int stripe)
    {
        if (Interlocked.Decrement(ref _shared[stripe].Value) == 0 && Volatile.Read(ref _exclusive) != 0)
            lock (_gate) Monitor.PulseAll(_gate);
    }

    public readonly ref struct Exclusive(VolumeChangeLock held)
    {
        public void Dispose() => held.ExitChange();
    }
}

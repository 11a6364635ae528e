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
/// a read never starts a change (taking it exclusively while holding it shared throws). Lock order: this lock first,
/// then a file data lock (one at a time, only while holding this one shared or exclusive), then buffer locks (see
/// <see cref="Metadata.Transaction"/>), then the log's lock, then leaf locks (the file data cache, the holds table).
/// </para>
/// </summary>
internal sealed class VolumeChangeLock
{
    private readonly ReaderWriterLockSlim _lock = new(LockRecursionPolicy.SupportsRecursion);

    /// <summary>File data locks, striped by inode number (files whose numbers share a stripe share a lock).</summary>
    private readonly ReaderWriterLockSlim[] _fileData = CreateStripes();

    /// <summary>How many file data locks there are: files whose inode numbers are equal modulo this share one.</summary>
    public const int FileDataStripes = 64;

    private static ReaderWriterLockSlim[] CreateStripes()
    {
        var stripes = new ReaderWriterLockSlim[FileDataStripes];
        for (int i = 0; i < stripes.Length; i++) stripes[i] = new ReaderWriterLockSlim(LockRecursionPolicy.SupportsRecursion);
        return stripes;
    }

    private ReaderWriterLockSlim FileDataLock(ulong inode) => _fileData[(int)(inode % FileDataStripes)];

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
        if (_lock.WaitingReadCount > 0 && !_lock.IsWriteLockHeld && !_lock.IsReadLockHeld) LetWaitingReadersIn();
        _lock.EnterWriteLock();
        return new Exclusive(_lock);
    }

    /// <summary>The longest a change lets readers that were waiting go first (<see cref="LetWaitingReadersIn"/>): 2 ms.</summary>
    public TimeSpan ReaderHandOff
    {
        get => System.Diagnostics.Stopwatch.GetElapsedTime(0, _handOffTicks);
        set => _handOffTicks = (long)(value.TotalSeconds * System.Diagnostics.Stopwatch.Frequency);
    }

    private long _handOffTicks = System.Diagnostics.Stopwatch.Frequency / 500;

    /// <summary>Threads waiting to take the lock shared.</summary>
    public int ReadersWaiting => _lock.WaitingReadCount;

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
        while (_lock.WaitingReadCount > 0 && System.Diagnostics.Stopwatch.GetTimestamp() < deadline) spin.SpinOnce(sleep1Threshold: -1);
    }

    /// <summary>Takes the lock shared (a read; <see cref="ExitRead"/> releases it).</summary>
    public void EnterRead() => _lock.EnterReadLock();

    public void ExitRead() => _lock.ExitReadLock();

    public readonly ref struct Exclusive(ReaderWriterLockSlim held)
    {
        public void Dispose() => held.ExitWriteLock();
    }
}

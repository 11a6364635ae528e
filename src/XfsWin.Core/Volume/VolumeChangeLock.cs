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
/// Recursion: a change may read (shared inside exclusive, for instance a rename resolving names) and re-enter itself;
/// a read never starts a change (taking it exclusively while holding it shared throws). Lock order: this lock first,
/// then buffer locks (see <see cref="Metadata.Transaction"/>), then the log's lock, then leaf locks (the file data
/// cache, the holds table).
/// </para>
/// </summary>
internal sealed class VolumeChangeLock
{
    private readonly ReaderWriterLockSlim _lock = new(LockRecursionPolicy.SupportsRecursion);

    /// <summary>Holds the lock exclusively until the returned scope is disposed.</summary>
    public Exclusive Change()
    {
        _lock.EnterWriteLock();
        return new Exclusive(_lock);
    }

    /// <summary>Takes the lock shared (a read; <see cref="ExitRead"/> releases it).</summary>
    public void EnterRead() => _lock.EnterReadLock();

    public void ExitRead() => _lock.ExitReadLock();


    public readonly ref struct Exclusive(ReaderWriterLockSlim held)
    {
        public void Dispose() => held.ExitWriteLock();
    }
}

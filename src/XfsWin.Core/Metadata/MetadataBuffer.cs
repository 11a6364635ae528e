using XfsWin.Format;

namespace XfsWin.Metadata;

/// <summary>
/// One range of the disk (byte offset + length) holding metadata, the role of the kernel's xfs_buf.
/// A <see cref="BufferCache"/> keeps at most one per range.
/// <para>
/// Readers see <see cref="Snapshot"/>: a published copy of the bytes, never changed while published, together with
/// the verifier kind and owner that accepted them. Publishing stores a new snapshot (one reference store) or, at a
/// commit, re-points the current one while no reader can be reading it, so readers take no lock and never see a
/// half-made change. A writer locks the buffer, changes a private copy (<see cref="Contents"/>) and logs the byte
/// ranges it changed; when the change commits the copy becomes the published bytes (copy-on-write per buffer).
/// Copy-on-write was chosen over the kernel's in-place change under the lock because the read path here takes no
/// buffer lock at all: an
/// in-place change would let a lock-free reader see a block half rewritten (a btree block mid-split). A replaced
/// snapshot's array is reused for a later private copy only once nothing can reach it (<see cref="OfferSpare"/>):
/// readers of a read-write volume hold the volume's lock, which every change holds exclusively, and use what they
/// read only while they hold it.
/// </para>
/// <para>
/// Lock order: the modification lock is taken after inode locks; AG header buffers (AGI, AGF,
/// AGFL) are locked in ascending AG order, and within one AG the AGI before the AGF, as the kernel
/// does; other metadata buffers after the AG headers that lead to them. A lock is owned by a lock
/// owner (a transaction, a <see cref="MetadataChangeSet"/>), which may take it again recursively,
/// as a kernel transaction re-finds a buffer it already joined. The internal state monitor below is
/// a leaf lock: nothing else is taken while it is held.
/// </para>
/// </summary>
public sealed class MetadataBuffer
{
    /// <summary>Bytes per bit of the dirty-region bitmap (XFS_BLF_CHUNK, as xfs_buf_log_format's data map counts).</summary>
    public const int DirtyChunkSize = 128;

    /// <summary>
    /// Published bytes and what verified them. The bytes are never changed while published. A committing change
    /// points the buffer's current snapshot at its new bytes instead of publishing another object
    /// (<see cref="Repoint"/>): it holds the buffer's lock (so no writeback is copying it) and, on a read-write
    /// volume, the volume's change lock exclusively (so no reader is between reading the snapshot and its fields);
    /// a read-only volume never commits. Anything else that publishes (a read, a read-ahead, writeback, a retag)
    /// makes a new one.
    /// </summary>
    public sealed class Snapshot(byte[] data, int kind, ulong owner)
    {
        public byte[] Data { get; private set; } = data;
        public int Kind { get; private set; } = kind;
        public ulong Owner { get; private set; } = owner;

        internal void Repoint(byte[] data, int kind, ulong owner)
        {
            Data = data;
            Kind = kind;
            Owner = owner;
        }
    }

    private volatile Snapshot? _snapshot;

    // Guards everything below; held only for short state changes (a leaf lock).
    internal readonly object State = new();
    private int _holds;
    private object? _lockOwner;
    private int _lockDepth;
    // Owners waiting in AcquireLocked (under State).
    private int _lockWaiters;
    private byte[]? _working;
    // Arrays of this buffer's length that nothing references (images the log let go, see OfferSpare): the next private
    // copies are made in them instead of new ones. Two, because a checkpoint takes the image the CIL held into the AIL
    // until a later checkpoint replaces it, and a buffer changed all the time needs one more copy meanwhile.
    private byte[]? _spare;
    private byte[]? _secondSpare;
    // The published array the log let go while the lock owner's copy is about to replace it (see OfferSpareLocked).
    private byte[]? _spareOnPublish;
    // Locked for a change whose private copy is made on first use of Contents (a change that only patches in place,
    // reads or invalidates never copies the buffer); the copy of a buffer without published bytes is zeros.
    private bool _copyOnUse;
    private bool _changedUnderLock;
    private uint[]? _dirtyMap;
    private long _generation;

    internal volatile bool Referenced = true;
    internal bool Evicted;
    internal bool Stale;
    // Invalidated by the lock owner; becomes Stale when the change commits.
    private bool StalePending;
    internal bool Dirty;
    internal bool Queued;
    // Set while a read-ahead is fetching this buffer: readers that miss wait for it instead of reading.
    internal volatile Task? PendingRead;
    internal IBufferWriteVerifier? WriteVerifier;
    // What the private copy is once published: the kind and owner of the lock owner's read or new
    // block, and its write verifier (taken over only when the change commits, so that a cancelled
    // change leaves the published bytes with the verifier that matches them).
    internal int ChangeKind;
    internal ulong ChangeOwner;
    internal IBufferWriteVerifier? ChangeWriteVerifier;

    internal MetadataBuffer(long offset, int length)
    {
        Offset = offset;
        Length = length;
    }

    public long Offset { get; }
    public int Length { get; }

    /// <summary>The published bytes and the verifier that accepted them; null until read.</summary>
    public Snapshot? Published => _snapshot;

    /// <summary>Holds taken (a held buffer is never evicted).</summary>
    public int Holds { get { lock (State) return _holds; } }

    public bool IsLocked { get { lock (State) return _lockOwner is not null; } }

    /// <summary>Changed in memory and not yet written back.</summary>
    public bool IsDirty { get { lock (State) return Dirty; } }

    /// <summary>Invalidated (a freed metadata block): never written back, dropped from the cache when unlocked.</summary>
    public bool IsStale { get { lock (State) return Stale || StalePending; } }

    /// <summary>
    /// Bumped whenever the buffer is locked for a change, invalidated or rewritten from outside:
    /// a read that started under an older generation must not publish what it read.
    /// </summary>
    public long Generation => Interlocked.Read(ref _generation);

    /// <summary>
    /// The LSN the write verifier stamps into the block's lsn field at writeback: the LSN of the last
    /// checkpoint that logged the buffer. 0 (no log item) leaves the block's lsn field as it is.
    /// </summary>
    public ulong Lsn { get; set; }

    /// <summary>The write verifier the last committed change left (what the log's writeback finishes the buffer's images with).</summary>
    public IBufferWriteVerifier? WriteVerifierForLog { get { lock (State) return WriteVerifier; } }

    /// <summary>
    /// A committing change whose bytes this buffer publishes next, called by the lock owner before the change's items
    /// reach the log: the change's write verifier becomes the buffer's at once, since the log's writeback may write the
    /// change's image before the buffer is published (the change publishes afterwards even when the log fails).
    /// </summary>
    internal void AdoptChangeWriteVerifier()
    {
        lock (State)
        {
            if (_lockOwner is null) throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            WriteVerifier = ChangeWriteVerifier ?? WriteVerifier;
        }
    }

    /// <summary>The private copy the lock owner changes; published when the change commits.</summary>
    public byte[] Contents
    {
        get
        {
            lock (State)
            {
                if (_working is null && _copyOnUse) MakeWorkingCopyLocked();
                return _working ?? throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            }
        }
    }

    /// <summary>
    /// The bytes as the lock owner's change sees them, to read only: its private copy when it made one, otherwise the
    /// published bytes themselves (no copy is made; nothing may change them, see <see cref="Contents"/> for that). Valid
    /// while the lock is held and the change has not asked for <see cref="Contents"/> since.
    /// </summary>
    public byte[] ContentsToRead
    {
        get
        {
            lock (State)
            {
                if (_working is null && _copyOnUse && !StalePending && _snapshot is { } published) return published.Data;
                if (_working is null && _copyOnUse) MakeWorkingCopyLocked();
                return _working ?? throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            }
        }
    }

    /// <summary>
    /// Copies <paramref name="bytes"/> to <paramref name="offset"/> of the lock owner's private copy when it made one
    /// (false otherwise, see <see cref="PatchAtCommit"/>). The buffer becomes dirty at commit as for a logged change.
    /// A buffer invalidated in this change takes no patch (true: there is nothing to do).
    /// </summary>
    public bool TryPatchPrivate(int offset, ReadOnlySpan<byte> bytes)
    {
        if (offset < 0 || offset + bytes.Length > Length) throw new ArgumentOutOfRangeException(nameof(offset), $"patch {offset} (+{bytes.Length}) of a {Length}-byte buffer");
        lock (State)
        {
            if (_lockOwner is null) throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            // An invalidated buffer's bytes are dropped at commit: a patch into it has nothing to change.
            if (StalePending) return true;
            if (_working is null) return false;
            bytes.CopyTo(_working.AsSpan(offset));
            _changedUnderLock = true;
            return true;
        }
    }

    /// <summary>
    /// Copies <paramref name="bytes"/> to <paramref name="offset"/> as the lock owner's change commits (called while it
    /// still holds the lock, right before it releases it): into the private copy when the change made one, otherwise
    /// into the published bytes themselves. In place is safe because on a read-write volume readers hold the
    /// volume's change lock shared, never while the committing change holds it exclusively, and a read-only volume never changes. The buffer
    /// becomes dirty as for a logged change.
    /// </summary>
    public void PatchAtCommit(int offset, ReadOnlySpan<byte> bytes)
    {
        if (offset < 0 || offset + bytes.Length > Length) throw new ArgumentOutOfRangeException(nameof(offset), $"patch {offset} (+{bytes.Length}) of a {Length}-byte buffer");
        lock (State)
        {
            if (_lockOwner is null) throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            var target = _working ?? _snapshot?.Data ?? throw new InvalidOperationException($"buffer at {Offset} (+{Length}) has no bytes to patch");
            bytes.CopyTo(target.AsSpan(offset));
            _changedUnderLock = true;
        }
    }

    /// <summary>
    /// Marks bytes [<paramref name="first"/>, <paramref name="last"/>] (inclusive, as
    /// xfs_trans_log_buf) changed: they are published at commit, written back, and set in the
    /// dirty-region bitmap the buffer's log item copies.
    /// </summary>
    public void LogRange(int first, int last)
    {
        if (first < 0 || last < first || last >= Length) throw new ArgumentOutOfRangeException(nameof(first), $"range {first}..{last} of a {Length}-byte buffer");
        lock (State)
        {
            if (_working is null && _copyOnUse) MakeWorkingCopyLocked();
            if (_working is null) throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            _dirtyMap ??= new uint[(Length / DirtyChunkSize + 31) / 32];
            for (int chunk = first / DirtyChunkSize, end = last / DirtyChunkSize; chunk <= end; chunk++)
                _dirtyMap[chunk >> 5] |= 1u << (chunk & 31);
            _changedUnderLock = true;
        }
    }

    /// <summary>
    /// The dirty-region bitmap, one bit per 128-byte chunk (bit n of word w is chunk 32w + n), as
    /// blf_data_map holds it; empty when nothing is dirty. Cleared at writeback.
    /// </summary>
    public uint[] DirtyMap()
    {
        lock (State) return _dirtyMap is null ? [] : (uint[])_dirtyMap.Clone();
    }

    /// <summary>The dirty bytes as (offset, length) runs of whole 128-byte chunks, in order.</summary>
    public List<(int Offset, int Length)> DirtyRanges()
    {
        var runs = new List<(int, int)>();
        var map = DirtyMap();
        int chunks = (Length + DirtyChunkSize - 1) / DirtyChunkSize, start = -1;
        for (int c = 0; c <= chunks; c++)
        {
            bool set = c < chunks && (map.Length > c >> 5) && (map[c >> 5] & (1u << (c & 31))) != 0;
            if (set && start < 0) start = c;
            if (!set && start >= 0)
            {
                runs.Add((start * DirtyChunkSize, Math.Min(c * DirtyChunkSize, Length) - start * DirtyChunkSize));
                start = -1;
            }
        }
        return runs;
    }

    /// <summary>
    /// Marks the buffer stale (xfs_trans_binval: its block was freed). When the change commits, its
    /// changes and dirty state are dropped, it is never written back, and it leaves the cache; when
    /// the change is cancelled, it stays as it was. Only the lock owner may invalidate.
    /// </summary>
    public void Invalidate()
    {
        lock (State)
        {
            if (_lockOwner is null) throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked for a change");
            StalePending = true;
            Interlocked.Increment(ref _generation);
        }
    }

    /// <summary>
    /// Gives the buffer an array of its length to make a later private copy in: one that nothing references any more
    /// (the log passes the image a relogged item held in the CIL, or an AIL item a newer checkpoint replaced, once the
    /// buffer published newer bytes). The published bytes, the private copy and a spare already kept are never taken;
    /// a buffer keeps two spares at most.
    /// </summary>
    /// <returns>True when the buffer took it.</returns>
    public bool OfferSpare(byte[] image)
    {
        lock (State) return OfferSpareLocked(image);
    }

    private bool OfferSpareLocked(byte[] image)
    {
        if (image.Length == Length && _working is not null && ReferenceEquals(image, _snapshot?.Data) && _spareOnPublish is null)
        {
            // The published bytes, let go by the log while a change that replaces them commits (its items reach the CIL
            // before it publishes): they become a spare once the change publishes its copy instead.
            _spareOnPublish = image;
            return true;
        }
        if (image.Length != Length || ReferenceEquals(image, _working) || ReferenceEquals(image, _snapshot?.Data) ||
            ReferenceEquals(image, _spare) || ReferenceEquals(image, _secondSpare))
            return false;
        if (_spare is null) _spare = image;
        else if (_secondSpare is null) _secondSpare = image;
        else return false;
        return true;
    }

    /// <summary>Private copies made in a spare rather than a new array (see <see cref="OfferSpare"/>).</summary>
    public long SparesUsed { get { lock (State) return _sparesUsed; } }

    private long _sparesUsed;

    private byte[]? TakeSpareLocked()
    {
        var spare = _spare;
        if (spare is null) return null;
        _spare = _secondSpare;
        _secondSpare = null;
        _sparesUsed++;
        return spare;
    }

    // ---- used by BufferCache ----------------------------------------------------------------------

    internal void Publish(Snapshot snapshot) => _snapshot = snapshot;

    /// <summary>Takes a hold unless the buffer was evicted (the caller then looks it up again). Caller holds <see cref="State"/>.</summary>
    internal bool TryHoldLocked()
    {
        if (Evicted) return false;
        _holds++;
        return true;
    }

    internal void DropHoldLocked()
    {
        if (_holds <= 0) throw new InvalidOperationException($"buffer at {Offset} (+{Length}) released more often than held");
        _holds--;
    }

    internal int HoldsLocked => _holds;
    internal bool IsLockedLocked => _lockOwner is not null;
    internal long GenerationLocked => _generation;
    internal void BumpGenerationLocked() => Interlocked.Increment(ref _generation);

    /// <summary>Waits for and takes the modification lock for <paramref name="owner"/> (recursively for the same owner). Caller holds <see cref="State"/>.</summary>
    /// <returns>True when this call took the lock (false: the owner already had it).</returns>
    internal bool AcquireLocked(object owner)
    {
        if (ReferenceEquals(_lockOwner, owner))
        {
            _lockDepth++;
            return false;
        }
        while (_lockOwner is not null)
        {
            _lockWaiters++;
            try
            {
                Monitor.Wait(State);
            }
            finally
            {
                _lockWaiters--;
            }
        }
        _lockOwner = owner;
        _lockDepth = 1;
        _changedUnderLock = false;
        Interlocked.Increment(ref _generation);
        return true;
    }

    /// <summary>Starts the private copy the lock owner changes (from the snapshot, or zeroed for a new block). Caller holds <see cref="State"/>.</summary>
    internal void BeginChangeLocked(bool zeroed)
    {
        if ((_working is not null || _copyOnUse) && !zeroed) return;
        if (!zeroed && _snapshot is not null)
        {
            // The copy is made when the owner first asks for Contents.
            _copyOnUse = true;
            return;
        }
        _copyOnUse = false;
        var working = TakeSpareLocked() ?? GC.AllocateUninitializedArray<byte>(Length);
        working.AsSpan().Clear();
        _working = working;
        if (zeroed)
        {
            Stale = false;
            StalePending = false;
            // A new block's every byte is the lock owner's to log; a reinitialised buffer counts as changed.
            _changedUnderLock = true;
        }
    }

    /// <summary>
    /// Locks for a change that invalidates the buffer (its block was freed): no private copy is made unless the owner
    /// asks for the bytes (then the published ones, or zeros when there are none). Caller holds <see cref="State"/>.
    /// </summary>
    internal void BeginInvalidateLocked()
    {
        if (_working is null) _copyOnUse = true;
    }

    private void MakeWorkingCopyLocked()
    {
        var working = TakeSpareLocked() ?? GC.AllocateUninitializedArray<byte>(Length);
        if (_snapshot is { } published) published.Data.CopyTo(working, 0);
        else working.AsSpan().Clear();
        _working = working;
        _copyOnUse = false;
    }

    /// <summary>
    /// Drops one level of the lock; at the last, publishes the private copy when the change commits
    /// and something was logged. Returns true when the lock was released and the buffer became
    /// dirty. Caller holds <see cref="State"/>.
    /// </summary>
    internal (bool Released, bool BecameDirty) ReleaseLockLocked(object owner, bool commit)
    {
        if (!ReferenceEquals(_lockOwner, owner))
            throw new InvalidOperationException($"buffer at {Offset} (+{Length}) is not locked by this owner");
        if (--_lockDepth > 0) return (false, false);
        bool becameDirty = false;
        byte[]? replaced = null;
        if (StalePending)
        {
            if (commit)
            {
                Stale = true;
                Dirty = false;
                _dirtyMap = null;
            }
            StalePending = false;
        }
        else if (commit && !Stale && _changedUnderLock && _working is not null)
        {
            replaced = _snapshot?.Data;
            if (_snapshot is { } current) current.Repoint(_working, ChangeKind, ChangeOwner);
            else _snapshot = new Snapshot(_working, ChangeKind, ChangeOwner);
            WriteVerifier = ChangeWriteVerifier ?? WriteVerifier;
            Dirty = true;
            becameDirty = true;
        }
        else if (commit && !Stale && _changedUnderLock && _snapshot is not null)
        {
            // Patched in place (PatchAtCommit): the published bytes are the change.
            Dirty = true;
            becameDirty = true;
        }
        // A copy the committed change made but did not change was neither published nor logged: the next change may
        // make its copy in it. (A cancelled change's copy is dropped: part of it may have reached a log item.)
        var unchangedCopy = commit && !_changedUnderLock ? _working : null;
        _working = null;
        if (unchangedCopy is not null) OfferSpareLocked(unchangedCopy);
        var letGo = _spareOnPublish;
        _spareOnPublish = null;
        if (letGo is not null && ReferenceEquals(letGo, replaced)) OfferSpareLocked(letGo);
        _copyOnUse = false;
        _changedUnderLock = false;
        _lockOwner = null;
        // Waking is a call into the runtime: only when another owner waits for the lock.
        if (_lockWaiters > 0) Monitor.PulseAll(State);
        return (true, becameDirty);
    }

    internal void SetKindLocked(int kind, ulong owner)
    {
        if (_snapshot is { } s && (s.Kind != kind || s.Owner != owner)) _snapshot = new Snapshot(s.Data, kind, owner);
    }

    internal void ClearDirtyLocked()
    {
        Dirty = false;
        _dirtyMap = null;
    }
}

/// <summary>
/// Checks and finishes a metadata block on its way to disk (a write verifier): structure first,
/// then the LSN stamped into the block's lsn field (where the structure has one), then the CRC.
/// Called on a private copy: a failure leaves nothing written.
/// </summary>
public interface IBufferWriteVerifier
{
    string Structure { get; }

    VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn);
}

/// <summary>
/// The write verifier of a self-describing block with one CRC over the whole buffer and, on V5, an
/// LSN field: stamps the LSN (when given) and the CRC into the copy being written, then runs the
/// block's read verifier on it, whose CRC check now passes by construction so that it checks the
/// structure. The result is what the kernel's order (structure, LSN, CRC) gives: a block that fails
/// its structure check is not written. <paramref name="lsnOffset"/> or <paramref name="crcOffset"/>
/// -1: the structure has no such field (V4).
/// </summary>
public sealed class SelfDescribingWriteVerifier<TVerifier>(TVerifier verifier, int lsnOffset, int crcOffset) : IBufferWriteVerifier
    where TVerifier : struct, IBufferVerifier
{
    public string Structure => verifier.Structure;

    public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
    {
        if (lsn != 0 && lsnOffset >= 0) System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(block[lsnOffset..], lsn);
        if (crcOffset >= 0) XfsCrc.Stamp(block, crcOffset);
        return verifier.Verify(block, byteOffset);
    }
}

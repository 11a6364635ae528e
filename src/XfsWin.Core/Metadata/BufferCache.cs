using System.Collections.Concurrent;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Metadata;

/// <summary>Checks a metadata buffer just read from disk. Implemented by small structs so calls are not virtual.</summary>
public interface IBufferVerifier
{
    /// <summary>Distinguishes verifier kinds in the cache, so a block verified as one structure is never served as another.</summary>
    int Kind { get; }

    string Structure { get; }

    VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset);
}

/// <summary>
/// The metadata buffers of one volume (the kernel's buffer cache): at most one
/// <see cref="MetadataBuffer"/> per disk range (byte offset + length), bounded in bytes.
/// <para>
/// Reads: a buffer's bytes are published only after its read verifier passed (CRC first on V5, then
/// structure); a failure is reported to the volume's <see cref="VolumeHealth"/> and thrown as
/// <see cref="XfsCorruptionException"/>. The verifier kind and expected owner are not part of a
/// buffer's identity: they are checked at lookup, and bytes verified as one structure that are asked
/// for as another are verified again as that one (or refused). A cache hit takes no lock and
/// allocates nothing.
/// </para>
/// <para>
/// Changes: <see cref="ReadForWrite"/> and <see cref="GetNew"/> hold and lock a buffer for a lock
/// owner, who changes <see cref="MetadataBuffer.Contents"/> and logs the ranges it changed;
/// <see cref="Unlock"/> with commit publishes the change and queues the buffer for writeback.
/// <see cref="Writeback"/> writes every queued buffer in disk order through its write verifier
/// (structure, LSN, CRC). Held, locked, dirty or still-being-read buffers are never evicted;
/// eviction is second-chance (CLOCK-like) among the rest.
/// </para>
/// <para>
/// Read-ahead never puts stale data back: it remembers each buffer's generation when it starts, and
/// what it read is published only if the buffer still has no bytes and the same generation when the
/// read completes; locking a buffer for a change, invalidating it or removing it bumps the generation.
/// </para>
/// </summary>
public sealed class BufferCache : IDisposable
{
    private readonly record struct Key(long Offset, int Length);

    private readonly IBlockDevice _device;
    private readonly VolumeHealth _health;
    private readonly ConcurrentDictionary<Key, MetadataBuffer> _buffers = new();
    private static readonly Func<Key, MetadataBuffer> NewBuffer = k => new MetadataBuffer(k.Offset, k.Length);
    // Buffers changed and not yet written back (the kernel's delayed-write list). Guarded by itself.
    private readonly List<MetadataBuffer> _delayedWrites = [];
    private readonly long _capacityBytes;
    // Read-ahead reads run here: four reads in flight keep a disk busy; each only reads and
    // verifies, never waiting for another, so the threads cannot starve each other.
    private readonly BackgroundWorkers _readers = new("xfswin-readahead", 4);
    // What read-ahead reads into, one per reader thread: aligned, so that an unbuffered device reads
    // straight into it, and outside the GC heap (a fresh array of up to 1 MiB per read, on the large
    // object heap, had the background GC running through a cold stat walk, and the device bounced
    // every read through its own aligned buffer).
    private readonly AlignedBufferPool _spanBuffers = new(ReadAheadMaxSpanBytes, maxRetained: 4);
    private int _readAheadsInFlight;
    private int _readAheadsDiscarded;
    private long _bytes;
    private int _sweeping;
    // When a sweep could not bring the cache down to its target (what stays is held, locked, dirty or being read: a
    // long run of changes keeps more dirty metadata than the capacity until writeback catches up), the next sweep waits
    // until the cache has grown by an eighth of its capacity past what that sweep left; 0 when the last sweep reached
    // its target. Each sweep walks every buffer, so without this every buffer added to a cache full of dirty ones
    // walked them all.
    private long _sweepAgainAt;
    private long _sweeps;

    /// <summary>Sweeps begun so far (each walks the cached buffers for ones to drop).</summary>
    internal long Sweeps => Interlocked.Read(ref _sweeps);

    public BufferCache(IBlockDevice device, VolumeHealth health, long capacityBytes)
    {
        _device = device;
        _health = health;
        _capacityBytes = Math.Max(capacityBytes, 1 << 20);
    }

    public IBlockDevice Device => _device;

    /// <summary>Bytes of published buffers held in memory.</summary>
    public long CachedBytes => Interlocked.Read(ref _bytes);

    /// <summary>Buffers in the cache (with or without bytes).</summary>
    public int BufferCount => _buffers.Count;

    /// <summary>Buffers changed and waiting for <see cref="Writeback"/>.</summary>
    public int DelayedWriteCount
    {
        get { lock (_delayedWrites) return _delayedWrites.Count; }
    }

    /// <summary>Read-ahead buffers read but not published because the buffer changed meanwhile (locked, invalidated, already read).</summary>
    public int ReadAheadsDiscarded => Volatile.Read(ref _readAheadsDiscarded);

    /// <summary>The read-ahead threads (see <see cref="BackgroundWorkers"/>).</summary>
    public BackgroundWorkers ReadAheadThreads => _readers;

    /// <summary>Asynchronous read-aheads still reading (the owner waits for none before closing the device).</summary>
    public int ReadAheadsInFlight => Volatile.Read(ref _readAheadsInFlight);

    /// <summary>The buffer of a disk range when the cache has one (no read, no hold).</summary>
    public MetadataBuffer? Find(long byteOffset, int length) =>
        _buffers.TryGetValue(new Key(byteOffset, length), out var buffer) ? buffer : null;

    // ---- reads ------------------------------------------------------------------------------------

    /// <summary>
    /// Returns the verified contents of <paramref name="length"/> bytes at <paramref name="byteOffset"/>,
    /// as <paramref name="verifier"/> checks them for <paramref name="owner"/> (the inode or AG the
    /// caller expects to own them). The array is the buffer's published snapshot, never changed while it is
    /// published; once newer bytes replaced it the buffer may reuse it for a later change (see
    /// <see cref="MetadataBuffer.OfferSpare"/>), so a reader of a read-write volume keeps it no longer than it holds the
    /// volume's lock.
    /// </summary>
    public byte[] Read<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        if (_buffers.TryGetValue(new Key(byteOffset, length), out var hit) && hit.Published is { } snapshot &&
            snapshot.Kind == verifier.Kind && snapshot.Owner == owner)
        {
            hit.Referenced = true;
            return snapshot.Data;
        }
        return ReadSlow(byteOffset, length, owner, verifier).Data;
    }

    private MetadataBuffer.Snapshot ReadSlow<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        if (byteOffset < 0 || length <= 0 || byteOffset + length > _device.Length)
            throw _health.Report(verifier.Structure, byteOffset, $"address outside the device ({_device.Length} bytes)");
        var key = new Key(byteOffset, length);
        for (int attempt = 0; ; attempt++)
        {
            var buffer = _buffers.GetOrAdd(key, NewBuffer);
            if (buffer.Published is { } published) return Reverify(buffer, published, owner, verifier);
            Task? pending;
            long generation;
            lock (buffer.State)
            {
                if (buffer.Evicted) continue;
                pending = buffer.PendingRead;
                generation = buffer.GenerationLocked;
            }
            if (pending is not null && attempt < 2)
            {
                // A read-ahead is fetching it: wait for that read rather than issue another.
                pending.Wait();
                continue;
            }
            var data = GC.AllocateUninitializedArray<byte>(length, pinned: true);
            _device.Read(byteOffset, data);
            var result = verifier.Verify(data, byteOffset);
            if (!result.IsOk)
            {
                DropIfEmpty(buffer);
                throw _health.Report(verifier.Structure, byteOffset, result.ToString());
            }
            var snapshot = new MetadataBuffer.Snapshot(data, verifier.Kind, owner);
            bool added = false;
            lock (buffer.State)
            {
                if (buffer.Published is { } raced)
                {
                    // Someone published first (a reader, a read-ahead, a writer's commit): theirs is current.
                    if (!ReferenceEquals(raced.Data, data)) return Reverify(buffer, raced, owner, verifier);
                }
                else if (!buffer.Evicted && !buffer.Stale && buffer.GenerationLocked == generation)
                {
                    buffer.Publish(snapshot);
                    added = true;
                }
            }
            if (added && Interlocked.Add(ref _bytes, length) > _capacityBytes) Sweep();
            return snapshot;
        }
    }

    /// <summary>
    /// Published bytes asked for with another verifier kind or owner: verified again as what is asked
    /// (a dirty buffer's CRC is not stamped until writeback, so a dirty one is checked on a copy with
    /// its CRC stamped). Passing retags the buffer; failing is corruption, as a fresh read would be.
    /// </summary>
    private MetadataBuffer.Snapshot Reverify<TVerifier>(MetadataBuffer buffer, MetadataBuffer.Snapshot published, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        buffer.Referenced = true;
        if (published.Kind == verifier.Kind && published.Owner == owner) return published;
        bool dirty;
        IBufferWriteVerifier? writeVerifier;
        lock (buffer.State)
        {
            dirty = buffer.Dirty;
            writeVerifier = buffer.WriteVerifier;
        }
        VerifyResult result;
        if (dirty && writeVerifier is not null)
        {
            var copy = published.Data.ToArray();
            writeVerifier.PrepareForWrite(copy, buffer.Offset, 0);
            result = verifier.Verify(copy, buffer.Offset);
        }
        else
        {
            result = verifier.Verify(published.Data, buffer.Offset);
        }
        if (!result.IsOk) throw _health.Report(verifier.Structure, buffer.Offset, result.ToString());
        lock (buffer.State)
        {
            if (ReferenceEquals(buffer.Published, published)) buffer.SetKindLocked(verifier.Kind, owner);
        }
        return new MetadataBuffer.Snapshot(published.Data, verifier.Kind, owner);
    }

    /// <summary>Removes a buffer that never got bytes and nobody uses (a read that failed verification).</summary>
    private void DropIfEmpty(MetadataBuffer buffer)
    {
        lock (buffer.State)
        {
            if (buffer.Published is not null || buffer.HoldsLocked > 0 || buffer.IsLockedLocked || buffer.PendingRead is not null || buffer.Evicted) return;
            buffer.Evicted = true;
            buffer.BumpGenerationLocked();
        }
        _buffers.TryRemove(new KeyValuePair<Key, MetadataBuffer>(new Key(buffer.Offset, buffer.Length), buffer));
    }

    /// <summary>
    /// The cached buffer, waiting for a read-ahead that is fetching it; false (nothing read, nothing
    /// reported) when it is neither cached as <paramref name="kind"/> for <paramref name="owner"/> nor on its way.
    /// </summary>
    public bool TryGetCached(long byteOffset, int length, ulong owner, int kind, out byte[] data)
    {
        data = null!;
        if (!_buffers.TryGetValue(new Key(byteOffset, length), out var buffer)) return false;
        if (buffer.Published is null && buffer.PendingRead is { } pending) pending.Wait();
        if (buffer.Published is not { } snapshot || snapshot.Kind != kind || snapshot.Owner != owner) return false;
        buffer.Referenced = true;
        data = snapshot.Data;
        return true;
    }

    /// <summary>Whether the buffer is cached as <paramref name="kind"/> for <paramref name="owner"/> or being read ahead (a cheap check before planning read-ahead).</summary>
    public bool IsCachedOrPending(long byteOffset, int length, ulong owner, int kind)
    {
        if (!_buffers.TryGetValue(new Key(byteOffset, length), out var buffer)) return false;
        return buffer.PendingRead is not null || buffer.Published is { } s && s.Kind == kind && s.Owner == owner;
    }

    // ---- holds and changes ------------------------------------------------------------------------

    /// <summary>Reads (verified) and holds a buffer: it stays in the cache until <see cref="ReleaseHold"/>.</summary>
    public MetadataBuffer Get<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        while (true)
        {
            Read(byteOffset, length, owner, verifier);
            if (!_buffers.TryGetValue(new Key(byteOffset, length), out var buffer)) continue;
            lock (buffer.State)
            {
                if (buffer.Published is null || !buffer.TryHoldLocked()) continue;
            }
            return buffer;
        }
    }

    /// <summary>Drops a hold taken by <see cref="Get"/>.</summary>
    public void ReleaseHold(MetadataBuffer buffer)
    {
        lock (buffer.State) buffer.DropHoldLocked();
    }

    /// <summary>
    /// Reads (verified, as <see cref="Read"/>), holds and locks a buffer for <paramref name="lockOwner"/>
    /// (the kernel's xfs_trans_read_buf), waiting while another owner has it locked, and starts its
    /// private copy. <paramref name="writeVerifier"/> checks and finishes it at writeback. Release with
    /// <see cref="Unlock"/>. See <see cref="MetadataBuffer"/> for the lock order.
    /// </summary>
    public MetadataBuffer ReadForWrite<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier,
        IBufferWriteVerifier? writeVerifier, object lockOwner)
        where TVerifier : struct, IBufferVerifier
    {
        while (true)
        {
            Read(byteOffset, length, owner, verifier);
            if (!_buffers.TryGetValue(new Key(byteOffset, length), out var buffer)) continue;
            lock (buffer.State)
            {
                if (buffer.Published is null || !buffer.TryHoldLocked()) continue;
                bool taken = buffer.AcquireLocked(lockOwner);
                if (buffer.Published is not { } snapshot || buffer.Evicted)
                {
                    // Invalidated and dropped (or emptied) while this owner waited for the lock: look it up again.
                    buffer.ReleaseLockLocked(lockOwner, commit: false);
                    buffer.DropHoldLocked();
                    continue;
                }
                if (taken)
                {
                    buffer.ChangeWriteVerifier = writeVerifier;
                    buffer.ChangeKind = verifier.Kind;
                    buffer.ChangeOwner = owner;
                    buffer.BeginChangeLocked(zeroed: false);
                }
                else if (snapshot.Kind != verifier.Kind || snapshot.Owner != owner)
                {
                    buffer.ReleaseLockLocked(lockOwner, commit: false);
                    buffer.DropHoldLocked();
                    throw new InvalidOperationException(
                        $"buffer at {byteOffset} (+{length}) is locked as kind {snapshot.Kind} for owner {snapshot.Owner}, asked for again as kind {verifier.Kind} for {owner}");
                }
                return buffer;
            }
        }
    }

    /// <summary>
    /// Holds and locks the buffer of a block about to be (re)initialised, without reading it (the
    /// kernel's xfs_trans_get_buf): its private copy starts zeroed, and whatever the cache had for it
    /// is replaced when the change commits. <paramref name="kind"/> and <paramref name="owner"/> tag the
    /// published bytes as a read verifier would. Release with <see cref="Unlock"/>.
    /// </summary>
    public MetadataBuffer GetNew(long byteOffset, int length, int kind, ulong owner, IBufferWriteVerifier? writeVerifier, object lockOwner) =>
        HoldAndLock(byteOffset, length, lockOwner, zeroedCopy: true, kind, owner, writeVerifier);

    /// <summary>
    /// Holds and locks the buffer of a freed block for <paramref name="lockOwner"/> to invalidate it
    /// (<see cref="MetadataBuffer.Invalidate"/>), without reading it and without a private copy (made only if the owner
    /// asks for the bytes: a freed block's are normally neither read nor logged again). Release with <see cref="Unlock"/>.
    /// </summary>
    public MetadataBuffer GetForInvalidate(long byteOffset, int length, object lockOwner) =>
        HoldAndLock(byteOffset, length, lockOwner, zeroedCopy: false, 0, 0, null);

    private MetadataBuffer HoldAndLock(long byteOffset, int length, object lockOwner, bool zeroedCopy, int kind, ulong owner, IBufferWriteVerifier? writeVerifier)
    {
        if (byteOffset < 0 || length <= 0 || byteOffset + length > _device.Length)
            throw new ArgumentOutOfRangeException(nameof(byteOffset), $"new buffer {byteOffset} (+{length}) outside the device ({_device.Length} bytes)");
        var key = new Key(byteOffset, length);
        while (true)
        {
            var buffer = _buffers.GetOrAdd(key, NewBuffer);
            lock (buffer.State)
            {
                if (!buffer.TryHoldLocked()) continue;
                buffer.AcquireLocked(lockOwner);
                if (buffer.Evicted)
                {
                    buffer.ReleaseLockLocked(lockOwner, commit: false);
                    buffer.DropHoldLocked();
                    continue;
                }
                buffer.BumpGenerationLocked();
                if (zeroedCopy)
                {
                    buffer.ChangeWriteVerifier = writeVerifier;
                    buffer.ChangeKind = kind;
                    buffer.ChangeOwner = owner;
                    buffer.BeginChangeLocked(zeroed: true);
                }
                else
                {
                    buffer.BeginInvalidateLocked();
                }
                return buffer;
            }
        }
    }

    /// <summary>
    /// Locks a buffer a change just committed for <paramref name="lockOwner"/> again, as it was published (a held buffer
    /// rejoining the next part of a rolled transaction, the kernel's xfs_trans_bhold); false when it was invalidated or
    /// evicted meanwhile.
    /// </summary>
    public bool Relock(MetadataBuffer buffer, object lockOwner)
    {
        lock (buffer.State)
        {
            if (buffer.Published is not { } snapshot || !buffer.TryHoldLocked()) return false;
            // A commit re-points the snapshot at new bytes (a writeback publishes a new one): the bytes tell whether
            // anything was published while this owner waited for the lock.
            var published = snapshot.Data;
            bool taken = buffer.AcquireLocked(lockOwner);
            if (buffer.Evicted || !ReferenceEquals(buffer.Published, snapshot) || !ReferenceEquals(snapshot.Data, published))
            {
                buffer.ReleaseLockLocked(lockOwner, commit: false);
                buffer.DropHoldLocked();
                return false;
            }
            if (taken)
            {
                buffer.ChangeWriteVerifier = buffer.WriteVerifier;
                buffer.ChangeKind = snapshot.Kind;
                buffer.ChangeOwner = snapshot.Owner;
                buffer.BeginChangeLocked(zeroed: false);
            }
            return true;
        }
    }

    /// <summary>
    /// Releases a buffer locked by <see cref="ReadForWrite"/> or <see cref="GetNew"/> (one level of a
    /// recursive lock, and the hold that came with it). With <paramref name="commit"/>, a change that
    /// logged anything is published and the buffer queued for writeback; without, the private copy is
    /// dropped. An invalidated buffer leaves the cache and is never written.
    /// </summary>
    public void Unlock(MetadataBuffer buffer, object lockOwner, bool commit)
    {
        bool removed = false, queue = false, firstBytes = false;
        lock (buffer.State)
        {
            bool hadBytes = buffer.Published is not null;
            var (released, becameDirty) = buffer.ReleaseLockLocked(lockOwner, commit);
            buffer.DropHoldLocked();
            if (released && buffer.Stale)
            {
                buffer.Evicted = true;
                buffer.BumpGenerationLocked();
                buffer.ClearDirtyLocked();
                removed = true;
                firstBytes = hadBytes; // bytes to take off the count
            }
            else if (becameDirty)
            {
                firstBytes = !hadBytes;
                if (!buffer.Queued) buffer.Queued = queue = true;
            }
            if (removed && buffer.Queued) buffer.Queued = false;
        }
        if (removed)
        {
            _buffers.TryRemove(new KeyValuePair<Key, MetadataBuffer>(new Key(buffer.Offset, buffer.Length), buffer));
            lock (_delayedWrites) _delayedWrites.Remove(buffer);
            if (firstBytes) Interlocked.Add(ref _bytes, -buffer.Length);
            return;
        }
        if (queue) lock (_delayedWrites) _delayedWrites.Add(buffer);
        if (firstBytes && Interlocked.Add(ref _bytes, buffer.Length) > _capacityBytes) Sweep();
    }

    /// <summary>
    /// Writes every buffer changed since the last writeback, in ascending disk order, each through its
    /// write verifier on a private copy (structure, LSN, CRC), then publishes what was written and
    /// marks it clean. Invalidated buffers are skipped. Waits for each buffer's lock in turn, holding
    /// no other: never call it while holding a buffer lock. A write verifier that refuses a block is
    /// our bug, not the disk's: it throws <see cref="InvalidOperationException"/> naming the structure
    /// and address, and that block and those after it stay queued. Returns the buffers written. The
    /// device is not flushed: the caller orders flushes.
    /// </summary>
    public int Writeback()
    {
        MetadataBuffer[] queued;
        lock (_delayedWrites)
        {
            queued = [.. _delayedWrites];
            _delayedWrites.Clear();
        }
        Array.Sort(queued, static (a, b) => a.Offset != b.Offset ? a.Offset.CompareTo(b.Offset) : a.Length.CompareTo(b.Length));
        var writer = new object();
        int written = 0;
        for (int i = 0; i < queued.Length; i++)
        {
            var buffer = queued[i];
            MetadataBuffer.Snapshot? snapshot;
            IBufferWriteVerifier? writeVerifier;
            ulong lsn;
            bool skip;
            lock (buffer.State)
            {
                buffer.Queued = false;
                if (buffer.Stale || buffer.Evicted || !buffer.Dirty) continue;
                buffer.TryHoldLocked();
                buffer.AcquireLocked(writer);
                // While it waited for the lock, a change may have invalidated it or another writeback written it.
                skip = buffer.Stale || buffer.Evicted || !buffer.Dirty;
                snapshot = buffer.Published;
                writeVerifier = buffer.WriteVerifier;
                lsn = buffer.Lsn;
            }
            bool done = false;
            try
            {
                if (skip || snapshot is null)
                {
                    done = true;
                    continue;
                }
                var image = GC.AllocateUninitializedArray<byte>(buffer.Length);
                snapshot.Data.CopyTo(image, 0);
                var check = writeVerifier?.PrepareForWrite(image, buffer.Offset, lsn) ?? VerifyResult.Ok;
                if (!check.IsOk)
                    throw new InvalidOperationException(
                        $"write verifier refused {writeVerifier!.Structure} at byte offset {buffer.Offset} (daddr {buffer.Offset >> 9}): {check}; nothing of it was written");
                _device.Write(buffer.Offset, image);
                lock (buffer.State)
                {
                    buffer.Publish(new MetadataBuffer.Snapshot(image, snapshot.Kind, snapshot.Owner));
                    buffer.ClearDirtyLocked();
                }
                written++;
                done = true;
            }
            finally
            {
                lock (buffer.State)
                {
                    buffer.ReleaseLockLocked(writer, commit: false);
                    buffer.DropHoldLocked();
                    if (!done && buffer.Dirty && !buffer.Stale) buffer.Queued = true;
                }
                if (!done && buffer.Queued)
                {
                    // Failed: this one and every later one stay queued.
                    lock (_delayedWrites)
                    {
                        _delayedWrites.Add(buffer);
                        for (int k = i + 1; k < queued.Length; k++)
                        {
                            lock (queued[k].State)
                            {
                                if (queued[k].Queued || !queued[k].Dirty || queued[k].Stale) continue;
                                queued[k].Queued = true;
                            }
                            _delayedWrites.Add(queued[k]);
                        }
                    }
                }
            }
        }
        return written;
    }

    /// <summary>
    /// Marks every dirty buffer clean without writing it: the journal has written their logged state in place (a
    /// read-write volume's writeback goes through the log, never through <see cref="Writeback"/>). Buffers locked
    /// for a change keep their state. Call only when no committed change is still waiting for its writeback.
    /// </summary>
    public void ForgetDelayedWrites()
    {
        MetadataBuffer[] queued;
        lock (_delayedWrites)
        {
            queued = [.. _delayedWrites];
            _delayedWrites.Clear();
        }
        var keep = new List<MetadataBuffer>();
        foreach (var buffer in queued)
        {
            lock (buffer.State)
            {
                if (buffer.IsLockedLocked) keep.Add(buffer);
                else
                {
                    buffer.Queued = false;
                    buffer.ClearDirtyLocked();
                }
            }
        }
        // Lock order: _delayedWrites is never taken inside a buffer's State.
        if (keep.Count > 0) lock (_delayedWrites) _delayedWrites.AddRange(keep);
    }

    // ---- read-ahead -------------------------------------------------------------------------------

    /// <summary>
    /// Asynchronous read-ahead: one device read of <paramref name="spanLength"/> bytes at
    /// <paramref name="spanOffset"/>, in the background, publishing the buffers of <paramref name="blockLength"/>
    /// bytes that start at <paramref name="blockOffsets"/> (inside the span) and verify. The span may
    /// cover bytes nobody asked for (small gaps between wanted blocks cost less than another read).
    /// Buffers already cached or pending are left alone; readers that miss a pending buffer wait for
    /// this read. A buffer that was locked for a change, invalidated or read by someone else before
    /// this read completes is not touched (its generation moved on). Failures are silent: a buffer
    /// that did not arrive is read, verified and reported by whoever needs it. When too many
    /// read-aheads are in flight this returns without doing anything, or, with
    /// <paramref name="waitForSlot"/> (callers that are themselves background work), waits.
    /// </summary>
    public void StartPrefetch<TVerifier>(long spanOffset, int spanLength, ReadOnlySpan<long> blockOffsets, int blockLength, ulong owner,
        TVerifier verifier, bool waitForSlot = false)
        where TVerifier : struct, IBufferVerifier
    {
        if (spanOffset < 0 || spanLength <= 0 || spanOffset + spanLength > _device.Length) return;
        while (Interlocked.Increment(ref _readAheadsInFlight) > MaxReadAheadsInFlight)
        {
            Interlocked.Decrement(ref _readAheadsInFlight);
            if (!waitForSlot) return;
            Thread.Sleep(1);
        }
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var wanted = new List<(MetadataBuffer Buffer, long Generation)>(blockOffsets.Length);
        foreach (var offset in blockOffsets)
        {
            if (offset < spanOffset || offset + blockLength > spanOffset + spanLength) continue;
            var buffer = _buffers.GetOrAdd(new Key(offset, blockLength), NewBuffer);
            lock (buffer.State)
            {
                if (buffer.Evicted || buffer.Published is not null || buffer.PendingRead is not null || buffer.IsLockedLocked) continue;
                buffer.PendingRead = done.Task;
                wanted.Add((buffer, buffer.GenerationLocked));
            }
        }
        if (wanted.Count == 0)
        {
            Interlocked.Decrement(ref _readAheadsInFlight);
            done.SetResult();
            return;
        }
        void ReadSpan()
        {
            try
            {
                var pooled = spanLength <= ReadAheadMaxSpanBytes ? _spanBuffers.Rent() : null;
                try
                {
                    var span = pooled is not null ? pooled.Span[..spanLength] : new byte[spanLength];
                    _device.Read(spanOffset, span);
                    long added = 0;
                    foreach (var (buffer, generation) in wanted)
                        added += PublishReadAhead(buffer, generation, span.Slice((int)(buffer.Offset - spanOffset), blockLength), owner, verifier, done.Task);
                    if (Interlocked.Add(ref _bytes, added) > _capacityBytes) Sweep();
                }
                finally
                {
                    if (pooled is not null) _spanBuffers.Return(pooled);
                }
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException or ObjectDisposedException)
            {
                // Read-ahead only: the buffers are read again, and errors reported, by their readers.
            }
            finally
            {
                EndReadAhead(wanted, done);
            }
        }
        if (!_readers.TryQueue(ReadSpan))
        {
            // Closing: nobody will read these; readers that found them pending read for themselves.
            EndReadAhead(wanted, done);
        }
    }

    private void EndReadAhead(List<(MetadataBuffer Buffer, long Generation)> wanted, TaskCompletionSource done)
    {
        foreach (var (buffer, _) in wanted)
        {
            lock (buffer.State)
            {
                if (ReferenceEquals(buffer.PendingRead, done.Task)) buffer.PendingRead = null;
            }
        }
        Interlocked.Decrement(ref _readAheadsInFlight);
        done.SetResult();
    }

    /// <summary>Publishes one block a read-ahead read, if it verifies and the buffer is still empty and of the generation the read started under.</summary>
    private long PublishReadAhead<TVerifier>(MetadataBuffer buffer, long generation, ReadOnlySpan<byte> block, ulong owner, TVerifier verifier, Task readTask)
        where TVerifier : struct, IBufferVerifier
    {
        if (!verifier.Verify(block, buffer.Offset).IsOk) return 0;
        var copy = GC.AllocateUninitializedArray<byte>(block.Length, pinned: true);
        block.CopyTo(copy);
        lock (buffer.State)
        {
            if (ReferenceEquals(buffer.PendingRead, readTask)) buffer.PendingRead = null;
            if (buffer.Published is not null || buffer.Evicted || buffer.Stale || buffer.GenerationLocked != generation)
            {
                Interlocked.Increment(ref _readAheadsDiscarded);
                return 0;
            }
            buffer.Publish(new MetadataBuffer.Snapshot(copy, verifier.Kind, owner));
        }
        return block.Length;
    }

    private const int MaxReadAheadsInFlight = 16;

    /// <summary>Lets queued read-ahead finish and stops its threads; later read-ahead requests are ignored. Reads still work.</summary>
    public void Dispose()
    {
        // A read that outlived the threads' deadline returns its buffer later; it is then kept, not freed under it.
        _readers.Dispose();
        _spanBuffers.Dispose();
    }

    /// <summary>Largest single read-ahead read, and the largest gap between wanted buffers read through rather than split.</summary>
    private const int ReadAheadMaxSpanBytes = 1024 * 1024, ReadAheadMaxGapBytes = 64 * 1024;

    /// <summary>
    /// Read-ahead of scattered buffers of one kind: sorts <paramref name="blockOffsets"/> (in place)
    /// by disk address, merges buffers that lie close together into reads of up to 1 MiB (reading
    /// through gaps of up to 64 KiB), and starts each with <see cref="StartPrefetch"/>.
    /// </summary>
    public void StartPrefetchScattered<TVerifier>(Span<long> blockOffsets, int blockLength, ulong owner, TVerifier verifier, bool waitForSlot = false)
        where TVerifier : struct, IBufferVerifier
    {
        if (blockOffsets.IsEmpty) return;
        blockOffsets.Sort();
        int first = 0;
        for (int i = 1; i <= blockOffsets.Length; i++)
        {
            bool joins = i < blockOffsets.Length && blockOffsets[i] - (blockOffsets[i - 1] + blockLength) <= ReadAheadMaxGapBytes &&
                         blockOffsets[i] + blockLength - blockOffsets[first] <= ReadAheadMaxSpanBytes;
            if (joins) continue;
            long spanStart = blockOffsets[first], spanEnd = blockOffsets[i - 1] + blockLength;
            StartPrefetch(spanStart, (int)(spanEnd - spanStart), blockOffsets[first..i], blockLength, owner, verifier, waitForSlot);
            first = i;
        }
    }

    // ---- eviction ---------------------------------------------------------------------------------

    /// <summary>
    /// Drops every buffer that can be dropped (not held, locked, dirty or being read), e.g. after the
    /// device under the cache changed outside it. Returns how many buffers stay.
    /// </summary>
    public int Clear()
    {
        foreach (var (_, buffer) in _buffers) TryEvict(buffer);
        return _buffers.Count;
    }

    private bool TryEvict(MetadataBuffer buffer)
    {
        bool hadBytes;
        lock (buffer.State)
        {
            if (buffer.Evicted || buffer.HoldsLocked > 0 || buffer.IsLockedLocked || buffer.Dirty || buffer.PendingRead is not null) return false;
            buffer.Evicted = true;
            buffer.BumpGenerationLocked();
            hadBytes = buffer.Published is not null;
        }
        _buffers.TryRemove(new KeyValuePair<Key, MetadataBuffer>(new Key(buffer.Offset, buffer.Length), buffer));
        if (hadBytes) Interlocked.Add(ref _bytes, -buffer.Length);
        return hadBytes;
    }

    private void Sweep()
    {
        if (Interlocked.Read(ref _bytes) < Interlocked.Read(ref _sweepAgainAt)) return;
        if (Interlocked.Exchange(ref _sweeping, 1) != 0) return;
        try
        {
            Interlocked.Increment(ref _sweeps);
            long target = _capacityBytes * 3 / 4;
            for (int pass = 0; pass < 2 && Interlocked.Read(ref _bytes) > target; pass++)
            {
                foreach (var (_, buffer) in _buffers)
                {
                    if (buffer.Referenced)
                    {
                        buffer.Referenced = false;
                        continue;
                    }
                    if (TryEvict(buffer) && Interlocked.Read(ref _bytes) <= target) break;
                }
            }
            long left = Interlocked.Read(ref _bytes);
            Interlocked.Exchange(ref _sweepAgainAt, left > target ? left + _capacityBytes / 8 : 0);
        }
        finally
        {
            Volatile.Write(ref _sweeping, 0);
        }
    }
}

/// <summary>A verifier that accepts anything: for data-like blocks checked piecewise by their reader (inode clusters).</summary>
public readonly struct RawBlockVerifier(string structure, int kind) : IBufferVerifier
{
    public int Kind => kind;
    public string Structure => structure;
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => VerifyResult.Ok;
}

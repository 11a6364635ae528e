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
/// Verified metadata buffers of one volume, bounded in bytes. A buffer enters the cache only after
/// its verifier passed (CRC first on V5, then structure); a failure is reported to the volume's
/// <see cref="VolumeHealth"/> and thrown as <see cref="XfsCorruptionException"/>. Cached buffers are
/// immutable (this cache serves the read path). Eviction is second-chance (CLOCK-like): entries
/// touched since the last sweep survive one more.
/// </summary>
public sealed class BufferCache : IDisposable
{
    private readonly record struct Key(long Offset, int Length, int Kind, ulong Owner);

    private sealed class Entry(byte[] data)
    {
        public readonly byte[] Data = data;
        public volatile bool Referenced = true;
    }

    private readonly IBlockDevice _device;
    private readonly VolumeHealth _health;
    private readonly ConcurrentDictionary<Key, Entry> _entries = new();
    // Blocks an asynchronous read-ahead is fetching: a reader that misses the cache waits for that
    // read instead of issuing its own (the read-ahead is usually the larger, earlier request).
    private readonly ConcurrentDictionary<Key, Task> _pending = new();
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
    private long _bytes;
    private int _sweeping;

    public BufferCache(IBlockDevice device, VolumeHealth health, long capacityBytes)
    {
        _device = device;
        _health = health;
        _capacityBytes = Math.Max(capacityBytes, 1 << 20);
    }

    public IBlockDevice Device => _device;

    public long CachedBytes => Interlocked.Read(ref _bytes);

    /// <summary>The read-ahead threads (see <see cref="BackgroundWorkers"/>).</summary>
    public BackgroundWorkers ReadAheadThreads => _readers;

    /// <summary>Asynchronous read-aheads still reading (the owner waits for none before closing the device).</summary>
    public int ReadAheadsInFlight => Volatile.Read(ref _readAheadsInFlight);

    /// <summary>
    /// Returns the verified contents of <paramref name="length"/> bytes at <paramref name="byteOffset"/>.
    /// <paramref name="owner"/> is part of the identity (the inode or AG the caller expects to own it).
    /// </summary>
    public byte[] Read<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        var key = new Key(byteOffset, length, verifier.Kind, owner);
        if (_entries.TryGetValue(key, out var hit))
        {
            hit.Referenced = true;
            return hit.Data;
        }
        if (_pending.TryGetValue(key, out var inFlight))
        {
            inFlight.Wait();
            if (_entries.TryGetValue(key, out hit))
            {
                hit.Referenced = true;
                return hit.Data;
            }
        }
        if (byteOffset < 0 || byteOffset + length > _device.Length)
            throw _health.Report(verifier.Structure, byteOffset, $"address outside the device ({_device.Length} bytes)");
        var data = GC.AllocateUninitializedArray<byte>(length, pinned: true);
        _device.Read(byteOffset, data);
        var result = verifier.Verify(data, byteOffset);
        if (!result.IsOk) throw _health.Report(verifier.Structure, byteOffset, result.ToString());
        if (_entries.TryAdd(key, new Entry(data)))
        {
            if (Interlocked.Add(ref _bytes, length) > _capacityBytes) Sweep();
        }
        return data;
    }

    /// <summary>
    /// The cached buffer, waiting for a read-ahead that is fetching it; false (nothing read, nothing
    /// reported) when it is neither cached nor on its way.
    /// </summary>
    public bool TryGetCached(long byteOffset, int length, ulong owner, int kind, out byte[] data)
    {
        var key = new Key(byteOffset, length, kind, owner);
        if (!_entries.TryGetValue(key, out var hit) && _pending.TryGetValue(key, out var inFlight))
        {
            inFlight.Wait();
            _entries.TryGetValue(key, out hit);
        }
        data = hit?.Data!;
        return hit is not null;
    }

    /// <summary>Whether the buffer is cached or being read ahead (a cheap check before planning read-ahead).</summary>
    public bool IsCachedOrPending(long byteOffset, int length, ulong owner, int kind)
    {
        var key = new Key(byteOffset, length, kind, owner);
        return _entries.ContainsKey(key) || _pending.ContainsKey(key);
    }

    /// <summary>
    /// Asynchronous read-ahead: one device read of <paramref name="spanLength"/> bytes at
    /// <paramref name="spanOffset"/>, in the background, caching the buffers of <paramref name="blockLength"/>
    /// bytes that start at <paramref name="blockOffsets"/> (inside the span) and verify. The span may
    /// cover bytes nobody asked for (small gaps between wanted blocks cost less than another read).
    /// Buffers already cached or pending are left alone; readers that miss a pending buffer wait for
    /// this read. Failures are silent: a buffer that did not arrive is read, verified and reported by
    /// whoever needs it. When too many read-aheads are in flight this returns without doing anything,
    /// or, with <paramref name="waitForSlot"/> (callers that are themselves background work), waits.
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
        var keys = new List<Key>(blockOffsets.Length);
        foreach (var offset in blockOffsets)
        {
            if (offset < spanOffset || offset + blockLength > spanOffset + spanLength) continue;
            var key = new Key(offset, blockLength, verifier.Kind, owner);
            if (!_entries.ContainsKey(key) && _pending.TryAdd(key, done.Task)) keys.Add(key);
        }
        if (keys.Count == 0)
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
                    foreach (var key in keys)
                        added += AddVerified(span.Slice((int)(key.Offset - spanOffset), blockLength), key.Offset, owner, verifier);
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
                foreach (var key in keys) _pending.TryRemove(key, out _);
                Interlocked.Decrement(ref _readAheadsInFlight);
                done.SetResult();
            }
        }
        if (!_readers.TryQueue(ReadSpan))
        {
            // Closing: nobody will read these; readers that found them pending read for themselves.
            foreach (var key in keys) _pending.TryRemove(key, out _);
            Interlocked.Decrement(ref _readAheadsInFlight);
            done.SetResult();
        }
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

    private long AddVerified<TVerifier>(ReadOnlySpan<byte> block, long offset, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        var key = new Key(offset, block.Length, verifier.Kind, owner);
        if (_entries.ContainsKey(key) || !verifier.Verify(block, offset).IsOk) return 0;
        var copy = GC.AllocateUninitializedArray<byte>(block.Length, pinned: true);
        block.CopyTo(copy);
        return _entries.TryAdd(key, new Entry(copy)) ? block.Length : 0;
    }

    /// <summary>Drops everything (after the device under the cache changed, e.g. log replay in place).</summary>
    public void Clear()
    {
        _entries.Clear();
        Interlocked.Exchange(ref _bytes, 0);
    }

    private void Sweep()
    {
        if (Interlocked.Exchange(ref _sweeping, 1) != 0) return;
        try
        {
            long target = _capacityBytes * 3 / 4;
            for (int pass = 0; pass < 2 && Interlocked.Read(ref _bytes) > target; pass++)
            {
                foreach (var (key, entry) in _entries)
                {
                    if (entry.Referenced)
                    {
                        entry.Referenced = false;
                        continue;
                    }
                    if (_entries.TryRemove(key, out _) && Interlocked.Add(ref _bytes, -key.Length) <= target) break;
                }
            }
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

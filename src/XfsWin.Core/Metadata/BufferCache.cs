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
public sealed class BufferCache
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
    private readonly long _capacityBytes;
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
    /// Read-ahead: fetches <paramref name="count"/> consecutive buffers of <paramref name="blockLength"/>
    /// bytes starting at <paramref name="byteOffset"/> with one device read, and caches each one that
    /// verifies. Nothing is thrown for a block that fails: it is verified again, and reported, when
    /// someone actually reads it.
    /// </summary>
    public void Prefetch<TVerifier>(long byteOffset, int blockLength, int count, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        if (count <= 1 || byteOffset < 0 || byteOffset + (long)blockLength * count > _device.Length) return;
        // Only when the first block is missing: a walk through a prefetched run then costs no I/O
        // until it reaches the first block the previous run did not cover.
        if (_entries.ContainsKey(new Key(byteOffset, blockLength, verifier.Kind, owner))) return;
        var run = GC.AllocateUninitializedArray<byte>(blockLength * count);
        _device.Read(byteOffset, run);
        long added = 0;
        for (int i = 0; i < count; i++)
        {
            long offset = byteOffset + (long)i * blockLength;
            var key = new Key(offset, blockLength, verifier.Kind, owner);
            if (_entries.ContainsKey(key)) continue;
            var slice = run.AsSpan(i * blockLength, blockLength);
            if (!verifier.Verify(slice, offset).IsOk) continue;
            if (_entries.TryAdd(key, new Entry(slice.ToArray()))) added += blockLength;
        }
        if (Interlocked.Add(ref _bytes, added) > _capacityBytes) Sweep();
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

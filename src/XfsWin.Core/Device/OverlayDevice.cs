namespace XfsWin.Device;

/// <summary>
/// A copy-on-write overlay over a base device: reads see the base device except where the overlay
/// was written; writes go to memory only, in whole pages of <see cref="PageSize"/> bytes (a multiple
/// of every sector size XFS uses, aligned to it). <see cref="FlushTo"/> writes the dirty pages out in
/// ascending order. Reads and writes are safe to call concurrently (one reader-writer lock; base
/// reads happen outside it for pages the overlay does not hold).
/// </summary>
public sealed class OverlayDevice : IBlockDevice
{
    public const int PageSize = 4096;
    private readonly IBlockDevice _base;
    private readonly bool _ownsBase;
    private readonly Dictionary<long, byte[]> _pages = new();
    /// <summary>Unmodified copies of base pages read ahead by <see cref="Prefetch"/>; a write moves a page to <see cref="_pages"/>.</summary>
    private readonly Dictionary<long, byte[]> _clean = new();
    private readonly ReaderWriterLockSlim _lock = new(LockRecursionPolicy.NoRecursion);

    public OverlayDevice(IBlockDevice baseDevice, bool ownsBase = false)
    {
        _base = baseDevice;
        _ownsBase = ownsBase;
    }

    public IBlockDevice BaseDevice => _base;
    public long Length => _base.Length;
    public int SectorSize => _base.SectorSize;
    public bool CanWrite => true;
    public string IoMode => $"overlay (replayed log in memory) over {_base.IoMode}";

    /// <summary>Number of bytes held in memory.</summary>
    public long DirtyBytes
    {
        get
        {
            _lock.EnterReadLock();
            try { return (long)_pages.Count * PageSize; }
            finally { _lock.ExitReadLock(); }
        }
    }

    /// <summary>Dirty ranges as (byte offset, length), ascending, adjacent pages merged.</summary>
    public IReadOnlyList<(long Offset, long Length)> DirtyRanges()
    {
        long[] keys;
        _lock.EnterReadLock();
        try { keys = [.. _pages.Keys]; }
        finally { _lock.ExitReadLock(); }
        Array.Sort(keys);
        var ranges = new List<(long, long)>();
        int i = 0;
        while (i < keys.Length)
        {
            int j = i + 1;
            while (j < keys.Length && keys[j] == keys[j - 1] + 1) j++;
            ranges.Add((keys[i] * PageSize, (long)(j - i) * PageSize));
            i = j;
        }
        return ranges;
    }

    public void Read(long offset, Span<byte> destination)
    {
        CheckRange(offset, destination.Length);
        while (destination.Length > 0)
        {
            long page = offset / PageSize;
            int inPage = (int)(offset % PageSize);
            byte[]? data;
            _lock.EnterReadLock();
            try
            {
                if (_pages.TryGetValue(page, out data) || _clean.TryGetValue(page, out data))
                {
                    int n = Math.Min(destination.Length, PageSize - inPage);
                    data.AsSpan(inPage, n).CopyTo(destination);
                    destination = destination[n..];
                    offset += n;
                    continue;
                }
                // Extend the base read over every following page the overlay does not hold.
                long end = offset + destination.Length;
                long run = PageSize - inPage;
                long next = page + 1;
                while (offset + run < end && !_pages.ContainsKey(next) && !_clean.ContainsKey(next))
                {
                    run += PageSize;
                    next++;
                }
                int len = (int)Math.Min(run, destination.Length);
                _lock.ExitReadLock();
                try { _base.Read(offset, destination[..len]); }
                finally { _lock.EnterReadLock(); }
                destination = destination[len..];
                offset += len;
            }
            finally { _lock.ExitReadLock(); }
        }
    }

    public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
    {
        cancellationToken.ThrowIfCancellationRequested();
        Read(offset, destination.Span);
        return ValueTask.CompletedTask;
    }

    public void Write(long offset, ReadOnlySpan<byte> source)
    {
        CheckRange(offset, source.Length);
        while (source.Length > 0)
        {
            long page = offset / PageSize;
            int inPage = (int)(offset % PageSize);
            int n = Math.Min(source.Length, PageSize - inPage);
            byte[]? data;
            _lock.EnterReadLock();
            try { _pages.TryGetValue(page, out data); }
            finally { _lock.ExitReadLock(); }
            if (data is null)
            {
                _lock.EnterWriteLock();
                try
                {
                    if (!_pages.TryGetValue(page, out data) && _clean.Remove(page, out data)) _pages[page] = data;
                }
                finally { _lock.ExitWriteLock(); }
            }
            if (data is null)
            {
                var fresh = new byte[PageSize];
                if (n != PageSize) _base.Read(page * PageSize, fresh);
                _lock.EnterWriteLock();
                try
                {
                    if (!_pages.TryGetValue(page, out data))
                    {
                        _pages[page] = fresh;
                        data = fresh;
                    }
                }
                finally { _lock.ExitWriteLock(); }
            }
            _lock.EnterWriteLock();
            try { source[..n].CopyTo(data.AsSpan(inPage)); }
            finally { _lock.ExitWriteLock(); }
            source = source[n..];
            offset += n;
        }
    }

    /// <summary>
    /// Reads ahead: copies the base device's pages covering each range into memory with one large read per
    /// range (ranges sorted by offset read the device sequentially), so later small reads and
    /// read-modify-writes of those pages do not go to the device one by one. Pages stay clean (not
    /// flushed) until written.
    /// </summary>
    public void Prefetch(IEnumerable<(long Offset, long Length)> ranges)
    {
        byte[] buffer = [];
        foreach (var (offset, length) in ranges)
        {
            long first = offset / PageSize, last = (offset + length - 1) / PageSize;
            last = Math.Min(last, (Length - 1) / PageSize);
            if (length <= 0 || first > last) continue;
            long start = first * PageSize;
            int bytes = (int)Math.Min((last - first + 1) * PageSize, Length - start);
            if (buffer.Length < bytes) buffer = new byte[bytes];
            _base.Read(start, buffer.AsSpan(0, bytes));
            _lock.EnterWriteLock();
            try
            {
                for (long p = first; p <= last; p++)
                {
                    if (_pages.ContainsKey(p) || _clean.ContainsKey(p)) continue;
                    var page = new byte[PageSize];
                    int at = (int)((p - first) * PageSize);
                    buffer.AsSpan(at, Math.Min(PageSize, bytes - at)).CopyTo(page);
                    _clean[p] = page;
                }
            }
            finally { _lock.ExitWriteLock(); }
        }
    }

    /// <summary>Forgets read-ahead pages that were never written (the memory they hold is freed).</summary>
    public void DropCleanPages()
    {
        _lock.EnterWriteLock();
        try { _clean.Clear(); }
        finally { _lock.ExitWriteLock(); }
    }

    /// <summary>Nothing to flush: writes stay in memory until <see cref="FlushTo"/>.</summary>
    public void Flush() { }

    /// <summary>
    /// Writes every dirty range to <paramref name="target"/> in ascending order, then flushes it.
    /// <paramref name="progress"/> receives (bytes written, total bytes).
    /// </summary>
    public void FlushTo(IBlockDevice target, Action<long, long>? progress)
    {
        if (!target.CanWrite) throw new XfsException(XfsError.ReadOnly, "the target device was opened read-only; cannot write the replayed log to it.");
        var ranges = DirtyRanges();
        long total = 0, done = 0;
        foreach (var r in ranges) total += r.Length;
        var buffer = new byte[1 << 20];
        foreach (var (offset, length) in ranges)
        {
            for (long pos = 0; pos < length; pos += buffer.Length)
            {
                int n = (int)Math.Min(buffer.Length, length - pos);
                Read(offset + pos, buffer.AsSpan(0, n));
                target.Write(offset + pos, buffer.AsSpan(0, n));
                done += n;
                progress?.Invoke(done, total);
            }
        }
        target.Flush();
    }

    private void CheckRange(long offset, int length)
    {
        if (offset < 0 || offset + length > Length)
            throw new XfsException(XfsError.IoError, $"access at byte {offset} (+{length}) is beyond the end of the device ({Length} bytes)");
    }

    public void Dispose()
    {
        _lock.Dispose();
        if (_ownsBase) _base.Dispose();
    }
}

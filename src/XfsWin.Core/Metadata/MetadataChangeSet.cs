namespace XfsWin.Metadata;

/// <summary>
/// The buffers one change holds locked, as a kernel transaction joins them: each buffer is locked
/// once, on first use, and stays locked (and its private copy stable) until <see cref="Commit"/>
/// publishes every buffer that logged a change and queues it for writeback, or <see cref="Cancel"/>
/// drops every private copy. Asking again for a joined buffer returns it as it is, changes included.
/// The change set is the lock owner of its buffers; it is used by one thread at a time.
/// <para>
/// Lock order (see <see cref="MetadataBuffer"/>): a change set that joins AG headers joins them in
/// ascending AG order, the AGI before the AGF within an AG; two change sets that could want the same
/// buffers must follow it, or one of them waits forever.
/// </para>
/// </summary>
public sealed class MetadataChangeSet(BufferCache cache) : IDisposable
{
    private readonly Dictionary<(long Offset, int Length), MetadataBuffer> _joined = [];
    // The joined buffers in disk order while they are unlocked (kept for the next finish).
    private readonly List<MetadataBuffer> _unlockOrder = [];
    private bool _finished;

    private static readonly Comparison<MetadataBuffer> DiskOrder =
        static (a, b) => a.Offset != b.Offset ? a.Offset.CompareTo(b.Offset) : a.Length.CompareTo(b.Length);

    /// <summary>Opens a finished change set again, empty, for the next change of the same owner (a reused transaction).</summary>
    public void Restart()
    {
        if (!_finished) throw new InvalidOperationException("this change is still open");
        _finished = false;
    }

    public BufferCache Cache => cache;

    /// <summary>Buffers joined so far.</summary>
    public int Count => _joined.Count;

    /// <summary>The verified buffer, locked and joined (read through the cache on first use).</summary>
    public MetadataBuffer Read<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier, IBufferWriteVerifier? writeVerifier)
        where TVerifier : struct, IBufferVerifier
    {
        CheckOpen();
        if (_joined.TryGetValue((byteOffset, length), out var joined)) return joined;
        var buffer = cache.ReadForWrite(byteOffset, length, owner, verifier, writeVerifier, this);
        _joined.Add((byteOffset, length), buffer);
        return buffer;
    }

    /// <summary>A buffer for a block about to be initialised: locked, joined, its contents zeroed (even when it was joined already).</summary>
    public MetadataBuffer GetNew(long byteOffset, int length, int kind, ulong owner, IBufferWriteVerifier? writeVerifier)
    {
        CheckOpen();
        if (_joined.TryGetValue((byteOffset, length), out var joined))
        {
            // Joined already (a block freed and taken again in one change): the lock is ours, so take it once more and drop that level.
            cache.Unlock(cache.GetNew(byteOffset, length, kind, owner, writeVerifier, this), this, commit: false);
            return joined;
        }
        var buffer = cache.GetNew(byteOffset, length, kind, owner, writeVerifier, this);
        _joined.Add((byteOffset, length), buffer);
        return buffer;
    }

    /// <summary>
    /// Joins a buffer an earlier change committed, locked again (a held buffer carried into the next part of a rolled
    /// transaction); false when it is gone from the cache.
    /// </summary>
    public bool Rejoin(MetadataBuffer buffer)
    {
        CheckOpen();
        if (_joined.ContainsKey((buffer.Offset, buffer.Length))) return true;
        if (!cache.Relock(buffer, this)) return false;
        _joined.Add((buffer.Offset, buffer.Length), buffer);
        return true;
    }

    /// <summary>
    /// Unlocks a joined buffer before the change ends and drops it from the change (the kernel's xfs_trans_brelse of a
    /// clean buffer): its private copy, if one was made, is dropped. The caller makes sure the change logged nothing in
    /// it and keeps no reference it still uses; false when the buffer is not joined.
    /// </summary>
    public bool Release(MetadataBuffer buffer)
    {
        CheckOpen();
        if (!_joined.Remove((buffer.Offset, buffer.Length), out var joined)) return false;
        if (!ReferenceEquals(joined, buffer)) throw new InvalidOperationException($"buffer at {buffer.Offset} (+{buffer.Length}) is not the one this change joined");
        cache.Unlock(buffer, this, commit: false);
        return true;
    }

    /// <summary>Logs bytes [<paramref name="first"/>, <paramref name="last"/>] of a joined buffer as changed.</summary>
    public void LogRange(long byteOffset, int length, int first, int last)
    {
        CheckOpen();
        if (!_joined.TryGetValue((byteOffset, length), out var buffer))
            throw new InvalidOperationException($"buffer at {byteOffset} (+{length}) is not part of this change");
        buffer.LogRange(first, last);
    }

    /// <summary>Invalidates the buffer of a freed block (joined, without reading it, when it was not).</summary>
    public void Invalidate(long byteOffset, int length)
    {
        CheckOpen();
        if (!_joined.TryGetValue((byteOffset, length), out var buffer))
        {
            buffer = cache.GetForInvalidate(byteOffset, length, this);
            _joined.Add((byteOffset, length), buffer);
        }
        buffer.Invalidate();
    }

    /// <summary>Publishes every changed buffer, queues it for writeback and unlocks everything (in ascending disk order).</summary>
    public void Commit() => Finish(commit: true);

    /// <summary>Drops every private copy and unlocks everything: the cache keeps what it had before the change.</summary>
    public void Cancel() => Finish(commit: false);

    public void Dispose()
    {
        if (!_finished) Cancel();
    }

    private void Finish(bool commit)
    {
        CheckOpen();
        _finished = true;
        if (_joined.Count == 1)
        {
            foreach (var buffer in _joined.Values) cache.Unlock(buffer, this, commit);
        }
        else if (_joined.Count > 1)
        {
            var buffers = _unlockOrder;
            buffers.Clear();
            foreach (var buffer in _joined.Values) buffers.Add(buffer);
            buffers.Sort(DiskOrder);
            try
            {
                foreach (var buffer in buffers) cache.Unlock(buffer, this, commit);
            }
            finally
            {
                buffers.Clear();
            }
        }
        _joined.Clear();
    }

    private void CheckOpen()
    {
        if (_finished) throw new InvalidOperationException("this change was already committed or cancelled");
    }
}

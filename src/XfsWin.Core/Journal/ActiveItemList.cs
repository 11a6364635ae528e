namespace XfsWin.Journal;

/// <summary>
/// The AIL: items whose checkpoint is in the log but whose metadata is not yet written in place, ordered by the
/// start LSN of that checkpoint. An item logged again by a later checkpoint moves to that LSN. The smallest LSN is
/// the log's tail: the log before it may be overwritten. Not thread-safe: <see cref="MountedLog"/> locks.
/// </summary>
public sealed class ActiveItemList
{
    private readonly SortedDictionary<ulong, Dictionary<LogItemKey, JournalItem>> _byLsn = new();
    private readonly Dictionary<LogItemKey, ulong> _lsnOf = new();

    public int Count => _lsnOf.Count;
    public bool IsEmpty => _lsnOf.Count == 0;

    /// <summary>The tail: the smallest LSN held, or null when every logged change is in place.</summary>
    public ulong? MinimumLsn
    {
        get
        {
            foreach (var lsn in _byLsn.Keys) return lsn;
            return null;
        }
    }

    /// <summary>Inserts (or moves) <paramref name="item"/> at <paramref name="lsn"/>; the AIL keeps the snapshot it is given.</summary>
    public void Insert(JournalItem item, ulong lsn)
    {
        var key = item.Key;
        if (_lsnOf.TryGetValue(key, out ulong old)) Remove(key, old);
        item.Lsn = lsn;
        if (!_byLsn.TryGetValue(lsn, out var set)) _byLsn[lsn] = set = new Dictionary<LogItemKey, JournalItem>();
        set[key] = item;
        _lsnOf[key] = lsn;
    }

    /// <summary>Removes the item with <paramref name="key"/> (an intent its done item finished); false when not held.</summary>
    public bool Remove(LogItemKey key)
    {
        if (!_lsnOf.TryGetValue(key, out ulong lsn)) return false;
        Remove(key, lsn);
        return true;
    }

    private void Remove(LogItemKey key, ulong lsn)
    {
        var set = _byLsn[lsn];
        set.Remove(key);
        if (set.Count == 0) _byLsn.Remove(lsn);
        _lsnOf.Remove(key);
    }

    /// <summary>The distinct LSNs held, oldest first.</summary>
    public IEnumerable<ulong> Lsns => _byLsn.Keys;

    /// <summary>Items at LSNs up to and including <paramref name="lsn"/>, oldest first.</summary>
    public List<JournalItem> ItemsUpTo(ulong lsn)
    {
        var items = new List<JournalItem>();
        foreach (var (l, set) in _byLsn)
        {
            if (l > lsn) break;
            items.AddRange(set.Values);
        }
        return items;
    }

    /// <summary>Removes items written in place, unless a later checkpoint moved them meanwhile.</summary>
    public void RemoveWritten(IEnumerable<JournalItem> items)
    {
        foreach (var item in items)
            if (_lsnOf.TryGetValue(item.Key, out ulong lsn) && lsn == item.Lsn) Remove(item.Key, lsn);
    }
}

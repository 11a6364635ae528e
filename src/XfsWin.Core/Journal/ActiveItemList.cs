namespace XfsWin.Journal;

/// <summary>
/// The AIL: items whose checkpoint is in the log but whose metadata is not yet written in place, ordered by the
/// start LSN of that checkpoint. An item logged again by a later checkpoint moves to that LSN. The smallest LSN is
/// the log's tail: the log before it may be overwritten. Intent items are pinned: nothing can be written back for
/// them, they leave only when their done item's checkpoint is written (or a relogged copy replaces them), and until
/// then the tail cannot pass them. Not thread-safe: <see cref="MountedLog"/> locks.
/// </summary>
public sealed class ActiveItemList
{
    private readonly SortedDictionary<ulong, Dictionary<LogItemKey, JournalItem>> _byLsn = new();
    private readonly Dictionary<LogItemKey, ulong> _lsnOf = new();

    // Pinned intents by LSN (how many at each), for the oldest one.
    private readonly SortedDictionary<ulong, int> _pinned = new();
    // Inode items by the daddr of the cluster they name, for the cancels of released inode chunks.
    private readonly SortedSet<(long Daddr, long Ino)> _inodesByCluster = new();
    // Icreate items by the chunk they initialise (daddr, length in BB), for the same cancels.
    private readonly SortedSet<(long Daddr, int LengthBB)> _chunks = new();

    public int Count => _lsnOf.Count;
    public bool IsEmpty => _lsnOf.Count == 0;

    /// <summary>Intent items held (waiting for their done items).</summary>
    public int PinnedCount { get; private set; }

    /// <summary>The LSN of the oldest intent held, or null: the tail cannot move past it.</summary>
    public ulong? MinimumPinnedLsn
    {
        get
        {
            foreach (var lsn in _pinned.Keys) return lsn;
            return null;
        }
    }

    /// <summary>The copy of <paramref name="key"/> the AIL holds (not yet written in place), or null.</summary>
    public JournalItem? Find(LogItemKey key) =>
        _lsnOf.TryGetValue(key, out ulong lsn) && _byLsn.TryGetValue(lsn, out var set) && set.TryGetValue(key, out var item) ? item : null;

    /// <summary>The LSN <paramref name="key"/> is held at, or null when it is not in the AIL.</summary>
    public ulong? LsnOf(LogItemKey key) => _lsnOf.TryGetValue(key, out ulong lsn) ? lsn : null;

    private static bool IsPinned(LogItemKey key) => IntentLogFormat.IsIntent(key.Type);

    /// <summary>The tail: the smallest LSN held, or null when every logged change is in place.</summary>
    public ulong? MinimumLsn
    {
        get
        {
            if (_byLsn.Count == 0) return null;
            if (!_minimumKnown)
            {
                // Enumerating a sorted dictionary allocates: the minimum is kept until the bucket holding it goes.
                foreach (var lsn in _byLsn.Keys)
                {
                    _minimum = lsn;
                    break;
                }
                _minimumKnown = true;
            }
            return _minimum;
        }
    }

    // The smallest key of _byLsn while _minimumKnown (every transaction's grant asks for the tail).
    private ulong _minimum;
    private bool _minimumKnown;

    /// <summary>Inserts (or moves) <paramref name="item"/> at <paramref name="lsn"/>; the AIL keeps the snapshot it is given.</summary>
    public void Insert(JournalItem item, ulong lsn)
    {
        var key = item.Key;
        if (_lsnOf.TryGetValue(key, out ulong old)) Remove(key, old);
        item.Lsn = lsn;
        if (!_byLsn.TryGetValue(lsn, out var set))
        {
            if (_byLsn.Count == 0) (_minimum, _minimumKnown) = (lsn, true);
            else if (_minimumKnown && lsn < _minimum) _minimum = lsn;
            _byLsn[lsn] = set = new Dictionary<LogItemKey, JournalItem>();
        }
        set[key] = item;
        _lsnOf[key] = lsn;
        if (IsPinned(key))
        {
            _pinned[lsn] = _pinned.GetValueOrDefault(lsn) + 1;
            PinnedCount++;
        }
        if (item is InodeLogItem inode) _inodesByCluster.Add((inode.Cluster.Daddr, key.Id));
        else if (item is IcreateLogItem chunk) _chunks.Add((chunk.Daddr, chunk.LengthBB));
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
        if (set.Remove(key, out var item))
        {
            if (item is InodeLogItem inode) _inodesByCluster.Remove((inode.Cluster.Daddr, key.Id));
            else if (item is IcreateLogItem chunk) _chunks.Remove((chunk.Daddr, chunk.LengthBB));
        }
        if (set.Count == 0)
        {
            _byLsn.Remove(lsn);
            if (lsn == _minimum) _minimumKnown = false;
        }
        _lsnOf.Remove(key);
        if (IsPinned(key))
        {
            if (--_pinned[lsn] == 0) _pinned.Remove(lsn);
            PinnedCount--;
        }
    }

    /// <summary>The distinct LSNs held, oldest first.</summary>
    public IEnumerable<ulong> Lsns => _byLsn.Keys;

    /// <summary>Items that can be written back at LSNs up to and including <paramref name="lsn"/>, oldest first (intents are not).</summary>
    public List<JournalItem> ItemsUpTo(ulong lsn)
    {
        var items = new List<JournalItem>();
        foreach (var (l, set) in _byLsn)
        {
            if (l > lsn) break;
            foreach (var (key, item) in set)
                if (!IsPinned(key)) items.Add(item);
        }
        return items;
    }

    /// <summary>
    /// Drops the inode items whose cluster lies in the freed buffer [<paramref name="daddr"/>, +<paramref name="lengthBB"/>)
    /// (a released inode chunk), and the icreate items of chunks it overlaps: their images must never be written back
    /// over blocks that may be reused (the kernel's stale inode cluster buffers).
    /// </summary>
    public void RemoveInodesIn(long daddr, int lengthBB)
    {
        if (_inodesByCluster.Count > 0)
        {
            var inside = _inodesByCluster.GetViewBetween((daddr, long.MinValue), (daddr + lengthBB - 1, long.MaxValue)).ToList();
            foreach (var (_, ino) in inside) Remove(new LogItemKey(LogItemType.Inode, ino, 0));
        }
        if (_chunks.Count > 0)
        {
            var near = _chunks.GetViewBetween((daddr - MaxChunkBB, int.MinValue), (daddr + lengthBB - 1, int.MaxValue)).ToList();
            foreach (var (start, length) in near)
                if (start + length > daddr) Remove(new LogItemKey(LogItemType.Icreate, start, length));
        }
    }

    // The longest inode chunk: 64 inodes of 2 KiB, in 512-byte units.
    private const int MaxChunkBB = 64 * 2048 / 512;

    /// <summary>Removes items written in place, unless a later checkpoint moved them meanwhile.</summary>
    public void RemoveWritten(IEnumerable<JournalItem> items)
    {
        foreach (var item in items)
            if (_lsnOf.TryGetValue(item.Key, out ulong lsn) && lsn == item.Lsn) Remove(item.Key, lsn);
    }
}

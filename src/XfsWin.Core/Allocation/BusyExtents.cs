using XfsWin.Journal;

namespace XfsWin.Allocation;

/// <summary>
/// The freed extents of one AG that may not be reused yet (the kernel's xfs_extent_busy): a block freed by a
/// transaction stays busy until that transaction's checkpoint is on disk, because until then a crash replays the
/// log to a state in which the block still belongs to its old owner. Entries of a transaction still open carry no
/// sequence (<see cref="Pending"/>): a log force cannot free them. Not thread safe: the owning
/// <see cref="AgAllocator"/> calls it under the AG's in-core lock.
/// </summary>
internal sealed class BusyExtents
{
    private const long Pending = long.MaxValue;

    private struct Entry
    {
        public uint Start, Length;
        public long Sequence;
        public Transaction? Owner;
    }

    // Sorted by start, never overlapping.
    private readonly List<Entry> _entries = new();

    public int Count => _entries.Count;

    /// <summary>Marks [start, start+length) busy for the open transaction <paramref name="tx"/>.</summary>
    public void Add(uint start, uint length, Transaction tx)
    {
        // A block freed again (taken from the AGFL and freed in one transaction) is busy once, for the latest freer.
        Remove(start, length);
        int i = 0;
        while (i < _entries.Count && _entries[i].Start < start) i++;
        _entries.Insert(i, new Entry { Start = start, Length = length, Sequence = Pending, Owner = tx });
    }

    /// <summary>The transaction committed into checkpoint <paramref name="sequence"/>: its extents wait for that checkpoint.</summary>
    public void Committed(Transaction tx, long sequence)
    {
        for (int i = 0; i < _entries.Count; i++)
        {
            if (!ReferenceEquals(_entries[i].Owner, tx)) continue;
            var e = _entries[i];
            e.Owner = null;
            e.Sequence = sequence;
            _entries[i] = e;
        }
    }

    /// <summary>The transaction was cancelled: what it freed is still in use, so its entries go.</summary>
    public void Cancelled(Transaction tx) => _entries.RemoveAll(e => ReferenceEquals(e.Owner, tx));

    /// <summary>Drops every entry whose checkpoint is durable.</summary>
    public void Prune(long durableSequence) => _entries.RemoveAll(e => e.Sequence <= durableSequence);

    /// <summary>True when some busy extent waits for a checkpoint a log force would write.</summary>
    public bool AnyCommitted => _entries.Exists(e => e.Sequence != Pending);

    /// <summary>Clears [start, start+length) (metadata reusing a block the trees freed: xfs_extent_busy_reuse).</summary>
    public void Remove(uint start, uint length)
    {
        ulong end = (ulong)start + length;
        for (int i = 0; i < _entries.Count; i++)
        {
            var e = _entries[i];
            ulong eEnd = (ulong)e.Start + e.Length;
            if (eEnd <= start || e.Start >= end) continue;
            _entries.RemoveAt(i);
            int at = i;
            if (e.Start < start)
                _entries.Insert(at++, e with { Length = start - e.Start });
            if (eEnd > end)
                _entries.Insert(at++, e with { Start = (uint)end, Length = (uint)(eEnd - end) });
            i = at - 1;
        }
    }

    /// <summary>
    /// The parts of [start, start+length) that are not busy, in ascending order, into <paramref name="free"/>;
    /// true when some part was busy.
    /// </summary>
    public bool NonBusyParts(uint start, uint length, List<(uint Start, uint Length)> free)
    {
        free.Clear();
        uint at = start;
        ulong end = (ulong)start + length;
        bool trimmed = false;
        foreach (var e in _entries)
        {
            ulong eEnd = (ulong)e.Start + e.Length;
            if (eEnd <= at) continue;
            if (e.Start >= end) break;
            trimmed = true;
            if (e.Start > at) free.Add((at, e.Start - at));
            at = (uint)Math.Min(eEnd, end);
            if (at >= end) break;
        }
        if (at < end) free.Add((at, (uint)(end - at)));
        return trimmed;
    }
}

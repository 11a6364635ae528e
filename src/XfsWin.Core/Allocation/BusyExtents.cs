using System.Runtime.InteropServices;
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

    // Sorted by start, never overlapping (so their ends are sorted too): ranges are found by binary search.
    private readonly List<Entry> _entries = new();

    // The starts of the entries an open transaction owns (Owner set): few, and all Committed and Cancelled look at.
    private readonly List<uint> _pendingStarts = new();

    public int Count => _entries.Count;

    /// <summary>Marks [start, start+length) busy for the open transaction <paramref name="tx"/>.</summary>
    public void Add(uint start, uint length, Transaction tx)
    {
        // A block freed again (taken from the AGFL and freed in one transaction) is busy once, for the latest freer.
        Remove(start, length);
        _entries.Insert(FirstEndingAfter(start), new Entry { Start = start, Length = length, Sequence = Pending, Owner = tx });
        _pendingStarts.Add(start);
    }

    /// <summary>The transaction committed into checkpoint <paramref name="sequence"/>: its extents wait for that checkpoint.</summary>
    public void Committed(Transaction tx, long sequence)
    {
        var entries = CollectionsMarshal.AsSpan(_entries);
        for (int p = _pendingStarts.Count - 1; p >= 0; p--)
        {
            int i = IndexOfStart(_pendingStarts[p]);
            if (!ReferenceEquals(entries[i].Owner, tx)) continue;
            entries[i].Owner = null;
            entries[i].Sequence = sequence;
            _pendingStarts.RemoveAt(p);
        }
    }

    /// <summary>The transaction was cancelled: what it freed is still in use, so its entries go.</summary>
    public void Cancelled(Transaction tx)
    {
        for (int p = _pendingStarts.Count - 1; p >= 0; p--)
        {
            int i = IndexOfStart(_pendingStarts[p]);
            if (!ReferenceEquals(_entries[i].Owner, tx)) continue;
            _entries.RemoveAt(i);
            _pendingStarts.RemoveAt(p);
        }
    }

    /// <summary>Drops every entry whose checkpoint is durable (entries of open transactions stay: their sequence is <see cref="Pending"/>).</summary>
    public void Prune(long durableSequence) => _entries.RemoveAll(e => e.Sequence <= durableSequence);

    /// <summary>True when some busy extent waits for a checkpoint a log force would write.</summary>
    public bool AnyCommitted => _entries.Count > _pendingStarts.Count;

    /// <summary>Clears [start, start+length) (metadata reusing a block the trees freed: xfs_extent_busy_reuse).</summary>
    public void Remove(uint start, uint length)
    {
        ulong end = (ulong)start + length;
        for (int i = FirstEndingAfter(start); i < _entries.Count && _entries[i].Start < end;)
        {
            var e = _entries[i];
            ulong eEnd = (ulong)e.Start + e.Length;
            _entries.RemoveAt(i);
            if (e.Owner is not null) _pendingStarts.Remove(e.Start);
            if (e.Start < start)
            {
                _entries.Insert(i++, e with { Length = start - e.Start });
                if (e.Owner is not null) _pendingStarts.Add(e.Start);
            }
            if (eEnd > end)
            {
                _entries.Insert(i++, e with { Start = (uint)end, Length = (uint)(eEnd - end) });
                if (e.Owner is not null) _pendingStarts.Add((uint)end);
            }
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
        var entries = CollectionsMarshal.AsSpan(_entries);
        for (int i = FirstEndingAfter(start); i < entries.Length; i++)
        {
            var e = entries[i];
            if (e.Start >= end) break;
            trimmed = true;
            if (e.Start > at) free.Add((at, e.Start - at));
            at = (uint)Math.Min((ulong)e.Start + e.Length, end);
            if (at >= end) break;
        }
        if (at < end) free.Add((at, (uint)(end - at)));
        return trimmed;
    }

    /// <summary>The index of the first entry that ends after <paramref name="block"/> (the count when none does).</summary>
    private int FirstEndingAfter(uint block)
    {
        var entries = CollectionsMarshal.AsSpan(_entries);
        int lo = 0, hi = entries.Length;
        while (lo < hi)
        {
            int mid = (lo + hi) >>> 1;
            if ((ulong)entries[mid].Start + entries[mid].Length <= block) lo = mid + 1; else hi = mid;
        }
        return lo;
    }

    /// <summary>The index of the entry that starts at <paramref name="start"/> (one does: it is in the pending list).</summary>
    private int IndexOfStart(uint start)
    {
        int i = FirstEndingAfter(start);
        if (i >= _entries.Count || _entries[i].Start != start)
            throw new InvalidOperationException($"busy extent list lost the pending entry at block {start}");
        return i;
    }
}

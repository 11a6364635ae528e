using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Allocation;

/// <summary>The operations of a refcount intent (the kernel's enum xfs_refcount_intent_type, as logged in a CUI's flags).</summary>
public enum RefcountUpdateKind
{
    Increase = 1, Decrease = 2, AllocCow = 3, FreeCow = 4,
}

/// <summary>One refcount update (xfs_refcount_intent): the kind and the physical extent.</summary>
public readonly record struct RefcountUpdate(RefcountUpdateKind Kind, ulong StartBlock, uint Length) : IAgOrderedItem;

/// <summary>
/// Reference-count updates as deferred work (xfs_refcount_item.c): a CUI promises up to 16, done in a later part with
/// their CUD. Sharing an extent (reflink) increases its count, dropping a shared mapping decreases it (blocks whose
/// count reaches zero are freed through an EFI); copy-on-write staging extents are added to and removed from the CoW
/// domain. An update touching many records stops part way and asks for a fresh transaction for the rest.
/// </summary>
public sealed class RefcountUpdateWork(AgAllocator allocator) : DeferredWorkType<RefcountUpdate>
{
    public override string Name => "refcount update";
    public override int MaxItems => 16;

    public override void Sort(List<RefcountUpdate> items) => AgOrder.Sort(items, allocator.Superblock.AgBlkLog);

    public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<RefcountUpdate> items)
    {
        var extents = new IntentPhysExtent[items.Count];
        for (int i = 0; i < extents.Length; i++) extents[i] = new IntentPhysExtent(items[i].StartBlock, items[i].Length, (uint)items[i].Kind);
        return IntentLogItem.RefcountUpdate(id, extents);
    }

    public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<RefcountUpdate> items) =>
        IntentLogItem.Done(LogItemType.Cud, intent.Id);

    public override RefcountUpdate? Finish(Transaction tx, RefcountUpdate item) => allocator.UpdateRefcount(tx, item);

    /// <summary>An update as a CUI logged it; null when its kind is not one the kernel logs.</summary>
    public static RefcountUpdate? Decode(IntentPhysExtent e) =>
        e.Flags is >= 1 and <= 4 ? new RefcountUpdate((RefcountUpdateKind)e.Flags, e.StartBlock, e.Length) : null;
}

/// <summary>
/// The refcount btree changes behind <see cref="RefcountUpdateWork"/> (xfs_refcount.c), kept in the tree's canonical
/// form: shared-domain records hold counts of two and more (a block not in any record is used once), and neither
/// domain leaves two adjacent records that could be one (same count, contiguous), which is what the kernel's split and
/// merge steps leave and what xfs_repair rebuilds. Each change rewrites the records of the window it touches, the
/// neighbours on both sides included.
/// </summary>
internal static class ReferenceCounts
{
    /// <summary>Records one update changes at most before it asks for a fresh transaction for the rest.</summary>
    private const int MaxRecordsPerStep = 32;

    private readonly record struct Rec(uint Start, uint Length, uint Count)
    {
        public ulong End => (ulong)Start + Length;
    }

    /// <summary>
    /// Adds <paramref name="adjust"/> (+1 or -1) to the count of every block of [bno, bno+len) in the shared domain; blocks
    /// whose count reaches zero are freed (deferred). Returns what is left when the range touched too many records.
    /// </summary>
    public static (uint Bno, uint Len)? Adjust(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len, int adjust)
    {
        var cur = a.RefcountStore(tx, w).Cursor<RefcountbtOps>();
        uint end = bno + len;
        var window = Window(cur, bno, end, cow: false);
        (uint, uint)? rest = null;
        int inside = 0;
        foreach (var r in window)
        {
            if (r.End <= bno || r.Start >= end) continue;
            if (++inside > MaxRecordsPerStep && r.Start > bno)
            {
                rest = (r.Start, end - r.Start);
                end = r.Start;
                window = window.Where(x => x.Start <= end).ToList();
                break;
            }
        }
        foreach (var r in window)
            if (r.Count < 2) throw a.Corrupt(w, "refcountbt", $"shared extent {r.Start}+{r.Length} has reference count {r.Count}");

        // The pieces of [lo, hi): the window's records, and the gaps of the adjusted range (used once).
        uint lo = Math.Min(bno, window.Count > 0 ? window[0].Start : bno);
        var pieces = new List<Rec>();
        uint at = lo;
        foreach (var r in window)
        {
            if (r.Start > at)
            {
                if (at < bno || r.Start > end) throw a.Corrupt(w, "refcountbt", $"records around {bno}+{len} are not contiguous with the range");
                pieces.Add(new Rec(at, r.Start - at, 1));
            }
            else if (r.Start < at) throw a.Corrupt(w, "refcountbt", $"record {r.Start}+{r.Length} overlaps the one before it");
            pieces.Add(r);
            at = (uint)r.End;
        }
        if (at < end) pieces.Add(new Rec(at, end - at, 1));

        var result = new List<Rec>();
        foreach (var p in pieces)
        {
            // Split each piece at the range's ends; what lies inside changes by adjust.
            foreach (var (s, e) in Split(p.Start, (uint)p.End, bno, end))
            {
                bool inRange = s >= bno && e <= end;
                uint count = inRange ? (uint)(p.Count + adjust) : p.Count;
                if (inRange && count == 0)
                {
                    // Used by nobody now: free it (its reverse mapping went with the mapping).
                    tx.Defer(a.ExtentFrees, new ExtentToFree(a.Fsb(w.Agno, s), e - s, RmapOwner.Null));
                    continue;
                }
                if (count < 2) continue;
                if (result.Count > 0 && result[^1].End == s && result[^1].Count == count)
                    result[^1] = result[^1] with { Length = result[^1].Length + (e - s) };
                else result.Add(new Rec(s, e - s, count));
            }
        }
        Rewrite(a, w, cur, window, result, cowFlag: 0);
        return rest;
    }

    /// <summary>
    /// The runs of [bno, bno+len) whose blocks are shared (reference count two or more), in order, adjacent records
    /// joined (xfs_refcount_find_shared, asked until the range is exhausted).
    /// </summary>
    public static List<(uint Bno, uint Len)> SharedRuns(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len)
    {
        var cur = a.RefcountStore(tx, w).Cursor<RefcountbtOps>();
        uint end = bno + len;
        var runs = new List<(uint Bno, uint Len)>();
        foreach (var r in Window(cur, bno, end, cow: false))
        {
            if (r.End <= bno || r.Start >= end) continue;
            uint s = Math.Max(r.Start, bno), e = (uint)Math.Min(r.End, end);
            if (runs.Count > 0 && runs[^1].Bno + runs[^1].Len == s) runs[^1] = (runs[^1].Bno, runs[^1].Len + (e - s));
            else runs.Add((s, e - s));
        }
        return runs;
    }

    private static IEnumerable<(uint Start, uint End)> Split(uint s, uint e, uint bno, uint end)
    {
        var cuts = new List<uint> { s };
        if (bno > s && bno < e) cuts.Add(bno);
        if (end > s && end < e) cuts.Add(end);
        cuts.Add(e);
        for (int i = 0; i + 1 < cuts.Count; i++) yield return (cuts[i], cuts[i + 1]);
    }

    /// <summary>Adds a copy-on-write staging extent (count 1 in the CoW domain), merged with staging extents it touches.</summary>
    public static void AllocCow(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len)
    {
        var cur = a.RefcountStore(tx, w).Cursor<RefcountbtOps>();
        var window = Window(cur, bno, bno + len, cow: true);
        uint start = bno, end = bno + len;
        foreach (var r in window)
        {
            if (r.Start < bno + len && r.End > bno) throw a.Corrupt(w, "refcountbt", $"CoW staging extent {bno}+{len} overlaps staging extent {r.Start}+{r.Length}");
            start = Math.Min(start, r.Start);
            end = (uint)Math.Max(end, r.End);
        }
        Rewrite(a, w, cur, window, [new Rec(start, end - start, 1)], RefcountRecord.CowFlag);
    }

    /// <summary>Removes [bno, bno+len) from the CoW domain (staging extents trimmed or split).</summary>
    public static void FreeCow(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len)
    {
        var cur = a.RefcountStore(tx, w).Cursor<RefcountbtOps>();
        uint end = bno + len;
        var window = Window(cur, bno, end, cow: true).Where(r => r.Start < end && r.End > bno).ToList();
        ulong covered = 0;
        var result = new List<Rec>();
        foreach (var r in window)
        {
            covered += Math.Min(r.End, end) - Math.Max(r.Start, bno);
            if (r.Start < bno) result.Add(new Rec(r.Start, bno - r.Start, r.Count));
            if (r.End > end) result.Add(new Rec(end, (uint)(r.End - end), r.Count));
        }
        if (covered != len) throw a.Corrupt(w, "refcountbt", $"freeing CoW staging blocks {bno}+{len}, but staging extents cover {covered} of them");
        Rewrite(a, w, cur, window, result, RefcountRecord.CowFlag);
    }

    /// <summary>The records of one domain that overlap or touch [low, high), in order (one ending at low, one starting at high included).</summary>
    private static List<Rec> Window(BtreeCursor<RefcountbtOps> cur, uint low, uint high, bool cow)
    {
        uint flag = cow ? RefcountRecord.CowFlag : 0;
        var found = new List<Rec>();
        Span<byte> key = stackalloc byte[RefcountRecord.KeySize];
        // From the record at or before the one that could end at low.
        BinaryPrimitives.WriteUInt32BigEndian(key, (low == 0 ? 0 : low - 1) | flag);
        bool ok = cur.Lookup(key, BtreeLookup.LessOrEqual);
        if (!ok) ok = cur.MoveToFirst();
        for (; ok; ok = cur.Increment())
        {
            var r = Decode(cur.Record);
            bool isCow = (r.Start & RefcountRecord.CowFlag) != 0;
            if (isCow != cow)
            {
                if (cow) continue;
                break;
            }
            r = r with { Start = r.Start & ~RefcountRecord.CowFlag };
            if (r.Start > high) break;
            if (r.End < low) continue;
            found.Add(r);
        }
        return found;
    }

    /// <summary>Replaces the window's records with <paramref name="records"/> (unchanged ones are left in place).</summary>
    private static void Rewrite(AgAllocator a, AgAllocator.AgWork w, BtreeCursor<RefcountbtOps> cur, List<Rec> old, List<Rec> records, uint cowFlag)
    {
        Span<byte> raw = stackalloc byte[RefcountRecord.Size];
        var keep = new HashSet<Rec>(old.Intersect(records));
        foreach (var r in old)
        {
            if (keep.Contains(r)) continue;
            Encode(raw, r, cowFlag);
            if (!cur.Lookup(raw[..RefcountRecord.KeySize], BtreeLookup.Equal) || !cur.Record.SequenceEqual(raw))
                throw a.Corrupt(w, "refcountbt", $"record {r.Start}+{r.Length} vanished during the update");
            cur.Delete();
        }
        foreach (var r in records)
        {
            if (keep.Contains(r)) continue;
            Encode(raw, r, cowFlag);
            if (!cur.Insert(raw)) throw a.Corrupt(w, "refcountbt", $"record at block {r.Start} is already in the tree");
        }
    }

    private static Rec Decode(ReadOnlySpan<byte> r) =>
        new(BinaryPrimitives.ReadUInt32BigEndian(r), BinaryPrimitives.ReadUInt32BigEndian(r[4..]), BinaryPrimitives.ReadUInt32BigEndian(r[8..]));

    private static void Encode(Span<byte> b, Rec r, uint cowFlag)
    {
        BinaryPrimitives.WriteUInt32BigEndian(b, r.Start | cowFlag);
        BinaryPrimitives.WriteUInt32BigEndian(b[4..], r.Length);
        BinaryPrimitives.WriteUInt32BigEndian(b[8..], r.Count);
    }
}

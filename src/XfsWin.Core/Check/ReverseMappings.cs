using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>One reverse mapping the check saw the volume use: an extent of a fork, an extent-btree block, or fixed AG metadata.</summary>
/// <remarks><paramref name="Shareable"/>: a written extent of a regular file's data fork, not a metadata file (rmap_shareable); <paramref name="OwnerReflink"/>: that file has the reflink flag.</remarks>
internal readonly record struct ObservedRmap(uint Start, uint Count, ulong Owner, ulong Offset, ulong Flags, bool Shareable, bool OwnerReflink)
{
    public uint End => Start + Count;
}

/// <summary>
/// The reverse mappings the volume's own structures imply, gathered while the check claims blocks, compared with the
/// rmap btrees and refcount btrees as xfs_repair's phase 4 does: every observed mapping, merged as the kernel merges
/// them, must be covered by one rmapbt record of the same owner and flags (rmaps_verify_btree); the reference counts
/// computed from the shareable mappings must be the refcount btree's records (compute_refcounts, check_refcounts); a
/// file sharing blocks must carry the reflink flag (fix_inode_reflink_flags). Collected only when the volume has an
/// rmap btree or reflink.
/// </summary>
internal sealed class ReverseMappings
{
    private readonly List<ObservedRmap>[] _ags;
    private readonly Superblock _sb;

    public ReverseMappings(Superblock sb)
    {
        _sb = sb;
        Enabled = sb.HasRmapbt || sb.HasReflink;
        _ags = new List<ObservedRmap>[Enabled ? sb.AgCount : 0];
        for (int i = 0; i < _ags.Length; i++) _ags[i] = [];
    }

    public bool Enabled { get; }

    public void Add(uint agno, uint start, uint count, ulong owner, ulong offset = 0, ulong flags = 0, bool shareable = false, bool ownerReflink = false)
    {
        if (!Enabled || agno >= _ags.Length || count == 0) return;
        var list = _ags[agno];
        lock (list) list.Add(new ObservedRmap(start, count, owner, offset, flags, shareable && flags == 0, ownerReflink));
    }

    /// <summary>rmaps_are_mergeable: same owner, physically adjacent, and for file mappings the same flags and adjacent offsets.</summary>
    private static bool Mergeable(in ObservedRmap a, in ObservedRmap b)
    {
        if (a.Owner != b.Owner || a.End != b.Start) return false;
        if ((ulong)a.Count + b.Count > uint.MaxValue) return false;
        if (RmapRecord.IsNonInodeOwner(a.Owner)) return true;
        if (a.Flags != b.Flags) return false;
        if ((a.Flags & RmapRecord.BmbtBlockFlag) != 0) return true;
        return a.Offset + a.Count == b.Offset;
    }

    /// <summary>The observations of an AG merged as the kernel's rmap code would have recorded them.</summary>
    private List<ObservedRmap> Merged(uint agno)
    {
        var list = _ags[agno];
        list.Sort((x, y) =>
        {
            int c = x.Owner.CompareTo(y.Owner);
            if (c == 0) c = x.Flags.CompareTo(y.Flags);
            if (c == 0) c = x.Start.CompareTo(y.Start);
            return c != 0 ? c : x.Offset.CompareTo(y.Offset);
        });
        var merged = new List<ObservedRmap>(list.Count);
        foreach (var r in list)
        {
            if (merged.Count > 0 && Mergeable(merged[^1], r))
            {
                var m = merged[^1];
                merged[^1] = m with { Count = m.Count + r.Count };
            }
            else
            {
                merged.Add(r);
            }
        }
        return merged;
    }

    /// <summary>rmap_is_good: the btree record has the same owner and flags and covers the observation physically and, for file data, logically.</summary>
    private static bool Covers(in RmapEntry disk, in ObservedRmap seen)
    {
        const ulong FlagMask = RmapRecord.AttrForkFlag | RmapRecord.BmbtBlockFlag | RmapRecord.UnwrittenFlag;
        if (disk.Owner != seen.Owner || (disk.Offset & FlagMask) != seen.Flags) return false;
        if (disk.Start > seen.Start || (ulong)disk.Start + disk.Count < seen.End) return false;
        if (RmapRecord.IsNonInodeOwner(seen.Owner) || (seen.Flags & RmapRecord.BmbtBlockFlag) != 0) return true;
        ulong offset = disk.Offset & RmapRecord.OffsetMask;
        return offset <= seen.Offset && offset + disk.Count >= seen.Offset + seen.Count;
    }

    /// <summary>Every observed mapping of the AG has an rmapbt record covering it.</summary>
    public void CheckAgainstRmapbt(CheckContext cx, uint agno, List<RmapEntry> disk)
    {
        if (!Enabled || !_sb.HasRmapbt) return;
        var sorted = disk.OrderBy(r => r.Owner).ThenBy(r => r.Start).ToArray();
        var owners = sorted.Select(r => r.Owner).ToArray();
        string name = $"reverse mapping btree (rmapbt) of AG {agno}";
        int reported = 0, missing = 0;
        foreach (var seen in Merged(agno))
        {
            if (Found(sorted, owners, seen)) continue;
            missing++;
            if (reported++ < 8)
            {
                cx.Report(name, agno, cx.AgDaddr(agno, seen.Start),
                    $"no record covers [{seen.Start}+{seen.Count}] owner {DescribeOwner(seen.Owner)}{DescribeFlags(seen.Flags)}" +
                    (RmapRecord.IsNonInodeOwner(seen.Owner) ? "" : $" offset {seen.Offset}"));
            }
        }
        if (missing > reported) cx.Report(name, agno, null, $"{missing - reported} more mappings without a covering record");
    }

    private static bool Found(RmapEntry[] sorted, ulong[] owners, in ObservedRmap seen)
    {
        // The records of this owner, by start block: look back from the last one starting at or before the observation.
        int lo = Array.BinarySearch(owners, seen.Owner);
        if (lo < 0) return false;
        while (lo > 0 && owners[lo - 1] == seen.Owner) lo--;
        int hi = lo;
        while (hi < owners.Length && owners[hi] == seen.Owner) hi++;
        int i = LastStartingAtOrBefore(sorted, lo, hi, seen.Start);
        for (int steps = 0; i >= lo && steps < 64; i--, steps++)
        {
            if (Covers(sorted[i], seen)) return true;
        }
        return false;
    }

    private static int LastStartingAtOrBefore(RmapEntry[] sorted, int lo, int hi, uint start)
    {
        int a = lo, b = hi - 1, found = lo - 1;
        while (a <= b)
        {
            int mid = (a + b) >>> 1;
            if (sorted[mid].Start <= start) { found = mid; a = mid + 1; }
            else b = mid - 1;
        }
        return found;
    }

    private static string DescribeOwner(ulong owner) => owner switch
    {
        RmapRecord.OwnFs => "AG headers",
        RmapRecord.OwnLog => "log",
        RmapRecord.OwnInodes => "inode chunks",
        _ => $"inode {owner}",
    };

    private static string DescribeFlags(ulong flags) =>
        ((flags & RmapRecord.AttrForkFlag) != 0 ? " attribute fork" : "") +
        ((flags & RmapRecord.BmbtBlockFlag) != 0 ? " extent btree block" : "") +
        ((flags & RmapRecord.UnwrittenFlag) != 0 ? " unwritten" : "");

    /// <summary>
    /// Reference counts from the shareable mappings (written data extents of files), as xfs_repair's compute_refcounts
    /// sweeps them: a record wherever two or more mappings overlap, split only where the count changes. Each must be a
    /// refcount btree record exactly; every file in an overlap must have the reflink flag.
    /// </summary>
    public void CheckRefcounts(CheckContext cx, uint agno, List<RefcountEntry> disk)
    {
        if (!Enabled || !_sb.HasReflink) return;
        var shareable = _ags[agno].Where(r => r.Shareable).OrderBy(r => r.Start).ToArray();
        var expected = new List<RefcountEntry>();
        var needsFlag = new HashSet<ulong>();
        // Sweep: at each position where a mapping starts or ends, the number of mappings covering the next block.
        var active = new List<int>();
        int next = 0;
        uint segmentStart = 0;
        int segmentCount = 0;
        while (next < shareable.Length || active.Count > 0)
        {
            uint position = uint.MaxValue;
            if (next < shareable.Length) position = shareable[next].Start;
            foreach (int a in active) position = Math.Min(position, shareable[a].End);
            active.RemoveAll(a => shareable[a].End == position);
            while (next < shareable.Length && shareable[next].Start == position) active.Add(next++);
            if (active.Count >= 2)
            {
                foreach (int a in active)
                {
                    if (!shareable[a].OwnerReflink) needsFlag.Add(shareable[a].Owner);
                }
            }
            if (active.Count != segmentCount)
            {
                if (segmentCount >= 2) expected.Add(new RefcountEntry(segmentStart, position - segmentStart, (uint)segmentCount, false));
                segmentStart = position;
                segmentCount = active.Count;
            }
        }
        string name = $"refcount btree of AG {agno}";
        foreach (ulong ino in needsFlag.Order().Take(8))
            cx.Report($"inode {ino}", agno, null, "shares blocks with another file but does not have the reflink flag");
        if (needsFlag.Count > 8) cx.Report(name, agno, null, $"{needsFlag.Count - 8} more files share blocks without the reflink flag");

        var records = disk.Where(r => !r.Cow).OrderBy(r => r.Start).ToArray();
        var starts = records.Select(r => r.Start).ToArray();
        int reported = 0;
        foreach (var e in expected)
        {
            int i = Array.BinarySearch(starts, e.Start);
            if (i < 0) i = ~i - 1;
            if (i >= 0 && records[i].Start == e.Start && records[i].Count == e.Count && records[i].Refcount == e.Refcount) continue;
            if (reported++ >= 8) break;
            cx.Report(name, agno, cx.AgDaddr(agno, e.Start),
                i < 0
                    ? $"no record for [{e.Start}+{e.Count}] shared by {e.Refcount} mappings"
                    : $"record [{records[i].Start}+{records[i].Count}] count {records[i].Refcount} where [{e.Start}+{e.Count}] count {e.Refcount} belongs");
        }
    }
}

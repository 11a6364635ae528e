using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Allocation;

/// <summary>
/// Reverse-map updates for space the allocator hands out or takes back (xfs_rmap_map / xfs_rmap_unmap). A new
/// mapping merges with the record ending just before it and the one starting just after it when they have the same
/// owner and flags and, for file data, contiguous file offsets: xfs_repair rejects mergeable records left apart.
/// Removing a mapping trims or splits the one record that covers it.
/// </summary>
internal static class ReverseMap
{
    private const ulong FlagBits = RmapRecord.AttrForkFlag | RmapRecord.BmbtBlockFlag | RmapRecord.UnwrittenFlag;

    private readonly record struct Rec(uint Start, uint Count, ulong Owner, ulong Offset)
    {
        public ulong End => (ulong)Start + Count;
        public ulong FileOffset => Offset & RmapRecord.OffsetMask;
        public ulong Flags => Offset & FlagBits;
    }

    public static void Map(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len, RmapOwner owner)
    {
        var cur = a.RmapStore(tx, w).Cursor<RmapbtOps>();
        ulong offset = owner.EncodedOffset;
        ulong flags = offset & FlagBits;
        Rec? left = null, right = null;
        foreach (var r in Query(cur, bno == 0 ? 0 : bno - 1, bno + len))
        {
            // On a reflink volume records may overlap (xfs_rmap_map_shared): other owners, and the same file mapping the
            // same blocks at other offsets (a clone within one file); only the very same mapping again is wrong.
            if (r.Start < (ulong)bno + len && r.End > bno && (!a.Superblock.HasReflink ||
                (r.Owner == owner.Owner && (!owner.AdvancesOffset || (long)r.FileOffset - r.Start == (long)owner.Offset - bno))))
                throw a.Corrupt(w, "rmapbt", $"mapping blocks {bno}+{len} to {owner}, but they are already mapped to owner {(long)r.Owner} ({r.Start}+{r.Count})");
            if (r.Owner != owner.Owner || r.Flags != flags) continue;
            if (r.End == bno && (!owner.AdvancesOffset || r.FileOffset + r.Count == owner.Offset)) left = r;
            if (r.Start == (ulong)bno + len && (!owner.AdvancesOffset || r.FileOffset == owner.Offset + len)) right = r;
        }
        if (left is { } l && right is { } rt && (ulong)l.Count + len + rt.Count > uint.MaxValue) right = null;
        if (left is { } l2 && (ulong)l2.Count + len > uint.MaxValue) left = null;
        if (right is { } r2 && (ulong)r2.Count + len > uint.MaxValue) right = null;

        if (left is { } lm)
        {
            uint count = lm.Count + len;
            if (right is { } rm)
            {
                Delete(a, w, cur, rm);
                count += rm.Count;
            }
            Update(a, w, cur, lm, lm with { Count = count });
        }
        else if (right is { } rm)
        {
            Delete(a, w, cur, rm);
            Insert(a, w, cur, new Rec(bno, len + rm.Count, owner.Owner, offset));
        }
        else Insert(a, w, cur, new Rec(bno, len, owner.Owner, offset));
    }

    public static void Unmap(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len, RmapOwner owner)
    {
        var cur = a.RmapStore(tx, w).Cursor<RmapbtOps>();
        ulong flags = owner.EncodedOffset & (RmapRecord.AttrForkFlag | RmapRecord.BmbtBlockFlag);
        Rec? found = null;
        foreach (var r in Query(cur, bno, bno + len - 1))
        {
            if (r.Owner != owner.Owner || (r.Flags & ~RmapRecord.UnwrittenFlag) != flags) continue;
            if (r.Start > bno || r.End < (ulong)bno + len) continue;
            if (owner.AdvancesOffset && r.FileOffset + (bno - r.Start) != owner.Offset) continue;
            found = r;
            break;
        }
        if (found is not { } f)
            throw a.Corrupt(w, "rmapbt", $"freeing blocks {bno}+{len} of {owner}, but no reverse mapping of that owner covers them");
        Cut(a, w, cur, f, bno, len);
    }

    /// <summary>
    /// Removes whatever maps [bno, bno+len) (log recovery freeing an EFI's extent, owner unknown: xfs_rmap_unmap with
    /// XFS_RMAP_OWN_UNKNOWN): one record covering the whole range, or nothing when an rmap intent removed it already.
    /// </summary>
    public static void UnmapAny(AgAllocator a, Transaction tx, AgAllocator.AgWork w, uint bno, uint len)
    {
        var cur = a.RmapStore(tx, w).Cursor<RmapbtOps>();
        var overlapping = Query(cur, bno, bno + len - 1).Where(r => r.Start < (ulong)bno + len && r.End > bno).ToList();
        if (overlapping.Count == 0) return;
        if (overlapping.Count > 1 || overlapping[0].Start > bno || overlapping[0].End < (ulong)bno + len)
            throw a.Corrupt(w, "rmapbt", $"freeing blocks {bno}+{len} of an unknown owner, but {overlapping.Count} reverse mapping(s) cover only part of them");
        Cut(a, w, cur, overlapping[0], bno, len);
    }

    /// <summary>Takes [bno, bno+len) out of record <paramref name="f"/>, which covers it: deleted, trimmed or split.</summary>
    private static void Cut(AgAllocator a, AgAllocator.AgWork w, BtreeCursor<RmapbtOps> cur, Rec f, uint bno, uint len)
    {
        ulong end = (ulong)bno + len;
        if (f.Start == bno && f.End == end)
        {
            Delete(a, w, cur, f);
        }
        else if (f.Start == bno)
        {
            Delete(a, w, cur, f);
            Insert(a, w, cur, Shifted(f, len));
        }
        else if (f.End == end)
        {
            Update(a, w, cur, f, f with { Count = f.Count - len });
        }
        else
        {
            Update(a, w, cur, f, f with { Count = bno - f.Start });
            Insert(a, w, cur, Shifted(f, (uint)(end - f.Start)));
        }
    }

    /// <summary>The part of <paramref name="r"/> from <paramref name="skip"/> blocks on.</summary>
    private static Rec Shifted(Rec r, uint skip)
    {
        bool advances = !RmapRecord.IsNonInodeOwner(r.Owner) && (r.Offset & RmapRecord.BmbtBlockFlag) == 0;
        return new Rec(r.Start + skip, r.Count - skip, r.Owner, advances ? r.Offset + skip : r.Offset);
    }

    private static List<Rec> Query(BtreeCursor<RmapbtOps> cur, uint low, uint high)
    {
        Span<byte> lo = stackalloc byte[RmapRecord.KeySize], hi = stackalloc byte[RmapRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(lo, low);
        BinaryPrimitives.WriteUInt32BigEndian(hi, high);
        hi[4..].Fill(0xFF);
        var found = new List<Rec>();
        cur.QueryRange(lo, hi, ref found, static (ReadOnlySpan<byte> r, ref List<Rec> list) =>
        {
            list.Add(Decode(r));
            return true;
        });
        return found;
    }

    private static Rec Decode(ReadOnlySpan<byte> r) => new(BinaryPrimitives.ReadUInt32BigEndian(r), BinaryPrimitives.ReadUInt32BigEndian(r[4..]),
        BinaryPrimitives.ReadUInt64BigEndian(r[8..]), BinaryPrimitives.ReadUInt64BigEndian(r[16..]));

    private static void Encode(Span<byte> b, Rec r) => RmapRecordWriter.Write(b, r.Start, r.Count, r.Owner, r.Offset);

    private static void Position(AgAllocator a, AgAllocator.AgWork w, BtreeCursor<RmapbtOps> cur, Rec r)
    {
        Span<byte> rec = stackalloc byte[RmapRecord.Size];
        Span<byte> key = stackalloc byte[RmapRecord.KeySize];
        Encode(rec, r);
        default(RmapbtOps).RecordLowKey(rec, key);
        if (!cur.Lookup(key, BtreeLookup.Equal) || Decode(cur.Record) != r)
            throw a.Corrupt(w, "rmapbt", $"reverse mapping {r.Start}+{r.Count} of owner {(long)r.Owner} vanished during the update");
    }

    private static void Delete(AgAllocator a, AgAllocator.AgWork w, BtreeCursor<RmapbtOps> cur, Rec r)
    {
        Position(a, w, cur, r);
        cur.Delete();
    }

    /// <summary>Changes a record's length or owner data; its key (start, owner, offset) stays.</summary>
    private static void Update(AgAllocator a, AgAllocator.AgWork w, BtreeCursor<RmapbtOps> cur, Rec old, Rec now)
    {
        Position(a, w, cur, old);
        Span<byte> rec = stackalloc byte[RmapRecord.Size];
        Encode(rec, now);
        cur.Update(rec);
    }

    private static void Insert(AgAllocator a, AgAllocator.AgWork w, BtreeCursor<RmapbtOps> cur, Rec r)
    {
        Span<byte> rec = stackalloc byte[RmapRecord.Size];
        Encode(rec, r);
        if (!cur.Insert(rec))
            throw a.Corrupt(w, "rmapbt", $"reverse mapping {r.Start}+{r.Count} of owner {(long)r.Owner} is already in the tree");
    }
}

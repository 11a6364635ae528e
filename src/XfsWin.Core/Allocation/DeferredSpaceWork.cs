using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Allocation;

/// <summary>An extent to free later (the kernel's xfs_extent_free_item): its blocks and the reverse-map owner to remove with it.</summary>
public readonly record struct ExtentToFree(ulong StartBlock, uint Length, RmapOwner Owner) : IAgOrderedItem;

/// <summary>
/// Extent frees as deferred work (xfs_extfree_item.c): promised by an EFI, done in a later part of the transaction
/// with its EFD, at most 16 extents an intent, in ascending AG order. A freed extent stays busy until the part that
/// freed it is on disk. The owner is the reverse mapping removed with it: <see cref="RmapOwner.Null"/> when an rmap
/// intent removes it (file data), the bmbt owner for extent-tree blocks, OWN_INODES for inode chunks, unknown in recovery.
/// </summary>
public sealed class ExtentFreeWork(AgAllocator allocator) : DeferredWorkType<ExtentToFree>
{
    public override string Name => "extent free";
    public override int MaxItems => 16;

    public override void Sort(List<ExtentToFree> items) => AgOrder.Sort(items, allocator.Superblock.AgBlkLog);

    public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<ExtentToFree> items) =>
        IntentLogItem.ExtentFree(done: false, id, Extents(items));

    public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<ExtentToFree> items) =>
        IntentLogItem.ExtentFree(done: true, intent.Id, Extents(items));

    private static IntentExtent[] Extents(IReadOnlyList<ExtentToFree> items)
    {
        var extents = new IntentExtent[items.Count];
        for (int i = 0; i < extents.Length; i++) extents[i] = new IntentExtent(items[i].StartBlock, items[i].Length);
        return extents;
    }

    public override ExtentToFree? Finish(Transaction tx, ExtentToFree item)
    {
        allocator.Free(tx, item.StartBlock, item.Length, item.Owner);
        return null;
    }
}

/// <summary>The operations of an rmap intent (the kernel's enum xfs_rmap_intent_type, as logged in the low byte of the flags).</summary>
public enum RmapUpdateKind
{
    Map = 1, MapShared = 2, Unmap = 3, UnmapShared = 4, Convert = 5, ConvertShared = 6, Alloc = 7, Free = 8,
}

/// <summary>One reverse-map update (xfs_rmap_intent): the kind, the physical extent, and the owner with its file offset and flags.</summary>
public readonly record struct RmapUpdate(RmapUpdateKind Kind, ulong StartBlock, uint Length, RmapOwner Owner) : IAgOrderedItem;

/// <summary>
/// Reverse-map updates of file mappings as deferred work (xfs_rmap_item.c): the block-mapping code queues one for each
/// extent it maps, unmaps or converts; an RUI promises up to 16, done in a later part with their RUD. AG metadata
/// (tree blocks, the AGFL, inode chunks, bmbt blocks) keeps its reverse mappings up to date inline, as in the kernel.
/// </summary>
public sealed class RmapUpdateWork(AgAllocator allocator) : DeferredWorkType<RmapUpdate>
{
    private const uint FlagAttrFork = 1u << 31, FlagBmbtBlock = 1u << 30, FlagUnwritten = 1u << 29, TypeMask = 0xFF;

    public override string Name => "rmap update";
    public override int MaxItems => 16;

    public override void Sort(List<RmapUpdate> items) => AgOrder.Sort(items, allocator.Superblock.AgBlkLog);

    public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<RmapUpdate> items)
    {
        var maps = new IntentMapExtent[items.Count];
        for (int i = 0; i < maps.Length; i++) maps[i] = Encode(items[i]);
        return IntentLogItem.RmapUpdate(id, maps);
    }

    public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<RmapUpdate> items) =>
        IntentLogItem.Done(LogItemType.Rud, intent.Id);

    public override RmapUpdate? Finish(Transaction tx, RmapUpdate item)
    {
        allocator.UpdateReverseMap(tx, item.Kind, item.StartBlock, item.Length, item.Owner);
        return null;
    }

    /// <summary>The logged form (xfs_map_extent): owner, physical start, file offset, length, kind and flag bits.</summary>
    public static IntentMapExtent Encode(RmapUpdate u)
    {
        var f = u.Owner.Flags;
        uint flags = (uint)u.Kind | ((f & RmapFlags.AttrFork) != 0 ? FlagAttrFork : 0) | ((f & RmapFlags.BmbtBlock) != 0 ? FlagBmbtBlock : 0)
            | ((f & RmapFlags.Unwritten) != 0 ? FlagUnwritten : 0);
        return new IntentMapExtent(u.Owner.Owner, u.StartBlock, u.Owner.AdvancesOffset ? u.Owner.Offset : 0, u.Length, flags);
    }

    /// <summary>An update as an RUI logged it; null when its kind or flags are not ones the kernel logs.</summary>
    public static RmapUpdate? Decode(IntentMapExtent m)
    {
        uint kind = m.Flags & TypeMask;
        if (kind is < 1 or > 8 || (m.Flags & ~(TypeMask | FlagAttrFork | FlagBmbtBlock | FlagUnwritten)) != 0) return null;
        var flags = ((m.Flags & FlagAttrFork) != 0 ? RmapFlags.AttrFork : 0) | ((m.Flags & FlagBmbtBlock) != 0 ? RmapFlags.BmbtBlock : 0)
            | ((m.Flags & FlagUnwritten) != 0 ? RmapFlags.Unwritten : 0);
        return new RmapUpdate((RmapUpdateKind)kind, m.StartBlock, m.Length, new RmapOwner(m.Owner, m.StartOffset, flags));
    }
}

using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Extents;

/// <summary>The operations of a bmap intent (the kernel's enum xfs_bmap_intent_type).</summary>
public enum BmapUpdateKind
{
    Map = 1, Unmap = 2,
}

/// <summary>One mapping update (xfs_bmap_intent): map or unmap <see cref="Extent"/> in a fork of inode <see cref="Ino"/>.</summary>
public readonly record struct BmapUpdate(BmapUpdateKind Kind, ulong Ino, ForkKind Fork, BmbtRecord Extent);

/// <summary>
/// Mapping updates as deferred work (xfs_bmap_item.c): a BUI promises one; its work maps the extent into a hole of
/// the fork without allocating (xfs_bmapi_remap: the blocks come from another file, in an exchange or a reflink) or
/// unmaps a range without freeing (__xfs_bunmapi with XFS_BMAPI_REMAP), in a later part with its BUD. di_nblocks and the
/// fork follow; the reverse mapping follows as an rmap intent.
/// <para>
/// With <see cref="KeepEditors"/> (log recovery, which alone changes the volume meanwhile) the extents of each fork
/// are loaded once and the editor goes on from transaction to transaction (<see cref="ExtentMapEditor.TryRebind"/>),
/// so that thousands of updates to a file of thousands of extents do not read its whole tree each time.
/// </para>
/// </summary>
public sealed class BmapUpdateWork(InodeCache inodes, IFileSpace space) : DeferredWorkType<BmapUpdate>
{
    private const uint FlagAttrFork = 1u << 31, FlagUnwritten = 1u << 30, FlagRealtime = 1u << 29, TypeMask = 0xFF;
    private readonly Dictionary<(ulong, ForkKind), ExtentMapEditor> _editors = new();

    /// <summary>Keep each fork's editor (and its loaded extents) between updates; only when nothing else changes those forks.</summary>
    public bool KeepEditors { get; init; }

    public override string Name => "bmap update";
    public override int MaxItems => 1;

    public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<BmapUpdate> items) => IntentLogItem.BmapUpdate(id, Encode(items[0]));

    public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<BmapUpdate> items) => IntentLogItem.Done(LogItemType.Bud, intent.Id);

    public override BmapUpdate? Finish(Transaction tx, BmapUpdate item)
    {
        var inode = InodeUpdate.Find(tx, inodes, item.Ino);
        var editor = Editor(tx, inode, item.Fork);
        if (item.Kind == BmapUpdateKind.Map) editor.Remap(item.Extent);
        else editor.UnmapRemap(item.Extent.FileOffset, item.Extent.BlockCount);
        editor.Save();
        inode.Log(tx, inodes);
        return null;
    }

    /// <summary>An editor of <paramref name="fork"/> of <paramref name="inode"/> in <paramref name="tx"/> (the kept one when it still fits).</summary>
    public ExtentMapEditor Editor(Transaction tx, InodeUpdate inode, ForkKind fork)
    {
        var key = (inode.Number, fork);
        if (KeepEditors && _editors.TryGetValue(key, out var kept) && kept.TryRebind(tx, inode)) return kept;
        var editor = new ExtentMapEditor(tx, inode, space, fork);
        if (KeepEditors) _editors[key] = editor;
        return editor;
    }

    /// <summary>The logged form (xfs_map_extent): the inode as owner, physical start, file offset, length, kind and flags.</summary>
    public static IntentMapExtent Encode(BmapUpdate u) => new(u.Ino, u.Extent.StartBlock, u.Extent.FileOffset, u.Extent.BlockCount,
        (uint)u.Kind | (u.Fork == ForkKind.Attr ? FlagAttrFork : 0) | (u.Extent.Unwritten ? FlagUnwritten : 0));

    /// <summary>An update as a BUI logged it; null when its kind or flags are not ones this engine can do (realtime).</summary>
    public static BmapUpdate? Decode(IntentMapExtent m)
    {
        uint kind = m.Flags & TypeMask;
        if (kind is < 1 or > 2 || (m.Flags & ~(TypeMask | FlagAttrFork | FlagUnwritten)) != 0 || m.Length == 0) return null;
        return new BmapUpdate((BmapUpdateKind)kind, m.Owner, (m.Flags & FlagAttrFork) != 0 ? ForkKind.Attr : ForkKind.Data,
            new BmbtRecord(m.StartOffset, m.StartBlock, m.Length, (m.Flags & FlagUnwritten) != 0));
    }

    /// <summary>True when the BUI's flags name a realtime extent (not maintained by the write path).</summary>
    public static bool IsRealtime(IntentMapExtent m) => (m.Flags & FlagRealtime) != 0;
}

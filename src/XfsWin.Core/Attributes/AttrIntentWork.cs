using System.Buffers.Binary;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Attributes;

/// <summary>
/// One xattr operation as an ATTRI logs it (xfs_attri_log_format and its name/value regions): the operation, the
/// inode and its generation, the namespace filter, the name and value, and for a parent-pointer replace the new ones.
/// </summary>
public readonly record struct AttrOperation(uint Op, ulong Ino, uint Generation, uint Filter, byte[] Name, byte[] Value, byte[]? NewName, byte[]? NewValue)
{
    public const uint Set = 1, Remove = 2, Replace = 3, ParentSet = 4, ParentRemove = 5, ParentReplace = 6;
    public const uint FilterRoot = 0x2, FilterSecure = 0x4, FilterParent = 0x8, FilterIncomplete = 0x80;

    /// <summary>The operation a recovered ATTRI logged; null when its op or filter is not one the kernel logs.</summary>
    public static AttrOperation? FromLog(RecoveredIntent intent)
    {
        var r = intent.Regions;
        var f = r[0].AsSpan();
        uint op = BinaryPrimitives.ReadUInt32LittleEndian(f[24..]) & 0xFF;
        uint filter = BinaryPrimitives.ReadUInt32LittleEndian(f[36..]);
        uint valueLen = BinaryPrimitives.ReadUInt32LittleEndian(f[32..]);
        ulong ino = BinaryPrimitives.ReadUInt64LittleEndian(f[16..]);
        uint gen = BinaryPrimitives.ReadUInt32LittleEndian(f[4..]);
        if (op is < Set or > ParentReplace || (filter & ~(FilterRoot | FilterSecure | FilterParent | FilterIncomplete)) != 0) return null;
        if (op == ParentReplace)
        {
            int oldLen = BinaryPrimitives.ReadUInt16LittleEndian(f[28..]), newLen = BinaryPrimitives.ReadUInt16LittleEndian(f[30..]);
            if (r.Length != 5) return null;
            return new AttrOperation(op, ino, gen, filter, r[1][..oldLen], r[3][..(int)valueLen], r[2][..newLen], r[4][..(int)valueLen]);
        }
        int nameLen = (int)BinaryPrimitives.ReadUInt32LittleEndian(f[28..]);
        if (r.Length < 2 || r[1].Length < nameLen || (valueLen > 0 && (r.Length < 3 || r[2].Length < valueLen))) return null;
        return new AttrOperation(op, ino, gen, filter, r[1][..nameLen], valueLen > 0 ? r[2][..(int)valueLen] : [], null, null);
    }
}

/// <summary>
/// Xattr and parent-pointer operations as deferred work (xfs_attr_item.c): an ATTRI promises one; its work sets,
/// removes or replaces the attribute (parent pointers: by name and value) in a later part with its ATTRD. Used by log
/// recovery to finish what the kernel left (on parent-pointer volumes every namespace change carries one).
/// </summary>
public sealed class AttrIntentWork(InodeCache inodes, IFileSpace space, Action<Transaction, InodeUpdate>? moveLocalData) : DeferredWorkType<AttrOperation>
{
    /// <summary>
    /// Whether finishing an operation sets the inode's ctime. The namespace operations that queue parent-pointer
    /// updates set the times themselves in the transaction that changes the directory, and the deferred attribute
    /// work then leaves them (xfs_attr_finish_item changes no time); log recovery sets it.
    /// </summary>
    public bool TouchInode { get; init; } = true;

    public override string Name => "xattr operation";
    public override int MaxItems => 1;

    public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<AttrOperation> items)
    {
        var o = items[0];
        return IntentLogItem.AttrIntent(id, o.Ino, o.Generation, o.Op, o.Filter, o.Name, o.Value, o.NewName ?? [], o.NewValue ?? []);
    }

    public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<AttrOperation> items) => IntentLogItem.Done(LogItemType.Attrd, intent.Id);

    public override AttrOperation? Finish(Transaction tx, AttrOperation o)
    {
        var inode = InodeUpdate.Find(tx, inodes, o.Ino);
        if (new DinodeView(inode.Image).Generation != o.Generation)
            throw tx.Mount.Corrupt($"inode {o.Ino}", inode.ByteOffset, $"an xattr intent names generation {o.Generation}, the inode has another");
        var editor = new AttributeEditor(tx, inode, space, moveLocalData is null ? null : i => moveLocalData(tx, i));
        var ns = (o.Filter & AttrOperation.FilterParent) != 0 ? XattrNamespace.Parent
            : (o.Filter & AttrOperation.FilterRoot) != 0 ? XattrNamespace.Trusted
            : (o.Filter & AttrOperation.FilterSecure) != 0 ? XattrNamespace.Secure : XattrNamespace.User;
        switch (o.Op)
        {
            case AttrOperation.Set or AttrOperation.Replace:
                editor.Set(ns, o.Name, o.Value);
                break;
            case AttrOperation.Remove:
                editor.Remove(ns, o.Name); // already gone is fine (XFS_DA_OP_OKNOENT)
                break;
            case AttrOperation.ParentSet:
                editor.SetParent(o.Name, o.Value);
                break;
            case AttrOperation.ParentRemove:
                editor.RemoveParent(o.Name, o.Value);
                break;
            case AttrOperation.ParentReplace:
                editor.RemoveParent(o.Name, o.Value);
                editor.SetParent(o.NewName!, o.NewValue!);
                break;
        }
        if (TouchInode)
        {
            long ticks = DateTime.UtcNow.Ticks - DateTime.UnixEpoch.Ticks;
            inode.Touch(new XfsTimestamp(ticks / TimeSpan.TicksPerSecond, (uint)(ticks % TimeSpan.TicksPerSecond * 100)), modified: false);
        }
        inode.Log(tx, inodes);
        return null;
    }
}

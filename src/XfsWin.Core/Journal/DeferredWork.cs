namespace XfsWin.Journal;

/// <summary>
/// One kind of deferred work (the kernel's xfs_defer_op_type): how its work items are promised in the log (an intent
/// item), how their completion is recorded (a done item), and how one item is done inside a transaction. The layer
/// that does the work defines the kind (extent frees and reverse-map updates in Allocation, refcount updates in
/// Allocation, mapping updates in Extents, extent exchanges and xattr operations above); <see cref="Transaction"/>
/// chains them across transaction rolls.
/// </summary>
/// <typeparam name="TItem">One unit of work (an extent to free, a mapping to add, ...).</typeparam>
public abstract class DeferredWorkType<TItem> where TItem : struct
{
    /// <summary>A short name for messages ("extent free", "rmap update", ...).</summary>
    public abstract string Name { get; }

    /// <summary>The most work items one intent carries (the kernel's max_items).</summary>
    public abstract int MaxItems { get; }

    /// <summary>Orders a batch before its intent is logged (by AG, so that AG headers are locked in ascending order).</summary>
    public virtual void Sort(List<TItem> items) { }

    /// <summary>The intent item promising <paramref name="items"/>, with id <paramref name="id"/>.</summary>
    public abstract IntentLogItem CreateIntent(ulong id, IReadOnlyList<TItem> items);

    /// <summary>The done item of <paramref name="intent"/>, which promised <paramref name="items"/>.</summary>
    public abstract IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<TItem> items);

    /// <summary>
    /// Does <paramref name="item"/> in <paramref name="tx"/> (which may queue more deferred work). Returns null when the
    /// item is done, or what is left of it when it needs a fresh transaction to go on (the kernel's -EAGAIN): the
    /// remaining items are then promised by a new intent logged in this transaction, and finished after a roll.
    /// </summary>
    public abstract TItem? Finish(Transaction tx, TItem item);
}

/// <summary>A batch of deferred work of one kind and its intent (the kernel's xfs_defer_pending).</summary>
internal abstract class DeferPending
{
    /// <summary>The intent logged for the batch, or null before it is logged.</summary>
    public IntentLogItem? Intent;

    public abstract string Name { get; }
    public abstract int Count { get; }

    /// <summary>Logs the batch's intent in <paramref name="tx"/> unless it has one; true when the batch has an intent.</summary>
    public abstract bool LogIntent(Transaction tx, bool sort);

    /// <summary>
    /// Logs the done item and does every item (xfs_defer_finish_one). False when an item asked for a fresh transaction:
    /// a new intent for what is left is then logged, and the batch stays pending.
    /// </summary>
    public abstract bool FinishAll(Transaction tx);

    /// <summary>Logs a done item for the intent and a new intent for the same work, so that the old one stops holding the log's tail.</summary>
    public abstract void Relog(Transaction tx);
}

internal sealed class DeferPending<TItem>(DeferredWorkType<TItem> type) : DeferPending where TItem : struct
{
    public readonly DeferredWorkType<TItem> Type = type;
    public readonly List<TItem> Items = new();

    public override string Name => Type.Name;
    public override int Count => Items.Count;

    public bool CanAppend => Intent is null && Items.Count < Type.MaxItems;

    public override bool LogIntent(Transaction tx, bool sort)
    {
        if (Intent is not null) return true;
        if (Items.Count == 0) return false;
        if (sort) Type.Sort(Items);
        Intent = Type.CreateIntent(tx.NextIntentId(), Items);
        tx.Log(Intent);
        return true;
    }

    public override bool FinishAll(Transaction tx)
    {
        if (Intent is not null) tx.Log(Type.CreateDone(Intent, Items));
        while (Items.Count > 0)
        {
            var rest = Type.Finish(tx, Items[0]);
            if (rest is { } left)
            {
                Items[0] = left;
                Intent = Type.CreateIntent(tx.NextIntentId(), Items);
                tx.Log(Intent);
                return false;
            }
            Items.RemoveAt(0);
        }
        Intent = null;
        return true;
    }

    public override void Relog(Transaction tx)
    {
        if (Intent is null) return;
        tx.Log(Type.CreateDone(Intent, Items));
        Intent = Type.CreateIntent(tx.NextIntentId(), Items);
        tx.Log(Intent);
    }
}

/// <summary>
/// Deferred work a recovery transaction left (its intents logged) when it committed, to be finished once every intent
/// recovered from the log has been dealt with (the kernel's xfs_defer_capture): <see cref="Transaction.Resume"/>.
/// </summary>
public sealed class CapturedWork
{
    internal CapturedWork(List<DeferPending> pending, int logReservationBytes, int logCount)
    {
        Pending = pending;
        LogReservationBytes = logReservationBytes;
        LogCount = logCount;
    }

    internal List<DeferPending> Pending { get; }
    public int LogReservationBytes { get; }
    public int LogCount { get; }

    /// <summary>Batches of work waiting.</summary>
    public int Count => Pending.Count;
}

/// <summary>
/// An inode joined to a transaction for its whole chain of rolls (the kernel's xfs_trans_ijoin with lock flags 0): the
/// Inodes layer's working copy. Deferred work that changes the inode in a later part finds this copy
/// (<see cref="Transaction.FindInode"/>) instead of decoding a second one, and every roll logs it again in the part
/// that commits (xfs_defer_save_resources), so that its log item keeps moving forward.
/// </summary>
public interface IJoinedInode
{
    ulong Number { get; }

    /// <summary>Logs the inode as it is now in <paramref name="tx"/>.</summary>
    void Relog(Transaction tx);
}

namespace XfsWin.Journal;

/// <summary>
/// The committed item list (delayed logging, xfs_log_cil.c): transactions commit their items here instead of
/// writing them to the log. An item relogged before the next checkpoint is merged into the one already held (its
/// newest image, the union of what was logged) and moves to the end of the list, so the list stays ordered by
/// the last transaction that logged each item. A checkpoint takes the whole list at once.
/// <para>
/// A done item committed while its intent is still here (never checkpointed) whites both out, as the kernel's CIL
/// does: neither reaches the log, since the work and its promise land in the same checkpoint anyway.
/// </para>
/// <para>
/// A buffer item relogged here drops the image it held for the newer one (<see cref="ImageReleased"/>). Nothing else
/// holds that array any more: the buffer published the newer bytes before its transaction reached the CIL, no
/// checkpoint has taken it (a checkpoint empties the list, and what it took lives on in the AIL, never here), and
/// readers of a read-write volume keep a buffer's bytes only while they hold the volume's lock, which the committing
/// change holds exclusively. So the buffer may reuse it for its next private copy instead of allocating one.
/// </para>
/// Not thread-safe: <see cref="MountedLog"/> serialises access under its lock.
/// </summary>
public sealed class CommittedItemList
{
    /// <summary>Called (under the log's lock) with a relogged buffer item and the image array it no longer holds.</summary>
    public Action<BufferLogItem, byte[]>? ImageReleased { get; init; }

    private readonly LinkedList<JournalItem> _order = new();
    private readonly Dictionary<LogItemKey, LinkedListNode<JournalItem>> _byKey = new();

    public int Count => _order.Count;
    public bool IsEmpty => _order.Count == 0;
    /// <summary>Transactions committed since the last checkpoint.</summary>
    public int Transactions { get; private set; }
    /// <summary>Log space (blocks) the reservations of those transactions hold, released when the checkpoint is written.</summary>
    public long ReservedBlocks { get; private set; }

    /// <summary>Bytes the items take in a checkpoint: payloads plus one op header per region (kept as items merge).</summary>
    public long FormattedBytes { get; private set; }

    private static long SizeOf(JournalItem item) => item.FormattedBytes + (long)item.RegionCount * LogOpHeader.Size;

    /// <summary>Intent and done item pairs dropped because both were committed before a checkpoint.</summary>
    public long Whiteouts { get; private set; }

    public JournalItem? Find(LogItemKey key) => _byKey.TryGetValue(key, out var node) ? node.Value : null;

    /// <summary>Adds one transaction's items (in the transaction's order); the log space they keep comes with <see cref="Reserve"/>.</summary>
    public void Commit(List<JournalItem> items)
    {
        foreach (var item in items)
        {
            ushort intentType = IntentLogFormat.IntentOf(item.Key.Type);
            if (intentType != 0 && _byKey.Remove(new LogItemKey(intentType, item.Key.Id, 0), out var intent))
            {
                FormattedBytes -= SizeOf(intent.Value);
                _order.Remove(intent);
                Whiteouts++;
                continue;
            }
            if (_byKey.TryGetValue(item.Key, out var node))
            {
                FormattedBytes -= SizeOf(node.Value);
                // Only an image replaced by a newer one is released: a cancel keeps the freed buffer's bytes published.
                var released = ImageReleased is not null && node.Value is BufferLogItem { IsCancel: false } held && item is BufferLogItem { IsCancel: false }
                    ? held.ImageArray : null;
                node.Value.MergeNewer(item);
                if (released is { Length: > 0 } && !ReferenceEquals(released, ((BufferLogItem)node.Value).ImageArray))
                    ImageReleased!((BufferLogItem)node.Value, released);
                if (!ReferenceEquals(node.Value, item)) item.MergedAway = true;
                FormattedBytes += SizeOf(node.Value);
                _order.Remove(node);
                _order.AddLast(node);
            }
            else
            {
                _byKey[item.Key] = _order.AddLast(item);
                FormattedBytes += SizeOf(item);
            }
        }
        Transactions++;
    }

    /// <summary>Adds <paramref name="blocks"/> to the log space the list holds for its checkpoint.</summary>
    public void Reserve(long blocks) => ReservedBlocks += blocks;

    /// <summary>Takes every item, oldest first, and empties the list.</summary>
    public List<JournalItem> TakeAll()
    {
        var items = new List<JournalItem>(_order);
        _order.Clear();
        _byKey.Clear();
        Transactions = 0;
        ReservedBlocks = 0;
        FormattedBytes = 0;
        return items;
    }
}

namespace XfsWin.Journal;

/// <summary>
/// What a log item is about, for merging relogged items in the CIL and replacing them in the AIL: a buffer's
/// (daddr, length in BB), an inode's number, an intent's or done item's (type, id).
/// </summary>
public readonly record struct LogItemKey(ushort Type, long Id, long Length)
{
    public override string ToString() => $"{LogItemType.Name(Type)} {Id}" + (Length != 0 ? $"+{Length}" : "");
}

/// <summary>
/// One item as the log carries it: an identity, then its regions in log order (the first begins with the host-order
/// u16 item type and u16 region count, as recovery reads them). The engine's layers hand the journal items through
/// this boundary: the buffer layer builds <see cref="BufferLogItem"/>s from a buffer's dirty bitmap, the in-core
/// inode builds <see cref="InodeLogItem"/>s, deferred work builds <see cref="IntentLogItem"/>s.
/// Invariant: once committed, an item is owned by the journal and not changed by its producer (the producer hands
/// a new item, which the CIL merges into the one it holds).
/// </summary>
public abstract class JournalItem
{
    public abstract LogItemKey Key { get; }

    /// <summary>The start LSN of the checkpoint that last carried this item (its AIL position); 0 before that.</summary>
    public ulong Lsn { get; internal set; }

    /// <summary>
    /// Set when the CIL merged this item into the one it already held for the same key (see <see cref="MergeNewer"/>):
    /// the journal keeps no reference to it, so its producer may use the object again for a later item (set under the
    /// log's lock as the transaction commits; read by the producer after that commit).
    /// </summary>
    public bool MergedAway { get; internal set; }

    /// <summary>
    /// Clears the journal's marks (<see cref="MergedAway"/>, <see cref="Lsn"/>) of a merged-away item its producer
    /// makes again; the producer then sets everything the item logs.
    /// </summary>
    protected void Reclaim()
    {
        MergedAway = false;
        Lsn = 0;
    }

    /// <summary>
    /// Appends the item's regions, each one op's payload, in log order; what the item makes for them it takes from
    /// <paramref name="arena"/> (the regions are read until the arena is reset).
    /// </summary>
    public abstract void Format(List<ReadOnlyMemory<byte>> regions, LogFormatArena arena);

    /// <summary><see cref="Format(List{ReadOnlyMemory{byte}}, LogFormatArena)"/> into memory of the regions' own.</summary>
    public void Format(List<ReadOnlyMemory<byte>> regions) => Format(regions, new LogFormatArena());

    /// <summary>Payload bytes the item's regions take (without op headers).</summary>
    public abstract int FormattedBytes { get; }

    /// <summary>Regions the item takes (each costs one op header).</summary>
    public abstract int RegionCount { get; }

    /// <summary>
    /// The CIL relogs this item with <paramref name="newer"/> (same key, committed later): afterwards this item logs
    /// the newer image and what both logged (the union of dirty ranges or fields).
    /// </summary>
    public abstract void MergeNewer(JournalItem newer);

    /// <summary>A copy that later merges do not change (what the AIL keeps for writeback).</summary>
    public abstract JournalItem Snapshot();
}

namespace XfsWin.Allocation;

/// <summary>A deferred work item on one extent of the data section, named by its first block (an XFS_FSB: AG number in the high bits).</summary>
public interface IAgOrderedItem
{
    ulong StartBlock { get; }
}

/// <summary>
/// The order a batch of deferred space work is done in (the kernel's xfs_extent_free_diff_items and its rmap and
/// refcount twins): by AG, so that AG headers are locked in ascending order; items of one AG keep the order they were
/// queued in.
/// </summary>
public static class AgOrder
{
    /// <summary>Sorts <paramref name="items"/> by AG in place, stably (batches hold at most a few dozen items).</summary>
    public static void Sort<T>(List<T> items, int agBlkLog) where T : struct, IAgOrderedItem
    {
        for (int i = 1; i < items.Count; i++)
        {
            var item = items[i];
            ulong ag = item.StartBlock >> agBlkLog;
            int j = i - 1;
            while (j >= 0 && items[j].StartBlock >> agBlkLog > ag)
            {
                items[j + 1] = items[j];
                j--;
            }
            items[j + 1] = item;
        }
    }
}

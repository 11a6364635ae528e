namespace XfsWin.Journal;

/// <summary>
/// A transaction on a <see cref="MountedLog"/>: holds its log reservation from <see cref="MountedLog.Begin"/> and
/// collects the items it changed, in order; <see cref="Commit"/> hands them to the CIL (the metadata is then
/// logged, durable once the log is forced), <see cref="Dispose"/> without commit gives the reservation back.
/// One thread uses a transaction at a time.
/// </summary>
public sealed class MetadataTransaction : IDisposable
{
    private readonly MountedLog _log;
    private readonly List<JournalItem> _items = new();
    private bool _done;

    internal MetadataTransaction(MountedLog log, int reservedBlocks)
    {
        _log = log;
        ReservedBlocks = reservedBlocks;
    }

    /// <summary>Log space held, in 512-byte blocks (the reservation plus the kernel's per-transaction overhead).</summary>
    public int ReservedBlocks { get; }
    public IReadOnlyList<JournalItem> Items => _items;

    /// <summary>Joins an item; logging the same buffer or inode again in this transaction merges into the first.</summary>
    public void Log(JournalItem item)
    {
        ObjectDisposedException.ThrowIf(_done, this);
        foreach (var existing in _items)
        {
            if (existing.Key == item.Key)
            {
                existing.MergeNewer(item);
                return;
            }
        }
        _items.Add(item);
    }

    /// <summary>The checkpoint sequence this transaction's items went into (see <see cref="MountedLog.DurableSequence"/>); 0 before commit.</summary>
    public long CommitSequence { get; private set; }

    public void Commit()
    {
        ObjectDisposedException.ThrowIf(_done, this);
        _done = true;
        CommitSequence = _log.Commit(this, _items);
    }

    public void Dispose()
    {
        if (_done) return;
        _done = true;
        _log.Cancel(this);
    }
}

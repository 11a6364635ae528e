namespace XfsWin.Journal;

/// <summary>
/// A transaction on a <see cref="MountedLog"/>: holds its log reservation from <see cref="MountedLog.Begin"/> and
/// collects the items it changed, in order; <see cref="Commit"/> hands them to the CIL (the metadata is then
/// logged, durable once the log is forced), <see cref="Dispose"/> without commit gives the reservation back.
/// A permanent reservation (a log count above one) may <see cref="Roll"/>: commit what it has and go on as a new
/// transaction with the same reservation (the kernel's xfs_trans_roll).
/// One thread uses a transaction at a time.
/// </summary>
public sealed class MetadataTransaction : IDisposable
{
    private readonly MountedLog _log;
    private readonly List<JournalItem> _items = new();
    private bool _done;

    internal MetadataTransaction(MountedLog log, int reservedBlocks, int unitsLeft, int ownerThread)
    {
        _log = log;
        ReservedBlocks = reservedBlocks;
        UnitsLeft = unitsLeft;
        OwnerThread = ownerThread;
    }

    /// <summary>
    /// The managed thread that began the transaction: the log counts its reservation as that thread's, so that a thread
    /// never waits for log space only its own transactions hold.
    /// </summary>
    internal int OwnerThread { get; private set; }

    /// <summary>Log space held per part, in 512-byte blocks (the reservation plus the kernel's per-transaction overhead).</summary>
    public int ReservedBlocks { get; private set; }

    /// <summary>Parts whose reservation is granted and not yet used, this one included (the log's lock guards it).</summary>
    internal int UnitsLeft { get; set; }

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
                if (!ReferenceEquals(existing, item)) item.MergedAway = true;
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
        CommitSequence = _log.Commit(this, _items, regrant: false);
    }

    /// <summary>
    /// Commits this part and returns the transaction's next part, holding the same reservation (regranted from the log
    /// when the units granted up front are used up, which may push the AIL).
    /// </summary>
    public MetadataTransaction Roll()
    {
        CommitPart();
        var next = new MetadataTransaction(_log, ReservedBlocks, UnitsLeft, OwnerThread);
        UnitsLeft = 0;
        return next;
    }

    /// <summary>
    /// Commits this part and goes on as the transaction's next part in this same object (what <see cref="Roll"/> does
    /// without a new one): used by <see cref="Transaction"/>, which owns its part.
    /// </summary>
    internal void RollInPlace()
    {
        CommitPart();
        _items.Clear();
        _done = false;
    }

    /// <summary>Commits this part keeping the reservation for the next (regranted when used up); a failed commit cancels.</summary>
    private void CommitPart()
    {
        ObjectDisposedException.ThrowIf(_done, this);
        _done = true;
        try
        {
            CommitSequence = _log.Commit(this, _items, regrant: true);
        }
        catch
        {
            _log.Cancel(this);
            throw;
        }
    }

    /// <summary>
    /// Starts this finished transaction again as a new one on the same log, reserving <paramref name="logReservationBytes"/>
    /// for each of <paramref name="logCount"/> parts (as <see cref="MountedLog.Begin"/>); for a transaction object that is reused.
    /// </summary>
    internal void Restart(int logReservationBytes, int logCount)
    {
        if (!_done) throw new InvalidOperationException("a transaction still open cannot start again");
        int blocks = _log.Reserve(logReservationBytes, ref logCount);
        OwnerThread = Environment.CurrentManagedThreadId;
        _items.Clear();
        ReservedBlocks = blocks;
        UnitsLeft = logCount;
        CommitSequence = 0;
        _done = false;
    }

    public void Dispose()
    {
        if (_done) return;
        _done = true;
        _log.Cancel(this);
    }
}

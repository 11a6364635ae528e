using XfsWin.Metadata;

namespace XfsWin.Journal;

/// <summary>Work a transaction runs after the part that is committed next (see <see cref="Transaction.OnCommit(ICommitCallback)"/>).</summary>
public interface ICommitCallback
{
    void Committed();
}

/// <summary>
/// Transaction objects of one volume's log, reused: <see cref="Begin"/> hands out a finished transaction started again
/// with a new reservation, and a pooled transaction goes back here when it is disposed, its lists, maps and change
/// set emptied but kept, so a steady stream of changes allocates no transaction bookkeeping.
/// <para>
/// Changes on several threads may begin and dispose transactions at once (the stack is guarded by a leaf lock). A
/// transaction must not be used after its disposal (the pool may already have handed it to the next change);
/// transactions opened inside another one (nested) each get their own object.
/// </para>
/// </summary>
public sealed class TransactionPool(MountContext mount, MountedLog log)
{
    // Guarded by itself (a leaf lock: held only to push or pop).
    private readonly Stack<Transaction> _free = new();

    /// <summary>A transaction reserving <paramref name="logReservationBytes"/> for each of <paramref name="logCount"/> parts (as the <see cref="Transaction"/> constructor).</summary>
    public Transaction Begin(int logReservationBytes, int logCount)
    {
        Transaction? tx;
        lock (_free)
            if (!_free.TryPop(out tx)) tx = null;
        if (tx is null) return new Transaction(mount, log, this, logReservationBytes, logCount);
        // A transaction that cannot start again (the log refused the reservation) is left to the collector.
        tx.Start(logReservationBytes, logCount);
        return tx;
    }

    internal void Return(Transaction tx)
    {
        lock (_free) _free.Push(tx);
    }
}

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
/// Not thread-safe: the volume uses it only while holding its change lock exclusively, and every transaction from it is used and disposed
/// under that lock. A transaction must not be used after its disposal (the pool may already have handed it to the
/// next change); transactions opened inside another one (nested) each get their own object.
/// </para>
/// </summary>
public sealed class TransactionPool(MountContext mount, MountedLog log)
{
    private readonly Stack<Transaction> _free = new();

    /// <summary>A transaction reserving <paramref name="logReservationBytes"/> for each of <paramref name="logCount"/> parts (as the <see cref="Transaction"/> constructor).</summary>
    public Transaction Begin(int logReservationBytes, int logCount)
    {
        if (!_free.TryPop(out var tx)) return new Transaction(mount, log, this, logReservationBytes, logCount);
        // A transaction that cannot start again (the log refused the reservation) is left to the collector.
        tx.Start(logReservationBytes, logCount);
        return tx;
    }

    internal void Return(Transaction tx) => _free.Push(tx);
}

namespace XfsWin.Journal;

/// <summary>What of an inode its quota owners are charged for: in use or not, its owners, its blocks (di_nblocks).</summary>
public readonly record struct QuotaOwner(bool Counted, uint Uid, uint Gid, uint ProjectId, ulong Blocks);

/// <summary>A dquot: its quota type (d_type bits: user 1, project 2, group 4) and id.</summary>
public readonly record struct DquotKey(byte Type, uint Id);

/// <summary>The changes of one dquot's counts in one transaction part (the kernel's xfs_dqtrx bcount and icount deltas).</summary>
public record struct DquotDelta(long Blocks, long Inodes);

/// <summary>
/// The quota accounting of a read-write volume whose superblock has quota accounting on (the kernel's xfs_trans_dquot.c
/// behind its transactions): <see cref="Transaction.ChargeInode"/> turns each logged change of an inode's use, owners or
/// block count into deltas of its user, group and project dquots, and the transaction hands the deltas of each part to
/// <see cref="Apply"/> as it commits, which logs the changed dquots in that part (xfs_trans_apply_dquot_deltas). The
/// dquots counted must exist in the quota files before a transaction charges them (created on first use beforehand).
/// </summary>
public interface IDquotAccounting
{
    /// <summary>The quota types accounted (d_type bits).</summary>
    byte Types { get; }

    /// <summary>False for inodes no dquot counts: the quota files themselves and metadata directory inodes.</summary>
    bool Accounts(ulong ino);

    /// <summary>Applies one part's deltas to the dquots and logs each changed dquot in <paramref name="tx"/>.</summary>
    void Apply(Transaction tx, IReadOnlyDictionary<DquotKey, DquotDelta> deltas);
}

using XfsWin.Device;

namespace XfsWin.Journal;

/// <summary>What log recovery found and did, and which device the volume must read from.</summary>
public sealed class LogRecoveryResult
{
    public LogState State;
    /// <summary>What the volume must read from: the overlay (Memory), or the original device (clean, None, external, after an in-place flush).</summary>
    public IBlockDevice Device = null!;
    /// <summary>Intent items between tail and head, by kind ("EFI", "BUI", "ATTRI", ...), with counts.</summary>
    public IReadOnlyDictionary<string, int> IntentsLogged = new Dictionary<string, int>();
    /// <summary>Of <see cref="IntentsLogged"/>, those whose done item is in the log too (the kernel has nothing left to do for them), by kind.</summary>
    public IReadOnlyDictionary<string, int> IntentsFinished = new Dictionary<string, int>();
    /// <summary>Intents whose done item is not in the log, by kind ("EFI", "RUI", ...), with counts.</summary>
    public IReadOnlyDictionary<string, int> UnfinishedIntents = new Dictionary<string, int>();
    /// <summary>The unfinished intents themselves, in log order (what in-place recovery finishes).</summary>
    public IReadOnlyList<RecoveredIntent> PendingIntents = [];
    /// <summary>Unfinished intents in-place recovery finished (as the kernel does after its replay), by kind.</summary>
    public IReadOnlyDictionary<string, int> IntentsRecovered = new Dictionary<string, int>();
    public IReadOnlyList<string> Warnings = [];
    /// <summary>Inodes on the AGI unlinked lists after replay (open but unlinked at the crash).</summary>
    public int UnlinkedInodes;
    /// <summary>Of those, how many in-place recovery freed (as the kernel does after its replay).</summary>
    public int UnlinkedInodesFreed;
    /// <summary>Copy-on-write staging extents in-place recovery removed (as the kernel does at mount).</summary>
    public int CowStagingExtentsRemoved;
    /// <summary>Bytes of log between tail and head that were replayed.</summary>
    public long LogBytesReplayed;
    public ulong HeadLsn, TailLsn;
    public int TransactionsReplayed;
    /// <summary>Whether quota accounting is on in the superblock as the log leaves it: dquots were replayed only then.</summary>
    public bool QuotaAccounting;
    /// <summary>Logged dquots written (those whose on-disk copy was not newer).</summary>
    public long DquotsReplayed;
    /// <summary>Quota-off items between tail and head (each switch-off of accounting logs two: its start and its end).</summary>
    public int QuotaOffItems;
    /// <summary>Quota types ("user", "group", "project") those items switched off: none of their logged dquots is replayed.</summary>
    public IReadOnlyList<string> QuotaTypesOff = [];
    /// <summary>Logged dquots and dquot buffers left out because their type was switched off in the log.</summary>
    public long DquotsSkippedQuotaOff;
}

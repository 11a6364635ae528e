namespace XfsWin.Journal;

/// <summary>What to do with a log Linux left dirty.</summary>
public enum LogReplayMode
{
    /// <summary>Replay into memory only; the device is never written (default for read-only opens).</summary>
    Memory,
    /// <summary>Replay and write the result to the device, then mark the log clean.</summary>
    InPlace,
    /// <summary>Ignore the log; the view may be stale.</summary>
    None,
}

/// <summary>State of the journal as found at open.</summary>
public enum LogState
{
    Clean,
    /// <summary>Linux did not unmount cleanly; changes may be in the log only.</summary>
    Dirty,
    /// <summary>Dirty, and replayed into memory for this open.</summary>
    ReplayedInMemory,
    /// <summary>Dirty, and replayed onto the device for this open.</summary>
    ReplayedInPlace,
    /// <summary>The log is on another device (external log) we were not given.</summary>
    External,
    Unknown,
}

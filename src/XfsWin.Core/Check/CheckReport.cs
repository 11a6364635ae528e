namespace XfsWin.Check;

/// <summary>
/// One inconsistency found by <see cref="VolumeChecker"/>: the structure it was found in, its
/// allocation group (null for volume-wide structures), the disk address of the structure in
/// 512-byte units (null when it has none, e.g. a counter summed over the volume) and what is wrong.
/// </summary>
public sealed record CheckProblem(string Structure, uint? Ag, long? Daddr, string Message)
{
    public override string ToString() =>
        $"{Structure}{(Ag is { } ag ? $" (AG {ag}" + (Daddr is { } d ? $", daddr 0x{d:x})" : ")") : Daddr is { } d2 ? $" (daddr 0x{d2:x})" : "")}: {Message}";
}

/// <summary>What the check counted while it walked the volume (the figures it compared the counters with).</summary>
public sealed record CheckSummary
{
    public required uint AgCount { get; init; }
    public required ulong DataBlocks { get; init; }
    public required ulong FreeBlocksCounted { get; init; }
    public required ulong InodesCounted { get; init; }
    public required ulong FreeInodesCounted { get; init; }
    public required ulong InUseInodes { get; init; }
    public required ulong Directories { get; init; }
    public required ulong DirectoryEntries { get; init; }
    public required ulong BtreeBlocks { get; init; }
    /// <summary>The log as found: "clean", or "dirty, replayed in memory (N transactions)".</summary>
    public required string LogState { get; init; }
    public required double ElapsedSeconds { get; init; }
    /// <summary>Time spent in each phase (opening the volume and replaying the log come before the first).</summary>
    public required IReadOnlyList<CheckPhaseTime> Phases { get; init; }
}

/// <summary>How long one phase of the check took.</summary>
public sealed record CheckPhaseTime(string Phase, double Seconds);

/// <summary>The result of checking one volume: clean when <see cref="Problems"/> is empty.</summary>
public sealed record CheckReport(string Source, IReadOnlyList<CheckProblem> Problems, int ProblemsNotListed, CheckSummary? Summary,
    IReadOnlyList<string> Notes)
{
    public bool IsClean => Problems.Count == 0 && ProblemsNotListed == 0;

    public int ProblemCount => Problems.Count + ProblemsNotListed;
}

/// <summary>Progress of a running check: a phase name and how far it is (done of total units).</summary>
public readonly record struct CheckProgress(string Phase, long Done, long Total);

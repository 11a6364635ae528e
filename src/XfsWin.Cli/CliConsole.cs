namespace XfsWin.Cli;

/// <summary>
/// Where a command writes: text output, errors, the raw stdout stream (for cat), and whether
/// stdout/stderr are terminals. Tests pass their own; the program passes the process's.
/// </summary>
public sealed class CliConsole
{
    public required TextWriter Out { get; init; }
    public required TextWriter Error { get; init; }
    /// <summary>Binary standard output. Text written to <see cref="Out"/> must be flushed before using it.</summary>
    public required Stream StdoutStream { get; init; }
    public bool StdoutIsTerminal { get; init; }
    public bool StderrIsTerminal { get; init; }

    public static CliConsole FromProcess() => new()
    {
        Out = Console.Out,
        Error = Console.Error,
        StdoutStream = Console.OpenStandardOutput(),
        StdoutIsTerminal = !Console.IsOutputRedirected,
        StderrIsTerminal = !Console.IsErrorRedirected,
    };
}

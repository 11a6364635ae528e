namespace XfsWin.Cli;

/// <summary>Process exit codes; docs/cli.md documents them. Scripts rely on these values: never renumber.</summary>
public static class ExitCodes
{
    public const int Ok = 0;
    /// <summary>Bad command line, or an argument of the wrong kind (a directory where a file is needed).</summary>
    public const int Usage = 1;
    /// <summary>The source, a partition number, or a path inside the volume does not exist.</summary>
    public const int NotFound = 2;
    /// <summary>The volume or partition table is corrupt (or needs xfs_repair).</summary>
    public const int Corrupt = 3;
    /// <summary>Unsupported feature, unsafe input refused, or permission denied.</summary>
    public const int Refused = 4;
    /// <summary>Reading the source or writing the output failed.</summary>
    public const int IoError = 5;
    /// <summary>Extract finished, but some items or metadata could not be recreated (each was named on stderr).</summary>
    public const int Partial = 6;
    /// <summary>The source (or the chosen partition) is not an XFS volume.</summary>
    public const int NotXfs = 7;
    /// <summary>Interrupted (Ctrl+C).</summary>
    public const int Interrupted = 130;

    public static int FromError(XfsError error) => error switch
    {
        XfsError.None => Ok,
        XfsError.NotFound => NotFound,
        XfsError.NotADirectory or XfsError.IsADirectory or XfsError.NotASymlink or XfsError.InvalidArgument or XfsError.NameTooLong => Usage,
        XfsError.Corrupt or XfsError.NeedsRepair => Corrupt,
        XfsError.Unsupported or XfsError.ReadOnly or XfsError.SymlinkLoop or XfsError.Exists or XfsError.NotEmpty or XfsError.NoSpace
            or XfsError.TooManyLinks or XfsError.NotPermitted or XfsError.FileTooLarge or XfsError.WouldLoop
            or XfsError.CrossDevice or XfsError.QuotaExceeded or XfsError.Changed => Refused,
        XfsError.NoAttribute => NotFound,
        XfsError.NotXfs => NotXfs,
        _ => IoError,
    };
}

using System.CommandLine;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary>Options and plumbing every command shares: the source, --partition, --json, progress, error reporting.</summary>
internal static class CommandSupport
{
    public static Argument<string> SourceArgument() => new("SOURCE")
    {
        Description = "XFS image file, disk or device; append @N for partition N (disk.img@2, /dev/sdb@1)",
    };

    public static Option<int?> PartitionOption() => new("--partition", "-p")
    {
        Description = "Partition number of SOURCE (same as SOURCE@N); `xfswin info DISK` lists them",
        HelpName = "N",
    };

    public static Option<bool> JsonOption() => new("--json")
    {
        Description = "Write machine-readable JSON to stdout",
    };

    public static Option<bool> ProgressOption() => new("--progress")
    {
        Description = "Show progress on stderr even when it is not a terminal",
    };

    public static Option<bool> NoProgressOption() => new("--no-progress")
    {
        Description = "Never show progress",
    };

    public static bool? ProgressFlag(ParseResult parse, Option<bool> progress, Option<bool> noProgress)
    {
        if (parse.GetValue(noProgress)) return false;
        if (parse.GetValue(progress)) return true;
        return null;
    }

    /// <summary>Opens the volume on SOURCE (or its partition). A whole disk with a table gets a hint naming its XFS partitions.</summary>
    public static XfsVolume OpenVolume(string source, int? partition)
    {
        var device = PartitionSpec.Open(source, partition);
        try
        {
            return XfsVolume.Open(device, ownsDevice: true);
        }
        catch (XfsException e) when (e.Error == XfsError.NotXfs && partition is null && PartitionSpec.Parse(source).Partition is null)
        {
            string? hint = null;
            try
            {
                var table = PartitionTable.Read(device);
                if (table.Kind != PartitionTableKind.None)
                {
                    var xfs = table.Entries.Where(p => p.HoldsXfs).Select(p => $"{source}@{p.Number}").ToList();
                    hint = xfs.Count > 0
                        ? $"'{source}' is a partitioned disk ({table.Kind.ToString().ToUpperInvariant()}); XFS is on {string.Join(", ", xfs)}. Name the partition."
                        : $"'{source}' is a partitioned disk ({table.Kind.ToString().ToUpperInvariant()}) but no partition starts with an XFS superblock; `xfswin info {source}` lists them.";
                }
            }
            catch (XfsException)
            {
                // The table itself is unreadable: the engine's message stands.
            }
            device.Dispose();
            if (hint is not null) throw new XfsException(XfsError.NotXfs, hint, e);
            throw;
        }
        catch
        {
            device.Dispose();
            throw;
        }
    }

    /// <summary>Runs a command body and turns exceptions into a message on stderr and an exit code.</summary>
    public static int Run(CliConsole console, string command, Func<int> body)
    {
        try
        {
            return body();
        }
        catch (XfsException e)
        {
            console.Out.Flush();
            console.Error.WriteLine($"xfswin {command}: {e.Message}");
            if (e.Error == XfsError.NotXfs && e.InnerException is XfsException inner && inner.Message != e.Message)
                console.Error.WriteLine($"  ({inner.Message})");
            return ExitCodes.FromError(e.Error);
        }
        catch (UnauthorizedAccessException e)
        {
            console.Out.Flush();
            console.Error.WriteLine($"xfswin {command}: permission denied: {e.Message} Run as root (Linux) or as Administrator (Windows) to open disks.");
            return ExitCodes.Refused;
        }
        catch (IOException e)
        {
            console.Out.Flush();
            console.Error.WriteLine($"xfswin {command}: I/O error: {e.Message}");
            return ExitCodes.IoError;
        }
        catch (OperationCanceledException)
        {
            console.Error.WriteLine($"xfswin {command}: interrupted");
            return ExitCodes.Interrupted;
        }
    }

    /// <summary>Splits a volume path into components the way ResolvePath does, for building display paths.</summary>
    public static string NormalizeVolumePath(string? path)
    {
        if (string.IsNullOrEmpty(path)) return "/";
        var parts = path.Split('/', StringSplitOptions.RemoveEmptyEntries);
        return "/" + string.Join('/', parts);
    }

    public static string JoinPath(string dir, string name) => dir == "/" ? "/" + name : dir + "/" + name;
}

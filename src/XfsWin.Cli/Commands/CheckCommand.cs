using System.CommandLine;
using System.Text.Json;
using System.Text.Json.Serialization;
using XfsWin.Check;

using XfsWin.Cli.Output;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin check SOURCE|MOUNTPOINT [--json]</c>: the equivalent of <c>xfs_repair -n</c> for a volume that is not
/// mounted (or mounted read-only), or, through its mount point, one an xfswin server has mounted read-write. Changes nothing.
/// A device Linux mounted read-write is refused, as xfs_repair -n refuses it. Exit 0 when the volume is consistent, 1 when any problem was found
/// (each named with its structure and disk address); the usual exit codes otherwise (not XFS, I/O).
/// </summary>
public static class CheckCommand
{
    public const string Description = "Check a volume's metadata like xfs_repair -n (changes nothing; exit 0 clean, 1 problems found)";

    /// <summary>Exit code when problems were found (the value xfs_repair -n uses).</summary>
    public const int ProblemsFound = 1;

    public static Command Build(CliConsole console)
    {
        var source = CommandSupport.SourceArgument();
        var partition = CommandSupport.PartitionOption();
        var json = CommandSupport.JsonOption();
        var progress = CommandSupport.ProgressOption();
        var noProgress = CommandSupport.NoProgressOption();
        var logDevice = new Option<string?>("--log-device") { Description = "the external log device of a volume made with mkfs.xfs -l logdev=..." };
        var command = new Command("check", Description) { source, partition, json, progress, noProgress, logDevice };
        command.SetAction(parse => CommandSupport.Run(console, "check",
            () => Execute(console, parse.GetValue(source)!, parse.GetValue(partition), parse.GetValue(json), parse.GetValue(logDevice),
                CommandSupport.ProgressFlag(parse, progress, noProgress))));
        return command;
    }

    private static int Execute(CliConsole console, string source, int? partition, bool json, string? logDevice, bool? progressFlag)
    {
        if (Directory.Exists(source) && partition is null) return ExecuteMounted(console, source, json, progressFlag);
        var notes = new List<string>();
        var (path, suffix) = Device.PartitionSpec.Parse(source);
        foreach (var m in MountGuard.MountsOf(path, partition ?? suffix))
        {
            if (m.ReadWrite && m.ByXfswin)
            {
                console.Error.WriteLine($"xfswin check: {source} is mounted read-write by xfswin at {m.Target}: check it through its mount point " +
                                        $"(xfswin check {m.Target}), which holds its changes off while checking. Nothing was checked.");
                return ExitCodes.Refused;
            }
            if (m.ReadWrite)
            {
                console.Error.WriteLine($"xfswin check: {source} is mounted read-write at {m.Target} by Linux: its metadata changes while it is read, " +
                                        "so it cannot be checked (xfs_repair -n refuses it too). Unmount it, or remount it read-only " +
                                        $"(mount -o remount,ro {m.Target}), and check again; to check it while in use, run xfs_scrub on Linux. Nothing was checked.");
                return ExitCodes.Refused;
            }
            notes.Add($"mounted read-only at {m.Target}{(m.ByXfswin ? " by xfswin" : " by Linux")}: checked as the device holds it (nothing writes to it while it is mounted read-only)");
        }
        var bar = CliProgress.Start(console, progressFlag, "check");
        CheckReport report;
        try
        {
            report = VolumeChecker.Check(source, new CheckOptions { Partition = partition, LogDevice = logDevice, Progress = bar.Enabled ? bar.For<CheckProgress>(v => (v.Phase, v.Done, v.Total)) : null });
        }
        finally
        {
            bar.Finish();
        }
        if (notes.Count > 0) report = report with { Notes = [.. notes, .. report.Notes] };
        return Report(console, report, json);
    }

    /// <summary>A mount point: the xfswin server that mounted it read-write checks its volume, holding changes off meanwhile.</summary>
    private static int ExecuteMounted(CliConsole console, string mountPoint, bool json, bool? progressFlag)
    {
        (CheckReport? Report, int ExitCode, string? Error)? answer;
        var bar = CliProgress.Start(console, progressFlag, "check");
        try
        {
            answer = MountControl.Check(mountPoint, bar.Enabled ? bar.For<CheckProgress>(v => (v.Phase, v.Done, v.Total)) : null);
        }
        catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or FormatException or JsonException)
        {
            console.Error.WriteLine($"xfswin check: talking to the mount server of {mountPoint} failed: {e.Message}");
            return ExitCodes.IoError;
        }
        finally
        {
            bar.Finish();
        }
        if (answer is null)
        {
            console.Error.WriteLine($"xfswin check: {mountPoint} is a directory, but no read-write xfswin mount serves it. Give the volume's image file, " +
                                    "device or partition (disk.img@2), or mount it with xfswin mount -o rw SOURCE DIR and check it through DIR; " +
                                    "for a volume Linux mounted, use xfs_scrub (or unmount it and check the device).");
            return ExitCodes.Usage;
        }
        var (report, code, error) = answer.Value;
        if (report is null)
        {
            console.Error.WriteLine($"xfswin check: {error}");
            return code;
        }
        return Report(console, report, json);
    }

    private static int Report(CliConsole console, CheckReport report, bool json)
    {
        if (json)
        {
            console.Out.WriteLine(JsonSerializer.Serialize(ToJson(report), CheckJsonContext.Default.CheckJson));
        }
        else
        {
            Print(console.Out, report);
        }
        return report.IsClean ? ExitCodes.Ok : ProblemsFound;
    }

    private static void Print(TextWriter o, CheckReport report)
    {
        foreach (var note in report.Notes) o.WriteLine($"note: {note}");
        foreach (var p in report.Problems) o.WriteLine(p.ToString());
        if (report.ProblemsNotListed > 0) o.WriteLine($"... and {report.ProblemsNotListed} more problems");
        if (report.Summary is { } s)
        {
            o.WriteLine($"{report.Source}: {s.AgCount} AGs, {s.InUseInodes} inodes in use, {s.Directories} directories, {s.DirectoryEntries} entries, " +
                        $"{s.FreeBlocksCounted} free blocks; log {s.LogState}; checked in {s.ElapsedSeconds:F2} s");
        }
        if (report.IsClean)
        {
            o.WriteLine("no problems found");
        }
        else
        {
            o.WriteLine($"{report.ProblemCount} problem(s) found. Nothing was changed. To repair, run xfs_repair on this volume from Linux " +
                        "(it needs the volume unmounted; if it refuses because of a dirty log, mount and unmount it once first).");
        }
    }

    internal static CheckJson ToJson(CheckReport r) => new()
    {
        Source = r.Source,
        Clean = r.IsClean,
        ProblemCount = r.ProblemCount,
        Problems = r.Problems.Select(p => new CheckProblemJson { Structure = p.Structure, Ag = p.Ag, Daddr = p.Daddr, Message = p.Message }).ToList(),
        Notes = [.. r.Notes],
        Summary = r.Summary,
    };
}

/// <summary>
/// The <c>--json</c> output of <c>xfswin check</c> (docs/cli.md): stable for the management UI.
/// Fields are only added, never renamed or removed.
/// </summary>
public sealed record CheckJson
{
    public required string Source { get; init; }
    public required bool Clean { get; init; }
    public required int ProblemCount { get; init; }
    public required List<CheckProblemJson> Problems { get; init; }
    public required List<string> Notes { get; init; }
    public CheckSummary? Summary { get; init; }
}

public sealed record CheckProblemJson
{
    public required string Structure { get; init; }
    /// <summary>The allocation group, or null for volume-wide structures.</summary>
    public uint? Ag { get; init; }
    /// <summary>Disk address in 512-byte units, or null when the problem has no single address.</summary>
    public long? Daddr { get; init; }
    public required string Message { get; init; }
}

[JsonSourceGenerationOptions(WriteIndented = true, PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase,
    DefaultIgnoreCondition = JsonIgnoreCondition.Never)]
[JsonSerializable(typeof(CheckJson))]
public sealed partial class CheckJsonContext : JsonSerializerContext;

/// <summary>The same document on one line: how a mount server sends a check's report over its control socket.</summary>
[JsonSourceGenerationOptions(WriteIndented = false, PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase,
    DefaultIgnoreCondition = JsonIgnoreCondition.Never)]
[JsonSerializable(typeof(CheckJson))]
internal sealed partial class CheckJsonLineContext : JsonSerializerContext;

using System.CommandLine;
using XfsWin.Cli.Commands;

namespace XfsWin.Cli;

/// <summary>One row of the command table: either a System.CommandLine command or a raw-args command.</summary>
public sealed record CliCommandEntry(string Name, string Description, Func<CliConsole, Command>? Build, Func<string[], CliConsole, int>? RunRaw)
{
    public static CliCommandEntry Parsed(string name, string description, Func<CliConsole, Command> build) => new(name, description, build, null);

    /// <summary>A command that parses its own arguments: every token after its name is passed through unchanged.</summary>
    public static CliCommandEntry Raw(string name, string description, Func<string[], int> run) => new(name, description, null, (args, _) => run(args));

    /// <summary>A command that parses its own arguments and writes to the console it is given.</summary>
    public static CliCommandEntry Raw(string name, string description, Func<string[], CliConsole, int> run) => new(name, description, null, run);
}

public static class Program
{
    /// <summary>Every xfswin command. Add a row to add a command.</summary>
    public static IReadOnlyList<CliCommandEntry> Commands { get; } =
    [
        CliCommandEntry.Parsed("info", InfoCommand.Description, InfoCommand.Build),
        CliCommandEntry.Parsed("ls", LsCommand.Description, LsCommand.Build),
        CliCommandEntry.Parsed("stat", StatCommand.Description, StatCommand.Build),
        CliCommandEntry.Parsed("cat", CatCommand.Description, CatCommand.Build),
        CliCommandEntry.Parsed("extract", ExtractCommand.Description, ExtractCommand.Build),
        CliCommandEntry.Raw("mount", "Mount a volume (Linux: FUSE at a directory; Windows: WinFsp at a drive letter)", MountCommand.Run),
        CliCommandEntry.Raw("mkfs", MkfsCommand.Description, MkfsCommand.Run),
        CliCommandEntry.Parsed("check", CheckCommand.Description, CheckCommand.Build),
        CliCommandEntry.Raw("grow", GrowCommand.Description, (Func<string[], CliConsole, int>)GrowCommand.Run),
        CliCommandEntry.Raw("label", IdentityCommands.LabelDescription, (args, console) => IdentityCommands.Run("label", IdentityCommands.LabelUsage, args, console)),
        CliCommandEntry.Raw("uuid", IdentityCommands.UuidDescription, (args, console) => IdentityCommands.Run("uuid", IdentityCommands.UuidUsage, args, console)),
        CliCommandEntry.Raw("recover", "Replay a dirty log onto the device and mark it clean (what Linux does at mount)", RecoverCommand.Run),
        CliCommandEntry.Raw("service", "Run the XfsWin service in the foreground: the control channel for listing, mounting and recovering volumes", ServiceCommand.Run),
        CliCommandEntry.Raw("manage", "Serve the management UI on 127.0.0.1 (prints its address with its token)", ManageCommand.Run),
    ];

    public static int Main(string[] args) => Run(args, CliConsole.FromProcess());

    /// <summary>Runs xfswin with <paramref name="args"/>, writing to <paramref name="console"/>; returns the exit code.</summary>
    public static int Run(string[] args, CliConsole console) => Run(args, console, Commands);

    /// <summary>Runs with a given command table (tests use their own rows).</summary>
    public static int Run(string[] args, CliConsole console, IReadOnlyList<CliCommandEntry> commands)
    {
        ArgumentNullException.ThrowIfNull(args);
        ArgumentNullException.ThrowIfNull(console);
        ArgumentNullException.ThrowIfNull(commands);
        if (args.Length > 0)
        {
            var raw = commands.FirstOrDefault(c => c.RunRaw is not null && c.Name == args[0]);
            if (raw is not null)
            {
                console.Out.Flush();
                return raw.RunRaw!(args[1..], console);
            }
        }
        var root = BuildRoot(console, commands);
        var parse = root.Parse(args);
        int code = parse.Invoke(new InvocationConfiguration { Output = console.Out, Error = console.Error });
        console.Out.Flush();
        console.Error.Flush();
        return code;
    }

    public static RootCommand BuildRoot(CliConsole console, IReadOnlyList<CliCommandEntry> commands)
    {
        var root = new RootCommand("xfswin: read XFS volumes (image files, disks, partitions) without Linux; make, recover, grow, label and check unmounted ones. Exit codes: docs/cli.md.");
        foreach (var entry in commands)
        {
            if (entry.Build is not null)
            {
                root.Subcommands.Add(entry.Build(console));
                continue;
            }
            // Listed for help; Run() hands its tokens over before parsing, so this action only sees
            // the rare case of options placed before the command name.
            var passthrough = new Command(entry.Name, entry.Description) { TreatUnmatchedTokensAsErrors = false };
            var rest = new Argument<string[]>("ARGS") { Arity = ArgumentArity.ZeroOrMore, Description = "passed to the command unchanged" };
            passthrough.Arguments.Add(rest);
            var run = entry.RunRaw!;
            passthrough.SetAction(parse =>
                run([.. parse.GetValue(rest) ?? [], .. parse.UnmatchedTokens], console));
            root.Subcommands.Add(passthrough);
        }
        return root;
    }
}

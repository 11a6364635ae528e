using System.CommandLine;
using System.Text;
using System.Text.Json;
using XfsWin.Cli.Output;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary><c>xfswin ls SOURCE [PATH] [-l] [-R]</c>: list a directory of the volume.</summary>
public static class LsCommand
{
    public const string Description = "List a directory (or show one entry) of the volume";

    public static Command Build(CliConsole console)
    {
        var source = CommandSupport.SourceArgument();
        var path = new Argument<string>("PATH") { Description = "Path inside the volume", DefaultValueFactory = _ => "/" };
        var partition = CommandSupport.PartitionOption();
        var json = CommandSupport.JsonOption();
        var longFormat = new Option<bool>("-l", "--long") { Description = "Long format: mode, links, owner, group, size, mtime (ns), symlink target" };
        var recursive = new Option<bool>("-R", "--recursive") { Description = "List subdirectories recursively" };
        var all = new Option<bool>("-a", "--all") { Description = "Include the . and .. entries" };
        var command = new Command("ls", Description) { source, path, partition, json, longFormat, recursive, all };
        command.SetAction(parse => CommandSupport.Run(console, "ls", () =>
        {
            using var volume = CommandSupport.OpenVolume(parse.GetValue(source)!, parse.GetValue(partition));
            var lister = new Lister(volume, console, parse.GetValue(longFormat), parse.GetValue(all), parse.GetValue(json));
            return lister.Run(CommandSupport.NormalizeVolumePath(parse.GetValue(path)), parse.GetValue(recursive));
        }));
        return command;
    }

    private sealed class Lister(XfsVolume volume, CliConsole console, bool longFormat, bool all, bool json)
    {
        private readonly List<EntryJson> _json = [];
        private readonly HashSet<ulong> _visited = [];

        public int Run(string path, bool recursive)
        {
            ulong inode = volume.ResolvePath(path);
            var attrs = volume.GetAttributes(inode);
            if (attrs.FileType != XfsFileType.Directory)
            {
                string name = path == "/" ? "/" : path[(path.LastIndexOf('/') + 1)..];
                Emit(path, Encoding.UTF8.GetBytes(name), inode, attrs);
            }
            else
            {
                ListDirectory(path, inode, recursive, first: true);
            }
            if (json)
                console.Out.WriteLine(JsonSerializer.Serialize(_json, CliJsonContext.Default.ListEntryJson));
            return ExitCodes.Ok;
        }

        private void ListDirectory(string path, ulong inode, bool recursive, bool first)
        {
            if (!_visited.Add(inode))
            {
                console.Error.WriteLine($"xfswin ls: '{path}' is a directory already listed (inode {inode}): the volume has a directory cycle; not descending again. Run xfs_repair on it.");
                return;
            }
            var entries = volume.ListDirectory(inode)
                .Where(e => all || !IsDotOrDotDot(e.Name))
                .OrderBy(e => e.Name, ByteOrder.Instance)
                .ToList();
            if (recursive && !json)
            {
                if (!first) console.Out.WriteLine();
                console.Out.WriteLine($"{path}:");
            }
            var subdirs = new List<(string Path, ulong Inode)>();
            foreach (var e in entries)
            {
                string childPath = CommandSupport.JoinPath(path, Formatting.DisplayName(e.Name));
                var attrs = volume.GetAttributes(e.Inode);
                Emit(childPath, e.Name, e.Inode, attrs);
                if (recursive && attrs.FileType == XfsFileType.Directory && !IsDotOrDotDot(e.Name))
                    subdirs.Add((childPath, e.Inode));
            }
            foreach (var (p, i) in subdirs) ListDirectory(p, i, recursive, first: false);
        }

        private static bool IsDotOrDotDot(byte[] name) => name is [(byte)'.'] or [(byte)'.', (byte)'.'];

        private void Emit(string path, byte[] name, ulong inode, InodeAttributes a)
        {
            string display = Formatting.DisplayName(name);
            string? target = a.FileType == XfsFileType.Symlink ? Formatting.DisplayName(volume.ReadLink(inode)) : null;
            bool device = a.FileType is XfsFileType.CharacterDevice or XfsFileType.BlockDevice;
            if (json)
            {
                _json.Add(new EntryJson
                {
                    Path = path,
                    Name = display,
                    Inode = inode,
                    Type = Formatting.TypeName(a.FileType),
                    Mode = Formatting.Octal(a.Mode),
                    ModeText = Formatting.ModeText(a.Mode),
                    Links = a.LinkCount,
                    Uid = a.Uid,
                    Gid = a.Gid,
                    Size = a.Size,
                    Mtime = TimeJson.From(a.ModifyTime),
                    Target = target,
                    DeviceMajor = device ? a.DeviceMajor : null,
                    DeviceMinor = device ? a.DeviceMinor : null,
                });
                return;
            }
            if (!longFormat)
            {
                console.Out.WriteLine(display);
                return;
            }
            string size = device ? $"{a.DeviceMajor}, {a.DeviceMinor}" : a.Size.ToString();
            string suffix = target is null ? "" : " -> " + target;
            console.Out.WriteLine($"{Formatting.ModeText(a.Mode)} {a.LinkCount,3} {a.Uid,5} {a.Gid,5} {size,12} {Formatting.Time(a.ModifyTime)} {display}{suffix}");
        }
    }

    /// <summary>Orders names by their bytes, as ls does in the C locale.</summary>
    private sealed class ByteOrder : IComparer<byte[]>
    {
        public static readonly ByteOrder Instance = new();
        public int Compare(byte[]? x, byte[]? y) => x.AsSpan().SequenceCompareTo(y);
    }
}

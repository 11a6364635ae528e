using XfsWin.Attributes;
using System.CommandLine;
using System.Text.Json;
using XfsWin.Cli.Output;
using XfsWin.Format;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary><c>xfswin stat SOURCE PATH</c>: everything the inode records.</summary>
public static class StatCommand
{
    public const string Description = "Show an inode's metadata: type, mode, owner, size, times (ns), flags, xattrs, ACLs";

    public static Command Build(CliConsole console)
    {
        var source = CommandSupport.SourceArgument();
        var path = new Argument<string>("PATH") { Description = "Path inside the volume", DefaultValueFactory = _ => "/" };
        var partition = CommandSupport.PartitionOption();
        var json = CommandSupport.JsonOption();
        var follow = new Option<bool>("-L", "--dereference") { Description = "Follow a final symlink" };
        var command = new Command("stat", Description) { source, path, partition, json, follow };
        command.SetAction(parse => CommandSupport.Run(console, "stat", () =>
        {
            using var volume = CommandSupport.OpenVolume(parse.GetValue(source)!, parse.GetValue(partition));
            string p = CommandSupport.NormalizeVolumePath(parse.GetValue(path));
            var stat = Describe(volume, p, volume.ResolvePath(p, parse.GetValue(follow)));
            if (parse.GetValue(json)) console.Out.WriteLine(JsonSerializer.Serialize(stat, CliJsonContext.Default.StatJson));
            else Print(console.Out, stat);
            return ExitCodes.Ok;
        }));
        return command;
    }

    public static StatJson Describe(XfsVolume volume, string path, ulong inode)
    {
        var a = volume.GetAttributes(inode);
        var xattrs = volume.ListXattrs(inode);
        string? access = null, def = null;
        foreach (var x in xattrs)
        {
            if (x.Namespace != XattrNamespace.Trusted) continue;
            string linux = x.LinuxName;
            if (linux is not ("system.posix_acl_access" or "system.posix_acl_default")) continue;
            if (!volume.TryGetXattr(inode, x.Namespace, x.Name, out var value)) continue;
            string text;
            try { text = PosixAcl.ParseXfs(value).ToText(); }
            catch (XfsException e) { text = "(malformed: " + e.Message + ")"; }
            if (linux == "system.posix_acl_access") access = text; else def = text;
        }
        return new StatJson
        {
            Path = path,
            Inode = inode,
            Type = Formatting.TypeName(a.FileType),
            Mode = Formatting.Octal(a.Mode),
            ModeText = Formatting.ModeText(a.Mode),
            Links = a.LinkCount,
            Uid = a.Uid,
            Gid = a.Gid,
            ProjectId = a.ProjectId,
            Size = a.Size,
            AllocatedBytes = a.AllocatedBytes,
            Atime = TimeJson.From(a.AccessTime),
            Mtime = TimeJson.From(a.ModifyTime),
            Ctime = TimeJson.From(a.ChangeTime),
            Btime = a.CreationTime is XfsTimestamp b ? TimeJson.From(b) : null,
            DeviceMajor = a.DeviceMajor,
            DeviceMinor = a.DeviceMinor,
            Generation = a.Generation,
            Flags = a.Flags,
            Flags2 = a.Flags2,
            DataExtents = a.DataExtentCount,
            AttrExtents = a.AttrExtentCount,
            Target = a.FileType == XfsFileType.Symlink ? Formatting.DisplayName(volume.ReadLink(inode)) : null,
            Xattrs = xattrs.Select(x => new XattrJson(x.LinuxName, x.ValueLength)).ToList(),
            AccessAcl = access,
            DefaultAcl = def,
        };
    }

    private static void Print(TextWriter o, StatJson s)
    {
        o.WriteLine($"  File: {s.Path}{(s.Target is null ? "" : " -> " + s.Target)}");
        o.WriteLine($"  Size: {s.Size,-12} Allocated: {s.AllocatedBytes,-12} {s.Type}");
        o.WriteLine($" Inode: {s.Inode,-12} Links: {s.Links,-6} Generation: {s.Generation}");
        o.WriteLine($"Access: ({Formatting.Octal(Convert.ToUInt32(s.Mode, 8) & 0xFFF).PadLeft(4, '0')}/{s.ModeText})  Uid: {s.Uid,-6} Gid: {s.Gid,-6} Project: {s.ProjectId}");
        if (s.Type is "char-device" or "block-device") o.WriteLine($"Device: {s.DeviceMajor},{s.DeviceMinor}");
        o.WriteLine($"Access: {s.Atime.Text}");
        o.WriteLine($"Modify: {s.Mtime.Text}");
        o.WriteLine($"Change: {s.Ctime.Text}");
        o.WriteLine($" Birth: {(s.Btime is null ? "-" : s.Btime.Text)}");
        o.WriteLine($" Flags: di_flags 0x{s.Flags:x4}, di_flags2 0x{s.Flags2:x}; {s.DataExtents} data extents, {s.AttrExtents} attr extents");
        foreach (var x in s.Xattrs) o.WriteLine($" Xattr: {x.Name} ({x.Size} bytes)");
        if (s.AccessAcl is not null) o.WriteLine($"   ACL: {s.AccessAcl}");
        if (s.DefaultAcl is not null) o.WriteLine($"DefACL: {s.DefaultAcl}");
    }
}

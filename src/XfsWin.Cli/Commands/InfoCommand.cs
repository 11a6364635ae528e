using System.CommandLine;
using System.Text.Json;
using XfsWin.Cli.Output;
using XfsWin.Device;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary><c>xfswin info SOURCE</c>: the partition table of a disk, or the geometry and features of a volume.</summary>
public static class InfoCommand
{
    public const string Description = "Show a disk's partitions (and which hold XFS), or a volume's geometry, features and health";

    public static Command Build(CliConsole console)
    {
        var source = CommandSupport.SourceArgument();
        var partition = CommandSupport.PartitionOption();
        var json = CommandSupport.JsonOption();
        var command = new Command("info", Description) { source, partition, json };
        command.SetAction(parse => CommandSupport.Run(console, "info",
            () => Execute(console, parse.GetValue(source)!, parse.GetValue(partition), parse.GetValue(json))));
        return command;
    }

    private static int Execute(CliConsole console, string source, int? partition, bool json)
    {
        var (path, suffix) = PartitionSpec.Parse(source);
        bool wholeDevice = partition is null && suffix is null;
        var result = new InfoJson { Source = source };
        if (wholeDevice)
        {
            using var disk = PartitionSpec.Open(source);
            var table = PartitionTable.Read(disk);
            result = result with { DeviceBytes = disk.Length };
            if (table.Kind != PartitionTableKind.None)
            {
                result = result with { PartitionTable = DescribeTable(disk, source, table) };
                if (json) WriteJson(console, result);
                else PrintTable(console, result);
                return ExitCodes.Ok;
            }
        }
        using (var volume = CommandSupport.OpenVolume(source, partition))
        {
            result = result with { Volume = volume.Info, DeviceBytes = result.DeviceBytes };
        }
        if (json) WriteJson(console, result);
        else PrintVolume(console, result.Volume!);
        _ = path;
        return ExitCodes.Ok;
    }

    private static PartitionTableJson DescribeTable(IBlockDevice disk, string source, PartitionTable table)
    {
        var parts = new List<PartitionJson>();
        foreach (var p in table.Entries)
        {
            string? label = null, uuid = null;
            if (p.HoldsXfs && p.Problem is null)
            {
                // Label and UUID help tell partitions apart; a partition that fails to open still gets listed.
                try
                {
                    using var window = new PartitionDevice(disk, p.StartByte, p.LengthBytes, ownsBase: false);
                    using var volume = XfsVolume.Open(window, ownsDevice: false);
                    label = volume.Info.Label;
                    uuid = volume.Info.Uuid.ToString();
                }
                catch (XfsException e)
                {
                    label = null;
                    uuid = null;
                    parts.Add(ToJson(source, p, null, null) with { Problem = "XFS superblock magic found, but the volume does not open: " + e.Message });
                    continue;
                }
            }
            parts.Add(ToJson(source, p, label, uuid));
        }
        return new PartitionTableJson
        {
            Kind = table.Kind.ToString().ToUpperInvariant(),
            SectorSize = table.SectorSize,
            DiskGuid = table.DiskGuid?.ToString(),
            MbrDiskSignature = table.MbrDiskSignature is uint sig ? $"0x{sig:x8}" : null,
            Partitions = parts,
            Warnings = table.Warnings,
        };
    }

    private static PartitionJson ToJson(string source, PartitionEntry p, string? label, string? uuid) => new()
    {
        Number = p.Number,
        StartByte = p.StartByte,
        LengthBytes = p.LengthBytes,
        Type = p.TypeDescription,
        MbrType = p.MbrType,
        TypeGuid = p.TypeGuid?.ToString(),
        UniqueGuid = p.UniqueGuid?.ToString(),
        Name = p.Name,
        Bootable = p.Bootable,
        ExtendedContainer = p.IsExtendedContainer,
        HoldsXfs = p.HoldsXfs,
        Problem = p.Problem,
        Source = p.HoldsXfs ? $"{source}@{p.Number}" : null,
        Label = label,
        Uuid = uuid,
    };

    private static void WriteJson(CliConsole console, InfoJson info)
    {
        console.Out.WriteLine(JsonSerializer.Serialize(info, CliJsonContext.Default.InfoJson));
    }

    private static void PrintTable(CliConsole console, InfoJson info)
    {
        var t = info.PartitionTable!;
        var o = console.Out;
        o.WriteLine($"{info.Source}: {Formatting.Bytes(info.DeviceBytes)} ({info.DeviceBytes} bytes), {t.Kind} partition table, {t.SectorSize}-byte sectors");
        if (t.DiskGuid is not null) o.WriteLine($"disk GUID: {t.DiskGuid}");
        foreach (var w in t.Warnings) o.WriteLine($"warning: {w}");
        o.WriteLine($"{"#",3}  {"start",14}  {"size",12}  {"type",-28}  {"xfs",-3}  label / name");
        foreach (var p in t.Partitions)
        {
            string type = p.ExtendedContainer ? p.Type + " [container]" : p.Type;
            string xfs = p.HoldsXfs ? "yes" : "-";
            string name = string.Join("  ", new[] { p.Label is { Length: > 0 } ? $"label '{p.Label}'" : null, p.Name is { Length: > 0 } ? $"name '{p.Name}'" : null, p.Uuid is null ? null : $"fs uuid {p.Uuid}" }.Where(s => s is not null));
            o.WriteLine($"{p.Number,3}  {p.StartByte,14}  {Formatting.Bytes(p.LengthBytes),12}  {type,-28}  {xfs,-3}  {name}");
            if (p.Problem is not null) o.WriteLine($"     problem: {p.Problem}");
        }
        var xfsParts = t.Partitions.Where(p => p.HoldsXfs).Select(p => p.Source).ToList();
        o.WriteLine(xfsParts.Count > 0
            ? $"XFS volumes: {string.Join(", ", xfsParts)} (e.g. `xfswin ls {xfsParts[0]}`)"
            : "No partition starts with an XFS superblock.");
    }

    private static void PrintVolume(CliConsole console, VolumeInfo v)
    {
        var o = console.Out;
        long dataBytes = (long)v.DataBlocks * v.BlockSize;
        long freeBytes = (long)v.FreeBlocks * v.BlockSize;
        o.WriteLine($"label:            {(v.Label.Length == 0 ? "(none)" : v.Label)}");
        o.WriteLine($"uuid:             {v.Uuid}");
        o.WriteLine($"format:           XFS V{v.FormatVersion}");
        o.WriteLine($"size:             {Formatting.Bytes(dataBytes)} ({v.DataBlocks} blocks of {v.BlockSize} bytes)");
        o.WriteLine($"free:             {Formatting.Bytes(freeBytes)} ({v.FreeBlocks} blocks)");
        o.WriteLine($"inodes:           {v.InodeCount} allocated, {v.FreeInodes} free, {v.InodeSize} bytes each");
        o.WriteLine($"sector size:      {v.SectorSize}");
        o.WriteLine($"directory block:  {v.DirectoryBlockSize}");
        o.WriteLine($"allocation groups: {v.AgCount} of {v.AgBlocks} blocks");
        o.WriteLine($"root inode:       {v.RootInode}");
        o.WriteLine($"log:              {(v.ExternalLog ? "external" : "internal")}, {v.LogBlocks} blocks, {v.LogState}");
        if (v.RealtimeBlocks > 0) o.WriteLine($"realtime:         {v.RealtimeBlocks} blocks");
        o.WriteLine($"features:         {string.Join(' ', v.Features)}");
        o.WriteLine($"I/O:              {v.IoMode}");
        foreach (var r in v.ReadOnlyReasons) o.WriteLine($"read-only:        {r}");
        foreach (var w in v.Warnings) o.WriteLine($"warning:          {w}");
    }
}

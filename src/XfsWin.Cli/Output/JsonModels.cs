using System.Text.Json.Serialization;
using XfsWin.Format;
using XfsWin.Volume;

namespace XfsWin.Cli.Output;

public sealed record TimeJson(long Seconds, uint Nanoseconds, string Text)
{
    public static TimeJson From(XfsTimestamp t) => new(t.Seconds, t.Nanoseconds, Formatting.Time(t));
}

public sealed record PartitionJson
{
    public int Number { get; init; }
    public long StartByte { get; init; }
    public long LengthBytes { get; init; }
    public string Type { get; init; } = "";
    public int? MbrType { get; init; }
    public string? TypeGuid { get; init; }
    public string? UniqueGuid { get; init; }
    public string Name { get; init; } = "";
    public bool Bootable { get; init; }
    public bool ExtendedContainer { get; init; }
    public bool HoldsXfs { get; init; }
    public string? Problem { get; init; }
    /// <summary>For XFS partitions: the source string that opens it (disk.img@N).</summary>
    public string? Source { get; init; }
    public string? Label { get; init; }
    public string? Uuid { get; init; }
}

public sealed record PartitionTableJson
{
    public string Kind { get; init; } = "";
    public int SectorSize { get; init; }
    public string? DiskGuid { get; init; }
    public string? MbrDiskSignature { get; init; }
    public IReadOnlyList<PartitionJson> Partitions { get; init; } = [];
    public IReadOnlyList<string> Warnings { get; init; } = [];
}

public sealed record InfoJson
{
    public string Source { get; init; } = "";
    public long DeviceBytes { get; init; }
    public PartitionTableJson? PartitionTable { get; init; }
    public VolumeInfo? Volume { get; init; }
}

public sealed record EntryJson
{
    public string Path { get; init; } = "";
    public string Name { get; init; } = "";
    public ulong Inode { get; init; }
    public string Type { get; init; } = "";
    /// <summary>Full st_mode in octal, e.g. "100644".</summary>
    public string Mode { get; init; } = "";
    public string ModeText { get; init; } = "";
    public uint Links { get; init; }
    public uint Uid { get; init; }
    public uint Gid { get; init; }
    public long Size { get; init; }
    public TimeJson Mtime { get; init; } = new(0, 0, "");
    public string? Target { get; init; }
    public uint? DeviceMajor { get; init; }
    public uint? DeviceMinor { get; init; }
}

public sealed record XattrJson(string Name, int Size);

public sealed record StatJson
{
    public string Path { get; init; } = "";
    public ulong Inode { get; init; }
    public string Type { get; init; } = "";
    public string Mode { get; init; } = "";
    public string ModeText { get; init; } = "";
    public uint Links { get; init; }
    public uint Uid { get; init; }
    public uint Gid { get; init; }
    public uint ProjectId { get; init; }
    public long Size { get; init; }
    public long AllocatedBytes { get; init; }
    public TimeJson Atime { get; init; } = new(0, 0, "");
    public TimeJson Mtime { get; init; } = new(0, 0, "");
    public TimeJson Ctime { get; init; } = new(0, 0, "");
    public TimeJson? Btime { get; init; }
    public uint DeviceMajor { get; init; }
    public uint DeviceMinor { get; init; }
    public uint Generation { get; init; }
    public ushort Flags { get; init; }
    public ulong Flags2 { get; init; }
    public ulong DataExtents { get; init; }
    public uint AttrExtents { get; init; }
    public string? Target { get; init; }
    public IReadOnlyList<XattrJson> Xattrs { get; init; } = [];
    public string? AccessAcl { get; init; }
    public string? DefaultAcl { get; init; }
}

/// <summary>Source-generated serializers: no reflection at run time.</summary>
[JsonSourceGenerationOptions(WriteIndented = true, PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase,
    UseStringEnumConverter = true, DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(InfoJson))]
[JsonSerializable(typeof(List<EntryJson>))]
[JsonSerializable(typeof(StatJson))]
public sealed partial class CliJsonContext : JsonSerializerContext;

using System.Text.Json.Serialization;

namespace XfsWin.Control.Protocol;

/// <summary>
/// The operations a server accepts, by their wire name, and the protocol version each joined in
/// (<see cref="Frame"/>). A request is served in the version its frame carries: a version 1 client
/// is offered, and may call, only the version 1 operations. Any other name is answered with
/// <see cref="ErrorCodes.UnknownOperation"/>.
/// Grow joins as the next version: a name and its version here, a case in
/// <c>ControlServer.Execute</c>, a method beside Format and Check in <c>VolumeManager</c> (their
/// device-operation section), a result field on <see cref="ControlResponse"/>, and an entry in
/// the page's <c>volumeActions</c>.
/// </summary>
public static class Operations
{
    /// <summary>Server version, platform, accepted operations and how mount points are named.</summary>
    public const string Hello = "hello";
    /// <summary>Disks, their partitions and the XFS volumes on them, with usage, log state and health.</summary>
    public const string List = "list";
    /// <summary>One volume in detail (geometry, features, warnings).</summary>
    public const string Info = "info";
    /// <summary>Mount a volume read-only at a drive letter or folder (Windows) or a directory (Linux, FUSE).</summary>
    public const string Mount = "mount";
    public const string Unmount = "unmount";
    /// <summary>Replay a dirty log onto the device (or, with dryRun, in memory only); progress is streamed.</summary>
    public const string Recover = "recover";
    /// <summary>From now on this connection also receives <see cref="ControlEvent"/> frames.</summary>
    public const string Subscribe = "subscribe";
    /// <summary>Make a new XFS volume (mkfs.xfs's options and defaults); progress is streamed. Version 2.</summary>
    public const string Format = "format";
    /// <summary>Check a volume's metadata like <c>xfs_repair -n</c>; progress is streamed. Version 2.</summary>
    public const string Check = "check";
    /// <summary>
    /// Grow a volume's data section (or shrink the free tail of an unmounted one's last AG), as xfs_growfs does:
    /// offline when it is not mounted, online when this server has it mounted read-write; with dryRun, report the
    /// current size, the device's size and the shrink limit. Progress is streamed. Version 3.
    /// </summary>
    public const string Grow = "grow";

    /// <summary>Every operation with the protocol version it joined in, in the order hello lists them.</summary>
    private static readonly (string Name, byte Since)[] All =
    [
        (Hello, 1), (List, 1), (Info, 1), (Mount, 1), (Unmount, 1), (Recover, 1), (Subscribe, 1),
        (Format, 2), (Check, 2),
        (Grow, 3),
    ];

    /// <summary>The operations of the current version.</summary>
    public static readonly IReadOnlyList<string> Accepted = AcceptedIn(Frame.CurrentVersion);

    /// <summary>The operations a client speaking <paramref name="version"/> may call.</summary>
    public static IReadOnlyList<string> AcceptedIn(byte version) => [.. All.Where(o => o.Since <= version).Select(o => o.Name)];

    /// <summary>The version <paramref name="op"/> joined in, or null when it is not an operation.</summary>
    public static byte? Since(string? op)
    {
        foreach (var (name, since) in All)
            if (name == op) return since;
        return null;
    }
}

/// <summary>Error codes of <see cref="ControlError.Code"/>: stable strings clients may branch on.</summary>
public static class ErrorCodes
{
    /// <summary>The stream is not this protocol (bad magic): the server closes the connection after saying so.</summary>
    public const string BadFrame = "bad-frame";
    /// <summary>A frame longer than the server's limit: the connection is closed after the reply.</summary>
    public const string TooLarge = "too-large";
    public const string UnsupportedVersion = "unsupported-version";
    /// <summary>A frame kind a client may not send.</summary>
    public const string BadKind = "bad-kind";
    /// <summary>The payload is not a request (bad JSON, missing fields, wrong types).</summary>
    public const string BadRequest = "bad-request";
    public const string UnknownOperation = "unknown-op";
    /// <summary>Too many requests in flight on this connection.</summary>
    public const string Busy = "busy";
    public const string NotFound = "not-found";
    public const string AlreadyMounted = "already-mounted";
    public const string NotMounted = "not-mounted";
    public const string InUse = "in-use";
    public const string BadMountPoint = "bad-mount-point";
    /// <summary>format: the target holds a file system or partition table (named in the message) and force was not set. Nothing was written.</summary>
    public const string NotEmpty = "not-empty";
    /// <summary>The volume refused the operation (corrupt, unsupported feature, needs repair, I/O error).</summary>
    public const string VolumeError = "volume-error";
    public const string Unavailable = "unavailable";
    /// <summary>The client may not run this (it is not an administrator; docs/service.md, "Who may do what").</summary>
    public const string AccessDenied = "access-denied";
    public const string Internal = "internal";
}

/// <summary>
/// A client's request. <see cref="Id"/> is the client's own number, echoed in the response and in
/// progress frames. Fields an operation does not use are ignored; unknown fields are ignored too,
/// so newer clients can talk to older servers about the operations both know.
/// </summary>
public sealed class ControlRequest
{
    public long Id { get; set; }
    public string? Op { get; set; }
    /// <summary>A volume's source: image file or device path, with <c>@N</c> for partition N.</summary>
    public string? Source { get; set; }
    /// <summary>mount: where; unmount: may name the mount point instead of the source.</summary>
    public string? MountPoint { get; set; }
    /// <summary>recover: replay in memory and report what would be written; nothing is written.</summary>
    public bool DryRun { get; set; }
    /// <summary>format: mkfs options (version 2).</summary>
    public FormatOptions? Format { get; set; }
    /// <summary>mount: false mounts read-write (version 3; absent or true: read-only, as versions 1 and 2 always did).</summary>
    public bool? ReadOnly { get; set; }
    /// <summary>grow: the new size as xfs_growfs -D takes it (blocks, or bytes with k/m/g/t); absent: the whole device (version 3).</summary>
    public string? Size { get; set; }
}

/// <summary>
/// format's options, named as mkfs.xfs names them; an absent (null) option takes mkfs.xfs 6.13's
/// default, which may depend on the others and on the device (a dry run reports what they come to).
/// </summary>
public sealed class FormatOptions
{
    /// <summary>-L: at most 12 bytes.</summary>
    public string? Label { get; set; }
    /// <summary>-b size= in bytes (default 4096).</summary>
    public int? BlockSize { get; set; }
    /// <summary>-s size= in bytes (default: the device's logical sector size; 512 for image files).</summary>
    public int? SectorSize { get; set; }
    /// <summary>-i size= in bytes (default 512).</summary>
    public int? InodeSize { get; set; }
    /// <summary>-m crc= (default on; xfswin makes V5 volumes only).</summary>
    public bool? Crc { get; set; }
    public bool? Finobt { get; set; }
    public bool? Rmapbt { get; set; }
    public bool? Reflink { get; set; }
    public bool? Bigtime { get; set; }
    public bool? Inobtcount { get; set; }
    public bool? Metadir { get; set; }
    /// <summary>-i nrext64=, sparse=, exchange=.</summary>
    public bool? Nrext64 { get; set; }
    public bool? Sparse { get; set; }
    public bool? Exchange { get; set; }
    /// <summary>-n parent=.</summary>
    public bool? Parent { get; set; }
    /// <summary>-d agcount=.</summary>
    public long? Agcount { get; set; }
    /// <summary>-l size=, with mkfs.xfs's suffixes ("64m", "16384b").</summary>
    public string? LogSize { get; set; }
    /// <summary>-d size=, with suffixes: the size of a new image file (or of an image file extended to it).</summary>
    public string? DataSize { get; set; }
    /// <summary>-f: overwrite what the target holds.</summary>
    public bool Force { get; set; }
    /// <summary>-N: work out the geometry and what the target holds, write nothing.</summary>
    public bool DryRun { get; set; }
}

public sealed class ControlError
{
    public required string Code { get; init; }
    public required string Message { get; init; }
}

/// <summary>The one reply to a request: <see cref="Ok"/> with the operation's result, or an <see cref="Error"/>.</summary>
public sealed class ControlResponse
{
    public long Id { get; set; }
    public bool Ok { get; set; }
    public ControlError? Error { get; set; }
    public HelloResult? Hello { get; set; }
    public ListResult? List { get; set; }
    public VolumeDetails? Volume { get; set; }
    public MountResult? Mount { get; set; }
    public RecoverResult? Recover { get; set; }
    public FormatResult? Format { get; set; }
    public CheckResult? Check { get; set; }
    public GrowResultInfo? Grow { get; set; }

    public static ControlResponse Fail(long id, string code, string message) =>
        new() { Id = id, Ok = false, Error = new ControlError { Code = code, Message = message } };
}

public sealed class HelloResult
{
    public int ProtocolVersion { get; init; }
    public required string Server { get; init; }
    /// <summary>"linux" or "windows".</summary>
    public required string Platform { get; init; }
    public required IReadOnlyList<string> Operations { get; init; }
    /// <summary>"directory" (Linux, FUSE) or "drive-letter-or-folder" (Windows, WinFsp).</summary>
    public required string MountPointKind { get; init; }
    /// <summary>Mount points to offer: free drive letters on Windows, a directory under /mnt/xfswin on Linux.</summary>
    public required IReadOnlyList<string> SuggestedMountPoints { get; init; }
    /// <summary>Whether mount takes readOnly=false here (version 3).</summary>
    public bool ReadWriteMounts { get; init; }
    /// <summary>
    /// Whether this client is an administrator (every operation) or not (hello, list, info, subscribe, and mount and
    /// unmount of the volumes an administrator configured). Absent from servers older than this field: treat as true.
    /// </summary>
    public bool? Administrator { get; init; }
    /// <summary>Who the server sees on this connection ("uid 1000", "DESKTOP\alice").</summary>
    public string? Client { get; init; }
}

public sealed class ListResult
{
    public required IReadOnlyList<DiskEntry> Disks { get; init; }
}

/// <summary>A disk, disk image or file: its partitions, and the volume on it when the whole device is XFS.</summary>
public sealed class DiskEntry
{
    public required string Path { get; init; }
    /// <summary>"disk" (a block device) or "image" (a file).</summary>
    public required string Kind { get; init; }
    public long SizeBytes { get; init; }
    /// <summary>"none", "mbr" or "gpt".</summary>
    public required string PartitionTable { get; init; }
    public IReadOnlyList<PartitionInfo> Partitions { get; init; } = [];
    /// <summary>The XFS volume spanning the whole device, when there is one.</summary>
    public VolumeSummary? Volume { get; init; }
    /// <summary>Why the disk could not be read, when it could not.</summary>
    public string? Problem { get; init; }
}

public sealed class PartitionInfo
{
    public int Number { get; init; }
    public long StartByte { get; init; }
    public long LengthBytes { get; init; }
    public required string Type { get; init; }
    public string Name { get; init; } = "";
    public VolumeSummary? Volume { get; init; }
    public string? Problem { get; init; }
}

/// <summary>Volume health as the list shows it.</summary>
public static class Health
{
    public const string Healthy = "healthy";
    /// <summary>Metadata failed verification; a mounted volume stays read-only.</summary>
    public const string Corrupt = "corrupt";
    /// <summary>Marked NEEDSREPAIR: run xfs_repair from Linux.</summary>
    public const string NeedsRepair = "needs-repair";
    /// <summary>Uses a feature this build cannot read safely.</summary>
    public const string Unsupported = "unsupported";
    /// <summary>The device could not be read.</summary>
    public const string Unreadable = "unreadable";
    /// <summary>An operation (recover) holds it; shown without opening it.</summary>
    public const string Busy = "busy";
}

public sealed record VolumeSummary
{
    /// <summary>What to pass as <see cref="ControlRequest.Source"/> to act on this volume.</summary>
    public required string Source { get; init; }
    public string Label { get; init; } = "";
    public Guid Uuid { get; init; }
    public int FormatVersion { get; init; }
    public long SizeBytes { get; init; }
    public long FreeBytes { get; init; }
    /// <summary>"clean", "dirty", "replayed-in-memory", "replayed-in-place", or "unknown" when not opened.</summary>
    public required string LogState { get; init; }
    public required string Health { get; init; }
    public string? Problem { get; init; }
    /// <summary>Where it is mounted through this server, when it is.</summary>
    public string? MountPoint { get; init; }
    public bool ReadOnly { get; init; } = true;
    /// <summary>
    /// Where an administrator configured it to be mounted (the service's mounts.conf or service.conf), when it is one of
    /// those: any user may mount and unmount it there.
    /// </summary>
    public string? ConfiguredMountPoint { get; init; }
    /// <summary>Whether its configuration mounts it read-write.</summary>
    public bool ConfiguredReadWrite { get; init; }
}

public sealed class VolumeDetails
{
    public required VolumeSummary Summary { get; init; }
    public int BlockSize { get; init; }
    public int SectorSize { get; init; }
    public int InodeSize { get; init; }
    public uint AgCount { get; init; }
    public ulong InodeCount { get; init; }
    public ulong FreeInodes { get; init; }
    public uint LogBlocks { get; init; }
    public bool ExternalLog { get; init; }
    public IReadOnlyList<string> Features { get; init; } = [];
    public IReadOnlyList<string> ReadOnlyReasons { get; init; } = [];
    public IReadOnlyList<string> Warnings { get; init; } = [];
    public IReadOnlyDictionary<string, int> UnfinishedLogIntents { get; init; } = new Dictionary<string, int>();
}

public sealed class MountResult
{
    public required string Source { get; init; }
    public required string MountPoint { get; init; }
    public bool ReadOnly { get; init; } = true;
    /// <summary>"FUSE" or "WinFsp".</summary>
    public required string Host { get; init; }
    public IReadOnlyList<string> Warnings { get; init; } = [];
}

public sealed class RecoverResult
{
    public required string Source { get; init; }
    /// <summary>The log state found: "clean" means there was nothing to do.</summary>
    public required string LogStateBefore { get; init; }
    public bool DryRun { get; init; }
    /// <summary>True when the replayed metadata was written and the log marked clean.</summary>
    public bool Written { get; init; }
    public int TransactionsReplayed { get; init; }
    public long LogBytesReplayed { get; init; }
    public long BytesToWrite { get; init; }
    public int UnlinkedInodes { get; init; }
    public IReadOnlyDictionary<string, int> UnfinishedIntents { get; init; } = new Dictionary<string, int>();
    public IReadOnlyList<string> Warnings { get; init; } = [];
    public required string Message { get; init; }
}

/// <summary>What format made (or, in a dry run, would make) and what it found on the target.</summary>
public sealed class FormatResult
{
    public required string Source { get; init; }
    public bool DryRun { get; init; }
    /// <summary>True when the volume was written.</summary>
    public bool Written { get; init; }
    /// <summary>What the target held before ("an XFS file system labelled 'data'", "a GPT partition table"), or null.</summary>
    public string? Existing { get; init; }
    /// <summary>False when the target is an image file that format creates.</summary>
    public bool TargetExists { get; init; }
    public required string Label { get; init; }
    public Guid Uuid { get; init; }
    public long SizeBytes { get; init; }
    public int BlockSize { get; init; }
    public int SectorSize { get; init; }
    public int InodeSize { get; init; }
    public uint Agcount { get; init; }
    public uint AgBlocks { get; init; }
    public uint LogBlocks { get; init; }
    /// <summary>The mkfs option names of the features the volume has (crc, finobt, sparse, rmapbt, reflink, bigtime, inobtcount, nrext64, exchange, parent, metadir).</summary>
    public IReadOnlyList<string> Features { get; init; } = [];
    /// <summary>The geometry report mkfs.xfs prints, line for line.</summary>
    public required string Summary { get; init; }
    public required string Message { get; init; }
}

/// <summary>One problem check found: where (structure, allocation group, disk address in 512-byte units) and what.</summary>
public sealed class CheckProblemInfo
{
    public required string Structure { get; init; }
    /// <summary>Null for volume-wide structures.</summary>
    public uint? Ag { get; init; }
    /// <summary>Null when the problem has no single address (a counter summed over the volume).</summary>
    public long? Daddr { get; init; }
    public required string Message { get; init; }
}

/// <summary>What check found; nothing was changed.</summary>
public sealed class CheckResult
{
    public required string Source { get; init; }
    public bool Clean { get; init; }
    public int ProblemCount { get; init; }
    /// <summary>The problems listed (a volume with very many lists the first ones; <see cref="ProblemCount"/> counts all).</summary>
    public IReadOnlyList<CheckProblemInfo> Problems { get; init; } = [];
    public IReadOnlyList<string> Notes { get; init; } = [];
    public uint AgCount { get; init; }
    public ulong InodesInUse { get; init; }
    public ulong Directories { get; init; }
    public ulong FreeBlocks { get; init; }
    public string LogState { get; init; } = "";
    public double ElapsedSeconds { get; init; }
    public required string Message { get; init; }
}

/// <summary>What grow did (or, in a dry run, would do), in file system blocks of <see cref="BlockSize"/> bytes.</summary>
public sealed class GrowResultInfo
{
    public required string Source { get; init; }
    public bool DryRun { get; init; }
    /// <summary>True when the volume was mounted read-write by this server and grew while in use.</summary>
    public bool Online { get; init; }
    /// <summary>True when the volume changed size.</summary>
    public bool Written { get; init; }
    public int BlockSize { get; init; }
    public ulong OldDataBlocks { get; init; }
    public ulong NewDataBlocks { get; init; }
    public uint OldAgCount { get; init; }
    public uint NewAgCount { get; init; }
    public uint AgBlocks { get; init; }
    /// <summary>What the device holds now (the size grow goes to when none is given).</summary>
    public ulong DeviceBlocks { get; init; }
    /// <summary>The smallest size a shrink can reach (only free space at the end of the last AG can go); the current size while mounted.</summary>
    public ulong SmallestBlocks { get; init; }
    public ulong FreeBlocksBefore { get; init; }
    public ulong FreeBlocksAfter { get; init; }
    public required string Message { get; init; }
}

/// <summary>Progress of a long operation, sent before its response; <see cref="Fraction"/> runs 0..1.</summary>
public sealed class ProgressMessage
{
    public long Id { get; init; }
    public required string Op { get; init; }
    public required string Stage { get; init; }
    public double Fraction { get; init; }
}

/// <summary>Event kinds of <see cref="ControlEvent.Kind"/>.</summary>
public static class EventKinds
{
    public const string Mounted = "mounted";
    /// <summary>Unmounted by request, at stop, or because the host stopped serving it (umount from outside).</summary>
    public const string Unmounted = "unmounted";
    /// <summary>A mounted volume found corruption: it stays mounted read-only and refuses writes.</summary>
    public const string VolumeReadOnly = "volume-read-only";
    /// <summary>A long operation (recover, format, check, grow) finished, successfully or not; <see cref="ControlEvent.Op"/> names it.</summary>
    public const string OperationFinished = "operation-finished";
}

public sealed class ControlEvent
{
    public required string Kind { get; init; }
    public string? Source { get; init; }
    public string? MountPoint { get; init; }
    public string? Op { get; init; }
    public bool Ok { get; init; } = true;
    public required string Message { get; init; }
    /// <summary>Milliseconds since the Unix epoch (UTC) when the server raised it.</summary>
    public long Time { get; init; }
}

/// <summary>System.Text.Json source generation for every message: no reflection on the channel.</summary>
[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull, MaxDepth = 16)]
[JsonSerializable(typeof(ControlRequest))]
[JsonSerializable(typeof(ControlResponse))]
[JsonSerializable(typeof(ProgressMessage))]
[JsonSerializable(typeof(ControlEvent))]
public sealed partial class ControlJsonContext : JsonSerializerContext;

using XfsWin.Journal;
namespace XfsWin.Volume;

/// <summary>What <c>xfswin info</c> shows: geometry, features and health of an opened volume.</summary>
public sealed record VolumeInfo
{
    public required string Label { get; init; }
    public required Guid Uuid { get; init; }
    /// <summary>4 for V4 volumes, 5 for V5 (CRC) volumes.</summary>
    public required int FormatVersion { get; init; }
    public required int BlockSize { get; init; }
    public required int SectorSize { get; init; }
    public required int InodeSize { get; init; }
    public required int DirectoryBlockSize { get; init; }
    public required uint AgCount { get; init; }
    public required uint AgBlocks { get; init; }
    public required ulong DataBlocks { get; init; }
    public required ulong FreeBlocks { get; init; }
    public required ulong InodeCount { get; init; }
    public required ulong FreeInodes { get; init; }
    public required ulong RootInode { get; init; }
    public required ulong RealtimeBlocks { get; init; }
    public required uint LogBlocks { get; init; }
    public required bool ExternalLog { get; init; }
    public required LogState LogState { get; init; }
    /// <summary>The LSN of the log's head when the volume was opened (0 when the log was not read: external or unreadable).</summary>
    public ulong LogHeadLsn { get; init; }
    /// <summary>Intents left unfinished in a dirty log, by kind (EFI, RUI, CUI, BUI, ATTRI, XMI) and count.</summary>
    public IReadOnlyDictionary<string, int> UnfinishedLogIntents { get; init; } = new Dictionary<string, int>();
    /// <summary>Inodes unlinked while open when Linux stopped (hidden; Linux frees them at its next mount).</summary>
    public int UnlinkedInodesAtCrash { get; init; }
    /// <summary>Every feature the superblock enables, by its mkfs.xfs / kernel name.</summary>
    public required IReadOnlyList<string> Features { get; init; }
    /// <summary>How the device does I/O (O_DIRECT, buffered fallback and why).</summary>
    public required string IoMode { get; init; }
    /// <summary>Why this open is read-only, when it is (features we cannot maintain, dirty log, ...).</summary>
    public required IReadOnlyList<string> ReadOnlyReasons { get; init; }
    /// <summary>Things the user should know (stale view of a dirty log, realtime section, ...).</summary>
    public required IReadOnlyList<string> Warnings { get; init; }
}

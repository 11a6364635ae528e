using XfsWin.Journal;

namespace XfsWin.Volume;

public sealed record VolumeOpenOptions
{
    /// <summary>Open for writing. Until the write path lands every open is read-only.</summary>
    public bool Writable { get; init; }

    public LogReplayMode Replay { get; init; } = LogReplayMode.Memory;

    /// <summary>Partition number of a partitioned disk or image (same as a <c>source@N</c> suffix).</summary>
    public int? Partition { get; init; }

    /// <summary>The device holding an external log (path, optionally <c>@N</c>); null for an internal log.</summary>
    public string? LogDevice { get; init; }

    /// <summary>Metadata buffers kept in memory, in bytes.</summary>
    public long MetadataCacheBytes { get; init; } = 64L << 20;

    /// <summary>
    /// A read-write open for changes of the data section's space only (an offline shrink through the allocator): the
    /// features the write path does not maintain for files (realtime, quota files in the metadata directory) do not make it read-only,
    /// since no file, directory or inode is changed. Only the admin tools use it.
    /// </summary>
    internal bool SpaceChangesOnly { get; init; }

    /// <summary>
    /// A read-write open writes a checkpoint once the committed items reach this many bytes; 0 (the default) is an eighth
    /// of the log. Tests set 1 to put every transaction part in a checkpoint of its own (crash points between the parts).
    /// </summary>
    internal long CheckpointThresholdBytes { get; init; }

    /// <summary>
    /// How often a read-write open makes durable by itself what changed since the last time (held file data written,
    /// the device flushed, the log forced), as the kernel's periodic log work does every 30 seconds: a crash then
    /// loses at most this much of the changes nobody fsynced. Zero turns it off (only fsync, sync and unmount make
    /// changes durable then).
    /// </summary>
    public TimeSpan SyncInterval { get; init; } = TimeSpan.FromSeconds(30);

    /// <summary>
    /// Whether new files, directories and device nodes get their (empty) attribute fork when they are created, as
    /// current Linux kernels with a security module give it (the default), or with their first attribute, as Linux 6.1
    /// and kernels without one do. Both are valid XFS; the fork's offset decides when short-form directories, local
    /// symlinks and extent lists change form, so this picks which kernel's shapes new inodes follow. Parent-pointer
    /// volumes always give the fork at create, as every kernel does there.
    /// </summary>
    public bool AttrForkAtCreate { get; init; } = true;
}

/// <summary>statfs(2) figures, from the superblock counters.</summary>
public readonly record struct FileSystemStats(
    int BlockSize,
    ulong TotalBlocks,
    ulong FreeBlocks,
    ulong TotalInodes,
    ulong FreeInodes,
    int MaxNameLength);

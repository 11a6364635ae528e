namespace XfsWin.Mkfs;

/// <summary>
/// What the user asked mkfs for, option by option as mkfs.xfs names them. Null means "not given": the
/// geometry calculation then applies mkfs.xfs 6.13's default (which may depend on other options or the device).
/// </summary>
public sealed record MkfsOptions
{
    public string? Target { get; init; }

    // -b
    public int? BlockSize { get; init; }
    // -s
    public int? SectorSize { get; init; }

    // -d
    public long? DataSizeBytes { get; init; }
    public long? AgCount { get; init; }
    public long? AgSizeBytes { get; init; }
    /// <summary>-d su (bytes) and sw (multiplier).</summary>
    public long? StripeUnitBytes { get; init; }
    public long? StripeWidthMultiplier { get; init; }
    /// <summary>-d sunit / swidth (512-byte units).</summary>
    public long? StripeUnitSectors { get; init; }
    public long? StripeWidthSectors { get; init; }
    public bool? DataIsFile { get; init; }
    /// <summary>-d concurrency: 0 forces the default AG rule; N picks AGs for N writers.</summary>
    public int? DataConcurrency { get; init; }

    // -i
    public int? InodeSize { get; init; }
    public int? InodeMaxPct { get; init; }
    public bool? SparseInodes { get; init; }
    public bool? Nrext64 { get; init; }
    public bool? Exchange { get; init; }
    public bool? InodeAlign { get; init; }
    /// <summary>-i attr (0, 1, 2: the attribute fork layout; below 2 only on V4) and -i projid32bit.</summary>
    public int? AttrVersion { get; init; }
    public bool? ProjId32 { get; init; }

    // -l
    public long? LogSizeBytes { get; init; }
    public bool? LogInternal { get; init; }
    /// <summary>-l logdev (or -l name): the external log device, an image file or block device (<c>log.img@1</c> for a partition).</summary>
    public string? LogDevice { get; init; }
    /// <summary>-l file: the log device is a regular file, made with -l size if it does not exist.</summary>
    public bool? LogIsFile { get; init; }
    /// <summary>-l sectsize: the external log's sector size.</summary>
    public int? LogSectorSize { get; init; }
    public long? LogStripeUnitBytes { get; init; }
    public long? LogStripeUnitSectors { get; init; }
    public int? LogVersion { get; init; }
    public bool? LazyCount { get; init; }
    public int? LogConcurrency { get; init; }
    public long? LogAgNumber { get; init; }

    // -m
    public bool? Crc { get; init; }
    public bool? Finobt { get; init; }
    public bool? Rmapbt { get; init; }
    public bool? Reflink { get; init; }
    public bool? Bigtime { get; init; }
    public bool? InobtCount { get; init; }
    public bool? Metadir { get; init; }
    public Guid? Uuid { get; init; }

    // -n
    public int? DirBlockSize { get; init; }
    public bool? Ftype { get; init; }
    public bool? Parent { get; init; }

    public string? Label { get; init; }
    public bool Force { get; init; }
    public bool NoDiscard { get; init; }
    public bool DryRun { get; init; }
    public bool Quiet { get; init; }
    public bool Unsupported { get; init; }
}

/// <summary>A refused option or combination: the message says what and why, as mkfs.xfs would.</summary>
public sealed class MkfsUsageException(string message) : Exception(message);

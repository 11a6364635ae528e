using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Mkfs;

/// <summary>
/// The target refused because it holds something (<see cref="Found"/>, as <see cref="ExistingContent"/>
/// names it) and force was not given. Nothing was written.
/// </summary>
public sealed class MkfsRefusedException(string target, string found)
    : Exception($"{target} holds {found}; nothing was written")
{
    public string Target { get; } = target;
    public string Found { get; } = found;
}

/// <summary>
/// What a mkfs run will do, worked out before anything is created or written: the target's facts,
/// the geometry mkfs.xfs 6.13 would choose, and what the target holds now.
/// </summary>
public sealed record MkfsPlan
{
    public required MkfsOptions Options { get; init; }
    public required MkfsGeometry Geometry { get; init; }
    /// <summary>The data device (TARGET).</summary>
    public required MkfsDevice Data { get; init; }
    /// <summary>The external log device (-l logdev), or null for an internal log.</summary>
    public MkfsDevice? Log { get; init; }
}

/// <summary>A device mkfs writes (the data section's, or an external log's) as the plan found it.</summary>
public sealed record MkfsDevice
{
    /// <summary>The file or device path (without the <c>@N</c> partition suffix).</summary>
    public required string Path { get; init; }
    public int? Partition { get; init; }
    /// <summary>False when it is an image file that the run will create (-d size=, -l file,size=).</summary>
    public required bool Exists { get; init; }
    public required bool BlockDevice { get; init; }
    public long PartitionStart { get; init; }
    /// <summary>What it holds now ("an XFS file system labelled 'data'", "a GPT partition table"), or null.</summary>
    public string? Existing { get; init; }
}

/// <summary>
/// One mkfs run on a target, shared by <c>xfswin mkfs</c> and the control channel's format: plan first
/// (nothing is created or changed, so a dry run is exact), then write. The write refuses a target that
/// holds a file system or partition table unless <see cref="MkfsOptions.Force"/>, judged again on the
/// opened writable device so the refusal describes what is there at that moment.
/// </summary>
public static class MkfsRun
{
    public static MkfsPlan Plan(MkfsOptions o)
    {
        ArgumentNullException.ThrowIfNull(o);
        if (string.IsNullOrEmpty(o.Target)) throw new MkfsUsageException("no target given");
        var (path, partition) = PartitionSpec.Parse(o.Target);
        bool blockDevice = DeviceRangeOps.IsBlockDevice(path);
        bool exists = File.Exists(path) || blockDevice;
        if (!exists && partition is not null)
            throw new XfsException(XfsError.NotFound, $"'{path}' does not exist, so it has no partition {partition}");
        if (!exists && o.DataSizeBytes is null)
            throw new XfsException(XfsError.NotFound, $"'{path}' does not exist; give its size with -d size= to make a new image file");

        long deviceSize;
        int logical = 512, physical = 512;
        long stripeUnit = 0, stripeWidth = 0;
        bool solidState = false;
        long partitionStart = 0;
        string? existing = null;
        if (!exists)
        {
            deviceSize = o.DataSizeBytes!.Value;
        }
        else
        {
            using var probe = PartitionSpec.Open(o.Target, writable: false);
            deviceSize = probe.Length;
            existing = ExistingContent.Identify(probe);
            if (partition is not null)
            {
                using var disk = FileBlockDevice.Open(path);
                partitionStart = PartitionTable.Read(disk).Get(partition.Value).StartByte;
            }
            if (blockDevice)
            {
                logical = probe.SectorSize;
                physical = DeviceRangeOps.PhysicalSectorSize(path) ?? logical;
                solidState = DeviceRangeOps.IsRotational(path) == false;
                if (DeviceRangeOps.Topology(path) is { } topology)
                {
                    // blkid's reading: sizes equal to the physical sector mean "no stripe"; whole 512-byte units only.
                    if (topology.MinimumIoBytes != physical && topology.OptimalIoBytes != physical)
                    {
                        stripeUnit = topology.MinimumIoBytes / 512 * 512;
                        stripeWidth = topology.OptimalIoBytes / 512 * 512;
                    }
                    if (topology.AlignmentOffset != 0)
                    {
                        if (!o.Force)
                            throw new MkfsUsageException($"{path} is not properly aligned (its start is {topology.AlignmentOffset} bytes off a physical sector); use -f to force usage of a misaligned device");
                        physical = logical;
                    }
                }
            }
            if (!blockDevice && partition is null && o.DataSizeBytes is long want && want > deviceSize) deviceSize = want;
        }
        var facts = new MkfsDeviceFacts
        {
            SizeBytes = deviceSize,
            LogicalSectorSize = logical,
            PhysicalSectorSize = physical,
            SolidState = solidState,
            CpuCount = Environment.ProcessorCount,
            IsFile = !blockDevice,
            StripeUnitBytes = stripeUnit,
            StripeWidthBytes = stripeWidth,
        };
        if (o.DataSizeBytes is long dsz && dsz > deviceSize && (blockDevice || partition is not null))
            throw new MkfsUsageException($"size {dsz} specified for data subvolume is too large, maximum is {deviceSize} bytes");

        MkfsDevice? log = null;
        if (o.LogDevice is not null)
        {
            (log, var logFacts) = PlanLog(o, path, partition);
            facts = facts with { LogDevice = logFacts };
        }

        return new MkfsPlan
        {
            Options = o, Geometry = MkfsGeometry.Calculate(o, facts), Log = log,
            Data = new MkfsDevice
            {
                Path = path, Partition = partition, Exists = exists, BlockDevice = blockDevice, PartitionStart = partitionStart, Existing = existing,
            },
        };
    }

    /// <summary>The external log device: it must exist (or be an image file -l file,size= makes) and must not be the data device.</summary>
    private static (MkfsDevice Log, MkfsLogDeviceFacts Facts) PlanLog(MkfsOptions o, string dataPath, int? dataPartition)
    {
        var (path, partition) = PartitionSpec.Parse(o.LogDevice!);
        if (SameFile(path, dataPath) && partition == dataPartition)
            throw new MkfsUsageException($"the log device {o.LogDevice} is the data device; give another device for -l logdev, or leave the log internal");
        bool blockDevice = DeviceRangeOps.IsBlockDevice(path);
        bool exists = File.Exists(path) || blockDevice;
        if (!exists)
        {
            if (o.LogIsFile != true || partition is not null)
                throw new XfsException(XfsError.NotFound, $"Error accessing specified device {path}: it does not exist. Make it first (truncate -s SIZE {path}) or let mkfs make it with -l file,size=SIZE");
            if (o.LogSizeBytes is not long size) throw new MkfsUsageException("if -l file then -l name and -l size are required");
            return (new MkfsDevice { Path = path, Exists = false, BlockDevice = false }, new MkfsLogDeviceFacts { SizeBytes = size });
        }
        using var probe = PartitionSpec.Open(o.LogDevice!, writable: false);
        long start = 0;
        if (partition is not null)
        {
            using var disk = FileBlockDevice.Open(path);
            start = PartitionTable.Read(disk).Get(partition.Value).StartByte;
        }
        return (new MkfsDevice
        {
            Path = path, Partition = partition, Exists = true, BlockDevice = blockDevice, PartitionStart = start,
            Existing = ExistingContent.Identify(probe),
        }, new MkfsLogDeviceFacts { SizeBytes = probe.Length, LogicalSectorSize = blockDevice ? probe.SectorSize : 512 });
    }

    private static bool SameFile(string a, string b)
    {
        static string Resolve(string p)
        {
            string full = System.IO.Path.GetFullPath(p);
            try
            {
                return File.Exists(full) || DeviceRangeOps.IsBlockDevice(full) ? new FileInfo(full).ResolveLinkTarget(returnFinalTarget: true)?.FullName ?? full : full;
            }
            catch (IOException)
            {
                return full;
            }
        }
        return string.Equals(Resolve(a), Resolve(b), OperatingSystem.IsWindows() ? StringComparison.OrdinalIgnoreCase : StringComparison.Ordinal);
    }

    /// <summary>
    /// Makes the volume <paramref name="plan"/> describes: creates or extends an image file, refuses an
    /// occupied target without force (<see cref="MkfsRefusedException"/>), discards a block device's
    /// blocks unless told not to, and writes every structure.
    /// </summary>
    public static void Write(MkfsPlan plan, IProgress<MkfsProgress>? progress, DateTimeOffset now)
    {
        ArgumentNullException.ThrowIfNull(plan);
        var o = plan.Options;
        string target = o.Target!;
        if (plan.Log is { Exists: true } && !o.Force)
        {
            // Refuse an occupied log device before the data image is created or extended.
            using var check = PartitionSpec.Open(o.LogDevice!, writable: false);
            if (ExistingContent.Identify(check) is string found) throw new MkfsRefusedException(o.LogDevice!, found);
        }
        if (!plan.Data.Exists)
        {
            using var f = new FileStream(plan.Data.Path, FileMode.CreateNew, FileAccess.Write);
            f.SetLength(o.DataSizeBytes!.Value);
        }
        else if (!plan.Data.BlockDevice && plan.Data.Partition is null && o.DataSizeBytes is long grow && grow > new FileInfo(plan.Data.Path).Length)
        {
            // Refuse before extending: the refusal must see the file as it was.
            using (var check = PartitionSpec.Open(target, writable: false))
            {
                if (!o.Force && ExistingContent.Identify(check) is string found) throw new MkfsRefusedException(target, found);
            }
            using var f = new FileStream(plan.Data.Path, FileMode.Open, FileAccess.Write);
            f.SetLength(grow);
        }

        using var device = PartitionSpec.Open(target, writable: true);
        string? existing = ExistingContent.Identify(device);
        if (existing is not null && !o.Force) throw new MkfsRefusedException(target, existing);

        // The external log device is judged like the data device, before anything is written to either.
        using var logTarget = plan.Log is { } log ? OpenLog(plan, log) : null;

        using var mkfsTarget = new MkfsTarget(device, plan.Data.Path, plan.Data.PartitionStart, plan.Data.BlockDevice);
        if (plan.Data.BlockDevice && !o.NoDiscard)
        {
            long total = device.Length;
            DeviceRangeOps.TryDiscard(plan.Data.Path, plan.Data.PartitionStart, total, done => progress?.Report(new MkfsProgress("discarding blocks", done, total)));
        }
        if (logTarget is not null && logTarget.IsBlockDevice && !o.NoDiscard)
        {
            long total = logTarget.Device.Length;
            DeviceRangeOps.TryDiscard(logTarget.Path, logTarget.BaseOffset, total, done => progress?.Report(new MkfsProgress("discarding log blocks", done, total)));
        }
        if (existing is not null && o.Force) ZeroOldSecondaries(mkfsTarget);

        MkfsWriter.Write(mkfsTarget, new MkfsLayout(plan.Geometry), now, progress, logTarget);
    }

    /// <summary>Creates (-l file,size=) or opens the log device writable; refuses one holding a file system or partition table without force.</summary>
    private static MkfsTarget OpenLog(MkfsPlan plan, MkfsDevice log)
    {
        var o = plan.Options;
        if (!log.Exists)
        {
            using var f = new FileStream(log.Path, FileMode.CreateNew, FileAccess.Write);
            f.SetLength(o.LogSizeBytes!.Value);
        }
        var device = PartitionSpec.Open(o.LogDevice!, writable: true);
        try
        {
            string? existing = ExistingContent.Identify(device);
            if (existing is not null && !o.Force) throw new MkfsRefusedException(o.LogDevice!, existing);
            return new MkfsTarget(device, log.Path, log.PartitionStart, log.BlockDevice);
        }
        catch
        {
            device.Dispose();
            throw;
        }
    }

    /// <summary>An old XFS's secondary superblocks outside the new AG headers would still be found by xfs_repair: zero them (mkfs.xfs does too).</summary>
    private static void ZeroOldSecondaries(MkfsTarget target)
    {
        var sector = new byte[Math.Max(512, target.Device.SectorSize)];
        target.Device.Read(0, sector);
        if (!Superblock.Verify(sector).IsOk) return;
        var old = Superblock.Decode(sector);
        long agBytes = (long)old.AgBlocks * old.BlockSize;
        for (uint agno = 1; agno < old.AgCount; agno++)
        {
            long at = agno * agBytes;
            if (at + old.SectorSize > target.Device.Length) break;
            target.ZeroRange(at, old.SectorSize);
        }
    }
}

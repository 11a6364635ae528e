using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Mkfs;

using XfsWin.Cli.Output;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin mkfs [options] TARGET</c>: makes a new XFS volume as mkfs.xfs 6.13 makes it, with its option
/// names and defaults. TARGET is an image file (created or extended with -d size=), a block device, or a
/// partition (<c>disk.img@2</c>). Exit codes: 0 made (or printed with -N), 1 bad options, 2 target not
/// found, 4 refused (an existing file system or partition table without -f), 5 I/O error.
/// </summary>
public static class MkfsCommand
{
    public const string Description = "Make a new XFS volume (mkfs.xfs's options and defaults, xfsprogs 6.13)";

    public const string Usage =
        "usage: xfswin mkfs [options] TARGET\n" +
        "  TARGET: an image file (made or extended to -d size=), a block device, or a partition (disk.img@2)\n" +
        "  -b size=BYTES                  block size (default 4096)\n" +
        "  -s size=BYTES                  sector size (default: the device's; 512 for image files)\n" +
        "  -d size=,agcount=,agsize=,su=,sw=,sunit=,swidth=,file,concurrency=\n" +
        "  -i size=,maxpct=,sparse=,nrext64=,exchange=,align=\n" +
        "  -l size=,internal=,su=,sunit=,version=,lazy-count=,agnum=,concurrency=\n" +
        "  -m crc=,finobt=,rmapbt=,reflink=,bigtime=,inobtcount=,metadir=,uuid=\n" +
        "  -n size=,ftype=,parent=\n" +
        "  -L LABEL   -f (overwrite what TARGET holds)   -K (no discard)   -N (print, write nothing)   -q (quiet)\n" +
        "  Sizes take k, m, g, t suffixes (powers of 1024). See docs/cli.md.";

    public static int Run(string[] args) => Run(args, Console.Out, Console.Error, !Console.IsErrorRedirected);

    public static int Run(string[] args, TextWriter stdout, TextWriter stderr, bool interactive = false)
    {
        if (args.Length == 0 || args is ["-h"] or ["--help"])
        {
            (args.Length == 0 ? stderr : stdout).WriteLine(Usage);
            return args.Length == 0 ? ExitCodes.Usage : ExitCodes.Ok;
        }
        MkfsOptions options;
        try
        {
            options = MkfsOptionParser.Parse(args);
        }
        catch (MkfsUsageException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            stderr.WriteLine(Usage);
            return ExitCodes.Usage;
        }
        if (options.Target is null)
        {
            stderr.WriteLine("xfswin mkfs: no target given");
            stderr.WriteLine(Usage);
            return ExitCodes.Usage;
        }

        try
        {
            return Make(options, stdout, stderr, interactive);
        }
        catch (MkfsUsageException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            return ExitCodes.Usage;
        }
        catch (XfsException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            return ExitCodes.FromError(e.Error);
        }
        catch (UnauthorizedAccessException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message} (writing a device needs administrator/root rights)");
            return ExitCodes.Refused;
        }
        catch (IOException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            return ExitCodes.IoError;
        }
    }

    private static int Make(MkfsOptions o, TextWriter stdout, TextWriter stderr, bool interactive)
    {
        var (path, partition) = PartitionSpec.Parse(o.Target!);
        bool blockDevice = DeviceRangeOps.IsBlockDevice(path);
        bool exists = File.Exists(path) || blockDevice;
        if (!exists && partition is not null)
            throw new XfsException(XfsError.NotFound, $"'{path}' does not exist, so it has no partition {partition}");
        if (!exists && o.DataSizeBytes is null)
            throw new XfsException(XfsError.NotFound, $"'{path}' does not exist; give its size with -d size= to make a new image file");

        // Device facts first: the geometry depends on them, and -N must not create or change anything.
        long deviceSize;
        int logical = 512, physical = 512;
        bool solidState = false;
        long partitionStart = 0;
        if (!exists)
        {
            deviceSize = o.DataSizeBytes!.Value;
        }
        else
        {
            using var probe = PartitionSpec.Open(o.Target!, writable: false);
            deviceSize = probe.Length;
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
        };
        if (o.DataSizeBytes is long dsz && dsz > deviceSize && (blockDevice || partition is not null))
            throw new MkfsUsageException($"size {dsz} specified for data subvolume is too large, maximum is {deviceSize} bytes");

        var geometry = MkfsGeometry.Calculate(o, facts);
        if (!o.Quiet || o.DryRun) stdout.Write(MkfsSummary.Format(geometry, o.Target!));
        stdout.Flush();
        if (o.DryRun) return ExitCodes.Ok;

        if (!exists)
        {
            using (var f = new FileStream(path, FileMode.CreateNew, FileAccess.Write)) f.SetLength(o.DataSizeBytes!.Value);
        }
        else if (!blockDevice && partition is null && o.DataSizeBytes is long grow && grow > new FileInfo(path).Length)
        {
            // Refuse before extending: the check below must see the file as it was.
            using (var check = PartitionSpec.Open(o.Target!, writable: false))
            {
                if (!o.Force && ExistingContent.Identify(check) is string found) return Refuse(stderr, o.Target!, found);
            }
            using var f = new FileStream(path, FileMode.Open, FileAccess.Write);
            f.SetLength(grow);
        }

        using var device = PartitionSpec.Open(o.Target!, writable: true);
        string? existing = ExistingContent.Identify(device);
        if (existing is not null && !o.Force) return Refuse(stderr, o.Target!, existing);

        using var target = new MkfsTarget(device, path, partitionStart, blockDevice);
        using var bar = CliProgress.Start(stderr, interactive && !o.Quiet ? ProgressMode.Live : ProgressMode.Off, "mkfs");
        var progress = bar.For<MkfsProgress>(v => (v.Stage, v.Done, v.Total));
        if (blockDevice && !o.NoDiscard)
        {
            long total = device.Length;
            DeviceRangeOps.TryDiscard(path, partitionStart, total, done => bar.Stage("discarding blocks", done, total));
        }
        if (existing is not null && o.Force) ZeroOldSecondaries(target);

        var layout = new MkfsLayout(geometry);
        MkfsWriter.Write(target, layout, DateTimeOffset.UtcNow, progress);
        bar.Finish();
        return ExitCodes.Ok;
    }

    private static int Refuse(TextWriter stderr, string target, string found)
    {
        stderr.WriteLine($"xfswin mkfs: {target} holds {found}; nothing was written. Use -f to overwrite it.");
        return ExitCodes.Refused;
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

using System.Globalization;
using XfsWin.Admin;
using XfsWin.Cli.Output;
using XfsWin.Device;
using XfsWin.Metadata;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin grow TARGET [-D SIZE] [-n]</c>: xfs_growfs for unmounted volumes. Grows the data section to the size
/// of the device (an image file's current size) or to -D SIZE, or shrinks it within the free tail of the last AG.
/// Exit codes (docs/cli.md): 0 done or nothing to do, 1 usage or a size that cannot be reached, 2 not found, 3 corrupt or needs repair, 4 refused, 5 I/O error.
/// </summary>
public static class GrowCommand
{
    public const string Description = "Grow (or shrink the free tail of) a volume's data section, as xfs_growfs does (online on an xfswin rw mount)";

    public const string Usage =
        "usage: xfswin grow TARGET [-d | -D SIZE] [-m IMAXPCT] [-n] [--log-device LOGDEV] [--progress|--no-progress]\n" +
        "  TARGET: an image file, block device or partition (disk.img@2). Extend an image file first\n" +
        "          (truncate -s 20G disk.img); without -D the data section grows to the whole device.\n" +
        "  -d        grow the data section to the whole device (the default unless -m is given alone)\n" +
        "  -D SIZE   new size in file system blocks (as xfs_growfs), or with a suffix in bytes: 512k, 10g, 2t.\n" +
        "            Smaller than now shrinks: only free space at the end of the last allocation group can go.\n" +
        "  -m IMAXPCT  the most of the data section inodes may take, in percent (0: no limit); alone it changes\n" +
        "            only that, as xfs_growfs -m does\n" +
        "  -n        print the geometry and what would change; write nothing\n" +
        "  TARGET may also be the mount point of a volume xfswin mounted read-write (xfswin mount -o rw):\n" +
        "  it then grows or shrinks while in use, as xfs_growfs does on a mounted volume.";

    public static int Run(string[] args) => Run(args, CliConsole.FromProcess());

    public static int Run(string[] args, CliConsole console)
    {
        var stdout = console.Out;
        var stderr = console.Error;
        string? target = null, logDevice = null, size = null, imaxText = null;
        bool dryRun = false, toDevice = false;
        bool? progressFlag = null;
        for (int i = 0; i < args.Length; i++)
        {
            string a = args[i];
            switch (a)
            {
                case "-D" when i + 1 < args.Length: size = args[++i]; break;
                case "-d": toDevice = true; break;
                case "-m" when i + 1 < args.Length: imaxText = args[++i]; break;
                case "-n" or "--dry-run": dryRun = true; break;
                case "--log-device" or "-l" when i + 1 < args.Length: logDevice = args[++i]; break;
                case "--progress": progressFlag = true; break;
                case "--no-progress": progressFlag = false; break;
                case "-h" or "--help":
                    stdout.WriteLine(Usage);
                    return ExitCodes.Ok;
                default:
                    if (a.StartsWith("-D", StringComparison.Ordinal) && a.Length > 2) { size = a[2..]; break; }
                    if (a.StartsWith("-m", StringComparison.Ordinal) && a.Length > 2) { imaxText = a[2..]; break; }
                    if (a.StartsWith('-') || target is not null)
                    {
                        stderr.WriteLine($"xfswin grow: unexpected argument '{a}'");
                        stderr.WriteLine(Usage);
                        return ExitCodes.Usage;
                    }
                    target = a;
                    break;
            }
        }
        if (target is null)
        {
            stderr.WriteLine(Usage);
            return ExitCodes.Usage;
        }
        int? imaxPct;
        try
        {
            imaxPct = imaxText is null ? null : ParseImaxPct(imaxText);
        }
        catch (FormatException e)
        {
            stderr.WriteLine($"xfswin grow: {e.Message}");
            return ExitCodes.Usage;
        }
        // As xfs_growfs: -m alone changes only the inode limit; otherwise the data section grows (to -D or the device).
        bool keepSize = imaxPct is not null && size is null && !toDevice;
        if (Directory.Exists(target))
            return GrowMounted(target, size, imaxPct, keepSize, dryRun, progressFlag, console);

        try
        {
            var (path, partition) = PartitionSpec.Parse(target);
            if (!File.Exists(path) && !DeviceRangeOps.IsBlockDevice(path))
            {
                stderr.WriteLine($"xfswin grow: '{path}' does not exist");
                return ExitCodes.NotFound;
            }
            if (!dryRun && MountGuard.InUse(path) is { } busy)
            {
                stderr.WriteLine($"xfswin grow: {busy}. Nothing was written. (A volume xfswin mounted read-write grows through its mount point: xfswin grow MOUNTPOINT.)");
                return ExitCodes.Refused;
            }
            using var access = dryRun
                ? null
                : WriteGate.Open(path, partition, logDevice, WritePurpose.Grow);
            using var readOnly = dryRun ? PartitionSpec.Open(path, partition, writable: false) : null;
            var device = access?.Data ?? readOnly!;
            var sector = new byte[Math.Max(512, Math.Min(4096, device.SectorSize))];
            device.Read(0, sector);
            var verify = Format.Superblock.Verify(sector);
            if (!verify.IsOk) throw new XfsCorruptionException("primary superblock", 0, verify.ToString());
            var sb = access?.Superblock ?? Format.Superblock.Decode(sector);
            if (dryRun && WriteGate.Check(sector, WritePurpose.Grow) is { } refusal)
                stderr.WriteLine($"xfswin grow: a grow would be refused: {refusal.Message}");

            ulong requested = keepSize ? sb.DataBlocks : size is null ? VolumeGrower.DeviceBlocks(device.Length, sb.BlockSize) : ParseSize(size, sb.BlockSize);
            if (size is null && !keepSize && requested < sb.DataBlocks)
            {
                // Only an explicit -D shrinks: a device smaller than its volume was cut short by mistake, not asked to shrink.
                stderr.WriteLine($"xfswin grow: the device holds {requested} blocks but the volume has {sb.DataBlocks}: was the image or partition made smaller? " +
                                 "Nothing was written. To shrink the volume, give the new size with -D.");
                return ExitCodes.Usage;
            }
            var plan = VolumeGrower.Plan(sb, requested, imaxPct);
            bool terminal = console.StdoutIsTerminal;
            if (dryRun)
            {
                PrintPlan(stdout, terminal, plan, null);
                stdout.WriteLine(plan.Changes ? "Dry run: nothing was written." : "Nothing to do: the volume already has this size.");
                return ExitCodes.Ok;
            }
            if (!plan.Changes)
            {
                PrintPlan(stdout, terminal, plan, null);
                stdout.WriteLine(requested > sb.DataBlocks
                    ? $"Nothing to do: {requested - sb.DataBlocks} more blocks would make an allocation group of fewer than {VolumeGrower.MinAgBlocks} blocks."
                    : imaxPct is not null ? "Nothing to do: the volume already has this size and inode limit." : "Nothing to do: the volume already has this size.");
                return ExitCodes.Ok;
            }
            GrowResult result;
            using (var bar = CliProgress.Start(console, progressFlag, "grow"))
            {
                result = VolumeGrower.Run(access!, requested, bar.Enabled ? bar.For<GrowProgress>(p => (p.Stage, p.Done, p.Total)) : null,
                    new GrowOptions { ImaxPct = imaxPct });
                bar.Finish();
            }
            PrintPlan(stdout, terminal, result.Plan, result);
            PrintChanges(stdout, result.Plan, online: false);
            return ExitCodes.Ok;
        }
        catch (FormatException e)
        {
            stderr.WriteLine($"xfswin grow: {e.Message}");
            return ExitCodes.Usage;
        }
        catch (XfsException e)
        {
            stderr.WriteLine($"xfswin grow: {e.Message}");
            return ExitCodes.FromError(e.Error);
        }
        catch (UnauthorizedAccessException e)
        {
            stderr.WriteLine($"xfswin grow: {e.Message} (growing writes to the device: run as administrator/root)");
            return ExitCodes.Refused;
        }
        catch (IOException e)
        {
            stderr.WriteLine($"xfswin grow: {e.Message}");
            return ExitCodes.IoError;
        }
    }

    /// <summary>
    /// Online grow: <paramref name="mountPoint"/> must be served read-write by an xfswin mount server, which grows the
    /// volume it holds open (see <see cref="MountControl"/>).
    /// </summary>
    private static int GrowMounted(string mountPoint, string? size, int? imaxPct, bool keepSize, bool dryRun, bool? progressFlag, CliConsole console)
    {
        var stderr = console.Error;
        if (dryRun)
        {
            stderr.WriteLine($"xfswin grow: -n needs the volume's image file or device, not a mount point ({mountPoint}). Nothing was written.");
            return ExitCodes.Usage;
        }
        try
        {
            (GrowResult? Result, int ExitCode, string? Error)? answer;
            using (var bar = CliProgress.Start(console, progressFlag, "grow"))
            {
                answer = MountControl.Grow(mountPoint, size, bar.Enabled ? bar.For<GrowProgress>(p => (p.Stage, p.Done, p.Total)) : null, imaxPct, keepSize);
                bar.Finish();
            }
            if (answer is null)
            {
                stderr.WriteLine($"xfswin grow: {mountPoint} is a directory, but no read-write xfswin mount serves it. Mount the volume with " +
                                 "xfswin mount -o rw SOURCE DIR and grow it through DIR, or give an unmounted image file or device; " +
                                 "for a volume Linux mounted, use xfs_growfs.");
                return ExitCodes.Usage;
            }
            var (result, code, error) = answer.Value;
            if (result is null)
            {
                stderr.WriteLine($"xfswin grow: {error}");
                return code;
            }
            PrintPlan(console.Out, console.StdoutIsTerminal, result.Plan, result);
            if (result.Plan.Changes) PrintChanges(console.Out, result.Plan, online: true);
            else console.Out.WriteLine("Nothing to do: the volume already has this size.");
            return ExitCodes.Ok;
        }
        catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or FormatException)
        {
            stderr.WriteLine($"xfswin grow: talking to the mount server of {mountPoint} failed: {e.Message}");
            return ExitCodes.IoError;
        }
    }

    /// <summary>What changed, in xfs_growfs's words (with "(shrunk)" and "(online)" where they apply).</summary>
    private static void PrintChanges(TextWriter o, GrowPlan p, bool online)
    {
        string tag = (p.Shrinks, online) switch { (true, true) => " (shrunk, online)", (true, false) => " (shrunk)", (false, true) => " (online)", _ => "" };
        if (p.Resizes) o.WriteLine($"data blocks changed from {p.OldDataBlocks} to {p.NewDataBlocks}{tag}");
        if (p.ImaxPct != p.OldImaxPct) o.WriteLine($"inode max percent changed from {p.OldImaxPct} to {p.ImaxPct}{(p.Resizes ? "" : tag)}");
    }

    /// <summary>-m: a whole percentage from 0 to 100.</summary>
    public static int ParseImaxPct(string text)
    {
        if (!int.TryParse(text, System.Globalization.NumberStyles.None, CultureInfo.InvariantCulture, out int pct) || pct > 100)
            throw new FormatException($"-m: imaxpct is a percentage from 0 to 100 (0: no limit), not '{text}'");
        return pct;
    }

    /// <summary>-D: a plain number is file system blocks (xfs_growfs); k, m, g, t, p, e suffixes (powers of 1024) are bytes.</summary>
    public static ulong ParseSize(string text, uint blockSize)
    {
        try
        {
            return VolumeGrower.ParseSize(text, blockSize);
        }
        catch (FormatException e)
        {
            throw new FormatException("-D: " + e.Message, e);
        }
    }

    private static void PrintPlan(TextWriter o, bool terminal, GrowPlan p, GrowResult? r)
    {
        var rows = new List<IReadOnlyList<string>>
        {
            new[] { "data blocks", p.OldDataBlocks.ToString(CultureInfo.InvariantCulture), p.NewDataBlocks.ToString(CultureInfo.InvariantCulture) },
            new[] { "size", Formatting.Bytes((long)(p.OldDataBlocks * p.BlockSize)), Formatting.Bytes((long)(p.NewDataBlocks * p.BlockSize)) },
            new[] { "allocation groups", p.OldAgCount.ToString(CultureInfo.InvariantCulture), p.NewAgCount.ToString(CultureInfo.InvariantCulture) },
            new[] { "agsize (blocks)", p.AgBlocks.ToString(CultureInfo.InvariantCulture), p.AgBlocks.ToString(CultureInfo.InvariantCulture) },
            new[] { "last AG (blocks)", p.OldLastAgLength.ToString(CultureInfo.InvariantCulture), p.NewLastAgLength.ToString(CultureInfo.InvariantCulture) },
            new[] { "imaxpct", p.OldImaxPct.ToString(CultureInfo.InvariantCulture), p.ImaxPct.ToString(CultureInfo.InvariantCulture) },
            new[] { "inode limit", "", p.MaxInodes.ToString(CultureInfo.InvariantCulture) },
        };
        if (r is not null)
            rows.Add(new[] { "free blocks", r.FreeBlocksBefore.ToString(CultureInfo.InvariantCulture), r.FreeBlocksAfter.ToString(CultureInfo.InvariantCulture) });
        CliTable.Write(o, terminal, ["", "before", "after"], rows);
    }
}

using XfsWin.Admin;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin label TARGET [NAME]</c> and <c>xfswin uuid TARGET [UUID|generate|nil|restore]</c>: xfs_admin -l/-L and
/// -u/-U for unmounted volumes. Without a value they print the current one as xfs_admin does; with one they change
/// every superblock through the write gate (clean log required). Exit codes as every command (docs/cli.md).
/// </summary>
public static class IdentityCommands
{
    public const string LabelDescription = "Print or set a volume's label (xfs_admin -l / -L)";
    public const string UuidDescription = "Print or set a volume's UUID (xfs_admin -u / -U)";

    public const string LabelUsage =
        "usage: xfswin label TARGET [NAME] [--log-device LOGDEV]\n" +
        "  Without NAME prints the label (label = \"...\"). NAME is at most 12 bytes; \"--\" or \"\" clears it.\n" +
        "  TARGET: an unmounted image file, block device or partition (disk.img@2).";

    public const string UuidUsage =
        "usage: xfswin uuid TARGET [UUID|generate|nil|restore] [--log-device LOGDEV]\n" +
        "  Without a value prints the UUID (UUID = ...). generate: a random UUID; nil: the all-zero UUID;\n" +
        "  restore (V5): back to the UUID the volume was made with.\n" +
        "  TARGET: an unmounted image file, block device or partition (disk.img@2).";

    public static int RunLabel(string[] args) => Run("label", LabelUsage, args, CliConsole.FromProcess());
    public static int RunUuid(string[] args) => Run("uuid", UuidUsage, args, CliConsole.FromProcess());

    public static int Run(string command, string usage, string[] args, CliConsole console)
    {
        var stdout = console.Out;
        var stderr = console.Error;
        string? target = null, value = null, logDevice = null;
        bool valueGiven = false;
        for (int i = 0; i < args.Length; i++)
        {
            string a = args[i];
            if (a is "-h" or "--help")
            {
                stdout.WriteLine(usage);
                return ExitCodes.Ok;
            }
            if (a is "--log-device" or "-l" && i + 1 < args.Length) { logDevice = args[++i]; continue; }
            if (target is null && !a.StartsWith('-')) { target = a; continue; }
            if (target is not null && !valueGiven) { value = a; valueGiven = true; continue; }
            stderr.WriteLine($"xfswin {command}: unexpected argument '{a}'");
            stderr.WriteLine(usage);
            return ExitCodes.Usage;
        }
        if (target is null)
        {
            stderr.WriteLine(usage);
            return ExitCodes.Usage;
        }
        if (Directory.Exists(target))
        {
            stderr.WriteLine($"xfswin {command}: {target} is a directory; give the unmounted volume's image file or device (a mounted volume cannot be changed).");
            return ExitCodes.Usage;
        }
        try
        {
            var (path, partition) = PartitionSpec.Parse(target);
            if (!File.Exists(path) && !DeviceRangeOps.IsBlockDevice(path))
            {
                stderr.WriteLine($"xfswin {command}: '{path}' does not exist");
                return ExitCodes.NotFound;
            }
            if (!valueGiven)
            {
                using var device = PartitionSpec.Open(path, partition, writable: false);
                var sector = new byte[Math.Max(512, Math.Min(4096, device.SectorSize))];
                device.Read(0, sector);
                var check = Superblock.Verify(sector);
                if (!check.IsOk) throw new XfsCorruptionException("primary superblock", 0, check.ToString());
                var sb = Superblock.Decode(sector);
                stdout.WriteLine(command == "label" ? $"label = \"{sb.Label}\"" : $"UUID = {sb.Uuid}");
                return ExitCodes.Ok;
            }
            if (MountGuard.InUse(path) is { } busy)
            {
                stderr.WriteLine($"xfswin {command}: {busy}. Nothing was written.");
                return ExitCodes.Refused;
            }
            if (command == "label")
            {
                string label = value is "--" ? "" : value!;
                VolumeIdentity.ValidateLabel(label);
                using var access = WriteGate.Open(path, partition, logDevice, WritePurpose.Relabel);
                var done = VolumeIdentity.SetLabel(access, label);
                stdout.WriteLine($"writing all SBs ({done.SuperblocksWritten})");
                stdout.WriteLine($"new label = \"{done.NewLabel}\"");
            }
            else
            {
                var change = UuidChange.Parse(value!);
                using var access = WriteGate.Open(path, partition, logDevice, WritePurpose.Relabel);
                var done = VolumeIdentity.SetUuid(access, change);
                if (done.SuperblocksWritten == 0)
                {
                    stdout.WriteLine($"UUID = {done.NewUuid} (already the original UUID: nothing to restore)");
                    return ExitCodes.Ok;
                }
                stdout.WriteLine($"writing all SBs ({done.SuperblocksWritten})");
                stdout.WriteLine($"new UUID = {done.NewUuid}");
            }
            return ExitCodes.Ok;
        }
        catch (XfsException e)
        {
            stderr.WriteLine($"xfswin {command}: {e.Message}");
            return ExitCodes.FromError(e.Error);
        }
        catch (UnauthorizedAccessException e)
        {
            stderr.WriteLine($"xfswin {command}: {e.Message} (changing a volume writes to the device: run as administrator/root)");
            return ExitCodes.Refused;
        }
        catch (IOException e)
        {
            stderr.WriteLine($"xfswin {command}: {e.Message}");
            return ExitCodes.IoError;
        }
    }
}

namespace XfsWin.Control.Server;

/// <summary>The machine's disks, for the list when <see cref="ServerOptions.ScanDevices"/> is on.</summary>
public static class DeviceScan
{
    /// <summary>
    /// Linux: every /sys/block entry with a size, except loop, ram, zram, device-mapper and md
    /// devices (their XFS volumes show through the disks below them or are not disks).
    /// Windows: \\.\PhysicalDrive0..63 that exist.
    /// </summary>
    public static IReadOnlyList<string> Disks()
    {
        var disks = new List<string>();
        if (OperatingSystem.IsLinux())
        {
            if (!Directory.Exists("/sys/block")) return disks;
            foreach (var dir in Directory.EnumerateDirectories("/sys/block").Order(StringComparer.Ordinal))
            {
                string name = Path.GetFileName(dir);
                if (name.StartsWith("loop", StringComparison.Ordinal) || name.StartsWith("ram", StringComparison.Ordinal)
                    || name.StartsWith("zram", StringComparison.Ordinal) || name.StartsWith("dm-", StringComparison.Ordinal)
                    || name.StartsWith("md", StringComparison.Ordinal) || name.StartsWith("sr", StringComparison.Ordinal))
                    continue;
                try
                {
                    if (long.TryParse(File.ReadAllText(Path.Combine(dir, "size")).Trim(), out long sectors) && sectors > 0 && File.Exists("/dev/" + name))
                        disks.Add("/dev/" + name);
                }
                catch (IOException)
                {
                }
            }
        }
        else if (OperatingSystem.IsWindows())
        {
            for (int i = 0; i < 64; i++)
            {
                string path = $@"\\.\PhysicalDrive{i}";
                try
                {
                    using var probe = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite, 1, FileOptions.None);
                    disks.Add(path);
                }
                catch (Exception e) when (e is IOException or UnauthorizedAccessException)
                {
                }
            }
        }
        return disks;
    }

    public static bool IsDevicePath(string path) =>
        path.StartsWith("/dev/", StringComparison.Ordinal) || path.StartsWith(@"\\.\", StringComparison.Ordinal);
}

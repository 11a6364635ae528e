namespace XfsWin.Fuse;

/// <summary>
/// Lines of /proc/self/mountinfo: "36 25 0:32 / /mnt/point rw,relatime shared:14 - fstype source opts".
/// The device (major:minor) is the third field, the mount point the fifth (spaces and the like
/// escaped as octal), the file-system type the first after the "-" that ends the optional fields.
/// </summary>
internal static class MountInfo
{
    public readonly record struct Entry(string Device, string MountPoint, string FileSystemType);

    /// <summary>The mounts in a mountinfo text, in its order (later ones on top of earlier ones at the same path).</summary>
    public static IEnumerable<Entry> Parse(string text)
    {
        foreach (var line in text.Split('\n'))
        {
            var fields = line.Split(' ');
            var separator = Array.IndexOf(fields, "-");
            if (fields.Length > 4 && separator > 4 && separator + 1 < fields.Length)
                yield return new Entry(fields[2], Unescape(fields[4]), fields[separator + 1]);
        }
    }

    /// <summary>This process's /proc/self/mountinfo, or "" when it cannot be read.</summary>
    public static string ReadCurrent()
    {
        try
        {
            return File.ReadAllText("/proc/self/mountinfo");
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return "";
        }
    }

    private static string Unescape(string s) =>
        s.Replace("\\040", " ", StringComparison.Ordinal).Replace("\\011", "\t", StringComparison.Ordinal)
         .Replace("\\012", "\n", StringComparison.Ordinal).Replace("\\134", "\\", StringComparison.Ordinal);
}

namespace XfsWin.Device;

/// <summary>
/// The "which partition" part of a source string: <c>disk.img@2</c> names partition 2 of disk.img,
/// <c>/dev/sdb@5</c> the first logical partition of /dev/sdb.
/// </summary>
public static class PartitionSpec
{
    /// <summary>
    /// Splits a trailing <c>@N</c> (N = 1..65535 in decimal) off a source. Anything else (no '@',
    /// non-digits after it, an '@' inside a directory name) leaves the path whole.
    /// </summary>
    public static (string Path, int? Partition) Parse(string source)
    {
        ArgumentNullException.ThrowIfNull(source);
        int at = source.LastIndexOf('@');
        if (at <= 0 || at == source.Length - 1) return (source, null);
        var digits = source.AsSpan(at + 1);
        foreach (char c in digits)
            if (c is < '0' or > '9') return (source, null);
        if (digits.Length > 5 || !int.TryParse(digits, out int n) || n < 1 || n > 65535)
            throw new XfsException(XfsError.InvalidArgument,
                $"'{source}': partition number '{digits}' is out of range; partitions are numbered from 1 (`xfswin info DISK` lists them)");
        return (source[..at], n);
    }

    /// <summary>
    /// Opens a source string (optionally with <c>@N</c>) as a device: the whole file or disk, or a
    /// bounds-checked window over one of its partitions. <paramref name="partition"/> overrides
    /// (and must not contradict) a suffix. The returned device owns the underlying file. Opened for
    /// writing, the bytes it covers are claimed first (<see cref="FileBlockDevice.ClaimForWriting"/>:
    /// on Windows the volumes on them are locked and dismounted).
    /// </summary>
    public static IBlockDevice Open(string source, int? partition = null, bool writable = false)
    {
        var (path, fromSuffix) = Parse(source);
        if (partition is not null && fromSuffix is not null && partition != fromSuffix)
            throw new XfsException(XfsError.InvalidArgument,
                $"'{source}' names partition {fromSuffix} but --partition says {partition}: give only one");
        int? number = partition ?? fromSuffix;
        if (number is < 1)
            throw new XfsException(XfsError.InvalidArgument, $"partition number {number} is out of range; partitions are numbered from 1");
        // "disk@2" where a file literally named "disk@2" exists and "disk" does not: the user meant the file.
        if (fromSuffix is not null && partition is null && File.Exists(source) && !File.Exists(path))
            return FileBlockDevice.Open(source, writable);
        var disk = FileBlockDevice.Open(path, writable);
        try
        {
            if (number is null)
            {
                if (writable) disk.ClaimForWriting(0, disk.Length);
                return disk;
            }
            var table = PartitionTable.Read(disk);
            var entry = table.Get(number.Value);
            // Only the partition's bytes: Windows volumes elsewhere on the disk stay mounted.
            if (writable) disk.ClaimForWriting(entry.StartByte, entry.LengthBytes);
            return new PartitionDevice(disk, entry.StartByte, entry.LengthBytes, ownsBase: true,
                $"partition {entry.Number} at byte {entry.StartByte}") { PartitionNumber = entry.Number };
        }
        catch
        {
            disk.Dispose();
            throw;
        }
    }
}

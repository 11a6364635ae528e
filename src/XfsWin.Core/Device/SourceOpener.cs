namespace XfsWin.Device;

/// <summary>Turns a user's source string (path, disk, path@partition) into a device.</summary>
public static class SourceOpener
{
    public static IBlockDevice Open(string source, bool writable)
    {
        ArgumentNullException.ThrowIfNull(source);
        return FileBlockDevice.Open(source, writable);
    }
}

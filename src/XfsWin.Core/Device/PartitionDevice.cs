namespace XfsWin.Device;

/// <summary>
/// A window over a base device: bytes [<see cref="Offset"/>, <see cref="Offset"/> + <see cref="Length"/>)
/// of the base appear as bytes [0, Length) of this device. Every request is bounds-checked, so a
/// volume inside a partition can never read or write its neighbours.
/// </summary>
public sealed class PartitionDevice : IBlockDevice
{
    private readonly IBlockDevice _base;
    private readonly bool _ownsBase;

    public PartitionDevice(IBlockDevice baseDevice, long offset, long length, bool ownsBase, string? description = null)
    {
        ArgumentNullException.ThrowIfNull(baseDevice);
        if (offset < 0 || length < 0 || offset > baseDevice.Length || length > baseDevice.Length - offset)
            throw new XfsException(XfsError.InvalidArgument,
                $"partition window [{offset}, {offset}+{length}) does not fit in a device of {baseDevice.Length} bytes: " +
                "the partition table points past the end of the disk (truncated image?)");
        _base = baseDevice;
        _ownsBase = ownsBase;
        Offset = offset;
        Length = length;
        IoMode = description is null ? baseDevice.IoMode : $"{baseDevice.IoMode}, {description}";
    }

    /// <summary>Where the window starts on the base device, in bytes.</summary>
    public long Offset { get; }

    public long Length { get; }

    public int SectorSize => _base.SectorSize;

    public bool CanWrite => _base.CanWrite;

    public string IoMode { get; }

    public IBlockDevice BaseDevice => _base;

    private void Check(long offset, int count)
    {
        if (offset < 0 || count < 0 || offset > Length || count > Length - offset)
            throw new XfsException(XfsError.IoError,
                $"access of {count} bytes at byte {offset} is outside the partition ({Length} bytes); refusing to touch the rest of the disk");
    }

    public void Read(long offset, Span<byte> destination)
    {
        Check(offset, destination.Length);
        _base.Read(Offset + offset, destination);
    }

    public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
    {
        Check(offset, destination.Length);
        return _base.ReadAsync(Offset + offset, destination, cancellationToken);
    }

    public void Write(long offset, ReadOnlySpan<byte> source)
    {
        Check(offset, source.Length);
        _base.Write(Offset + offset, source);
    }

    public void Flush() => _base.Flush();

    public void Dispose()
    {
        if (_ownsBase) _base.Dispose();
    }
}

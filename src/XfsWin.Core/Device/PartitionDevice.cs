namespace XfsWin.Device;

/// <summary>
/// A window over a base device: bytes [<see cref="Offset"/>, <see cref="Offset"/> + <see cref="Length"/>)
/// of the base appear as bytes [0, Length) of this device. Every request is bounds-checked, so a
/// volume inside a partition can never read or write its neighbours. A window opened as partition N of a
/// table (<see cref="PartitionNumber"/>) re-reads that table when asked for its size again
/// (<see cref="RefreshLength"/>): a partition extended in place since the open grows the window.
/// </summary>
public sealed class PartitionDevice : IBlockDevice
{
    private readonly IBlockDevice _base;
    private readonly bool _ownsBase;
    private long _length;

    /// <summary>The partition's number in the base device's table, or null for a window given by bytes alone.</summary>
    public int? PartitionNumber { get; init; }

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
        _length = length;
        IoMode = description is null ? baseDevice.IoMode : $"{baseDevice.IoMode}, {description}";
    }

    /// <summary>Where the window starts on the base device, in bytes.</summary>
    public long Offset { get; }

    public long Length => Volatile.Read(ref _length);

    /// <summary>
    /// The partition's size as its table says now (the base device's size asked again first), for an online grow
    /// after the partition was extended. The partition must still start where it did; a size below the open size is
    /// not taken (the volume is not cut short). A window given by bytes alone keeps its size.
    /// </summary>
    public long RefreshLength()
    {
        if (PartitionNumber is not int number) return Length;
        _base.RefreshLength();
        var entry = PartitionTable.Read(_base).Get(number);
        if (entry.StartByte != Offset)
            throw new XfsException(XfsError.InvalidArgument,
                $"partition {number} now starts at byte {entry.StartByte}, not at byte {Offset} where the volume is: a partition must keep its start " +
                "to grow (extend it in place, e.g. delete and recreate it with the same start sector). Nothing was written.");
        if (entry.LengthBytes > Volatile.Read(ref _length)) Volatile.Write(ref _length, entry.LengthBytes);
        return Length;
    }

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

    public void WritePieces(ReadOnlySpan<byte> source, ReadOnlySpan<WritePiece> pieces)
    {
        if (pieces.Length <= StackPieces)
        {
            Span<WritePiece> moved = stackalloc WritePiece[pieces.Length];
            WritePiecesMoved(source, pieces, moved);
        }
        else
        {
            WritePiecesMoved(source, pieces, new WritePiece[pieces.Length]);
        }
    }

    private const int StackPieces = 256;

    private void WritePiecesMoved(ReadOnlySpan<byte> source, ReadOnlySpan<WritePiece> pieces, Span<WritePiece> moved)
    {
        for (int i = 0; i < pieces.Length; i++)
        {
            Check(pieces[i].Offset, pieces[i].Length);
            moved[i] = pieces[i] with { Offset = Offset + pieces[i].Offset };
        }
        _base.WritePieces(source, moved);
    }

    public void Flush() => _base.Flush();

    public void Dispose()
    {
        if (_ownsBase) _base.Dispose();
    }
}

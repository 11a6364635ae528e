using XfsWin.Device;

namespace XfsWin.Volume;

/// <summary>
/// Whether a read-write open was shut down by a device failure, and why (the first failure). Shared by the data and
/// log devices of one open.
/// </summary>
internal sealed class DeviceShutdown
{
    private Exception? _reason;

    /// <summary>The first write or flush the device failed, or null while none has.</summary>
    public Exception? Reason => Volatile.Read(ref _reason);

    /// <summary>The error every change gets once the volume is shut down.</summary>
    public XfsException Refusal(string what) =>
        new(XfsError.IoError,
            $"{what}: the volume was shut down after the device failed a write or flush ({Reason?.Message}); nothing more is written to it. " +
            "Unmount it; Linux (or xfswin) replays its log at the next mount.", Reason);

    /// <summary>Records <paramref name="failure"/> (the first one stays) and returns the error the failing call throws.</summary>
    public XfsException Record(Exception failure, string what)
    {
        Interlocked.CompareExchange(ref _reason, failure, null);
        return new XfsException(XfsError.IoError,
            $"{what} failed ({failure.Message}): the volume is shut down and writes nothing more to the device. " +
            "Unmount it; Linux (or xfswin) replays its log at the next mount.", failure);
    }
}

/// <summary>
/// The device a read-write open writes through. The first write or flush the device fails shuts the volume down, as
/// the kernel's XFS does on a metadata or log I/O error (xfs_force_shutdown): that call throws
/// <see cref="XfsException"/> (<see cref="XfsError.IoError"/>, EIO) whatever the device threw, and every later write
/// or flush is refused without reaching the device, so a transient error cannot be followed by writes that assume
/// the failed one landed: what is on disk stays what the log on disk covers, and the next mount replays it. Reads
/// pass through.
/// </summary>
internal sealed class ShutdownOnFailureDevice(IBlockDevice inner, DeviceShutdown shutdown) : IBlockDevice
{
    public DeviceShutdown Shutdown => shutdown;

    public long Length => inner.Length;
    public long RefreshLength() => inner.RefreshLength();
    public int SectorSize => inner.SectorSize;
    public bool CanWrite => inner.CanWrite;
    public string IoMode => inner.IoMode;

    public void Read(long offset, Span<byte> destination) => inner.Read(offset, destination);

    public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default) =>
        inner.ReadAsync(offset, destination, cancellationToken);

    public void Write(long offset, ReadOnlySpan<byte> source)
    {
        if (shutdown.Reason is not null) throw shutdown.Refusal($"writing {source.Length} bytes at {offset}");
        try
        {
            inner.Write(offset, source);
        }
        catch (Exception e)
        {
            throw shutdown.Record(e, $"the device write of {source.Length} bytes at {offset}");
        }
    }

    public void WritePieces(ReadOnlySpan<byte> source, ReadOnlySpan<WritePiece> pieces)
    {
        if (shutdown.Reason is not null) throw shutdown.Refusal($"writing {pieces.Length} pieces from byte {(pieces.Length > 0 ? pieces[0].Offset : 0)}");
        try
        {
            inner.WritePieces(source, pieces);
        }
        catch (Exception e)
        {
            throw shutdown.Record(e, $"the device writes of {pieces.Length} pieces from byte {(pieces.Length > 0 ? pieces[0].Offset : 0)}");
        }
    }

    public void Flush()
    {
        if (shutdown.Reason is not null) throw shutdown.Refusal("flushing the device");
        try
        {
            inner.Flush();
        }
        catch (Exception e)
        {
            throw shutdown.Record(e, "the device flush");
        }
    }

    public void Dispose() => inner.Dispose();
}

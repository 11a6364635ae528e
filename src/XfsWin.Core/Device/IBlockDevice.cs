namespace XfsWin.Device;

/// <summary>
/// A random-access, read/write view of a volume: an image file, a disk, a partition of either, or
/// an overlay. Implementations accept any offset, length and buffer; those that need alignment
/// (unbuffered I/O) bounce through aligned buffers themselves, and go straight into the caller's
/// buffer when it is already sector-aligned. All members are safe to call concurrently.
/// </summary>
public interface IBlockDevice : IDisposable
{
    /// <summary>Size of the device in bytes.</summary>
    long Length { get; }

    /// <summary>
    /// Asks the file or disk for its size again (it may have been extended since it was opened, as before an online
    /// grow) and returns the new <see cref="Length"/>. Devices whose size cannot change return it unchanged.
    /// </summary>
    long RefreshLength() => Length;

    /// <summary>Logical sector size (512 or 4096): the unit of unbuffered I/O.</summary>
    int SectorSize { get; }

    bool CanWrite { get; }

    /// <summary>A short description of how this device does I/O ("O_DIRECT", "buffered: ..."), for <c>info</c>.</summary>
    string IoMode { get; }

    /// <summary>Reads exactly <paramref name="destination"/>.Length bytes at <paramref name="offset"/>; throws <see cref="XfsException"/> (IoError) on a short read.</summary>
    void Read(long offset, Span<byte> destination);

    ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default);

    void Write(long offset, ReadOnlySpan<byte> source);

    void Flush();
}

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

    /// <summary>
    /// Writes each piece of <paramref name="source"/> to its own offset (pieces that do not overlap on the device), and
    /// returns once every piece is written; throws as <see cref="Write"/> does when any fails, after all have finished.
    /// The pieces are unordered among themselves, as writes between two flushes are. A device that can hand the disk
    /// many writes at once does (a file opened unbuffered on Linux submits them in one asynchronous I/O call, which lets
    /// the block layer queue them together); the others write them one by one.
    /// </summary>
    void WritePieces(ReadOnlySpan<byte> source, ReadOnlySpan<WritePiece> pieces)
    {
        foreach (var piece in pieces) Write(piece.Offset, source.Slice(piece.Start, piece.Length));
    }

    void Flush();
}

/// <summary>One piece of <see cref="IBlockDevice.WritePieces"/>: <see cref="Length"/> bytes from <see cref="Start"/> of the source go to <see cref="Offset"/> on the device.</summary>
public readonly record struct WritePiece(long Offset, int Start, int Length);

using XfsWin.Device;

namespace XfsWin.TestSupport;

/// <summary>What a <see cref="FaultyBlockDevice"/> fails.</summary>
public enum FaultKind
{
    /// <summary>
    /// The Nth write: a seeded number of its leading 512-byte sectors (maybe none) reach the device, then it throws; a
    /// write of an in-place metadata block fails whole (see <see cref="FaultyBlockDevice"/>).
    /// </summary>
    Write,
    /// <summary>The Nth flush throws (the writes before it are on the device, but the disk did not promise to keep them).</summary>
    Flush,
}

/// <summary>
/// A device that fails one write or flush, as a disk with a bad sector, a pulled cable or a full thin pool does: the
/// <see cref="Nth"/> write or flush (counted from 1) throws an <see cref="IOException"/>. With
/// <see cref="Persistent"/> every write and flush after it fails too, writing nothing (the device is gone); without,
/// only that one fails and the device works again (a transient error). Reads always pass.
/// <para>
/// A failed write of a metadata block in place (<see cref="CrashImage.IsMetadataBlock"/>) writes none of it: XFS's log
/// recovery skips a logged buffer whose on-disk LSN is at least the item's, so a block whose first sector (holding the
/// LSN) landed and whose other sectors did not stays torn whoever wrote it; the format relies on such writes being
/// atomic. Log records and file data may land in part.
/// </para>
/// </summary>
public sealed class FaultyBlockDevice(IBlockDevice inner, FaultKind kind, int nth, bool persistent, int seed) : IBlockDevice
{
    private readonly object _lock = new();
    private readonly Random _rng = new(seed);
    private int _writes, _flushes;

    public FaultKind Kind => kind;
    public int Nth => nth;
    public bool Persistent => persistent;

    /// <summary>Whether the fault has happened.</summary>
    public bool Failed { get; private set; }

    /// <summary>Writes and flushes asked for so far (failed ones included).</summary>
    public (int Writes, int Flushes) Counts
    {
        get { lock (_lock) return (_writes, _flushes); }
    }

    public long Length => inner.Length;
    public int SectorSize => inner.SectorSize;
    public bool CanWrite => inner.CanWrite;
    public string IoMode => "faulty: " + inner.IoMode;

    public void Read(long offset, Span<byte> destination) => inner.Read(offset, destination);

    public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default) =>
        inner.ReadAsync(offset, destination, cancellationToken);

    public void Write(long offset, ReadOnlySpan<byte> source)
    {
        lock (_lock)
        {
            _writes++;
            if (Failed && persistent)
                throw new IOException($"injected: the device is gone (write of {source.Length} bytes at {offset})");
            if (kind == FaultKind.Write && _writes == nth)
            {
                Failed = true;
                int sectors = (source.Length + CrashImage.SectorBytes - 1) / CrashImage.SectorBytes;
                int kept = CrashImage.IsMetadataBlock(source) ? 0 : _rng.Next(sectors);
                if (kept > 0) inner.Write(offset, source[..Math.Min(source.Length, kept * CrashImage.SectorBytes)]);
                throw new IOException($"injected: write {nth} of {source.Length} bytes at {offset} failed after {kept} of {sectors} sectors");
            }
            inner.Write(offset, source);
        }
    }

    public void Flush()
    {
        lock (_lock)
        {
            _flushes++;
            if (Failed && persistent) throw new IOException("injected: the device is gone (flush)");
            if (kind == FaultKind.Flush && _flushes == nth)
            {
                Failed = true;
                throw new IOException($"injected: flush {nth} failed");
            }
            inner.Flush();
        }
    }

    public void Dispose() => inner.Dispose();
}

using XfsWin.Device;
using XfsWin.Volume;

using XfsWin.Cli.Output;

namespace XfsWin.Cli.Output;

/// <summary>
/// Streams a file's data out of the volume in large reads into two aligned buffers: while one is
/// written to the destination the next is read from the device, so a copy runs at the speed of
/// the slower side. Aligned buffers let unbuffered devices read straight into them.
/// </summary>
public sealed class FileCopy : IDisposable
{
    public const int ChunkSize = 4 << 20;
    private readonly AlignedBuffer[] _buffers = [new(ChunkSize), new(ChunkSize)];

    /// <summary>Copies all <paramref name="size"/> bytes of <paramref name="inode"/> to <paramref name="destination"/>.</summary>
    public long Copy(XfsVolume volume, ulong inode, long size, Stream destination, CliProgress progress, CancellationToken cancellationToken = default)
    {
        if (size <= 0) return 0;
        long offset = 0;
        int current = 0;
        int n = ReadChunk(volume, inode, offset, size, _buffers[current]);
        while (n > 0)
        {
            cancellationToken.ThrowIfCancellationRequested();
            long nextOffset = offset + n;
            var next = _buffers[current ^ 1];
            Task<int>? pending = nextOffset < size
                ? Task.Run(() => ReadChunk(volume, inode, nextOffset, size, next), cancellationToken)
                : null;
            try
            {
                destination.Write(_buffers[current].Span[..n]);
            }
            finally
            {
                // Never leave a read running into a buffer we might dispose.
                if (pending is not null && !pending.IsCompleted) ((IAsyncResult)pending).AsyncWaitHandle.WaitOne();
            }
            progress.Add(n);
            offset = nextOffset;
            current ^= 1;
            n = pending is null ? 0 : pending.GetAwaiter().GetResult();
        }
        if (offset < size)
            throw new XfsException(XfsError.Corrupt, $"inode {inode}: read stopped at byte {offset} of {size}");
        return offset;
    }

    private static int ReadChunk(XfsVolume volume, ulong inode, long offset, long size, AlignedBuffer buffer)
    {
        int want = (int)Math.Min(buffer.Length, size - offset);
        return volume.Read(inode, offset, buffer.Span[..want]);
    }

    public void Dispose()
    {
        foreach (var b in _buffers) b.Dispose();
    }
}

using XfsWin.Device;

namespace XfsWin.Journal;

/// <summary>
/// The device writes of one AIL push, combined: images are added in the order they must land (LSN order, and the
/// CIL's order within a checkpoint), and <see cref="WriteOut"/> writes what that order leaves on disk (the last image
/// added wins where images overlap) as few large writes in ascending disk order. An inode's 512 bytes, a buffer of
/// a few KiB and the inodes around it then go out as one write of their cluster instead of one write each.
/// Not thread-safe: used by one writeback call at a time.
/// </summary>
public sealed class WritebackBatch
{
    /// <summary>Largest write the batch makes of images that only touch (overlapping ones are always written together).</summary>
    public const int MaxWrite = 1 << 20;

    private readonly List<(long Offset, byte[] Image, int Order)> _pieces = new();

    public int Count => _pieces.Count;

    /// <summary>Device writes the last <see cref="WriteOut"/> issued.</summary>
    public int Writes { get; private set; }

    /// <summary>
    /// <paramref name="image"/> goes to byte <paramref name="offset"/> after every image added before it. The batch keeps
    /// the array: the caller does not change it afterwards.
    /// </summary>
    public void Add(long offset, byte[] image)
    {
        if (offset < 0 || image.Length == 0) throw new ArgumentException($"writeback image at {offset} (+{image.Length})");
        _pieces.Add((offset, image, _pieces.Count));
    }

    /// <summary>
    /// Writes everything added, in ascending disk order, touching images merged, the writes of up to
    /// <see cref="StagingSize"/> bytes handed to the device together (<see cref="IBlockDevice.WritePieces"/>: they do
    /// not overlap, and their order among themselves does not matter before the flush that follows a writeback); then
    /// empties the batch.
    /// </summary>
    public void WriteOut(IBlockDevice device)
    {
        Writes = 0;
        if (_pieces.Count == 0) return;
        _pieces.Sort(static (a, b) => a.Offset != b.Offset ? a.Offset.CompareTo(b.Offset) : a.Order.CompareTo(b.Order));
        AlignedBuffer? large = null;
        long total = 0;
        foreach (var piece in _pieces) total += piece.Image.Length;
        // Room for every image, each run starting on a sector boundary, up to StagingSize.
        var staging = new AlignedBuffer((int)Math.Min(StagingSize, total + (long)SectorAlign * Math.Min(_pieces.Count, _runs.Length)));
        try
        {
            int capacity = staging.Length;
            int used = 0, count = 0;
            int i = 0;
            while (i < _pieces.Count)
            {
                // A run: pieces that overlap (always merged, so that their order holds) or touch (merged up to MaxWrite).
                long start = _pieces[i].Offset, end = start + _pieces[i].Image.Length;
                int j = i + 1;
                while (j < _pieces.Count && (_pieces[j].Offset < end ||
                       _pieces[j].Offset == end && _pieces[j].Offset + _pieces[j].Image.Length - start <= MaxWrite))
                {
                    end = Math.Max(end, _pieces[j].Offset + _pieces[j].Image.Length);
                    j++;
                }
                int length = (int)(end - start);
                // Runs start at sector-aligned places in the staging buffer (images are whole sectors), so that an
                // unbuffered device takes them as they are.
                int at = (used + SectorAlign - 1) & ~(SectorAlign - 1);
                if (count == _runs.Length || at + length > capacity)
                {
                    device.WritePieces(staging.Span[..used], _runs.AsSpan(0, count));
                    used = at = count = 0;
                }
                Span<byte> span;
                if (length > capacity)
                {
                    // Overlapping images merged past the staging buffer's size: a write of their own.
                    if (large is null || large.Length < length)
                    {
                        large?.Dispose();
                        large = new AlignedBuffer(length);
                    }
                    span = large.Span[..length];
                }
                else
                {
                    span = staging.Span.Slice(at, length);
                }
                if (j == i + 1)
                {
                    _pieces[i].Image.CopyTo(span);
                }
                else
                {
                    // Overlapping images land in the order they were added.
                    var run = _pieces.GetRange(i, j - i);
                    run.Sort(static (a, b) => a.Order.CompareTo(b.Order));
                    foreach (var (offset, image, _) in run) image.CopyTo(span[(int)(offset - start)..]);
                }
                if (length > capacity)
                {
                    device.Write(start, span);
                }
                else
                {
                    _runs[count++] = new WritePiece(start, at, length);
                    used = at + length;
                }
                Writes++;
                i = j;
            }
            if (count != 0) device.WritePieces(staging.Span[..used], _runs.AsSpan(0, count));
        }
        finally
        {
            staging.Dispose();
            large?.Dispose();
            _pieces.Clear();
        }
    }

    /// <summary>Bytes of merged writes handed to the device together.</summary>
    public const int StagingSize = 4 << 20;
    private const int SectorAlign = 4096;
    private readonly WritePiece[] _runs = new WritePiece[256];
}

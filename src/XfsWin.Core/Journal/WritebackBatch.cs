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

    /// <summary>Writes everything added, in ascending disk order, touching images merged; then empties the batch.</summary>
    public void WriteOut(IBlockDevice device)
    {
        Writes = 0;
        if (_pieces.Count == 0) return;
        _pieces.Sort(static (a, b) => a.Offset != b.Offset ? a.Offset.CompareTo(b.Offset) : a.Order.CompareTo(b.Order));
        AlignedBuffer? buffer = null;
        try
        {
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
                if (j == i + 1)
                {
                    device.Write(start, _pieces[i].Image);
                }
                else
                {
                    if (buffer is null || buffer.Length < length)
                    {
                        buffer?.Dispose();
                        buffer = new AlignedBuffer(Math.Max(length, 64 << 10));
                    }
                    var span = buffer.Span[..length];
                    // Overlapping images land in the order they were added.
                    var run = _pieces.GetRange(i, j - i);
                    run.Sort(static (a, b) => a.Order.CompareTo(b.Order));
                    foreach (var (offset, image, _) in run) image.CopyTo(span[(int)(offset - start)..]);
                    device.Write(start, span);
                }
                Writes++;
                i = j;
            }
        }
        finally
        {
            buffer?.Dispose();
            _pieces.Clear();
        }
    }
}

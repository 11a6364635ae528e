using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Admin;

/// <summary>
/// The metadata buffers one offline transaction of an admin tool changes: each read once from the device and
/// verified, changed in a private image, and handed to the log as <see cref="BufferLogItem"/>s holding the changed
/// 128-byte chunks. Nothing here writes to the device: the log's writeback does, after the commit.
/// Used by one thread; the tool holds the device exclusively (offline).
/// </summary>
internal sealed class LoggedBuffers(IBlockDevice device)
{
    private sealed class Entry(byte[] image, BufType type)
    {
        public readonly byte[] Image = image;
        public readonly BufType Type = type;
        public readonly List<(int Offset, int Length)> Dirty = [];
    }

    private readonly Dictionary<long, Entry> _entries = [];

    /// <summary>
    /// The buffer at <paramref name="byteOffset"/>, verified by <paramref name="verify"/> on first read (a failure is
    /// corruption naming <paramref name="structure"/>); later calls return the same, possibly changed, image.
    /// </summary>
    public byte[] Read(long byteOffset, int length, BufType type, string structure, Func<byte[], long, VerifyResult> verify)
    {
        if (_entries.TryGetValue(byteOffset, out var known))
        {
            if (known.Image.Length != length) throw new InvalidOperationException($"buffer at {byteOffset} asked for as {length} bytes, held as {known.Image.Length}");
            return known.Image;
        }
        var image = new byte[length];
        device.Read(byteOffset, image);
        var result = verify(image, byteOffset);
        if (!result.IsOk) throw new XfsCorruptionException(structure, byteOffset, result.ToString());
        _entries.Add(byteOffset, new Entry(image, type));
        return image;
    }

    /// <summary>A block about to be initialised (taken from the free list): zeroed, and logged whole.</summary>
    public byte[] New(long byteOffset, int length, BufType type)
    {
        var entry = new Entry(new byte[length], type);
        _entries[byteOffset] = entry;
        entry.Dirty.Add((0, length));
        return entry.Image;
    }

    /// <summary>Bytes [offset, offset+length) of the buffer at <paramref name="byteOffset"/> changed.</summary>
    public void Changed(long byteOffset, int offset, int length)
    {
        if (!_entries.TryGetValue(byteOffset, out var entry)) throw new InvalidOperationException($"buffer at {byteOffset} is not part of this change");
        entry.Dirty.Add((offset, length));
    }

    /// <summary>A block left its tree: whatever this transaction changed in it is not written.</summary>
    public void Forget(long byteOffset) => _entries.Remove(byteOffset);

    /// <summary>One log item per changed buffer, in disk order.</summary>
    public List<BufferLogItem> Items()
    {
        var items = new List<BufferLogItem>();
        foreach (var (offset, entry) in _entries.OrderBy(e => e.Key))
        {
            if (entry.Dirty.Count == 0) continue;
            var (first, firstLength) = entry.Dirty[0];
            var item = BufferLogItem.Create(offset >> LogArea.BBShift, entry.Image.Length >> LogArea.BBShift, entry.Type, entry.Image, first, firstLength);
            for (int i = 1; i < entry.Dirty.Count; i++) item.MarkDirty(entry.Dirty[i].Offset, entry.Dirty[i].Length);
            items.Add(item);
        }
        return items;
    }
}

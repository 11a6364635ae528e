using System.Buffers.Binary;
using System.Numerics;

namespace XfsWin.Journal;

/// <summary>
/// A metadata buffer as the log carries it (xfs_buf_log_format): (daddr, length in BB), the buffer type for the
/// recovery verifier, the dirty bitmap of 128-byte chunks, then one region per run of dirty chunks holding the
/// buffer's newest bytes. A cancel item (the buffer was freed) carries the format alone, with CANCEL set, so that
/// recovery skips every earlier image of the range.
/// </summary>
public sealed class BufferLogItem : JournalItem
{
    /// <summary>Regions of data an item may have besides its format (XLOG_MAX_REGIONS_IN_ITEM - 1).</summary>
    private const int MaxDataRegions = LogItemType.MaxRegionsInItem - 1;

    private byte[] _image;
    private uint[] _map;
    private int _regions = -1, _bytes = -1;

    private BufferLogItem(long daddr, int lengthBB, BufType type, ushort flags, byte[] image)
    {
        _image = image;
        _map = [];
        Set(daddr, lengthBB, type, flags, image);
    }

    /// <summary>What the item logs (its map cleared, and made anew only for a buffer of another length).</summary>
    private void Set(long daddr, int lengthBB, BufType type, ushort flags, byte[] image)
    {
        if (lengthBB <= 0 || lengthBB > ushort.MaxValue) throw new ArgumentOutOfRangeException(nameof(lengthBB));
        int words = (ChunksOf(lengthBB) + 31) / 32;
        if (words > BufLogFormat.MaxMapWords) throw new ArgumentOutOfRangeException(nameof(lengthBB), $"a buffer of {lengthBB} BB is larger than one log item can carry");
        Daddr = daddr;
        LengthBB = lengthBB;
        Type = type;
        Flags = flags;
        _image = image;
        if (_map.Length != words) _map = new uint[words];
        else Array.Clear(_map);
        _regions = _bytes = -1;
    }

    private static int ChunksOf(int lengthBB) => (lengthBB << LogArea.BBShift) / BufLogFormat.ChunkSize;

    /// <summary>Marks the chunks set in <paramref name="dirtyChunks"/> (bits past the buffer's last chunk dropped).</summary>
    private BufferLogItem WithDirty(ReadOnlySpan<uint> dirtyChunks)
    {
        if (dirtyChunks.Length > _map.Length) throw new ArgumentException("dirty bitmap longer than the buffer", nameof(dirtyChunks));
        dirtyChunks.CopyTo(_map);
        int chunks = ChunksOf(LengthBB);
        if (chunks % 32 != 0) _map[^1] &= (1u << (chunks % 32)) - 1;
        return this;
    }

    private static void CheckImage(int lengthBB, int imageLength, ushort flags)
    {
        if (imageLength != lengthBB << LogArea.BBShift) throw new ArgumentException($"image of {imageLength} bytes for a buffer of {lengthBB} BB", nameof(imageLength));
        if ((flags & BufLogFormat.FlagCancel) != 0) throw new ArgumentException("use Cancel for a freed buffer", nameof(flags));
    }

    public long Daddr { get; private set; }
    public int LengthBB { get; private set; }
    public BufType Type { get; private set; }
    /// <summary>blf_flags without the type bits: INODE_BUF, CANCEL, dquot kinds.</summary>
    public ushort Flags { get; private set; }
    public bool IsCancel => (Flags & BufLogFormat.FlagCancel) != 0;
    /// <summary>The buffer's newest logged contents (LengthBB × 512 bytes; empty for a cancel).</summary>
    public ReadOnlySpan<byte> Image => _image;

    /// <summary>The array <see cref="Image"/> is (the committed bytes themselves for an item made by <see cref="CreateShared"/>).</summary>
    internal byte[] ImageArray => _image;
    public override LogItemKey Key => new(LogItemType.Buf, Daddr, LengthBB);

    /// <summary>A buffer item logging the byte range [offset, offset+length) of <paramref name="image"/> (rounded out to 128-byte chunks).</summary>
    public static BufferLogItem Create(long daddr, int lengthBB, BufType type, ReadOnlySpan<byte> image, int offset, int length, ushort flags = 0)
    {
        var item = New(daddr, lengthBB, type, image, flags);
        item.MarkDirty(offset, length);
        return item;
    }

    /// <summary>A buffer item logging the chunks set in <paramref name="dirtyChunks"/> (bit i, LSB first in each word, = bytes [128i, 128i+128)).</summary>
    public static BufferLogItem Create(long daddr, int lengthBB, BufType type, ReadOnlySpan<byte> image, ReadOnlySpan<uint> dirtyChunks, ushort flags = 0) =>
        New(daddr, lengthBB, type, image, flags).WithDirty(dirtyChunks);

    /// <summary>
    /// As <see cref="Create(long, int, BufType, ReadOnlySpan{byte}, ReadOnlySpan{uint}, ushort)"/>, keeping
    /// <paramref name="image"/> itself instead of a copy: the caller never changes it afterwards (a committed buffer's
    /// bytes, which the next change copies before changing).
    /// </summary>
    public static BufferLogItem CreateShared(long daddr, int lengthBB, BufType type, byte[] image, ReadOnlySpan<uint> dirtyChunks, ushort flags = 0)
    {
        CheckImage(lengthBB, image.Length, flags);
        return new BufferLogItem(daddr, lengthBB, type, flags, image).WithDirty(dirtyChunks);
    }

    /// <summary>
    /// <see cref="CreateShared(long, int, BufType, byte[], ReadOnlySpan{uint}, ushort)"/> made in <paramref name="spent"/>
    /// when the log merged that item into one it already held (<see cref="JournalItem.MergedAway"/>: nothing refers to
    /// the object any more; its image array went to the item it merged into and is not reused), else a new item.
    /// </summary>
    public static BufferLogItem CreateShared(BufferLogItem? spent, long daddr, int lengthBB, BufType type, byte[] image, ReadOnlySpan<uint> dirtyChunks, ushort flags = 0)
    {
        if (spent is null || !spent.MergedAway) return CreateShared(daddr, lengthBB, type, image, dirtyChunks, flags);
        CheckImage(lengthBB, image.Length, flags);
        spent.Reclaim();
        spent.Set(daddr, lengthBB, type, flags, image);
        return spent.WithDirty(dirtyChunks);
    }

    /// <summary>The longest buffer the kernel logs in one item (XFS_MAX_BLOCKSIZE, 64 KiB; the data map has room for it), in BB.</summary>
    public const int MaxLengthBB = (64 << 10) >> LogArea.BBShift;

    /// <summary>The cancel item for a freed buffer: recovery replays no image of (daddr, length) logged before it.</summary>
    public static BufferLogItem Cancel(long daddr, int lengthBB) =>
        new(daddr, lengthBB, BufType.Unknown, BufLogFormat.FlagCancel, []);

    private static BufferLogItem New(long daddr, int lengthBB, BufType type, ReadOnlySpan<byte> image, ushort flags)
    {
        CheckImage(lengthBB, image.Length, flags);
        return new BufferLogItem(daddr, lengthBB, type, flags, image.ToArray());
    }

    public void MarkDirty(int offset, int length)
    {
        if (offset < 0 || length <= 0 || offset + length > _image.Length) throw new ArgumentOutOfRangeException(nameof(offset), $"range {offset}+{length} outside a buffer of {_image.Length} bytes");
        int first = offset / BufLogFormat.ChunkSize, last = (offset + length - 1) / BufLogFormat.ChunkSize;
        for (int c = first; c <= last; c++) _map[c >> 5] |= 1u << (c & 31);
        _regions = _bytes = -1;
    }

    public bool IsChunkDirty(int chunk) => (_map[chunk >> 5] >> (chunk & 31) & 1) != 0;

    private int Chunks => _image.Length / BufLogFormat.ChunkSize;
    private int FormatSize => BufLogFormat.OffDataMap + 4 * _map.Length;

    /// <summary>Runs of dirty chunks as (first chunk, count); beyond <see cref="MaxDataRegions"/> runs the whole span between the first and last dirty chunk is one run.</summary>
    private List<(int First, int Count)> Runs()
    {
        var runs = new List<(int, int)>();
        if (IsCancel) return runs;
        for (int c = 0; NextRun(ref c, out int first, out int count);) runs.Add((first, count));
        if (runs.Count > MaxDataRegions)
        {
            var (first, _) = runs[0];
            var (lastStart, lastCount) = runs[^1];
            runs.Clear();
            runs.Add((first, lastStart + lastCount - first));
        }
        return runs;
    }

    /// <summary>The next run of dirty chunks at or after chunk <paramref name="from"/> (moved past it); false when there is none.</summary>
    private bool NextRun(ref int from, out int first, out int count)
    {
        int n = Chunks;
        while (from < n && !IsChunkDirty(from)) from++;
        first = from;
        while (from < n && IsChunkDirty(from)) from++;
        count = from - first;
        return count > 0;
    }

    private void Measure()
    {
        if (_regions >= 0) return;
        // What Runs() gives, counted without making the list (this runs at every relog the CIL merges).
        int runs = 0, chunks = 0, spanFirst = -1, spanEnd = 0;
        if (!IsCancel)
        {
            for (int c = 0; NextRun(ref c, out int first, out int count);)
            {
                if (spanFirst < 0) spanFirst = first;
                spanEnd = first + count;
                runs++;
                chunks += count;
            }
            // Past the region cap the whole span between the first and last dirty chunk is one run.
            if (runs > MaxDataRegions)
            {
                runs = 1;
                chunks = spanEnd - spanFirst;
            }
        }
        _regions = 1 + runs;
        _bytes = FormatSize + chunks * BufLogFormat.ChunkSize;
    }

    public override int RegionCount { get { Measure(); return _regions; } }
    public override int FormattedBytes { get { Measure(); return _bytes; } }

    public override void Format(List<ReadOnlyMemory<byte>> regions, LogFormatArena arena)
    {
        var runs = Runs();
        var format = arena.Take(FormatSize);
        var f = format.Span;
        BinaryPrimitives.WriteUInt16LittleEndian(f[BufLogFormat.OffType..], LogItemType.Buf);
        BinaryPrimitives.WriteUInt16LittleEndian(f[BufLogFormat.OffSize..], (ushort)(1 + runs.Count));
        BinaryPrimitives.WriteUInt16LittleEndian(f[BufLogFormat.OffFlags..], (ushort)(Flags | (int)Type << BufLogFormat.TypeShift));
        BinaryPrimitives.WriteUInt16LittleEndian(f[BufLogFormat.OffLen..], (ushort)LengthBB);
        BinaryPrimitives.WriteInt64LittleEndian(f[BufLogFormat.OffBlkno..], Daddr);
        BinaryPrimitives.WriteInt32LittleEndian(f[BufLogFormat.OffMapSize..], _map.Length);
        // A run spread over several regions would log the same bytes; a whole-span run after the region cap logs the gaps too.
        if (runs.Count == 1 && !RunMatchesMap(runs[0]))
        {
            var (first, count) = runs[0];
            for (int c = first; c < first + count; c++) f[(BufLogFormat.OffDataMap + 4 * (c >> 5))..][(c & 31) >> 3] |= (byte)(1 << (c & 7));
        }
        else
        {
            for (int i = 0; i < _map.Length; i++) BinaryPrimitives.WriteUInt32LittleEndian(f[(BufLogFormat.OffDataMap + 4 * i)..], _map[i]);
        }
        regions.Add(format);
        foreach (var (first, count) in runs)
            regions.Add(_image.AsMemory(first * BufLogFormat.ChunkSize, count * BufLogFormat.ChunkSize));
    }

    private bool RunMatchesMap((int First, int Count) run)
    {
        for (int c = 0; c < Chunks; c++)
            if (IsChunkDirty(c) != (c >= run.First && c < run.First + run.Count)) return false;
        return true;
    }

    public override void MergeNewer(JournalItem newer)
    {
        var n = (BufferLogItem)newer;
        if (n.Key != Key) throw new ArgumentException($"cannot merge {n.Key} into {Key}", nameof(newer));
        if (n.IsCancel)
        {
            // Freed: nothing of the old image may be replayed.
            _image = [];
            Array.Clear(_map);
            Type = BufType.Unknown;
            Flags = BufLogFormat.FlagCancel;
        }
        else if (IsCancel)
        {
            // Freed, then reused in the same checkpoint: only the new contents are logged.
            _image = n._image;
            n._map.CopyTo(_map, 0);
            Type = n.Type;
            Flags = n.Flags;
        }
        else
        {
            _image = n._image;
            for (int i = 0; i < _map.Length; i++) _map[i] |= n._map[i];
            Type = n.Type;
            // INODE_BUF (replay only di_next_unlinked) stays only when both images are: merged with a whole-chunk image
            // (a new inode chunk), every logged chunk is replayed whole from the newest image, which holds both changes.
            ushort inodeBuf = (ushort)(Flags & n.Flags & BufLogFormat.FlagInodeBuf);
            Flags = (ushort)((n.Flags & ~BufLogFormat.FlagInodeBuf) | inodeBuf);
        }
        _regions = _bytes = -1;
    }

    public override JournalItem Snapshot()
    {
        var copy = new BufferLogItem(Daddr, LengthBB, Type, Flags, _image) { Lsn = Lsn };
        _map.CopyTo(copy._map, 0);
        return copy;
    }

    /// <summary>Dirty chunks (for tests and writeback statistics).</summary>
    public int DirtyChunkCount { get { int n = 0; foreach (uint w in _map) n += BitOperations.PopCount(w); return n; } }
}

namespace XfsWin.Journal;

/// <summary>
/// Memory for the regions a checkpoint's items format (item formats, log dinodes, fork copies): each item takes zeroed
/// pieces of it, and the next checkpoint takes the same memory again after <see cref="Reset"/>. The regions are read
/// only until the checkpoint's records are written, and checkpoints are formatted and written one at a time, so one
/// arena per log suffices. Not thread-safe.
/// </summary>
public sealed class LogFormatArena
{
    private const int BlockBytes = 64 << 10;
    // Blocks kept over a reset (4 MiB: the formats of a checkpoint of about 15,000 inodes); a checkpoint that formatted
    // more lets the rest go to the collector.
    private const int BlocksKept = 64;
    private readonly List<byte[]> _blocks = [];
    private int _current, _used;

    /// <summary><paramref name="length"/> zeroed bytes, valid until <see cref="Reset"/>.</summary>
    public Memory<byte> Take(int length)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(length);
        if (length > BlockBytes) return new byte[length];
        if (_blocks.Count == 0) _blocks.Add(new byte[BlockBytes]);
        if (_used + length > BlockBytes)
        {
            _current++;
            _used = 0;
            if (_current == _blocks.Count) _blocks.Add(new byte[BlockBytes]);
        }
        var piece = _blocks[_current].AsMemory(_used, length);
        piece.Span.Clear();
        _used += length;
        return piece;
    }

    /// <summary>Every piece taken so far is given back (the caller no longer reads any of them).</summary>
    public void Reset()
    {
        _current = 0;
        _used = 0;
        if (_blocks.Count > BlocksKept) _blocks.RemoveRange(BlocksKept, _blocks.Count - BlocksKept);
    }
}

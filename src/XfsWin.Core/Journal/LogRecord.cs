using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// One log record read from disk: its header fields and its data with the cycle words put back
/// (valid until the reader reads the next record).
/// </summary>
public sealed class LogRecord
{
    public long Block { get; internal set; }
    public uint Cycle { get; internal set; }
    public uint Version { get; internal set; }
    public ulong Lsn { get; internal set; }
    public ulong TailLsn { get; internal set; }
    public int Len { get; internal set; }
    public int NumLogops { get; internal set; }
    public int Size { get; internal set; }
    public int HeaderBlocks { get; internal set; }
    public bool CrcOk { get; internal set; }
    public uint StoredCrc { get; internal set; }
    public ReadOnlyMemory<byte> Data { get; internal set; }

    /// <summary>Blocks the record occupies: header sectors plus data (the data includes the stripe pad on v2).</summary>
    public long TotalBlocks => HeaderBlocks + LogArea.BytesToBlocks(Len);
}

/// <summary>
/// Reads log records: validates the header (xlog_valid_rec_header), reads the extended headers and the
/// data in one go, checks the CRC (xlog_cksum, with the 324-byte i386 variant) and unpacks the cycle
/// data (xlog_unpack_data).
/// </summary>
public sealed class LogReader
{
    /// <summary>XLOG_MAX_RECORD_BSIZE.</summary>
    public const int MaxRecordSize = 256 * 1024;
    private readonly LogArea _area;
    private readonly Guid _fsUuid;
    private byte[] _buffer = new byte[LogRecordHeader.CycleSize * 2];
    private readonly LogRecord _record = new();
    /// <summary>Read-ahead window over the log: records are read sequentially, so fetch them in large reads.</summary>
    public const int WindowBytes = 4 << 20;
    private readonly byte[] _window = new byte[WindowBytes];
    private long _windowStart = -1, _windowBlocks;

    public LogReader(LogArea area, Guid fsUuid)
    {
        _area = area;
        _fsUuid = fsUuid;
    }

    public LogArea Area => _area;

    /// <summary>Reads blocks through the read-ahead window when they do not wrap the end of the log.</summary>
    private void ReadBlocks(long blk, Span<byte> destination)
    {
        blk = _area.Wrap(blk);
        long count = destination.Length >> LogArea.BBShift;
        if (blk + count > _area.Blocks || destination.Length > WindowBytes)
        {
            _area.Read(blk, destination);
            return;
        }
        if (_windowStart < 0 || blk < _windowStart || blk + count > _windowStart + _windowBlocks)
        {
            _windowStart = blk;
            _windowBlocks = Math.Min(WindowBytes >> LogArea.BBShift, _area.Blocks - blk);
            _area.Read(blk, _window.AsSpan(0, (int)(_windowBlocks << LogArea.BBShift)));
        }
        _window.AsSpan((int)((blk - _windowStart) << LogArea.BBShift), destination.Length).CopyTo(destination);
    }

    /// <summary>Forgets the read-ahead window (after the log was written).</summary>
    public void Invalidate() => _windowStart = -1;

    /// <summary>Only the header sector of the record at <paramref name="blk"/>, or null when the block is not a header.</summary>
    public bool TryReadHeader(long blk, Span<byte> sector)
    {
        ReadBlocks(blk, sector[..LogArea.BBSize]);
        return LogRecordHeader.IsHeader(sector);
    }

    /// <summary>Reads and unpacks the record at <paramref name="blk"/>; throws <see cref="XfsCorruptionException"/> on a malformed header.</summary>
    public LogRecord Read(long blk)
    {
        Span<byte> head = stackalloc byte[LogArea.BBSize];
        ReadBlocks(blk, head);
        var h = new LogRecordHeader(head);
        string? problem = Validate(h, blk);
        if (problem is not null) throw Corrupt(blk, problem);

        int hblks = h.HeaderBlocks;
        int dataBlocks = LogArea.BytesToBlocks(h.Len);
        int total = (hblks + dataBlocks) << LogArea.BBShift;
        if (_buffer.Length < total) _buffer = new byte[Math.Max(total, _buffer.Length * 2)];
        var all = _buffer.AsSpan(0, total);
        ReadBlocks(blk, all);
        var header = all[..LogArea.BBSize];
        var data = all.Slice(hblks << LogArea.BBShift, h.Len);

        _record.Block = _area.Wrap(blk);
        _record.Cycle = h.Cycle;
        _record.Version = h.Version;
        _record.Lsn = h.RecordLsn;
        _record.TailLsn = h.TailLsn;
        _record.Len = h.Len;
        _record.NumLogops = h.NumLogops;
        _record.Size = h.Size;
        _record.HeaderBlocks = hblks;
        _record.StoredCrc = h.Crc;
        _record.CrcOk = CheckCrc(all, hblks, h.Len, h.Crc);

        // Put back the first word of every data block.
        for (int i = 0; i < dataBlocks; i++)
        {
            int j = i / LogRecordHeader.CycleDataSlots, k = i % LogRecordHeader.CycleDataSlots;
            if (j >= hblks) throw Corrupt(blk, $"record of {h.Len} bytes needs more than its {hblks} header sectors");
            int slotOffset = j == 0 ? LogRecordHeader.OffCycleData + 4 * k : (j << LogArea.BBShift) + LogExtendedHeader.OffCycleData + 4 * k;
            uint word = BinaryPrimitives.ReadUInt32BigEndian(all[slotOffset..]);
            BinaryPrimitives.WriteUInt32BigEndian(all[((hblks + i) << LogArea.BBShift)..], word);
        }
        _record.Data = _buffer.AsMemory(hblks << LogArea.BBShift, h.Len);
        _ = header;
        _ = data;
        return _record;
    }

    private string? Validate(LogRecordHeader h, long blk)
    {
        if (h.Magic != LogRecordHeader.HeaderMagic) return $"no record header (magic 0x{h.Magic:x8})";
        if (h.Version == 0 || (h.Version & ~3u) != 0) return $"bad record version {h.Version}";
        int size = (h.Version & 2) != 0 ? h.Size : LogRecordHeader.CycleSize;
        if (size is <= 0 or > MaxRecordSize) return $"bad record buffer size {h.Size}";
        if (h.Len <= 0 || h.Len > Math.Max(size, LogRecordHeader.CycleSize)) return $"bad record length {h.Len} (buffer size {size})";
        if (Lsn.Block(h.RecordLsn) != _area.Wrap(blk)) return $"record LSN {Lsn.Format(h.RecordLsn)} does not match its block {_area.Wrap(blk)}";
        if (Lsn.Cycle(h.RecordLsn) != h.Cycle) return $"record cycle {h.Cycle} does not match its LSN {Lsn.Format(h.RecordLsn)}";
        if (h.Fmt != LogRecordHeader.FmtLinuxLittleEndian)
            return h.Fmt == 2 ? "the log was written by a big-endian machine; XfsWin replays little-endian logs only: mount it on Linux of the same byte order"
                : $"unknown log format {h.Fmt}";
        if (h.FsUuid != _fsUuid) return $"record belongs to another file system (uuid {h.FsUuid}, superblock says {_fsUuid})";
        return null;
    }

    private static bool CheckCrc(ReadOnlySpan<byte> all, int hblks, int len, uint stored)
    {
        uint a = ComputeCrc(all, hblks, len, LogRecordHeader.CrcSize);
        if (a == stored) return true;
        return ComputeCrc(all, hblks, len, LogRecordHeader.CrcSizeOther) == stored;
    }

    /// <summary>xlog_cksum over the header, the extended headers that cover data, and the stored data.</summary>
    public static uint ComputeCrc(ReadOnlySpan<byte> all, int hblks, int len, int headerBytes)
    {
        uint crc = XfsCrc.Update(0xFFFFFFFFu, all[..LogRecordHeader.OffCrc]);
        crc = System.Numerics.BitOperations.Crc32C(crc, 0u);
        crc = XfsCrc.Update(crc, all[(LogRecordHeader.OffCrc + 4)..headerBytes]);
        int extended = (len + LogRecordHeader.CycleSize - 1) / LogRecordHeader.CycleSize;
        for (int i = 1; i < extended && i < hblks; i++)
            crc = XfsCrc.Update(crc, all.Slice(i << LogArea.BBShift, LogExtendedHeader.CrcSize));
        crc = XfsCrc.Update(crc, all.Slice(hblks << LogArea.BBShift, len));
        return ~crc;
    }

    public XfsCorruptionException Corrupt(long blk, string problem) =>
        new(_area.External ? "log record (external log device)" : "log record", _area.ByteOfBlock(blk), $"log block {_area.Wrap(blk)}: {problem}");
}

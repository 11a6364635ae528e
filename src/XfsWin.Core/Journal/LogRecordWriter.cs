using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// Fills and writes log records (the kernel's iclogs) at the head of the log: op headers and payloads packed into
/// the data area, then on submit the v2 record header, the stripe-unit (or sector) padding, cycle stamping (the
/// first word of every 512-byte block saved in the header's cycle data or an extended header, replaced by the
/// cycle), the CRC over header, extended headers and data, and the write, continued at block 0 when the record
/// crosses the physical end of the log (the blocks past the end carry the next cycle).
/// Invariants: every record has the same h_size and header-sector count (recovery takes both from the tail record);
/// records are contiguous; the head only moves by whole records; a record never holds more than h_size − headers.
/// </summary>
public sealed class LogRecordWriter
{
    private readonly LogArea _area;
    private readonly Guid _fsUuid;
    private readonly byte[] _record;
    private readonly int _headerBytes;
    private int _used, _ops;
    private bool _simulating;
    private long _simulatedBlocks;
    private int _simulatedRecords;

    /// <param name="recordSize">h_size: the in-core record size, 32 KiB to 256 KiB; over 32 KiB adds extended header sectors.</param>
    /// <param name="roundoff">What record lengths are rounded to: the log stripe unit, at least the log sector.</param>
    public LogRecordWriter(LogArea area, Guid fsUuid, int recordSize, int roundoff, long headBlock, uint headCycle, long lastRecordBlock)
    {
        if (recordSize < LogRecordHeader.CycleSize || recordSize > LogReader.MaxRecordSize || recordSize % LogArea.BBSize != 0)
            throw new ArgumentOutOfRangeException(nameof(recordSize), $"log record size {recordSize} must be 32 KiB to 256 KiB");
        if (roundoff < LogArea.BBSize || roundoff % LogArea.BBSize != 0 || recordSize % roundoff != 0)
            throw new ArgumentOutOfRangeException(nameof(roundoff), $"log record roundoff {roundoff} must be a multiple of 512 that divides the record size {recordSize}");
        _area = area;
        _fsUuid = fsUuid;
        RecordSize = recordSize;
        HeaderBlocks = recordSize > LogRecordHeader.CycleSize ? (recordSize + LogRecordHeader.CycleSize - 1) / LogRecordHeader.CycleSize : 1;
        _headerBytes = HeaderBlocks << LogArea.BBShift;
        Roundoff = roundoff;
        _record = new byte[recordSize];
        HeadBlock = headBlock;
        HeadCycle = headCycle;
        LastRecordBlock = lastRecordBlock;
    }

    public int RecordSize { get; }
    public int HeaderBlocks { get; }
    public int Roundoff { get; }
    public long HeadBlock { get; private set; }
    public uint HeadCycle { get; private set; }
    public long LastRecordBlock { get; private set; }
    /// <summary>The LSN of the record being filled (where it will be written).</summary>
    public ulong HeadLsn => Lsn.Make(HeadCycle, (uint)HeadBlock);
    public int DataCapacity => RecordSize - _headerBytes;
    public int Remaining => DataCapacity - _used;
    public bool IsEmpty => _used == 0 && _ops == 0;
    public long RecordsWritten { get; private set; }
    public long BlocksWritten { get; private set; }
    public long Wraps { get; private set; }

    /// <summary>Blocks a record with <paramref name="dataBytes"/> of ops takes on disk (headers plus padded data).</summary>
    public int BlocksFor(int dataBytes) => RoundUp(_headerBytes + Math.Max(dataBytes, 1), Roundoff) >> LogArea.BBShift;

    private static int RoundUp(int x, int unit) => (x + unit - 1) / unit * unit;

    /// <summary>Appends an op header and returns the span for <paramref name="payloadLength"/> payload bytes after it.</summary>
    public Span<byte> AppendOp(uint tid, int payloadLength, byte client, byte flags)
    {
        if (LogOpHeader.Size + payloadLength > Remaining) throw new InvalidOperationException($"op of {payloadLength} bytes does not fit the {Remaining} bytes left in the record");
        var at = _record.AsSpan(_headerBytes + _used, LogOpHeader.Size + payloadLength);
        LogOpHeader.Write(at, tid, payloadLength, client, flags);
        _used += LogOpHeader.Size + payloadLength;
        _ops++;
        return at[LogOpHeader.Size..];
    }

    /// <summary>Counts instead of writing until <see cref="EndSimulation"/>: how many blocks a checkpoint will take.</summary>
    public void BeginSimulation()
    {
        if (!IsEmpty) throw new InvalidOperationException("simulation must start on an empty record");
        _simulating = true;
        _simulatedBlocks = 0;
        _simulatedRecords = 0;
    }

    public (long Blocks, int Records) EndSimulation()
    {
        if (!IsEmpty) Submit(0);
        _simulating = false;
        return (_simulatedBlocks, _simulatedRecords);
    }

    /// <summary>Writes the record being filled at the head with <paramref name="tailLsn"/> and moves the head past it; returns its LSN.</summary>
    public ulong Submit(ulong tailLsn)
    {
        int total = BlocksFor(_used);
        if (_simulating)
        {
            _simulatedBlocks += total;
            _simulatedRecords++;
            _used = _ops = 0;
            return 0;
        }
        long n = _area.Blocks;
        long head = HeadBlock;
        uint cycle = HeadCycle;
        uint nextCycle = LogWriter.NextCycle(cycle);
        int hlen = (total << LogArea.BBShift) - _headerBytes;
        int dataBlocks = hlen >> LogArea.BBShift;
        var rec = _record.AsSpan(0, total << LogArea.BBShift);
        rec.Slice(_headerBytes + _used, hlen - _used).Clear();
        rec[.._headerBytes].Clear();

        var h = rec[..LogArea.BBSize];
        ulong lsn = Lsn.Make(cycle, (uint)head);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffMagic..], LogRecordHeader.HeaderMagic);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffCycle..], cycle);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffVersion..], LogRecordHeader.Version2);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffLen..], hlen);
        BinaryPrimitives.WriteUInt64BigEndian(h[LogRecordHeader.OffLsn..], lsn);
        BinaryPrimitives.WriteUInt64BigEndian(h[LogRecordHeader.OffTailLsn..], tailLsn);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffPrevBlock..], LastRecordBlock >= 0 ? (int)LastRecordBlock : -1);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffNumLogops..], _ops);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffFmt..], LogRecordHeader.FmtLinuxLittleEndian);
        _fsUuid.TryWriteBytes(h.Slice(LogRecordHeader.OffFsUuid, 16), bigEndian: true, out _);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffSize..], RecordSize);

        for (int j = 1; j < HeaderBlocks; j++)
            BinaryPrimitives.WriteUInt32BigEndian(rec[((j << LogArea.BBShift) + LogExtendedHeader.OffCycle)..], head + j >= n ? nextCycle : cycle);
        for (int i = 0; i < dataBlocks; i++)
        {
            var block = rec[(_headerBytes + (i << LogArea.BBShift))..];
            int j = i / LogRecordHeader.CycleDataSlots, k = i % LogRecordHeader.CycleDataSlots;
            int slot = j == 0 ? LogRecordHeader.OffCycleData + 4 * k : (j << LogArea.BBShift) + LogExtendedHeader.OffCycleData + 4 * k;
            BinaryPrimitives.WriteUInt32BigEndian(rec[slot..], BinaryPrimitives.ReadUInt32BigEndian(block));
            BinaryPrimitives.WriteUInt32BigEndian(block, head + HeaderBlocks + i >= n ? nextCycle : cycle);
        }
        uint crc = LogReader.ComputeCrc(rec, HeaderBlocks, hlen, LogRecordHeader.CrcSize);
        BinaryPrimitives.WriteUInt32LittleEndian(rec[LogRecordHeader.OffCrc..], crc);
        _area.Write(head, rec);

        LastRecordBlock = head;
        long end = head + total;
        if (end >= n)
        {
            HeadCycle = nextCycle;
            Wraps++;
        }
        HeadBlock = end % n;
        RecordsWritten++;
        BlocksWritten += total;
        _used = _ops = 0;
        return lsn;
    }
}

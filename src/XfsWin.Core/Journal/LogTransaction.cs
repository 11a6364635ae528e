using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>One logged item: its regions (region 0 starts with the u16 type and the u16 region count).</summary>
public sealed class LogItem
{
    public ushort Type => Regions.Count > 0 && Regions[0].Length >= 2 ? BinaryPrimitives.ReadUInt16LittleEndian(Regions[0]) : (ushort)0;
    public int Total { get; internal set; }
    /// <summary>Regions received so far (all of them are in <see cref="Regions"/> unless only format regions are kept).</summary>
    public int Received { get; internal set; }
    /// <summary>Whether the assembler keeps this item's data regions (always, or for the items its filter picks).</summary>
    internal bool KeepData { get; set; }
    public List<byte[]> Regions { get; } = new();
}

/// <summary>A transaction (a CIL checkpoint) assembled from op headers; <see cref="Lsn"/> is the LSN of the record holding its START.</summary>
public sealed class LogTransaction
{
    public LogTransaction(uint tid, ulong lsn)
    {
        Tid = tid;
        Lsn = lsn;
    }

    public uint Tid { get; }
    public ulong Lsn { get; }
    internal byte[] Header { get; } = new byte[TransactionHeader.Size];
    internal int HeaderLength { get; set; }
    public List<LogItem> Items { get; } = new();
}

/// <summary>Picks items by their first (format) region.</summary>
public delegate bool FormatRegionFilter(ReadOnlySpan<byte> formatRegion);

/// <summary>
/// Turns records into committed transactions (xlog_recover_process_data and its helpers): state is
/// kept per transaction id because checkpoints interleave at record boundaries; ops of a tid not
/// started inside the replayed range are skipped; split regions are joined.
/// </summary>
public sealed class TransactionAssembler
{
    private readonly Dictionary<uint, LogTransaction> _open = new();
    private readonly LogReader _reader;
    private readonly Action<LogTransaction> _commit;
    private readonly bool _keepData;
    private readonly FormatRegionFilter? _keepDataOf;

    /// <param name="keepDataRegions">False keeps only each item's first (format) region: enough for the cancel pass.</param>
    /// <param name="keepDataOf">With <paramref name="keepDataRegions"/> false, still keeps the data regions of the items
    /// whose first (format) region this returns true for.</param>
    public TransactionAssembler(LogReader reader, Action<LogTransaction> commit, bool keepDataRegions = true,
        FormatRegionFilter? keepDataOf = null)
    {
        _reader = reader;
        _commit = commit;
        _keepData = keepDataRegions;
        _keepDataOf = keepDataOf;
    }

    public long Commits { get; private set; }
    public int OpenTransactions => _open.Count;

    public void Process(LogRecord rec)
    {
        var data = rec.Data.Span;
        int pos = 0, ops = rec.NumLogops;
        while (pos < data.Length && ops > 0)
        {
            if (pos + LogOpHeader.Size > data.Length) throw _reader.Corrupt(rec.Block, $"op header at data offset {pos} runs past the record");
            var oh = new LogOpHeader(data[pos..]);
            pos += LogOpHeader.Size;
            if (oh.ClientId is not (LogOpHeader.ClientTransaction or LogOpHeader.ClientLog))
                throw _reader.Corrupt(rec.Block, $"op at data offset {pos - LogOpHeader.Size} has unknown client id 0x{oh.ClientId:x2}");
            int len = oh.Len;
            if (len < 0 || pos + len > data.Length) throw _reader.Corrupt(rec.Block, $"op at data offset {pos - LogOpHeader.Size} ({len} bytes) runs past the record");
            ProcessOp(rec, oh.Tid, oh.Flags, data.Slice(pos, len));
            pos += len;
            ops--;
        }
    }

    private void ProcessOp(LogRecord rec, uint tid, byte flags, ReadOnlySpan<byte> payload)
    {
        if (!_open.TryGetValue(tid, out var trans))
        {
            if ((flags & LogOpHeader.FlagStart) != 0) _open[tid] = new LogTransaction(tid, rec.Lsn);
            return;
        }
        int f = flags & ~LogOpHeader.FlagEnd;
        if ((f & LogOpHeader.FlagWasContinued) != 0) f &= ~LogOpHeader.FlagContinue;
        switch (f)
        {
            case 0:
            case LogOpHeader.FlagContinue:
                AddRegion(rec, trans, payload);
                break;
            case LogOpHeader.FlagWasContinued:
                AppendToLastRegion(rec, trans, payload);
                break;
            case LogOpHeader.FlagCommit:
                _open.Remove(tid);
                Commits++;
                _commit(trans);
                break;
            case LogOpHeader.FlagUnmount:
                _open.Remove(tid);
                break;
            default:
                throw _reader.Corrupt(rec.Block, $"transaction 0x{tid:x8} has an op with unexpected flags 0x{flags:x2}");
        }
    }

    private void AddRegion(LogRecord rec, LogTransaction trans, ReadOnlySpan<byte> payload)
    {
        if (payload.Length == 0) return;
        if (trans.HeaderLength < TransactionHeader.Size && trans.Items.Count == 0)
        {
            if (trans.HeaderLength == 0 && (payload.Length < 4 || TransactionHeader.ReadMagic(payload) != TransactionHeader.Magic))
                throw _reader.Corrupt(rec.Block, $"transaction 0x{trans.Tid:x8} does not start with a transaction header");
            if (trans.HeaderLength + payload.Length > TransactionHeader.Size)
                throw _reader.Corrupt(rec.Block, $"transaction 0x{trans.Tid:x8} header is {payload.Length} bytes");
            payload.CopyTo(trans.Header.AsSpan(trans.HeaderLength));
            trans.HeaderLength += payload.Length;
            return;
        }
        var item = trans.Items.Count > 0 ? trans.Items[^1] : null;
        if (item is null || (item.Total != 0 && item.Received == item.Total))
        {
            item = new LogItem();
            trans.Items.Add(item);
        }
        if (item.Total == 0)
        {
            if (payload.Length < 4) throw _reader.Corrupt(rec.Block, $"transaction 0x{trans.Tid:x8}: item's first region is {payload.Length} bytes");
            int size = BinaryPrimitives.ReadUInt16LittleEndian(payload[2..]);
            if (size is 0 or > LogItemType.MaxRegionsInItem)
                throw _reader.Corrupt(rec.Block, $"transaction 0x{trans.Tid:x8}: item region count {size} is out of range");
            item.Total = size;
        }
        if (item.Received == 0) item.KeepData = _keepData || (_keepDataOf?.Invoke(payload) ?? false);
        if (item.Received == 0 || item.KeepData) item.Regions.Add(payload.ToArray());
        item.Received++;
    }

    private void AppendToLastRegion(LogRecord rec, LogTransaction trans, ReadOnlySpan<byte> payload)
    {
        if (payload.Length == 0) return;
        if (trans.Items.Count == 0)
        {
            if (trans.HeaderLength + payload.Length > TransactionHeader.Size)
                throw _reader.Corrupt(rec.Block, $"transaction 0x{trans.Tid:x8}: continued header too long");
            payload.CopyTo(trans.Header.AsSpan(trans.HeaderLength));
            trans.HeaderLength += payload.Length;
            return;
        }
        var item = trans.Items[^1];
        if (item.Received == 0) throw _reader.Corrupt(rec.Block, $"transaction 0x{trans.Tid:x8}: continuation with no region to continue");
        if (item.Regions.Count < item.Received) return; // a data region the cancel pass does not keep
        var old = item.Regions[^1];
        var joined = new byte[old.Length + payload.Length];
        old.CopyTo(joined, 0);
        payload.CopyTo(joined.AsSpan(old.Length));
        item.Regions[^1] = joined;
    }
}

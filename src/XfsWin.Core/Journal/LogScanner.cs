namespace XfsWin.Journal;

/// <summary>Where the log's live region is: replay runs over records from <see cref="TailBlock"/> up to <see cref="HeadBlock"/>.</summary>
public sealed record LogPosition(long HeadBlock, long TailBlock, uint HeadCycle, bool Clean, bool Empty,
    long LastRecordBlock, int RecordSize, int HeaderBlocks, uint Version, ulong LastRecordLsn, IReadOnlyList<string> Warnings)
{
    public ulong HeadLsn => Lsn.Make(HeadCycle, (uint)HeadBlock);
}

/// <summary>
/// Finds the head and tail of the log as xlog_find_head / xlog_find_tail do: binary search for the
/// cycle change, a scan back over the blocks that may still be in flight for older cycles (holes),
/// the last complete record before the head, torn-write trimming of the last records by CRC, and
/// the unmount-record test for a clean log.
/// </summary>
public static class LogScanner
{
    /// <summary>XLOG_TOTAL_REC_SHIFT in BB: 8 records in flight of up to 256 KiB (v2) or 32 KiB (v1).</summary>
    public static long TotalRecordSpan(bool v2) => v2 ? 8 * 256 * 1024 / 512 : 8 * 32 * 1024 / 512;
    /// <summary>Records before the head whose CRC failure counts as a torn write (XLOG_MAX_ICLOGS).</summary>
    public const int TornRecords = 8;

    public static LogPosition Find(LogReader reader, bool v2, bool crcFilesystem)
    {
        var area = reader.Area;
        var warnings = new List<string>();
        Span<byte> bb = stackalloc byte[LogArea.BBSize];
        long n = area.Blocks;

        uint first = area.ReadCycle(0, bb);
        if (first == 0)
            return new LogPosition(0, 0, 1, Clean: true, Empty: true, -1, 0, 1, v2 ? 2u : 1u, 0, warnings);

        uint last = area.ReadCycle(n - 1, bb);
        long head;
        uint stopCycle;
        if (last == 0)
        {
            head = FindCycleStart(area, 0, n - 1, 0, bb);
            stopCycle = 0;
        }
        else if (first == last)
        {
            head = n;
            stopCycle = last - 1;
        }
        else
        {
            head = FindCycleStart(area, 0, n - 1, last, bb);
            stopCycle = last;
        }

        // Writes complete out of order: any block with the stop cycle in the span before the head is a hole.
        long span = Math.Min(n, TotalRecordSpan(v2));
        if (last == 0 || head >= span)
        {
            long hole = FirstWithCycle(area, Math.Max(0, head - span), head, stopCycle, bb);
            if (hole >= 0) head = hole;
        }
        else
        {
            // The span wraps: at the physical end a hole shows one cycle older still.
            long hole = FirstWithCycle(area, n - (span - head), n, stopCycle - 1, bb);
            if (hole < 0) hole = FirstWithCycle(area, 0, head, stopCycle, bb);
            if (hole >= 0) head = hole;
        }

        // The last record before the head must end exactly at the head, or it is incomplete.
        long hdr = FindHeaderBefore(reader, head, Math.Min(n, span + 512), bb);
        if (hdr < 0) throw reader.Corrupt(head, "no log record header found before the head of the log");
        var h = new LogRecordHeader(bb);
        long end = hdr + h.HeaderBlocks + LogArea.BytesToBlocks(h.Len);
        if (area.Wrap(end) != area.Wrap(head))
        {
            warnings.Add($"the last log record (block {area.Wrap(hdr)}) is incomplete; it was dropped");
            head = hdr;
        }
        head = area.Wrap(head);

        // Trim torn records by CRC (xlog_verify_head), then read the tail from the last good record.
        for (int round = 0; ; round++)
        {
            hdr = FindHeaderBefore(reader, head, Math.Min(n, span + 512), bb);
            if (hdr < 0) throw reader.Corrupt(head, "no log record header found before the head of the log");
            var rec = reader.Read(hdr);
            long recEnd = area.Wrap(rec.Block + rec.TotalBlocks);
            bool unmount = recEnd == head && rec.NumLogops == 1 && IsUnmountOp(rec.Data.Span);
            uint headCycle = CycleAtHead(area, head, rec, bb);
            if (unmount)
            {
                return new LogPosition(head, head, headCycle, Clean: true, Empty: false, rec.Block, rec.Size, rec.HeaderBlocks, rec.Version, rec.Lsn, warnings);
            }
            long tail = Lsn.Block(rec.TailLsn);
            if (tail >= n) throw reader.Corrupt(hdr, $"tail LSN {Lsn.Format(rec.TailLsn)} is beyond the log ({n} blocks)");

            if (!crcFilesystem || round > 0)
                return new LogPosition(head, tail, headCycle, Clean: false, Empty: false, rec.Block, rec.Size, rec.HeaderBlocks, rec.Version, rec.Lsn, warnings);

            // The last TornRecords records before the head, oldest first; the first with a bad CRC becomes the head.
            var starts = LastRecordStarts(reader, head, tail, span, TornRecords);
            long newHead = -1;
            foreach (long start in starts)
            {
                var r = reader.Read(start);
                if (!r.CrcOk)
                {
                    newHead = start;
                    warnings.Add($"torn write detected at log block {start} (CRC mismatch): the log was cut there, as Linux does");
                    break;
                }
            }
            if (newHead < 0 || newHead == tail)
            {
                if (newHead == tail)
                    return new LogPosition(tail, tail, Lsn.Cycle(rec.TailLsn), Clean: false, Empty: false, tail, rec.Size, rec.HeaderBlocks, rec.Version, rec.TailLsn, warnings);
                return new LogPosition(head, tail, headCycle, Clean: false, Empty: false, rec.Block, rec.Size, rec.HeaderBlocks, rec.Version, rec.Lsn, warnings);
            }
            head = newHead;
        }
    }

    /// <summary>The cycle the next record at <paramref name="head"/> would carry.</summary>
    private static uint CycleAtHead(LogArea area, long head, LogRecord last, Span<byte> bb)
    {
        _ = bb;
        // The head is in the last record's cycle, unless that record ended exactly at (or wrapped past) the end of the log.
        long end = last.Block + last.TotalBlocks;
        return end >= area.Blocks ? last.Cycle + 1 : last.Cycle;
    }

    private static bool IsUnmountOp(ReadOnlySpan<byte> data) =>
        data.Length >= LogOpHeader.Size && (new LogOpHeader(data).Flags & LogOpHeader.FlagUnmount) != 0;

    public static long Distance(long n, long from, long to) => ((to - from) % n + n) % n;

    /// <summary>xlog_find_cycle_start: first block in (lo, hi] with <paramref name="cycle"/>, given lo does not have it and hi does.</summary>
    private static long FindCycleStart(LogArea area, long lo, long hi, uint cycle, Span<byte> bb)
    {
        while (hi - lo > 1)
        {
            long mid = lo + (hi - lo) / 2;
            if (area.ReadCycle(mid, bb) == cycle) hi = mid;
            else lo = mid;
        }
        return hi;
    }

    /// <summary>First block in [from, to) whose cycle equals <paramref name="cycle"/>, or -1 (xlog_find_verify_cycle).</summary>
    private static long FirstWithCycle(LogArea area, long from, long to, uint cycle, Span<byte> bb)
    {
        _ = bb;
        return FirstWithCycleLinear(area, from, to, cycle, new byte[256 * LogArea.BBSize]);
    }

    private static long FirstWithCycleLinear(LogArea area, long from, long to, uint cycle, byte[] buf)
    {
        int per = buf.Length / LogArea.BBSize;
        for (long b = from; b < to; b += per)
        {
            int count = (int)Math.Min(per, to - b);
            area.Read(b, buf.AsSpan(0, count * LogArea.BBSize));
            for (int i = 0; i < count; i++)
            {
                if (LogArea.CycleOf(buf.AsSpan(i * LogArea.BBSize)) == cycle) return b + i;
            }
        }
        return -1;
    }

    /// <summary>Scans back from head-1 (wrapping) for a record header within <paramref name="limit"/> blocks; leaves it in <paramref name="bb"/>.</summary>
    private static long FindHeaderBefore(LogReader reader, long head, long limit, Span<byte> bb)
    {
        var area = reader.Area;
        const int chunk = 256;
        var buf = new byte[chunk * LogArea.BBSize];
        for (long back = 0; back < limit; back += chunk)
        {
            // Blocks [head-back-count, head-back) read in one go, searched from the end.
            int count = (int)Math.Min(chunk, limit - back);
            long from = head - back - count;
            long wrapped = area.Wrap(from);
            if (wrapped + count <= area.Blocks) area.Read(wrapped, buf.AsSpan(0, count * LogArea.BBSize));
            else
            {
                for (int i = 0; i < count; i++) area.Read(from + i, buf.AsSpan(i * LogArea.BBSize, LogArea.BBSize));
            }
            for (int i = count - 1; i >= 0; i--)
            {
                var block = buf.AsSpan(i * LogArea.BBSize, LogArea.BBSize);
                if (LogRecordHeader.IsHeader(block))
                {
                    block.CopyTo(bb);
                    return area.Wrap(from + i);
                }
            }
        }
        return -1;
    }

    /// <summary>
    /// Starts of up to <paramref name="max"/> records ending at <paramref name="head"/>, oldest first, found by
    /// walking back header by header and keeping only a chain that ends exactly at the head.
    /// </summary>
    private static List<long> LastRecordStarts(LogReader reader, long head, long tail, long span, int max)
    {
        var area = reader.Area;
        long n = area.Blocks;
        Span<byte> bb = stackalloc byte[LogArea.BBSize];
        var starts = new List<long>();
        long end = head;
        long remaining = LogScanner.Distance(n, tail, head);
        while (starts.Count < max && remaining > 0)
        {
            long hdr = FindHeaderBefore(reader, end, Math.Min(remaining, span + 512), bb);
            if (hdr < 0) break;
            var h = new LogRecordHeader(bb);
            long size = h.HeaderBlocks + LogArea.BytesToBlocks(h.Len);
            if (area.Wrap(hdr + size) != area.Wrap(end)) break;
            starts.Add(hdr);
            remaining -= size;
            end = hdr;
        }
        starts.Reverse();
        return starts;
    }
}

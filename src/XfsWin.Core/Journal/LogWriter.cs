using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// Writes log records in the kernel's format. Used after in-place recovery to append the unmount
/// record that marks the log clean, and to overwrite the blocks just past it that may still hold
/// records of the current cycle (xlog_clear_stale_blocks), so the head found next time is ours.
/// </summary>
public static class LogWriter
{
    public static void WriteUnmountRecord(LogArea area, Superblock sb, LogPosition pos)
    {
        long n = area.Blocks;
        int hblks = pos.HeaderBlocks;
        int hsize = pos.RecordSize > 0 ? pos.RecordSize : LogRecordHeader.CycleSize;
        uint version = pos.Version;
        bool v2 = (version & 2) != 0;
        int roundoff = v2 && sb.LogStripeUnit > 1 ? (int)sb.LogStripeUnit : LogArea.BBSize;
        int headerBytes = hblks * LogArea.BBSize;
        int count = (headerBytes + UnmountRecord.Size + roundoff - 1) / roundoff * roundoff;
        int hlen = v2 ? count - headerBytes : UnmountRecord.Size;
        int dataBlocks = LogArea.BytesToBlocks(hlen);
        int totalBlocks = hblks + dataBlocks;
        if (totalBlocks >= n) throw new XfsException(XfsError.Unsupported, "the log is too small to hold an unmount record");

        long head = pos.HeadBlock;
        uint cycle = pos.HeadCycle;
        var rec = new byte[totalBlocks * LogArea.BBSize];
        var data = rec.AsSpan(headerBytes);
        UnmountRecord.Write(data);

        // Header sectors.
        var h = rec.AsSpan(0, LogArea.BBSize);
        ulong lsn = Lsn.Make(cycle, (uint)head);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffMagic..], LogRecordHeader.HeaderMagic);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffCycle..], cycle);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffVersion..], version);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffLen..], hlen);
        BinaryPrimitives.WriteUInt64BigEndian(h[LogRecordHeader.OffLsn..], lsn);
        BinaryPrimitives.WriteUInt64BigEndian(h[LogRecordHeader.OffTailLsn..], lsn);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffPrevBlock..], pos.LastRecordBlock >= 0 ? (int)pos.LastRecordBlock : -1);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffNumLogops..], 1);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffFmt..], LogRecordHeader.FmtLinuxLittleEndian);
        sb.Uuid.TryWriteBytes(h.Slice(LogRecordHeader.OffFsUuid, 16), bigEndian: true, out _);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffSize..], hsize);

        // Cycle-stamp every data block; blocks past the physical end belong to the next cycle.
        for (int i = 0; i < dataBlocks; i++)
        {
            long abs = head + hblks + i;
            uint c = abs >= n ? NextCycle(cycle) : cycle;
            var block = data.Slice(i * LogArea.BBSize);
            uint original = BinaryPrimitives.ReadUInt32BigEndian(block);
            int j = i / LogRecordHeader.CycleDataSlots, k = i % LogRecordHeader.CycleDataSlots;
            int slot = j == 0 ? LogRecordHeader.OffCycleData + 4 * k : j * LogArea.BBSize + LogExtendedHeader.OffCycleData + 4 * k;
            BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(slot), original);
            BinaryPrimitives.WriteUInt32BigEndian(block, c);
        }
        for (int j = 1; j < hblks; j++)
        {
            long abs = head + j;
            BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(j * LogArea.BBSize + LogExtendedHeader.OffCycle), abs >= n ? NextCycle(cycle) : cycle);
        }
        uint crc = LogReader.ComputeCrc(rec, hblks, hlen, LogRecordHeader.CrcSize);
        BinaryPrimitives.WriteUInt32LittleEndian(rec.AsSpan(LogRecordHeader.OffCrc), crc);
        area.Write(head, rec);

        ClearStaleBlocks(area, sb, pos, head + totalBlocks, head);
    }

    /// <summary>
    /// Overwrites the blocks from <paramref name="from"/> on (at most the span of eight records in flight, and never
    /// <paramref name="tailBlock"/> or beyond it) with empty record headers one cycle older than their neighbourhood
    /// (xlog_clear_stale_blocks): a torn write of the current cycle past the head cannot then be taken for the head.
    /// </summary>
    public static void ClearStaleBlocks(LogArea area, Superblock sb, LogPosition pos, long from, long tailBlock)
    {
        long n = area.Blocks;
        uint cycle = pos.HeadCycle;
        uint version = pos.Version;
        bool v2 = (version & 2) != 0;
        ulong lsn = Lsn.Make(cycle, (uint)(from % n));
        long free = LogScanner.Distance(n, from % n, tailBlock % n);
        if (free == 0) free = n; // the tail at the head: the whole log is free
        long span = Math.Min(LogScanner.TotalRecordSpan(v2), free);
        const int batch = 256;
        var stale = new byte[batch * LogArea.BBSize];
        for (long done = 0; done < span; done += batch)
        {
            int cnt = (int)Math.Min(batch, span - done);
            for (int i = 0; i < cnt; i++)
            {
                long abs = from + done + i;
                uint c = abs >= n ? cycle : cycle - 1;
                var s = stale.AsSpan(i * LogArea.BBSize, LogArea.BBSize);
                s.Clear();
                BinaryPrimitives.WriteUInt32BigEndian(s[LogRecordHeader.OffMagic..], LogRecordHeader.HeaderMagic);
                BinaryPrimitives.WriteUInt32BigEndian(s[LogRecordHeader.OffCycle..], c);
                BinaryPrimitives.WriteUInt32BigEndian(s[LogRecordHeader.OffVersion..], version);
                BinaryPrimitives.WriteUInt64BigEndian(s[LogRecordHeader.OffLsn..], Lsn.Make(c, (uint)(abs % n)));
                BinaryPrimitives.WriteUInt64BigEndian(s[LogRecordHeader.OffTailLsn..], lsn);
                BinaryPrimitives.WriteUInt32BigEndian(s[LogRecordHeader.OffFmt..], LogRecordHeader.FmtLinuxLittleEndian);
                sb.Uuid.TryWriteBytes(s.Slice(LogRecordHeader.OffFsUuid, 16), bigEndian: true, out _);
            }
            area.Write(from + done, stale.AsSpan(0, cnt * LogArea.BBSize));
        }
    }

    /// <summary>The cycle after <paramref name="cycle"/>, skipping the header magic value.</summary>
    public static uint NextCycle(uint cycle)
    {
        uint next = cycle + 1;
        return next == LogRecordHeader.HeaderMagic ? next + 1 : next;
    }
}

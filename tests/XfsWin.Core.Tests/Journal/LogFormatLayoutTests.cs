using Xunit;
using XfsWin.Journal;

namespace XfsWin.Tests.Journal;

/// <summary>Pins the log structures' sizes and offsets to the kernel's xfs_log_format.h / xfs_ondisk.h.</summary>
public class LogFormatLayoutTests
{
    [Fact]
    public void RecordHeaderOffsets()
    {
        Assert.Equal(0, LogRecordHeader.OffMagic);
        Assert.Equal(4, LogRecordHeader.OffCycle);
        Assert.Equal(8, LogRecordHeader.OffVersion);
        Assert.Equal(12, LogRecordHeader.OffLen);
        Assert.Equal(16, LogRecordHeader.OffLsn);
        Assert.Equal(24, LogRecordHeader.OffTailLsn);
        Assert.Equal(32, LogRecordHeader.OffCrc);
        Assert.Equal(36, LogRecordHeader.OffPrevBlock);
        Assert.Equal(40, LogRecordHeader.OffNumLogops);
        Assert.Equal(44, LogRecordHeader.OffCycleData);
        Assert.Equal(300, LogRecordHeader.OffFmt);
        Assert.Equal(304, LogRecordHeader.OffFsUuid);
        Assert.Equal(320, LogRecordHeader.OffSize);
        Assert.Equal(328, LogRecordHeader.CrcSize);
        Assert.Equal(324, LogRecordHeader.CrcSizeOther);
        Assert.Equal(LogRecordHeader.OffFmt, LogRecordHeader.OffCycleData + 4 * LogRecordHeader.CycleDataSlots);
        Assert.Equal(260, LogExtendedHeader.CrcSize);
        Assert.Equal(LogExtendedHeader.CrcSize, LogExtendedHeader.OffCycleData + 4 * LogRecordHeader.CycleDataSlots);
    }

    [Fact]
    public void OpAndTransactionHeaders()
    {
        Assert.Equal(12, LogOpHeader.Size);
        Assert.Equal(9, LogOpHeader.OffFlags);
        Assert.Equal(16, TransactionHeader.Size);
        Assert.Equal(20, UnmountRecord.Size);
        Span<byte> b = stackalloc byte[UnmountRecord.Size];
        UnmountRecord.Write(b);
        Assert.Equal(LogOpHeader.FlagUnmount, new LogOpHeader(b).Flags);
        Assert.Equal(LogOpHeader.ClientLog, new LogOpHeader(b).ClientId);
        Assert.Equal(0x6E, b[12]); // host-order 0x556E
        Assert.Equal(0x55, b[13]);
    }

    [Fact]
    public void ItemFormats()
    {
        Assert.Equal(20, BufLogFormat.OffDataMap);
        Assert.Equal(88, BufLogFormat.MaxSize);
        Assert.Equal(BufLogFormat.MaxSize, BufLogFormat.OffDataMap + 4 * BufLogFormat.MaxMapWords);
        Assert.Equal(56, InodeLogFormat.Size);
        Assert.Equal(52, InodeLogFormat.Size32);
        Assert.Equal(40, InodeLogFormat.OffBlkno);
        Assert.Equal(52, InodeLogFormat.OffBoffset);
        Assert.Equal(28, IcreateLogFormat.Size);
        Assert.Equal(24, IcreateLogFormat.OffGen);
        Assert.Equal(24, DquotLogFormat.Size);
        Assert.Equal(176, LogDinode.SizeV3);
        Assert.Equal(96, LogDinode.SizeV2);
        Assert.Equal(48, IntentLogFormat.BuiSize);
        Assert.Equal(40, IntentLogFormat.AttriSize);
        Assert.Equal(88, IntentLogFormat.XmiSize);
        Assert.Equal(0x123C, LogItemType.Buf);
        Assert.Equal(0x1249, LogItemType.Xmd);
        Assert.Null(IntentLogFormat.CheckLength(LogItemType.Efi, new byte[16 + 16 * 0]));
        Assert.NotNull(IntentLogFormat.CheckLength(LogItemType.Bui, new byte[47]));
    }

    [Fact]
    public void LsnOrdersCycleFirst()
    {
        Assert.True(Lsn.Make(2, 0) > Lsn.Make(1, 100000));
        Assert.Equal(7u, Lsn.Cycle(Lsn.Make(7, 9)));
        Assert.Equal(9u, Lsn.Block(Lsn.Make(7, 9)));
        Assert.Equal(LogRecordHeader.HeaderMagic + 1, LogWriter.NextCycle(LogRecordHeader.HeaderMagic - 1));
    }
}

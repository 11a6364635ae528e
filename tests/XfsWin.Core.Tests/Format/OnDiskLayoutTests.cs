using XfsWin.Format;
using Xunit;

namespace XfsWin.Tests.Format;

/// <summary>
/// Pins the size of every on-disk structure and the offset of each crc/lsn/uuid/owner field, as the
/// kernel's xfs_ondisk.h does: a wrong constant fails here before it corrupts anything.
/// </summary>
public class OnDiskLayoutTests
{
    [Fact]
    public void StructureSizesMatchTheKernel()
    {
        Assert.Equal(288, SuperblockView.Size);
        Assert.Equal(224, AgfView.Size);
        Assert.Equal(344, AgiView.Size);
        Assert.Equal(36, AgflLayout.SizeV5);
        Assert.Equal(176, DinodeView.V3CoreSize);
        Assert.Equal(100, DinodeView.V2CoreSize);
        Assert.Equal(16, BmbtRecord.Size);
        Assert.Equal(4, BmdrBlockView.HeaderSize);
        Assert.Equal(16, InobtRecord.Size);
        Assert.Equal(8, AllocRecord.Size);
        Assert.Equal(24, RmapRecord.Size);
        Assert.Equal(56, BtreeBlockView.ShortHeaderV5);
        Assert.Equal(72, BtreeBlockView.LongHeaderV5);
        Assert.Equal(16, BtreeBlockView.ShortHeaderV4);
        Assert.Equal(24, BtreeBlockView.LongHeaderV4);
        Assert.Equal(56, RemoteBlockHeader.Size);
        Assert.Equal(56, DaBlockInfoView.SizeV5);
        Assert.Equal(12, DaBlockInfoView.SizeV4);
        Assert.Equal(64, DirectoryDataBlock.HeaderSizeV5);
        Assert.Equal(16, DirectoryDataBlock.HeaderSizeV4);
        Assert.Equal(4, AttrShortformView.HeaderSize);
        Assert.Equal(8, AttrLeafView.EntrySize);
    }

    [Fact]
    public void ChecksumAndIdentityFieldsAreWhereTheKernelPutsThem()
    {
        Assert.Equal(224, SuperblockView.OffCrc);
        Assert.Equal(240, SuperblockView.OffLsn);
        Assert.Equal(32, SuperblockView.OffUuid);
        Assert.Equal(248, SuperblockView.OffMetaUuid);
        Assert.Equal(216, AgfView.OffCrc);
        Assert.Equal(208, AgfView.OffLsn);
        Assert.Equal(64, AgfView.OffUuid);
        Assert.Equal(312, AgiView.OffCrc);
        Assert.Equal(320, AgiView.OffLsn);
        Assert.Equal(296, AgiView.OffUuid);
        Assert.Equal(32, AgflLayout.OffCrc);
        Assert.Equal(24, AgflLayout.OffLsn);
        Assert.Equal(8, AgflLayout.OffUuid);
        Assert.Equal(100, DinodeView.OffCrc);
        Assert.Equal(112, DinodeView.OffLsn);
        Assert.Equal(152, DinodeView.OffIno);
        Assert.Equal(160, DinodeView.OffUuid);
        Assert.Equal(52, BtreeBlockView.ShortOffCrc);
        Assert.Equal(24, BtreeBlockView.ShortOffLsn);
        Assert.Equal(32, BtreeBlockView.ShortOffUuid);
        Assert.Equal(48, BtreeBlockView.ShortOffOwner);
        Assert.Equal(64, BtreeBlockView.LongOffCrc);
        Assert.Equal(32, BtreeBlockView.LongOffLsn);
        Assert.Equal(40, BtreeBlockView.LongOffUuid);
        Assert.Equal(56, BtreeBlockView.LongOffOwner);
        Assert.Equal(12, DaBlockInfoView.OffCrc);
        Assert.Equal(24, DaBlockInfoView.OffLsn);
        Assert.Equal(32, DaBlockInfoView.OffUuid);
        Assert.Equal(48, DaBlockInfoView.OffOwner);
        Assert.Equal(4, DirectoryDataBlock.OffCrc);
        Assert.Equal(16, DirectoryDataBlock.OffLsn);
        Assert.Equal(24, DirectoryDataBlock.OffUuid);
        Assert.Equal(40, DirectoryDataBlock.OffOwner);
        Assert.Equal(12, RemoteBlockHeader.OffCrc);
        Assert.Equal(48, RemoteBlockHeader.OffLsn);
        Assert.Equal(16, RemoteBlockHeader.OffUuid);
        Assert.Equal(32, RemoteBlockHeader.OffOwner);
        // xfs_dqblk: xfs_disk_dquot (104 bytes), dd_fill[4], crc, lsn, uuid.
        Assert.Equal(136, DquotView.Size);
        Assert.Equal(40, DquotView.OffBcount);
        Assert.Equal(48, DquotView.OffIcount);
        Assert.Equal(88, DquotView.OffRtbcount);
        Assert.Equal(108, DquotView.OffCrc);
        Assert.Equal(112, DquotView.OffLsn);
        Assert.Equal(120, DquotView.OffUuid);
    }

    [Theory]
    [InlineData(0UL, 0UL, 1u, false)]
    [InlineData(1234UL, 0x000F_FFFF_FFFF_FFFFUL, 0x1FFFFFu, true)]
    [InlineData((1UL << 54) - 1, 42UL, 7u, false)]
    public void ExtentRecordsRoundTripThroughTheirPacking(ulong offset, ulong block, uint count, bool unwritten)
    {
        var rec = new BmbtRecord(offset, block, count, unwritten);
        Span<byte> bytes = stackalloc byte[16];
        rec.Encode(bytes);
        Assert.Equal(rec, BmbtRecord.Decode(bytes));
    }

    [Fact]
    public void LegacyAndBigtimeTimestampsDecode()
    {
        // Legacy: signed 32-bit seconds, then nanoseconds.
        Assert.Equal((-1L, 5u), new XfsTimestampRaw(0xFFFF_FFFF_0000_0005UL, false).Decode());
        // Bigtime: nanoseconds since 1901-12-13T20:45:52Z (Unix time -2^31).
        ulong unixZero = (ulong)XfsTimestampRaw.BigtimeEpochOffset * 1_000_000_000UL;
        Assert.Equal((0L, 0u), new XfsTimestampRaw(unixZero, true).Decode());
        Assert.Equal((4102444800L, 123u), new XfsTimestampRaw(unixZero + 4102444800UL * 1_000_000_000UL + 123, true).Decode());
    }

    [Fact]
    public void NameHashMatchesKnownKernelValues()
    {
        // Values printed by `xfs_db -c 'hash NAME'` (xfsprogs 6.1).
        Assert.Equal(0x2eu, DaHash.Hash("."u8));
        Assert.Equal(0x172eu, DaHash.Hash(".."u8));
    }
}

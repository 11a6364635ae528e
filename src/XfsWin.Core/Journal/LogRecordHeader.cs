using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// xlog_rec_header: the 512-byte sector that starts every log record (big-endian, except h_crc which
/// is little-endian). Each BB of the record's data has its first word replaced by the cycle; the
/// original words are kept in h_cycle_data (blocks 0-63) and in extended headers (64 per sector).
/// </summary>
public readonly ref struct LogRecordHeader
{
    public const uint HeaderMagic = 0xFEEDBABE;
    public const int OffMagic = 0, OffCycle = 4, OffVersion = 8, OffLen = 12, OffLsn = 16, OffTailLsn = 24, OffCrc = 32,
        OffPrevBlock = 36, OffNumLogops = 40, OffCycleData = 44, OffFmt = 300, OffFsUuid = 304, OffSize = 320, OffPad0 = 324;
    /// <summary>Bytes covered by the CRC on x86-64 writers (offsetofend(h_pad0)); i386 kernels used 324.</summary>
    public const int CrcSize = 328, CrcSizeOther = 324;
    public const int CycleDataSlots = 64;
    /// <summary>XLOG_HEADER_CYCLE_SIZE: data bytes whose cycle words one header sector holds.</summary>
    public const int CycleSize = 32768;
    public const uint FmtLinuxLittleEndian = 1;
    public const int Version1 = 1, Version2 = 2;

    private readonly ReadOnlySpan<byte> _b;
    public LogRecordHeader(ReadOnlySpan<byte> sector) => _b = sector;

    public uint Magic => BinaryPrimitives.ReadUInt32BigEndian(_b[OffMagic..]);
    public uint Cycle => BinaryPrimitives.ReadUInt32BigEndian(_b[OffCycle..]);
    public uint Version => BinaryPrimitives.ReadUInt32BigEndian(_b[OffVersion..]);
    public int Len => BinaryPrimitives.ReadInt32BigEndian(_b[OffLen..]);
    public ulong RecordLsn => BinaryPrimitives.ReadUInt64BigEndian(_b[OffLsn..]);
    public ulong TailLsn => BinaryPrimitives.ReadUInt64BigEndian(_b[OffTailLsn..]);
    public uint Crc => BinaryPrimitives.ReadUInt32LittleEndian(_b[OffCrc..]);
    public int NumLogops => BinaryPrimitives.ReadInt32BigEndian(_b[OffNumLogops..]);
    public uint CycleData(int slot) => BinaryPrimitives.ReadUInt32BigEndian(_b[(OffCycleData + 4 * slot)..]);
    public uint Fmt => BinaryPrimitives.ReadUInt32BigEndian(_b[OffFmt..]);
    public Guid FsUuid => new(_b.Slice(OffFsUuid, 16), bigEndian: true);
    public int Size => BinaryPrimitives.ReadInt32BigEndian(_b[OffSize..]);

    /// <summary>Header sectors of a record (xlog_logrec_hblks): one per 32 KiB of h_size on v2 logs.</summary>
    public int HeaderBlocks => (Version & 2) != 0 && Size > CycleSize ? (Size + CycleSize - 1) / CycleSize : 1;

    public static bool IsHeader(ReadOnlySpan<byte> sector) => BinaryPrimitives.ReadUInt32BigEndian(sector) == HeaderMagic;
}

/// <summary>xlog_rec_ext_header: the extra header sectors of records over 32 KiB.</summary>
public static class LogExtendedHeader
{
    public const int OffCycle = 0, OffCycleData = 4;
    /// <summary>Bytes of each extended header covered by the record CRC (XLOG_REC_EXT_SIZE).</summary>
    public const int CrcSize = 260;
}

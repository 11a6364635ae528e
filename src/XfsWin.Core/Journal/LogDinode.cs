using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// xfs_log_dinode: the inode core as the writer held it in memory (host order = little-endian here),
/// at the same offsets as the big-endian on-disk xfs_dinode (<see cref="DinodeView"/>). 176 bytes for
/// v3 inodes; v2 cores stop before di_next_unlinked (96 bytes).
/// </summary>
public static class LogDinode
{
    public const int SizeV3 = 176, SizeV2 = 96;

    /// <summary>(offset, width) of each integer field converted from host order; byte fields and UUIDs are copied.</summary>
    private static readonly (int Off, int Width)[] CommonFields =
    [
        (DinodeView.OffMagic, 2), (DinodeView.OffMode, 2), (DinodeView.OffVersion, 1), (DinodeView.OffFormat, 1),
        (DinodeView.OffOnlink, 2), (DinodeView.OffUid, 4), (DinodeView.OffGid, 4), (DinodeView.OffNlink, 4),
        (DinodeView.OffProjidLo, 2), (DinodeView.OffProjidHi, 2), (DinodeView.OffSize, 8), (DinodeView.OffNblocks, 8),
        (DinodeView.OffExtsize, 4), (DinodeView.OffNextents, 4), (DinodeView.OffAnextents, 2), (DinodeView.OffForkoff, 1),
        (DinodeView.OffAformat, 1), (DinodeView.OffDmevmask, 4), (DinodeView.OffDmstate, 2), (DinodeView.OffFlags, 2),
        (DinodeView.OffGen, 4),
    ];

    private static readonly (int Off, int Width)[] V3Fields =
    [
        (DinodeView.OffBigNextents, 8), (DinodeView.OffChangecount, 8), (DinodeView.OffFlags2, 8),
        (DinodeView.OffCowextsize, 4), (DinodeView.OffIno, 8),
    ];

    private static readonly int[] TimeFields = [DinodeView.OffAtime, DinodeView.OffMtime, DinodeView.OffCtime];

    public static ushort Magic(ReadOnlySpan<byte> log) => BinaryPrimitives.ReadUInt16LittleEndian(log);
    public static ushort Mode(ReadOnlySpan<byte> log) => BinaryPrimitives.ReadUInt16LittleEndian(log[DinodeView.OffMode..]);
    public static byte Version(ReadOnlySpan<byte> log) => log[DinodeView.OffVersion];
    public static byte Format(ReadOnlySpan<byte> log) => log[DinodeView.OffFormat];
    public static byte AttrFormat(ReadOnlySpan<byte> log) => log[DinodeView.OffAformat];
    public static byte ForkOffset(ReadOnlySpan<byte> log) => log[DinodeView.OffForkoff];
    public static ulong Nblocks(ReadOnlySpan<byte> log) => BinaryPrimitives.ReadUInt64LittleEndian(log[DinodeView.OffNblocks..]);
    public static ulong Flags2(ReadOnlySpan<byte> log) => Version(log) >= 3 ? BinaryPrimitives.ReadUInt64LittleEndian(log[DinodeView.OffFlags2..]) : 0;

    public static ulong DataExtents(ReadOnlySpan<byte> log) => (Flags2(log) & DinodeView.Flag2Nrext64) != 0
        ? BinaryPrimitives.ReadUInt64LittleEndian(log[DinodeView.OffBigNextents..])
        : BinaryPrimitives.ReadUInt32LittleEndian(log[DinodeView.OffNextents..]);

    public static ulong AttrExtents(ReadOnlySpan<byte> log) => (Flags2(log) & DinodeView.Flag2Nrext64) != 0
        ? BinaryPrimitives.ReadUInt32LittleEndian(log[DinodeView.OffBigAnextents..])
        : BinaryPrimitives.ReadUInt16LittleEndian(log[DinodeView.OffAnextents..]);

    /// <summary>
    /// Writes the log dinode's core over the on-disk core in big-endian (xfs_log_dinode_to_disk):
    /// di_next_unlinked and di_crc are kept from disk, di_lsn becomes <paramref name="lsn"/>.
    /// </summary>
    public static void ToDisk(ReadOnlySpan<byte> log, Span<byte> disk, ulong lsn)
    {
        bool v3 = Version(log) >= 3;
        bool bigtime = (Flags2(log) & DinodeView.Flag2Bigtime) != 0;
        foreach (var (off, width) in CommonFields) Swap(log, disk, off, width);
        foreach (int off in TimeFields) SwapTime(log, disk, off, bigtime);
        if (v3)
        {
            foreach (var (off, width) in V3Fields) Swap(log, disk, off, width);
            SwapTime(log, disk, DinodeView.OffCrtime, bigtime);
            BinaryPrimitives.WriteUInt64BigEndian(disk[DinodeView.OffLsn..], lsn);
            log.Slice(132, 12).CopyTo(disk[132..]);              // di_pad2
            log.Slice(DinodeView.OffUuid, 16).CopyTo(disk[DinodeView.OffUuid..]);
        }
        else
        {
            log.Slice(24, 6).CopyTo(disk[24..]);                 // di_pad
            Swap(log, disk, 30, 2);                             // di_flushiter
        }
    }

    /// <summary>
    /// The inverse of <see cref="ToDisk"/> (xfs_inode_to_log_dinode): the on-disk core in host order as an inode item
    /// carries it. di_lsn is the item's LSN, di_next_unlinked NULLAGINO and di_crc 0: recovery takes none of them.
    /// </summary>
    public static void FromDisk(ReadOnlySpan<byte> disk, Span<byte> log, ulong itemLsn)
    {
        bool v3 = disk[DinodeView.OffVersion] >= 3;
        ulong flags2 = v3 ? BinaryPrimitives.ReadUInt64BigEndian(disk[DinodeView.OffFlags2..]) : 0;
        bool bigtime = (flags2 & DinodeView.Flag2Bigtime) != 0;
        int size = v3 ? SizeV3 : SizeV2;
        log[..size].Clear();
        foreach (var (off, width) in CommonFields) Unswap(disk, log, off, width);
        foreach (int off in TimeFields) UnswapTime(disk, log, off, bigtime);
        if (v3)
        {
            BinaryPrimitives.WriteUInt32LittleEndian(log[DinodeView.OffNextUnlinked..], 0xFFFFFFFF);
            foreach (var (off, width) in V3Fields) Unswap(disk, log, off, width);
            UnswapTime(disk, log, DinodeView.OffCrtime, bigtime);
            BinaryPrimitives.WriteUInt64LittleEndian(log[DinodeView.OffLsn..], itemLsn);
            disk.Slice(132, 12).CopyTo(log[132..]);
            disk.Slice(DinodeView.OffUuid, 16).CopyTo(log[DinodeView.OffUuid..]);
        }
        else
        {
            disk.Slice(24, 6).CopyTo(log[24..]);
            Unswap(disk, log, 30, 2);
        }
    }

    private static void Unswap(ReadOnlySpan<byte> from, Span<byte> to, int off, int width)
    {
        switch (width)
        {
            case 1: to[off] = from[off]; break;
            case 2: BinaryPrimitives.WriteUInt16LittleEndian(to[off..], BinaryPrimitives.ReadUInt16BigEndian(from[off..])); break;
            case 4: BinaryPrimitives.WriteUInt32LittleEndian(to[off..], BinaryPrimitives.ReadUInt32BigEndian(from[off..])); break;
            default: BinaryPrimitives.WriteUInt64LittleEndian(to[off..], BinaryPrimitives.ReadUInt64BigEndian(from[off..])); break;
        }
    }

    private static void UnswapTime(ReadOnlySpan<byte> from, Span<byte> to, int off, bool bigtime)
    {
        if (bigtime) Unswap(from, to, off, 8);
        else
        {
            Unswap(from, to, off, 4);
            Unswap(from, to, off + 4, 4);
        }
    }

    private static void Swap(ReadOnlySpan<byte> from, Span<byte> to, int off, int width)
    {
        switch (width)
        {
            case 1: to[off] = from[off]; break;
            case 2: BinaryPrimitives.WriteUInt16BigEndian(to[off..], BinaryPrimitives.ReadUInt16LittleEndian(from[off..])); break;
            case 4: BinaryPrimitives.WriteUInt32BigEndian(to[off..], BinaryPrimitives.ReadUInt32LittleEndian(from[off..])); break;
            default: BinaryPrimitives.WriteUInt64BigEndian(to[off..], BinaryPrimitives.ReadUInt64LittleEndian(from[off..])); break;
        }
    }

    /// <summary>Bigtime: one host-order u64. Legacy: i32 seconds then i32 nanoseconds, each host order.</summary>
    private static void SwapTime(ReadOnlySpan<byte> from, Span<byte> to, int off, bool bigtime)
    {
        if (bigtime) Swap(from, to, off, 8);
        else
        {
            Swap(from, to, off, 4);
            Swap(from, to, off + 4, 4);
        }
    }
}

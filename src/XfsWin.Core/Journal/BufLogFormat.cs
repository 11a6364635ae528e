using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// xfs_buf_log_format (host order): a logged metadata buffer. The bitmap marks dirty 128-byte chunks
/// (bit i, LSB-first in each u32 word); the following regions carry those chunks in bitmap order.
/// </summary>
public readonly ref struct BufLogFormat
{
    public const int OffType = 0, OffSize = 2, OffFlags = 4, OffLen = 6, OffBlkno = 8, OffMapSize = 16, OffDataMap = 20;
    /// <summary>Largest struct: 17 map words (64 KiB / 128 / 32 + 1).</summary>
    public const int MaxSize = 88, MaxMapWords = 17;
    public const int ChunkSize = 128;
    public const ushort FlagInodeBuf = 0x1, FlagCancel = 0x2, FlagUserDquot = 0x4, FlagProjectDquot = 0x8, FlagGroupDquot = 0x10;
    public const int TypeShift = 11;

    private readonly ReadOnlySpan<byte> _b;
    public BufLogFormat(ReadOnlySpan<byte> b) => _b = b;

    public ushort Size => BinaryPrimitives.ReadUInt16LittleEndian(_b[OffSize..]);
    public ushort Flags => BinaryPrimitives.ReadUInt16LittleEndian(_b[OffFlags..]);
    /// <summary>Length in 512-byte basic blocks.</summary>
    public ushort Len => BinaryPrimitives.ReadUInt16LittleEndian(_b[OffLen..]);
    public long Blkno => BinaryPrimitives.ReadInt64LittleEndian(_b[OffBlkno..]);
    public int MapSize => BinaryPrimitives.ReadInt32LittleEndian(_b[OffMapSize..]);
    public BufType Type => (BufType)(Flags >> TypeShift);

    public bool IsChunkDirty(int chunk) =>
        (BinaryPrimitives.ReadUInt32LittleEndian(_b[(OffDataMap + 4 * (chunk >> 5))..]) >> (chunk & 31) & 1) != 0;

    public int FormatLength => OffDataMap + 4 * MapSize;
}

/// <summary>XFS_BLFT_*: what a logged buffer holds (bits 11-15 of blf_flags).</summary>
public enum BufType : byte
{
    Unknown = 0, UserDquot = 1, ProjectDquot = 2, GroupDquot = 3, Btree = 4, Agf = 5, Agfl = 6, Agi = 7, Dinode = 8,
    Symlink = 9, DirBlock = 10, DirData = 11, DirFree = 12, DirLeaf1 = 13, DirLeafN = 14, DaNode = 15, AttrLeaf = 16,
    AttrRemote = 17, Superblock = 18, RtBitmap = 19, RtSummary = 20,
}

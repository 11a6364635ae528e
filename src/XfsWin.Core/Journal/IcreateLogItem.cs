using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// A new inode chunk as the log carries it (xfs_icreate_log, XFS_LI_ICREATE): the chunk's AG, first block, length,
/// inode count and size, and the generation every inode starts with. The chunk's cluster buffers are not logged: the
/// item stands for them ("ordered" buffers). Recovery initialises the chunk from it (unless its clusters were
/// cancelled), and the AIL's writeback writes the same initialised image in place (<see cref="ChunkImage"/>), before
/// the inode items of that or a later checkpoint put the allocated inodes over it.
/// </summary>
public sealed class IcreateLogItem : JournalItem
{
    internal IcreateLogItem(uint ag, uint agbno, uint count, int inodeSize, uint length, uint generation, long daddr, int lengthBB)
    {
        Ag = ag;
        Agbno = agbno;
        Count = count;
        InodeSize = inodeSize;
        Length = length;
        Generation = generation;
        Daddr = daddr;
        LengthBB = lengthBB;
    }

    public uint Ag { get; }
    public uint Agbno { get; }
    /// <summary>Inodes in the chunk (64, or fewer for a sparse chunk).</summary>
    public uint Count { get; }
    public int InodeSize { get; }
    /// <summary>Chunk length in filesystem blocks.</summary>
    public uint Length { get; }
    public uint Generation { get; }
    /// <summary>Where the chunk starts (512-byte units) and its length in them.</summary>
    public long Daddr { get; }
    public int LengthBB { get; }

    public override LogItemKey Key => new(LogItemType.Icreate, Daddr, LengthBB);

    /// <summary>The item for <paramref name="length"/> blocks at AG block <paramref name="agbno"/> of AG <paramref name="ag"/>.</summary>
    public static IcreateLogItem Create(Superblock sb, uint ag, uint agbno, uint length, uint generation)
    {
        if (length == 0 || agbno == 0 || agbno + length > sb.AgBlocks) throw new ArgumentOutOfRangeException(nameof(agbno), $"inode chunk at AG {ag} block {agbno} (+{length})");
        long byteOffset = sb.AgBlockToByte(ag, agbno);
        return new IcreateLogItem(ag, agbno, length << sb.InoPBlog, sb.InodeSize, length, generation,
            byteOffset >> LogArea.BBShift, checked((int)(((long)length << sb.BlockLog) >> LogArea.BBShift)));
    }

    public override int RegionCount => 1;
    public override int FormattedBytes => IcreateLogFormat.Size;

    public override void Format(List<ReadOnlyMemory<byte>> regions, LogFormatArena arena)
    {
        var piece = arena.Take(IcreateLogFormat.Size);
        var b = piece.Span;
        BinaryPrimitives.WriteUInt16LittleEndian(b[IcreateLogFormat.OffType..], LogItemType.Icreate);
        BinaryPrimitives.WriteUInt16LittleEndian(b[IcreateLogFormat.OffSize..], 1);
        BinaryPrimitives.WriteUInt32BigEndian(b[IcreateLogFormat.OffAg..], Ag);
        BinaryPrimitives.WriteUInt32BigEndian(b[IcreateLogFormat.OffAgbno..], Agbno);
        BinaryPrimitives.WriteUInt32BigEndian(b[IcreateLogFormat.OffCount..], Count);
        BinaryPrimitives.WriteUInt32BigEndian(b[IcreateLogFormat.OffIsize..], (uint)InodeSize);
        BinaryPrimitives.WriteUInt32BigEndian(b[IcreateLogFormat.OffLength..], Length);
        BinaryPrimitives.WriteUInt32BigEndian(b[IcreateLogFormat.OffGen..], Generation);
        regions.Add(piece);
    }

    /// <summary>A chunk is created once; a second item for it in one checkpoint is a bug of the caller.</summary>
    public override void MergeNewer(JournalItem newer) =>
        throw new InvalidOperationException($"{Key} was logged twice in one checkpoint");

    public override JournalItem Snapshot() => this;

    /// <summary>The chunk as its recovery initialises it (xfs_ialloc_inode_init): every inode free, in the item's generation.</summary>
    public byte[] ChunkImage(Superblock sb)
    {
        var chunk = new byte[LengthBB << LogArea.BBShift];
        ulong firstIno = ((ulong)Ag << sb.AgInoLog) | ((ulong)Agbno << sb.InoPBlog);
        for (int i = 0; i < Count; i++) InitialiseInode(chunk.AsSpan(i * InodeSize, InodeSize), sb, firstIno + (ulong)i, Generation);
        return chunk;
    }

    /// <summary>One free inode of a new chunk (V3): magic, version, number, UUID, generation, no unlinked successor, CRC.</summary>
    public static void InitialiseInode(Span<byte> slot, Superblock sb, ulong ino, uint generation)
    {
        slot.Clear();
        var w = new DinodeWriter(slot);
        w.InitV3(ino, sb.MetaUuid);
        w.Generation = generation;
        XfsCrc.Stamp(slot, DinodeView.OffCrc);
    }
}

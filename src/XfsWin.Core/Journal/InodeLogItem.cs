using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>What of an inode a transaction changed; the item logs the forks in the form they have when formatted.</summary>
[Flags]
public enum InodeLogParts
{
    /// <summary>The core (always logged).</summary>
    Core = 0,
    /// <summary>The data fork: extent list, btree root, local data or device number, whichever the fork holds.</summary>
    DataFork = 1,
    /// <summary>The attribute fork: extent list, btree root or short-form attributes.</summary>
    AttrFork = 2,
}

/// <summary>Where an inode lives: its cluster buffer (daddr, length in BB) and its byte offset in that buffer.</summary>
public readonly record struct InodeClusterLocation(long Daddr, int LengthBB, int Offset)
{
    /// <summary>
    /// The cluster of <paramref name="ino"/> as xfs_imap finds it: clusters of max(8 KiB × inodesize/256 on V5, one
    /// block), counted from the start of the inode chunk (chunks aligned to sb_inoalignmt when set).
    /// </summary>
    public static InodeClusterLocation Of(Superblock sb, ulong ino)
    {
        int clusterBytes = 8192;
        if (sb.IsV5) clusterBytes = clusterBytes * sb.InodeSize / 256;
        clusterBytes = Math.Max(clusterBytes, (int)sb.BlockSize);
        uint blocksPerCluster = (uint)(clusterBytes / (int)sb.BlockSize);
        uint agno = sb.InoToAgno(ino);
        uint agino = sb.InoToAgino(ino);
        uint agbno = agino >> sb.InoPBlog;
        uint alignMask = sb.InodeAlignment > 1 ? sb.InodeAlignment - 1 : 0;
        uint offsetInChunk = alignMask != 0 ? agbno & alignMask : agbno % blocksPerCluster;
        uint clusterAgbno = agbno - offsetInChunk + offsetInChunk / blocksPerCluster * blocksPerCluster;
        long clusterByte = sb.AgBlockToByte(agno, clusterAgbno);
        long inodeByte = sb.InodeToByte(ino);
        return new InodeClusterLocation(clusterByte >> LogArea.BBShift, clusterBytes >> LogArea.BBShift, (int)(inodeByte - clusterByte));
    }

    public long InodeByte => (Daddr << LogArea.BBShift) + Offset;
}

/// <summary>
/// An inode as the log carries it (xfs_inode_log_format): the format with the fields logged and the cluster
/// location, the core as an xfs_log_dinode (host order), then the data fork and the attribute fork in the form the
/// inode has (extents as on-disk records, btree roots in their in-memory form, local data as is). The item keeps
/// the inode's newest on-disk image (inode-size bytes, big-endian) from which all of that is derived, and which
/// writeback puts in place.
/// </summary>
public sealed class InodeLogItem : JournalItem
{
    private byte[] _disk;
    // Whether _disk is this item's alone (made for it, or handed over by a merge): a merge then copies the newer image
    // into it, and a producer reusing the item after it was merged away writes into it. A snapshot shares its source's
    // array and owns nothing; taking a snapshot ends the source's ownership (the AIL reads the array until writeback).
    private bool _ownsDisk;
    private InodeLogParts _parts;

    private InodeLogItem(ulong ino, InodeClusterLocation cluster, byte[] disk, InodeLogParts parts, bool ownsDisk)
    {
        Ino = ino;
        Cluster = cluster;
        _disk = disk;
        _parts = parts;
        _ownsDisk = ownsDisk;
    }

    public ulong Ino { get; private set; }
    public InodeClusterLocation Cluster { get; private set; }
    public InodeLogParts Parts => _parts;
    /// <summary>The inode's newest image as it goes to disk (before LSN and CRC are stamped).</summary>
    public ReadOnlySpan<byte> DiskImage => _disk;

    /// <summary>
    /// The array <see cref="DiskImage"/> is in: the producer's to read until the transaction that logged the item
    /// committed (and its commit callbacks ran); the journal may write a newer image into it after that.
    /// </summary>
    internal byte[] DiskImageArray => _disk;

    public override LogItemKey Key => new(LogItemType.Inode, (long)Ino, 0);

    /// <param name="diskInode">The whole on-disk inode (inode-size bytes, big-endian) as it is after the change.</param>
    public static InodeLogItem Create(ulong ino, InodeClusterLocation cluster, ReadOnlySpan<byte> diskInode, InodeLogParts parts)
    {
        Check(ino, cluster, diskInode);
        return new InodeLogItem(ino, cluster, diskInode.ToArray(), parts, ownsDisk: true);
    }

    /// <summary>
    /// <see cref="Create"/> into <paramref name="spent"/> (its object and image array) when the journal merged that item
    /// into one it holds (<see cref="JournalItem.MergedAway"/>: nothing refers to it any more) and the array is still
    /// its own, else a new item.
    /// </summary>
    public static InodeLogItem Create(InodeLogItem? spent, ulong ino, InodeClusterLocation cluster, ReadOnlySpan<byte> diskInode, InodeLogParts parts)
    {
        if (spent is null || !spent.MergedAway || !spent._ownsDisk || spent._disk.Length != diskInode.Length)
            return Create(ino, cluster, diskInode, parts);
        Check(ino, cluster, diskInode);
        spent.Reclaim();
        spent.Ino = ino;
        spent.Cluster = cluster;
        diskInode.CopyTo(spent._disk);
        spent._parts = parts;
        return spent;
    }

    private static void Check(ulong ino, InodeClusterLocation cluster, ReadOnlySpan<byte> diskInode)
    {
        if (BinaryPrimitives.ReadUInt16BigEndian(diskInode) != DinodeView.Magic) throw new ArgumentException($"inode {ino}: the image has no inode magic", nameof(diskInode));
        if (cluster.Offset < 0 || cluster.Offset + diskInode.Length > cluster.LengthBB << LogArea.BBShift)
            throw new ArgumentException($"inode {ino}: offset {cluster.Offset} is outside its cluster of {cluster.LengthBB} BB", nameof(cluster));
    }

    private bool V3 => _disk[DinodeView.OffVersion] >= 3;
    private int CoreSize => V3 ? LogDinode.SizeV3 : LogDinode.SizeV2;
    private int LiteralOffset => V3 ? 176 : 100;
    private int ForkOffsetBytes => _disk[DinodeView.OffForkoff] * 8;
    private bool Nrext64 => V3 && (BinaryPrimitives.ReadUInt64BigEndian(_disk.AsSpan(DinodeView.OffFlags2)) & DinodeView.Flag2Nrext64) != 0;

    private ulong DataExtents => Nrext64 ? BinaryPrimitives.ReadUInt64BigEndian(_disk.AsSpan(DinodeView.OffBigNextents))
        : BinaryPrimitives.ReadUInt32BigEndian(_disk.AsSpan(DinodeView.OffNextents));
    private ulong AttrExtents => Nrext64 ? BinaryPrimitives.ReadUInt32BigEndian(_disk.AsSpan(DinodeView.OffBigAnextents))
        : BinaryPrimitives.ReadUInt16BigEndian(_disk.AsSpan(DinodeView.OffAnextents));

    private (int Start, int Size) DataForkArea
    {
        get
        {
            int end = ForkOffsetBytes != 0 ? LiteralOffset + ForkOffsetBytes : _disk.Length;
            return (LiteralOffset, end - LiteralOffset);
        }
    }

    private (int Start, int Size) AttrForkArea => (LiteralOffset + ForkOffsetBytes, _disk.Length - LiteralOffset - ForkOffsetBytes);

    /// <summary>ilf_fields, the byte count of each fork region and the rdev, from the image's current fork forms.</summary>
    private (uint Fields, int Dsize, int Asize, uint Rdev) Layout()
    {
        uint fields = InodeLogFormat.FieldCore;
        int dsize = 0, asize = 0;
        uint rdev = 0;
        if ((_parts & InodeLogParts.DataFork) != 0)
        {
            var (start, size) = DataForkArea;
            switch ((ForkFormat)_disk[DinodeView.OffFormat])
            {
                case ForkFormat.Device:
                    fields |= InodeLogFormat.FieldDev;
                    rdev = BinaryPrimitives.ReadUInt32BigEndian(_disk.AsSpan(start));
                    break;
                case ForkFormat.Local:
                    long bytes = BinaryPrimitives.ReadInt64BigEndian(_disk.AsSpan(DinodeView.OffSize));
                    if (bytes > 0) { fields |= InodeLogFormat.FieldDdata; dsize = (int)Math.Min(size, (bytes + 3) & ~3L); }
                    break;
                case ForkFormat.Extents:
                    if (DataExtents > 0) { fields |= InodeLogFormat.FieldDext; dsize = checked((int)DataExtents * 16); }
                    break;
                case ForkFormat.Btree:
                    fields |= InodeLogFormat.FieldDbroot;
                    dsize = InMemoryRootSize(start);
                    break;
            }
        }
        if ((_parts & InodeLogParts.AttrFork) != 0 && ForkOffsetBytes != 0)
        {
            var (start, size) = AttrForkArea;
            switch ((ForkFormat)_disk[DinodeView.OffAformat])
            {
                case ForkFormat.Local:
                    int total = BinaryPrimitives.ReadUInt16BigEndian(_disk.AsSpan(start));
                    if (total > 0) { fields |= InodeLogFormat.FieldAdata; asize = Math.Min(size, (total + 3) & ~3); }
                    break;
                case ForkFormat.Extents:
                    if (AttrExtents > 0) { fields |= InodeLogFormat.FieldAext; asize = checked((int)AttrExtents * 16); }
                    break;
                case ForkFormat.Btree:
                    fields |= InodeLogFormat.FieldAbroot;
                    asize = InMemoryRootSize(start);
                    break;
            }
        }
        return (fields, dsize, asize, rdev);
    }

    private int RootHeaderSize => BtreeBlockView.HeaderSize(longForm: true, v5: V3);
    private int InMemoryRootSize(int forkStart) => RootHeaderSize + 16 * BinaryPrimitives.ReadUInt16BigEndian(_disk.AsSpan(forkStart + 2));

    /// <summary>
    /// The btree root of a fork in its in-memory form (xfs_bmdr_to_bmbt): a long-form block header, then the keys,
    /// then the pointers at header + numrecs × 8 (the in-memory root is sized for exactly numrecs records).
    /// </summary>
    private Memory<byte> InMemoryRoot(int forkStart, int forkSize, LogFormatArena arena)
    {
        var fork = _disk.AsSpan(forkStart, forkSize);
        ushort level = BinaryPrimitives.ReadUInt16BigEndian(fork);
        int numrecs = BinaryPrimitives.ReadUInt16BigEndian(fork[2..]);
        int dmxr = (forkSize - BmdrBlockView.HeaderSize) / 16;
        int hdr = RootHeaderSize;
        var root = arena.Take(hdr + 16 * numrecs);
        var r = root.Span;
        BinaryPrimitives.WriteUInt32BigEndian(r, V3 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4);
        BinaryPrimitives.WriteUInt16BigEndian(r[4..], level);
        BinaryPrimitives.WriteUInt16BigEndian(r[6..], (ushort)numrecs);
        BinaryPrimitives.WriteUInt64BigEndian(r[8..], ulong.MaxValue);   // left sibling: none
        BinaryPrimitives.WriteUInt64BigEndian(r[16..], ulong.MaxValue);  // right sibling: none
        if (V3)
        {
            BinaryPrimitives.WriteUInt64BigEndian(r[24..], ulong.MaxValue); // blkno: NULLDADDR, the root is in the inode
            _disk.AsSpan(DinodeView.OffUuid, 16).CopyTo(r[40..]);
            BinaryPrimitives.WriteUInt64BigEndian(r[56..], Ino);
        }
        fork.Slice(BmdrBlockView.HeaderSize, numrecs * 8).CopyTo(r[hdr..]);
        fork.Slice(BmdrBlockView.HeaderSize + dmxr * 8, numrecs * 8).CopyTo(r[(hdr + numrecs * 8)..]);
        return root;
    }

    public override int RegionCount
    {
        get
        {
            var (fields, dsize, asize, _) = Layout();
            _ = fields;
            return 2 + (dsize > 0 ? 1 : 0) + (asize > 0 ? 1 : 0);
        }
    }

    public override int FormattedBytes
    {
        get
        {
            var (_, dsize, asize, _) = Layout();
            return InodeLogFormat.Size + CoreSize + ((dsize + 3) & ~3) + ((asize + 3) & ~3);
        }
    }

    public override void Format(List<ReadOnlyMemory<byte>> regions, LogFormatArena arena)
    {
        var (fields, dsize, asize, rdev) = Layout();
        int count = 2 + (dsize > 0 ? 1 : 0) + (asize > 0 ? 1 : 0);
        var format = arena.Take(InodeLogFormat.Size);
        var f = format.Span;
        BinaryPrimitives.WriteUInt16LittleEndian(f[InodeLogFormat.OffType..], LogItemType.Inode);
        BinaryPrimitives.WriteUInt16LittleEndian(f[InodeLogFormat.OffSize..], (ushort)count);
        BinaryPrimitives.WriteUInt32LittleEndian(f[InodeLogFormat.OffFields..], fields);
        BinaryPrimitives.WriteUInt16LittleEndian(f[InodeLogFormat.OffAsize..], (ushort)asize);
        BinaryPrimitives.WriteUInt16LittleEndian(f[InodeLogFormat.OffDsize..], (ushort)dsize);
        BinaryPrimitives.WriteUInt64LittleEndian(f[InodeLogFormat.OffIno..], Ino);
        BinaryPrimitives.WriteUInt32LittleEndian(f[InodeLogFormat.OffRdev..], rdev);
        BinaryPrimitives.WriteInt64LittleEndian(f[InodeLogFormat.OffBlkno..], Cluster.Daddr);
        BinaryPrimitives.WriteInt32LittleEndian(f[InodeLogFormat.OffLen..], Cluster.LengthBB);
        BinaryPrimitives.WriteInt32LittleEndian(f[InodeLogFormat.OffBoffset..], Cluster.Offset);
        regions.Add(format);

        var core = arena.Take(CoreSize);
        LogDinode.FromDisk(_disk, core.Span, Lsn);
        regions.Add(core);

        if (dsize > 0) regions.Add(ForkRegion(DataForkArea, dsize, (fields & InodeLogFormat.FieldDbroot) != 0, arena));
        if (asize > 0) regions.Add(ForkRegion(AttrForkArea, asize, (fields & InodeLogFormat.FieldAbroot) != 0, arena));
    }

    private Memory<byte> ForkRegion((int Start, int Size) area, int bytes, bool btreeRoot, LogFormatArena arena)
    {
        if (btreeRoot) return InMemoryRoot(area.Start, area.Size, arena);
        var region = arena.Take((bytes + 3) & ~3);
        _disk.AsSpan(area.Start, Math.Min(bytes, area.Size)).CopyTo(region.Span);
        return region;
    }

    public override void MergeNewer(JournalItem newer)
    {
        var n = (InodeLogItem)newer;
        if (n.Key != Key) throw new ArgumentException($"cannot merge {n.Key} into {Key}", nameof(newer));
        if (_ownsDisk && _disk.Length == n._disk.Length && !ReferenceEquals(_disk, n._disk))
            n._disk.CopyTo(_disk);
        else
        {
            // The newer item's array changes hands: its producer must not write into it again.
            _disk = n._disk;
            _ownsDisk = n._ownsDisk;
            n._ownsDisk = false;
        }
        _parts |= n._parts;
    }

    public override JournalItem Snapshot()
    {
        _ownsDisk = false;
        return new InodeLogItem(Ino, Cluster, _disk, _parts, ownsDisk: false) { Lsn = Lsn };
    }
}

using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Mkfs;

/// <summary>Where a long mkfs step is: a stage name and how far it got.</summary>
public readonly record struct MkfsProgress(string Stage, long Done, long Total);

/// <summary>
/// The device mkfs writes to: a block device view plus, where the platform allows, whole-range zeroing
/// that keeps image files sparse. Offsets are relative to the start of the file system.
/// </summary>
public sealed class MkfsTarget(IBlockDevice device, string path, long baseOffset, bool isBlockDevice) : IDisposable
{
    public IBlockDevice Device { get; } = device;
    public string Path { get; } = path;
    public long BaseOffset { get; } = baseOffset;
    public bool IsBlockDevice { get; } = isBlockDevice;

    /// <summary>Bytes written with plain writes (zero-fill fallbacks included): what mkfs cost the device.</summary>
    public long BytesWritten { get; private set; }

    public void Write(long offset, ReadOnlySpan<byte> data)
    {
        Device.Write(offset, data);
        BytesWritten += data.Length;
    }

    /// <summary>Makes a range read as zeros: a hole or BLKZEROOUT where possible, written zeros otherwise.</summary>
    public void ZeroRange(long offset, long length)
    {
        if (length <= 0) return;
        if (DeviceRangeOps.TryZeroRange(Path, IsBlockDevice, BaseOffset + offset, length)) return;
        var zeros = new byte[(int)Math.Min(length, 1 << 20)];
        for (long done = 0; done < length; done += zeros.Length)
            Write(offset + done, zeros.AsSpan(0, (int)Math.Min(zeros.Length, length - done)));
    }

    public void Dispose() => Device.Dispose();
}

/// <summary>
/// Writes a new volume as mkfs.xfs 6.13 does, directly (no log): the AG headers and btree roots of
/// every AG, the AGFLs, the first inode chunk with the root directory and realtime bitmap/summary
/// inodes, a clean log (one unmount record, cycle 1), the secondary superblocks, and last the
/// primary superblock with in-progress cleared. Nothing else of the data area is written.
/// </summary>
/// <summary>Writes <paramref name="data"/> at device byte <paramref name="byteOffset"/>.</summary>
public delegate void DeviceWrite(long byteOffset, ReadOnlySpan<byte> data);

public static class MkfsWriter
{
    private const ulong NullFsIno = ulong.MaxValue;
    private const int ZeroedEdgeBytes = 128 * 1024;

    /// <param name="logTarget">The external log device when the geometry has one (its log starts at byte 0), else null.</param>
    public static void Write(MkfsTarget target, MkfsLayout layout, DateTimeOffset now, IProgress<MkfsProgress>? progress = null, MkfsTarget? logTarget = null)
    {
        var g = layout.Geometry;
        int bs = g.BlockSize, ss = g.SectorSize;
        long deviceBytes = target.Device.Length;
        if (g.ExternalLog != logTarget is not null)
            throw new ArgumentException(g.ExternalLog ? "the geometry has an external log but no log device was given" : "a log device was given for an internal log", nameof(logTarget));

        // Old signatures at both ends go first, as mkfs.xfs does (its first and last 128 KiB).
        target.ZeroRange(0, Math.Min(ZeroedEdgeBytes, deviceBytes));
        if (deviceBytes > ZeroedEdgeBytes) target.ZeroRange(deviceBytes - ZeroedEdgeBytes, ZeroedEdgeBytes);

        // The log: zeroed whole, then one unmount record at its start.
        var logOn = logTarget ?? target;
        long logByte = g.ExternalLog ? 0 : FsbToByte(g, g.LogStart);
        progress?.Report(new MkfsProgress("zeroing the log", 0, 1));
        logOn.ZeroRange(logByte, (long)g.LogBlocks * bs);
        WriteCleanLog(logOn, g, logByte);
        logOn.Device.Flush();
        progress?.Report(new MkfsProgress("zeroing the log", 1, 1));

        var sector = new byte[ss];
        var block = new byte[bs];
        for (uint agno = 0; agno < g.AgCount; agno++)
        {
            var ag = layout.Ags[(int)agno];
            long agByte = (long)agno * g.AgBlocks * bs;
            if (agno > 0)
            {
                bool rootCopy = agno == g.AgCount - 1 || (g.AgCount > 2 && agno == (g.AgCount - 1) / 2);
                EncodeSuperblock(sector, layout, primary: false, rootCopy);
                target.Write(agByte, sector);
            }
            WriteAgHeaders(target.Write, g, ag, layout.ChunkInodes);
            if (agno % 64 == 0 || agno == g.AgCount - 1)
                progress?.Report(new MkfsProgress("writing allocation groups", agno + 1, g.AgCount));
        }

        foreach (var chunk in layout.Chunks) WriteInodeChunk(target, layout, chunk, now);

        EncodeSuperblock(sector, layout, primary: true, rootCopy: true);
        target.Write(0, sector);
        target.Device.Flush();
    }

    /// <summary>
    /// Writes one AG's AGF, AGI, AGFL and btree roots (not its superblock copy) as mkfs.xfs and the kernel's
    /// xfs_ag_init_headers build them from <paramref name="ag"/>: the same code makes a new volume's AGs and the
    /// AGs a grow adds. <paramref name="chunkInodes"/> is the size of an inode allocation (the AG's inode chunk, if any).
    /// </summary>
    public static void WriteAgHeaders(DeviceWrite write, MkfsGeometry g, AgLayout ag, int chunkInodes)
    {
        int ss = g.SectorSize;
        long agByte = (long)ag.AgNumber * g.AgBlocks * g.BlockSize;
        var sector = new byte[ss];
        EncodeAgf(sector, g, ag);
        write(agByte + ss, sector);
        EncodeAgi(sector, g, ag, chunkInodes);
        write(agByte + 2L * ss, sector);
        EncodeAgfl(sector, g, ag);
        write(agByte + 3L * ss, sector);
        WriteRoots(write, new byte[g.BlockSize], g, ag, agByte, chunkInodes);
    }

    public static long FsbToByte(MkfsGeometry g, ulong fsb)
    {
        ulong agno = fsb >> g.AgBlkLog, agbno = fsb & ((1UL << g.AgBlkLog) - 1);
        return (long)((agno * g.AgBlocks + agbno) * (ulong)g.BlockSize);
    }

    /// <summary>
    /// The superblock. The primary holds the final counters and inode numbers; the secondaries are
    /// the copy made before any inode existed (in progress, no counters, no realtime inodes), of which
    /// the last AG's and the middle one's carry the root inode for repair.
    /// </summary>
    public static void EncodeSuperblock(Span<byte> sector, MkfsLayout layout, bool primary, bool rootCopy)
    {
        var g = layout.Geometry;
        sector.Clear();
        var w = new SuperblockWriter(sector);
        w.MagicNumber = SuperblockView.Magic;
        w.BlockSize = (uint)g.BlockSize;
        w.DataBlocks = g.DataBlocks;
        w.Uuid = g.Uuid;
        w.LogStart = g.LogStart;
        w.RootIno = primary || rootCopy ? layout.RootInode : NullFsIno;
        // metadir volumes keep their realtime inodes in the metadata directory: the sb fields are 0.
        w.RbmIno = g.Metadir ? 0 : primary ? layout.RootInode + 1 : NullFsIno;
        w.RsumIno = g.Metadir ? 0 : primary ? layout.RootInode + 2 : NullFsIno;
        w.RtExtSize = g.RtExtSize;
        w.AgBlocks = g.AgBlocks;
        w.AgCount = g.AgCount;
        w.LogBlocks = g.LogBlocks;
        w.VersionNum = g.VersionNum;
        w.SectSize = (ushort)g.SectorSize;
        w.InodeSize = (ushort)g.InodeSize;
        w.InodesPerBlock = (ushort)g.InodesPerBlock;
        w.Fname = Encoding.UTF8.GetBytes(g.Label);
        w.BlockLog = (byte)g.BlockLog;
        w.SectLog = (byte)g.SectorLog;
        w.InodeLog = (byte)g.InodeLog;
        w.InoPBlog = (byte)g.InoPBlog;
        w.AgBlkLog = (byte)g.AgBlkLog;
        w.InProgress = primary ? (byte)0 : (byte)1;
        w.ImaxPct = (byte)g.ImaxPct;
        if (primary)
        {
            w.Icount = layout.InodeCount;
            w.Ifree = layout.FreeInodeCount;
            w.Fdblocks = layout.FreeDataBlocks;
        }
        else
        {
            w.Fdblocks = g.DataBlocks - (ulong)g.AgCount * g.PreallocBlocks - (g.ExternalLog ? 0 : g.LogBlocks);
        }
        w.InoAlignMt = g.InodeAlignment;
        w.Unit = g.StripeUnit;
        w.Width = g.StripeWidth;
        w.DirBlkLog = (byte)g.DirBlkLog;
        if (g.SectorSize > 512 || g.LogSectorSize > 512)
        {
            w.LogSectLog = (byte)System.Numerics.BitOperations.Log2((uint)g.LogSectorSize);
            w.LogSectSize = (ushort)g.LogSectorSize;
        }
        w.LogSunit = g.LogStripeUnitBytes;
        w.Features2 = g.Features2;
        w.BadFeatures2 = g.Features2;
        w.FeaturesRoCompat = g.RoCompat;
        w.FeaturesIncompat = g.Incompat;
        w.SpinoAlign = g.SparseInodeAlignment;
        if (g.Metadir)
        {
            w.MetadirIno = primary || rootCopy ? layout.MetadirInode : NullFsIno;
            w.RgExtents = g.RgExtents;
            w.RgBlkLog = (byte)g.RgBlkLog;
        }
        if (g.Crc) w.StampCrc(g.SectorSize);
    }

    private static void EncodeAgf(Span<byte> sector, MkfsGeometry g, AgLayout ag)
    {
        sector.Clear();
        var w = new AgfWriter(sector);
        w.Init(ag.AgNumber, ag.Length);
        w.BnoRoot = g.BnoRoot;
        w.CntRoot = g.CntRoot;
        w.BnoLevel = 1;
        w.CntLevel = 1;
        if (g.Rmapbt)
        {
            w.RmapRoot = g.RmapRoot;
            w.RmapLevel = 1;
            w.RmapBlocks = 1;
        }
        if (g.Reflink)
        {
            w.RefcountRoot = g.RefcountRoot;
            w.RefcountLevel = 1;
            w.RefcountBlocks = 1;
        }
        // The ring starts at slot 1: flfirst 1, fllast = count (0 when empty).
        w.FlFirst = 1;
        w.FlLast = (uint)ag.FreelistBlocks.Count;
        w.FlCount = (uint)ag.FreelistBlocks.Count;
        w.FreeBlocks = ag.FreeBlocks;
        w.Longest = ag.Longest;
        if (g.Crc)
        {
            w.Uuid = g.Uuid;
            w.StampCrc(g.SectorSize);
        }
    }

    private static void EncodeAgi(Span<byte> sector, MkfsGeometry g, AgLayout ag, int chunkInodes)
    {
        sector.Clear();
        var w = new AgiWriter(sector);
        w.Init(ag.AgNumber, ag.Length);
        w.Root = g.InoRoot;
        w.Level = 1;
        if (ag.Chunk is { } chunk)
        {
            w.Count = (uint)chunkInodes;
            w.FreeCount = (uint)(chunkInodes - chunk.UsedInodes);
            w.NewIno = chunk.AgBlock << g.InoPBlog;
        }
        if (g.Crc) w.Uuid = g.Uuid;
        if (g.Finobt)
        {
            w.FreeRoot = g.FinoRoot;
            w.FreeLevel = 1;
        }
        if (g.InobtCount)
        {
            w.InobtBlocks = 1;
            w.FinobtBlocks = 1;
        }
        if (g.Crc) w.StampCrc(g.SectorSize);
    }

    private static void EncodeAgfl(Span<byte> sector, MkfsGeometry g, AgLayout ag)
    {
        sector.Clear();
        var w = new AgflWriter(sector, g.Crc);
        if (g.Crc) w.Init(ag.AgNumber, g.Uuid);
        else w.InitV4();
        for (int i = 0; i < ag.FreelistBlocks.Count; i++) w.SetSlot(i + 1, ag.FreelistBlocks[i]);
        if (g.Crc) w.StampCrc();
    }

    private static void WriteRoots(DeviceWrite write, byte[] block, MkfsGeometry g, AgLayout ag, long agByte, int chunkInodes)
    {
        int hdr = BtreeBlockView.HeaderSize(longForm: false, v5: g.Crc);
        void Emit(uint agbno, uint magic, int numRecs)
        {
            long at = agByte + (long)agbno * g.BlockSize;
            if (g.Crc)
            {
                ShortBtreeBlockWriter.WriteHeader(block, magic, 0, (ushort)numRecs, at, g.Uuid, ag.AgNumber);
                ShortBtreeBlockWriter.StampCrc(block);
            }
            else
            {
                ShortBtreeBlockWriter.WriteHeaderV4(block, magic, 0, (ushort)numRecs);
            }
            write(at, block);
        }

        // bnobt (by start) and cntbt (by length, then start) hold the same free extents.
        Array.Clear(block);
        for (int i = 0; i < ag.FreeExtents.Count; i++) ag.FreeExtents[i].Encode(block.AsSpan(hdr + i * AllocRecord.Size));
        Emit(g.BnoRoot, g.Crc ? BtreeMagic.BnoV5 : BtreeMagic.BnoV4, ag.FreeExtents.Count);
        Array.Clear(block);
        var bySize = ag.FreeExtents.OrderBy(e => e.BlockCount).ThenBy(e => e.StartBlock).ToList();
        for (int i = 0; i < bySize.Count; i++) bySize[i].Encode(block.AsSpan(hdr + i * AllocRecord.Size));
        Emit(g.CntRoot, g.Crc ? BtreeMagic.CntV5 : BtreeMagic.CntV4, bySize.Count);

        // Inode btrees: AG 0 holds the first chunk (64-inode records; a 64 KiB block's chunk needs two).
        var records = new List<InobtRecord>();
        if (ag.Chunk is { } chunk)
        {
            uint first = chunk.AgBlock << g.InoPBlog;
            for (int r = 0; r < chunkInodes / 64; r++)
            {
                int used = Math.Max(0, Math.Min(64, chunk.UsedInodes - r * 64));
                ulong freeMask = used == 0 ? ulong.MaxValue : ulong.MaxValue << used;
                records.Add(new InobtRecord(first + (uint)(r * 64), 0, 64, (uint)(64 - used), freeMask));
            }
        }
        Array.Clear(block);
        for (int i = 0; i < records.Count; i++)
        {
            var span = block.AsSpan(hdr + i * InobtRecord.Size);
            if (g.SparseInodes) records[i].EncodeSparse(span);
            else records[i].EncodeFull(span);
        }
        Emit(g.InoRoot, g.Crc ? BtreeMagic.InoV5 : BtreeMagic.InoV4, records.Count);
        if (g.Finobt)
        {
            // The finobt holds the same records: every chunk mkfs makes has free inodes.
            Emit(g.FinoRoot, BtreeMagic.FinoV5, records.Count);
        }

        if (g.Rmapbt)
        {
            Array.Clear(block);
            for (int i = 0; i < ag.Rmaps.Count; i++)
                RmapRecordWriter.Write(block.AsSpan(hdr + i * RmapRecord.Size), ag.Rmaps[i].Start, ag.Rmaps[i].Length, ag.Rmaps[i].Owner);
            Emit(g.RmapRoot, BtreeMagic.RmapV5, ag.Rmaps.Count);
        }
        if (g.Reflink)
        {
            Array.Clear(block);
            Emit(g.RefcountRoot, BtreeMagic.RefcountV5, 0);
        }
    }

    /// <summary>
    /// The first inode chunk: every inode a free V3 core (V2 on V4 volumes; one random generation for the chunk),
    /// then the root directory (short form, empty, its own parent) and the realtime bitmap and summary files.
    /// </summary>
    private static void WriteInodeChunk(MkfsTarget target, MkfsLayout layout, InodeChunk where, DateTimeOffset now)
    {
        var g = layout.Geometry;
        int isize = g.InodeSize;
        var chunk = new byte[(int)layout.ChunkBlocks * g.BlockSize];
        uint chunkGeneration = (uint)RandomNumberGenerator.GetInt32(int.MinValue, int.MaxValue);
        ulong firstIno = ((ulong)where.AgNumber << g.AgInoLog) | ((ulong)where.AgBlock << g.InoPBlog);
        for (int i = 0; i < layout.ChunkInodes; i++)
        {
            var w = new DinodeWriter(chunk.AsSpan(i * isize, isize));
            if (g.Crc) w.InitV3(firstIno + (ulong)i, g.Uuid);
            else w.InitV2();
            w.Generation = chunkGeneration;
        }

        long secs = now.ToUnixTimeSeconds();
        uint nsec = (uint)(now.ToUnixTimeMilliseconds() % 1000 * 1_000_000 + now.Ticks % TimeSpan.TicksPerMillisecond * 100);
        ulong time = DinodeWriter.EncodeTime(secs, nsec, g.Bigtime);
        ulong flags2 = (g.Bigtime ? DinodeView.Flag2Bigtime : 0) | (g.Nrext64 ? DinodeView.Flag2Nrext64 : 0);

        void Used(int index, ushort mode, ForkFormat format, uint nlink, uint generation, ulong atime, ushort flags,
            ulong changeCount = 2, bool metadata = false)
        {
            var w = new DinodeWriter(chunk.AsSpan(index * isize, isize));
            w.Mode = mode;
            w.Format = format;
            w.AttrFormat = ForkFormat.Extents;
            w.LinkCount = nlink;
            w.Generation = generation;
            w.Flags = flags;
            if (metadata) w.MetaType = 1; // a metadata directory
            w.AccessTime = atime;
            w.ModifyTime = time;
            w.ChangeTime = time;
            if (g.Crc)
            {
                // The V3 core's tail; a V2 inode's literal area starts where these would be.
                w.ChangeCount = changeCount;
                w.Flags2 = flags2 | (metadata ? DinodeView.Flag2Metadata : 0);
                w.CreationTime = time;
            }
        }

        // V2 inodes keep the generation the chunk was initialised with (only V3 inodes get a fresh one).
        uint RandomGeneration() => g.Crc ? (uint)RandomNumberGenerator.GetInt32(int.MinValue, int.MaxValue) : chunkGeneration;
        // Metadata directories: immutable, sync, noatime, nodump, nosymlinks, nodefrag.
        const ushort metadirFlags = 0x8 | 0x20 | 0x40 | 0x80 | 0x400 | 0x2000;
        // A short-form directory; entries of (name, inode, file type 2 = directory) each.
        void ShortformDir(int index, ulong parent, string? child, ulong childIno)
        {
            var d = new DinodeWriter(chunk.AsSpan(index * isize, isize));
            var sf = d.LiteralArea;
            sf[0] = (byte)(child is null ? 0 : 1);
            sf[1] = 0;
            BinaryPrimitives.WriteUInt32BigEndian(sf[2..], (uint)parent);
            int size = 6;
            if (child is not null)
            {
                // The entry's offset is where it would sit in a data block: after the header, "." and "..".
                sf[size] = (byte)child.Length;
                BinaryPrimitives.WriteUInt16BigEndian(sf[(size + 1)..], (ushort)(DirectoryDataBlock.HeaderSizeV5 + 16 + 16));
                Encoding.ASCII.GetBytes(child, sf[(size + 3)..]);
                sf[size + 3 + child.Length] = 2;
                BinaryPrimitives.WriteUInt32BigEndian(sf[(size + 4 + child.Length)..], (uint)childIno);
                size += 3 + child.Length + 1 + 4;
            }
            d.Size = (ulong)size;
        }

        int first = 0;
        if (where.AgNumber == 0 && where.AgBlock == layout.ChunkBlock)
        {
            // Root directory: short form with no entries; its parent is itself.
            Used(0, 0x41ED, ForkFormat.Local, 2, 0, time, 0);
            ShortformDir(0, firstIno, null, 0);
            if (g.Metadir)
            {
                Used(1, 0x4000, ForkFormat.Local, 3, layout.MetadirGeneration, time, metadirFlags, 3, metadata: true);
                ShortformDir(1, layout.MetadirInode, "rtgroups", layout.RtGroupsInode);
                first = 2;
            }
            else
            {
                // Realtime bitmap (its atime is the rt allocator's sequence, 0) and summary: empty regular files.
                Used(1, 0x8000, ForkFormat.Extents, 1, RandomGeneration(), 0, 0x4 /* NEWRTBM */);
                Used(2, 0x8000, ForkFormat.Extents, 1, RandomGeneration(), time, 0);
                first = 3;
            }
        }
        if (g.Metadir && layout.RtGroupsInode == firstIno + (ulong)first)
        {
            Used(first, 0x4000, ForkFormat.Local, 2, RandomGeneration(), time, metadirFlags, 2, metadata: true);
            ShortformDir(first, layout.MetadirInode, null, 0);
            if (g.Parent)
            {
                // Its parent pointer: a short-form attribute fork at the default offset (bmdr space of 12 pointers,
                // 196 bytes, in 8-byte units) holding name "rtgroups", flag PARENT, value {parent inode, its generation}.
                const byte forkOffset = (4 + 12 * 16) >> 3;
                var d = new DinodeWriter(chunk.AsSpan(first * isize, isize));
                d.ForkOffset = forkOffset;
                d.AttrFormat = ForkFormat.Local;
                var attr = d.LiteralArea[(forkOffset << 3)..];
                const string name = "rtgroups";
                int total = AttrShortformView.HeaderSize + 3 + name.Length + 12;
                BinaryPrimitives.WriteUInt16BigEndian(attr, (ushort)total);
                attr[2] = 1;
                attr[3] = 0;
                attr[4] = (byte)name.Length;
                attr[5] = 12;
                attr[6] = 0x8; // XFS_ATTR_PARENT
                Encoding.ASCII.GetBytes(name, attr[7..]);
                BinaryPrimitives.WriteUInt64BigEndian(attr[(7 + name.Length)..], layout.MetadirInode);
                BinaryPrimitives.WriteUInt32BigEndian(attr[(15 + name.Length)..], layout.MetadirGeneration);
            }
        }

        if (g.Crc)
        {
            for (int i = 0; i < layout.ChunkInodes; i++) new DinodeWriter(chunk.AsSpan(i * isize, isize)).StampCrc();
        }
        target.Write(((long)where.AgNumber * g.AgBlocks + where.AgBlock) * g.BlockSize, chunk);
    }

    /// <summary>
    /// The clean log mkfs leaves: one record at log block 0, cycle 1, holding only an unmount record
    /// (xlog_rec_header; the unmount op in the next sector, whose first word moves into h_cycle_data).
    /// Record size: the log stripe unit, or 1 KiB. A V4 volume's record has no CRC; a v1 log's header says version 1.
    /// </summary>
    private static void WriteCleanLog(MkfsTarget target, MkfsGeometry g, long logByte)
    {
        const int bb = LogArea.BBSize;
        const uint cycle = 1;
        int lsunit = g.LogStripeUnitBlocks != 0 ? (int)(g.LogStripeUnitBlocks * g.BlockSize) : 0;
        int recordBytes = Math.Max(2 * bb, lsunit);
        int headerBlocks = Math.Max(1, (lsunit + LogRecordHeader.CycleSize - 1) / LogRecordHeader.CycleSize);
        int hlen = recordBytes - headerBlocks * bb;
        var rec = new byte[recordBytes];
        var h = rec.AsSpan(0, bb);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffMagic..], LogRecordHeader.HeaderMagic);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffCycle..], cycle);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffVersion..], (uint)(g.LogVersion == 2 ? LogRecordHeader.Version2 : LogRecordHeader.Version1));
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffLen..], hlen);
        BinaryPrimitives.WriteUInt64BigEndian(h[LogRecordHeader.OffLsn..], Lsn.Make(cycle, 0));
        BinaryPrimitives.WriteUInt64BigEndian(h[LogRecordHeader.OffTailLsn..], Lsn.Make(cycle, 0));
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffPrevBlock..], -1);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffNumLogops..], 1);
        BinaryPrimitives.WriteUInt32BigEndian(h[LogRecordHeader.OffFmt..], LogRecordHeader.FmtLinuxLittleEndian);
        g.Uuid.TryWriteBytes(h.Slice(LogRecordHeader.OffFsUuid, 16), bigEndian: true, out _);
        BinaryPrimitives.WriteInt32BigEndian(h[LogRecordHeader.OffSize..], Math.Max(lsunit, LogRecordHeader.CycleSize));

        var data = rec.AsSpan(headerBlocks * bb);
        UnmountRecord.Write(data);
        int dataBlocks = hlen / bb;
        for (int i = 0; i < dataBlocks; i++)
        {
            var blk = data.Slice(i * bb, bb);
            int j = i / LogRecordHeader.CycleDataSlots, k = i % LogRecordHeader.CycleDataSlots;
            int slot = j == 0 ? LogRecordHeader.OffCycleData + 4 * k : j * bb + LogExtendedHeader.OffCycleData + 4 * k;
            BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(slot), BinaryPrimitives.ReadUInt32BigEndian(blk));
            BinaryPrimitives.WriteUInt32BigEndian(blk, cycle);
        }
        for (int j = 1; j < headerBlocks; j++)
            BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(j * bb + LogExtendedHeader.OffCycle), cycle);
        if (g.Crc)
        {
            uint crc = LogReader.ComputeCrc(rec, headerBlocks, hlen, LogRecordHeader.CrcSize);
            BinaryPrimitives.WriteUInt32LittleEndian(rec.AsSpan(LogRecordHeader.OffCrc), crc);
        }
        target.Write(logByte, rec);
    }
}

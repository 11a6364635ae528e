using System.Buffers.Binary;
using System.Text;

namespace XfsWin.Format;

/// <summary>Feature bits of the superblock, by their kernel names.</summary>
public static class SuperblockFeatures
{
    // sb_versionnum
    public const ushort VersionNumberMask = 0x000F;
    public const ushort VersionAttr = 0x0010, VersionNlink = 0x0020, VersionQuota = 0x0040, VersionAlign = 0x0080,
        VersionDalign = 0x0100, VersionShared = 0x0200, VersionLogV2 = 0x0400, VersionSector = 0x0800,
        VersionExtFlag = 0x1000, VersionDirV2 = 0x2000, VersionBorg = 0x4000, VersionMoreBits = 0x8000;

    // sb_features2
    public const uint F2LazySbCount = 0x02, F2Attr2 = 0x08, F2Parent = 0x10, F2ProjId32 = 0x80, F2Crc = 0x100, F2Ftype = 0x200;

    // sb_features_ro_compat
    public const uint RoCompatFinobt = 0x1, RoCompatRmapbt = 0x2, RoCompatReflink = 0x4, RoCompatInobtCount = 0x8;
    public const uint RoCompatKnown = 0xF;

    // sb_features_incompat
    public const uint IncompatFtype = 0x1, IncompatSparseInodes = 0x2, IncompatMetaUuid = 0x4, IncompatBigtime = 0x8,
        IncompatNeedsRepair = 0x10, IncompatNrext64 = 0x20, IncompatExchangeRange = 0x40, IncompatParent = 0x80,
        IncompatMetadir = 0x100, IncompatZoned = 0x200;
    /// <summary>Incompatible features this build reads correctly.</summary>
    public const uint IncompatKnown = 0x1FF;

    // sb_features_log_incompat
    public const uint LogIncompatXattrs = 0x1;
    public const uint LogIncompatKnown = 0x1;

    public static string IncompatName(int bit) => (1u << bit) switch
    {
        IncompatFtype => "ftype",
        IncompatSparseInodes => "sparse inodes",
        IncompatMetaUuid => "meta_uuid",
        IncompatBigtime => "bigtime",
        IncompatNeedsRepair => "needsrepair",
        IncompatNrext64 => "nrext64",
        IncompatExchangeRange => "exchange-range",
        IncompatParent => "parent pointers",
        IncompatMetadir => "metadir",
        IncompatZoned => "zoned (realtime zones)",
        _ => $"unknown incompatible feature bit {bit} (0x{1u << bit:x})",
    };
}

/// <summary>
/// xfs_dsb: the on-disk superblock, a big-endian view with named offsets (the layout is declared
/// here once). The primary copy lives in the first sector of AG 0; each AG starts with a copy.
/// </summary>
public readonly ref struct SuperblockView
{
    public const uint Magic = 0x58465342; // "XFSB"
    public const int OffMagic = 0, OffBlockSize = 4, OffDataBlocks = 8, OffRtBlocks = 16, OffRtExtents = 24, OffUuid = 32,
        OffLogStart = 48, OffRootIno = 56, OffRbmIno = 64, OffRsumIno = 72, OffRtExtSize = 80, OffAgBlocks = 84,
        OffAgCount = 88, OffRbmBlocks = 92, OffLogBlocks = 96, OffVersionNum = 100, OffSectSize = 102, OffInodeSize = 104,
        OffInoPBlock = 106, OffFname = 108, OffBlockLog = 120, OffSectLog = 121, OffInodeLog = 122, OffInoPBlog = 123,
        OffAgBlkLog = 124, OffRextSlog = 125, OffInProgress = 126, OffImaxPct = 127, OffIcount = 128, OffIfree = 136,
        OffFdblocks = 144, OffFrextents = 152, OffUquotIno = 160, OffGquotIno = 168, OffQflags = 176, OffFlags = 178,
        OffSharedVn = 179, OffInoAlignMt = 180, OffUnit = 184, OffWidth = 188, OffDirBlkLog = 192, OffLogSectLog = 193,
        OffLogSectSize = 194, OffLogSunit = 196, OffFeatures2 = 200, OffBadFeatures2 = 204, OffFeaturesCompat = 208,
        OffFeaturesRoCompat = 212, OffFeaturesIncompat = 216, OffFeaturesLogIncompat = 220, OffCrc = 224,
        OffSpinoAlign = 228, OffPquotIno = 232, OffLsn = 240, OffMetaUuid = 248, OffMetadirIno = 264,
        OffRgCount = 272, OffRgExtents = 276, OffRgBlkLog = 280;
    /// <summary>Size of xfs_dsb as of Linux 6.13 (with the metadir and realtime group fields).</summary>
    public const int Size = 288;

    private readonly ReadOnlySpan<byte> _b;

    public SuperblockView(ReadOnlySpan<byte> sector) => _b = sector;

    private uint U32(int o) => BinaryPrimitives.ReadUInt32BigEndian(_b[o..]);
    private ulong U64(int o) => BinaryPrimitives.ReadUInt64BigEndian(_b[o..]);
    private ushort U16(int o) => BinaryPrimitives.ReadUInt16BigEndian(_b[o..]);

    public uint MagicNumber => U32(OffMagic);
    public uint BlockSize => U32(OffBlockSize);
    public ulong DataBlocks => U64(OffDataBlocks);
    public ulong RtBlocks => U64(OffRtBlocks);
    public ulong RtExtents => U64(OffRtExtents);
    public Guid Uuid => ReadUuid(_b.Slice(OffUuid, 16));
    public ulong LogStart => U64(OffLogStart);
    public ulong RootIno => U64(OffRootIno);
    public ulong RbmIno => U64(OffRbmIno);
    public ulong RsumIno => U64(OffRsumIno);
    public uint RtExtSize => U32(OffRtExtSize);
    public uint RbmBlocks => U32(OffRbmBlocks);
    public byte RextSlog => _b[OffRextSlog];
    public uint AgBlocks => U32(OffAgBlocks);
    public uint AgCount => U32(OffAgCount);
    public uint LogBlocks => U32(OffLogBlocks);
    public ushort VersionNum => U16(OffVersionNum);
    public ushort SectSize => U16(OffSectSize);
    public ushort InodeSize => U16(OffInodeSize);
    public ushort InodesPerBlock => U16(OffInoPBlock);
    public ReadOnlySpan<byte> Fname => _b.Slice(OffFname, 12);
    public byte BlockLog => _b[OffBlockLog];
    public byte SectLog => _b[OffSectLog];
    public byte InodeLog => _b[OffInodeLog];
    public byte InoPBlog => _b[OffInoPBlog];
    public byte AgBlkLog => _b[OffAgBlkLog];
    public byte InProgress => _b[OffInProgress];
    public byte ImaxPct => _b[OffImaxPct];
    public ulong Icount => U64(OffIcount);
    public ulong Ifree => U64(OffIfree);
    public ulong Fdblocks => U64(OffFdblocks);
    public ulong Frextents => U64(OffFrextents);
    public ulong UquotIno => U64(OffUquotIno);
    public ulong GquotIno => U64(OffGquotIno);
    public ushort Qflags => U16(OffQflags);
    public uint InoAlignMt => U32(OffInoAlignMt);
    public uint Unit => U32(OffUnit);
    public uint Width => U32(OffWidth);
    public byte DirBlkLog => _b[OffDirBlkLog];
    public byte LogSectLog => _b[OffLogSectLog];
    public ushort LogSectSize => U16(OffLogSectSize);
    public uint LogSunit => U32(OffLogSunit);
    public uint Features2 => U32(OffFeatures2);
    public uint BadFeatures2 => U32(OffBadFeatures2);
    public uint FeaturesCompat => U32(OffFeaturesCompat);
    public uint FeaturesRoCompat => U32(OffFeaturesRoCompat);
    public uint FeaturesIncompat => U32(OffFeaturesIncompat);
    public uint FeaturesLogIncompat => U32(OffFeaturesLogIncompat);
    public uint SpinoAlign => U32(OffSpinoAlign);
    public ulong PquotIno => U64(OffPquotIno);
    public ulong Lsn => U64(OffLsn);
    public Guid MetaUuid => ReadUuid(_b.Slice(OffMetaUuid, 16));
    public ulong MetadirIno => U64(OffMetadirIno);

    /// <summary>XFS UUIDs are stored in RFC 4122 byte order (big-endian fields), unlike Guid's default.</summary>
    public static Guid ReadUuid(ReadOnlySpan<byte> b) => new(b, bigEndian: true);
}

/// <summary>
/// The decoded primary superblock with the geometry every layer derives addresses from.
/// Produced by <see cref="Decode"/> only after <see cref="Verify"/> passed. Immutable but for the data section's
/// size (<see cref="DataBlocks"/>, <see cref="AgCount"/>) and the inode limit (<see cref="ImaxPct"/>), which an
/// online grow or shrink moves once its transaction is committed and written in place (<see cref="Resized"/>): every
/// layer holding this object then sees the new values; and the label, which an online relabel changes once its
/// transaction is committed (<see cref="Relabeled"/>).
/// </summary>
public sealed class Superblock
{
    /// <summary>sb_fname holds at most this many bytes (UTF-8 by convention; NUL-padded).</summary>
    public const int MaxLabelBytes = 12;

    private ulong _dataBlocks;
    private uint _agCount;
    private string _label = "";
    private int _imaxPct;

    public required uint BlockSize { get; init; }
    public required int BlockLog { get; init; }
    public required ulong DataBlocks { get => Volatile.Read(ref _dataBlocks); init => _dataBlocks = value; }
    public required ulong RtBlocks { get; init; }
    public required Guid Uuid { get; init; }
    /// <summary>The UUID stamped into metadata (differs from <see cref="Uuid"/> when meta_uuid is set).</summary>
    public required Guid MetaUuid { get; init; }
    public required ulong LogStart { get; init; }
    public required uint LogBlocks { get; init; }
    public required int LogSectorSize { get; init; }
    public required uint LogStripeUnit { get; init; }
    public required ulong RootIno { get; init; }
    public required ulong MetadirIno { get; init; }
    public required uint AgBlocks { get; init; }
    public required uint AgCount { get => Volatile.Read(ref _agCount); init => _agCount = value; }
    public required int AgBlkLog { get; init; }
    public required int SectorSize { get; init; }
    public required int InodeSize { get; init; }
    public required int InodeLog { get; init; }
    public required int InodesPerBlock { get; init; }
    public required int InoPBlog { get; init; }
    public required int DirBlockLog { get; init; }
    public required ushort VersionNum { get; init; }
    public required uint Features2 { get; init; }
    public required uint RoCompat { get; init; }
    public required uint Incompat { get; init; }
    public required uint LogIncompat { get; init; }
    public required ulong Icount { get; init; }
    public required ulong Ifree { get; init; }
    public required ulong Fdblocks { get; init; }
    public required uint InodeAlignment { get; init; }
    public required uint SparseInodeAlignment { get; init; }
    public required string Label { get => Volatile.Read(ref _label); init => _label = value; }
    public required ulong Lsn { get; init; }
    /// <summary>Largest share of the data section (percent) inodes may take; 0 = no limit.</summary>
    public required int ImaxPct { get => Volatile.Read(ref _imaxPct); init => _imaxPct = value; }

    /// <summary>
    /// The data section is now <paramref name="dataBlocks"/> blocks in <paramref name="agCount"/> AGs and the inode limit
    /// <paramref name="imaxPct"/> percent (an online grow or tail shrink, after its commit is on disk and the allocator
    /// knows the new AGs). AGs are never removed (a shrink only shortens the last one). When AGs are added the block
    /// count moves first, so a reader that sees the new AG count also sees the new size.
    /// </summary>
    internal void Resized(ulong dataBlocks, uint agCount, int imaxPct)
    {
        if (agCount < _agCount) throw new InvalidOperationException("allocation groups are never removed while mounted");
        if (dataBlocks <= (ulong)(agCount - 1) * AgBlocks || dataBlocks > (ulong)agCount * AgBlocks)
            throw new InvalidOperationException($"{dataBlocks} blocks do not make {agCount} AGs of {AgBlocks}");
        Volatile.Write(ref _dataBlocks, dataBlocks);
        Volatile.Write(ref _agCount, agCount);
        Volatile.Write(ref _imaxPct, imaxPct);
    }

    /// <summary>The label changed to <paramref name="label"/> (an online relabel, after its transaction is committed).</summary>
    internal void Relabeled(string label) => Volatile.Write(ref _label, label);

    /// <summary>
    /// The sb_fname bytes of <paramref name="label"/>: its UTF-8, NUL-padded to <see cref="MaxLabelBytes"/>. A label of
    /// more than 12 bytes, or holding a NUL (which ends the field), is <see cref="XfsError.InvalidArgument"/>.
    /// </summary>
    public static byte[] LabelBytes(string label)
    {
        ArgumentNullException.ThrowIfNull(label);
        if (label.Contains('\0')) throw new XfsException(XfsError.InvalidArgument, "a label cannot contain NUL characters. Nothing was written.");
        byte[] utf8;
        try
        {
            utf8 = new UTF8Encoding(false, throwOnInvalidBytes: true).GetBytes(label);
        }
        catch (EncoderFallbackException)
        {
            throw new XfsException(XfsError.InvalidArgument, $"the label '{label}' is not valid Unicode (an unpaired surrogate). Nothing was written.");
        }
        if (utf8.Length > MaxLabelBytes)
            throw new XfsException(XfsError.InvalidArgument,
                $"the label '{label}' is {utf8.Length} bytes; an XFS label holds at most {MaxLabelBytes}. Nothing was written.");
        var field = new byte[MaxLabelBytes];
        utf8.CopyTo(field, 0);
        return field;
    }

    public bool IsV5 => (VersionNum & SuperblockFeatures.VersionNumberMask) == 5;
    public bool HasFtype => IsV5 ? (Incompat & SuperblockFeatures.IncompatFtype) != 0 : (Features2 & SuperblockFeatures.F2Ftype) != 0;
    public bool HasBigtime => (Incompat & SuperblockFeatures.IncompatBigtime) != 0;
    public bool HasNrext64 => (Incompat & SuperblockFeatures.IncompatNrext64) != 0;
    public bool HasSparseInodes => (Incompat & SuperblockFeatures.IncompatSparseInodes) != 0;
    public bool HasParentPointers => (Incompat & SuperblockFeatures.IncompatParent) != 0;
    public bool HasMetadir => (Incompat & SuperblockFeatures.IncompatMetadir) != 0;
    public bool HasFinobt => (RoCompat & SuperblockFeatures.RoCompatFinobt) != 0;
    public bool HasRmapbt => (RoCompat & SuperblockFeatures.RoCompatRmapbt) != 0;
    public bool HasReflink => (RoCompat & SuperblockFeatures.RoCompatReflink) != 0;
    public bool HasCrc => IsV5;
    public bool HasLogV2 => (VersionNum & SuperblockFeatures.VersionLogV2) != 0;
    public bool HasAsciiCi => (VersionNum & SuperblockFeatures.VersionBorg) != 0;

    public int DirectoryBlockSize => (int)BlockSize << DirBlockLog;
    public int AgInoLog => AgBlkLog + InoPBlog;
    public int SectorsPerBlock => (int)BlockSize >> 9;

    /// <summary>Byte offset of a filesystem block number (AG-encoded: agno in the high bits).</summary>
    public long FsbToByte(ulong fsb)
    {
        ulong agno = fsb >> AgBlkLog;
        ulong agbno = fsb & ((1UL << AgBlkLog) - 1);
        return (long)((agno * AgBlocks + agbno) << BlockLog);
    }

    /// <summary>True when an AG-encoded block number names a block inside the data section.</summary>
    public bool IsValidFsb(ulong fsb)
    {
        ulong agno = fsb >> AgBlkLog;
        ulong agbno = fsb & ((1UL << AgBlkLog) - 1);
        return agno < AgCount && agbno < AgBlocks && agno * AgBlocks + agbno < DataBlocks;
    }

    /// <summary>Whether <paramref name="count"/> blocks from <paramref name="start"/> are a non-empty run whose first and last blocks are in the volume.</summary>
    public bool IsValidExtent(ulong start, ulong count) => count != 0 && IsValidFsb(start) && IsValidFsb(start + count - 1);

    public long AgBlockToByte(uint agno, uint agbno) => (long)(((ulong)agno * AgBlocks + agbno) << BlockLog);

    public uint InoToAgno(ulong ino) => (uint)(ino >> AgInoLog);
    public uint InoToAgino(ulong ino) => (uint)(ino & ((1UL << AgInoLog) - 1));

    /// <summary>Byte offset of an inode's on-disk core.</summary>
    public long InodeToByte(ulong ino)
    {
        uint agno = InoToAgno(ino);
        uint agino = InoToAgino(ino);
        uint agbno = agino >> InoPBlog;
        int index = (int)(agino & ((1u << InoPBlog) - 1));
        return AgBlockToByte(agno, agbno) + ((long)index << InodeLog);
    }

    public bool IsValidInode(ulong ino)
    {
        uint agno = InoToAgno(ino);
        if (agno >= AgCount || (ino >> AgInoLog) != agno) return false;
        uint agbno = InoToAgino(ino) >> InoPBlog;
        return agbno < AgBlocks && (ulong)agno * AgBlocks + agbno < DataBlocks && ino != 0;
    }

    public static VerifyResult Verify(ReadOnlySpan<byte> sector)
    {
        if (sector.Length < 512) return VerifyResult.Fail("superblock shorter than a sector");
        var v = new SuperblockView(sector);
        if (v.MagicNumber != SuperblockView.Magic) return VerifyResult.Fail("bad magic (not an XFS volume)", SuperblockView.OffMagic);
        int version = v.VersionNum & SuperblockFeatures.VersionNumberMask;
        if (version is not (4 or 5)) return VerifyResult.Fail($"unsupported superblock version {version}", SuperblockView.OffVersionNum);
        if (v.SectSize is < 512 or > 32768 || (v.SectSize & (v.SectSize - 1)) != 0 || 1 << v.SectLog != v.SectSize)
            return VerifyResult.Fail($"bad sector size {v.SectSize}", SuperblockView.OffSectSize);
        if (version == 5 && !XfsCrc.Verify(sector[..v.SectSize], SuperblockView.OffCrc))
            return VerifyResult.Fail("CRC mismatch", SuperblockView.OffCrc);
        if (v.BlockSize is < 512 or > 65536 || 1u << v.BlockLog != v.BlockSize)
            return VerifyResult.Fail($"bad block size {v.BlockSize}", SuperblockView.OffBlockSize);
        if (v.InodeSize is < 256 or > 2048 || 1 << v.InodeLog != v.InodeSize || v.InodeSize > v.BlockSize
            || v.InodesPerBlock != v.BlockSize / v.InodeSize || 1 << v.InoPBlog != v.InodesPerBlock)
            return VerifyResult.Fail($"bad inode geometry (size {v.InodeSize}, {v.InodesPerBlock} per block)", SuperblockView.OffInodeSize);
        if (v.AgCount == 0 || v.AgBlocks < 16 || v.AgBlkLog is < 4 or > 31 || v.AgBlocks > 1u << v.AgBlkLog || v.AgBlocks <= 1u << (v.AgBlkLog - 1))
            return VerifyResult.Fail($"bad AG geometry ({v.AgCount} AGs of {v.AgBlocks} blocks, agblklog {v.AgBlkLog})", SuperblockView.OffAgBlocks);
        if (v.DataBlocks > (ulong)v.AgCount * v.AgBlocks || v.DataBlocks <= (ulong)(v.AgCount - 1) * v.AgBlocks)
            return VerifyResult.Fail($"data blocks {v.DataBlocks} do not match {v.AgCount} AGs of {v.AgBlocks}", SuperblockView.OffDataBlocks);
        if (v.BlockLog + v.DirBlkLog > 16)
            return VerifyResult.Fail($"directory block size 2^{v.BlockLog + v.DirBlkLog} over 64 KiB", SuperblockView.OffDirBlkLog);
        if (v.RootIno == 0) return VerifyResult.Fail("no root inode", SuperblockView.OffRootIno);
        return VerifyResult.Ok;
    }

    public static Superblock Decode(ReadOnlySpan<byte> sector)
    {
        var v = new SuperblockView(sector);
        var fname = v.Fname;
        int nul = fname.IndexOf((byte)0);
        return new Superblock
        {
            BlockSize = v.BlockSize,
            BlockLog = v.BlockLog,
            DataBlocks = v.DataBlocks,
            RtBlocks = v.RtBlocks,
            Uuid = v.Uuid,
            MetaUuid = (v.FeaturesIncompat & SuperblockFeatures.IncompatMetaUuid) != 0 && (v.VersionNum & 0xF) == 5 ? v.MetaUuid : v.Uuid,
            LogStart = v.LogStart,
            LogBlocks = v.LogBlocks,
            LogSectorSize = v.LogSectSize == 0 ? 512 : v.LogSectSize,
            LogStripeUnit = v.LogSunit,
            RootIno = v.RootIno,
            MetadirIno = (v.FeaturesIncompat & SuperblockFeatures.IncompatMetadir) != 0 ? v.MetadirIno : 0,
            AgBlocks = v.AgBlocks,
            AgCount = v.AgCount,
            AgBlkLog = v.AgBlkLog,
            SectorSize = v.SectSize,
            InodeSize = v.InodeSize,
            InodeLog = v.InodeLog,
            InodesPerBlock = v.InodesPerBlock,
            InoPBlog = v.InoPBlog,
            DirBlockLog = v.DirBlkLog,
            VersionNum = v.VersionNum,
            Features2 = (v.VersionNum & SuperblockFeatures.VersionMoreBits) != 0 ? v.Features2 | v.BadFeatures2 : 0,
            RoCompat = (v.VersionNum & 0xF) == 5 ? v.FeaturesRoCompat : 0,
            Incompat = (v.VersionNum & 0xF) == 5 ? v.FeaturesIncompat : 0,
            LogIncompat = (v.VersionNum & 0xF) == 5 ? v.FeaturesLogIncompat : 0,
            Icount = v.Icount,
            Ifree = v.Ifree,
            Fdblocks = v.Fdblocks,
            InodeAlignment = v.InoAlignMt,
            SparseInodeAlignment = v.SpinoAlign,
            Label = Encoding.UTF8.GetString(nul >= 0 ? fname[..nul] : fname),
            Lsn = v.Lsn,
            ImaxPct = v.ImaxPct,
        };
    }

    /// <summary>Every enabled feature by the name mkfs.xfs / xfs_info use.</summary>
    public IReadOnlyList<string> FeatureNames()
    {
        var names = new List<string> { IsV5 ? "crc (V5)" : "V4" };
        void Add(bool on, string name) { if (on) names.Add(name); }
        Add((VersionNum & SuperblockFeatures.VersionAttr) != 0, "attr");
        Add((Features2 & SuperblockFeatures.F2Attr2) != 0, "attr2");
        Add((VersionNum & SuperblockFeatures.VersionQuota) != 0, "quota");
        Add((VersionNum & SuperblockFeatures.VersionAlign) != 0, "inode-align");
        Add((VersionNum & SuperblockFeatures.VersionDalign) != 0, "stripe-align");
        Add(HasLogV2, "logv2");
        Add((VersionNum & SuperblockFeatures.VersionSector) != 0, "sector");
        Add((VersionNum & SuperblockFeatures.VersionExtFlag) != 0, "unwritten");
        Add(HasAsciiCi, "ascii-ci");
        Add((Features2 & SuperblockFeatures.F2LazySbCount) != 0, "lazy-count");
        Add((Features2 & SuperblockFeatures.F2ProjId32) != 0, "projid32bit");
        Add(HasFtype, "ftype");
        Add(HasFinobt, "finobt");
        Add(HasRmapbt, "rmapbt");
        Add(HasReflink, "reflink");
        Add((RoCompat & SuperblockFeatures.RoCompatInobtCount) != 0, "inobtcount");
        for (int bit = 1; bit < 32; bit++)
        {
            if ((Incompat & (1u << bit)) != 0) names.Add(SuperblockFeatures.IncompatName(bit));
        }
        Add((LogIncompat & SuperblockFeatures.LogIncompatXattrs) != 0, "log: logged xattrs");
        Add(RtBlocks > 0, "realtime");
        return names;
    }
}

/// <summary>
/// Field setters over a superblock sector, at the offsets <see cref="SuperblockView"/> declares: how
/// mkfs (and later label/uuid/grow) build or change one. <see cref="StampCrc"/> goes last.
/// </summary>
public readonly ref struct SuperblockWriter
{
    private readonly Span<byte> _b;
    public SuperblockWriter(Span<byte> sector) => _b = sector;

    private void U16(int o, ushort v) => BinaryPrimitives.WriteUInt16BigEndian(_b[o..], v);
    private void U32(int o, uint v) => BinaryPrimitives.WriteUInt32BigEndian(_b[o..], v);
    private void U64(int o, ulong v) => BinaryPrimitives.WriteUInt64BigEndian(_b[o..], v);

    public uint MagicNumber { set => U32(SuperblockView.OffMagic, value); }
    public uint BlockSize { set => U32(SuperblockView.OffBlockSize, value); }
    public ulong DataBlocks { set => U64(SuperblockView.OffDataBlocks, value); }
    public ulong RtBlocks { set => U64(SuperblockView.OffRtBlocks, value); }
    public ulong RtExtents { set => U64(SuperblockView.OffRtExtents, value); }
    public Guid Uuid { set => value.TryWriteBytes(_b.Slice(SuperblockView.OffUuid, 16), bigEndian: true, out _); }
    public ulong LogStart { set => U64(SuperblockView.OffLogStart, value); }
    public ulong RootIno { set => U64(SuperblockView.OffRootIno, value); }
    public ulong RbmIno { set => U64(SuperblockView.OffRbmIno, value); }
    public ulong RsumIno { set => U64(SuperblockView.OffRsumIno, value); }
    public uint RtExtSize { set => U32(SuperblockView.OffRtExtSize, value); }
    public uint AgBlocks { set => U32(SuperblockView.OffAgBlocks, value); }
    public uint AgCount { set => U32(SuperblockView.OffAgCount, value); }
    public uint RbmBlocks { set => U32(SuperblockView.OffRbmBlocks, value); }
    public uint LogBlocks { set => U32(SuperblockView.OffLogBlocks, value); }
    public ushort VersionNum { set => U16(SuperblockView.OffVersionNum, value); }
    public ushort SectSize { set => U16(SuperblockView.OffSectSize, value); }
    public ushort InodeSize { set => U16(SuperblockView.OffInodeSize, value); }
    public ushort InodesPerBlock { set => U16(SuperblockView.OffInoPBlock, value); }
    /// <summary>The label: up to 12 bytes, NUL-padded (not terminated when it fills the field).</summary>
    public ReadOnlySpan<byte> Fname
    {
        set
        {
            var f = _b.Slice(SuperblockView.OffFname, 12);
            f.Clear();
            value[..Math.Min(12, value.Length)].CopyTo(f);
        }
    }
    public byte BlockLog { set => _b[SuperblockView.OffBlockLog] = value; }
    public byte SectLog { set => _b[SuperblockView.OffSectLog] = value; }
    public byte InodeLog { set => _b[SuperblockView.OffInodeLog] = value; }
    public byte InoPBlog { set => _b[SuperblockView.OffInoPBlog] = value; }
    public byte AgBlkLog { set => _b[SuperblockView.OffAgBlkLog] = value; }
    public byte RextSlog { set => _b[SuperblockView.OffRextSlog] = value; }
    public byte InProgress { set => _b[SuperblockView.OffInProgress] = value; }
    public byte ImaxPct { set => _b[SuperblockView.OffImaxPct] = value; }
    public ulong Icount { set => U64(SuperblockView.OffIcount, value); }
    public ulong Ifree { set => U64(SuperblockView.OffIfree, value); }
    public ulong Fdblocks { set => U64(SuperblockView.OffFdblocks, value); }
    public ulong Frextents { set => U64(SuperblockView.OffFrextents, value); }
    public ulong UquotIno { set => U64(SuperblockView.OffUquotIno, value); }
    public ulong GquotIno { set => U64(SuperblockView.OffGquotIno, value); }
    public ulong PquotIno { set => U64(SuperblockView.OffPquotIno, value); }
    public uint InoAlignMt { set => U32(SuperblockView.OffInoAlignMt, value); }
    public uint Unit { set => U32(SuperblockView.OffUnit, value); }
    public uint Width { set => U32(SuperblockView.OffWidth, value); }
    public byte DirBlkLog { set => _b[SuperblockView.OffDirBlkLog] = value; }
    public byte LogSectLog { set => _b[SuperblockView.OffLogSectLog] = value; }
    public ushort LogSectSize { set => U16(SuperblockView.OffLogSectSize, value); }
    public uint LogSunit { set => U32(SuperblockView.OffLogSunit, value); }
    public uint Features2 { set => U32(SuperblockView.OffFeatures2, value); }
    public uint BadFeatures2 { set => U32(SuperblockView.OffBadFeatures2, value); }
    public uint FeaturesCompat { set => U32(SuperblockView.OffFeaturesCompat, value); }
    public uint FeaturesRoCompat { set => U32(SuperblockView.OffFeaturesRoCompat, value); }
    public uint FeaturesIncompat { set => U32(SuperblockView.OffFeaturesIncompat, value); }
    public uint FeaturesLogIncompat { set => U32(SuperblockView.OffFeaturesLogIncompat, value); }
    public uint SpinoAlign { set => U32(SuperblockView.OffSpinoAlign, value); }
    public ulong Lsn { set => U64(SuperblockView.OffLsn, value); }
    public Guid MetaUuid { set => value.TryWriteBytes(_b.Slice(SuperblockView.OffMetaUuid, 16), bigEndian: true, out _); }
    public ulong MetadirIno { set => U64(SuperblockView.OffMetadirIno, value); }
    public uint RgCount { set => U32(SuperblockView.OffRgCount, value); }
    public uint RgExtents { set => U32(SuperblockView.OffRgExtents, value); }
    public byte RgBlkLog { set => _b[SuperblockView.OffRgBlkLog] = value; }

    /// <summary>The V5 CRC over the whole sector (<paramref name="sectorSize"/> bytes).</summary>
    public void StampCrc(int sectorSize) => XfsCrc.Stamp(_b[..sectorSize], SuperblockView.OffCrc);
}

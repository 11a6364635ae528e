using System.Numerics;
using XfsWin.Journal;

namespace XfsWin.Mkfs;

/// <summary>What mkfs needs to know about the target besides the options.</summary>
public sealed record MkfsDeviceFacts
{
    /// <summary>Bytes available (for an image file given -d size, that size).</summary>
    public required long SizeBytes { get; init; }
    /// <summary>Logical sector size the device reports (512 for image files).</summary>
    public int LogicalSectorSize { get; init; } = 512;
    /// <summary>Physical sector size the device reports (512 for image files).</summary>
    public int PhysicalSectorSize { get; init; } = 512;
    /// <summary>True for a block device that reports itself non-rotational (mkfs.xfs 6.13 then sizes for concurrency).</summary>
    public bool SolidState { get; init; }
    /// <summary>Online CPUs, for the solid-state concurrency rules.</summary>
    public int CpuCount { get; init; } = 1;
    public bool IsFile { get; init; } = true;
    /// <summary>
    /// The stripe unit and width the device reports (its minimum and optimal I/O sizes, in whole 512-byte units; 0 when
    /// it reports none or only its physical sector size, as blkid's topology reads them): used when no stripe option is given.
    /// </summary>
    public long StripeUnitBytes { get; init; }
    public long StripeWidthBytes { get; init; }
    /// <summary>The external log device (-l logdev), or null for an internal log.</summary>
    public MkfsLogDeviceFacts? LogDevice { get; init; }
}

/// <summary>What mkfs needs to know about an external log device.</summary>
public sealed record MkfsLogDeviceFacts
{
    public required long SizeBytes { get; init; }
    /// <summary>Logical sector size the device reports (512 for image files): the log's sector size unless -l sectsize or -s size gives one.</summary>
    public int LogicalSectorSize { get; init; } = 512;
}

/// <summary>
/// The geometry mkfs.xfs 6.13 chooses for a device and options (xfs_mkfs.c, libxfs/topology.c): sizes,
/// allocation groups, stripe alignment, log size and place, inode and directory geometry, features, and
/// the root inode. A pure calculation; <see cref="MkfsWriter"/> lays it out.
/// </summary>
public sealed record MkfsGeometry
{
    public const int MaxAgNumberBits = 32;
    public const long MaxLogBlocks = 1024 * 1024;
    public const long MaxLogBytes = 2L * 1024 * 1024 * 1024 - MinLogBytes;
    public const long MinLogBytes = 10L * 1024 * 1024;
    public const int MinLogBlocksFloor = 512;

    public required int BlockSize { get; init; }
    public required int SectorSize { get; init; }
    public required int LogSectorSize { get; init; }
    public required int InodeSize { get; init; }
    public required int DirBlockSize { get; init; }
    public required ulong DataBlocks { get; init; }
    public required uint AgBlocks { get; init; }
    public required uint AgCount { get; init; }
    public required uint StripeUnit { get; init; }
    public required uint StripeWidth { get; init; }
    /// <summary>Log stripe unit in blocks (0 = none).</summary>
    public required uint LogStripeUnitBlocks { get; init; }
    public required uint LogBlocks { get; init; }
    public required ulong LogStart { get; init; }
    public required uint LogAgNumber { get; init; }
    /// <summary>The log is on its own device (sb_logstart 0); <see cref="LogStart"/> and <see cref="LogAgNumber"/> then place nothing in the data section.</summary>
    public bool ExternalLog { get; init; }
    public required int ImaxPct { get; init; }
    public required uint RtExtSize { get; init; }
    public required bool Finobt { get; init; }
    public required bool Rmapbt { get; init; }
    public required bool Reflink { get; init; }
    public required bool Bigtime { get; init; }
    public required bool InobtCount { get; init; }
    public required bool SparseInodes { get; init; }
    public required bool Nrext64 { get; init; }
    public required bool Exchange { get; init; }
    public required bool Parent { get; init; }
    public required bool Metadir { get; init; }
    public required string Label { get; init; }
    public required Guid Uuid { get; init; }
    public required int MinLogBlocks { get; init; }

    // V4 (crc=0) choices; a V5 volume has every one of them on, attr 2 and a version 2 log.
    /// <summary>False for a V4 volume (no metadata CRCs, self-describing headers or V5 features).</summary>
    public bool Crc { get; init; } = true;
    /// <summary>Inode chunks aligned (sb_inoalignmt, the ALIGN version bit).</summary>
    public bool InodeAlign { get; init; } = true;
    public int LogVersion { get; init; } = 2;
    public bool LazyCount { get; init; } = true;
    /// <summary>Directory entries record the file type (on V4 the features2 FTYPE bit).</summary>
    public bool Ftype { get; init; } = true;
    /// <summary>Attribute fork layout: 2 (features2 ATTR2), 1 (the ATTR version bit) or 0 (neither).</summary>
    public int AttrVersion { get; init; } = 2;
    /// <summary>32-bit project IDs (features2 PROJID32).</summary>
    public bool ProjId32 { get; init; } = true;

    /// <summary>
    /// The geometry of an existing volume, as far as its AG headers depend on it (sizes, root blocks, features),
    /// with <paramref name="dataBlocks"/> and <paramref name="agCount"/> as a grow leaves them. <see cref="Uuid"/>
    /// is the UUID metadata headers carry (sb_meta_uuid when the volume's UUID was changed).
    /// </summary>
    public static MkfsGeometry OfVolume(Format.Superblock sb, uint stripeUnit, uint stripeWidth, uint rtExtSize, ulong dataBlocks, uint agCount) => new()
    {
        BlockSize = (int)sb.BlockSize,
        SectorSize = sb.SectorSize,
        LogSectorSize = sb.LogSectorSize,
        InodeSize = sb.InodeSize,
        DirBlockSize = sb.DirectoryBlockSize,
        DataBlocks = dataBlocks,
        AgBlocks = sb.AgBlocks,
        AgCount = agCount,
        StripeUnit = stripeUnit,
        StripeWidth = stripeWidth,
        LogStripeUnitBlocks = sb.LogStripeUnit > 1 ? sb.LogStripeUnit / sb.BlockSize : 0,
        LogBlocks = sb.LogBlocks,
        LogStart = sb.LogStart,
        LogAgNumber = sb.LogStart == 0 ? uint.MaxValue : (uint)(sb.LogStart >> sb.AgBlkLog),
        ExternalLog = sb.LogStart == 0,
        ImaxPct = sb.ImaxPct,
        RtExtSize = rtExtSize,
        Finobt = sb.HasFinobt,
        Rmapbt = sb.HasRmapbt,
        Reflink = sb.HasReflink,
        Bigtime = sb.HasBigtime,
        InobtCount = (sb.RoCompat & Format.SuperblockFeatures.RoCompatInobtCount) != 0,
        SparseInodes = sb.HasSparseInodes,
        Nrext64 = sb.HasNrext64,
        Exchange = (sb.Incompat & Format.SuperblockFeatures.IncompatExchangeRange) != 0,
        Parent = sb.HasParentPointers,
        Metadir = sb.HasMetadir,
        Label = sb.Label,
        Uuid = sb.MetaUuid,
        MinLogBlocks = 0,
        // A V5 volume has all of these (mkfs.xfs and the kernel insist); only V4 volumes say otherwise.
        Crc = sb.IsV5,
        InodeAlign = sb.IsV5 || sb.InodeAlignment != 0,
        LogVersion = sb.IsV5 || sb.HasLogV2 ? 2 : 1,
        LazyCount = sb.IsV5 || (sb.Features2 & 0x02) != 0,
        Ftype = sb.IsV5 || sb.HasFtype,
        AttrVersion = sb.IsV5 || (sb.Features2 & 0x08) != 0 ? 2 : (sb.VersionNum & 0x0010) != 0 ? 1 : 0,
        ProjId32 = sb.IsV5 || (sb.Features2 & 0x80) != 0,
    };

    public int BlockLog => BitOperations.Log2((uint)BlockSize);
    public int SectorLog => BitOperations.Log2((uint)SectorSize);
    public int InodeLog => BitOperations.Log2((uint)InodeSize);
    public int InodesPerBlock => BlockSize / InodeSize;
    public int InoPBlog => BlockLog - InodeLog;
    public int AgBlkLog => Log2Roundup(AgBlocks);
    public int DirBlkLog => BitOperations.Log2((uint)DirBlockSize) - BlockLog;
    public int AgInoLog => AgBlkLog + InoPBlog;

    /// <summary>sb_inoalignmt: chunk alignment in blocks (sparse: a whole 64-inode chunk; 0 with -i align=0).</summary>
    public uint InodeAlignment => !InodeAlign ? 0 : SparseInodes ? (uint)(64 * InodeSize >> BlockLog) : ClusterAlignment;
    /// <summary>sb_spino_align: sparse chunk alignment (the inode cluster) or 0.</summary>
    public uint SparseInodeAlignment => SparseInodes ? ClusterAlignment : 0;
    /// <summary>The inode cluster in blocks: 8 KiB, scaled by the inode size on V5 (V4 clusters do not grow with it).</summary>
    private uint ClusterAlignment => (uint)(ClusterBytes >> BlockLog);
    private int ClusterBytes => Crc ? 8192 * (InodeSize / 256) : 8192;

    /// <summary>sb_versionnum.</summary>
    public ushort VersionNum
    {
        get
        {
            int v = (Crc ? 5 : 4) | 0x0020 /* NLINK */ | 0x1000 /* EXTFLG */ | 0x2000 /* DIRV2 */;
            if (InodeAlign) v |= 0x0080;
            if (LogVersion == 2) v |= 0x0400;
            if (Features2 != 0) v |= 0x8000; /* MOREBITS */
            if (StripeUnit != 0) v |= 0x0100;
            if (SectorSize > 512 || LogSectorSize > 512) v |= 0x0800;
            if (Parent || AttrVersion == 1) v |= 0x0010; /* ATTR */
            return (ushort)v;
        }
    }

    /// <summary>sb_features2: on V4 the file type in directory entries is a features2 bit (FTYPE), on V5 an incompat one.</summary>
    public uint Features2 => (LazyCount ? 0x02u /* LAZYSBCOUNT */ : 0) | (AttrVersion == 2 ? 0x08u /* ATTR2 */ : 0)
        | (ProjId32 ? 0x80u /* PROJID32 */ : 0) | (Crc ? 0x100u /* CRC */ : Ftype ? 0x200u /* FTYPE */ : 0);
    public uint RoCompat => (Finobt ? 1u : 0) | (Rmapbt ? 2u : 0) | (Reflink ? 4u : 0) | (InobtCount ? 8u : 0);
    public uint Incompat => !Crc ? 0 : 1u /* FTYPE */ | (SparseInodes ? 2u : 0) | (Bigtime ? 8u : 0) | (Nrext64 ? 0x20u : 0)
        | (Exchange ? 0x40u : 0) | (Parent ? 0x80u : 0) | (Metadir ? 0x100u : 0);

    /// <summary>sb_logsunit: the log stripe unit in bytes, or 1 when there is none (v2 logs; a v1 log has 0).</summary>
    public uint LogStripeUnitBytes => LogStripeUnitBlocks != 0 ? LogStripeUnitBlocks * (uint)BlockSize : LogVersion == 2 ? 1u : 0;

    /// <summary>First free block of every AG: headers, then one root block per AG btree (xfs_prealloc_blocks).</summary>
    public uint PreallocBlocks => FirstRootBlock + 3 + (Finobt ? 1u : 0) + (Rmapbt ? 1u : 0) + (Reflink ? 1u : 0);
    /// <summary>The by-block free-space btree root: the block after the four header sectors.</summary>
    public uint FirstRootBlock => (uint)(3 * SectorSize / BlockSize) + 1;
    public uint BnoRoot => FirstRootBlock;
    public uint CntRoot => FirstRootBlock + 1;
    public uint InoRoot => FirstRootBlock + 2;
    public uint FinoRoot => Finobt ? FirstRootBlock + 3 : 0;
    public uint RmapRoot => Rmapbt ? FirstRootBlock + 3 + (Finobt ? 1u : 0) : 0;
    public uint RefcountRoot => Reflink ? FirstRootBlock + 3 + (Finobt ? 1u : 0) + (Rmapbt ? 1u : 0) : 0;

    public uint LogAgBlock => (uint)(LogStart & ((1UL << AgBlkLog) - 1));
    public uint InodeChunkBlocks => (uint)(Math.Max(64, InodesPerBlock) >> InoPBlog);
    public int InodesPerChunkAllocation => Math.Max(64, InodesPerBlock);

    /// <summary>Realtime group size in extents that metadir volumes record even without a realtime section (1 TiB).</summary>
    public uint RgExtents => Metadir ? (uint)(((1UL << 40 >> BlockLog) - (1UL << 40 >> BlockLog) % RtExtSize) / RtExtSize) : 0;
    public int RgBlkLog => Metadir ? Log2Roundup((ulong)RgExtents * RtExtSize) : 0;

    /// <summary>Chunk alignment of inode allocations: the stripe unit when inode chunks fit it, else sb_inoalignmt.</summary>
    public uint InodeAllocationAlignment
    {
        get
        {
            uint align = InodeAlignment;
            if (StripeUnit != 0 && align > 1 && align >= ClusterBlocks && (StripeUnit & (align - 1)) == 0) return StripeUnit;
            return align > 1 ? align : 1;
        }
    }

    public uint AgLength(uint agno) => agno == AgCount - 1 ? (uint)(DataBlocks - (ulong)agno * AgBlocks) : AgBlocks;

    public ReservationGeometry ReservationGeometry => new()
    {
        BlockSize = BlockSize,
        SectorSize = SectorSize,
        InodeSize = InodeSize,
        AgBlocks = AgBlocks,
        AgBlkLog = AgBlkLog,
        DirBlockSize = DirBlockSize,
        InodeAlignment = InodeAlignment,
        LogStripeUnit = LogStripeUnitBytes,
        Crc = Crc,
        LogV2 = LogVersion == 2,
        Finobt = Finobt,
        Rmapbt = Rmapbt,
        Reflink = Reflink,
        Nrext64 = Nrext64,
        ParentPointers = Parent,
    };

    /// <summary>Blocks each AGFL starts with (xfs_alloc_min_freelist with one-level btrees).</summary>
    public int InitialFreelistBlocks
    {
        get
        {
            var r = new TransactionReservations(ReservationGeometry);
            int n = Math.Min(2, r.AllocMaxLevels) * 2 - 2;
            n += Math.Min(2, r.AllocMaxLevels) * 2 - 2;
            if (Rmapbt) n += Math.Min(2, r.RmapMaxLevels) * 2 - 2;
            return n;
        }
    }

    /// <summary>xfs_ialloc_calc_rootino: where mkfs's first inode chunk (the root directory's) lands in AG 0.</summary>
    public ulong RootInode
    {
        get
        {
            ulong first = (ulong)((4 * SectorSize + BlockSize - 1) / BlockSize) + 3 + (ulong)InitialFreelistBlocks
                + (Finobt ? 1UL : 0) + (Rmapbt ? 1UL : 0) + (Reflink ? 1UL : 0);
            if (!ExternalLog && LogAgNumber == 0) first += LogBlocks;
            uint align = InodeAlignment;
            bool stripeAligned = StripeUnit != 0 && align > 1 && align >= ClusterBlocks && (StripeUnit & (align - 1)) == 0;
            if (stripeAligned) first = (first + StripeUnit - 1) / StripeUnit * StripeUnit;
            else if (align > 1) first = (first + align - 1) / align * align;
            return first << InoPBlog;
        }
    }

    private uint ClusterBlocks
    {
        get
        {
            int raw = ClusterBytes;
            if (InodeAlignment < (uint)(raw >> BlockLog)) raw = 8192;
            return raw > BlockSize ? (uint)(raw >> BlockLog) : 1;
        }
    }

    public static int Log2Roundup(ulong v) => v <= 1 ? 0 : 64 - BitOperations.LeadingZeroCount(v - 1);

    /// <summary>Largest AG (blocks): just under 1 TiB (XFS_AG_MAX_BLOCKS).</summary>
    public static ulong AgMaxBlocks(int blockLog) => ((1UL << 40) - 1) >> blockLog;
    /// <summary>Smallest AG (blocks): 16 MiB (XFS_AG_MIN_BLOCKS).</summary>
    public static ulong AgMinBlocks(int blockLog) => (1UL << 24) >> blockLog;

    /// <summary>Computes the geometry, or throws <see cref="MkfsUsageException"/> naming what mkfs.xfs refuses.</summary>
    public static MkfsGeometry Calculate(MkfsOptions o, MkfsDeviceFacts device)
    {
        ArgumentNullException.ThrowIfNull(o);
        ArgumentNullException.ThrowIfNull(device);
        if (o.LogInternal == false && o.LogDevice is null)
            throw new MkfsUsageException("no log device given: -l internal=0 needs -l logdev=DEVICE");
        if (o.LogIsFile == true && o.LogDevice is null)
            throw new MkfsUsageException("if -l file then -l name and -l size are required");
        if ((o.LogDevice is null) != (device.LogDevice is null))
            throw new ArgumentException("the log device's facts are given exactly when -l logdev is", nameof(device));
        if (o.AttrVersion is int attr && attr is < 0 or > 2)
            throw new MkfsUsageException($"Invalid value {attr} for -i attr option. Value is too {(attr < 0 ? "small" : "large")}.");
        if (o.LogVersion is int version && version is not (1 or 2))
            throw new MkfsUsageException($"Invalid value {version} for -l version option. Value is too {(version < 1 ? "small" : "large")}.");
        bool crc = o.Crc ?? true;
        if (crc)
        {
            if (o.LogVersion is int lv && lv != 2)
                throw new MkfsUsageException("V2 logs always enabled for CRC enabled filesystems");
            if (o.LazyCount == false)
                throw new MkfsUsageException("Lazy superblock counters always enabled for CRC enabled filesystems");
            if (o.Ftype == false)
                throw new MkfsUsageException("Directory ftype field always enabled on CRC enabled filesystems");
            if (o.InodeAlign == false)
                throw new MkfsUsageException("Inodes always aligned for CRC enabled filesystems");
            if (o.AttrVersion is int av && av != 2)
                throw new MkfsUsageException("V2 attribute format always enabled on CRC enabled filesystems");
            if (o.ProjId32 == false)
                throw new MkfsUsageException("32 bit Project IDs always enabled on CRC enabled filesystems");
        }
        else
        {
            // V4: the V5-only features default off, and asking for one is refused (validate_sb_features).
            ReadOnlySpan<(bool? Given, string Message)> v5Only =
            [
                (o.Finobt, "finobt not supported without CRC support"),
                (o.InobtCount, "inode btree counters not supported without CRC support"),
                (o.SparseInodes, "sparse inodes not supported without CRC support"),
                (o.Rmapbt, "rmapbt not supported without CRC support"),
                (o.Reflink, "reflink not supported without CRC support"),
                (o.Bigtime, "timestamps later than 2038 not supported without CRC support"),
                (o.Nrext64, "64 bit extent count not supported without CRC support"),
                (o.Exchange, "exchange-range not supported without CRC support"),
                (o.Parent, "parent pointers not supported without CRC support"),
                (o.Metadir, "metadata directory not supported without CRC support"),
            ];
            foreach (var (asked, message) in v5Only)
            {
                if (asked == true) throw new MkfsUsageException(message);
            }
            o = o with
            {
                Finobt = false, InobtCount = false, SparseInodes = false, Rmapbt = false, Reflink = false,
                Bigtime = false, Nrext64 = false, Exchange = false, Parent = false, Metadir = false,
            };
        }
        // A log stripe unit needs a version 2 log: mkfs.xfs switches to one.
        int logVersion = crc || o.LogStripeUnitBytes is > 0 || o.LogStripeUnitSectors is > 0 ? 2 : o.LogVersion ?? 2;

        // Block size (V4 volumes may use 512-byte blocks).
        int bs = o.BlockSize ?? 4096;
        int minBs = crc ? 1024 : 512;
        if (!IsPow2(bs) || bs < minBs || bs > 65536)
            throw new MkfsUsageException($"illegal block size {bs}: it must be a power of two from {minBs} to 65536");
        int blog = BitOperations.Log2((uint)bs);

        // Sector size: the device's unless given (mkfs.xfs validate_sectorsize).
        int ss;
        if (o.SectorSize is int given)
        {
            if (!IsPow2(given) || given < 512 || given > 32768)
                throw new MkfsUsageException($"illegal sector size {given}: it must be a power of two from 512 to 32768");
            if (given < device.LogicalSectorSize)
                throw new MkfsUsageException($"illegal sector size {given}; hw sector is {device.LogicalSectorSize}");
            ss = given;
        }
        else if (device.IsFile)
        {
            ss = 512;
        }
        else
        {
            ss = device.PhysicalSectorSize;
            if (ss > 32768 || (bs < ss && bs >= device.LogicalSectorSize)) ss = device.LogicalSectorSize;
        }
        if (ss > bs)
            throw new MkfsUsageException($"illegal sector size {ss}; it must not be larger than the block size {bs}");

        // Inode size (V4: 256 by default, and 256 is allowed).
        int minIsize = crc ? 512 : 256;
        int isize = o.InodeSize ?? minIsize;
        if (isize < 256) throw new MkfsUsageException($"Invalid value {isize} for -i size option. Value is too small.");
        if (isize > 2048) throw new MkfsUsageException($"Invalid value {isize} for -i size option. Value is too large.");
        if (!IsPow2(isize) || isize < minIsize)
            throw new MkfsUsageException(isize < 512 && IsPow2(isize) ? "Minimum inode size for CRCs is 512 bytes" : $"illegal inode size {isize}: it must be a power of two from {minIsize} to 2048");
        if (isize > bs / 2)
            throw new MkfsUsageException($"illegal inode size {isize}: inode size must be at most half the block size ({bs / 2})");

        // Directory block size.
        int dirbs = o.DirBlockSize ?? Math.Max(4096, bs);
        if (!IsPow2(dirbs) || dirbs < bs || dirbs > 65536)
            throw new MkfsUsageException($"illegal directory block size {dirbs}: it must be a power of two from the block size ({bs}) to 65536");

        // Features (validate_sb_features).
        bool finobt = o.Finobt ?? true;
        bool inobtcount = o.InobtCount ?? true;
        if (!finobt)
        {
            if (o.InobtCount == true) throw new MkfsUsageException("inode btree counters not supported without finobt support");
            inobtcount = false;
        }
        bool parent = o.Parent ?? false;
        bool metadir = o.Metadir ?? false;
        if (metadir && o.Exchange == false) throw new MkfsUsageException("metadir not supported without exchange-range support");
        bool exchange = o.Exchange ?? (parent || metadir);
        bool rmapbt = o.Rmapbt ?? true;
        bool reflink = o.Reflink ?? true;

        // Data size.
        ulong dblocks;
        if (o.DataSizeBytes is long dsize)
        {
            if (dsize % ss != 0) throw new MkfsUsageException($"illegal data length {dsize}, not a multiple of the sector size {ss}");
            if (!device.IsFile && dsize > device.SizeBytes)
                throw new MkfsUsageException($"size {dsize} specified for data subvolume is too large, maximum is {device.SizeBytes} bytes");
            dblocks = (ulong)dsize >> blog;
        }
        else
        {
            if (device.SizeBytes <= 0) throw new MkfsUsageException("the target has no size: give one with -d size=");
            dblocks = (ulong)device.SizeBytes >> blog;
        }

        // Stripe geometry (calc_stripe_factors): the options', else what the device reports (image files report none).
        long dsunitBB = 0, dswidthBB = 0;
        bool nodalign = false;
        if (o.StripeUnitSectors.HasValue != o.StripeWidthSectors.HasValue)
            throw new MkfsUsageException("both data sunit and data swidth options must be specified");
        if (o.StripeUnitBytes.HasValue != o.StripeWidthMultiplier.HasValue)
            throw new MkfsUsageException("both data su and data sw options must be specified");
        if (o.StripeUnitBytes.HasValue && o.StripeUnitSectors.HasValue)
            throw new MkfsUsageException("give the data stripe as su/sw or as sunit/swidth, not both");
        if (o.StripeUnitBytes is long su)
        {
            long sw = o.StripeWidthMultiplier!.Value;
            if (su % ss != 0 || (sw != 0 && su == 0))
                throw new MkfsUsageException($"data stripe unit ({su}) must be a multiple of the sector size ({ss})");
            dsunitBB = su / 512;
            dswidthBB = su * sw / 512;
        }
        else if (o.StripeUnitSectors is long sunit)
        {
            dsunitBB = sunit;
            dswidthBB = o.StripeWidthSectors!.Value;
        }
        if ((dsunitBB == 0) != (dswidthBB == 0) || (dsunitBB != 0 && dswidthBB % dsunitBB != 0))
            throw new MkfsUsageException($"data stripe width ({dswidthBB * 512}) must be a multiple of the data stripe unit ({dsunitBB * 512})");
        if ((o.StripeUnitBytes.HasValue || o.StripeUnitSectors.HasValue) && dsunitBB == 0) nodalign = true;
        // The device's report (a RAID's chunk and stripe sizes) stands in for options not given, unless it is nonsense
        // or the volume is under 1 GiB (a small log is not worth the alignment).
        bool deviceStripe = false;
        if (!nodalign && dsunitBB == 0 && ValidStripe(device.StripeUnitBytes, device.StripeWidthBytes)
            && device.StripeUnitBytes != 0 && dblocks >= (1UL << 30 >> blog))
        {
            dsunitBB = device.StripeUnitBytes / 512;
            dswidthBB = device.StripeWidthBytes / 512;
            deviceStripe = true;
        }
        if (dsunitBB * 512 % bs != 0 || dswidthBB * 512 % bs != 0)
        {
            // A device's stripe that blocks cannot follow is dropped; one the options give is an error.
            if (!deviceStripe)
                throw new MkfsUsageException($"Stripe unit({dsunitBB * 512}) or stripe width({dswidthBB * 512}) is not a multiple of the block size({bs})");
            dsunitBB = dswidthBB = 0;
            nodalign = true;
        }
        uint dsunit = nodalign ? 0 : (uint)(dsunitBB * 512 >> blog);
        uint dswidth = nodalign ? 0 : (uint)(dswidthBB * 512 >> blog);

        // Log sector size (validate_log_sectorsize): an internal log shares the data sector size; an external
        // one takes -l sectsize, else -s size, else its device's logical sector size.
        bool external = o.LogDevice is not null;
        int lsectorsize;
        if (o.LogSectorSize is int lss)
        {
            if (!external && lss != ss) throw new MkfsUsageException("Can't change sector size on internal log!");
            lsectorsize = lss;
        }
        else
        {
            lsectorsize = !external ? ss : o.SectorSize ?? device.LogDevice!.LogicalSectorSize;
        }
        if (!IsPow2(lsectorsize) || lsectorsize < 512 || lsectorsize > 32768 || lsectorsize > bs)
            throw new MkfsUsageException($"illegal log sector size {lsectorsize}");
        if (logVersion == 1 && lsectorsize > 512)
            throw new MkfsUsageException($"Version 1 logs do not support sector size {lsectorsize}");

        // Log stripe unit: as given; else one block when log sectors are larger than a log record header; else the
        // data stripe unit for an internal log (mkfs.xfs 6.13's order: large sectors win over the data stripe).
        long lsunitBytes = 0;
        if (o.LogStripeUnitSectors is long lsunitBB) lsunitBytes = lsunitBB * 512;
        else if (o.LogStripeUnitBytes is long lsu) lsunitBytes = lsu;
        if (lsunitBytes % bs != 0)
            throw new MkfsUsageException($"log stripe unit ({lsunitBytes}) must be a multiple of the block size ({bs})");
        uint lsunit = (uint)(lsunitBytes >> blog);
        if (lsunit == 0)
        {
            if (lsectorsize > 512) lsunit = 1;
            // A version 1 log has no stripe unit: it does not take the data stripe's.
            else if (!external && dsunit != 0 && logVersion == 2) lsunit = dsunit;
        }
        if ((long)lsunit * bs > 256 * 1024) lsunit = (uint)(32 * 1024 / bs);

        // AG geometry (calculate_initial_ag_geometry, align_ag_geometry).
        ulong maxAg = AgMaxBlocks(blog), minAg = AgMinBlocks(blog);
        ulong agsize, agcount;
        if (o.AgSizeBytes is long agBytes)
        {
            if (agBytes % bs != 0) throw new MkfsUsageException($"agsize ({agBytes}) not a multiple of fs blk size ({bs})");
            agsize = (ulong)agBytes >> blog;
            if (agsize == 0) throw new MkfsUsageException("agsize must be larger than zero");
            agcount = (dblocks + agsize - 1) / agsize;
        }
        else if (o.AgCount is long agc)
        {
            if (agc < 1) throw new MkfsUsageException($"illegal agcount {agc}");
            agcount = (ulong)agc;
            agsize = (dblocks + agcount - 1) / agcount;
        }
        else
        {
            int concurrency = o.DataConcurrency ?? (device.SolidState ? device.CpuCount : 0);
            (agsize, agcount) = concurrency > 0
                ? ConcurrencyAgGeometry(blog, dblocks, dsunit != 0, concurrency)
                : DefaultAgGeometry(blog, dblocks, dsunit != 0);
        }
        if (dsunit != 0)
        {
            if (agsize % dsunit != 0)
            {
                ulong t = (agsize + dsunit - 1) / dsunit * dsunit;
                if (t > maxAg) t = agsize / dsunit * dsunit;
                agsize = t;
                if (o.AgCount is null) agcount = (dblocks + agsize - 1) / agsize;
            }
            if (agsize % dswidth == 0 && dswidth != dsunit && agcount > 1 && o.AgCount is null && o.AgSizeBytes is null)
            {
                ulong t = agsize - dsunit;
                if (t < minAg)
                {
                    t = agsize + dsunit;
                    if (dblocks < agsize) t = agsize;
                }
                agsize = t;
                agcount = (dblocks + agsize - 1) / agsize;
            }
        }
        if (dblocks % agsize != 0 && dblocks % agsize < minAg)
        {
            dblocks = (agcount - 1) * agsize;
            agcount--;
        }
        if (agsize < minAg) throw new MkfsUsageException($"agsize ({agsize} blocks) too small, need at least {minAg} blocks");
        if (agsize > maxAg) throw new MkfsUsageException($"agsize ({agsize} blocks) too big, maximum is {maxAg} blocks");
        if (agsize > dblocks) throw new MkfsUsageException($"agsize ({agsize} blocks) too big, data area is {dblocks} blocks");
        if (agcount > uint.MaxValue) throw new MkfsUsageException($"{agcount} allocation groups is too many, maximum is {uint.MaxValue}");
        if (agcount == 0) throw new MkfsUsageException("the data section is too small for one allocation group");

        int imaxpct = o.InodeMaxPct ?? (dblocks < (1UL << 40 >> blog) ? 25 : dblocks < (50UL << 40 >> blog) ? 5 : 1);
        if (imaxpct is < 0 or > 100) throw new MkfsUsageException($"illegal inode maxpct {imaxpct}");

        bool sparse = o.SparseInodes ?? true;
        var g = new MkfsGeometry
        {
            BlockSize = bs,
            SectorSize = ss,
            LogSectorSize = lsectorsize,
            InodeSize = isize,
            DirBlockSize = dirbs,
            DataBlocks = dblocks,
            AgBlocks = (uint)agsize,
            AgCount = (uint)agcount,
            StripeUnit = dsunit,
            StripeWidth = dswidth,
            LogStripeUnitBlocks = lsunit,
            LogBlocks = 0,
            LogStart = 0,
            LogAgNumber = 0,
            ExternalLog = external,
            ImaxPct = imaxpct,
            RtExtSize = bs >= 4096 ? 1u : (uint)(4096 / bs),
            Finobt = finobt,
            Rmapbt = rmapbt,
            Reflink = reflink,
            Bigtime = o.Bigtime ?? true,
            InobtCount = inobtcount,
            SparseInodes = sparse,
            Nrext64 = o.Nrext64 ?? true,
            Exchange = exchange,
            Parent = parent,
            Metadir = metadir,
            Label = o.Label ?? "",
            Uuid = o.Uuid ?? Guid.NewGuid(),
            MinLogBlocks = 0,
            Crc = crc,
            InodeAlign = o.InodeAlign ?? true,
            LogVersion = logVersion,
            LazyCount = o.LazyCount ?? true,
            Ftype = o.Ftype ?? true,
            AttrVersion = o.AttrVersion ?? 2,
            ProjId32 = o.ProjId32 ?? true,
        };
        g = CalculateLog(g, o, device);

        if (!o.Unsupported)
        {
            if (g.DataBlocks < (300UL << 20 >> blog))
                throw new MkfsUsageException("Filesystem must be larger than 300MB.");
            if ((ulong)g.LogBlocks < (64UL << 20 >> blog))
                throw new MkfsUsageException("Log size must be at least 64MB.");
            if (g.AgCount < 2)
                throw new MkfsUsageException("Filesystem must have at least 2 superblocks for redundancy!");
        }
        if (o.Label is { } label && System.Text.Encoding.UTF8.GetByteCount(label) > 12)
            throw new MkfsUsageException($"label '{label}' is longer than 12 bytes");
        return g;
    }

    private static MkfsGeometry CalculateLog(MkfsGeometry g, MkfsOptions o, MkfsDeviceFacts device)
    {
        int blog = g.BlockLog;
        var resv = new TransactionReservations(g.ReservationGeometry);
        int minLog = Math.Max(MinLogBlocksFloor, resv.MinimumLogBlocks());
        if (o.LogSizeBytes is null && g.DataBlocks >= (1UL << 30 >> blog))
            minLog = Math.Max(minLog, (int)(MinLogBytes >> blog));
        if (g.ExternalLog) return CalculateExternalLog(g, o, device.LogDevice!, minLog);

        // Most the log AG can give (xfs_alloc_ag_max_usable − 1).
        long headerBlocks = (4L * g.SectorSize + g.BlockSize - 1) / g.BlockSize;
        long maxUsable = g.AgBlocks - (headerBlocks + 4 + 3 + (g.Finobt ? 1 : 0) + (g.Rmapbt ? 1 : 0) + (g.Reflink ? 1 : 0));
        long maxLog = maxUsable - 1;
        if (maxLog < minLog)
            throw new MkfsUsageException($"max log size {maxLog} smaller than min log size {minLog}, filesystem is too small");

        long logBlocks;
        if (o.LogSizeBytes is long lbytes)
        {
            if (lbytes % g.BlockSize != 0) throw new MkfsUsageException($"illegal log length {lbytes}, not a multiple of the block size {g.BlockSize}");
            logBlocks = lbytes >> blog;
            if (logBlocks > maxLog) throw new MkfsUsageException($"internal log size {logBlocks} too large, must be less than {maxLog}");
        }
        else
        {
            logBlocks = (long)((g.DataBlocks << blog) / 2048 >> blog);
            int concurrency = o.LogConcurrency ?? (device.SolidState ? device.CpuCount : 0);
            if (concurrency > 0 && g.DataBlocks >= (1UL << 30 >> blog))
            {
                var max = resv.MaxReservationForMinimumLog();
                long txBytes = (long)max.LogRes * max.LogCount;
                long bytes = txBytes * 3 * concurrency / 2;
                logBlocks = Math.Max(logBlocks, Math.Min(MaxLogBytes >> blog, bytes >> blog));
            }
            logBlocks = Math.Max(logBlocks, 64L << 20 >> blog);
            if (g.DataBlocks < (300UL << 20 >> blog)) logBlocks = minLog;
            logBlocks = Math.Max(minLog, logBlocks);
            logBlocks = Math.Min(logBlocks, maxLog);
            logBlocks = Math.Min(logBlocks, MaxLogBlocks);
            if (logBlocks << blog > MaxLogBytes) logBlocks = MaxLogBytes >> blog;
        }
        ValidateLogSize(logBlocks, blog, minLog);
        if (logBlocks > g.AgBlocks - g.PreallocBlocks)
            throw new MkfsUsageException($"internal log size {logBlocks} too large, must fit in allocation group");

        uint logAg;
        if (o.LogAgNumber is long agno)
        {
            if (agno < 0 || agno >= g.AgCount) throw new MkfsUsageException($"log ag number {agno} too large, must be less than {g.AgCount}");
            logAg = (uint)agno;
        }
        else
        {
            logAg = g.AgCount / 2;
        }
        if (logAg == 0)
        {
            long backoff = Math.Max(64L * g.InodeSize >> blog << 2, (long)g.StripeUnit * 2);
            maxLog -= backoff;
            if (o.LogSizeBytes is not null && logBlocks > maxLog)
                throw new MkfsUsageException($"internal log size {logBlocks} too large, must be less than {maxLog}");
            logBlocks = Math.Min(logBlocks, maxLog);
        }
        int agblklog = g.AgBlkLog;
        ulong logStart = ((ulong)logAg << agblklog) + g.PreallocBlocks;
        uint unit = g.LogStripeUnitBlocks != 0 ? g.LogStripeUnitBlocks : g.StripeUnit;
        if (unit != 0)
        {
            // The rounding applies to the AG-encoded block number, as mkfs.xfs does it.
            if (logStart % unit != 0) logStart = (logStart + unit - 1) / unit * unit;
            ulong agbno = logStart & ((1UL << agblklog) - 1);
            if ((logStart >> agblklog) != logAg || agbno >= g.AgLength(logAg))
                throw new MkfsUsageException($"Due to stripe alignment, the internal log start ({logStart}) cannot be aligned within an allocation group.");
            if (logBlocks % unit != 0)
            {
                if (o.LogSizeBytes is not null)
                    throw new MkfsUsageException($"log size {logBlocks} is not a multiple of the log stripe unit {unit}");
                long up = (logBlocks + unit - 1) / unit * unit;
                if (up > MaxLogBlocks || up << blog > MaxLogBytes || up > maxLog) up = logBlocks / unit * unit;
                logBlocks = up;
            }
            if (agbno + (ulong)logBlocks > g.AgLength(logAg) && logBlocks > unit) logBlocks -= unit;
            if (agbno + (ulong)logBlocks > g.AgLength(logAg))
                throw new MkfsUsageException($"Due to stripe alignment, the internal log size ({logBlocks}) is too large. Must fit within an allocation group.");
        }
        ValidateLogSize(logBlocks, blog, minLog);
        return g with { LogBlocks = (uint)logBlocks, LogStart = logStart, LogAgNumber = logAg, MinLogBlocks = minLog };
    }

    /// <summary>
    /// An external log fills its device (the device size rounded down to whole sectors, at least 1 KiB units)
    /// unless -l size asks for less; it must hold the minimum log, and a log stripe unit rounds it as for an
    /// internal log, never past the device.
    /// </summary>
    private static MkfsGeometry CalculateExternalLog(MkfsGeometry g, MkfsOptions o, MkfsLogDeviceFacts log, int minLog)
    {
        int blog = g.BlockLog;
        long usable = log.SizeBytes & ~((long)Math.Max(g.LogSectorSize, 1024) - 1);
        long deviceBlocks = usable >> blog;
        if (deviceBlocks <= 0) throw new MkfsUsageException("unable to get size of the log subvolume.");
        long logBlocks;
        if (o.LogSizeBytes is long lbytes)
        {
            if (lbytes % g.BlockSize != 0) throw new MkfsUsageException($"illegal log length {lbytes}, not a multiple of the block size {g.BlockSize}");
            logBlocks = lbytes >> blog;
            if (logBlocks > deviceBlocks)
                throw new MkfsUsageException($"size {lbytes} specified for log subvolume is too large, maximum is {deviceBlocks} blocks");
        }
        else
        {
            logBlocks = deviceBlocks;
        }
        if (minLog > logBlocks)
            throw new MkfsUsageException($"external log device size {logBlocks} blocks too small, must be at least {minLog} blocks");
        uint unit = g.LogStripeUnitBlocks;
        if (unit != 0 && logBlocks % unit != 0)
        {
            if (o.LogSizeBytes is not null)
                throw new MkfsUsageException($"log size {logBlocks} is not a multiple of the log stripe unit {unit}");
            long up = (logBlocks + unit - 1) / unit * unit;
            if (up > MaxLogBlocks || up << blog > MaxLogBytes || up > Math.Min(MaxLogBlocks, deviceBlocks)) up = logBlocks / unit * unit;
            logBlocks = up;
        }
        ValidateLogSize(logBlocks, blog, minLog);
        return g with { LogBlocks = (uint)logBlocks, LogStart = 0, LogAgNumber = 0, MinLogBlocks = minLog };
    }

    private static void ValidateLogSize(long logBlocks, int blog, int minLog)
    {
        if (logBlocks < minLog) throw new MkfsUsageException($"log size {logBlocks} blocks too small, minimum size is {minLog} blocks");
        if (logBlocks > MaxLogBlocks) throw new MkfsUsageException($"log size {logBlocks} blocks too large, maximum size is {MaxLogBlocks} blocks");
        if (logBlocks << blog > MaxLogBytes) throw new MkfsUsageException($"log size {logBlocks << blog} bytes too large, maximum size is {MaxLogBytes} bytes");
    }

    /// <summary>calc_default_ag_geometry (libxfs/topology.c).</summary>
    public static (ulong AgSize, ulong AgCount) DefaultAgGeometry(int blog, ulong dblocks, bool multidisk)
    {
        ulong maxAg = AgMaxBlocks(blog);
        ulong blocks;
        if (dblocks >= (32UL << 40 >> blog) || (!multidisk && dblocks >= (4UL << 40 >> blog)))
        {
            blocks = maxAg;
        }
        else
        {
            int shift;
            if (!multidisk && dblocks >= (128UL << 20 >> blog))
            {
                shift = 2;
            }
            else
            {
                shift = 5;
                if (dblocks <= (512UL << 30 >> blog)) shift--;
                if (dblocks <= (8UL << 30 >> blog)) shift--;
                if (dblocks < (128UL << 20 >> blog)) shift--;
                if (dblocks < (64UL << 20 >> blog)) shift--;
                if (dblocks < (32UL << 20 >> blog)) shift--;
            }
            blocks = dblocks >> shift;
            if ((dblocks & ((1UL << shift) - 1)) != 0 && blocks < maxAg) blocks++;
        }
        return (blocks, (dblocks + blocks - 1) / blocks);
    }

    /// <summary>calc_concurrency_ag_geometry: enough AGs for <paramref name="threads"/> writers on solid-state storage.</summary>
    public static (ulong AgSize, ulong AgCount) ConcurrencyAgGeometry(int blog, ulong dblocks, bool multidisk, int threads)
    {
        var (defSize, defCount) = DefaultAgGeometry(blog, dblocks, multidisk);
        if (threads <= 0 || (ulong)threads < defCount) return (defSize, defCount);
        ulong maxAg = AgMaxBlocks(blog);
        ulong minPerThread = 4UL << 30 >> blog;
        ulong n = (ulong)threads;
        ulong size = dblocks / n;
        if (size < minPerThread)
        {
            do
            {
                n--;
                if (n <= defCount) return (defSize, defCount);
                size = dblocks / n;
            }
            while (size < minPerThread);
        }
        else
        {
            while (size > maxAg && size > defSize)
            {
                n += (ulong)threads;
                size = dblocks / n;
            }
        }
        return (size, (dblocks + size - 1) / size);
    }

    /// <summary>xfs_validate_stripe_geometry without a sector size: both or neither, the width a multiple of the unit and not smaller.</summary>
    private static bool ValidStripe(long unit, long width) =>
        width <= int.MaxValue && unit <= width && (unit == 0) == (width == 0) && (unit == 0 || width % unit == 0);

    private static bool IsPow2(long v) => v > 0 && (v & (v - 1)) == 0;
}

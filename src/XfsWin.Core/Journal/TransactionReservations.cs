namespace XfsWin.Journal;

/// <summary>
/// What the log reservation of every transaction kind depends on: the volume's geometry and features.
/// Built from a superblock (a mounted volume) or from the geometry mkfs is about to write.
/// </summary>
public sealed record ReservationGeometry
{
    public required int BlockSize { get; init; }
    public required int SectorSize { get; init; }
    public required int InodeSize { get; init; }
    public required uint AgBlocks { get; init; }
    public required int AgBlkLog { get; init; }
    public required int DirBlockSize { get; init; }
    /// <summary>sb_inoalignmt in blocks (decides whether inode clusters grow with the inode size).</summary>
    public required uint InodeAlignment { get; init; }
    /// <summary>sb_logsunit in bytes (0 or 1 = none).</summary>
    public required uint LogStripeUnit { get; init; }
    public bool Crc { get; init; } = true;
    public bool LogV2 { get; init; } = true;
    public bool Finobt { get; init; }
    public bool Rmapbt { get; init; }
    public bool Reflink { get; init; }
    public bool Nrext64 { get; init; }
    public bool ParentPointers { get; init; }

    public int BlockLog => System.Numerics.BitOperations.Log2((uint)BlockSize);
    public int InodesPerBlock => BlockSize / InodeSize;
    public int InoPBlog => System.Numerics.BitOperations.Log2((uint)InodesPerBlock);

    public static ReservationGeometry From(Format.Superblock sb) => new()
    {
        BlockSize = (int)sb.BlockSize,
        SectorSize = sb.SectorSize,
        InodeSize = sb.InodeSize,
        AgBlocks = sb.AgBlocks,
        AgBlkLog = sb.AgBlkLog,
        DirBlockSize = sb.DirectoryBlockSize,
        InodeAlignment = sb.InodeAlignment,
        LogStripeUnit = sb.LogStripeUnit,
        Crc = sb.IsV5,
        LogV2 = sb.HasLogV2,
        Finobt = sb.HasFinobt,
        Rmapbt = sb.HasRmapbt,
        Reflink = sb.HasReflink,
        Nrext64 = sb.HasNrext64,
        ParentPointers = sb.HasParentPointers,
    };
}

/// <summary>One transaction kind's log reservation: bytes per roll (before log overheads) and rolls.</summary>
public readonly record struct LogReservation(int LogRes, int LogCount, bool Permanent)
{
    /// <summary>What the minimum-log-size calculation weighs: logres × logcount when the count exceeds one.</summary>
    public long Weight => LogCount > 1 ? (long)LogRes * LogCount : LogRes;
}

/// <summary>The kernel's transaction kinds, in the order of struct xfs_trans_resv (xfs_db's <c>logres</c> numbers them so).</summary>
public enum TransactionKind
{
    Write, Itruncate, Rename, Link, Remove, Symlink, Create, CreateTmpfile, Mkdir, Ifree, Ichange, GrowData,
    AddAfork, WriteId, AttrInval, AttrSetM, AttrSetRt, AttrRm, ClearAgi, GrowRtAlloc, GrowRtZero, GrowRtFree,
    QmSetQlim, QmDqAlloc, Sb, FsyncTs,
}

/// <summary>
/// The log space each kind of transaction reserves (libxfs xfs_trans_resv.c, as of Linux/xfsprogs 6.13),
/// the B+tree heights they are built from, and the minimum log size derived from them
/// (xfs_log_rlimit.c). A pure function of <see cref="ReservationGeometry"/>: the same numbers the kernel
/// computes at mount, so a log we size or a transaction we reserve for matches what the kernel expects.
/// Volumes without a realtime section only (rt terms are zero).
/// </summary>
public sealed class TransactionReservations
{
    // Sizes of the log structures the reservations count (xfs_log_format.h).
    private const int OpHeaderSize = 12;          // xlog_op_header
    private const int BufLogFormatSize = 88;      // xfs_buf_log_format with its 17-word dirty map
    private const int InodeLogFormatSize = 56;    // xfs_inode_log_format
    private const int TransHeaderSize = 16;       // xfs_trans_header
    private const int AttriLogFormatSize = 40;    // xfs_attri_log_format
    private const int ParentRecSize = 12;         // xfs_parent_rec
    private const int MaxNameLen = 256;
    private const int DquotLogRes = (24 + 104) * 6; // (xfs_dq_logformat + xfs_disk_dquot) × 6 dquots
    private const int DaNodeMaxDepth = 5;
    private const int SymlinkMaxLen = 1024;
    private const int OldReflinkRmapMaxLevels = 9;
    private const int InodesPerChunk = 64;
    private const int InodeBigClusterSize = 8192;
    private const int LogMaxRecordSize = 256 * 1024, LogBigRecordSize = 32 * 1024, LogHeaderCycleSize = 32 * 1024;
    private const int BBSize = 512;
    private const int MinLogFactor = 3;

    private readonly ReservationGeometry _g;
    private readonly LogReservation[] _table;

    /// <summary>Height limits the reservations use.</summary>
    public int AllocMaxLevels { get; }
    public int RmapMaxLevels { get; private set; }
    public int RefcountMaxLevels { get; }
    public int InobtMaxLevels { get; }
    public int BmapMaxLevelsData { get; }
    public int BmapMaxLevelsAttr { get; }
    public int InodeClusterSize { get; }
    public int InodeChunkBlocks { get; }

    private readonly int _allocLeafMax, _allocLeafMin;

    public TransactionReservations(ReservationGeometry geometry)
    {
        _g = geometry ?? throw new ArgumentNullException(nameof(geometry));
        int bs = _g.BlockSize;
        int shortHdr = _g.Crc ? 56 : 16, longHdr = _g.Crc ? 72 : 24;
        _allocLeafMax = (bs - shortHdr) / 8;
        _allocLeafMin = _allocLeafMax / 2;
        int allocNodeMin = (bs - shortHdr) / 12 / 2;
        AllocMaxLevels = ComputeMaxLevels(_allocLeafMin, allocNodeMin, (_g.AgBlocks + 1) / 2);
        RmapMaxLevels = ComputeRmapMaxLevels(_g);
        RefcountMaxLevels = _g.Reflink
            ? ComputeMaxLevels((bs - shortHdr) / 12 / 2, (bs - shortHdr) / 8 / 2, _g.AgBlocks)
            : 0;
        int inoLeafMin = (bs - shortHdr) / 16 / 2, inoNodeMin = (bs - shortHdr) / 8 / 2;
        int aginoLog = _g.InoPBlog + _g.AgBlkLog;
        InobtMaxLevels = ComputeMaxLevels(inoLeafMin, inoNodeMin, (1UL << aginoLog) >> 6);
        int bmLeafMin = (bs - longHdr) / 16 / 2, bmNodeMin = (bs - longHdr) / 16 / 2;
        BmapMaxLevelsData = BmapMaxLevels(_g.Nrext64 ? (1UL << 48) - 1 : (1UL << 31) - 1, 3, bmLeafMin, bmNodeMin);
        BmapMaxLevelsAttr = BmapMaxLevels(_g.Nrext64 ? (1UL << 32) - 1 : (1UL << 15) - 1, 2, bmLeafMin, bmNodeMin);
        int clusterRaw = InodeBigClusterSize;
        if (_g.Crc)
        {
            int scaled = clusterRaw * (_g.InodeSize / 256);
            if (_g.InodeAlignment >= (uint)(scaled / bs)) clusterRaw = scaled;
        }
        InodeClusterSize = (clusterRaw > bs ? clusterRaw / bs : 1) * bs;
        InodeChunkBlocks = Math.Max(InodesPerChunk, _g.InodesPerBlock) >> _g.InoPBlog;
        _table = Compute();
    }

    /// <summary>The reservation of one transaction kind.</summary>
    public LogReservation this[TransactionKind kind] => _table[(int)kind];

    /// <summary>Every kind's reservation, in <see cref="TransactionKind"/> order.</summary>
    public IReadOnlyList<LogReservation> All => _table;

    /// <summary>xfs_btree_compute_maxlevels: the tallest tree holding <paramref name="records"/> with half-full blocks.</summary>
    public static int ComputeMaxLevels(int leafMin, int nodeMin, ulong records)
    {
        ulong blocks = (records + (ulong)leafMin - 1) / (ulong)leafMin;
        int height = 1;
        while (blocks > 1)
        {
            blocks = (blocks + (ulong)nodeMin - 1) / (ulong)nodeMin;
            height++;
        }
        return height;
    }

    /// <summary>xfs_btree_space_to_height: the tallest tree that fits in <paramref name="leafBlocks"/> blocks.</summary>
    public static int SpaceToHeight(int nodeMin, ulong leafBlocks)
    {
        if (leafBlocks < 1) return 0;
        ulong nodeBlocks = 2, left = leafBlocks - 1;
        int height = 1;
        while (nodeBlocks < left)
        {
            left -= nodeBlocks;
            nodeBlocks *= (ulong)nodeMin;
            height++;
        }
        return height;
    }

    private static int ComputeRmapMaxLevels(ReservationGeometry g)
    {
        if (!g.Rmapbt) return 0;
        int shortHdr = g.Crc ? 56 : 16;
        int leafMin = (g.BlockSize - shortHdr) / 24 / 2, nodeMin = (g.BlockSize - shortHdr) / 44 / 2;
        // With sharing, record counts are unbounded: the height is limited by the AG's space instead.
        return g.Reflink ? SpaceToHeight(nodeMin, g.AgBlocks) : ComputeMaxLevels(leafMin, nodeMin, g.AgBlocks);
    }

    private static int BmapMaxLevels(ulong maxExtents, int minRootPtrs, int leafMin, int nodeMin)
    {
        int rootSpace = 4 + minRootPtrs * 16;
        int maxRootRecs = (rootSpace - 4) / 16;
        ulong blocks = (maxExtents + (ulong)leafMin - 1) / (ulong)leafMin;
        int level = 1;
        for (; blocks > 1; level++)
        {
            blocks = blocks <= (ulong)maxRootRecs ? 1 : (blocks + (ulong)nodeMin - 1) / (ulong)nodeMin;
        }
        return level;
    }

    // ---- building blocks (xfs_trans_resv.c) ----

    private static int BufLogOverhead => (OpHeaderSize + BufLogFormatSize + 127) / 128 * 128;
    private static int BufRes(int nbufs, int size) => nbufs * (size + BufLogOverhead);
    private int Bs => _g.BlockSize;
    private int Ss => _g.SectorSize;
    private int BmbtBlockLen => _g.Crc ? 72 : 24;

    private int AllocFreeBlockCount(int ops) =>
        ops * 2 * (2 * AllocMaxLevels - 1) + (_g.Rmapbt ? ops * (2 * RmapMaxLevels - 1) : 0);

    private int RefcountBlockCount(int ops) => ops * (2 * RefcountMaxLevels - 1);

    private int InodeRes(int n) => n * (4 * OpHeaderSize + InodeLogFormatSize + _g.InodeSize + 2 * BmbtBlockLen);

    private int InobtRes() => BufRes(InobtMaxLevels, Bs) + BufRes(AllocFreeBlockCount(1), Bs);

    private int FinobtRes() => _g.Finobt ? InobtRes() : 0;

    private int InodeChunkRes(bool alloc)
    {
        int res = BufRes(AllocFreeBlockCount(1), Bs);
        int size = 0;
        if (alloc)
        {
            if (_g.Crc) return res; // icreate logs the chunk as ordered buffers
            size = Bs;
        }
        return res + BufRes(InodeChunkBlocks, size);
    }

    private int RefcountbtRes(int ops) => _g.Reflink ? BufRes(ops, Ss) + BufRes(RefcountBlockCount(ops), Bs) : 0;

    private int DirFsbCount => _g.DirBlockSize / Bs;
    private int MaxContigExtentsPerBlock => _allocLeafMax - _allocLeafMin;
    private int ExtentAddSpaceRes(bool data) => (data ? BmapMaxLevelsData : BmapMaxLevelsAttr) - 1;
    private int NextentAddSpaceRes(int blocks, bool data) =>
        (blocks + MaxContigExtentsPerBlock - 1) / MaxContigExtentsPerBlock * ExtentAddSpaceRes(data);
    private int DaEnter1B(bool data) => data ? DirFsbCount : 1;
    private static int DaEnterDbs(bool data) => DaNodeMaxDepth + (data ? 2 : 0);
    private int DaEnterBlocks(bool data) => DaEnter1B(data) * DaEnterDbs(data);
    private int DaEnterBmap1B(bool data) => NextentAddSpaceRes(DaEnter1B(data), data);
    private int DaEnterBmaps(bool data) => DaEnterDbs(data) * DaEnterBmap1B(data);
    private int DaEnterSpaceRes(bool data) => DaEnterBlocks(data) + DaEnterBmaps(data);
    private int DirOpLogCount => DaEnterBlocks(true) + DaEnterBmaps(true) + 1;

    private static int IovecLen(int len) => (len + 3) / 4 * 4;
    private static int PptrLinkOverhead => AttriLogFormatSize + IovecLen(ParentRecSize) + IovecLen(MaxNameLen - 1);
    private static int PptrReplaceOverhead => PptrLinkOverhead + IovecLen(ParentRecSize) + IovecLen(MaxNameLen - 1);

    // ---- block reservations (xfs_trans_space.h): the most blocks a change may allocate, reserved against quota ----

    /// <summary>XFS_EXTENTADD_SPACE_RES (data fork): the mapping btree blocks one new extent may split.</summary>
    public int ExtentAddSpaceBlocks => ExtentAddSpaceRes(true);

    /// <summary>XFS_DIRENTER_SPACE_RES: the blocks adding one directory entry may allocate.</summary>
    public int DirEnterSpaceBlocks => DaEnterSpaceRes(true);

    /// <summary>XFS_IALLOC_SPACE_RES: an inode chunk and the inode btree splits it may cause.</summary>
    public int InodeAllocSpaceBlocks => InodeChunkBlocks + (_g.Finobt ? 2 : 1) * InobtMaxLevels;

    /// <summary>XFS_DIRREMOVE_SPACE_RES: the mapping btree blocks removing one directory entry may split.</summary>
    public int DirRemoveSpaceBlocks => DaEnterBmaps(true);

    /// <summary>
    /// xfs_parent_calc_space_res: the blocks adding one parent pointer for a name of <paramref name="nameLength"/> bytes
    /// may allocate (an attribute fork block entry and its mapping; the kernel counts the name's length as blocks there).
    /// </summary>
    public int ParentPointerSpaceBlocks(int nameLength) => DaEnterSpaceRes(false) + NextentAddSpaceRes(nameLength, false);

    private int ParentPointerIfAny(int nameLength) => _g.ParentPointers ? ParentPointerSpaceBlocks(nameLength) : 0;

    /// <summary>xfs_create_space_res and xfs_mkdir_space_res: a new inode, its directory entry and its parent pointer.</summary>
    public int CreateSpaceBlocks(int nameLength) => InodeAllocSpaceBlocks + DirEnterSpaceBlocks + ParentPointerIfAny(nameLength);

    /// <summary>xfs_link_space_res: a new entry and its parent pointer.</summary>
    public int LinkSpaceBlocks(int nameLength) => DirEnterSpaceBlocks + ParentPointerIfAny(nameLength);

    /// <summary>
    /// xfs_rename_space_res: the source entry's removal, the target entry, and on parent-pointer volumes the parent
    /// pointers a rename replaces and adds (the whiteout's too); a replaced target adds one more parent pointer's worth
    /// on every volume, as the kernel counts it.
    /// </summary>
    public int RenameSpaceBlocks(int sourceNameLength, bool targetExists, int targetNameLength, bool whiteout)
    {
        int blocks = DirRemoveSpaceBlocks + DirEnterSpaceBlocks;
        if (_g.ParentPointers)
        {
            if (whiteout) blocks += ParentPointerSpaceBlocks(sourceNameLength);
            blocks += 2 * ParentPointerSpaceBlocks(targetNameLength);
        }
        if (targetExists) blocks += ParentPointerSpaceBlocks(targetNameLength);
        return blocks;
    }

    /// <summary>XFS_ADDAFORK_SPACE_RES: giving an inode an attribute fork (its local data may move to a block).</summary>
    public int AddAttrForkSpaceBlocks => DirFsbCount + DaEnterBmap1B(true);

    /// <summary>XFS_ATTRRM_SPACE_RES: removing an attribute.</summary>
    public int AttrRemoveSpaceBlocks => DaEnterBmaps(false);

    /// <summary>
    /// xfs_attr_calc_size: setting an attribute of <paramref name="nameLength"/> and <paramref name="valueLength"/>
    /// bytes. A local entry may split the attribute tree (twice when the entry fills more than half a leaf); a remote
    /// value adds its blocks and their mappings.
    /// </summary>
    public int AttrSetSpaceBlocks(int nameLength, int valueLength)
    {
        int nblks = DaEnterSpaceRes(false);
        // xfs_attr_leaf_newentsize: the local entry (3 header bytes, name, value, 4-aligned) if under 3/4 of a leaf.
        int local = (3 + nameLength + valueLength + 3) & ~3;
        if (local < (Bs >> 1) + (Bs >> 2)) return local > Bs / 2 ? 2 * nblks : nblks;
        int perBlock = _g.Crc ? Bs - 56 : Bs;
        int valueBlocks = (valueLength + perBlock - 1) / perBlock;
        return nblks + valueBlocks + NextentAddSpaceRes(valueBlocks, false);
    }

    // ---- the reservations ----

    private int WriteRes(bool forMinLogSize)
    {
        int t1 = InodeRes(1) + BufRes(BmapMaxLevelsData, Bs) + BufRes(3, Ss) + BufRes(AllocFreeBlockCount(2), Bs);
        int t3 = BufRes(5, Ss) + BufRes(AllocFreeBlockCount(2), Bs);
        if (forMinLogSize)
        {
            // The pre-deferred-refcount formula, kept so minimum log sizes do not change.
            int adj = _g.Reflink ? BufRes(RefcountBlockCount(2), Bs) : 0;
            return DquotLogRes + Math.Max(t1 + adj, t3 + adj);
        }
        return DquotLogRes + Math.Max(RefcountbtRes(1), Math.Max(t1, t3));
    }

    private int ItruncateRes(bool forMinLogSize)
    {
        int t1 = InodeRes(1) + BufRes(BmapMaxLevelsData + 1, Bs);
        int t2 = BufRes(9, Ss) + BufRes(AllocFreeBlockCount(4), Bs);
        if (forMinLogSize)
        {
            if (_g.Reflink) t2 += BufRes(RefcountBlockCount(4), Bs);
            return DquotLogRes + Math.Max(t1, t2);
        }
        return DquotLogRes + Math.Max(RefcountbtRes(2), Math.Max(t1, t2));
    }

    private int IunlinkRemoveRes() => BufRes(1, Ss) + 2 * InodeClusterSize;
    private int IunlinkAddRes() => BufRes(1, Ss) + InodeClusterSize;

    private int CreateResvModify() =>
        InodeRes(2) + BufRes(1, Ss) + Bs + BufRes(DirOpLogCount, Bs) + FinobtRes();

    private int IcreateResvAlloc() => BufRes(2, Ss) + Ss + InodeChunkRes(alloc: true) + InobtRes() + FinobtRes();

    private int IcreateRes(LogReservation attrSetM)
    {
        int overhead = DquotLogRes;
        int t3 = 0;
        if (_g.ParentPointers)
        {
            t3 = attrSetM.LogRes;
            overhead += PptrLinkOverhead;
        }
        return overhead + Math.Max(IcreateResvAlloc(), Math.Max(CreateResvModify(), t3));
    }

    private int QmDqallocRes(bool forMinLogSize) => WriteRes(forMinLogSize) + BufRes(1, Bs * 1 - 1);

    private LogReservation[] Compute(bool forMinLogSize = false)
    {
        var t = new LogReservation[Enum.GetValues<TransactionKind>().Length];
        static LogReservation Perm(int res, int count) => new(res, count, true);
        static LogReservation Once(int res, int count = 0) => new(res, count, false);

        t[(int)TransactionKind.Write] = Perm(WriteRes(false), 2);
        t[(int)TransactionKind.Itruncate] = Perm(ItruncateRes(false), 2);
        t[(int)TransactionKind.CreateTmpfile] = Perm(DquotLogRes + IcreateResvAlloc() + IunlinkAddRes(), 2);
        t[(int)TransactionKind.Ifree] = Perm(DquotLogRes + InodeRes(1) + BufRes(3, Ss) + IunlinkRemoveRes()
            + InodeChunkRes(alloc: false) + InobtRes() + FinobtRes(), 2);
        t[(int)TransactionKind.AddAfork] = Perm(DquotLogRes + InodeRes(1) + BufRes(2, Ss) + BufRes(1, _g.DirBlockSize)
            + BufRes(DaEnterBmap1B(true) + 1, Bs) + BufRes(AllocFreeBlockCount(1), Bs), 2);
        t[(int)TransactionKind.AttrInval] = Perm(Math.Max(InodeRes(1) + BufRes(BmapMaxLevelsAttr, Bs),
            BufRes(9, Ss) + BufRes(AllocFreeBlockCount(4), Bs)), 1);
        var attrSetM = Perm(DquotLogRes + InodeRes(1) + BufRes(1, Ss) + BufRes(DaNodeMaxDepth, Bs), 3);
        t[(int)TransactionKind.AttrSetM] = attrSetM;
        var attrRm = Perm(DquotLogRes + Math.Max(
            InodeRes(1) + BufRes(DaNodeMaxDepth, Bs) + Bs * BmapMaxLevelsAttr + BufRes(BmapMaxLevelsData, 0),
            BufRes(5, Ss) + BufRes(AllocFreeBlockCount(2), Bs)), 3);
        t[(int)TransactionKind.AttrRm] = attrRm;
        t[(int)TransactionKind.GrowRtAlloc] = Perm(BufRes(2, Ss) + BufRes(BmapMaxLevelsData, Bs) + InodeRes(1)
            + BufRes(AllocFreeBlockCount(1), Bs), 2);
        t[(int)TransactionKind.QmDqAlloc] = Perm(QmDqallocRes(false), 2);

        // Namespace operations; with parent pointers they also carry the xattr intent of the pointer.
        bool pptr = _g.ParentPointers;
        {
            int overhead = DquotLogRes;
            int t1 = InodeRes(5) + BufRes(2 * DirOpLogCount, Bs);
            int t2 = BufRes(7, Ss) + BufRes(AllocFreeBlockCount(3), Bs);
            int t3 = 0;
            if (pptr)
            {
                t3 = Math.Max(attrSetM.LogRes, attrRm.LogRes);
                int renameOverhead = PptrReplaceOverhead + PptrLinkOverhead + PptrLinkOverhead;
                int exchangeOverhead = 2 * PptrReplaceOverhead;
                overhead += Math.Max(renameOverhead, exchangeOverhead);
            }
            t[(int)TransactionKind.Rename] = Perm(overhead + Math.Max(t1, Math.Max(t2, t3)),
                2 + (pptr ? Math.Max(attrSetM.LogCount, attrRm.LogCount) : 0));
        }
        {
            int overhead = DquotLogRes + IunlinkRemoveRes();
            int t1 = InodeRes(2) + BufRes(DirOpLogCount, Bs);
            int t2 = BufRes(3, Ss) + BufRes(AllocFreeBlockCount(1), Bs);
            int t3 = 0;
            if (pptr)
            {
                t3 = attrSetM.LogRes;
                overhead += PptrLinkOverhead;
            }
            t[(int)TransactionKind.Link] = Perm(overhead + Math.Max(t1, Math.Max(t2, t3)), 2 + (pptr ? attrSetM.LogCount : 0));
        }
        {
            int overhead = DquotLogRes + IunlinkAddRes();
            int t1 = InodeRes(2) + BufRes(DirOpLogCount, Bs);
            int t2 = BufRes(4, Ss) + BufRes(AllocFreeBlockCount(2), Bs);
            int t3 = 0;
            if (pptr)
            {
                t3 = attrRm.LogRes;
                overhead += PptrLinkOverhead; // the unlink overhead is the same size as the link's
            }
            t[(int)TransactionKind.Remove] = Perm(overhead + Math.Max(t1, Math.Max(t2, t3)), 2 + (pptr ? attrRm.LogCount : 0));
        }
        int icreate = IcreateRes(attrSetM);
        int pptrCount = pptr ? attrSetM.LogCount : 0;
        t[(int)TransactionKind.Symlink] = Perm(icreate + BufRes(1, SymlinkMaxLen), 3 + pptrCount);
        t[(int)TransactionKind.Create] = Perm(icreate, 2 + pptrCount);
        t[(int)TransactionKind.Mkdir] = Perm(icreate, 3 + pptrCount);

        t[(int)TransactionKind.QmSetQlim] = Once(BufRes(1, 104), 1);
        t[(int)TransactionKind.Sb] = Once(BufRes(1, Ss), 1);
        t[(int)TransactionKind.GrowData] = Perm(BufRes(3, Ss) + BufRes(AllocFreeBlockCount(1), Bs), 2);
        t[(int)TransactionKind.Ichange] = Once(DquotLogRes + InodeRes(1) + BufRes(1, Ss));
        t[(int)TransactionKind.FsyncTs] = Once(InodeRes(1));
        t[(int)TransactionKind.WriteId] = Once(InodeRes(1));
        t[(int)TransactionKind.AttrSetRt] = Once(BufRes(1, Ss) + BufRes(BmapMaxLevelsAttr, Bs));
        t[(int)TransactionKind.ClearAgi] = Once(BufRes(1, Ss));
        t[(int)TransactionKind.GrowRtZero] = Once(BufRes(1, Bs));
        t[(int)TransactionKind.GrowRtFree] = Once(BufRes(1, Ss) + InodeRes(2) + BufRes(1, Bs) + BufRes(1, 0));

        // Intent items of rmap/reflink need extra rolls of the data-changing transactions.
        int adj = (_g.Reflink || _g.Rmapbt ? 1 : 0) + (_g.Reflink ? 1 : 0) + (_g.Rmapbt ? 1 : 0);
        foreach (var k in new[] { TransactionKind.Itruncate, TransactionKind.Write, TransactionKind.QmDqAlloc })
            t[(int)k] = t[(int)k] with { LogCount = t[(int)k].LogCount + adj };

        if (forMinLogSize && !WantMinLogSizeFixes)
        {
            // The minimum log size keeps the formulas of before deferred refcount/rmap updates.
            if (_g.Reflink)
            {
                t[(int)TransactionKind.Write] = t[(int)TransactionKind.Write] with { LogCount = 8 };
                t[(int)TransactionKind.Itruncate] = t[(int)TransactionKind.Itruncate] with { LogCount = 8 };
                t[(int)TransactionKind.QmDqAlloc] = t[(int)TransactionKind.QmDqAlloc] with { LogCount = 8 };
            }
            else if (_g.Rmapbt)
            {
                t[(int)TransactionKind.Write] = t[(int)TransactionKind.Write] with { LogCount = 2 };
                t[(int)TransactionKind.Itruncate] = t[(int)TransactionKind.Itruncate] with { LogCount = 2 };
                t[(int)TransactionKind.QmDqAlloc] = t[(int)TransactionKind.QmDqAlloc] with { LogCount = 2 };
            }
            t[(int)TransactionKind.Write] = t[(int)TransactionKind.Write] with { LogRes = WriteRes(true) };
            t[(int)TransactionKind.Itruncate] = t[(int)TransactionKind.Itruncate] with { LogRes = ItruncateRes(true) };
            t[(int)TransactionKind.QmDqAlloc] = t[(int)TransactionKind.QmDqAlloc] with { LogRes = QmDqallocRes(true) };
        }
        return t;
    }

    /// <summary>Parent-pointer volumes size their minimum log from the current reservations; others keep the old ones.</summary>
    private bool WantMinLogSizeFixes => _g.Crc && _g.ParentPointers;

    /// <summary>xfs_log_calc_unit_res: a reservation plus the op, transaction and record headers and roundoff around it.</summary>
    public int UnitReservation(int unitBytes)
    {
        int iclogSize, iclogHeaderSize;
        if (_g.LogV2)
        {
            iclogSize = LogMaxRecordSize;
            iclogHeaderSize = iclogSize / LogHeaderCycleSize * BBSize;
        }
        else
        {
            iclogSize = LogBigRecordSize;
            iclogHeaderSize = BBSize;
        }
        unitBytes += OpHeaderSize + TransHeaderSize + OpHeaderSize;
        int iclogSpace = iclogSize - iclogHeaderSize;
        int headers = (unitBytes + iclogSpace - 1) / iclogSpace;
        unitBytes += OpHeaderSize * headers;
        while (headers == 0 || (unitBytes + iclogSpace - 1) / iclogSpace > headers)
        {
            unitBytes += OpHeaderSize;
            headers++;
        }
        unitBytes += iclogHeaderSize * headers;
        unitBytes += iclogHeaderSize;
        unitBytes += _g.LogV2 && _g.LogStripeUnit > 1 ? 2 * (int)_g.LogStripeUnit : 2 * BBSize;
        return unitBytes;
    }

    /// <summary>
    /// xfs_log_get_max_trans_res: the largest reservation (by logres × logcount) among the kinds as the
    /// minimum-log-size rules compute them, and the largest xattr set.
    /// </summary>
    public LogReservation MaxReservationForMinimumLog()
    {
        int attrSpace = MaxAttrSetMReservation(_table);
        // RmapMaxLevels feeds AllocFreeBlockCount: old-reflink volumes sized their log with a 9-level rmap.
        int keptRmap = RmapMaxLevels;
        if (!WantMinLogSizeFixes && _g.Rmapbt && _g.Reflink) RmapMaxLevels = OldReflinkRmapMaxLevels;
        var table = Compute(forMinLogSize: true);
        RmapMaxLevels = keptRmap;

        long logSpace = 0;
        LogReservation max = default;
        foreach (var r in table)
        {
            if (logSpace < r.Weight)
            {
                logSpace = r.Weight;
                max = r;
            }
        }
        if (attrSpace > logSpace) max = table[(int)TransactionKind.AttrSetM] with { LogRes = attrSpace };
        return max;
    }

    private int MaxAttrSetMReservation(LogReservation[] table)
    {
        int size = (Bs >> 1) + (Bs >> 2) - MaxNameLen - 1;
        int nblks = DaEnterSpaceRes(false) + (size + Bs - 1) / Bs;
        if (WantMinLogSizeFixes) size = (size + Bs - 1) / Bs;
        nblks += NextentAddSpaceRes(size, false);
        return table[(int)TransactionKind.AttrSetM].LogRes + table[(int)TransactionKind.AttrSetRt].LogRes * nblks;
    }

    /// <summary>xfs_log_calc_minimum_size: the smallest log (in file system blocks) the kernel mounts.</summary>
    public int MinimumLogBlocks()
    {
        var max = MaxReservationForMinimumLog();
        long maxLogRes = UnitReservation(max.LogRes);
        if (max.LogCount > 1) maxLogRes *= max.LogCount;
        long bbs = (maxLogRes + BBSize - 1) / BBSize;
        long lsunitBB = _g.LogV2 && _g.LogStripeUnit > 1 ? (_g.LogStripeUnit + BBSize - 1) / BBSize : 0;
        long minBB = lsunitBB > 0
            ? (bbs + lsunitBB - 1) / lsunitBB * lsunitBB + 2 * lsunitBB
            : bbs + 2 * BBSize; // the kernel adds 2·BBSIZE (bytes) as a count of BBs; the quirk is kept
        minBB *= MinLogFactor;
        int bbPerBlock = Bs / BBSize;
        return (int)((minBB + bbPerBlock - 1) / bbPerBlock);
    }
}

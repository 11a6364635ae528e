using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Admin;

/// <summary>
/// The kernel's per-AG space rules a shrink must respect, computed from the geometry: the largest extent one
/// allocation may take (m_ag_max_usable: xfs_alloc_ag_max_usable less AG 0's metadata reservations, which a
/// mounted kernel always holds), the free-list minimum (xfs_alloc_min_freelist), and the metadata reservation an
/// AG of a given length asks (xfs_ag_resv_init: refcountbt and finobt worst-case sizes, and the rmapbt's, at least
/// 1% of the AG). The sizes are xfs_btree_calc_size over V5 short-form blocks at minimum fill.
/// </summary>
internal static class AgReservations
{
    private const int ShortHeader = 56;

    /// <summary>Blocks needed by a tree of <paramref name="records"/> records whose blocks are half full (xfs_btree_calc_size).</summary>
    private static ulong CalcSize(int leafMinRecs, int nodeMinRecs, ulong records)
    {
        ulong blocks = 0;
        int per = leafMinRecs;
        for (ulong len = records; len > 1;)
        {
            len = (len + (ulong)per - 1) / (ulong)per;
            per = nodeMinRecs;
            blocks += len;
        }
        return blocks;
    }

    private static int Min(Superblock sb, int entryBytes) => ((int)sb.BlockSize - ShortHeader) / entryBytes / 2;

    /// <summary>The AG's length as the reservations count it: the internal log's blocks never hold btree blocks.</summary>
    private static ulong Usable(Superblock sb, uint agno, uint length) =>
        sb.LogStart != 0 && (uint)(sb.LogStart >> sb.AgBlkLog) == agno ? length - Math.Min(length, sb.LogBlocks) : length;

    /// <summary>
    /// What xfs_ag_resv_init asks for an AG of <paramref name="length"/> blocks: (metadata, rmapbt). The finobt's part
    /// is sized for <paramref name="finobtLength"/> blocks (default: the same): the kernel sizes it from the in-core AG
    /// length (pag block_count), which a shrink moves only after the reservation was made again, while the refcountbt
    /// and rmapbt parts read the AGF's new length.
    /// </summary>
    public static (ulong Metadata, ulong Rmap) Ask(Superblock sb, uint agno, uint length, uint? finobtLength = null)
    {
        ulong blocks = Usable(sb, agno, length);
        ulong metadata = 0, rmap = 0;
        if (sb.HasReflink) metadata += CalcSize(Min(sb, 12), Min(sb, 8), blocks);
        if (sb.HasFinobt) metadata += CalcSize(Min(sb, 16), Min(sb, 8), Usable(sb, agno, finobtLength ?? length) * (ulong)sb.InodesPerBlock / 64);
        if (sb.HasRmapbt) rmap = Math.Max(blocks / 100, CalcSize(Min(sb, 24), Min(sb, 44), blocks));
        return (metadata, rmap);
    }

    /// <summary>m_ag_max_usable of a mounted volume: the most blocks one allocation can take in any AG.</summary>
    public static ulong MaxUsable(Superblock sb)
    {
        ulong headers = ((4UL * (ulong)sb.SectorSize) + sb.BlockSize - 1) / sb.BlockSize;
        ulong overhead = headers + 4 /* XFS_ALLOCBT_AGFL_RESERVE */ + 3
            + (sb.HasFinobt ? 1UL : 0) + (sb.HasRmapbt ? 1UL : 0) + (sb.HasReflink ? 1UL : 0);
        ulong usable = sb.AgBlocks - overhead;
        uint ag0Length = sb.AgCount == 1 ? (uint)sb.DataBlocks : sb.AgBlocks;
        var (metadata, rmapAsk) = Ask(sb, 0, ag0Length);
        ulong ask = metadata + rmapAsk;
        return usable > ask ? usable - ask : 0;
    }

    /// <summary>
    /// The most blocks one ordinary transaction can take out of the mounted kernel's free block counter: sb_fdblocks
    /// less what the per-AG reservations hide (xfs_ag_resv_init: the metadata ask less the trees' blocks, the whole
    /// rmapbt ask), less the reserve pool a mount sets aside (xfs_default_resblks: 5% of the volume, at most 8192
    /// blocks), less what may never be allocated (m_alloc_set_aside, 8 blocks per AG, and the free-space btrees'
    /// blocks beyond their roots). A shrink's transaction reserves the removed blocks from it (xfs_trans_alloc).
    /// The finobt's blocks come from agi_fblocks (inobtcount volumes; elsewhere taken as none).
    /// </summary>
    public static ulong TransactionFreeLimit(IBlockDevice device, Superblock sb, ulong fdblocks)
    {
        long free = (long)fdblocks;
        var sector = new byte[sb.SectorSize];
        for (uint agno = 0; agno < sb.AgCount; agno++)
        {
            long agByte = sb.AgBlockToByte(agno, 0);
            device.Read(agByte + sb.SectorSize, sector);
            var agf = new AgfView(sector);
            uint length = agf.Length, refcountBlocks = U32(sector, AgfView.OffRefcountBlocks), rmapBlocks = U32(sector, AgfView.OffRmapBlocks);
            uint btreeBlocks = U32(sector, AgfView.OffBtreeblks);
            device.Read(agByte + 2L * sb.SectorSize, sector);
            uint finobtBlocks = (sb.RoCompat & SuperblockFeatures.RoCompatInobtCount) != 0 ? U32(sector, AgiView.OffFblocks) : 0;
            var (metadata, rmap) = Ask(sb, agno, length);
            ulong metadataUsed = (sb.HasReflink ? refcountBlocks : 0) + (sb.HasFinobt ? finobtBlocks : 0);
            free -= (long)(Math.Max(metadata, metadataUsed) - metadataUsed);
            if (sb.HasRmapbt) free -= (long)Math.Max(rmap, rmapBlocks);
            // m_allocbt_blks: the bnobt and cntbt blocks past their roots (agf_btreeblks, less the rmapbt's share).
            free -= sb.HasRmapbt ? (long)btreeBlocks - Math.Max(0, (long)rmapBlocks - 1) : btreeBlocks;
            free -= 8;
        }
        free -= (long)Math.Min(sb.DataBlocks / 20, 8192);
        return free > 0 ? (ulong)free : 0;
    }

    private static uint U32(byte[] b, int offset) => System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(offset));

    /// <summary>xfs_alloc_min_freelist for the AG's current tree heights.</summary>
    public static uint MinFreelist(Superblock sb, AgFreeSpace ag)
    {
        uint n = (ag.BnoLevels + 1) * 2 - 2 + (ag.CntLevels + 1) * 2 - 2;
        if (sb.HasRmapbt) n += (ag.RmapLevels + 1) * 2 - 2;
        return n;
    }

    /// <summary>
    /// True when the AG, shrunk to <paramref name="length"/> blocks with <paramref name="freeBlocks"/> free, can hold its
    /// metadata reservation (the check xfs_ag_resv_init makes in xfs_ag_shrink_space; the finobt's part still for the
    /// AG's length before the shrink, <see cref="AgFreeSpace.Length"/>).
    /// </summary>
    public static bool Fits(Superblock sb, AgFreeSpace ag, uint agno, uint length, ulong freeBlocks)
    {
        var (metadata, rmapAsk) = Ask(sb, agno, length, finobtLength: ag.Length);
        ulong metadataUsed = (sb.HasReflink ? ag.RefcountBlocks : 0) + (sb.HasFinobt ? ag.FinobtBlocks : 0);
        ulong reserved = Math.Max(metadata, metadataUsed) - metadataUsed;
        if (sb.HasRmapbt) reserved += Math.Max(rmapAsk, ag.RmapBlocks) - ag.RmapBlocks;
        return reserved <= freeBlocks + ag.FreeListCount;
    }
}

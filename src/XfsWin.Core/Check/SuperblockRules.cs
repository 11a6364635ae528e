using System.Buffers.Binary;
using System.Numerics;
using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>
/// What xfs_repair requires of every superblock, the primary and each AG's copy: internal consistency (its verify_sb:
/// magic, version and V4 feature bits, sector, block and inode sizes and their logs, the data size against the AG
/// geometry, the log's size on V5, the realtime geometry, inode alignment, imaxpct, stripe unit and width, the
/// directory block size), bytes past the last field the features define left zero, no superblock flags, no quota
/// inodes or flags in a copy mkfs left in progress, no alignment, stripe or sector fields without their feature bits;
/// and of a copy, the primary's geometry (block size, data and realtime sizes, log placement and size, AG size and
/// count, sector and inode sizes, alignment bits) and, on V5, its feature words. A pure function of the sectors.
/// </summary>
internal static class SuperblockRules
{
    private const int OffRgCount = 272;
    private const uint IncompatMetadir = SuperblockFeatures.IncompatMetadir;

    /// <summary>Everything <paramref name="s"/> breaks (the first few): <paramref name="primary"/> is null when it is the primary.</summary>
    public static List<string> Problems(ReadOnlySpan<byte> s, ReadOnlySpan<byte> primary, bool isPrimary)
    {
        var problems = new List<string>();
        var v = new SuperblockView(s);
        if (v.MagicNumber != SuperblockView.Magic)
        {
            problems.Add($"bad magic 0x{v.MagicNumber:x8}");
            return problems;
        }
        ushort vn = v.VersionNum;
        int version = vn & SuperblockFeatures.VersionNumberMask;
        bool v5 = version == 5;
        if (version is not (4 or 5))
        {
            problems.Add($"version {version}");
            return problems;
        }
        if (!v5 && ((vn & SuperblockFeatures.VersionDirV2) == 0 || (vn & SuperblockFeatures.VersionExtFlag) == 0))
            problems.Add("version 4 without version 2 directories or unwritten extents");
        const uint f2Known = SuperblockFeatures.F2LazySbCount | SuperblockFeatures.F2Attr2 | SuperblockFeatures.F2Parent |
                             SuperblockFeatures.F2ProjId32 | SuperblockFeatures.F2Crc | SuperblockFeatures.F2Ftype;
        if ((vn & SuperblockFeatures.VersionMoreBits) != 0 && (v.Features2 & ~f2Known) != 0)
            problems.Add($"unknown features2 bits 0x{v.Features2 & ~f2Known:x}");
        // A V5 volume always has lazy counters, attr2, 32-bit project ids and CRCs (xfs_repair: "bad or unsupported version").
        const uint f2V5 = SuperblockFeatures.F2LazySbCount | SuperblockFeatures.F2Attr2 | SuperblockFeatures.F2ProjId32 | SuperblockFeatures.F2Crc;
        if (v5 && ((vn & SuperblockFeatures.VersionMoreBits) == 0 || (v.Features2 & f2V5) != f2V5))
            problems.Add($"a version 5 superblock without lazy counters, attr2, 32-bit project ids and CRCs in features2 (0x{v.Features2:x})");
        // xfs_repair -n counts a non-zero shared_vn in the primary only (a copy's fails the read verifier, uncounted).
        if (isPrimary && s[SuperblockView.OffSharedVn] != 0) problems.Add($"shared_vn {s[SuperblockView.OffSharedVn]}");
        if (v5 && (v.FeaturesIncompat & IncompatMetadir) != 0)
        {
            // Metadata directory volumes keep quota and realtime inodes in the directory, not in the superblock.
            if (v.UquotIno != 0 || v.GquotIno != 0 || v.PquotIno != 0) problems.Add("quota inode fields set on a metadata directory volume");
            if (v.RbmIno != 0 || v.RsumIno != 0) problems.Add("realtime inode fields set on a metadata directory volume");
            if (s[281..288].IndexOfAnyExcept((byte)0) >= 0) problems.Add("metadata directory padding is not zero");
            if (v.RtBlocks == 0)
            {
                // Without a realtime section the group geometry is mkfs.xfs's: one group as large as it can be.
                uint rgExtents = BinaryPrimitives.ReadUInt32BigEndian(s[276..]);
                byte rgBlkLog = s[280];
                if (rgExtents == 0 || rgBlkLog != Log2RoundUp((uint)Math.Min(uint.MaxValue, (ulong)rgExtents * v.RtExtSize)))
                    problems.Add($"realtime group geometry ({rgExtents} extents, blklog {rgBlkLog})");
            }
        }
        if (isPrimary && v.InProgress != 0) problems.Add("inprogress is set (mkfs did not finish)");

        int sectSize = v.SectSize;
        if (!IsPowerOfTwoIn(sectSize, 9, 15) || BitOperations.Log2((uint)sectSize) != v.SectLog)
        {
            problems.Add($"sector size {sectSize} (log {v.SectLog})");
            return problems;
        }
        if (v5 && !XfsCrc.Verify(s[..sectSize], SuperblockView.OffCrc)) problems.Add("CRC mismatch");
        uint bs = v.BlockSize;
        if (!IsPowerOfTwoIn(bs, 9, 16) || BitOperations.Log2(bs) != v.BlockLog)
        {
            problems.Add($"block size {bs} (log {v.BlockLog})");
            return problems;
        }
        ulong dblocks = v.DataBlocks;
        uint agblocks = v.AgBlocks, agcount = v.AgCount;
        if (dblocks == 0 || agcount == 0 || dblocks > (ulong)agcount * agblocks || dblocks < (ulong)(agcount - 1) * agblocks + 64)
            problems.Add($"{dblocks} data blocks do not make {agcount} AGs of {agblocks} blocks");
        if (agblocks == 0 || v.AgBlkLog != Log2RoundUp(agblocks)) problems.Add($"agblklog {v.AgBlkLog} for {agblocks}-block AGs");
        int isize = v.InodeSize;
        if (isize < 256 || isize > 2048 || v.InodeLog < 8 || v.InodeLog > 11 || isize != 1 << v.InodeLog || v.LogSunit > 256 * 1024 ||
            v.InodesPerBlock != (bs + (uint)isize - 1) / (uint)isize || v.BlockLog - v.InodeLog != v.InoPBlog)
            problems.Add($"inode size {isize} (log {v.InodeLog}, {v.InodesPerBlock} per block, inopblog {v.InoPBlog})");
        if (v5 && (v.LogBlocks == 0 || v.LogBlocks > 1024 * 1024 || ((ulong)v.LogBlocks << v.BlockLog) > (2UL << 30) - (10UL << 20)))
            problems.Add($"log of {v.LogBlocks} blocks");
        if (v.LogSunit > 1 && v.LogSunit % bs != 0) problems.Add($"log stripe unit {v.LogSunit} is not whole blocks");
        if ((vn & SuperblockFeatures.VersionSector) != 0 && (!IsPowerOfTwoIn(v.LogSectSize, 9, 15) || BitOperations.Log2((uint)Math.Max(1, (int)v.LogSectSize)) != v.LogSectLog))
            problems.Add($"log sector size {v.LogSectSize} (log {v.LogSectLog})");
        ulong rtExtBytes = (ulong)v.RtExtSize * bs;
        if (rtExtBytes > 1UL << 30 || rtExtBytes < 4096) problems.Add($"realtime extent size {v.RtExtSize} blocks");
        if (v.RtBlocks == 0)
        {
            if (v.RtExtents != 0 || v.RbmBlocks != 0 || v.RextSlog != 0 || v.Frextents != 0)
                problems.Add("realtime fields set without a realtime section");
        }
        else if (v.RtExtSize == 0 || v.RtBlocks / v.RtExtSize != v.RtExtents)
        {
            problems.Add("realtime extents do not match the realtime size");
        }
        if (!InodeAlignmentValid(v, v5)) problems.Add($"inode alignment {v.InoAlignMt} (sparse alignment {v.SpinoAlign})");
        if (v.ImaxPct > 100) problems.Add($"imaxpct {v.ImaxPct}");
        if ((vn & SuperblockFeatures.VersionDalign) != 0)
        {
            uint unit = v.Unit, width = v.Width;
            if ((unit == 0 && width != 0) || (unit != 0 && agblocks % unit != 0) || (unit != 0 && width == 0) || (unit != 0 && width % unit != 0))
                problems.Add($"stripe unit {unit} and width {width}");
        }
        else if (v.Unit != 0 || v.Width != 0)
        {
            problems.Add("stripe unit or width without the stripe alignment feature");
        }
        if (v.BlockLog + v.DirBlkLog > 16) problems.Add($"directory blocks of 2^{v.BlockLog + v.DirBlkLog} bytes");
        if (v5 && (v.FeaturesIncompat & IncompatMetadir) != 0 && v.RtBlocks == 0 && BinaryPrimitives.ReadUInt32BigEndian(s[OffRgCount..]) != 0)
            problems.Add($"{BinaryPrimitives.ReadUInt32BigEndian(s[OffRgCount..])} realtime groups without a realtime section");

        // xfs_repair's secondary_sb_whack (run on every superblock).
        int valid = v5 && (v.FeaturesIncompat & IncompatMetadir) != 0 ? 288
            : v5 && (v.FeaturesIncompat & SuperblockFeatures.IncompatMetaUuid) != 0 ? 264
            : v5 ? 248
            : (vn & SuperblockFeatures.VersionMoreBits) != 0 ? 208
            : (vn & SuperblockFeatures.VersionLogV2) != 0 ? 200
            : (vn & SuperblockFeatures.VersionSector) != 0 ? 196 : 193;
        if (s[valid..sectSize].IndexOfAnyExcept((byte)0) >= 0) problems.Add($"bytes past its last field (offset {valid}) are not zero");
        if (s[SuperblockView.OffFlags] != 0) problems.Add($"flags 0x{s[SuperblockView.OffFlags]:x2}");
        if (v.InProgress == 1 && !(v5 && (v.FeaturesIncompat & IncompatMetadir) != 0))
        {
            if (!NullIno(v.UquotIno) || !NullIno(v.GquotIno) || (v5 && !NullIno(v.PquotIno)) || v.Qflags != 0)
                problems.Add("quota inode or flags in a superblock copy");
        }
        if ((vn & SuperblockFeatures.VersionAlign) == 0 && v.InoAlignMt != 0) problems.Add("inode alignment without the alignment feature");
        if ((vn & SuperblockFeatures.VersionSector) == 0 && (sectSize != 512 || v.SectLog != 9 || v.LogSectSize != 0 || v.LogSectLog != 0))
            problems.Add("sector fields without the sector feature");

        if (isPrimary) return problems;
        // A copy against the primary: xfs_repair's geometry (get_sb_geometry) and the V5 feature words.
        var p = new SuperblockView(primary);
        if (p.BlockSize != bs || p.DataBlocks != dblocks || p.RtBlocks != v.RtBlocks || p.RtExtents != v.RtExtents || p.LogStart != v.LogStart ||
            p.RtExtSize != v.RtExtSize || p.AgBlocks != agblocks || p.AgCount != agcount || p.RbmBlocks != v.RbmBlocks || p.LogBlocks != v.LogBlocks ||
            p.SectSize != sectSize || p.InodeSize != isize ||
            ((p.VersionNum ^ vn) & (SuperblockFeatures.VersionAlign | SuperblockFeatures.VersionDalign)) != 0)
            problems.Add("geometry differs from the primary superblock's");
        if (v5 && (p.VersionNum & SuperblockFeatures.VersionNumberMask) == 5)
        {
            if (p.FeaturesCompat != v.FeaturesCompat) problems.Add("compat features differ from the primary superblock's");
            if (((p.FeaturesIncompat ^ v.FeaturesIncompat) & ~SuperblockFeatures.IncompatNeedsRepair) != 0) problems.Add("incompat features differ from the primary superblock's");
            if (p.FeaturesRoCompat != v.FeaturesRoCompat) problems.Add("ro-compat features differ from the primary superblock's");
        }
        return problems;
    }

    private static bool NullIno(ulong ino) => ino is 0 or ulong.MaxValue;

    private static bool IsPowerOfTwoIn(long value, int minLog, int maxLog) =>
        value > 0 && BitOperations.IsPow2(value) && BitOperations.Log2((ulong)value) is var l && l >= minLog && l <= maxLog;

    private static int Log2RoundUp(uint n) => n <= 1 ? 0 : BitOperations.Log2(n - 1) + 1;

    /// <summary>sb_validate_ino_align: the cluster alignment, on V5 scaled by inode size, or with sparse inodes the chunk size.</summary>
    private static bool InodeAlignmentValid(SuperblockView v, bool v5)
    {
        if ((v.VersionNum & SuperblockFeatures.VersionAlign) == 0) return true;
        uint align = 8192u >> v.BlockLog;
        if (align == v.InoAlignMt) return true;
        if (!v5) return false;
        align = (uint)(8192L * v.InodeSize / 256) >> v.BlockLog;
        if (align == v.InoAlignMt) return true;
        if ((v.FeaturesIncompat & SuperblockFeatures.IncompatSparseInodes) != 0)
        {
            if (align != v.SpinoAlign) return false;
            return (uint)(v.InodeSize * 64) >> v.BlockLog == v.InoAlignMt;
        }
        return false;
    }
}

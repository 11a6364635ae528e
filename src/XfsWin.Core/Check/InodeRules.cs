using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>
/// The rules an in-use inode's core must keep beyond what reading it needs: those of the kernel's inode verifier
/// (xfs_dinode_verify: padding, sizes, fork formats for the file type and the size, fork offsets, extent counts against
/// the block count, extent size and copy-on-write extent size hints, flags2 against the volume's features, metadata
/// directory inodes) and xfs_repair's inode flag checks (flags only directories or only regular files may carry, flags
/// no version defines, realtime flags without a realtime section). A pure function of the inode's bytes and the volume.
/// </summary>
internal static class InodeRules
{
    // di_flags
    private const ushort Realtime = 0x1, NewRtBitmap = 0x4, Immutable = 0x8, Sync = 0x20, NoAtime = 0x40, NoDump = 0x80,
        RtInherit = 0x100, ProjInherit = 0x200, NoSymlinks = 0x400, ExtSize = 0x800, ExtSzInherit = 0x1000, NoDefrag = 0x2000,
        AllFlags = 0x7FFF;
    private const ushort MetafileFlags = Immutable | Sync | NoAtime | NoDump | NoDefrag, MetadirFlags = MetafileFlags | NoSymlinks;
    // di_flags2
    private const ulong Dax = 0x1, Reflink = 0x2, CowExtSize = 0x4, Bigtime = 0x8, Nrext64 = 0x10, Metadata = 0x20, AllFlags2 = 0x3F;
    private const uint MaxExtentLength = (1u << 21) - 1; // XFS_MAX_BMBT_EXTLEN
    private const int MetafileTypes = 9; // XFS_METAFILE_MAX

    /// <summary>The first rule the in-use inode <paramref name="raw"/> breaks, or null.</summary>
    public static string? Problem(ReadOnlySpan<byte> raw, ulong ino, CheckContext cx)
    {
        var sb = cx.Sb;
        var d = new DinodeView(raw);
        ushort mode = d.Mode;
        int type = mode & 0xF000;
        bool dir = type == 0x4000, reg = type == 0x8000, link = type == 0xA000;
        ulong flags2 = d.Flags2;
        ushort flags = d.Flags;
        bool metadata = (flags2 & Metadata) != 0;

        if (d.Version == 2 && d.OldLinkCount != 0) return $"version 2 inode with onlink {d.OldLinkCount}";
        if (d.Version >= 3 && !metadata && d.OldLinkCount != 0) return $"onlink {d.OldLinkCount} on a version 3 inode";
        if (type is not (0x1000 or 0x2000 or 0x4000 or 0x6000 or 0x8000 or 0xA000 or 0xC000)) return $"mode 0{Convert.ToString(mode, 8)} is no file type";
        if ((dir || link) && d.Size == 0 && d.LinkCount != 0) return $"{(dir ? "directory" : "symlink")} of size 0 with links";
        // Directory data lives below the leaf offset: xfs_repair counts a larger size as a bad directory size.
        if (dir && d.Size > (ulong)Dir2Space.LeafOffset) return $"directory size {(long)d.Size} past the {Dir2Space.LeafOffset >> 30} GiB data space";
        if (d.Version >= 3)
        {
            if ((flags2 & Nrext64) != 0)
            {
                if (BinaryPrimitives.ReadUInt16BigEndian(raw[80..]) != 0) return "nrext64 padding is not zero";
            }
            else if (BinaryPrimitives.ReadUInt64BigEndian(raw[24..]) != 0)
            {
                return "version 3 padding is not zero";
            }
        }
        ulong nextents = d.DataExtentCount, naextents = d.AttrExtentCount;
        if (nextents + naextents > d.Nblocks) return $"{nextents} + {naextents} extents but {d.Nblocks} blocks";
        if (dir && nextents > (3UL * (32UL << 30)) >> sb.BlockLog) return $"directory with {nextents} extents";
        if (d.CoreSize + d.ForkOffset * 8 > raw.Length) return $"fork offset {d.ForkOffset} past the inode";
        if ((flags & Realtime) != 0 && sb.RtBlocks == 0) return "realtime flag on a volume without a realtime section";

        // Fork offset for the data fork's format.
        int literal = raw.Length - d.CoreSize;
        if (d.ForkOffset != 0)
        {
            if (d.Format == ForkFormat.Device ? d.ForkOffset != 1 : d.Format is ForkFormat.Local or ForkFormat.Extents or ForkFormat.Btree ? d.ForkOffset >= literal >> 3 : true)
                return $"fork offset {d.ForkOffset} with data fork format {(int)d.Format}";
        }
        if (reg || dir || link)
        {
            var p = ForkProblem(d, raw.Length, attr: false, reg, dir, link, nextents);
            if (p is not null) return p;
        }
        if (d.ForkOffset != 0)
        {
            var p = ForkProblem(d, raw.Length, attr: true, reg, dir, link, naextents);
            if (p is not null) return p;
        }
        else if (raw[DinodeView.OffAformat] != (byte)ForkFormat.Extents || naextents != 0)
        {
            return $"no attribute fork but attribute format {raw[DinodeView.OffAformat]} and {naextents} attribute extents";
        }

        // Extent size hint.
        uint extsize = d.ExtSize;
        bool hint = (flags & ExtSize) != 0, inherit = (flags & ExtSzInherit) != 0;
        if ((hint || inherit) && !(dir || reg)) return "extent size hint flag on neither a file nor a directory";
        if (hint && !reg) return "extent size flag on a non-file";
        if (inherit && !dir) return "extent size inherit flag on a non-directory";
        if ((hint || inherit) && extsize == 0) return "extent size hint flag with a hint of 0";
        if (!(hint || inherit) && extsize != 0) return $"extent size hint {extsize} without its flag";
        ulong unit = (flags & Realtime) != 0 ? Math.Max(1u, cx.RtExtSize) : 1;
        if (extsize % unit != 0) return $"extent size hint {extsize} is not a multiple of the realtime extent";
        if (extsize > MaxExtentLength || ((flags & Realtime) == 0 && extsize > sb.AgBlocks / 2)) return $"extent size hint {extsize} too large";

        // xfs_repair's flag rules.
        if ((flags & ~AllFlags) != 0) return $"unknown inode flags 0x{flags:x4}";
        if ((flags & NewRtBitmap) != 0 && ino != cx.RealtimeBitmapIno) return "rt bitmap flag on another inode";
        if ((flags & (RtInherit | ExtSzInherit | ProjInherit | NoSymlinks)) != 0 && !dir) return "directory flags on a non-directory";
        if ((flags & (Realtime | ExtSize)) != 0 && !reg) return "file flags on a non-file";

        if (d.Version < 3) return null;
        if ((flags2 & ~AllFlags2) != 0) return $"unknown inode flags2 0x{flags2:x}";
        if ((flags2 & (Reflink | CowExtSize)) != 0 && !sb.HasReflink) return "reflink or copy-on-write hint flag on a volume without reflink";
        if ((flags2 & Reflink) != 0 && !reg) return "reflink flag on a non-file";
        if ((flags2 & Reflink) != 0 && (flags & Realtime) != 0) return "reflink flag on a realtime file";
        // Reflink and DAX together are allowed (the kernel shares blocks of DAX files since 6.0; xfs_repair 6.13 accepts it).
        if ((flags2 & Dax) != 0 && !(reg || dir)) return "DAX flag on neither a file nor a directory";
        uint cow = BinaryPrimitives.ReadUInt32BigEndian(raw[DinodeView.OffCowextsize..]);
        bool cowHint = (flags2 & CowExtSize) != 0;
        if (cowHint && !(dir || reg)) return "copy-on-write extent size flag on neither a file nor a directory";
        if (cowHint && cow == 0) return "copy-on-write extent size flag with a hint of 0";
        if (!cowHint && cow != 0) return $"copy-on-write extent size hint {cow} without its flag";
        if (cowHint && (flags & Realtime) != 0) return "copy-on-write extent size hint on a realtime file";
        if (cow > MaxExtentLength || cow > sb.AgBlocks / 2) return $"copy-on-write extent size hint {cow} too large";
        if ((flags2 & Bigtime) != 0 && !sb.HasBigtime) return "bigtime flag on a volume without bigtime";
        if ((flags2 & Nrext64) != 0 && !sb.HasNrext64) return "large extent count flag on a volume without nrext64";
        if (metadata)
        {
            if (!sb.HasMetadir) return "metadata flag on a volume without a metadata directory";
            if (d.OldLinkCount >= MetafileTypes) return $"metadata file type {d.OldLinkCount}";
            if (!(dir || reg) || (mode & 0x1FF) != 0 || d.Uid != 0 || d.Gid != 0 || (flags2 & Dax) != 0) return "metadata inode with a mode, owner or flag it may not have";
            if (BinaryPrimitives.ReadUInt32BigEndian(raw[DinodeView.OffDmevmask..]) != 0 || BinaryPrimitives.ReadUInt16BigEndian(raw[DinodeView.OffDmstate..]) != 0)
                return "metadata inode with DMAPI state";
            ushort need = dir ? MetadirFlags : MetafileFlags;
            if ((flags & need) != need) return "metadata inode without its mandatory flags";
        }
        if (nextents + naextents == 0 && d.Nblocks != 0 && !(metadata && d.Format is not (ForkFormat.Local or ForkFormat.Extents or ForkFormat.Btree)))
            return $"no extents but {d.Nblocks} blocks";
        return null;
    }

    /// <summary>xfs_dinode_verify_fork: the fork's format against the file type, the data fork's size and the extent count.</summary>
    private static string? ForkProblem(DinodeView d, int inodeSize, bool attr, bool reg, bool dir, bool link, ulong extents)
    {
        var format = attr ? d.AttrFormat : d.Format;
        int forkSize = attr ? d.AttrForkSize(inodeSize) : d.DataForkSize(inodeSize);
        string fork = attr ? "attribute fork" : "data fork";
        if (!attr)
        {
            ulong size = d.Size;
            if (dir && size != 0 && size <= (ulong)forkSize && format != ForkFormat.Local) return $"directory of {size} bytes not in local format";
            if (link && size <= (ulong)forkSize && format is not (ForkFormat.Extents or ForkFormat.Local)) return $"symlink of {size} bytes in format {(int)format}";
            if (size > (ulong)forkSize && format == ForkFormat.Local) return $"{size} bytes of local data in a {forkSize}-byte fork";
        }
        switch (format)
        {
            case ForkFormat.Local:
                if (reg && !attr) return "regular file in local format";
                if (extents != 0) return $"{fork} in local format with {extents} extents";
                return null;
            case ForkFormat.Extents:
                if (extents > (ulong)(forkSize / BmbtRecord.Size)) return $"{extents} extents do not fit the {fork}";
                return null;
            case ForkFormat.Btree:
                ulong max = attr ? (d.HasNrext64 ? uint.MaxValue : (1UL << 15) - 1) : (d.HasNrext64 ? (1UL << 48) - 1 : (1UL << 31) - 1);
                if (extents > max) return $"{extents} extents in the {fork}";
                return null;
            default:
                return $"{fork} format {(int)format}";
        }
    }
}

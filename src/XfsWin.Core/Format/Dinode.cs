using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>Fork formats (di_format / di_aformat).</summary>
public enum ForkFormat : byte
{
    Device = 0,
    Local = 1,
    Extents = 2,
    Btree = 3,
    Uuid = 4,
    /// <summary>Realtime metadata btree root (rmap/refcount inodes under metadir).</summary>
    MetaBtree = 5,
}

/// <summary>
/// xfs_dinode: the on-disk inode core, big-endian. V1/V2 cores are 100 bytes (fork data follows
/// di_next_unlinked); V3 cores are 176 bytes and carry CRC, LSN, creation time, inode number and UUID.
/// </summary>
public readonly ref struct DinodeView
{
    public const ushort Magic = 0x494E; // "IN"
    public const int OffMagic = 0, OffMode = 2, OffVersion = 4, OffFormat = 5, OffOnlink = 6, OffUid = 8, OffGid = 12,
        OffNlink = 16, OffProjidLo = 20, OffProjidHi = 22, OffBigNextents = 24, OffAtime = 32, OffMtime = 40,
        OffCtime = 48, OffSize = 56, OffNblocks = 64, OffExtsize = 72, OffNextents = 76, OffAnextents = 80,
        OffBigAnextents = 76, OffForkoff = 82, OffAformat = 83, OffDmevmask = 84, OffDmstate = 88, OffFlags = 90,
        OffGen = 92, OffNextUnlinked = 96, OffCrc = 100, OffChangecount = 104, OffLsn = 112, OffFlags2 = 120,
        OffCowextsize = 128, OffCrtime = 144, OffIno = 152, OffUuid = 160;
    public const int V2CoreSize = 100, V3CoreSize = 176;

    // di_flags2
    public const ulong Flag2Dax = 0x1, Flag2Reflink = 0x2, Flag2CowExtSize = 0x4, Flag2Bigtime = 0x8, Flag2Nrext64 = 0x10, Flag2Metadata = 0x20;
    // di_flags
    public const ushort FlagRealtime = 0x1, FlagImmutable = 0x8, FlagAppend = 0x10, FlagNoDump = 0x80;

    private readonly ReadOnlySpan<byte> _b;

    public DinodeView(ReadOnlySpan<byte> inode) => _b = inode;

    private ushort U16(int o) => BinaryPrimitives.ReadUInt16BigEndian(_b[o..]);
    private uint U32(int o) => BinaryPrimitives.ReadUInt32BigEndian(_b[o..]);
    private ulong U64(int o) => BinaryPrimitives.ReadUInt64BigEndian(_b[o..]);

    public ushort MagicNumber => U16(OffMagic);
    public ushort Mode => U16(OffMode);
    public byte Version => _b[OffVersion];
    public ForkFormat Format => (ForkFormat)_b[OffFormat];
    public ushort OldLinkCount => U16(OffOnlink);
    public uint Uid => U32(OffUid);
    public uint Gid => U32(OffGid);
    public uint LinkCount => Version == 1 ? OldLinkCount : U32(OffNlink);
    public uint ProjectId => (uint)U16(OffProjidHi) << 16 | U16(OffProjidLo);
    public ulong Size => U64(OffSize);
    public ulong Nblocks => U64(OffNblocks);
    public uint ExtSize => U32(OffExtsize);
    public byte ForkOffset => _b[OffForkoff];
    public ForkFormat AttrFormat => (ForkFormat)_b[OffAformat];
    public ushort Flags => U16(OffFlags);
    public uint Generation => U32(OffGen);
    public uint NextUnlinked => U32(OffNextUnlinked);
    public ulong Flags2 => Version >= 3 ? U64(OffFlags2) : 0;
    public ulong Ino => U64(OffIno);
    public Guid Uuid => SuperblockView.ReadUuid(_b.Slice(OffUuid, 16));
    public bool HasBigtime => (Flags2 & Flag2Bigtime) != 0;
    public bool HasNrext64 => (Flags2 & Flag2Nrext64) != 0;

    public ulong DataExtentCount => HasNrext64 ? U64(OffBigNextents) : U32(OffNextents);
    public uint AttrExtentCount => HasNrext64 ? U32(OffBigAnextents) : U16(OffAnextents);

    public int CoreSize => Version >= 3 ? V3CoreSize : V2CoreSize;

    public XfsTimestampRaw AccessTime => new(U64(OffAtime), HasBigtime);
    public XfsTimestampRaw ModifyTime => new(U64(OffMtime), HasBigtime);
    public XfsTimestampRaw ChangeTime => new(U64(OffCtime), HasBigtime);
    public XfsTimestampRaw CreationTime => new(U64(OffCrtime), HasBigtime);

    /// <summary>Bytes of the literal area (after the core) given to the data fork.</summary>
    public int DataForkSize(int inodeSize) => ForkOffset != 0 ? ForkOffset << 3 : inodeSize - CoreSize;

    public int AttrForkOffset => CoreSize + (ForkOffset << 3);

    public int AttrForkSize(int inodeSize) => ForkOffset != 0 ? inodeSize - AttrForkOffset : 0;

    /// <summary>
    /// The kernel's inode verifier (xfs_dinode_verify) for an inode read by number: <see cref="VerifyStructure"/>, then,
    /// for an inode in use, <see cref="VerifyRules"/>. What fails it is never used: the write path sizes its work by
    /// these fields (an extent count it loads a list by, a block count it adds to).
    /// </summary>
    public static VerifyResult Verify(ReadOnlySpan<byte> inode, ulong ino, Superblock sb)
    {
        var structure = VerifyStructure(inode, ino, sb);
        return structure.IsOk && new DinodeView(inode).Mode != 0 ? VerifyRules(inode, sb) : structure;
    }

    /// <summary>
    /// What reading the inode needs (magic, version, CRC, number, UUID; size, fork offset and the data fork's format for
    /// the file type): an inode that fails it cannot be decoded at all.
    /// </summary>
    public static VerifyResult VerifyStructure(ReadOnlySpan<byte> inode, ulong ino, Superblock sb)
    {
        var d = new DinodeView(inode);
        if (d.MagicNumber != Magic) return VerifyResult.Fail("bad inode magic", OffMagic);
        if (sb.IsV5)
        {
            if (d.Version != 3) return VerifyResult.Fail($"inode version {d.Version} on a V5 volume", OffVersion);
            if (!XfsCrc.Verify(inode, OffCrc)) return VerifyResult.Fail("inode CRC mismatch", OffCrc);
            if (d.Ino != ino) return VerifyResult.Fail($"inode records number {d.Ino}, expected {ino}", OffIno);
            if (d.Uuid != sb.MetaUuid) return VerifyResult.Fail("inode UUID does not match the volume", OffUuid);
        }
        else if (d.Version is not (1 or 2))
        {
            return VerifyResult.Fail($"inode version {d.Version} on a V4 volume", OffVersion);
        }
        if (d.Mode == 0) return VerifyResult.Ok; // a free inode: callers decide what that means
        ulong size = d.Size;
        if ((long)size < 0) return VerifyResult.Fail("negative file size", OffSize);
        if (d.ForkOffset != 0 && d.AttrForkOffset >= inode.Length) return VerifyResult.Fail("attribute fork offset past the inode", OffForkoff);
        if (d.ForkOffset == 0 && d.AttrFormat is not (ForkFormat.Extents or ForkFormat.Device) && d.AttrExtentCount != 0)
            return VerifyResult.Fail("attribute extents without an attribute fork", OffAnextents);
        if (d.HasNrext64 && !sb.HasNrext64) return VerifyResult.Fail("large extent counts on a volume without nrext64", OffFlags2);
        int type = d.Mode & 0xF000;
        var fmt = d.Format;
        bool ok = type switch
        {
            0x1000 or 0x2000 or 0x6000 or 0xC000 => fmt == ForkFormat.Device,
            0x8000 => fmt is ForkFormat.Extents or ForkFormat.Btree,
            0x4000 or 0xA000 => fmt is ForkFormat.Local or ForkFormat.Extents or ForkFormat.Btree,
            _ => false,
        };
        if (!ok) return VerifyResult.Fail($"file type 0{Convert.ToString(type >> 12, 8)} with data fork format {(int)fmt}", OffFormat);
        if (d.ForkOffset != 0 && d.AttrFormat is not (ForkFormat.Local or ForkFormat.Extents or ForkFormat.Btree))
            return VerifyResult.Fail($"attribute fork format {(int)d.AttrFormat}", OffAformat);
        if (fmt == ForkFormat.Local && (long)size > d.DataForkSize(inode.Length))
            return VerifyResult.Fail("local data larger than the data fork", OffSize);
        return VerifyResult.Ok;
    }

    // di_flags and di_flags2 bits the rules below read.
    private const ushort FlagExtSize = 0x800, FlagExtSizeInherit = 0x1000, FlagSync = 0x20, FlagNoAtime = 0x40, FlagNoSymlinks = 0x400,
        FlagNoDefrag = 0x2000;
    private const ushort MetafileFlags = FlagImmutable | FlagSync | FlagNoAtime | FlagNoDump | FlagNoDefrag, MetadirFlags = MetafileFlags | FlagNoSymlinks;
    /// <summary>XFS_MAX_BMBT_EXTLEN: the longest extent, and the largest extent size hint.</summary>
    private const uint MaxExtentLength = (1u << 21) - 1;
    /// <summary>XFS_METAFILE_MAX: metadata file types are below it.</summary>
    private const int MetafileTypes = 9;

    /// <summary>
    /// The rest of xfs_dinode_verify for an inode in use (<paramref name="inode"/> has passed <see cref="VerifyStructure"/>
    /// and its mode is not 0): padding, link count fields, sizes, extent counts against the block count and against the
    /// room of each fork, fork formats for the size, fork offsets, extent size and copy-on-write extent size hints,
    /// flags2 against the volume's features, and what metadata directory inodes must hold. The realtime extent size is
    /// not known here: a realtime file's hint is checked against it by the volume checker.
    /// </summary>
    public static VerifyResult VerifyRules(ReadOnlySpan<byte> inode, Superblock sb)
    {
        var d = new DinodeView(inode);
        ushort mode = d.Mode;
        int type = mode & 0xF000;
        bool dir = type == 0x4000, reg = type == 0x8000, link = type == 0xA000;
        ulong flags2 = d.Flags2;
        ushort flags = d.Flags;
        bool metadata = (flags2 & Flag2Metadata) != 0;

        if (d.Version == 2 && d.OldLinkCount != 0) return VerifyResult.Fail($"version 2 inode with onlink {d.OldLinkCount}", OffOnlink);
        if (d.Version >= 3 && !metadata && d.OldLinkCount != 0) return VerifyResult.Fail($"onlink {d.OldLinkCount} on a version 3 inode", OffOnlink);
        if ((dir || link) && d.Size == 0 && d.LinkCount != 0) return VerifyResult.Fail($"{(dir ? "directory" : "symlink")} of size 0 with links", OffSize);
        if (d.Version >= 3)
        {
            if (d.HasNrext64 ? d.U16(OffAnextents) != 0 : d.U64(OffBigNextents) != 0)
                return VerifyResult.Fail(d.HasNrext64 ? "nrext64 padding is not zero" : "version 3 padding is not zero", d.HasNrext64 ? OffAnextents : OffBigNextents);
        }
        ulong nextents = d.DataExtentCount, naextents = d.AttrExtentCount;
        if (nextents + naextents > d.Nblocks) return VerifyResult.Fail($"{nextents} + {naextents} extents but {d.Nblocks} blocks", OffNblocks);
        // XFS_DIR2_MAX_SPACES (3) spaces of 32 GiB.
        if (dir && nextents > (3UL * (32UL << 30)) >> sb.BlockLog) return VerifyResult.Fail($"directory with {nextents} extents", OffNextents);
        if ((flags & FlagRealtime) != 0 && sb.RtBlocks == 0) return VerifyResult.Fail("realtime flag on a volume without a realtime section", OffFlags);

        int literal = inode.Length - d.CoreSize;
        if (d.ForkOffset != 0 && (d.Format == ForkFormat.Device ? d.ForkOffset != 1
                : d.Format is ForkFormat.Local or ForkFormat.Extents or ForkFormat.Btree ? d.ForkOffset >= literal >> 3 : true))
            return VerifyResult.Fail($"fork offset {d.ForkOffset} with data fork format {(int)d.Format}", OffForkoff);
        if (reg || dir || link)
        {
            var p = VerifyFork(d, inode.Length, attr: false, reg, dir, link, nextents);
            if (!p.IsOk) return p;
        }
        if (d.ForkOffset != 0)
        {
            var p = VerifyFork(d, inode.Length, attr: true, reg, dir, link, naextents);
            if (!p.IsOk) return p;
        }
        else if (d.AttrFormat is not (ForkFormat.Device or ForkFormat.Extents) || naextents != 0)
        {
            // A fresh inode of a new cluster has format 0; any other inode without an attribute fork has an empty list.
            return VerifyResult.Fail($"no attribute fork but attribute format {(int)d.AttrFormat} and {naextents} attribute extents", OffAformat);
        }

        uint extsize = d.ExtSize;
        bool hint = (flags & FlagExtSize) != 0, inherit = (flags & FlagExtSizeInherit) != 0;
        if ((hint || inherit) && !(dir || reg)) return VerifyResult.Fail("extent size hint flag on neither a file nor a directory", OffFlags);
        if (hint && !reg) return VerifyResult.Fail("extent size flag on a non-file", OffFlags);
        if (inherit && !dir) return VerifyResult.Fail("extent size inherit flag on a non-directory", OffFlags);
        if ((hint || inherit) && extsize == 0) return VerifyResult.Fail("extent size hint flag with a hint of 0", OffExtsize);
        if (!(hint || inherit) && extsize != 0) return VerifyResult.Fail($"extent size hint {extsize} without its flag", OffExtsize);
        if (extsize > MaxExtentLength || ((flags & FlagRealtime) == 0 && extsize > sb.AgBlocks / 2))
            return VerifyResult.Fail($"extent size hint {extsize} too large", OffExtsize);

        if (d.Version < 3) return VerifyResult.Ok;
        if ((flags2 & (Flag2Reflink | Flag2CowExtSize)) != 0 && !sb.HasReflink)
            return VerifyResult.Fail("reflink or copy-on-write hint flag on a volume without reflink", OffFlags2);
        if ((flags2 & Flag2Reflink) != 0 && !reg) return VerifyResult.Fail("reflink flag on a non-file", OffFlags2);
        if ((flags2 & Flag2Reflink) != 0 && (flags & FlagRealtime) != 0) return VerifyResult.Fail("reflink flag on a realtime file", OffFlags2);
        uint cow = d.U32(OffCowextsize);
        bool cowHint = (flags2 & Flag2CowExtSize) != 0;
        if (cowHint && !(dir || reg)) return VerifyResult.Fail("copy-on-write extent size flag on neither a file nor a directory", OffFlags2);
        if (cowHint && cow == 0) return VerifyResult.Fail("copy-on-write extent size flag with a hint of 0", OffCowextsize);
        if (!cowHint && cow != 0) return VerifyResult.Fail($"copy-on-write extent size hint {cow} without its flag", OffCowextsize);
        if (cowHint && (flags & FlagRealtime) != 0) return VerifyResult.Fail("copy-on-write extent size hint on a realtime file", OffFlags2);
        if (cow > MaxExtentLength || cow > sb.AgBlocks / 2) return VerifyResult.Fail($"copy-on-write extent size hint {cow} too large", OffCowextsize);
        if (d.HasBigtime && !sb.HasBigtime) return VerifyResult.Fail("bigtime flag on a volume without bigtime", OffFlags2);
        if (metadata)
        {
            if (!sb.HasMetadir) return VerifyResult.Fail("metadata flag on a volume without a metadata directory", OffFlags2);
            if (d.OldLinkCount >= MetafileTypes) return VerifyResult.Fail($"metadata file type {d.OldLinkCount}", OffOnlink);
            if (!(dir || reg) || (mode & 0x1FF) != 0 || d.Uid != 0 || d.Gid != 0 || (flags2 & Flag2Dax) != 0)
                return VerifyResult.Fail("metadata inode with a mode, owner or flag it may not have", OffMode);
            if (d.U32(OffDmevmask) != 0 || d.U16(OffDmstate) != 0) return VerifyResult.Fail("metadata inode with DMAPI state", OffDmevmask);
            ushort need = dir ? MetadirFlags : MetafileFlags;
            if ((flags & need) != need) return VerifyResult.Fail("metadata inode without its mandatory flags", OffFlags);
        }
        if (nextents + naextents == 0 && d.Nblocks != 0 && !(metadata && d.Format is not (ForkFormat.Local or ForkFormat.Extents or ForkFormat.Btree)))
            return VerifyResult.Fail($"no extents but {d.Nblocks} blocks", OffNblocks);
        return VerifyResult.Ok;
    }

    /// <summary>xfs_dinode_verify_fork: the fork's format against the file type, the data fork's size and the extent count.</summary>
    private static VerifyResult VerifyFork(DinodeView d, int inodeSize, bool attr, bool reg, bool dir, bool link, ulong extents)
    {
        var format = attr ? d.AttrFormat : d.Format;
        int forkSize = attr ? d.AttrForkSize(inodeSize) : d.DataForkSize(inodeSize);
        string fork = attr ? "attribute fork" : "data fork";
        int formatField = attr ? OffAformat : OffFormat, countField = attr ? OffAnextents : OffNextents;
        if (!attr)
        {
            ulong size = d.Size;
            // A directory that fits in the inode is short-form; a symlink that fits may also be an extent list.
            if (dir && size != 0 && size <= (ulong)forkSize && format != ForkFormat.Local)
                return VerifyResult.Fail($"directory of {size} bytes not in local format", OffFormat);
            if (link && size <= (ulong)forkSize && format is not (ForkFormat.Extents or ForkFormat.Local))
                return VerifyResult.Fail($"symlink of {size} bytes in format {(int)format}", OffFormat);
            if (size > (ulong)forkSize && format == ForkFormat.Local) return VerifyResult.Fail($"{size} bytes of local data in a {forkSize}-byte fork", OffSize);
        }
        switch (format)
        {
            case ForkFormat.Local:
                if (reg && !attr) return VerifyResult.Fail("regular file in local format", OffFormat);
                if (extents != 0) return VerifyResult.Fail($"{fork} in local format with {extents} extents", countField);
                return VerifyResult.Ok;
            case ForkFormat.Extents:
                if (extents > (ulong)(forkSize / BmbtRecord.Size)) return VerifyResult.Fail($"{extents} extents do not fit the {fork}", countField);
                return VerifyResult.Ok;
            case ForkFormat.Btree:
                ulong max = attr ? (d.HasNrext64 ? uint.MaxValue : (1UL << 15) - 1) : (d.HasNrext64 ? (1UL << 48) - 1 : (1UL << 31) - 1);
                if (extents > max) return VerifyResult.Fail($"{extents} extents in the {fork}", countField);
                return VerifyResult.Ok;
            default:
                return VerifyResult.Fail($"{fork} format {(int)format}", formatField);
        }
    }
}

/// <summary>An inode timestamp as stored: legacy (32-bit seconds + nanoseconds) or bigtime (nanoseconds since 1901-12-13).</summary>
public readonly record struct XfsTimestampRaw(ulong Raw, bool Bigtime)
{
    /// <summary>Seconds between the bigtime epoch (the smallest legacy time) and the Unix epoch.</summary>
    public const long BigtimeEpochOffset = 1L << 31;

    public (long Seconds, uint Nanoseconds) Decode()
    {
        if (Bigtime)
        {
            ulong ns = Raw;
            return ((long)(ns / 1_000_000_000UL) - BigtimeEpochOffset, (uint)(ns % 1_000_000_000UL));
        }
        return ((int)(uint)(Raw >> 32), (uint)Raw);
    }
}

/// <summary>Field setters over an on-disk inode, at the offsets <see cref="DinodeView"/> declares.</summary>
public readonly ref struct DinodeWriter
{
    private readonly Span<byte> _b;
    public DinodeWriter(Span<byte> inode) => _b = inode;
    private void U16(int o, ushort v) => BinaryPrimitives.WriteUInt16BigEndian(_b[o..], v);
    private void U32(int o, uint v) => BinaryPrimitives.WriteUInt32BigEndian(_b[o..], v);
    private void U64(int o, ulong v) => BinaryPrimitives.WriteUInt64BigEndian(_b[o..], v);

    /// <summary>A V3 core: magic, version 3, its own number and the volume UUID, not on any unlinked list.</summary>
    public void InitV3(ulong ino, Guid uuid)
    {
        U16(DinodeView.OffMagic, DinodeView.Magic);
        _b[DinodeView.OffVersion] = 3;
        U32(DinodeView.OffNextUnlinked, 0xFFFFFFFF);
        U64(DinodeView.OffIno, ino);
        uuid.TryWriteBytes(_b.Slice(DinodeView.OffUuid, 16), bigEndian: true, out _);
    }
    /// <summary>A V2 core (V4 volumes): magic, version 2, not on any unlinked list. There is no CRC, number or UUID.</summary>
    public void InitV2()
    {
        U16(DinodeView.OffMagic, DinodeView.Magic);
        _b[DinodeView.OffVersion] = 2;
        U32(DinodeView.OffNextUnlinked, 0xFFFFFFFF);
    }
    public ushort Mode { set => U16(DinodeView.OffMode, value); }
    /// <summary>di_metatype: on metadir volumes the old link-count field says what a metadata file is (1 = directory).</summary>
    public ushort MetaType { set => U16(DinodeView.OffOnlink, value); }
    public ForkFormat Format { set => _b[DinodeView.OffFormat] = (byte)value; }
    public ForkFormat AttrFormat { set => _b[DinodeView.OffAformat] = (byte)value; }
    /// <summary>di_forkoff: where the attribute fork starts in the literal area, in 8-byte units.</summary>
    public byte ForkOffset { set => _b[DinodeView.OffForkoff] = value; }
    public uint Uid { set => U32(DinodeView.OffUid, value); }
    public uint Gid { set => U32(DinodeView.OffGid, value); }
    public uint LinkCount { set => U32(DinodeView.OffNlink, value); }
    public ulong Size { set => U64(DinodeView.OffSize, value); }
    public ushort Flags { set => U16(DinodeView.OffFlags, value); }
    public uint Generation { set => U32(DinodeView.OffGen, value); }
    public ulong ChangeCount { set => U64(DinodeView.OffChangecount, value); }
    public ulong Flags2 { set => U64(DinodeView.OffFlags2, value); }
    public ulong AccessTime { set => U64(DinodeView.OffAtime, value); }
    public ulong ModifyTime { set => U64(DinodeView.OffMtime, value); }
    public ulong ChangeTime { set => U64(DinodeView.OffCtime, value); }
    public ulong CreationTime { set => U64(DinodeView.OffCrtime, value); }
    /// <summary>The literal area after the core (data fork, then attribute fork): after 176 bytes for a V3 inode, 100 for a V2 one.</summary>
    public Span<byte> LiteralArea => _b[(_b[DinodeView.OffVersion] >= 3 ? DinodeView.V3CoreSize : DinodeView.V2CoreSize)..];
    public void StampCrc() => XfsCrc.Stamp(_b, DinodeView.OffCrc);

    /// <summary>A timestamp as stored: bigtime nanoseconds since 1901-12-13, or 32-bit seconds and nanoseconds.</summary>
    public static ulong EncodeTime(long unixSeconds, uint nanoseconds, bool bigtime) => bigtime
        ? (ulong)(unixSeconds + XfsTimestampRaw.BigtimeEpochOffset) * 1_000_000_000UL + nanoseconds
        : (ulong)(uint)(int)unixSeconds << 32 | nanoseconds;
}

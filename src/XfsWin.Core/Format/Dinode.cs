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
    /// Structural checks of an inode read by number (xfs_dinode_verify). CRC is checked by the caller
    /// over the whole inode first.
    /// </summary>
    public static VerifyResult Verify(ReadOnlySpan<byte> inode, ulong ino, Superblock sb)
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

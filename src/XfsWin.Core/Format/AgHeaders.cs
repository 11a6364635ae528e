using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>
/// xfs_agf: the free-space header in the second sector of each allocation group: roots and levels
/// of the free-space (by block, by count), rmap and refcount B+trees, and the AGFL ring.
/// </summary>
public readonly ref struct AgfView
{
    public const uint Magic = 0x58414746; // XAGF
    public const int OffMagic = 0, OffVersion = 4, OffSeqno = 8, OffLength = 12, OffBnoRoot = 16, OffCntRoot = 20,
        OffRmapRoot = 24, OffBnoLevel = 28, OffCntLevel = 32, OffRmapLevel = 36, OffFlfirst = 40, OffFllast = 44,
        OffFlcount = 48, OffFreeblks = 52, OffLongest = 56, OffBtreeblks = 60, OffUuid = 64, OffRmapBlocks = 80,
        OffRefcountBlocks = 84, OffRefcountRoot = 88, OffRefcountLevel = 92, OffLsn = 208, OffCrc = 216;
    public const int Size = 224;

    private readonly ReadOnlySpan<byte> _b;
    public AgfView(ReadOnlySpan<byte> sector) => _b = sector;
    private uint U32(int o) => BinaryPrimitives.ReadUInt32BigEndian(_b[o..]);

    public uint MagicNumber => U32(OffMagic);
    public uint Seqno => U32(OffSeqno);
    public uint Length => U32(OffLength);
    public uint BnoRoot => U32(OffBnoRoot);
    public uint CntRoot => U32(OffCntRoot);
    public uint RmapRoot => U32(OffRmapRoot);
    public uint BnoLevel => U32(OffBnoLevel);
    public uint CntLevel => U32(OffCntLevel);
    public uint RmapLevel => U32(OffRmapLevel);
    public uint FlFirst => U32(OffFlfirst);
    public uint FlLast => U32(OffFllast);
    public uint FlCount => U32(OffFlcount);
    public uint FreeBlocks => U32(OffFreeblks);
    public uint Longest => U32(OffLongest);
    public uint RefcountRoot => U32(OffRefcountRoot);
    public uint RefcountLevel => U32(OffRefcountLevel);

    public static VerifyResult Verify(ReadOnlySpan<byte> sector, Superblock sb, uint agno)
    {
        var v = new AgfView(sector);
        if (v.MagicNumber != Magic) return VerifyResult.Fail("bad AGF magic", OffMagic);
        if (sb.IsV5)
        {
            if (!XfsCrc.Verify(sector[..sb.SectorSize], OffCrc)) return VerifyResult.Fail("AGF CRC mismatch", OffCrc);
            if (SuperblockView.ReadUuid(sector.Slice(OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("AGF UUID does not match the volume", OffUuid);
        }
        if (v.Seqno != agno) return VerifyResult.Fail($"AGF of AG {v.Seqno} found in AG {agno}", OffSeqno);
        if (v.Length == 0 || v.Length > sb.AgBlocks) return VerifyResult.Fail($"AGF length {v.Length}", OffLength);
        if (v.FreeBlocks > v.Length) return VerifyResult.Fail("more free blocks than the AG holds", OffFreeblks);
        if (v.BnoLevel is 0 or > 10 || v.CntLevel is 0 or > 10) return VerifyResult.Fail("bad free-space btree level", OffBnoLevel);
        if (v.BnoRoot >= v.Length || v.CntRoot >= v.Length) return VerifyResult.Fail("free-space btree root outside the AG", OffBnoRoot);
        return VerifyResult.Ok;
    }
}

/// <summary>
/// xfs_agi: the inode header in the third sector of each AG: inode B+tree roots, counters and the
/// 64 heads of the unlinked-inode hash lists.
/// </summary>
public readonly ref struct AgiView
{
    public const uint Magic = 0x58414749; // XAGI
    public const int OffMagic = 0, OffVersion = 4, OffSeqno = 8, OffLength = 12, OffCount = 16, OffRoot = 20,
        OffLevel = 24, OffFreecount = 28, OffNewino = 32, OffDirino = 36, OffUnlinked = 40, OffUuid = 296,
        OffCrc = 312, OffPad = 316, OffLsn = 320, OffFreeRoot = 328, OffFreeLevel = 332, OffIblocks = 336, OffFblocks = 340;
    public const int Size = 344, UnlinkedBuckets = 64;
    public const uint NullAgino = 0xFFFFFFFF;

    private readonly ReadOnlySpan<byte> _b;
    public AgiView(ReadOnlySpan<byte> sector) => _b = sector;
    private uint U32(int o) => BinaryPrimitives.ReadUInt32BigEndian(_b[o..]);

    public uint MagicNumber => U32(OffMagic);
    public uint Seqno => U32(OffSeqno);
    public uint Length => U32(OffLength);
    public uint Count => U32(OffCount);
    public uint Root => U32(OffRoot);
    public uint Level => U32(OffLevel);
    public uint FreeCount => U32(OffFreecount);
    public uint FreeRoot => U32(OffFreeRoot);
    public uint FreeLevel => U32(OffFreeLevel);
    public uint Unlinked(int bucket) => U32(OffUnlinked + bucket * 4);

    public static VerifyResult Verify(ReadOnlySpan<byte> sector, Superblock sb, uint agno)
    {
        var v = new AgiView(sector);
        if (v.MagicNumber != Magic) return VerifyResult.Fail("bad AGI magic", OffMagic);
        if (sb.IsV5)
        {
            if (!XfsCrc.Verify(sector[..sb.SectorSize], OffCrc)) return VerifyResult.Fail("AGI CRC mismatch", OffCrc);
            if (SuperblockView.ReadUuid(sector.Slice(OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("AGI UUID does not match the volume", OffUuid);
        }
        if (v.Seqno != agno) return VerifyResult.Fail($"AGI of AG {v.Seqno} found in AG {agno}", OffSeqno);
        if (v.Length == 0 || v.Length > sb.AgBlocks) return VerifyResult.Fail($"AGI length {v.Length}", OffLength);
        if (v.Level is 0 or > 10) return VerifyResult.Fail($"inode btree level {v.Level}", OffLevel);
        if (v.Root >= v.Length) return VerifyResult.Fail("inode btree root outside the AG", OffRoot);
        if (v.FreeCount > v.Count) return VerifyResult.Fail("more free inodes than inodes", OffFreecount);
        return VerifyResult.Ok;
    }
}

/// <summary>xfs_agfl: the AG free list in the fourth sector (V5 header of 36 bytes, then block numbers).</summary>
public static class AgflLayout
{
    public const uint Magic = 0x5841464C; // XAFL
    public const int OffMagic = 0, OffSeqno = 4, OffUuid = 8, OffLsn = 24, OffCrc = 32, OffBno = 36;
    public const int SizeV5 = 36;
}

/// <summary>
/// xfs_inobt_rec: one inode chunk of 64 inodes. Sparse-inode volumes split the old 32-bit free
/// count into holemask (u16, one bit per 4 inodes not allocated), count (u8) and freecount (u8).
/// </summary>
public readonly record struct InobtRecord(uint StartIno, ushort HoleMask, byte Count, uint FreeCount, ulong FreeMask)
{
    public const int Size = 16, KeySize = 4, PointerSize = 4, InodesPerChunk = 64;

    public static InobtRecord Decode(ReadOnlySpan<byte> rec, bool sparse) => sparse
        ? new InobtRecord(BinaryPrimitives.ReadUInt32BigEndian(rec), BinaryPrimitives.ReadUInt16BigEndian(rec[4..]), rec[6], rec[7], BinaryPrimitives.ReadUInt64BigEndian(rec[8..]))
        : new InobtRecord(BinaryPrimitives.ReadUInt32BigEndian(rec), 0, 64, BinaryPrimitives.ReadUInt32BigEndian(rec[4..]), BinaryPrimitives.ReadUInt64BigEndian(rec[8..]));

    /// <summary>Encodes the sparse-inode form (holemask, count, freecount as u16/u8/u8).</summary>
    public void EncodeSparse(Span<byte> rec)
    {
        BinaryPrimitives.WriteUInt32BigEndian(rec, StartIno);
        BinaryPrimitives.WriteUInt16BigEndian(rec[4..], HoleMask);
        rec[6] = Count;
        rec[7] = (byte)FreeCount;
        BinaryPrimitives.WriteUInt64BigEndian(rec[8..], FreeMask);
    }

    /// <summary>Encodes the full-chunk form (32-bit free count) used without sparse inodes.</summary>
    public void EncodeFull(Span<byte> rec)
    {
        BinaryPrimitives.WriteUInt32BigEndian(rec, StartIno);
        BinaryPrimitives.WriteUInt32BigEndian(rec[4..], FreeCount);
        BinaryPrimitives.WriteUInt64BigEndian(rec[8..], FreeMask);
    }

    /// <summary>True when the inode at <paramref name="index"/> (0..63) of this chunk exists on disk and is in use.</summary>
    public bool IsAllocated(int index) => (HoleMask & (1 << (index / 4))) == 0 && (FreeMask & (1UL << index)) == 0;
}

/// <summary>Field setters over an AGF sector, at the offsets <see cref="AgfView"/> declares.</summary>
public readonly ref struct AgfWriter
{
    private readonly Span<byte> _b;
    public AgfWriter(Span<byte> sector) => _b = sector;
    private void U32(int o, uint v) => BinaryPrimitives.WriteUInt32BigEndian(_b[o..], v);

    /// <summary>Magic and version 1: the start of every AGF.</summary>
    public void Init(uint agno, uint length)
    {
        U32(AgfView.OffMagic, AgfView.Magic);
        U32(AgfView.OffVersion, 1);
        U32(AgfView.OffSeqno, agno);
        U32(AgfView.OffLength, length);
    }
    public uint BnoRoot { set => U32(AgfView.OffBnoRoot, value); }
    public uint CntRoot { set => U32(AgfView.OffCntRoot, value); }
    public uint RmapRoot { set => U32(AgfView.OffRmapRoot, value); }
    public uint BnoLevel { set => U32(AgfView.OffBnoLevel, value); }
    public uint CntLevel { set => U32(AgfView.OffCntLevel, value); }
    public uint RmapLevel { set => U32(AgfView.OffRmapLevel, value); }
    public uint FlFirst { set => U32(AgfView.OffFlfirst, value); }
    public uint FlLast { set => U32(AgfView.OffFllast, value); }
    public uint FlCount { set => U32(AgfView.OffFlcount, value); }
    public uint FreeBlocks { set => U32(AgfView.OffFreeblks, value); }
    public uint Longest { set => U32(AgfView.OffLongest, value); }
    public uint BtreeBlocks { set => U32(AgfView.OffBtreeblks, value); }
    public Guid Uuid { set => value.TryWriteBytes(_b.Slice(AgfView.OffUuid, 16), bigEndian: true, out _); }
    public uint RmapBlocks { set => U32(AgfView.OffRmapBlocks, value); }
    public uint RefcountBlocks { set => U32(AgfView.OffRefcountBlocks, value); }
    public uint RefcountRoot { set => U32(AgfView.OffRefcountRoot, value); }
    public uint RefcountLevel { set => U32(AgfView.OffRefcountLevel, value); }
    public void StampCrc(int sectorSize) => XfsCrc.Stamp(_b[..sectorSize], AgfView.OffCrc);
}

/// <summary>Field setters over an AGI sector, at the offsets <see cref="AgiView"/> declares.</summary>
public readonly ref struct AgiWriter
{
    private readonly Span<byte> _b;
    public AgiWriter(Span<byte> sector) => _b = sector;
    private void U32(int o, uint v) => BinaryPrimitives.WriteUInt32BigEndian(_b[o..], v);

    /// <summary>Magic, version 1, no inodes, every unlinked bucket empty.</summary>
    public void Init(uint agno, uint length)
    {
        U32(AgiView.OffMagic, AgiView.Magic);
        U32(AgiView.OffVersion, 1);
        U32(AgiView.OffSeqno, agno);
        U32(AgiView.OffLength, length);
        U32(AgiView.OffNewino, AgiView.NullAgino);
        U32(AgiView.OffDirino, AgiView.NullAgino);
        for (int i = 0; i < AgiView.UnlinkedBuckets; i++) U32(AgiView.OffUnlinked + 4 * i, AgiView.NullAgino);
    }
    public uint Count { set => U32(AgiView.OffCount, value); }
    public uint Root { set => U32(AgiView.OffRoot, value); }
    public uint Level { set => U32(AgiView.OffLevel, value); }
    public uint FreeCount { set => U32(AgiView.OffFreecount, value); }
    public uint NewIno { set => U32(AgiView.OffNewino, value); }
    public Guid Uuid { set => value.TryWriteBytes(_b.Slice(AgiView.OffUuid, 16), bigEndian: true, out _); }
    public uint FreeRoot { set => U32(AgiView.OffFreeRoot, value); }
    public uint FreeLevel { set => U32(AgiView.OffFreeLevel, value); }
    public uint InobtBlocks { set => U32(AgiView.OffIblocks, value); }
    public uint FinobtBlocks { set => U32(AgiView.OffFblocks, value); }
    public void StampCrc(int sectorSize) => XfsCrc.Stamp(_b[..sectorSize], AgiView.OffCrc);
}

/// <summary>
/// Builds an AGFL sector: on V5 a header, then the ring of free-list block numbers; on V4 the whole sector is the ring.
/// </summary>
public readonly ref struct AgflWriter
{
    private readonly Span<byte> _b;
    private readonly int _slots0;
    public AgflWriter(Span<byte> sector, bool v5 = true)
    {
        _b = sector;
        _slots0 = v5 ? AgflLayout.OffBno : 0;
    }

    /// <summary>The V5 header and every slot empty (NULLAGBLOCK).</summary>
    public void Init(uint agno, Guid uuid)
    {
        BinaryPrimitives.WriteUInt32BigEndian(_b[AgflLayout.OffMagic..], AgflLayout.Magic);
        BinaryPrimitives.WriteUInt32BigEndian(_b[AgflLayout.OffSeqno..], agno);
        uuid.TryWriteBytes(_b.Slice(AgflLayout.OffUuid, 16), bigEndian: true, out _);
        _b[AgflLayout.OffBno..].Fill(0xFF);
    }

    /// <summary>A V4 AGFL: every slot empty (NULLAGBLOCK), no header.</summary>
    public void InitV4() => _b.Fill(0xFF);

    public int Slots => (_b.Length - _slots0) / 4;
    public void SetSlot(int slot, uint agbno) => BinaryPrimitives.WriteUInt32BigEndian(_b[(_slots0 + 4 * slot)..], agbno);
    public void StampCrc() => XfsCrc.Stamp(_b, AgflLayout.OffCrc);
}

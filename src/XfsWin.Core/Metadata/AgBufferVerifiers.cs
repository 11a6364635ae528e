using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Metadata;

/// <summary>Read verifier of an AG's AGF sector (xfs_agf_verify).</summary>
public readonly struct AgfBufferVerifier(Superblock sb, uint agno) : IBufferVerifier
{
    public int Kind => 3;
    public string Structure => $"AGF of AG {agno}";
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => AgfView.Verify(buffer, sb, agno);

    /// <summary>The AGF's write verifier: structure, then LSN and CRC (V5).</summary>
    public IBufferWriteVerifier ForWrite() =>
        new SelfDescribingWriteVerifier<AgfBufferVerifier>(this, sb.IsV5 ? AgfView.OffLsn : -1, sb.IsV5 ? AgfView.OffCrc : -1);
}

/// <summary>Read verifier of an AG's AGI sector (xfs_agi_verify). Same kind as the inode allocation reader's.</summary>
public readonly struct AgiBufferVerifier(Superblock sb, uint agno) : IBufferVerifier
{
    public int Kind => 2;
    public string Structure => $"AGI of AG {agno}";
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => AgiView.Verify(buffer, sb, agno);

    public IBufferWriteVerifier ForWrite() =>
        new SelfDescribingWriteVerifier<AgiBufferVerifier>(this, sb.IsV5 ? AgiView.OffLsn : -1, sb.IsV5 ? AgiView.OffCrc : -1);
}

/// <summary>Read verifier of a V5 AG free list sector (xfs_agfl_verify: magic, CRC, UUID, AG number, slots inside the AG).</summary>
public readonly struct AgflBufferVerifier(Superblock sb, uint agno) : IBufferVerifier
{
    public int Kind => 4;
    public string Structure => $"AGFL of AG {agno}";

    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
    {
        if (!sb.IsV5) return VerifyResult.Ok; // a V4 AGFL is a bare array of block numbers
        if (BinaryPrimitives.ReadUInt32BigEndian(buffer) != AgflLayout.Magic) return VerifyResult.Fail("bad AGFL magic", AgflLayout.OffMagic);
        if (!XfsCrc.Verify(buffer[..sb.SectorSize], AgflLayout.OffCrc)) return VerifyResult.Fail("AGFL CRC mismatch", AgflLayout.OffCrc);
        if (SuperblockView.ReadUuid(buffer.Slice(AgflLayout.OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("AGFL UUID does not match the volume", AgflLayout.OffUuid);
        if (BinaryPrimitives.ReadUInt32BigEndian(buffer[AgflLayout.OffSeqno..]) != agno) return VerifyResult.Fail($"AGFL of another AG found in AG {agno}", AgflLayout.OffSeqno);
        for (int off = AgflLayout.OffBno; off + 4 <= sb.SectorSize; off += 4)
        {
            uint bno = BinaryPrimitives.ReadUInt32BigEndian(buffer[off..]);
            if (bno != AgiView.NullAgino && bno >= sb.AgBlocks) return VerifyResult.Fail($"AGFL slot holds block {bno}, outside the AG", off);
        }
        return VerifyResult.Ok;
    }

    public IBufferWriteVerifier ForWrite() => new SelfDescribingWriteVerifier<AgflBufferVerifier>(this, AgflLayout.OffLsn, AgflLayout.OffCrc);
}

/// <summary>
/// Read verifier of a V5 short-pointer AG B+tree block (free space, inode, reverse-map, refcount
/// trees): CRC, magic, self-address, UUID, owning AG, level bounds (xfs_btree_sblock_v5hdr_verify).
/// </summary>
public readonly struct AgBtreeBlockVerifier(Superblock sb, uint agno, uint magic, string structure) : IBufferVerifier
{
    /// <summary>The V5 magic itself: one kind per tree, the same the read cursor uses (see BtreeCursor), above every small kind number.</summary>
    public int Kind => (int)magic;
    public string Structure => structure;
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => BtreeBlockView.Verify(buffer, magic, false, sb, byteOffset, agno);

    public IBufferWriteVerifier ForWrite() =>
        new SelfDescribingWriteVerifier<AgBtreeBlockVerifier>(this, BtreeBlockView.ShortOffLsn, BtreeBlockView.ShortOffCrc);
}

/// <summary>Read verifier of a V5 extent B+tree (bmbt) block owned by inode <paramref name="ino"/>.</summary>
public readonly struct BmbtBlockVerifier(Superblock sb, ulong ino) : IBufferVerifier
{
    public int Kind => (int)BtreeMagic.BmapV5;
    public string Structure => $"extent btree block of inode {ino}";
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => BtreeBlockView.Verify(buffer, BtreeMagic.BmapV5, true, sb, byteOffset, ino);
}

/// <summary>Read verifier of the primary superblock sector (xfs_sb_verify: magic, version, CRC, geometry).</summary>
public readonly struct SuperblockBufferVerifier(Superblock sb) : IBufferVerifier
{
    public int Kind => 7;
    public string Structure => "primary superblock";
    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => Superblock.Verify(buffer[..sb.SectorSize]);

    /// <summary>The superblock's write verifier: structure, then LSN and CRC (V5).</summary>
    public IBufferWriteVerifier ForWrite() =>
        new SelfDescribingWriteVerifier<SuperblockBufferVerifier>(this, sb.IsV5 ? SuperblockView.OffLsn : -1, sb.IsV5 ? SuperblockView.OffCrc : -1);
}

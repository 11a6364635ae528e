using System.Buffers.Binary;

namespace XfsWin.Format;

/// <summary>Flags of an attribute entry (XFS_ATTR_*): which namespace, and value placement.</summary>
public static class AttrFlags
{
    public const byte Local = 0x01, Root = 0x02, Secure = 0x04, Parent = 0x08, Incomplete = 0x80;
    public const byte NamespaceMask = Root | Secure | Parent;
}

/// <summary>
/// xfs_attr_sf_hdr + entries: short-form attributes inside the inode's attribute fork.
/// Header: totsize (u16), count (u8), pad. Entry: namelen, valuelen, flags, name then value.
/// </summary>
public readonly ref struct AttrShortformView
{
    public const int HeaderSize = 4, EntryHeaderSize = 3;
    private readonly ReadOnlySpan<byte> _b;

    public AttrShortformView(ReadOnlySpan<byte> fork) => _b = fork;

    public ushort TotalSize => BinaryPrimitives.ReadUInt16BigEndian(_b);
    public byte Count => _b[2];
}

/// <summary>
/// Attribute leaf blocks: xfs_attr_leaf_hdr (V4, 32 bytes) / xfs_attr3_leaf_hdr (V5, 80 bytes),
/// then entries (hashval u32, nameidx u16, flags u8, pad u8) sorted by hash; names and values are
/// packed from the end of the block. Local: valuelen u16, namelen u8, name, value. Remote:
/// valueblk u32, valuelen u32, namelen u8, name.
/// </summary>
public readonly ref struct AttrLeafView
{
    public const int EntrySize = 8;
    private readonly ReadOnlySpan<byte> _b;
    private readonly bool _v5;

    public AttrLeafView(ReadOnlySpan<byte> block, bool v5)
    {
        _b = block;
        _v5 = v5;
    }

    public int HeaderSize => _v5 ? 80 : 32;
    public ushort Count => BinaryPrimitives.ReadUInt16BigEndian(_b[(_v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4)..]);
    public uint HashVal(int i) => BinaryPrimitives.ReadUInt32BigEndian(_b[(HeaderSize + i * EntrySize)..]);
    public ushort NameIndex(int i) => BinaryPrimitives.ReadUInt16BigEndian(_b[(HeaderSize + i * EntrySize + 4)..]);
    public byte Flags(int i) => _b[HeaderSize + i * EntrySize + 6];
}

/// <summary>
/// xfs_attr3_rmt_hdr (V5 "XARM", 56 bytes) heading every block of a remote attribute value, and
/// xfs_dsymlink_hdr (V5 "XSLM", 56 bytes) heading every block of a remote symlink. Same layout:
/// magic, offset, bytes, crc, uuid, owner, blkno, lsn. V4 blocks hold raw data only.
/// </summary>
public static class RemoteBlockHeader
{
    /// <summary>Called with each remote symlink extent a reader went through, as verified, and its disk address.</summary>
    public delegate void Seen(long byteOffset, ReadOnlySpan<byte> block);

    public const uint AttrMagic = 0x5841524D;    // XARM
    public const uint SymlinkMagic = 0x58534C4D; // XSLM
    public const int OffMagic = 0, OffOffset = 4, OffBytes = 8, OffCrc = 12, OffUuid = 16, OffOwner = 32, OffBlkno = 40, OffLsn = 48;
    public const int Size = 56;

    public static VerifyResult Verify(ReadOnlySpan<byte> block, uint magic, Superblock sb, long byteOffset, ulong ownerIno, uint expectedOffset, out int bytes)
    {
        bytes = 0;
        if (BinaryPrimitives.ReadUInt32BigEndian(block) != magic) return VerifyResult.Fail("bad magic", OffMagic);
        if (!XfsCrc.Verify(block, OffCrc)) return VerifyResult.Fail("CRC mismatch", OffCrc);
        if (SuperblockView.ReadUuid(block.Slice(OffUuid, 16)) != sb.MetaUuid) return VerifyResult.Fail("block UUID does not match the volume", OffUuid);
        if (BinaryPrimitives.ReadUInt64BigEndian(block[OffOwner..]) != ownerIno) return VerifyResult.Fail("block owned by another inode", OffOwner);
        if (BinaryPrimitives.ReadUInt64BigEndian(block[OffBlkno..]) != (ulong)(byteOffset >> 9)) return VerifyResult.Fail("block records a different disk address", OffBlkno);
        if (BinaryPrimitives.ReadUInt32BigEndian(block[OffOffset..]) != expectedOffset) return VerifyResult.Fail("block records a different value offset", OffOffset);
        bytes = (int)BinaryPrimitives.ReadUInt32BigEndian(block[OffBytes..]);
        if (bytes < 0 || bytes > block.Length - Size) return VerifyResult.Fail($"block claims {bytes} bytes", OffBytes);
        return VerifyResult.Ok;
    }
}

using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>
/// Answers "is this inode allocated?" from the AG's inode B+tree (inobt), including sparse chunks.
/// Used where an inode's own bytes cannot prove it (V4 inodes carry no CRC or self-address).
/// </summary>
public sealed class InodeAllocation
{
    private readonly MountContext _mount;

    public InodeAllocation(MountContext mount) => _mount = mount;

    public bool IsAllocated(ulong ino)
    {
        var sb = _mount.Superblock;
        uint agno = sb.InoToAgno(ino);
        uint agino = sb.InoToAgino(ino);
        long agiOffset = sb.AgBlockToByte(agno, 0) + 2L * sb.SectorSize;
        var agiBytes = _mount.Buffers.Read(agiOffset, sb.SectorSize, agno, new AgiVerifier(sb, agno));
        var agi = new AgiView(agiBytes);
        var cursor = new BtreeCursor<InobtOps>(MountedBtreeStore.ForAgTree<InobtOps>(_mount, agno, agi.Root, (int)agi.Level));
        Span<byte> key = stackalloc byte[InobtRecord.KeySize];
        System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(key, agino);
        if (!cursor.Lookup(key, BtreeLookup.LessOrEqual)) return false;
        var rec = InobtRecord.Decode(cursor.Record, sb.HasSparseInodes);
        if (agino < rec.StartIno || agino >= rec.StartIno + InobtRecord.InodesPerChunk) return false;
        return rec.IsAllocated((int)(agino - rec.StartIno));
    }

    private readonly struct AgiVerifier(Superblock sb, uint agno) : IBufferVerifier
    {
        public int Kind => 2;
        public string Structure => $"AGI of AG {agno}";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => AgiView.Verify(buffer, sb, agno);
    }
}

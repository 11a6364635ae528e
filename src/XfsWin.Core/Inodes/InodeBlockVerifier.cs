using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>
/// The buffer of one filesystem block of inodes, as changes see it. Reading accepts anything (each
/// inode is verified by whoever uses it, as the inode cache does); writing checks every inode of the
/// block as the kernel's inode buffer verifier does (magic, version, an unlinked pointer that is null
/// or inside the AG), so a block we mangled is never written. Inode CRCs are stamped by whoever
/// changes an inode (as the kernel's inode flush does), not by the buffer.
/// </summary>
public readonly struct InodeBlockVerifier(Superblock sb) : IBufferVerifier, IBufferWriteVerifier
{
    public int Kind => 6;
    public string Structure => "inode block";

    public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => VerifyResult.Ok;

    public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
    {
        uint maxAgino = (uint)Math.Min((ulong)sb.AgBlocks << sb.InoPBlog, uint.MaxValue);
        for (int off = 0; off + sb.InodeSize <= block.Length; off += sb.InodeSize)
        {
            var inode = block.Slice(off, sb.InodeSize);
            if (BinaryPrimitives.ReadUInt16BigEndian(inode) != DinodeView.Magic) return VerifyResult.Fail("bad inode magic", off + DinodeView.OffMagic);
            byte version = inode[DinodeView.OffVersion];
            if (sb.IsV5 ? version != 3 : version is not (1 or 2)) return VerifyResult.Fail($"inode version {version}", off + DinodeView.OffVersion);
            uint next = BinaryPrimitives.ReadUInt32BigEndian(inode[DinodeView.OffNextUnlinked..]);
            if (next != AgiView.NullAgino && next >= maxAgino) return VerifyResult.Fail($"unlinked pointer {next} outside the AG", off + DinodeView.OffNextUnlinked);
        }
        return VerifyResult.Ok;
    }
}

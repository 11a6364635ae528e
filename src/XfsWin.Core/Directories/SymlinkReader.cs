using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Metadata;

namespace XfsWin.Directories;

/// <summary>Reads symlink targets: local (in the inode) or remote (blocks, each with an XSLM header on V5).</summary>
public static class SymlinkReader
{
    /// <summary>XFS_SYMLINK_MAXLEN: the longest target Linux stores.</summary>
    public const int MaxLength = 1024;

    public static byte[] Read(MountContext mount, Inode inode, RemoteBlockHeader.Seen? seen = null)
    {
        if (!inode.IsSymlink) throw new XfsException(XfsError.NotASymlink, $"inode {inode.Number} is not a symbolic link");
        long size = inode.Size;
        if (size <= 0 || size > MaxLength)
            throw mount.Corrupt($"symlink inode {inode.Number}", inode.ByteOffset, $"target length {size}");
        if (inode.DataFormat == ForkFormat.Local)
            return inode.DataFork[..(int)size].ToArray();

        // A remote target is written one extent at a time: on V5 each extent (not each block) starts
        // with an XSLM header and is checksummed as one buffer.
        var sb = mount.Superblock;
        var map = new ExtentMap(mount, inode, ForkKind.Data);
        var target = new byte[size];
        int header = sb.IsV5 ? RemoteBlockHeader.Size : 0;
        int done = 0;
        ulong fileBlock = 0;
        while (done < size)
        {
            if (!map.TryFind(fileBlock, out var ext, out _) || ext.FileOffset != fileBlock)
                throw mount.Corrupt($"symlink inode {inode.Number}", inode.ByteOffset, $"target block {fileBlock} is not mapped");
            if (ext.BlockCount > 4)
                throw mount.Corrupt($"symlink inode {inode.Number}", inode.ByteOffset, $"extent of {ext.BlockCount} blocks for a target of {size} bytes");
            long offset = sb.FsbToByte(ext.StartBlock);
            int bufferSize = (int)(ext.BlockCount << sb.BlockLog);
            int want = (int)Math.Min(bufferSize - header, size - done);
            var buffer = mount.Buffers.Read(offset, bufferSize, inode.Number, new Verifier(sb, inode.Number, (uint)done, want));
            seen?.Invoke(offset, buffer);
            buffer.AsSpan(header, want).CopyTo(target.AsSpan(done));
            done += want;
            fileBlock += ext.BlockCount;
        }
        return target;
    }

    private readonly struct Verifier(Superblock sb, ulong owner, uint offset, int bytes) : IBufferVerifier
    {
        public int Kind => 40;
        public string Structure => $"symlink block of inode {owner}";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
        {
            if (!sb.IsV5) return VerifyResult.Ok;
            var r = RemoteBlockHeader.Verify(buffer, RemoteBlockHeader.SymlinkMagic, sb, byteOffset, owner, offset, out int recorded);
            if (!r.IsOk) return r;
            return recorded == bytes ? VerifyResult.Ok : VerifyResult.Fail($"block holds {recorded} bytes, expected {bytes}", RemoteBlockHeader.OffBytes);
        }
    }
}

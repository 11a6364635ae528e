using System.Runtime.InteropServices;
using XfsWin.Fuse.Interop;
using XfsWin.Volume;

namespace XfsWin.Fuse;

// File ioctls (FUSE_IOCTL). The kernel forwards an ioctl of a FUSE file only in its "restricted" form: the argument's
// size and direction come from the command number, and the kernel copies it in and out. Its own fileattr ioctls
// (FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS) reach us the same way, after the VFS did
// its checks (owner, CAP_LINUX_IMMUTABLE, zero hints clearing their flags); the engine does them again, as a host
// without a VFS needs. Directory ioctls need FUSE_CAP_IOCTL_DIR (asked for in OnInit).
public sealed unsafe partial class FuseHost
{
    // linux/fs.h (the _IOC encoding is the same on x86-64 and arm64).
    internal const uint FS_IOC_GETFLAGS = 0x80086601, FS_IOC_SETFLAGS = 0x40086602;
    internal const uint FS_IOC_FSGETXATTR = 0x801C581F, FS_IOC_FSSETXATTR = 0x401C5820;
    internal const int FsxattrSize = 28; // struct fsxattr: xflags, extsize, nextents, projid, cowextsize, 8 bytes of padding
    private const int ENOTTY = 25;

    [UnmanagedCallersOnly]
    private static void OnIoctl(nint req, ulong ino, uint cmd, void* arg, FuseFileInfo* fi, uint flags, void* inBuf, nuint inSize, nuint outSize)
    {
        try
        {
            var host = HostOf(req);
            var inode = host.ToXfsInode(ino);
            var ctx = CallerOf(req);
            var caller = new FileAttrCaller(ctx.uid, ctx.uid == 0);
            switch (cmd)
            {
                case FS_IOC_FSGETXATTR when outSize >= FsxattrSize:
                    ReplyFsxattr(req, host._volume.GetFileXattr(inode));
                    return;
                case FS_IOC_FSSETXATTR when inSize >= FsxattrSize:
                {
                    var b = new ReadOnlySpan<byte>(inBuf, FsxattrSize);
                    var request = new FileXattr(U32(b, 0), U32(b, 4), U32(b, 8), U32(b, 12), U32(b, 16));
                    host.RefuseOnReadOnlyMount();
                    host._volume.SetFileXattr(inode, request, caller);
                    FuseNative.fuse_reply_ioctl(req, 0, null, 0);
                    return;
                }
                // The kernel passes the flags as an int (fuse_fileattr_get/set), whatever the command's size says.
                case FS_IOC_GETFLAGS when outSize >= 4:
                {
                    uint value = host._volume.GetFileFlags(inode);
                    FuseNative.fuse_reply_ioctl(req, 0, &value, 4);
                    return;
                }
                case FS_IOC_SETFLAGS when inSize >= 4:
                    host.RefuseOnReadOnlyMount();
                    host._volume.SetFileFlags(inode, *(uint*)inBuf, caller);
                    FuseNative.fuse_reply_ioctl(req, 0, null, 0);
                    return;
                case FS_IOC_FSGETXATTR or FS_IOC_FSSETXATTR or FS_IOC_GETFLAGS or FS_IOC_SETFLAGS:
                    FuseNative.fuse_reply_err(req, EINVAL);
                    return;
                default:
                    FuseNative.fuse_reply_err(req, ENOTTY);
                    return;
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "ioctl", ino);
        }

        static uint U32(ReadOnlySpan<byte> b, int offset) => MemoryMarshal.Read<uint>(b[offset..]);
    }

    private static void ReplyFsxattr(nint req, FileXattr a)
    {
        var b = stackalloc uint[FsxattrSize / 4];
        new Span<uint>(b, FsxattrSize / 4).Clear();
        (b[0], b[1], b[2], b[3], b[4]) = (a.XFlags, a.ExtentSize, a.ExtentCount, a.ProjectId, a.CowExtentSize);
        FuseNative.fuse_reply_ioctl(req, 0, b, FsxattrSize);
    }

    private void RefuseOnReadOnlyMount()
    {
        if (_options.ReadOnly) throw new XfsException(XfsError.ReadOnly, "the volume is mounted read-only");
    }
}

public sealed unsafe partial class FuseHost
{
    private const int EPERM = 1;

    /// <summary>may_open's rules: an immutable file is not opened for writing, an append-only one only with O_APPEND.</summary>
    internal static bool LockedAgainstOpen(ushort diFlags, int openFlags)
    {
        const ushort Immutable = 0x8, Append = 0x10;
        const int O_APPEND = 0x400; // 02000 on x86-64 and arm64
        return (diFlags & Immutable) != 0 || ((diFlags & Append) != 0 && (openFlags & O_APPEND) == 0);
    }
}

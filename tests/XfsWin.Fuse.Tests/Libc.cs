using System.Runtime.InteropServices;
using System.Text;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The system calls the differential harness makes, straight through libc, so that each result is
/// the call's own return value or errno (no runtime layer mapping or retrying them).
/// </summary>
internal static unsafe partial class Libc
{
    private const string C = "libc";

    [LibraryImport(C, EntryPoint = "open", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int OpenNative(string path, int flags, uint mode);

    /// <summary>
    /// open(2), always with O_CLOEXEC: a descriptor without it is inherited by every process this
    /// test process starts meanwhile (other tests' tools, their background xfswin servers), and
    /// such a child keeps the mount busy, and its unmount failing, for as long as it runs.
    /// </summary>
    public static int open(string path, int flags, uint mode) => OpenNative(path, flags | O_CLOEXEC, mode);

    [LibraryImport(C, SetLastError = true)]
    public static partial int close(int fd);

    [LibraryImport(C, SetLastError = true)]
    public static partial nint pwrite(int fd, byte* buf, nint count, long offset);

    [LibraryImport(C, SetLastError = true)]
    public static partial nint pread(int fd, byte* buf, nint count, long offset);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int truncate(string path, long length);

    [LibraryImport(C, SetLastError = true)]
    public static partial int fsync(int fd);

    [LibraryImport(C, SetLastError = true)]
    public static partial int fdatasync(int fd);

    [LibraryImport(C, SetLastError = true)]
    public static partial int kill(int pid, int signal);

    public const int SIGKILL = 9;
    /// <summary>O_DSYNC and O_SYNC (__O_SYNC | O_DSYNC) as x86-64 and arm64 define them.</summary>
    public const int O_DSYNC = 0x1000, O_SYNC = 0x101000;

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int mkdir(string path, uint mode);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int rmdir(string path);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int unlink(string path);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int link(string from, string to);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int symlink(string target, string path);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int renameat2(int olddirfd, string oldpath, int newdirfd, string newpath, uint flags);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int lsetxattr(string path, string name, byte* value, nint size, int flags);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial nint lgetxattr(string path, string name, byte* value, nint size);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int lremovexattr(string path, string name);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial nint llistxattr(string path, byte* list, nint size);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int chmod(string path, uint mode);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int lchown(string path, uint uid, uint gid);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int utimensat(int dirfd, string path, Timespec* times, int flags);

    [LibraryImport(C, SetLastError = true)]
    public static partial nint copy_file_range(int fdIn, long* offIn, int fdOut, long* offOut, nuint length, uint flags);

    [LibraryImport(C, SetLastError = true)]
    public static partial int fallocate(int fd, int mode, long offset, long length);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int mknod(string path, uint mode, ulong dev);

    /// <summary>setfsuid(2): the calling thread's file system uid (returns the previous one).</summary>
    [LibraryImport(C)]
    public static partial int setfsuid(uint uid);

    [LibraryImport(C)]
    public static partial int setfsgid(uint gid);

    [LibraryImport(C, SetLastError = true)]
    public static partial int ioctl(int fd, nuint request, void* argument);

    /// <summary>glibc's makedev: the device number mknod(2) takes.</summary>
    public static ulong MakeDev(uint major, uint minor) =>
        ((ulong)(major & 0xFFFFF000) << 32) | ((ulong)(major & 0xFFF) << 8) | ((ulong)(minor & 0xFFFFFF00) << 12) | (minor & 0xFF);

    [LibraryImport(C, SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int statx(int dirfd, string path, int flags, uint mask, byte* buffer);

    public const int AT_FDCWD = -100;
    public const int AT_SYMLINK_NOFOLLOW = 0x100;
    public const int O_RDONLY = 0, O_WRONLY = 1, O_RDWR = 2, O_CREAT = 0x40, O_EXCL = 0x80, O_TRUNC = 0x200, O_APPEND = 0x400, O_NONBLOCK = 0x800, O_CLOEXEC = 0x80000;
    public const long UTIME_NOW = (1L << 30) - 1, UTIME_OMIT = (1L << 30) - 2;

    [StructLayout(LayoutKind.Sequential)]
    public struct Timespec
    {
        public long Seconds;
        public long Nanoseconds;
    }

    /// <summary>"= N" for a non-negative result, else the errno's name.</summary>
    public static string Result(long rc) => rc >= 0 ? $"= {rc}" : "errno " + Marshal.GetLastPInvokeError();

    /// <summary>
    /// lstat through statx: type and mode, nlink, uid, gid, size, rdev, and blocks when asked; no
    /// times or inode numbers (they differ between two volumes by design).
    /// </summary>
    public static string Stat(string path, bool withBlocks)
    {
        var buffer = stackalloc byte[256];
        if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, 0x7FF, buffer) != 0)
            return "stat errno " + Marshal.GetLastPInvokeError();
        var mode = *(ushort*)(buffer + 28);
        var text = $"mode {Convert.ToString(mode, 8)} nlink {*(uint*)(buffer + 16)} uid {*(uint*)(buffer + 20)} gid {*(uint*)(buffer + 24)} " +
                   $"size {*(ulong*)(buffer + 40)} rdev {*(uint*)(buffer + 128)}:{*(uint*)(buffer + 132)}";
        return withBlocks ? text + $" blocks {*(ulong*)(buffer + 48)}" : text;
    }

    /// <summary>The xattr names of a path (sorted), or the errno.</summary>
    public static string ListXattrs(string path)
    {
        var n = llistxattr(path, null, 0);
        if (n < 0)
            return "listxattr errno " + Marshal.GetLastPInvokeError();
        var bytes = new byte[n];
        fixed (byte* p = bytes)
            n = llistxattr(path, p, n);
        if (n < 0)
            return "listxattr errno " + Marshal.GetLastPInvokeError();
        return string.Join(',', Encoding.UTF8.GetString(bytes, 0, (int)n).Split('\0', StringSplitOptions.RemoveEmptyEntries).Order(StringComparer.Ordinal));
    }

    /// <summary>An xattr's value as hex (SHA-256 when long), or the errno.</summary>
    public static string GetXattr(string path, string name)
    {
        var bytes = new byte[70000];
        nint n;
        fixed (byte* p = bytes)
            n = lgetxattr(path, name, p, bytes.Length);
        if (n < 0)
            return "getxattr errno " + Marshal.GetLastPInvokeError();
        return n <= 64 ? Convert.ToHexString(bytes, 0, (int)n) : $"{n} bytes sha256 " + Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(bytes.AsSpan(0, (int)n)));
    }
}

using System.Runtime.InteropServices;

namespace XfsWin.Cli.Native;

/// <summary>
/// The POSIX calls extract needs that .NET does not expose: exclusive creation without following
/// symlinks, nanosecond timestamps, owners, device nodes, hard links and raw extended attributes.
/// Linux only (x86-64 and arm64 share these constants).
/// </summary>
internal static partial class Posix
{
    public const int O_WRONLY = 0x1;
    public const int O_CREAT = 0x40;
    public const int O_EXCL = 0x80;
    public const int O_CLOEXEC = 0x80000;
    public static int O_NOFOLLOW => RuntimeInformation.ProcessArchitecture is Architecture.Arm64 or Architecture.Arm ? 0x8000 : 0x20000;
    public const int AT_FDCWD = -100;
    public const int AT_SYMLINK_NOFOLLOW = 0x100;
    public const int EEXIST = 17;
    public const int EPERM = 1;
    public const int ENOTSUP = 95;

    [StructLayout(LayoutKind.Sequential)]
    public struct Timespec
    {
        public long Seconds;
        public long Nanoseconds;
    }

    [LibraryImport("libc", EntryPoint = "open", SetLastError = true)]
    public static partial int Open(byte[] path, int flags, uint mode);

    [LibraryImport("libc", EntryPoint = "mkdir", SetLastError = true)]
    public static partial int Mkdir(byte[] path, uint mode);

    [LibraryImport("libc", EntryPoint = "symlink", SetLastError = true)]
    public static partial int Symlink(byte[] target, byte[] linkPath);

    [LibraryImport("libc", EntryPoint = "link", SetLastError = true)]
    public static partial int Link(byte[] existing, byte[] newPath);

    [LibraryImport("libc", EntryPoint = "mknod", SetLastError = true)]
    public static partial int Mknod(byte[] path, uint mode, ulong dev);

    [LibraryImport("libc", EntryPoint = "lchown", SetLastError = true)]
    public static partial int Lchown(byte[] path, uint uid, uint gid);

    [LibraryImport("libc", EntryPoint = "chmod", SetLastError = true)]
    public static partial int Chmod(byte[] path, uint mode);

    [LibraryImport("libc", EntryPoint = "utimensat", SetLastError = true)]
    public static partial int Utimensat(int dirfd, byte[] path, ReadOnlySpan<Timespec> times, int flags);

    [LibraryImport("libc", EntryPoint = "lsetxattr", SetLastError = true)]
    public static partial int Lsetxattr(byte[] path, byte[] name, ReadOnlySpan<byte> value, nuint size, int flags);

    [LibraryImport("libc", EntryPoint = "geteuid")]
    public static partial uint Geteuid();

    public const int SIGINT = 2;
    private const nint SIG_DFL = 0, SIG_IGN = 1;

    [LibraryImport("libc", EntryPoint = "signal")]
    private static partial nint Signal(int signal, nint handler);

    /// <summary>glibc's sigaction; only the handler, the struct's first field, is read here.</summary>
    [LibraryImport("libc", EntryPoint = "sigaction")]
    private static unsafe partial int Sigaction(int signal, void* action, void* oldAction);

    /// <summary>
    /// Gives an inherited "ignore" of <paramref name="signal"/> back its default action, so that .NET's
    /// PosixSignalRegistration can handle it (it leaves ignored SIGINT and SIGQUIT alone). A handler
    /// already installed is kept.
    /// </summary>
    public static unsafe void StopIgnoring(int signal)
    {
        var old = stackalloc byte[256]; // glibc's struct sigaction is 152 bytes on 64-bit Linux
        if (Sigaction(signal, null, old) == 0 && *(nint*)old == SIG_IGN)
            Signal(signal, SIG_DFL);
    }

    /// <summary>Linux's makedev: the glibc encoding of major/minor into dev_t.</summary>
    public static ulong MakeDev(uint major, uint minor) =>
        ((ulong)(major & 0xfff) << 8) | ((ulong)(major & ~0xfffu) << 32) | (minor & 0xff) | ((ulong)(minor & ~0xffu) << 12);

    /// <summary>A NUL-terminated copy of a path or name for the calls above.</summary>
    public static byte[] Z(ReadOnlySpan<byte> bytes)
    {
        var z = new byte[bytes.Length + 1];
        bytes.CopyTo(z);
        return z;
    }

    public static byte[] Z(string text) => Z(System.Text.Encoding.UTF8.GetBytes(text));

    public static string ErrorText(int errno) => Marshal.GetPInvokeErrorMessage(errno);

    public static bool IsRoot => OperatingSystem.IsLinux() && Geteuid() == 0;
}

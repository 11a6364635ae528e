using System.Runtime.InteropServices;

namespace XfsWin.Metadata;

/// <summary>
/// The operating system's id of the calling thread (Linux: the TID of gettid(2); Windows:
/// GetCurrentThreadId), or -1 elsewhere. A host that places threads on CPUs needs it: .NET names
/// threads by managed ids only.
/// </summary>
internal static partial class NativeThreadId
{
    public static int Current()
    {
        if (OperatingSystem.IsLinux())
            return gettid();
        if (OperatingSystem.IsWindows())
            return (int)GetCurrentThreadId();
        return -1;
    }

    [LibraryImport("libc")]
    private static partial int gettid();

    [LibraryImport("kernel32.dll")]
    private static partial uint GetCurrentThreadId();
}

using System.Runtime.InteropServices;

namespace XfsWin.Driver.Interop;

/// <summary>The WinFsp API functions the driver calls (winfsp.h). Blittable signatures only.</summary>
internal static unsafe partial class NativeMethods
{
    private const string Dll = WinFspLibrary.ImportName;

    [DllImport(Dll, ExactSpelling = true)]
    public static extern int FspFileSystemCreate(char* devicePath, FspFsctlVolumeParams* volumeParams,
        FspFileSystemInterface* fsInterface, FspFileSystem** fileSystem);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern void FspFileSystemDelete(FspFileSystem* fileSystem);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern int FspFileSystemSetMountPoint(FspFileSystem* fileSystem, char* mountPoint);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern void FspFileSystemRemoveMountPoint(FspFileSystem* fileSystem);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern int FspFileSystemStartDispatcher(FspFileSystem* fileSystem, uint threadCount);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern void FspFileSystemStopDispatcher(FspFileSystem* fileSystem);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern byte FspFileSystemAddDirInfo(FspFsctlDirInfo* dirInfo, void* buffer, uint length, uint* bytesTransferred);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern int FspFileSystemResolveReparsePoints(FspFileSystem* fileSystem,
        delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, byte, void*, nuint*, int> getReparsePointByName,
        void* context, char* fileName, uint reparsePointIndex, byte resolveLastPathComponent,
        void* ioStatus, void* buffer, nuint* size);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern void FspFileSystemSetDebugLogF(FspFileSystem* fileSystem, uint debugLog);

    [DllImport(Dll, ExactSpelling = true)]
    public static extern int FspVersion(uint* version);
}

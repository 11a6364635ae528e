using System.Runtime.InteropServices;
using XfsWin.Driver.Semantics;

namespace XfsWin.Driver.Interop;

// Layouts of WinFsp's public headers (inc/winfsp/fsctl.h, inc/winfsp/winfsp.h) for 64-bit Windows.
// Sizes and offsets are pinned by InteropLayoutTests against the values those headers assert.

/// <summary>FSP_FSCTL_VOLUME_PARAMS (V1, 504 bytes).</summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct FspFsctlVolumeParams
{
    public ushort Version;
    public ushort SectorSize;
    public ushort SectorsPerAllocationUnit;
    public ushort MaxComponentLength;
    public ulong VolumeCreationTime;
    public uint VolumeSerialNumber;
    public uint TransactTimeout;
    public uint IrpTimeout;
    public uint IrpCapacity;
    public uint FileInfoTimeout;
    public VolumeFlags Flags;
    public fixed char Prefix[192];
    public fixed char FileSystemName[16];
    public uint AdditionalFlags;
    public uint VolumeInfoTimeout;
    public uint DirInfoTimeout;
    public uint SecurityTimeout;
    public uint StreamInfoTimeout;
    public uint EaTimeout;
    public uint FsextControlCode;
    public uint Reserved32;
    public ulong Reserved64A;
    public ulong Reserved64B;

    public const int PrefixChars = 192;
    public const int FileSystemNameChars = 16;
}

/// <summary>The bit fields of FSP_FSCTL_VOLUME_PARAMS after FileInfoTimeout, in declaration order.</summary>
[Flags]
public enum VolumeFlags : uint
{
    CaseSensitiveSearch = 1u << 0,
    CasePreservedNames = 1u << 1,
    UnicodeOnDisk = 1u << 2,
    PersistentAcls = 1u << 3,
    ReparsePoints = 1u << 4,
    ReparsePointsAccessCheck = 1u << 5,
    NamedStreams = 1u << 6,
    HardLinks = 1u << 7,
    ExtendedAttributes = 1u << 8,
    ReadOnlyVolume = 1u << 9,
    PostCleanupWhenModifiedOnly = 1u << 10,
    PassQueryDirectoryPattern = 1u << 11,
    AlwaysUseDoubleBuffering = 1u << 12,
    PassQueryDirectoryFileName = 1u << 13,
    FlushAndPurgeOnCleanup = 1u << 14,
    DeviceControl = 1u << 15,
    UmFileContextIsUserContext2 = 1u << 16,
    UmFileContextIsFullContext = 1u << 17,
    UmNoReparsePointsDirCheck = 1u << 18,
    // 19..23: UmReservedFlags
    AllowOpenInKernelMode = 1u << 24,
    CasePreservedExtendedAttributes = 1u << 25,
    WslFeatures = 1u << 26,
    DirectoryMarkerAsNextOffset = 1u << 27,
    RejectIrpPriorToTransact0 = 1u << 28,
    SupportsPosixUnlinkRename = 1u << 29,
    PostDispositionWhenNecessaryOnly = 1u << 30,
}

/// <summary>FSP_FSCTL_VOLUME_INFO (88 bytes).</summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct FspFsctlVolumeInfo
{
    public ulong TotalSize;
    public ulong FreeSize;
    public ushort VolumeLabelLength;
    public fixed char VolumeLabel[32];
}

/// <summary>FSP_FSCTL_DIR_INFO without its trailing name (104 bytes).</summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct FspFsctlDirInfo
{
    public ushort Size;
    public FileInformation FileInfo;
    public ulong NextOffset;
    public fixed byte Padding[16];
}

/// <summary>FSP_FSCTL_OPEN_FILE_INFO (FileInfo, then the normalized name pointer and size).</summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct FspFsctlOpenFileInfo
{
    public FileInformation FileInfo;
    public char* NormalizedName;
    public ushort NormalizedNameSize;
}

/// <summary>FSP_FILE_SYSTEM (792 bytes on 64-bit). We only read UserContext and DispatcherResult.</summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct FspFileSystem
{
    public ushort Version;
    public void* UserContext;
    public fixed char VolumeName[256];
    public nint VolumeHandle;
    public void* EnterOperation;
    public void* LeaveOperation;
    public fixed ulong Operations[22];
    public void* Interface;
    public nint DispatcherThread;
    public uint DispatcherThreadCount;
    public int DispatcherResult;
    public char* MountPoint;
    public nint MountHandle;
    public uint DebugLog;
    public int OpGuardStrategy;
    public nint OpGuardLock;
    public byte UmFileContextIsUserContext2;
    public byte UmFileContextIsFullContext;
    public ushort UmFlags;
}

/// <summary>
/// FSP_FILE_SYSTEM_INTERFACE: 64 function pointers. Unused entries stay null (WinFsp then answers
/// STATUS_INVALID_DEVICE_REQUEST or uses its default).
/// </summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct FspFileSystemInterface
{
    public delegate* unmanaged[Stdcall]<FspFileSystem*, FspFsctlVolumeInfo*, int> GetVolumeInfo;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, char*, FspFsctlVolumeInfo*, int> SetVolumeLabel;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, char*, uint*, void*, nuint*, int> GetSecurityByName;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, char*, uint, uint, uint, void*, ulong, void**, FileInformation*, int> Create;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, char*, uint, uint, void**, FileInformation*, int> Open;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, uint, byte, ulong, FileInformation*, int> Overwrite;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, uint, void> Cleanup;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, void> Close;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, void*, ulong, uint, uint*, int> Read;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, void*, ulong, uint, byte, byte, uint*, FileInformation*, int> Write;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, FileInformation*, int> Flush;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, FileInformation*, int> GetFileInfo;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, uint, ulong, ulong, ulong, ulong, FileInformation*, int> SetBasicInfo;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, ulong, byte, FileInformation*, int> SetFileSize;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, int> CanDelete;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, char*, byte, int> Rename;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, void*, nuint*, int> GetSecurity;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, uint, void*, int> SetSecurity;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, char*, void*, uint, uint*, int> ReadDirectory;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, char*, uint, byte, void*, void*, nuint*, int> ResolveReparsePoints;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, void*, nuint*, int> GetReparsePoint;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, void*, nuint, int> SetReparsePoint;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, void*, nuint, int> DeleteReparsePoint;
    public void* GetStreamInfo;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, FspFsctlDirInfo*, int> GetDirInfoByName;
    public void* Control;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, char*, byte, int> SetDelete;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, char*, uint, uint, uint, void*, ulong, void*, uint, byte, void**, FileInformation*, int> CreateEx;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, uint, byte, ulong, void*, uint, FileInformation*, int> OverwriteEx;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, void*, uint, uint*, int> GetEa;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, void*, void*, uint, FileInformation*, int> SetEa;
    public void* Obsolete0;
    public delegate* unmanaged[Stdcall]<FspFileSystem*, byte, void> DispatcherStopped;
    public fixed ulong Reserved[31];

    public const int EntryCount = 64;
}

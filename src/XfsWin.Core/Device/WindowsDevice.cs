using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Microsoft.Win32.SafeHandles;

namespace XfsWin.Device;

/// <summary>
/// Windows: image files and <c>\\.\PhysicalDriveN</c> opened with FILE_FLAG_NO_BUFFERING and
/// overlapped I/O (FileOptions.Asynchronous), so reads and writes bypass the cache (into sector-aligned
/// buffers; <see cref="FileBlockDevice"/> bounces the rest) and ReadAsync is truly async; Flush is
/// FlushFileBuffers, which reaches the disk (log forces). Before a physical disk is written, the Windows
/// volumes on the part being written are locked and dismounted (<see cref="LockVolumes"/>).
/// </summary>
internal static partial class WindowsDevice
{
    private const FileOptions NoBuffering = (FileOptions)0x20000000;
    private const uint IOCTL_DISK_GET_LENGTH_INFO = 0x0007405C;
    private const uint IOCTL_DISK_GET_DRIVE_GEOMETRY = 0x00070000;

    [SupportedOSPlatform("windows")]
    public static FileBlockDevice Open(string path, bool writable, bool unbuffered)
    {
        var options = FileOptions.Asynchronous | (unbuffered ? NoBuffering : FileOptions.RandomAccess);
        SafeFileHandle handle;
        try
        {
            handle = File.OpenHandle(path, FileMode.Open, writable ? FileAccess.ReadWrite : FileAccess.Read, FileShare.ReadWrite, options);
        }
        catch (UnauthorizedAccessException e) when (DeviceRangeOps.IsWindowsDevicePath(path))
        {
            throw new XfsException(XfsError.InvalidArgument, $"opening {path} needs administrator rights: run from an elevated prompt or use the XfsWin service. ({e.Message})", e);
        }
        bool isDisk = DeviceRangeOps.IsWindowsDevicePath(path);
        long length = isDisk ? DiskLength(handle, path) : RandomAccess.GetLength(handle);
        int sector = isDisk ? DiskSectorSize(handle) : 4096;
        string mode = unbuffered ? "unbuffered, overlapped (FILE_FLAG_NO_BUFFERING)" : "buffered (unbuffered I/O disabled by option)";
        return FileBlockDevice.FromHandle(handle, length, unbuffered ? sector : 512, unbuffered, writable, mode, path,
            isDisk ? h => DiskLength(h, path) : null);
    }

    [SupportedOSPlatform("windows")]
    private static unsafe long DiskLength(SafeFileHandle handle, string path)
    {
        long length;
        if (!DeviceIoControl(handle, IOCTL_DISK_GET_LENGTH_INFO, null, 0, &length, sizeof(long), out _, null))
            throw new XfsException(XfsError.IoError, $"cannot read the size of {path} (error {Marshal.GetLastPInvokeError()})");
        return length;
    }

    [SupportedOSPlatform("windows")]
    private static unsafe int DiskSectorSize(SafeFileHandle handle)
    {
        // DISK_GEOMETRY: Cylinders (8), MediaType (4), TracksPerCylinder (4), SectorsPerTrack (4), BytesPerSector (4).
        byte* geometry = stackalloc byte[24];
        if (!DeviceIoControl(handle, IOCTL_DISK_GET_DRIVE_GEOMETRY, null, 0, geometry, 24, out _, null))
            return 512;
        int bytes = *(int*)(geometry + 20);
        return bytes >= 512 ? bytes : 512;
    }

    [LibraryImport("kernel32.dll", SetLastError = true)]
    [return: MarshalAs(UnmanagedType.Bool)]
    private static unsafe partial bool DeviceIoControl(SafeFileHandle device, uint code, void* inBuffer, int inSize,
        void* outBuffer, int outSize, out int returned, void* overlapped);

    // ---- volumes sharing a physical disk's bytes: found, locked and dismounted before writing (VolumeLockPlan) ----

    private const uint IOCTL_STORAGE_GET_DEVICE_NUMBER = 0x002D1080;
    private const uint IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS = 0x00560000;
    private const uint FSCTL_LOCK_VOLUME = 0x00090018, FSCTL_DISMOUNT_VOLUME = 0x00090020;
    private const int ErrorMoreData = 234, ErrorNoMoreFiles = 18, ErrorInsufficientBuffer = 122;

    /// <summary>
    /// Locks and dismounts every Windows volume that shares bytes with [<paramref name="start"/>,
    /// +<paramref name="length"/>) of the physical disk open as <paramref name="disk"/> (<see cref="VolumeLockPlan"/>):
    /// all locked first, then all dismounted. Returns the volume handles, which hold the locks until disposed. Throws
    /// (with every lock taken so far released) when one cannot be locked.
    /// </summary>
    [SupportedOSPlatform("windows")]
    public static IReadOnlyList<SafeFileHandle> LockVolumes(SafeFileHandle disk, string path, long start, long length)
    {
        uint number = DiskNumber(disk) ?? VolumeLockPlan.PhysicalDriveNumber(path)
            ?? throw new XfsException(XfsError.IoError, $"cannot tell which disk number {path} is, so its Windows volumes cannot be locked. Nothing was written.");
        var plan = VolumeLockPlan.VolumesToLock(Volumes(), number, start, length);
        var locks = new List<SafeFileHandle>();
        try
        {
            foreach (var volume in plan)
            {
                var handle = CreateFileW(volume.Name.TrimEnd('\\'), GenericRead | GenericWrite, FileShareReadWrite, 0, OpenExisting, 0, 0);
                if (handle.IsInvalid)
                {
                    int error = Marshal.GetLastPInvokeError();
                    handle.Dispose();
                    throw VolumeLockPlan.Failure(volume, "open", error, path);
                }
                locks.Add(handle);
                if (!Control(handle, FSCTL_LOCK_VOLUME)) throw VolumeLockPlan.Failure(volume, "lock", Marshal.GetLastPInvokeError(), path);
            }
            for (int i = 0; i < plan.Count; i++)
                if (!Control(locks[i], FSCTL_DISMOUNT_VOLUME)) throw VolumeLockPlan.Failure(plan[i], "dismount", Marshal.GetLastPInvokeError(), path);
            return locks;
        }
        catch
        {
            // Closing a locked volume's handle unlocks it: nothing stays locked after a refusal.
            foreach (var l in locks) l.Dispose();
            throw;
        }
    }

    private const uint GenericRead = 0x80000000, GenericWrite = 0x40000000, FileShareReadWrite = 0x3, OpenExisting = 3;

    [LibraryImport("kernel32.dll", SetLastError = true, StringMarshalling = StringMarshalling.Utf16)]
    private static partial SafeFileHandle CreateFileW(string name, uint access, uint share, nint security, uint disposition, uint flags, nint template);

    [SupportedOSPlatform("windows")]
    private static unsafe bool Control(SafeFileHandle handle, uint code) => DeviceIoControl(handle, code, null, 0, null, 0, out _, null);

    /// <summary>STORAGE_DEVICE_NUMBER { DEVICE_TYPE DeviceType; DWORD DeviceNumber; DWORD PartitionNumber; } of an open disk.</summary>
    [SupportedOSPlatform("windows")]
    private static unsafe uint? DiskNumber(SafeFileHandle disk)
    {
        uint* number = stackalloc uint[3];
        return DeviceIoControl(disk, IOCTL_STORAGE_GET_DEVICE_NUMBER, null, 0, number, 12, out _, null) ? number[1] : null;
    }

    /// <summary>Every volume of the machine with its disk extents; volumes that cannot be asked (no media, CD drives) are left out.</summary>
    [SupportedOSPlatform("windows")]
    private static unsafe List<WindowsVolume> Volumes()
    {
        var volumes = new List<WindowsVolume>();
        char* name = stackalloc char[MaxPathChars];
        nint find = FindFirstVolumeW(name, MaxPathChars);
        if (find == -1) return volumes;
        try
        {
            do
            {
                string volume = new(name);
                if (Extents(volume) is { Count: > 0 } extents) volumes.Add(new WindowsVolume(volume, MountPoints(volume), extents));
            }
            while (FindNextVolumeW(find, name, MaxPathChars));
        }
        finally
        {
            FindVolumeClose(find);
        }
        return volumes;
    }

    private const int MaxPathChars = 1024;

    /// <summary>VOLUME_DISK_EXTENTS { DWORD NumberOfDiskExtents; DISK_EXTENT Extents[] } (DISK_EXTENT: DWORD DiskNumber, 4 bytes padding, LARGE_INTEGER StartingOffset, LARGE_INTEGER ExtentLength).</summary>
    [SupportedOSPlatform("windows")]
    private static unsafe List<DiskExtent>? Extents(string volume)
    {
        // No access asked: the extents are metadata, and a volume in use must still answer.
        var handle = CreateFileW(volume.TrimEnd('\\'), 0, FileShareReadWrite, 0, OpenExisting, 0, 0);
        using (handle)
        {
            if (handle.IsInvalid) return null;
            for (int capacity = 16; capacity <= 4096; capacity *= 16)
            {
                int size = 8 + 24 * capacity;
                byte[] buffer = new byte[size];
                fixed (byte* p = buffer)
                {
                    if (!DeviceIoControl(handle, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, null, 0, p, size, out _, null))
                    {
                        int error = Marshal.GetLastPInvokeError();
                        if (error is ErrorMoreData or ErrorInsufficientBuffer) continue;
                        return null;
                    }
                    int count = *(int*)p;
                    var extents = new List<DiskExtent>(count);
                    for (int i = 0; i < count && 8 + 24 * (i + 1) <= size; i++)
                    {
                        byte* e = p + 8 + 24 * i;
                        extents.Add(new DiskExtent(*(uint*)e, *(long*)(e + 8), *(long*)(e + 16)));
                    }
                    return extents;
                }
            }
            return null;
        }
    }

    /// <summary>Drive letters and folders a volume is mounted at (GetVolumePathNamesForVolumeNameW's MULTI_SZ).</summary>
    [SupportedOSPlatform("windows")]
    private static unsafe List<string> MountPoints(string volume)
    {
        var points = new List<string>();
        char* names = stackalloc char[MaxPathChars];
        if (!GetVolumePathNamesForVolumeNameW(volume, names, MaxPathChars, out _)) return points;
        for (char* p = names; *p != 0;)
        {
            var s = new string(p);
            points.Add(s);
            p += s.Length + 1;
        }
        return points;
    }

    [LibraryImport("kernel32.dll", SetLastError = true)]
    private static unsafe partial nint FindFirstVolumeW(char* name, int length);

    [LibraryImport("kernel32.dll", SetLastError = true)]
    [return: MarshalAs(UnmanagedType.Bool)]
    private static unsafe partial bool FindNextVolumeW(nint find, char* name, int length);

    [LibraryImport("kernel32.dll")]
    [return: MarshalAs(UnmanagedType.Bool)]
    private static partial bool FindVolumeClose(nint find);

    [LibraryImport("kernel32.dll", SetLastError = true, StringMarshalling = StringMarshalling.Utf16)]
    [return: MarshalAs(UnmanagedType.Bool)]
    private static unsafe partial bool GetVolumePathNamesForVolumeNameW(string volume, char* names, int length, out int returned);
}

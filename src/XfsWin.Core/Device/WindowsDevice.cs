using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Microsoft.Win32.SafeHandles;

namespace XfsWin.Device;

/// <summary>
/// Windows: image files and <c>\\.\PhysicalDriveN</c> opened with FILE_FLAG_NO_BUFFERING and
/// overlapped I/O (FileOptions.Asynchronous), so reads bypass the cache and ReadAsync is truly async.
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
        return FileBlockDevice.FromHandle(handle, length, unbuffered ? sector : 512, unbuffered, writable, mode,
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
}

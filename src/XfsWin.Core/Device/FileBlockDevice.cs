using System.ComponentModel;
using System.Runtime.InteropServices;
using Microsoft.Win32.SafeHandles;

namespace XfsWin.Device;

/// <summary>
/// An image file or a raw disk, read with unbuffered I/O where the platform allows it:
/// O_DIRECT on Linux, FILE_FLAG_NO_BUFFERING with overlapped I/O on Windows. When the host file
/// system refuses unbuffered I/O (tmpfs, some FUSE and network file systems) it falls back to
/// buffered I/O and says so in <see cref="IoMode"/>.
/// Unaligned requests bounce through pooled aligned buffers; aligned ones go straight into the
/// caller's memory.
/// </summary>
public sealed class FileBlockDevice : IBlockDevice
{
    private const int BounceSize = 1 << 20;
    private readonly SafeFileHandle _handle;
    private readonly AlignedBufferPool _bounce;
    private readonly bool _direct;

    private readonly string? _path;
    /// <summary>Windows: the locked volumes of the part of a physical disk claimed for writing (released at Dispose).</summary>
    private IReadOnlyList<SafeFileHandle> _volumeLocks = [];

    private FileBlockDevice(SafeFileHandle handle, long length, int sectorSize, bool direct, bool writable, string ioMode, string? path = null)
    {
        _path = path;
        _handle = handle;
        _length = length;
        SectorSize = sectorSize;
        _direct = direct;
        CanWrite = writable;
        IoMode = ioMode;
        _bounce = new AlignedBufferPool(BounceSize, Environment.ProcessorCount * 2);
    }

    private long _length;
    public long Length => Volatile.Read(ref _length);

    /// <summary>How to ask a disk for its size again (a Windows physical drive answers only its own IOCTL); null for files and Linux devices.</summary>
    private Func<SafeFileHandle, long>? _diskLength;

    /// <summary>The file's or disk's current size; a size that shrank below the open size is kept (the volume is not moved back).</summary>
    public long RefreshLength()
    {
        long now = _diskLength is not null ? _diskLength(_handle)
            : OperatingSystem.IsLinux() && LinuxNative.TryBlockDeviceSize((int)_handle.DangerousGetHandle(), out long disk) ? disk
            : RandomAccess.GetLength(_handle);
        if (now > Volatile.Read(ref _length)) Volatile.Write(ref _length, now);
        return Length;
    }
    public int SectorSize { get; }
    public bool CanWrite { get; }
    public string IoMode { get; }

    /// <summary>Opens a file or device. <paramref name="unbuffered"/> false forces buffered I/O.</summary>
    public static FileBlockDevice Open(string path, bool writable = false, bool unbuffered = true)
    {
        if (!File.Exists(path) && !IsDevicePath(path))
            throw new XfsException(XfsError.NotFound, $"'{path}' does not exist. Give the path of an XFS image file or disk.");
        return OperatingSystem.IsWindows() ? WindowsDevice.Open(path, writable, unbuffered) : OpenUnix(path, writable, unbuffered);
    }

    private static bool IsDevicePath(string path) =>
        DeviceRangeOps.IsWindowsDevicePath(path) || path.StartsWith("/dev/", StringComparison.Ordinal);

    private static FileBlockDevice OpenUnix(string path, bool writable, bool unbuffered)
    {
        string? fallbackReason = null;
        if (unbuffered && OperatingSystem.IsLinux())
        {
            int flags = (writable ? LinuxNative.O_RDWR : LinuxNative.O_RDONLY) | LinuxNative.O_CLOEXEC | LinuxNative.ODirect;
            int fd = LinuxNative.open(path, flags);
            if (fd < 0 && writable && Marshal.GetLastPInvokeError() is LinuxNative.EROFS or LinuxNative.EACCES or LinuxNative.EPERM)
                throw ReadOnlyRefusal(path, Marshal.GetLastPInvokeErrorMessage());
            if (fd >= 0)
            {
                var handle = new SafeFileHandle(fd, ownsHandle: true);
                // A read-only block device may still open for writing; its writes would then fail one by one.
                if (writable && LinuxNative.IsReadOnlyBlockDevice(fd))
                {
                    handle.Dispose();
                    throw ReadOnlyRefusal(path, "the block device is read-only");
                }
                long length = LinuxNative.GetSize(fd, path);
                int sector = LinuxNative.GetLogicalSectorSize(fd);
                // O_DIRECT succeeded on open; some file systems still reject the first aligned read.
                if (ProbeDirectRead(handle, sector, length))
                    return new FileBlockDevice(handle, length, sector, direct: true, writable, "unbuffered (O_DIRECT)");
                handle.Dispose();
                fallbackReason = "the host file system rejected O_DIRECT reads";
            }
            else
            {
                fallbackReason = $"the host file system refused O_DIRECT ({Marshal.GetLastPInvokeErrorMessage()})";
            }
        }
        else if (!unbuffered)
        {
            fallbackReason = "unbuffered I/O disabled by option";
        }
        else
        {
            fallbackReason = "unbuffered I/O is not implemented on this platform";
        }

        var buffered = File.OpenHandle(path, FileMode.Open, writable ? FileAccess.ReadWrite : FileAccess.Read,
            FileShare.ReadWrite, FileOptions.RandomAccess);
        long len = OperatingSystem.IsLinux() ? LinuxNative.GetSize((int)buffered.DangerousGetHandle(), path) : RandomAccess.GetLength(buffered);
        return new FileBlockDevice(buffered, len, 512, direct: false, writable, $"buffered ({fallbackReason})");
    }

    private static XfsException ReadOnlyRefusal(string path, string why) =>
        new(XfsError.ReadOnly, $"'{path}' cannot be opened for writing ({why}): it is read-only (write-protected media, a read-only loop " +
            "device or mount) or this user may not write it. Nothing was written; open it read-only, or make it writable (or run as root) first.");

    private static bool ProbeDirectRead(SafeFileHandle handle, int sector, long length)
    {
        if (length < sector) return true;
        using var probe = new AlignedBuffer(Math.Max(sector, 4096));
        try
        {
            RandomAccess.Read(handle, probe.Span[..sector], 0);
            return true;
        }
        catch (IOException)
        {
            return false;
        }
    }

    internal static FileBlockDevice FromHandle(SafeFileHandle handle, long length, int sectorSize, bool direct, bool writable, string ioMode, string path,
        Func<SafeFileHandle, long>? diskLength = null) =>
        new(handle, length, sectorSize, direct, writable, ioMode, path) { _diskLength = diskLength };

    /// <summary>
    /// Claims bytes [<paramref name="start"/>, +<paramref name="length"/>) of a device opened for writing, before the
    /// first write: on Windows, for a physical disk, every Windows volume sharing those bytes is locked and dismounted
    /// and stays locked until this device is disposed (<see cref="VolumeLockPlan"/>); a volume in use refuses the claim
    /// with nothing written. Image files, and Linux (where the control server and the kernel's exclusive opens keep
    /// mounted devices out), need nothing. Once per device.
    /// </summary>
    public void ClaimForWriting(long start, long length)
    {
        if (!CanWrite) throw new XfsException(XfsError.ReadOnly, "the device was opened read-only");
        if (_volumeLocks.Count > 0 || _path is null || VolumeLockPlan.PhysicalDriveNumber(_path) is null) return;
        if (OperatingSystem.IsWindows()) _volumeLocks = WindowsDevice.LockVolumes(_handle, _path, start, length);
    }

    /// <summary>Unbuffered I/O needs offset, length and buffer address on sector boundaries.</summary>
    private unsafe bool IsAligned(long offset, int length, void* address) =>
        !_direct || ((offset | (long)(uint)length | (long)address) & (SectorSize - 1)) == 0;

    public unsafe void Read(long offset, Span<byte> destination)
    {
        CheckRange(offset, destination.Length);
        fixed (byte* p = destination)
        {
            if (IsAligned(offset, destination.Length, p))
            {
                ReadExactly(offset, destination);
                return;
            }
        }
        ReadBounced(offset, destination);
    }

    private void ReadExactly(long offset, Span<byte> destination)
    {
        int done = 0;
        while (done < destination.Length)
        {
            int n;
            try
            {
                n = RandomAccess.Read(_handle, destination[done..], offset + done);
            }
            catch (IOException e)
            {
                throw new XfsException(XfsError.IoError, $"device read failed at byte {offset + done}: {e.Message}", e);
            }
            if (n <= 0)
                throw new XfsException(XfsError.IoError, $"short read at byte {offset + done}: the device or image ends before the volume does (truncated image?)");
            done += n;
        }
    }

    private void ReadBounced(long offset, Span<byte> destination)
    {
        long mask = SectorSize - 1;
        var buffer = _bounce.Rent();
        try
        {
            while (destination.Length > 0)
            {
                long alignedStart = offset & ~mask;
                int lead = (int)(offset - alignedStart);
                int want = Math.Min(destination.Length, BounceSize - lead);
                long alignedEnd = Math.Min((offset + want + mask) & ~mask, (Length + mask) & ~mask);
                int span = (int)(alignedEnd - alignedStart);
                ReadUpTo(alignedStart, buffer.Span[..span], lead + want);
                buffer.Span.Slice(lead, want).CopyTo(destination);
                destination = destination[want..];
                offset += want;
            }
        }
        finally
        {
            _bounce.Return(buffer);
        }
    }

    /// <summary>Reads an aligned span that may run past the end of an image whose size is not a sector multiple.</summary>
    private void ReadUpTo(long offset, Span<byte> span, int required)
    {
        int done = 0;
        while (done < required)
        {
            int n;
            try
            {
                n = RandomAccess.Read(_handle, span[done..], offset + done);
            }
            catch (IOException e)
            {
                throw new XfsException(XfsError.IoError, $"device read failed at byte {offset + done}: {e.Message}", e);
            }
            if (n <= 0)
                throw new XfsException(XfsError.IoError, $"short read at byte {offset + done}: the device or image ends before the volume does (truncated image?)");
            done += n;
        }
    }

    public async ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
    {
        CheckRange(offset, destination.Length);
        // Pinned from the alignment check to the end of the read: an array the collector moved in between could land
        // off the sector alignment O_DIRECT requires, and the read would fail (EINVAL).
        using var pin = destination.Pin();
        if (!IsAligned(offset, destination.Length, pin))
        {
            Read(offset, destination.Span);
            return;
        }
        int done = 0;
        while (done < destination.Length)
        {
            int n;
            try
            {
                n = await RandomAccess.ReadAsync(_handle, destination[done..], offset + done, cancellationToken).ConfigureAwait(false);
            }
            catch (IOException e)
            {
                throw new XfsException(XfsError.IoError, $"device read failed at byte {offset + done}: {e.Message}", e);
            }
            if (n <= 0) throw new XfsException(XfsError.IoError, $"short read at byte {offset + done}");
            done += n;
        }
    }

    private unsafe bool IsAligned(long offset, int length, System.Buffers.MemoryHandle pin) => IsAligned(offset, length, pin.Pointer);

    public unsafe void Write(long offset, ReadOnlySpan<byte> source)
    {
        if (!CanWrite) throw new XfsException(XfsError.ReadOnly, "the device was opened read-only");
        CheckRange(offset, source.Length);
        fixed (byte* p = source)
        {
            if (IsAligned(offset, source.Length, p))
            {
                RandomAccess.Write(_handle, source, offset);
                return;
            }
        }
        long mask = SectorSize - 1;
        if (((offset | (long)source.Length) & mask) == 0)
        {
            // Whole sectors from memory that is not sector-aligned: copied through pooled aligned buffers, nothing read.
            WriteBounced(offset, source);
            return;
        }
        // Read-modify-write of the covering sectors through an aligned buffer.
        long start = offset & ~mask;
        long end = (offset + source.Length + mask) & ~mask;
        using var buffer = new AlignedBuffer((int)(end - start));
        Read(start, buffer.Span);
        source.CopyTo(buffer.Span[(int)(offset - start)..]);
        RandomAccess.Write(_handle, (ReadOnlySpan<byte>)buffer.Span, start);
    }

    /// <summary>
    /// Writes the pieces (see <see cref="IBlockDevice.WritePieces"/>). When every piece meets the device's alignment, they
    /// go to the operating system together: on Linux with O_DIRECT through asynchronous I/O (<see cref="LinuxAioWriter"/>),
    /// on a handle opened for asynchronous I/O (Windows: overlapped) through <see cref="OverlappedPieceWriter"/>.
    /// Otherwise, and for a single piece, one by one.
    /// </summary>
    public unsafe void WritePieces(ReadOnlySpan<byte> source, ReadOnlySpan<WritePiece> pieces)
    {
        if (!CanWrite) throw new XfsException(XfsError.ReadOnly, "the device was opened read-only");
        bool together = pieces.Length > 1;
        fixed (byte* p = source)
        {
            foreach (var piece in pieces)
            {
                if (piece.Start < 0 || piece.Length < 0 || piece.Start > source.Length - piece.Length)
                    throw new ArgumentOutOfRangeException(nameof(pieces), $"piece [{piece.Start}, +{piece.Length}) is outside the source ({source.Length} bytes)");
                CheckRange(piece.Offset, piece.Length);
                together &= IsAligned(piece.Offset, piece.Length, p + piece.Start);
            }
            if (together && _direct && OperatingSystem.IsLinux() && Aio() is { } aio)
            {
                aio.Write((int)_handle.DangerousGetHandle(), p, pieces, _writeOne ??= WriteOne);
                return;
            }
            if (together && _handle.IsAsync)
            {
                OverlappedPieceWriter.Write(_handle, p, source.Length, pieces);
                Interlocked.Add(ref _overlappedPieces, pieces.Length);
                return;
            }
            foreach (var piece in pieces) Write(piece.Offset, source.Slice(piece.Start, piece.Length));
        }
    }

    private LinuxAioWriter? _aio;
    private long _overlappedPieces;
    /// <summary>Pieces of <see cref="WritePieces"/> handed to the operating system together (asynchronous or overlapped I/O) so far.</summary>
    internal long PiecesWrittenTogether => (Volatile.Read(ref _aio)?.Submitted ?? 0) + Interlocked.Read(ref _overlappedPieces);
    private bool _aioRefused;
    private LinuxAioWriter.WriteOne? _writeOne;

    // The device's asynchronous writer, made at its first batch; null (for good) where the kernel offers none.
    private LinuxAioWriter? Aio()
    {
        if (Volatile.Read(ref _aio) is { } made) return made;
        if (Volatile.Read(ref _aioRefused)) return null;
        var aio = LinuxAioWriter.TryCreate();
        if (aio is null)
        {
            Volatile.Write(ref _aioRefused, true);
            return null;
        }
        var raced = Interlocked.CompareExchange(ref _aio, aio, null);
        if (raced is null) return aio;
        aio.Dispose();
        return raced;
    }

    private unsafe void WriteOne(long offset, byte* source, int length) => Write(offset, new ReadOnlySpan<byte>(source, length));

    private void WriteBounced(long offset, ReadOnlySpan<byte> source)
    {
        var buffer = _bounce.Rent();
        try
        {
            while (source.Length > 0)
            {
                int n = Math.Min(source.Length, BounceSize);
                source[..n].CopyTo(buffer.Span);
                RandomAccess.Write(_handle, (ReadOnlySpan<byte>)buffer.Span[..n], offset);
                source = source[n..];
                offset += n;
            }
        }
        finally
        {
            _bounce.Return(buffer);
        }
    }

    public void Flush() => RandomAccess.FlushToDisk(_handle);

    private void CheckRange(long offset, int length)
    {
        if (offset < 0 || length < 0 || offset + length > Length)
            throw new XfsException(XfsError.IoError,
                $"access to bytes {offset}..{offset + length} is outside the device ({Length} bytes): the image may be truncated");
    }

    public void Dispose()
    {
        Interlocked.Exchange(ref _aio, null)?.Dispose();
        _handle.Dispose();
        // The disk first, then its volumes' locks: Windows may mount them again only after XfsWin stopped writing.
        foreach (var l in _volumeLocks) l.Dispose();
        _volumeLocks = [];
        _bounce.Dispose();
    }
}

internal static partial class LinuxNative
{
    public const int O_RDONLY = 0, O_RDWR = 2, O_CLOEXEC = 0x80000;
    public const int EPERM = 1, EACCES = 13, EROFS = 30;
    public static int ODirect => RuntimeInformation.ProcessArchitecture is Architecture.Arm64 or Architecture.Arm ? 0x10000 : 0x4000;
    private const ulong BLKGETSIZE64 = 0x80081272, BLKSSZGET = 0x1268;

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int open(string path, int flags);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int ioctl(int fd, ulong request, out long value);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int ioctl(int fd, ulong request, out int value);

    public static long GetSize(int fd, string path)
    {
        if (path.StartsWith("/dev/", StringComparison.Ordinal) && ioctl(fd, BLKGETSIZE64, out long size) == 0)
            return size;
        return new FileInfo(path).Length;
    }

    /// <summary>A block device's size (BLKGETSIZE64); false for a regular file.</summary>
    public static bool TryBlockDeviceSize(int fd, out long size) => ioctl(fd, BLKGETSIZE64, out size) == 0;

    public static int GetLogicalSectorSize(int fd) => ioctl(fd, BLKSSZGET, out int sector) == 0 && sector >= 512 ? sector : 512;

    private const ulong BLKROGET = 0x125E;

    /// <summary>Whether a block device is read-only (BLKROGET: write-protected media, a read-only loop device, blockdev --setro); false for a regular file.</summary>
    public static bool IsReadOnlyBlockDevice(int fd) => ioctl(fd, BLKROGET, out int ro) == 0 && ro != 0;

    public static string ErrorText(int errno) => new Win32Exception(errno).Message;
}

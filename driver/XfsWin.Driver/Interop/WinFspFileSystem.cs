using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using XfsWin.Driver.Semantics;

namespace XfsWin.Driver.Interop;

/// <summary>
/// Hosts an <see cref="XfsWindowsFileSystem"/> in WinFsp: creates the native file system with our
/// interface table, mounts it, and turns each native callback into a call on the adapter. Exceptions
/// never cross into native code. FileContext is a GCHandle to the <see cref="OpenFile"/>; the
/// FSP_FILE_SYSTEM's UserContext is a GCHandle to this object.
/// </summary>
[SupportedOSPlatform("windows")]
public sealed unsafe class WinFspFileSystem : IDisposable
{
    private readonly XfsWindowsFileSystem _adapter;
    private readonly MountOptions _options;
    private readonly TaskCompletionSource<bool> _stopped = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private FspFileSystem* _native;
    private FspFileSystemInterface* _interface;
    private GCHandle _self;
    private bool _dispatcherRunning;

    public WinFspFileSystem(XfsWindowsFileSystem adapter, MountOptions options)
    {
        _adapter = adapter;
        _options = options;
    }

    /// <summary>Completes when WinFsp's dispatcher stops (unmount, or the volume was removed); true when it stopped normally.</summary>
    public Task<bool> Stopped => _stopped.Task;

    /// <summary>The mount point WinFsp used (a drive letter, a directory, or the one it chose for "*").</summary>
    public string? MountPoint { get; private set; }

    /// <summary>Creates the WinFsp volume, mounts it at <paramref name="mountPoint"/> ("X:", a directory, or "*" for any free letter) and starts serving.</summary>
    public void Mount(string mountPoint)
    {
        if (_native != null) throw new InvalidOperationException("already mounted");
        WinFspLibrary.EnsureResolver();

        var (sectorSize, sectorsPerUnit) = _adapter.Geometry;
        var volumeParams = VolumeParameters.Build(_options, sectorSize, sectorsPerUnit,
            _adapter.VolumeCreationTime, _adapter.VolumeSerialNumber);

        _interface = (FspFileSystemInterface*)NativeMemory.AllocZeroed((nuint)sizeof(FspFileSystemInterface));
        Callbacks.Fill(_interface);

        FspFileSystem* fs;
        int status;
        fixed (char* device = VolumeParameters.DevicePath(_options))
            status = NativeMethods.FspFileSystemCreate(device, &volumeParams, _interface, &fs);
        if (status < 0) throw Fail("FspFileSystemCreate", status, "Is the WinFsp driver installed and running?");
        _native = fs;
        _self = GCHandle.Alloc(this);
        _native->UserContext = (void*)GCHandle.ToIntPtr(_self);
        if (_options.DebugLog != 0) NativeMethods.FspFileSystemSetDebugLogF(_native, _options.DebugLog);

        string point = mountPoint == "*" ? null! : mountPoint;
        fixed (char* mp = point)
            status = NativeMethods.FspFileSystemSetMountPoint(_native, mp);
        if (status < 0)
        {
            Dispose();
            throw Fail("FspFileSystemSetMountPoint", status, $"Is {mountPoint} already in use? Pick a free drive letter or an empty directory that does not exist yet.");
        }
        MountPoint = _native->MountPoint is null ? mountPoint : new string(_native->MountPoint);
        _adapter.MountPoint = MountPoint;

        status = NativeMethods.FspFileSystemStartDispatcher(_native, 0);
        if (status < 0)
        {
            Dispose();
            throw Fail("FspFileSystemStartDispatcher", status, "");
        }
        _dispatcherRunning = true;
    }

    private static XfsException Fail(string call, int status, string hint) =>
        new(XfsError.IoError, $"WinFsp {call} failed with {NtStatus.Describe(status)}. {hint}".TrimEnd());

    /// <summary>Unmounts: stops the dispatcher (in-flight requests finish), removes the mount point, deletes the volume.</summary>
    public void Dispose()
    {
        if (_native != null)
        {
            if (_dispatcherRunning) NativeMethods.FspFileSystemStopDispatcher(_native);
            _dispatcherRunning = false;
            NativeMethods.FspFileSystemRemoveMountPoint(_native);
            NativeMethods.FspFileSystemDelete(_native);
            _native = null;
        }
        if (_self.IsAllocated) _self.Free();
        if (_interface != null)
        {
            NativeMemory.Free(_interface);
            _interface = null;
        }
        _stopped.TrySetResult(true);
    }

    // ------------------------------------------------------------------ callbacks

    private static class Callbacks
    {
        public static void Fill(FspFileSystemInterface* i)
        {
            i->GetVolumeInfo = &GetVolumeInfo;
            i->SetVolumeLabel = &SetVolumeLabel;
            i->GetSecurityByName = &GetSecurityByName;
            i->Create = &Create;
            i->Open = &Open;
            i->Overwrite = &Overwrite;
            i->Cleanup = &Cleanup;
            i->Close = &Close;
            i->Read = &Read;
            i->Write = &Write;
            i->Flush = &Flush;
            i->GetFileInfo = &GetFileInfo;
            i->SetBasicInfo = &SetBasicInfo;
            i->SetFileSize = &SetFileSize;
            i->CanDelete = &CanDelete;
            i->Rename = &Rename;
            i->GetSecurity = &GetSecurity;
            i->SetSecurity = &SetSecurity;
            i->ReadDirectory = &ReadDirectory;
            i->ResolveReparsePoints = &ResolveReparsePoints;
            i->GetReparsePoint = &GetReparsePoint;
            i->SetReparsePoint = &SetReparsePoint;
            i->DeleteReparsePoint = &DeleteReparsePoint;
            i->GetDirInfoByName = &GetDirInfoByName;
            i->SetDelete = &SetDelete;
            i->GetEa = &GetEa;
            i->SetEa = &SetEa;
            i->CreateEx = &CreateEx;
            i->OverwriteEx = &OverwriteEx;
            i->DispatcherStopped = &DispatcherStopped;
        }

        private static WinFspFileSystem Host(FspFileSystem* fs) =>
            (WinFspFileSystem)GCHandle.FromIntPtr((IntPtr)fs->UserContext).Target!;

        private static XfsWindowsFileSystem Adapter(FspFileSystem* fs) => Host(fs)._adapter;

        private static OpenFile File(void* context) => (OpenFile)GCHandle.FromIntPtr((IntPtr)context).Target!;

        private static ReadOnlySpan<char> Str(char* s) => s == null ? default : MemoryMarshal.CreateReadOnlySpanFromNullTerminated(s);

        private static int CopyDescriptor(byte[]? sd, void* buffer, nuint* size)
        {
            if (size == null) return NtStatus.Success;
            if (sd is null) { *size = 0; return NtStatus.Success; }
            nuint capacity = *size;
            *size = (nuint)sd.Length;
            if (buffer == null) return NtStatus.Success;
            if (capacity < (nuint)sd.Length) return NtStatus.BufferOverflow;
            sd.CopyTo(new Span<byte>(buffer, sd.Length));
            return NtStatus.Success;
        }

        private static void Fill(FspFsctlVolumeInfo* vi, in VolumeInformation info)
        {
            vi->TotalSize = info.TotalSize;
            vi->FreeSize = info.FreeSize;
            int n = Math.Min(info.Label.Length, 32);
            for (int k = 0; k < n; k++) vi->VolumeLabel[k] = info.Label[k];
            vi->VolumeLabelLength = (ushort)(2 * n);
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetVolumeInfo(FspFileSystem* fs, FspFsctlVolumeInfo* vi)
        {
            try
            {
                int status = Adapter(fs).GetVolumeInfo(out var info);
                if (status < 0) return status;
                Fill(vi, info);
                return NtStatus.Success;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        /// <summary>SetVolumeLabel: the label arrives NUL-terminated; VolumeInfo is answered with the new state.</summary>
        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetVolumeLabel(FspFileSystem* fs, char* label, FspFsctlVolumeInfo* vi)
        {
            try
            {
                int status = Adapter(fs).SetVolumeLabel(Str(label), out var info);
                if (status >= 0 && vi != null) Fill(vi, info);
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        /// <summary>A self-relative security descriptor WinFsp passes by pointer: its length comes from its own offsets.</summary>
        private static ReadOnlySpan<byte> Descriptor(void* sd)
        {
            if (sd == null) return default;
            byte* p = (byte*)sd;
            if (p[0] != 1 || (*(ushort*)(p + 2) & SecurityDescriptors.SeSelfRelative) == 0) return default;
            int end = SecurityDescriptors.HeaderSize;
            for (int field = 4; field <= 8; field += 4)
            {
                int offset = *(int*)(p + field);
                if (offset > 0) end = Math.Max(end, offset + 8 + 4 * p[offset + 1]);
            }
            for (int field = 12; field <= 16; field += 4)
            {
                int offset = *(int*)(p + field);
                if (offset > 0) end = Math.Max(end, offset + *(ushort*)(p + offset + 2));
            }
            return new ReadOnlySpan<byte>(p, end);
        }

        private static int Opened(OpenFile file, in FileInformation info, void** context, FileInformation* fi)
        {
            *context = (void*)GCHandle.ToIntPtr(GCHandle.Alloc(file));
            *fi = info;
            // On case-insensitive volumes FileInfo is the head of an FSP_FSCTL_OPEN_FILE_INFO whose
            // NormalizedName buffer receives the stored spelling of the path.
            if (file.NormalizedPath is { } normalized)
            {
                var open = (FspFsctlOpenFileInfo*)fi;
                if (open->NormalizedName != null && normalized.Length * 2 <= open->NormalizedNameSize)
                {
                    normalized.AsSpan().CopyTo(new Span<char>(open->NormalizedName, normalized.Length));
                    open->NormalizedNameSize = (ushort)(normalized.Length * 2);
                }
            }
            return NtStatus.Success;
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetSecurityByName(FspFileSystem* fs, char* fileName, uint* attributes, void* sd, nuint* sdSize)
        {
            try
            {
                int status = Adapter(fs).GetSecurityByName(Str(fileName), out uint value, out var descriptor, sdSize != null);
                if (attributes != null) *attributes = value;
                if (status != NtStatus.Success) return status;
                return CopyDescriptor(descriptor, sd, sdSize);
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Create(FspFileSystem* fs, char* fileName, uint createOptions, uint grantedAccess, uint fileAttributes,
            void* sd, ulong allocationSize, void** context, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).Create(Str(fileName), createOptions, grantedAccess, fileAttributes, Descriptor(sd), allocationSize,
                    default, out var file, out var info);
                return status < 0 || file is null ? status : Opened(file, info, context, fi);
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        /// <summary>CreateEx: Create with EAs (or, for a reparse point, its data) in the extra buffer.</summary>
        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int CreateEx(FspFileSystem* fs, char* fileName, uint createOptions, uint grantedAccess, uint fileAttributes,
            void* sd, ulong allocationSize, void* extra, uint extraLength, byte extraIsReparsePoint, void** context, FileInformation* fi)
        {
            try
            {
                var adapter = Adapter(fs);
                var extraData = extra == null ? default : new ReadOnlySpan<byte>(extra, checked((int)extraLength));
                int status = adapter.Create(Str(fileName), createOptions, grantedAccess, fileAttributes, Descriptor(sd), allocationSize,
                    extraIsReparsePoint != 0 ? default : extraData, out var file, out var info);
                if (status < 0 || file is null) return status;
                if (extraIsReparsePoint != 0 && !extraData.IsEmpty)
                {
                    status = adapter.SetReparsePoint(file, Str(fileName), extraData);
                    if (status < 0)
                    {
                        adapter.Cleanup(file, Str(fileName), XfsWindowsFileSystem.CleanupDelete);
                        adapter.Close(file);
                        return status;
                    }
                    adapter.GetFileInfo(file, out info);
                }
                return Opened(file, info, context, fi);
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Open(FspFileSystem* fs, char* fileName, uint createOptions, uint grantedAccess, void** context, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).Open(Str(fileName), createOptions, grantedAccess, out var file, out var info);
                if (status < 0 || file is null) return status;
                return Opened(file, info, context, fi);
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Overwrite(FspFileSystem* fs, void* context, uint fileAttributes, byte replace, ulong allocationSize, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).Overwrite(File(context), fileAttributes, replace != 0, allocationSize, default, out var info);
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int OverwriteEx(FspFileSystem* fs, void* context, uint fileAttributes, byte replace, ulong allocationSize,
            void* ea, uint eaLength, FileInformation* fi)
        {
            try
            {
                var eas = ea == null ? default : new ReadOnlySpan<byte>(ea, checked((int)eaLength));
                int status = Adapter(fs).Overwrite(File(context), fileAttributes, replace != 0, allocationSize, eas, out var info);
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static void Cleanup(FspFileSystem* fs, void* context, char* fileName, uint flags)
        {
            try { Adapter(fs).Cleanup(File(context), Str(fileName), flags); }
            catch (Exception) { /* Cleanup has no status to report; nothing was changed. */ }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static void Close(FspFileSystem* fs, void* context)
        {
            try
            {
                var handle = GCHandle.FromIntPtr((IntPtr)context);
                Adapter(fs).Close((OpenFile)handle.Target!);
                handle.Free();
            }
            catch (Exception) { /* Close cannot fail in WinFsp's contract. */ }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Read(FspFileSystem* fs, void* context, void* buffer, ulong offset, uint length, uint* transferred)
        {
            try
            {
                int status = Adapter(fs).Read(File(context), new Span<byte>(buffer, checked((int)length)), offset, out int n);
                *transferred = (uint)n;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Write(FspFileSystem* fs, void* context, void* buffer, ulong offset, uint length, byte toEnd, byte constrained,
            uint* transferred, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).Write(File(context), new ReadOnlySpan<byte>(buffer, checked((int)length)), offset, toEnd != 0,
                    constrained != 0, out int n, out var info);
                *transferred = (uint)n;
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Flush(FspFileSystem* fs, void* context, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).Flush(context == null ? null : File(context), out var info);
                if (status >= 0 && context != null && fi != null) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetFileInfo(FspFileSystem* fs, void* context, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).GetFileInfo(File(context), out var info);
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetBasicInfo(FspFileSystem* fs, void* context, uint attributes, ulong c, ulong a, ulong w, ulong ch, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).SetBasicInfo(File(context), attributes, c, a, w, ch, out var info);
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetFileSize(FspFileSystem* fs, void* context, ulong size, byte allocation, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).SetFileSize(File(context), size, allocation != 0, out var info);
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int CanDelete(FspFileSystem* fs, void* context, char* fileName)
        {
            try { return Adapter(fs).CanDelete(File(context), Str(fileName)); }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int Rename(FspFileSystem* fs, void* context, char* fileName, char* newFileName, byte replace)
        {
            try { return Adapter(fs).Rename(File(context), Str(fileName), Str(newFileName), replace != 0); }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetSecurity(FspFileSystem* fs, void* context, void* sd, nuint* sdSize)
        {
            try
            {
                int status = Adapter(fs).GetSecurity(File(context), out var descriptor);
                return status < 0 ? status : CopyDescriptor(descriptor, sd, sdSize);
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetSecurity(FspFileSystem* fs, void* context, uint information, void* sd)
        {
            try { return Adapter(fs).SetSecurity(File(context), information, Descriptor(sd)); }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        /// <summary>Hands entries to FspFileSystemAddDirInfo, which packs them into the kernel's buffer.</summary>
        private struct NativeDirSink(void* buffer, uint length) : IDirInfoSink
        {
            public uint Transferred;

            public bool Add(in FileInformation info, ReadOnlySpan<char> name, ulong nextOffset)
            {
                byte* record = stackalloc byte[DirInfoLayout.MaxEntrySize];
                DirInfoLayout.Write(new Span<byte>(record, DirInfoLayout.MaxEntrySize), info, name, nextOffset);
                fixed (uint* t = &Transferred)
                    return NativeMethods.FspFileSystemAddDirInfo((FspFsctlDirInfo*)record, buffer, length, t) != 0;
            }

            public void End()
            {
                fixed (uint* t = &Transferred)
                    NativeMethods.FspFileSystemAddDirInfo(null, buffer, length, t);
            }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int ReadDirectory(FspFileSystem* fs, void* context, char* pattern, char* marker, void* buffer, uint length, uint* transferred)
        {
            try
            {
                var host = Host(fs);
                var sink = new NativeDirSink(buffer, length);
                var resume = marker == null ? DirectoryMarker.None
                    : host._options.MarkersAsOffsets ? new DirectoryMarker(*(ulong*)marker)
                    : new DirectoryMarker(Str(marker));
                int status = host._adapter.ReadDirectory(File(context), resume, ref sink);
                *transferred = sink.Transferred;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetReparsePointByName(FspFileSystem* fs, void* context, char* fileName, byte isDirectory, void* buffer, nuint* size)
        {
            try
            {
                Span<byte> probe = stackalloc byte[ReparseData.SymlinkHeaderSize + 4 * 1024];
                bool wantData = buffer != null && size != null;
                var destination = wantData ? new Span<byte>(buffer, (int)Math.Min(*size, int.MaxValue)) : probe;
                int status = Adapter(fs).GetReparsePointByName(Str(fileName), destination, out int n);
                if (status == NtStatus.BufferTooSmall && !wantData) return NtStatus.Success; // it is a reparse point
                if (status >= 0 && size != null) *size = (nuint)n;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int ResolveReparsePoints(FspFileSystem* fs, char* fileName, uint reparsePointIndex, byte resolveLast,
            void* ioStatus, void* buffer, nuint* size)
        {
            try
            {
                return NativeMethods.FspFileSystemResolveReparsePoints(fs, &GetReparsePointByName, null, fileName,
                    reparsePointIndex, resolveLast, ioStatus, buffer, size);
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetReparsePoint(FspFileSystem* fs, void* context, char* fileName, void* buffer, nuint* size)
        {
            try
            {
                var destination = new Span<byte>(buffer, (int)Math.Min(*size, int.MaxValue));
                int status = Adapter(fs).GetReparsePoint(File(context), destination, out int n);
                if (status >= 0) *size = (nuint)n;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetReparsePoint(FspFileSystem* fs, void* context, char* fileName, void* buffer, nuint size)
        {
            try { return Adapter(fs).SetReparsePoint(File(context), Str(fileName), new ReadOnlySpan<byte>(buffer, checked((int)size))); }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int DeleteReparsePoint(FspFileSystem* fs, void* context, char* fileName, void* buffer, nuint size)
        {
            try { return Adapter(fs).DeleteReparsePoint(File(context), Str(fileName), new ReadOnlySpan<byte>(buffer, checked((int)size))); }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetDirInfoByName(FspFileSystem* fs, void* context, char* fileName, FspFsctlDirInfo* dirInfo)
        {
            try
            {
                Span<char> name = stackalloc char[WindowsNames.MaxWindowsNameChars];
                int status = Adapter(fs).GetDirInfoByName(File(context), Str(fileName), out var info, name, out int n);
                if (status < 0) return status;
                DirInfoLayout.Write(new Span<byte>(dirInfo, DirInfoLayout.NameOffset + 2 * n), info, name[..n],
                    XfsWindowsFileSystem.EndOfDirectoryOffset);
                return NtStatus.Success;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetDelete(FspFileSystem* fs, void* context, char* fileName, byte delete)
        {
            try { return Adapter(fs).SetDelete(File(context), Str(fileName), delete != 0); }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int GetEa(FspFileSystem* fs, void* context, void* ea, uint length, uint* transferred)
        {
            try
            {
                int status = Adapter(fs).GetEa(File(context), new Span<byte>(ea, checked((int)length)), out int n);
                *transferred = (uint)n;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static int SetEa(FspFileSystem* fs, void* context, void* ea, uint length, FileInformation* fi)
        {
            try
            {
                int status = Adapter(fs).SetEa(File(context), new ReadOnlySpan<byte>(ea, checked((int)length)), out var info);
                if (status >= 0) *fi = info;
                return status;
            }
            catch (Exception e) { return NtStatus.FromException(e); }
        }

        [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
        private static void DispatcherStopped(FspFileSystem* fs, byte normally)
        {
            try { Host(fs)._stopped.TrySetResult(normally != 0); }
            catch (Exception) { /* nothing to report to */ }
        }
    }
}

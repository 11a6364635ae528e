using XfsWin.Attributes;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Text;
using XfsWin.Fuse.Interop;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Fuse;

/// <summary>
/// Serves an <see cref="XfsVolume"/> to the Linux kernel through libfuse3's low-level API.
/// It only translates: FUSE requests become engine calls, engine results and errors become FUSE
/// replies. Node ids are XFS inode numbers, except that FUSE's root id (1) stands for the volume's
/// root inode. Mounts are read-only unless <see cref="FuseMountOptions.ReadOnly"/> is false, and
/// what the kernel may cache depends on that (<see cref="FileOpenBits"/>,
/// <see cref="DirectoryOpenBits"/>). Worker threads of the multithreaded session loop call the
/// engine concurrently (the engine is thread-safe); the host itself keeps no per-inode state: the
/// kernel's lookup counts are mirrored into the engine's holds (see FuseHost.Write.cs).
/// </summary>
public sealed unsafe partial class FuseHost : IDisposable
{
    private const int ReadBufferSize = 1 << 20; // FUSE's largest request (256 pages) fits in one pooled buffer.
    internal const int DirentPlusNameOffset = 152; // offsetof(struct fuse_direntplus, dirent.name); checked by a test.
    internal const int DirentNameOffset = 24;      // offsetof(struct fuse_dirent, name); checked by a test.
    private const int MaxLoggedErrors = 200;

    private static readonly FuseLowLevelOps s_ops = CreateOps();

    private readonly XfsVolume _volume;
    private readonly FuseMountOptions _options;
    private readonly ulong _rootInode;
    private readonly uint _blockSize;
    private readonly NativeBufferPool _buffers;
    private readonly TextWriter _log;
    private readonly bool _tracksHolds;
    private GCHandle _self;
    private nint _session;
    private string? _mountPoint;
    private int _unmountRequested;
    private int _initDone;
    /// <summary>FUSE_CAP_DONT_MASK was granted: create, mknod and mkdir requests carry the caller's umask for the server to apply.</summary>
    private bool _umaskToServer;
    private int _transportChosen;
    private const int ReadAheadSettled = 1, ReadAheadRaising = 2;
    private int _readAheadState;        // ReadAheadSettled once the window is raised (or need not be)
    private int _initRequestSeen;
    private ulong _initUnique;
    private int _loggedErrors;
    private int _disposed;
    private FuseUringTransport? _uring;
    private string _transportNote = "the session has not started";

    public FuseHost(XfsVolume volume, FuseMountOptions? options = null, TextWriter? log = null)
    {
        _volume = volume;
        _options = options ?? new FuseMountOptions();
        _rootInode = volume.RootInode;
        _blockSize = (uint)Environment.SystemPageSize;
        _buffers = new NativeBufferPool(ReadBufferSize, Math.Max(2, _options.MaxThreads + 2));
        _log = log ?? Console.Error;
        _tracksHolds = !_options.ReadOnly && !volume.IsReadOnly;
    }

    /// <summary>
    /// Runs the request paths once on the root directory before the mount appears, so the first
    /// real requests do not wait for the JIT to compile them (the server runs with optimized code
    /// from the first call, which makes that compilation slower: about 0.1 s for a first `find`).
    /// Best effort: problems with the root surface again, and are reported, when it is used.
    /// </summary>
    private void WarmUp()
    {
        var scratch = _buffers.Rent();
        try
        {
            var filler = new DirentFiller { Buffer = scratch, Capacity = (nuint)Math.Min(_buffers.BufferSize, 4096) };
            _volume.ReadDirectory(_rootInode, 0, ref filler);
            var attrs = _volume.GetAttributes(_rootInode);
            NativeStat st;
            FillStat(attrs, &st);
            FuseEntryParam e;
            if (_volume.TryLookup(_rootInode, ".."u8, out var parent))
                FillEntry(_volume.GetAttributes(parent), &e);
            _ = _volume.ListXattrs(_rootInode);
        }
        catch (Exception ex) when (ex is XfsException or IOException)
        {
        }
        finally
        {
            _buffers.Return(scratch);
        }
    }

    /// <summary>Where the volume is mounted, once <see cref="Mount"/> succeeded.</summary>
    public string? MountPoint => _mountPoint;

    /// <summary>
    /// Checks that FUSE can be used here: Linux on x86-64, /dev/fuse present, libfuse3 installed.
    /// Throws <see cref="FuseUnavailableException"/> saying what to install or load.
    /// </summary>
    public static void EnsureAvailable()
    {
        if (!OperatingSystem.IsLinux())
            throw new FuseUnavailableException("The FUSE host runs on Linux only. On Windows, mount with the WinFsp driver instead.");
        if (RuntimeInformation.ProcessArchitecture is not (Architecture.X64 or Architecture.Arm64))
            throw new FuseUnavailableException(
                $"The FUSE host supports Linux on x86-64 and arm64 only (this is {RuntimeInformation.ProcessArchitecture}): " +
                "its native structure layouts are declared for those two. Use 'xfswin extract' or 'xfswin cat' instead.");
        if (!File.Exists("/dev/fuse"))
            throw new FuseUnavailableException(
                "FUSE is not available: /dev/fuse does not exist. Load the kernel module with 'modprobe fuse' " +
                "(and install fuse3: apt-get install fuse3); in a container, start it with '--device /dev/fuse --cap-add SYS_ADMIN'.");
        fixed (byte* dev = "/dev/fuse\0"u8)
        {
            if (FuseNative.access(dev, FuseNative.R_OK | FuseNative.W_OK) != 0)
                throw new FuseUnavailableException(
                    "FUSE is not available to this user: /dev/fuse cannot be opened for reading and writing. " +
                    "Run as root, or have root make it usable by everyone ('chmod 0666 /dev/fuse', the usual setting).");
        }
        try
        {
            _ = FuseNative.fuse_version();
        }
        catch (DllNotFoundException e)
        {
            throw new FuseUnavailableException(
                "FUSE is not available: libfuse3 (libfuse3.so.3) is not installed. Install it with 'apt-get install fuse3' " +
                "(Debian, Ubuntu) or 'dnf install fuse3 fuse3-libs' (Fedora).", e);
        }
    }

    /// <summary>Mounts the volume on <paramref name="mountPoint"/> (an existing directory). Call <see cref="Run"/> next.</summary>
    public void Mount(string mountPoint)
    {
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        if (_session != 0)
            throw new InvalidOperationException("This host is already mounted.");
        EnsureAvailable();
        mountPoint = Path.GetFullPath(mountPoint);
        if (!Directory.Exists(mountPoint))
            throw new FuseMountException($"Mount point '{mountPoint}' does not exist or is not a directory: create it with 'mkdir -p {mountPoint}'.");

        WarmUp();
        _self = GCHandle.Alloc(this);
        var argList = new List<string> { "xfswin", "-o", BuildMountOptions() };
        if (_options.Debug)
            argList.Add("-d");
        var native = new NativeStrings(argList);
        try
        {
            var args = new FuseArgs { argc = argList.Count, argv = native.Pointers, allocated = 0 };
            var ops = s_ops;
            var session = FuseNative.fuse_session_new(&args, &ops, (nuint)sizeof(FuseLowLevelOps), GCHandle.ToIntPtr(_self));
            FuseNative.fuse_opt_free_args(&args);
            if (session == 0)
                throw new FuseMountException($"libfuse refused the mount options '{argList[2]}' (see its message above).");
            int rc;
            var mp = Encoding.UTF8.GetBytes(mountPoint + "\0");
            fixed (byte* pmp = mp)
                rc = FuseNative.fuse_session_mount(session, pmp);
            if (rc != 0)
            {
                FuseNative.fuse_session_destroy(session);
                throw new FuseMountException(
                    $"Could not mount on '{mountPoint}' (see libfuse's message above). Check that it is not already a mount point " +
                    "('fusermount3 -u' it), that you may mount there, and for allow_other as a non-root user that /etc/fuse.conf has user_allow_other.");
            }
            _session = session;
            _mountPoint = mountPoint;
        }
        catch
        {
            _self.Free();
            throw;
        }
        finally
        {
            native.Dispose();
        }
    }

    /// <summary>
    /// Serves requests on <see cref="FuseMountOptions.MaxThreads"/> threads of our own (see
    /// <see cref="FuseDeviceLoop"/>) until the volume is unmounted (fusermount3 -u, umount,
    /// <see cref="RequestUnmount"/>) or the connection is aborted. Returns 0 when the session ended
    /// cleanly, else the negated errno of the device read that failed.
    /// </summary>
    public int Run()
    {
        if (_session == 0)
            throw new InvalidOperationException("Mount first.");
        var raiseReadAhead = _options.ReadAheadKiB > 0 && FuseNative.geteuid() == 0;
        if (!raiseReadAhead)
            Volatile.Write(ref _readAheadState, ReadAheadSettled);
        _uring = FuseUringTransport.TryStart(this, _session, _options, _log, out _transportNote);
        var cloneFd = _options.CloneFd;
        if (_uring is null && FuseUringTransport.InstallDeviceHooks(_session) is var hooks and not 0)
        {
            // Without the writev hook a reply goes to the session's descriptor, never to a clone.
            cloneFd = false;
            _log.WriteLine($"xfswin: libfuse refused the device hooks ({hooks}); clone_fd is not used.");
            // Without the hooks the init reply cannot be seen: raise the readahead once it has likely been processed.
            if (raiseReadAhead)
                _ = Task.Run(SetReadAheadAfterInit);
        }
        Volatile.Write(ref _transportChosen, 1);
        int rc;
        try
        {
            rc = new FuseDeviceLoop(this, _session, _log).Run(Math.Max(1, _options.MaxThreads), cloneFd);
        }
        finally
        {
            _uring?.Stop();
        }
        // After an external unmount this only closes the device descriptor.
        FuseNative.fuse_session_unmount(_session);
        return rc;
    }

    /// <summary>
    /// What serves the kernel's requests: io_uring once the kernel agreed to it in FUSE_INIT and
    /// every CPU's queue is registered, /dev/fuse otherwise (see <see cref="TransportDescription"/>).
    /// </summary>
    public FuseTransport Transport => _uring is { IsActive: true } ? FuseTransport.IoUring : FuseTransport.DevFuse;

    /// <summary>The transport in words, with the reason when io_uring is not used.</summary>
    public string TransportDescription => _uring?.Description ?? "/dev/fuse: " + _transportNote;

    /// <summary>
    /// Waits (at most <paramref name="limit"/>) until <see cref="Run"/>, started on another thread,
    /// knows which transport serves the mount (for io_uring that is after FUSE_INIT, when every
    /// queue has registered) and the mount's readahead is raised. False when that is not so in time.
    /// </summary>
    public bool WaitForTransport(TimeSpan limit)
    {
        var sw = Stopwatch.StartNew();
        while (true)
        {
            if (Volatile.Read(ref _transportChosen) != 0 && (_uring is null || _uring.IsSettled) &&
                Volatile.Read(ref _readAheadState) == ReadAheadSettled)
                return true;
            if (sw.Elapsed >= limit)
                return false;
            Thread.Sleep(5);
        }
    }

    /// <summary>
    /// One line for the user about the transport, or null when there is nothing worth saying: that
    /// requests go through FUSE over io_uring, or that the kernel has it but it is switched off
    /// (with how to switch it on). Call once <see cref="WaitForTransport"/> returned true.
    /// </summary>
    public string? TransportNotice()
    {
        if (Transport == FuseTransport.IoUring)
            return $"xfswin: requests are served through FUSE over io_uring ({_uring!.QueueCount} queue(s), one per CPU).";
        if (_options.IoUring && _uring is null && _transportNote == FuseUringTransport.NoFusectlReason)
            return "xfswin: requests are served through /dev/fuse: " + FuseUringTransport.NoFusectlReason + ".";
        if (_options.IoUring && _uring is null && FuseUringTransport.KernelSwitchedOff)
            return "xfswin: requests are served through /dev/fuse: this kernel has FUSE over io_uring, but it is switched off. " +
                   $"Metadata-heavy work (ls -lR, find, stat of many files) is faster with it; as root, switch it on for the next mounts with: echo Y > {FuseUringTransport.EnableSwitch}";
        return null;
    }

    private long _listingRequests;

    /// <summary>READDIR and READDIRPLUS requests served so far (listings the kernel did not have cached).</summary>
    public long ListingRequests => Volatile.Read(ref _listingRequests);

    /// <summary>Requests served through io_uring so far.</summary>
    public long IoUringRequests => _uring?.RingRequests ?? 0;

    internal FuseUringTransport? Uring => _uring;

    /// <summary>
    /// The kernel lowers the mount's readahead to what FUSE_INIT negotiated (128 KiB by default) when
    /// it processes the init reply, so the larger window can only be set after that. The device
    /// hooks see the init request and the reply: once the reply's write has returned, the kernel has
    /// processed it, and the window is raised there, before the mount is reported ready (a program
    /// started right after the mount reads with the larger window). The mount's device number
    /// comes from /proc/self/mountinfo (a stat of the mount point could wait on init).
    /// </summary>
    internal void NoteInitRequest(ulong unique, uint kernelFlags)
    {
        _initUnique = unique;
        _kernelInitFlags = kernelFlags;
        Volatile.Write(ref _initRequestSeen, 1);
    }

    private uint _kernelInitFlags;

    /// <summary>
    /// Adds to libfuse's FUSE_INIT reply what xfswin does beyond libfuse 3.14's protocol: FUSE_HANDLE_KILLPRIV_V2 on a
    /// read-write mount when the kernel offers it. With it the kernel keeps, per inode, that a write found no setuid,
    /// setgid or security.capability to remove (SB_NOSEC), so it stops asking for security.capability before every
    /// write (a GETXATTR round trip each, otherwise); it still removes security.capability itself before a write that needs it
    /// with removexattr, as it does for its own XFS. In exchange the server clears setuid and setgid (see
    /// <see cref="WithoutSetuidSetgid"/>).
    /// </summary>
    internal void AdjustInitReply(FuseInitOut* init)
    {
        if (KillPrivilegesV2Offered)
        {
            init->flags |= FuseUringConstants.FUSE_HANDLE_KILLPRIV_V2;
            _killPrivilegesNegotiated = true;
        }
    }

    /// <summary>FUSE_HANDLE_KILLPRIV_V2 was put in the FUSE_INIT reply: setuid and setgid are the host's to clear.</summary>
    private bool _killPrivilegesNegotiated;

    /// <summary>
    /// FUSE_CAP_ATOMIC_O_TRUNC was negotiated: open(O_TRUNC) comes as an open request with O_TRUNC (see OnOpen), and a
    /// setattr of size 0 without a file is truncate(2). Otherwise the kernel truncates at open(O_TRUNC) through a
    /// setattr that names no file either.
    /// </summary>
    private bool _truncatesAtOpen;

    /// <summary>
    /// A read-write mount whose kernel offers FUSE_HANDLE_KILLPRIV_V2 (known once the device hook saw FUSE_INIT, before
    /// libfuse's init callback): the host takes it, and open(O_TRUNC) truncates in the open request.
    /// </summary>
    private bool KillPrivilegesV2Offered => !_options.ReadOnly && (_kernelInitFlags & FuseUringConstants.FUSE_HANDLE_KILLPRIV_V2) != 0;

    /// <summary>Whether a reply with this unique answers FUSE_INIT (the device read hook saw the request).</summary>
    internal bool IsInitReply(ulong unique) => Volatile.Read(ref _initRequestSeen) != 0 && unique == _initUnique;

    /// <summary>Called after each reply written to /dev/fuse; raises the readahead after the init reply.</summary>
    internal void AfterDeviceReply(ulong unique)
    {
        if (Volatile.Read(ref _readAheadState) != 0 || !IsInitReply(unique) ||
            Interlocked.CompareExchange(ref _readAheadState, ReadAheadRaising, 0) != 0)
            return;
        // Settled only once the window is written: the mount is reported ready after that, never between.
        RaiseReadAhead();
        Volatile.Write(ref _readAheadState, ReadAheadSettled);
    }

    private void RaiseReadAhead()
    {
        try
        {
            var device = MountDevice(_mountPoint!);
            if (device is not null)
                File.WriteAllText($"/sys/class/bdi/{device}/read_ahead_kb", _options.ReadAheadKiB.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _log.WriteLine($"xfswin: could not raise the readahead of {_mountPoint}: {e.Message}");
        }
    }

    /// <summary>The fallback when the device hooks are refused: after the init callback, and a pause for the reply.</summary>
    private void SetReadAheadAfterInit()
    {
        for (var i = 0; i < 100 && Volatile.Read(ref _initDone) == 0; i++)
            Thread.Sleep(20);
        Thread.Sleep(50); // the reply is written after the init callback returns
        RaiseReadAhead();
        Volatile.Write(ref _readAheadState, ReadAheadSettled);
    }

    /// <summary>"major:minor" of the FUSE mount at <paramref name="mountPoint"/>, from /proc/self/mountinfo.</summary>
    internal static string? MountDevice(string mountPoint)
    {
        string? found = null;
        foreach (var m in MountInfo.Parse(MountInfo.ReadCurrent()))
        {
            if (m.FileSystemType.StartsWith("fuse", StringComparison.Ordinal) && m.MountPoint == mountPoint)
                found = m.Device; // the last one wins: the topmost mount on that path
        }
        return found;
    }

    /// <summary>
    /// Unmounts, which ends <see cref="Run"/>: safe to call from a signal handler thread. When files
    /// are still open on the mount it is detached lazily and the loop ends once they are closed.
    /// </summary>
    public void RequestUnmount()
    {
        var mountPoint = _mountPoint;
        if (_session == 0 || mountPoint is null || Interlocked.Exchange(ref _unmountRequested, 1) != 0)
            return;
        if (TryUnmount(mountPoint, _log))
            return;
        // The session ends with the connection: end it, so that callers get errors instead of waiting.
        if (AbortConnection(out var how))
            _log.WriteLine($"xfswin: could not unmount '{mountPoint}'; the connection was ended instead ({how}).");
        else
            _log.WriteLine($"xfswin: could not unmount '{mountPoint}' nor end its connection ({how}); serving until it is unmounted.");
    }

    /// <summary>Unmounts a FUSE mount point: umount2 as root, fusermount3 otherwise; lazily when busy.</summary>
    public static bool TryUnmount(string mountPoint, TextWriter log)
    {
        if (FuseNative.geteuid() == 0)
        {
            var path = Encoding.UTF8.GetBytes(mountPoint + "\0");
            fixed (byte* p = path)
            {
                if (FuseNative.umount2(p, 0) == 0)
                    return true;
                if (Marshal.GetLastPInvokeError() == FuseNative.EBUSY)
                {
                    log.WriteLine($"xfswin: '{mountPoint}' is busy; detaching it now, the volume is released when the last open file is closed.");
                    return FuseNative.umount2(p, FuseNative.MNT_DETACH) == 0;
                }
                return false;
            }
        }
        return RunFusermount(mountPoint, lazy: false) || RunFusermount(mountPoint, lazy: true);
    }

    private static bool RunFusermount(string mountPoint, bool lazy)
    {
        try
        {
            var psi = new ProcessStartInfo("fusermount3") { UseShellExecute = false };
            psi.ArgumentList.Add(lazy ? "-uz" : "-u");
            psi.ArgumentList.Add(mountPoint);
            using var p = Process.Start(psi)!;
            p.WaitForExit();
            return p.ExitCode == 0;
        }
        catch (System.ComponentModel.Win32Exception)
        {
            return false;
        }
    }

    /// <summary>
    /// Aborts the mount's FUSE connection: every request waiting and to come fails (ENOTCONN), and
    /// <see cref="Run"/> returns. Through the fusectl file system (/sys/fs/fuse/connections/N/abort,
    /// writable by the mount's owner) when it is mounted, else as root with a forced unmount.
    /// For a transport that can no longer answer some requests, so their callers do not wait forever.
    /// </summary>
    internal bool AbortConnection(out string how)
    {
        var mountPoint = _mountPoint;
        if (mountPoint is null)
        {
            how = "not mounted";
            return false;
        }
        try
        {
            // The connection's directory is named after the mount's device number (major << 20 | minor).
            if (MountDevice(mountPoint)?.Split(':') is [var major, var minor] &&
                uint.TryParse(major, System.Globalization.CultureInfo.InvariantCulture, out var ma) &&
                uint.TryParse(minor, System.Globalization.CultureInfo.InvariantCulture, out var mi))
            {
                var abort = $"{FuseUringTransport.FusectlMountPoint}/{(ma << 20) | mi}/abort";
                if (File.Exists(abort))
                {
                    File.WriteAllText(abort, "1");
                    how = "aborted through " + abort;
                    return true;
                }
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _log.WriteLine($"xfswin: could not abort the connection through fusectl: {e.Message}");
        }
        if (FuseNative.geteuid() == 0)
        {
            // A forced unmount aborts a FUSE connection first, even when the mount is busy.
            var path = Encoding.UTF8.GetBytes(mountPoint + "\0");
            fixed (byte* p = path)
            {
                if (FuseNative.umount2(p, FuseNative.MNT_FORCE) == 0 || Marshal.GetLastPInvokeError() == FuseNative.EBUSY)
                {
                    how = "forced unmount";
                    return true;
                }
                how = $"forced unmount failed (errno {Marshal.GetLastPInvokeError()})";
                return false;
            }
        }
        how = "not root, and the fusectl file system is not mounted on /sys/fs/fuse/connections";
        return false;
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        if (_session != 0)
        {
            FuseNative.fuse_session_unmount(_session);
            FuseNative.fuse_session_destroy(_session);
            _session = 0;
        }
        if (_self.IsAllocated)
            _self.Free();
        _buffers.Dispose();
    }

    private string BuildMountOptions()
    {
        var opts = new List<string> { _options.ReadOnly ? "ro" : "rw", "fsname=" + EscapeOption(_options.FileSystemName), "subtype=xfswin" };
        if (_options.AllowOther)
            opts.Add("allow_other");
        if (_options.DefaultPermissions)
            opts.Add("default_permissions");
        opts.AddRange(_options.ExtraOptions);
        return string.Join(',', opts);
    }

    /// <summary>libfuse splits option lists on commas; a backslash escapes the next character.</summary>
    internal static string EscapeOption(string value) => value.Replace("\\", "\\\\", StringComparison.Ordinal).Replace(",", "\\,", StringComparison.Ordinal);

    // ---- translation helpers -------------------------------------------------------------------

    private ulong ToXfsInode(ulong nodeId) => nodeId == FuseConstants.FUSE_ROOT_ID ? _rootInode : nodeId;

    private ulong ToNodeId(ulong xfsInode) => xfsInode == _rootInode ? FuseConstants.FUSE_ROOT_ID : xfsInode;

    /// <summary>S_IF* bits for a directory entry's type (d_type &lt;&lt; 12).</summary>
    internal static uint TypeBits(XfsFileType type) => type switch
    {
        XfsFileType.Fifo => 0x1000,
        XfsFileType.CharacterDevice => 0x2000,
        XfsFileType.Directory => 0x4000,
        XfsFileType.BlockDevice => 0x6000,
        XfsFileType.RegularFile => 0x8000,
        XfsFileType.Symlink => 0xA000,
        XfsFileType.Socket => 0xC000,
        XfsFileType.Whiteout => 0xE000,
        _ => 0,
    };

    /// <summary>glibc's makedev encoding (what st_rdev holds).</summary>
    internal static ulong MakeDev(uint major, uint minor) =>
        ((ulong)(major & 0xFFFFF000) << 32) | ((ulong)(major & 0xFFF) << 8) |
        ((ulong)(minor & 0xFFFFFF00) << 12) | (minor & 0xFF);

    private void FillStat(in InodeAttributes a, NativeStat* st)
    {
        *st = default;
        st->st_ino = a.Inode;
        st->st_mode = a.Mode;
        st->st_nlink = a.LinkCount;
        st->st_uid = _options.UidOverride ?? a.Uid;
        st->st_gid = _options.GidOverride ?? a.Gid;
        st->st_rdev = a.FileType is XfsFileType.CharacterDevice or XfsFileType.BlockDevice ? MakeDev(a.DeviceMajor, a.DeviceMinor) : 0;
        st->st_size = a.Size;
        st->st_blksize = _blockSize;
        st->st_blocks = (a.AllocatedBytes + 511) / 512;
        st->st_atim_sec = a.AccessTime.Seconds;
        st->st_atim_nsec = a.AccessTime.Nanoseconds;
        st->st_mtim_sec = a.ModifyTime.Seconds;
        st->st_mtim_nsec = a.ModifyTime.Nanoseconds;
        st->st_ctim_sec = a.ChangeTime.Seconds;
        st->st_ctim_nsec = a.ChangeTime.Nanoseconds;
    }

    /// <summary>
    /// Answers FUSE_STATX, which libfuse 3.14 does not know (it would say ENOSYS, and the kernel
    /// would then never ask again): the reply carries the birth time (XFS v5's di_crtime; V4 inodes
    /// have none) beside the basic fields. The kernel asks only when a statx(2) caller wants more
    /// than the basic fields, so plain stat, ls and find never pay for it.
    /// Writes the whole reply (out header, then body when there is no error); returns its length.
    /// </summary>
    internal int AnswerStatx(FuseInHeader* request, FuseOutHeader* reply, FuseStatxOut* body)
    {
        reply->unique = request->unique;
        reply->error = 0;
        try
        {
            var a = _volume.GetAttributes(ToXfsInode(request->nodeid));
            *body = default;
            var timeout = Math.Max(0, _options.AttributeTimeout);
            body->attr_valid = (ulong)Math.Min(timeout, ulong.MaxValue / 2);
            body->attr_valid_nsec = (uint)Math.Min(999_999_999, (timeout - Math.Floor(timeout)) * 1e9);
            var sx = &body->stat;
            sx->mask = FuseStatxConstants.STATX_BASIC_STATS;
            sx->blksize = (uint)_blockSize;
            sx->nlink = a.LinkCount;
            sx->uid = _options.UidOverride ?? a.Uid;
            sx->gid = _options.GidOverride ?? a.Gid;
            sx->mode = (ushort)a.Mode;
            sx->ino = a.Inode;
            sx->size = (ulong)a.Size;
            sx->blocks = (ulong)((a.AllocatedBytes + 511) / 512);
            sx->atime = SxTime(a.AccessTime);
            sx->mtime = SxTime(a.ModifyTime);
            sx->ctime = SxTime(a.ChangeTime);
            if (a.CreationTime is { } birth)
            {
                sx->btime = SxTime(birth);
                sx->mask |= FuseStatxConstants.STATX_BTIME;
            }
            if (a.FileType is XfsFileType.CharacterDevice or XfsFileType.BlockDevice)
            {
                sx->rdev_major = a.DeviceMajor;
                sx->rdev_minor = a.DeviceMinor;
            }
            reply->len = (uint)(FuseOutHeader.Size + FuseStatxOut.Size);
        }
        catch (Exception e)
        {
            reply->error = -ErrnoFor(e, "statx", ToXfsInode(request->nodeid));
            reply->len = (uint)FuseOutHeader.Size;
        }
        return (int)reply->len;
    }

    private static FuseSxTime SxTime(XfsTimestamp t) => new() { tv_sec = t.Seconds, tv_nsec = t.Nanoseconds };

    private void FillEntry(in InodeAttributes a, FuseEntryParam* e)
    {
        *e = default;
        e->ino = ToNodeId(a.Inode);
        e->generation = a.Generation;
        FillStat(a, &e->attr);
        e->attr_timeout = _options.AttributeTimeout;
        e->entry_timeout = _options.EntryTimeout;
    }

    /// <summary>The errno for a failed request; engine failures worth a look are logged (a bounded number).</summary>
    private int ErrnoFor(Exception e, string operation, ulong inode)
    {
        int errno;
        bool worthLogging;
        if (e is FuseErrnoException h)
        {
            errno = h.Errno;
            worthLogging = false;
        }
        else if (e is XfsException x)
        {
            errno = x.Errno;
            worthLogging = x.Error is XfsError.Corrupt or XfsError.IoError or XfsError.NeedsRepair or XfsError.Unsupported;
        }
        else
        {
            errno = 5; // EIO: a bug in the engine or host must not take the mount down.
            worthLogging = true;
        }
        if (worthLogging)
        {
            var n = Interlocked.Increment(ref _loggedErrors);
            if (n <= MaxLoggedErrors)
                _log.WriteLine($"xfswin: {operation} on inode {inode} failed: {(e is XfsException ? e.Message : e.ToString())}");
            if (n == MaxLoggedErrors)
                _log.WriteLine("xfswin: too many errors; not logging any more of them.");
        }
        return errno;
    }

    private static FuseHost HostOf(nint req) => (FuseHost)GCHandle.FromIntPtr(FuseNative.fuse_req_userdata(req)).Target!;

    private static void ReplyError(nint req, Exception e, string operation, ulong nodeId)
    {
        int errno;
        try
        {
            var host = HostOf(req);
            errno = host.ErrnoFor(e, operation, host.ToXfsInode(nodeId));
        }
        catch (Exception)
        {
            errno = 5;
        }
        FuseNative.fuse_reply_err(req, errno);
    }

    // ---- callbacks (run on libfuse's worker threads; must never let an exception escape) ------

    private static FuseLowLevelOps CreateOps()
    {
        var ops = CreateReadOps();
        AddWriteOps(ref ops);
        // Served on read-only mounts too: getting attributes is a read; setting them answers EROFS there.
        ops.ioctl = (nint)(delegate* unmanaged<nint, ulong, uint, void*, FuseFileInfo*, uint, void*, nuint, nuint, void>)&OnIoctl;
        return ops;
    }

    private static FuseLowLevelOps CreateReadOps() => new()
    {
        init = (nint)(delegate* unmanaged<nint, FuseConnInfo*, void>)&OnInit,
        lookup = (nint)(delegate* unmanaged<nint, ulong, byte*, void>)&OnLookup,
        getattr = (nint)(delegate* unmanaged<nint, ulong, FuseFileInfo*, void>)&OnGetAttr,
        readlink = (nint)(delegate* unmanaged<nint, ulong, void>)&OnReadLink,
        open = (nint)(delegate* unmanaged<nint, ulong, FuseFileInfo*, void>)&OnOpen,
        read = (nint)(delegate* unmanaged<nint, ulong, nuint, long, FuseFileInfo*, void>)&OnRead,
        opendir = (nint)(delegate* unmanaged<nint, ulong, FuseFileInfo*, void>)&OnOpenDir,
        readdir = (nint)(delegate* unmanaged<nint, ulong, nuint, long, FuseFileInfo*, void>)&OnReadDir,
        readdirplus = (nint)(delegate* unmanaged<nint, ulong, nuint, long, FuseFileInfo*, void>)&OnReadDirPlus,
        statfs = (nint)(delegate* unmanaged<nint, ulong, void>)&OnStatFs,
        getxattr = (nint)(delegate* unmanaged<nint, ulong, byte*, nuint, void>)&OnGetXattr,
        listxattr = (nint)(delegate* unmanaged<nint, ulong, nuint, void>)&OnListXattr,
        lseek = (nint)(delegate* unmanaged<nint, ulong, long, int, FuseFileInfo*, void>)&OnLseek,
    };

    private const int SeekData = 3, SeekHole = 4, ENXIO = 6, EINVAL = 22;

    /// <summary>
    /// SEEK_DATA and SEEK_HOLE from the extent map (cp --sparse, tar --sparse, backup tools skip the
    /// holes). The kernel handles the other whence values itself.
    /// </summary>
    [UnmanagedCallersOnly]
    private static void OnLseek(nint req, ulong ino, long offset, int whence, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            if (whence is not (SeekData or SeekHole))
            {
                FuseNative.fuse_reply_err(req, EINVAL);
                return;
            }
            if (host._volume.TrySeekDataOrHole(host.ToXfsInode(ino), offset, whence == SeekData, out var result))
                FuseNative.fuse_reply_lseek(req, result);
            else
                FuseNative.fuse_reply_err(req, ENXIO);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "lseek", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnInit(nint userdata, FuseConnInfo* conn)
    {
        try
        {
            var host = (FuseHost)GCHandle.FromIntPtr(userdata).Target!;
            var wanted = FuseConstants.FUSE_CAP_ASYNC_READ | FuseConstants.FUSE_CAP_READDIRPLUS |
                         FuseConstants.FUSE_CAP_READDIRPLUS_AUTO | FuseConstants.FUSE_CAP_PARALLEL_DIROPS |
                         FuseConstants.FUSE_CAP_CACHE_SYMLINKS |
                         // File attribute ioctls (FS_IOC_FSGETXATTR, ...) on directories too.
                         FuseConstants.FUSE_CAP_IOCTL_DIR |
                         // ACLs are served in the Linux format; with this the kernel also enforces
                         // them (and the mode bits) itself, as it does for its own XFS.
                         FuseConstants.FUSE_CAP_POSIX_ACL |
                         // New inodes' modes: the kernel passes mode and umask apart, so that a directory's default
                         // ACL can stand in for the umask (see InheritAcls).
                         FuseConstants.FUSE_CAP_DONT_MASK;
            conn->want |= wanted & conn->capable;
            host._umaskToServer = (conn->want & FuseConstants.FUSE_CAP_DONT_MASK) != 0;
            // Nothing changes behind the kernel's back on a read-only mount: no need to revalidate
            // cached pages. A read-write mount keeps libfuse's choice (revalidate when mtime moves).
            if (host._options.ReadOnly)
                conn->want &= ~FuseConstants.FUSE_CAP_AUTO_INVAL_DATA;
            if (!host._options.ReaddirPlus)
                conn->want &= ~(FuseConstants.FUSE_CAP_READDIRPLUS | FuseConstants.FUSE_CAP_READDIRPLUS_AUTO);
            // FUSE_HANDLE_KILLPRIV (v1) stays off: a read-write mount negotiates v2 itself (AdjustInitReply). With
            // v2, open(O_TRUNC) truncates in the open request (atomic_o_trunc), which tells the server whether the
            // caller may keep setuid and setgid (FUSE_OPEN_KILL_SUIDGID), and leaves a setattr of size 0 without a
            // file to truncate(2) alone (see OnOpen). Without v2 the kernel clears setuid and setgid through the
            // setattr of open(O_TRUNC), which atomic_o_trunc would skip: then the kernel truncates through setattr.
            conn->want &= ~(FuseConstants.FUSE_CAP_HANDLE_KILLPRIV | FuseConstants.FUSE_CAP_ATOMIC_O_TRUNC);
            if (host.KillPrivilegesV2Offered)
                conn->want |= FuseConstants.FUSE_CAP_ATOMIC_O_TRUNC & conn->capable;
            host._truncatesAtOpen = (conn->want & FuseConstants.FUSE_CAP_ATOMIC_O_TRUNC) != 0;
            conn->time_gran = 1;
            Volatile.Write(ref host._initDone, 1);
        }
        catch (Exception)
        {
            // Keep libfuse's defaults.
        }
    }

    [UnmanagedCallersOnly]
    private static void OnLookup(nint req, ulong parent, byte* name)
    {
        try
        {
            var host = HostOf(req);
            var nameSpan = MemoryMarshal.CreateReadOnlySpanFromNullTerminated(name);
            if (host._volume.TryLookup(host.ToXfsInode(parent), nameSpan, out var inode))
            {
                host.ReplyEntry(req, host._volume.GetAttributes(inode));
            }
            else
            {
                // A negative entry: the kernel remembers the name is absent for entry_timeout.
                FuseEntryParam e = default;
                e.entry_timeout = host._options.EntryTimeout;
                FuseNative.fuse_reply_entry(req, &e);
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, $"lookup of '{Encoding.UTF8.GetString(MemoryMarshal.CreateReadOnlySpanFromNullTerminated(name))}' in directory", parent);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnGetAttr(nint req, ulong ino, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            var attrs = host._volume.GetAttributes(host.ToXfsInode(ino));
            NativeStat st;
            host.FillStat(attrs, &st);
            FuseNative.fuse_reply_attr(req, &st, host._options.AttributeTimeout);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "getattr", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnReadLink(nint req, ulong ino)
    {
        try
        {
            var host = HostOf(req);
            var target = host._volume.ReadLink(host.ToXfsInode(ino));
            var z = host._buffers.Rent(target.Length + 1);
            try
            {
                target.CopyTo(new Span<byte>(z, target.Length));
                z[target.Length] = 0;
                FuseNative.fuse_reply_readlink(req, z);
            }
            finally
            {
                host._buffers.Return(z, target.Length + 1);
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "readlink", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnOpen(nint req, ulong ino, FuseFileInfo* fi)
    {
        const int EROFS = 30;
        try
        {
            var host = HostOf(req);
            // Writing (O_TRUNC too, which the kernel passes only with atomic_o_trunc) needs a read-write mount of a
            // volume the engine opened read-write.
            if (OpensForChange(fi->flags) && (host._options.ReadOnly || host._volume.IsReadOnly))
            {
                FuseNative.fuse_reply_err(req, EROFS);
                return;
            }
            // The VFS refuses these opens for its own file systems (IS_IMMUTABLE, IS_APPEND); FUSE inodes do not carry the flags.
            var inode = host.ToXfsInode(ino);
            if (OpensForChange(fi->flags) && LockedAgainstOpen(host._volume.GetAttributes(inode).Flags, fi->flags))
            {
                FuseNative.fuse_reply_err(req, EPERM);
                return;
            }
            if ((fi->flags & O_TRUNC) != 0)
                host.TruncateAtOpen(CallerOf(req), inode);
            fi->bits |= FileOpenBits(host._options.ReadOnly);
            fi->fh = (ulong)(uint)fi->flags; // the open's flags, for ioctls that need its access mode
            FuseNative.fuse_reply_open(req, fi);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "open", ino);
        }
    }

    /// <summary>
    /// open's reply flags for a regular file: keep_cache (the kernel keeps the file's pages across
    /// opens) on a read-only mount only, where the data cannot change. On a read-write mount each
    /// open drops them, so no copy older than a change is served.
    /// </summary>
    internal static uint FileOpenBits(bool readOnlyMount) => readOnlyMount ? FuseFileInfo.KeepCacheBit : 0;

    /// <summary>
    /// opendir's reply flags: on a read-only mount, cache_readdir and keep_cache for directories
    /// whose listing the kernel should keep (<see cref="CachesListing"/>); on a read-write mount
    /// none, so every listing is asked for afresh.
    /// </summary>
    internal static uint DirectoryOpenBits(bool readOnlyMount, long directorySize, int directoryBlockSize) =>
        readOnlyMount && CachesListing(directorySize, directoryBlockSize) ? FuseFileInfo.CacheReaddirBit | FuseFileInfo.KeepCacheBit : 0;

    [UnmanagedCallersOnly]
    private static void OnRead(nint req, ulong ino, nuint size, long offset, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            var inode = host.ToXfsInode(ino);
            var want = (int)Math.Min(size, (nuint)int.MaxValue);
            // Served from an io_uring entry: read straight into the buffer the kernel takes the reply from.
            var ringBuffer = FuseUringTransport.ReplyBuffer(want);
            var buffer = ringBuffer != null ? ringBuffer : host._buffers.Rent(want);
            try
            {
                // Straight from the device into the ring entry, or into native memory libfuse writes to /dev/fuse.
                var total = 0;
                while (total < want)
                {
                    var n = host._volume.Read(inode, offset + total, new Span<byte>(buffer + total, want - total));
                    if (n <= 0)
                        break;
                    total += n;
                }
                FuseNative.fuse_reply_buf(req, buffer, (nuint)total);
            }
            finally
            {
                if (buffer != ringBuffer)
                    host._buffers.Return(buffer, want);
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "read", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnOpenDir(nint req, ulong ino, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            if (host._options.ReadOnly)
                fi->bits |= DirectoryOpenBits(readOnlyMount: true, host._volume.GetAttributes(host.ToXfsInode(ino)).Size, host._volume.Info.DirectoryBlockSize);
            FuseNative.fuse_reply_open(req, fi);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "opendir", ino);
        }
    }

    /// <summary>
    /// Whether the kernel keeps a directory's listing on a read-only mount (cache_readdir;
    /// directories cannot change there). Only for directories whose entries fit in the inode or one
    /// directory block: the kernel fills its listing cache one entry at a time, each with a
    /// page-cache lookup, which made a cold listing of 1M entries 0.54-0.65 s instead of
    /// 0.32-0.36 s uncached, and `find` over 100 directories of 1000 entries 0.20 s instead of
    /// 0.15-0.19 s. Repeated listings of a big directory were only a little faster from the cache
    /// (0.30 s against 0.37 s), while a small one saves a round trip to this server each time.
    /// </summary>
    internal static bool CachesListing(long directorySize, int directoryBlockSize) => directorySize <= directoryBlockSize;

    /// <summary>
    /// Writes entries straight into the reply buffer, in the kernel's struct fuse_dirent layout
    /// (ino, off, namelen, type, name, zero padding to 8 bytes), until the next one does not fit.
    /// </summary>
    private struct DirentFiller : IDirectoryVisitor
    {
        public byte* Buffer;
        public nuint Capacity;
        public nuint Used;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            var need = Align8(DirentNameOffset + name.Length);
            if ((nuint)need > Capacity - Used)
                return false;
            var p = Buffer + Used;
            *(ulong*)p = inode;
            *(long*)(p + 8) = nextCookie;
            *(uint*)(p + 16) = (uint)name.Length;
            *(uint*)(p + 20) = TypeBits(fileType) >> 12; // DT_* values are the S_IFMT bits shifted down
            name.CopyTo(new Span<byte>(p + DirentNameOffset, name.Length));
            new Span<byte>(p + DirentNameOffset + name.Length, need - DirentNameOffset - name.Length).Clear();
            Used += (nuint)need;
            return true;
        }
    }

    /// <summary>
    /// Collects entries for readdirplus into scratch memory (the engine is not re-entered from
    /// inside its own enumeration); attributes are fetched afterwards. Record layout:
    /// inode (8), next cookie (8), type (1), name length (1), name, NUL, padded to 8.
    /// </summary>
    private struct DirentPlusCollector : IDirectoryVisitor
    {
        public byte* Scratch;
        public int ScratchCapacity;
        public int ScratchUsed;
        public nuint ReplyCapacity;
        public nuint ReplyNeeded;
        public int Count;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (name.Length > 255)
                return false;
            var need = (nuint)Align8(DirentPlusNameOffset + name.Length);
            var record = Align8(18 + name.Length + 1);
            if (ReplyNeeded + need > ReplyCapacity || ScratchUsed + record > ScratchCapacity)
                return false;
            var p = Scratch + ScratchUsed;
            *(ulong*)p = inode;
            *(long*)(p + 8) = nextCookie;
            p[16] = (byte)fileType;
            p[17] = (byte)name.Length;
            name.CopyTo(new Span<byte>(p + 18, name.Length));
            p[18 + name.Length] = 0;
            ScratchUsed += record;
            ReplyNeeded += need;
            Count++;
            return true;
        }
    }

    internal static int Align8(int n) => (n + 7) & ~7;

    [UnmanagedCallersOnly]
    private static void OnReadDir(nint req, ulong ino, nuint size, long offset, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            Interlocked.Increment(ref host._listingRequests);
            var buffer = host._buffers.Rent();
            try
            {
                var filler = new DirentFiller { Buffer = buffer, Capacity = Math.Min(size, (nuint)host._buffers.BufferSize) };
                host._volume.ReadDirectory(host.ToXfsInode(ino), offset, ref filler);
                FuseNative.fuse_reply_buf(req, buffer, filler.Used);
            }
            finally
            {
                host._buffers.Return(buffer);
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "readdir", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnReadDirPlus(nint req, ulong ino, nuint size, long offset, FuseFileInfo* fi)
    {
        try
        {
            var host = HostOf(req);
            Interlocked.Increment(ref host._listingRequests);
            var buffer = host._buffers.Rent();
            try
            {
                // Reply in the first half of the buffer, scratch records in the second.
                var half = host._buffers.BufferSize / 2;
                var capacity = Math.Min(size, (nuint)half);
                var collector = new DirentPlusCollector { Scratch = buffer + half, ScratchCapacity = half, ReplyCapacity = capacity };
                host._volume.ReadDirectory(host.ToXfsInode(ino), offset, ref collector);

                nuint used = 0;
                var p = collector.Scratch;
                // The kernel counts a lookup for every entry with a node id: each gets a hold.
                List<ulong>? held = host.TracksHolds ? [] : null;
                for (var i = 0; i < collector.Count; i++)
                {
                    var inode = *(ulong*)p;
                    var next = *(long*)(p + 8);
                    var type = (XfsFileType)p[16];
                    var nameLength = p[17];
                    var name = p + 18;
                    FuseEntryParam e = default;
                    var dotOrDotDot = (nameLength == 1 && name[0] == '.') || (nameLength == 2 && name[0] == '.' && name[1] == '.');
                    if (!dotOrDotDot && host.TryGetAttributes(inode, out var attrs))
                    {
                        host.FillEntry(attrs, &e);
                    }
                    else
                    {
                        // Node id 0: the kernel lists the name but learns nothing about the inode
                        // ("." and "..", or an inode that failed to read: its lookup reports the error).
                        e.attr.st_ino = inode;
                        e.attr.st_mode = TypeBits(type);
                    }
                    var added = FuseNative.fuse_add_direntry_plus(req, buffer + used, capacity - used, name, &e, next);
                    if (added > capacity - used)
                        break; // libfuse wrote nothing; the kernel asks again from the last entry's offset
                    if (held is not null && e.ino != 0)
                    {
                        host._volume.Retain(inode);
                        held.Add(inode);
                    }
                    used += added;
                    p += Align8(18 + nameLength + 1);
                }
                if (FuseNative.fuse_reply_buf(req, buffer, used) != 0 && held is not null)
                {
                    foreach (var h in held)
                        host._volume.Release(h);
                }
            }
            finally
            {
                host._buffers.Return(buffer);
            }
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "readdirplus", ino);
        }
    }

    private bool TryGetAttributes(ulong inode, out InodeAttributes attributes)
    {
        try
        {
            attributes = _volume.GetAttributes(inode);
            return true;
        }
        catch (Exception e)
        {
            ErrnoFor(e, "readdirplus (entry attributes)", inode);
            attributes = default;
            return false;
        }
    }

    [UnmanagedCallersOnly]
    private static void OnStatFs(nint req, ulong ino)
    {
        try
        {
            var host = HostOf(req);
            var s = host._volume.GetStats();
            var v = new NativeStatvfs
            {
                f_bsize = (ulong)s.BlockSize,
                f_frsize = (ulong)s.BlockSize,
                f_blocks = s.TotalBlocks,
                f_bfree = s.FreeBlocks,
                f_bavail = s.FreeBlocks,
                f_files = s.TotalInodes,
                f_ffree = s.FreeInodes,
                f_favail = s.FreeInodes,
                f_namemax = (ulong)s.MaxNameLength,
            };
            FuseNative.fuse_reply_statfs(req, &v);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "statfs", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnGetXattr(nint req, ulong ino, byte* name, nuint size)
    {
        const int ERANGE = 34;
        const int ENODATA = 61;
        const int EOPNOTSUPP = 95;
        try
        {
            var host = HostOf(req);
            var linuxName = Encoding.UTF8.GetString(MemoryMarshal.CreateReadOnlySpanFromNullTerminated(name));
            if (!XattrNames.TryParseLinuxName(linuxName, out var ns, out var xfsName))
            {
                // Like the kernel: a name outside the namespaces XFS knows has no handler.
                FuseNative.fuse_reply_err(req, EOPNOTSUPP);
                return;
            }
            if (!host._volume.TryGetXattr(host.ToXfsInode(ino), ns, xfsName, out var value))
            {
                FuseNative.fuse_reply_err(req, ENODATA);
                return;
            }
            if (linuxName.StartsWith("system.posix_acl_", StringComparison.Ordinal))
            {
                // Stored in XFS's own ACL format; the VFS wants the Linux one.
                value = PosixAcl.TryXfsToLinux(value) ?? throw new XfsException(XfsError.Corrupt,
                    $"the POSIX ACL stored in {linuxName} of inode {host.ToXfsInode(ino)} is malformed. Run xfs_repair on this volume from Linux.");
            }
            if (size == 0)
                FuseNative.fuse_reply_xattr(req, (nuint)value.Length);
            else if ((nuint)value.Length > size)
                FuseNative.fuse_reply_err(req, ERANGE);
            else
                fixed (byte* pv = value)
                    FuseNative.fuse_reply_buf(req, pv, (nuint)value.Length);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "getxattr", ino);
        }
    }

    [UnmanagedCallersOnly]
    private static void OnListXattr(nint req, ulong ino, nuint size)
    {
        const int ERANGE = 34;
        try
        {
            var host = HostOf(req);
            var entries = host._volume.ListXattrs(host.ToXfsInode(ino));
            // Like the kernel's XFS: trusted.* names are listed only to privileged callers.
            var callerIsRoot = FuseNative.fuse_req_ctx(req)->uid == 0;
            var list = new ArrayBufferWriter(256);
            foreach (var entry in entries)
            {
                if (entry.Namespace == XattrNamespace.Parent)
                    continue;
                var linuxName = entry.LinuxName;
                if (entry.Namespace == XattrNamespace.Trusted)
                {
                    // Like the kernel's XFS: the stored ACLs show up as system.posix_acl_* to
                    // everyone and, like every trusted.* name, under their own name to root.
                    if (linuxName.StartsWith("system.", StringComparison.Ordinal))
                        list.AppendNulTerminated(linuxName);
                    if (callerIsRoot)
                        list.AppendNulTerminated("trusted." + Encoding.UTF8.GetString(entry.Name));
                    continue;
                }
                list.AppendNulTerminated(linuxName);
            }
            if (size == 0)
                FuseNative.fuse_reply_xattr(req, (nuint)list.Length);
            else if ((nuint)list.Length > size)
                FuseNative.fuse_reply_err(req, ERANGE);
            else
                fixed (byte* p = list.Bytes)
                    FuseNative.fuse_reply_buf(req, p, (nuint)list.Length);
        }
        catch (Exception ex)
        {
            ReplyError(req, ex, "listxattr", ino);
        }
    }

    /// <summary>A growable byte list for the NUL-separated xattr name list.</summary>
    private sealed class ArrayBufferWriter(int capacity)
    {
        public byte[] Bytes { get; private set; } = new byte[capacity];
        public int Length { get; private set; }

        public void AppendNulTerminated(string s)
        {
            var need = Encoding.UTF8.GetByteCount(s) + 1;
            if (Length + need > Bytes.Length)
            {
                var bigger = new byte[Math.Max(Bytes.Length * 2, Length + need)];
                Bytes.AsSpan(0, Length).CopyTo(bigger);
                Bytes = bigger;
            }
            Length += Encoding.UTF8.GetBytes(s, Bytes.AsSpan(Length));
            Bytes[Length++] = 0;
        }
    }

    /// <summary>NUL-terminated UTF-8 copies of strings in native memory, with a NULL-terminated pointer array.</summary>
    private sealed class NativeStrings : IDisposable
    {
        private readonly nint[] _strings;

        public NativeStrings(IReadOnlyList<string> values)
        {
            _strings = new nint[values.Count];
            Pointers = (byte**)NativeMemory.AllocZeroed((nuint)(values.Count + 1), (nuint)sizeof(nint));
            for (var i = 0; i < values.Count; i++)
            {
                var bytes = Encoding.UTF8.GetBytes(values[i]);
                var p = (byte*)NativeMemory.Alloc((nuint)bytes.Length + 1);
                bytes.CopyTo(new Span<byte>(p, bytes.Length));
                p[bytes.Length] = 0;
                _strings[i] = (nint)p;
                Pointers[i] = p;
            }
        }

        public byte** Pointers { get; }

        public void Dispose()
        {
            foreach (var p in _strings)
                NativeMemory.Free((void*)p);
            NativeMemory.Free(Pointers);
        }
    }
}

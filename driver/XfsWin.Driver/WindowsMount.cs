using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using XfsWin.Driver.Interop;
using XfsWin.Driver.Semantics;
using XfsWin.Volume;

namespace XfsWin.Driver;

/// <summary>A mounted volume: dispose to unmount cleanly.</summary>
[SupportedOSPlatform("windows")]
public sealed class MountSession : IDisposable
{
    private readonly XfsVolume _volume;
    private readonly WinFspFileSystem _host;
    private readonly bool _ownsVolume;

    internal MountSession(string source, XfsVolume volume, WinFspFileSystem host, bool ownsVolume = true)
    {
        Source = source;
        _volume = volume;
        _host = host;
        _ownsVolume = ownsVolume;
    }

    public string Source { get; }
    public string MountPoint => _host.MountPoint ?? "";
    public VolumeInfo Info => _volume.Info;

    /// <summary>Completes when WinFsp stops serving the volume on its own (for example the drive was removed).</summary>
    public Task<bool> Stopped => _host.Stopped;

    public void Dispose()
    {
        _host.Dispose();
        if (_ownsVolume) _volume.Dispose();
    }
}

/// <summary>Entry point of <c>xfswin mount SOURCE X:</c> on Windows.</summary>
public static class WindowsMount
{
    /// <summary>
    /// Whether a mount point means WinFsp: a drive letter ("X:"), "*" (any free letter), or a UNC-less
    /// directory path on Windows. Platform-neutral, so the CLI can decide before dispatching.
    /// </summary>
    public static bool IsDriveLetter(string mountPoint) =>
        mountPoint == "*" || (mountPoint.Length == 2 && char.IsAsciiLetter(mountPoint[0]) && mountPoint[1] == ':');

    /// <summary>
    /// The volume open options a mount uses: read-only unless <c>-o rw</c>; a read-only mount replays a dirty log in
    /// memory unless --replay=place, a read-write one always replays it onto the device (as the kernel's mount does).
    /// </summary>
    public static VolumeOpenOptions OpenOptions(MountOptions options) => options.ReadWrite
        ? new VolumeOpenOptions { Writable = true, LogDevice = options.LogDevice }
        : new VolumeOpenOptions { Writable = false, Replay = options.Replay, LogDevice = options.LogDevice };

    /// <summary>Opens the source and mounts it; the caller disposes the session to unmount.</summary>
    [SupportedOSPlatform("windows")]
    public static MountSession Start(string source, string mountPoint, MountOptions options)
    {
        var volume = XfsVolume.Open(options.VolumeSource(source), OpenOptions(options));
        try
        {
            var user = System.Security.Principal.WindowsIdentity.GetCurrent().User?.Value
                       ?? throw new InvalidOperationException("the current Windows account has no SID");
            var ids = options.CreateIdentityMap(Sid.Parse(user));
            var adapter = new XfsWindowsFileSystem(volume, options, ids, mountPoint);
            var host = new WinFspFileSystem(adapter, options);
            host.Mount(mountPoint);
            return new MountSession(source, volume, host);
        }
        catch
        {
            volume.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Mounts a volume the caller opened and keeps (the service's control server): disposing the
    /// session unmounts it and leaves the volume open.
    /// </summary>
    [SupportedOSPlatform("windows")]
    public static MountSession Host(XfsVolume volume, string source, string mountPoint, MountOptions options)
    {
        var user = System.Security.Principal.WindowsIdentity.GetCurrent().User?.Value
                   ?? throw new InvalidOperationException("the current Windows account has no SID");
        var ids = options.CreateIdentityMap(Sid.Parse(user));
        var adapter = new XfsWindowsFileSystem(volume, options, ids, mountPoint);
        var host = new WinFspFileSystem(adapter, options);
        try
        {
            host.Mount(mountPoint);
        }
        catch
        {
            host.Dispose();
            throw;
        }
        return new MountSession(source, volume, host, ownsVolume: false);
    }

    /// <summary>
    /// Mounts <paramref name="source"/> (an image file, or \\.\PhysicalDriveN with <see cref="MountOptions.Partition"/>)
    /// at <paramref name="mountPoint"/>, serves until Ctrl+C / Ctrl+Break (the WinFsp launcher's stop) or until
    /// WinFsp stops, then unmounts. Returns the process exit code.
    /// </summary>
    [SupportedOSPlatform("windows")]
    public static int Run(string source, string mountPoint, MountOptions o)
    {
        MountSession session;
        try
        {
            session = Start(source, mountPoint, o);
        }
        catch (Exception e) when (e is XfsException or DllNotFoundException or IOException or UnauthorizedAccessException or ArgumentException)
        {
            Console.Error.WriteLine($"xfswin: cannot mount {source} at {mountPoint}: {e.Message}");
            return 1;
        }

        using (session)
        {
            var info = session.Info;
            Console.WriteLine($"Mounted {source} (XFS v{info.FormatVersion}, label '{info.Label}') at {session.MountPoint}, {(o.ReadWrite ? "read-write" : "read-only")}.");
            foreach (var reason in info.ReadOnlyReasons) Console.WriteLine($"  read-only: {reason}");
            foreach (var warning in info.Warnings) Console.WriteLine($"  warning: {warning}");
            Console.WriteLine("Press Ctrl+C to unmount.");

            using var stop = new ManualResetEventSlim();
            using var sigint = PosixSignalRegistration.Create(PosixSignal.SIGINT, c => { c.Cancel = true; stop.Set(); });
            using var sigquit = PosixSignalRegistration.Create(PosixSignal.SIGQUIT, c => { c.Cancel = true; stop.Set(); });
            using var sigterm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, c => { c.Cancel = true; stop.Set(); });
            session.Stopped.ContinueWith(_ => stop.Set(), TaskScheduler.Default);
            stop.Wait();
            Console.WriteLine($"Unmounting {session.MountPoint}.");
        }
        return 0;
    }
}

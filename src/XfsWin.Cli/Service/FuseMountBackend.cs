using XfsWin.Control.Server;
using XfsWin.Fuse;
using XfsWin.Volume;

namespace XfsWin.Cli.Service;

/// <summary>
/// Serves the control server's mounts through FUSE, in the server's own process: each mount runs
/// its session loop on a thread of its own. Mounts are visible to every user (allow_other) with
/// the kernel enforcing file modes (default_permissions), as a system mount would be.
/// </summary>
public sealed class FuseMountBackend(TextWriter log) : IMountBackend
{
    public string Name => "FUSE";

    public string MountPointKind => "directory";

    public bool ServesWrites => true;

    public IReadOnlyList<string> SuggestMountPoints(string? label) =>
        [Path.Combine("/mnt/xfswin", string.IsNullOrWhiteSpace(label) ? "volume" : Sanitize(label))];

    private static string Sanitize(string label) =>
        new([.. label.Select(c => char.IsAsciiLetterOrDigit(c) || c is '-' or '_' or '.' ? c : '_')]);

    public string? CheckMountPoint(string mountPoint)
    {
        if (!Path.IsPathFullyQualified(mountPoint)) return $"'{mountPoint}' is not an absolute path: give a directory such as /mnt/xfswin/data";
        if (!Directory.Exists(mountPoint)) return $"'{mountPoint}' does not exist or is not a directory";
        return null;
    }

    public IMountedVolume Mount(XfsVolume volume, string source, string mountPoint, IReadOnlyList<string> hostOptions)
    {
        if (hostOptions.Count > 0)
            throw new IOException($"FUSE mounts of the service take no options (got '{string.Join(' ', hostOptions)}')");
        // A read-write mount keeps no page or listing caches and short attribute timeouts (as xfswin mount -o rw).
        bool writable = !volume.IsReadOnly;
        var options = writable
            ? new FuseMountOptions { AllowOther = true, DefaultPermissions = true, ReadOnly = false, AttributeTimeout = 1, EntryTimeout = 1 }
            : new FuseMountOptions { AllowOther = true, DefaultPermissions = true };
        var host = new FuseHost(volume, options, log);
        try
        {
            FuseHost.EnsureAvailable();
            host.Mount(mountPoint);
        }
        catch (Exception e) when (e is FuseUnavailableException or FuseMountException)
        {
            host.Dispose();
            throw new IOException(e.Message, e);
        }
        catch
        {
            host.Dispose();
            throw;
        }
        return new FuseMount(host, mountPoint);
    }

    private sealed class FuseMount : IMountedVolume
    {
        private readonly FuseHost _host;
        private readonly Thread _loop;
        private readonly TaskCompletionSource _stopped = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public FuseMount(FuseHost host, string mountPoint)
        {
            _host = host;
            MountPoint = mountPoint;
            _loop = new Thread(() =>
            {
                try
                {
                    host.Run();
                }
                finally
                {
                    _stopped.TrySetResult();
                }
            }) { Name = "xfswin-fuse " + mountPoint, IsBackground = true };
            _loop.Start();
        }

        public string MountPoint { get; }

        public Task Stopped => _stopped.Task;

        public void Dispose()
        {
            _host.RequestUnmount();
            // The session loop ends once the kernel has let go of the mount; files still open on a
            // lazily detached mount keep it until they are closed.
            _loop.Join();
            _host.Dispose();
        }
    }
}

using System.Runtime.Versioning;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using XfsWin.Control;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;
using XfsWin.Driver;

namespace XfsWin.Service;

/// <summary>
/// The XfsWin service's work: mounts everything in mounts.conf at start, serves the control
/// channel (\\.\pipe\XfsWin.Control: administrators may do everything, interactive users what
/// <see cref="AccessPolicy"/> allows) for the tray app and the management UI, and unmounts everything cleanly when the service stops or Windows shuts down.
/// Everything it reports goes to the Application event log under the "XfsWin" source.
/// </summary>
[SupportedOSPlatform("windows")]
public sealed class ServiceWorker(ILogger<ServiceWorker> log, IHostApplicationLifetime lifetime) : BackgroundService
{
    private VolumeManager? _volumes;

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var table = ReadMountTable();
        var configured = table.Select(e => new ConfiguredMount(e.Options.VolumeSource(e.Source), e.MountPoint, e.Options.ReadWrite, e.Line)
        {
            Open = WindowsMount.OpenOptions(e.Options),
            HostOptions = MountTable.OptionWords(e),
        }).ToList();
        var options = new ServerOptions
        {
            Sources = [.. configured.Select(c => c.Source)], ServerName = "XfsWin service", ConfiguredMounts = configured,
        };
        _volumes = new VolumeManager(options, new WinFspMountBackend());
        using var events = _volumes.Subscribe(e =>
        {
            if (e.Ok) log.LogInformation("{Kind}: {Message}", e.Kind, e.Message);
            else log.LogWarning("{Kind}: {Message}", e.Kind, e.Message);
        });
        foreach (var entry in configured)
        {
            try
            {
                _volumes.MountConfigured(entry);
            }
            catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException or DllNotFoundException or ArgumentException or ControlException)
            {
                log.LogError("Cannot mount {Source} at {MountPoint} (mounts.conf line {Line}): {Message}", entry.Source, entry.MountPoint, entry.Line, e.Message);
            }
        }
        IControlListener listener;
        try
        {
            // Administrators and interactive users may connect; each request is checked against AccessPolicy.
            listener = ControlEndpoint.Listen(ControlEndpoint.DefaultPipeName, ListenerAccess.LocalUsers);
        }
        catch (IOException e)
        {
            log.LogError("The control channel cannot start: {Message}", e.Message);
            lifetime.StopApplication();
            return;
        }
        await using var server = new ControlServer(listener, _volumes, options, m => log.LogWarning("{Message}", m));
        server.Start();
        log.LogInformation("XfsWin service ready: {Count} volume(s) mounted, control channel on \\\\.\\pipe\\{Pipe}.", _volumes.Mounts().Count, listener.Address);
        try
        {
            await Task.Delay(Timeout.Infinite, stoppingToken);
        }
        catch (OperationCanceledException)
        {
        }
    }

    /// <summary>
    /// mounts.conf's entries, when only administrators can have written it (<see cref="MountTable.Untrusted"/>);
    /// otherwise none, with the reason in the event log. A malformed file mounts nothing either.
    /// </summary>
    private IReadOnlyList<MountEntry> ReadMountTable()
    {
        var path = MountTable.DefaultPath;
        if (!File.Exists(path)) return [];
        try
        {
            byte[] sd = new FileInfo(path).GetAccessControl(System.Security.AccessControl.AccessControlSections.Owner | System.Security.AccessControl.AccessControlSections.Access)
                .GetSecurityDescriptorBinaryForm();
            if (MountTable.Untrusted(sd) is { } why)
            {
                log.LogError("{Path} is not used: {Why}. Only Administrators may write it (it decides what the service, running as LocalSystem, opens, and what every user may mount).", path, why);
                return [];
            }
            return MountTable.Parse(File.ReadAllText(path));
        }
        catch (Exception e) when (e is FormatException or IOException or UnauthorizedAccessException)
        {
            log.LogError("{Path} is not used: {Message}", path, e.Message);
            return [];
        }
    }

    public override async Task StopAsync(CancellationToken cancellationToken)
    {
        await base.StopAsync(cancellationToken);
        if (_volumes is not null)
        {
            log.LogInformation("XfsWin service stopping: unmounting {Count} volume(s).", _volumes.Mounts().Count);
            _volumes.Dispose();
        }
    }
}

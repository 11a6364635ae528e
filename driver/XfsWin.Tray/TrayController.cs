using System.Net.Sockets;
using XfsWin.Control;
using XfsWin.Control.Protocol;

namespace XfsWin.Tray;

/// <summary>
/// The tray's logic, platform-neutral: keeps one control-channel connection to the service
/// (connect, hello, subscribe, list; reconnect with a growing pause when the service stops or
/// restarts), turns its events into balloons and fresh volume lists, and runs the menu's commands.
/// The Windows shell only draws <see cref="Snapshot"/> and forwards clicks to <see cref="ExecuteAsync"/>.
/// </summary>
public sealed class TrayController : IAsyncDisposable
{
    private readonly Func<CancellationToken, Task<ControlClient>> _connect;
    private readonly ITrayHost _host;
    private readonly ManageLauncher? _manage;
    private readonly IReadOnlyList<TimeSpan> _retryDelays;
    private readonly CancellationTokenSource _stop = new();
    private readonly object _gate = new();
    private TaskCompletionSource _retryNow = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private TraySnapshot _snapshot;
    private ControlClient? _client;
    private Task? _loop;

    /// <summary>Pauses between connection attempts; the last one repeats.</summary>
    public static readonly IReadOnlyList<TimeSpan> DefaultRetryDelays =
        [TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(2), TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(10)];

    public TrayController(Func<CancellationToken, Task<ControlClient>> connect, ITrayHost host, ManageLauncher? manage, IReadOnlyList<TimeSpan>? retryDelays = null)
    {
        _connect = connect;
        _host = host;
        _manage = manage;
        _retryDelays = retryDelays is { Count: > 0 } ? retryDelays : DefaultRetryDelays;
        _snapshot = TraySnapshot.Initial(host.StartAtLogon);
    }

    /// <summary>The state the menu and icon show; replaced whole (never mutated) on every change.</summary>
    public TraySnapshot Snapshot => Volatile.Read(ref _snapshot);

    /// <summary>Raised (on a pool thread) after <see cref="Snapshot"/> changed.</summary>
    public event Action<TraySnapshot>? Changed;

    public void Start() => _loop ??= Task.Run(RunAsync);

    private void Publish(Func<TraySnapshot, TraySnapshot> change)
    {
        TraySnapshot next;
        lock (_gate)
        {
            next = change(_snapshot);
            Volatile.Write(ref _snapshot, next);
        }
        Changed?.Invoke(next);
    }

    private async Task RunAsync()
    {
        int failures = 0;
        bool wasConnected = false;
        while (!_stop.IsCancellationRequested)
        {
            ControlClient? client = null;
            try
            {
                using (var attempt = CancellationTokenSource.CreateLinkedTokenSource(_stop.Token))
                {
                    attempt.CancelAfter(TimeSpan.FromSeconds(15));
                    client = await _connect(attempt.Token).ConfigureAwait(false);
                    var hello = (await client.CallAsync(new ControlRequest { Op = Operations.Hello }, null, attempt.Token).ConfigureAwait(false)).Hello!;
                    await client.SubscribeAsync(attempt.Token).ConfigureAwait(false);
                    var list = await ListAsync(client, attempt.Token).ConfigureAwait(false);
                    lock (_gate) _client = client;
                    Publish(s => s with
                    {
                        Connection = TrayConnection.Connected, Status = $"connected to {hello.Server}", Volumes = list, Operations = hello.Operations,
                        Administrator = hello.Administrator ?? true,
                    });
                }
                failures = 0;
                wasConnected = true;
                await foreach (var e in client.Events.ReadAllAsync(_stop.Token).ConfigureAwait(false))
                {
                    _host.Notify(Notifications.For(e, Snapshot.Volumes));
                    await RefreshAsync(client).ConfigureAwait(false);
                }
                // The event channel completes when the connection closes: the service stopped.
                lock (_gate) _client = null;
                if (_stop.IsCancellationRequested) break;
                Publish(s => s with { Connection = TrayConnection.ServiceNotRunning, Status = "the XfsWin service stopped", Volumes = [] });
                if (wasConnected) _host.Notify(Notifications.ServiceLost());
                wasConnected = false;
            }
            catch (OperationCanceledException) when (_stop.IsCancellationRequested)
            {
                break;
            }
            catch (UnauthorizedAccessException)
            {
                Publish(s => s with { Connection = TrayConnection.AccessDenied, Status = "the XfsWin service refused this user", Volumes = [] });
            }
            catch (Exception e) when (e is IOException or SocketException or TimeoutException or ControlException or OperationCanceledException)
            {
                Publish(s => s with { Connection = TrayConnection.ServiceNotRunning, Status = $"the XfsWin service does not answer ({e.Message})", Volumes = [] });
            }
            finally
            {
                lock (_gate)
                    if (ReferenceEquals(_client, client)) _client = null;
                if (client is not null) await client.DisposeAsync().ConfigureAwait(false);
            }
            var delay = _retryDelays[Math.Min(failures++, _retryDelays.Count - 1)];
            Task retry;
            lock (_gate) retry = _retryNow.Task;
            try
            {
                await Task.WhenAny(Task.Delay(delay, _stop.Token), retry).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                break;
            }
            lock (_gate)
                if (_retryNow.Task.IsCompleted) _retryNow = new(TaskCreationOptions.RunContinuationsAsynchronously);
        }
    }

    private static async Task<IReadOnlyList<TrayVolume>> ListAsync(ControlClient client, CancellationToken cancellationToken) =>
        TrayVolume.FromList((await client.CallAsync(new ControlRequest { Op = Operations.List }, null, cancellationToken).ConfigureAwait(false)).List!);

    /// <summary>Asks the service for the volume list again (after events, commands, and when the menu opens).</summary>
    public async Task RefreshAsync(ControlClient? client = null)
    {
        client ??= Current;
        if (client is null) return;
        try
        {
            var list = await ListAsync(client, _stop.Token).ConfigureAwait(false);
            Publish(s => s with { Volumes = list });
        }
        catch (Exception e) when (e is IOException or ControlException or OperationCanceledException)
        {
            // The connection loop notices a dead channel and reconnects; a refused list keeps the old one.
        }
    }

    private ControlClient? Current
    {
        get
        {
            lock (_gate) return _client;
        }
    }

    /// <summary>
    /// Runs a menu command. Failures become an error balloon (and false), never an exception: the
    /// shell calls this from a click and has nobody to throw to.
    /// </summary>
    public async Task<bool> ExecuteAsync(TrayCommand command, CancellationToken cancellationToken = default)
    {
        try
        {
            switch (command.Kind)
            {
                case TrayCommandKind.Mount:
                    await MountAsync(command, cancellationToken).ConfigureAwait(false);
                    break;
                case TrayCommandKind.Unmount:
                    await Require().CallAsync(new ControlRequest { Op = Operations.Unmount, Source = command.Source, MountPoint = command.Source is null ? command.MountPoint : null }, null, cancellationToken).ConfigureAwait(false);
                    await RefreshAsync().ConfigureAwait(false);
                    break;
                case TrayCommandKind.Recover:
                    await Require().CallAsync(new ControlRequest { Op = Operations.Recover, Source = command.Source }, null, cancellationToken).ConfigureAwait(false);
                    await RefreshAsync().ConfigureAwait(false);
                    break;
                case TrayCommandKind.OpenMountPoint:
                    _host.OpenFolder(MountPointChoice.ExplorerPath(command.MountPoint ?? throw new ArgumentException("no mount point to open")));
                    break;
                case TrayCommandKind.OpenManagement:
                    if (_manage is null) throw new IOException("xfswin manage is not available to this tray");
                    _host.ShowManagement(await _manage.UrlAsync(cancellationToken).ConfigureAwait(false));
                    break;
                case TrayCommandKind.OpenManagementAsAdministrator:
                    // Declining the UAC prompt is the user's answer, not a failure to report.
                    _host.OpenManagementAsAdministrator();
                    break;
                case TrayCommandKind.ToggleStartAtLogon:
                    bool on = !_host.StartAtLogon;
                    _host.StartAtLogon = on;
                    Publish(s => s with { StartAtLogon = _host.StartAtLogon });
                    break;
                case TrayCommandKind.Reconnect:
                    lock (_gate) _retryNow.TrySetResult();
                    break;
                case TrayCommandKind.RestartAsAdministrator:
                    if (_host.RestartAsAdministrator()) _host.Exit();
                    break;
                case TrayCommandKind.Exit:
                    _host.Exit();
                    break;
            }
            return true;
        }
        catch (Exception e) when (e is ControlException or IOException or ArgumentException or UnauthorizedAccessException or OperationCanceledException or System.Security.SecurityException)
        {
            _host.Notify(Notifications.CommandFailed(command, e.Message));
            return false;
        }
    }

    private ControlClient Require() => Current ?? throw new IOException("the XfsWin service is not connected");

    private async Task MountAsync(TrayCommand command, CancellationToken cancellationToken)
    {
        var client = Require();
        var volume = Snapshot.Volumes.FirstOrDefault(v => v.Source == command.Source)
            ?? throw new ArgumentException($"the service no longer lists {command.Source}");
        if (volume.ConfiguredMountPoint is { } configured)
        {
            // Where (and how) an administrator configured it: what any user may do.
            await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = volume.Source, MountPoint = configured, ReadOnly = !volume.ConfiguredReadWrite },
                null, cancellationToken).ConfigureAwait(false);
            await RefreshAsync().ConfigureAwait(false);
            return;
        }
        // Ask again: drive letters come and go, and the service knows which ones it can use.
        var hello = (await client.CallAsync(new ControlRequest { Op = Operations.Hello }, null, cancellationToken).ConfigureAwait(false)).Hello!;
        var where = _host.ChooseMountPoint(volume, hello.SuggestedMountPoints)
            ?? throw new IOException("no drive letter is free: unmount or disconnect a drive and try again");
        await client.CallAsync(new ControlRequest { Op = Operations.Mount, Source = volume.Source, MountPoint = where }, null, cancellationToken).ConfigureAwait(false);
        await RefreshAsync().ConfigureAwait(false);
    }

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync().ConfigureAwait(false);
        if (_loop is not null)
        {
            try
            {
                await _loop.ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
            }
        }
        _stop.Dispose();
    }
}

using XfsWin.Check;
using XfsWin.Control;
using XfsWin.Mkfs;
using System.Buffers;
using System.Threading.Channels;
using XfsWin.Control.Protocol;
using XfsWin.Control.Transport;

using XfsWin.Volume;

namespace XfsWin.Control.Server;

/// <summary>
/// Serves the control protocol on a listener: one reader loop per client, requests run
/// concurrently (at most <see cref="ServerOptions.MaxRequestsPerConnection"/> each), replies,
/// progress and events written whole by the connection's writer. Nothing a client sends can crash
/// the server or make it allocate beyond one request's limit: every failure becomes an error reply,
/// and a stream that is not this protocol (bad magic, oversized frame) is answered once and closed.
/// Each connection's peer is identified by the transport once its first frame has arrived, and every
/// request is checked against <see cref="AccessPolicy"/> before it runs.
/// </summary>
public sealed class ControlServer : IAsyncDisposable
{
    private readonly IControlListener _listener;
    private readonly VolumeManager _volumes;
    private readonly ServerOptions _options;
    private readonly Action<string> _log;
    private readonly CancellationTokenSource _stop = new();
    private readonly List<Task> _connections = [];
    private Task? _acceptLoop;
    private int _active;

    public ControlServer(IControlListener listener, VolumeManager volumes, ServerOptions options, Action<string>? log = null)
    {
        _listener = listener;
        _volumes = volumes;
        _options = options;
        _log = log ?? (_ => { });
    }

    public string Address => _listener.Address;

    public VolumeManager Volumes => _volumes;

    public void Start() => _acceptLoop = Task.Run(AcceptLoop);

    private async Task AcceptLoop()
    {
        while (!_stop.IsCancellationRequested)
        {
            AcceptedClient client;
            try
            {
                client = await _listener.AcceptAsync(_stop.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                return;
            }
            catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException)
            {
                if (_stop.IsCancellationRequested) return;
                _log($"control channel: accept failed: {e.Message}");
                continue;
            }
            var task = Task.Run(() => Serve(client));
            lock (_connections)
            {
                _connections.RemoveAll(t => t.IsCompleted);
                _connections.Add(task);
            }
        }
    }

    /// <summary>The decoded request frame, or why it is not one.</summary>
    private readonly record struct Incoming(ControlRequest? Request, string? ErrorCode, string? Error);

    /// <summary>The version a reply is sent in: the request's when this server speaks it, otherwise the newest.</summary>
    private static byte ReplyVersion(byte requestVersion) => Frame.IsSpoken(requestVersion) ? requestVersion : Frame.CurrentVersion;

    private static Incoming Decode(FrameHeader header, ReadOnlySequence<byte> payload)
    {
        if (!Frame.IsSpoken(header.Version))
            return new(null, ErrorCodes.UnsupportedVersion,
                $"protocol version {header.Version} is not spoken here; this server speaks versions {Frame.OldestVersion} to {Frame.CurrentVersion}");
        if (header.Kind != FrameKind.Request)
            return new(null, ErrorCodes.BadKind, $"frame kind {(byte)header.Kind} cannot be sent to a server; send requests (kind {(byte)FrameKind.Request})");
        var request = FrameConnection.Deserialize(payload, ControlJsonContext.Default.ControlRequest, out var error);
        return request is null ? new(null, ErrorCodes.BadRequest, error) : new(request, null, null);
    }

    private async Task Serve(AcceptedClient client)
    {
        var connection = new FrameConnection(client.Stream, Frame.MaxRequestPayload);
        ControlPeer? peer = null;
        var inFlight = new List<Task>();
        IDisposable? subscription = null;
        Task? eventPump = null;
        var events = Channel.CreateBounded<ControlEvent>(new BoundedChannelOptions(256) { FullMode = BoundedChannelFullMode.DropOldest, SingleReader = true });
        bool admitted = Interlocked.Increment(ref _active) <= _options.MaxConnections;
        try
        {
            if (!admitted)
            {
                await TrySend(connection, ControlResponse.Fail(0, ErrorCodes.Busy, $"the server already serves {_options.MaxConnections} clients; try again later")).ConfigureAwait(false);
                return;
            }
            while (!_stop.IsCancellationRequested)
            {
                var (status, header, incoming) = await connection.ReadAsync(Decode, _stop.Token).ConfigureAwait(false);
                if (status is FrameReadStatus.End or FrameReadStatus.Truncated) return;
                if (status == FrameReadStatus.BadMagic)
                {
                    await TrySend(connection, ControlResponse.Fail(0, ErrorCodes.BadFrame, "this is not an XfsWin control frame (bad magic); closing the connection")).ConfigureAwait(false);
                    return;
                }
                if (status == FrameReadStatus.TooLarge)
                {
                    await TrySend(connection, ControlResponse.Fail(0, ErrorCodes.TooLarge,
                        $"a frame of {header.PayloadLength} bytes is over the limit of {Frame.MaxRequestPayload}; closing the connection")).ConfigureAwait(false);
                    return;
                }
                // Who sent it: asked once, now that the client has written (a pipe names its client from what it read).
                peer ??= client.Identify();
                if (incoming.Request is not { } request)
                {
                    await TrySend(connection, ControlResponse.Fail(0, incoming.ErrorCode!, incoming.Error!), ReplyVersion(header.Version)).ConfigureAwait(false);
                    continue;
                }
                if (request.Op == Operations.Subscribe)
                {
                    if (subscription is null)
                    {
                        subscription = _volumes.Subscribe(e => events.Writer.TryWrite(e));
                        byte eventVersion = header.Version;
                        eventPump = Task.Run(() => PumpEvents(connection, events.Reader, eventVersion));
                    }
                    await TrySend(connection, new ControlResponse { Id = request.Id, Ok = true }, header.Version).ConfigureAwait(false);
                    continue;
                }
                inFlight.RemoveAll(t => t.IsCompleted);
                if (inFlight.Count >= _options.MaxRequestsPerConnection)
                {
                    await TrySend(connection, ControlResponse.Fail(request.Id, ErrorCodes.Busy,
                        $"{_options.MaxRequestsPerConnection} requests are already in flight on this connection; wait for their replies"), header.Version).ConfigureAwait(false);
                    continue;
                }
                byte version = header.Version;
                var from = peer;
                inFlight.Add(Task.Run(() => Handle(connection, request, version, from)));
            }
        }
        catch (OperationCanceledException)
        {
        }
        catch (IOException)
        {
            // The client went away mid-frame or mid-reply.
        }
        finally
        {
            Interlocked.Decrement(ref _active);
            subscription?.Dispose();
            events.Writer.TryComplete();
            try
            {
                await Task.WhenAll(inFlight).ConfigureAwait(false);
                if (eventPump is not null) await eventPump.ConfigureAwait(false);
            }
            catch (Exception e) when (e is IOException or OperationCanceledException)
            {
            }
            await connection.DisposeAsync().ConfigureAwait(false);
        }
    }

    private static async Task PumpEvents(FrameConnection connection, ChannelReader<ControlEvent> reader, byte version)
    {
        await foreach (var e in reader.ReadAllAsync().ConfigureAwait(false))
        {
            try
            {
                await connection.SendAsync(FrameKind.Event, e, ControlJsonContext.Default.ControlEvent, version: version).ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is IOException or ObjectDisposedException or InvalidOperationException)
            {
                return;
            }
        }
    }

    private static async Task TrySend(FrameConnection connection, ControlResponse response, byte version = Frame.CurrentVersion)
    {
        try
        {
            await connection.SendAsync(FrameKind.Response, response, ControlJsonContext.Default.ControlResponse, version: version).ConfigureAwait(false);
        }
        catch (Exception e) when (e is IOException or ObjectDisposedException or InvalidOperationException)
        {
            // The client is gone; nothing to tell it.
        }
    }

    private async Task Handle(FrameConnection connection, ControlRequest request, byte version, ControlPeer peer)
    {
        ControlResponse response;
        try
        {
            if (AccessPolicy.Refusal(peer, request, _volumes) is { } refusal)
            {
                _log($"control channel: refused {request.Op} of {peer.Name}: {refusal}");
                throw new ControlException(ErrorCodes.AccessDenied, refusal);
            }
            response = Execute(connection, request, version, peer);
        }
        catch (ControlException e)
        {
            response = ControlResponse.Fail(request.Id, e.Code, e.Message);
        }
        catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException)
        {
            response = ControlResponse.Fail(request.Id, ErrorCodes.VolumeError, e.Message);
        }
        catch (Exception e)
        {
            // Our own bug, not the volume's: say so, keep serving.
            _log($"control channel: {request.Op} failed with an internal error: {e}");
            response = ControlResponse.Fail(request.Id, ErrorCodes.Internal, $"internal error in {request.Op}: {e.GetType().Name}: {e.Message}");
        }
        await TrySend(connection, response, version).ConfigureAwait(false);
    }

    /// <summary>
    /// Runs one request asked in protocol <paramref name="version"/>: one case per operation; an
    /// operation newer than the version is unknown to that client.
    /// </summary>
    private ControlResponse Execute(FrameConnection connection, ControlRequest request, byte version, ControlPeer peer)
    {
        string Source() => string.IsNullOrEmpty(request.Source)
            ? throw new ControlException(ErrorCodes.BadRequest, $"{request.Op} needs a source (an image file or device, 'disk.img@N' for a partition)")
            : request.Source;
        if (Operations.Since(request.Op) is { } since && since > version)
            throw new ControlException(ErrorCodes.UnknownOperation,
                $"operation '{request.Op}' needs protocol version {since}; this request speaks version {version}, which has: {string.Join(", ", Operations.AcceptedIn(version))}");
        switch (request.Op)
        {
            case Operations.Hello:
                return new ControlResponse { Id = request.Id, Ok = true, Hello = _volumes.Hello(version, peer) };
            case Operations.List:
                return new ControlResponse { Id = request.Id, Ok = true, List = _volumes.List() };
            case Operations.Info:
                return new ControlResponse { Id = request.Id, Ok = true, Volume = _volumes.Info(Source()) };
            case Operations.Mount:
            {
                // A configured mount mounts as configured (its mount point unless one is given, its options, read-write
                // when so configured) unless the request says otherwise.
                var configured = _volumes.ConfiguredFor(Source());
                if (configured is null && string.IsNullOrEmpty(request.MountPoint))
                    throw new ControlException(ErrorCodes.BadRequest, "mount needs a mountPoint (a directory on Linux; a drive letter like X: or a folder on Windows)");
                return new ControlResponse
                {
                    Id = request.Id, Ok = true,
                    Mount = configured is not null
                        ? _volumes.MountConfigured(configured, request.MountPoint, request.ReadOnly)
                        : _volumes.Mount(Source(), request.MountPoint!, readOnly: request.ReadOnly ?? true),
                };
            }
            case Operations.Unmount:
                return new ControlResponse { Id = request.Id, Ok = true, Mount = _volumes.Unmount(request.Source, request.MountPoint) };
            case Operations.Recover:
                var progress = new ProgressSender(connection, request.Id, Operations.Recover, version);
                string stage = request.DryRun ? "replaying the log in memory" : "replaying the log onto the device";
                var result = _volumes.Recover(Source(), request.DryRun, new Progress(f => progress.Report(stage, f)));
                return new ControlResponse { Id = request.Id, Ok = true, Recover = result };
            case Operations.Format:
                var formatProgress = new ProgressSender(connection, request.Id, Operations.Format, version);
                return new ControlResponse
                {
                    Id = request.Id, Ok = true,
                    Format = _volumes.Format(Source(), request.Format ?? new FormatOptions(),
                        new Progress<MkfsProgress>(p => formatProgress.Report(p.Stage, p.Total > 0 ? (double)p.Done / p.Total : 0))),
                };
            case Operations.Check:
                var checkProgress = new ProgressSender(connection, request.Id, Operations.Check, version);
                return new ControlResponse
                {
                    Id = request.Id, Ok = true,
                    Check = _volumes.Check(Source(), new Progress<CheckProgress>(p =>
                        checkProgress.Report(p.Phase, p.Total > 0 ? (double)p.Done / p.Total : 0))),
                };
            case Operations.Grow:
                var growProgress = new ProgressSender(connection, request.Id, Operations.Grow, version);
                return new ControlResponse
                {
                    Id = request.Id, Ok = true,
                    Grow = _volumes.Grow(Source(), request.Size, request.DryRun, new Progress<XfsWin.Admin.GrowProgress>(p =>
                        growProgress.Report(p.Stage, p.Total > 0 ? (double)p.Done / p.Total : 0))),
                };
            case null or "":
                throw new ControlException(ErrorCodes.BadRequest, "the request names no op");
            default:
                throw new ControlException(ErrorCodes.UnknownOperation,
                    $"unknown operation '{Truncate(request.Op, 64)}'; this server accepts: {string.Join(", ", Operations.AcceptedIn(version))}");
        }
    }

    private static string Truncate(string s, int max) => s.Length <= max ? s : s[..max] + "…";

    /// <summary>An <see cref="IProgress{T}"/> that calls back synchronously on the reporting thread (System.Progress posts to a context).</summary>
    private sealed class Progress<T>(Action<T> report) : IProgress<T>
    {
        public void Report(T value) => report(value);
    }

    private sealed class Progress(Action<double> report) : IProgress<double>
    {
        public void Report(double value) => report(value);
    }

    /// <summary>
    /// Sends a progress frame whenever the stage or the whole percentage changes; safe to call from
    /// several threads at once (check works on AGs in parallel); never blocks the operation on a slow
    /// client.
    /// </summary>
    private sealed class ProgressSender(FrameConnection connection, long id, string op, byte version)
    {
        private readonly object _lock = new();
        private string _stage = "";
        private int _lastPercent = -1;

        public void Report(string stage, double fraction)
        {
            int percent = double.IsFinite(fraction) ? (int)Math.Clamp(fraction * 100, 0, 100) : 0;
            lock (_lock)
            {
                if (stage == _stage && percent == _lastPercent) return;
                _stage = stage;
                _lastPercent = percent;
            }
            _ = Send(new ProgressMessage { Id = id, Op = op, Stage = stage, Fraction = percent / 100.0 });
        }

        private async Task Send(ProgressMessage message)
        {
            try
            {
                await connection.SendAsync(FrameKind.Progress, message, ControlJsonContext.Default.ProgressMessage, version: version).ConfigureAwait(false);
            }
            catch (Exception e) when (e is IOException or ObjectDisposedException or InvalidOperationException)
            {
            }
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync().ConfigureAwait(false);
        await _listener.DisposeAsync().ConfigureAwait(false);
        if (_acceptLoop is not null) await _acceptLoop.ConfigureAwait(false);
        Task[] running;
        lock (_connections) running = [.. _connections];
        try
        {
            await Task.WhenAll(running).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
        }
        _stop.Dispose();
    }
}

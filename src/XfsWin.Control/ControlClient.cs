using System.Buffers;
using System.Collections.Concurrent;
using System.Threading.Channels;
using XfsWin.Control.Protocol;
using XfsWin.Control.Transport;

namespace XfsWin.Control;

/// <summary>
/// A client of the control channel (the management UI, the tray app, tests). Requests may overlap;
/// each gets its own id, its progress frames go to the caller's <see cref="IProgress{T}"/>, and
/// events (after <see cref="SubscribeAsync"/>) arrive on <see cref="Events"/>.
/// </summary>
public sealed class ControlClient : IAsyncDisposable
{
    private readonly FrameConnection _connection;
    private readonly ConcurrentDictionary<long, Pending> _pending = new();
    private readonly Channel<ControlEvent> _events = Channel.CreateBounded<ControlEvent>(new BoundedChannelOptions(1024) { FullMode = BoundedChannelFullMode.DropOldest });
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _readLoop;
    private long _nextId;

    private sealed record Pending(TaskCompletionSource<ControlResponse> Reply, IProgress<ProgressMessage>? Progress);

    private ControlClient(Stream stream)
    {
        _connection = new FrameConnection(stream, Frame.MaxReplyPayload);
        _readLoop = Task.Run(ReadLoop);
    }

    public static async Task<ControlClient> ConnectAsync(string address, CancellationToken cancellationToken = default) =>
        new(await ControlEndpoint.ConnectAsync(address, cancellationToken).ConfigureAwait(false));

    /// <summary>A client over a stream the caller connected.</summary>
    public static ControlClient Over(Stream stream) => new(stream);

    /// <summary>Server events, once subscribed.</summary>
    public ChannelReader<ControlEvent> Events => _events.Reader;

    private readonly record struct Incoming(FrameKind Kind, ControlResponse? Response, ProgressMessage? Progress, ControlEvent? Event);

    private static Incoming Decode(FrameHeader header, ReadOnlySequence<byte> payload) => header.Kind switch
    {
        FrameKind.Response => new(header.Kind, FrameConnection.Deserialize(payload, ControlJsonContext.Default.ControlResponse, out _), null, null),
        FrameKind.Progress => new(header.Kind, null, FrameConnection.Deserialize(payload, ControlJsonContext.Default.ProgressMessage, out _), null),
        FrameKind.Event => new(header.Kind, null, null, FrameConnection.Deserialize(payload, ControlJsonContext.Default.ControlEvent, out _)),
        _ => new(header.Kind, null, null, null),
    };

    private async Task ReadLoop()
    {
        string reason = "the server closed the control channel";
        try
        {
            while (true)
            {
                var (status, header, incoming) = await _connection.ReadAsync(Decode, _stop.Token).ConfigureAwait(false);
                if (status != FrameReadStatus.Frame)
                {
                    if (status is FrameReadStatus.BadMagic or FrameReadStatus.TooLarge)
                        reason = $"the server sent a frame this client cannot read ({status})";
                    return;
                }
                if (incoming.Response is { } response)
                {
                    if (_pending.TryRemove(response.Id, out var pending)) pending.Reply.TrySetResult(response);
                    else if (!response.Ok && response.Id == 0)
                    {
                        // A connection-level refusal (busy, bad frame): fail every waiter with it.
                        reason = response.Error?.Message ?? reason;
                        FailAll(new ControlException(response.Error?.Code ?? ErrorCodes.Internal, reason));
                    }
                }
                else if (incoming.Progress is { } progress)
                {
                    if (_pending.TryGetValue(progress.Id, out var pending)) pending.Progress?.Report(progress);
                }
                else if (incoming.Event is { } e)
                {
                    _events.Writer.TryWrite(e);
                }
            }
        }
        catch (OperationCanceledException)
        {
        }
        catch (IOException e)
        {
            reason = e.Message;
        }
        finally
        {
            _events.Writer.TryComplete();
            FailAll(new IOException(reason));
        }
    }

    private void FailAll(Exception e)
    {
        foreach (var id in _pending.Keys)
            if (_pending.TryRemove(id, out var p)) p.Reply.TrySetException(e);
    }

    /// <summary>Sends a request and waits for its reply; <see cref="ControlRequest.Id"/> is assigned here.</summary>
    public async Task<ControlResponse> SendAsync(ControlRequest request, IProgress<ProgressMessage>? progress = null, CancellationToken cancellationToken = default)
    {
        request.Id = Interlocked.Increment(ref _nextId);
        var pending = new Pending(new TaskCompletionSource<ControlResponse>(TaskCreationOptions.RunContinuationsAsynchronously), progress);
        _pending[request.Id] = pending;
        if (_readLoop.IsCompleted)
        {
            _pending.TryRemove(request.Id, out _);
            throw new IOException("the control channel is closed");
        }
        await _connection.SendAsync(FrameKind.Request, request, ControlJsonContext.Default.ControlRequest, cancellationToken: cancellationToken).ConfigureAwait(false);
        using (cancellationToken.Register(() => pending.Reply.TrySetCanceled(cancellationToken)))
            return await pending.Reply.Task.ConfigureAwait(false);
    }

    /// <summary>Like <see cref="SendAsync"/>, but an error reply throws <see cref="ControlException"/>.</summary>
    public async Task<ControlResponse> CallAsync(ControlRequest request, IProgress<ProgressMessage>? progress = null, CancellationToken cancellationToken = default)
    {
        var response = await SendAsync(request, progress, cancellationToken).ConfigureAwait(false);
        if (!response.Ok) throw new ControlException(response.Error?.Code ?? ErrorCodes.Internal, response.Error?.Message ?? "the server refused the request");
        return response;
    }

    public Task<ControlResponse> SubscribeAsync(CancellationToken cancellationToken = default) =>
        CallAsync(new ControlRequest { Op = Operations.Subscribe }, null, cancellationToken);

    /// <summary>Raw bytes onto the channel (tests send hostile frames with it).</summary>
    public ValueTask SendRawAsync(ReadOnlyMemory<byte> bytes, CancellationToken cancellationToken = default) =>
        _connection.SendRawAsync(bytes, cancellationToken);

    /// <summary>Completes when the channel is closed (by either side).</summary>
    public Task Closed => _readLoop;

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync().ConfigureAwait(false);
        try
        {
            await _readLoop.ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
        }
        await _connection.DisposeAsync().ConfigureAwait(false);
        _stop.Dispose();
    }
}

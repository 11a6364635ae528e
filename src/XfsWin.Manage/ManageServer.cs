using System.Net;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using System.Text.Json.Serialization;
using System.Threading.Channels;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using XfsWin.Control;
using XfsWin.Control.Protocol;

namespace XfsWin.Manage;

/// <summary>Progress of a long operation, as the page receives it (with the source it works on).</summary>
public sealed class WebProgress
{
    public required string Op { get; init; }
    public required string Source { get; init; }
    public required string Stage { get; init; }
    public double Fraction { get; init; }
}

[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase, DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(WebProgress))]
internal sealed partial class WebJsonContext : JsonSerializerContext;

/// <summary>
/// The management UI: a local web app on 127.0.0.1 (a free port) whose every URL starts with a
/// random per-run token (<c>http://127.0.0.1:PORT/TOKEN/</c>). Any request without the token, with
/// a wrong one, or with a Host header other than the loopback address is refused with 403 before
/// anything else runs, static files included. The page (plain HTML/CSS/JS, embedded in this
/// assembly) calls <c>api/request</c> with control requests, which go to the service over the control
/// channel unchanged, and listens on <c>api/events</c> (server-sent events) for the service's events
/// and the progress of long operations.
/// </summary>
public sealed class ManageServer : IAsyncDisposable
{
    private const int MaxBodyBytes = 64 * 1024;
    private readonly WebApplication _app;
    private readonly Func<CancellationToken, Task<ControlClient>> _connect;
    private readonly byte[] _tokenBytes;
    private readonly Dictionary<string, (byte[] Body, string ContentType)> _files;
    private readonly List<Channel<string>> _listeners = [];
    private readonly SemaphoreSlim _clientLock = new(1, 1);
    private readonly CancellationTokenSource _stop = new();
    private ControlClient? _client;
    private Task? _eventPump;
    private string _allowedHost = "";

    private ManageServer(WebApplication app, Func<CancellationToken, Task<ControlClient>> connect, string token)
    {
        _app = app;
        _connect = connect;
        Token = token;
        _tokenBytes = Encoding.ASCII.GetBytes(token);
        _files = LoadFiles();
    }

    public string Token { get; }

    /// <summary>The page's address, token included: the one URL that works.</summary>
    public string Url { get; private set; } = "";

    public int Port { get; private set; }

    /// <summary>
    /// Starts the web app on 127.0.0.1 (<paramref name="port"/> 0: a free port) and returns once it
    /// accepts requests. <paramref name="connect"/> opens a control channel to the service; it is
    /// called again when the channel drops.
    /// </summary>
    public static async Task<ManageServer> StartAsync(Func<CancellationToken, Task<ControlClient>> connect, int port = 0)
    {
        var token = Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(24));
        var builder = WebApplication.CreateSlimBuilder(new WebApplicationOptions { Args = [] });
        builder.Logging.ClearProviders();
        builder.WebHost.UseKestrel(o =>
        {
            o.Listen(IPAddress.Loopback, port);
            o.AddServerHeader = false;
            o.Limits.MaxRequestBodySize = MaxBodyBytes;
        });
        var app = builder.Build();
        var server = new ManageServer(app, connect, token);
        app.Run(server.HandleAsync);
        await app.StartAsync().ConfigureAwait(false);
        var address = app.Services.GetService(typeof(Microsoft.AspNetCore.Hosting.Server.IServer)) is Microsoft.AspNetCore.Hosting.Server.IServer s
            ? s.Features.Get<IServerAddressesFeature>()?.Addresses.FirstOrDefault() : null;
        var uri = new Uri(address ?? throw new InvalidOperationException("the web server reported no address"));
        server.Port = uri.Port;
        server._allowedHost = $"127.0.0.1:{uri.Port}";
        server.Url = $"http://127.0.0.1:{uri.Port}/{token}/";
        return server;
    }

    private static Dictionary<string, (byte[], string)> LoadFiles()
    {
        var files = new Dictionary<string, (byte[], string)>(StringComparer.Ordinal);
        var assembly = typeof(ManageServer).Assembly;
        foreach (var name in assembly.GetManifestResourceNames())
        {
            if (!name.StartsWith("wwwroot/", StringComparison.Ordinal)) continue;
            using var stream = assembly.GetManifestResourceStream(name)!;
            using var copy = new MemoryStream();
            stream.CopyTo(copy);
            string relative = name["wwwroot/".Length..];
            string type = Path.GetExtension(relative) switch
            {
                ".html" => "text/html; charset=utf-8",
                ".js" => "text/javascript; charset=utf-8",
                ".css" => "text/css; charset=utf-8",
                ".svg" => "image/svg+xml",
                _ => "application/octet-stream",
            };
            files[relative] = (copy.ToArray(), type);
        }
        return files;
    }

    /// <summary>True when the path's first segment is the token (compared in constant time); <paramref name="rest"/> is what follows.</summary>
    private bool TokenMatches(string path, out string rest)
    {
        rest = "";
        if (path.Length < 2 || path[0] != '/') return false;
        int slash = path.IndexOf('/', 1);
        var segment = slash < 0 ? path.AsSpan(1) : path.AsSpan(1, slash - 1);
        Span<byte> bytes = stackalloc byte[64];
        if (segment.Length != _tokenBytes.Length || segment.Length > bytes.Length) return false;
        for (int i = 0; i < segment.Length; i++) bytes[i] = segment[i] < 128 ? (byte)segment[i] : (byte)0;
        if (!CryptographicOperations.FixedTimeEquals(bytes[..segment.Length], _tokenBytes)) return false;
        rest = slash < 0 ? "" : path[(slash + 1)..];
        return true;
    }

    private async Task HandleAsync(HttpContext context)
    {
        var response = context.Response;
        response.Headers["Cache-Control"] = "no-store";
        response.Headers["X-Content-Type-Options"] = "nosniff";
        response.Headers["Referrer-Policy"] = "no-referrer";
        response.Headers["Content-Security-Policy"] = "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'";
        // The Host check stops DNS rebinding: a page of another site renamed to 127.0.0.1 still says its own host.
        if (!string.Equals(context.Request.Host.Value, _allowedHost, StringComparison.OrdinalIgnoreCase)
            || !TokenMatches(context.Request.Path.Value ?? "", out var rest))
        {
            response.StatusCode = StatusCodes.Status403Forbidden;
            response.ContentType = "text/plain; charset=utf-8";
            await response.WriteAsync("403 Forbidden: open the address with the token that 'xfswin manage' printed.\n").ConfigureAwait(false);
            return;
        }
        if (rest == "" && HttpMethods.IsGet(context.Request.Method)) rest = "index.html";
        switch (rest)
        {
            case "api/request" when HttpMethods.IsPost(context.Request.Method):
                await ForwardRequest(context).ConfigureAwait(false);
                return;
            case "api/events" when HttpMethods.IsGet(context.Request.Method):
                await StreamEvents(context).ConfigureAwait(false);
                return;
        }
        if (HttpMethods.IsGet(context.Request.Method) && _files.TryGetValue(rest, out var file))
        {
            response.ContentType = file.ContentType;
            response.ContentLength = file.Body.Length;
            await response.Body.WriteAsync(file.Body, context.RequestAborted).ConfigureAwait(false);
            return;
        }
        response.StatusCode = StatusCodes.Status404NotFound;
    }

    private async Task<ControlClient> Client(CancellationToken cancellationToken)
    {
        await _clientLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_client is not null && !_client.Closed.IsCompleted) return _client;
            if (_client is not null) await _client.DisposeAsync().ConfigureAwait(false);
            _client = await _connect(cancellationToken).ConfigureAwait(false);
            await _client.SubscribeAsync(cancellationToken).ConfigureAwait(false);
            var client = _client;
            _eventPump = Task.Run(() => PumpEvents(client), CancellationToken.None);
            return _client;
        }
        finally
        {
            _clientLock.Release();
        }
    }

    private async Task PumpEvents(ControlClient client)
    {
        try
        {
            await foreach (var e in client.Events.ReadAllAsync(_stop.Token).ConfigureAwait(false))
                Broadcast("control", JsonSerializer.Serialize(e, ControlJsonContext.Default.ControlEvent));
        }
        catch (OperationCanceledException)
        {
        }
    }

    private void Broadcast(string name, string json)
    {
        string message = $"event: {name}\ndata: {json}\n\n";
        lock (_listeners)
            foreach (var l in _listeners) l.Writer.TryWrite(message);
    }

    private async Task ForwardRequest(HttpContext context)
    {
        var response = context.Response;
        response.ContentType = "application/json; charset=utf-8";
        ControlRequest? request;
        try
        {
            request = await JsonSerializer.DeserializeAsync(context.Request.Body, ControlJsonContext.Default.ControlRequest, context.RequestAborted).ConfigureAwait(false);
        }
        catch (Exception e) when (e is JsonException or Microsoft.AspNetCore.Http.BadHttpRequestException)
        {
            request = null;
        }
        if (request is null || request.Op == Operations.Subscribe)
        {
            response.StatusCode = StatusCodes.Status400BadRequest;
            await JsonSerializer.SerializeAsync(response.Body, ControlResponse.Fail(0, ErrorCodes.BadRequest, "the body must be one control request (JSON)"),
                ControlJsonContext.Default.ControlResponse).ConfigureAwait(false);
            return;
        }
        ControlResponse reply;
        try
        {
            var client = await Client(context.RequestAborted).ConfigureAwait(false);
            string source = request.Source ?? "";
            var progress = new Progress<ProgressMessage>(p => Broadcast("progress", JsonSerializer.Serialize(
                new WebProgress { Op = p.Op, Source = source, Stage = p.Stage, Fraction = p.Fraction }, WebJsonContext.Default.WebProgress)));
            reply = await client.SendAsync(request, progress, context.RequestAborted).ConfigureAwait(false);
        }
        catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or ControlException)
        {
            reply = ControlResponse.Fail(request.Id, ErrorCodes.Unavailable, $"the XfsWin service cannot be reached: {e.Message}");
        }
        await JsonSerializer.SerializeAsync(response.Body, reply, ControlJsonContext.Default.ControlResponse, context.RequestAborted).ConfigureAwait(false);
    }

    private async Task StreamEvents(HttpContext context)
    {
        var response = context.Response;
        response.ContentType = "text/event-stream";
        var channel = Channel.CreateBounded<string>(new BoundedChannelOptions(256) { FullMode = BoundedChannelFullMode.DropOldest });
        lock (_listeners) _listeners.Add(channel);
        using var linked = CancellationTokenSource.CreateLinkedTokenSource(context.RequestAborted, _stop.Token);
        try
        {
            try
            {
                await Client(linked.Token).ConfigureAwait(false);
            }
            catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or ControlException)
            {
                // The page still gets the stream; requests will report the service as unreachable.
            }
            await response.WriteAsync(": connected\n\n", linked.Token).ConfigureAwait(false);
            await response.Body.FlushAsync(linked.Token).ConfigureAwait(false);
            await foreach (var message in channel.Reader.ReadAllAsync(linked.Token).ConfigureAwait(false))
            {
                await response.WriteAsync(message, linked.Token).ConfigureAwait(false);
                await response.Body.FlushAsync(linked.Token).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException)
        {
        }
        finally
        {
            lock (_listeners) _listeners.Remove(channel);
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync().ConfigureAwait(false);
        await _app.StopAsync().ConfigureAwait(false);
        await _app.DisposeAsync().ConfigureAwait(false);
        if (_client is not null) await _client.DisposeAsync().ConfigureAwait(false);
        if (_eventPump is not null) await _eventPump.ConfigureAwait(false);
        _clientLock.Dispose();
        _stop.Dispose();
    }
}

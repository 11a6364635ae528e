namespace XfsWin.Control.Transport;

/// <summary>Where a control server waits for clients: a Unix socket (Linux) or a named pipe (Windows).</summary>
public interface IControlListener : IAsyncDisposable
{
    /// <summary>The address clients connect to (socket path or pipe name).</summary>
    string Address { get; }

    /// <summary>
    /// Waits for the next client whose identity the transport accepts (root or the server's own user
    /// on a Unix socket; the pipe's ACL decides on Windows) and returns its duplex stream.
    /// </summary>
    ValueTask<Stream> AcceptAsync(CancellationToken cancellationToken);
}

/// <summary>The default address of the XfsWin service on this platform.</summary>
public static class ControlEndpoint
{
    /// <summary>Linux: the service's socket, under a root-only directory.</summary>
    public const string DefaultSocketPath = "/run/xfswin/control.sock";

    /// <summary>Windows: the pipe's name (\\.\pipe\XfsWin.Control).</summary>
    public const string DefaultPipeName = "XfsWin.Control";

    public static string Default => OperatingSystem.IsWindows() ? DefaultPipeName : DefaultSocketPath;

    /// <summary>Opens a listener for <paramref name="address"/> (a socket path on Unix, a pipe name on Windows).</summary>
    public static IControlListener Listen(string address) =>
        OperatingSystem.IsWindows() ? new NamedPipeListener(address) : UnixSocketListener.Bind(address);

    /// <summary>Connects to a server at <paramref name="address"/>.</summary>
    public static async ValueTask<Stream> ConnectAsync(string address, CancellationToken cancellationToken)
    {
        if (OperatingSystem.IsWindows())
        {
            var pipe = new System.IO.Pipes.NamedPipeClientStream(".", address, System.IO.Pipes.PipeDirection.InOut,
                System.IO.Pipes.PipeOptions.Asynchronous);
            try
            {
                await pipe.ConnectAsync(5000, cancellationToken).ConfigureAwait(false);
                return pipe;
            }
            catch
            {
                await pipe.DisposeAsync().ConfigureAwait(false);
                throw;
            }
        }
        return await UnixSocketListener.ConnectAsync(address, cancellationToken).ConfigureAwait(false);
    }
}

namespace XfsWin.Control.Transport;

/// <summary>Where a control server waits for clients: a Unix socket (Linux) or a named pipe (Windows).</summary>
public interface IControlListener : IAsyncDisposable
{
    /// <summary>The address clients connect to (socket path or pipe name).</summary>
    string Address { get; }

    /// <summary>
    /// Waits for the next client the transport admits (its <see cref="ListenerAccess"/>: the socket's mode and
    /// SO_PEERCRED on Linux, the pipe's ACL on Windows) and returns its duplex stream and how to identify it.
    /// </summary>
    ValueTask<AcceptedClient> AcceptAsync(CancellationToken cancellationToken);
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
    public static IControlListener Listen(string address, ListenerAccess access = ListenerAccess.Private) =>
        OperatingSystem.IsWindows() ? new NamedPipeListener(address, access) : UnixSocketListener.Bind(address, access);

    /// <summary>
    /// Connects to a server at <paramref name="address"/>. On Windows the pipe is opened for reading and writing data
    /// only (not FILE_CREATE_PIPE_INSTANCE, which the service's pipe grants its users no more than it must), and lets
    /// the server identify the client's token but not act as it (SecurityIdentification).
    /// </summary>
    public static async ValueTask<Stream> ConnectAsync(string address, CancellationToken cancellationToken)
    {
        if (OperatingSystem.IsWindows())
        {
            var pipe = new System.IO.Pipes.NamedPipeClientStream(".", address, System.IO.Pipes.PipeAccessRights.ReadWrite,
                System.IO.Pipes.PipeOptions.Asynchronous, System.Security.Principal.TokenImpersonationLevel.Identification,
                HandleInheritability.None);
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

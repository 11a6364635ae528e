using System.Net.Sockets;
using System.Runtime.InteropServices;

namespace XfsWin.Control.Transport;

/// <summary>
/// A Unix domain socket listener for the control channel. The socket file is mode 0600 and its
/// directory, when this creates it, 0700; every accepted peer is also checked with SO_PEERCRED
/// (root or this process's own user only), which closes the window between bind and chmod.
/// </summary>
public sealed partial class UnixSocketListener : IControlListener
{
    private const int SolSocket = 1, SoPeerCred = 17;
    private readonly Socket _socket;

    private UnixSocketListener(Socket socket, string path)
    {
        _socket = socket;
        Address = path;
    }

    public string Address { get; }

    /// <summary>
    /// Binds <paramref name="path"/>. A socket file left by a server that is gone is replaced; one a
    /// live server answers on is not (throws <see cref="IOException"/>: only one server per socket).
    /// </summary>
    public static UnixSocketListener Bind(string path)
    {
        if (OperatingSystem.IsWindows())
            throw new PlatformNotSupportedException("Unix sockets are the control channel on Linux; Windows uses a named pipe");
        path = Path.GetFullPath(path);
        var directory = Path.GetDirectoryName(path)!;
        if (!Directory.Exists(directory))
            Directory.CreateDirectory(directory, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        if (File.Exists(path))
        {
            if (IsAnswering(path))
                throw new IOException($"a control server is already listening on {path}; stop it first (or give another --socket)");
            File.Delete(path);
        }
        var socket = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
        try
        {
            socket.Bind(new UnixDomainSocketEndPoint(path));
            File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
            socket.Listen(16);
            return new UnixSocketListener(socket, path);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    private static bool IsAnswering(string path)
    {
        using var probe = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
        try
        {
            probe.Connect(new UnixDomainSocketEndPoint(path));
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    public async ValueTask<Stream> AcceptAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            var client = await _socket.AcceptAsync(cancellationToken).ConfigureAwait(false);
            if (PeerAllowed(client)) return new NetworkStream(client, ownsSocket: true);
            // Someone else's process reached the socket (mode 0600 should have stopped it): drop it unanswered.
            client.Dispose();
        }
    }

    /// <summary>SO_PEERCRED: struct ucred { pid_t pid; uid_t uid; gid_t gid; }.</summary>
    private static bool PeerAllowed(Socket client)
    {
        if (!OperatingSystem.IsLinux()) return true;
        Span<byte> cred = stackalloc byte[12];
        int length = client.GetRawSocketOption(SolSocket, SoPeerCred, cred);
        if (length < 12) return false;
        uint uid = MemoryMarshal.Read<uint>(cred[4..]);
        return uid == 0 || uid == geteuid();
    }

    [LibraryImport("libc")]
    private static partial uint geteuid();

    public static async ValueTask<Stream> ConnectAsync(string path, CancellationToken cancellationToken)
    {
        var socket = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
        try
        {
            await socket.ConnectAsync(new UnixDomainSocketEndPoint(path), cancellationToken).ConfigureAwait(false);
            return new NetworkStream(socket, ownsSocket: true);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    public ValueTask DisposeAsync()
    {
        _socket.Dispose();
        try
        {
            File.Delete(Address);
        }
        catch (IOException)
        {
        }
        return ValueTask.CompletedTask;
    }
}

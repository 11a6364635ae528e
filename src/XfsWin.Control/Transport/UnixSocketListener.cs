using System.Net.Sockets;
using System.Runtime.InteropServices;

namespace XfsWin.Control.Transport;

/// <summary>
/// A Unix domain socket listener for the control channel. <see cref="ListenerAccess.Private"/>: the socket file
/// is mode 0600 and its directory, when this creates it, 0700, and every accepted peer is also checked with
/// SO_PEERCRED (root or this process's own user only), which closes the window between bind and chmod.
/// <see cref="ListenerAccess.LocalUsers"/>: the socket is mode 0666 and its directory, when this creates it, 0755;
/// every peer is accepted and identified by its SO_PEERCRED uid (an administrator: root or this process's user).
/// </summary>
public sealed partial class UnixSocketListener : IControlListener
{
    private const int SolSocket = 1, SoPeerCred = 17;
    private readonly Socket _socket;
    private readonly ListenerAccess _access;

    private UnixSocketListener(Socket socket, string path, ListenerAccess access)
    {
        _socket = socket;
        Address = path;
        _access = access;
    }

    public string Address { get; }

    /// <summary>
    /// Binds <paramref name="path"/>. A socket file left by a server that is gone is replaced; one a
    /// live server answers on is not (throws <see cref="IOException"/>: only one server per socket).
    /// </summary>
    public static UnixSocketListener Bind(string path, ListenerAccess access = ListenerAccess.Private)
    {
        if (OperatingSystem.IsWindows())
            throw new PlatformNotSupportedException("Unix sockets are the control channel on Linux; Windows uses a named pipe");
        path = Path.GetFullPath(path);
        var directory = Path.GetDirectoryName(path)!;
        const UnixFileMode Owner = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute;
        if (!Directory.Exists(directory))
            Directory.CreateDirectory(directory, access == ListenerAccess.Private ? Owner
                : Owner | UnixFileMode.GroupRead | UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute);
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
            const UnixFileMode ReadWrite = UnixFileMode.UserRead | UnixFileMode.UserWrite;
            File.SetUnixFileMode(path, access == ListenerAccess.Private ? ReadWrite
                : ReadWrite | UnixFileMode.GroupRead | UnixFileMode.GroupWrite | UnixFileMode.OtherRead | UnixFileMode.OtherWrite);
            socket.Listen(16);
            return new UnixSocketListener(socket, path, access);
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

    public async ValueTask<AcceptedClient> AcceptAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            var client = await _socket.AcceptAsync(cancellationToken).ConfigureAwait(false);
            var peer = Identify(client);
            if (peer is not null && (_access == ListenerAccess.LocalUsers || peer.IsAdministrator))
                return new AcceptedClient(new NetworkStream(client, ownsSocket: true), () => peer);
            // A peer SO_PEERCRED cannot name, or another user on a private socket (mode 0600 should have stopped it):
            // dropped unanswered.
            client.Dispose();
        }
    }

    /// <summary>The peer as SO_PEERCRED names it (struct ucred { pid_t pid; uid_t uid; gid_t gid; }); null when it cannot.</summary>
    private static ControlPeer? Identify(Socket client)
    {
        if (!OperatingSystem.IsLinux()) return new ControlPeer("the server's own user", true);
        Span<byte> cred = stackalloc byte[12];
        int length = client.GetRawSocketOption(SolSocket, SoPeerCred, cred);
        if (length < 12) return null;
        uint uid = MemoryMarshal.Read<uint>(cred[4..]);
        return PeerOf(uid, geteuid());
    }

    /// <summary>A peer by uid: an administrator when it is root or the server's own user (who owns the server anyway).</summary>
    public static ControlPeer PeerOf(uint uid, uint serverUid) => new($"uid {uid}", uid == 0 || uid == serverUid);

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

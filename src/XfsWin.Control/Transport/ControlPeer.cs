namespace XfsWin.Control.Transport;

/// <summary>
/// Who is on the other end of a control connection, as the operating system proves it (never as the client says):
/// the peer's uid from SO_PEERCRED on a Unix socket, the client's token on a named pipe.
/// </summary>
/// <param name="Name">For logs and messages: "uid 1000", "DESKTOP\alice".</param>
/// <param name="IsAdministrator">
/// Linux: root or the server's own user. Windows: the token is a member of BUILTIN\Administrators with the group
/// enabled (an elevated administrator, or LocalSystem); an administrator's filtered token under UAC is not.
/// </param>
public sealed record ControlPeer(string Name, bool IsAdministrator)
{
    /// <summary>A peer the transport could not identify: it gets what every local user gets, nothing more.</summary>
    public static ControlPeer Unidentified { get; } = new("an unidentified client", false);
}

/// <summary>
/// A connection a listener accepted: its stream, and how to learn who is on the other end. The server calls
/// <see cref="Identify"/> once, after the first frame has been read (a named pipe can name its client only from
/// data the client wrote), and before it runs any request.
/// </summary>
public sealed record AcceptedClient(Stream Stream, Func<ControlPeer> Identify);

/// <summary>Who may connect to a listener at all.</summary>
public enum ListenerAccess
{
    /// <summary>
    /// The server's own user and administrators only (a socket of mode 0600 in a 0700 directory; a pipe for SYSTEM and
    /// Administrators): <c>xfswin manage</c>'s in-process server.
    /// </summary>
    Private,

    /// <summary>
    /// Every local user may connect (a socket of mode 0666; a pipe that also admits interactive users); what each may
    /// do is decided per request from the peer's identity (<see cref="Server.AccessPolicy"/>): the services.
    /// </summary>
    LocalUsers,
}

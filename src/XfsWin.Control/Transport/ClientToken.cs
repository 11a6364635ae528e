using System.IO.Pipes;
using System.Runtime.Versioning;
using System.Security.Principal;

namespace XfsWin.Control.Transport;

/// <summary>
/// Windows: who a pipe client is, from its token. The server impersonates the client for the length of one check
/// (ImpersonateNamedPipeClient through <see cref="NamedPipeServerStream.RunAsClient"/>; clients connect with
/// SecurityIdentification, so the token can be queried but not used), asks whether it is a member of
/// BUILTIN\Administrators with the group enabled (CheckTokenMembership, through
/// <see cref="WindowsPrincipal.IsInRole(WindowsBuiltInRole)"/>: the filtered token of an administrator under UAC has
/// the group for deny only and is not one), and reverts. Anything that fails makes the peer
/// <see cref="ControlPeer.Unidentified"/>: it gets what every local user gets.
/// </summary>
[SupportedOSPlatform("windows")]
public static class ClientToken
{
    public static ControlPeer Identify(NamedPipeServerStream pipe)
    {
        ControlPeer peer = ControlPeer.Unidentified;
        try
        {
            pipe.RunAsClient(() =>
            {
                using var identity = WindowsIdentity.GetCurrent(TokenAccessLevels.Query);
                peer = new ControlPeer(identity.Name, new WindowsPrincipal(identity).IsInRole(WindowsBuiltInRole.Administrator));
            });
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or System.Security.SecurityException or InvalidOperationException)
        {
            return ControlPeer.Unidentified;
        }
        return peer;
    }
}

using XfsWin.Control.Protocol;
using XfsWin.Control.Transport;

namespace XfsWin.Control.Server;

/// <summary>What the policy needs to know about the server's volumes (the <see cref="VolumeManager"/> answers).</summary>
public interface IAccessFacts
{
    /// <summary>The configured mount of <paramref name="source"/>, or null when an administrator configured none.</summary>
    ConfiguredMount? ConfiguredFor(string source);

    /// <summary>The source this server has mounted at <paramref name="mountPoint"/>, or null.</summary>
    string? SourceMountedAt(string mountPoint);

    /// <summary>Whether the server lists <paramref name="source"/> (a configured source, a disk it scans, or one of their partitions).</summary>
    bool IsListed(string source);

    /// <summary>Whether mount points are drive letters here (Windows), which any local user may take.</summary>
    bool DriveLetterMountPoints { get; }
}

/// <summary>
/// Who may do what over the control channel, decided per request from the peer the transport identified (never
/// from anything the client says about itself). Administrators may run every operation. Everyone else may say
/// hello, list, subscribe to events, ask for the details of a volume the server lists, and mount and unmount the
/// volumes an administrator configured: at the configured mount point (or, where mount points are drive letters,
/// any free drive letter), read-write only when the configuration says so. Format, grow, check, recover, and
/// mounting anything else (an arbitrary image file, a raw disk, a folder of the client's choosing) need an
/// administrator: the service runs as root or LocalSystem, and these either write to devices or would let a user
/// read any file or disk, or place a file system anywhere in the tree. The reasoning is in docs/service.md.
/// </summary>
public static class AccessPolicy
{
    /// <summary>Operations that need an administrator whatever they act on.</summary>
    public static readonly IReadOnlySet<string> AdministratorOnly = new HashSet<string>(StringComparer.Ordinal)
    {
        Operations.Recover, Operations.Format, Operations.Check, Operations.Grow,
    };

    /// <summary>Null when <paramref name="peer"/> may run <paramref name="request"/>; otherwise why not, said for the user.</summary>
    public static string? Refusal(ControlPeer peer, ControlRequest request, IAccessFacts facts)
    {
        ArgumentNullException.ThrowIfNull(peer);
        ArgumentNullException.ThrowIfNull(request);
        ArgumentNullException.ThrowIfNull(facts);
        if (peer.IsAdministrator) return null;
        string? source = string.IsNullOrEmpty(request.Source) ? null : request.Source;
        switch (request.Op)
        {
            case Operations.Hello or Operations.List or Operations.Subscribe:
                return null;
            case Operations.Info:
                return source is null || facts.IsListed(source) ? null
                    : $"{source} is not one of the volumes this server lists; only an administrator may look at other files and disks.";
            case Operations.Mount:
            {
                if (source is null) return null; // answered bad-request
                var entry = facts.ConfiguredFor(source);
                if (entry is null)
                    return $"{peer.Name} is not an administrator: only the volumes an administrator configured can be mounted without one. " +
                           $"Open the management UI as administrator to mount {source}.";
                if (request.MountPoint is { Length: > 0 } where && !SameMountPoint(where, entry.MountPoint) &&
                    !(facts.DriveLetterMountPoints && IsDriveLetter(where)))
                    return $"{source} is configured to be mounted at {entry.MountPoint}" +
                           (facts.DriveLetterMountPoints ? " (or at a free drive letter)" : "") +
                           $"; only an administrator may mount it at {where}.";
                if (request.ReadOnly == false && !entry.ReadWrite)
                    return $"{source} is configured read-only; only an administrator may mount it read-write.";
                return null;
            }
            case Operations.Unmount:
            {
                string? mounted = source ?? (request.MountPoint is { Length: > 0 } where ? facts.SourceMountedAt(where) : null);
                if (mounted is null) return null; // answered not-mounted or bad-request
                return facts.ConfiguredFor(mounted) is null
                    ? $"{peer.Name} is not an administrator: only the volumes an administrator configured can be unmounted without one."
                    : null;
            }
            case { } op when AdministratorOnly.Contains(op):
                return $"{op} needs an administrator ({peer.Name} is not one): open the management UI as administrator " +
                       "(the tray's \"Open the management UI as administrator\"), or run xfswin as administrator (root on Linux).";
            default:
                return null; // not an operation: answered unknown-op
        }
    }

    /// <summary>"X:" or "*" (any free letter).</summary>
    public static bool IsDriveLetter(string mountPoint) =>
        mountPoint == "*" || (mountPoint.Length == 2 && char.IsAsciiLetter(mountPoint[0]) && mountPoint[1] == ':');

    private static bool SameMountPoint(string a, string b)
    {
        var comparison = OperatingSystem.IsWindows() ? StringComparison.OrdinalIgnoreCase : StringComparison.Ordinal;
        return string.Equals(Path.TrimEndingDirectorySeparator(a), Path.TrimEndingDirectorySeparator(b), comparison);
    }
}

using XfsWin.Volume;

namespace XfsWin.Control.Server;

/// <summary>
/// What serves an opened volume to the operating system: FUSE on Linux (the CLI's backend), WinFsp
/// on Windows (the service's). The control server opens and owns the <see cref="XfsVolume"/>; the
/// backend only hosts it.
/// </summary>
public interface IMountBackend
{
    /// <summary>"FUSE" or "WinFsp".</summary>
    string Name { get; }

    /// <summary>"directory" or "drive-letter-or-folder" (see <see cref="Protocol.HelloResult.MountPointKind"/>).</summary>
    string MountPointKind { get; }

    /// <summary>
    /// Whether the host serves writes: a volume opened read-write is then mounted read-write. A host that
    /// cannot (false) gets read-only volumes only; a read-write mount request is refused.
    /// </summary>
    bool ServesWrites => false;

    /// <summary>Mount points to offer a user for a volume with this label (free drive letters, a directory).</summary>
    IReadOnlyList<string> SuggestMountPoints(string? label);

    /// <summary>Null when <paramref name="mountPoint"/> can be used; otherwise why not, said for the user.</summary>
    string? CheckMountPoint(string mountPoint);

    /// <summary>
    /// Mounts <paramref name="volume"/>, read-write when it was opened so (<see cref="XfsVolume.IsReadOnly"/> false,
    /// only for a host that <see cref="ServesWrites"/>); throws <see cref="IOException"/> or <see cref="XfsException"/> saying why not.
    /// <paramref name="hostOptions"/> are the host's own option words from a configured mount (the
    /// driver's options on Windows); mounts asked for over the channel pass none.
    /// </summary>
    IMountedVolume Mount(XfsVolume volume, string source, string mountPoint, IReadOnlyList<string> hostOptions);
}

/// <summary>A live mount. Dispose unmounts it (and waits until the host stopped serving).</summary>
public interface IMountedVolume : IDisposable
{
    string MountPoint { get; }

    /// <summary>Completes when the host stops serving on its own (unmounted from outside, device gone).</summary>
    Task Stopped { get; }
}

namespace XfsWin.Control.Server;

/// <summary>What a control server shows and manages.</summary>
public sealed record ServerOptions
{
    /// <summary>Image files and devices always listed (the service's configured sources, or `--source`).</summary>
    public IReadOnlyList<string> Sources { get; init; } = [];

    /// <summary>
    /// Also list the machine's disks: /sys/block on Linux (no loop, ram or zram devices),
    /// \\.\PhysicalDriveN on Windows.
    /// </summary>
    public bool ScanDevices { get; init; } = true;

    /// <summary>How often mounted volumes are checked for corruption found while serving (events).</summary>
    public TimeSpan HealthPollInterval { get; init; } = TimeSpan.FromSeconds(1);

    /// <summary>Most clients served at once; more are answered "busy" and closed.</summary>
    public int MaxConnections { get; init; } = 32;

    /// <summary>Most requests in flight on one connection; more are answered "busy".</summary>
    public int MaxRequestsPerConnection { get; init; } = 8;

    /// <summary>Names the server in hello replies and logs.</summary>
    public string ServerName { get; init; } = "xfswin";

    /// <summary>
    /// The mounts an administrator configured (the Windows service's mounts.conf, the Linux service's service.conf
    /// <c>mount</c> lines): mounted at start, and the only ones a user who is not an administrator may mount and
    /// unmount (<see cref="AccessPolicy"/>).
    /// </summary>
    public IReadOnlyList<ConfiguredMount> ConfiguredMounts { get; init; } = [];
}

/// <summary>
/// A mount an administrator configured: the source (as the server keys it: a full path, <c>disk@N</c> for a
/// partition), where, read-write or not, how to open the volume and the host's option words (the driver's options
/// on Windows), and the configuration line it came from.
/// </summary>
public sealed record ConfiguredMount(string Source, string MountPoint, bool ReadWrite, int Line)
{
    /// <summary>How the volume is opened (null: the server's default for <see cref="ReadWrite"/>).</summary>
    public Volume.VolumeOpenOptions? Open { get; init; }

    /// <summary>The host's option words (the driver's on Windows; none on Linux).</summary>
    public IReadOnlyList<string> HostOptions { get; init; } = [];
}

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
}

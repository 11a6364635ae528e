using XfsWin.Control.Protocol;

namespace XfsWin.Tray;

/// <summary>What the tray says about a volume, most urgent first.</summary>
public enum VolumeState
{
    /// <summary>Metadata failed verification: it stays (or would mount) read-only.</summary>
    Corrupt,
    /// <summary>Marked NEEDSREPAIR by Linux: only xfs_repair helps.</summary>
    NeedsRepair,
    Unsupported,
    Unreadable,
    /// <summary>An operation (recover) holds it.</summary>
    Busy,
    Mounted,
    /// <summary>The log is dirty: a mount replays it in memory; recover writes the replay to the disk.</summary>
    NeedsRecovery,
    NotMounted,
}

/// <summary>
/// One XFS volume the service reports (a whole device or a partition), reduced to what the tray
/// shows and acts on. <see cref="Source"/> is what goes back to the service.
/// </summary>
public sealed record TrayVolume(string Source, string Label, VolumeState State, string? MountPoint, bool ReadOnly, string LogState, string? Problem)
{
    /// <summary>Where an administrator configured it to be mounted (then any user may mount and unmount it), or null.</summary>
    public string? ConfiguredMountPoint { get; init; }

    /// <summary>Whether its configuration mounts it read-write.</summary>
    public bool ConfiguredReadWrite { get; init; }

    /// <summary>The label, or the source's file name when the volume has none.</summary>
    public string Name => Label.Length > 0 ? Label : DisplaySource(Source);

    /// <summary>"label (source): state", the volume's line in the menu.</summary>
    public string MenuText => $"{Name} ({DisplaySource(Source)}): {StateText}";

    /// <summary>The state in words, e.g. "mounted at X: (read-only)", "needs recovery", "corrupt".</summary>
    public string StateText => State switch
    {
        VolumeState.Mounted => $"mounted at {MountPoint}{(ReadOnly ? " (read-only)" : "")}",
        VolumeState.Corrupt when MountPoint is not null => $"corrupt, mounted read-only at {MountPoint}",
        VolumeState.Corrupt => "corrupt",
        VolumeState.NeedsRepair => "needs repair (run xfs_repair on Linux)",
        VolumeState.Unsupported => "unsupported",
        VolumeState.Unreadable => "unreadable",
        VolumeState.Busy => "busy",
        VolumeState.NeedsRecovery => "needs recovery (dirty log)",
        _ => "not mounted",
    };

    public bool CanMount => MountPoint is null && State is VolumeState.NotMounted or VolumeState.NeedsRecovery;

    public bool CanUnmount => MountPoint is not null;

    /// <summary>Only an unmounted volume with a dirty log: recovery writes to the device.</summary>
    public bool CanRecover => MountPoint is null && State == VolumeState.NeedsRecovery;

    /// <summary>Image and device paths are long; the menu shows the file name (and partition).</summary>
    public static string DisplaySource(string source)
    {
        var name = Path.GetFileName(source.Replace('\\', '/'));
        return name.Length > 0 ? name : source;
    }

    public static TrayVolume From(VolumeSummary v)
    {
        var state = v.Health switch
        {
            Health.Corrupt => VolumeState.Corrupt,
            Health.NeedsRepair => VolumeState.NeedsRepair,
            Health.Unsupported => VolumeState.Unsupported,
            Health.Unreadable => VolumeState.Unreadable,
            Health.Busy => VolumeState.Busy,
            _ when v.MountPoint is not null => VolumeState.Mounted,
            _ when v.LogState == "dirty" => VolumeState.NeedsRecovery,
            _ => VolumeState.NotMounted,
        };
        return new TrayVolume(v.Source, v.Label, state, v.MountPoint, v.ReadOnly, v.LogState, v.Problem)
        {
            ConfiguredMountPoint = v.ConfiguredMountPoint, ConfiguredReadWrite = v.ConfiguredReadWrite,
        };
    }

    /// <summary>Every volume of a list reply, in the server's order: a whole-device volume, then each partition's.</summary>
    public static IReadOnlyList<TrayVolume> FromList(ListResult list)
    {
        var volumes = new List<TrayVolume>();
        foreach (var disk in list.Disks)
        {
            if (disk.Volume is { } whole) volumes.Add(From(whole));
            foreach (var p in disk.Partitions)
                if (p.Volume is { } v) volumes.Add(From(v));
        }
        return volumes;
    }
}

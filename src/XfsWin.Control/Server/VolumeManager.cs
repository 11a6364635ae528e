using XfsWin.Check;
using XfsWin.Control;
using XfsWin.Control.Protocol;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.Mkfs;
using XfsWin.Volume;

namespace XfsWin.Control.Server;

/// <summary>
/// The operations behind the control channel: listing, info, mounts, recovery, format and check, and the events
/// they raise. One per server; safe for concurrent calls.
/// Lock order: <c>_gate</c> guards the mount table and the busy set and is never held while a
/// device is opened, a host mounts or unmounts, or an event is delivered.
/// A source is "busy" while a mount, unmount or recovery works on it: a second operation on it is
/// refused (<see cref="ErrorCodes.InUse"/>) and the list shows it without opening it.
/// </summary>
public sealed class VolumeManager : IDisposable, IAccessFacts
{
    private readonly ServerOptions _options;
    private readonly IMountBackend? _backend;
    private readonly object _gate = new();
    private readonly Dictionary<string, ActiveMount> _mounts = new(StringComparer.Ordinal);
    private readonly HashSet<string> _busy = new(StringComparer.Ordinal);
    // Image files this server created by format: listed from then on, beside the configured sources.
    private readonly List<string> _formatted = [];
    private readonly List<Action<ControlEvent>> _subscribers = [];
    private readonly Timer _healthTimer;
    private int _disposed;

    private sealed class ActiveMount
    {
        public required string Key;
        public required string Source;
        public required XfsVolume Volume;
        public required IMountedVolume Host;
        public required bool CreatedDirectory;
        public bool CorruptionReported;
    }

    public VolumeManager(ServerOptions options, IMountBackend? backend)
    {
        _options = options;
        _backend = backend;
        _healthTimer = new Timer(_ => CheckHealth(), null, options.HealthPollInterval, options.HealthPollInterval);
    }

    /// <summary>Receives every event; the callback must not block (the server queues it per connection).</summary>
    public IDisposable Subscribe(Action<ControlEvent> subscriber)
    {
        lock (_subscribers) _subscribers.Add(subscriber);
        return new Unsubscriber(this, subscriber);
    }

    private sealed class Unsubscriber(VolumeManager owner, Action<ControlEvent> subscriber) : IDisposable
    {
        public void Dispose()
        {
            lock (owner._subscribers) owner._subscribers.Remove(subscriber);
        }
    }

    private void Raise(string kind, string? source, string? mountPoint, string message, string? op = null, bool ok = true)
    {
        var e = new ControlEvent
        {
            Kind = kind, Source = source, MountPoint = mountPoint, Op = op, Ok = ok, Message = message,
            Time = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(),
        };
        Action<ControlEvent>[] targets;
        lock (_subscribers) targets = [.. _subscribers];
        foreach (var t in targets) t(e);
    }

    /// <summary>The hello reply for a client speaking <paramref name="version"/>: that version's operations, and what <paramref name="peer"/> may do.</summary>
    public HelloResult Hello(byte version = Frame.CurrentVersion, Transport.ControlPeer? peer = null) => new()
    {
        Administrator = peer?.IsAdministrator ?? true,
        Client = peer?.Name,
        ProtocolVersion = version,
        Server = _options.ServerName,
        Platform = OperatingSystem.IsWindows() ? "windows" : "linux",
        Operations = Operations.AcceptedIn(version),
        MountPointKind = _backend?.MountPointKind ?? "none",
        SuggestedMountPoints = _backend?.SuggestMountPoints(null) ?? [],
        ReadWriteMounts = version >= 3 && _backend is { ServesWrites: true },
    };

    /// <summary>The key a source is known by: full path, and "@N" for a partition.</summary>
    public static string Normalize(string source)
    {
        var (path, partition) = PartitionSpec.Parse(source);
        if (path.StartsWith(@"\\.\", StringComparison.Ordinal)) return source;
        var full = Path.GetFullPath(path);
        return partition is { } p ? $"{full}@{p}" : full;
    }

    // ---- configured mounts and what users may see (IAccessFacts) ---------------------------------

    private static StringComparison PathComparison => OperatingSystem.IsWindows() ? StringComparison.OrdinalIgnoreCase : StringComparison.Ordinal;

    /// <summary>The key of <paramref name="source"/>, or null when it is not a source at all (a bad partition suffix).</summary>
    private static string? TryNormalize(string source)
    {
        try
        {
            return Normalize(source);
        }
        catch (Exception e) when (e is XfsException or ArgumentException or IOException or NotSupportedException)
        {
            return null;
        }
    }

    public ConfiguredMount? ConfiguredFor(string source)
    {
        if (TryNormalize(source) is not { } key) return null;
        foreach (var entry in _options.ConfiguredMounts)
            if (TryNormalize(entry.Source) is { } configured && string.Equals(configured, key, PathComparison)) return entry;
        return null;
    }

    public string? SourceMountedAt(string mountPoint)
    {
        lock (_gate) return _mounts.Values.FirstOrDefault(m => string.Equals(m.Host.MountPoint, mountPoint, PathComparison))?.Key;
    }

    public bool IsListed(string source)
    {
        if (TryNormalize(source) is not { } key) return false;
        string path = PartitionSpec.Parse(key).Path;
        bool Same(string? other) => other is not null && string.Equals(PartitionSpec.Parse(other).Path, path, PathComparison);
        if (_options.Sources.Any(s => Same(TryNormalize(s))) || _options.ConfiguredMounts.Any(m => Same(TryNormalize(m.Source)))) return true;
        lock (_gate)
            if (_formatted.Any(f => Same(f)) || _mounts.Keys.Any(Same)) return true;
        return _options.ScanDevices && DeviceScan.Disks().Any(d => Same(d));
    }

    public bool DriveLetterMountPoints => _backend?.MountPointKind == "drive-letter-or-folder";

    /// <summary>
    /// Mounts a configured mount: at its mount point unless <paramref name="mountPoint"/> names another, read-write as
    /// configured unless <paramref name="readOnly"/> says otherwise, with its open options and host options.
    /// </summary>
    public MountResult MountConfigured(ConfiguredMount entry, string? mountPoint = null, bool? readOnly = null)
    {
        ArgumentNullException.ThrowIfNull(entry);
        bool ro = readOnly ?? !entry.ReadWrite;
        var open = entry.Open;
        if (ro && open is { Writable: true }) open = open with { Writable = false, Replay = LogReplayMode.Memory };
        return Mount(entry.Source, string.IsNullOrEmpty(mountPoint) ? entry.MountPoint : mountPoint, open, entry.HostOptions, ro);
    }

    // ---- list ---------------------------------------------------------------------------------

    public ListResult List()
    {
        var paths = new List<string>();
        void Add(string p)
        {
            if (!paths.Contains(p, StringComparer.Ordinal)) paths.Add(p);
        }
        foreach (var s in _options.Sources) Add(PartitionSpec.Parse(Normalize(s)).Path);
        // Configured mounts are listed whether mounted or not: users mount them from the list.
        foreach (var c in _options.ConfiguredMounts)
            if (TryNormalize(c.Source) is { } key) Add(PartitionSpec.Parse(key).Path);
        if (_options.ScanDevices)
            foreach (var d in DeviceScan.Disks()) Add(d);
        lock (_gate)
        {
            foreach (var f in _formatted) Add(f);
            foreach (var m in _mounts.Values) Add(PartitionSpec.Parse(m.Key).Path);
        }
        return new ListResult { Disks = [.. paths.Select(DescribeDisk)] };
    }

    private DiskEntry DescribeDisk(string path)
    {
        string kind = DeviceScan.IsDevicePath(path) ? "disk" : "image";
        IBlockDevice device;
        try
        {
            device = FileBlockDevice.Open(path, writable: false);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException)
        {
            return new DiskEntry { Path = path, Kind = kind, PartitionTable = "none", Problem = e.Message };
        }
        PartitionTable table;
        long size;
        using (device)
        {
            size = device.Length;
            try
            {
                table = PartitionTable.Read(device);
            }
            catch (XfsException e)
            {
                return new DiskEntry { Path = path, Kind = kind, SizeBytes = size, PartitionTable = "none", Problem = e.Message };
            }
        }
        if (table.Kind == PartitionTableKind.None)
        {
            return new DiskEntry
            {
                Path = path, Kind = kind, SizeBytes = size, PartitionTable = "none",
                Volume = table.WholeDeviceIsXfs ? Summarize(path) : null,
            };
        }
        var partitions = new List<PartitionInfo>();
        foreach (var e in table.Entries)
        {
            if (e.IsExtendedContainer) continue;
            partitions.Add(new PartitionInfo
            {
                Number = e.Number, StartByte = e.StartByte, LengthBytes = e.LengthBytes,
                Type = e.TypeDescription, Name = e.Name, Problem = e.Problem,
                Volume = e.HoldsXfs && e.Problem is null ? Summarize($"{path}@{e.Number}") : null,
            });
        }
        return new DiskEntry
        {
            Path = path, Kind = kind, SizeBytes = size,
            PartitionTable = table.Kind == PartitionTableKind.Gpt ? "gpt" : "mbr",
            Partitions = partitions,
        };
    }

    private static string LogStateName(LogState state) => state switch
    {
        LogState.Clean => "clean",
        LogState.Dirty => "dirty",
        LogState.ReplayedInMemory => "replayed-in-memory",
        LogState.ReplayedInPlace => "replayed-in-place",
        _ => state.ToString().ToLowerInvariant(),
    };

    /// <summary>A volume's summary: from its mount when mounted here, otherwise by opening it read-only.</summary>
    private VolumeSummary Summarize(string source) => WithConfiguration(SummarizeUnconfigured(source));

    private VolumeSummary SummarizeUnconfigured(string source)
    {
        string key = Normalize(source);
        lock (_gate)
        {
            if (_mounts.TryGetValue(key, out var m)) return Summary(key, m.Volume, m.Host.MountPoint);
            if (_busy.Contains(key)) return new VolumeSummary { Source = key, LogState = "unknown", Health = Health.Busy, Problem = "an operation is working on it" };
        }
        try
        {
            using var volume = XfsVolume.Open(key, new VolumeOpenOptions { Writable = false, Replay = LogReplayMode.Memory });
            return Summary(key, volume, null);
        }
        catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException)
        {
            return Unopened(key, e);
        }
    }

    private static VolumeSummary Unopened(string key, Exception e)
    {
        string health = e switch
        {
            XfsCorruptionException => Health.Corrupt,
            XfsException { Error: XfsError.NeedsRepair } => Health.NeedsRepair,
            XfsException { Error: XfsError.Unsupported } => Health.Unsupported,
            XfsException { Error: XfsError.Corrupt } => Health.Corrupt,
            _ => Health.Unreadable,
        };
        return new VolumeSummary { Source = key, LogState = "unknown", Health = health, Problem = e.Message };
    }

    /// <summary>A summary with where an administrator configured the volume to be mounted, when it is one of those.</summary>
    private VolumeSummary WithConfiguration(VolumeSummary summary) => ConfiguredFor(summary.Source) is { } entry
        ? summary with { ConfiguredMountPoint = entry.MountPoint, ConfiguredReadWrite = entry.ReadWrite }
        : summary;

    private static VolumeSummary Summary(string key, XfsVolume volume, string? mountPoint)
    {
        var info = volume.Info;
        long free;
        try
        {
            var stats = volume.GetStats();
            free = (long)(stats.FreeBlocks * (ulong)stats.BlockSize);
        }
        catch (XfsException)
        {
            free = (long)(info.FreeBlocks * (ulong)info.BlockSize);
        }
        return new VolumeSummary
        {
            Source = key, Label = info.Label, Uuid = info.Uuid, FormatVersion = info.FormatVersion,
            SizeBytes = (long)(info.DataBlocks * (ulong)info.BlockSize), FreeBytes = free,
            // Unmounted, a log replayed in memory for this look is still dirty on the device.
            LogState = mountPoint is null && info.LogState == LogState.ReplayedInMemory ? "dirty" : LogStateName(info.LogState),
            Health = volume.IsHealthy ? Health.Healthy : Health.Corrupt,
            Problem = volume.FirstCorruption?.Message,
            MountPoint = mountPoint, ReadOnly = mountPoint is null || volume.IsReadOnly,
        };
    }

    // ---- info ---------------------------------------------------------------------------------

    public VolumeDetails Info(string source)
    {
        string key = Normalize(source);
        XfsVolume? mounted = null;
        string? mountPoint = null;
        lock (_gate)
        {
            if (_mounts.TryGetValue(key, out var m)) { mounted = m.Volume; mountPoint = m.Host.MountPoint; }
            else if (_busy.Contains(key)) throw new ControlException(ErrorCodes.InUse, $"{key}: an operation is working on it; try again when it finished");
        }
        if (mounted is not null) return Details(key, mounted, mountPoint);
        using var volume = OpenForUse(key);
        return Details(key, volume, null);
    }

    private static XfsVolume OpenForUse(string key, VolumeOpenOptions? open = null)
    {
        try
        {
            return XfsVolume.Open(key, open ?? new VolumeOpenOptions { Writable = false, Replay = LogReplayMode.Memory });
        }
        catch (XfsException e) when (e.Error == XfsError.NotFound || e is { Error: XfsError.IoError, InnerException: FileNotFoundException })
        {
            throw new ControlException(ErrorCodes.NotFound, e.Message);
        }
        catch (FileNotFoundException e)
        {
            throw new ControlException(ErrorCodes.NotFound, $"{key} does not exist: {e.Message}");
        }
        catch (DirectoryNotFoundException e)
        {
            throw new ControlException(ErrorCodes.NotFound, $"{key} does not exist: {e.Message}");
        }
    }

    private VolumeDetails Details(string key, XfsVolume volume, string? mountPoint)
    {
        var info = volume.Info;
        return new VolumeDetails
        {
            Summary = WithConfiguration(Summary(key, volume, mountPoint)),
            BlockSize = info.BlockSize, SectorSize = info.SectorSize, InodeSize = info.InodeSize,
            AgCount = info.AgCount, InodeCount = info.InodeCount, FreeInodes = info.FreeInodes,
            LogBlocks = info.LogBlocks, ExternalLog = info.ExternalLog,
            Features = info.Features, ReadOnlyReasons = info.ReadOnlyReasons, Warnings = info.Warnings,
            UnfinishedLogIntents = info.UnfinishedLogIntents,
        };
    }

    // ---- mount / unmount ----------------------------------------------------------------------

    /// <summary>
    /// Whether two sources share bytes: the same path, and the same partition or either the whole
    /// device (formatting disk.img overwrites disk.img@1).
    /// </summary>
    private static bool Overlap(string a, string b)
    {
        var (pa, na) = PartitionSpec.Parse(a);
        var (pb, nb) = PartitionSpec.Parse(b);
        return string.Equals(pa, pb, StringComparison.Ordinal) && (na is null || nb is null || na == nb);
    }

    private void Claim(string key, bool mustBeMounted)
    {
        lock (_gate)
        {
            foreach (var busy in _busy)
                if (Overlap(busy, key)) throw new ControlException(ErrorCodes.InUse, $"{key}: another operation is working on {busy}; try again when it finished");
            bool mounted = _mounts.ContainsKey(key);
            if (!mustBeMounted)
                foreach (var m in _mounts.Values)
                    if (Overlap(m.Key, key))
                        throw new ControlException(ErrorCodes.AlreadyMounted, $"{key}: {m.Key} is mounted at {m.Host.MountPoint}; unmount it first");
            if (!mounted && mustBeMounted) throw new ControlException(ErrorCodes.NotMounted, $"{key} is not mounted by this server");
            _busy.Add(key);
        }
    }

    private void Release(string key)
    {
        lock (_gate) _busy.Remove(key);
    }

    /// <summary>
    /// Opens <paramref name="source"/> and mounts it: read-only (the default), or with
    /// <paramref name="readOnly"/> false read-write (a dirty log is then replayed onto the device first, as Linux
    /// does; a volume with a feature the write path does not keep opens read-only and the result says so).
    /// <paramref name="open"/> and <paramref name="hostOptions"/> come from configured mounts (the service's mount
    /// table); channel requests use the defaults (log replayed in memory, default host options).
    /// </summary>
    public MountResult Mount(string source, string mountPoint, VolumeOpenOptions? open = null, IReadOnlyList<string>? hostOptions = null, bool readOnly = true)
    {
        if (_backend is null) throw new ControlException(ErrorCodes.Unavailable, "this server has no mount host (FUSE or WinFsp) available");
        if (!readOnly && !_backend.ServesWrites)
            throw new ControlException(ErrorCodes.Unavailable, $"{_backend.Name} mounts of this server are read-only; mount without read-write");
        if (!readOnly) open = (open ?? new VolumeOpenOptions()) with { Writable = true, Replay = LogReplayMode.InPlace };
        string key = Normalize(source);
        if (string.IsNullOrWhiteSpace(mountPoint)) throw new ControlException(ErrorCodes.BadMountPoint, "give a mount point");
        lock (_gate)
        {
            foreach (var m in _mounts.Values)
                if (string.Equals(m.Host.MountPoint, mountPoint, OperatingSystem.IsWindows() ? StringComparison.OrdinalIgnoreCase : StringComparison.Ordinal))
                    throw new ControlException(ErrorCodes.BadMountPoint, $"{mountPoint} already holds {m.Key}");
        }
        Claim(key, mustBeMounted: false);
        try
        {
            bool created = false;
            if (_backend.MountPointKind == "directory" && !Directory.Exists(mountPoint) && Path.IsPathFullyQualified(mountPoint))
            {
                Directory.CreateDirectory(mountPoint);
                created = true;
            }
            if (_backend.CheckMountPoint(mountPoint) is { } problem)
            {
                if (created) TryRemoveDirectory(mountPoint);
                throw new ControlException(ErrorCodes.BadMountPoint, problem);
            }
            var volume = OpenForUse(key, open);
            IMountedVolume host;
            try
            {
                host = _backend.Mount(volume, key, mountPoint, hostOptions ?? []);
            }
            catch
            {
                volume.Dispose();
                if (created) TryRemoveDirectory(mountPoint);
                throw;
            }
            var active = new ActiveMount { Key = key, Source = source, Volume = volume, Host = host, CreatedDirectory = created };
            lock (_gate) _mounts[key] = active;
            host.Stopped.ContinueWith(_ => HostStopped(active), TaskScheduler.Default);
            bool ro = volume.IsReadOnly;
            Raise(EventKinds.Mounted, key, host.MountPoint, $"{key} mounted {(ro ? "read-only" : "read-write")} at {host.MountPoint}");
            var warnings = !readOnly && ro ? [.. volume.Info.Warnings, .. volume.Info.ReadOnlyReasons] : volume.Info.Warnings;
            return new MountResult { Source = key, MountPoint = host.MountPoint, Host = _backend.Name, ReadOnly = ro, Warnings = warnings };
        }
        finally
        {
            Release(key);
        }
    }

    /// <summary>Unmounts by source or by mount point.</summary>
    public MountResult Unmount(string? source, string? mountPoint)
    {
        string? key = source is null ? null : Normalize(source);
        if (key is null)
        {
            if (mountPoint is null) throw new ControlException(ErrorCodes.BadRequest, "unmount needs a source or a mount point");
            lock (_gate)
                key = _mounts.Values.FirstOrDefault(m => string.Equals(m.Host.MountPoint, mountPoint, StringComparison.Ordinal))?.Key
                      ?? throw new ControlException(ErrorCodes.NotMounted, $"nothing is mounted at {mountPoint} by this server");
        }
        Claim(key, mustBeMounted: true);
        ActiveMount active;
        lock (_gate) active = _mounts[key];
        try
        {
            string where = active.Host.MountPoint;
            Teardown(active);
            Raise(EventKinds.Unmounted, key, where, $"{key} unmounted from {where}");
            return new MountResult { Source = key, MountPoint = where, Host = _backend?.Name ?? "", ReadOnly = true };
        }
        finally
        {
            Release(key);
        }
    }

    /// <summary>Unmounts, closes the volume, forgets the mount, removes a directory this server made.</summary>
    private void Teardown(ActiveMount active)
    {
        lock (_gate)
        {
            if (!_mounts.TryGetValue(active.Key, out var current) || !ReferenceEquals(current, active)) return;
            _mounts.Remove(active.Key);
        }
        string where = active.Host.MountPoint;
        active.Host.Dispose();
        active.Volume.Dispose();
        if (active.CreatedDirectory) TryRemoveDirectory(where);
    }

    private void HostStopped(ActiveMount active)
    {
        bool stillListed;
        lock (_gate) stillListed = _mounts.TryGetValue(active.Key, out var current) && ReferenceEquals(current, active) && !_busy.Contains(active.Key);
        if (!stillListed) return;
        string where = active.Host.MountPoint;
        Teardown(active);
        Raise(EventKinds.Unmounted, active.Key, where, $"{active.Key} is no longer served at {where} (unmounted from outside XfsWin)");
    }

    private static void TryRemoveDirectory(string path)
    {
        try
        {
            Directory.Delete(path);
        }
        catch (IOException)
        {
        }
        catch (UnauthorizedAccessException)
        {
        }
    }

    /// <summary>Unmounts everything (service stop, shutdown); each unmount raises its event.</summary>
    public void UnmountAll()
    {
        List<ActiveMount> all;
        lock (_gate) all = [.. _mounts.Values];
        foreach (var m in all)
        {
            string where = m.Host.MountPoint;
            Teardown(m);
            Raise(EventKinds.Unmounted, m.Key, where, $"{m.Key} unmounted from {where} (server stopping)");
        }
    }

    public IReadOnlyList<(string Source, string MountPoint)> Mounts()
    {
        lock (_gate) return [.. _mounts.Values.Select(m => (m.Key, m.Host.MountPoint))];
    }

    private void CheckHealth()
    {
        if (Volatile.Read(ref _disposed) != 0) return;
        List<ActiveMount> newlyCorrupt = [];
        lock (_gate)
        {
            foreach (var m in _mounts.Values)
            {
                if (m.CorruptionReported || m.Volume.IsHealthy) continue;
                m.CorruptionReported = true;
                newlyCorrupt.Add(m);
            }
        }
        foreach (var m in newlyCorrupt)
            Raise(EventKinds.VolumeReadOnly, m.Key, m.Host.MountPoint,
                $"{m.Key} found corrupt metadata and stays read-only: {m.Volume.FirstCorruption?.Message}", ok: false);
    }

    // ---- device operations: recover, format, check ---------------------------------------------
    // Each works on an unmounted device, alone: RunExclusive claims the source, refuses it while this
    // server or the kernel has it (or an overlapping partition or whole disk) mounted, and raises
    // operation-finished. Grow runs here too when the volume is not mounted; on a volume this server
    // has mounted read-write it grows online (GrowMounted), claiming the mount instead.

    /// <summary>
    /// Runs <paramref name="work"/> on <paramref name="key"/> with no other operation or mount on it.
    /// <paramref name="finished"/> gives the operation-finished event's message, or null for none
    /// (a dry run of format only looks).
    /// </summary>
    private T RunExclusive<T>(string key, string op, Func<T> work, Func<T, string?> finished)
    {
        Claim(key, mustBeMounted: false);
        try
        {
            if (KernelMounts.FindMount(PartitionSpec.Parse(key).Path) is { } where)
                throw new ControlException(ErrorCodes.InUse, $"{key}: {where}; unmount it first. Nothing was done.");
            var result = work();
            if (finished(result) is { } message) Raise(EventKinds.OperationFinished, key, null, message, op);
            return result;
        }
        catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException or ControlException)
        {
            Raise(EventKinds.OperationFinished, key, null, $"{op} {key} failed: {e.Message}", op, ok: false);
            throw;
        }
        finally
        {
            Release(key);
        }
    }

    /// <summary>
    /// Grows <paramref name="source"/> to <paramref name="size"/> (as xfs_growfs -D takes it; null: the whole
    /// device), or shrinks the free tail of its last AG, as <c>xfswin grow</c> does: offline when nothing has it
    /// mounted, online when this server has it mounted read-write (then only larger). A dry run reports the current
    /// size, the device's, and the smallest size a shrink can reach, and writes nothing.
    /// </summary>
    public GrowResultInfo Grow(string source, string? size, bool dryRun, IProgress<Admin.GrowProgress>? progress)
    {
        string key = Normalize(source);
        ActiveMount? mounted;
        lock (_gate) mounted = _mounts.GetValueOrDefault(key);
        if (mounted is not null) return GrowMounted(key, size, dryRun, progress);
        return RunExclusive(key, Operations.Grow, () => GrowOffline(key, size, dryRun, progress), r => r.DryRun ? null : r.Message);
    }

    private static ulong ParseGrowSize(string? size, ulong deviceBlocks, uint blockSize)
    {
        try
        {
            return size is null ? deviceBlocks : Admin.VolumeGrower.ParseSize(size, blockSize);
        }
        catch (FormatException e)
        {
            throw new ControlException(ErrorCodes.BadRequest, e.Message);
        }
    }

    private static GrowResultInfo GrowOffline(string key, string? size, bool dryRun, IProgress<Admin.GrowProgress>? progress)
    {
        var (path, partition) = PartitionSpec.Parse(key);
        if (dryRun)
        {
            using var device = PartitionSpec.Open(path, partition, writable: false);
            var sector = new byte[Math.Max(512, Math.Min(4096, device.SectorSize))];
            device.Read(0, sector);
            var verify = Superblock.Verify(sector);
            if (!verify.IsOk) throw new XfsCorruptionException("primary superblock", 0, verify.ToString());
            var sb = Superblock.Decode(sector);
            ulong deviceBlocks = Admin.VolumeGrower.DeviceBlocks(device.Length, sb.BlockSize);
            ulong smallest = Admin.VolumeGrower.SmallestSize(device, sb);
            var plan = Admin.VolumeGrower.Plan(sb, Math.Max(ParseGrowSize(size, deviceBlocks, sb.BlockSize), size is null ? sb.DataBlocks : 0));
            return GrowInfo(key, plan, deviceBlocks, smallest, sb.Fdblocks, sb.Fdblocks, dryRun: true, online: false,
                plan.Changes ? $"{key} would change from {plan.OldDataBlocks} to {plan.NewDataBlocks} blocks (dry run: nothing was written)" : $"{key} already has this size");
        }
        using var access = WriteGate.Open(path, partition, null, WritePurpose.Grow);
        var asb = access.Superblock;
        ulong devBlocks = Admin.VolumeGrower.DeviceBlocks(access.Data.Length, asb.BlockSize);
        ulong requested = ParseGrowSize(size, devBlocks, asb.BlockSize);
        if (size is null && requested < asb.DataBlocks)
            throw new ControlException(ErrorCodes.BadRequest,
                $"the device holds {requested} blocks but the volume has {asb.DataBlocks}: was the image or partition made smaller? Nothing was written. To shrink the volume, give the new size.");
        var result = Admin.VolumeGrower.Run(access, requested, progress);
        ulong smallestAfter = Admin.VolumeGrower.SmallestSize(access.Data, Reread(access.Data));
        return GrowInfo(key, result.Plan, devBlocks, smallestAfter, result.FreeBlocksBefore, result.FreeBlocksAfter, dryRun: false, online: false,
            result.Plan.Changes ? $"{key} {(result.Plan.Shrinks ? "shrunk" : "grown")} from {result.Plan.OldDataBlocks} to {result.Plan.NewDataBlocks} blocks" : $"{key} already has this size");
    }

    private static Superblock Reread(IBlockDevice device)
    {
        var sector = new byte[Math.Max(512, Math.Min(4096, device.SectorSize))];
        device.Read(0, sector);
        return Superblock.Decode(sector);
    }

    /// <summary>Online: the volume this server has mounted grows or shrinks while in use (read-write mounts only).</summary>
    private GrowResultInfo GrowMounted(string key, string? size, bool dryRun, IProgress<Admin.GrowProgress>? progress)
    {
        Claim(key, mustBeMounted: true);
        try
        {
            ActiveMount active;
            lock (_gate) active = _mounts[key];
            var volume = active.Volume;
            var info = volume.Info;
            if (volume.IsReadOnly)
                throw new ControlException(ErrorCodes.InUse,
                    $"{key} is mounted read-only at {active.Host.MountPoint}: a mounted volume grows only when mounted read-write. Unmount it (or mount it read-write) first. Nothing was done.");
            long deviceBytes = volume.DeviceLength(refresh: true);
            ulong deviceBlocks = Admin.VolumeGrower.DeviceBlocks(deviceBytes, (uint)info.BlockSize);
            var stats = volume.GetStats();
            if (dryRun)
            {
                ulong requested = ParseGrowSize(size, deviceBlocks, (uint)info.BlockSize);
                ulong smallest = Admin.VolumeGrower.SmallestSizeMounted(volume);
                string what = requested > info.DataBlocks ? $"would grow from {info.DataBlocks} to about {requested} blocks"
                    : requested < info.DataBlocks ? (requested >= smallest ? $"would shrink from {info.DataBlocks} to about {requested} blocks" : $"cannot shrink below {smallest} blocks")
                    : "would not change";
                return new GrowResultInfo
                {
                    Source = key, DryRun = true, Online = true, BlockSize = info.BlockSize, OldDataBlocks = info.DataBlocks,
                    NewDataBlocks = requested >= smallest ? requested : info.DataBlocks, OldAgCount = info.AgCount, NewAgCount = info.AgCount, AgBlocks = info.AgBlocks,
                    DeviceBlocks = deviceBlocks, SmallestBlocks = smallest, FreeBlocksBefore = stats.FreeBlocks, FreeBlocksAfter = stats.FreeBlocks,
                    Message = $"{key} (mounted read-write at {active.Host.MountPoint}) {what} (dry run: nothing was written)",
                };
            }
            try
            {
                ulong? blocks = size is null ? null : ParseGrowSize(size, deviceBlocks, (uint)info.BlockSize);
                var result = Admin.VolumeGrower.RunMounted(volume, blocks, progress);
                var p = result.Plan;
                string message = p.Changes ? $"{key} {(p.Shrinks ? "shrunk" : "grown")} from {p.OldDataBlocks} to {p.NewDataBlocks} blocks while mounted at {active.Host.MountPoint}" : $"{key} already has this size";
                if (p.Changes) Raise(EventKinds.OperationFinished, key, active.Host.MountPoint, message, Operations.Grow);
                return GrowInfo(key, p, Admin.VolumeGrower.DeviceBlocks(volume.DeviceLength(refresh: false), (uint)info.BlockSize), p.NewDataBlocks,
                    result.FreeBlocksBefore, result.FreeBlocksAfter, dryRun: false, online: true, message);
            }
            catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException or ControlException)
            {
                Raise(EventKinds.OperationFinished, key, active.Host.MountPoint, $"{Operations.Grow} {key} failed: {e.Message}", Operations.Grow, ok: false);
                throw;
            }
        }
        finally
        {
            Release(key);
        }
    }

    private static GrowResultInfo GrowInfo(string key, Admin.GrowPlan p, ulong deviceBlocks, ulong smallest, ulong freeBefore, ulong freeAfter, bool dryRun, bool online, string message) => new()
    {
        Source = key, DryRun = dryRun, Online = online, Written = !dryRun && p.Changes, BlockSize = (int)p.BlockSize,
        OldDataBlocks = p.OldDataBlocks, NewDataBlocks = p.NewDataBlocks, OldAgCount = p.OldAgCount, NewAgCount = p.NewAgCount, AgBlocks = p.AgBlocks,
        DeviceBlocks = deviceBlocks, SmallestBlocks = smallest, FreeBlocksBefore = freeBefore, FreeBlocksAfter = freeAfter, Message = message,
    };

    /// <summary>
    /// Replays a dirty log onto the device and marks it clean (what Linux does at mount), or with
    /// <paramref name="dryRun"/> in memory only. Refused while the volume is mounted.
    /// </summary>
    public RecoverResult Recover(string source, bool dryRun, IProgress<double>? progress)
    {
        string key = Normalize(source);
        return RunExclusive(key, Operations.Recover, () => RecoverClaimed(key, dryRun, progress), r => r.Message);
    }

    /// <summary>
    /// Makes a new XFS volume on <paramref name="source"/> (an image file, made when it does not
    /// exist and <see cref="FormatOptions.DataSize"/> is given; a block device; a partition) as
    /// <c>xfswin mkfs</c> does. A target holding a file system or partition table is refused with
    /// <see cref="ErrorCodes.NotEmpty"/>, naming it, unless <see cref="FormatOptions.Force"/>. A dry
    /// run writes nothing and reports the geometry and what the target holds.
    /// </summary>
    public FormatResult Format(string source, FormatOptions format, IProgress<MkfsProgress>? progress)
    {
        ArgumentNullException.ThrowIfNull(format);
        string key = Normalize(source);
        var options = ToMkfsOptions(key, format);
        return RunExclusive(key, Operations.Format, () => FormatClaimed(key, options, progress), r => r.DryRun ? null : r.Message);
    }

    private static MkfsOptions ToMkfsOptions(string key, FormatOptions f)
    {
        try
        {
            var sizes = new MkfsOptions { BlockSize = f.BlockSize, SectorSize = f.SectorSize };
            return new MkfsOptions
            {
                Target = key, Label = f.Label, BlockSize = f.BlockSize, SectorSize = f.SectorSize, InodeSize = f.InodeSize,
                Crc = f.Crc, Finobt = f.Finobt, Rmapbt = f.Rmapbt, Reflink = f.Reflink, Bigtime = f.Bigtime, InobtCount = f.Inobtcount,
                Metadir = f.Metadir, Nrext64 = f.Nrext64, SparseInodes = f.Sparse, Exchange = f.Exchange, Parent = f.Parent,
                AgCount = f.Agcount,
                LogSizeBytes = f.LogSize is { } log ? MkfsOptionParser.ParseSize("log size", log, sizes) : null,
                DataSizeBytes = f.DataSize is { } data ? MkfsOptionParser.ParseSize("data size", data, sizes) : null,
                Force = f.Force, DryRun = f.DryRun,
            };
        }
        catch (MkfsUsageException e)
        {
            throw new ControlException(ErrorCodes.BadRequest, $"format {key}: {e.Message}");
        }
    }

    private FormatResult FormatClaimed(string key, MkfsOptions options, IProgress<MkfsProgress>? progress)
    {
        MkfsPlan plan;
        try
        {
            plan = MkfsRun.Plan(options);
            if (!options.DryRun) MkfsRun.Write(plan, progress, DateTimeOffset.UtcNow);
        }
        catch (MkfsUsageException e)
        {
            throw new ControlException(ErrorCodes.BadRequest, $"format {key}: {e.Message}");
        }
        catch (MkfsRefusedException e)
        {
            throw new ControlException(ErrorCodes.NotEmpty, $"{key} holds {e.Found}; nothing was written. Set force to overwrite it.");
        }
        catch (XfsException e) when (e.Error == XfsError.NotFound)
        {
            throw new ControlException(ErrorCodes.NotFound, e.Message);
        }
        catch (DirectoryNotFoundException e)
        {
            throw new ControlException(ErrorCodes.NotFound, $"{key}: {e.Message}");
        }
        if (!options.DryRun && !plan.Data.Exists)
            lock (_gate)
                if (!_formatted.Contains(plan.Data.Path)) _formatted.Add(plan.Data.Path);
        var g = plan.Geometry;
        long size = (long)(g.DataBlocks * (ulong)g.BlockSize);
        string made = $"an XFS volume{(g.Label.Length > 0 ? $" labelled '{g.Label}'" : "")} of {size >> 20} MiB ({g.AgCount} allocation groups, {g.BlockSize}-byte blocks)";
        string message = options.DryRun
            ? $"{key}: dry run: would make {made}; " + (plan.Data.Existing is { } existing ? $"this destroys {existing}." : plan.Data.Exists ? "nothing recognisable is on it." : "the image file would be created.") + " Nothing was written."
            : $"{key}: made {made}" + (plan.Data.Existing is { } was ? $", replacing {was}." : ".");
        var features = new List<string> { "crc" };
        void Feature(bool on, string name)
        {
            if (on) features.Add(name);
        }
        Feature(g.Finobt, "finobt");
        Feature(g.SparseInodes, "sparse");
        Feature(g.Rmapbt, "rmapbt");
        Feature(g.Reflink, "reflink");
        Feature(g.Bigtime, "bigtime");
        Feature(g.InobtCount, "inobtcount");
        Feature(g.Nrext64, "nrext64");
        Feature(g.Exchange, "exchange");
        Feature(g.Parent, "parent");
        Feature(g.Metadir, "metadir");
        return new FormatResult
        {
            Source = key, DryRun = options.DryRun, Written = !options.DryRun, Existing = plan.Data.Existing, TargetExists = plan.Data.Exists,
            Label = g.Label, Uuid = g.Uuid, SizeBytes = size, BlockSize = g.BlockSize, SectorSize = g.SectorSize, InodeSize = g.InodeSize,
            Agcount = g.AgCount, AgBlocks = g.AgBlocks, LogBlocks = g.LogBlocks, Features = features,
            Summary = MkfsSummary.Format(g, key), Message = message,
        };
    }

    /// <summary>
    /// Checks <paramref name="source"/>'s metadata as <c>xfs_repair -n</c> does (changes nothing; a
    /// dirty log is replayed in memory first). Problems are values in the result, not errors; an
    /// error means the source is not XFS or cannot be read.
    /// </summary>
    public CheckResult Check(string source, IProgress<CheckProgress>? progress)
    {
        string key = Normalize(source);
        return RunExclusive(key, Operations.Check, () => CheckClaimed(key, progress), r => r.Message);
    }

    private static CheckResult CheckClaimed(string key, IProgress<CheckProgress>? progress)
    {
        CheckReport report;
        try
        {
            report = VolumeChecker.Check(key, new CheckOptions { Progress = progress });
        }
        catch (XfsException e) when (e.Error == XfsError.NotFound || e is { Error: XfsError.IoError, InnerException: FileNotFoundException or DirectoryNotFoundException })
        {
            throw new ControlException(ErrorCodes.NotFound, e.Message);
        }
        catch (Exception e) when (e is FileNotFoundException or DirectoryNotFoundException)
        {
            throw new ControlException(ErrorCodes.NotFound, $"{key} does not exist: {e.Message}");
        }
        string message = report.IsClean
            ? $"{key}: clean, no problems found."
            : $"{key}: {report.ProblemCount} problem(s) found. Nothing was changed. To repair, run xfs_repair on it from Linux.";
        var s = report.Summary;
        return new CheckResult
        {
            Source = key, Clean = report.IsClean, ProblemCount = report.ProblemCount,
            Problems = [.. report.Problems.Select(p => new CheckProblemInfo { Structure = p.Structure, Ag = p.Ag, Daddr = p.Daddr, Message = p.Message })],
            Notes = report.Notes,
            AgCount = s?.AgCount ?? 0, InodesInUse = s?.InUseInodes ?? 0, Directories = s?.Directories ?? 0,
            FreeBlocks = s?.FreeBlocksCounted ?? 0, LogState = s?.LogState ?? "", ElapsedSeconds = s?.ElapsedSeconds ?? 0,
            Message = message,
        };
    }

    private static RecoverResult RecoverClaimed(string key, bool dryRun, IProgress<double>? progress)
    {
        IBlockDevice data;
        try
        {
            data = PartitionSpec.Open(key, writable: !dryRun);
        }
        catch (FileNotFoundException e)
        {
            throw new ControlException(ErrorCodes.NotFound, $"{key} does not exist: {e.Message}");
        }
        using (data)
        {
            var sector = new byte[Math.Max(4096, data.SectorSize)];
            data.Read(0, sector.AsSpan(0, (int)Math.Min(sector.Length, data.Length)));
            var check = Superblock.Verify(sector);
            if (!check.IsOk)
                throw new XfsException(XfsError.NotXfs, $"{key} does not hold a usable XFS superblock ({check}); nothing was written");
            var sb = Superblock.Decode(sector);
            if (sb.LogStart == 0)
                throw new ControlException(ErrorCodes.VolumeError,
                    $"{key} has an external log: recover it with 'xfswin recover {key} --log-device LOGDEV'. Nothing was written.");
            LogRecoveryResult result;
            if (dryRun)
            {
                // A dry run says up front what the write gate would refuse.
                var refusal = WriteGate.Check(sector, WritePurpose.LogRecovery);
                if (refusal is not null)
                    throw new ControlException(ErrorCodes.VolumeError, $"{key}: recovery would be refused: {refusal.Message}");
                result = LogRecovery.Recover(data, null, sb, LogReplayMode.Memory, progress);
            }
            else
            {
                // Everything that writes passes the write gate first; it refuses before a byte is written.
                using var access = WriteGate.Admit(data, null, WritePurpose.LogRecovery);
                result = InPlaceRecovery.Run(access, progress);
            }
            progress?.Report(1.0);
            try
            {
                string before = result.State == LogState.Clean ? "clean" : "dirty";
                long toWrite = result.Device is OverlayDevice o ? o.DirtyBytes : 0;
                string message;
                if (result.State == LogState.Clean) message = $"{key}: the log is clean; there is nothing to recover.";
                else if (dryRun)
                {
                    // What follows the replay (intents to finish, inodes to free) is refused only where this build cannot do it.
                    string? refused = result.State == LogState.ReplayedInMemory
                        ? InPlaceRecovery.Refusal(result.Device, LogRecovery.ReadReplayedSuperblock(result.Device), result.PendingIntents, result.UnlinkedInodes)
                        : null;
                    bool followUp = result.PendingIntents.Count > 0 || result.UnlinkedInodes > 0;
                    message = refused is not null
                        ? $"{key}: dry run: in-place recovery would be refused ({refused}); mount it once with Linux instead. Nothing was written."
                        : $"{key}: dry run: recovery would write {toWrite / 1024} KiB of metadata" +
                          (followUp ? ", finish what the log left through the log," : "") + " and mark the log clean. Nothing was written.";
                }
                else message = $"{key}: recovered: the replayed metadata and what finished the log's work are on the device, and the log is marked clean.";
                return new RecoverResult
                {
                    Source = key, LogStateBefore = before, DryRun = dryRun,
                    Written = !dryRun && result.State != LogState.Clean,
                    TransactionsReplayed = result.TransactionsReplayed, LogBytesReplayed = result.LogBytesReplayed,
                    BytesToWrite = toWrite, UnlinkedInodes = result.UnlinkedInodes,
                    UnfinishedIntents = result.UnfinishedIntents, Warnings = result.Warnings, Message = message,
                };
            }
            finally
            {
                if (!ReferenceEquals(result.Device, data)) (result.Device as IDisposable)?.Dispose();
            }
        }
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0) return;
        _healthTimer.Dispose();
        UnmountAll();
    }
}


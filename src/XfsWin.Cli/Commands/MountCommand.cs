using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;
using XfsWin.Cli.Native;
using XfsWin.Fuse;
using XfsWin.Journal;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin mount SOURCE MOUNTPOINT</c>: serves an XFS volume (image, disk or partition) through
/// FUSE on Linux, read-only unless <c>-o rw</c> asks for read-write. By default it returns once the volume is mounted and keeps serving in a
/// detached background process; <c>-f</c> keeps it in the foreground. Unmount with
/// <c>fusermount3 -u MOUNTPOINT</c> (or umount, or SIGINT/SIGTERM to the serving process).
/// </summary>
public static class MountCommand
{
    /// <summary>Set in the environment of the background process the command re-executes.</summary>
    internal const string ChildEnvironmentVariable = "XFSWIN_MOUNT_SERVE";

    /// <summary>The line the background process prints on stdout once the mount is up.</summary>
    internal const string ReadyMarker = "xfswin-mount-ready";

    /// <summary>Prefixes the child's line about the transport, which the parent prints after the mount's.</summary>
    internal const string TransportMarker = "xfswin-mount-transport: ";

    public const string Usage = """
        Usage: xfswin mount [options] SOURCE MOUNTPOINT

        Mounts the XFS volume in SOURCE (an image file, a disk or a partition; 'disk.img@2' picks
        partition 2) on MOUNTPOINT through FUSE (Linux, needs fuse3), read-only unless -o rw.
        Unmount with 'fusermount3 -u MOUNTPOINT' (a read-write volume is then left clean).

        Options:
          -o OPTIONS            comma-separated mount options:
                                  ro                   read-only (the default)
                                  rw                   read-write: a log Linux left dirty is replayed
                                                       onto the volume first; a volume with a feature
                                                       XfsWin cannot keep consistent mounts read-only
                                  logdev=PATH          the external log device (volumes made with
                                                       mkfs -l logdev=...)
                                  log=PATH             append the server's messages (requests that
                                                       failed on a damaged or unreadable volume,
                                                       warnings) to PATH, with the time: a server
                                                       in the background has no terminal for them
                                  allow_other          let other users see the mount
                                  default_permissions  let the kernel enforce file modes
                                  uid=N, gid=N         show every file as owned by N
                                  attr_timeout=S       seconds the kernel caches attributes (3600; rw: 1)
                                  entry_timeout=S      seconds the kernel caches names (3600; rw: 1)
                                  max_threads=N        worker threads (default 2 x CPUs, at least 4)
                                  clone_fd             one /dev/fuse descriptor per worker
                                  readdirplus=yes|no   attributes with listings (default no)
                                  read_ahead_kb=N      kernel readahead for the mount (4096; as root)
                                  io_uring=yes|no      FUSE over io_uring when the kernel offers it
                                                       (default yes; root enables it in the kernel with
                                                       'echo Y > /sys/module/fuse/parameters/enable_uring')
                                  io_uring_depth=N     requests in flight per CPU with io_uring (default 4)
                                  sync_interval=S      rw: seconds between the server's own syncs, which
                                                       make durable what nobody fsynced (default 30, as
                                                       the kernel's XFS; 0: only fsync, sync and unmount)
                                  attr_fork=create|first  rw: new files, directories and device nodes
                                                       get their attribute fork when created (default,
                                                       as current kernels) or with their first
                                                       attribute (as Linux 6.1): which kernel's on-disk
                                                       shapes new inodes follow; both are valid XFS
                                  debug                libfuse's request trace (implies -f)
                                others are passed to libfuse as they are
          --allow-other, --default-permissions, --uid N, --gid N   same as the -o forms
          --replay=memory|place|none
                                what to do with a log Linux left dirty: replay it in memory only
                                (default), replay it onto the device ('place'), or ignore it
                                (read-only mounts; -o rw always replays it onto the device)
          -f, --foreground      keep serving in this process (Ctrl-C unmounts)
          -d, --debug           same as -o debug
          -h, --help            this text
        """;

    /// <summary>
    /// Where SOURCE and the drive letter stand in a Windows mount command line (options may come before and
    /// after them: <c>-o rw IMG X:</c>), or null when the mount point is not a drive letter.
    /// </summary>
    public static int? WindowsPositionals(IReadOnlyList<string> args)
    {
        for (int i = 1; i < args.Count; i++)
        {
            if (!XfsWin.Driver.WindowsMount.IsDriveLetter(args[i]) || args[i - 1].StartsWith('-')) continue;
            // The source must not be the value of an option ("-o rw" then "X:" is not a source).
            if (i >= 2 && !args[i - 2].Contains('=') && XfsWin.Driver.MountOptions.TakesValue(args[i - 2])) continue;
            return i - 1;
        }
        return null;
    }

    public static int Run(string[] args)
    {
        // Windows: `xfswin mount [-o rw] SOURCE X: [driver options]` goes to the WinFsp host.
        if (OperatingSystem.IsWindows() && WindowsPositionals(args) is int at)
        {
            XfsWin.Driver.MountOptions options;
            try
            {
                options = XfsWin.Driver.MountOptions.Parse([.. args[..at], .. args[(at + 2)..]]);
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine($"xfswin mount: {e.Message}");
                return 2;
            }
            return XfsWin.Driver.WindowsMount.Run(args[at], args[at + 1], options);
        }

        MountArguments parsed;
        try
        {
            parsed = MountArguments.Parse(args);
        }
        catch (ArgumentException e)
        {
            Console.Error.WriteLine($"xfswin mount: {e.Message}");
            Console.Error.WriteLine("Run 'xfswin mount --help' for the options.");
            return 2;
        }
        if (parsed.Help)
        {
            Console.Out.WriteLine(Usage);
            return 0;
        }

        try
        {
            FuseHost.EnsureAvailable();
        }
        catch (FuseUnavailableException e)
        {
            Console.Error.WriteLine($"xfswin mount: {e.Message}");
            return 1;
        }
        if (!Directory.Exists(parsed.MountPoint))
        {
            Console.Error.WriteLine($"xfswin mount: mount point '{parsed.MountPoint}' does not exist or is not a directory: create it with 'mkdir -p {parsed.MountPoint}'.");
            return 1;
        }

        var isChild = Environment.GetEnvironmentVariable(ChildEnvironmentVariable) == "1";
        if (!parsed.Foreground && !isChild)
            return StartInBackground(args, parsed);
        return Serve(parsed, isChild);
    }

    /// <summary>Opens the volume, mounts it and serves requests until it is unmounted.</summary>
    private static int Serve(MountArguments parsed, bool isChild)
    {
        if (isChild)
        {
            // Leave the terminal's session so its hang-up or Ctrl-C do not reach the server, and
            // do not hold the caller's working directory busy.
            _ = setsid();
            Directory.SetCurrentDirectory("/");
        }

        using var log = new ServerLog(Console.Error);
        if (parsed.LogFile is not null)
        {
            try
            {
                log.Open(parsed.LogFile);
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                Console.Error.WriteLine($"xfswin mount: cannot open the log file '{parsed.LogFile}': {e.Message}");
                return 1;
            }
        }

        XfsVolume volume;
        try
        {
            volume = XfsVolume.Open(parsed.Source, parsed.ReadWrite
                ? new VolumeOpenOptions { Writable = true, LogDevice = parsed.LogDevice, SyncInterval = parsed.SyncInterval, AttrForkAtCreate = parsed.AttrForkAtCreate }
                : new VolumeOpenOptions { Writable = false, Replay = parsed.Replay, LogDevice = parsed.LogDevice });
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException)
        {
            Console.Error.WriteLine($"xfswin mount: cannot open '{parsed.Source}': {e.Message}");
            return 1;
        }

        using (volume)
        {
            try
            {
                // The background child reports on stdout, which its parent reads in order up to the
                // ready line (its stderr is forwarded asynchronously and could lag behind).
                var report = isChild ? Console.Out : Console.Error;
                foreach (var warning in volume.Info.Warnings)
                    report.WriteLine($"xfswin mount: warning: {warning}");
                if (parsed.ReadWrite && volume.IsReadOnly)
                {
                    report.WriteLine("xfswin mount: mounting read-only although 'rw' was asked for:");
                    foreach (var reason in volume.Info.ReadOnlyReasons)
                        report.WriteLine($"xfswin mount:   {reason}");
                }
            }
            catch (XfsException e)
            {
                Console.Error.WriteLine($"xfswin mount: cannot read the volume's description: {e.Message}");
                return 1;
            }

            var writable = parsed.ReadWrite && !volume.IsReadOnly;
            using var host = new FuseHost(volume, parsed.ToHostOptions(writable), log);
            try
            {
                host.Mount(parsed.MountPoint);
            }
            catch (Exception e) when (e is FuseMountException or FuseUnavailableException)
            {
                Console.Error.WriteLine($"xfswin mount: {e.Message}");
                return 1;
            }

            // A read-write mount takes control requests (xfswin grow MOUNTPOINT) on a socket named after its mount point.
            IDisposable? control = null;
            if (writable)
            {
                try
                {
                    control = MountControl.Serve(parsed.MountPoint, volume, log);
                }
                catch (Exception e) when (e is IOException or UnauthorizedAccessException or System.Net.Sockets.SocketException)
                {
                    log.WriteLine($"xfswin mount: warning: no control socket ({e.Message}): xfswin grow cannot reach this mount");
                }
            }
            using var controlScope = control;

            void Stop(PosixSignalContext context)
            {
                context.Cancel = true;
                host.RequestUnmount();
            }
            // A shell without job control starts background commands with SIGINT ignored, and .NET
            // then leaves it ignored. A mount server is asked to stop, not interrupted from a terminal,
            // so "kill -INT" must unmount however the server was started.
            if (OperatingSystem.IsLinux())
                Posix.StopIgnoring(Posix.SIGINT);
            using var sigint = PosixSignalRegistration.Create(PosixSignal.SIGINT, Stop);
            using var sigterm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, Stop);
            using var sighup = PosixSignalRegistration.Create(PosixSignal.SIGHUP, Stop);

            // Serve on another thread, so that the transport (known once FUSE_INIT is answered) is
            // reported with the mount.
            var rc = 0;
            Exception? failure = null;
            var loop = new Thread(() =>
            {
                try
                {
                    rc = host.Run();
                }
                catch (Exception e)
                {
                    failure = e;
                }
            }) { Name = "xfswin-session" };
            loop.Start();
            // Returns once FUSE_INIT is answered; the limit only bounds a kernel that never sends it.
            var notice = host.WaitForTransport(TimeSpan.FromSeconds(60)) ? host.TransportNotice() : null;
            if (isChild)
            {
                // The parent prints the mount's line, then this one (see StartInBackground).
                if (notice is not null)
                    Console.Out.WriteLine(TransportMarker + notice);
                Console.Out.WriteLine(ReadyMarker + (writable ? " rw" : " ro"));
                Console.Out.Flush();
            }
            else
            {
                Console.Error.WriteLine($"xfswin: {parsed.Source} mounted {(writable ? "read-write" : "read-only")} on {parsed.MountPoint}; Ctrl-C or 'fusermount3 -u {parsed.MountPoint}' unmounts.");
                if (notice is not null)
                    Console.Error.WriteLine(notice);
            }

            log.FileOnly($"xfswin: {parsed.Source} mounted {(writable ? "read-write" : "read-only")} on {parsed.MountPoint}");
            loop.Join();
            log.FileOnly(failure is null && rc == 0
                ? $"xfswin: {parsed.MountPoint} unmounted"
                : $"xfswin: the server of {parsed.MountPoint} stops: {failure?.Message ?? $"the FUSE session ended with error {rc}"}");
            if (failure is not null)
                System.Runtime.ExceptionServices.ExceptionDispatchInfo.Throw(failure);
            if (rc != 0)
            {
                Console.Error.WriteLine($"xfswin mount: the FUSE session ended with error {rc}.");
                return 1;
            }
            return 0;
        }
    }

    /// <summary>
    /// .NET cannot fork, so background mode re-executes this program with the same command line
    /// (the environment variable tells it to serve), detached in its own session, and returns once
    /// the child reports the mount is up, or with the child's error.
    /// </summary>
    private static int StartInBackground(string[] args, MountArguments parsed)
    {
        var psi = new ProcessStartInfo(Environment.ProcessPath ?? throw new InvalidOperationException("cannot find this program's path"))
        {
            UseShellExecute = false,
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        foreach (var a in ReExecArguments(args, parsed))
            psi.ArgumentList.Add(a);
        psi.Environment[ChildEnvironmentVariable] = "1";
        // The server lives long and its first requests are the ones people time (ls right after
        // mounting): have every method compiled optimized at once rather than first through the
        // quick tier (bench/fuse-vs-kernel.sh: a cold listing of 1M entries 0.57 s instead of 0.8 s).
        // A value already set by the user wins.
        if (!psi.Environment.ContainsKey("DOTNET_TieredCompilation"))
            psi.Environment["DOTNET_TieredCompilation"] = "0";

        Process started;
        try
        {
            started = Process.Start(psi)!;
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            Console.Error.WriteLine($"xfswin: cannot start the background server ({psi.FileName}: {e.Message}); mount in the foreground with -f instead.");
            return 1;
        }
        using var child = started;
        child.StandardInput.Close();
        child.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
                Console.Error.WriteLine(e.Data);
        };
        child.BeginErrorReadLine();
        string? line;
        string? notice = null;
        while ((line = child.StandardOutput.ReadLine()) is not null)
        {
            if (line.StartsWith(ReadyMarker, StringComparison.Ordinal))
            {
                var how = line.EndsWith(" rw", StringComparison.Ordinal) ? "read-write" : "read-only";
                Console.Error.WriteLine($"xfswin: {parsed.Source} mounted {how} on {parsed.MountPoint} (server pid {child.Id}); unmount with 'fusermount3 -u {parsed.MountPoint}'.");
                if (notice is not null)
                    Console.Error.WriteLine(notice);
                return 0;
            }
            if (line.StartsWith(TransportMarker, StringComparison.Ordinal))
                notice = line[TransportMarker.Length..];
            else
                Console.Error.WriteLine(line);
        }
        child.WaitForExit(); // also waits for the forwarded stderr to be complete
        return child.ExitCode != 0 ? child.ExitCode : 1;
    }

    /// <summary>
    /// The command line for the background process: whatever preceded this command's arguments on
    /// our own command line (the program, the verb), then the arguments with SOURCE and MOUNTPOINT
    /// made absolute (the server changes directory to /).
    /// </summary>
    internal static List<string> ReExecArguments(string[] args, MountArguments parsed)
    {
        var all = Environment.GetCommandLineArgs();
        var result = new List<string>();
        var processName = Path.GetFileNameWithoutExtension(Environment.ProcessPath ?? "");
        // all[0] is the entry assembly; under 'dotnet xfswin.dll' the host needs it as its first argument.
        if (processName == "dotnet")
            result.Add(all[0]);
        var prefix = Math.Max(1, all.Length - args.Length);
        for (var i = 1; i < prefix; i++)
            result.Add(all[i]);
        foreach (var a in args)
        {
            if (a == parsed.RawSource)
                result.Add(parsed.Source);
            else if (a == parsed.RawMountPoint)
                result.Add(parsed.MountPoint);
            else
                result.Add(a);
        }
        return result;
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int setsid();
}

/// <summary>The parsed command line of <c>xfswin mount</c>.</summary>
internal sealed class MountArguments
{
    public string Source { get; private set; } = "";
    public string MountPoint { get; private set; } = "";
    public string RawSource { get; private set; } = "";
    public string RawMountPoint { get; private set; } = "";
    public bool Help { get; private set; }
    public bool Foreground { get; private set; }
    public bool Debug { get; private set; }
    public bool AllowOther { get; private set; }
    public bool DefaultPermissions { get; private set; }
    public bool CloneFd { get; private set; }
    public bool ReaddirPlus { get; private set; }
    public bool IoUring { get; private set; } = true;
    public int? IoUringDepth { get; private set; }
    public int ReadAheadKiB { get; private set; } = 4096;
    public uint? Uid { get; private set; }
    public uint? Gid { get; private set; }
    /// <summary>-o rw: open the volume read-write.</summary>
    public bool ReadWrite { get; private set; }
    public double? AttributeTimeout { get; private set; }
    public double? EntryTimeout { get; private set; }
    public int? MaxThreads { get; private set; }
    public LogReplayMode Replay { get; private set; } = LogReplayMode.Memory;
    /// <summary>-o logdev=PATH: the external log device of a volume made with mkfs -l logdev=.</summary>
    public string? LogDevice { get; private set; }
    public TimeSpan SyncInterval { get; private set; } = new VolumeOpenOptions().SyncInterval;
    public bool AttrForkAtCreate { get; private set; } = new VolumeOpenOptions().AttrForkAtCreate;
    public List<string> ExtraOptions { get; } = [];
    /// <summary>-o log=PATH: the server's messages are appended to this file (full path) once the mount is up.</summary>
    public string? LogFile { get; private set; }

    /// <summary>
    /// Kernel cache timeouts when none is given. Read-only: long, nothing changes. Read-write: a
    /// second, as libfuse's default: every change goes through the mount and the kernel updates its
    /// copies, but an engine side effect the host does not invalidate heals within a second.
    /// </summary>
    internal const double ReadOnlyTimeout = 3600, ReadWriteTimeout = 1;

    public FuseMountOptions ToHostOptions(bool writable = false)
    {
        var fallback = writable ? ReadWriteTimeout : ReadOnlyTimeout;
        var o = new FuseMountOptions
        {
            ReadOnly = !writable,
            AllowOther = AllowOther,
            DefaultPermissions = DefaultPermissions,
            UidOverride = Uid,
            GidOverride = Gid,
            AttributeTimeout = AttributeTimeout ?? fallback,
            EntryTimeout = EntryTimeout ?? fallback,
            FileSystemName = Source,
            Debug = Debug,
            CloneFd = CloneFd,
            ReaddirPlus = ReaddirPlus,
            ReadAheadKiB = ReadAheadKiB,
            IoUring = IoUring,
            ExtraOptions = ExtraOptions,
        };
        if (IoUringDepth is { } depth)
            o = o with { IoUringQueueDepth = depth };
        return MaxThreads is { } n ? o with { MaxThreads = n } : o;
    }

    /// <summary>Parses the arguments; throws <see cref="ArgumentException"/> with a user-facing message.</summary>
    public static MountArguments Parse(IReadOnlyList<string> args)
    {
        var m = new MountArguments();
        var positional = new List<string>();
        for (var i = 0; i < args.Count; i++)
        {
            var a = args[i];
            string Next(string option) =>
                i + 1 < args.Count ? args[++i] : throw new ArgumentException($"{option} needs a value.");
            switch (a)
            {
                case "-h" or "--help":
                    m.Help = true;
                    break;
                case "-f" or "--foreground":
                    m.Foreground = true;
                    break;
                case "-d" or "--debug":
                    m.Debug = true;
                    m.Foreground = true;
                    break;
                case "--allow-other":
                    m.AllowOther = true;
                    break;
                case "--default-permissions":
                    m.DefaultPermissions = true;
                    break;
                case "--uid":
                    m.Uid = ParseId(Next(a), "--uid");
                    break;
                case "--gid":
                    m.Gid = ParseId(Next(a), "--gid");
                    break;
                case "-o":
                    m.ApplyOptions(Next(a));
                    break;
                case "--replay":
                    m.Replay = ParseReplay(Next(a));
                    break;
                case "--":
                    positional.AddRange(args.Skip(i + 1));
                    i = args.Count;
                    break;
                default:
                    if (a.StartsWith("--replay=", StringComparison.Ordinal))
                        m.Replay = ParseReplay(a["--replay=".Length..]);
                    else if (a.StartsWith("-o", StringComparison.Ordinal) && a.Length > 2)
                        m.ApplyOptions(a[2..]);
                    else if (a.StartsWith('-') && a.Length > 1)
                        throw new ArgumentException($"unknown option '{a}'.");
                    else
                        positional.Add(a);
                    break;
            }
        }
        if (m.Help)
            return m;
        if (positional.Count != 2)
            throw new ArgumentException(positional.Count < 2
                ? "give the volume to mount (SOURCE) and where to mount it (MOUNTPOINT)."
                : $"too many arguments: '{string.Join(' ', positional.Skip(2))}'.");
        m.RawSource = positional[0];
        m.RawMountPoint = positional[1];
        m.Source = Path.GetFullPath(positional[0]);
        m.MountPoint = Path.GetFullPath(positional[1]);
        return m;
    }

    private void ApplyOptions(string list)
    {
        foreach (var raw in list.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
        {
            var eq = raw.IndexOf('=', StringComparison.Ordinal);
            var key = eq < 0 ? raw : raw[..eq];
            var value = eq < 0 ? null : raw[(eq + 1)..];
            string Value() => value ?? throw new ArgumentException($"-o {key} needs a value ({key}=...).");
            bool YesOrNo() => Value() switch
            {
                "yes" => true,
                "no" => false,
                _ => throw new ArgumentException($"{key} takes yes or no, not '{value}'."),
            };
            switch (key)
            {
                case "ro":
                    ReadWrite = false;
                    break;
                case "logdev":
                    LogDevice = Value();
                    break;
                case "log":
                    LogFile = Path.GetFullPath(Value());
                    break;
                case "rw":
                    ReadWrite = true;
                    break;
                case "allow_other":
                    AllowOther = true;
                    break;
                case "default_permissions":
                    DefaultPermissions = true;
                    break;
                case "uid":
                    Uid = ParseId(Value(), "uid");
                    break;
                case "gid":
                    Gid = ParseId(Value(), "gid");
                    break;
                case "attr_timeout":
                    AttributeTimeout = ParseSeconds(Value(), key);
                    break;
                case "entry_timeout":
                    EntryTimeout = ParseSeconds(Value(), key);
                    break;
                case "max_threads":
                    MaxThreads = int.TryParse(Value(), NumberStyles.None, CultureInfo.InvariantCulture, out var n) && n is > 0 and <= 1024
                        ? n
                        : throw new ArgumentException($"max_threads must be a number from 1 to 1024, not '{value}'.");
                    break;
                case "clone_fd":
                    CloneFd = true;
                    break;
                case "read_ahead_kb":
                    ReadAheadKiB = int.TryParse(Value(), NumberStyles.None, CultureInfo.InvariantCulture, out var kb) && kb <= 1 << 20
                        ? kb
                        : throw new ArgumentException($"read_ahead_kb must be a number of KiB (0 keeps the kernel's default), not '{value}'.");
                    break;
                case "readdirplus":
                    ReaddirPlus = YesOrNo();
                    break;
                case "follow_caller":
                    throw new ArgumentException("-o follow_caller is not an option of xfswin mount: the scheduler places the server's threads. Drop it.");
                case "io_uring":
                    IoUring = YesOrNo();
                    break;
                case "io_uring_depth":
                    IoUringDepth = int.TryParse(Value(), NumberStyles.None, CultureInfo.InvariantCulture, out var depth) && depth is > 0 and <= 64
                        ? depth
                        : throw new ArgumentException($"io_uring_depth must be a number from 1 to 64, not '{value}'.");
                    break;
                case "sync_interval":
                    SyncInterval = int.TryParse(Value(), NumberStyles.None, CultureInfo.InvariantCulture, out var seconds) && seconds <= 86400
                        ? TimeSpan.FromSeconds(seconds)
                        : throw new ArgumentException($"sync_interval must be a number of seconds from 0 (off) to 86400, not '{value}'.");
                    break;
                case "attr_fork":
                    AttrForkAtCreate = Value() switch
                    {
                        "create" => true,
                        "first" => false,
                        _ => throw new ArgumentException($"attr_fork is 'create' or 'first', not '{value}'."),
                    };
                    break;
                case "debug":
                    Debug = true;
                    Foreground = true;
                    break;
                case "fsname" or "subtype":
                    throw new ArgumentException($"-o {key} is set by xfswin itself.");
                default:
                    ExtraOptions.Add(raw);
                    break;
            }
        }
    }

    private static uint ParseId(string s, string what) =>
        uint.TryParse(s, NumberStyles.None, CultureInfo.InvariantCulture, out var id)
            ? id
            : throw new ArgumentException($"{what} must be a numeric user or group id, not '{s}'.");

    private static double ParseSeconds(string s, string what) =>
        double.TryParse(s, NumberStyles.Float, CultureInfo.InvariantCulture, out var d) && d >= 0 && double.IsFinite(d)
            ? d
            : throw new ArgumentException($"{what} must be a number of seconds, not '{s}'.");

    private static LogReplayMode ParseReplay(string s) => s switch
    {
        "memory" => LogReplayMode.Memory,
        "place" or "in-place" => LogReplayMode.InPlace,
        "none" => LogReplayMode.None,
        _ => throw new ArgumentException($"--replay takes memory, place or none, not '{s}'."),
    };
}

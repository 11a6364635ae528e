using System.Runtime.InteropServices;
using XfsWin.Cli.Service;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin service</c>: the XfsWin service on Linux, in the foreground. It listens on the control
/// channel's Unix socket (root or the same user only), lists the configured images and the
/// machine's disks, mounts and unmounts through FUSE in this process, and unmounts everything when
/// stopped (SIGINT, SIGTERM, SIGHUP).
/// </summary>
public static class ServiceCommand
{
    public const string Usage = """
        Usage: xfswin service [options]

        Runs the XfsWin service in the foreground: the control channel that `xfswin manage` and other
        tools use to list, mount, unmount and recover XFS volumes. Stop it with Ctrl-C or SIGTERM:
        everything it mounted is unmounted first.

        Options:
          --socket PATH     the control socket (default /run/xfswin/control.sock; mode 0600)
          --config FILE     statements 'source PATH', 'mount SOURCE DIR', 'scan yes|no', 'socket PATH'
                            (default /etc/xfswin/service.conf when it exists)
          --source PATH     also list this image file or device (repeatable)
          --mount SOURCE DIR  mount SOURCE at DIR when starting (repeatable)
          --no-scan         list only the configured sources, not the machine's disks
          -h, --help        this text
        """;

    /// <summary>The line printed once the channel accepts clients (tests and scripts wait for it).</summary>
    public const string ReadyPrefix = "xfswin service: listening on ";

    public static int Run(string[] args)
    {
        string? socket = null, configPath = null;
        var sources = new List<string>();
        var mounts = new List<AutoMount>();
        bool? scan = null;
        for (int i = 0; i < args.Length; i++)
        {
            string Next() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            try
            {
                switch (args[i])
                {
                    case "--socket": socket = Next(); break;
                    case "--config": configPath = Next(); break;
                    case "--source": sources.Add(Next()); break;
                    case "--mount":
                        string src = Next(), dir = Next();
                        mounts.Add(new AutoMount(src, Path.GetFullPath(dir), 0));
                        break;
                    case "--no-scan": scan = false; break;
                    case "-h" or "--help":
                        Console.Out.WriteLine(Usage);
                        return 0;
                    default:
                        throw new ArgumentException($"unexpected argument '{args[i]}'");
                }
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine($"xfswin service: {e.Message}");
                Console.Error.WriteLine("Run 'xfswin service --help' for the options.");
                return 2;
            }
        }

        ServiceConfiguration config = new();
        string? file = configPath ?? (File.Exists(ServiceConfiguration.DefaultPath) ? ServiceConfiguration.DefaultPath : null);
        if (file is not null)
        {
            try
            {
                // Its mount lines are what every local user may mount through the service (running as root): only its
                // owner may change it.
                var mode = OperatingSystem.IsWindows() ? UnixFileMode.None : File.GetUnixFileMode(file);
                if ((mode & (UnixFileMode.GroupWrite | UnixFileMode.OtherWrite)) != 0)
                    throw new IOException($"other users may change it (mode {Convert.ToString((int)mode, 8)}); make it writable by its owner only (chmod go-w)");
                config = ServiceConfiguration.Parse(File.ReadAllText(file));
            }
            catch (Exception e) when (e is FormatException or IOException or UnauthorizedAccessException)
            {
                Console.Error.WriteLine($"xfswin service: {file}: {e.Message}");
                return 2;
            }
        }
        var options = new ServerOptions
        {
            Sources = [.. config.Sources, .. sources],
            ScanDevices = scan ?? config.ScanDevices,
            ServerName = "xfswin service",
            // Configured mounts mount read-only; any local user may mount and unmount them (docs/service.md).
            ConfiguredMounts = [.. config.Mounts.Concat(mounts).Select(m => new ConfiguredMount(m.Source, m.MountPoint, ReadWrite: false, m.Line))],
        };
        return RunServer(socket ?? config.Socket ?? ControlEndpoint.DefaultSocketPath, options);
    }

    private static int RunServer(string socketPath, ServerOptions options)
    {
        var log = Console.Error;
        IControlListener listener;
        try
        {
            // Every local user may connect; what each may do is decided per request (AccessPolicy).
            listener = ControlEndpoint.Listen(socketPath, ListenerAccess.LocalUsers);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or System.Net.Sockets.SocketException)
        {
            log.WriteLine($"xfswin service: cannot listen on {socketPath}: {e.Message}");
            return 1;
        }

        using var stop = new ManualResetEventSlim();
        void Stop(PosixSignalContext context)
        {
            context.Cancel = true;
            stop.Set();
        }
        if (OperatingSystem.IsLinux()) Native.Posix.StopIgnoring(Native.Posix.SIGINT);
        using var sigint = PosixSignalRegistration.Create(PosixSignal.SIGINT, Stop);
        using var sigterm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, Stop);
        using var sighup = PosixSignalRegistration.Create(PosixSignal.SIGHUP, Stop);

        using var volumes = new VolumeManager(options, new FuseMountBackend(log));
        using var logEvents = volumes.Subscribe(e => log.WriteLine($"xfswin service: {e.Kind}: {e.Message}"));
        var server = new ControlServer(listener, volumes, options, log.WriteLine);
        int failures = 0;
        try
        {
            foreach (var m in options.ConfiguredMounts)
            {
                try
                {
                    volumes.MountConfigured(m);
                }
                catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException or ArgumentException or XfsWin.Control.ControlException)
                {
                    failures++;
                    log.WriteLine($"xfswin service: cannot mount {m.Source} at {m.MountPoint}{(m.Line > 0 ? $" (config line {m.Line})" : "")}: {e.Message}");
                }
            }
            server.Start();
            Console.Out.WriteLine(ReadyPrefix + server.Address);
            Console.Out.Flush();
            stop.Wait();
            log.WriteLine("xfswin service: stopping; unmounting everything it mounted.");
        }
        finally
        {
            server.DisposeAsync().AsTask().GetAwaiter().GetResult();
            volumes.UnmountAll();
        }
        return failures == 0 ? 0 : 1;
    }
}

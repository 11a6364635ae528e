using System.Runtime.Versioning;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Hosting.WindowsServices;
using Microsoft.Extensions.Logging;
using XfsWin.Driver;
using XfsWin.Service;

if (!OperatingSystem.IsWindows())
{
    Console.Error.WriteLine("xfswin-service hosts WinFsp mounts and runs on Windows only. On Linux, use 'xfswin mount SOURCE DIR' (FUSE).");
    return 2;
}
return ServiceProgram.Run(args);

[SupportedOSPlatform("windows")]
internal static class ServiceProgram
{
    public const string ServiceName = "XfsWin";

    private const string Usage = """
        usage:
          xfswin-service launch SOURCE MOUNTPOINT [options]   run one mount (what the WinFsp launcher starts)
          xfswin-service service                              run as the XfsWin Windows service (mounts.conf, control pipe)
          xfswin-service console                              run the service in this console (Ctrl+C stops it)
          xfswin-service register                             register with the WinFsp launcher and the event log
          xfswin-service unregister
        mount options: see docs/windows.md (--case-insensitive, --replay=place, --partition N, ...)
        """;

    public static int Run(string[] args)
    {
        if (args.Length == 0)
        {
            // The SCM starts services without arguments.
            if (WindowsServiceHelpers.IsWindowsService()) return RunHost(args);
            Console.Error.WriteLine(Usage);
            return 2;
        }
        try
        {
            switch (args[0])
            {
                case "launch":
                    var rest = LauncherRegistration.LaunchArguments(args.Skip(1));
                    if (rest.Length < 2) { Console.Error.WriteLine(Usage); return 2; }
                    var options = MountOptions.Parse(rest[2..]);
                    EventLogWriter.Info(1, $"Mounting {rest[0]} at {rest[1]} for the WinFsp launcher.");
                    int code = WindowsMount.Run(rest[0], rest[1], options);
                    EventLogWriter.Info(2, $"Unmounted {rest[1]} (exit code {code}).");
                    return code;
                case "service":
                    return WindowsServiceHelpers.IsWindowsService() ? RunHost([]) : Fail("not started by the service control manager; use 'console' to run interactively");
                case "console":
                    return RunHost([]);
                case "register":
                    string exe = Environment.ProcessPath ?? throw new InvalidOperationException("cannot tell where xfswin-service.exe is");
                    LauncherRegistration.Register(exe);
                    EventLogWriter.EnsureSource();
                    Console.WriteLine($"Registered HKLM\\{LauncherRegistration.KeyPath}. Start a mount with:");
                    Console.WriteLine("  launchctl-x64 start xfswin NAME C:\\path\\volume.img X: [options]");
                    return 0;
                case "unregister":
                    LauncherRegistration.Unregister();
                    Console.WriteLine($"Removed HKLM\\{LauncherRegistration.KeyPath}.");
                    return 0;
                default:
                    Console.Error.WriteLine(Usage);
                    return 2;
            }
        }
        catch (Exception e) when (e is ArgumentException or FormatException or UnauthorizedAccessException or IOException)
        {
            return Fail(e.Message);
        }
    }

    /// <summary>
    /// Runs the service through Microsoft.Extensions.Hosting: as the "XfsWin" Windows service when the
    /// SCM started the process (stop and shutdown end it; the worker unmounts everything first), in
    /// the console otherwise (Ctrl+C). Logs go to the Application event log under "XfsWin".
    /// </summary>
    private static int RunHost(string[] args)
    {
        var builder = Host.CreateApplicationBuilder(args);
        builder.Services.AddWindowsService(o => o.ServiceName = ServiceName);
        builder.Services.Configure<HostOptions>(o => o.ShutdownTimeout = TimeSpan.FromSeconds(60));
        builder.Logging.AddEventLog(s => { s.SourceName = EventLogWriter.Source; s.LogName = "Application"; });
        builder.Services.AddHostedService<ServiceWorker>();
        builder.Build().Run();
        return 0;
    }

    private static int Fail(string message)
    {
        Console.Error.WriteLine($"xfswin-service: {message}");
        return 1;
    }
}

using System.Runtime.Versioning;
using XfsWin;
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
    private const string Usage = """
        usage:
          xfswin-service launch SOURCE MOUNTPOINT [options]   run one mount (what the WinFsp launcher starts)
          xfswin-service service                              run as the XfsWin Windows service (mounts.conf)
          xfswin-service console                              run the mounts.conf mounts in this console
          xfswin-service register                             register with the WinFsp launcher and the event log
          xfswin-service unregister
        mount options: see docs/windows.md (--case-insensitive, --replay=place, --partition N, ...)
        """;

    public static int Run(string[] args)
    {
        if (args.Length == 0)
        {
            // The SCM starts services without arguments.
            if (ServiceControl.TryRun(RunTable)) return 0;
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
                    return ServiceControl.TryRun(RunTable) ? 0 : Fail("not started by the service control manager; use 'console' to run interactively");
                case "console":
                    using (var cts = new CancellationTokenSource())
                    {
                        Console.CancelKeyPress += (_, e) => { e.Cancel = true; cts.Cancel(); };
                        return RunTable(cts.Token);
                    }
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

    private static int Fail(string message)
    {
        Console.Error.WriteLine($"xfswin-service: {message}");
        return 1;
    }

    /// <summary>Mounts everything in mounts.conf, keeps them until stopped, then unmounts each cleanly.</summary>
    private static int RunTable(CancellationToken stop)
    {
        string path = MountTable.DefaultPath;
        if (!File.Exists(path))
        {
            EventLogWriter.Error(10, $"No mount table at {path}. Create it with lines 'SOURCE MOUNTPOINT [options]'.");
            return 1;
        }
        var sessions = new List<MountSession>();
        int failures = 0;
        try
        {
            foreach (var entry in MountTable.Parse(File.ReadAllText(path)))
            {
                try
                {
                    var session = WindowsMount.Start(entry.Source, entry.MountPoint, entry.Options);
                    sessions.Add(session);
                    EventLogWriter.Info(3, $"Mounted {entry.Source} at {session.MountPoint} (read-only).");
                    foreach (var w in session.Info.Warnings) EventLogWriter.Warning(4, $"{entry.Source}: {w}");
                }
                catch (Exception e) when (e is XfsException or IOException or UnauthorizedAccessException or DllNotFoundException)
                {
                    failures++;
                    EventLogWriter.Error(5, $"Cannot mount {entry.Source} at {entry.MountPoint} (mounts.conf line {entry.Line}): {e.Message}");
                }
            }
            var stopped = sessions.Select(s => (Task)s.Stopped).Append(Task.Delay(Timeout.Infinite, stop)).ToArray();
            while (!stop.IsCancellationRequested && sessions.Count > 0)
            {
                int index = Task.WaitAny(stopped, CancellationToken.None);
                if (index < sessions.Count) EventLogWriter.Warning(6, $"WinFsp stopped serving {sessions[index].Source} at {sessions[index].MountPoint}.");
                stopped[index] = Task.Delay(Timeout.Infinite, stop);
            }
            return failures == 0 ? 0 : 1;
        }
        finally
        {
            foreach (var s in sessions)
            {
                string where = s.MountPoint;
                s.Dispose();
                EventLogWriter.Info(7, $"Unmounted {s.Source} from {where}.");
            }
        }
    }
}

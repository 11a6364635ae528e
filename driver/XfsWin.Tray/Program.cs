using System.Runtime.Versioning;
using XfsWin.Control;
using XfsWin.Control.Transport;
using XfsWin.Tray;
using XfsWin.Tray.Win32;

if (!OperatingSystem.IsWindows())
{
    Console.Error.WriteLine("xfswin-tray is the Windows notification-area app of the XfsWin service. On Linux, use 'xfswin manage'.");
    return 2;
}
return TrayProgram.Run(args);

[SupportedOSPlatform("windows")]
internal static class TrayProgram
{
    /// <summary>Passed to the elevated copy "Restart as administrator" starts: it waits for this one to exit.</summary>
    public const string RestartedArgument = "--restarted";

    /// <summary>
    /// Runs only the management UI (no icon): <c>xfswin manage</c> as a child, shown in a WebView2 window (or the
    /// default browser) until closed. The tray starts it elevated for what needs an administrator.
    /// <c>--log FILE</c> appends what it did there (the CI reads it).
    /// </summary>
    public const string ManagementArgument = "--management";

    public static int Run(string[] args)
    {
        string exe = Environment.ProcessPath ?? throw new InvalidOperationException("cannot tell where xfswin-tray.exe is");
        if (args.Contains(ManagementArgument))
        {
            int log = Array.IndexOf(args, "--log");
            return RunManagement(exe, log >= 0 && log + 1 < args.Length ? args[log + 1] : null);
        }
        // One tray per session: a second start (the Run key and a Start menu click) just exits.
        using var single = new Mutex(initiallyOwned: true, @"Local\XfsWin.Tray", out bool first);
        if (!first && !(args.Contains(RestartedArgument) && WaitForPrevious(single))) return 0;
        using var window = new TrayWindow();
        var host = new WindowsTrayHost(window, exe);
        using var manage = ManageLauncher.Installed(Path.GetDirectoryName(exe)!);
        var controller = new TrayController(ct => ControlClient.ConnectAsync(ControlEndpoint.DefaultPipeName, ct), host, manage);
        controller.Start();
        try
        {
            window.Run(controller);
        }
        finally
        {
            controller.DisposeAsync().AsTask().GetAwaiter().GetResult();
        }
        return 0;
    }

    private static int RunManagement(string exe, string? logFile)
    {
        void Log(string line)
        {
            if (logFile is null) return;
            try { File.AppendAllText(logFile, $"{DateTime.UtcNow:O} {line}{Environment.NewLine}"); }
            catch (IOException) { /* diagnostics only */ }
        }
        using var manage = ManageLauncher.Installed(Path.GetDirectoryName(exe)!);
        string url;
        try
        {
            url = manage.UrlAsync().GetAwaiter().GetResult();
        }
        catch (IOException e)
        {
            Log($"xfswin manage did not start: {e.Message}");
            NativeMethods.MessageBoxW(0, $"The management UI could not start: {e.Message}", ManagementView.WindowTitle, Win32Constants.MB_OK | Win32Constants.MB_ICONERROR);
            return 1;
        }
        var versions = WebView2Runtime.InstalledVersions();
        var kind = ManagementView.Choose(url, versions);
        Log($"management UI at {url[..url.IndexOf('/', 7)]}/…; WebView2 runtime versions: {string.Join(", ", versions.Select(v => v ?? "-"))}; view: {kind}");
        if (kind == ManagementViewKind.WebView2Window)
        {
            var folder = ManagementView.UserDataFolder(Environment.GetFolderPath(Environment.SpecialFolder.LocalApplicationData));
            if (ManagementWindow.RunOnStaThread(url, folder, hwnd => Log($"window {hwnd:X} created"), out var failure))
            {
                Log("window closed");
                return 0;
            }
            Log($"WebView2 did not start ({failure}); using the default browser");
        }
        // The browser shows it while this process keeps xfswin manage running: until the user says stop.
        try
        {
            using var browser = System.Diagnostics.Process.Start(new System.Diagnostics.ProcessStartInfo(url) { UseShellExecute = true });
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            Log($"no browser: {e.Message}");
        }
        NativeMethods.MessageBoxW(0, $"The XfsWin management UI is open in your browser at\n{url}\n\nClick OK to stop it.",
            ManagementView.WindowTitle, Win32Constants.MB_OK | Win32Constants.MB_ICONINFORMATION);
        return 0;
    }

    private static bool WaitForPrevious(Mutex single)
    {
        try
        {
            return single.WaitOne(TimeSpan.FromSeconds(30));
        }
        catch (AbandonedMutexException)
        {
            // The previous tray exited without releasing it: ownership passed to us all the same.
            return true;
        }
    }
}

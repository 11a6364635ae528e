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

    public static int Run(string[] args)
    {
        string exe = Environment.ProcessPath ?? throw new InvalidOperationException("cannot tell where xfswin-tray.exe is");
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

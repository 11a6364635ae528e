using System.Diagnostics;
using System.Runtime.Versioning;
using Microsoft.Win32;

namespace XfsWin.Tray.Win32;

/// <summary>
/// The desktop side of the tray on Windows: balloons through the icon, Explorer, the management UI (a WebView2 window
/// or the default browser), UAC for the elevated management UI, the HKCU Run key.
/// </summary>
[SupportedOSPlatform("windows")]
internal sealed class WindowsTrayHost(TrayWindow window, string executablePath) : ITrayHost
{
    public void Notify(Balloon balloon) => window.Notify(balloon);

    public void OpenFolder(string path) => ShellOpen("explorer.exe", path);

    private nint _managementWindow;

    /// <summary>
    /// A WebView2 window on a thread of its own when the runtime is installed (a second request brings the open one to
    /// the front), the default browser otherwise or when WebView2 fails to start.
    /// </summary>
    public void ShowManagement(string url)
    {
        if (ManagementView.Choose(url, WebView2Runtime.InstalledVersions()) == ManagementViewKind.Browser)
        {
            ShellOpen(url, null);
            return;
        }
        nint open = Volatile.Read(ref _managementWindow);
        if (open != 0 && NativeMethods.SetForegroundWindow(open)) return;
        var folder = ManagementView.UserDataFolder(Environment.GetFolderPath(Environment.SpecialFolder.LocalApplicationData));
        var thread = new Thread(() =>
        {
            bool shown = ManagementWindow.Run(url, folder, hwnd => Volatile.Write(ref _managementWindow, hwnd), out _);
            Volatile.Write(ref _managementWindow, 0);
            if (!shown) ShellOpen(url, null);
        })
        { Name = "XfsWin management window", IsBackground = true };
        thread.SetApartmentState(ApartmentState.STA);
        thread.Start();
    }

    /// <summary>This program again, elevated, in its management mode (<see cref="TrayProgram.ManagementArgument"/>).</summary>
    public bool OpenManagementAsAdministrator()
    {
        try
        {
            using var p = Process.Start(new ProcessStartInfo(executablePath, TrayProgram.ManagementArgument) { UseShellExecute = true, Verb = "runas" });
            return p is not null;
        }
        catch (System.ComponentModel.Win32Exception)
        {
            // The user declined the UAC prompt.
            return false;
        }
    }

    private static void ShellOpen(string target, string? argument)
    {
        try
        {
            var psi = new ProcessStartInfo(target) { UseShellExecute = true };
            if (argument is not null) psi.ArgumentList.Add(argument);
            using var p = Process.Start(psi);
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            throw new IOException($"could not open {argument ?? target}: {e.Message}", e);
        }
    }

    public string? ChooseMountPoint(TrayVolume volume, IReadOnlyList<string> suggested) =>
        MountPointChoice.NextFreeDriveLetter(suggested, DriveInfo.GetDrives().Select(d => d.Name[0]));

    public bool StartAtLogon
    {
        get
        {
            using var key = Registry.CurrentUser.OpenSubKey(Tray.StartAtLogon.RunKey);
            return Tray.StartAtLogon.Starts(key?.GetValue(Tray.StartAtLogon.ValueName) as string, executablePath);
        }
        set
        {
            using var key = Registry.CurrentUser.CreateSubKey(Tray.StartAtLogon.RunKey, writable: true);
            if (value) key.SetValue(Tray.StartAtLogon.ValueName, Tray.StartAtLogon.CommandLine(executablePath), RegistryValueKind.String);
            else key.DeleteValue(Tray.StartAtLogon.ValueName, throwOnMissingValue: false);
        }
    }

    public bool RestartAsAdministrator()
    {
        try
        {
            using var p = Process.Start(new ProcessStartInfo(executablePath, TrayProgram.RestartedArgument) { UseShellExecute = true, Verb = "runas" });
            return p is not null;
        }
        catch (System.ComponentModel.Win32Exception)
        {
            // The user declined the UAC prompt: keep running as before.
            return false;
        }
    }

    public void Exit() => window.PostExit();
}

using System.Diagnostics;
using System.Runtime.Versioning;
using Microsoft.Win32;

namespace XfsWin.Tray.Win32;

/// <summary>The desktop side of the tray on Windows: balloons through the icon, Explorer, the default browser, the HKCU Run key.</summary>
[SupportedOSPlatform("windows")]
internal sealed class WindowsTrayHost(TrayWindow window, string executablePath) : ITrayHost
{
    public void Notify(Balloon balloon) => window.Notify(balloon);

    public void OpenFolder(string path) => ShellOpen("explorer.exe", path);

    public void OpenUrl(string url) => ShellOpen(url, null);

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

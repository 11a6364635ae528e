namespace XfsWin.Tray;

/// <summary>
/// "Start at logon": a value under the current user's Run key. The MSI writes the same value at
/// install (installer/XfsWin.wxs) and removes it at uninstall; the menu item turns it on and off.
/// </summary>
public static class StartAtLogon
{
    public const string RunKey = @"Software\Microsoft\Windows\CurrentVersion\Run";

    public const string ValueName = "XfsWin Tray";

    /// <summary>The command line Windows runs at logon: the quoted full path of xfswin-tray.exe.</summary>
    public static string CommandLine(string executablePath)
    {
        if (!Path.IsPathFullyQualified(executablePath))
            throw new ArgumentException($"the Run key needs the full path of xfswin-tray.exe, not '{executablePath}'");
        return $"\"{executablePath}\"";
    }

    /// <summary>Whether a Run value starts this executable (the path compared without quotes and case).</summary>
    public static bool Starts(string? runValue, string executablePath)
    {
        if (string.IsNullOrWhiteSpace(runValue)) return false;
        var v = runValue.Trim();
        string path = v.StartsWith('"') ? v[1..Math.Max(1, v.IndexOf('"', 1))] : v.Split(' ')[0];
        return string.Equals(Path.GetFullPath(path), Path.GetFullPath(executablePath), StringComparison.OrdinalIgnoreCase);
    }
}

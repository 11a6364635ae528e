using System.Runtime.Versioning;

namespace XfsWin.Service;

public enum RegistryValueKind { String, DWord }

public readonly record struct LauncherValue(string Name, RegistryValueKind Kind, object Value);

/// <summary>
/// The WinFsp Launcher entry that lets <c>launchctl-x64 start xfswin INSTANCE SOURCE X: [options]</c>
/// run <c>xfswin-service launch SOURCE X: [options]</c> as LocalSystem, in a job the launcher stops
/// with Ctrl+Break. The values are computed here (tested on any OS) and written by <see cref="Register"/>;
/// the MSI (installer/XfsWin.wxs) writes the same key and values, which MsiTests compares with these.
/// </summary>
public static class LauncherRegistration
{
    public const string ClassName = "xfswin";

    /// <summary>HKLM, 64-bit view: where WinFsp's launcher (a 32-bit-registry reader) looks for service classes.</summary>
    public const string ServicesKey = @"SOFTWARE\WOW6432Node\WinFsp\Services";

    public const string KeyPath = ServicesKey + @"\" + ClassName;

    /// <summary>
    /// Start/stop/query (RP WP LC) for LocalSystem and Administrators only: the launcher runs mounts as
    /// LocalSystem and a source may be a raw disk, so ordinary users must not start them.
    /// </summary>
    public const string DefaultSecurity = "D:P(A;;RPWPLC;;;SY)(A;;RPWPLC;;;BA)";

    /// <summary>%1..%9 are the arguments after the instance name; the launcher puts the executable first itself.</summary>
    public const string CommandLine = "launch %1 %2 %3 %4 %5 %6 %7 %8 %9";

    public static IReadOnlyList<LauncherValue> Values(string executablePath, string security = DefaultSecurity)
    {
        if (!Path.IsPathFullyQualified(executablePath))
            throw new ArgumentException($"the launcher needs the full path of xfswin-service.exe, not '{executablePath}'");
        return
        [
            new("Executable", RegistryValueKind.String, executablePath),
            new("CommandLine", RegistryValueKind.String, CommandLine),
            // Ends in a separator, as the MSI's [INSTALLDIR] does (installer/XfsWin.wxs writes the same values).
            new("WorkDirectory", RegistryValueKind.String, Path.GetDirectoryName(executablePath)! + Path.DirectorySeparatorChar),
            new("Security", RegistryValueKind.String, security),
            new("JobControl", RegistryValueKind.DWord, 1),
        ];
    }

    /// <summary>Drops the empty arguments the launcher passes for unused %N (it quotes every substitution).</summary>
    public static string[] LaunchArguments(IEnumerable<string> args) => [.. args.Where(a => a.Length > 0)];

    [SupportedOSPlatform("windows")]
    public static void Register(string executablePath, string security = DefaultSecurity)
    {
        using var hklm = Microsoft.Win32.RegistryKey.OpenBaseKey(Microsoft.Win32.RegistryHive.LocalMachine, Microsoft.Win32.RegistryView.Registry64);
        using var key = hklm.CreateSubKey(KeyPath, writable: true)
            ?? throw new UnauthorizedAccessException($"cannot create HKLM\\{KeyPath}: run as Administrator");
        foreach (var v in Values(executablePath, security))
            key.SetValue(v.Name, v.Value, v.Kind == RegistryValueKind.DWord ? Microsoft.Win32.RegistryValueKind.DWord : Microsoft.Win32.RegistryValueKind.String);
    }

    [SupportedOSPlatform("windows")]
    public static void Unregister()
    {
        using var hklm = Microsoft.Win32.RegistryKey.OpenBaseKey(Microsoft.Win32.RegistryHive.LocalMachine, Microsoft.Win32.RegistryView.Registry64);
        hklm.DeleteSubKeyTree(KeyPath, throwOnMissingSubKey: false);
    }
}

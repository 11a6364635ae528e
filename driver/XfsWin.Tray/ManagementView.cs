namespace XfsWin.Tray;

/// <summary>Where the management UI appears.</summary>
public enum ManagementViewKind
{
    /// <summary>A window of the tray's own, WebView2 (Microsoft Edge's engine) hosted in a plain Win32 window.</summary>
    WebView2Window,
    /// <summary>The default browser, when the WebView2 runtime is not installed (or fails to start).</summary>
    Browser,
}

/// <summary>
/// The decisions around the management UI's window, platform-neutral: whether the WebView2 runtime is installed (from
/// the versions its installer records), which address may be shown, which navigations stay in the window, and where
/// WebView2 keeps its profile. The Win32 side (<c>Win32/ManagementWindow</c>) only acts on them.
/// </summary>
public static class ManagementView
{
    /// <summary>The Evergreen WebView2 Runtime's client under EdgeUpdate; its value "pv" is the installed version.</summary>
    public const string RuntimeClient = @"Microsoft\EdgeUpdate\Clients\{F3017226-FE2A-4295-8BDF-00C3A9A7E4C5}";

    /// <summary>
    /// Where an installed runtime records "pv" (Microsoft's documented check): per machine on 64-bit Windows (the
    /// 32-bit view), per machine on 32-bit Windows, and per user.
    /// </summary>
    public static readonly IReadOnlyList<(bool PerMachine, string Key)> RuntimeKeys =
    [
        (true, @"SOFTWARE\WOW6432Node\" + RuntimeClient),
        (true, @"SOFTWARE\" + RuntimeClient),
        (false, @"Software\" + RuntimeClient),
    ];

    public const string WindowTitle = "XfsWin";

    /// <summary>A "pv" value that means installed: a version other than 0.0.0.0 (what an uninstall may leave behind).</summary>
    public static bool IsInstalledVersion(string? pv) =>
        Version.TryParse(pv, out var v) && (v.Major | v.Minor | Math.Max(0, v.Build) | Math.Max(0, v.Revision)) != 0;

    /// <summary>
    /// The view for <paramref name="url"/>: a WebView2 window when one of <paramref name="runtimeVersions"/> (the "pv"
    /// values found under <see cref="RuntimeKeys"/>) is an installed version, the default browser otherwise.
    /// Only <c>xfswin manage</c>'s own address (with its token) is ever shown: anything else is refused.
    /// </summary>
    public static ManagementViewKind Choose(string url, IEnumerable<string?> runtimeVersions)
    {
        ArgumentNullException.ThrowIfNull(runtimeVersions);
        if (!ManageLauncher.IsAddress(url))
            throw new ArgumentException($"'{url}' is not the management UI's address (http://127.0.0.1:PORT/TOKEN/)", nameof(url));
        return runtimeVersions.Any(IsInstalledVersion) ? ManagementViewKind.WebView2Window : ManagementViewKind.Browser;
    }

    /// <summary>
    /// Whether a navigation of the window to <paramref name="target"/> stays in it: only pages of the management UI
    /// itself (same scheme, host and port, under the token's path). Anything else (a link out) opens in the default
    /// browser instead, so the window never becomes a browser with the UI's privileges around it.
    /// </summary>
    public static bool StaysInWindow(string managementUrl, string? target)
    {
        if (target is null || !Uri.TryCreate(managementUrl, UriKind.Absolute, out var home) || !Uri.TryCreate(target, UriKind.Absolute, out var to))
            return false;
        return to.Scheme == home.Scheme && to.Host == home.Host && to.Port == home.Port &&
               to.AbsolutePath.StartsWith(home.AbsolutePath, StringComparison.Ordinal);
    }

    /// <summary>
    /// Where WebView2Loader.dll for <paramref name="architecture"/> sits, relative to Microsoft.Web.WebView2.Core.dll
    /// (the package's runtimes/win-ARCH/native layout, which a publish keeps).
    /// </summary>
    public static string LoaderFolder(System.Runtime.InteropServices.Architecture architecture) => Path.Combine("runtimes", architecture switch
    {
        System.Runtime.InteropServices.Architecture.X64 => "win-x64",
        System.Runtime.InteropServices.Architecture.Arm64 => "win-arm64",
        System.Runtime.InteropServices.Architecture.X86 => "win-x86",
        var other => throw new PlatformNotSupportedException($"WebView2 has no loader for {other}"),
    }, "native");

    /// <summary>
    /// WebView2's profile folder: under the user's local application data (the runtime cannot write next to the
    /// program in Program Files, its default).
    /// </summary>
    public static string UserDataFolder(string localApplicationData) => Path.Combine(localApplicationData, "XfsWin", "WebView2");
}

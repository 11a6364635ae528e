namespace XfsWin.Tray;

/// <summary>
/// What the tray's logic needs from the desktop: the Windows shell implements it with Explorer, the
/// default browser, balloons and the registry; tests implement it by recording what was asked.
/// </summary>
public interface ITrayHost
{
    /// <summary>Shows <paramref name="balloon"/> (from any thread).</summary>
    void Notify(Balloon balloon);

    /// <summary>Opens a folder (a mounted drive) in the file manager.</summary>
    void OpenFolder(string path);

    /// <summary>
    /// Shows the management UI at <paramref name="url"/> (<c>xfswin manage</c>'s address with its token): in a WebView2
    /// window when the WebView2 runtime is installed, otherwise in the default browser (<see cref="ManagementView"/>).
    /// </summary>
    void ShowManagement(string url);

    /// <summary>
    /// Starts the management UI elevated, in a process of its own (one UAC prompt): what needs an administrator.
    /// False when it did not start (the user declined the prompt).
    /// </summary>
    bool OpenManagementAsAdministrator();

    /// <summary>
    /// Where to mount <paramref name="volume"/>, given the service's suggestions; null when nothing is
    /// free (the Windows shell: <see cref="MountPointChoice.NextFreeDriveLetter"/>).
    /// </summary>
    string? ChooseMountPoint(TrayVolume volume, IReadOnlyList<string> suggested);

    bool StartAtLogon { get; set; }

    /// <summary>Starts this program again elevated (UAC) and returns true when it did; the caller then exits.</summary>
    bool RestartAsAdministrator();

    /// <summary>Ends the tray (from any thread).</summary>
    void Exit();
}

using XfsWin.Control.Protocol;

namespace XfsWin.Tray;

public enum BalloonIcon { Info, Warning, Error }

/// <summary>A balloon notification: Windows shows at most 63 characters of title and 255 of text.</summary>
public sealed record Balloon(string Title, string Text, BalloonIcon Icon);

/// <summary>The balloon for each service event and for what the tray itself has to say.</summary>
public static class Notifications
{
    /// <summary>NOTIFYICONDATAW.szInfoTitle holds 64 UTF-16 units including the terminator.</summary>
    public const int MaxTitle = 63;

    /// <summary>NOTIFYICONDATAW.szInfo holds 256 UTF-16 units including the terminator.</summary>
    public const int MaxText = 255;

    /// <summary>
    /// The balloon for <paramref name="e"/>; <paramref name="volumes"/> gives the volume's label when the
    /// tray knows it. Kinds this tray does not know still show, with the server's own message.
    /// </summary>
    public static Balloon For(ControlEvent e, IReadOnlyList<TrayVolume> volumes)
    {
        var known = volumes.FirstOrDefault(v => v.Source == e.Source);
        string name = known?.Name ?? (e.Source is { } s ? TrayVolume.DisplaySource(s) : "XfsWin");
        var (title, text, icon) = e.Kind switch
        {
            EventKinds.Mounted => ($"{name} mounted", $"{name} is mounted read-only at {e.MountPoint}.", BalloonIcon.Info),
            EventKinds.Unmounted => ($"{name} unmounted", e.Message, BalloonIcon.Info),
            EventKinds.VolumeReadOnly => ($"{name} dropped to read-only",
                $"Corruption found: {e.Message}. Copy your files off and run xfs_repair on Linux.", BalloonIcon.Warning),
            EventKinds.OperationFinished => ($"{OperationName(e.Op)} {(e.Ok ? "finished" : "failed")}: {name}", e.Message, e.Ok ? BalloonIcon.Info : BalloonIcon.Error),
            _ => (name, e.Message, e.Ok ? BalloonIcon.Info : BalloonIcon.Warning),
        };
        return Make(title, text, icon);
    }

    public static Balloon ServiceLost() =>
        Make("XfsWin service stopped", "The tray reconnects as soon as the XfsWin service runs again.", BalloonIcon.Warning);

    public static Balloon CommandFailed(TrayCommand command, string message) =>
        Make($"{CommandName(command.Kind)} failed", message, BalloonIcon.Error);

    public static Balloon Make(string title, string text, BalloonIcon icon) => new(Fit(title, MaxTitle), Fit(text, MaxText), icon);

    /// <summary><paramref name="text"/> cut to <paramref name="max"/> UTF-16 units, ending in "…" when cut (never inside a surrogate pair).</summary>
    public static string Fit(string text, int max)
    {
        if (text.Length <= max) return text;
        int cut = max - 1;
        if (char.IsHighSurrogate(text[cut - 1])) cut--;
        return string.Concat(text.AsSpan(0, cut), "…");
    }

    private static string OperationName(string? op) => op switch
    {
        Operations.Recover => "Log recovery",
        "check" => "Check",
        "format" => "Format",
        "grow" => "Grow",
        null => "Operation",
        _ => op,
    };

    private static string CommandName(TrayCommandKind kind) => kind switch
    {
        TrayCommandKind.Mount => "Mount",
        TrayCommandKind.Unmount => "Unmount",
        TrayCommandKind.Recover => "Recovery",
        TrayCommandKind.OpenMountPoint => "Opening the drive",
        TrayCommandKind.OpenManagement => "Opening the management UI",
        TrayCommandKind.OpenManagementAsAdministrator => "Opening the management UI as administrator",
        TrayCommandKind.ToggleStartAtLogon => "Changing start at logon",
        TrayCommandKind.RestartAsAdministrator => "Restarting as administrator",
        _ => kind.ToString(),
    };
}

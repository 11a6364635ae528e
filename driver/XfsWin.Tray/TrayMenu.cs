using XfsWin.Control.Protocol;

namespace XfsWin.Tray;

public enum TrayCommandKind
{
    Mount,
    Unmount,
    Recover,
    OpenMountPoint,
    OpenManagement,
    /// <summary>The management UI in a process of its own, elevated (one UAC prompt): for what needs an administrator.</summary>
    OpenManagementAsAdministrator,
    ToggleStartAtLogon,
    Reconnect,
    RestartAsAdministrator,
    Exit,
}

/// <summary>What a menu item does; <see cref="Source"/> and <see cref="MountPoint"/> name the volume it acts on.</summary>
public sealed record TrayCommand(TrayCommandKind Kind, string? Source = null, string? MountPoint = null);

/// <summary>
/// One entry of the notification icon's menu. A separator has neither text nor command; an entry
/// with <see cref="Children"/> is a submenu; an entry without a command is shown greyed.
/// </summary>
public sealed record TrayMenuItem(string Text, TrayCommand? Command = null, bool Checked = false, IReadOnlyList<TrayMenuItem>? Children = null)
{
    public static readonly TrayMenuItem Separator = new("");

    public bool IsSeparator => Text.Length == 0;

    public bool Enabled => Command is not null || Children is { Count: > 0 };
}

/// <summary>How the tray reaches the service right now.</summary>
public enum TrayConnection
{
    Connecting,
    Connected,
    /// <summary>No service answers (not installed, stopped, restarting).</summary>
    ServiceNotRunning,
    /// <summary>The control pipe refused this user (an account that is neither interactive nor an administrator, or an older service).</summary>
    AccessDenied,
}

/// <summary>Everything the menu and the icon's tooltip are built from; replaced whole on every change.</summary>
public sealed record TraySnapshot(
    TrayConnection Connection,
    string Status,
    IReadOnlyList<TrayVolume> Volumes,
    IReadOnlyList<string> Operations,
    bool StartAtLogon)
{
    public static TraySnapshot Initial(bool startAtLogon) =>
        new(TrayConnection.Connecting, "connecting to the XfsWin service", [], [], startAtLogon);

    /// <summary>
    /// Whether the service treats this user as an administrator (its hello says so): otherwise the menu offers only
    /// what a user may do (mount and unmount configured volumes) and sends the rest to the elevated management UI.
    /// </summary>
    public bool Administrator { get; init; } = true;

    /// <summary>The icon's tooltip (Windows shows at most 127 characters).</summary>
    public string Tooltip
    {
        get
        {
            string text = Connection switch
            {
                TrayConnection.Connected => $"XfsWin: {Volumes.Count(v => v.MountPoint is not null)} of {Volumes.Count} volume(s) mounted",
                _ => $"XfsWin: {Status}",
            };
            return Notifications.Fit(text, 127);
        }
    }

    /// <summary>Whether something needs the user's attention (the icon shows a warning).</summary>
    public bool NeedsAttention => Connection != TrayConnection.Connected || Volumes.Any(v => v.State is VolumeState.Corrupt or VolumeState.NeedsRepair);
}

/// <summary>Builds the notification icon's menu from a snapshot: no I/O, the same snapshot always gives the same menu.</summary>
public static class TrayMenu
{
    public const string OpenManagementText = "Open the management UI";
    public const string OpenManagementAsAdministratorText = "Open the management UI as administrator";
    /// <summary>The suffix of a volume command that needs an administrator: it opens the elevated management UI.</summary>
    public const string AsAdministrator = " (as administrator)…";
    public const string StartAtLogonText = "Start at logon";
    public const string ExitText = "Exit";

    public static IReadOnlyList<TrayMenuItem> Build(TraySnapshot s)
    {
        var items = new List<TrayMenuItem> { new(HeaderText(s)), TrayMenuItem.Separator };
        if (s.Connection == TrayConnection.Connected)
        {
            if (s.Volumes.Count == 0) items.Add(new("No XFS volumes found"));
            foreach (var v in s.Volumes) items.Add(VolumeItem(v, s.Operations, s.Administrator));
            items.Add(TrayMenuItem.Separator);
        }
        items.Add(new(OpenManagementText, s.Connection == TrayConnection.Connected ? new(TrayCommandKind.OpenManagement) : null));
        if (s.Connection == TrayConnection.Connected && !s.Administrator)
            items.Add(new(OpenManagementAsAdministratorText, new(TrayCommandKind.OpenManagementAsAdministrator)));
        if (s.Connection == TrayConnection.AccessDenied)
            items.Add(new("Restart as administrator", new(TrayCommandKind.RestartAsAdministrator)));
        if (s.Connection is TrayConnection.ServiceNotRunning or TrayConnection.AccessDenied)
            items.Add(new("Reconnect now", new(TrayCommandKind.Reconnect)));
        items.Add(new(StartAtLogonText, new(TrayCommandKind.ToggleStartAtLogon), Checked: s.StartAtLogon));
        items.Add(TrayMenuItem.Separator);
        items.Add(new(ExitText, new(TrayCommandKind.Exit)));
        return items;
    }

    private static string HeaderText(TraySnapshot s) => s.Connection switch
    {
        TrayConnection.Connected => $"XfsWin: {s.Status}",
        TrayConnection.AccessDenied => "XfsWin: the service refused this user",
        TrayConnection.ServiceNotRunning => "XfsWin: the service is not running",
        _ => "XfsWin: connecting…",
    };

    /// <summary>
    /// A volume's submenu. A user who is not an administrator gets Mount and Unmount for the volumes an administrator
    /// configured; for other volumes, and for Recover, the item opens the management UI as administrator instead.
    /// </summary>
    private static TrayMenuItem VolumeItem(TrayVolume v, IReadOnlyList<string> operations, bool administrator)
    {
        var children = new List<TrayMenuItem>();
        bool configured = v.ConfiguredMountPoint is not null;
        var elevate = new TrayCommand(TrayCommandKind.OpenManagementAsAdministrator, v.Source);
        if (v.MountPoint is { } where)
        {
            children.Add(new($"Open {where} in Explorer", new(TrayCommandKind.OpenMountPoint, v.Source, where)));
            children.Add(administrator || configured
                ? new("Unmount", new(TrayCommandKind.Unmount, v.Source, where))
                : new("Unmount" + AsAdministrator, elevate));
        }
        else if (v.CanMount && operations.Contains(Operations.Mount))
        {
            string text = configured ? $"Mount at {v.ConfiguredMountPoint}" : "Mount (next free drive letter)";
            children.Add(administrator || configured
                ? new(text, new(TrayCommandKind.Mount, v.Source))
                : new("Mount" + AsAdministrator, elevate));
        }
        if (v.CanRecover && operations.Contains(Operations.Recover))
            children.Add(administrator
                ? new("Recover: replay the log onto the disk", new(TrayCommandKind.Recover, v.Source))
                : new("Recover" + AsAdministrator, elevate));
        if (v.Problem is { Length: > 0 } problem)
            children.Add(new(Notifications.Fit(problem, 120)));
        return new(v.MenuText, Children: children);
    }

    /// <summary>Every command reachable in <paramref name="items"/>, submenus included, in menu order.</summary>
    public static IEnumerable<(TrayMenuItem Item, TrayCommand Command)> Commands(IEnumerable<TrayMenuItem> items)
    {
        foreach (var item in items)
        {
            if (item.Command is { } c) yield return (item, c);
            if (item.Children is { } children)
                foreach (var inner in Commands(children)) yield return inner;
        }
    }
}

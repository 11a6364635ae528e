using System.Collections.Concurrent;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using static XfsWin.Tray.Win32.Win32Constants;

namespace XfsWin.Tray.Win32;

/// <summary>
/// The notification-area icon: a hidden top-level window (a message-only window would miss the
/// TaskbarCreated broadcast Explorer sends when it restarts) that owns the icon, shows the menu
/// built by <see cref="TrayMenu"/> and the balloons queued by <see cref="Notify"/>. Everything here
/// runs on the thread that called <see cref="Run"/>; other threads only post messages to it.
/// </summary>
[SupportedOSPlatform("windows")]
internal sealed unsafe class TrayWindow : IDisposable
{
    private const uint IconId = 1;
    private const uint WM_TRAYICON = WM_APP + 1;
    private const uint WM_SNAPSHOT = WM_APP + 2;
    private const uint WM_BALLOON = WM_APP + 3;
    private const uint WM_EXIT = WM_APP + 4;
    private const string ClassName = "XfsWin.Tray.Window";

    private readonly ConcurrentQueue<Balloon> _balloons = new();
    private readonly uint _taskbarCreated;
    private readonly nint _normalIcon;
    private readonly nint _warningIcon;
    private GCHandle _self;
    private nint _hwnd;
    private TrayController? _controller;
    private bool _iconAdded;

    public TrayWindow()
    {
        _taskbarCreated = NativeMethods.RegisterWindowMessageW("TaskbarCreated");
        _normalIcon = NativeMethods.LoadIconW(0, IDI_APPLICATION);
        _warningIcon = NativeMethods.LoadIconW(0, IDI_WARNING);
        var instance = NativeMethods.GetModuleHandleW(null);
        fixed (char* name = ClassName)
        {
            var wc = new WNDCLASSEXW
            {
                cbSize = (uint)sizeof(WNDCLASSEXW),
                lpfnWndProc = &WndProc,
                hInstance = instance,
                lpszClassName = name,
            };
            // A second tray in the same process would find the class registered: that is fine.
            NativeMethods.RegisterClassExW(&wc);
            _hwnd = NativeMethods.CreateWindowExW(0, name, name, 0, 0, 0, 0, 0, 0, 0, instance, 0);
        }
        if (_hwnd == 0) throw new InvalidOperationException($"CreateWindowExW failed ({Marshal.GetLastPInvokeError()})");
        _self = GCHandle.Alloc(this);
        NativeMethods.SetWindowLongPtrW(_hwnd, GWLP_USERDATA, GCHandle.ToIntPtr(_self));
    }

    /// <summary>Shows the icon and pumps messages until <see cref="PostExit"/>.</summary>
    public void Run(TrayController controller)
    {
        _controller = controller;
        controller.Changed += _ => NativeMethods.PostMessageW(_hwnd, WM_SNAPSHOT, 0, 0);
        AddIcon();
        MSG msg;
        while (NativeMethods.GetMessageW(&msg, 0, 0, 0) > 0)
        {
            NativeMethods.TranslateMessage(&msg);
            NativeMethods.DispatchMessageW(&msg);
        }
        RemoveIcon();
    }

    /// <summary>Queues a balloon (any thread).</summary>
    public void Notify(Balloon balloon)
    {
        _balloons.Enqueue(balloon);
        NativeMethods.PostMessageW(_hwnd, WM_BALLOON, 0, 0);
    }

    /// <summary>Ends <see cref="Run"/> (any thread).</summary>
    public void PostExit() => NativeMethods.PostMessageW(_hwnd, WM_EXIT, 0, 0);

    private NOTIFYICONDATAW IconData(uint flags)
    {
        var data = new NOTIFYICONDATAW { cbSize = (uint)sizeof(NOTIFYICONDATAW), hWnd = _hwnd, uID = IconId, uFlags = flags };
        return data;
    }

    private void AddIcon()
    {
        var snapshot = _controller!.Snapshot;
        var data = IconData(NIF_MESSAGE | NIF_ICON | NIF_TIP | NIF_SHOWTIP);
        data.uCallbackMessage = WM_TRAYICON;
        data.hIcon = snapshot.NeedsAttention ? _warningIcon : _normalIcon;
        NOTIFYICONDATAW.Set(data.szTip, 128, snapshot.Tooltip);
        _iconAdded = NativeMethods.Shell_NotifyIconW(NIM_ADD, &data);
        data.uTimeoutOrVersion = NOTIFYICON_VERSION_4;
        NativeMethods.Shell_NotifyIconW(NIM_SETVERSION, &data);
    }

    private void UpdateIcon()
    {
        var snapshot = _controller!.Snapshot;
        var data = IconData(NIF_ICON | NIF_TIP | NIF_SHOWTIP);
        data.hIcon = snapshot.NeedsAttention ? _warningIcon : _normalIcon;
        NOTIFYICONDATAW.Set(data.szTip, 128, snapshot.Tooltip);
        if (!NativeMethods.Shell_NotifyIconW(NIM_MODIFY, &data) && !_iconAdded) AddIcon();
    }

    private void ShowBalloons()
    {
        while (_balloons.TryDequeue(out var b))
        {
            var data = IconData(NIF_INFO);
            NOTIFYICONDATAW.Set(data.szInfoTitle, 64, b.Title);
            NOTIFYICONDATAW.Set(data.szInfo, 256, b.Text);
            data.dwInfoFlags = b.Icon switch { BalloonIcon.Warning => NIIF_WARNING, BalloonIcon.Error => NIIF_ERROR, _ => NIIF_INFO };
            NativeMethods.Shell_NotifyIconW(NIM_MODIFY, &data);
        }
    }

    private void RemoveIcon()
    {
        var data = IconData(0);
        NativeMethods.Shell_NotifyIconW(NIM_DELETE, &data);
        _iconAdded = false;
    }

    private void ShowMenu(int x, int y)
    {
        var controller = _controller!;
        _ = controller.RefreshAsync();
        var items = TrayMenu.Build(controller.Snapshot);
        var commands = new List<TrayCommand>();
        nint menu = BuildMenu(items, commands);
        try
        {
            // Without the foreground switch the menu would not close when the user clicks elsewhere.
            NativeMethods.SetForegroundWindow(_hwnd);
            int chosen = NativeMethods.TrackPopupMenuEx(menu, TPM_RIGHTBUTTON | TPM_RETURNCMD | TPM_NONOTIFY, x, y, _hwnd, 0);
            NativeMethods.PostMessageW(_hwnd, 0, 0, 0);
            if (chosen > 0 && chosen <= commands.Count)
                _ = controller.ExecuteAsync(commands[chosen - 1]);
        }
        finally
        {
            // Destroying the top menu destroys its submenus too.
            NativeMethods.DestroyMenu(menu);
        }
    }

    /// <summary>An HMENU for <paramref name="items"/>; command i (in <paramref name="commands"/>) gets menu id i + 1.</summary>
    private static nint BuildMenu(IReadOnlyList<TrayMenuItem> items, List<TrayCommand> commands)
    {
        nint menu = NativeMethods.CreatePopupMenu();
        foreach (var item in items)
        {
            if (item.IsSeparator)
            {
                NativeMethods.AppendMenuW(menu, MF_SEPARATOR, 0, null);
            }
            else if (item.Children is { Count: > 0 } children)
            {
                nint sub = BuildMenu(children, commands);
                NativeMethods.AppendMenuW(menu, MF_POPUP, (nuint)sub, EscapeAmpersands(item.Text));
            }
            else
            {
                uint flags = MF_STRING | (item.Enabled ? 0 : MF_GRAYED) | (item.Checked ? MF_CHECKED : 0);
                nuint id = 0;
                if (item.Command is { } c)
                {
                    commands.Add(c);
                    id = (nuint)commands.Count;
                }
                NativeMethods.AppendMenuW(menu, flags, id, EscapeAmpersands(item.Text));
            }
        }
        return menu;
    }

    /// <summary>Labels and paths may hold '&amp;', which menus would take for an accelerator.</summary>
    private static string EscapeAmpersands(string text) => text.Replace("&", "&&", StringComparison.Ordinal);

    private nint Handle(uint msg, nint wParam, nint lParam)
    {
        switch (msg)
        {
            case WM_TRAYICON:
                uint what = (uint)(lParam & 0xFFFF);
                if (what is WM_CONTEXTMENU or NIN_SELECT or NIN_KEYSELECT)
                    ShowMenu((short)(wParam & 0xFFFF), (short)((wParam >> 16) & 0xFFFF));
                return 0;
            case WM_SNAPSHOT:
                UpdateIcon();
                return 0;
            case WM_BALLOON:
                ShowBalloons();
                return 0;
            case WM_EXIT:
                NativeMethods.DestroyWindow(_hwnd);
                return 0;
            case WM_DESTROY:
                RemoveIcon();
                NativeMethods.PostQuitMessage(0);
                return 0;
        }
        if (msg == _taskbarCreated && _taskbarCreated != 0)
        {
            // Explorer restarted and forgot every icon.
            _iconAdded = false;
            AddIcon();
            return 0;
        }
        return NativeMethods.DefWindowProcW(_hwnd, msg, wParam, lParam);
    }

    [UnmanagedCallersOnly]
    private static nint WndProc(nint hwnd, uint msg, nint wParam, nint lParam)
    {
        nint user = NativeMethods.GetWindowLongPtrW(hwnd, GWLP_USERDATA);
        if (user == 0) return NativeMethods.DefWindowProcW(hwnd, msg, wParam, lParam);
        try
        {
            return ((TrayWindow)GCHandle.FromIntPtr(user).Target!).Handle(msg, wParam, lParam);
        }
        catch (Exception)
        {
            // No exception may cross back into user32 (it would end the process): the icon keeps working.
            return 0;
        }
    }

    public void Dispose()
    {
        if (_self.IsAllocated)
        {
            NativeMethods.SetWindowLongPtrW(_hwnd, GWLP_USERDATA, 0);
            _self.Free();
        }
    }
}

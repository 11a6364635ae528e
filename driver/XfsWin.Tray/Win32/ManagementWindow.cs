using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Microsoft.Web.WebView2.Core;
using Microsoft.Win32;
using static XfsWin.Tray.Win32.Win32Constants;

namespace XfsWin.Tray.Win32;

/// <summary>The WebView2 runtime's installed versions, as its installer records them (<see cref="ManagementView.RuntimeKeys"/>).</summary>
[SupportedOSPlatform("windows")]
internal static class WebView2Runtime
{
    public static IReadOnlyList<string?> InstalledVersions()
    {
        var versions = new List<string?>();
        foreach (var (perMachine, key) in ManagementView.RuntimeKeys)
        {
            try
            {
                using var k = (perMachine ? Registry.LocalMachine : Registry.CurrentUser).OpenSubKey(key);
                versions.Add(k?.GetValue("pv") as string);
            }
            catch (Exception e) when (e is System.Security.SecurityException or UnauthorizedAccessException or IOException)
            {
                versions.Add(null);
            }
        }
        return versions;
    }
}

/// <summary>
/// The management UI in a window of our own: a plain Win32 top-level window hosting WebView2 through its Core API
/// (CoreWebView2Environment, CoreWebView2Controller), no UI framework. It runs on the thread that calls
/// <see cref="Run"/>, which must be STA and pumps this window's messages until it is closed. WebView2 answers its
/// asynchronous calls on this thread while the loop pumps; their continuations only post a message back, and the
/// work happens in the window procedure, on this thread. Navigations that leave the management UI
/// (<see cref="ManagementView.StaysInWindow"/>) open in the default browser instead.
/// </summary>
[SupportedOSPlatform("windows")]
internal sealed unsafe class ManagementWindow
{
    private const uint WM_ENVIRONMENT_READY = WM_APP + 20;
    private const uint WM_CONTROLLER_READY = WM_APP + 21;
    private const string ClassName = "XfsWin.Management.Window";

    private readonly string _url;
    private readonly string _userDataFolder;
    private nint _hwnd;
    private GCHandle _self;
    private Task<CoreWebView2Environment>? _environment;
    private Task<CoreWebView2Controller>? _controllerTask;
    private CoreWebView2Controller? _controller;
    private bool _navigated;
    private string? _failure;

    private ManagementWindow(string url, string userDataFolder)
    {
        _url = url;
        _userDataFolder = userDataFolder;
    }

    /// <summary>
    /// Shows <paramref name="url"/> in a window and returns when the user closes it: true. False (with why in
    /// <paramref name="failure"/>) when WebView2 could not show it (no runtime after all, a profile it cannot
    /// write): the window is gone again and the caller opens the default browser instead.
    /// <paramref name="created"/> receives the window's handle once it exists.
    /// </summary>
    public static bool Run(string url, string userDataFolder, Action<nint>? created, out string? failure)
    {
        if (Thread.CurrentThread.GetApartmentState() != ApartmentState.STA)
            throw new InvalidOperationException("WebView2 needs a single-threaded apartment: call ManagementWindow.Run on an STA thread");
        var window = new ManagementWindow(url, userDataFolder);
        try
        {
            window.Create();
            created?.Invoke(window._hwnd);
            window.Start();
            MSG msg;
            while (NativeMethods.GetMessageW(&msg, 0, 0, 0) > 0)
            {
                NativeMethods.TranslateMessage(&msg);
                NativeMethods.DispatchMessageW(&msg);
            }
        }
        finally
        {
            window.Release();
        }
        failure = window._failure;
        return window._navigated && failure is null;
    }

    /// <summary><see cref="Run"/> on a new STA thread, waited for (for callers on MTA threads).</summary>
    public static bool RunOnStaThread(string url, string userDataFolder, Action<nint>? created, out string? failure)
    {
        bool shown = false;
        string? why = null;
        var thread = new Thread(() => shown = Run(url, userDataFolder, created, out why)) { Name = "XfsWin management window", IsBackground = false };
        thread.SetApartmentState(ApartmentState.STA);
        thread.Start();
        thread.Join();
        failure = why;
        return shown;
    }

    private void Create()
    {
        var instance = NativeMethods.GetModuleHandleW(null);
        fixed (char* name = ClassName)
        fixed (char* title = ManagementView.WindowTitle)
        {
            var wc = new WNDCLASSEXW
            {
                cbSize = (uint)sizeof(WNDCLASSEXW),
                lpfnWndProc = &WndProc,
                hInstance = instance,
                hCursor = NativeMethods.LoadCursorW(0, IDC_ARROW),
                hIcon = NativeMethods.LoadIconW(0, IDI_APPLICATION),
                lpszClassName = name,
            };
            // Registered once per process; a second window finds it registered.
            NativeMethods.RegisterClassExW(&wc);
            _hwnd = NativeMethods.CreateWindowExW(0, name, title, WS_OVERLAPPEDWINDOW | WS_VISIBLE,
                CW_USEDEFAULT, CW_USEDEFAULT, 1200, 800, 0, 0, instance, 0);
        }
        if (_hwnd == 0) throw new InvalidOperationException($"CreateWindowExW failed ({Marshal.GetLastPInvokeError()})");
        _self = GCHandle.Alloc(this);
        NativeMethods.SetWindowLongPtrW(_hwnd, GWLP_USERDATA, GCHandle.ToIntPtr(_self));
        NativeMethods.ShowWindow(_hwnd, SW_SHOWNORMAL);
        NativeMethods.SetForegroundWindow(_hwnd);
    }

    /// <summary>Starts the environment (profile under the user's local application data); its completion posts back.</summary>
    private void Start()
    {
        try
        {
            Directory.CreateDirectory(_userDataFolder);
            UseBundledLoader();
            _environment = CoreWebView2Environment.CreateAsync(null, _userDataFolder, null);
            PostWhenDone(_environment, WM_ENVIRONMENT_READY);
        }
        catch (Exception e)
        {
            Fail(e);
        }
    }

    /// <summary>
    /// Points WebView2 at the WebView2Loader.dll published with this program (runtimes/win-ARCH/native next to
    /// Microsoft.Web.WebView2.Core.dll). Once per process: after the loader is loaded, WebView2 refuses a new path.
    /// </summary>
    private static void UseBundledLoader()
    {
        var folder = Path.Combine(AppContext.BaseDirectory, ManagementView.LoaderFolder(RuntimeInformation.ProcessArchitecture));
        if (!File.Exists(Path.Combine(folder, "WebView2Loader.dll"))) return;
        try
        {
            CoreWebView2Environment.SetLoaderDllFolderPath(folder);
        }
        catch (InvalidOperationException)
        {
            // Loaded already (a second window in this process): it is the same loader.
        }
    }

    private void PostWhenDone(Task task, uint message)
    {
        nint hwnd = _hwnd;
        task.ContinueWith(_ => NativeMethods.PostMessageW(hwnd, message, 0, 0), CancellationToken.None,
            TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
    }

    private void Fail(Exception e)
    {
        _failure = e is AggregateException { InnerException: { } inner } ? inner.Message : e.Message;
        NativeMethods.DestroyWindow(_hwnd);
    }

    private void Resize()
    {
        if (_controller is null) return;
        RECT r;
        NativeMethods.GetClientRect(_hwnd, &r);
        _controller.Bounds = new System.Drawing.Rectangle(r.Left, r.Top, r.Right - r.Left, r.Bottom - r.Top);
    }

    private void ControllerReady(CoreWebView2Controller controller)
    {
        _controller = controller;
        Resize();
        var view = controller.CoreWebView2;
        view.NavigationStarting += (_, e) =>
        {
            if (ManagementView.StaysInWindow(_url, e.Uri)) return;
            e.Cancel = true;
            OpenInBrowser(e.Uri);
        };
        view.NewWindowRequested += (_, e) =>
        {
            e.Handled = true;
            if (ManagementView.StaysInWindow(_url, e.Uri)) view.Navigate(e.Uri);
            else OpenInBrowser(e.Uri);
        };
        view.Navigate(_url);
        _navigated = true;
    }

    /// <summary>Only web addresses leave the window, and only to the default browser.</summary>
    private static void OpenInBrowser(string? uri)
    {
        if (!Uri.TryCreate(uri, UriKind.Absolute, out var u) || (u.Scheme != Uri.UriSchemeHttp && u.Scheme != Uri.UriSchemeHttps)) return;
        try
        {
            using var p = Process.Start(new ProcessStartInfo(u.AbsoluteUri) { UseShellExecute = true });
        }
        catch (System.ComponentModel.Win32Exception)
        {
            // No browser: the link is simply not followed.
        }
    }

    private nint Handle(uint msg, nint wParam, nint lParam)
    {
        switch (msg)
        {
            case WM_ENVIRONMENT_READY:
                try
                {
                    _controllerTask = _environment!.Result.CreateCoreWebView2ControllerAsync(_hwnd);
                    PostWhenDone(_controllerTask, WM_CONTROLLER_READY);
                }
                catch (Exception e)
                {
                    Fail(e);
                }
                return 0;
            case WM_CONTROLLER_READY:
                try
                {
                    ControllerReady(_controllerTask!.Result);
                }
                catch (Exception e)
                {
                    Fail(e);
                }
                return 0;
            case WM_SIZE:
                Resize();
                return 0;
            case WM_MOVE:
                _controller?.NotifyParentWindowPositionChanged();
                return 0;
            case WM_DESTROY:
                _controller?.Close();
                _controller = null;
                NativeMethods.PostQuitMessage(0);
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
            return ((ManagementWindow)GCHandle.FromIntPtr(user).Target!).Handle(msg, wParam, lParam);
        }
        catch (Exception)
        {
            // No exception may cross back into user32: the window keeps working.
            return 0;
        }
    }

    private void Release()
    {
        if (_self.IsAllocated)
        {
            NativeMethods.SetWindowLongPtrW(_hwnd, GWLP_USERDATA, 0);
            _self.Free();
        }
    }
}

using System.Runtime.InteropServices;

namespace XfsWin.Tray.Win32;

/// <summary>
/// NOTIFYICONDATAW (shellapi.h), the full Vista+ form: 976 bytes on x64. Blittable; offsets pinned by
/// TrayInteropLayoutTests (hWnd 8, uID 16, uFlags 20, uCallbackMessage 24, hIcon 32, szTip 40,
/// dwState 296, dwStateMask 300, szInfo 304, uTimeoutOrVersion 816, szInfoTitle 820, dwInfoFlags 948,
/// guidItem 952, hBalloonIcon 968).
/// </summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct NOTIFYICONDATAW
{
    public uint cbSize;
    public nint hWnd;
    public uint uID;
    public uint uFlags;
    public uint uCallbackMessage;
    public nint hIcon;
    public fixed char szTip[128];
    public uint dwState;
    public uint dwStateMask;
    public fixed char szInfo[256];
    /// <summary>uTimeout (ignored since Vista) or uVersion for NIM_SETVERSION.</summary>
    public uint uTimeoutOrVersion;
    public fixed char szInfoTitle[64];
    public uint dwInfoFlags;
    public Guid guidItem;
    public nint hBalloonIcon;

    /// <summary>Copies <paramref name="value"/> into a fixed buffer of <paramref name="capacity"/> units, cut to leave the terminator.</summary>
    public static void Set(char* buffer, int capacity, string value)
    {
        int n = Math.Min(value.Length, capacity - 1);
        value.AsSpan(0, n).CopyTo(new Span<char>(buffer, capacity));
        buffer[n] = '\0';
    }
}

/// <summary>WNDCLASSEXW (winuser.h): 80 bytes on x64.</summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct WNDCLASSEXW
{
    public uint cbSize;
    public uint style;
    public delegate* unmanaged<nint, uint, nint, nint, nint> lpfnWndProc;
    public int cbClsExtra;
    public int cbWndExtra;
    public nint hInstance;
    public nint hIcon;
    public nint hCursor;
    public nint hbrBackground;
    public char* lpszMenuName;
    public char* lpszClassName;
    public nint hIconSm;
}

/// <summary>RECT (windef.h): 16 bytes.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RECT
{
    public int Left;
    public int Top;
    public int Right;
    public int Bottom;
}

[StructLayout(LayoutKind.Sequential)]
internal struct POINT
{
    public int X;
    public int Y;
}

/// <summary>MSG (winuser.h): 48 bytes on x64.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct MSG
{
    public nint hwnd;
    public uint message;
    public nint wParam;
    public nint lParam;
    public uint time;
    public POINT pt;
    public uint lPrivate;
}

/// <summary>Constants of shellapi.h and winuser.h the tray uses.</summary>
internal static class Win32Constants
{
    public const uint NIM_ADD = 0, NIM_MODIFY = 1, NIM_DELETE = 2, NIM_SETVERSION = 4;
    public const uint NIF_MESSAGE = 0x1, NIF_ICON = 0x2, NIF_TIP = 0x4, NIF_INFO = 0x10, NIF_SHOWTIP = 0x80;
    public const uint NIIF_INFO = 0x1, NIIF_WARNING = 0x2, NIIF_ERROR = 0x3;
    public const uint NOTIFYICON_VERSION_4 = 4;
    public const uint WM_DESTROY = 0x0002, WM_CLOSE = 0x0010, WM_CONTEXTMENU = 0x007B, WM_COMMAND = 0x0111;
    public const uint WM_LBUTTONUP = 0x0202, WM_RBUTTONUP = 0x0205, WM_USER = 0x0400, WM_APP = 0x8000;
    public const uint NIN_SELECT = WM_USER, NIN_KEYSELECT = WM_USER + 1;
    public const uint MF_STRING = 0x0, MF_GRAYED = 0x1, MF_CHECKED = 0x8, MF_POPUP = 0x10, MF_SEPARATOR = 0x800;
    public const uint TPM_RIGHTBUTTON = 0x2, TPM_RETURNCMD = 0x100, TPM_NONOTIFY = 0x80;
    public const int GWLP_USERDATA = -21;
    public const int IDI_APPLICATION = 32512, IDI_WARNING = 32515;
    public const int SW_SHOWNORMAL = 1;
    public const uint WM_MOVE = 0x0003, WM_SIZE = 0x0005;
    public const uint WS_OVERLAPPEDWINDOW = 0x00CF0000, WS_VISIBLE = 0x10000000;
    public const int CW_USEDEFAULT = unchecked((int)0x80000000);
    public const int IDC_ARROW = 32512;
    public const uint MB_OK = 0x0, MB_ICONINFORMATION = 0x40, MB_ICONERROR = 0x10;
}

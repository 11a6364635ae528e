using System.Runtime.CompilerServices;
using XfsWin.Tray.Win32;

namespace XfsWin.Driver.Tests;

/// <summary>
/// Pins the tray's Win32 structs to their x64 layouts from shellapi.h and winuser.h: the sizes
/// Windows checks through cbSize, and every field offset that follows from the declarations
/// (pointers and HANDLEs 8 bytes aligned to 8, WCHAR 2, GUID 16 aligned to 4).
/// </summary>
public unsafe class TrayInteropLayoutTests
{
    private static int Offset<T>(ref T field, ref byte start) => (int)Unsafe.ByteOffset(ref start, ref Unsafe.As<T, byte>(ref field));

    [Fact]
    public void NotifyIconDataMatchesShellapiH()
    {
        Assert.Equal(976, sizeof(NOTIFYICONDATAW)); // NOTIFYICONDATAW_V3 plus hBalloonIcon, 64-bit
        var d = new NOTIFYICONDATAW();
        ref byte s = ref Unsafe.As<NOTIFYICONDATAW, byte>(ref d);
        Assert.Equal(0, Offset(ref d.cbSize, ref s));
        Assert.Equal(8, Offset(ref d.hWnd, ref s));
        Assert.Equal(16, Offset(ref d.uID, ref s));
        Assert.Equal(20, Offset(ref d.uFlags, ref s));
        Assert.Equal(24, Offset(ref d.uCallbackMessage, ref s));
        Assert.Equal(32, Offset(ref d.hIcon, ref s));
        Assert.Equal(40, Offset(ref d.szTip[0], ref s));
        Assert.Equal(40 + 128 * 2, Offset(ref d.dwState, ref s));
        Assert.Equal(300, Offset(ref d.dwStateMask, ref s));
        Assert.Equal(304, Offset(ref d.szInfo[0], ref s));
        Assert.Equal(304 + 256 * 2, Offset(ref d.uTimeoutOrVersion, ref s));
        Assert.Equal(820, Offset(ref d.szInfoTitle[0], ref s));
        Assert.Equal(820 + 64 * 2, Offset(ref d.dwInfoFlags, ref s));
        Assert.Equal(952, Offset(ref d.guidItem, ref s));
        Assert.Equal(968, Offset(ref d.hBalloonIcon, ref s));
    }

    [Fact]
    public void FixedStringsAreCutToLeaveTheTerminator()
    {
        var d = new NOTIFYICONDATAW();
        NOTIFYICONDATAW.Set(d.szInfoTitle, 64, new string('t', 100));
        Assert.Equal(new string('t', 63), new string(d.szInfoTitle, 0, 63));
        Assert.Equal('\0', d.szInfoTitle[63]);
        NOTIFYICONDATAW.Set(d.szTip, 128, "XfsWin");
        Assert.Equal("XfsWin\0", new string(d.szTip, 0, 7));
    }

    [Fact]
    public void WindowClassAndMessageMatchWinuserH()
    {
        Assert.Equal(80, sizeof(WNDCLASSEXW));
        var w = new WNDCLASSEXW();
        ref byte s = ref Unsafe.As<WNDCLASSEXW, byte>(ref w);
        Assert.Equal(4, Offset(ref w.style, ref s));
        Assert.Equal(8, (int)((byte*)&w.lpfnWndProc - (byte*)&w)); // pointer fields: measured by address
        Assert.Equal(56, (int)((byte*)&w.lpszMenuName - (byte*)&w));
        Assert.Equal(16, Offset(ref w.cbClsExtra, ref s));
        Assert.Equal(24, Offset(ref w.hInstance, ref s));
        Assert.Equal(64, (int)((byte*)&w.lpszClassName - (byte*)&w));
        Assert.Equal(72, Offset(ref w.hIconSm, ref s));

        Assert.Equal(48, sizeof(MSG));
        var m = new MSG();
        ref byte ms = ref Unsafe.As<MSG, byte>(ref m);
        Assert.Equal(8, Offset(ref m.message, ref ms));
        Assert.Equal(16, Offset(ref m.wParam, ref ms));
        Assert.Equal(24, Offset(ref m.lParam, ref ms));
        Assert.Equal(32, Offset(ref m.time, ref ms));
        Assert.Equal(36, Offset(ref m.pt, ref ms));
        Assert.Equal(44, Offset(ref m.lPrivate, ref ms));

        // RECT (GetClientRect, the management window's WebView2 bounds).
        Assert.Equal(16, sizeof(RECT));
        var r = new RECT();
        ref byte rs = ref Unsafe.As<RECT, byte>(ref r);
        Assert.Equal(8, Offset(ref r.Right, ref rs));
        Assert.Equal(12, Offset(ref r.Bottom, ref rs));
    }
}

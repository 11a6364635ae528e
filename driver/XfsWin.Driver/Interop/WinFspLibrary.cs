using System.Reflection;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;

namespace XfsWin.Driver.Interop;

/// <summary>
/// Finds winfsp-{arch}.dll the way WinFsp's own FspLoad does: the normal DLL search first, then
/// InstallDir from HKLM\SOFTWARE\WOW6432Node\WinFsp plus "bin\".
/// </summary>
public static class WinFspLibrary
{
    /// <summary>The name every DllImport in <see cref="NativeMethods"/> uses.</summary>
    public const string ImportName = "winfsp-x64.dll";

    /// <summary>The registry key (under HKLM, 64-bit view) that holds InstallDir.</summary>
    public const string RegistryKey = @"SOFTWARE\WOW6432Node\WinFsp";

    public static string DllName(Architecture architecture) => architecture switch
    {
        Architecture.X64 => "winfsp-x64.dll",
        Architecture.Arm64 => "winfsp-a64.dll",
        Architecture.X86 => "winfsp-x86.dll",
        _ => throw new PlatformNotSupportedException($"WinFsp has no build for {architecture}"),
    };

    /// <summary>Where the DLL lives in an installation directory ("C:\Program Files (x86)\WinFsp\").</summary>
    public static string DllPath(string installDir, Architecture architecture) =>
        Path.Combine(installDir, "bin", DllName(architecture));

    private static int s_registered;

    [SupportedOSPlatform("windows")]
    public static void EnsureResolver()
    {
        if (Interlocked.Exchange(ref s_registered, 1) == 0)
            NativeLibrary.SetDllImportResolver(typeof(WinFspLibrary).Assembly, Resolve);
    }

    [SupportedOSPlatform("windows")]
    private static IntPtr Resolve(string libraryName, Assembly assembly, DllImportSearchPath? searchPath)
    {
        if (libraryName != ImportName) return IntPtr.Zero;
        return Load();
    }

    /// <summary>Loads the DLL or throws <see cref="DllNotFoundException"/> saying how to install WinFsp.</summary>
    [SupportedOSPlatform("windows")]
    public static IntPtr Load()
    {
        string name = DllName(RuntimeInformation.ProcessArchitecture);
        if (NativeLibrary.TryLoad(name, out var handle)) return handle;
        string? installDir = null;
        using (var key = Microsoft.Win32.RegistryKey.OpenBaseKey(Microsoft.Win32.RegistryHive.LocalMachine, Microsoft.Win32.RegistryView.Registry64)
                   .OpenSubKey(RegistryKey))
            installDir = key?.GetValue("InstallDir") as string;
        if (installDir is null)
            throw new DllNotFoundException($"WinFsp is not installed (no InstallDir under HKLM\\{RegistryKey}). Install WinFsp 2.0 or later from https://winfsp.dev/rel/ and try again.");
        string path = DllPath(installDir, RuntimeInformation.ProcessArchitecture);
        if (NativeLibrary.TryLoad(path, out handle)) return handle;
        throw new DllNotFoundException($"WinFsp's {name} could not be loaded from {path}. Repair or reinstall WinFsp.");
    }
}

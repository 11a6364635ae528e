using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;

namespace XfsWin.Service;

/// <summary>SERVICE_STATUS (winsvc.h): seven DWORDs.</summary>
[StructLayout(LayoutKind.Sequential)]
public struct ServiceStatus
{
    public uint ServiceType;
    public uint CurrentState;
    public uint ControlsAccepted;
    public uint Win32ExitCode;
    public uint ServiceSpecificExitCode;
    public uint CheckPoint;
    public uint WaitHint;

    public const uint ServiceWin32OwnProcess = 0x10;
    public const uint Stopped = 1, StartPending = 2, StopPending = 3, Running = 4;
    public const uint AcceptStop = 0x1, AcceptShutdown = 0x4;
    public const uint ControlStop = 1, ControlInterrogate = 4, ControlShutdown = 5;
    public const uint ErrorServiceSpecific = 1066;
}

/// <summary>SERVICE_TABLE_ENTRYW.</summary>
[StructLayout(LayoutKind.Sequential)]
public unsafe struct ServiceTableEntry
{
    public char* ServiceName;
    public delegate* unmanaged[Stdcall]<uint, char**, void> ServiceMain;
}

/// <summary>
/// Runs the process as a Windows service through advapi32 (StartServiceCtrlDispatcher,
/// RegisterServiceCtrlHandlerEx, SetServiceStatus): Microsoft.Extensions.Hosting.WindowsServices and
/// System.ServiceProcess.ServiceController are not available from our package source.
/// </summary>
[SupportedOSPlatform("windows")]
internal static unsafe class ServiceControl
{
    public const string ServiceName = "XfsWin";
    private const int ErrorFailedServiceControllerConnect = 1063;

    private static Func<CancellationToken, int>? s_body;
    private static nint s_statusHandle;
    private static readonly CancellationTokenSource s_stop = new();
    private static uint s_checkPoint;

    [DllImport("advapi32.dll", ExactSpelling = true, SetLastError = true)]
    private static extern int StartServiceCtrlDispatcherW(ServiceTableEntry* table);

    [DllImport("advapi32.dll", ExactSpelling = true, SetLastError = true)]
    private static extern nint RegisterServiceCtrlHandlerExW(char* serviceName,
        delegate* unmanaged[Stdcall]<uint, uint, void*, void*, uint> handler, void* context);

    [DllImport("advapi32.dll", ExactSpelling = true, SetLastError = true)]
    private static extern int SetServiceStatus(nint handle, ServiceStatus* status);

    /// <summary>
    /// Hands the process to the service control manager and runs <paramref name="body"/> as the service;
    /// returns false when the process was not started by the SCM (run it from a console instead).
    /// </summary>
    public static bool TryRun(Func<CancellationToken, int> body)
    {
        s_body = body;
        fixed (char* name = ServiceName)
        {
            var table = stackalloc ServiceTableEntry[2];
            table[0] = new ServiceTableEntry { ServiceName = name, ServiceMain = &ServiceMain };
            table[1] = default;
            if (StartServiceCtrlDispatcherW(table) != 0) return true;
        }
        int error = Marshal.GetLastPInvokeError();
        if (error == ErrorFailedServiceControllerConnect) return false;
        throw new System.ComponentModel.Win32Exception(error, "StartServiceCtrlDispatcher failed");
    }

    [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
    private static void ServiceMain(uint argc, char** argv)
    {
        fixed (char* name = ServiceName)
            s_statusHandle = RegisterServiceCtrlHandlerExW(name, &Handler, null);
        if (s_statusHandle == 0) return;
        Report(ServiceStatus.StartPending, 0, 10_000);
        int exit;
        try
        {
            Report(ServiceStatus.Running, 0, 0);
            exit = s_body!(s_stop.Token);
        }
        catch (Exception e)
        {
            EventLogWriter.Error(9, $"The XfsWin service failed: {e}");
            exit = 1;
        }
        Report(ServiceStatus.Stopped, (uint)exit, 0);
    }

    [UnmanagedCallersOnly(CallConvs = [typeof(CallConvStdcall)])]
    private static uint Handler(uint control, uint eventType, void* eventData, void* context)
    {
        switch (control)
        {
            case ServiceStatus.ControlStop:
            case ServiceStatus.ControlShutdown:
                Report(ServiceStatus.StopPending, 0, 30_000);
                s_stop.Cancel();
                return 0;
            case ServiceStatus.ControlInterrogate:
                return 0;
            default:
                return 120; // ERROR_CALL_NOT_IMPLEMENTED
        }
    }

    private static void Report(uint state, uint exitCode, uint waitHint)
    {
        var status = new ServiceStatus
        {
            ServiceType = ServiceStatus.ServiceWin32OwnProcess,
            CurrentState = state,
            ControlsAccepted = state == ServiceStatus.Running ? ServiceStatus.AcceptStop | ServiceStatus.AcceptShutdown : 0,
            Win32ExitCode = exitCode == 0 ? 0 : ServiceStatus.ErrorServiceSpecific,
            ServiceSpecificExitCode = exitCode,
            CheckPoint = state is ServiceStatus.Running or ServiceStatus.Stopped ? 0 : ++s_checkPoint,
            WaitHint = waitHint,
        };
        SetServiceStatus(s_statusHandle, &status);
    }
}

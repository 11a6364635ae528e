using System.IO.Pipes;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Microsoft.Win32.SafeHandles;

namespace XfsWin.Control.Transport;

/// <summary>
/// The Windows control channel: \\.\pipe\NAME created with CreateNamedPipeW and the
/// <see cref="PipeSecurityDescriptor"/> (SYSTEM and Administrators; with <see cref="ListenerAccess.LocalUsers"/>
/// interactive users too), remote clients rejected, and the first instance created with
/// FILE_FLAG_FIRST_PIPE_INSTANCE so no other process can have claimed the name before the service. Each client is
/// identified from its token (<see cref="ClientToken"/>), after its first frame arrived.
/// </summary>
public sealed partial class NamedPipeListener : IControlListener
{
    private const uint PipeAccessDuplex = 0x3, FileFlagOverlapped = 0x40000000, FileFlagFirstPipeInstance = 0x00080000;
    private const uint PipeTypeByte = 0x0, PipeReadModeByte = 0x0, PipeWait = 0x0, PipeRejectRemoteClients = 0x8;
    private const uint PipeUnlimitedInstances = 255, BufferSize = 64 * 1024;

    private readonly byte[] _securityDescriptor;
    private bool _first = true;
    private NamedPipeServerStream? _pending;

    public NamedPipeListener(string pipeName, ListenerAccess access = ListenerAccess.Private)
    {
        if (string.IsNullOrEmpty(pipeName) || pipeName.Contains('\\'))
            throw new ArgumentException($"'{pipeName}' is not a pipe name (give the part after \\\\.\\pipe\\)");
        Address = pipeName;
        _securityDescriptor = PipeSecurityDescriptor.Build(access);
    }

    public string Address { get; }

    [StructLayout(LayoutKind.Sequential)]
    private unsafe struct SecurityAttributes
    {
        public int Length;
        public void* SecurityDescriptor;
        public int InheritHandle;
    }

    [LibraryImport("kernel32.dll", EntryPoint = "CreateNamedPipeW", SetLastError = true, StringMarshalling = StringMarshalling.Utf16)]
    private static unsafe partial SafePipeHandle CreateNamedPipe(string name, uint openMode, uint pipeMode, uint maxInstances,
        uint outBufferSize, uint inBufferSize, uint defaultTimeout, SecurityAttributes* securityAttributes);

    [SupportedOSPlatform("windows")]
    private unsafe NamedPipeServerStream CreateInstance()
    {
        uint openMode = PipeAccessDuplex | FileFlagOverlapped | (_first ? FileFlagFirstPipeInstance : 0);
        SafePipeHandle handle;
        fixed (byte* sd = _securityDescriptor)
        {
            var attributes = new SecurityAttributes { Length = sizeof(SecurityAttributes), SecurityDescriptor = sd, InheritHandle = 0 };
            handle = CreateNamedPipe(@"\\.\pipe\" + Address, openMode, PipeTypeByte | PipeReadModeByte | PipeWait | PipeRejectRemoteClients,
                PipeUnlimitedInstances, BufferSize, BufferSize, 0, &attributes);
        }
        if (handle.IsInvalid)
        {
            int error = Marshal.GetLastPInvokeError();
            handle.Dispose();
            throw new IOException(error == 5 && _first
                ? $"the pipe \\\\.\\pipe\\{Address} already exists: another XfsWin service (or another program) holds it"
                : $"CreateNamedPipe \\\\.\\pipe\\{Address} failed (Win32 error {error})");
        }
        _first = false;
        return new NamedPipeServerStream(PipeDirection.InOut, isAsync: true, isConnected: false, handle);
    }

    public async ValueTask<AcceptedClient> AcceptAsync(CancellationToken cancellationToken)
    {
        if (!OperatingSystem.IsWindows()) throw new PlatformNotSupportedException("named pipes are the control channel on Windows");
        var pipe = _pending ?? CreateInstance();
        _pending = pipe;
        await pipe.WaitForConnectionAsync(cancellationToken).ConfigureAwait(false);
        _pending = null;
        return new AcceptedClient(pipe, () => OperatingSystem.IsWindows() ? ClientToken.Identify(pipe) : ControlPeer.Unidentified);
    }

    public async ValueTask DisposeAsync()
    {
        if (_pending is not null) await _pending.DisposeAsync().ConfigureAwait(false);
        _pending = null;
    }
}

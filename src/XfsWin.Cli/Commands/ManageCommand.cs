using System.Diagnostics;
using System.Runtime.InteropServices;
using XfsWin.Cli.Service;
using XfsWin.Control;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;
using XfsWin.Manage;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin manage</c>: the management UI in the browser. It talks to the XfsWin service over the
/// control channel; when no service answers on the socket, it runs the same server in its own
/// process on a private socket (mounts it makes then end when it exits).
/// </summary>
public static class ManageCommand
{
    public const string Usage = """
        Usage: xfswin manage [options]

        Serves the management UI on 127.0.0.1 and prints its address, with a random token every
        request must carry, as its first line. Stop it with Ctrl-C.

        It uses the XfsWin service (`xfswin service`) when one answers on the socket; otherwise it runs
        the service's server inside this process, and what it mounts is unmounted when it exits.

        Options:
          --socket PATH   the service's control socket (default /run/xfswin/control.sock)
          --source PATH   without a service: list this image file or device (repeatable)
          --no-scan       without a service: list only the --source images, not the machine's disks
          --port N        listen on this port instead of a free one
          --no-browser    do not open a browser
          -h, --help      this text
        """;

    public static int Run(string[] args)
    {
        string socket = ControlEndpoint.Default;
        var sources = new List<string>();
        bool scan = true, browser = true;
        int port = 0;
        for (int i = 0; i < args.Length; i++)
        {
            string Next() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            try
            {
                switch (args[i])
                {
                    case "--socket": socket = Next(); break;
                    case "--source": sources.Add(Next()); break;
                    case "--no-scan": scan = false; break;
                    case "--no-browser": browser = false; break;
                    case "--port":
                        port = int.TryParse(Next(), out var p) && p is > 0 and < 65536 ? p : throw new ArgumentException("--port needs a port number");
                        break;
                    case "-h" or "--help":
                        Console.Out.WriteLine(Usage);
                        return 0;
                    default:
                        throw new ArgumentException($"unexpected argument '{args[i]}'");
                }
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine($"xfswin manage: {e.Message}");
                return 2;
            }
        }
        return RunAsync(socket, sources, scan, browser, port).GetAwaiter().GetResult();
    }

    private static async Task<bool> ServiceAnswers(string socket)
    {
        try
        {
            using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(5));
            await using var client = await ControlClient.ConnectAsync(socket, timeout.Token);
            await client.CallAsync(new Control.Protocol.ControlRequest { Op = Control.Protocol.Operations.Hello }, null, timeout.Token);
            return true;
        }
        catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or ControlException or OperationCanceledException or UnauthorizedAccessException or TimeoutException)
        {
            return false;
        }
    }

    private static async Task<int> RunAsync(string socket, List<string> sources, bool scan, bool browser, int port)
    {
        string? privateDirectory = null;
        VolumeManager? volumes = null;
        ControlServer? server = null;
        string note;
        if (await ServiceAnswers(socket))
        {
            note = $"using the XfsWin service on {socket}";
        }
        else
        {
            if (OperatingSystem.IsWindows())
            {
                Console.Error.WriteLine($"xfswin manage: the XfsWin service does not answer on \\\\.\\pipe\\{socket}: start it (services.msc, or 'sc start XfsWin').");
                return 1;
            }
            privateDirectory = Directory.CreateTempSubdirectory("xfswin-manage-").FullName;
            var options = new ServerOptions { Sources = sources, ScanDevices = scan, ServerName = "xfswin manage (in-process)" };
            volumes = new VolumeManager(options, new FuseMountBackend(Console.Error));
            server = new ControlServer(ControlEndpoint.Listen(Path.Combine(privateDirectory, "control.sock")), volumes, options, Console.Error.WriteLine);
            server.Start();
            socket = server.Address;
            note = "no XfsWin service answers; serving in this process (its mounts end when it exits)";
        }

        var connectTo = socket;
        var manage = await ManageServer.StartAsync(ct => ControlClient.ConnectAsync(connectTo, ct), port);
        Console.Out.WriteLine(manage.Url);
        Console.Out.WriteLine($"xfswin manage: {note}. Ctrl-C stops it.");
        Console.Out.Flush();
        if (browser) OpenBrowser(manage.Url);

        using var stop = new ManualResetEventSlim();
        void Stop(PosixSignalContext context)
        {
            context.Cancel = true;
            stop.Set();
        }
        if (OperatingSystem.IsLinux()) Native.Posix.StopIgnoring(Native.Posix.SIGINT);
        using (PosixSignalRegistration.Create(PosixSignal.SIGINT, Stop))
        using (PosixSignalRegistration.Create(PosixSignal.SIGTERM, Stop))
        using (PosixSignalRegistration.Create(PosixSignal.SIGHUP, Stop))
            stop.Wait();

        await manage.DisposeAsync();
        if (server is not null) await server.DisposeAsync();
        volumes?.Dispose();
        if (privateDirectory is not null)
        {
            try
            {
                Directory.Delete(privateDirectory, recursive: true);
            }
            catch (IOException)
            {
            }
        }
        return 0;
    }

    private static void OpenBrowser(string url)
    {
        try
        {
            var psi = OperatingSystem.IsWindows()
                ? new ProcessStartInfo(url) { UseShellExecute = true }
                : new ProcessStartInfo("xdg-open", [url]) { UseShellExecute = false, RedirectStandardError = true, RedirectStandardOutput = true };
            using var process = Process.Start(psi);
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            Console.Error.WriteLine($"xfswin manage: could not open a browser ({e.Message}); open the address above yourself.");
        }
    }
}

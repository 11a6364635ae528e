using System.Diagnostics;
using System.Text.RegularExpressions;

namespace XfsWin.Tray;

/// <summary>
/// Runs <c>xfswin manage --no-browser</c> as a child process and hands out the address it prints
/// first (http://127.0.0.1:PORT/TOKEN/). One child serves every "Open the management UI" while it
/// lives; it is started again when it has exited, and stopped when the tray exits.
/// </summary>
public sealed partial class ManageLauncher : IDisposable
{
    private readonly string _fileName;
    private readonly IReadOnlyList<string> _arguments;
    private readonly SemaphoreSlim _lock = new(1, 1);
    private Process? _process;
    private string? _url;

    /// <param name="fileName">xfswin.exe (next to xfswin-tray.exe when installed), or "dotnet" with xfswin.dll first in <paramref name="leadingArguments"/>.</param>
    /// <param name="socket">the control address to pass as --socket; null for the platform's default.</param>
    public ManageLauncher(string fileName, IReadOnlyList<string> leadingArguments, string? socket)
    {
        _fileName = fileName;
        var args = new List<string>(leadingArguments) { "manage", "--no-browser" };
        if (socket is not null) args.AddRange(["--socket", socket]);
        _arguments = args;
    }

    /// <summary>
    /// The CLI as the MSI installs it beside the tray: <c>cli\xfswin.exe</c> under the tray's folder (the CLI carries its
    /// own runtime there), or, in a build tree or a hand-made copy, <c>xfswin.exe</c> next to the tray.
    /// </summary>
    public static ManageLauncher Installed(string trayDirectory) => new(InstalledCli(trayDirectory), [], null);

    /// <summary>Where <see cref="Installed"/> finds the CLI: <c>cli/xfswin(.exe)</c> when it exists, else the tray's own folder.</summary>
    public static string InstalledCli(string trayDirectory)
    {
        string name = OperatingSystem.IsWindows() ? "xfswin.exe" : "xfswin";
        string msi = Path.Combine(trayDirectory, "cli", name);
        return File.Exists(msi) ? msi : Path.Combine(trayDirectory, name);
    }

    [GeneratedRegex(@"^http://127\.0\.0\.1:\d{1,5}/[0-9a-f]{16,}/$")]
    private static partial Regex Address();

    /// <summary>Whether <paramref name="url"/> is what <c>xfswin manage</c> prints: http://127.0.0.1:PORT/TOKEN/ (lower-case hex token).</summary>
    public static bool IsAddress([System.Diagnostics.CodeAnalysis.NotNullWhen(true)] string? url) => url is not null && Address().IsMatch(url);

    /// <summary>The UI's address, starting <c>xfswin manage</c> when none runs; throws <see cref="IOException"/> saying why it could not.</summary>
    public async Task<string> UrlAsync(CancellationToken cancellationToken = default)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_process is { HasExited: false } && _url is not null) return _url;
            _process?.Dispose();
            _process = null;
            var psi = new ProcessStartInfo(_fileName)
            {
                UseShellExecute = false,
                CreateNoWindow = true,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            foreach (var a in _arguments) psi.ArgumentList.Add(a);
            Process process;
            try
            {
                process = Process.Start(psi) ?? throw new IOException($"could not start {_fileName}");
            }
            catch (System.ComponentModel.Win32Exception e)
            {
                throw new IOException($"could not start {_fileName}: {e.Message}", e);
            }
            var stderr = process.StandardError.ReadToEndAsync(CancellationToken.None);
            using var limit = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            limit.CancelAfter(TimeSpan.FromMinutes(1));
            string? line;
            try
            {
                line = await process.StandardOutput.ReadLineAsync(limit.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                Stop(process);
                throw new IOException("xfswin manage printed no address within a minute");
            }
            if (!IsAddress(line))
            {
                Stop(process);
                var why = (await stderr.ConfigureAwait(false)).Trim();
                throw new IOException(why.Length > 0 ? why : $"xfswin manage printed '{line}' instead of its address");
            }
            // Keep draining its output so the child never blocks on a full pipe.
            _ = process.StandardOutput.ReadToEndAsync(CancellationToken.None);
            _process = process;
            _url = line;
            return line;
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>The running child's process id, if one runs.</summary>
    public int? ProcessId => _process is { HasExited: false } p ? p.Id : null;

    private static void Stop(Process process)
    {
        try
        {
            if (!process.HasExited) process.Kill(entireProcessTree: true);
            process.WaitForExit(10_000);
        }
        catch (InvalidOperationException)
        {
        }
        process.Dispose();
    }

    public void Dispose()
    {
        if (_process is { } p) Stop(p);
        _process = null;
        _lock.Dispose();
    }
}

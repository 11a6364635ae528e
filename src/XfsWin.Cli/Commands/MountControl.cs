using System.Globalization;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using XfsWin.Admin;
using XfsWin.Check;
using XfsWin.Cli.Native;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary>
/// The control socket of a read-write <c>xfswin mount</c> server: how <c>xfswin grow MOUNTPOINT</c> and <c>xfswin check
/// MOUNTPOINT</c> reach the volume the server has open (only the process that holds the volume may change its geometry
/// or hold its changes off for a check).
/// <para>
/// Where: a Unix socket named after the mount point's absolute path (a hash of it), in a directory only its owner
/// can enter: <c>/run/xfswin</c> for root, else <c>$XDG_RUNTIME_DIR/xfswin</c>, else <c>/tmp/xfswin-UID</c>. The
/// server creates it once the mount is up and removes it when it stops serving.
/// </para>
/// <para>
/// What: one request per connection, one text line: <c>grow SIZE [IMAXPCT]</c> (SIZE as <c>-D</c> takes it, <c>-</c>
/// for the device's current size, <c>=</c> to keep the size; IMAXPCT a new inode limit in percent) or <c>check</c>.
/// Replies are lines: <c>progress DONE TOTAL STAGE</c> any number of times, then either <c>ok</c> with the result (a
/// grow's numbers, <see cref="FormatResult"/>; a check's report as one line of JSON) or <c>error EXITCODE MESSAGE</c>.
/// </para>
/// </summary>
internal static class MountControl
{
    public static string Directory()
    {
        if (OperatingSystem.IsLinux() && Posix.Geteuid() == 0) return "/run/xfswin";
        var runtime = Environment.GetEnvironmentVariable("XDG_RUNTIME_DIR");
        if (!string.IsNullOrEmpty(runtime) && System.IO.Directory.Exists(runtime)) return Path.Combine(runtime, "xfswin");
        return Path.Combine(Path.GetTempPath(), "xfswin-" + (OperatingSystem.IsLinux() ? Posix.Geteuid() : 0).ToString(CultureInfo.InvariantCulture));
    }

    /// <summary>The socket of the server mounted on <paramref name="mountPoint"/> (any spelling of the same absolute path).</summary>
    public static string SocketPath(string mountPoint)
    {
        var full = Path.TrimEndingDirectorySeparator(Path.GetFullPath(mountPoint));
        var hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(full)))[..24];
        return Path.Combine(Directory(), "mount-" + hash + ".sock");
    }

    /// <summary>Serves control requests for <paramref name="volume"/> on a background thread until disposed.</summary>
    public static IDisposable Serve(string mountPoint, XfsVolume volume, TextWriter log)
    {
        var dir = Directory();
        System.IO.Directory.CreateDirectory(dir);
        if (!OperatingSystem.IsWindows())
            File.SetUnixFileMode(dir, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        var path = SocketPath(mountPoint);
        // A socket left by a server that did not stop cleanly: nobody answers it, so it may go.
        if (File.Exists(path) && !Answers(path)) File.Delete(path);
        var listener = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
        listener.Bind(new UnixDomainSocketEndPoint(path));
        listener.Listen(4);
        var server = new Server(listener, path, volume, log, mountPoint);
        new Thread(server.Loop) { Name = "xfswin-mount-control", IsBackground = true }.Start();
        return server;
    }

    private static bool Answers(string path)
    {
        try
        {
            using var s = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
            s.Connect(new UnixDomainSocketEndPoint(path));
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    private sealed class Server(Socket listener, string path, XfsVolume volume, TextWriter log, string mountPoint) : IDisposable
    {
        private int _disposed;

        public void Loop()
        {
            while (Volatile.Read(ref _disposed) == 0)
            {
                Socket client;
                try
                {
                    client = listener.Accept();
                }
                catch (Exception e) when (e is SocketException or ObjectDisposedException)
                {
                    return;
                }
                using (client)
                {
                    try
                    {
                        Handle(client);
                    }
                    catch (Exception e) when (e is IOException or SocketException)
                    {
                        log.WriteLine($"xfswin mount: a control request failed: {e.Message}");
                    }
                }
            }
        }

        private void Handle(Socket client)
        {
            using var stream = new NetworkStream(client);
            using var reader = new StreamReader(stream, Encoding.UTF8);
            using var writer = new StreamWriter(stream, new UTF8Encoding(false)) { AutoFlush = true, NewLine = "\n" };
            var line = reader.ReadLine() ?? "";
            var parts = line.Split(' ');
            if (line == "check")
            {
                HandleCheck(writer);
                return;
            }
            if (parts[0] != "grow" || parts.Length is not (2 or 3))
            {
                writer.WriteLine($"error {ExitCodes.Usage} unknown request '{line}'");
                return;
            }
            try
            {
                var sb = volume.Info;
                bool keepSize = parts[1] == "=";
                ulong? blocks = parts[1] is "-" or "=" ? null : GrowCommand.ParseSize(parts[1], (uint)sb.BlockSize);
                int? imaxPct = parts.Length == 3 ? GrowCommand.ParseImaxPct(parts[2]) : null;
                var progress = new LineProgress(writer);
                var result = VolumeGrower.RunMounted(volume, blocks, progress, imaxPct, keepSize);
                writer.WriteLine("ok " + FormatResult(result));
            }
            catch (FormatException e)
            {
                writer.WriteLine($"error {ExitCodes.Usage} {OneLine(e.Message)}");
            }
            catch (XfsException e)
            {
                writer.WriteLine($"error {ExitCodes.FromError(e.Error)} {OneLine(e.Message)}");
            }
            catch (ObjectDisposedException)
            {
                writer.WriteLine($"error {ExitCodes.Refused} the volume is being unmounted");
            }
        }

        /// <summary>Checks the volume with every other request held off; the report goes back as one line of JSON.</summary>
        private void HandleCheck(StreamWriter writer)
        {
            try
            {
                var progress = new LineProgress(writer);
                var report = VolumeChecker.CheckMounted(volume, Path.GetFullPath(mountPoint), new CheckOptions { Progress = progress });
                writer.WriteLine("ok " + JsonSerializer.Serialize(CheckCommand.ToJson(report), CheckJsonLineContext.Default.CheckJson));
            }
            catch (XfsException e)
            {
                writer.WriteLine($"error {ExitCodes.FromError(e.Error)} {OneLine(e.Message)}");
            }
            catch (ObjectDisposedException)
            {
                writer.WriteLine($"error {ExitCodes.Refused} the volume is being unmounted");
            }
        }

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _disposed, 1) != 0) return;
            listener.Dispose();
            try
            {
                File.Delete(path);
            }
            catch (IOException)
            {
            }
        }
    }

    /// <summary>Progress lines, written synchronously and one at a time (a check reports from several threads).</summary>
    private sealed class LineProgress(TextWriter writer) : IProgress<GrowProgress>, IProgress<CheckProgress>
    {
        public void Report(GrowProgress value) => Write(value.Done, value.Total, value.Stage);

        public void Report(CheckProgress value) => Write(value.Done, value.Total, value.Phase);

        private void Write(long done, long total, string stage)
        {
            lock (writer) writer.WriteLine(string.Create(CultureInfo.InvariantCulture, $"progress {done} {total} {OneLine(stage)}"));
        }
    }

    private static string OneLine(string s) => s.ReplaceLineEndings(" ");

    public static string FormatResult(GrowResult r)
    {
        var p = r.Plan;
        return string.Join(' ', new ulong[]
        {
            p.RequestedBlocks, p.OldDataBlocks, p.NewDataBlocks, p.OldAgCount, p.NewAgCount, p.AgBlocks, p.BlockSize,
            (ulong)p.ImaxPct, (ulong)p.InoPBlog, p.InodeChunkBlocks, r.FreeBlocksBefore, r.FreeBlocksAfter, (ulong)p.OldImaxPct,
        }.Select(n => n.ToString(CultureInfo.InvariantCulture)));
    }

    public static GrowResult ParseResult(string text)
    {
        var n = text.Split(' ').Select(s => ulong.Parse(s, CultureInfo.InvariantCulture)).ToArray();
        if (n.Length != 13) throw new FormatException($"the mount server answered '{text}'");
        var plan = new GrowPlan(n[0], n[1], n[2], (uint)n[3], (uint)n[4], (uint)n[5], (uint)n[6], (int)n[7], (int)n[8], (uint)n[9], (int)n[12]);
        return new GrowResult(plan, n[10], n[11], false);
    }

    /// <summary>
    /// Sends a grow to the server mounted on <paramref name="mountPoint"/>; <paramref name="progress"/> sees its
    /// stages. Null when no xfswin server answers for that mount point.
    /// </summary>
    public static (GrowResult? Result, int ExitCode, string? Error)? Grow(string mountPoint, string? size, IProgress<GrowProgress>? progress,
        int? imaxPct = null, bool keepSize = false)
    {
        var answer = Request(mountPoint, "grow " + (keepSize ? "=" : size ?? "-") + (imaxPct is { } pct ? " " + pct.ToString(CultureInfo.InvariantCulture) : ""),
            (stage, done, total) => progress?.Report(new GrowProgress(stage, done, total)));
        if (answer is not { } a) return null;
        return (a.Ok is { } ok ? ParseResult(ok) : null, a.ExitCode, a.Error);
    }

    /// <summary>
    /// Asks the server mounted on <paramref name="mountPoint"/> to check its volume (every other request to it held off
    /// meanwhile); <paramref name="progress"/> sees its phases. Null when no xfswin server answers for that mount point.
    /// </summary>
    public static (CheckReport? Report, int ExitCode, string? Error)? Check(string mountPoint, IProgress<CheckProgress>? progress)
    {
        var answer = Request(mountPoint, "check", (phase, done, total) => progress?.Report(new CheckProgress(phase, done, total)));
        if (answer is not { } a) return null;
        if (a.Ok is not { } ok) return (null, a.ExitCode, a.Error);
        var json = JsonSerializer.Deserialize(ok, CheckJsonLineContext.Default.CheckJson)
                   ?? throw new FormatException("the mount server sent an empty check report");
        var problems = json.Problems.Select(p => new CheckProblem(p.Structure, p.Ag, p.Daddr, p.Message)).ToList();
        return (new CheckReport(json.Source, problems, json.ProblemCount - problems.Count, json.Summary, json.Notes), ExitCodes.Ok, null);
    }

    /// <summary>One request and its answer: progress lines to <paramref name="progress"/>, then the <c>ok</c> payload or the error. Null when no server answers.</summary>
    private static (string? Ok, int ExitCode, string? Error)? Request(string mountPoint, string request, Action<string, long, long> progress)
    {
        var path = SocketPath(mountPoint);
        if (!File.Exists(path)) return null;
        using var socket = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
        try
        {
            socket.Connect(new UnixDomainSocketEndPoint(path));
        }
        catch (SocketException)
        {
            return null;
        }
        using var stream = new NetworkStream(socket);
        using var reader = new StreamReader(stream, Encoding.UTF8);
        using var writer = new StreamWriter(stream, new UTF8Encoding(false)) { AutoFlush = true, NewLine = "\n" };
        writer.WriteLine(request);
        string? line;
        while ((line = reader.ReadLine()) is not null)
        {
            var parts = line.Split(' ', 4);
            switch (parts[0])
            {
                case "progress" when parts.Length == 4:
                    progress(parts[3], long.Parse(parts[1], CultureInfo.InvariantCulture), long.Parse(parts[2], CultureInfo.InvariantCulture));
                    break;
                case "ok":
                    return (line.Length > 3 ? line[3..] : "", ExitCodes.Ok, null);
                case "error":
                    var err = line.Split(' ', 3);
                    return (null, int.Parse(err[1], CultureInfo.InvariantCulture), err.Length > 2 ? err[2] : "");
            }
        }
        return (null, ExitCodes.IoError, "the mount server closed the connection without an answer (did it stop?)");
    }
}

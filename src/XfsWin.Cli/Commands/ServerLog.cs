using System.Text;

namespace XfsWin.Cli.Commands;

/// <summary>
/// Where a mount server's messages go (requests that failed on a damaged or unreadable volume, warnings): to standard
/// error, and to the file of <c>-o log=PATH</c> once <see cref="Open"/> made it, each line there stamped with the time
/// (UTC) and the server's process id. A background server's standard error ends with the command that started it, so
/// the file is where its messages stay. Lines from several threads are written whole, one at a time.
/// </summary>
internal sealed class ServerLog : TextWriter
{
    private readonly object _gate = new();
    private readonly TextWriter _console;
    private readonly StringBuilder _line = new();
    private StreamWriter? _file;

    public ServerLog(TextWriter console) => _console = console;

    public override Encoding Encoding => Encoding.UTF8;

    /// <summary>The log file, or null.</summary>
    public string? FilePath { get; private set; }

    /// <summary>Appends to <paramref name="path"/> from now on (created when missing). Throws IOException or UnauthorizedAccessException when it cannot be opened.</summary>
    public void Open(string path)
    {
        var stream = new FileStream(path, FileMode.Append, FileAccess.Write, FileShare.ReadWrite | FileShare.Delete);
        lock (_gate)
        {
            _file = new StreamWriter(stream, new UTF8Encoding(encoderShouldEmitUTF8Identifier: false)) { AutoFlush = true };
            FilePath = path;
        }
    }

    /// <summary>A line for the file only (what the terminal was told already, such as the mount's own line).</summary>
    public void FileOnly(string line)
    {
        lock (_gate) WriteToFile(line);
    }

    public override void Write(char value)
    {
        lock (_gate) AppendLocked(value);
    }

    public override void Write(string? value)
    {
        if (value is null) return;
        lock (_gate)
            foreach (var c in value) AppendLocked(c);
    }

    /// <summary>A character of the line being written; a newline ends the line. Caller holds <see cref="_gate"/>.</summary>
    private void AppendLocked(char c)
    {
        if (c == '\n') EndLine();
        else if (c != '\r') _line.Append(c);
    }

    public override void WriteLine(string? value)
    {
        lock (_gate)
        {
            _line.Append(value);
            EndLine();
        }
    }

    public override void WriteLine() => Write('\n');

    private void EndLine()
    {
        var text = _line.ToString();
        _line.Clear();
        _console.WriteLine(text);
        WriteToFile(text);
    }

    private void WriteToFile(string text)
    {
        if (_file is null) return;
        try
        {
            _file.WriteLine($"{DateTime.UtcNow:yyyy-MM-dd HH:mm:ss.fff}Z [{Environment.ProcessId}] {text}");
        }
        catch (IOException)
        {
            // A full or vanished log disk must not take the mount down; the terminal copy (if any) remains.
        }
    }

    protected override void Dispose(bool disposing)
    {
        if (disposing)
            lock (_gate)
            {
                if (_line.Length > 0) EndLine();
                _file?.Dispose();
                _file = null;
            }
        base.Dispose(disposing);
    }
}

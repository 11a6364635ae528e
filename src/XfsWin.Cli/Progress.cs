using System.Diagnostics;

namespace XfsWin.Cli;

/// <summary>
/// A one-line progress display on stderr: bytes done, total, percentage and rate. Redraws at most
/// four times a second; does nothing when disabled (stderr not a terminal, or --no-progress).
/// </summary>
public sealed class Progress
{
    private readonly TextWriter? _writer;
    private readonly string _label;
    private readonly long _total;
    private readonly Stopwatch _clock = Stopwatch.StartNew();
    private long _done;
    private long _items;
    private long _lastDraw = long.MinValue;
    private int _lastWidth;

    public Progress(TextWriter? writer, string label, long totalBytes)
    {
        _writer = writer;
        _label = label;
        _total = totalBytes;
    }

    public static Progress Disabled { get; } = new(null, "", 0);

    public bool Enabled => _writer is not null;

    public long BytesDone => _done;

    /// <summary>Decides whether to show progress: --progress forces it, --no-progress forbids it, otherwise only on a terminal.</summary>
    public static bool ShouldShow(bool? flag, CliConsole console) => flag ?? console.StderrIsTerminal;

    public void Add(long bytes, int items = 0)
    {
        _done += bytes;
        _items += items;
        if (_writer is null) return;
        long now = _clock.ElapsedMilliseconds;
        if (now - _lastDraw < 250) return;
        _lastDraw = now;
        Draw(final: false);
    }

    public void Finish()
    {
        if (_writer is null) return;
        Draw(final: true);
        _writer.WriteLine();
        _writer.Flush();
    }

    private void Draw(bool final)
    {
        double seconds = Math.Max(_clock.Elapsed.TotalSeconds, 0.001);
        string rate = FormatBytes((long)(_done / seconds)) + "/s";
        string amount = FormatBytes(_done);
        if (_total > 0)
        {
            int percent = (int)Math.Min(100, _done * 100 / _total);
            string bar = new string('#', percent / 5).PadRight(20, '.');
            amount = $"[{bar}] {amount} / {FormatBytes(_total)} ({percent,3}%)";
        }
        string items = _items > 0 ? $", {_items} items" : "";
        string line = $"{_label}: {amount}{items}, {rate}{(final ? $", {seconds:F1} s" : "")}";
        string pad = line.Length < _lastWidth ? new string(' ', _lastWidth - line.Length) : "";
        _lastWidth = line.Length;
        _writer!.Write("\r" + line + pad);
        _writer.Flush();
    }

    public static string FormatBytes(long bytes)
    {
        string[] units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        double v = bytes;
        int u = 0;
        while (v >= 1024 && u < units.Length - 1) { v /= 1024; u++; }
        return u == 0 ? $"{bytes} B" : $"{v:F1} {units[u]}";
    }
}

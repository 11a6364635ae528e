using System.Diagnostics;
using Spectre.Console;
using Spectre.Console.Rendering;

namespace XfsWin.Cli.Output;

/// <summary>How a command shows progress: not at all, live on a terminal (Spectre.Console), or as plain final lines (forced on a pipe).</summary>
public enum ProgressMode
{
    Off,
    /// <summary>stderr is a terminal: a live display redrawn in place.</summary>
    Live,
    /// <summary>--progress on a pipe or file: one plain, parseable line per stage or transfer when it ends.</summary>
    Plain,
}

/// <summary>
/// The one progress display of every long-running command (mkfs, grow, check, extract, cat, recover). Two kinds
/// of work report into it: transfers (<see cref="Add"/>: bytes and items, with a rate) and staged work
/// (<see cref="Stage"/>: named stages, each done/total). On a terminal it is a Spectre.Console live display on
/// stderr, drawn by its own thread from the last values reported (reporting never blocks on the terminal);
/// forced onto a pipe it prints plain lines; off, it does nothing. stdout is never touched.
/// Thread safety: reports may come from any thread; <see cref="Finish"/> is called once, by the owner.
/// </summary>
public sealed class CliProgress : IDisposable
{
    private readonly object _lock = new();
    private readonly TextWriter? _writer;
    private readonly ProgressMode _mode;
    private readonly string _label;
    private readonly long _total;
    private readonly Stopwatch _clock = Stopwatch.StartNew();
    private long _done, _items;
    // A transfer shows once something was added to it (or it has a known total): staged work has no transfer line.
    private volatile bool _transfer;
    // Stages in the order they started: name, done, total, finished.
    private readonly List<StageState> _stages = [];
    private Thread? _renderer;
    private volatile bool _finished;

    private sealed class StageState(string name)
    {
        public readonly string Name = name;
        public long Done, Total;
        public bool Printed;
    }

    private CliProgress(TextWriter? writer, ProgressMode mode, string label, long totalBytes)
    {
        _writer = writer;
        _mode = writer is null ? ProgressMode.Off : mode;
        _label = label;
        _total = totalBytes;
        _transfer = totalBytes > 0;
        if (_mode == ProgressMode.Live) StartRenderer();
    }

    public static CliProgress Disabled { get; } = new(null, ProgressMode.Off, "", 0);

    /// <summary>
    /// Progress for <paramref name="console"/>: <paramref name="flag"/> true (--progress) forces it (live on a terminal,
    /// plain otherwise), false (--no-progress) forbids it, null shows it only when stderr is a terminal.
    /// </summary>
    public static CliProgress Start(CliConsole console, bool? flag, string label, long totalBytes = 0) =>
        Start(console.Error, ModeFor(flag, console.StderrIsTerminal), label, totalBytes);

    public static CliProgress Start(TextWriter stderr, ProgressMode mode, string label, long totalBytes = 0) =>
        mode == ProgressMode.Off ? Disabled : new CliProgress(stderr, mode, label, totalBytes);

    public static ProgressMode ModeFor(bool? flag, bool stderrIsTerminal) => flag switch
    {
        false => ProgressMode.Off,
        true => stderrIsTerminal ? ProgressMode.Live : ProgressMode.Plain,
        null => stderrIsTerminal ? ProgressMode.Live : ProgressMode.Off,
    };

    public bool Enabled => _mode != ProgressMode.Off;
    public long BytesDone => Interlocked.Read(ref _done);

    /// <summary>A transfer advanced by <paramref name="bytes"/> and <paramref name="items"/>.</summary>
    public void Add(long bytes, int items = 0)
    {
        Interlocked.Add(ref _done, bytes);
        if (items != 0) Interlocked.Add(ref _items, items);
        _transfer = true;
    }

    /// <summary>Stage <paramref name="stage"/> is at <paramref name="done"/> of <paramref name="total"/> (total 0: unknown). A new stage ends the one before.</summary>
    public void Stage(string stage, long done, long total)
    {
        if (_mode == ProgressMode.Off) return;
        lock (_lock)
        {
            var s = _stages.Find(x => x.Name == stage);
            if (s is null)
            {
                if (_stages.Count > 0) EndStage(_stages[^1]);
                s = new StageState(stage);
                _stages.Add(s);
            }
            s.Done = done;
            s.Total = total;
        }
    }

    /// <summary>An <see cref="IProgress{T}"/> that reports into stages (engine progress types adapt through a selector).</summary>
    public IProgress<T> For<T>(Func<T, (string Stage, long Done, long Total)> select) => new Adapter<T>(this, select);

    /// <summary>A fraction 0..1 of one stage.</summary>
    public IProgress<double> ForFraction(string stage) => new Adapter<double>(this, v => (stage, (long)Math.Round(Math.Clamp(v, 0, 1) * 1000), 1000));

    private sealed class Adapter<T>(CliProgress owner, Func<T, (string Stage, long Done, long Total)> select) : IProgress<T>
    {
        public void Report(T value)
        {
            var (stage, done, total) = select(value);
            owner.Stage(stage, done, total);
        }
    }

    private void EndStage(StageState s)
    {
        if (s.Total > 0) s.Done = s.Total;
        if (_mode == ProgressMode.Plain && !s.Printed)
        {
            s.Printed = true;
            _writer!.WriteLine($"{_label}: {s.Name}: done");
            _writer.Flush();
        }
    }

    /// <summary>Ends the display: a live one draws its final state and stops; a plain one prints its summary line.</summary>
    public void Finish()
    {
        if (_mode == ProgressMode.Off || _finished) return;
        lock (_lock)
        {
            if (_stages.Count > 0) EndStage(_stages[^1]);
        }
        _finished = true;
        _renderer?.Join();
        if (_mode == ProgressMode.Plain && _transfer)
        {
            _writer!.WriteLine(TransferLine(final: true));
            _writer.Flush();
        }
    }

    public void Dispose() => Finish();

    /// <summary>"label: [bar] done / total (pct), N items, rate, seconds": the plain transfer line (also what scripts parse).</summary>
    private string TransferLine(bool final)
    {
        double seconds = Math.Max(_clock.Elapsed.TotalSeconds, 0.001);
        long done = BytesDone, items = Interlocked.Read(ref _items);
        string amount = Formatting.Bytes(done);
        if (_total > 0)
        {
            int percent = (int)Math.Min(100, done * 100 / _total);
            string bar = new string('#', percent / 5).PadRight(20, '.');
            amount = $"[{bar}] {amount} / {Formatting.Bytes(_total)} ({percent,3}%)";
        }
        string itemText = items > 0 ? $", {items} items" : "";
        return $"{_label}: {amount}{itemText}, {Formatting.Bytes((long)(done / seconds))}/s{(final ? $", {seconds:F1} s" : "")}";
    }

    private void StartRenderer()
    {
        var console = AnsiConsole.Create(new AnsiConsoleSettings
        {
            Out = new AnsiConsoleOutput(_writer!),
            Ansi = AnsiSupport.Detect,
            ColorSystem = ColorSystemSupport.Detect,
            Interactive = InteractionSupport.Yes,
        });
        _renderer = new Thread(() => Render(console)) { IsBackground = true, Name = "xfswin progress" };
        _renderer.Start();
    }

    private void Render(IAnsiConsole console)
    {
        var columns = new List<ProgressColumn> { new TaskDescriptionColumn { Alignment = Justify.Left }, new ProgressBarColumn(), new PercentageColumn() };
        columns.Add(new ElapsedTimeColumn());
        console.Progress()
            .AutoClear(false)
            .HideCompleted(false)
            .Columns([.. columns])
            .Start(ctx =>
            {
                var tasks = new Dictionary<string, ProgressTask>();
                ProgressTask? transfer = null;
                while (true)
                {
                    bool last = _finished;
                    lock (_lock)
                    {
                        foreach (var s in _stages)
                        {
                            if (!tasks.TryGetValue(s.Name, out var t))
                            {
                                t = ctx.AddTask(Markup.Escape($"{_label}: {s.Name}"), autoStart: true, maxValue: Math.Max(1, s.Total));
                                tasks.Add(s.Name, t);
                            }
                            if (s.Total > 0)
                            {
                                t.MaxValue = s.Total;
                                t.Value = Math.Min(s.Done, s.Total);
                            }
                            else
                            {
                                t.IsIndeterminate = true;
                            }
                        }
                    }
                    if (_transfer)
                    {
                        transfer ??= ctx.AddTask(Markup.Escape(_label), autoStart: true, maxValue: Math.Max(1, _total));
                        transfer.Description = Markup.Escape(TransferLine(final: false));
                        if (_total > 0) transfer.Value = Math.Min(BytesDone, _total);
                        else transfer.IsIndeterminate = !last;
                    }
                    if (last)
                    {
                        foreach (var t in tasks.Values)
                        {
                            t.IsIndeterminate = false;
                            t.Value = t.MaxValue;
                        }
                        if (transfer is not null)
                        {
                            transfer.Description = Markup.Escape(TransferLine(final: true));
                            transfer.IsIndeterminate = false;
                            transfer.Value = transfer.MaxValue;
                        }
                        ctx.Refresh();
                        return;
                    }
                    ctx.Refresh();
                    Thread.Sleep(100);
                }
            });
    }
}

/// <summary>
/// Tables of the long-running commands' results: a Spectre.Console table on a terminal, plain aligned columns
/// (one row per line, columns separated by two spaces or more) everywhere else, so scripts and tests can parse them.
/// </summary>
public static class CliTable
{
    public static void Write(TextWriter writer, bool terminal, IReadOnlyList<string> headers, IEnumerable<IReadOnlyList<string>> rows)
    {
        var list = rows.ToList();
        if (terminal)
        {
            var console = AnsiConsole.Create(new AnsiConsoleSettings
            {
                Out = new AnsiConsoleOutput(writer),
                Ansi = AnsiSupport.Detect,
                ColorSystem = ColorSystemSupport.Detect,
            });
            var table = new Table().Border(TableBorder.Rounded);
            foreach (var h in headers) table.AddColumn(new TableColumn(Markup.Escape(h)));
            foreach (var r in list) table.AddRow(r.Select(c => (IRenderable)new Text(c)).ToArray());
            console.Write(table);
            return;
        }
        var widths = headers.Select(h => h.Length).ToArray();
        foreach (var r in list)
            for (int i = 0; i < r.Count && i < widths.Length; i++) widths[i] = Math.Max(widths[i], r[i].Length);
        void Line(IReadOnlyList<string> cells) =>
            writer.WriteLine(string.Join("  ", cells.Select((c, i) => i == cells.Count - 1 ? c : c.PadRight(widths[i]))).TrimEnd());
        Line(headers);
        foreach (var r in list) Line(r);
    }
}

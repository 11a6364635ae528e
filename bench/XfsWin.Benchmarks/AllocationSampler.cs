using System.Diagnostics.Tracing;
using System.Globalization;

namespace XfsWin.Benchmarks;

/// <summary>
/// The runtime's allocation ticks (one event per ~100 KB allocated, naming the type that crossed the mark), summed by
/// type: where a run's allocations go, without an external profiler. Used by <c>engine-write --alloc</c>.
/// </summary>
internal sealed class AllocationSampler : EventListener
{
    private readonly Dictionary<string, long> _bytes = new();
    private bool _enabled;

    protected override void OnEventSourceCreated(EventSource source)
    {
        if (source.Name == "Microsoft-Windows-DotNETRuntime")
            EnableEvents(source, EventLevel.Verbose, (EventKeywords)0x1); // GC keyword: GCAllocationTick
    }

    public void Start() => _enabled = true;

    protected override void OnEventWritten(EventWrittenEventArgs e)
    {
        if (!_enabled || e.EventName is null || !e.EventName.StartsWith("GCAllocationTick", StringComparison.Ordinal) || e.Payload is null) return;
        int typeIndex = e.PayloadNames!.IndexOf("TypeName");
        int amountIndex = e.PayloadNames.IndexOf("AllocationAmount64");
        if (typeIndex < 0) return;
        string type = e.Payload[typeIndex] as string ?? "?";
        long amount = amountIndex >= 0 ? Convert.ToInt64(e.Payload[amountIndex], CultureInfo.InvariantCulture) : 100_000;
        lock (_bytes) _bytes[type] = _bytes.GetValueOrDefault(type) + amount;
    }

    public void Print(int operations)
    {
        lock (_bytes)
        {
            long total = _bytes.Values.Sum();
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"allocations sampled: {total / 1024} KiB, {total / Math.Max(1, operations)} bytes per operation; by type:"));
            foreach (var (type, bytes) in _bytes.OrderByDescending(p => p.Value).Take(25))
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  {bytes * 100.0 / total,5:F1}%  {bytes / Math.Max(1, operations),7} B/op  {type}"));
        }
    }
}

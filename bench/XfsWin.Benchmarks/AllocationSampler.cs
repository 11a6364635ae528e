using System.Diagnostics.Tracing;
using System.Globalization;

namespace XfsWin.Benchmarks;

/// <summary>
/// The runtime's randomized allocation samples (AllocationSampled: each allocated byte is sampled with the same
/// probability, one sample per 100 KiB on average, so a type's samples are proportional to the bytes it allocated),
/// summed by type: where a run's allocations go, without an external profiler. Used by <c>engine-write</c> with
/// XFSWIN_BENCH_ALLOC=1. (The older allocation tick names whatever object crossed a 100 KB mark, which favours objects
/// allocated right after large ones; it is not used.)
/// </summary>
internal sealed class AllocationSampler : EventListener
{
    private readonly Dictionary<string, long> _bytes = new();
    private bool _enabled;
    private const long AllocationSamplingKeyword = 0x800_0000_0000;
    /// <summary>The mean distance in bytes between two samples (the runtime's sampling rate).</summary>
    private const long MeanSampleDistance = 100 * 1024;

    protected override void OnEventSourceCreated(EventSource source)
    {
        if (source.Name == "Microsoft-Windows-DotNETRuntime")
            EnableEvents(source, EventLevel.Informational, (EventKeywords)AllocationSamplingKeyword);
    }

    public void Start() => _enabled = true;

    /// <summary>Forgets what was sampled so far (the next phase of a run starts from zero).</summary>
    public void Reset()
    {
        lock (_bytes) _bytes.Clear();
    }

    protected override void OnEventWritten(EventWrittenEventArgs e)
    {
        if (!_enabled || e.EventName != "AllocationSampled" || e.Payload is null) return;
        int typeIndex = e.PayloadNames!.IndexOf("TypeName");
        if (typeIndex < 0) return;
        string type = e.Payload[typeIndex] as string ?? "?";
        lock (_bytes) _bytes[type] = _bytes.GetValueOrDefault(type) + MeanSampleDistance;
    }

    public void Print(int operations)
    {
        lock (_bytes)
        {
            long total = _bytes.Values.Sum();
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"allocations sampled: {total / 1024} KiB, {total / Math.Max(1, operations)} bytes per operation; by type:"));
            foreach (var (type, bytes) in _bytes.OrderByDescending(p => p.Value).Take(40))
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  {bytes * 100.0 / total,5:F1}%  {bytes / Math.Max(1, operations),7} B/op  {type}"));
        }
    }
}

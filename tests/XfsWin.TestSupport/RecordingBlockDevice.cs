using XfsWin.Device;

namespace XfsWin.TestSupport;

/// <summary>One thing the engine asked of the device: a write (offset and a copy of its bytes) or, with null data, a flush.</summary>
public readonly record struct DeviceEvent(long Offset, byte[]? Data)
{
    public bool IsFlush => Data is null;
}

/// <summary>
/// A device that passes everything to the device it wraps and keeps, in order, every write (offset and bytes) and
/// every flush. Crash images are built from what it kept (<see cref="CrashImage"/>): what a power cut after any event
/// could leave on a disk whose cache holds the writes since the last flush in any order.
/// </summary>
public sealed class RecordingBlockDevice(IBlockDevice inner) : IBlockDevice
{
    private readonly List<DeviceEvent> _events = [];

    public long Length => inner.Length;
    public int SectorSize => inner.SectorSize;
    public bool CanWrite => inner.CanWrite;
    public string IoMode => "recording: " + inner.IoMode;

    /// <summary>How many events have been recorded; an index into <see cref="Snapshot"/> taken later.</summary>
    public int EventCount
    {
        get { lock (_events) return _events.Count; }
    }

    /// <summary>A copy of the events recorded so far.</summary>
    public IReadOnlyList<DeviceEvent> Snapshot()
    {
        lock (_events) return [.. _events];
    }

    public void Read(long offset, Span<byte> destination) => inner.Read(offset, destination);

    public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default) =>
        inner.ReadAsync(offset, destination, cancellationToken);

    public void Write(long offset, ReadOnlySpan<byte> source)
    {
        // Recorded and applied under one lock, so the recorded order is the order the device saw.
        lock (_events)
        {
            _events.Add(new DeviceEvent(offset, source.ToArray()));
            inner.Write(offset, source);
        }
    }

    public void Flush()
    {
        lock (_events)
        {
            inner.Flush();
            _events.Add(new DeviceEvent(0, null));
        }
    }

    public void Dispose() => inner.Dispose();
}

/// <summary>Which of the writes since the last flush reached the disk in a crash image.</summary>
public enum CrashSubset
{
    /// <summary>None of them: only what the last flush made durable.</summary>
    None,
    /// <summary>All of them, in order.</summary>
    All,
    /// <summary>The first n of them (a cache that wrote in order and stopped).</summary>
    Prefix,
    /// <summary>A seeded random subset (a cache that reordered them).</summary>
    Random,
}

/// <summary>
/// A crash point: the device lost power after event <see cref="Point"/> - 1. Everything up to the last flush before
/// it is on disk; of the writes between that flush and the point, <see cref="Subset"/> says which made it.
/// </summary>
public readonly record struct CrashPoint(int Point, CrashSubset Subset, int Seed)
{
    public override string ToString() => $"point {Point} {Subset}" + (Subset is CrashSubset.Prefix or CrashSubset.Random ? $" seed {Seed}" : "");
}

public static class CrashImage
{
    /// <summary>Index of the last flush among events [0, point), or -1 when there is none.</summary>
    public static int LastFlushBefore(IReadOnlyList<DeviceEvent> events, int point)
    {
        for (int i = point - 1; i >= 0; i--)
            if (events[i].IsFlush) return i;
        return -1;
    }

    /// <summary>The indices of the writes a crash at <paramref name="crash"/> leaves on disk, in the order they were issued.</summary>
    public static List<int> DurableWrites(IReadOnlyList<DeviceEvent> events, CrashPoint crash)
    {
        int flush = LastFlushBefore(events, crash.Point);
        var chosen = new List<int>();
        for (int i = 0; i <= flush; i++)
            if (!events[i].IsFlush) chosen.Add(i);
        var pending = Enumerable.Range(flush + 1, crash.Point - flush - 1).Where(i => !events[i].IsFlush).ToList();
        var rng = new Random(crash.Seed);
        switch (crash.Subset)
        {
            case CrashSubset.All:
                chosen.AddRange(pending);
                break;
            case CrashSubset.Prefix:
                chosen.AddRange(pending.Take(pending.Count == 0 ? 0 : rng.Next(pending.Count + 1)));
                break;
            case CrashSubset.Random:
                chosen.AddRange(pending.Where(_ => rng.Next(2) == 0));
                break;
        }
        return chosen;
    }

    /// <summary>Writes the crash image: a sparse copy of <paramref name="baseImage"/> with the chosen writes applied in order.</summary>
    public static void Build(string baseImage, IReadOnlyList<DeviceEvent> events, IReadOnlyList<int> writes, string target)
    {
        Shell.RunChecked("cp", "--sparse=always", baseImage, target);
        using var file = new FileStream(target, FileMode.Open, FileAccess.ReadWrite, FileShare.None);
        foreach (int i in writes)
        {
            var e = events[i];
            file.Position = e.Offset;
            file.Write(e.Data!);
        }
        file.Flush(flushToDisk: false);
    }
}

namespace XfsWin.Metadata;

/// <summary>
/// Health of one opened volume. The first corruption found is kept; from then on the volume
/// refuses writes (it still serves reads of intact metadata). Thread-safe.
/// </summary>
public sealed class VolumeHealth
{
    private XfsCorruptionException? _first;
    private int _count;

    public bool IsHealthy => Volatile.Read(ref _first) is null;

    public XfsCorruptionException? FirstCorruption => Volatile.Read(ref _first);

    public int CorruptionCount => Volatile.Read(ref _count);

    /// <summary>Records corruption found and raised elsewhere (the editors of in-place recovery); returns it for rethrowing.</summary>
    public XfsCorruptionException Record(XfsCorruptionException e)
    {
        ArgumentNullException.ThrowIfNull(e);
        Interlocked.CompareExchange(ref _first, e, null);
        Interlocked.Increment(ref _count);
        return e;
    }

    public XfsCorruptionException Report(string structure, long byteOffset, string problem)
    {
        var e = new XfsCorruptionException(structure, byteOffset, problem);
        Interlocked.CompareExchange(ref _first, e, null);
        Interlocked.Increment(ref _count);
        return e;
    }
}

namespace XfsWin.Format;

/// <summary>
/// A timestamp as XFS stores it: seconds since the Unix epoch (may be negative) and nanoseconds.
/// </summary>
public readonly record struct XfsTimestamp(long Seconds, uint Nanoseconds)
{
    public DateTimeOffset ToDateTimeOffset() =>
        DateTimeOffset.UnixEpoch.AddTicks(checked(Seconds * TimeSpan.TicksPerSecond + Nanoseconds / 100));

    /// <summary>100 ns intervals since 1601-01-01 (Windows FILETIME).</summary>
    public long ToFileTime() => (Seconds + 11644473600L) * 10_000_000L + Nanoseconds / 100;

    public override string ToString() => $"{ToDateTimeOffset():yyyy-MM-dd HH:mm:ss}.{Nanoseconds:D9}";
}

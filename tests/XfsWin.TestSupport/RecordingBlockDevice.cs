using System.Buffers.Binary;
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
        // Applied and recorded under one lock, so the recorded order is the order the device saw; a write the device
        // failed is not recorded (a fault-injecting device below decides what of it reached the disk).
        lock (_events)
        {
            inner.Write(offset, source);
            _events.Add(new DeviceEvent(offset, source.ToArray()));
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
/// <para>
/// With <see cref="Torn"/>, writes of several 512-byte sectors (a disk's atomic unit) may reach the disk only in part:
/// some of their sectors new, the others as before. Which writes tear depends on the subset: with
/// <see cref="CrashSubset.Prefix"/> the write after the prefix (the one the power cut interrupted), with
/// <see cref="CrashSubset.All"/> the last pending one, with <see cref="CrashSubset.Random"/> each chosen one with
/// probability one half. Only writes the caller calls tearable tear.
/// </para>
/// </summary>
public readonly record struct CrashPoint(int Point, CrashSubset Subset, int Seed, bool Torn = false)
{
    public override string ToString() =>
        $"point {Point} {Subset}" + (Subset is CrashSubset.Prefix or CrashSubset.Random || Torn ? $" seed {Seed}" : "") + (Torn ? " torn" : "");
}

/// <summary>A write a crash image holds: the event's index, and which of its 512-byte sectors made it (null: all).</summary>
public readonly record struct DurableWrite(int Index, bool[]? Sectors)
{
    public bool IsTorn => Sectors is not null;

    public override string ToString() =>
        Sectors is null ? Index.ToString(System.Globalization.CultureInfo.InvariantCulture)
            : $"{Index}[{string.Concat(Sectors.Select(s => s ? '1' : '0'))}]";
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

    /// <summary>The indices of the writes a crash at <paramref name="crash"/> leaves on disk, in the order they were issued (whole writes; see <see cref="DurableSectors"/> for torn ones).</summary>
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

    /// <summary>
    /// Whether a write starts with a V5 metadata block: a magic at offset 0 (superblock, AG headers, btree blocks,
    /// directory data and free blocks, remote attribute values and symlinks), a directory leaf, da-node or attribute
    /// leaf magic at offset 8, or an inode ("IN"). File data that happens to start so is taken for metadata (it then
    /// only never tears), which random data does with negligible odds.
    /// </summary>
    public static bool IsMetadataBlock(ReadOnlySpan<byte> data)
    {
        if (data.Length < 12) return false;
        uint m32 = BinaryPrimitives.ReadUInt32BigEndian(data);
        ushort m16 = BinaryPrimitives.ReadUInt16BigEndian(data[8..]);
        return m32 is 0x58465342 /* XFSB */ or 0x58414746 /* XAGF */ or 0x58414749 /* XAGI */ or 0x5841464C /* XAFL */
                   or 0x5841524D /* XARM */ or 0x58534C4D /* XSLM */ or 0x58444233 /* XDB3 */ or 0x58444433 /* XDD3 */
                   or 0x58444633 /* XDF3 */ or 0x41423342 /* AB3B */ or 0x41423343 /* AB3C */ or 0x49414233 /* IAB3 */
                   or 0x46494233 /* FIB3 */ or 0x524D4233 /* RMB3 */ or 0x52334643 /* R3FC */ or 0x424D4133 /* BMA3 */
            || m16 is 0x3DF1 or 0x3DFF or 0x3EBE or 0x3BEE
            || BinaryPrimitives.ReadUInt16BigEndian(data) == 0x494E; // IN: an inode cluster
    }

    /// <summary>The bytes of a disk's atomic write unit.</summary>
    public const int SectorBytes = 512;

    /// <summary>
    /// The writes a crash at <paramref name="crash"/> leaves on disk, in issue order, with the sectors of torn writes
    /// (<see cref="CrashPoint.Torn"/>; only writes of more than one sector for which <paramref name="tearable"/> is
    /// true tear, keeping a seeded non-empty proper subset of their sectors). Without tearing this is
    /// <see cref="DurableWrites"/>.
    /// </summary>
    public static List<DurableWrite> DurableSectors(IReadOnlyList<DeviceEvent> events, CrashPoint crash, Func<DeviceEvent, bool>? tearable = null)
    {
        var whole = DurableWrites(events, crash);
        var result = whole.Select(i => new DurableWrite(i, null)).ToList();
        if (!crash.Torn) return result;
        bool CanTear(int i) => events[i].Data!.Length > SectorBytes && (tearable?.Invoke(events[i]) ?? true);
        var rng = new Random(crash.Seed ^ 0x5EED);
        bool[] Tear(int i)
        {
            int n = (events[i].Data!.Length + SectorBytes - 1) / SectorBytes;
            while (true)
            {
                var kept = new bool[n];
                for (int s = 0; s < n; s++) kept[s] = rng.Next(2) == 0;
                int count = kept.Count(k => k);
                if (count > 0 && count < n) return kept;
            }
        }
        int flush = LastFlushBefore(events, crash.Point);
        var pending = Enumerable.Range(flush + 1, crash.Point - flush - 1).Where(i => !events[i].IsFlush).ToList();
        switch (crash.Subset)
        {
            case CrashSubset.Prefix:
            {
                // The write the power cut interrupted: the first pending one the prefix left out.
                int taken = result.Count(w => w.Index > flush);
                if (taken < pending.Count && CanTear(pending[taken])) result.Add(new DurableWrite(pending[taken], Tear(pending[taken])));
                break;
            }
            case CrashSubset.All:
            {
                int last = result.FindLastIndex(w => w.Index > flush && CanTear(w.Index));
                if (last >= 0) result[last] = new DurableWrite(result[last].Index, Tear(result[last].Index));
                break;
            }
            case CrashSubset.Random:
                for (int k = 0; k < result.Count; k++)
                    if (result[k].Index > flush && CanTear(result[k].Index) && rng.Next(2) == 0)
                        result[k] = new DurableWrite(result[k].Index, Tear(result[k].Index));
                break;
        }
        return result;
    }

    /// <summary>Writes the crash image: a sparse copy of <paramref name="baseImage"/> with the chosen writes applied in order.</summary>
    public static void Build(string baseImage, IReadOnlyList<DeviceEvent> events, IReadOnlyList<int> writes, string target) =>
        Build(baseImage, events, writes.Select(i => new DurableWrite(i, null)).ToList(), target);

    /// <summary>Writes the crash image: a sparse copy of <paramref name="baseImage"/> with the chosen writes (or the kept sectors of torn ones) applied in order.</summary>
    public static void Build(string baseImage, IReadOnlyList<DeviceEvent> events, IReadOnlyList<DurableWrite> writes, string target)
    {
        Shell.RunChecked("cp", "--sparse=always", baseImage, target);
        using var file = new FileStream(target, FileMode.Open, FileAccess.ReadWrite, FileShare.None);
        foreach (var w in writes)
        {
            var e = events[w.Index];
            if (w.Sectors is null)
            {
                file.Position = e.Offset;
                file.Write(e.Data!);
                continue;
            }
            for (int s = 0; s < w.Sectors.Length; s++)
            {
                if (!w.Sectors[s]) continue;
                int from = s * SectorBytes;
                file.Position = e.Offset + from;
                file.Write(e.Data!, from, Math.Min(SectorBytes, e.Data!.Length - from));
            }
        }
        file.Flush(flushToDisk: false);
    }
}

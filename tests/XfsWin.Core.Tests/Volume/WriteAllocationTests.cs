using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Managed memory a steady stream of writes over a file's existing, written blocks, and of reads of it, allocates per
/// call, on a volume made by mkfs.xfs and opened read-write. The data costs nothing per call, whatever its size: small
/// writes are copied into block arrays the data cache reuses after each write-out, large ones go to the device from the
/// caller's span, a partial block is merged in one scratch block, and the blocks are found in the inode's extent list
/// without an extent editor. The transaction costs nothing either: its object, lists, dirty maps and change set come
/// from the volume's transaction pool, the inode's working copy is the one the volume keeps for writes, its log item is
/// reused once the CIL merged it into the one it holds, and a grant with room in the log allocates nothing. What
/// remains, the same for 1,000 bytes and 1 MiB, is the inode's new committed state: measured on .NET 10 with 512-byte
/// inodes, 800 B (the 536-byte committed image that the log item, the cluster buffer and the inode cache share, and the
/// 264-byte decoded inode the cache publishes; both are immutable snapshots that readers and the log may still hold).
/// That is paid once per timestamp granule (<see cref="XfsVolume.TimestampGranuleNanoseconds"/>) of a file's writes:
/// the overwrites within one change nothing of the inode, take no transaction and allocate nothing. The volume's
/// clock is set by the test, so which writes update the inode does not depend on how fast they run.
/// A read allocates nothing.
/// Allocation counts are deterministic (no timing involved): every call runs on this thread, and so does each
/// checkpoint a commit triggers. Nothing but the calls runs between the two readings of the counter.
/// </summary>
public sealed class WriteAllocationTests(ITestOutputHelper output) : IDisposable
{
    /// <summary>The committed inode's cost (800 B measured, see above) with room for object layouts that differ between runtime versions.</summary>
    private const long PerWriteBound = 896;
    /// <summary>How far calls of different sizes may differ (one-off growth of the cache's tables spread over the calls).</summary>
    private const long SizeSlack = 64;
    private const int FileBytes = 16 << 20;
    private const int Calls = 200;

    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-walloc.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>A read-write volume with a 16 MiB file of 0x5A bytes, written and synced.</summary>
    private (XfsVolume Volume, ulong Ino) FilledVolume(byte[] data)
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-f", "-q", image);
        var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        ulong ino = volume.CreateNode(volume.RootInode, "f"u8, 0x81A4 /* regular 0644 */, 0, 0).Inode;
        data.AsSpan().Fill(0x5A);
        for (long at = 0; at < FileBytes; at += data.Length) volume.Write(ino, at, data);
        volume.Sync();
        // The premise: a few extents, held as the inode's extent list (a 512-byte inode's fork has room for 21).
        Assert.InRange(volume.GetAttributes(ino).DataExtentCount, 1UL, 8UL);
        return (volume, ino);
    }

    [Fact]
    public void Steady_writes_over_written_blocks_allocate_only_the_committed_inode_once_per_timestamp_granule()
    {
        var data = new byte[1 << 20];
        var (volume, ino) = FilledVolume(data);
        using var _ = volume;

        // The clock: an hour ahead of the file's times, at the start of a granule; each call of PerCall moves it to the
        // next granule (every write updates the inode) or leaves it (no write after the first in it does).
        var now = XfsVolume.SystemNow();
        var clock = new XfsWin.Format.XfsTimestamp(now.Seconds + 3600, 0);
        volume.Clock = () => clock;
        void NextGranule() => clock = clock.Nanoseconds + XfsVolume.TimestampGranuleNanoseconds < 1_000_000_000
            ? clock with { Nanoseconds = clock.Nanoseconds + XfsVolume.TimestampGranuleNanoseconds }
            : new XfsWin.Format.XfsTimestamp(clock.Seconds + 1, 0);

        long offset = 0;
        long PerCall(int size, int calls, bool granulePerCall = true)
        {
            int wrong = 0;
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < calls; i++)
            {
                if (offset + size > FileBytes) offset = 0;
                if (granulePerCall) NextGranule();
                if (volume.Write(ino, offset, data.AsSpan(0, size)) != size) wrong++;
                offset += size;
            }
            long perCall = (GC.GetAllocatedBytesForCurrentThread() - before) / calls;
            Assert.Equal(0, wrong);
            return perCall;
        }

        var perCall = new Dictionary<int, long>();
        // 1000 bytes: unaligned, every call merges partial blocks.
        foreach (int size in new[] { 1000, 4096, 64 << 10, 1 << 20 })
        {
            // Warm-up: the data cache fills to its limit and writes out at least once, every lazily grown table
            // reaches its size; then the same calls are measured.
            PerCall(size, (int)(FileDataCache.LimitBytes / size) + Calls);
            // The least of three runs (see Steady_reads_allocate_nothing).
            perCall[size] = Enumerable.Range(0, 3).Min(_ => PerCall(size, Calls));
            // Within one granule: the first write updates the inode, the rest allocate nothing.
            NextGranule();
            PerCall(size, 1, granulePerCall: false);
            long within = Enumerable.Range(0, 3).Min(_ => PerCall(size, Calls, granulePerCall: false));
            output.WriteLine($"{size} B writes: {perCall[size]} B allocated per call, each in a granule of its own; {within} B within one granule");
            Assert.True(within == 0, $"a {size}-byte write within one timestamp granule allocated {within} B per call");
        }
        foreach (var (size, bytes) in perCall)
        {
            Assert.True(bytes <= PerWriteBound, $"a {size}-byte write over written blocks allocated {bytes} B per call (bound {PerWriteBound})");
            Assert.True(Math.Abs(bytes - perCall[1 << 20]) <= SizeSlack,
                $"a {size}-byte write allocated {bytes} B per call, a 1 MiB one {perCall[1 << 20]} B: the data should add nothing");
        }

        volume.Sync();
        var back = new byte[4096];
        Assert.Equal(back.Length, volume.Read(ino, FileBytes - back.Length, back));
        Assert.All(back, b => Assert.Equal(0x5A, b));
    }

    [Fact]
    public void Steady_reads_allocate_nothing()
    {
        var data = new byte[1 << 20];
        var (volume, ino) = FilledVolume(data);
        using var _ = volume;
        var buffer = new byte[1 << 20];

        long offset = 0;
        long PerCall(int size, int calls)
        {
            int wrong = 0;
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < calls; i++)
            {
                if (offset + size > FileBytes) offset = 0;
                if (volume.Read(ino, offset, buffer.AsSpan(0, size)) != size || buffer[size - 1] != 0x5A) wrong++;
                offset += size;
            }
            long perCall = (GC.GetAllocatedBytesForCurrentThread() - before) / calls;
            Assert.Equal(0, wrong);
            return perCall;
        }

        // 1000 bytes: unaligned, read through the bounce buffer. The least of three runs: an allocation the read path
        // makes per call shows in every run, a one-time one (a read-ahead's first use, a lock's first contention on a
        // busy machine) in one only.
        foreach (int size in new[] { 1000, 4096, 64 << 10, 1 << 20 })
        {
            PerCall(size, Calls);
            long bytes = Enumerable.Range(0, 3).Min(_ => PerCall(size, Calls));
            output.WriteLine($"{size} B reads: {bytes} B allocated per call");
            Assert.True(bytes == 0, $"a {size}-byte read allocated {bytes} B per call");
        }
    }
}

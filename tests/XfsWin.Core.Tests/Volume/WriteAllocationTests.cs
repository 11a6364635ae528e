using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Managed memory a steady stream of writes over a file's existing, written blocks allocates per call, on a volume made
/// by mkfs.xfs and opened read-write. The data costs nothing per call, whatever its size: small writes are copied into
/// block arrays the data cache reuses after each write-out, large ones go to the device from the caller's span, a
/// partial block is merged in one scratch block, and the blocks are found in the inode's extent list without an
/// extent editor. What remains is the logged transaction's fixed cost, the same for 1,000 bytes and 1 MiB: measured
/// on .NET 10 it is 3.6 to 4.1 KB, depending on what the volume did before (in one run: the transaction with its change set and log reservation 616 B; the inode's working copy
/// 600 B; logging the inode 1,792 B: the committed 512-byte image that the inode log item, the cluster buffer and the
/// inode cache share, the log item, the joined cluster buffer; the commit 608 B, mostly the newly decoded inode; the
/// next call's inode lookup 448 B).
/// Allocation counts are deterministic (no timing involved): every call runs on this thread, and so does each
/// checkpoint a commit triggers.
/// </summary>
public sealed class WriteAllocationTests(ITestOutputHelper output) : IDisposable
{
    /// <summary>The transaction's fixed cost (at most 4,085 B measured, see above) with room for collection sizes that differ between runtime versions.</summary>
    private const long PerWriteBound = 4608;
    /// <summary>How far calls of different sizes may differ (one-off growth of the cache's tables spread over the calls).</summary>
    private const long SizeSlack = 64;
    private const int FileBytes = 16 << 20;
    private const int Calls = 200;

    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-walloc.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Steady_writes_over_written_blocks_allocate_only_the_transactions_fixed_cost()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-f", "-q", image);
        using var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        ulong ino = volume.CreateNode(volume.RootInode, "f"u8, 0x81A4 /* regular 0644 */, 0, 0).Inode;
        var data = new byte[1 << 20];
        data.AsSpan().Fill(0x5A);
        for (long at = 0; at < FileBytes; at += data.Length) volume.Write(ino, at, data);
        volume.Sync();
        // The premise: a few extents, held as the inode's extent list (a 512-byte inode's fork has room for 21).
        Assert.InRange(volume.GetAttributes(ino).DataExtentCount, 1UL, 8UL);

        long offset = 0;
        long PerCall(int size, int calls)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < calls; i++)
            {
                if (offset + size > FileBytes) offset = 0;
                Assert.Equal(size, volume.Write(ino, offset, data.AsSpan(0, size)));
                offset += size;
            }
            return (GC.GetAllocatedBytesForCurrentThread() - before) / calls;
        }

        var perCall = new Dictionary<int, long>();
        // 1000 bytes: unaligned, every call merges partial blocks.
        foreach (int size in new[] { 1000, 4096, 64 << 10, 1 << 20 })
        {
            // Warm-up: the data cache fills to its limit and writes out at least once, every lazily grown table
            // reaches its size; then the same calls are measured.
            PerCall(size, (int)(FileDataCache.LimitBytes / size) + Calls);
            perCall[size] = PerCall(size, Calls);
            output.WriteLine($"{size} B writes: {perCall[size]} B allocated per call");
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
}

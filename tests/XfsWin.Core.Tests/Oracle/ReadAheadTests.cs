using System.Text;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Tests.Oracle;

/// <summary>
/// Read-ahead on kernel-made volumes: it must turn many small synchronous reads into few large ones
/// without changing a single result.
/// </summary>
public sealed class ReadAheadTests
{
    /// <summary>Counts the reads that reach the device.</summary>
    private sealed class CountingDevice(IBlockDevice inner) : IBlockDevice
    {
        private int _reads;
        private long _bytes;

        public int Reads => Volatile.Read(ref _reads);
        public long Bytes => Interlocked.Read(ref _bytes);
        public void Reset()
        {
            Log.Clear();
            Interlocked.Exchange(ref _reads, 0);
            Interlocked.Exchange(ref _bytes, 0);
        }

        public long Length => inner.Length;
        public int SectorSize => inner.SectorSize;
        public bool CanWrite => false;
        public string IoMode => inner.IoMode;

        public readonly System.Collections.Concurrent.ConcurrentQueue<(long Offset, int Length)> Log = new();

        /// <summary>Reads issued from .NET thread-pool threads other than <see cref="CallerThread"/>.</summary>
        public int PoolThreadReads => Volatile.Read(ref _poolThreadReads);
        private int _poolThreadReads;

        /// <summary>The test's own thread (which may be a pool thread; its reads are not background work).</summary>
        public int CallerThread { get; set; } = Environment.CurrentManagedThreadId;

        public void Read(long offset, Span<byte> destination)
        {
            if (Thread.CurrentThread.IsThreadPoolThread && Environment.CurrentManagedThreadId != CallerThread)
                Interlocked.Increment(ref _poolThreadReads);
            Log.Enqueue((offset, destination.Length));
            Interlocked.Increment(ref _reads);
            Interlocked.Add(ref _bytes, destination.Length);
            inner.Read(offset, destination);
        }

        public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
        {
            Interlocked.Increment(ref _reads);
            Interlocked.Add(ref _bytes, destination.Length);
            return inner.ReadAsync(offset, destination, cancellationToken);
        }

        public void Write(long offset, ReadOnlySpan<byte> source) => throw new InvalidOperationException("read-only test device");
        public void Flush() { }
        public void Dispose() => inner.Dispose();
    }

    private struct Batch(List<(string Name, ulong Ino)> sink, int max) : IDirectoryVisitor
    {
        public long Next;
        public int Count;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            sink.Add((Encoding.UTF8.GetString(name), inode));
            Next = nextCookie;
            return ++Count < max;
        }
    }

    [Fact]
    public void Listing_a_fragmented_directory_reads_ahead_in_few_large_reads()
    {
        var image = OracleImages.Ensure("default");
        var dir = image.Manifest.Get("/extents/big-dir");
        using var device = new CountingDevice(FileBlockDevice.Open(image.ImagePath));
        using var volume = XfsVolume.Open(device, ownsDevice: false);
        var attrs = volume.GetAttributes(dir.Ino);
        Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));
        device.Reset();

        // In batches the size FUSE asks for, each resumed from the cookie the last one ended at.
        var seen = new List<(string Name, ulong Ino)>();
        long cookie = 0;
        while (true)
        {
            var batch = new Batch(seen, 800);
            volume.ReadDirectory(dir.Ino, cookie, ref batch);
            if (batch.Count < 800) break;
            cookie = batch.Next;
        }
        Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));

        var expected = dir.Children!.Select(c => (Encoding.UTF8.GetString(c.Name), c.Ino)).Append((".", dir.Ino)).ToHashSet();
        Assert.Equal(seen.Count, seen.Distinct().Count());
        Assert.True(seen.Where(e => e.Name != "..").ToHashSet().SetEquals(expected), "the listing differs from the kernel's");

        // The directory grew while its 100,000 inodes were allocated, so its data blocks lie in runs
        // of a few blocks between inode chunks. Without read-ahead every block is its own synchronous
        // read; with it, each run is one read, issued ahead of the listing.
        long dataBlocks = attrs.Size / volume.Info.DirectoryBlockSize;
        int blockSize = volume.Info.DirectoryBlockSize;
        int singleBlockReads = device.Log.Count(r => r.Length <= blockSize);
        Assert.True(dataBlocks > 500, $"expected a large directory, it has {dataBlocks} data blocks");
        Assert.True(device.Reads * 4 < dataBlocks && singleBlockReads <= 16,
            $"{device.Reads} device reads ({singleBlockReads} of one block) for {dataBlocks} directory data blocks: " +
            string.Join(", ", device.Log.Select(r => $"{r.Offset / blockSize}+{r.Length / blockSize}")));
        Assert.True(volume.IsHealthy);
    }

    [Theory]
    [InlineData("/dirs/node")]
    [InlineData("/dirs/leaf")]
    public void First_lookup_in_a_directory_reads_its_childrens_inodes_ahead(string path)
    {
        var image = OracleImages.Ensure("default");
        var dir = image.Manifest.Get(path);
        using var device = new CountingDevice(FileBlockDevice.Open(image.ImagePath));
        using var volume = XfsVolume.Open(device, ownsDevice: false);
        var first = dir.Children![0];
        Assert.True(volume.TryLookup(dir.Ino, first.Name, out var found));
        Assert.Equal(first.Ino, found);
        Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));
        int readsForLookupAndReadAhead = device.Reads;
        device.Reset();
        // Read ahead and decoded: the lookups that follow find every child's inode in the cache.
        var notDecoded = dir.Children.Where(c => !volume.IsInodeCached(c.Ino)).Select(c => Encoding.UTF8.GetString(c.Name)).ToList();
        Assert.True(notDecoded.Count == 0, $"{notDecoded.Count} of {dir.Children.Count} children not decoded ahead: {string.Join(", ", notDecoded.Take(10))}");

        foreach (var (name, ino) in dir.Children)
        {
            Assert.True(volume.TryLookup(dir.Ino, name, out var child));
            Assert.Equal(ino, child);
            var a = volume.GetAttributes(child);
            Assert.Equal(image.Manifest.Get(path + "/" + Encoding.UTF8.GetString(name)).Size, a.Size);
        }
        Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));
        // Every child's inode was read ahead: the lookups and stats that follow need no inode reads.
        // Directory blocks not yet cached by the listing the read-ahead did may still be read.
        long dirBlocks = volume.GetAttributes(dir.Ino).Size / volume.Info.DirectoryBlockSize + 8;
        Assert.True(device.Reads <= dirBlocks, $"{device.Reads} device reads for {dir.Children.Count} lookups and stats after the read-ahead ({readsForLookupAndReadAhead} before)");
        // Read-ahead runs on the volume's own threads: on the thread pool, a planner waiting for its
        // directory blocks starved the reads queued behind it (see BackgroundWorkers).
        Assert.Equal(0, device.PoolThreadReads);
        Assert.True(volume.IsHealthy);
    }

    /// <summary>
    /// A directory's form is learned from its first hash-tree block; the lookup that follows reads
    /// the same block and must find it cached (one verifier kind for every tree block), not read it
    /// again. After a listing (form learned, data blocks cached), a lookup in a leaf directory reads
    /// no directory block at all, one in a node directory only the leafN block it descends to.
    /// </summary>
    [Theory]
    [InlineData("/dirs/leaf", 0)]
    [InlineData("/dirs/node", 1)]
    public void A_lookup_after_the_form_is_known_reads_no_tree_block_twice(string path, int treeBlockReads)
    {
        var image = OracleImages.Ensure("default");
        var dir = image.Manifest.Get(path);
        using var device = new CountingDevice(FileBlockDevice.Open(image.ImagePath));
        using var volume = XfsVolume.Open(device, ownsDevice: false);
        Assert.Equal(dir.Children!.Count + 2, volume.ListDirectory(dir.Ino).Count);
        Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));
        device.Reset();

        var (name, ino) = dir.Children[dir.Children.Count / 2];
        Assert.True(volume.TryLookup(dir.Ino, name, out var found));
        Assert.Equal(ino, found);
        Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));
        int blockSize = volume.Info.DirectoryBlockSize;
        var directoryBlockReads = device.Log.Where(r => r.Length == blockSize).ToList();
        Assert.True(directoryBlockReads.Count == treeBlockReads,
            $"{directoryBlockReads.Count} directory block reads: " + string.Join(", ", directoryBlockReads.Select(r => r.Offset / blockSize)));
        Assert.True(volume.IsHealthy);
    }

    /// <summary>A verifier that rejects one offset: a block that fails must not be cached, and its reader must hear of it.</summary>
    private readonly struct RejectOne(long bad) : IBufferVerifier
    {
        public int Kind => 99;
        public string Structure => "test block";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) =>
            byteOffset == bad ? VerifyResult.Fail("rejected by the test") : VerifyResult.Ok;
    }

    [Fact]
    public void Asynchronous_read_ahead_caches_what_verifies_and_leaves_failures_to_the_reader()
    {
        var image = OracleImages.Ensure("default");
        using var device = new CountingDevice(FileBlockDevice.Open(image.ImagePath));
        var health = new VolumeHealth();
        var cache = new BufferCache(device, health, 64 << 20);
        const int block = 4096;
        long start = 1 << 20, bad = start + 3 * block;
        long[] wanted = [start, start + block, start + 3 * block, start + 5 * block];
        var readsBefore = device.Reads;
        cache.StartPrefetch(start, 6 * block, wanted, block, 7, new RejectOne(bad));
        var direct = new byte[block];
        // A reader that arrives while the read-ahead is in flight waits for it instead of reading.
        var got = cache.Read(start + block, block, 7, new RejectOne(bad));
        SpinWait.SpinUntil(() => cache.ReadAheadsInFlight == 0, 10_000);
        Assert.Equal(readsBefore + 1, device.Reads); // the read-ahead's one read of the span
        device.Read(start + block, direct);
        Assert.Equal(direct, got);
        Assert.True(cache.IsCachedOrPending(start + 5 * block, block, 7, 99));
        Assert.False(cache.IsCachedOrPending(start + 2 * block, block, 7, 99)); // in the span, not wanted
        Assert.False(cache.IsCachedOrPending(bad, block, 7, 99));
        Assert.Throws<XfsCorruptionException>(() => cache.Read(bad, block, 7, new RejectOne(bad)));
        Assert.False(health.IsHealthy);
    }
}

using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Managed memory a steady stream of writes and reads allocates per call, on a volume made by mkfs.xfs and opened
/// read-write. The data costs nothing per call, whatever its size: small writes are copied into block arrays the data
/// cache reuses after each write-out, large ones go to the device from the caller's span, a partial block is merged in
/// a pooled scratch block. A write that changes the inode (its timestamps, its size, the mapping of unwritten blocks
/// it converts) costs nothing either: its transaction object, lists, dirty maps and change set come from the volume's
/// transaction pool, the inode's working copy and the mapping editor are the ones the volume keeps for writes, the
/// inode's log item and image array are reused once the journal merged them into the item it holds, the inode cache
/// takes the new bytes into its entry in place, and a grant with room in the log allocates nothing. A write that
/// allocates blocks (into a hole, or an append) publishes the free-space buffers it changed by pointing their
/// snapshots at the new bytes, and makes its private copies in the arrays the journal let go; what is left is the
/// odd new array (a buffer whose previous bytes the journal still holds) and, for an append, the speculative
/// preallocation that makes most appends convert blocks instead, both averaged over the calls. The
/// volume's clock is set by the test, so which writes update the inode does not depend on how fast they run.
/// Allocation counts are deterministic (no timing involved): every call runs on this thread, and so does each
/// checkpoint a commit triggers. Nothing but the calls runs between the two readings of the counter.
/// </summary>
public sealed class WriteAllocationTests(ITestOutputHelper output) : IDisposable
{
    /// <summary>
    /// What a write that allocates blocks may allocate per call, averaged: for an append the preallocation that a few
    /// of them make (its extents list), spread over the appends that only convert what it left; for both, the
    /// occasional new buffer array (measured: under 1 B for 4 KiB writes, 3 to 6 B for 64 KiB ones; a write into a
    /// hole allocated 120 B per call while each commit published new snapshot objects).
    /// </summary>
    private const long PerAllocatingWriteBound = 32;
    private const int FileBytes = 16 << 20;
    private const int Calls = 200;

    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-walloc.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>
    /// The volume's clock, set by the test: an hour ahead of the files' times, at the start of a timestamp granule,
    /// moving only when <see cref="Next"/> moves it to the next granule.
    /// </summary>
    private sealed class GranuleClock
    {
        private XfsWin.Format.XfsTimestamp _now;

        public static GranuleClock Install(XfsVolume volume)
        {
            var clock = new GranuleClock { _now = new XfsWin.Format.XfsTimestamp(XfsVolume.SystemNow().Seconds + 3600, 0) };
            volume.Clock = () => clock._now;
            return clock;
        }

        public void Next() => _now = _now.Nanoseconds + XfsVolume.TimestampGranuleNanoseconds < 1_000_000_000
            ? _now with { Nanoseconds = _now.Nanoseconds + XfsVolume.TimestampGranuleNanoseconds }
            : new XfsWin.Format.XfsTimestamp(_now.Seconds + 1, 0);
    }

    /// <summary>
    /// A read-write volume with a 16 MiB file of 0x5A bytes, written and synced. 4 GiB (sparse) in four AGs of 1 GiB, so
    /// that the first AG holds everything the tests write: the first change to another AG's headers and free-space
    /// blocks in a run (their first private copies, the allocator's state for that AG) is a one-time cost that would
    /// otherwise land in whichever measured run first spilled into it.
    /// </summary>
    private (XfsVolume Volume, ulong Ino) FilledVolume(byte[] data)
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "4G", image);
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
    public void Steady_writes_over_written_blocks_allocate_nothing_even_when_they_move_the_timestamps()
    {
        var data = new byte[1 << 20];
        var (volume, ino) = FilledVolume(data);
        using var _ = volume;

        // The clock: an hour ahead of the file's times, at the start of a granule; each call of PerCall moves it to the
        // next granule (every write updates the inode) or leaves it (no write after the first in it does).
        var clock = GranuleClock.Install(volume);

        long offset = 0;
        long PerCall(int size, int calls, bool granulePerCall = true)
        {
            int wrong = 0;
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < calls; i++)
            {
                if (offset + size > FileBytes) offset = 0;
                if (granulePerCall) clock.Next();
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
            clock.Next();
            PerCall(size, 1, granulePerCall: false);
            long within = Enumerable.Range(0, 3).Min(_ => PerCall(size, Calls, granulePerCall: false));
            output.WriteLine($"{size} B writes: {perCall[size]} B allocated per call, each in a granule of its own; {within} B within one granule");
            Assert.True(within == 0, $"a {size}-byte write within one timestamp granule allocated {within} B per call");
        }
        foreach (var (size, bytes) in perCall)
            Assert.True(bytes == 0, $"a {size}-byte write over written blocks, each moving the timestamps, allocated {bytes} B per call");

        volume.Sync();
        var back = new byte[4096];
        Assert.Equal(back.Length, volume.Read(ino, FileBytes - back.Length, back));
        Assert.All(back, b => Assert.Equal(0x5A, b));
    }

    [Fact]
    public void Writes_that_grow_a_file_fill_its_holes_or_convert_its_preallocated_blocks_allocate_nothing_per_call()
    {
        var data = new byte[1 << 20];
        var (volume, _) = FilledVolume(data);
        var expectedSizes = new Dictionary<string, long>();
        // Of the files whose size was set first: how far they were written (the rest reads as zeros).
        var filledUpTo = new Dictionary<string, long>();
        using (volume)
        {
            // Every write in a granule of its own: each changes the inode (size or mapping, and timestamps).
            var clock = GranuleClock.Install(volume);

            int fileNumber = 0;
            foreach (int size in new[] { 4096, 64 << 10 })
            {
                // Writes of `calls` times `size` bytes from *position on, each in a granule of its own; the bytes the
                // calls allocated, per call.
                int wrong = 0;
                long WriteOn(ulong ino, ref long position, int calls)
                {
                    long before = GC.GetAllocatedBytesForCurrentThread();
                    for (int i = 0; i < calls; i++)
                    {
                        clock.Next();
                        if (volume.Write(ino, position, data.AsSpan(0, size)) != size) wrong++;
                        position += size;
                    }
                    return (GC.GetAllocatedBytesForCurrentThread() - before) / calls;
                }
                // Warm-up as in the test above: the data cache fills to its limit and hands its blocks off at least once.
                // Each warm-up ends with a sync, so that the arrays of the batch handed off are back for reuse whatever
                // the data writer's pace (while a batch is written, a filling cache takes new arrays: once per stream);
                // the three measured runs together hold at most three quarters of the cache's limit, so that none of
                // them fills it to a hand-off either.
                int warmUp = (int)(FileDataCache.LimitBytes / size) + Calls;
                int measured = (int)Math.Min(Calls, FileDataCache.LimitBytes / size / 4);

                // Appends: each write past the end of the file, as a copy writes.
                ulong appended = volume.CreateNode(volume.RootInode, System.Text.Encoding.ASCII.GetBytes($"append-{fileNumber++}"), 0x81A4, 0, 0).Inode;
                long end = 0;
                WriteOn(appended, ref end, warmUp);
                volume.Sync();
                long appendBytes = 0;
                for (int run = 0; run < 3; run++) appendBytes += WriteOn(appended, ref end, measured);
                appendBytes /= 3;

                // Into blocks preallocated first (fallocate keeping the size, what a Windows program's allocation size
                // does): each write converts unwritten blocks and moves the size.
                ulong preallocated = volume.CreateNode(volume.RootInode, System.Text.Encoding.ASCII.GetBytes($"prealloc-{fileNumber++}"), 0x81A4, 0, 0).Inode;
                volume.Allocate(preallocated, 0, (long)size * (warmUp + 4 * Calls), FallocateMode.KeepSize);
                long at = 0;
                WriteOn(preallocated, ref at, warmUp);
                volume.Sync();
                long fillBytes = long.MaxValue;
                for (int run = 0; run < 3; run++) fillBytes = Math.Min(fillBytes, WriteOn(preallocated, ref at, measured));

                // Into a file whose size was set first (what a Windows copy that sets the end of file does): each write
                // allocates the blocks of a hole inside the size.
                ulong sized = volume.CreateNode(volume.RootInode, System.Text.Encoding.ASCII.GetBytes($"sized-{fileNumber++}"), 0x81A4, 0, 0).Inode;
                long sizedBytes = (long)size * (warmUp + 4 * Calls);
                volume.SetAttributes(sized, new AttributeChanges { Size = sizedBytes });
                Assert.Equal(0UL, volume.GetAttributes(sized).DataExtentCount);
                long filled = 0;
                WriteOn(sized, ref filled, warmUp);
                volume.Sync();
                long holeBytes = 0;
                for (int run = 0; run < 3; run++) holeBytes += WriteOn(sized, ref filled, measured);
                holeBytes /= 3;
                Assert.Equal(0, wrong);
                output.WriteLine($"{size} B writes: appends {appendBytes} B allocated per call (mean of three runs), into holes {holeBytes} B (mean of three), into preallocated blocks {fillBytes} B (least of three)");
                Assert.True(appendBytes <= PerAllocatingWriteBound, $"a {size}-byte append allocated {appendBytes} B per call (bound {PerAllocatingWriteBound})");
                Assert.True(holeBytes <= PerAllocatingWriteBound, $"a {size}-byte write into a hole allocated {holeBytes} B per call (bound {PerAllocatingWriteBound})");
                Assert.True(fillBytes == 0, $"a {size}-byte write into preallocated blocks allocated {fillBytes} B per call");

                // What was written is what the files hold: the engine's reads here, the kernel's after unmount.
                var back = new byte[size];
                Assert.Equal(size, volume.Read(appended, end - size, back));
                Assert.All(back, b => Assert.Equal(0x5A, b));
                Assert.Equal(end, volume.GetAttributes(appended).Size);
                Assert.Equal(at, volume.GetAttributes(preallocated).Size);
                Assert.Equal(size, volume.Read(sized, filled - size, back));
                Assert.All(back, b => Assert.Equal(0x5A, b));
                Assert.Equal(sizedBytes, volume.GetAttributes(sized).Size);
                volume.CloseFile(appended, writable: true);
                volume.CloseFile(preallocated, writable: true);
                volume.CloseFile(sized, writable: true);
                expectedSizes[$"append-{fileNumber - 3}"] = end;
                expectedSizes[$"prealloc-{fileNumber - 2}"] = at;
                expectedSizes[$"sized-{fileNumber - 1}"] = sizedBytes;
                filledUpTo[$"sized-{fileNumber - 1}"] = filled;
            }
        }
        string image = Path.Combine(_tmp, "v.img");
        using (var mount = LoopMount.Mount(image, readOnly: true))
        {
            foreach (var (name, size) in expectedSizes)
            {
                var bytes = File.ReadAllBytes(Path.Combine(mount.MountPoint, name));
                Assert.Equal(size, bytes.Length);
                long written = filledUpTo.TryGetValue(name, out long upTo) ? upTo : size;
                Assert.True(bytes.AsSpan(0, (int)written).IndexOfAnyExcept((byte)0x5A) < 0, $"{name}: the kernel reads bytes that were not written");
                Assert.True(bytes.AsSpan((int)written).IndexOfAnyExcept((byte)0) < 0, $"{name}: the kernel reads bytes past what was written that are not zeros");
            }
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}");
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

using XfsWin.Device;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Tests.Volume;

/// <summary>
/// The file data cache's write-behind on a memory device whose writes wait until the test opens a gate: large writes
/// return while the device does not have them yet, reads see them, <see cref="FileDataCache.WriteOut"/> (the checkpoint's
/// and every sync's step) waits for them, later writes to the same blocks land after them, and a failed one is reported.
/// </summary>
public sealed class FileDataCacheTests
{
    private const int Block = 4096;
    // Bounds a hang (a write that never returns), not a duration: each step here is a few memory copies.
    private static readonly TimeSpan HangLimit = TimeSpan.FromMinutes(1);

    /// <summary>
    /// A device in memory whose writes (or only those at <see cref="GatedOffset"/>) wait for <see cref="Gate"/> (open
    /// unless closed) and can be made to fail.
    /// </summary>
    private sealed class GatedWriteDevice(int bytes) : IBlockDevice
    {
        public readonly byte[] Bytes = new byte[bytes];
        public readonly List<(long Offset, int Length)> Writes = [];
        public readonly ManualResetEventSlim Gate = new(initialState: true);
        public readonly SemaphoreSlim WriteStarted = new(0);
        public readonly SemaphoreSlim UngatedWriteStarted = new(0);
        public long GatedOffset = -1;
        public bool Fail;

        public long Length => Bytes.Length;
        public int SectorSize => 512;
        public bool CanWrite => true;
        public string IoMode => "memory";

        /// <summary>Closed: a read copies the device's bytes, then waits for it to open (what it returns may be stale by then).</summary>
        public readonly ManualResetEventSlim ReadGate = new(initialState: true);
        public readonly SemaphoreSlim ReadStarted = new(0);

        public void Read(long offset, Span<byte> destination)
        {
            lock (Bytes) Bytes.AsSpan((int)offset, destination.Length).CopyTo(destination);
            if (!ReadGate.IsSet)
            {
                ReadStarted.Release();
                ReadGate.Wait();
            }
        }

        public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
        {
            Read(offset, destination.Span);
            return ValueTask.CompletedTask;
        }

        /// <summary>
        /// Writes whose first byte has a gate here wait for it (after releasing its semaphore), whatever <see cref="Gate"/>
        /// says, and then write the bytes they were given when called.
        /// </summary>
        public readonly Dictionary<byte, (ManualResetEventSlim Gate, SemaphoreSlim Started)> ValueGates = [];

        public void Write(long offset, ReadOnlySpan<byte> source)
        {
            if (ValueGates.TryGetValue(source[0], out var valueGate))
            {
                // The bytes as they were handed over: what changes in the caller's buffer while this waits is not written.
                var handedOver = source.ToArray();
                valueGate.Started.Release();
                valueGate.Gate.Wait();
                lock (Bytes)
                {
                    handedOver.CopyTo(Bytes.AsSpan((int)offset));
                    Writes.Add((offset, handedOver.Length));
                }
                return;
            }
            if (GatedOffset < 0 || offset == GatedOffset)
            {
                WriteStarted.Release();
                Gate.Wait();
            }
            else
            {
                UngatedWriteStarted.Release();
            }
            if (Fail) throw new IOException("Input/output error (test)");
            lock (Bytes)
            {
                source.CopyTo(Bytes.AsSpan((int)offset));
                Writes.Add((offset, source.Length));
            }
        }

        public void Flush() { }
        public void Dispose() { }
    }

    private static byte[] Filled(int length, byte value)
    {
        var b = new byte[length];
        Array.Fill(b, value);
        return b;
    }

    // A call that does not return in time fails the test with a TimeoutException.
    private static Task Bounded(Action action) => Task.Run(action).WaitAsync(HangLimit);

    [Fact]
    public async Task A_large_write_returns_before_the_device_has_it_reads_see_it_and_write_out_waits_for_it()
    {
        var device = new GatedWriteDevice(8 << 20);
        using var cache = new FileDataCache(device, Block);
        device.Gate.Reset();
        var data = Filled(3 << 20, 0xA5); // three slots' worth: more than one write in flight
        await Bounded(() => cache.Write(1 << 20, data));
        Assert.True(await device.WriteStarted.WaitAsync(HangLimit));
        Assert.All(device.Bytes, b => Assert.Equal(0, b)); // nothing has reached the device

        var read = new byte[(3 << 20) + 2 * Block];
        cache.Read((1 << 20) - Block, read);
        Assert.All(read.AsSpan(0, Block).ToArray(), b => Assert.Equal(0, b));
        Assert.All(read.AsSpan(Block, 3 << 20).ToArray(), b => Assert.Equal(0xA5, b));
        Assert.All(read.AsSpan(Block + (3 << 20)).ToArray(), b => Assert.Equal(0, b));

        var writeOut = Task.Run(cache.WriteOut);
        Assert.False(writeOut.IsCompleted); // the first device write is still held at the gate
        device.Gate.Set();
        await writeOut.WaitAsync(HangLimit);
        Assert.Equal([(1L << 20, 1 << 20), (2L << 20, 1 << 20), (3L << 20, 1 << 20)], device.Writes);
        Assert.All(device.Bytes.AsSpan(1 << 20, 3 << 20).ToArray(), b => Assert.Equal(0xA5, b));
        Assert.Equal(3, cache.DeviceWrites);
    }

    /// <summary>
    /// A read reads the device outside the cache's lock: when held blocks go to the device while it does (a checkpoint's
    /// write-out), what it read may predate them, and the blocks are no longer there to lay over it; it reads again.
    /// </summary>
    [Fact]
    public async Task A_read_that_a_write_out_overtakes_returns_the_written_bytes()
    {
        var device = new GatedWriteDevice(1 << 20);
        using var cache = new FileDataCache(device, Block);
        cache.Write(Block, Filled(Block, 0x44));
        device.ReadGate.Reset();
        var read = new byte[Block];
        var reader = Task.Run(() => cache.Read(Block, read));
        Assert.True(await device.ReadStarted.WaitAsync(HangLimit)); // it has the device's zeros, and waits
        await Bounded(cache.WriteOut);
        Assert.Equal(0, cache.Count);
        device.ReadGate.Set();
        await reader.WaitAsync(HangLimit);
        Assert.All(read, b => Assert.Equal(0x44, b));
    }

    [Fact]
    public async Task Later_writes_to_blocks_in_flight_land_after_them()
    {
        var device = new GatedWriteDevice(4 << 20) { GatedOffset = 0 };
        using var cache = new FileDataCache(device, Block);
        device.Gate.Reset();
        await Bounded(() => cache.Write(0, Filled(256 << 10, 0x11)));
        Assert.True(await device.WriteStarted.WaitAsync(HangLimit));
        // A held block over the write in flight, and a partial write of a block that is only in flight: it must wait
        // for the write under it. The gate opens when a device write of its own arrives (it did not wait: the order
        // check below fails) or after a few seconds (it waits, as it should; how long does not change the outcome).
        await Bounded(() => cache.Write(Block, Filled(Block, 0x22)));
        var partial = Task.Run(() => cache.WritePartial(2 * Block + 100, Filled(50, 0x33)));
        var opener = Task.Run(async () =>
        {
            await device.UngatedWriteStarted.WaitAsync(TimeSpan.FromSeconds(3));
            device.Gate.Set();
        });
        var read = new byte[3 * Block];
        cache.Read(0, read);
        Assert.All(read.AsSpan(0, Block).ToArray(), b => Assert.Equal(0x11, b));
        Assert.All(read.AsSpan(Block, Block).ToArray(), b => Assert.Equal(0x22, b));

        await opener.WaitAsync(HangLimit);
        await partial.WaitAsync(HangLimit);
        await Bounded(cache.WriteOut);
        Assert.All(device.Bytes.AsSpan(0, Block).ToArray(), b => Assert.Equal(0x11, b));
        Assert.All(device.Bytes.AsSpan(Block, Block).ToArray(), b => Assert.Equal(0x22, b));
        Assert.All(device.Bytes.AsSpan(2 * Block, 100).ToArray(), b => Assert.Equal(0x11, b));
        Assert.All(device.Bytes.AsSpan(2 * Block + 100, 50).ToArray(), b => Assert.Equal(0x33, b));
        Assert.All(device.Bytes.AsSpan(2 * Block + 150, (256 << 10) - 2 * Block - 150).ToArray(), b => Assert.Equal(0x11, b));
        // The large write first, then the partial one, then the held block.
        Assert.Equal([(0L, 256 << 10), (2L * Block + 100, 50), ((long)Block, Block)], device.Writes);
    }

    /// <summary>
    /// Held blocks handed off (what a checkpoint's taking does) leave the held table at once and go to the device on the
    /// writer thread, sorted and merged; until then reads see them, a partial write into one waits for it, a short write
    /// over one is held and lands after it, and <see cref="FileDataCache.WaitFor"/> returns only once they are written.
    /// </summary>
    [Fact]
    public async Task Handed_off_blocks_are_written_behind_read_until_then_and_later_writes_land_after_them()
    {
        var device = new GatedWriteDevice(1 << 20);
        using var cache = new FileDataCache(device, Block);
        // Blocks 1, 2 and 3 (neighbours: one device write) and block 7.
        cache.Write(1 * Block, Filled(3 * Block, 0x11));
        cache.Write(7 * Block, Filled(Block, 0x77));
        device.Gate.Reset();
        long sequence = 0;
        await Bounded(() => sequence = cache.HandOff());
        Assert.Equal(0, cache.Count);
        Assert.True(await device.WriteStarted.WaitAsync(HangLimit)); // the first merged write waits at the gate
        var waiter = Task.Run(() => cache.WaitFor(sequence));

        var read = new byte[8 * Block];
        cache.Read(0, read);
        Assert.All(read.AsSpan(0, Block).ToArray(), b => Assert.Equal(0, b));
        Assert.All(read.AsSpan(Block, 3 * Block).ToArray(), b => Assert.Equal(0x11, b));
        Assert.All(read.AsSpan(4 * Block, 3 * Block).ToArray(), b => Assert.Equal(0, b));
        Assert.All(read.AsSpan(7 * Block).ToArray(), b => Assert.Equal(0x77, b));

        // A short write over a handed-off block is held (newer: reads see it), a partial write into another waits.
        await Bounded(() => cache.Write(2 * Block, Filled(Block, 0x22)));
        var partial = Task.Run(() => cache.WritePartial(7 * Block + 10, Filled(20, 0x55)));
        cache.Read(2 * Block, read.AsSpan(0, Block));
        Assert.All(read.AsSpan(0, Block).ToArray(), b => Assert.Equal(0x22, b));
        Assert.False(waiter.IsCompleted);
        Assert.False(partial.IsCompleted);
        Assert.Empty(device.Writes);

        device.Gate.Set();
        await waiter.WaitAsync(HangLimit);
        await partial.WaitAsync(HangLimit);
        Assert.Equal([(1L * Block, 3 * Block), (7L * Block, Block), (7L * Block + 10, 20)], device.Writes);
        await Bounded(cache.WriteOut);
        Assert.Equal((2L * Block, Block), device.Writes[^1]);
        Assert.All(device.Bytes.AsSpan(Block, Block).ToArray(), b => Assert.Equal(0x11, b));
        Assert.All(device.Bytes.AsSpan(2 * Block, Block).ToArray(), b => Assert.Equal(0x22, b));
        Assert.All(device.Bytes.AsSpan(3 * Block, Block).ToArray(), b => Assert.Equal(0x11, b));
        Assert.All(device.Bytes.AsSpan(7 * Block, 10).ToArray(), b => Assert.Equal(0x77, b));
        Assert.All(device.Bytes.AsSpan(7 * Block + 10, 20).ToArray(), b => Assert.Equal(0x55, b));
        Assert.All(device.Bytes.AsSpan(7 * Block + 30, Block - 30).ToArray(), b => Assert.Equal(0x77, b));
        Assert.Equal(5, cache.BlocksWritten);
    }

    /// <summary>
    /// A write-out (every sync's first step) waits for the writes in flight, and a hand-off (a checkpoint on another
    /// thread) comes while it waits, with older bytes of a block the write-out is to write: whatever the order the two
    /// take, the write-out's bytes land last (and the batch merge buffer is not used by two writers at once). Here the
    /// write-out waits for a first batch, a hand-off of the block's second bytes is made (it queues them, or waits for
    /// the write-out), the block is written a third time, and the first batch is let through: once everything has
    /// returned, the device and a read hold the third bytes.
    /// </summary>
    [Fact]
    public async Task A_write_out_and_a_hand_off_while_it_waits_leave_the_last_bytes()
    {
        var device = new GatedWriteDevice(1 << 20);
        var first = (Gate: new ManualResetEventSlim(false), Started: new SemaphoreSlim(0));
        var second = (Gate: new ManualResetEventSlim(false), Started: new SemaphoreSlim(0));
        device.ValueGates[0x11] = first;
        device.ValueGates[0x22] = second;
        using var cache = new FileDataCache(device, Block);

        cache.Write(5 * Block, Filled(Block, 0x11));
        cache.HandOff();
        Assert.True(await first.Started.WaitAsync(HangLimit)); // the writer thread writes the first batch: at its gate
        Exception? failure = null;
        Thread Run(Action action)
        {
            var t = new Thread(() =>
            {
                try { action(); }
                catch (Exception e) { failure ??= e; }
            });
            t.Start();
            return t;
        }
        static bool Waiting(Thread t) => (t.ThreadState & ThreadState.WaitSleepJoin) != 0;
        var writeOut = Run(cache.WriteOut);
        // Nothing holds the cache's lock (the writer thread waits at the device's gate): the write-out can only be
        // waiting for the batch in flight.
        await Bounded(() => { while (!Waiting(writeOut)) Thread.Yield(); });

        cache.Write(5 * Block, Filled(Block, 0x22));
        var handOff = Run(() => cache.HandOff());
        await Bounded(() => { while (handOff.IsAlive && !Waiting(handOff)) Thread.Yield(); });
        cache.Write(5 * Block, Filled(Block, 0x33));
        first.Gate.Set();
        // Then the write-out either finishes, or waits for a second batch (the 0x22 bytes, at their gate).
        await Bounded(() => { while (writeOut.IsAlive && second.Started.CurrentCount == 0) Thread.Yield(); });
        // (The pause gives a write-out that neither waits nor keeps the hand-off back the time to show it; the verdict
        // does not depend on it.)
        for (int i = 0; i < 100 && writeOut.IsAlive; i++) Thread.Sleep(2);
        second.Gate.Set();
        await Bounded(writeOut.Join);
        await Bounded(handOff.Join);
        Assert.Null(failure);
        await Bounded(cache.WriteOut);
        Assert.Equal(0, cache.Count);
        Assert.All(device.Bytes.AsSpan(5 * Block, Block).ToArray(), b => Assert.Equal(0x33, b));
        var read = new byte[Block];
        cache.Read(5 * Block, read);
        Assert.All(read, b => Assert.Equal(0x33, b));
    }

    /// <summary>A handed-off batch whose device write fails fails the wait for it, and every later hand-off and write-out.</summary>
    [Fact]
    public void A_handed_off_batch_that_fails_fails_its_wait_and_every_later_write()
    {
        var device = new GatedWriteDevice(1 << 20) { Fail = true };
        using var cache = new FileDataCache(device, Block);
        cache.Write(0, Filled(Block, 0x11));
        long sequence = cache.HandOff();
        var e = Assert.Throws<XfsException>(() => cache.WaitFor(sequence));
        Assert.Equal(XfsError.IoError, e.Error);
        cache.Write(Block, Filled(Block, 0x22));
        Assert.Throws<XfsException>(() => cache.HandOff());
        Assert.Throws<XfsException>(cache.WriteOut);
    }

    /// <summary>
    /// A cache that fills (<see cref="FileDataCache.LimitBytes"/>) hands its blocks off instead of writing them itself;
    /// the next time it fills it waits for that batch first, so memory stays bounded when the device is slower.
    /// </summary>
    [Fact]
    public async Task A_full_cache_hands_its_blocks_off_and_waits_for_that_batch_before_the_next()
    {
        int limitBlocks = (int)(FileDataCache.LimitBytes / Block);
        var device = new GatedWriteDevice((int)(3 * FileDataCache.LimitBytes));
        using var cache = new FileDataCache(device, Block);
        device.Gate.Reset();
        var one = Filled(Block, 0x31);
        // Filling it once returns with the batch at the gate.
        await Bounded(() =>
        {
            for (int i = 0; i < limitBlocks; i++) cache.Write((long)i * Block, one);
        });
        Assert.Equal(0, cache.Count);
        Assert.True(await device.WriteStarted.WaitAsync(HangLimit));
        // Filling it again waits for the first batch.
        var second = Task.Run(() =>
        {
            for (int i = limitBlocks; i < 2 * limitBlocks; i++) cache.Write((long)i * Block, one);
        });
        // The gate is closed, so the first batch cannot finish: the second fill must not return (a wrong one returns at once).
        var finished = await Task.WhenAny(second, Task.Delay(TimeSpan.FromMilliseconds(200)));
        Assert.False(ReferenceEquals(finished, second), "the second fill did not wait for the first batch");
        device.Gate.Set();
        await second.WaitAsync(HangLimit);
        await Bounded(cache.WriteOut);
        Assert.Equal(2L * limitBlocks, cache.BlocksWritten);
        Assert.All(device.Bytes.AsSpan(0, (int)(2 * FileDataCache.LimitBytes)).ToArray(), b => Assert.Equal(0x31, b));
    }

    [Fact]
    public async Task More_writes_than_slots_wait_for_one_and_all_land_in_order()
    {
        var device = new GatedWriteDevice(16 << 20);
        using var cache = new FileDataCache(device, Block);
        device.Gate.Reset();
        int pieces = FileDataCache.StreamSlots + 2;
        var writer = Task.Run(() =>
        {
            for (int i = 0; i < pieces; i++) cache.Write((long)i * FileDataCache.StreamSlotSize, Filled(FileDataCache.StreamSlotSize, (byte)(i + 1)));
        });
        Assert.True(await device.WriteStarted.WaitAsync(HangLimit));
        Assert.False(writer.IsCompleted); // every slot is taken while the device holds the first write
        device.Gate.Set();
        await writer.WaitAsync(HangLimit);
        await Bounded(cache.WriteOut);
        Assert.Equal(Enumerable.Range(0, pieces).Select(i => ((long)i * FileDataCache.StreamSlotSize, FileDataCache.StreamSlotSize)), device.Writes);
        for (int i = 0; i < pieces; i++)
            Assert.All(device.Bytes.AsSpan(i * FileDataCache.StreamSlotSize, FileDataCache.StreamSlotSize).ToArray(), b => Assert.Equal((byte)(i + 1), b));
    }

    [Fact]
    public async Task A_failed_write_in_flight_fails_write_out_and_every_later_write()
    {
        var device = new GatedWriteDevice(4 << 20) { Fail = true };
        using var cache = new FileDataCache(device, Block);
        await Bounded(() => cache.Write(0, Filled(1 << 20, 0x44)));
        var e = Assert.Throws<XfsException>(cache.WriteOut);
        Assert.Equal(XfsError.IoError, e.Error);
        Assert.Contains("Input/output error", e.Message, StringComparison.Ordinal);
        Assert.Throws<XfsException>(() => cache.Write(1 << 20, Filled(1 << 20, 0x55)));
        Assert.Throws<XfsException>(cache.WriteOut);
    }

    /// <summary>
    /// A write-out whose device write fails keeps every held block: reads still see them, and the next write-out, once
    /// the device works, writes them all (merged as before).
    /// </summary>
    [Fact]
    public void A_write_out_that_fails_keeps_every_held_block_for_the_next()
    {
        var device = new GatedWriteDevice(1 << 20);
        using var cache = new FileDataCache(device, Block);
        cache.Write(0, Filled(8 * Block, 0x61));
        cache.Write(20 * Block, Filled(Block, 0x62));
        device.Fail = true;
        Assert.Throws<IOException>(cache.WriteOut);
        Assert.Equal(9, cache.Count);
        var read = new byte[Block];
        cache.Read(7 * Block, read);
        Assert.All(read, b => Assert.Equal(0x61, b));
        cache.Read(20 * Block, read);
        Assert.All(read, b => Assert.Equal(0x62, b));
        Assert.Empty(device.Writes);
        device.Fail = false;
        cache.WriteOut();
        Assert.Equal(0, cache.Count);
        Assert.Equal([(0L, 8 * Block), (20L * Block, Block)], device.Writes);
        Assert.All(device.Bytes.AsSpan(0, 8 * Block).ToArray(), b => Assert.Equal(0x61, b));
        Assert.All(device.Bytes.AsSpan(20 * Block, Block).ToArray(), b => Assert.Equal(0x62, b));
    }

    /// <summary>
    /// Held blocks are spread over shards by runs of neighbouring blocks: a short write across run boundaries, a discard
    /// of part of it and a write-out treat them as one range (the write-out merges neighbours from every shard into
    /// one device write).
    /// </summary>
    [Fact]
    public void Held_blocks_across_shards_read_discard_and_write_out_as_one_range()
    {
        var device = new GatedWriteDevice(4 << 20);
        using var cache = new FileDataCache(device, Block);
        int run = 1 << FileDataCache.ShardRunLog;
        long first = run - 3; // starts 3 blocks before a run boundary
        int blocks = 16;      // 64 KiB: the longest write held, over two shards
        var data = new byte[blocks * Block];
        for (int b = 0; b < blocks; b++) data.AsSpan(b * Block, Block).Fill((byte)(b + 1));
        cache.Write(first * Block, data);
        Assert.Equal(blocks, cache.Count);

        var read = new byte[(blocks + 2) * Block];
        cache.Read((first - 1) * Block, read);
        Assert.All(read.AsSpan(0, Block).ToArray(), x => Assert.Equal(0, x));
        Assert.True(read.AsSpan(Block, blocks * Block).SequenceEqual(data));
        Assert.All(read.AsSpan((blocks + 1) * Block).ToArray(), x => Assert.Equal(0, x));

        // Drop the two blocks on either side of the boundary, then write the rest out.
        cache.Discard((run - 1) * (long)Block, 2 * Block);
        Assert.Equal(blocks - 2, cache.Count);
        cache.WriteOut();
        Assert.Equal(0, cache.Count);
        Assert.Equal([(first * Block, 2 * Block), ((run + 1L) * Block, (blocks - 4) * Block)], device.Writes);
        for (int b = 0; b < blocks; b++)
        {
            long block = first + b;
            byte expected = block == run - 1 || block == run ? (byte)0 : (byte)(b + 1);
            Assert.All(device.Bytes.AsSpan((int)(block * Block), Block).ToArray(), x => Assert.Equal(expected, x));
        }
    }

    /// <summary>
    /// Threads writing their own blocks at once (short writes over runs of every shard, each read back at once) beside
    /// a thread handing the held blocks off and writing the cache out over and over: every read returns what its thread
    /// wrote last, whichever hand-off or write-out ran in between, and the device ends with every thread's last bytes. The interleaving varies from run to run;
    /// what is checked holds for every interleaving.
    /// </summary>
    [Fact]
    public async Task Threads_writing_their_own_blocks_beside_write_outs_read_and_keep_their_last_bytes()
    {
        const int threads = 4, blocksPerThread = 96, writesPerThread = 3000;
        var device = new GatedWriteDevice(threads * blocksPerThread * Block);
        using var cache = new FileDataCache(device, Block);
        var models = new byte[threads][];
        using var stop = new CancellationTokenSource();
        var writeOuts = Task.Run(() =>
        {
            int rounds = 0;
            while (!stop.IsCancellationRequested || rounds == 0)
            {
                // Hand-offs (a checkpoint taken) and write-outs (a sync) in turn.
                if (rounds % 2 == 0) cache.WaitFor(cache.HandOff());
                else cache.WriteOut();
                rounds++;
            }
            return rounds;
        });
        var writers = Enumerable.Range(0, threads).Select(t => Task.Run(() =>
        {
            var random = new Random(1000 + t);
            var model = models[t] = new byte[blocksPerThread * Block];
            long origin = (long)t * blocksPerThread * Block;
            var piece = new byte[4 * Block];
            var back = new byte[4 * Block];
            for (int i = 0; i < writesPerThread; i++)
            {
                int count = random.Next(1, 5);
                int at = random.Next(0, blocksPerThread - count + 1);
                var bytes = piece.AsSpan(0, count * Block);
                random.NextBytes(bytes);
                cache.Write(origin + (long)at * Block, bytes);
                bytes.CopyTo(model.AsSpan(at * Block));
                var readBack = back.AsSpan(0, count * Block);
                cache.Read(origin + (long)at * Block, readBack);
                if (!readBack.SequenceEqual(bytes)) throw new InvalidOperationException($"thread {t}, write {i}: read back other bytes");
            }
        })).ToArray();
        await Task.WhenAll(writers).WaitAsync(HangLimit);
        stop.Cancel();
        Assert.True(await writeOuts.WaitAsync(HangLimit) > 0);
        cache.WriteOut();
        for (int t = 0; t < threads; t++)
            Assert.True(device.Bytes.AsSpan(t * blocksPerThread * Block, blocksPerThread * Block).SequenceEqual(models[t]), $"thread {t}'s blocks");
    }
}

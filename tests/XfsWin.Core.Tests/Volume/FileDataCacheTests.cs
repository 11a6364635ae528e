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

        public void Write(long offset, ReadOnlySpan<byte> source)
        {
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
}

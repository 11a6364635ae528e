using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;
using Xunit;

namespace XfsWin.Tests.Metadata;

/// <summary>
/// The metadata buffer cache on a memory device: one buffer per disk range, holds, locks, dirty
/// ranges, invalidation, eviction, writeback through write verifiers, and read-ahead that completes
/// after a buffer changed (forced with a device that blocks a read until the test releases it).
/// </summary>
public sealed class BufferCacheTests
{
    private const int Block = 4096;
    // Test block layout: magic (4), CRC (4), LSN (8), then payload.
    private const int OffCrc = 4, OffLsn = 8;
    private const uint MagicA = 0x54455354, MagicB = 0x42424242;

    /// <summary>A device in memory that logs writes and can hold one read at a given offset until released.</summary>
    private sealed class GatedMemoryDevice(int bytes) : IBlockDevice
    {
        public readonly byte[] Bytes = new byte[bytes];
        public readonly List<long> Writes = [];
        public int Reads;
        private long _gateOffset = -1;
        public readonly ManualResetEventSlim GatedReadStarted = new();
        public readonly ManualResetEventSlim ReleaseGate = new();

        /// <summary>The next read that starts at <paramref name="offset"/> waits for <see cref="ReleaseGate"/>.</summary>
        public void GateNextReadAt(long offset) => Interlocked.Exchange(ref _gateOffset, offset);

        public long Length => Bytes.Length;
        public int SectorSize => 512;
        public bool CanWrite => true;
        public string IoMode => "memory";

        public void Read(long offset, Span<byte> destination)
        {
            Interlocked.Increment(ref Reads);
            if (Interlocked.CompareExchange(ref _gateOffset, -1, offset) == offset)
            {
                GatedReadStarted.Set();
                ReleaseGate.Wait();
            }
            lock (Bytes) Bytes.AsSpan((int)offset, destination.Length).CopyTo(destination);
        }

        public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
        {
            Read(offset, destination.Span);
            return ValueTask.CompletedTask;
        }

        public void Write(long offset, ReadOnlySpan<byte> source)
        {
            lock (Bytes)
            {
                source.CopyTo(Bytes.AsSpan((int)offset));
                Writes.Add(offset);
            }
        }

        public void Flush() { }
        public void Dispose() { }
    }

    /// <summary>CRC, then magic: the read verifier of the test blocks.</summary>
    private readonly struct TestVerifier(uint magic, int kind) : IBufferVerifier
    {
        public int Kind => kind;
        public string Structure => $"test block {magic:x8}";

        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
        {
            if (!XfsCrc.Verify(buffer, OffCrc)) return VerifyResult.Fail("CRC mismatch", OffCrc);
            return BinaryPrimitives.ReadUInt32BigEndian(buffer) == magic ? VerifyResult.Ok : VerifyResult.Fail("bad magic", 0);
        }

        public IBufferWriteVerifier ForWrite() => new SelfDescribingWriteVerifier<TestVerifier>(this, OffLsn, OffCrc);
    }

    private static readonly TestVerifier A = new(MagicA, 1001);

    private static GatedMemoryDevice MakeDevice(int blocks)
    {
        var device = new GatedMemoryDevice(blocks * Block);
        for (int b = 0; b < blocks; b++)
        {
            var block = device.Bytes.AsSpan(b * Block, Block);
            BinaryPrimitives.WriteUInt32BigEndian(block, MagicA);
            BinaryPrimitives.WriteUInt32BigEndian(block[16..], (uint)b);
            XfsCrc.Stamp(block, OffCrc);
        }
        return device;
    }

    private static BufferCache MakeCache(GatedMemoryDevice device, long capacity = 64 << 20) => new(device, new VolumeHealth(), capacity);

    private static uint Payload(ReadOnlySpan<byte> block) => BinaryPrimitives.ReadUInt32BigEndian(block[16..]);

    [Fact]
    public void One_buffer_per_range_whatever_verifier_asks_and_a_mismatching_structure_is_refused()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        var first = cache.Read(Block, Block, 7, A);
        Assert.Same(first, cache.Read(Block, Block, 7, A));
        Assert.Equal(1, device.Reads);

        // Asked for as another kind and owner that also accepts it: verified again, not read again, same buffer.
        var again = cache.Read(Block, Block, 8, new TestVerifier(MagicA, 1002));
        Assert.Same(first, again);
        Assert.Equal(1, device.Reads);
        Assert.Equal(1, cache.BufferCount);

        // Asked for as a structure it is not: refused as corruption naming that structure, not served.
        var e = Assert.Throws<XfsCorruptionException>(() => cache.Read(Block, Block, 7, new TestVerifier(MagicB, 1003)));
        Assert.Equal(Block, e.ByteOffset);
        Assert.Contains("bad magic", e.Problem);
        Assert.Equal(1, cache.BufferCount);
    }

    [Fact]
    public void Held_locked_and_dirty_buffers_are_never_evicted()
    {
        var device = MakeDevice(600); // 2.4 MiB of blocks through a 1 MiB cache
        using var cache = MakeCache(device, 1 << 20);
        var held = cache.Get(0, Block, 0, A);
        var owner = new object();
        var locked = cache.ReadForWrite(Block, Block, 0, A, A.ForWrite(), owner);
        var dirtyChange = new MetadataChangeSet(cache);
        var dirty = dirtyChange.Read(2 * Block, Block, 0, A, A.ForWrite());
        dirty.Contents[100] = 0xEE;
        dirty.LogRange(100, 100);
        dirtyChange.Commit();

        for (int b = 3; b < 600; b++) cache.Read((long)b * Block, Block, 0, A);
        Assert.InRange(cache.CachedBytes, 0, 1 << 20);
        Assert.Same(held, cache.Find(0, Block));
        Assert.Same(locked, cache.Find(Block, Block));
        Assert.Same(dirty, cache.Find(2 * Block, Block));
        Assert.True(cache.Find(3 * Block, Block) is null, "nothing was evicted");

        // Released and clean: now they can go.
        cache.ReleaseHold(held);
        cache.Unlock(locked, owner, commit: false);
        Assert.Equal(1, cache.Clear()); // only the dirty one stays
        Assert.Same(dirty, cache.Find(2 * Block, Block));
        Assert.Equal(1, cache.Writeback());
        Assert.Equal(0, cache.Clear());
    }

    [Fact]
    public void A_cache_full_of_locked_and_dirty_buffers_serves_reads_for_changes_and_sweeps_once_per_eighth_of_its_capacity_added()
    {
        const int Capacity = 1 << 20, Dirty = 400, Clean = 400; // 1.6 MiB dirty through a 1 MiB cache, then 1.6 MiB read
        var device = MakeDevice(Dirty + Clean);
        using var cache = MakeCache(device, Capacity);
        // One change locking more than the cache holds: past the capacity, each block read for it is the only buffer a
        // sweep could drop. A sweep on every read dropped it before the change could lock it, and the read for the
        // change started over for ever.
        using (var change = new MetadataChangeSet(cache))
        {
            for (int b = 0; b < Dirty; b++)
            {
                var buffer = change.Read((long)b * Block, Block, 0, A, A.ForWrite());
                buffer.Contents[100] = 0xEE;
                buffer.LogRange(100, 100);
            }
            change.Commit();
        }
        long sweeps = cache.Sweeps;
        for (int b = Dirty; b < Dirty + Clean; b++) cache.Read((long)b * Block, Block, 0, A);

        // Nothing dirty can go, so a sweep frees at most the clean buffers read since the last one: the next waits for
        // an eighth of the capacity (32 blocks) more, rather than every buffer read walking every buffer.
        Assert.InRange(cache.Sweeps - sweeps, 1, Clean / (Capacity / 8 / Block) + 1);
        for (int b = 0; b < Dirty; b++) Assert.NotNull(cache.Find((long)b * Block, Block));

        // Written back, the dirty buffers can go: the next sweep brings the cache under its capacity.
        Assert.Equal(Dirty, cache.Writeback());
        for (int b = Dirty; b < Dirty + Clean; b++) cache.Read((long)b * Block, Block, 0, A);
        for (int b = 0; b < Capacity / 8 / Block + 1; b++) cache.Read((long)b * Block, Block, 0, A);
        Assert.InRange(cache.CachedBytes, 0, Capacity);
    }

    [Fact]
    public void A_spare_array_becomes_the_next_private_copy_and_is_never_the_published_bytes()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        byte[] Commit(byte value)
        {
            var change = new MetadataChangeSet(cache);
            var b = change.Read(Block, Block, 0, A, A.ForWrite());
            b.Contents[200] = value;
            b.LogRange(200, 200);
            change.Commit();
            return cache.Read(Block, Block, 0, A);
        }

        var first = Commit(1);
        var buffer = cache.Find(Block, Block)!;
        Assert.False(buffer.OfferSpare(first), "the published bytes are not free");
        Assert.False(buffer.OfferSpare(new byte[Block / 2]), "an array of another length does not fit");
        var second = Commit(2);
        Assert.NotSame(first, second);
        Assert.True(buffer.OfferSpare(first));
        Assert.False(buffer.OfferSpare(first), "an array already kept is not kept twice");
        var other = new byte[Block];
        Assert.True(buffer.OfferSpare(other));
        Assert.False(buffer.OfferSpare(new byte[Block]), "a buffer keeps two spares");

        var change = new MetadataChangeSet(cache);
        var copy = change.Read(Block, Block, 0, A, A.ForWrite()).Contents;
        Assert.Same(first, copy);
        Assert.Equal(1, buffer.SparesUsed);
        Assert.Equal(2, copy[200]); // the copy holds the published bytes, not what the array held before
        copy[200] = 3;
        buffer.LogRange(200, 200);
        Assert.Equal(2, cache.Read(Block, Block, 0, A)[200]); // readers see the published bytes until the commit
        change.Commit();
        Assert.Same(first, cache.Read(Block, Block, 0, A));
        Assert.Equal(3, cache.Read(Block, Block, 0, A)[200]);
        Assert.Equal(2, second[200]);

        // The second spare makes the next copy; a copy made and left unchanged is kept for the one after.
        var unchanged = new MetadataChangeSet(cache);
        var looked = unchanged.Read(Block, Block, 0, A, A.ForWrite()).Contents;
        Assert.Same(other, looked);
        Assert.Equal(3, looked[200]);
        unchanged.Commit();
        Assert.Same(first, cache.Read(Block, Block, 0, A)); // nothing was logged: nothing published
        Assert.Equal(4, Commit(4)[200]);
        Assert.Equal(3, buffer.SparesUsed);
        Assert.Same(other, cache.Read(Block, Block, 0, A));
    }

    [Fact]
    public void A_commit_points_the_published_snapshot_at_its_new_bytes_and_a_relock_takes_them()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        var owner = new object();
        void Change(byte value)
        {
            var b = cache.ReadForWrite(Block, Block, 0, A, A.ForWrite(), owner);
            b.Contents[300] = value;
            b.LogRange(300, 300);
            cache.Unlock(b, owner, commit: true);
        }

        Change(1);
        var buffer = cache.Find(Block, Block)!;
        var snapshot = buffer.Published!;
        var first = snapshot.Data;
        Change(2);
        // The same object, pointing at the new bytes (the old array untouched), verified as before.
        Assert.Same(snapshot, buffer.Published);
        Assert.NotSame(first, snapshot.Data);
        Assert.Equal(1, first[300]);
        Assert.Equal(2, snapshot.Data[300]);
        Assert.Equal((A.Kind, 0UL), (snapshot.Kind, snapshot.Owner));
        Assert.Same(snapshot.Data, cache.Read(Block, Block, 0, A));

        // Nothing published since the last commit: the buffer is locked again as it was.
        Assert.True(cache.Relock(buffer, owner));
        Assert.Equal(2, buffer.Contents[300]);
        cache.Unlock(buffer, owner, commit: true);
        // After another owner's commit, a relock takes the buffer as that commit published it.
        var before = buffer.Published!.Data;
        var other = new object();
        var b2 = cache.ReadForWrite(Block, Block, 0, A, A.ForWrite(), other);
        b2.Contents[300] = 3;
        b2.LogRange(300, 300);
        cache.Unlock(b2, other, commit: true);
        Assert.NotSame(before, buffer.Published!.Data);
        Assert.True(cache.Relock(buffer, owner));
        Assert.Equal(3, buffer.Contents[300]);
        cache.Unlock(buffer, owner, commit: false);
        Assert.Same(snapshot, buffer.Published);
    }

    [Fact]
    public async Task A_lock_excludes_other_owners_is_recursive_for_its_owner_and_readers_see_the_last_commit()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        var before = cache.Read(Block, Block, 0, A);
        var ownerA = new object();
        var buffer = cache.ReadForWrite(Block, Block, 0, A, A.ForWrite(), ownerA);
        Assert.Same(buffer, cache.ReadForWrite(Block, Block, 0, A, A.ForWrite(), ownerA)); // recursion
        Assert.Equal(2, buffer.Holds);
        BinaryPrimitives.WriteUInt32BigEndian(buffer.Contents.AsSpan(16), 4242);
        buffer.LogRange(16, 19);

        // Another owner waits for the lock: it cannot get it while owner A holds it.
        var ownerB = new object();
        var waiter = Task.Run(() =>
        {
            var b = cache.ReadForWrite(Block, Block, 0, A, A.ForWrite(), ownerB);
            uint seen = Payload(b.Contents);
            cache.Unlock(b, ownerB, commit: false);
            return seen;
        });
        // Lock-free readers meanwhile see the published bytes, not the change in progress.
        Assert.Same(before, cache.Read(Block, Block, 0, A));
        Assert.Equal(1u, Payload(cache.Read(Block, Block, 0, A)));
        Assert.False(waiter.IsCompleted);

        cache.Unlock(buffer, ownerA, commit: true); // inner level: still locked
        Assert.True(buffer.IsLocked);
        Assert.False(waiter.IsCompleted);
        Assert.Equal(1u, Payload(cache.Read(Block, Block, 0, A)));
        cache.Unlock(buffer, ownerA, commit: true);

        // Owner B got the lock only after owner A's commit, so its copy holds A's change.
        Assert.Equal(4242u, await waiter);
        var after = cache.Read(Block, Block, 0, A);
        Assert.NotSame(before, after);
        Assert.Equal(4242u, Payload(after));
        Assert.Equal(1u, Payload(before)); // a published snapshot never changes
        Assert.Equal(0, buffer.Holds);
        Assert.True(buffer.IsDirty);
    }

    [Fact]
    public void Logged_ranges_set_the_128_byte_chunks_of_the_dirty_bitmap_until_writeback()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        using (var change = new MetadataChangeSet(cache))
        {
            var b = change.Read(0, Block, 0, A, A.ForWrite());
            b.LogRange(0, 3);       // chunk 0
            b.LogRange(300, 600);   // chunks 2..4
            b.LogRange(4095, 4095); // chunk 31
            Assert.Equal(new uint[] { 0x8000001D }, b.DirtyMap());
            Assert.Equal(new[] { (0, 128), (256, 384), (3968, 128) }, b.DirtyRanges());
            change.Commit();
        }
        var buffer = cache.Find(0, Block)!;
        Assert.True(buffer.IsDirty);
        Assert.Equal(new uint[] { 0x8000001D }, buffer.DirtyMap()); // accumulates across changes until written
        using (var change = new MetadataChangeSet(cache))
        {
            change.Read(0, Block, 0, A, A.ForWrite()).LogRange(1024, 1024); // chunk 8
            change.Commit();
        }
        Assert.Equal(new uint[] { 0x8000011D }, buffer.DirtyMap());
        Assert.Equal(1, cache.Writeback());
        Assert.False(buffer.IsDirty);
        Assert.Empty(buffer.DirtyMap());
    }

    [Fact]
    public void A_cancelled_change_leaves_the_buffer_as_it_was()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        var before = cache.Read(0, Block, 0, A);
        using (var change = new MetadataChangeSet(cache))
        {
            var b = change.Read(0, Block, 0, A, A.ForWrite());
            b.Contents[20] = 0x77;
            b.LogRange(20, 20);
        } // disposed without commit: cancelled
        Assert.Same(before, cache.Read(0, Block, 0, A));
        Assert.False(cache.Find(0, Block)!.IsDirty);
        Assert.Equal(0, cache.Writeback());
        Assert.Empty(device.Writes);
    }

    [Fact]
    public void Writeback_goes_in_disk_order_through_the_write_verifier_stamping_lsn_then_crc()
    {
        var device = MakeDevice(8);
        using var cache = MakeCache(device);
        const ulong lsn = (5UL << 32) | 1234;
        using (var change = new MetadataChangeSet(cache))
        {
            foreach (int b in new[] { 6, 2, 4 })
            {
                var buffer = change.Read((long)b * Block, Block, 0, A, A.ForWrite());
                BinaryPrimitives.WriteUInt32BigEndian(buffer.Contents.AsSpan(16), 1000u + (uint)b);
                buffer.LogRange(16, 19);
                if (b != 4) buffer.Lsn = lsn;
            }
            change.Commit();
        }
        Assert.Empty(device.Writes);
        Assert.Equal(3, cache.DelayedWriteCount);
        Assert.Equal(3, cache.Writeback());
        Assert.Equal(new long[] { 2 * Block, 4 * Block, 6 * Block }, device.Writes);
        Assert.Equal(0, cache.DelayedWriteCount);

        // What reached the disk passes the read verifier of a fresh cache (the CRC was recomputed) and carries the LSN.
        using var fresh = MakeCache(device);
        foreach (int b in new[] { 2, 4, 6 })
        {
            var onDisk = fresh.Read((long)b * Block, Block, 0, A);
            Assert.Equal(1000u + (uint)b, Payload(onDisk));
            Assert.Equal(b == 4 ? 0UL : lsn, BinaryPrimitives.ReadUInt64BigEndian(onDisk.AsSpan(OffLsn)));
        }
        // The cache now holds what was written (stamped), and the buffers are clean.
        Assert.Equal(lsn, BinaryPrimitives.ReadUInt64BigEndian(cache.Read(2 * Block, Block, 0, A).AsSpan(OffLsn)));
        Assert.False(cache.Find(2 * Block, Block)!.IsDirty);
    }

    [Fact]
    public void A_block_its_write_verifier_refuses_is_not_written_and_stays_dirty()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        var original = device.Bytes.AsSpan(Block, Block).ToArray();
        using (var change = new MetadataChangeSet(cache))
        {
            var b = change.Read(Block, Block, 0, A, A.ForWrite());
            BinaryPrimitives.WriteUInt32BigEndian(b.Contents, MagicB); // a bug of ours: the structure is broken
            b.LogRange(0, 3);
            change.Commit();
        }
        var e = Assert.Throws<InvalidOperationException>(() => cache.Writeback());
        Assert.Contains($"byte offset {Block}", e.Message);
        Assert.Empty(device.Writes);
        Assert.Equal(original, device.Bytes.AsSpan(Block, Block).ToArray());
        Assert.True(cache.Find(Block, Block)!.IsDirty);
        Assert.Equal(1, cache.DelayedWriteCount);
    }

    [Fact]
    public void An_invalidated_buffer_is_never_written_and_leaves_the_cache_but_a_cancelled_invalidation_changes_nothing()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        using (var change = new MetadataChangeSet(cache))
        {
            foreach (int b in new[] { 1, 2 })
            {
                var buffer = change.Read((long)b * Block, Block, 0, A, A.ForWrite());
                buffer.Contents[40] = 0x99;
                buffer.LogRange(40, 40);
            }
            change.Commit();
        }
        var kept = cache.Find(2 * Block, Block)!;
        using (var change = new MetadataChangeSet(cache))
        {
            change.Invalidate(2 * Block, Block);
            Assert.True(kept.IsStale);
            change.Cancel();
        }
        Assert.False(kept.IsStale);
        Assert.True(kept.IsDirty);
        var freed = cache.Find(Block, Block)!;
        using (var change = new MetadataChangeSet(cache))
        {
            change.Invalidate(Block, Block); // the block was freed
            change.Commit();
        }
        Assert.True(freed.IsStale);
        Assert.Null(cache.Find(Block, Block));
        Assert.Equal(1, cache.Writeback());
        Assert.Equal(new long[] { 2 * Block }, device.Writes);
        Assert.Equal(0, device.Bytes[Block + 40]);
        // The cancelled invalidation left its write verifier in place: the CRC was recomputed.
        using (var fresh = MakeCache(device)) Assert.Equal(0x99, fresh.Read(2 * Block, Block, 0, A)[40]);
        // Read again: what the disk holds, in a new buffer.
        Assert.Equal(0, cache.Read(Block, Block, 0, A)[40]);
        Assert.NotSame(freed, cache.Find(Block, Block));
    }

    [Fact]
    public void A_read_ahead_that_completes_after_a_change_committed_is_discarded()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        device.GateNextReadAt(Block);
        cache.StartPrefetch(Block, Block, [Block], Block, 0, A);
        device.GatedReadStarted.Wait(); // the read-ahead has read nothing yet

        // A change writes the whole block without reading it (a new block), and commits.
        using (var change = new MetadataChangeSet(cache))
        {
            var b = change.GetNew(Block, Block, A.Kind, 0, A.ForWrite());
            BinaryPrimitives.WriteUInt32BigEndian(b.Contents, MagicA);
            BinaryPrimitives.WriteUInt32BigEndian(b.Contents.AsSpan(16), 777);
            b.LogRange(0, Block - 1);
            change.Commit();
        }
        device.ReleaseGate.Set();
        SpinWait.SpinUntil(() => cache.ReadAheadsInFlight == 0);

        Assert.Equal(1, cache.ReadAheadsDiscarded);
        Assert.Equal(777u, Payload(cache.Read(Block, Block, 0, A)));
        Assert.True(cache.Find(Block, Block)!.IsDirty);
    }

    [Fact]
    public void A_read_ahead_that_completes_while_the_buffer_is_locked_or_after_it_was_invalidated_is_discarded()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);

        // Locked for a change (not committed) while the read-ahead reads.
        device.GateNextReadAt(Block);
        cache.StartPrefetch(Block, Block, [Block], Block, 0, A);
        device.GatedReadStarted.Wait();
        var change = new MetadataChangeSet(cache);
        var locked = change.GetNew(Block, Block, A.Kind, 0, A.ForWrite());
        device.ReleaseGate.Set();
        SpinWait.SpinUntil(() => cache.ReadAheadsInFlight == 0);
        Assert.Equal(1, cache.ReadAheadsDiscarded);
        Assert.Null(locked.Published);
        change.Cancel();

        // Invalidated (a freed block) while the read-ahead reads: nothing comes back into the cache.
        device.GatedReadStarted.Reset();
        device.ReleaseGate.Reset();
        device.GateNextReadAt(2 * Block);
        cache.StartPrefetch(2 * Block, Block, [2 * Block], Block, 0, A);
        device.GatedReadStarted.Wait();
        using (var freeing = new MetadataChangeSet(cache))
        {
            freeing.Invalidate(2 * Block, Block);
            freeing.Commit();
        }
        device.ReleaseGate.Set();
        SpinWait.SpinUntil(() => cache.ReadAheadsInFlight == 0);
        Assert.Equal(2, cache.ReadAheadsDiscarded);
        Assert.Null(cache.Find(2 * Block, Block));
    }

    [Fact]
    public async Task A_read_ahead_that_finds_nothing_changed_publishes_and_readers_waiting_for_it_get_its_bytes()
    {
        var device = MakeDevice(4);
        using var cache = MakeCache(device);
        device.GateNextReadAt(0);
        cache.StartPrefetch(0, 2 * Block, [0, Block], Block, 0, A);
        device.GatedReadStarted.Wait();
        Assert.True(cache.IsCachedOrPending(Block, Block, 0, A.Kind));
        var reader = Task.Run(() => cache.Read(Block, Block, 0, A));
        device.ReleaseGate.Set();
        Assert.Equal(1u, Payload(await reader));
        SpinWait.SpinUntil(() => cache.ReadAheadsInFlight == 0);
        Assert.Equal(0, cache.ReadAheadsDiscarded);
        Assert.Equal(1, device.Reads); // the reader waited for the read-ahead's read
        Assert.True(cache.TryGetCached(0, Block, 0, A.Kind, out var first));
        Assert.Equal(0u, Payload(first));
    }
}

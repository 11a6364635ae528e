using System.Buffers.Binary;
using CsCheck;
using Xunit;
using XfsWin.Btree;
using XfsWin.Format;

namespace XfsWin.Tests.Btree;

/// <summary>
/// Random insert, delete, update and lookup sequences on every B+tree kind, in memory with small blocks (so trees
/// reach several levels and every split, borrow, join and root change happens), checked after every step against
/// a sorted-set model: the tree holds exactly the model's records in key order, lookups land where the model says,
/// and <see cref="BtreeCursor{TOps}.CheckStructure"/> finds every structural invariant intact. The sequences come
/// from CsCheck generators driven by fixed PCG streams, so a CI run is deterministic; a failure names its stream.
/// </summary>
public sealed class BtreePropertyTests
{
    /// <summary>One step: what to do, on which key number, with which payload.</summary>
    private readonly record struct Step(int Action, int Key, uint Payload);

    private const ulong Seed = 0x5EED_B7EE_0011UL;

    private static readonly Gen<Step[]> Steps =
        Gen.Select(Gen.Int[0, 99], Gen.Int[0, 599], Gen.UInt, (a, k, p) => new Step(a, k, p)).Array[1000, 1400];

    private static Step[] Sequence(uint stream) => Steps.Generate(new PCG(stream, Seed), null!, out _);

    // ---- records of each kind, made from a key number and a payload (distinct key numbers give distinct keys) ----

    private static byte[] FreeSpace(int k, uint p) { var r = new byte[8]; BinaryPrimitives.WriteUInt32BigEndian(r, (uint)k * 16); BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), 1 + p % 15); return r; }
    // cntbt keys are (count, start): the key number fixes both, the payload cannot change the key.
    private static byte[] FreeSpaceByCount(int k, uint p) { var r = new byte[8]; BinaryPrimitives.WriteUInt32BigEndian(r, (uint)k * 16); BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), 1 + (uint)(k * 7919 % 13)); return r; }
    private static byte[] Inode(int k, uint p)
    {
        var r = new byte[InobtRecord.Size];
        BinaryPrimitives.WriteUInt32BigEndian(r, (uint)k * 64);
        BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), p % 65);
        BinaryPrimitives.WriteUInt64BigEndian(r.AsSpan(8), (ulong)p * 0x9E37_79B9_7F4A_7C15UL);
        return r;
    }
    private static byte[] Refcount(int k, uint p)
    {
        var r = new byte[RefcountRecord.Size];
        uint start = (uint)k * 32 | (k % 5 == 0 ? RefcountRecord.CowFlag : 0);
        BinaryPrimitives.WriteUInt32BigEndian(r, start);
        BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), 1 + p % 31);
        BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(8), 2 + p % 7);
        return r;
    }
    private static byte[] Rmap(int k, uint p)
    {
        // Records overlap: start blocks repeat across owners and lengths reach past the next record's start.
        var r = new byte[RmapRecord.Size];
        uint start = (uint)(k % 37) * 8;
        ulong owner = k % 9 == 0 ? RmapRecord.OwnAg : 128 + (ulong)(k / 37);
        ulong offset = RmapRecord.IsNonInodeOwner(owner) ? 0 : (ulong)(k % 11) * 1000 | ((p & 1) != 0 ? RmapRecord.UnwrittenFlag : 0);
        if (owner == RmapRecord.OwnAg) start += (uint)(k / 37) * 1000;  // one OWN_AG record per start block
        BinaryPrimitives.WriteUInt32BigEndian(r, start);
        BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), 1 + p % 40);
        BinaryPrimitives.WriteUInt64BigEndian(r.AsSpan(8), owner);
        BinaryPrimitives.WriteUInt64BigEndian(r.AsSpan(16), offset);
        return r;
    }
    private static byte[] Extent(int k, uint p)
    {
        var r = new byte[BmbtRecord.Size];
        new BmbtRecord((ulong)k * 64, 1000 + (ulong)p % 100000, 1 + p % 63, (p & 64) != 0).Encode(r);
        return r;
    }

    // ---- the runs ---------------------------------------------------------------------------------

    [Theory]
    [InlineData(true, 192)]
    [InlineData(false, 96)]
    public void FreeSpaceByBlock(bool v5, int blockSize) => RunAg<BnobtOps>(v5, blockSize, FreeSpace, 0);

    [Theory]
    [InlineData(true, 192)]
    [InlineData(false, 96)]
    public void FreeSpaceByCount_(bool v5, int blockSize) => RunAg<CntbtOps>(v5, blockSize, FreeSpaceByCount, 1);

    [Theory]
    [InlineData(true, 192)]
    [InlineData(false, 96)]
    public void Inodes(bool v5, int blockSize) => RunAg<InobtOps>(v5, blockSize, Inode, 2);

    [Fact]
    public void FreeInodes() => RunAg<FinobtOps>(true, 192, Inode, 3);

    [Fact]
    public void ReferenceCounts() => RunAg<RefcountbtOps>(true, 192, Refcount, 4);

    [Fact]
    public void ReverseMappings() => RunAg<RmapbtOps>(true, 240, Rmap, 5);

    [Theory]
    [InlineData(true, 192, 52)]   // root in the inode holds 3 entries
    [InlineData(false, 96, 36)]  // 2 entries
    public void FileExtents(bool v5, int blockSize, int forkSize)
    {
        for (uint stream = 0; stream < 6; stream++)
        {
            var store = InMemoryBtreeStore.CreateInodeRooted(default(BmbtOps).Magic(v5), v5, blockSize, 131, forkSize);
            Run<BmbtOps>(store, Sequence(600 + stream), Extent, $"bmbt stream {600 + stream}");
        }
    }

    /// <summary>
    /// Two cursors take turns every few steps, each set up again before its turn (<see cref="BtreeCursor{TOps}.Reuse"/>,
    /// what a transaction's store does with the cursors it lends again): after the other cursor split, joined or
    /// collapsed the tree, a cursor made again must see the tree as it is, never its own stale path or height.
    /// </summary>
    [Theory]
    [InlineData(true, 192)]
    [InlineData(false, 96)]
    public void CursorsMadeAgainSeeTheTreeAsItIs(bool v5, int blockSize)
    {
        RunAg<BnobtOps>(v5, blockSize, FreeSpace, 6, alternate: true);
        RunAg<RmapbtOps>(true, 240, Rmap, 7, alternate: true);
        for (uint stream = 0; stream < 3; stream++)
        {
            var store = InMemoryBtreeStore.CreateInodeRooted(default(BmbtOps).Magic(v5), v5, blockSize, 131, v5 ? 52 : 36);
            Run<BmbtOps>(store, Sequence(800 + stream), Extent, $"bmbt stream {800 + stream}, alternating cursors", alternate: true);
        }
    }

    private static void RunAg<TOps>(bool v5, int blockSize, Func<int, uint, byte[]> make, uint kindStream, bool alternate = false) where TOps : struct, IBtreeOps
    {
        for (uint stream = 0; stream < 6; stream++)
        {
            var store = InMemoryBtreeStore.CreateAgRooted(default(TOps).Magic(v5), v5, blockSize, 3);
            Run<TOps>(store, Sequence(kindStream * 100 + stream), make, $"{default(TOps).Name} stream {kindStream * 100 + stream}", alternate);
        }
    }

    private sealed class KeyOrder<TOps> : IComparer<byte[]> where TOps : struct, IBtreeOps
    {
        public int Compare(byte[]? a, byte[]? b)
        {
            var ops = default(TOps);
            Span<byte> ka = stackalloc byte[ops.KeySize], kb = stackalloc byte[ops.KeySize];
            ops.RecordLowKey(a, ka);
            ops.RecordLowKey(b, kb);
            return ops.CompareKeys(ka, kb);
        }
    }

    private static void Run<TOps>(InMemoryBtreeStore store, Step[] steps, Func<int, uint, byte[]> make, string what, bool alternate = false)
        where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        var order = new KeyOrder<TOps>();
        var model = new SortedSet<byte[]>(order);
        var cursors = new[] { new BtreeCursor<TOps>(store), new BtreeCursor<TOps>(store) };
        var cursor = cursors[0];
        int maxLevels = 1, splitsSeen = 0;
        var key = new byte[ops.KeySize];
        for (int i = 0; i < steps.Length; i++)
        {
            if (alternate && i % 3 == 0)
            {
                cursor = cursors[i / 3 % 2];
                cursor.Reuse(store);
            }
            var step = steps[i];
            var rec = make(step.Key, step.Payload);
            ops.RecordLowKey(rec, key);
            bool growing = i < steps.Length / 2;
            // The first part mostly inserts, the rest mostly deletes, so trees grow tall and then collapse.
            int insertShare = growing ? 75 : 10, deleteShare = growing ? 10 : 80;
            string where = $"{what}, step {i} ({(step.Action < insertShare ? "insert" : step.Action < insertShare + deleteShare ? "delete" : step.Action % 4 == 0 ? "update" : "lookup")} {step.Key})";
            if (step.Action < insertShare)
            {
                bool had = model.Contains(rec);
                Assert.True(cursor.Insert(rec) != had, $"{where}: insert disagreed with the model (present: {had})");
                if (!had) model.Add(rec);
            }
            else if (step.Action < insertShare + deleteShare)
            {
                bool had = model.Contains(rec);
                Assert.True(cursor.Lookup(key, BtreeLookup.Equal) == had, $"{where}: equal lookup disagreed with the model");
                if (had)
                {
                    cursor.Delete();
                    model.Remove(rec);
                }
            }
            else if (step.Action % 4 == 0)
            {
                if (cursor.Lookup(key, BtreeLookup.Equal))
                {
                    cursor.Update(rec);
                    model.Remove(rec);
                    model.Add(rec);
                }
                else Assert.DoesNotContain(rec, model);
            }
            else
            {
                CheckLookups(cursor, model, key, where);
            }

            var records = new List<byte[]>();
            var check = cursor.CheckStructure(records);
            Assert.True(check.Ok, $"{where}: {check.Problem} (byte offset {check.ProblemByteOffset})");
            Assert.True(model.Count == records.Count, $"{where}: tree has {records.Count} records, model {model.Count}");
            int j = 0;
            foreach (var m in model)
                Assert.True(m.AsSpan().SequenceEqual(records[j++]), $"{where}: record {j - 1} differs from the model");
            Assert.Equal(store.Levels, check.Levels);
            if (store.Levels > maxLevels) { maxLevels = store.Levels; splitsSeen++; }
            Assert.Equal(check.Blocks, store.BlockCount);
        }
        // The sequence must have exercised growth and shrinking.
        Assert.True(maxLevels >= 3, $"{what}: the tree reached only {maxLevels} levels");
        Assert.True(store.Frees > 0, $"{what}: no block was ever freed (no join or root collapse)");
        if (alternate) cursor.Reuse(store);
        WalkBothWays(cursor, model, what);
        if (ops.Overlapping) CheckRangeQueries(cursor, model, what);
    }

    private static void CheckLookups<TOps>(BtreeCursor<TOps> cursor, SortedSet<byte[]> model, byte[] key, string where) where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        var order = new KeyOrder<TOps>();
        Span<byte> k = stackalloc byte[ops.KeySize];
        byte[]? le = null, ge = null;
        foreach (var m in model)
        {
            ops.RecordLowKey(m, k);
            int c = ops.CompareKeys(k, key);
            if (c <= 0) le = m;
            if (c >= 0 && ge is null) ge = m;
        }
        Assert.True(cursor.Lookup(key, BtreeLookup.LessOrEqual) == (le is not null), $"{where}: LE lookup");
        if (le is not null) Assert.True(cursor.Record.SequenceEqual(le), $"{where}: LE lookup landed on another record");
        else Assert.True(cursor.Increment() == (model.Count > 0), $"{where}: increment after a failed LE lookup");
        Assert.True(cursor.Lookup(key, BtreeLookup.GreaterOrEqual) == (ge is not null), $"{where}: GE lookup");
        if (ge is not null)
        {
            Assert.True(cursor.Record.SequenceEqual(ge), $"{where}: GE lookup landed on another record");
            if (cursor.Decrement())
                Assert.True(order.Compare(cursor.Record.ToArray(), ge) < 0, $"{where}: decrement from the GE record did not go back");
        }
    }

    private static void WalkBothWays<TOps>(BtreeCursor<TOps> cursor, SortedSet<byte[]> model, string what) where TOps : struct, IBtreeOps
    {
        var forward = new List<byte[]>();
        if (cursor.MoveToFirst())
            do forward.Add(cursor.Record.ToArray()); while (cursor.Increment());
        Assert.Equal(model.Select(Convert.ToHexString), forward.Select(Convert.ToHexString));
        if (model.Count == 0) return;
        var ops = default(TOps);
        var lastKey = new byte[ops.KeySize];
        ops.RecordLowKey(model.Max, lastKey);
        Assert.True(cursor.Lookup(lastKey, BtreeLookup.LessOrEqual), $"{what}: lookup of the last key");
        var backward = new List<byte[]>();
        do backward.Add(cursor.Record.ToArray()); while (cursor.Decrement());
        backward.Reverse();
        Assert.Equal(forward.Select(Convert.ToHexString), backward.Select(Convert.ToHexString));
    }

    private static void CheckRangeQueries<TOps>(BtreeCursor<TOps> cursor, SortedSet<byte[]> model, string what) where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        var pcg = new PCG(77, Seed);
        for (int q = 0; q < 200; q++)
        {
            // Keys (start block, owner 0, offset 0) to (start block, max owner, max offset): every mapping touching the blocks.
            uint a = pcg.Next(400), b = a + pcg.Next(60);
            var low = new byte[ops.KeySize];
            var high = new byte[ops.KeySize];
            BinaryPrimitives.WriteUInt32BigEndian(low, a);
            BinaryPrimitives.WriteUInt32BigEndian(high, b);
            high.AsSpan(4).Fill(0xFF);
            var expected = new List<string>();
            var k = new byte[ops.KeySize];
            foreach (var m in model)
            {
                ops.RecordLowKey(m, k);
                if (ops.CompareKeys(k, high) > 0) continue;
                ops.RecordHighKey(m, k);
                if (ops.CompareKeys(k, low) < 0) continue;
                expected.Add(Convert.ToHexString(m));
            }
            var found = new List<string>();
            cursor.QueryRange(low, high, ref found, static (ReadOnlySpan<byte> r, ref List<string> acc) => { acc.Add(Convert.ToHexString(r)); return true; });
            Assert.True(expected.SequenceEqual(found), $"{what}: query of blocks {a}..{b} found {found.Count} records, the model {expected.Count}");
        }
    }
}

/// <summary>Damaged trees give a corruption error naming the block, never a crash, a hang or a wrong record.</summary>
public sealed class BtreeCorruptionTests
{
    private static (InMemoryBtreeStore Store, BtreeCursor<BnobtOps> Cursor) TallTree()
    {
        var store = InMemoryBtreeStore.CreateAgRooted(default(BnobtOps).Magic(true), true, 256, 0);
        var cursor = new BtreeCursor<BnobtOps>(store);
        var rec = new byte[8];
        for (uint i = 0; i < 2000; i++)
        {
            BinaryPrimitives.WriteUInt32BigEndian(rec, i * 4);
            BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(4), 1);
            Assert.True(cursor.Insert(rec));
        }
        Assert.True(store.Levels >= 3);
        return (store, cursor);
    }

    private static byte[] Key(uint start) { var k = new byte[8]; BinaryPrimitives.WriteUInt32BigEndian(k, start); return k; }

    [Fact]
    public void A_node_pointing_at_its_own_ancestor_is_reported_as_a_misplaced_block()
    {
        var (store, cursor) = TallTree();
        var root = store.Read(store.RootPointer, BtreeMagic.BnoV5, -1);
        int nodeMax = cursor.NodeMaxRecords;
        ulong child = BinaryPrimitives.ReadUInt32BigEndian(root.AsSpan(BtreeBlockView.ShortHeaderV5 + nodeMax * 8));
        var node = store.Read(child, BtreeMagic.BnoV5, -1);
        // The child's first pointer now leads back to the root: a loop.
        BinaryPrimitives.WriteUInt32BigEndian(node.AsSpan(BtreeBlockView.ShortHeaderV5 + nodeMax * 8), (uint)store.RootPointer);
        var e = Assert.Throws<XfsCorruptionException>(() => new BtreeCursor<BnobtOps>(store).Lookup(Key(0), BtreeLookup.LessOrEqual));
        Assert.Equal(store.ByteOffset(store.RootPointer), e.ByteOffset);
        Assert.Contains("level", e.Problem);
        Assert.False(new BtreeCursor<BnobtOps>(store).CheckStructure().Ok);
    }

    [Fact]
    public void A_pointer_to_no_block_names_the_node_holding_it()
    {
        var (store, cursor) = TallTree();
        var root = store.Read(store.RootPointer, BtreeMagic.BnoV5, -1);
        BinaryPrimitives.WriteUInt32BigEndian(root.AsSpan(BtreeBlockView.ShortHeaderV5 + cursor.NodeMaxRecords * 8), 999_999);
        var e = Assert.Throws<XfsCorruptionException>(() => new BtreeCursor<BnobtOps>(store).MoveToFirst());
        Assert.Equal(store.ByteOffset(store.RootPointer), e.ByteOffset);
        var check = new BtreeCursor<BnobtOps>(store).CheckStructure();
        Assert.False(check.Ok);
        Assert.Equal(store.ByteOffset(store.RootPointer), check.ProblemByteOffset);
    }

    [Fact]
    public void Keys_out_of_order_and_a_broken_sibling_link_are_found_by_the_check()
    {
        var (store, cursor) = TallTree();
        Assert.True(cursor.Lookup(Key(400), BtreeLookup.Equal));
        long leaf = cursor.RecordBlockOffset;
        var block = store.Read((ulong)(leaf / store.BlockSize), BtreeMagic.BnoV5, -1);
        // Swap the leaf's second and third records (the first is also its parent's key).
        var second = block.AsSpan(BtreeBlockView.ShortHeaderV5 + 8, 8).ToArray();
        block.AsSpan(BtreeBlockView.ShortHeaderV5 + 16, 8).CopyTo(block.AsSpan(BtreeBlockView.ShortHeaderV5 + 8));
        second.CopyTo(block.AsSpan(BtreeBlockView.ShortHeaderV5 + 16));
        var check = cursor.CheckStructure();
        Assert.False(check.Ok);
        Assert.Equal(leaf, check.ProblemByteOffset);

        var (store2, cursor2) = TallTree();
        Assert.True(cursor2.Lookup(Key(400), BtreeLookup.Equal));
        var block2 = store2.Read((ulong)(cursor2.RecordBlockOffset / store2.BlockSize), BtreeMagic.BnoV5, -1);
        BinaryPrimitives.WriteUInt32BigEndian(block2.AsSpan(BtreeBlockView.ShortOffRightSib), BtreeBlockView.NullShortPtr);
        Assert.Contains("sibling", cursor2.CheckStructure().Problem);
    }

    [Fact]
    public void A_bad_magic_is_reported_with_the_block_address()
    {
        var (store, cursor) = TallTree();
        Assert.True(cursor.Lookup(Key(4000), BtreeLookup.Equal));
        long leaf = cursor.RecordBlockOffset;
        var block = store.Read((ulong)(leaf / store.BlockSize), BtreeMagic.BnoV5, -1);
        BinaryPrimitives.WriteUInt32BigEndian(block, BtreeMagic.CntV5);
        var e = Assert.Throws<XfsCorruptionException>(() => new BtreeCursor<BnobtOps>(store).Lookup(Key(4000), BtreeLookup.Equal));
        Assert.Equal(leaf, e.ByteOffset);
    }
}

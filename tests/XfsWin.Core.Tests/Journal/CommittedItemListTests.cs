using System.Buffers.Binary;
using Xunit;
using XfsWin.Journal;

namespace XfsWin.Tests.Journal;

/// <summary>
/// Delayed logging's in-memory rules: relogged items merge (newest image, union of dirty chunks or inode parts) and
/// move to the end of the list; a freed buffer's cancel replaces what it logged; the AIL keeps each item at the
/// LSN of the last checkpoint that carried it. What the merged items then look like in a log the kernel replays is
/// checked in <see cref="LogWriteKernelTests"/>.
/// </summary>
public sealed class CommittedItemListTests
{
    private static byte[] Block(byte fill) => Enumerable.Repeat(fill, 4096).ToArray();

    private static List<ReadOnlyMemory<byte>> Regions(JournalItem item)
    {
        var regions = new List<ReadOnlyMemory<byte>>();
        item.Format(regions);
        return regions;
    }

    /// <summary>
    /// A buffer item the CIL merged into the one it holds is made again for another buffer (what a transaction does with
    /// the items of its earlier parts); the item the CIL holds is not, and remaking the spent one leaves the CIL's item
    /// (which took the spent item's image) as it was.
    /// </summary>
    [Fact]
    public void A_merged_away_buffer_item_is_made_again_without_touching_the_item_the_CIL_holds()
    {
        var cil = new CommittedItemList();
        var first = BufferLogItem.CreateShared(64, 8, BufType.Btree, Block(1), [0x1u]);
        cil.Commit([first]);
        var second = BufferLogItem.CreateShared(64, 8, BufType.Btree, Block(2), [0x100u]);
        cil.Commit([second]);
        Assert.False(first.MergedAway);
        Assert.True(second.MergedAway);

        // The held item is never made again: a new object.
        var notReused = BufferLogItem.CreateShared(first, 96, 8, BufType.Btree, Block(3), [0x1u]);
        Assert.NotSame(first, notReused);

        // The spent one is, for a buffer of another length, with only the new chunks dirty.
        var remade = BufferLogItem.CreateShared(second, 300, 16, BufType.DirData, Block(4).Concat(Block(5)).ToArray(), [0u, 0x8000_0000u]);
        Assert.Same(second, remade);
        Assert.False(remade.MergedAway);
        Assert.Equal(300, remade.Daddr);
        Assert.Equal(16, remade.LengthBB);
        Assert.Equal(1, remade.DirtyChunkCount);
        Assert.True(remade.IsChunkDirty(63));
        Assert.Equal(5, remade.Image[8191]);
        cil.Commit([remade]);

        var held = (BufferLogItem)cil.Find(new LogItemKey(LogItemType.Buf, 64, 8))!;
        Assert.Same(first, held);
        Assert.Equal(2, held.DirtyChunkCount);
        Assert.True(held.IsChunkDirty(0) && held.IsChunkDirty(8));
        Assert.True(held.Image.ToArray().All(b => b == 2), "the CIL's item lost the newest image of its buffer");
        Assert.Same(remade, cil.Find(new LogItemKey(LogItemType.Buf, 300, 16)));
    }

    [Fact]
    public void RelogMergesDirtyRangesKeepsNewestImageAndMovesTheItemLast()
    {
        var cil = new CommittedItemList();
        cil.Commit([BufferLogItem.Create(64, 8, BufType.Btree, Block(1), 0, 100)]);
        cil.Reserve(10);
        cil.Commit([BufferLogItem.Create(200, 8, BufType.Agf, Block(7), 0, 512)]);
        cil.Reserve(10);
        cil.Commit([BufferLogItem.Create(64, 8, BufType.Btree, Block(2), 1000, 300)]);
        cil.Reserve(10);

        Assert.Equal(2, cil.Count);
        Assert.Equal(3, cil.Transactions);
        Assert.Equal(30, cil.ReservedBlocks);
        long expected = 0;
        foreach (var (daddr, len) in new[] { (64L, 8), (200L, 8) })
        {
            var held = cil.Find(new LogItemKey(LogItemType.Buf, daddr, len))!;
            expected += held.FormattedBytes + held.RegionCount * LogOpHeader.Size;
        }
        Assert.Equal(expected, cil.FormattedBytes);
        var items = cil.TakeAll();
        Assert.Equal(0, cil.FormattedBytes);
        Assert.True(cil.IsEmpty);
        Assert.Equal([200L, 64L], items.Select(i => ((BufferLogItem)i).Daddr));

        var merged = (BufferLogItem)items[1];
        // Chunk 0 (bytes 0-127) and chunks 7-10 (bytes 896-1407) from the two commits.
        Assert.Equal(5, merged.DirtyChunkCount);
        Assert.True(merged.IsChunkDirty(0) && merged.IsChunkDirty(7) && merged.IsChunkDirty(10) && !merged.IsChunkDirty(11) && !merged.IsChunkDirty(1));
        var regions = Regions(merged);
        Assert.Equal(3, regions.Count);
        var format = regions[0].Span;
        Assert.Equal(LogItemType.Buf, BinaryPrimitives.ReadUInt16LittleEndian(format));
        Assert.Equal(3, BinaryPrimitives.ReadUInt16LittleEndian(format[2..]));
        var f = new BufLogFormat(format);
        Assert.Equal(BufType.Btree, f.Type);
        Assert.Equal(64, f.Blkno);
        Assert.Equal(8, f.Len);
        Assert.Equal(1, f.MapSize); // 32 chunks of a 4 KiB buffer
        Assert.Equal(128, regions[1].Length);
        Assert.Equal(4 * 128, regions[2].Length);
        // Both regions carry the newest image.
        Assert.All(new[] { regions[1], regions[2] }, r => Assert.True(r.Span.IndexOfAnyExcept((byte)2) < 0));
        Assert.Equal(merged.FormattedBytes, regions.Sum(r => r.Length));
    }

    [Fact]
    public void CancelReplacesWhatTheBufferLoggedAndAReuseLogsOnlyTheNewContents()
    {
        var cil = new CommittedItemList();
        cil.Commit([BufferLogItem.Create(64, 8, BufType.Btree, Block(1), 0, 4096)]);
        cil.Reserve(1);
        cil.Commit([BufferLogItem.Cancel(64, 8)]);
        cil.Reserve(1);
        var cancel = (BufferLogItem)cil.Find(new LogItemKey(LogItemType.Buf, 64, 8))!;
        Assert.True(cancel.IsCancel);
        var regions = Regions(cancel);
        Assert.Single(regions);
        var f = new BufLogFormat(regions[0].Span);
        Assert.Equal(1, f.Size);
        Assert.Equal(BufLogFormat.FlagCancel, f.Flags);

        cil.Commit([BufferLogItem.Create(64, 8, BufType.DirData, Block(3), 128, 128)]);
        cil.Reserve(1);
        var reused = (BufferLogItem)cil.Find(new LogItemKey(LogItemType.Buf, 64, 8))!;
        Assert.False(reused.IsCancel);
        Assert.Equal(1, reused.DirtyChunkCount);
        Assert.Equal(BufType.DirData, reused.Type);
    }

    [Fact]
    public void TheMostFragmentedBufferFitsTheRegionsRecoveryAccepts()
    {
        // 64 KiB: 512 chunks; every other one dirty is 256 runs, one region each after the format: 257, recovery's limit.
        var image = new byte[65536];
        var map = new uint[16];
        for (int c = 0; c < 512; c += 2) map[c >> 5] |= 1u << (c & 31);
        var item = BufferLogItem.Create(0, 128, BufType.DirData, image, map);
        var regions = Regions(item);
        Assert.Equal(LogItemType.MaxRegionsInItem, regions.Count);
        Assert.Equal(item.RegionCount, regions.Count);
        Assert.All(regions.Skip(1), r => Assert.Equal(128, r.Length));
        var f = new BufLogFormat(regions[0].Span);
        Assert.Equal(16, f.MapSize);
        for (int c = 0; c < 512; c++) Assert.Equal(c % 2 == 0, f.IsChunkDirty(c));
    }

    [Fact]
    public void AilKeepsTheNewestLsnOfEachItemAndItsMinimumIsTheTail()
    {
        var ail = new ActiveItemList();
        var a = BufferLogItem.Create(8, 1, BufType.Agf, new byte[512], 0, 512);
        var b = BufferLogItem.Create(16, 1, BufType.Agi, new byte[512], 0, 512);
        ail.Insert(a.Snapshot(), Lsn.Make(1, 10));
        ail.Insert(b.Snapshot(), Lsn.Make(1, 20));
        Assert.Equal(Lsn.Make(1, 10), ail.MinimumLsn);
        ail.Insert(a.Snapshot(), Lsn.Make(1, 30));
        Assert.Equal(2, ail.Count);
        Assert.Equal(Lsn.Make(1, 20), ail.MinimumLsn);
        var written = ail.ItemsUpTo(Lsn.Make(1, 25));
        Assert.Single(written);
        ail.RemoveWritten(written);
        Assert.Equal(Lsn.Make(1, 30), ail.MinimumLsn);
        Assert.True(ail.Remove(new LogItemKey(LogItemType.Buf, 8, 1)));
        Assert.Null(ail.MinimumLsn);
    }

    [Fact]
    public void ADoneItemWhitesOutItsIntentWhileBothAreInTheCil()
    {
        var cil = new CommittedItemList();
        var efi = IntentLogItem.ExtentFree(false, 7, [new IntentExtent(10, 2)]);
        cil.Commit([efi, BufferLogItem.Create(64, 8, BufType.Btree, Block(1), 0, 128)]);
        cil.Reserve(4);
        cil.Commit([IntentLogItem.ExtentFree(true, 7, [new IntentExtent(10, 2)])]);
        cil.Reserve(1);
        // Neither the intent nor its done item reaches the log; the buffer does.
        Assert.Equal(1, cil.Count);
        Assert.Equal(1, cil.Whiteouts);
        Assert.Null(cil.Find(efi.Key));
        var buffer = cil.Find(new LogItemKey(LogItemType.Buf, 64, 8))!;
        Assert.Equal(buffer.FormattedBytes + buffer.RegionCount * LogOpHeader.Size, cil.FormattedBytes);

        // A done item whose intent was checkpointed already goes out: it takes the intent out of the AIL.
        cil.TakeAll();
        cil.Commit([IntentLogItem.Done(LogItemType.Rud, 9)]);
        cil.Reserve(1);
        Assert.Equal(1, cil.Count);
        Assert.Equal(1, cil.Whiteouts);
    }

    [Fact]
    public void IntentsHoldTheTailUntilTheirDoneItemsAndAreNeverWrittenBack()
    {
        var ail = new ActiveItemList();
        var buffer = BufferLogItem.Create(8, 1, BufType.Agf, new byte[512], 0, 512);
        var rui = IntentLogItem.RmapUpdate(3, [new IntentMapExtent(131, 10, 0, 2, 1)]);
        ail.Insert(rui, Lsn.Make(1, 10));
        ail.Insert(buffer.Snapshot(), Lsn.Make(1, 20));
        Assert.Equal(Lsn.Make(1, 10), ail.MinimumPinnedLsn);
        Assert.Equal(1, ail.PinnedCount);
        Assert.Equal(Lsn.Make(1, 10), ail.LsnOf(rui.Key));
        // Only the buffer can be written back; the intent stays and the tail with it.
        var written = ail.ItemsUpTo(Lsn.Make(1, 30));
        Assert.Equal([buffer.Key], written.Select(i => i.Key));
        ail.RemoveWritten(written);
        Assert.Equal(Lsn.Make(1, 10), ail.MinimumLsn);
        Assert.True(ail.Remove(rui.Key));
        Assert.Null(ail.MinimumPinnedLsn);
        Assert.Equal(0, ail.PinnedCount);
        Assert.True(ail.IsEmpty);
    }

    [Fact]
    public void ACancelledInodeClusterTakesItsInodesOutOfTheAil()
    {
        var ail = new ActiveItemList();
        var image = new byte[512];
        BinaryPrimitives.WriteUInt16BigEndian(image, 0x494E);
        image[4] = 3;
        var inside = InodeLogItem.Create(1000, new InodeClusterLocation(800, 16, 0), image, 0);
        var outside = InodeLogItem.Create(2000, new InodeClusterLocation(900, 16, 0), image, 0);
        ail.Insert(inside, Lsn.Make(1, 10));
        ail.Insert(outside, Lsn.Make(1, 10));
        ail.RemoveInodesIn(800, 32);
        Assert.Null(ail.LsnOf(inside.Key));
        Assert.Equal(Lsn.Make(1, 10), ail.LsnOf(outside.Key));
    }

    [Fact]
    public void ACancelledInodeClusterTakesTheIcreateItemOfItsChunkOutOfTheAil()
    {
        // A released chunk's blocks may be reused (even for file data, never logged): the icreate image of the
        // chunk must not be written back over them later.
        var ail = new ActiveItemList();
        var released = new IcreateLogItem(0, 100, 64, 512, 8, 7, 800, 64);
        var kept = new IcreateLogItem(0, 200, 64, 512, 8, 7, 1600, 64);
        ail.Insert(released, Lsn.Make(1, 10));
        ail.Insert(kept, Lsn.Make(1, 10));
        ail.RemoveInodesIn(832, 16); // the chunk's third cluster
        Assert.Null(ail.LsnOf(released.Key));
        Assert.Equal(Lsn.Make(1, 10), ail.LsnOf(kept.Key));
        ail.RemoveInodesIn(1664, 16); // just past it
        Assert.Equal(Lsn.Make(1, 10), ail.LsnOf(kept.Key));
        ail.RemoveInodesIn(1648, 16);
        Assert.True(ail.IsEmpty);
    }

    [Fact]
    public void IntentEncodingsHaveTheLengthsRecoveryChecks()
    {
        var items = new JournalItem[]
        {
            IntentLogItem.ExtentFree(false, 1, [new IntentExtent(10, 2), new IntentExtent(20, 3)]),
            IntentLogItem.ExtentFree(true, 1, [new IntentExtent(10, 2)]),
            IntentLogItem.RmapUpdate(2, [new IntentMapExtent(131, 10, 0, 2, 1)]),
            IntentLogItem.RefcountUpdate(3, [new IntentPhysExtent(10, 2, 1)]),
            IntentLogItem.BmapUpdate(4, new IntentMapExtent(131, 10, 0, 2, 1)),
            IntentLogItem.Done(LogItemType.Rud, 2),
            IntentLogItem.Done(LogItemType.Cud, 3),
            IntentLogItem.Done(LogItemType.Bud, 4),
            IntentLogItem.ExchangeMapping(5, 131, 132, 1, 1, 0, 0, 8, 0, 4096, 4096),
            IntentLogItem.Done(LogItemType.Xmd, 5),
            IntentLogItem.Done(LogItemType.Attrd, 6),
        };
        foreach (var item in items)
        {
            var r = Regions(item)[0].Span;
            ushort type = BinaryPrimitives.ReadUInt16LittleEndian(r);
            Assert.Null(IntentLogFormat.CheckLength(type, r));
            Assert.Equal(item.Key.Id, (long)IntentLogFormat.Id(r));
        }
        var attri = IntentLogItem.AttrIntent(6, 131, 1, opFlags: 1, attrFilter: 0, "user.k"u8, "value"u8);
        var regions = Regions(attri);
        Assert.Equal(3, regions.Count);
        Assert.Null(IntentLogFormat.CheckLength(LogItemType.Attri, regions[0].Span));
        Assert.Equal(3, BinaryPrimitives.ReadUInt16LittleEndian(regions[0].Span[2..]));
        Assert.Equal(8, regions[1].Length);
    }

    [Fact]
    public void Relogging_a_buffer_releases_the_image_it_replaced_and_never_one_a_checkpoint_took()
    {
        var released = new List<(long Daddr, byte[] Image)>();
        var cil = new CommittedItemList { ImageReleased = (item, image) => released.Add((item.Daddr, image)) };
        var map = new uint[] { 1 };
        BufferLogItem Shared(long daddr, byte[] image) => BufferLogItem.CreateShared(daddr, 8, BufType.Btree, image, map);
        byte[] one = Block(1), two = Block(2), three = Block(3), four = Block(4), five = Block(5), other = Block(9);

        cil.Commit([Shared(64, one), Shared(128, other)]);
        Assert.Empty(released);
        cil.Commit([Shared(64, two)]);
        Assert.Equal([(64L, one)], released);

        // A freed buffer keeps its published bytes: its cancel releases nothing, nor does the image that follows it.
        released.Clear();
        cil.Commit([BufferLogItem.Cancel(64, 8)]);
        cil.Commit([Shared(64, three)]);
        Assert.Empty(released);

        // A checkpoint takes the items (on to the AIL): a later relog starts a new item and releases nothing of theirs.
        var taken = cil.TakeAll();
        Assert.Contains(taken, i => i is BufferLogItem { Daddr: 64 } b && b.Image.SequenceEqual(three));
        cil.Commit([Shared(64, four)]);
        Assert.Empty(released);
        cil.Commit([Shared(64, five)]);
        Assert.Equal([(64L, four)], released);
        Assert.True(((BufferLogItem)cil.Find(new LogItemKey(LogItemType.Buf, 64, 8))!).Image.SequenceEqual(five));
    }

    [Theory]
    [InlineData(8, 1, 1)]      // one chunk of a 4 KiB block
    [InlineData(8, 1, 32)]     // all of it
    [InlineData(8, 3, 11)]     // every third chunk
    [InlineData(128, 2, 256)]  // every other chunk of a 64 KiB block: as many runs as an item has data regions
    public void A_buffer_item_measures_what_it_formats(int lengthBB, int step, int dirtyChunks)
    {
        var item = BufferLogItem.Create(64, lengthBB, BufType.Btree, new byte[lengthBB << 9], 0, 1);
        for (int i = 0; i < dirtyChunks; i++) item.MarkDirty(i * step * BufLogFormat.ChunkSize, 1);
        var regions = Regions(item);
        Assert.Equal(regions.Count, item.RegionCount);
        Assert.Equal(regions.Sum(r => r.Length), item.FormattedBytes);
        Assert.True(regions.Count <= LogItemType.MaxRegionsInItem);
    }
}

using Xunit;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.Tests.Allocation;
using XfsWin.Volume;

namespace XfsWin.Tests.Journal;

/// <summary>
/// Releasing a clean buffer before commit (the kernel's xfs_trans_brelse): a transaction lets go of AG headers it
/// looked at and did not change, so other changes may lock them while it goes on. On a volume mkfs.xfs made.
/// </summary>
public sealed class TransactionReleaseTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-release.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static MetadataBuffer ReadAgi(Transaction tx, Superblock sb, uint agno) => InodeAllocator.JoinAgi(tx, sb, agno);

    [Fact]
    public void A_clean_buffer_is_unlocked_at_once_and_a_changed_or_held_one_stays_joined()
    {
        string img = AllocatorImages.Copy("small-6.13", _tmp, fragment: false);
        using var v = new AllocatorVolume(img);
        var sb = v.Sb;
        using (var tx = v.Begin())
        {
            var agi0 = ReadAgi(tx, sb, 0);
            var agi1 = ReadAgi(tx, sb, 1);
            Assert.True(agi0.IsLocked && agi1.IsLocked);

            // Read only: released, unlocked, no longer joined; joining it again locks it again.
            _ = agi1.Contents[0];
            Assert.True(tx.Release(agi1));
            Assert.False(agi1.IsLocked);
            Assert.False(tx.IsJoined(agi1));
            Assert.False(tx.Release(agi1));
            Assert.Same(agi1, ReadAgi(tx, sb, 1));
            Assert.True(agi1.IsLocked);

            // Held across rolls: stays.
            tx.Hold(agi1);
            Assert.False(tx.Release(agi1));
            Assert.True(agi1.IsLocked);

            // Logged: stays, and its change commits.
            uint newino = System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(agi0.Contents.AsSpan(AgiView.OffNewino));
            tx.LogRange(agi0, AgiView.OffNewino, AgiView.OffNewino + 3);
            Assert.False(tx.Release(agi0));
            Assert.True(agi0.IsLocked);
            tx.Commit();
            Assert.Equal(newino, System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(agi0.Published!.Data.AsSpan(AgiView.OffNewino)));
        }
        foreach (uint agno in new uint[] { 0, 1 })
            Assert.False(v.Mount.Buffers.Find(InodeAllocator.AgiOffset(sb, agno), sb.SectorSize)!.IsLocked);
        v.Unmount();
        AllocatorVolume.AssertRepairClean(img);
    }

    [Fact]
    public void An_allocation_that_passes_over_an_AG_releases_its_AGF()
    {
        string img = AllocatorImages.Copy("small-6.13", _tmp, fragment: false);
        using var v = new AllocatorVolume(img);
        var sb = v.Sb;
        // The AG with the longest free extent, asked for all of it: its in-core counters say the AG may serve it (so
        // its AGF is locked and read), its AGF then refuses (the rmapbt and refcountbt reservations keep part of it).
        uint ag = Enumerable.Range(0, (int)sb.AgCount).Select(a => (uint)a).MaxBy(a => v.Allocator.AgInfo(a).Longest);
        uint longest = v.Allocator.AgInfo(ag).Longest;
        using (var tx = v.Begin())
        {
            var got = v.Allocator.TryAllocate(tx, new XfsWin.Allocation.AllocationRequest
            {
                Target = (ulong)ag << sb.AgBlkLog,
                MinLength = longest,
                MaxLength = longest,
                Mode = XfsWin.Allocation.AllocationMode.BySize,
                Scope = XfsWin.Allocation.AllocationScope.ThisAg,
                Owner = XfsWin.Allocation.RmapOwner.Inodes,
            });
            Assert.True(got is null, $"AG {ag} gave {got} for all of its longest free extent ({longest} blocks)");
            var agf = v.Mount.Buffers.Find(sb.AgBlockToByte(ag, 0) + sb.SectorSize, sb.SectorSize);
            Assert.NotNull(agf);
            Assert.False(agf.IsLocked, $"the AGF of AG {ag}, which gave nothing, is still locked");
            Assert.False(tx.IsJoined(agf));
            Assert.Equal(-1, v.Allocator.HighestAgLocked(tx));
            tx.Commit();
        }
        v.Unmount();
        AllocatorVolume.AssertRepairClean(img);
    }

    [Fact]
    public void Inode_allocation_keeps_only_the_AGI_it_takes_an_inode_from()
    {
        string img = AllocatorImages.Copy("small-6.13", _tmp, fragment: false);
        using var v = new AllocatorVolume(img);
        var sb = v.Sb;
        using var data = new FileDataCache(v.Device, (int)sb.BlockSize);
        var allocator = new InodeAllocator(sb, new InodeCache(v.Mount), new VolumeSpace(v.Allocator, sb, data));
        // mkfs's first chunk is in AG 0 with free inodes; AG 1 has none. A parent in AG 1 with no room for chunks
        // sends the allocation past AG 1 to a free inode of AG 0.
        ulong parentInAg1 = (1UL << sb.AgInoLog) | 128;
        using (var tx = v.Begin())
        {
            var (ino, newInodes) = allocator.Allocate(tx, parentInAg1, directory: false, lowSpace: false, agHasSpaceForChunk: _ => false);
            Assert.Equal(0u, sb.InoToAgno(ino));
            Assert.Equal(0, newInodes);
            var agi0 = v.Mount.Buffers.Find(InodeAllocator.AgiOffset(sb, 0), sb.SectorSize)!;
            var agi1 = v.Mount.Buffers.Find(InodeAllocator.AgiOffset(sb, 1), sb.SectorSize);
            Assert.True(agi0.IsLocked && tx.IsJoined(agi0));
            Assert.NotNull(agi1);
            Assert.False(agi1.IsLocked, "the AGI of AG 1, which gave nothing, is still locked");
            Assert.False(tx.IsJoined(agi1));
            // The inode slot is left free on disk (the caller would log the new inode): nothing of this is committed.
            tx.Cancel();
        }
        v.Unmount();
        AllocatorVolume.AssertRepairClean(img);
    }
}

/// <summary>
/// A commit hands its items to the CIL before it publishes and unlocks its buffers (the kernel's order), so a change
/// that locks the buffer next cannot reach the CIL first. Seen through the log's release of a relogged image: the
/// buffer is still locked by the relogging change then, and the image it lets go becomes a spare once that change
/// publishes.
/// </summary>
public sealed class CommitOrderTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-commit-order.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Items_reach_the_CIL_while_their_buffers_are_locked_and_the_image_let_go_becomes_a_spare()
    {
        string img = AllocatorImages.Copy("small-6.13", _tmp, fragment: false);
        var released = new List<(bool LockedThen, bool Taken)>();
        AllocatorVolume? volume = null;
        using var v = volume = new AllocatorVolume(img, new MountedLogOptions
        {
            ImageReleased = (daddr, image) =>
            {
                var buffer = volume!.Mount.Buffers.Find(daddr << LogArea.BBShift, image.Length)!;
                released.Add((buffer.IsLocked, buffer.OfferSpare(image)));
            },
        });
        var sb = v.Sb;
        MetadataBuffer? agi = null;
        byte[]? firstImage = null;
        for (uint round = 0; round < 3; round++)
        {
            using var tx = v.Begin();
            agi = InodeAllocator.JoinAgi(tx, sb, 1);
            // agi_newino is not checked against anything while the AG has no inodes; the last round restores it.
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(agi.Contents.AsSpan(AgiView.OffNewino), round == 2 ? 0xFFFFFFFF : 64 * (round + 1));
            tx.LogRange(agi, AgiView.OffNewino, AgiView.OffNewino + 3);
            if (round == 0) firstImage = agi.Contents;
            tx.Commit();
            Assert.False(agi.IsLocked);
            Assert.Equal(round, (uint)released.Count);
        }
        // Rounds 1 and 2 relogged the buffer in the CIL: each let the previous image go while the buffer was still
        // locked (and still published those bytes); the buffer took it, to make a later copy in.
        Assert.Equal([(true, true), (true, true)], released);
        // Round 2 made its copy in the image round 1 let go: round 0's array, published again.
        Assert.Equal(1, agi!.SparesUsed);
        Assert.Same(firstImage, agi.Published!.Data);
        v.Log.Force();
        v.Log.Unmount();
        v.Dispose();
        AllocatorVolume.AssertRepairClean(img);
    }

    [Fact]
    public void A_committing_buffer_carries_its_changes_write_verifier_before_its_items_reach_the_log()
    {
        string img = AllocatorImages.Copy("small-6.13", _tmp, fragment: false);
        MetadataBuffer? agi = null;
        var seen = new List<(bool Locked, IBufferWriteVerifier? Verifier)>();
        // Every commit takes a checkpoint: the hook runs inside the commit, once its items are in the CIL.
        using var v = new AllocatorVolume(img, new MountedLogOptions
        {
            CheckpointThresholdBytes = 1,
            BeforeCheckpoint = () =>
            {
                if (agi is not null) seen.Add((agi.IsLocked, agi.WriteVerifierForLog));
                return null;
            },
        });
        var sb = v.Sb;
        var verifiers = new List<IBufferWriteVerifier>();
        for (uint round = 0; round < 2; round++)
        {
            using var tx = v.Begin();
            var read = new AgiBufferVerifier(sb, 1);
            verifiers.Add(read.ForWrite());
            agi = tx.Read(InodeAllocator.AgiOffset(sb, 1), sb.SectorSize, 1, read, verifiers[^1], BufType.Agi);
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(agi.Contents.AsSpan(AgiView.OffNewino), round == 1 ? 0xFFFFFFFF : 64);
            tx.LogRange(agi, AgiView.OffNewino, AgiView.OffNewino + 3);
            tx.Commit();
        }
        // Each round's checkpoint saw the buffer still locked and already carrying that round's write verifier.
        Assert.Equal([(true, verifiers[0]), (true, verifiers[1])], seen);
        v.Log.Force();
        v.Log.Unmount();
        v.Dispose();
        AllocatorVolume.AssertRepairClean(img);
    }
}

using System.Buffers.Binary;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Allocation;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Allocation;

/// <summary>
/// The allocator judged by the kernel. On volumes mkfs.xfs made and the kernel fragmented, seeded random sequences
/// of allocations (near a target, by size, exact, aligned, across AGs) and frees (whole extents and parts of them,
/// which split reverse mappings) run in transactions on a <see cref="MountedLog"/>; every extent is freed again, in
/// another order and other transactions, so every tree ends rewritten. Then the superblock counters are logged, the
/// log unmounted, and xfs_repair -n (6.1 and 6.13) must find nothing, xfs_db must count the free space the allocator
/// counts, and the kernel must mount the volume and read the files back.
/// </summary>
public sealed class AllocatorKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-alloc.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>An extent the test holds: where, and the owner it was mapped to.</summary>
    internal sealed record Held(ulong StartBlock, uint Length, RmapOwner Owner);

    /// <summary>
    /// Runs <paramref name="steps"/> random operations, a few per transaction; returns the extents still held.
    /// Owners are made-up inodes (data and bmbt blocks) and OWN_INODES: nothing on disk refers to them, so
    /// everything must be freed before repair looks.
    /// </summary>
    internal static List<Held> RandomSequence(AllocatorVolume v, Random rng, int steps, List<Held>? held = null)
    {
        held ??= new();
        var sb = v.Sb;
        ulong nextOffset = 0;
        int done = 0;
        while (done < steps)
        {
            using var tx = v.Begin();
            int ops = rng.Next(1, 6);
            for (int k = 0; k < ops && done < steps; k++, done++)
            {
                // AGFs are locked in ascending order: a transaction works at or above the highest AG it holds.
                int highest = v.Allocator.HighestAgLocked(tx);
                var freeable = held.Select((h, i) => (h, i)).Where(p => (int)(p.h.StartBlock >> sb.AgBlkLog) >= highest).ToList();
                if (freeable.Count > 0 && rng.Next(100) < 40)
                {
                    var (h, i) = freeable[rng.Next(freeable.Count)];
                    held.RemoveAt(i);
                    if (h.Length > 2 && rng.Next(3) == 0)
                    {
                        // A part: front, back or middle (the reverse mapping is trimmed or split).
                        uint skip = (uint)rng.Next(0, (int)h.Length - 1), len = (uint)rng.Next(1, (int)(h.Length - skip));
                        v.Allocator.Free(tx, h.StartBlock + skip, len, h.Owner.Advance(skip));
                        if (skip > 0) held.Add(h with { Length = skip });
                        if (skip + len < h.Length) held.Add(new Held(h.StartBlock + skip + len, h.Length - skip - len, h.Owner.Advance(skip + len)));
                    }
                    else v.Allocator.Free(tx, h.StartBlock, h.Length, h.Owner);
                    continue;
                }
                uint ag = (uint)rng.Next(Math.Max(0, highest), (int)sb.AgCount);
                uint agbno = (uint)rng.Next(16, (int)sb.AgBlocks - 16);
                int kind = rng.Next(100);
                var mode = kind < 50 ? AllocationMode.Near : kind < 85 ? AllocationMode.BySize : AllocationMode.Exact;
                uint max = (uint)(rng.Next(4) == 0 ? rng.Next(1, 200) : rng.Next(1, 16));
                uint min = (uint)rng.Next(1, (int)max + 1);
                if (rng.Next(2) == 0) min = 1;
                ulong ino = 10_000 + (ulong)rng.Next(6);
                var owner = rng.Next(10) switch
                {
                    0 => RmapOwner.Inodes,
                    1 => RmapOwner.InodeBmbt(ino),
                    _ => RmapOwner.InodeData(ino, nextOffset, attrFork: rng.Next(8) == 0),
                };
                nextOffset += 1000;
                var got = v.Allocator.TryAllocate(tx, new AllocationRequest
                {
                    Target = ((ulong)ag << sb.AgBlkLog) | agbno,
                    MinLength = owner.Flags.HasFlag(RmapFlags.BmbtBlock) ? 1 : min,
                    MaxLength = owner.Flags.HasFlag(RmapFlags.BmbtBlock) ? 1 : max,
                    Alignment = mode != AllocationMode.Exact && rng.Next(5) == 0 ? (uint)(1 << rng.Next(1, 4)) : 1,
                    Mode = mode,
                    Scope = rng.Next(3) == 0 ? AllocationScope.ThisAg : AllocationScope.StartAg,
                    Owner = owner,
                });
                if (got is { } e)
                {
                    Assert.InRange(e.Length, 1u, max);
                    held.Add(new Held(e.StartBlock, e.Length, owner));
                }
            }
            tx.Commit();
            if (rng.Next(10) == 0) v.Log.Force();
        }
        return held;
    }

    /// <summary>Frees every held extent, shuffled, a few per transaction.</summary>
    internal static void FreeAll(AllocatorVolume v, Random rng, List<Held> held)
    {
        var order = held.OrderBy(_ => rng.Next()).ToList();
        held.Clear();
        for (int i = 0; i < order.Count;)
        {
            using var tx = v.Begin();
            int n = Math.Min(rng.Next(1, 8), order.Count - i);
            // In one transaction, in ascending AG order (the AGF lock order).
            foreach (var h in order.GetRange(i, n).OrderBy(h => h.StartBlock >> v.Sb.AgBlkLog))
                v.Allocator.Free(tx, h.StartBlock, h.Length, h.Owner);
            i += n;
            tx.Commit();
        }
    }

    [Theory]
    [InlineData("6.1", 1)]
    [InlineData("6.13", 2)]
    [InlineData("6.13-1k", 3)]
    public void Random_allocations_and_frees_leave_a_volume_the_kernel_and_repair_accept(string kind, int seed)
    {
        string img = AllocatorImages.Copy(kind, _tmp);
        var rng = new Random(seed);
        long freeBefore, freeAfter, extentBlocks;
        int allocated;
        using (var v = new AllocatorVolume(img))
        {
            freeBefore = v.Allocator.FreeBlocks;
            var held = RandomSequence(v, rng, 500, null);
            allocated = held.Count;
            Assert.True(allocated > 50, $"only {allocated} extents held after the random sequence");
            Assert.Equal(freeBefore - held.Sum(h => (long)h.Length), v.Allocator.FreeBlocks);
            v.AssertTreesAgree();
            FreeAll(v, rng, held);
            freeAfter = v.Allocator.FreeBlocks;
            // xfs_db's freesp counts the AGFL's blocks as one-block free extents besides the trees' extents.
            extentBlocks = v.Allocator.FreeExtentBlocks + Enumerable.Range(0, (int)v.Sb.AgCount).Sum(ag => (long)v.Allocator.AgInfo((uint)ag).FreeListCount);
            v.AssertTreesAgree();
            v.Unmount();
            output.WriteLine($"{kind}: {allocated} extents held at the peak; free blocks {freeBefore} -> {freeAfter}; log {v.Log.Statistics}");
        }
        Assert.Equal(freeBefore, freeAfter);
        AllocatorVolume.AssertRepairClean(img);
        var (freesp, fdblocks) = AllocatorVolume.XfsDbCounts(img);
        Assert.Equal(extentBlocks, freesp);
        Assert.Equal(freeAfter, fdblocks);
        AllocatorVolume.AssertKernelReadsFiles(img);
        AllocatorVolume.AssertRepairClean(img);
    }

    [Fact]
    public void A_crash_after_a_log_force_is_replayed_by_the_kernel()
    {
        string img = AllocatorImages.Copy("6.13", _tmp);
        string crashed = Path.Combine(_tmp, "crashed.img");
        var rng = new Random(7);
        using (var v = new AllocatorVolume(img))
        {
            var held = RandomSequence(v, rng, 200, null);
            FreeAll(v, rng, held);
            v.Log.Force();
            // The crash: the log is durable, nothing was written back and no unmount record exists.
            Shell.RunChecked("cp", "--sparse=always", img, crashed);
        }
        var dirty = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", crashed);
        Assert.NotEqual(0, dirty.ExitCode);
        AllocatorVolume.AssertKernelReadsFiles(crashed);
        AllocatorVolume.AssertRepairClean(crashed);
    }

    [Theory]
    [InlineData("small-6.1")]
    [InlineData("small-6.13")]
    public void Filling_the_volume_ends_in_a_clean_no_space_error_and_a_consistent_volume(string kind)
    {
        string img = AllocatorImages.Copy(kind, _tmp, fragment: false);
        using (var v = new AllocatorVolume(img))
        {
            var held = new List<Held>();
            var sb = v.Sb;
            // One AG first: ThisAg allocations until it refuses, the other AG untouched.
            XfsException? full = null;
            for (int i = 0; full is null; i++)
            {
                using var tx = v.Begin();
                try
                {
                    var e = v.Allocator.Allocate(tx, new AllocationRequest
                    {
                        Target = 1UL << sb.AgBlkLog, MaxLength = 4096, Mode = AllocationMode.BySize, Scope = AllocationScope.ThisAg,
                        Owner = RmapOwner.InodeData(5000, (ulong)i * 4096),
                    });
                    held.Add(new Held(e.StartBlock, e.Length, RmapOwner.InodeData(5000, (ulong)i * 4096)));
                    tx.Commit();
                }
                catch (XfsException x)
                {
                    full = x;
                    tx.Commit(); // what the failed attempt left (AGFL fixes) is consistent
                }
            }
            Assert.Equal(XfsError.NoSpace, full.Error);
            Assert.Contains("no space left", full.Message);
            var ag1 = v.Allocator.AgInfo(1);
            Assert.True(ag1.FreeBlocks <= ag1.ReservedBlocks + ag1.FreeListCount + 8,
                $"AG 1 refused with {ag1.FreeBlocks} free blocks, {ag1.ReservedBlocks} reserved");
            Assert.True(v.Allocator.AgInfo(0).FreeBlocks > 1000, "AG 0 was used by a ThisAg allocation in AG 1");
            // Then the whole volume, one-block and large extents mixed, until nothing is left.
            for (int i = 0; ; i++)
            {
                using var tx = v.Begin();
                var owner = RmapOwner.InodeData(6000 + (ulong)(i % 3), (ulong)i * 8192);
                var e = v.Allocator.TryAllocate(tx, new AllocationRequest
                {
                    Target = v.Allocator.RotorTarget, MaxLength = (uint)(i % 2 == 0 ? 1 : 2048), Mode = AllocationMode.Near, Owner = owner,
                });
                tx.Commit();
                if (e is null) break;
                held.Add(new Held(e.Value.StartBlock, e.Value.Length, owner));
            }
            Assert.True(v.Allocator.AvailableBlocks <= 16 * sb.AgCount, $"{v.Allocator.AvailableBlocks} blocks still available after the volume refused");
            using (var tx = v.Begin())
            {
                var refusal = Assert.Throws<XfsException>(() => v.Allocator.Allocate(tx,
                    new AllocationRequest { Target = 0, MaxLength = 1, Owner = RmapOwner.InodeData(7000, 0) }));
                Assert.Equal(XfsError.NoSpace, refusal.Error);
                Assert.Equal(28, refusal.Errno);
                tx.Cancel();
            }
            v.AssertTreesAgree();
            FreeAll(v, new Random(3), held);
            v.AssertTreesAgree();
            v.Unmount();
        }
        AllocatorVolume.AssertRepairClean(img);
        AllocatorVolume.AssertKernelReadsFiles(img, fragmented: false);
    }

    [Theory]
    [InlineData("6.1", 11)]
    [InlineData("6.13", 12)]
    public void Allocated_extents_become_files_the_kernel_reads(string kind, int seed)
    {
        string img = AllocatorImages.Copy(kind, _tmp);
        var names = Enumerable.Range(0, 4).Select(i => $"new{i}").ToArray();
        var inos = new ulong[names.Length];
        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            for (int i = 0; i < names.Length; i++)
            {
                string f = Path.Combine(mount.MountPoint, names[i]);
                File.WriteAllBytes(f, []);
                inos[i] = ulong.Parse(Shell.RunChecked("stat", "-c", "%i", f).StandardOutput.Trim());
            }
        }
        var rng = new Random(seed);
        var expected = new Dictionary<string, byte[]>();
        using (var v = new AllocatorVolume(img))
        {
            var sb = v.Sb;
            int bs = (int)sb.BlockSize;
            // Other transactions' allocations and frees in between, so the files' extents land among busy and reused space.
            var noise = RandomSequence(v, rng, 60);
            for (int i = 0; i < names.Length; i++)
            {
                ulong ino = inos[i];
                using var tx = v.Begin();
                var extents = new List<BmbtRecord>();
                ulong fileBlock = 0;
                ulong target = ((ulong)sb.InoToAgno(ino) << sb.AgBlkLog) | (sb.InoToAgino(ino) >> sb.InoPBlog);
                for (int k = 0, count = rng.Next(1, 8); k < count; k++)
                {
                    var e = v.Allocator.Allocate(tx, new AllocationRequest
                    {
                        Target = target, MinLength = 1, MaxLength = (uint)rng.Next(1, 40),
                        Mode = k % 2 == 0 ? AllocationMode.Near : AllocationMode.BySize,
                        Scope = AllocationScope.FirstAg, Owner = RmapOwner.InodeData(ino, fileBlock),
                    });
                    var data = new byte[e.Length * bs];
                    for (int b = 0; b < data.Length; b++) data[b] = (byte)(ino * 31 + fileBlock + (ulong)(b / bs) * 7 + (ulong)b);
                    // File data goes in place before the metadata that points at it commits.
                    v.Device.Write(sb.FsbToByte(e.StartBlock), data);
                    extents.Add(new BmbtRecord(fileBlock, e.StartBlock, e.Length, false));
                    fileBlock += e.Length + (ulong)rng.Next(0, 3); // holes between some extents
                    target = e.StartBlock + e.Length;
                }
                var cluster = InodeClusterLocation.Of(sb, ino);
                var inode = new byte[sb.InodeSize];
                v.Device.Read(cluster.InodeByte, inode);
                Assert.Equal(0, BinaryPrimitives.ReadInt64BigEndian(inode.AsSpan(DinodeView.OffSize)));
                inode[DinodeView.OffFormat] = (byte)ForkFormat.Extents;
                bool nrext64 = (BinaryPrimitives.ReadUInt64BigEndian(inode.AsSpan(DinodeView.OffFlags2)) & (1UL << 4)) != 0;
                if (nrext64) BinaryPrimitives.WriteUInt64BigEndian(inode.AsSpan(DinodeView.OffBigNextents), (ulong)extents.Count);
                else BinaryPrimitives.WriteUInt32BigEndian(inode.AsSpan(DinodeView.OffNextents), (uint)extents.Count);
                BinaryPrimitives.WriteUInt64BigEndian(inode.AsSpan(DinodeView.OffNblocks), (ulong)extents.Sum(x => (long)x.BlockCount));
                long size = (long)extents[^1].FileEnd * bs;
                BinaryPrimitives.WriteInt64BigEndian(inode.AsSpan(DinodeView.OffSize), size);
                for (int k = 0; k < extents.Count; k++) extents[k].Encode(inode.AsSpan(DinodeView.V3CoreSize + k * BmbtRecord.Size));
                tx.Log(InodeLogItem.Create(ino, cluster, inode, InodeLogParts.DataFork));
                tx.Commit();

                var content = new byte[size];
                foreach (var x in extents)
                {
                    var disk = new byte[x.BlockCount * bs];
                    v.Device.Read(sb.FsbToByte(x.StartBlock), disk);
                    disk.CopyTo(content, (long)x.FileOffset * bs);
                }
                expected[names[i]] = content;
            }
            FreeAll(v, rng, noise);
            v.Unmount();
        }
        AllocatorVolume.AssertRepairClean(img);
        using (var mount = LoopMount.Mount(img, readOnly: true))
            foreach (var (name, content) in expected)
                Assert.True(content.AsSpan().SequenceEqual(File.ReadAllBytes(Path.Combine(mount.MountPoint, name))), $"{name} differs from what was written into its extents");
        AllocatorVolume.AssertKernelReadsFiles(img);
        AllocatorVolume.AssertRepairClean(img);
    }
}

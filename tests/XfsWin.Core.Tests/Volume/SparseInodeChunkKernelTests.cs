using System.Text;
using System.Text.RegularExpressions;
using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Sparse inode chunks (mkfs.xfs -i sparse=1), made where free space holds no aligned run of a whole chunk: the volume
/// is filled, then holes of half a chunk (4 blocks, aligned as a chunk is) are punched into the filling file, so a new
/// chunk can only be the half that fits. Its inobt record must mark the missing half as holes that ir_free counts as
/// free (as the kernel keeps them); when the other half is freed and allocated later, that allocation joins the same
/// record (holes gone, counts added), as the kernel's xfs_inobt_insert_sprec merges. Judged by xfs_repair -n and by
/// the kernel, which mounts the result and removes every file (freeing the chunks), and by the engine removing them.
/// </summary>
public sealed partial class SparseInodeChunkKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-sparse.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private const int ChunkBlocks = 8, HalfChunk = 4, InodesPerHalf = 32, Pieces = 3;

    /// <summary>The inobt records of each AG (startino, holemask, count, freecount, free), as xfs_db prints them.</summary>
    private static List<(uint Ag, uint Start, ushort Holes, int Count, int FreeCount, ulong Free)> Records(string image, uint agcount)
    {
        var records = new List<(uint, uint, ushort, int, int, ulong)>();
        for (uint ag = 0; ag < agcount; ag++)
        {
            var r = Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), "-r", "-c", $"agi {ag}", "-c", "p level", "-c", "addr root", "-c", "p recs", image);
            Assert.Contains("level = 1", r.StandardOutput, StringComparison.Ordinal);
            foreach (Match m in RecordLine().Matches(r.StandardOutput))
                records.Add((ag, uint.Parse(m.Groups[1].Value), Convert.ToUInt16(m.Groups[2].Value, 16), int.Parse(m.Groups[3].Value),
                    int.Parse(m.Groups[4].Value), Convert.ToUInt64(m.Groups[5].Value, 16)));
        }
        return records;
    }

    [GeneratedRegex(@"\d+:\[(\d+),(0x[0-9a-f]+|0),(\d+),(\d+),(0x[0-9a-f]+|0)\]")]
    private static partial Regex RecordLine();


    private static ulong Expand(ushort holes)
    {
        ulong mask = 0;
        for (int bit = 0; bit < 16; bit++)
            if ((holes & (1 << bit)) != 0) mask |= 0xFUL << (bit * 4);
        return mask;
    }


    [Fact]
    public void Sparse_chunks_mark_their_holes_free_and_a_later_half_joins_its_record()
    {
        string image = Path.Combine(_tmp, "v.img");
        NearlyFullVolumes.Make(image);
        var options = new VolumeOpenOptions { Writable = true };
        byte[] N(string s) => Encoding.ASCII.GetBytes(s);

        // Directories, each to hold at most ten short names (short-form: no directory block to allocate later); then
        // every free inode of the chunks that exist is used, from a directory in each AG.
        // The files go into directories of AG 0, where the holes are: a new chunk is looked for in the parent's AG first.
        var dirs = new List<ulong>();
        var exhaust = new Dictionary<uint, ulong>();
        int agInoLog;
        using (var v = XfsVolume.Open(image, options))
        {
            agInoLog = v.Mount.Superblock.AgInoLog;
            Assert.Equal(512, v.Info.InodeSize);
            Assert.Equal(4096, v.Info.BlockSize);
            for (int i = 0; i < 40; i++)
            {
                ulong d = v.MakeDirectory(v.RootInode, N($"d{i}"), 0x1ED, 0, 0).Inode;
                if (!exhaust.TryAdd((uint)(d >> agInoLog), d) && d >> agInoLog == 0) dirs.Add(d);
            }
            Assert.Equal(2, exhaust.Count);
            Assert.True(dirs.Count * 10 >= (Pieces + 1) * InodesPerHalf, $"{dirs.Count} directories in AG 0");
        }
        var before = Records(image, 2);
        Assert.All(before, r => Assert.Equal(0, r.Holes));
        using (var v = XfsVolume.Open(image, options))
        {
            foreach (var (ag, dir) in exhaust)
            {
                int free = before.Where(r => r.Ag == ag).Sum(r => r.FreeCount);
                for (int i = 0; i < free; i++) Assert.Equal(ag, (uint)(v.CreateNode(dir, N($"x{i}"), 0x81A4, 0, 0).Inode >> agInoLog));
            }
        }
        var full = Records(image, 2);
        Assert.All(full, r => Assert.Equal(0, r.FreeCount));

        // Every block filled, then holes punched: one per window, where a half chunk fits, and runs of three blocks
        // elsewhere, where none does (what the free lists take when they refill).
        var windows = new List<(ulong Block, ulong FileBlock)>();
        ulong fill;
        int created = 0;
        var names = new List<(ulong Dir, string Name)>();
        void Create(XfsVolume v, int count)
        {
            for (int i = 0; i < count; i++, created++)
            {
                var (dir, name) = (dirs[created / 10], $"f{created % 10}");
                v.CreateNode(dir, N(name), 0x81A4, 0, 0);
                names.Add((dir, name));
            }
        }
        using (var v = XfsVolume.Open(image, options))
        {
            var sb = v.Mount.Superblock;
            fill = v.CreateNode(v.RootInode, "fill"u8, 0x81A4, 0, 0).Inode;
            NearlyFullVolumes.FillWith(v, fill);
            var map = new XfsWin.Extents.ExtentMap(v.Mount, new XfsWin.Inodes.InodeCache(v.Mount).Get(fill), XfsWin.Extents.ForkKind.Data);
            var singles = new List<ulong>();
            // Windows: a chunk-aligned block b with the chunk before it and two after, [b - 8, b + 16), inside one extent
            // of the file.
            map.Walk(0, e =>
            {
                ulong agStart = e.StartBlock & ~((1UL << sb.AgBlkLog) - 1);
                if (agStart != 0) return true;
                for (ulong b = e.StartBlock + ChunkBlocks; b + 2 * ChunkBlocks <= e.StartBlock + e.BlockCount; b++)
                {
                    if ((b - agStart) % ChunkBlocks != 0) continue;
                    if (windows.Count < Pieces) windows.Add((b, e.FileOffset + (b - e.StartBlock)));
                    else if (singles.Count < 40) singles.Add(e.FileOffset + (b - e.StartBlock) + 5);
                    b += 3 * ChunkBlocks - 1;
                }
                return true;
            });
            Assert.Equal(Pieces, windows.Count);
            Assert.Equal(40, singles.Count);
            // Blocks b + 1 to b + 11 of each window: eleven free blocks (the allocator asks for a longest free extent of
            // the length plus its alignment's slop and what the free list may need, as the kernel's does) that hold
            // no chunk-aligned run of a whole chunk, only half-chunk ones (b + 4 and b + 8).
            foreach (var (_, fileBlock) in windows) v.Allocate(fill, (long)(fileBlock + 1) * 4096, 11 * 4096, FallocateMode.PunchHole);
            foreach (var fileBlock in singles) v.Allocate(fill, (long)fileBlock * 4096, 3 * 4096, FallocateMode.PunchHole);
            // Each hole takes one new chunk of 32 inodes: the files use them all.
            Create(v, Pieces * InodesPerHalf);
        }
        var made = Records(image, 2);
        var sparse = made.Where(r => r.Holes != 0).ToList();
        output.WriteLine("sparse records: " + string.Join(", ", sparse.Select(r => $"AG {r.Ag} {r.Start} holes 0x{r.Holes:x4} count {r.Count} free 0x{r.Free:x16}")));
        // The files first use what is left of a whole chunk allocated before (the volume keeps some blocks out of the
        // filling file's reach), then half chunks: at least two, the lowest in the first window.
        Assert.True(sparse.Count >= 2, $"{sparse.Count} sparse records");
        foreach (var r in sparse)
        {
            // Half a chunk each: the first half a hole (the window's block b stayed the file's), or the second.
            Assert.True(r.Holes is 0x00FF or 0xFF00, $"record {r.Start}: holes 0x{r.Holes:x4}");
            Assert.Equal(InodesPerHalf, r.Count);
            Assert.True((r.Free & Expand(r.Holes)) == Expand(r.Holes), $"record {r.Start}: holes 0x{r.Holes:x4} not free in 0x{r.Free:x16}");
            Assert.Equal(System.Numerics.BitOperations.PopCount(r.Free & ~Expand(r.Holes)), r.FreeCount);
        }
        NearlyFullVolumes.AssertRepairClean(image, "after the sparse chunks");

        // The first half of the lowest window's chunk freed, with the three blocks before it (seven free blocks again,
        // whose only half-chunk-aligned run is that half): its allocation joins the chunk's record.
        var first = windows.MinBy(w => w.Block);
        (uint Ag, uint Start, ushort Holes, int Count, int FreeCount, ulong Free) joined;
        using (var v = XfsVolume.Open(image, options))
        {
            var sb = v.Mount.Superblock;
            uint ag = (uint)(first.Block >> sb.AgBlkLog);
            uint start = (uint)((first.Block & ((1UL << sb.AgBlkLog) - 1)) << sb.InoPBlog);
            joined = sparse.Single(r => r.Ag == ag && r.Start == start);
            Assert.Equal((ushort)0x00FF, joined.Holes);
            v.Allocate(fill, (long)(first.FileBlock - 3) * 4096, 4 * 4096, FallocateMode.PunchHole);
            // Freed blocks are not reused before their free is on disk (busy extents): durable now.
            v.Sync();
            // The free inodes left in AG 0 first, then a half chunk more.
            Create(v, made.Where(r => r.Ag == 0).Sum(r => r.FreeCount) + InodesPerHalf);
        }
        var after = Records(image, 2);
        var merged = after.Single(r => r.Ag == joined.Ag && r.Start == joined.Start);
        Assert.Equal((ushort)0, merged.Holes);
        Assert.Equal(64, merged.Count);
        Assert.Equal(0, merged.FreeCount);
        Assert.Equal(sparse.Count - 1, after.Count(r => r.Holes != 0));
        NearlyFullVolumes.AssertRepairClean(image, "after the joined half");

        // The kernel mounts it, finds every file, and removes them (freeing the chunks); so does the engine, on a copy.
        string copy = Path.Combine(_tmp, "engine.img");
        Shell.RunChecked("cp", "--sparse=always", image, copy);
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            var listed = Directory.GetDirectories(mount.MountPoint, "d*").SelectMany(d => Directory.GetFiles(d, "f*")).Count();
            Assert.Equal(names.Count, listed);
            foreach (var d in Directory.GetDirectories(mount.MountPoint, "d*"))
                foreach (var f in Directory.GetFiles(d, "f*")) File.Delete(f);
        }
        NearlyFullVolumes.AssertRepairClean(image, "after the kernel removed the files");
        using (var v = XfsVolume.Open(copy, options))
            foreach (var (dir, name) in names) v.Unlink(dir, N(name));
        NearlyFullVolumes.AssertRepairClean(copy, "after the engine removed the files");
        // Both freed every chunk whose inodes all went: the sparse ones and the joined one.
        foreach (var (what, img) in new[] { ("the kernel", image), ("the engine", copy) })
        {
            var left = Records(img, 2);
            Assert.False(left.Any(r => r.Holes != 0 || (r.Ag == joined.Ag && r.Start == joined.Start)),
                $"{what} left records: " + string.Join(", ", left.Select(r => $"AG {r.Ag} {r.Start} holes 0x{r.Holes:x4}")));
        }
    }
}

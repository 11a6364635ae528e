using System.Buffers.Binary;
using Xunit;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Btree;

/// <summary>
/// The kernel's verdict on trees the cursor wrote. The kernel fragments one AG's free space (a preallocated file
/// with every other block punched out: thousands of one-block free extents, so both free-space trees have two
/// levels); the cursor then deletes every record from the bnobt and the cntbt (joins, borrows and root collapses
/// down to one empty leaf, freed blocks onto the AGFL) and inserts them again in shuffled order (splits and new
/// roots, blocks from the AGFL). Before each insert the AGFL is refilled, as xfs_alloc_fix_freelist does, with
/// enough blocks for a split at every level of both trees, taken from free extents not yet reinserted. xfs_repair -n
/// 6.1 and 6.13 must find nothing, xfs_db must count the free space the cursor wrote, and the kernel must mount the
/// volume, show the same files and allocate from the rewritten trees.
/// </summary>
public sealed class FreeSpaceRebuildKernelTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-btree.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private const int Holes = 6000;

    private string MakeFragmentedVolume()
    {
        string img = Path.Combine(_tmp, "frag.img");
        Shell.RunChecked("truncate", "-s", "320M", img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-q", "-f", "-b", "size=4096", "-d", "agcount=2", img);
        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            string file = Path.Combine(mount.MountPoint, "frag");
            var args = new List<string> { "-f", "-c", $"falloc 0 {2 * Holes * 4096}" };
            for (int i = 0; i < Holes; i++) args.AddRange(["-c", $"fpunch {(2 * i + 1) * 4096} 4096"]);
            args.Add(file);
            Shell.RunChecked(OracleImages.Tool("xfs_io"), args);
            Shell.RunChecked("sync");
        }
        return img;
    }

    private static List<(uint Start, uint Count)> Records<TOps>(IBtreeBlockStore store) where TOps : struct, IBtreeOps
    {
        var cursor = new BtreeCursor<TOps>(store);
        var raw = new List<byte[]>();
        var check = cursor.CheckStructure(raw);
        Assert.True(check.Ok, $"{default(TOps).Name}: {check.Problem} at byte {check.ProblemByteOffset}");
        return raw.Select(r => (BinaryPrimitives.ReadUInt32BigEndian(r), BinaryPrimitives.ReadUInt32BigEndian(r.AsSpan(4)))).ToList();
    }

    private static void AssertRepairClean(string img, string version)
    {
        var r = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", img);
        Assert.True(r.ExitCode == 0, $"xfs_repair -n {version} exit {r.ExitCode}:\n{r.StandardOutput}\n{r.StandardError}");
    }

    private static string KernelView(string img)
    {
        using var mount = LoopMount.Mount(img, readOnly: true);
        // Names, sizes, blocks and types of every file, and where the punched file's extents lie.
        string files = string.Join("\n", Directory.EnumerateFileSystemEntries(mount.MountPoint).Order(StringComparer.Ordinal)
            .Select(f => Path.GetFileName(f) + " " + Shell.RunChecked("stat", "-c", "%s %b %F", f).StandardOutput.Trim()));
        var bmap = Shell.RunChecked(OracleImages.Tool("xfs_io"), "-r", "-c", "bmap", Path.Combine(mount.MountPoint, "frag")).StandardOutput;
        return files + "\n" + bmap[(bmap.IndexOf('\n') + 1)..];
    }

    [Fact]
    public void Free_space_trees_emptied_and_refilled_in_shuffled_order_pass_the_kernel_and_xfs_repair()
    {
        string img = MakeFragmentedVolume();
        AssertRepairClean(img, "6.1");
        string filesBefore = KernelView(img);

        uint agno;
        List<(uint Start, uint Count)> original;
        string freespBefore;
        int refilledTotal, agflAfter;
        uint btreeBefore, btreeAfter;
        using (var device = FileBlockDevice.Open(img, writable: true))
        {
            var sb = ReadSuperblock(device);
            // The AG holding the punched file: the one with the most free extents.
            agno = Enumerable.Range(0, (int)sb.AgCount).Select(a => (uint)a)
                .MaxBy(a => Records<BnobtOps>(new ImageAgFreeSpace(device, sb, a).ByBlock).Count);
            freespBefore = XfsDb.Run(img, "6.1", $"freesp -s -a {agno}");
            var ag = new ImageAgFreeSpace(device, sb, agno);
            original = Records<BnobtOps>(ag.ByBlock);
            Assert.True(original.Count >= Holes - 10, $"AG {agno} has {original.Count} free extents, expected about {Holes}");
            Assert.True(ag.AgfField(AgfView.OffBnoLevel) >= 2 && ag.AgfField(AgfView.OffCntLevel) >= 2,
                $"the free-space trees of AG {agno} have {ag.AgfField(AgfView.OffBnoLevel)} and {ag.AgfField(AgfView.OffCntLevel)} levels; the test needs two or more");
            Assert.Equal(original.OrderBy(r => r.Count).ThenBy(r => r.Start), Records<CntbtOps>(ag.ByCount));
            uint freeBefore = ag.AgfField(AgfView.OffFreeblks), longestBefore = ag.AgfField(AgfView.OffLongest);
            uint totalBefore = ag.AgfField(AgfView.OffFlcount) + ag.AgfField(AgfView.OffBtreeblks);
            btreeBefore = ag.AgfField(AgfView.OffBtreeblks);

            var bno = new BtreeCursor<BnobtOps>(ag.ByBlock);
            var cnt = new BtreeCursor<CntbtOps>(ag.ByCount);
            while (bno.MoveToFirst()) bno.Delete();
            while (cnt.MoveToFirst()) cnt.Delete();
            Assert.Equal(1, bno.Levels);
            Assert.Equal(1, cnt.Levels);
            Assert.True(ag.Returned > 0, "emptying the trees freed no block");

            var pending = new List<(uint Start, uint Count)>(original);
            new Random(20261125).Shuffle(System.Runtime.InteropServices.CollectionsMarshal.AsSpan(pending));
            var rec = new byte[8];
            var expected = new List<(uint Start, uint Count)>();
            int refilled = 0;
            while (pending.Count > 0)
            {
                while (ag.AgflCount < bno.Levels + cnt.Levels + 2 && pending.Count > 1)
                {
                    // One block off the last pending extent goes onto the AGFL.
                    var (s0, c0) = pending[^1];
                    ag.RefillAgfl(s0);
                    refilled++;
                    if (c0 == 1) pending.RemoveAt(pending.Count - 1);
                    else pending[^1] = (s0 + 1, c0 - 1);
                }
                var (start, count) = pending[^1];
                pending.RemoveAt(pending.Count - 1);
                expected.Add((start, count));
                BinaryPrimitives.WriteUInt32BigEndian(rec, start);
                BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(4), count);
                Assert.True(bno.Insert(rec));
                Assert.True(cnt.Insert(rec));
            }
            Assert.True(bno.Levels >= 2 && cnt.Levels >= 2);
            Assert.True(ag.Taken > 0);
            expected.Sort();
            ag.SetAgfField(AgfView.OffFreeblks, (uint)expected.Sum(r => (long)r.Count));
            ag.SetAgfField(AgfView.OffLongest, expected.Max(r => r.Count));
            Assert.Equal(freeBefore - (uint)refilled, ag.AgfField(AgfView.OffFreeblks));
            Assert.Equal(longestBefore, ag.AgfField(AgfView.OffLongest));
            // Blocks only moved between free space, the AGFL and the trees.
            Assert.Equal(totalBefore + (uint)refilled, ag.AgfField(AgfView.OffFlcount) + ag.AgfField(AgfView.OffBtreeblks));
            original = expected;
            refilledTotal = refilled;
            ag.Commit();
        }

        // Read back from the device: the same records, every invariant intact.
        using (var device = FileBlockDevice.Open(img, writable: false))
        {
            var ag = new ImageAgFreeSpace(device, ReadSuperblock(device), agno);
            Assert.Equal(original, Records<BnobtOps>(ag.ByBlock));
            Assert.Equal(original.OrderBy(r => r.Count).ThenBy(r => r.Start), Records<CntbtOps>(ag.ByCount));
            agflAfter = ag.AgflCount;
            btreeAfter = ag.AgfField(AgfView.OffBtreeblks);
        }
        AssertRepairClean(img, "6.1");
        AssertRepairClean(img, "6.13");
        string freespAfter = XfsDb.Run(img, "6.1", $"freesp -s -a {agno}");
        // freesp counts the free extents of the trees and each AGFL block as a one-block extent.
        Assert.Equal(original.Count + agflAfter, FreespTotal(freespAfter, "extents"));
        Assert.Equal(original.Sum(r => (long)r.Count) + agflAfter, FreespTotal(freespAfter, "blocks"));
        // Blocks the trees grew by came out of free space (agf_btreeblks counts them).
        Assert.Equal(FreespTotal(freespBefore, "blocks") + btreeBefore, FreespTotal(freespAfter, "blocks") + btreeAfter);
        Assert.Equal(filesBefore, KernelView(img));

        // The kernel allocates from and frees into the rewritten trees, and leaves a clean volume.
        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            Shell.RunChecked(OracleImages.Tool("xfs_io"), "-f", "-c", "pwrite -b 4096 0 2m", "-c", "fsync", Path.Combine(mount.MountPoint, "new"));
            Shell.RunChecked(OracleImages.Tool("xfs_io"), "-c", "fpunch 0 4m", Path.Combine(mount.MountPoint, "frag"));
        }
        AssertRepairClean(img, "6.1");
    }

    /// <summary>"total free extents N" or "total free blocks N" from xfs_db's freesp -s.</summary>
    private static long FreespTotal(string freesp, string what)
    {
        var m = System.Text.RegularExpressions.Regex.Match(freesp, $@"total free {what} (\d+)");
        Assert.True(m.Success, $"no 'total free {what}' in xfs_db freesp output:\n{freesp}");
        return long.Parse(m.Groups[1].Value);
    }

    private static Superblock ReadSuperblock(IBlockDevice device)
    {
        var sector = new byte[4096];
        device.Read(0, sector);
        return Superblock.Decode(sector);
    }
}

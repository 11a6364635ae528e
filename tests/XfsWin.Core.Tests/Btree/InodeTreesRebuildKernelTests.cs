using System.Buffers.Binary;
using Xunit;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Btree;

/// <summary>
/// The kernel's verdict on inode trees the cursor wrote. The kernel creates thousands of files in one directory
/// and removes every other one, so one AG's inobt and finobt both have two levels (1 KiB blocks); the cursor
/// deletes every record from both trees (down to one empty leaf each, blocks back onto the AGFL) and inserts them
/// again in shuffled order (splits, new roots), refilling the AGFL from the free-space trees, through the cursor,
/// whenever it runs low. agi_iblocks, agi_fblocks and the superblock's free block count follow the blocks.
/// xfs_repair -n 6.1 and 6.13 must find nothing; the kernel must show the same files, then create and remove files
/// (its inode allocator walks the rewritten finobt) and leave a volume xfs_repair calls clean.
/// </summary>
public sealed class InodeTreesRebuildKernelTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-btree.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private const int Files = 6000;

    private string MakeVolume()
    {
        string img = Path.Combine(_tmp, "inodes.img");
        Shell.RunChecked("truncate", "-s", "320M", img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-q", "-f", "-b", "size=1024", "-d", "agcount=2", img);
        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            string dir = Path.Combine(mount.MountPoint, "d");
            Shell.RunChecked("bash", "-c", $"set -e; mkdir '{dir}'; cd '{dir}'; for i in $(seq 1 {Files}); do : > f$i; done; " +
                                           $"for i in $(seq 2 2 {Files}); do rm f$i; done; sync");
        }
        return img;
    }

    private static List<byte[]> Records<TOps>(IBtreeBlockStore store) where TOps : struct, IBtreeOps
    {
        var raw = new List<byte[]>();
        var check = new BtreeCursor<TOps>(store).CheckStructure(raw);
        Assert.True(check.Ok, $"{default(TOps).Name}: {check.Problem} at byte {check.ProblemByteOffset}");
        return raw;
    }

    private static void AssertRepairClean(string img, string version)
    {
        var r = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", img);
        Assert.True(r.ExitCode == 0, $"xfs_repair -n {version} exit {r.ExitCode}:\n{r.StandardOutput}\n{r.StandardError}");
    }

    private static string KernelView(string img)
    {
        using var mount = LoopMount.Mount(img, readOnly: true);
        return Shell.RunChecked("bash", "-c", $"cd '{mount.MountPoint}' && find . -printf '%p %i %s %y\\n' | sort").StandardOutput;
    }

    private static string Hex(IEnumerable<byte[]> records) => string.Join("\n", records.Select(Convert.ToHexString));

    [Fact]
    public void Inode_trees_emptied_and_refilled_in_shuffled_order_pass_the_kernel_and_xfs_repair()
    {
        string img = MakeVolume();
        AssertRepairClean(img, "6.1");
        string before = KernelView(img);

        uint agno;
        List<byte[]> inodes, freeInodes;
        using (var device = FileBlockDevice.Open(img, writable: true))
        {
            var sb = ReadSuperblock(device);
            agno = Enumerable.Range(0, (int)sb.AgCount).Select(a => (uint)a)
                .MaxBy(a => Records<InobtOps>(new ImageAgFreeSpace(device, sb, a).Inodes).Count);
            var ag = new ImageAgFreeSpace(device, sb, agno);
            inodes = Records<InobtOps>(ag.Inodes);
            freeInodes = Records<FinobtOps>(ag.FreeInodes);
            Assert.True(ag.AgiField(AgiView.OffLevel) >= 2 && ag.AgiField(AgiView.OffFreeLevel) >= 2,
                $"inobt and finobt of AG {agno} have {ag.AgiField(AgiView.OffLevel)} and {ag.AgiField(AgiView.OffFreeLevel)} levels; the test needs two or more");
            ulong freeBefore = ag.FreeBlocks;
            long treeBlocksBefore = ag.AgiField(AgiView.OffIblocks) + ag.AgiField(AgiView.OffFblocks);

            var ino = new BtreeCursor<InobtOps>(ag.Inodes);
            var fino = new BtreeCursor<FinobtOps>(ag.FreeInodes);
            while (ino.MoveToFirst()) ino.Delete();
            while (fino.MoveToFirst()) fino.Delete();
            Assert.Equal(1, ino.Levels);
            Assert.Equal(1, fino.Levels);
            Assert.Equal(1u, ag.AgiField(AgiView.OffIblocks));
            Assert.Equal(1u, ag.AgiField(AgiView.OffFblocks));

            var random = new Random(20261125);
            var order = inodes.ToArray();
            random.Shuffle(order);
            var freeSet = freeInodes.Select(Convert.ToHexString).ToHashSet();
            foreach (var rec in order)
            {
                if (ag.AgflCount < ino.Levels + fino.Levels + 8) ag.RefillAgflFromFreeSpace(16);
                Assert.True(ino.Insert(rec));
                if (freeSet.Contains(Convert.ToHexString(rec))) Assert.True(fino.Insert(rec));
            }
            Assert.True(ino.Levels >= 2 && fino.Levels >= 2);
            long treeBlocksAfter = ag.AgiField(AgiView.OffIblocks) + ag.AgiField(AgiView.OffFblocks);
            Assert.Equal((long)freeBefore - (treeBlocksAfter - treeBlocksBefore), (long)ag.FreeBlocks);
            ag.Commit();
        }

        using (var device = FileBlockDevice.Open(img, writable: false))
        {
            var ag = new ImageAgFreeSpace(device, ReadSuperblock(device), agno);
            Assert.Equal(Hex(inodes), Hex(Records<InobtOps>(ag.Inodes)));
            Assert.Equal(Hex(freeInodes), Hex(Records<FinobtOps>(ag.FreeInodes)));
            Assert.Equal((int)ag.AgiField(AgiView.OffIblocks), new BtreeCursor<InobtOps>(ag.Inodes).CheckStructure().Blocks);
            Assert.Equal((int)ag.AgiField(AgiView.OffFblocks), new BtreeCursor<FinobtOps>(ag.FreeInodes).CheckStructure().Blocks);
        }
        AssertRepairClean(img, "6.1");
        AssertRepairClean(img, "6.13");
        Assert.Equal(before, KernelView(img));

        using (var mount = LoopMount.Mount(img, readOnly: false))
        {
            string dir = Path.Combine(mount.MountPoint, "d");
            Shell.RunChecked("bash", "-c", $"set -e; cd '{dir}'; for i in $(seq 1 500); do : > n$i; done; for i in $(seq 1 4 999); do rm f$i; done; sync");
        }
        AssertRepairClean(img, "6.1");
    }

    private static Superblock ReadSuperblock(IBlockDevice device)
    {
        var sector = new byte[4096];
        device.Read(0, sector);
        return Superblock.Decode(sector);
    }
}

using System.Text;
using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// A new file's inode chunk on a nearly full volume, when the parent directory's AG (here AG 1) cannot hold one but a
/// lower AG can: the allocator must not lock the parent's AG on the way (its longest free extent holds no aligned run of
/// even half a chunk, which the committed counters tell before locking, as the kernel's xfs_alloc_space_available does
/// on the perag counters), or the lock order (AGFs in ascending order within a transaction) would keep it out of AG 0
/// and the create would fail with ENOSPC where the kernel's succeeds. Judged by the kernel, which makes the same file
/// on the same volume, and by xfs_repair -n and a kernel mount of what the engine made.
/// </summary>
public sealed class InodeChunkLowerAgKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-lowerag.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static uint AgField(string image, uint ag, string field) =>
        (uint)XfsDb.Number(XfsDb.Fields(XfsDb.Run(image, "6.13", $"agf {ag}", $"print {field}"))[field]);

    private static int FreeInodes(string image, uint ag) =>
        (int)XfsDb.Number(XfsDb.Fields(XfsDb.Run(image, "6.13", $"agi {ag}", "print freecount"))["freecount"]);


    [Fact]
    public void A_new_chunk_goes_to_a_lower_AG_when_the_parents_AG_has_no_aligned_room()
    {
        string image = Path.Combine(_tmp, "v.img");
        NearlyFullVolumes.Make(image);
        var options = new VolumeOpenOptions { Writable = true };
        byte[] N(string s) => Encoding.ASCII.GetBytes(s);

        // A directory in each AG to use up the free inodes from, an empty one in AG 1 for the new file, and the file
        // that fills the volume.
        var exhaust = new Dictionary<uint, (ulong Inode, string Name)>();
        ulong parent = 0, fill;
        string parentName = "";
        int agInoLog, agBlkLog;
        using (var v = XfsVolume.Open(image, options))
        {
            agInoLog = v.Mount.Superblock.AgInoLog;
            agBlkLog = v.Mount.Superblock.AgBlkLog;
            Assert.Equal(512, v.Info.InodeSize);
            Assert.Equal(4096, v.Info.BlockSize);
            for (int i = 0; i < 8 && (exhaust.Count < 2 || parent == 0); i++)
            {
                ulong d = v.MakeDirectory(v.RootInode, N($"d{i}"), 0x1ED, 0, 0).Inode;
                uint ag = (uint)(d >> agInoLog);
                if (!exhaust.TryAdd(ag, (d, $"d{i}")) && ag == 1 && parent == 0) (parent, parentName) = (d, $"d{i}");
            }
            Assert.Equal(2, exhaust.Count);
            Assert.NotEqual(0UL, parent);
            fill = v.CreateNode(v.RootInode, "fill"u8, 0x81A4, 0, 0).Inode;
        }
        var freeBefore = exhaust.Keys.ToDictionary(ag => ag, ag => FreeInodes(image, ag));
        using (var v = XfsVolume.Open(image, options))
        {
            foreach (var (ag, (dir, _)) in exhaust)
            {
                int free = freeBefore[ag];
                for (int i = 0; i < free; i++) Assert.Equal(ag, (uint)(v.CreateNode(dir, N($"x{i}"), 0x81A4, 0, 0).Inode >> agInoLog));
            }
        }
        Assert.Equal(0, FreeInodes(image, 0));
        Assert.Equal(0, FreeInodes(image, 1));

        // Every block filled (the engine's allocator keeps eight blocks of each AG back for a file's extent tree); then,
        // from the filling file, 5,000 blocks of AG 0 freed, and places chosen in AG 1: six blocks each, from one past a
        // chunk boundary (no aligned run of four in any: no half chunk fits).
        var ag1Holes = new List<ulong>();
        using (var v = XfsVolume.Open(image, options))
        {
            NearlyFullVolumes.FillWith(v, fill);
            var map = new XfsWin.Extents.ExtentMap(v.Mount, new XfsWin.Inodes.InodeCache(v.Mount).Get(fill), XfsWin.Extents.ForkKind.Data);
            var ag0Ranges = new List<(ulong FileBlock, ulong Blocks)>();
            ulong ag0Blocks = 0;
            ulong agMask = (1UL << agBlkLog) - 1;
            map.Walk(0, e =>
            {
                if (e.StartBlock >> agBlkLog == 0 && ag0Blocks < 5000)
                {
                    ulong take = Math.Min(e.BlockCount, 5000 - ag0Blocks);
                    ag0Ranges.Add((e.FileOffset, take));
                    ag0Blocks += take;
                }
                else if (e.StartBlock >> agBlkLog == 1)
                {
                    for (ulong b = e.StartBlock + 8; b + 16 <= e.StartBlock + e.BlockCount && ag1Holes.Count < 40; b++)
                    {
                        if ((b & agMask) % 8 != 1) continue;
                        ag1Holes.Add(e.FileOffset + (b - e.StartBlock));
                        b += 7;
                    }
                }
                return true;
            });
            Assert.Equal(5000UL, ag0Blocks);
            Assert.Equal(40, ag1Holes.Count);
            foreach (var (fileBlock, blocks) in ag0Ranges) v.Allocate(fill, (long)fileBlock * 4096, (long)blocks * 4096, FallocateMode.PunchHole);
        }
        // The eight blocks the engine kept back in AG 1 the kernel takes, into a file of AG 1 (its blocks go near its
        // inode first, and it keeps less back for a file that small); what it takes beyond them comes from AG 0.
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            var grow = Shell.Run("bash", "-c",
                $"f='{Path.Combine(mount.MountPoint, exhaust[1].Name, "x0")}'; for i in $(seq 0 31); do fallocate -o $((i * 4096)) -l 4096 \"$f\" || exit 1; done");
            Assert.True(grow.ExitCode == 0, grow.StandardError);
        }
        Assert.True(AgField(image, 1, "longest") < 4, $"AG 1's longest free extent before the holes: {AgField(image, 1, "longest")}");
        Assert.Equal(0, FreeInodes(image, 0));
        Assert.Equal(0, FreeInodes(image, 1));
        using (var v = XfsVolume.Open(image, options))
            foreach (var fileBlock in ag1Holes) v.Allocate(fill, (long)fileBlock * 4096, 6 * 4096, FallocateMode.PunchHole);
        // What the test needs, as the volume says it: AG 1's longest free extent holds a half chunk's blocks (so the AG
        // looks worth trying) but not with its alignment (4 + 3); AG 0's holds a whole aligned chunk (8 + 7).
        uint longest1 = AgField(image, 1, "longest"), longest0 = AgField(image, 0, "longest");
        output.WriteLine($"longest free extents: AG 0 {longest0}, AG 1 {longest1}");
        Assert.InRange(longest1, 4u, 6u);
        Assert.True(longest0 >= 15, $"AG 0's longest free extent is {longest0} blocks");
        NearlyFullVolumes.AssertRepairClean(image, "after the holes were punched");

        // The kernel makes a file in the AG 1 directory: its inode comes from a new chunk in AG 0.
        string copy = Path.Combine(_tmp, "engine.img");
        Shell.RunChecked("cp", "--sparse=always", image, copy);
        string dirName = parentName;
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            string path = Path.Combine(mount.MountPoint, dirName, "new");
            File.WriteAllBytes(path, []);
            var ino = ulong.Parse(Shell.RunChecked("stat", "-c", "%i", path).StandardOutput.Trim(), System.Globalization.CultureInfo.InvariantCulture);
            Assert.Equal(0u, (uint)(ino >> agInoLog));
        }

        // The engine, on the same volume: the same.
        using (var v = XfsVolume.Open(copy, options))
        {
            ulong ino = v.CreateNode(parent, "new"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal(0u, (uint)(ino >> agInoLog));
        }
        NearlyFullVolumes.AssertRepairClean(copy, "after the engine's create");
        using (var mount = LoopMount.Mount(copy, readOnly: true))
            Assert.True(File.Exists(Path.Combine(mount.MountPoint, dirName, "new")));
    }
}

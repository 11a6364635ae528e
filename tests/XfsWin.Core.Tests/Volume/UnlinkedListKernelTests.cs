using System.Text;
using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Files unlinked while a host holds them sit on the AGI unlinked lists until their last release, as on Linux: a crash
/// while they are held leaves them there, and the kernel's mount (its recovery frees every listed inode) or our own
/// read-write open (in-place recovery does the same) frees them; xfs_repair -n finds nothing either way.
/// </summary>
public sealed class UnlinkedListKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-iunlink.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static byte[] N(string s) => Encoding.UTF8.GetBytes(s);

    private string Make()
    {
        string image = Path.Combine(_tmp, $"v-{Guid.NewGuid():N}.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        return image;
    }

    private void AssertRepairClean(string image)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        if (repair.ExitCode != 0) output.WriteLine(repair.StandardOutput + repair.StandardError);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}");
    }

    /// <summary>The AG inode numbers on AGI 0's unlinked lists, as xfs_db reads them (following di_next_unlinked).</summary>
    private static List<uint> Listed(string image)
    {
        var listed = new List<uint>();
        var agi = XfsDb.Run(image, "6.13", "agi 0", "print unlinked");
        foreach (var part in agi.Split(['[', ']', ' ', '\n', ','], StringSplitOptions.RemoveEmptyEntries))
        {
            var kv = part.Split(':');
            if (kv.Length != 2 || !uint.TryParse(kv[1], out uint head)) continue;
            for (uint agino = head; agino != 0xFFFFFFFF && listed.Count < 1000;)
            {
                listed.Add(agino);
                string next = XfsDb.Fields(XfsDb.Run(image, "6.13", $"inode {agino}", "print next_unlinked"))["next_unlinked"];
                agino = next == "null" ? 0xFFFFFFFF : (uint)XfsDb.Number(next);
            }
        }
        return listed;
    }

    /// <summary>Files in the root whose AG inode numbers share one unlinked bucket (agino % 64), data written.</summary>
    private static List<(string Name, ulong Ino)> SameBucketFiles(XfsVolume v, int count)
    {
        var byBucket = new Dictionary<ulong, List<(string, ulong)>>();
        for (int i = 0; ; i++)
        {
            string name = $"f{i:D4}";
            var ino = v.CreateNode(v.RootInode, N(name), 0x81A4, 0, 0).Inode;
            v.Write(ino, 0, new byte[10000 + i]);
            if (!byBucket.TryGetValue(ino % 64, out var list)) byBucket[ino % 64] = list = [];
            list.Add((name, ino));
            if (list.Count == count) return list;
        }
    }

    [Fact]
    public void Held_unlinked_files_are_on_the_unlinked_list_and_a_crash_leaves_them_for_recovery_to_free()
    {
        string image = Make();
        string crashed = Path.Combine(_tmp, "crashed.img"), ours = Path.Combine(_tmp, "ours.img");
        List<(string Name, ulong Ino)> files;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            files = SameBucketFiles(v, 4);
            foreach (var (name, ino) in files)
            {
                v.Retain(ino);
                v.Unlink(v.RootInode, N(name));
            }
            // The middle of the chain goes first (its predecessor is relinked), then the head.
            v.Release(files[1].Ino);
            v.Release(files[3].Ino);
            v.Sync();
            Shell.RunChecked("cp", "--sparse=always", image, crashed);
            Shell.RunChecked("cp", "--sparse=always", image, ours);
        }
        // The clean unmount freed the two still held: nothing listed, nothing leaked.
        Assert.Empty(Listed(image));
        AssertRepairClean(image);

        // The crash copy's log lists exactly the two still held (our replay follows the lists after replaying).
        using (var replayed = XfsVolume.Open(crashed))
            Assert.Equal(2, replayed.Info.UnlinkedInodesAtCrash);
        using (var mount = LoopMount.Mount(crashed, readOnly: false))
            Assert.All(files, f => Assert.False(File.Exists(Path.Combine(mount.MountPoint, f.Name))));
        Assert.Empty(Listed(crashed));
        AssertRepairClean(crashed);

        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
            Assert.Equal(2, v.RecoveredAtOpen?.UnlinkedInodesFreed);
        Assert.Empty(Listed(ours));
        AssertRepairClean(ours);
    }

    [Fact]
    public void A_file_replaced_by_a_rename_while_held_is_listed_until_released()
    {
        string image = Make();
        string crashed = Path.Combine(_tmp, "crashed.img");
        var data = new byte[5000];
        new Random(3).NextBytes(data);
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            var a = v.CreateNode(v.RootInode, N("a"), 0x81A4, 0, 0).Inode;
            v.Write(a, 0, data);
            var b = v.CreateNode(v.RootInode, N("b"), 0x81A4, 0, 0).Inode;
            v.Write(b, 0, new byte[20000]);
            v.Retain(b);
            v.Rename(v.RootInode, N("a"), v.RootInode, N("b"));
            v.Sync();
            Shell.RunChecked("cp", "--sparse=always", image, crashed);
            v.Release(b);
            v.Sync();
        }
        Assert.Empty(Listed(image));
        AssertRepairClean(image);
        using (var replayed = XfsVolume.Open(crashed))
            Assert.Equal(1, replayed.Info.UnlinkedInodesAtCrash);
        using (var mount = LoopMount.Mount(crashed, readOnly: false))
            Assert.Equal(data, File.ReadAllBytes(Path.Combine(mount.MountPoint, "b")));
        Assert.Empty(Listed(crashed));
        AssertRepairClean(crashed);
    }
}

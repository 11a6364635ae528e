using System.Security.Cryptography;
using Xunit;
using XfsWin.Attributes;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// A write that allocates takes up the mapping its file's last write left in memory instead of loading the file's
/// extent list or bmbt again, only while the file's mapping did not change since: a stream of writes into holes of one
/// file, or of a few files in turn, keeps each file's, another file's writes leave it kept, and every change of the
/// file's own mapping (a punched hole, a truncate, a clone into it) makes its next write load the fork again. Judged by
/// the kernel: what the engine wrote reads back the same through a loop mount, and xfs_repair -n finds nothing.
/// </summary>
public sealed class KeptWriteMappingTests : IDisposable
{
    private const int Block = 4096;
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-kept-map.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Writes_into_holes_keep_their_files_mappings_until_a_change_moves_that_files_and_the_kernel_reads_what_they_wrote()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-f", "-q", "-m", "reflink=1,rmapbt=1", image);
        const int Blocks = 1200;
        var modelA = new byte[Blocks * Block];
        var modelB = new byte[Blocks * Block];
        var modelC = new byte[Blocks * Block];
        var rng = new Random(7);
        var data = new byte[Block];
        ulong a, b, c;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            a = v.CreateNode(v.RootInode, "a"u8, 0x81A4, 0, 0).Inode;
            b = v.CreateNode(v.RootInode, "b"u8, 0x81A4, 0, 0).Inode;
            c = v.CreateNode(v.RootInode, "c"u8, 0x81A4, 0, 0).Inode;

            void WriteA(int block)
            {
                rng.NextBytes(data);
                v.Write(a, (long)block * Block, data);
                data.CopyTo(modelA, block * Block);
            }

            // Every other block: one extent per write, past the inode's room for an extent list (a bmbt).
            long kept0 = v.WriteMappingsKept;
            for (int i = 0; i < Blocks / 2; i += 2) WriteA(i);
            Assert.True(v.WriteMappingsKept - kept0 >= Blocks / 4 - 2, $"{v.WriteMappingsKept - kept0} of {Blocks / 4} writes kept the mapping");
            Assert.True(v.GetAttributes(a).DataExtentCount > 100);

            // Writes into holes of three files in turn (one extent each): after each file's first, every write keeps its
            // file's mapping.
            kept0 = v.WriteMappingsKept;
            for (int i = Blocks / 2; i < Blocks / 2 + 300; i += 2)
            {
                WriteA(i);
                foreach (var (file, model) in new[] { (b, modelB), (c, modelC) })
                {
                    rng.NextBytes(data);
                    v.Write(file, (long)(i - Blocks / 2 + 20) * Block, data);
                    data.CopyTo(model, (i - Blocks / 2 + 20) * Block);
                }
            }
            Assert.Equal(3 * 150 - 2, v.WriteMappingsKept - kept0);
            Assert.True(v.GetAttributes(b).DataExtentCount > 100 && v.GetAttributes(c).DataExtentCount > 100);

            // After each change below that moved a's mapping, a's next write loads the fork again and the one after keeps
            // it; another file's write and an attribute that fits the inode's attribute fork leave a's mapping as it was,
            // and then its next write keeps it too.
            var changes = new (string What, Action Change)[]
            {
                ("another file's write", () =>
                {
                    rng.NextBytes(data);
                    v.Write(b, 5 * Block, data);
                    data.CopyTo(modelB, 5 * Block);
                }),
                ("a punched hole", () =>
                {
                    v.Allocate(a, 40 * Block, 3 * Block, FallocateMode.PunchHole);
                    Array.Clear(modelA, 40 * Block, 3 * Block);
                }),
                ("a clone into the file", () =>
                {
                    rng.NextBytes(data);
                    v.Write(b, 9 * Block, data);
                    data.CopyTo(modelB, 9 * Block);
                    Assert.Equal(Block, v.CloneRange(b, 9 * Block, a, 101 * Block, Block));
                    Array.Copy(modelB, 9 * Block, modelA, 101 * Block, Block);
                }),
                ("an extended attribute", () => v.SetXattr(a, XattrNamespace.User, "k"u8, new byte[40])),
                ("a truncate", () =>
                {
                    v.SetAttributes(a, new AttributeChanges { Size = 500L * Block });
                    Array.Clear(modelA, 500 * Block, modelA.Length - 500 * Block);
                }),
            };
            int next = 301;
            foreach (var (what, change) in changes)
            {
                long mappingChanges = v.Mount.LastMappingChange(a);
                long bChanges = v.Mount.LastMappingChange(b);
                change();
                bool moved = v.Mount.LastMappingChange(a) != mappingChanges;
                bool keepsA = what is "another file's write" or "an extended attribute";
                Assert.True(moved != keepsA, $"{what}: a's mapping moved: {moved}");
                if (what == "another file's write") Assert.NotEqual(bChanges, v.Mount.LastMappingChange(b));
                long before = v.WriteMappingsKept;
                WriteA(next);
                Assert.True(v.WriteMappingsKept == (moved ? before : before + 1), $"the write after {what} (mappings moved: {moved}) kept {v.WriteMappingsKept - before}");
                if (!moved) before++;
                WriteA(next + 2);
                Assert.True(v.WriteMappingsKept == before + 1, $"the second write after {what} loaded the fork again");
                WriteA(41); // into the punched hole (or over the block written there since)
                next += 6;
            }
            // Writes into the clone's shared block copy it first; the file's other writes go on keeping the mapping.
            WriteA(101);
            WriteA(next);

            var read = new byte[modelA.Length];
            long size = v.GetAttributes(a).Size;
            Assert.Equal(500L * Block, size);
            Assert.Equal((int)size, v.Read(a, 0, read.AsSpan(0, (int)size)));
            Assert.True(read.AsSpan(0, (int)size).SequenceEqual(modelA.AsSpan(0, (int)size)), "the engine reads what it wrote");
            v.Sync();
        }

        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");
        using var mount = LoopMount.Mount(image, readOnly: true);
        var onDisk = File.ReadAllBytes(Path.Combine(mount.MountPoint, "a"));
        Assert.Equal(SHA256.HashData(modelA.AsSpan(0, onDisk.Length)), SHA256.HashData(onDisk));
        var bOnDisk = File.ReadAllBytes(Path.Combine(mount.MountPoint, "b"));
        Assert.Equal(SHA256.HashData(modelB.AsSpan(0, bOnDisk.Length)), SHA256.HashData(bOnDisk));
        var cOnDisk = File.ReadAllBytes(Path.Combine(mount.MountPoint, "c"));
        Assert.Equal(SHA256.HashData(modelC.AsSpan(0, cOnDisk.Length)), SHA256.HashData(cOnDisk));
    }
}

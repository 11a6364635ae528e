using System.Security.Cryptography;
using Xunit;
using XfsWin.Extents;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Speculative preallocation past EOF (the kernel's xfs_iomap_prealloc_size): files growing at their end get their
/// space in allocations that double, so two files appended in turn stay in few large extents instead of one extent per
/// write; what is left past EOF goes at the first writable close. Judged by xfs_db (extent counts), the kernel (it
/// mounts the volume and reads the same bytes) and xfs_repair -n.
/// </summary>
public sealed class SpeculativePreallocationTests : IDisposable
{
    private const int K = 1024, Block = 4 * K;
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-prealloc.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private string NewImage()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-b", "size=4096", image);
        return image;
    }

    private static byte[] Piece(int file, int index)
    {
        var b = new byte[64 * K];
        new Random(file * 100_000 + index).NextBytes(b);
        return b;
    }

    [Fact]
    public void Files_appended_in_turn_stay_in_few_extents_and_give_back_the_rest_at_close()
    {
        string image = NewImage();
        const int Pieces = 128; // 8 MiB each, in 64 KiB appends taking turns
        var inodes = new ulong[2];
        var hashes = new string[2];
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            for (int f = 0; f < 2; f++)
                inodes[f] = v.CreateNode(v.RootInode, System.Text.Encoding.UTF8.GetBytes($"log{f}"), 0x81A4, 0, 0).Inode;
            var sha = new[] { IncrementalHash.CreateHash(HashAlgorithmName.SHA256), IncrementalHash.CreateHash(HashAlgorithmName.SHA256) };
            for (int i = 0; i < Pieces; i++)
            {
                for (int f = 0; f < 2; f++)
                {
                    var piece = Piece(f, i);
                    Assert.Equal(piece.Length, v.Write(inodes[f], (long)i * piece.Length, piece));
                    sha[f].AppendData(piece);
                }
            }
            for (int f = 0; f < 2; f++)
            {
                hashes[f] = Convert.ToHexStringLower(sha[f].GetHashAndReset());
                var open = v.GetAttributes(inodes[f]);
                Assert.Equal(Pieces * 64L * K, open.Size);
                Assert.True(open.AllocatedBytes > open.Size, $"log{f}: {open.AllocatedBytes} bytes allocated for {open.Size} while open: no preallocation past EOF");
                v.CloseFile(inodes[f], writable: true);
                Assert.Equal(open.Size, v.GetAttributes(inodes[f]).AllocatedBytes);
            }
        }
        // One extent per append without preallocation (128); doubling allocations need about log2(8 MiB / 64 KiB) + 1.
        for (int f = 0; f < 2; f++)
        {
            var core = XfsDb.Fields(XfsDb.Run(image, "6.13", $"inode {inodes[f]}", "print core.nextents core.size"));
            long extents = XfsDb.Number(core["core.nextents"]);
            Assert.True(extents <= 10, $"log{f} has {extents} extents");
        }
        XfsWin.Tests.Allocation.AllocatorVolume.AssertRepairClean(image);
        using var mount = LoopMount.Mount(image, readOnly: true);
        for (int f = 0; f < 2; f++)
            Assert.Equal(hashes[f], Convert.ToHexStringLower(SHA256.HashData(File.ReadAllBytes(Path.Combine(mount.MountPoint, $"log{f}")))));
    }

    [Fact]
    public void Small_files_and_writes_inside_a_file_preallocate_nothing()
    {
        string image = NewImage();
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong small = v.CreateNode(v.RootInode, "small"u8.ToArray(), 0x81A4, 0, 0).Inode;
            v.Write(small, 0, new byte[Block]);
            v.Write(small, Block, new byte[8 * Block]);
            Assert.Equal(9 * Block, v.GetAttributes(small).AllocatedBytes);

            ulong big = v.CreateNode(v.RootInode, "big"u8.ToArray(), 0x81A4, 0, 0).Inode;
            v.Write(big, 0, new byte[256 * K]);
            Assert.Equal(256 * K, v.GetAttributes(big).AllocatedBytes);
            // A hole filled inside EOF.
            v.Write(big, 1024 * K, new byte[Block]);
            long before = v.GetAttributes(big).AllocatedBytes;
            v.Write(big, 512 * K, new byte[Block]);
            Assert.Equal(before + Block, v.GetAttributes(big).AllocatedBytes);
        }
        XfsWin.Tests.Allocation.AllocatorVolume.AssertRepairClean(image);
    }

    [Theory]
    // size, write start, run before it, block log, free, data blocks -> blocks
    [InlineData(32 * K, 8, 8, 12, 1_000_000, 1_000_000, 0)]             // smaller than 64 KiB: none
    [InlineData(64 * K, 16, 0, 12, 1_000_000, 1_000_000, 16)]           // no run to continue: the minimum, 64 KiB
    [InlineData(64 * K, 16, 16, 12, 1_000_000, 1_000_000, 32)]          // twice the run
    [InlineData(1 << 20, 256, 300, 12, 1_000_000, 1_000_000, 512)]      // twice the run, down to a power of two
    [InlineData(1 << 20, 256, 300, 12, 40_000, 1_000_000, 0)]           // under 5% free: none
    [InlineData(1 << 20, 256, 300, 12, 2_000, 10_000, 250)]             // never more than an eighth of the free space
    [InlineData(1L << 40, 1L << 28, 2_000_000, 12, 1L << 40, 1L << 40, (1 << 21) - 1)] // at most one largest extent
    [InlineData(64 * K, 128, 0, 9, 1_000_000, 1_000_000, 128)]          // 512-byte blocks: the minimum is 128 of them
    public void Sizes_follow_the_kernels_rules(long size, long writeStart, long run, int blockLog, long free, long dataBlocks, long expected) =>
        Assert.Equal((ulong)expected, SpeculativePreallocation.Blocks((ulong)size, (ulong)writeStart, (ulong)run, blockLog, (ulong)free, (ulong)dataBlocks));
}

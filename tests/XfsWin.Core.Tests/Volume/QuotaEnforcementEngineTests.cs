using Xunit;
using Xunit.Abstractions;
using XfsWin.Check;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Quota enforcement at the engine's API, on what the kernel comparison (XfsWin.Fuse.Tests/QuotaEnforcementTests)
/// does not reach the same way: a refused change leaves nothing behind (no inode, no size change, no block, no
/// reflink flag), a write ends short where the limit falls inside it, files owned by root are never refused, and the
/// reflink paths (a clone reserves piece by piece and stops at the limit; a write over shared blocks reserves the copies).
/// The volume is mkfs 6.1's (reflink on) with limits set by the kernel (quota-guest.sh limits, user-mode Linux);
/// xfs_repair -n (which checks every dquot's counts) and xfswin check judge it after.
/// </summary>
public sealed class QuotaEnforcementEngineTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-edquot-engine.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static byte[] Block(byte value)
    {
        var b = new byte[4096];
        Array.Fill(b, value);
        return b;
    }

    [Fact]
    public void A_refused_change_leaves_nothing_behind()
    {
        string image = Path.Combine(_tmp, "limits.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.1"), "-f", "-q", image);
        QuotaKernelTests.Guest(image, "limits", "uquota,gquota,pquota");
        long e4Blocks;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.False(v.IsReadOnly, string.Join("; ", v.Info.ReadOnlyReasons));
            ulong w = v.ResolvePath("/w");
            // User 1000 (hard block limit 256; its directory /w holds no blocks): 256 blocks, then EDQUOT.
            ulong f = v.CreateNode(w, "f"u8, 0x81A4, 1000, 1000).Inode;
            int n = 0;
            XfsException? refusal = null;
            for (; n < 1000 && refusal is null; n++)
            {
                try
                {
                    v.Write(f, n * 4096L, Block(0x5A));
                }
                catch (XfsException x)
                {
                    refusal = x;
                    n--;
                }
            }
            Assert.Equal(256, n);
            Assert.Equal(XfsError.QuotaExceeded, refusal!.Error);
            Assert.Equal(122, refusal.Errno);
            Assert.Equal(256 * 4096L, v.GetAttributes(f).Size);
            Assert.Equal(256 * 4096L, v.GetAttributes(f).AllocatedBytes);
            // A write over the last allocated block and the next: the allocated half is written, the call returns short.
            Assert.Equal(2048, v.Write(f, 256 * 4096L - 2048, Block(0x6B)));
            Assert.Equal(256 * 4096L, v.GetAttributes(f).Size);
            // A create at the block limit: refused, no inode made, the name not there.
            var create = Assert.Throws<XfsException>(() => v.CreateNode(w, "g"u8, 0x81A4, 1000, 1000));
            Assert.Equal(XfsError.QuotaExceeded, create.Error);
            Assert.Equal(XfsError.NotFound, Assert.Throws<XfsException>(() => v.ResolvePath("/w/g")).Error);
            // Root's files are never refused (the id 0 dquots hold the defaults and are not enforced).
            ulong r = v.CreateNode(w, "root"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal(300 * 4096, v.Write(r, 0, new byte[300 * 4096]));

            // A clone gains the written blocks it maps: 2 fit.
            v.SetAttributes(f, new AttributeChanges { Size = 8192 });
            ulong e = v.CreateNode(w, "e"u8, 0x81A4, 1000, 1000).Inode;
            Assert.Equal(8192, v.CloneRange(f, 0, e, 0, 0));
            for (int i = 2; i < 200; i++) v.Write(f, i * 4096L, Block(0x5A));
            // Up to the limit again (202 used), then a write over e's shared block needs a copy: refused, e unchanged.
            for (int i = 200; i < 254; i++) v.Write(f, i * 4096L, Block(0x5A));
            var cow = Assert.Throws<XfsException>(() => v.Write(e, 0, Block(0x7C)));
            Assert.Equal(XfsError.QuotaExceeded, cow.Error);
            var back = new byte[4096];
            v.Read(e, 0, back);
            Assert.Equal(Block(0x5A), back);
            // Freed blocks make room: the copy goes ahead.
            v.SetAttributes(f, new AttributeChanges { Size = 4096 * 100 });
            Assert.Equal(4096, v.Write(e, 0, Block(0x7C)));
            v.Read(f, 0, back);
            Assert.Equal(Block(0x5A), back);

            // A clone reserves piece by piece (xfs_reflink_remap_extent). Root's s: 2 blocks, a hole, 200 blocks.
            ulong s = v.CreateNode(w, "s"u8, 0x81A4, 0, 0).Inode;
            v.Write(s, 0, [.. Block(0x3C), .. Block(0x3C)]);
            v.Write(s, 3 * 4096L, new byte[200 * 4096]);
            Assert.Equal([(0UL, 2U), (3UL, 200U)], v.DataExtents(s).Select(x => (x.FileOffset, x.BlockCount)));
            // FICLONE with 154 blocks left: the 2 blocks fit, the hole needs none, the 200 do not. The refusal is
            // returned and what was remapped stays, as the kernel leaves it; both files carry the reflink flag.
            ulong e2 = v.CreateNode(w, "e2"u8, 0x81A4, 1000, 1000).Inode;
            var clone = Assert.Throws<XfsException>(() => v.CloneRange(s, 0, e2, 0, 0));
            Assert.Equal(XfsError.QuotaExceeded, clone.Error);
            Assert.Equal(8192, v.GetAttributes(e2).Size);
            Assert.Equal(8192, v.GetAttributes(e2).AllocatedBytes);
            Assert.Equal(0x2UL, v.GetAttributes(e2).Flags2 & 0x2); // XFS_DIFLAG2_REFLINK
            // copy_file_range takes a short remap: the bytes remapped, the hole included, are its result.
            ulong e3 = v.CreateNode(w, "e3"u8, 0x81A4, 1000, 1000).Inode;
            Assert.Equal(3 * 4096L, v.CopyFileRange(s, 0, e3, 0, 203 * 4096L));
            Assert.Equal(8192, v.GetAttributes(e3).Size);
            v.Read(e3, 4096, back);
            Assert.Equal(Block(0x3C), back);
            // Where the first piece does not fit, nothing is remapped and the bytes are copied, up to the limit.
            ulong e4 = v.CreateNode(w, "e4"u8, 0x81A4, 1000, 1000).Inode;
            long copied = v.CopyFileRange(s, 3 * 4096L, e4, 0, 200 * 4096L);
            output.WriteLine($"copy_file_range past the limit: {copied} bytes");
            Assert.InRange(copied, 4096, 150 * 4096);
            Assert.Equal(copied, v.GetAttributes(e4).Size);
            var shared = v.DataExtents(s)[1];
            Assert.DoesNotContain(v.DataExtents(e4), x => x.StartBlock < shared.StartBlock + shared.BlockCount && shared.StartBlock < x.StartBlock + x.BlockCount);
            e4Blocks = v.GetAttributes(e4).AllocatedBytes / 4096;
            Assert.Equal(copied / 4096, e4Blocks);
        }
        foreach (var version in new[] { "6.1", "6.13" })
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            output.WriteLine($"xfs_repair -n ({version}): exit {repair.ExitCode}\n{repair.StandardOutput}{repair.StandardError}");
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version} found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
        var check = VolumeChecker.Check(image);
        Assert.True(check.IsClean, string.Join("\n", check.Problems.Select(p => p.ToString())));
        var dq = XfsDb.Fields(XfsDb.Run(image, "6.13", "dquot -u 1000", "p"));
        output.WriteLine($"user 1000: {dq["diskdq.bcount"]} blocks, {dq["diskdq.icount"]} inodes");
        // f's 100 blocks, e's 2 (one shared with f, one its copy), e2's and e3's 2 shared with root's s, e4's copies.
        Assert.Equal((106 + e4Blocks).ToString(System.Globalization.CultureInfo.InvariantCulture), dq["diskdq.bcount"]);
    }
}

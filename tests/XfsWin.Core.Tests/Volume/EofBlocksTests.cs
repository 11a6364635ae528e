using Xunit;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Blocks an extent size hint leaves past EOF, on a volume made by mkfs.xfs and opened read-write, go as the kernel's
/// xfs_file_release and xfs_inactive give them back: at the first close of a writable open (not a read-only one), not at
/// later closes unless the file was truncated down since, at the inode's last hold, and at unmount; a preallocated
/// file (fallocate) keeps them, and an append-only one keeps them until the flag is cleared. Block counts are
/// the inode's (AllocatedBytes), with a 4 KiB block: a 1 MiB hint maps 256 blocks for one written block.
/// </summary>
public sealed class EofBlocksTests : IDisposable
{
    private const long K = 1024, Block = 4 * K;
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-eofblocks.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private string NewImage()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-b", "size=4096", image);
        return image;
    }

    private static ulong HintedFile(XfsVolume v, string name)
    {
        ulong ino = v.CreateNode(v.RootInode, System.Text.Encoding.UTF8.GetBytes(name), 0x81A4, 0, 0).Inode;
        var x = v.GetFileXattr(ino);
        v.SetFileXattr(ino, x with { XFlags = x.XFlags | FileXFlags.ExtSize, ExtentSize = 1 << 20 }, FileAttrCaller.Root);
        return ino;
    }

    [Fact]
    public void The_first_writable_close_and_unmount_give_back_what_a_hint_left_past_EOF()
    {
        string image = NewImage();
        ulong a, b;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            a = HintedFile(v, "a");
            v.Write(a, 100 * K, new byte[Block]);
            Assert.Equal(1 << 20, v.GetAttributes(a).AllocatedBytes);
            v.CloseFile(a, writable: false);
            Assert.Equal(1 << 20, v.GetAttributes(a).AllocatedBytes);
            v.CloseFile(a, writable: true);
            Assert.Equal(104 * K, v.GetAttributes(a).AllocatedBytes);
            // Later closes keep what later writes leave (files written in open/write/close cycles keep their space).
            v.Write(a, 200 * K, new byte[Block]);
            long kept = v.GetAttributes(a).AllocatedBytes;
            Assert.Equal(104 * K + 256 * Block, kept);
            v.CloseFile(a, writable: true);
            Assert.Equal(kept, v.GetAttributes(a).AllocatedBytes);
            // A truncate down (which frees past its new EOF) lets the next close give back blocks past EOF again: a write
            // at 300 KiB maps a hint from the end of the extent before it, 152 KiB, and the close keeps 304 KiB.
            v.SetAttributes(a, new AttributeChanges { Size = 150 * K });
            Assert.Equal(152 * K, v.GetAttributes(a).AllocatedBytes);
            v.Write(a, 300 * K, new byte[Block]);
            Assert.Equal(152 * K + 256 * Block, v.GetAttributes(a).AllocatedBytes);
            v.CloseFile(a, writable: true);
            Assert.Equal(304 * K, v.GetAttributes(a).AllocatedBytes);
            v.Write(a, 400 * K, new byte[Block]);

            // The last hold's release inactivates the inode.
            b = HintedFile(v, "b");
            v.Retain(b);
            v.Write(b, 0, new byte[Block]);
            Assert.Equal(1 << 20, v.GetAttributes(b).AllocatedBytes);
            v.Release(b);
            Assert.Equal(Block, v.GetAttributes(b).AllocatedBytes);
        }
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = false }))
            Assert.Equal(404 * K, v.GetAttributes(a).AllocatedBytes);
        XfsWin.Tests.Allocation.AllocatorVolume.AssertRepairClean(image);
    }

    [Fact]
    public void Blocks_an_append_only_file_keeps_past_EOF_go_at_unmount_once_the_flag_is_cleared_whatever_holds_went_before()
    {
        string image = NewImage(), kernelCopy = Path.Combine(_tmp, "kernel.img");
        File.Copy(image, kernelCopy);
        var files = new List<ulong>();
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            void SetAppend(ulong ino, bool on)
            {
                var x = v.GetFileXattr(ino);
                v.SetFileXattr(ino, x with { XFlags = on ? x.XFlags | FileXFlags.Append : x.XFlags & ~FileXFlags.Append }, FileAttrCaller.Root);
            }
            // e: the host's last hold goes while the file is append-only (a FUSE forget when the kernel's caches shrink).
            // f: the hold stays. Both then lose the flag; unmount gives back both files' blocks past EOF.
            foreach (var (name, released) in new[] { ("e", true), ("f", false) })
            {
                ulong ino = HintedFile(v, name);
                files.Add(ino);
                SetAppend(ino, true);
                v.Retain(ino);
                v.Write(ino, 0, "z\n"u8.ToArray());
                v.CloseFile(ino, writable: true);
                if (released) v.Release(ino);
                Assert.Equal(1 << 20, v.GetAttributes(ino).AllocatedBytes);
                SetAppend(ino, false);
                Assert.Equal(1 << 20, v.GetAttributes(ino).AllocatedBytes);
            }
        }
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = false }))
            Assert.All(files, ino => Assert.Equal(Block, v.GetAttributes(ino).AllocatedBytes));
        XfsWin.Tests.Allocation.AllocatorVolume.AssertRepairClean(image);
        // The kernel does the same: the blocks an append-only file kept past EOF go when it is inactivated at unmount.
        using (var k = LoopMount.Mount(kernelCopy, readOnly: false))
        {
            string p = Path.Combine(k.MountPoint, "e"), io = OracleImages.Tool("xfs_io", "6.13");
            Shell.RunChecked(io, "-f", "-c", "extsize 1m", p);
            Shell.RunChecked(io, "-r", "-c", "chattr +a", p);
            Shell.RunChecked("sh", "-c", $"echo z >> {p}");
            Shell.RunChecked(io, "-r", "-c", "chattr -a", p);
        }
        using (var k = LoopMount.Mount(kernelCopy, readOnly: true))
            Assert.Equal("8", Shell.RunChecked("stat", "-c", "%b", Path.Combine(k.MountPoint, "e")).StandardOutput.Trim());
    }

    [Fact]
    public void A_preallocated_file_keeps_its_blocks_past_EOF()
    {
        string image = NewImage();
        ulong f;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            f = HintedFile(v, "f");
            v.Allocate(f, 0, Block, FallocateMode.KeepSize);
            v.Write(f, 0, new byte[Block]);
            Assert.Equal(1 << 20, v.GetAttributes(f).AllocatedBytes);
            v.CloseFile(f, writable: true);
            Assert.Equal(1 << 20, v.GetAttributes(f).AllocatedBytes);
        }
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = false }))
            Assert.Equal(1 << 20, v.GetAttributes(f).AllocatedBytes);
        XfsWin.Tests.Allocation.AllocatorVolume.AssertRepairClean(image);
    }
}

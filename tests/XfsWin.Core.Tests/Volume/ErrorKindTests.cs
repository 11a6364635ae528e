using Xunit;
using XfsWin.Allocation;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;
using XfsDb = XfsWin.TestSupport.XfsDb;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Only the disk's faults are corruption. Our own bugs, a caller's exceptions and use after dispose surface as
/// what they are and leave the volume healthy; corruption the write engine finds names the structure and its disk
/// address, as the read side's does.
/// </summary>
public sealed class ErrorKindTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-errors.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>A fresh volume made by mkfs.xfs 6.1 (defaults, 4 AGs).</summary>
    private string MakeVolume()
    {
        string img = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "64M", img);
        var env = new Dictionary<string, string> { ["TEST_DIR"] = _tmp, ["TEST_DEV"] = "/dev/null", ["QA_CHECK_FS"] = "xfs" };
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), ["-q", "-f", "-d", "agcount=4", img], environment: env);
        return img;
    }

    private struct ThrowingVisitor : IDirectoryVisitor
    {
        public readonly bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie) =>
            throw new InvalidOperationException("the caller's own bug");
    }

    [Fact]
    public void A_callers_exception_is_not_corruption_and_the_volume_stays_healthy()
    {
        using var volume = XfsVolume.Open(MakeVolume());
        var visitor = new ThrowingVisitor();
        var e = Assert.Throws<InvalidOperationException>(() => volume.ReadDirectory(volume.RootInode, 0, ref visitor));
        Assert.Equal("the caller's own bug", e.Message);
        Assert.True(volume.IsHealthy);
        Assert.Null(volume.FirstCorruption);
        Assert.Equal(2, volume.ListDirectory(volume.RootInode).Count); // "." and "..": the volume still serves reads
    }

    [Fact]
    public void Use_after_dispose_is_ObjectDisposedException_not_corruption()
    {
        var volume = XfsVolume.Open(MakeVolume());
        ulong root = volume.RootInode;
        Assert.Equal(XfsFileType.Directory, volume.GetAttributes(root).FileType);
        volume.Dispose();
        Assert.Throws<ObjectDisposedException>(() => volume.GetAttributes(root));
        Assert.Throws<ObjectDisposedException>(() => volume.ListDirectory(root));
        Assert.Throws<ObjectDisposedException>(() => volume.Read(root, 0, new byte[16]));
        Assert.Throws<ObjectDisposedException>(() => volume.ListXattrs(root));
        Assert.Throws<ObjectDisposedException>(() => volume.GetStats());
        Assert.True(volume.IsHealthy);
    }

    [Fact]
    public void The_allocator_names_a_damaged_AGF_and_its_address()
    {
        string img = MakeVolume();
        XfsDb.Write(img, "6.1", "agf 1", "write -d magicnum 0");
        using var device = FileBlockDevice.Open(img, writable: true);
        var sb = Superblock.Decode(ReadSector(device));
        var mount = new MountContext(device, sb, 16L << 20);
        var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers));
        var e = Assert.Throws<XfsCorruptionException>(() => new AgAllocator(mount, log));
        Assert.Equal("AGF of AG 1", e.Structure);
        Assert.Equal(sb.AgBlockToByte(1, 0) + sb.SectorSize, e.ByteOffset);
        Assert.Contains($"daddr {(sb.AgBlockToByte(1, 0) + sb.SectorSize) / 512}", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void The_btree_cursor_of_a_transaction_names_a_damaged_block_and_its_address()
    {
        string img = MakeVolume();
        uint root = Convert.ToUInt32(XfsDb.Fields(XfsDb.Run(img, "6.1", "agf 2", "print bnoroot"))["bnoroot"]);
        XfsDb.Write(img, "6.1", "agf 2", "addr bnoroot", "write -d magic 0");
        using var device = FileBlockDevice.Open(img, writable: true);
        var sb = Superblock.Decode(ReadSector(device));
        var mount = new MountContext(device, sb, 16L << 20);
        var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers));
        var allocator = new AgAllocator(mount, log);
        using var tx = new Transaction(mount, log, 256 * 1024);
        var e = Assert.Throws<XfsCorruptionException>(() => allocator.Allocate(tx, new AllocationRequest
        {
            Target = (ulong)2 << sb.AgBlkLog, MaxLength = 1, Scope = AllocationScope.ThisAg, Owner = RmapOwner.Fs,
        }));
        Assert.StartsWith("free space btree (bnobt)", e.Structure);
        Assert.Equal(sb.AgBlockToByte(2, root), e.ByteOffset);
    }

    private static byte[] ReadSector(IBlockDevice device)
    {
        var sector = new byte[4096];
        device.Read(0, sector);
        return sector;
    }
}

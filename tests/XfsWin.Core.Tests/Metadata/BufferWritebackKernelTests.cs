using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Tests.Metadata;

/// <summary>
/// Writeback through the write verifiers on a volume made by the real mkfs.xfs: the AGF of AG 1 and
/// the free-space btree root of AG 2 are changed with a wrong CRC in memory and an LSN to stamp;
/// what reaches the disk must carry that LSN and a correct CRC for our read verifiers, xfs_db,
/// xfs_repair -n and the kernel.
/// </summary>
public sealed class BufferWritebackKernelTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-writeback.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Writeback_stamps_the_lsn_then_the_crc_as_xfs_db_xfs_repair_and_the_kernel_expect()
    {
        string image = Path.Combine(_tmp, "v.img");
        using (var file = File.Create(image)) file.SetLength(320L << 20);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-q", "-f", "-d", "agcount=4", image);
        // Cycle 1, block 0: not ahead of the log mkfs.xfs wrote (the kernel warns about metadata LSNs beyond the head).
        const ulong lsn = 1UL << 32;
        long agfOffset, btreeOffset;
        using (var device = FileBlockDevice.Open(image, writable: true, unbuffered: false))
        {
            var sector = new byte[4096];
            device.Read(0, sector);
            var sb = Superblock.Decode(sector);
            using var cache = new BufferCache(device, new VolumeHealth(), 16 << 20);
            var agfVerifier = new AgfBufferVerifier(sb, 1);
            agfOffset = sb.AgBlockToByte(1, 0) + sb.SectorSize;
            var agf2 = new AgfView(cache.Read(sb.AgBlockToByte(2, 0) + sb.SectorSize, sb.SectorSize, 2, new AgfBufferVerifier(sb, 2)));
            var btreeVerifier = new AgBtreeBlockVerifier(sb, 2, BtreeMagic.BnoV5, "bnobt block");
            btreeOffset = sb.AgBlockToByte(2, agf2.BnoRoot);
            using (var change = new MetadataChangeSet(cache))
            {
                var agf = change.Read(agfOffset, sb.SectorSize, 1, agfVerifier, agfVerifier.ForWrite());
                BinaryPrimitives.WriteUInt32BigEndian(agf.Contents.AsSpan(AgfView.OffCrc), 0xDEADBEEF);
                agf.LogRange(AgfView.OffCrc, AgfView.OffCrc + 3);
                agf.Lsn = lsn;
                var root = change.Read(btreeOffset, (int)sb.BlockSize, 2, btreeVerifier, btreeVerifier.ForWrite());
                BinaryPrimitives.WriteUInt32BigEndian(root.Contents.AsSpan(BtreeBlockView.ShortOffCrc), 0xDEADBEEF);
                root.LogRange(BtreeBlockView.ShortOffCrc, BtreeBlockView.ShortOffCrc + 3);
                root.Lsn = lsn;
                change.Commit();
            }
            Assert.Equal(2, cache.Writeback());
            device.Flush();

            // Our read verifiers accept what was written (a fresh cache reads the disk).
            using var fresh = new BufferCache(device, new VolumeHealth(), 16 << 20);
            var agfOnDisk = fresh.Read(agfOffset, sb.SectorSize, 1, agfVerifier);
            Assert.Equal(lsn, BinaryPrimitives.ReadUInt64BigEndian(agfOnDisk.AsSpan(AgfView.OffLsn)));
            var rootOnDisk = fresh.Read(btreeOffset, (int)sb.BlockSize, 2, btreeVerifier);
            Assert.Equal(lsn, BinaryPrimitives.ReadUInt64BigEndian(rootOnDisk.AsSpan(BtreeBlockView.ShortOffLsn)));
        }

        var agfFields = XfsDb.Fields(XfsDb.Run(image, "6.1", "agf 1", "print lsn crc"));
        Assert.Equal((long)lsn, XfsDb.Number(agfFields["lsn"]));
        Assert.EndsWith("(correct)", agfFields["crc"]);
        var rootFields = XfsDb.Fields(XfsDb.Run(image, "6.1", "agf 2", "addr bnoroot", "print lsn crc"));
        Assert.Equal((long)lsn, XfsDb.Number(rootFields["lsn"]));
        Assert.EndsWith("(correct)", rootFields["crc"]);

        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}\n{repair.StandardError}");
        using (var mount = LoopMount.Mount(image, readOnly: true))
            Assert.True(Directory.Exists(mount.MountPoint));
    }
}

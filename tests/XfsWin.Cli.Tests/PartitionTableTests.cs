using System.Buffers.Binary;
using System.Text.Json;
using XfsWin.Device;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>The partition parser against tables written by sfdisk and sgdisk, as `sfdisk --json` reads them.</summary>
public class PartitionTableTests
{
    private static PartitionTable ReadTable(string image)
    {
        using var disk = FileBlockDevice.Open(image);
        return PartitionTable.Read(disk);
    }

    /// <summary>Checks every partition sfdisk reports against ours: number, start, size, type, GUIDs, name.</summary>
    private static void AssertMatchesSfdisk(PartitionTable table, string jsonPath)
    {
        using var doc = JsonDocument.Parse(File.ReadAllText(jsonPath));
        var t = doc.RootElement.GetProperty("partitiontable");
        int sector = t.GetProperty("sectorsize").GetInt32();
        Assert.Equal(sector, table.SectorSize);
        Assert.Equal(t.GetProperty("label").GetString() == "gpt" ? PartitionTableKind.Gpt : PartitionTableKind.Mbr, table.Kind);
        var expected = t.GetProperty("partitions").EnumerateArray().ToList();
        Assert.Equal(expected.Count, table.Entries.Count);
        foreach (var p in expected)
        {
            string node = p.GetProperty("node").GetString()!;
            int number = int.Parse(new string(node.Reverse().TakeWhile(char.IsAsciiDigit).Reverse().ToArray()));
            var e = Assert.Single(table.Entries, x => x.Number == number);
            Assert.Equal(p.GetProperty("start").GetInt64() * sector, e.StartByte);
            Assert.Equal(p.GetProperty("size").GetInt64() * sector, e.LengthBytes);
            if (table.Kind == PartitionTableKind.Gpt)
            {
                Assert.Equal(Guid.Parse(p.GetProperty("type").GetString()!), e.TypeGuid);
                Assert.Equal(Guid.Parse(p.GetProperty("uuid").GetString()!), e.UniqueGuid);
                Assert.Equal(p.TryGetProperty("name", out var n) ? n.GetString() : "", e.Name);
            }
            else
            {
                Assert.Equal(Convert.ToByte(p.GetProperty("type").GetString()!, 16), e.MbrType);
                Assert.Equal(p.TryGetProperty("bootable", out var b) && b.GetBoolean(), e.Bootable);
                Assert.Equal(e.MbrType is 0x05 or 0x0F or 0x85, e.IsExtendedContainer);
            }
            Assert.Null(e.Problem);
        }
        if (t.TryGetProperty("id", out var id) && table.Kind == PartitionTableKind.Gpt)
            Assert.Equal(Guid.Parse(id.GetString()!), table.DiskGuid);
        if (t.TryGetProperty("id", out var sig) && table.Kind == PartitionTableKind.Mbr)
            Assert.Equal(Convert.ToUInt32(sig.GetString()!, 16), table.MbrDiskSignature);
    }

    [Fact]
    public void Mbr_with_extended_and_logical_partitions_matches_sfdisk()
    {
        var table = ReadTable(Path.Combine(FixtureImages.Disks, "mbr.img"));
        AssertMatchesSfdisk(table, Path.Combine(FixtureImages.Disks, "mbr.json"));
        Assert.Equal([1, 2, 3, 5, 6, 7], table.Entries.Select(e => e.Number));
        Assert.Equal([2, 6], table.Entries.Where(e => e.HoldsXfs).Select(e => e.Number));
        Assert.Empty(table.Warnings);
    }

    [Fact]
    public void Gpt_on_512_byte_sectors_matches_sfdisk()
    {
        var table = ReadTable(Path.Combine(FixtureImages.Disks, "gpt.img"));
        AssertMatchesSfdisk(table, Path.Combine(FixtureImages.Disks, "gpt.json"));
        Assert.Equal([1, 2, 4], table.Entries.Select(e => e.Number));
        Assert.Equal([2], table.Entries.Where(e => e.HoldsXfs).Select(e => e.Number));
        Assert.Equal("swap ünïcode", table.Entries.Single(e => e.Number == 4).Name);
        Assert.Empty(table.Warnings);
    }

    [Fact]
    public void Gpt_on_4096_byte_sectors_matches_sfdisk_on_a_4k_loop_device()
    {
        var table = ReadTable(Path.Combine(FixtureImages.Disks, "gpt4k.img"));
        AssertMatchesSfdisk(table, Path.Combine(FixtureImages.Disks, "gpt4k.json"));
        Assert.Equal(4096, table.SectorSize);
        Assert.Equal([2], table.Entries.Where(e => e.HoldsXfs).Select(e => e.Number));
    }

    [Fact]
    public void Bare_volume_has_no_table()
    {
        var table = ReadTable(FixtureImages.Tree);
        Assert.Equal(PartitionTableKind.None, table.Kind);
        Assert.True(table.WholeDeviceIsXfs);
        var e = Assert.Throws<XfsException>(() => table.Get(1));
        Assert.Equal(XfsError.NotFound, e.Error);
        Assert.Contains("no partition table", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Damaged_primary_gpt_header_falls_back_to_backup_with_a_warning()
    {
        using var dir = new TempDir();
        string img = FixtureImages.CopyToTemp(Path.Combine(FixtureImages.Disks, "gpt.img"), dir);
        Damage(img, 512 + 40, 1);                  // first usable LBA: header CRC no longer matches
        var table = ReadTable(img);
        AssertMatchesSfdisk(table, Path.Combine(FixtureImages.Disks, "gpt.json"));
        var warning = Assert.Single(table.Warnings);
        Assert.Contains("CRC32 mismatch", warning, StringComparison.Ordinal);
        Assert.Contains("backup", warning, StringComparison.Ordinal);
    }

    [Fact]
    public void Damaged_primary_entry_array_falls_back_to_backup()
    {
        using var dir = new TempDir();
        string img = FixtureImages.CopyToTemp(Path.Combine(FixtureImages.Disks, "gpt.img"), dir);
        Damage(img, 1024 + 128 + 32, 2);      // entry 2's first LBA in the primary array
        var table = ReadTable(img);
        AssertMatchesSfdisk(table, Path.Combine(FixtureImages.Disks, "gpt.json"));
        Assert.Contains("entry array CRC32 mismatch", Assert.Single(table.Warnings), StringComparison.Ordinal);
    }

    [Fact]
    public void Both_gpt_headers_damaged_is_a_clear_corruption_error()
    {
        using var dir = new TempDir();
        string img = FixtureImages.CopyToTemp(Path.Combine(FixtureImages.Disks, "gpt.img"), dir);
        long last = new FileInfo(img).Length - 512;
        Damage(img, 512 + 40, 1);
        Damage(img, last + 40, 1);
        var e = Assert.Throws<XfsException>(() => ReadTable(img));
        Assert.Equal(XfsError.Corrupt, e.Error);
        Assert.Contains("both its headers are damaged", e.Message, StringComparison.Ordinal);
        Assert.Contains("gdisk", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Looping_ebr_chain_is_a_clear_corruption_error()
    {
        using var dir = new TempDir();
        string img = FixtureImages.CopyToTemp(Path.Combine(FixtureImages.Disks, "mbr.img"), dir);
        var mbr = ReadBytes(img, 0, 512);
        long extStart = BinaryPrimitives.ReadUInt32LittleEndian(mbr.AsSpan(446 + 2 * 16 + 8)) * 512L;
        var ebr1 = ReadBytes(img, extStart, 512);
        uint secondRel = BinaryPrimitives.ReadUInt32LittleEndian(ebr1.AsSpan(462 + 8));
        Assert.NotEqual(0u, secondRel);
        // Make the second EBR's link point at itself.
        var link = new byte[4];
        BinaryPrimitives.WriteUInt32LittleEndian(link, secondRel);
        Patch(img, extStart + secondRel * 512L + 462 + 4, [0x05]);
        Patch(img, extStart + secondRel * 512L + 462 + 8, link);
        var e = Assert.Throws<XfsException>(() => ReadTable(img));
        Assert.Equal(XfsError.Corrupt, e.Error);
        Assert.Contains("loops back", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Partition_device_is_a_bounds_checked_window()
    {
        string img = Path.Combine(FixtureImages.Disks, "gpt.img");
        using var dev = PartitionSpec.Open(img + "@2");
        var table = ReadTable(img);
        var p2 = table.Get(2);
        Assert.Equal(p2.LengthBytes, dev.Length);
        var head = new byte[512];
        dev.Read(0, head);
        Assert.Equal("XFSB"u8.ToArray(), head[..4]);
        var e = Assert.Throws<XfsException>(() => dev.Read(dev.Length - 256, new byte[512]));
        Assert.Equal(XfsError.IoError, e.Error);
        Assert.Throws<XfsException>(() => dev.Read(-512, new byte[512]));
    }

    [Fact]
    public void Missing_partition_number_lists_the_existing_ones()
    {
        var e = Assert.Throws<XfsException>(() => PartitionSpec.Open(Path.Combine(FixtureImages.Disks, "gpt.img") + "@3"));
        Assert.Equal(XfsError.NotFound, e.Error);
        Assert.Contains("no partition 3", e.Message, StringComparison.Ordinal);
        Assert.Contains("1, 2, 4", e.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("disk.img@2", "disk.img", 2)]
    [InlineData("/dev/sdb@5", "/dev/sdb", 5)]
    [InlineData("disk.img", "disk.img", null)]
    [InlineData("/mnt/a@b/disk.img", "/mnt/a@b/disk.img", null)]
    [InlineData("user@host.img", "user@host.img", null)]
    [InlineData("a@1@3", "a@1", 3)]
    [InlineData("@2", "@2", null)]
    [InlineData("disk@", "disk@", null)]
    [InlineData(@"\\.\PhysicalDrive2@1", @"\\.\PhysicalDrive2", 1)]
    [InlineData(@"\\.\PhysicalDrive0", @"\\.\PhysicalDrive0", null)]
    public void PartitionSpec_splits_a_trailing_partition_number(string source, string path, int? partition)
    {
        Assert.Equal((path, partition), PartitionSpec.Parse(source));
    }

    /// <summary>
    /// Windows disks and volumes are devices (mkfs writes them in place instead of making an image file; grow asks them
    /// for their size again), whatever the platform the rule is asked on; file paths are not.
    /// </summary>
    [Theory]
    [InlineData(@"\\.\PhysicalDrive2", true)]
    [InlineData(@"\\.\PhysicalDrive12", true)]
    [InlineData(@"\\.\E:", true)]
    [InlineData(@"\\?\Volume{0b5e6a2e-0000-0000-0000-100000000000}\", true)]
    [InlineData(@"\\.\", false)]
    [InlineData(@"\\server\share\disk.img", false)]
    [InlineData(@"\\?\C:\images\disk.img", false)]
    [InlineData(@"C:\images\disk.img", false)]
    [InlineData("/dev/sdb", false)]
    [InlineData("disk.img", false)]
    public void Windows_device_paths_are_told_from_files(string path, bool device)
    {
        Assert.Equal(device, DeviceRangeOps.IsWindowsDevicePath(path));
    }

    [Theory]
    [InlineData("disk.img@0")]
    [InlineData("disk.img@99999999")]
    public void PartitionSpec_rejects_out_of_range_numbers(string source)
    {
        var e = Assert.Throws<XfsException>(() => PartitionSpec.Parse(source));
        Assert.Equal(XfsError.InvalidArgument, e.Error);
    }

    private static void Patch(string path, long offset, byte[] bytes)
    {
        using var f = new FileStream(path, FileMode.Open, FileAccess.ReadWrite);
        f.Position = offset;
        f.Write(bytes);
    }

    /// <summary>Flips every bit of <paramref name="count"/> bytes.</summary>
    private static void Damage(string path, long offset, int count)
    {
        var bytes = ReadBytes(path, offset, count);
        for (int i = 0; i < count; i++) bytes[i] ^= 0xFF;
        Patch(path, offset, bytes);
    }

    private static byte[] ReadBytes(string path, long offset, int count)
    {
        using var f = File.OpenRead(path);
        f.Position = offset;
        var b = new byte[count];
        f.ReadExactly(b);
        return b;
    }
}

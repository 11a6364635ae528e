using System.Buffers.Binary;
using System.Text;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Mkfs;

/// <summary>
/// What a target already holds, found by the signatures blkid also reads: an XFS superblock (with its
/// label), ext2/3/4, NTFS, FAT, a GPT or MBR partition table. mkfs refuses to overwrite any of them
/// without -f.
/// </summary>
public static class ExistingContent
{
    /// <summary>A description of what the first 64 KiB hold ("an XFS file system labelled 'data'"), or null when nothing is recognised.</summary>
    public static string? Identify(IBlockDevice device)
    {
        ArgumentNullException.ThrowIfNull(device);
        int len = (int)Math.Min(device.Length, 64 * 1024);
        if (len < 512) return null;
        var b = new byte[len];
        device.Read(0, b);
        return Identify(b);
    }

    public static string? Identify(ReadOnlySpan<byte> b)
    {
        if (b.Length >= 512 && BinaryPrimitives.ReadUInt32BigEndian(b) == SuperblockView.Magic)
        {
            var fname = b.Slice(SuperblockView.OffFname, 12);
            int nul = fname.IndexOf((byte)0);
            string label = Encoding.UTF8.GetString(nul < 0 ? fname : fname[..nul]);
            return label.Length > 0 ? $"an XFS file system labelled '{label}'" : "an XFS file system";
        }
        // ext2/3/4: superblock at 1024, magic 0xEF53 at offset 56; features tell the generation.
        if (b.Length >= 2048 && BinaryPrimitives.ReadUInt16LittleEndian(b[(1024 + 56)..]) == 0xEF53)
        {
            uint compat = BinaryPrimitives.ReadUInt32LittleEndian(b[(1024 + 92)..]);
            uint incompat = BinaryPrimitives.ReadUInt32LittleEndian(b[(1024 + 96)..]);
            string kind = (incompat & 0x2C0) != 0 ? "ext4" : (compat & 0x4) != 0 ? "ext3" : "ext2";
            var name = b.Slice(1024 + 120, 16);
            int nul = name.IndexOf((byte)0);
            string label = Encoding.UTF8.GetString(nul < 0 ? name : name[..nul]);
            return label.Length > 0 ? $"an {kind} file system labelled '{label}'" : $"an {kind} file system";
        }
        if (b.Length >= 512 && b.Slice(3, 8).SequenceEqual("NTFS    "u8)) return "an NTFS file system";
        if (b.Length >= 1024 && b.Slice(512, 8).SequenceEqual("EFI PART"u8)) return "a GPT partition table";
        if (b.Length >= 512 && (b.Slice(54, 5).SequenceEqual("FAT12"u8) || b.Slice(54, 5).SequenceEqual("FAT16"u8) || b.Slice(82, 5).SequenceEqual("FAT32"u8)))
        {
            // The boot sector's volume label: 11 bytes at 43 (FAT12/16) or 71 (FAT32), space-padded; "NO NAME" when unset.
            string label = Encoding.ASCII.GetString(b.Slice(b.Slice(82, 5).SequenceEqual("FAT32"u8) ? 71 : 43, 11)).TrimEnd(' ', '\0');
            return label.Length > 0 && label != "NO NAME" ? $"a FAT file system labelled '{label}'" : "a FAT file system";
        }
        if (b.Length >= 512 && b.Slice(3, 8).SequenceEqual("EXFAT   "u8)) return "an exFAT file system";
        if (b.Length >= 512 && b[510] == 0x55 && b[511] == 0xAA)
        {
            for (int i = 0; i < 4; i++)
            {
                var entry = b.Slice(446 + 16 * i, 16);
                if (entry[4] != 0 && BinaryPrimitives.ReadUInt32LittleEndian(entry[12..]) != 0) return "an MBR partition table";
            }
        }
        return null;
    }
}

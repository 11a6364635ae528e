using System.Buffers.Binary;
using System.Text;

namespace XfsWin.Device;

/// <summary>What kind of partition table a disk carries.</summary>
public enum PartitionTableKind
{
    /// <summary>No partition table: the device is (probably) a bare volume.</summary>
    None,
    Mbr,
    Gpt,
}

/// <summary>
/// One partition, numbered as Linux numbers it: MBR primaries 1-4, logical partitions 5 and up
/// in EBR chain order; GPT partitions by their slot in the entry array (first slot = 1).
/// </summary>
public sealed record PartitionEntry
{
    public required int Number { get; init; }
    public required long StartByte { get; init; }
    public required long LengthBytes { get; init; }
    /// <summary>MBR system id (0x83 Linux, 0x05 extended, ...); null on GPT.</summary>
    public byte? MbrType { get; init; }
    /// <summary>GPT partition type GUID; null on MBR.</summary>
    public Guid? TypeGuid { get; init; }
    /// <summary>GPT unique partition GUID; null on MBR.</summary>
    public Guid? UniqueGuid { get; init; }
    /// <summary>GPT partition name (UTF-16 in the table), or "" on MBR.</summary>
    public string Name { get; init; } = "";
    /// <summary>MBR active flag (0x80).</summary>
    public bool Bootable { get; init; }
    /// <summary>An MBR extended partition: a container of logical partitions, never a volume.</summary>
    public bool IsExtendedContainer { get; init; }
    /// <summary>True when the partition starts with an XFS superblock magic ("XFSB").</summary>
    public bool HoldsXfs { get; init; }
    /// <summary>Why this entry cannot be used (extends past the end of the disk, ...), or null.</summary>
    public string? Problem { get; init; }

    public long EndByte => StartByte + LengthBytes;

    /// <summary>A short human name for the partition type.</summary>
    public string TypeDescription => MbrType is byte t
        ? $"{PartitionTable.MbrTypeName(t)} (0x{t:x2})"
        : PartitionTable.GptTypeName(TypeGuid ?? Guid.Empty);
}

/// <summary>
/// MBR and GPT partition tables, parsed from sectors read through <see cref="IBlockDevice"/>.
/// Pure parsing: no I/O except reading the table sectors and the first sector of each partition.
/// </summary>
public sealed class PartitionTable
{
    private const int MaxLogicalPartitions = 256;
    private const uint MaxGptEntries = 4096;
    private static readonly byte[] XfsMagic = "XFSB"u8.ToArray();
    private static readonly byte[] GptSignature = "EFI PART"u8.ToArray();

    public static readonly Guid GptLinuxFilesystem = new("0fc63daf-8483-4772-8e79-3d69d8477de4");
    public static readonly Guid GptEfiSystem = new("c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
    public static readonly Guid GptMicrosoftBasicData = new("ebd0a0a2-b9e5-4433-87c0-68b6b72699c7");
    public static readonly Guid GptLinuxSwap = new("0657fd6d-a4ab-43c4-84e5-0933c84b4f4f");
    public static readonly Guid GptLinuxLvm = new("e6d6d379-f507-44c2-a23c-238f2a3df928");
    public static readonly Guid GptLinuxRaid = new("a19d880f-05fc-4d3b-a006-743f0f84911e");
    public static readonly Guid GptBiosBoot = new("21686148-6449-6e6f-744e-656564454649");

    private PartitionTable(PartitionTableKind kind, int sectorSize, IReadOnlyList<PartitionEntry> entries,
        IReadOnlyList<string> warnings, Guid? diskGuid, uint? mbrSignature, bool wholeDeviceIsXfs)
    {
        Kind = kind;
        SectorSize = sectorSize;
        Entries = entries;
        Warnings = warnings;
        DiskGuid = diskGuid;
        MbrDiskSignature = mbrSignature;
        WholeDeviceIsXfs = wholeDeviceIsXfs;
    }

    public PartitionTableKind Kind { get; }

    /// <summary>The logical sector size the table's LBAs are counted in (512 or 4096).</summary>
    public int SectorSize { get; }

    /// <summary>Partitions in number order. MBR extended containers are included (flagged).</summary>
    public IReadOnlyList<PartitionEntry> Entries { get; }

    /// <summary>Things the user should know (backup GPT header used, ...).</summary>
    public IReadOnlyList<string> Warnings { get; }

    public Guid? DiskGuid { get; }

    public uint? MbrDiskSignature { get; }

    /// <summary>True when the device itself starts with an XFS superblock (a bare volume, no table).</summary>
    public bool WholeDeviceIsXfs { get; }

    /// <summary>The partition with this number, or an error that lists the ones that exist.</summary>
    public PartitionEntry Get(int number)
    {
        foreach (var e in Entries)
        {
            if (e.Number == number)
            {
                if (e.IsExtendedContainer)
                    throw new XfsException(XfsError.InvalidArgument,
                        $"partition {number} is an MBR extended partition (a container of logical partitions 5 and up), not a volume. " +
                        $"Choose one of: {ListNumbers()}.");
                if (e.Problem is not null)
                    throw new XfsException(XfsError.Corrupt, $"partition {number} cannot be used: {e.Problem}");
                return e;
            }
        }
        string what = Kind == PartitionTableKind.None
            ? "the source has no partition table (no MBR or GPT); open it without a partition number"
            : $"there is no partition {number} in its {Kind.ToString().ToUpperInvariant()} table; partitions: {ListNumbers()}";
        throw new XfsException(XfsError.NotFound, what + ". `xfswin info DISK` lists the partitions.");
    }

    private string ListNumbers()
    {
        var usable = Entries.Where(e => !e.IsExtendedContainer).Select(e => e.Number.ToString()).ToList();
        return usable.Count == 0 ? "(none)" : string.Join(", ", usable);
    }

    /// <summary>Reads the partition table of a disk or disk image.</summary>
    /// <param name="disk">The whole disk.</param>
    /// <param name="mbrSectorSize">Sector size MBR LBAs are counted in; default: the device's logical sector size.
    /// GPT finds its own sector size (512 or 4096) from where the header sits.</param>
    /// <exception cref="XfsException">Corrupt: the table is present but inconsistent (bad GPT CRCs with no good backup, EBR loops).</exception>
    public static PartitionTable Read(IBlockDevice disk, int? mbrSectorSize = null)
    {
        ArgumentNullException.ThrowIfNull(disk);
        var warnings = new List<string>();
        if (disk.Length < 512)
            return new PartitionTable(PartitionTableKind.None, 512, [], warnings, null, null, false);

        var first = new byte[512];
        disk.Read(0, first);
        bool wholeXfs = first.AsSpan(0, 4).SequenceEqual(XfsMagic);
        if (wholeXfs || BinaryPrimitives.ReadUInt16LittleEndian(first.AsSpan(510)) != 0xAA55)
            return new PartitionTable(PartitionTableKind.None, 512, [], warnings, null, null, wholeXfs);

        var primaries = new (byte Status, byte Type, uint Lba, uint Count)[4];
        bool protective = false;
        for (int i = 0; i < 4; i++)
        {
            var e = first.AsSpan(446 + 16 * i, 16);
            primaries[i] = (e[0], e[4], BinaryPrimitives.ReadUInt32LittleEndian(e[8..]), BinaryPrimitives.ReadUInt32LittleEndian(e[12..]));
            if (e[4] == 0xEE) protective = true;
        }
        // A boot sector of a bare FAT/NTFS volume also ends in 55 AA; a table has sane status bytes.
        if (primaries.Any(p => p.Status != 0 && p.Status != 0x80))
            return new PartitionTable(PartitionTableKind.None, 512, [], warnings, null, null, false);

        if (protective)
            return ReadGpt(disk, warnings);

        int sector = mbrSectorSize ?? (disk.SectorSize is 512 or 4096 ? disk.SectorSize : 512);
        return ReadMbr(disk, sector, primaries, BinaryPrimitives.ReadUInt32LittleEndian(first.AsSpan(440)), warnings);
    }

    private static bool IsExtendedType(byte type) => type is 0x05 or 0x0F or 0x85;

    private static PartitionTable ReadMbr(IBlockDevice disk, int sector, (byte Status, byte Type, uint Lba, uint Count)[] primaries,
        uint signature, List<string> warnings)
    {
        var entries = new List<PartitionEntry>();
        (long Start, long Length)? extended = null;
        for (int i = 0; i < 4; i++)
        {
            var p = primaries[i];
            if (p.Type == 0 || p.Count == 0) continue;
            long start = (long)p.Lba * sector, length = (long)p.Count * sector;
            bool isExt = IsExtendedType(p.Type);
            if (isExt)
            {
                if (extended is not null)
                    warnings.Add($"partition {i + 1} is a second extended partition; Linux ignores it and so do we");
                else
                    extended = (start, length);
            }
            entries.Add(MakeEntry(disk, i + 1, start, length, isExt) with
            {
                MbrType = p.Type,
                Bootable = p.Status == 0x80,
            });
        }

        if (extended is (long extStart, long extLength))
            ReadLogicals(disk, sector, extStart, extLength, entries);

        return new PartitionTable(PartitionTableKind.Mbr, sector, entries, warnings, null, signature, false);
    }

    /// <summary>
    /// Walks the EBR chain. Each EBR's first entry is a logical partition relative to that EBR;
    /// its second entry links to the next EBR relative to the start of the extended partition.
    /// </summary>
    private static void ReadLogicals(IBlockDevice disk, int sector, long extStart, long extLength, List<PartitionEntry> entries)
    {
        var seen = new HashSet<long>();
        var ebr = new byte[512];
        long ebrOffset = extStart;
        int number = 5;
        for (int hops = 0; ; hops++)
        {
            if (hops >= MaxLogicalPartitions)
                throw new XfsException(XfsError.Corrupt, $"the MBR extended partition chain is longer than {MaxLogicalPartitions} links: the table is corrupt. Repair it with fdisk or testdisk.");
            if (!seen.Add(ebrOffset))
                throw new XfsException(XfsError.Corrupt, $"the MBR extended partition chain loops back to the EBR at byte {ebrOffset}: the table is corrupt. Repair it with fdisk or testdisk.");
            if (ebrOffset + 512 > disk.Length)
                throw new XfsException(XfsError.Corrupt, $"an extended boot record (EBR) at byte {ebrOffset} lies past the end of the disk ({disk.Length} bytes): the image is truncated or the table is corrupt.");
            disk.Read(ebrOffset, ebr);
            if (BinaryPrimitives.ReadUInt16LittleEndian(ebr.AsSpan(510)) != 0xAA55)
            {
                // Linux stops quietly at a link without a signature; an empty extended partition looks like this.
                if (hops == 0) return;
                throw new XfsException(XfsError.Corrupt, $"the extended boot record (EBR) at byte {ebrOffset} has no 55 AA signature: the logical partition chain is broken. Repair it with fdisk or testdisk.");
            }
            var data = ebr.AsSpan(446, 16);
            var link = ebr.AsSpan(462, 16);
            byte type = data[4];
            uint rel = BinaryPrimitives.ReadUInt32LittleEndian(data[8..]);
            uint count = BinaryPrimitives.ReadUInt32LittleEndian(data[12..]);
            if (type != 0 && count != 0 && !IsExtendedType(type))
            {
                long start = ebrOffset + (long)rel * sector;
                long length = (long)count * sector;
                var e = MakeEntry(disk, number++, start, length, false) with { MbrType = type, Bootable = data[0] == 0x80 };
                if (e.Problem is null && (start < extStart || e.EndByte > extStart + extLength))
                    e = e with { Problem = "the logical partition lies outside its extended partition" };
                entries.Add(e);
            }
            byte linkType = link[4];
            uint linkRel = BinaryPrimitives.ReadUInt32LittleEndian(link[8..]);
            if (!IsExtendedType(linkType) || linkRel == 0) return;
            ebrOffset = extStart + (long)linkRel * sector;
        }
    }

    private static PartitionEntry MakeEntry(IBlockDevice disk, int number, long start, long length, bool container)
    {
        string? problem = null;
        bool xfs = false;
        if (start >= disk.Length || length > disk.Length - start)
        {
            problem = $"it spans bytes {start}..{start + length} but the disk is only {disk.Length} bytes (truncated image?)";
        }
        else if (!container && length >= 512)
        {
            Span<byte> head = stackalloc byte[512];
            disk.Read(start, head);
            xfs = head[..4].SequenceEqual(XfsMagic);
        }
        return new PartitionEntry
        {
            Number = number,
            StartByte = start,
            LengthBytes = length,
            IsExtendedContainer = container,
            HoldsXfs = xfs,
            Problem = problem,
        };
    }

    private static PartitionTable ReadGpt(IBlockDevice disk, List<string> warnings)
    {
        var problems = new List<string>();
        foreach (int sector in new[] { 512, 4096 })
        {
            if (disk.Length < 2L * sector) continue;
            var header = new byte[sector];
            disk.Read(sector, header);
            if (!header.AsSpan(0, 8).SequenceEqual(GptSignature)) continue;

            long lastLba = disk.Length / sector - 1;
            var primary = TryGptHeader(disk, sector, header, expectedLba: 1, out var primaryError);
            if (primary is not null)
            {
                if (!GptBackupLooksValid(disk, sector, primary.Value.AlternateLba, lastLba))
                    warnings.Add("the backup GPT header at the end of the disk is missing or damaged (the image may be truncated); the primary header is fine. `sgdisk -e` rewrites it.");
                return BuildGpt(disk, sector, primary.Value, warnings);
            }
            problems.Add($"primary GPT header: {primaryError}");

            // The primary is damaged: the backup sits in the last sector (or where the primary said).
            var candidates = new List<long> { lastLba };
            long alt = (long)BinaryPrimitives.ReadUInt64LittleEndian(header.AsSpan(32));
            if (alt > 1 && alt <= lastLba && alt != lastLba) candidates.Add(alt);
            foreach (long lba in candidates)
            {
                var backupBytes = new byte[sector];
                disk.Read(lba * sector, backupBytes);
                var backup = TryGptHeader(disk, sector, backupBytes, expectedLba: lba, out var backupError);
                if (backup is not null)
                {
                    warnings.Add($"the primary GPT header is damaged ({primaryError}); using the backup header at LBA {lba}. Repair the table with `sgdisk -e` or gdisk's recovery menu.");
                    return BuildGpt(disk, sector, backup.Value, warnings);
                }
                problems.Add($"backup GPT header at LBA {lba}: {backupError}");
            }
            throw new XfsException(XfsError.Corrupt,
                $"the disk has a GPT partition table but both its headers are damaged ({string.Join("; ", problems)}). " +
                "Try gdisk's recovery menu or testdisk, or give the byte offset of the volume another way.");
        }

        // Protective MBR without a primary header at either sector size: try the backup in the last sector.
        foreach (int sector in new[] { 512, 4096 })
        {
            long lastLba = disk.Length / sector - 1;
            if (lastLba < 2) continue;
            var bytes = new byte[sector];
            disk.Read(lastLba * sector, bytes);
            if (!bytes.AsSpan(0, 8).SequenceEqual(GptSignature)) continue;
            var backup = TryGptHeader(disk, sector, bytes, lastLba, out var err);
            if (backup is not null)
            {
                warnings.Add($"the primary GPT header is missing; using the backup header at LBA {lastLba}. Repair the table with `sgdisk -e` or gdisk's recovery menu.");
                return BuildGpt(disk, sector, backup.Value, warnings);
            }
            problems.Add($"backup GPT header at LBA {lastLba}: {err}");
        }
        throw new XfsException(XfsError.Corrupt,
            "the disk has a protective MBR (type 0xEE) but no valid GPT header" +
            (problems.Count > 0 ? $" ({string.Join("; ", problems)})" : " at LBA 1 or at the end of the disk") +
            ". Try gdisk's recovery menu or testdisk to rebuild the table.");
    }

    private readonly record struct GptHeader(long MyLba, long AlternateLba, long FirstUsable, long LastUsable, Guid DiskGuid,
        long EntriesLba, uint EntryCount, uint EntrySize, byte[] EntryArray);

    private static bool GptBackupLooksValid(IBlockDevice disk, int sector, long alternateLba, long lastLba)
    {
        if (alternateLba < 2 || alternateLba > lastLba) return false;
        var bytes = new byte[sector];
        disk.Read(alternateLba * sector, bytes);
        return TryGptHeader(disk, sector, bytes, alternateLba, out _) is not null;
    }

    private static GptHeader? TryGptHeader(IBlockDevice disk, int sector, byte[] h, long expectedLba, out string error)
    {
        error = "";
        if (!h.AsSpan(0, 8).SequenceEqual(GptSignature)) { error = "no \"EFI PART\" signature"; return null; }
        uint headerSize = BinaryPrimitives.ReadUInt32LittleEndian(h.AsSpan(12));
        if (headerSize < 92 || headerSize > sector) { error = $"header size {headerSize} is not between 92 and {sector}"; return null; }
        uint storedCrc = BinaryPrimitives.ReadUInt32LittleEndian(h.AsSpan(16));
        var copy = h.AsSpan(0, (int)headerSize).ToArray();
        copy.AsSpan(16, 4).Clear();
        uint crc = Crc32.Compute(copy);
        if (crc != storedCrc) { error = $"header CRC32 mismatch (stored 0x{storedCrc:x8}, computed 0x{crc:x8})"; return null; }
        long myLba = (long)BinaryPrimitives.ReadUInt64LittleEndian(h.AsSpan(24));
        if (myLba != expectedLba) { error = $"header says it lives at LBA {myLba}, found at LBA {expectedLba}"; return null; }
        long alternate = (long)BinaryPrimitives.ReadUInt64LittleEndian(h.AsSpan(32));
        long firstUsable = (long)BinaryPrimitives.ReadUInt64LittleEndian(h.AsSpan(40));
        long lastUsable = (long)BinaryPrimitives.ReadUInt64LittleEndian(h.AsSpan(48));
        var diskGuid = new Guid(h.AsSpan(56, 16));
        long entriesLba = (long)BinaryPrimitives.ReadUInt64LittleEndian(h.AsSpan(72));
        uint count = BinaryPrimitives.ReadUInt32LittleEndian(h.AsSpan(80));
        uint size = BinaryPrimitives.ReadUInt32LittleEndian(h.AsSpan(84));
        uint arrayCrc = BinaryPrimitives.ReadUInt32LittleEndian(h.AsSpan(88));
        if (size < 128 || (size & (size - 1)) != 0 || size > 4096) { error = $"partition entry size {size} is not a power of two between 128 and 4096"; return null; }
        if (count == 0 || count > MaxGptEntries) { error = $"partition entry count {count} is out of range (1..{MaxGptEntries})"; return null; }
        long arrayBytes = (long)count * size;
        long arrayStart = entriesLba * sector;
        if (entriesLba < 2 && expectedLba == 1 || arrayStart < 0 || arrayStart + arrayBytes > disk.Length)
        {
            error = $"the partition entry array at LBA {entriesLba} ({arrayBytes} bytes) lies outside the disk";
            return null;
        }
        var array = new byte[arrayBytes];
        disk.Read(arrayStart, array);
        uint computedArray = Crc32.Compute(array);
        if (computedArray != arrayCrc) { error = $"partition entry array CRC32 mismatch (stored 0x{arrayCrc:x8}, computed 0x{computedArray:x8})"; return null; }
        return new GptHeader(myLba, alternate, firstUsable, lastUsable, diskGuid, entriesLba, count, size, array);
    }

    private static PartitionTable BuildGpt(IBlockDevice disk, int sector, GptHeader header, List<string> warnings)
    {
        var entries = new List<PartitionEntry>();
        for (int i = 0; i < header.EntryCount; i++)
        {
            var e = header.EntryArray.AsSpan(i * (int)header.EntrySize, (int)header.EntrySize);
            var type = new Guid(e[..16]);
            if (type == Guid.Empty) continue;
            var unique = new Guid(e.Slice(16, 16));
            long firstLba = (long)BinaryPrimitives.ReadUInt64LittleEndian(e[32..]);
            long lastLba = (long)BinaryPrimitives.ReadUInt64LittleEndian(e[40..]);
            string name = Encoding.Unicode.GetString(e.Slice(56, 72)).TrimEnd('\0');
            int nul = name.IndexOf('\0', StringComparison.Ordinal);
            if (nul >= 0) name = name[..nul];
            PartitionEntry entry;
            if (lastLba < firstLba || firstLba < 0 || lastLba >= long.MaxValue / sector)
            {
                entry = new PartitionEntry
                {
                    Number = i + 1, StartByte = Math.Max(0, firstLba) * sector, LengthBytes = 0,
                    Problem = $"its last LBA {lastLba} is before its first LBA {firstLba}",
                };
            }
            else
            {
                entry = MakeEntry(disk, i + 1, firstLba * sector, (lastLba - firstLba + 1) * sector, false);
            }
            entries.Add(entry with { TypeGuid = type, UniqueGuid = unique, Name = name });
        }
        return new PartitionTable(PartitionTableKind.Gpt, sector, entries, warnings, header.DiskGuid, null, false);
    }

    public static string MbrTypeName(byte type) => type switch
    {
        0x05 => "Extended",
        0x0F => "W95 Extended (LBA)",
        0x85 => "Linux extended",
        0x07 => "HPFS/NTFS/exFAT",
        0x0B => "W95 FAT32",
        0x0C => "W95 FAT32 (LBA)",
        0x0E => "W95 FAT16 (LBA)",
        0x82 => "Linux swap",
        0x83 => "Linux",
        0x8E => "Linux LVM",
        0xEE => "GPT protective",
        0xEF => "EFI System",
        0xFD => "Linux raid autodetect",
        _ => "Unknown",
    };

    public static string GptTypeName(Guid type)
    {
        if (type == GptLinuxFilesystem) return "Linux filesystem";
        if (type == GptEfiSystem) return "EFI System";
        if (type == GptMicrosoftBasicData) return "Microsoft basic data";
        if (type == GptLinuxSwap) return "Linux swap";
        if (type == GptLinuxLvm) return "Linux LVM";
        if (type == GptLinuxRaid) return "Linux RAID";
        if (type == GptBiosBoot) return "BIOS boot";
        return type.ToString();
    }

    /// <summary>CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) as GPT uses it.</summary>
    internal static class Crc32
    {
        private static readonly uint[] Table = BuildTable();

        private static uint[] BuildTable()
        {
            var t = new uint[256];
            for (uint i = 0; i < 256; i++)
            {
                uint c = i;
                for (int k = 0; k < 8; k++) c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
                t[i] = c;
            }
            return t;
        }

        public static uint Compute(ReadOnlySpan<byte> data)
        {
            uint c = 0xFFFFFFFFu;
            foreach (byte b in data) c = Table[(c ^ b) & 0xFF] ^ (c >> 8);
            return ~c;
        }
    }
}

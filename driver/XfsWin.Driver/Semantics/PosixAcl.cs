using System.Buffers.Binary;

namespace XfsWin.Driver.Semantics;

/// <summary>POSIX ACL entry tags (Linux acl.h values, also used on disk by XFS).</summary>
public enum PosixAclTag : uint
{
    UserObj = 0x01,
    User = 0x02,
    GroupObj = 0x04,
    Group = 0x08,
    Mask = 0x10,
    Other = 0x20,
}

public readonly record struct PosixAclEntry(PosixAclTag Tag, uint Id, ushort Permissions);

/// <summary>
/// A POSIX access ACL as XFS stores it in the trusted attribute "SGI_ACL_FILE" (struct xfs_acl:
/// big-endian entry count, then 12-byte entries of tag, id, permission and padding).
/// </summary>
public sealed class PosixAcl
{
    public const int EntrySize = 12;
    public const int MaxEntries = 8191;

    public PosixAcl(IReadOnlyList<PosixAclEntry> entries) => Entries = entries;

    public IReadOnlyList<PosixAclEntry> Entries { get; }

    /// <summary>Parses an XFS on-disk ACL; throws <see cref="XfsException"/> (Corrupt) naming the problem.</summary>
    public static PosixAcl ParseXfs(ReadOnlySpan<byte> value)
    {
        if (value.Length < 4) throw Bad("shorter than its 4-byte count");
        uint count = BinaryPrimitives.ReadUInt32BigEndian(value);
        if (count > MaxEntries || value.Length != 4 + count * EntrySize)
            throw Bad($"count {count} does not match its {value.Length}-byte value");
        var entries = new PosixAclEntry[count];
        for (int i = 0; i < count; i++)
        {
            var e = value.Slice(4 + i * EntrySize, EntrySize);
            var tag = (PosixAclTag)BinaryPrimitives.ReadUInt32BigEndian(e);
            if (!Enum.IsDefined(tag)) throw Bad($"entry {i} has unknown tag 0x{(uint)tag:X}");
            entries[i] = new PosixAclEntry(tag, BinaryPrimitives.ReadUInt32BigEndian(e[4..]),
                (ushort)(BinaryPrimitives.ReadUInt16BigEndian(e[8..]) & 7));
        }
        return new PosixAcl(entries);
    }

    private static XfsException Bad(string problem) =>
        new(XfsError.Corrupt, $"POSIX ACL attribute SGI_ACL_FILE is malformed: {problem}. Run xfs_repair, or remove the ACL with setfacl -b from Linux.");
}

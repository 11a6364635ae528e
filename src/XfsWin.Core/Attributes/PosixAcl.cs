using System.Buffers.Binary;

namespace XfsWin.Attributes;

/// <summary>POSIX ACL entry tags (the same numbers on disk in XFS and in Linux's acl.h).</summary>
public enum PosixAclTag : uint
{
    UserObj = 0x01,
    User = 0x02,
    GroupObj = 0x04,
    Group = 0x08,
    Mask = 0x10,
    Other = 0x20,
}

/// <summary>One ACL entry; <see cref="Id"/> is meaningful for <see cref="PosixAclTag.User"/> and <see cref="PosixAclTag.Group"/> only.</summary>
public readonly record struct PosixAclEntry(PosixAclTag Tag, uint Id, ushort Permissions);

/// <summary>
/// A POSIX ACL as XFS stores it in the trusted attributes SGI_ACL_FILE / SGI_ACL_DEFAULT (xfs_acl:
/// big-endian entry count, then 12-byte entries of tag, id, permissions and padding), and its
/// conversion to the value Linux's system.posix_acl_access / _default xattrs carry (little-endian
/// version 2 header, then 8-byte entries of tag, permissions, id). The one decoder every host uses.
/// </summary>
public sealed class PosixAcl
{
    public const int XfsEntrySize = 12;
    public const int LinuxEntrySize = 8;
    public const uint LinuxXattrVersion = 2;
    public const uint UndefinedId = uint.MaxValue;
    /// <summary>XFS_ACL_MAX_ENTRIES for the largest attribute value.</summary>
    public const int MaxEntries = 5461;

    public PosixAcl(IReadOnlyList<PosixAclEntry> entries) => Entries = entries;

    /// <summary>Entries in the order Linux requires (by tag, then id).</summary>
    public IReadOnlyList<PosixAclEntry> Entries { get; }

    /// <summary>Decodes an XFS on-disk ACL; false with the reason when it is malformed.</summary>
    public static bool TryParseXfs(ReadOnlySpan<byte> value, out PosixAcl? acl, out string problem)
    {
        acl = null;
        if (value.Length < 4)
        {
            problem = $"{value.Length} bytes, shorter than its 4-byte count";
            return false;
        }
        uint count = BinaryPrimitives.ReadUInt32BigEndian(value);
        if (count > MaxEntries || value.Length != 4 + (long)count * XfsEntrySize)
        {
            problem = $"count {count} does not match its {value.Length}-byte value";
            return false;
        }
        var entries = new PosixAclEntry[count];
        for (int i = 0; i < count; i++)
        {
            var e = value.Slice(4 + i * XfsEntrySize, XfsEntrySize);
            var tag = (PosixAclTag)BinaryPrimitives.ReadUInt32BigEndian(e);
            ushort perm = BinaryPrimitives.ReadUInt16BigEndian(e[8..]);
            if (!ValidEntry(i, tag, perm, out problem)) return false;
            uint id = tag is PosixAclTag.User or PosixAclTag.Group ? BinaryPrimitives.ReadUInt32BigEndian(e[4..]) : UndefinedId;
            entries[i] = new PosixAclEntry(tag, id, perm);
        }
        Array.Sort(entries, static (a, b) => a.Tag != b.Tag ? a.Tag.CompareTo(b.Tag) : a.Id.CompareTo(b.Id));
        acl = new PosixAcl(entries);
        problem = "";
        return true;
    }

    /// <summary>Decodes an XFS on-disk ACL; throws <see cref="XfsException"/> (Corrupt) naming the problem.</summary>
    public static PosixAcl ParseXfs(ReadOnlySpan<byte> value) =>
        TryParseXfs(value, out var acl, out var problem)
            ? acl!
            : throw new XfsException(XfsError.Corrupt,
                $"a stored POSIX ACL (SGI_ACL_FILE / SGI_ACL_DEFAULT) is malformed: {problem}. Run xfs_repair, or remove the ACL with setfacl -b from Linux.");

    /// <summary>The Linux xattr value for a stored XFS ACL, or null when it is malformed.</summary>
    public static byte[]? TryXfsToLinux(ReadOnlySpan<byte> value) =>
        TryParseXfs(value, out var acl, out _) ? acl!.ToLinuxXattr() : null;

    /// <summary>The Linux xattr value for a stored XFS ACL; throws when it is malformed.</summary>
    public static byte[] XfsToLinux(ReadOnlySpan<byte> value) => ParseXfs(value).ToLinuxXattr();

    /// <summary>
    /// Decodes the value of a system.posix_acl_* xattr as Linux's setxattr passes it (version 2
    /// header, 8-byte entries); false with the reason when it is malformed.
    /// </summary>
    public static bool TryParseLinux(ReadOnlySpan<byte> value, out PosixAcl? acl, out string problem)
    {
        acl = null;
        if (value.Length < 4 || (value.Length - 4) % LinuxEntrySize != 0)
        {
            problem = $"{value.Length} bytes is not a 4-byte header followed by {LinuxEntrySize}-byte entries";
            return false;
        }
        uint version = BinaryPrimitives.ReadUInt32LittleEndian(value);
        if (version != LinuxXattrVersion)
        {
            problem = $"version {version}, not {LinuxXattrVersion}";
            return false;
        }
        int count = (value.Length - 4) / LinuxEntrySize;
        if (count > MaxEntries)
        {
            problem = $"{count} entries, more than the {MaxEntries} XFS can store";
            return false;
        }
        var entries = new PosixAclEntry[count];
        for (int i = 0; i < count; i++)
        {
            var e = value.Slice(4 + i * LinuxEntrySize, LinuxEntrySize);
            var tag = (PosixAclTag)BinaryPrimitives.ReadUInt16LittleEndian(e);
            ushort perm = BinaryPrimitives.ReadUInt16LittleEndian(e[2..]);
            if (!ValidEntry(i, tag, perm, out problem)) return false;
            uint id = tag is PosixAclTag.User or PosixAclTag.Group ? BinaryPrimitives.ReadUInt32LittleEndian(e[4..]) : UndefinedId;
            entries[i] = new PosixAclEntry(tag, id, perm);
        }
        acl = new PosixAcl(entries);
        problem = "";
        return true;
    }

    /// <summary>The value XFS stores in SGI_ACL_FILE / SGI_ACL_DEFAULT (ids other than named users' and groups' are undefined).</summary>
    public byte[] ToXfs()
    {
        var bytes = new byte[4 + Entries.Count * XfsEntrySize];
        BinaryPrimitives.WriteUInt32BigEndian(bytes, (uint)Entries.Count);
        for (int i = 0; i < Entries.Count; i++)
        {
            var span = bytes.AsSpan(4 + i * XfsEntrySize);
            var e = Entries[i];
            BinaryPrimitives.WriteUInt32BigEndian(span, (uint)e.Tag);
            BinaryPrimitives.WriteUInt32BigEndian(span[4..], e.Tag is PosixAclTag.User or PosixAclTag.Group ? e.Id : UndefinedId);
            BinaryPrimitives.WriteUInt16BigEndian(span[8..], e.Permissions);
        }
        return bytes;
    }

    /// <summary>The system.posix_acl_* value Linux's getxattr/setxattr use.</summary>
    public byte[] ToLinuxXattr()
    {
        var bytes = new byte[4 + Entries.Count * LinuxEntrySize];
        BinaryPrimitives.WriteUInt32LittleEndian(bytes, LinuxXattrVersion);
        for (int i = 0; i < Entries.Count; i++)
        {
            var span = bytes.AsSpan(4 + i * LinuxEntrySize);
            BinaryPrimitives.WriteUInt16LittleEndian(span, (ushort)Entries[i].Tag);
            BinaryPrimitives.WriteUInt16LittleEndian(span[2..], Entries[i].Permissions);
            BinaryPrimitives.WriteUInt32LittleEndian(span[4..], Entries[i].Id);
        }
        return bytes;
    }

    /// <summary>
    /// posix_acl_create_masq: the access ACL a new inode with permission bits <paramref name="mode"/> gets from its
    /// directory's default ACL (this one): the owner, other and the mask (or, without one, the owning group) entries
    /// keep only the permissions the mode grants, and the mode keeps only what they grant. Returns the masked ACL and
    /// whether it says more than the mode bits (named entries or a mask: then it is stored), with the new mode (file
    /// type and setuid/setgid/sticky bits kept).
    /// </summary>
    public (PosixAcl Acl, bool NotEquivalent, ushort Mode) CreateMasq(ushort mode)
    {
        var entries = Entries.ToArray();
        int bits = mode & 0x1FF;
        int groupObj = -1, mask = -1;
        bool notEquivalent = false;
        for (int i = 0; i < entries.Length; i++)
        {
            var e = entries[i];
            switch (e.Tag)
            {
                case PosixAclTag.UserObj:
                    entries[i] = e with { Permissions = (ushort)(e.Permissions & ((bits >> 6) & 7)) };
                    bits &= (entries[i].Permissions << 6) | ~0x1C0;
                    break;
                case PosixAclTag.User or PosixAclTag.Group:
                    notEquivalent = true;
                    break;
                case PosixAclTag.GroupObj:
                    groupObj = i;
                    break;
                case PosixAclTag.Other:
                    entries[i] = e with { Permissions = (ushort)(e.Permissions & (bits & 7)) };
                    bits &= entries[i].Permissions | ~7;
                    break;
                case PosixAclTag.Mask:
                    mask = i;
                    notEquivalent = true;
                    break;
            }
        }
        int group = mask >= 0 ? mask : groupObj;
        if (group < 0) throw new XfsException(XfsError.Corrupt, $"a default ACL without a mask or owning-group entry ({ToText()}). Run xfs_repair.");
        entries[group] = entries[group] with { Permissions = (ushort)(entries[group].Permissions & ((bits >> 3) & 7)) };
        bits &= (entries[group].Permissions << 3) | ~0x38;
        return (new PosixAcl(entries), notEquivalent, (ushort)((mode & ~0x1FF) | (bits & 0x1FF)));
    }

    /// <summary>
    /// __posix_acl_chmod: this access ACL after a chmod to <paramref name="mode"/>: the owner and other entries take
    /// the mode's owner and other bits, the mask (or, without one, the owning group) the group bits; named entries stay.
    /// </summary>
    public PosixAcl Chmod(ushort mode)
    {
        var entries = Entries.ToArray();
        int group = -1, mask = -1;
        for (int i = 0; i < entries.Length; i++)
        {
            switch (entries[i].Tag)
            {
                case PosixAclTag.UserObj: entries[i] = entries[i] with { Permissions = (ushort)((mode >> 6) & 7) }; break;
                case PosixAclTag.Other: entries[i] = entries[i] with { Permissions = (ushort)(mode & 7) }; break;
                case PosixAclTag.GroupObj: group = i; break;
                case PosixAclTag.Mask: mask = i; break;
            }
        }
        int target = mask >= 0 ? mask : group;
        if (target < 0) throw new XfsException(XfsError.Corrupt, $"an access ACL without a mask or owning-group entry ({ToText()}). Run xfs_repair.");
        entries[target] = entries[target] with { Permissions = (ushort)((mode >> 3) & 7) };
        return new PosixAcl(entries);
    }

    /// <summary>Text as getfacl prints it with numeric ids ("user::rw-,user:1000:r--,...").</summary>
    public string ToText() => string.Join(",", Entries.Select(e =>
    {
        string perm = $"{((e.Permissions & 4) != 0 ? 'r' : '-')}{((e.Permissions & 2) != 0 ? 'w' : '-')}{((e.Permissions & 1) != 0 ? 'x' : '-')}";
        return e.Tag switch
        {
            PosixAclTag.UserObj => $"user::{perm}",
            PosixAclTag.User => $"user:{e.Id}:{perm}",
            PosixAclTag.GroupObj => $"group::{perm}",
            PosixAclTag.Group => $"group:{e.Id}:{perm}",
            PosixAclTag.Mask => $"mask::{perm}",
            _ => $"other::{perm}",
        };
    }));

    /// <summary>An entry's tag is one POSIX names and its permissions are at most rwx (both stored forms check the same).</summary>
    private static bool ValidEntry(int index, PosixAclTag tag, ushort perm, out string problem)
    {
        problem = "";
        if (tag is not (PosixAclTag.UserObj or PosixAclTag.User or PosixAclTag.GroupObj or PosixAclTag.Group or PosixAclTag.Mask or PosixAclTag.Other))
            problem = $"entry {index} has unknown tag 0x{(uint)tag:x}";
        else if (perm > 7)
            problem = $"entry {index} has permission bits 0x{perm:x} beyond rwx";
        return problem.Length == 0;
    }
}

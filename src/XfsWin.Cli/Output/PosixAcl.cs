using System.Buffers.Binary;

namespace XfsWin.Cli.Output;

/// <summary>
/// Converts a POSIX ACL from XFS's on-disk form (trusted.SGI_ACL_FILE / SGI_ACL_DEFAULT:
/// big-endian count, then 12-byte entries tag/id/perm/pad) to the value Linux's
/// system.posix_acl_access / _default xattrs take (little-endian version 2 header, then 8-byte
/// entries tag/perm/id), and back.
/// </summary>
public static class PosixAcl
{
    public const uint XattrVersion = 2;
    public const uint UndefinedId = 0xFFFFFFFF;
    private const int XfsEntrySize = 12;
    private const int LinuxEntrySize = 8;

    public const ushort TagUserObj = 0x01;
    public const ushort TagUser = 0x02;
    public const ushort TagGroupObj = 0x04;
    public const ushort TagGroup = 0x08;
    public const ushort TagMask = 0x10;
    public const ushort TagOther = 0x20;

    public readonly record struct Entry(ushort Tag, ushort Permissions, uint Id);

    /// <summary>Decodes the XFS on-disk ACL; throws <see cref="FormatException"/> when malformed.</summary>
    public static IReadOnlyList<Entry> DecodeXfs(ReadOnlySpan<byte> value)
    {
        if (value.Length < 4) throw new FormatException($"XFS ACL of {value.Length} bytes is shorter than its 4-byte count");
        uint count = BinaryPrimitives.ReadUInt32BigEndian(value);
        if (count > 25 * 1024 || value.Length != 4 + (long)count * XfsEntrySize)
            throw new FormatException($"XFS ACL claims {count} entries but holds {value.Length} bytes (expected {4 + (long)count * XfsEntrySize})");
        var list = new List<Entry>((int)count);
        for (int i = 0; i < count; i++)
        {
            var e = value.Slice(4 + i * XfsEntrySize, XfsEntrySize);
            uint tag = BinaryPrimitives.ReadUInt32BigEndian(e);
            uint id = BinaryPrimitives.ReadUInt32BigEndian(e[4..]);
            ushort perm = BinaryPrimitives.ReadUInt16BigEndian(e[8..]);
            if (tag is not (TagUserObj or TagUser or TagGroupObj or TagGroup or TagMask or TagOther))
                throw new FormatException($"XFS ACL entry {i} has unknown tag 0x{tag:x}");
            if (perm > 7) throw new FormatException($"XFS ACL entry {i} has permission bits 0x{perm:x} beyond rwx");
            bool named = tag is TagUser or TagGroup;
            list.Add(new Entry((ushort)tag, perm, named ? id : UndefinedId));
        }
        // Linux validates the order (by tag, then id); the kernel wrote them sorted, but be exact.
        list.Sort((a, b) => a.Tag != b.Tag ? a.Tag.CompareTo(b.Tag) : a.Id.CompareTo(b.Id));
        return list;
    }

    /// <summary>Encodes entries as the system.posix_acl_* xattr value Linux's setxattr expects.</summary>
    public static byte[] EncodeLinux(IReadOnlyList<Entry> entries)
    {
        var bytes = new byte[4 + entries.Count * LinuxEntrySize];
        BinaryPrimitives.WriteUInt32LittleEndian(bytes, XattrVersion);
        for (int i = 0; i < entries.Count; i++)
        {
            var span = bytes.AsSpan(4 + i * LinuxEntrySize);
            BinaryPrimitives.WriteUInt16LittleEndian(span, entries[i].Tag);
            BinaryPrimitives.WriteUInt16LittleEndian(span[2..], entries[i].Permissions);
            BinaryPrimitives.WriteUInt32LittleEndian(span[4..], entries[i].Id);
        }
        return bytes;
    }

    public static byte[] XfsToLinux(ReadOnlySpan<byte> xfsValue) => EncodeLinux(DecodeXfs(xfsValue));

    /// <summary>Text like getfacl prints (numeric ids), for stat and tests.</summary>
    public static string ToText(IReadOnlyList<Entry> entries) => string.Join(",", entries.Select(e =>
    {
        string perm = $"{((e.Permissions & 4) != 0 ? 'r' : '-')}{((e.Permissions & 2) != 0 ? 'w' : '-')}{((e.Permissions & 1) != 0 ? 'x' : '-')}";
        return e.Tag switch
        {
            TagUserObj => $"user::{perm}",
            TagUser => $"user:{e.Id}:{perm}",
            TagGroupObj => $"group::{perm}",
            TagGroup => $"group:{e.Id}:{perm}",
            TagMask => $"mask::{perm}",
            _ => $"other::{perm}",
        };
    }));
}

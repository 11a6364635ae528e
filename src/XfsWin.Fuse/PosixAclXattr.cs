using System.Buffers.Binary;

namespace XfsWin.Fuse;

/// <summary>
/// Converts a POSIX ACL as XFS stores it (trusted.SGI_ACL_FILE / SGI_ACL_DEFAULT: a big-endian
/// entry count, then 12-byte entries tag, id, permissions, padding) into the value Linux hands out
/// for system.posix_acl_access / _default (little-endian: version 2, then 8-byte entries tag,
/// permissions, id). The engine returns the stored bytes; this is presentation for the Linux VFS.
/// </summary>
internal static class PosixAclXattr
{
    private const int XfsHeaderSize = 4;
    private const int XfsEntrySize = 12;
    private const int LinuxHeaderSize = 4;
    private const int LinuxEntrySize = 8;
    private const uint LinuxVersion = 2;
    private const uint UndefinedId = uint.MaxValue;
    private const int MaxEntries = 1 << 14; // far above what any XFS ACL can hold

    // ACL entry tags, the same numbers on disk and in the Linux format.
    private const uint TagUser = 0x02;
    private const uint TagGroup = 0x08;

    /// <summary>The Linux xattr value, or null when <paramref name="stored"/> is not a well-formed XFS ACL.</summary>
    public static byte[]? FromXfs(ReadOnlySpan<byte> stored)
    {
        if (stored.Length < XfsHeaderSize)
            return null;
        var count = BinaryPrimitives.ReadUInt32BigEndian(stored);
        if (count > MaxEntries || stored.Length < XfsHeaderSize + (long)count * XfsEntrySize)
            return null;
        var result = new byte[LinuxHeaderSize + count * LinuxEntrySize];
        BinaryPrimitives.WriteUInt32LittleEndian(result, LinuxVersion);
        for (var i = 0; i < count; i++)
        {
            var e = stored.Slice(XfsHeaderSize + i * XfsEntrySize, XfsEntrySize);
            var tag = BinaryPrimitives.ReadUInt32BigEndian(e);
            var id = BinaryPrimitives.ReadUInt32BigEndian(e[4..]);
            var perm = BinaryPrimitives.ReadUInt16BigEndian(e[8..]);
            if (tag > ushort.MaxValue)
                return null;
            var o = result.AsSpan(LinuxHeaderSize + i * LinuxEntrySize, LinuxEntrySize);
            BinaryPrimitives.WriteUInt16LittleEndian(o, (ushort)tag);
            BinaryPrimitives.WriteUInt16LittleEndian(o[2..], perm);
            BinaryPrimitives.WriteUInt32LittleEndian(o[4..], tag is TagUser or TagGroup ? id : UndefinedId);
        }
        return result;
    }
}

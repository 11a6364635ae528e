using System.Buffers.Binary;

namespace XfsWin.Driver.Semantics;

/// <summary>
/// Windows extended attributes (FILE_FULL_EA_INFORMATION: ULONG NextEntryOffset, UCHAR Flags,
/// UCHAR EaNameLength, USHORT EaValueLength, then the NUL-terminated name and the value; entries
/// 4-byte aligned, the last one's NextEntryOffset 0), packed as FspFileSystemAddEa does.
/// XFS "user.NAME" attributes appear as EA "NAME" when NAME is a valid EA name.
/// </summary>
public static class ExtendedAttributes
{
    public const int HeaderSize = 8;
    public const int MaxNameLength = 254;
    public const int MaxValueLength = 65535;

    /// <summary>
    /// EA names are 1..254 bytes of printable ASCII without the characters FAT/NTFS refuse in EA names.
    /// Other user xattrs stay invisible to Windows (they are still on the volume).
    /// </summary>
    public static bool IsValidEaName(ReadOnlySpan<byte> name)
    {
        if (name.Length is 0 or > MaxNameLength) return false;
        foreach (byte b in name)
            if (b is < 0x20 or >= 0x7F || "\"*+,/:;<=>?[\\]|".Contains((char)b)) return false;
        return true;
    }

    /// <summary>What FILE_EA_INFORMATION.EaSize counts for one EA (FspFileSystemGetEaPackedSize).</summary>
    public static uint PackedSize(int nameLength, int valueLength) => (uint)(5 + nameLength + valueLength);

    /// <summary>
    /// Appends one EA at the 4-aligned end of <paramref name="buffer"/>; false when it does not fit.
    /// Call <see cref="Finish"/> after the last one.
    /// </summary>
    public static bool Append(Span<byte> buffer, ref int bytesTransferred, ReadOnlySpan<byte> name, ReadOnlySpan<byte> value, byte flags = 0)
    {
        int start = (bytesTransferred + 3) & ~3;
        int length = HeaderSize + name.Length + 1 + value.Length;
        if (start + length > buffer.Length) return false;
        var e = buffer.Slice(start, length);
        BinaryPrimitives.WriteUInt32LittleEndian(e, (uint)((length + 3) & ~3));
        e[4] = flags;
        e[5] = (byte)name.Length;
        BinaryPrimitives.WriteUInt16LittleEndian(e[6..], (ushort)value.Length);
        name.CopyTo(e[HeaderSize..]);
        e[HeaderSize + name.Length] = 0;
        value.CopyTo(e[(HeaderSize + name.Length + 1)..]);
        bytesTransferred = start + length;
        return true;
    }

    /// <summary>Zeroes the NextEntryOffset of the last entry.</summary>
    public static void Finish(Span<byte> buffer, int bytesTransferred)
    {
        if (bytesTransferred < HeaderSize) return;
        int p = 0;
        while (true)
        {
            int next = (int)BinaryPrimitives.ReadUInt32LittleEndian(buffer[p..]);
            if (next == 0 || p + next >= bytesTransferred) break;
            p += next;
        }
        BinaryPrimitives.WriteUInt32LittleEndian(buffer[p..], 0);
    }

    /// <summary>Reads a packed EA list back (tests, diagnostics).</summary>
    public static List<(string Name, byte[] Value, byte Flags)> Parse(ReadOnlySpan<byte> buffer)
    {
        var list = new List<(string, byte[], byte)>();
        int p = 0;
        while (buffer.Length - p >= HeaderSize)
        {
            var e = buffer[p..];
            int nameLength = e[5], valueLength = BinaryPrimitives.ReadUInt16LittleEndian(e[6..]);
            if (HeaderSize + nameLength + 1 + valueLength > e.Length || e[HeaderSize + nameLength] != 0)
                throw new FormatException($"EA at {p} runs past the buffer or lacks its NUL");
            list.Add((System.Text.Encoding.ASCII.GetString(e.Slice(HeaderSize, nameLength)),
                e.Slice(HeaderSize + nameLength + 1, valueLength).ToArray(), e[4]));
            int next = (int)BinaryPrimitives.ReadUInt32LittleEndian(e);
            if (next == 0) break;
            if (next % 4 != 0) throw new FormatException($"EA at {p} has unaligned NextEntryOffset {next}");
            p += next;
        }
        return list;
    }
}

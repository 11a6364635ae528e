using System.Runtime.InteropServices;

namespace XfsWin.Driver.Semantics;

/// <summary>Windows file attribute bits (winnt.h) the driver reports.</summary>
[Flags]
public enum WindowsFileAttributes : uint
{
    ReadOnly = 0x1,
    Hidden = 0x2,
    System = 0x4,
    Directory = 0x10,
    Archive = 0x20,
    Normal = 0x80,
    SparseFile = 0x200,
    ReparsePoint = 0x400,
}

/// <summary>
/// What Windows asks about a file. Its layout is exactly FSP_FSCTL_FILE_INFO (72 bytes; checked by
/// a layout test) so the WinFsp layer copies it without translation, but it is plain data and
/// the semantic layer fills it without any WinFsp type.
/// </summary>
[StructLayout(LayoutKind.Sequential, Pack = 8)]
public struct FileInformation
{
    public uint FileAttributes;
    public uint ReparseTag;
    public ulong AllocationSize;
    public ulong FileSize;
    public ulong CreationTime;
    public ulong LastAccessTime;
    public ulong LastWriteTime;
    public ulong ChangeTime;
    public ulong IndexNumber;
    public uint HardLinks;
    public uint EaSize;

    public readonly bool IsDirectory => (FileAttributes & (uint)WindowsFileAttributes.Directory) != 0;
}

/// <summary>The volume figures GetVolumeInfo returns (FSP_FSCTL_VOLUME_INFO without the fixed label buffer).</summary>
public readonly record struct VolumeInformation(ulong TotalSize, ulong FreeSize, string Label);

/// <summary>
/// FSP_FSCTL_DIR_INFO as bytes: UINT16 Size, FSP_FSCTL_FILE_INFO at 8, the NextOffset (UINT64, in a
/// 24-byte union) at 80, and the UTF-16 name from 104 (not NUL-terminated). Entries are packed into the
/// caller's buffer at 8-byte alignment, and a lone zero UINT16 ends the listing, as
/// FspFileSystemAddDirInfo does.
/// </summary>
public static class DirInfoLayout
{
    public const int FileInfoOffset = 8;
    public const int NextOffsetOffset = 80;
    public const int NameOffset = 104;
    public const int Alignment = 8;
    public const int MaxEntrySize = NameOffset + 2 * WindowsNames.MaxWindowsNameChars;

    /// <summary>Fills a DIR_INFO record in <paramref name="record"/>; returns its Size.</summary>
    public static int Write(Span<byte> record, in FileInformation info, ReadOnlySpan<char> name, ulong nextOffset)
    {
        int size = NameOffset + 2 * name.Length;
        record[..NameOffset].Clear();
        System.Buffers.Binary.BinaryPrimitives.WriteUInt16LittleEndian(record, (ushort)size);
        MemoryMarshal.Write(record[FileInfoOffset..], in info);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64LittleEndian(record[NextOffsetOffset..], nextOffset);
        MemoryMarshal.AsBytes(name).CopyTo(record[NameOffset..]);
        return size;
    }

    /// <summary>
    /// Appends a record at <paramref name="bytesTransferred"/> (FspFileSystemAddDirInfo semantics):
    /// false, and nothing written, when it does not fit at its aligned size.
    /// </summary>
    public static bool Append(ReadOnlySpan<byte> record, Span<byte> buffer, ref int bytesTransferred)
    {
        int length = System.Buffers.Binary.BinaryPrimitives.ReadUInt16LittleEndian(record);
        int aligned = (length + Alignment - 1) & ~(Alignment - 1);
        if (bytesTransferred + aligned > buffer.Length) return false;
        record[..length].CopyTo(buffer[bytesTransferred..]);
        bytesTransferred += aligned;
        return true;
    }

    /// <summary>Appends the end-of-listing marker (a zero Size) when there is room for it.</summary>
    public static bool AppendEnd(Span<byte> buffer, ref int bytesTransferred)
    {
        if (bytesTransferred + 2 > buffer.Length) return false;
        buffer[bytesTransferred] = 0;
        buffer[bytesTransferred + 1] = 0;
        bytesTransferred += 2;
        return true;
    }
}

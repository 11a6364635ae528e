using System.Buffers.Binary;

namespace XfsWin.Driver.Semantics;

/// <summary>Reparse tags (ntifs.h) for what XFS has and NTFS does not.</summary>
public static class ReparseTags
{
    public const uint Symlink = 0xA000000C;      // IO_REPARSE_TAG_SYMLINK
    public const uint LxSymlink = 0xA000001D;    // IO_REPARSE_TAG_LX_SYMLINK
    public const uint AfUnix = 0x80000023;       // IO_REPARSE_TAG_AF_UNIX
    public const uint LxFifo = 0x80000024;       // IO_REPARSE_TAG_LX_FIFO
    public const uint LxCharDevice = 0x80000025; // IO_REPARSE_TAG_LX_CHR
    public const uint LxBlockDevice = 0x80000026; // IO_REPARSE_TAG_LX_BLK

    /// <summary>The tag for a non-regular, non-directory XFS file; 0 for regular files and directories.</summary>
    public static uint ForFileType(XfsWin.Format.XfsFileType type, bool lxSpecialFiles) => type switch
    {
        XfsWin.Format.XfsFileType.Symlink => Symlink,
        XfsWin.Format.XfsFileType.Fifo when lxSpecialFiles => LxFifo,
        XfsWin.Format.XfsFileType.CharacterDevice when lxSpecialFiles => LxCharDevice,
        XfsWin.Format.XfsFileType.BlockDevice when lxSpecialFiles => LxBlockDevice,
        XfsWin.Format.XfsFileType.Socket when lxSpecialFiles => AfUnix,
        _ => 0,
    };
}

/// <summary>How absolute symlink targets ("/usr/lib/x") are presented.</summary>
public enum AbsoluteSymlinkMode
{
    /// <summary>
    /// Rewritten relative to the link ("..\..\usr\lib\x", SYMLINK_FLAG_RELATIVE), so they resolve
    /// against the root of this volume whatever drive letter it has. The default.
    /// </summary>
    VolumeRoot,

    /// <summary>Absolute NT paths on the mount point ("\??\X:\usr\lib\x"); breaks when the drive letter changes.</summary>
    MountPoint,
}

/// <summary>
/// Builds REPARSE_DATA_BUFFERs: symbolic links (tag, data length, reserved, then substitute/print
/// name offsets and lengths, flags and the UTF-16 path buffer) and the empty-bodied WSL tags.
/// </summary>
public static class ReparseData
{
    public const uint SymlinkFlagRelative = 1;
    public const int HeaderSize = 8;
    public const int SymlinkHeaderSize = HeaderSize + 12;

    /// <summary>
    /// Converts an XFS symlink target into the Windows path it stands for. Components are mapped
    /// with <see cref="WindowsNames"/>; '/' becomes '\'. Returns the substitute name and whether it is relative.
    /// <paramref name="linkDepth"/> is the number of directories between the volume root and the link's directory.
    /// </summary>
    public static (string Path, bool Relative) TranslateTarget(ReadOnlySpan<byte> target, int linkDepth,
        AbsoluteSymlinkMode mode, string? mountPoint)
    {
        bool absolute = target.Length > 0 && target[0] == '/';
        var sb = new System.Text.StringBuilder();
        if (absolute)
        {
            if (mode == AbsoluteSymlinkMode.MountPoint && !string.IsNullOrEmpty(mountPoint))
                sb.Append(@"\??\").Append(mountPoint.TrimEnd('\\'));
            else
                for (int i = 0; i < linkDepth; i++) sb.Append(i == 0 ? ".." : @"\..");
        }

        bool first = sb.Length == 0;
        // A target is free text: its components may exceed 255 bytes (they then name nothing, but the
        // link is still shown). Encoding yields at most one UTF-16 unit per byte.
        Span<char> buffer = target.Length <= 1024 ? stackalloc char[target.Length] : new char[target.Length];
        foreach (var range in target.Split((byte)'/'))
        {
            var component = target[range];
            if (component.IsEmpty) continue;
            if (!first || (absolute && sb.Length > 0)) sb.Append('\\');
            int n = WindowsNames.Encode(component, buffer);
            sb.Append(buffer[..n]);
            first = false;
        }
        if (sb.Length == 0) sb.Append('.');
        else if (sb[^1] == ':') sb.Append('\\');
        bool relative = !(absolute && mode == AbsoluteSymlinkMode.MountPoint && !string.IsNullOrEmpty(mountPoint));
        return (sb.ToString(), relative);
    }

    /// <summary>Size of the symlink reparse buffer for a substitute and print name.</summary>
    public static int SymlinkSize(string substituteName, string printName) =>
        SymlinkHeaderSize + 2 * (substituteName.Length + printName.Length);

    /// <summary>Writes an IO_REPARSE_TAG_SYMLINK buffer; returns its size, or -size when the destination is too small.</summary>
    public static int WriteSymlink(Span<byte> destination, string substituteName, string printName, bool relative)
    {
        int size = SymlinkSize(substituteName, printName);
        if (destination.Length < size) return -size;
        BinaryPrimitives.WriteUInt32LittleEndian(destination, ReparseTags.Symlink);
        BinaryPrimitives.WriteUInt16LittleEndian(destination[4..], (ushort)(size - HeaderSize));
        BinaryPrimitives.WriteUInt16LittleEndian(destination[6..], 0);
        int subBytes = 2 * substituteName.Length, printBytes = 2 * printName.Length;
        BinaryPrimitives.WriteUInt16LittleEndian(destination[8..], 0);                  // SubstituteNameOffset
        BinaryPrimitives.WriteUInt16LittleEndian(destination[10..], (ushort)subBytes);  // SubstituteNameLength
        BinaryPrimitives.WriteUInt16LittleEndian(destination[12..], (ushort)subBytes);  // PrintNameOffset
        BinaryPrimitives.WriteUInt16LittleEndian(destination[14..], (ushort)printBytes); // PrintNameLength
        BinaryPrimitives.WriteUInt32LittleEndian(destination[16..], relative ? SymlinkFlagRelative : 0);
        var path = destination[SymlinkHeaderSize..];
        for (int i = 0; i < substituteName.Length; i++) BinaryPrimitives.WriteUInt16LittleEndian(path[(2 * i)..], substituteName[i]);
        path = path[subBytes..];
        for (int i = 0; i < printName.Length; i++) BinaryPrimitives.WriteUInt16LittleEndian(path[(2 * i)..], printName[i]);
        return size;
    }

    /// <summary>Writes a WSL special-file reparse buffer (tag and zero-length data, as WSL does).</summary>
    public static int WriteEmpty(Span<byte> destination, uint tag)
    {
        if (destination.Length < HeaderSize) return -HeaderSize;
        BinaryPrimitives.WriteUInt32LittleEndian(destination, tag);
        BinaryPrimitives.WriteUInt32LittleEndian(destination[4..], 0);
        return HeaderSize;
    }

    /// <summary>Parses a symlink reparse buffer back (tests, diagnostics).</summary>
    public static (string SubstituteName, string PrintName, uint Flags) ParseSymlink(ReadOnlySpan<byte> data)
    {
        if (data.Length < SymlinkHeaderSize || BinaryPrimitives.ReadUInt32LittleEndian(data) != ReparseTags.Symlink)
            throw new FormatException("not a symlink reparse buffer");
        int length = BinaryPrimitives.ReadUInt16LittleEndian(data[4..]);
        if (HeaderSize + length != data.Length) throw new FormatException("reparse data length does not match the buffer");
        var path = data[SymlinkHeaderSize..];
        return (ReadName(path, BinaryPrimitives.ReadUInt16LittleEndian(data[8..]), BinaryPrimitives.ReadUInt16LittleEndian(data[10..])),
                ReadName(path, BinaryPrimitives.ReadUInt16LittleEndian(data[12..]), BinaryPrimitives.ReadUInt16LittleEndian(data[14..])),
                BinaryPrimitives.ReadUInt32LittleEndian(data[16..]));
    }

    private static string ReadName(ReadOnlySpan<byte> path, int offset, int bytes)
    {
        if (offset + bytes > path.Length || bytes % 2 != 0) throw new FormatException("symlink name outside the path buffer");
        var chars = new char[bytes / 2];
        for (int i = 0; i < chars.Length; i++) chars[i] = (char)BinaryPrimitives.ReadUInt16LittleEndian(path[(offset + 2 * i)..]);
        return new string(chars);
    }
}

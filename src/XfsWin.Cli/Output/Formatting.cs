using System.Text;
using XfsWin.Format;
using XfsWin.Volume;

namespace XfsWin.Cli.Output;

public static class Formatting
{
    /// <summary>A byte count in binary units with one decimal ("12.0 MiB"; "512 B" below 1 KiB).</summary>
    public static string Bytes(long bytes)
    {
        string[] units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        double v = bytes;
        int u = 0;
        while (v >= 1024 && u < units.Length - 1) { v /= 1024; u++; }
        return u == 0 ? $"{bytes} B" : $"{v:F1} {units[u]}";
    }

    public static string Time(XfsTimestamp t)
    {
        try
        {
            return $"{t.ToDateTimeOffset():yyyy-MM-dd HH:mm:ss}.{t.Nanoseconds:D9} +0000";
        }
        catch (ArgumentOutOfRangeException)
        {
            return $"@{t.Seconds}.{t.Nanoseconds:D9}";
        }
    }

    public static string TypeName(XfsFileType type) => type switch
    {
        XfsFileType.RegularFile => "file",
        XfsFileType.Directory => "directory",
        XfsFileType.Symlink => "symlink",
        XfsFileType.CharacterDevice => "char-device",
        XfsFileType.BlockDevice => "block-device",
        XfsFileType.Fifo => "fifo",
        XfsFileType.Socket => "socket",
        XfsFileType.Whiteout => "whiteout",
        _ => "unknown",
    };

    public static XfsFileType TypeFromMode(uint mode) => (mode & 0xF000) switch
    {
        0x8000 => XfsFileType.RegularFile,
        0x4000 => XfsFileType.Directory,
        0xA000 => XfsFileType.Symlink,
        0x2000 => XfsFileType.CharacterDevice,
        0x6000 => XfsFileType.BlockDevice,
        0x1000 => XfsFileType.Fifo,
        0xC000 => XfsFileType.Socket,
        _ => XfsFileType.Unknown,
    };

    /// <summary>"drwxr-xr-x" as ls -l prints it, including setuid/setgid/sticky.</summary>
    public static string ModeText(uint mode)
    {
        var s = new StringBuilder(10);
        s.Append(TypeFromMode(mode) switch
        {
            XfsFileType.Directory => 'd',
            XfsFileType.Symlink => 'l',
            XfsFileType.CharacterDevice => 'c',
            XfsFileType.BlockDevice => 'b',
            XfsFileType.Fifo => 'p',
            XfsFileType.Socket => 's',
            XfsFileType.RegularFile => '-',
            _ => '?',
        });
        s.Append(Triplet(mode >> 6, (mode & 0x800) != 0, 's'));
        s.Append(Triplet(mode >> 3, (mode & 0x400) != 0, 's'));
        s.Append(Triplet(mode, (mode & 0x200) != 0, 't'));
        return s.ToString();
    }

    private static string Triplet(uint bits, bool special, char specialChar)
    {
        char r = (bits & 4) != 0 ? 'r' : '-';
        char w = (bits & 2) != 0 ? 'w' : '-';
        bool x = (bits & 1) != 0;
        char e = special ? (x ? specialChar : char.ToUpperInvariant(specialChar)) : (x ? 'x' : '-');
        return $"{r}{w}{e}";
    }

    public static string Octal(uint value) => Convert.ToString(value, 8);

    /// <summary>A name for display: invalid UTF-8 and control characters are escaped so they cannot mess up a terminal.</summary>
    public static string DisplayName(ReadOnlySpan<byte> name)
    {
        string text;
        try
        {
            text = new UTF8Encoding(false, true).GetString(name);
        }
        catch (DecoderFallbackException)
        {
            var sb = new StringBuilder();
            foreach (byte b in name) sb.Append(b is >= 0x20 and < 0x7F ? ((char)b).ToString() : $"\\x{b:x2}");
            return sb.ToString();
        }
        if (!text.Any(char.IsControl)) return text;
        var esc = new StringBuilder();
        foreach (char c in text) esc.Append(char.IsControl(c) ? $"\\x{(int)c:x2}" : c.ToString());
        return esc.ToString();
    }
}

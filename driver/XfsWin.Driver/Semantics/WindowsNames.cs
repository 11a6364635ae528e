using System.Text;

namespace XfsWin.Driver.Semantics;

/// <summary>
/// Reversible mapping between XFS names (arbitrary bytes except '/' and NUL, usually UTF-8) and
/// Windows names (UTF-16, without <c>\ : * ? " &lt; &gt; |</c>, control characters or a trailing
/// dot or space). It follows the Cygwin / WSL / WinFsp convention of escaping into the private-use
/// block U+F000..U+F0FF:
/// <list type="bullet">
/// <item>a character Windows cannot hold (0x01-0x1F, <c>\ : * ? " &lt; &gt; |</c>) becomes U+F000 + its code;</item>
/// <item>a byte that is not part of valid UTF-8 becomes U+F000 + the byte (U+F080..U+F0FF);</item>
/// <item>a name that ends in '.' or ' ' (other than "." and "..") has that last character escaped (U+F02E, U+F020);</item>
/// <item>a literal U+F000..U+F0FF character in the XFS name is escaped byte by byte (three code points)
///   so that every XFS name maps to exactly one Windows name and back.</item>
/// </list>
/// Decoding accepts only names that encoding produces (it re-encodes and compares), so each file has
/// exactly one Windows name and no two XFS names collide.
/// </summary>
public static class WindowsNames
{
    public const int MaxXfsNameBytes = 255;

    /// <summary>Enough UTF-16 units for any encoded XFS name (each byte yields at most one unit).</summary>
    public const int MaxWindowsNameChars = 255;

    private const char EscapeBase = '\uF000';

    /// <summary>Windows cannot hold these in a name (besides 0x01-0x1F).</summary>
    public static bool IsForbiddenAscii(int c) =>
        c is (>= 0x01 and <= 0x1F) or '\\' or ':' or '*' or '?' or '"' or '<' or '>' or '|';

    /// <summary>
    /// Writes the Windows form of <paramref name="xfsName"/> into <paramref name="destination"/>;
    /// returns the number of chars, or -1 when <paramref name="destination"/> is too small.
    /// </summary>
    public static int Encode(ReadOnlySpan<byte> xfsName, Span<char> destination)
    {
        int written = 0;
        int i = 0;
        while (i < xfsName.Length)
        {
            int length = DecodeUtf8(xfsName[i..], out int codePoint);
            if (length <= 0)
            {
                // Not valid UTF-8: keep the raw byte.
                if (!Put(destination, ref written, (char)(EscapeBase + xfsName[i]))) return -1;
                i++;
                continue;
            }

            if (codePoint is >= 0xF000 and <= 0xF0FF)
            {
                // A literal escape-range character: escape its bytes so decoding is unambiguous.
                for (int k = 0; k < length; k++)
                    if (!Put(destination, ref written, (char)(EscapeBase + xfsName[i + k]))) return -1;
            }
            else if (codePoint < 0x80 && IsForbiddenAscii(codePoint))
            {
                if (!Put(destination, ref written, (char)(EscapeBase + codePoint))) return -1;
            }
            else if (codePoint < 0x10000)
            {
                if (!Put(destination, ref written, (char)codePoint)) return -1;
            }
            else
            {
                int v = codePoint - 0x10000;
                if (!Put(destination, ref written, (char)(0xD800 + (v >> 10)))) return -1;
                if (!Put(destination, ref written, (char)(0xDC00 + (v & 0x3FF)))) return -1;
            }
            i += length;
        }

        if (written > 0 && !IsDotOrDotDot(xfsName))
        {
            char last = destination[written - 1];
            if (last is '.' or ' ')
                destination[written - 1] = (char)(EscapeBase + last);
        }
        return written;
    }

    /// <summary>
    /// Writes the XFS bytes named by <paramref name="windowsName"/>; returns the byte count, or -1 when
    /// no XFS name maps to it (forbidden characters, unpaired surrogates, non-canonical escapes, too long).
    /// </summary>
    public static int Decode(ReadOnlySpan<char> windowsName, Span<byte> destination)
    {
        int written = 0;
        for (int i = 0; i < windowsName.Length; i++)
        {
            char c = windowsName[i];
            if (c is >= EscapeBase and <= '\uF0FF')
            {
                if (written >= destination.Length) return -1;
                destination[written++] = (byte)(c - EscapeBase);
                continue;
            }

            int codePoint = c;
            if (char.IsHighSurrogate(c))
            {
                if (i + 1 >= windowsName.Length || !char.IsLowSurrogate(windowsName[i + 1])) return -1;
                codePoint = char.ConvertToUtf32(c, windowsName[++i]);
            }
            else if (char.IsLowSurrogate(c) || c == '\0' || c == '/')
            {
                return -1;
            }

            if (!new Rune(codePoint).TryEncodeToUtf8(destination[written..], out int n)) return -1;
            written += n;
        }

        var name = destination[..written];
        if (written == 0 || name.IndexOf((byte)0) >= 0 || name.IndexOf((byte)'/') >= 0) return -1;

        // Only the canonical spelling names a file: re-encode and compare.
        Span<char> check = stackalloc char[MaxWindowsNameChars + 2];
        int n2 = Encode(name, check);
        if (n2 != windowsName.Length || !check[..n2].SequenceEqual(windowsName)) return -1;
        return written;
    }

    public static string EncodeToString(ReadOnlySpan<byte> xfsName)
    {
        Span<char> buffer = stackalloc char[Math.Max(xfsName.Length * 2, 4)];
        int n = Encode(xfsName, buffer);
        return new string(buffer[..n]);
    }

    public static byte[]? DecodeToBytes(ReadOnlySpan<char> windowsName)
    {
        Span<byte> buffer = stackalloc byte[MaxXfsNameBytes * 4];
        int n = Decode(windowsName, buffer);
        return n < 0 || n > MaxXfsNameBytes ? null : buffer[..n].ToArray();
    }

    public static bool IsDotOrDotDot(ReadOnlySpan<byte> name) =>
        name is [(byte)'.'] or [(byte)'.', (byte)'.'];

    public static bool IsDotFile(ReadOnlySpan<byte> name) => name.Length > 0 && name[0] == '.' && !IsDotOrDotDot(name);

    private static bool Put(Span<char> destination, ref int written, char c)
    {
        if (written >= destination.Length) return false;
        destination[written++] = c;
        return true;
    }

    /// <summary>Strict UTF-8: returns the sequence length, or 0 when the bytes at the start are not valid UTF-8.</summary>
    private static int DecodeUtf8(ReadOnlySpan<byte> s, out int codePoint)
    {
        codePoint = 0;
        byte b0 = s[0];
        if (b0 < 0x80) { codePoint = b0; return 1; }
        int length, min;
        if ((b0 & 0xE0) == 0xC0) { length = 2; codePoint = b0 & 0x1F; min = 0x80; }
        else if ((b0 & 0xF0) == 0xE0) { length = 3; codePoint = b0 & 0x0F; min = 0x800; }
        else if ((b0 & 0xF8) == 0xF0) { length = 4; codePoint = b0 & 0x07; min = 0x10000; }
        else return 0;
        if (s.Length < length) return 0;
        for (int k = 1; k < length; k++)
        {
            if ((s[k] & 0xC0) != 0x80) return 0;
            codePoint = (codePoint << 6) | (s[k] & 0x3F);
        }
        if (codePoint < min || codePoint > 0x10FFFF || codePoint is >= 0xD800 and <= 0xDFFF) return 0;
        return length;
    }
}

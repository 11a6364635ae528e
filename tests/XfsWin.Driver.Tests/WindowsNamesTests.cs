using System.Text;
using XfsWin.Driver.Semantics;

namespace XfsWin.Driver.Tests;

public class WindowsNamesTests
{
    private static string Enc(byte[] b) => WindowsNames.EncodeToString(b);
    private static byte[] U(string s) => Encoding.UTF8.GetBytes(s);

    [Theory]
    [InlineData("plain.txt", "plain.txt")]
    [InlineData("a:b", "a\uF03Ab")]
    [InlineData("what?", "what\uF03F")]
    [InlineData("star*", "star\uF02A")]
    [InlineData("pipe|x", "pipe\uF07Cx")]
    [InlineData("<lt>", "\uF03Clt\uF03E")]
    [InlineData("q\"q", "q\uF022q")]
    [InlineData("back\\slash", "back\uF05Cslash")]
    [InlineData("tab\tname", "tab\uF009name")]
    [InlineData("bell\u0007", "bell\uF007")]
    [InlineData("trail.", "trail\uF02E")]
    [InlineData("trail ", "trail\uF020")]
    [InlineData("two..", "two.\uF02E")]
    [InlineData(".", ".")]
    [InlineData("..", "..")]
    [InlineData("...", "..\uF02E")]
    [InlineData(".hidden", ".hidden")]
    [InlineData("émoji😀", "émoji😀")]
    [InlineData("mid.dle and space", "mid.dle and space")]
    public void ValidUtf8MapsAsDocumented(string xfs, string windows)
    {
        Assert.Equal(windows, Enc(U(xfs)));
        Assert.Equal(U(xfs), WindowsNames.DecodeToBytes(windows));
    }

    [Fact]
    public void InvalidUtf8BytesBecomePrivateUseCharacters()
    {
        byte[] name = [(byte)'x', 0xFF, 0xFE, (byte)'y', 0xC3]; // 0xC3 is a truncated 2-byte sequence
        Assert.Equal("x\uF0FF\uF0FEy\uF0C3", Enc(name));
        Assert.Equal(name, WindowsNames.DecodeToBytes("x\uF0FF\uF0FEy\uF0C3"));
    }

    [Fact]
    public void OverlongAndSurrogateEncodingsAreTreatedAsInvalidBytes()
    {
        byte[] overlong = [0xC0, 0xAF];            // overlong '/'
        byte[] surrogate = [0xED, 0xA0, 0x80];     // U+D800 in UTF-8
        Assert.Equal("\uF0C0\uF0AF", Enc(overlong));
        Assert.Equal("\uF0ED\uF0A0\uF080", Enc(surrogate));
        Assert.Equal(overlong, WindowsNames.DecodeToBytes(Enc(overlong)));
        Assert.Equal(surrogate, WindowsNames.DecodeToBytes(Enc(surrogate)));
    }

    [Fact]
    public void LiteralPrivateUseCharactersAreEscapedSoTheyStayDistinct()
    {
        // "A" escaped by hand in a Linux name (U+F041) must not collide with "A".
        var literal = U("\uF041");
        Assert.Equal("\uF0EF\uF081\uF081", Enc(literal));
        Assert.Equal(literal, WindowsNames.DecodeToBytes(Enc(literal)));
        Assert.NotEqual(Enc(U("A")), Enc(literal));
    }

    [Theory]
    [InlineData("a.")]            // NT name with a raw trailing dot: the canonical form escapes it
    [InlineData("\uF041")]        // an escape of a character that never needs one
    [InlineData("\uF000")]        // NUL
    [InlineData("\uF02F")]        // '/'
    [InlineData("a/b")]
    [InlineData("")]
    public void NonCanonicalWindowsNamesNameNoFile(string windows)
    {
        Assert.Null(WindowsNames.DecodeToBytes(windows));
    }

    [Fact]
    public void UnpairedSurrogatesNameNoFile()
    {
        Assert.Null(WindowsNames.DecodeToBytes(new string(['\uD800', 'x'])));
        Assert.Null(WindowsNames.DecodeToBytes(new string(['x', '\uDC00'])));
    }

    [Fact]
    public void EveryByteStringRoundTripsAndEncodingIsInjective()
    {
        var random = new Random(20261122);
        var seen = new Dictionary<string, byte[]>();
        byte[] alphabet = [.. "aZ.: ?*\\|\"<>\t"u8, 0x80, 0xBF, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xEF, 0x80, 0x81, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0x01, 0x1F];
        for (int n = 0; n < 20000; n++)
        {
            var name = new byte[random.Next(1, 12)];
            for (int i = 0; i < name.Length; i++) name[i] = alphabet[random.Next(alphabet.Length)];
            if (name.AsSpan().IndexOf((byte)'/') >= 0) continue;
            string windows = Enc(name);
            foreach (char c in windows) Assert.False(c < 0x80 && WindowsNames.IsForbiddenAscii(c), $"forbidden char in {windows}");
            Assert.False(windows.Length > 0 && windows != "." && windows != ".." && (windows[^1] == '.' || windows[^1] == ' '));
            Assert.Equal(name, WindowsNames.DecodeToBytes(windows));
            if (seen.TryGetValue(windows, out var other)) Assert.Equal(other, name);
            seen[windows] = name;
        }
    }

    [Fact]
    public void LongestXfsNameFitsTheWindowsComponentLimit()
    {
        var worst = Enumerable.Repeat((byte)0xFF, 255).ToArray();
        Span<char> buffer = stackalloc char[WindowsNames.MaxWindowsNameChars];
        Assert.Equal(255, WindowsNames.Encode(worst, buffer));
        var tooSmall = new char[10];
        Assert.Equal(-1, WindowsNames.Encode(worst, tooSmall));
    }
}

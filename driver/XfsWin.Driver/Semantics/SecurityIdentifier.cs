using System.Buffers.Binary;
using System.Globalization;

namespace XfsWin.Driver.Semantics;

/// <summary>
/// A Windows SID held as its binary form (revision 1, 6-byte big-endian authority, little-endian
/// 32-bit sub-authorities). Built and parsed here because System.Security.AccessControl does not
/// exist off Windows.
/// </summary>
public sealed class Sid : IEquatable<Sid>
{
    private readonly byte[] _bytes;

    public Sid(ulong authority, params uint[] subAuthorities)
    {
        if (subAuthorities.Length > 15) throw new ArgumentException("a SID has at most 15 sub-authorities", nameof(subAuthorities));
        if (authority >= 1UL << 48) throw new ArgumentException("a SID authority has 48 bits", nameof(authority));
        _bytes = new byte[8 + 4 * subAuthorities.Length];
        _bytes[0] = 1;
        _bytes[1] = (byte)subAuthorities.Length;
        for (int i = 0; i < 6; i++) _bytes[2 + i] = (byte)(authority >> (8 * (5 - i)));
        for (int i = 0; i < subAuthorities.Length; i++)
            BinaryPrimitives.WriteUInt32LittleEndian(_bytes.AsSpan(8 + 4 * i), subAuthorities[i]);
    }

    private Sid(byte[] bytes) => _bytes = bytes;

    public static readonly Sid World = new(1, 0);                 // S-1-1-0 Everyone
    public static readonly Sid AuthenticatedUsers = new(5, 11);   // S-1-5-11
    public static readonly Sid LocalSystem = new(5, 18);          // S-1-5-18
    public static readonly Sid Administrators = new(5, 32, 544);  // S-1-5-32-544
    public static readonly Sid Unmapped = new(0, 65534);          // S-1-0-65534, WinFsp's "unmapped"
    /// <summary>S-1-3-0: in an inheritable ACE, whoever creates the object (the owner of what inherits it).</summary>
    public static readonly Sid CreatorOwner = new(3, 0);
    /// <summary>S-1-3-1: in an inheritable ACE, the primary group of whoever creates the object.</summary>
    public static readonly Sid CreatorGroup = new(3, 1);

    /// <summary>Samba / NFS "Unix User" SID S-1-22-1-uid.</summary>
    public static Sid UnixUser(uint uid) => new(22, 1, uid);

    /// <summary>Samba / NFS "Unix Group" SID S-1-22-2-gid.</summary>
    public static Sid UnixGroup(uint gid) => new(22, 2, gid);

    public int Length => _bytes.Length;
    public ReadOnlySpan<byte> Bytes => _bytes;
    public ulong Authority
    {
        get
        {
            ulong a = 0;
            for (int i = 0; i < 6; i++) a = (a << 8) | _bytes[2 + i];
            return a;
        }
    }
    public int SubAuthorityCount => _bytes[1];
    public uint SubAuthority(int index) => BinaryPrimitives.ReadUInt32LittleEndian(_bytes.AsSpan(8 + 4 * index));

    /// <summary>Reads a SID at the start of <paramref name="data"/>; throws when it is malformed.</summary>
    public static Sid Read(ReadOnlySpan<byte> data)
    {
        if (data.Length < 8 || data[0] != 1 || data[1] > 15 || data.Length < 8 + 4 * data[1])
            throw new FormatException("not a valid binary SID");
        return new Sid(data[..(8 + 4 * data[1])].ToArray());
    }

    /// <summary>Parses the string form "S-1-5-21-...".</summary>
    public static Sid Parse(string text)
    {
        var parts = text.Split('-');
        if (parts.Length < 3 || !parts[0].Equals("S", StringComparison.OrdinalIgnoreCase) || parts[1] != "1")
            throw new FormatException($"'{text}' is not a SID (expected S-1-<authority>-<sub-authorities>, for example S-1-5-21-1-2-3-1001)");
        ulong authority = parts[2].StartsWith("0x", StringComparison.OrdinalIgnoreCase)
            ? ulong.Parse(parts[2].AsSpan(2), NumberStyles.HexNumber, CultureInfo.InvariantCulture)
            : ulong.Parse(parts[2], CultureInfo.InvariantCulture);
        var subs = new uint[parts.Length - 3];
        for (int i = 0; i < subs.Length; i++) subs[i] = uint.Parse(parts[i + 3], CultureInfo.InvariantCulture);
        return new Sid(authority, subs);
    }

    public void CopyTo(Span<byte> destination) => _bytes.CopyTo(destination);

    public override string ToString()
    {
        var sb = new System.Text.StringBuilder("S-1-");
        sb.Append(Authority.ToString(CultureInfo.InvariantCulture));
        for (int i = 0; i < SubAuthorityCount; i++) sb.Append('-').Append(SubAuthority(i).ToString(CultureInfo.InvariantCulture));
        return sb.ToString();
    }

    public bool Equals(Sid? other) => other is not null && _bytes.AsSpan().SequenceEqual(other._bytes);
    public override bool Equals(object? obj) => Equals(obj as Sid);
    public static bool operator ==(Sid? left, Sid? right) => left is null ? right is null : left.Equals(right);
    public static bool operator !=(Sid? left, Sid? right) => !(left == right);
    public override int GetHashCode()
    {
        var h = new HashCode();
        h.AddBytes(_bytes);
        return h.ToHashCode();
    }
}

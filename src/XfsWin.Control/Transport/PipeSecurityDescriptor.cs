using System.Buffers.Binary;

namespace XfsWin.Control.Transport;

/// <summary>
/// The control pipe's security descriptor, built as bytes: self-relative, DACL present and
/// protected (no inherited entries), two access-allowed entries granting full file access to
/// LocalSystem (S-1-5-18) and the Administrators group (S-1-5-32-544), nobody else. In SDDL:
/// <see cref="Sddl"/>. No owner or group: the creating token's defaults apply.
/// </summary>
public static class PipeSecurityDescriptor
{
    public const string Sddl = "D:P(A;;FA;;;SY)(A;;FA;;;BA)";

    /// <summary>FILE_ALL_ACCESS: STANDARD_RIGHTS_REQUIRED | SYNCHRONIZE | 0x1FF.</summary>
    public const uint FileAllAccess = 0x001F01FF;

    public const byte AccessAllowedAceType = 0;
    public const ushort SeDaclPresent = 0x0004, SeDaclProtected = 0x1000, SeSelfRelative = 0x8000;

    /// <summary>S-1-5-18 and S-1-5-32-544 as (authority, subauthorities).</summary>
    public static readonly (ulong Authority, uint[] SubAuthorities)[] AllowedSids =
    [
        (5, [18]),
        (5, [32, 544]),
    ];

    public static byte[] Build()
    {
        int aclSize = 8;
        foreach (var (_, subs) in AllowedSids) aclSize += 8 + SidLength(subs.Length);
        var sd = new byte[20 + aclSize];
        // SECURITY_DESCRIPTOR_RELATIVE: Revision, Sbz1, Control, Owner, Group, Sacl, Dacl offsets.
        sd[0] = 1;
        BinaryPrimitives.WriteUInt16LittleEndian(sd.AsSpan(2), SeDaclPresent | SeDaclProtected | SeSelfRelative);
        BinaryPrimitives.WriteUInt32LittleEndian(sd.AsSpan(16), 20);
        var acl = sd.AsSpan(20);
        acl[0] = 2; // ACL_REVISION
        BinaryPrimitives.WriteUInt16LittleEndian(acl[2..], (ushort)aclSize);
        BinaryPrimitives.WriteUInt16LittleEndian(acl[4..], (ushort)AllowedSids.Length);
        int at = 8;
        foreach (var (authority, subs) in AllowedSids)
        {
            int aceSize = 8 + SidLength(subs.Length);
            var ace = acl.Slice(at, aceSize);
            ace[0] = AccessAllowedAceType;
            ace[1] = 0;
            BinaryPrimitives.WriteUInt16LittleEndian(ace[2..], (ushort)aceSize);
            BinaryPrimitives.WriteUInt32LittleEndian(ace[4..], FileAllAccess);
            WriteSid(ace[8..], authority, subs);
            at += aceSize;
        }
        return sd;
    }

    private static int SidLength(int subAuthorities) => 8 + 4 * subAuthorities;

    private static void WriteSid(Span<byte> sid, ulong authority, uint[] subs)
    {
        sid[0] = 1;
        sid[1] = (byte)subs.Length;
        // The 48-bit identifier authority is big-endian; sub-authorities are little-endian.
        for (int i = 0; i < 6; i++) sid[2 + i] = (byte)(authority >> (8 * (5 - i)));
        for (int i = 0; i < subs.Length; i++) BinaryPrimitives.WriteUInt32LittleEndian(sid[(8 + 4 * i)..], subs[i]);
    }
}

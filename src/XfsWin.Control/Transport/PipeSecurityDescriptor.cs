using System.Buffers.Binary;

namespace XfsWin.Control.Transport;

/// <summary>
/// The control pipe's security descriptor, built as bytes: self-relative, DACL present and protected (no inherited
/// entries). LocalSystem (S-1-5-18) and Administrators (S-1-5-32-544) get full access; with
/// <see cref="ListenerAccess.LocalUsers"/> interactive users (S-1-5-4, INTERACTIVE: whoever is logged on at the
/// machine, not services or network logons) may also read and write the pipe, without FILE_CREATE_PIPE_INSTANCE
/// (so none of them can add an instance of the service's pipe and answer its clients). In SDDL:
/// <see cref="Sddl"/>. No owner or group: the creating token's defaults apply.
/// </summary>
public static class PipeSecurityDescriptor
{
    /// <summary>FILE_ALL_ACCESS: STANDARD_RIGHTS_REQUIRED | SYNCHRONIZE | 0x1FF.</summary>
    public const uint FileAllAccess = 0x001F01FF;

    /// <summary>
    /// What interactive users get: FILE_GENERIC_READ | FILE_GENERIC_WRITE without FILE_APPEND_DATA
    /// (= FILE_CREATE_PIPE_INSTANCE on a pipe): read and write data, attributes and EAs, READ_CONTROL, SYNCHRONIZE.
    /// Clients ask for exactly PipeAccessRights.ReadWrite (0x2019B).
    /// </summary>
    public const uint ClientReadWrite = 0x0012019B;

    public const byte AccessAllowedAceType = 0;
    public const ushort SeDaclPresent = 0x0004, SeDaclProtected = 0x1000, SeSelfRelative = 0x8000;

    /// <summary>S-1-5-18, S-1-5-32-544 and S-1-5-4 as (authority, subauthorities, access).</summary>
    public static IReadOnlyList<(ulong Authority, uint[] SubAuthorities, uint Access)> Entries(ListenerAccess access) => access switch
    {
        ListenerAccess.Private => [(5, [18], FileAllAccess), (5, [32, 544], FileAllAccess)],
        _ => [(5, [18], FileAllAccess), (5, [32, 544], FileAllAccess), (5, [4], ClientReadWrite)],
    };

    public static string Sddl(ListenerAccess access) => access == ListenerAccess.Private
        ? "D:P(A;;FA;;;SY)(A;;FA;;;BA)"
        : "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x0012019b;;;IU)";

    public static byte[] Build(ListenerAccess access)
    {
        var entries = Entries(access);
        int aclSize = 8;
        foreach (var (_, subs, _) in entries) aclSize += 8 + SidLength(subs.Length);
        var sd = new byte[20 + aclSize];
        // SECURITY_DESCRIPTOR_RELATIVE: Revision, Sbz1, Control, Owner, Group, Sacl, Dacl offsets.
        sd[0] = 1;
        BinaryPrimitives.WriteUInt16LittleEndian(sd.AsSpan(2), SeDaclPresent | SeDaclProtected | SeSelfRelative);
        BinaryPrimitives.WriteUInt32LittleEndian(sd.AsSpan(16), 20);
        var acl = sd.AsSpan(20);
        acl[0] = 2; // ACL_REVISION
        BinaryPrimitives.WriteUInt16LittleEndian(acl[2..], (ushort)aclSize);
        BinaryPrimitives.WriteUInt16LittleEndian(acl[4..], (ushort)entries.Count);
        int at = 8;
        foreach (var (authority, subs, mask) in entries)
        {
            int aceSize = 8 + SidLength(subs.Length);
            var ace = acl.Slice(at, aceSize);
            ace[0] = AccessAllowedAceType;
            ace[1] = 0;
            BinaryPrimitives.WriteUInt16LittleEndian(ace[2..], (ushort)aceSize);
            BinaryPrimitives.WriteUInt32LittleEndian(ace[4..], mask);
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

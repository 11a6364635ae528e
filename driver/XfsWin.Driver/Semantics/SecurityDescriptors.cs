using XfsWin.Attributes;
using System.Buffers.Binary;

namespace XfsWin.Driver.Semantics;

/// <summary>Windows access rights used in the DACLs we build (winnt.h).</summary>
[Flags]
public enum AccessRights : uint
{
    ReadData = 0x0001,
    WriteData = 0x0002,
    AppendData = 0x0004,
    ReadEa = 0x0008,
    WriteEa = 0x0010,
    Execute = 0x0020,
    DeleteChild = 0x0040,
    ReadAttributes = 0x0080,
    WriteAttributes = 0x0100,
    Delete = 0x0001_0000,
    ReadControl = 0x0002_0000,
    WriteDac = 0x0004_0000,
    WriteOwner = 0x0008_0000,
    Synchronize = 0x0010_0000,
}

public enum AceType : byte
{
    AccessAllowed = 0,
    AccessDenied = 1,
}

public readonly record struct Ace(AceType Type, AccessRights Mask, Sid Sid, byte Flags = 0);

/// <summary>A parsed self-relative security descriptor (for tests and diagnostics).</summary>
public sealed record ParsedSecurityDescriptor(ushort Control, Sid? Owner, Sid? Group, IReadOnlyList<Ace>? Dacl);

/// <summary>
/// Builds self-relative security descriptors from POSIX ownership and permissions, the way WinFsp's
/// FspPosixMapPermissionsToSecurityDescriptor does: a protected DACL with an allow ACE each for owner,
/// group and Everyone, plus deny ACEs where POSIX would refuse something a later, broader ACE grants
/// (Windows unions ACEs; POSIX picks exactly one class). POSIX ACL entries are added as allow/deny
/// ACEs for the named users and groups, limited by the mask.
/// </summary>
public static class SecurityDescriptors
{
    public const ushort SeDaclPresent = 0x0004;
    public const ushort SeDaclProtected = 0x1000;
    public const ushort SeSelfRelative = 0x8000;
    public const int HeaderSize = 20;
    public const int AclHeaderSize = 8;
    public const byte AclRevision = 2;

    /// <summary>Rights every allow ACE carries (WinFsp's FspPosixDefaultPerm).</summary>
    public const AccessRights DefaultRights = AccessRights.Synchronize | AccessRights.ReadControl | AccessRights.ReadAttributes | AccessRights.ReadEa;

    /// <summary>Extra rights of the owner's allow ACE (WinFsp's FspPosixOwnerDefaultPerm).</summary>
    public const AccessRights OwnerDefaultRights = DefaultRights | AccessRights.Delete | AccessRights.WriteDac | AccessRights.WriteOwner |
                                                 AccessRights.WriteAttributes | AccessRights.WriteEa;

    private const uint DirectoryBit = 0x4000;    // S_IFDIR
    private const uint StickyBit = 0x200;        // S_ISVTX

    /// <summary>rwx bits → access mask. Write on a directory without the sticky bit also grants delete-child.</summary>
    public static AccessRights PermissionToAccess(uint mode, uint perm)
    {
        var deleteChild = (mode & (0xF000 | StickyBit)) == DirectoryBit ? AccessRights.DeleteChild : 0;
        return ((perm & 4) != 0 ? AccessRights.ReadData : 0) |
               ((perm & 2) != 0 ? AccessRights.WriteAttributes | AccessRights.WriteData | AccessRights.AppendData | deleteChild : 0) |
               ((perm & 1) != 0 ? AccessRights.Execute : 0);
    }

    /// <summary>The DACL for an owner, group and st_mode, optionally with a POSIX access ACL.</summary>
    public static List<Ace> BuildDacl(Sid owner, Sid group, uint mode, PosixAcl? acl, IdentityMap? ids)
    {
        uint ownerPerm = (mode >> 6) & 7, groupPerm = (mode >> 3) & 7, worldPerm = mode & 7;
        var namedUsers = new List<(Sid Sid, uint Perm)>();
        var namedGroups = new List<(Sid Sid, uint Perm)>();
        if (acl is not null && ids is not null)
        {
            uint mask = 7;
            foreach (var e in acl.Entries) if (e.Tag == PosixAclTag.Mask) mask = e.Permissions;
            foreach (var e in acl.Entries)
            {
                switch (e.Tag)
                {
                    case PosixAclTag.UserObj: ownerPerm = e.Permissions; break;
                    case PosixAclTag.GroupObj: groupPerm = e.Permissions & mask; break;
                    case PosixAclTag.Other: worldPerm = e.Permissions; break;
                    case PosixAclTag.User: namedUsers.Add((ids.OwnerSid(e.Id), e.Permissions & mask)); break;
                    case PosixAclTag.Group: namedGroups.Add((ids.GroupSid(e.Id), e.Permissions & mask)); break;
                }
            }
        }

        uint anyGroup = groupPerm;
        foreach (var g in namedGroups) anyGroup |= g.Perm;
        uint anyUser = 0;
        foreach (var u in namedUsers) anyUser |= u.Perm;

        uint ownerMode = mode & ~StickyBit;
        var aces = new List<Ace>(5 + 2 * (namedUsers.Count + namedGroups.Count));

        // Owner: allowed its own bits; denied what any later ACE would add.
        aces.Add(new Ace(AceType.AccessAllowed, OwnerDefaultRights | PermissionToAccess(ownerMode, ownerPerm), owner));
        uint ownerDeny = (anyUser | anyGroup | worldPerm) & ~ownerPerm;
        if (ownerDeny != 0)
            aces.Add(new Ace(AceType.AccessDenied, ~AccessRights.WriteAttributes & PermissionToAccess(ownerMode, ownerDeny), owner));

        foreach (var (sid, perm) in namedUsers)
        {
            aces.Add(new Ace(AceType.AccessAllowed, DefaultRights | PermissionToAccess(mode, perm), sid));
            uint deny = (anyGroup | worldPerm) & ~perm;
            if (deny != 0) aces.Add(new Ace(AceType.AccessDenied, PermissionToAccess(mode, deny), sid));
        }

        aces.Add(new Ace(AceType.AccessAllowed, DefaultRights | PermissionToAccess(mode, groupPerm), group));
        uint groupDeny = worldPerm & ~groupPerm;
        if (groupDeny != 0) aces.Add(new Ace(AceType.AccessDenied, PermissionToAccess(mode, groupDeny), group));

        foreach (var (sid, perm) in namedGroups)
        {
            aces.Add(new Ace(AceType.AccessAllowed, DefaultRights | PermissionToAccess(mode, perm), sid));
            uint deny = worldPerm & ~perm;
            if (deny != 0) aces.Add(new Ace(AceType.AccessDenied, PermissionToAccess(mode, deny), sid));
        }

        aces.Add(new Ace(AceType.AccessAllowed, DefaultRights | PermissionToAccess(mode, worldPerm), Sid.World));
        return aces;
    }

    public static byte[] Build(Sid owner, Sid group, uint mode, PosixAcl? acl = null, IdentityMap? ids = null, PosixAcl? defaultAcl = null)
    {
        var dacl = BuildDacl(owner, group, mode, acl, ids);
        if (defaultAcl is not null && ids is not null) dacl.AddRange(InheritableAces(defaultAcl, ids));
        return Serialize(owner, group, dacl);
    }

    /// <summary>
    /// A directory's default POSIX ACL as inherit-only ACEs for the files and directories made in it (object and
    /// container inherit), mapped as <see cref="BuildDacl"/> maps an access ACL: the owner entry for CREATOR OWNER, the
    /// owning group's for CREATOR GROUP (what Windows puts the creator's SIDs in place of), others for Everyone, named
    /// users and groups for their SIDs, limited by the mask, with the deny ACEs POSIX's choice of one class needs.
    /// </summary>
    public static List<Ace> InheritableAces(PosixAcl defaultAcl, IdentityMap ids)
    {
        var aces = BuildDacl(Sid.CreatorOwner, Sid.CreatorGroup, DirectoryBit, defaultAcl, ids);
        for (int i = 0; i < aces.Count; i++) aces[i] = aces[i] with { Flags = InheritableFlags };
        return aces;
    }

    /// <summary>
    /// The ACEs of a DACL that children inherit (object or container inherit set, inherit-only or not), as
    /// <see cref="PermissionFor"/> reads them: the basis of a directory's default POSIX ACL.
    /// </summary>
    public static List<Ace> InheritedByChildren(IReadOnlyList<Ace>? dacl)
    {
        var aces = new List<Ace>();
        if (dacl is null) return aces;
        foreach (var ace in dacl)
            if ((ace.Flags & (ObjectInheritAce | ContainerInheritAce)) != 0) aces.Add(ace with { Flags = 0 });
        return aces;
    }

    /// <summary>True when <paramref name="dacl"/> has an ACE for <paramref name="sid"/> or for Everyone.</summary>
    public static bool Names(IReadOnlyList<Ace> dacl, Sid sid)
    {
        foreach (var ace in dacl) if (ace.Sid == sid || ace.Sid == Sid.World) return true;
        return false;
    }

    /// <summary>Writes a self-relative SD: header, DACL, owner, group (the order MakeSelfRelativeSD uses).</summary>
    public static byte[] Serialize(Sid owner, Sid group, IReadOnlyList<Ace> dacl)
    {
        int aclSize = AclHeaderSize;
        foreach (var ace in dacl) aclSize += 8 + ace.Sid.Length;
        int size = HeaderSize + aclSize + owner.Length + group.Length;
        var sd = new byte[size];
        var s = sd.AsSpan();
        s[0] = 1; // revision
        BinaryPrimitives.WriteUInt16LittleEndian(s[2..], SeSelfRelative | SeDaclPresent | SeDaclProtected);
        int daclOffset = HeaderSize, ownerOffset = daclOffset + aclSize, groupOffset = ownerOffset + owner.Length;
        BinaryPrimitives.WriteInt32LittleEndian(s[4..], ownerOffset);
        BinaryPrimitives.WriteInt32LittleEndian(s[8..], groupOffset);
        BinaryPrimitives.WriteInt32LittleEndian(s[12..], 0); // no SACL
        BinaryPrimitives.WriteInt32LittleEndian(s[16..], daclOffset);

        var acl = s[daclOffset..];
        acl[0] = AclRevision;
        BinaryPrimitives.WriteUInt16LittleEndian(acl[2..], (ushort)aclSize);
        BinaryPrimitives.WriteUInt16LittleEndian(acl[4..], (ushort)dacl.Count);
        int p = AclHeaderSize;
        foreach (var ace in dacl)
        {
            acl[p] = (byte)ace.Type;
            acl[p + 1] = ace.Flags;
            BinaryPrimitives.WriteUInt16LittleEndian(acl[(p + 2)..], (ushort)(8 + ace.Sid.Length));
            BinaryPrimitives.WriteUInt32LittleEndian(acl[(p + 4)..], (uint)ace.Mask);
            ace.Sid.CopyTo(acl[(p + 8)..]);
            p += 8 + ace.Sid.Length;
        }
        owner.CopyTo(s[ownerOffset..]);
        group.CopyTo(s[groupOffset..]);
        return sd;
    }

    /// <summary>Parses a self-relative SD, checking every offset and size.</summary>
    public static ParsedSecurityDescriptor Parse(ReadOnlySpan<byte> sd)
    {
        if (sd.Length < HeaderSize || sd[0] != 1) throw new FormatException("not a revision-1 security descriptor");
        ushort control = BinaryPrimitives.ReadUInt16LittleEndian(sd[2..]);
        if ((control & SeSelfRelative) == 0) throw new FormatException("security descriptor is not self-relative");
        int ownerOffset = BinaryPrimitives.ReadInt32LittleEndian(sd[4..]);
        int groupOffset = BinaryPrimitives.ReadInt32LittleEndian(sd[8..]);
        int daclOffset = BinaryPrimitives.ReadInt32LittleEndian(sd[16..]);
        Sid? owner = ownerOffset == 0 ? null : Sid.Read(Slice(sd, ownerOffset));
        Sid? group = groupOffset == 0 ? null : Sid.Read(Slice(sd, groupOffset));
        List<Ace>? dacl = null;
        if ((control & SeDaclPresent) != 0 && daclOffset != 0)
        {
            var acl = Slice(sd, daclOffset);
            if (acl.Length < AclHeaderSize || acl[0] != AclRevision) throw new FormatException("bad ACL header");
            int aclSize = BinaryPrimitives.ReadUInt16LittleEndian(acl[2..]);
            int count = BinaryPrimitives.ReadUInt16LittleEndian(acl[4..]);
            if (aclSize > acl.Length) throw new FormatException("ACL runs past the descriptor");
            dacl = new List<Ace>(count);
            int p = AclHeaderSize;
            for (int i = 0; i < count; i++)
            {
                if (p + 8 > aclSize) throw new FormatException($"ACE {i} runs past the ACL");
                int aceSize = BinaryPrimitives.ReadUInt16LittleEndian(acl[(p + 2)..]);
                if (aceSize < 16 || p + aceSize > aclSize || aceSize % 4 != 0) throw new FormatException($"ACE {i} has bad size {aceSize}");
                var sid = Sid.Read(acl.Slice(p + 8, aceSize - 8));
                if (sid.Length != aceSize - 8) throw new FormatException($"ACE {i} size does not match its SID");
                dacl.Add(new Ace((AceType)acl[p], (AccessRights)BinaryPrimitives.ReadUInt32LittleEndian(acl[(p + 4)..]), sid, acl[p + 1]));
                p += aceSize;
            }
            if (p != aclSize) throw new FormatException("ACL size does not match its ACEs");
        }
        return new ParsedSecurityDescriptor(control, owner, group, dacl);
    }

    /// <summary>
    /// The byte length of a self-relative descriptor: the furthest end of its owner, group, SACL and DACL
    /// (WinFsp hands descriptors over as a pointer without a size). -1 when the header is not self-relative.
    /// </summary>
    public static int SelfRelativeLength(ReadOnlySpan<byte> sd)
    {
        if (sd.Length < HeaderSize || sd[0] != 1) return -1;
        if ((BinaryPrimitives.ReadUInt16LittleEndian(sd[2..]) & SeSelfRelative) == 0) return -1;
        int end = HeaderSize;
        for (int field = 4; field <= 8; field += 4)
        {
            int offset = BinaryPrimitives.ReadInt32LittleEndian(sd[field..]);
            if (offset == 0) continue;
            if (offset < HeaderSize || offset + 8 > sd.Length) return -1;
            end = Math.Max(end, offset + 8 + 4 * sd[offset + 1]);
        }
        for (int field = 12; field <= 16; field += 4)
        {
            int offset = BinaryPrimitives.ReadInt32LittleEndian(sd[field..]);
            if (offset == 0) continue;
            if (offset < HeaderSize || offset + AclHeaderSize > sd.Length) return -1;
            end = Math.Max(end, offset + BinaryPrimitives.ReadUInt16LittleEndian(sd[(offset + 2)..]));
        }
        return end;
    }

    /// <summary>
    /// The rwx bits a DACL gives the owner, the group and everyone else: ACEs are taken in order, an allow ACE
    /// granting what no earlier deny ACE for the same class refused; Everyone's ACEs count for all three classes
    /// (Windows grants them to everybody), the owner's and group's only for their class. r = FILE_READ_DATA,
    /// w = FILE_WRITE_DATA, x = FILE_EXECUTE. A null DACL grants everything (0777).
    /// </summary>
    public static uint ModeFromDacl(IReadOnlyList<Ace>? dacl, Sid owner, Sid group) =>
        PermissionFor(dacl, owner) << 6 | PermissionFor(dacl, group) << 3 | PermissionFor(dacl, Sid.World);

    /// <summary>
    /// The rwx a DACL gives <paramref name="sid"/>: its own ACEs and Everyone's, in order, an allow granting what no
    /// earlier deny refused. A null DACL grants everything.
    /// </summary>
    public static uint PermissionFor(IReadOnlyList<Ace>? dacl, Sid sid)
    {
        if (dacl is null) return 7;
        uint allow = 0, deny = 0;
        foreach (var ace in dacl)
        {
            if ((ace.Flags & InheritOnlyAce) != 0 || (ace.Sid != sid && ace.Sid != Sid.World)) continue;
            uint perm = AccessToPermission(ace.Mask);
            if (ace.Type == AceType.AccessAllowed) allow |= perm & ~deny;
            else if (ace.Type == AceType.AccessDenied) deny |= perm & ~allow;
        }
        return allow;
    }

    /// <summary>The SIDs a DACL names besides the owner, the group and Everyone (in order, once each; inherit-only ACEs skipped).</summary>
    public static List<Sid> NamedSids(IReadOnlyList<Ace>? dacl, Sid owner, Sid group)
    {
        var named = new List<Sid>();
        if (dacl is null) return named;
        foreach (var ace in dacl)
            if ((ace.Flags & InheritOnlyAce) == 0 && ace.Sid != owner && ace.Sid != group && ace.Sid != Sid.World && !named.Contains(ace.Sid))
                named.Add(ace.Sid);
        return named;
    }

    public const byte ObjectInheritAce = 0x01, ContainerInheritAce = 0x02, InheritOnlyAce = 0x08;
    /// <summary>The flags of the ACEs that show a default ACL: inherited by files and directories, not applied here.</summary>
    public const byte InheritableFlags = ObjectInheritAce | ContainerInheritAce | InheritOnlyAce;
    private const uint GenericAll = 0x1000_0000, GenericExecute = 0x2000_0000, GenericWrite = 0x4000_0000, GenericRead = 0x8000_0000;

    /// <summary>An access mask as rwx (generic rights count as the file rights they map to).</summary>
    public static uint AccessToPermission(AccessRights mask)
    {
        uint m = (uint)mask;
        uint perm = 0;
        if ((m & ((uint)AccessRights.ReadData | GenericRead | GenericAll)) != 0) perm |= 4;
        if ((m & ((uint)AccessRights.WriteData | GenericWrite | GenericAll)) != 0) perm |= 2;
        if ((m & ((uint)AccessRights.Execute | GenericExecute | GenericAll)) != 0) perm |= 1;
        return perm;
    }

    private static ReadOnlySpan<byte> Slice(ReadOnlySpan<byte> sd, int offset) =>
        offset < HeaderSize || offset >= sd.Length ? throw new FormatException($"offset {offset} outside the descriptor") : sd[offset..];
}

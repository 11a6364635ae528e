using XfsWin.Attributes;
using XfsWin.Driver.Semantics;
using A = XfsWin.Driver.Semantics.AccessRights;

namespace XfsWin.Driver.Tests;

public class SecurityTests
{
    private static readonly Sid Owner = Sid.Parse("S-1-5-21-111-222-333-1001");
    private static readonly Sid Group = Sid.UnixGroup(100);
    private const A Read = A.ReadData, Write = A.WriteAttributes | A.WriteData | A.AppendData, Exec = A.Execute;

    [Fact]
    public void SidStringAndBinaryFormsRoundTrip()
    {
        var sid = Sid.Parse("S-1-5-21-3623811015-3361044348-30300820-1013");
        Assert.Equal("S-1-5-21-3623811015-3361044348-30300820-1013", sid.ToString());
        Assert.Equal(8 + 4 * 5, sid.Length);
        Assert.Equal(1, sid.Bytes[0]);
        Assert.Equal(5, sid.Bytes[1]);
        Assert.Equal(5, sid.Bytes[7]); // authority is big-endian
        Assert.Equal(sid, Sid.Read(sid.Bytes));
        Assert.Equal("S-1-1-0", Sid.World.ToString());
        Assert.Equal("S-1-22-1-1000", Sid.UnixUser(1000).ToString());
        Assert.Throws<FormatException>(() => Sid.Parse("S-2-5"));
        Assert.Throws<FormatException>(() => Sid.Read([1, 2, 0, 0, 0, 0, 0, 5, 1, 0, 0, 0]));
    }

    [Fact]
    public void Mode0755GivesThreeAllowAcesAndNoDeny()
    {
        var sd = SecurityDescriptors.Parse(SecurityDescriptors.Build(Owner, Group, 0x8000 | 0x1ED)); // regular file 0755
        Assert.Equal(Owner, sd.Owner);
        Assert.Equal(Group, sd.Group);
        Assert.Equal(SecurityDescriptors.SeSelfRelative | SecurityDescriptors.SeDaclPresent | SecurityDescriptors.SeDaclProtected, sd.Control);
        var dacl = sd.Dacl!;
        Assert.Equal(3, dacl.Count);
        Assert.All(dacl, a => Assert.Equal(AceType.AccessAllowed, a.Type));
        Assert.Equal(SecurityDescriptors.OwnerDefaultRights | Read | Write | Exec, dacl[0].Mask);
        Assert.Equal(Owner, dacl[0].Sid);
        Assert.Equal(SecurityDescriptors.DefaultRights | Read | Exec, dacl[1].Mask);
        Assert.Equal(Group, dacl[1].Sid);
        Assert.Equal(SecurityDescriptors.DefaultRights | Read | Exec, dacl[2].Mask);
        Assert.Equal(Sid.World, dacl[2].Sid);
    }

    [Fact]
    public void OwnerWithFewerRightsThanOthersGetsDenyAces()
    {
        // chmod 0577: owner r-x, group rwx, other rwx. POSIX refuses the owner write; Windows would grant it via Everyone.
        var dacl = SecurityDescriptors.Parse(SecurityDescriptors.Build(Owner, Group, 0x8000 | 0x17F)).Dacl!;
        Assert.Equal(4, dacl.Count);
        Assert.Equal((AceType.AccessAllowed, Owner), (dacl[0].Type, dacl[0].Sid));
        Assert.Equal((AceType.AccessDenied, Owner), (dacl[1].Type, dacl[1].Sid));
        Assert.Equal(A.WriteData | A.AppendData, dacl[1].Mask); // write-attributes stays allowed to the owner
        Assert.Equal((AceType.AccessAllowed, Group), (dacl[2].Type, dacl[2].Sid));
        Assert.Equal(Sid.World, dacl[3].Sid);
    }

    [Fact]
    public void GroupWithFewerRightsThanOthersGetsADenyAce()
    {
        // 0604: group ---, other r--.
        var dacl = SecurityDescriptors.Parse(SecurityDescriptors.Build(Owner, Group, 0x8000 | 0x184)).Dacl!;
        var groupDeny = Assert.Single(dacl, a => a.Type == AceType.AccessDenied);
        Assert.Equal(Group, groupDeny.Sid);
        Assert.Equal(A.ReadData, groupDeny.Mask);
    }

    [Fact]
    public void DirectoriesGetDeleteChildUnlessSticky()
    {
        var plain = SecurityDescriptors.Parse(SecurityDescriptors.Build(Owner, Group, 0x4000 | 0x1FF)).Dacl!;
        Assert.All(plain, a => Assert.True(a.Mask.HasFlag(A.DeleteChild)));
        var sticky = SecurityDescriptors.Parse(SecurityDescriptors.Build(Owner, Group, 0x4000 | 0x200 | 0x1FF)).Dacl!;
        Assert.True(sticky[0].Mask.HasFlag(A.DeleteChild));           // the owner may still delete children
        Assert.False(sticky[1].Mask.HasFlag(A.DeleteChild));
        Assert.False(sticky[2].Mask.HasFlag(A.DeleteChild));
        var file = SecurityDescriptors.Parse(SecurityDescriptors.Build(Owner, Group, 0x8000 | 0x1FF)).Dacl!;
        Assert.All(file, a => Assert.False(a.Mask.HasFlag(A.DeleteChild)));
    }

    [Fact]
    public void PosixAclNamedEntriesBecomeAcesLimitedByTheMask()
    {
        var ids = new IdentityMap(IdMappingMode.Unix, Owner);
        var acl = new PosixAcl([
            new(PosixAclTag.UserObj, 0, 6), new(PosixAclTag.User, 1234, 7), new(PosixAclTag.GroupObj, 0, 4),
            new(PosixAclTag.Group, 2345, 6), new(PosixAclTag.Mask, 0, 5), new(PosixAclTag.Other, 0, 0)]);
        var sd = SecurityDescriptors.Parse(SecurityDescriptors.Build(Sid.UnixUser(1), Sid.UnixGroup(1), 0x8000 | 0x1A8, acl, ids));
        var user = Assert.Single(sd.Dacl!, a => a.Sid == Sid.UnixUser(1234) && a.Type == AceType.AccessAllowed);
        Assert.Equal(SecurityDescriptors.DefaultRights | Read | Exec, user.Mask); // rwx & r-x mask
        var group = Assert.Single(sd.Dacl!, a => a.Sid == Sid.UnixGroup(2345) && a.Type == AceType.AccessAllowed);
        Assert.Equal(SecurityDescriptors.DefaultRights | Read, group.Mask);       // rw- & r-x mask
        var ownerDeny = Assert.Single(sd.Dacl!, a => a.Sid == Sid.UnixUser(1) && a.Type == AceType.AccessDenied);
        Assert.Equal(A.Execute, ownerDeny.Mask); // named user may execute, the owner may not
        Assert.Equal(Sid.World, sd.Dacl![^1].Sid);
    }

    [Fact]
    public void XfsAclBytesParse()
    {
        byte[] value = [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 2, 0, 0, 4, 0xD2, 0, 5, 0, 0];
        var acl = PosixAcl.ParseXfs(value);
        // Owner-class entries carry no id: Linux calls it ACL_UNDEFINED_ID, whatever the disk holds.
        Assert.Equal(new PosixAclEntry[] { new(PosixAclTag.UserObj, PosixAcl.UndefinedId, 6), new(PosixAclTag.User, 1234, 5) }, acl.Entries);
        var e = Assert.Throws<XfsException>(() => PosixAcl.ParseXfs(value.AsSpan(0, value.Length - 1)));
        Assert.Equal(XfsError.Corrupt, e.Error);
    }

    [Fact]
    public void IdentityModesMapAsDocumented()
    {
        var user = Sid.Parse("S-1-5-21-10-20-30-1001");
        var mounting = new IdentityMap(IdMappingMode.MountingUser, user, users: new Dictionary<uint, Sid> { [0] = Sid.LocalSystem });
        Assert.Equal(user, mounting.OwnerSid(1000));
        Assert.Equal(Sid.LocalSystem, mounting.OwnerSid(0));
        Assert.Equal(Sid.UnixGroup(1000), mounting.GroupSid(1000));

        var posix = new IdentityMap(IdMappingMode.WinFspPosix, user);
        Assert.Equal("S-1-5-18", posix.OwnerSid(18).ToString());
        Assert.Equal("S-1-5-32-545", posix.GroupSid(545).ToString());
        Assert.Equal("S-1-5-21-10-20-30-1001", posix.OwnerSid(0x30000 + 1001).ToString());
        Assert.Equal("S-1-16-12288", posix.OwnerSid(0x60000 + 12288).ToString());
        Assert.Equal("S-1-1-0", posix.OwnerSid(0x10000 + 0x100 + 0).ToString());
        Assert.Equal("S-1-5-80-5", posix.OwnerSid(0x1000 * 80 + 5).ToString());
        Assert.Equal(Sid.Unmapped, posix.OwnerSid(65534));
        Assert.Equal(Sid.Unmapped, posix.OwnerSid(0x100000 + 5)); // no primary domain configured

        var unix = new IdentityMap(IdMappingMode.Unix, user);
        Assert.Equal(Sid.UnixUser(1000), unix.OwnerSid(1000));
    }

    [Theory]
    [InlineData(0x1EDu)] // 0755
    [InlineData(0x1A4u)] // 0644
    [InlineData(0x180u)] // 0600
    [InlineData(0x1A0u)] // 0640
    [InlineData(0x124u)] // 0444
    [InlineData(0x047u)] // 0107: more for others than for the owner (deny ACEs)
    [InlineData(0x000u)]
    public void ModesSurviveTheDaclRoundTrip(uint mode)
    {
        var owner = Sid.UnixUser(1000);
        var group = Sid.UnixGroup(100);
        var sd = SecurityDescriptors.Parse(SecurityDescriptors.Build(owner, group, 0x8000 | mode));
        Assert.Equal(mode, SecurityDescriptors.ModeFromDacl(sd.Dacl, owner, group));
        Assert.Equal(SecurityDescriptors.Build(owner, group, mode).Length, SecurityDescriptors.SelfRelativeLength(SecurityDescriptors.Build(owner, group, mode)));
    }

    [Fact]
    public void GenericRightsAndEveryoneCountForEveryClass()
    {
        var owner = Sid.UnixUser(1);
        var group = Sid.UnixGroup(2);
        var dacl = new List<Ace>
        {
            new(AceType.AccessDenied, AccessRights.WriteData, group),
            new(AceType.AccessAllowed, (AccessRights)0x1000_0000, owner),           // GENERIC_ALL
            new(AceType.AccessAllowed, (AccessRights)0xA000_0000, Sid.World),        // GENERIC_READ | GENERIC_EXECUTE
            new(AceType.AccessAllowed, AccessRights.WriteData, Sid.World),
            new(AceType.AccessAllowed, AccessRights.WriteData, owner, Flags: 0x08), // inherit-only: not for this file
        };
        Assert.Equal(0x1EFu, SecurityDescriptors.ModeFromDacl(dacl, owner, group)); // rwx r-x rwx
        Assert.Equal(0x1FFu, SecurityDescriptors.ModeFromDacl(null, owner, group));
    }
}

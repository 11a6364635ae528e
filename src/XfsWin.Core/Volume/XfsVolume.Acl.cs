using XfsWin.Attributes;
using XfsWin.Inodes;

namespace XfsWin.Volume;

/// <summary>
/// The mode and POSIX ACLs a new inode gets in its directory (see <see cref="XfsVolume.InheritAcls"/>): the mode to
/// create it with, and the ACLs (in XFS's stored form) to set on it once it exists, or null.
/// </summary>
public readonly record struct InheritedAcls(ushort Mode, byte[]? Access, byte[]? Default);

public sealed partial class XfsVolume
{
    private static ReadOnlySpan<byte> AccessAclName => "SGI_ACL_FILE"u8;
    private static ReadOnlySpan<byte> DefaultAclName => "SGI_ACL_DEFAULT"u8;

    /// <summary>
    /// What posix_acl_create gives an inode of <paramref name="mode"/> (file type and permission bits) created in
    /// <paramref name="directory"/>: without a default ACL there, the mode less <paramref name="umask"/>; with one, the
    /// umask is not used: the mode keeps what the default ACL grants, the new inode gets the default ACL masked by the
    /// mode as its access ACL when that says more than the mode bits, and a new directory gets the default ACL itself.
    /// Symbolic links get the mode as given. Hosts that create on behalf of a Linux caller (the VFS does this before the
    /// kernel's XFS creates an inode) create with <see cref="InheritedAcls.Mode"/>, then call
    /// <see cref="SetInheritedAcls"/>.
    /// </summary>
    public InheritedAcls InheritAcls(ulong directory, ushort mode, uint umask)
    {
        if ((mode & 0xF000) == 0xA000) return new(mode, null, null);
        if (!TryGetXattr(directory, XattrNamespace.Trusted, DefaultAclName, out var stored))
            return new((ushort)(mode & ~(umask & 0x1FF)), null, null);
        var (access, notEquivalent, masked) = PosixAcl.ParseXfs(stored).CreateMasq(mode);
        return new(masked, notEquivalent ? access.ToXfs() : null, (mode & 0xF000) == 0x4000 ? stored : null);
    }

    /// <summary>
    /// Sets the ACLs <see cref="InheritAcls"/> gave <paramref name="created"/>, just created as <paramref name="name"/> in
    /// <paramref name="directory"/>: its default ACL (a directory), then its access ACL, as xfs_generic_create does. When
    /// that fails (no space for the attribute fork's block, say) the new name is removed again and the error thrown: the
    /// create fails as a whole, as the kernel's does. Returns the inode's attributes after the change.
    /// </summary>
    public InodeAttributes SetInheritedAcls(ulong directory, ReadOnlySpan<byte> name, InodeAttributes created, InheritedAcls acls)
    {
        if (acls.Default is null && acls.Access is null) return created;
        try
        {
            if (acls.Default is { } inherited) SetXattr(created.Inode, XattrNamespace.Trusted, DefaultAclName, inherited);
            if (acls.Access is { } access) SetXattr(created.Inode, XattrNamespace.Trusted, AccessAclName, access);
        }
        catch (XfsException)
        {
            RemoveName(directory, name, directory: created.FileType == Format.XfsFileType.Directory);
            throw;
        }
        return GetAttributes(created.Inode);
    }

    /// <summary>
    /// posix_acl_chmod, after a mode change of <paramref name="inode"/> to <paramref name="mode"/>: an access ACL the
    /// inode has follows the new mode (its owner, mask or owning-group, and other entries), in a transaction of its own
    /// after the mode's, as the kernel's setattr does.
    /// </summary>
    private void FollowModeInAccessAcl(ulong inode, ushort mode)
    {
        if (!TryGetXattr(inode, XattrNamespace.Trusted, AccessAclName, out var stored)) return;
        var updated = PosixAcl.ParseXfs(stored).Chmod(mode).ToXfs();
        if (!updated.AsSpan().SequenceEqual(stored)) SetXattr(inode, XattrNamespace.Trusted, AccessAclName, updated);
    }
}

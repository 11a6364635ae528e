using XfsWin.Attributes;
using XfsWin.Inodes;

namespace XfsWin.Volume;

// The namespace and data operations of a read-write volume (the POSIX calls hosts translate). Each is one or more
// logged transactions; each throws XfsException: ReadOnly on a read-only open, NotFound, Exists, NotEmpty, NoSpace,
// NotADirectory, IsADirectory, NameTooLong, InvalidArgument as the matching POSIX call would fail.
public sealed partial class XfsVolume
{
    /// <summary>
    /// mknod/creat: a regular file, fifo, socket or device node named <paramref name="name"/> in <paramref name="parent"/>
    /// (<paramref name="mode"/> holds the type bits and the permissions). Returns the new inode's attributes.
    /// </summary>
    public InodeAttributes CreateNode(ulong parent, ReadOnlySpan<byte> name, ushort mode, uint uid, uint gid, uint deviceMajor = 0, uint deviceMinor = 0) =>
        throw NotYet("creating files");

    /// <summary>mkdir.</summary>
    public InodeAttributes MakeDirectory(ulong parent, ReadOnlySpan<byte> name, ushort mode, uint uid, uint gid) =>
        throw NotYet("creating directories");

    /// <summary>symlink: a link holding <paramref name="target"/> (stored in the inode when it fits, else in blocks).</summary>
    public InodeAttributes MakeSymlink(ulong parent, ReadOnlySpan<byte> name, ReadOnlySpan<byte> target, uint uid, uint gid) =>
        throw NotYet("creating symbolic links");

    /// <summary>link: another name for <paramref name="inode"/> (not a directory).</summary>
    public InodeAttributes Link(ulong inode, ulong newParent, ReadOnlySpan<byte> newName) => throw NotYet("hard links");

    /// <summary>unlink: removes a name of a non-directory; the inode is freed when its last link and last use are gone.</summary>
    public void Unlink(ulong parent, ReadOnlySpan<byte> name) => throw NotYet("removing files");

    /// <summary>rmdir: removes an empty directory.</summary>
    public void RemoveDirectory(ulong parent, ReadOnlySpan<byte> name) => throw NotYet("removing directories");

    /// <summary>renameat2.</summary>
    public void Rename(ulong parent, ReadOnlySpan<byte> name, ulong newParent, ReadOnlySpan<byte> newName, RenameFlags flags = RenameFlags.None) =>
        throw NotYet("renaming");

    /// <summary>pwrite: writes <paramref name="data"/> at <paramref name="offset"/>, allocating blocks and moving EOF as needed; returns the bytes written.</summary>
    public int Write(ulong inode, long offset, ReadOnlySpan<byte> data) => throw NotYet("writing file data");

    /// <summary>fallocate.</summary>
    public void Allocate(ulong inode, long offset, long length, FallocateMode mode) => throw NotYet("fallocate");

    /// <summary>setxattr (POSIX ACLs through their system.posix_acl_* names, stored as XFS stores them).</summary>
    public void SetXattr(ulong inode, XattrNamespace ns, ReadOnlySpan<byte> name, ReadOnlySpan<byte> value, XattrSetMode mode = XattrSetMode.Any) =>
        throw NotYet("setting extended attributes");

    /// <summary>removexattr.</summary>
    public void RemoveXattr(ulong inode, XattrNamespace ns, ReadOnlySpan<byte> name) => throw NotYet("removing extended attributes");

    /// <summary>
    /// A host holds <paramref name="inode"/> (an open file, or an entry the kernel caches): an inode whose last name is
    /// removed stays (on the AGI unlinked list) until every hold is released.
    /// </summary>
    public void Retain(ulong inode, ulong count = 1) { }

    /// <summary>Releases holds taken with <see cref="Retain"/>; an unlinked inode without holds is freed.</summary>
    public void Release(ulong inode, ulong count = 1) { }

    private static XfsException NotYet(string what) =>
        new(XfsError.Unsupported, $"{what} is not supported by this build yet; nothing was changed");
}

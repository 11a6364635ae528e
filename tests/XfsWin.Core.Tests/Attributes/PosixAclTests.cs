using XfsWin.Attributes;
using Xunit;

namespace XfsWin.Tests.Attributes;

/// <summary>
/// Well-formed ACLs are checked end to end against the kernel (getfattr/getfacl over both mounts in
/// FuseTreeTests); these cover what a damaged volume may hold.
/// </summary>
public sealed class PosixAclTests
{
    [Fact]
    public void Malformed_stored_acls_are_refused_not_misread()
    {
        Assert.Null(PosixAcl.TryXfsToLinux([]));
        Assert.Null(PosixAcl.TryXfsToLinux([0, 0, 0]));
        // Claims two entries but holds one.
        Assert.Null(PosixAcl.TryXfsToLinux([0, 0, 0, 2, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0, 6, 0, 0]));
        // An absurd entry count.
        Assert.Null(PosixAcl.TryXfsToLinux([0x7F, 0xFF, 0xFF, 0xFF]));
        // A tag that does not fit the Linux format's 16 bits.
        Assert.Null(PosixAcl.TryXfsToLinux([0, 0, 0, 1, 0, 1, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 6, 0, 0]));
    }

    [Fact]
    public void An_empty_acl_converts_to_the_bare_header()
    {
        Assert.Equal(new byte[] { 2, 0, 0, 0 }, PosixAcl.TryXfsToLinux([0, 0, 0, 0]));
    }
}

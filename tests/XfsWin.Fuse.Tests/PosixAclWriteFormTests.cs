using System.Runtime.InteropServices;
using XfsWin.Attributes;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// setxattr of system.posix_acl_* hands the engine XFS's own form: the conversion from Linux's
/// form must give exactly the bytes the kernel's XFS stored (trusted.SGI_ACL_*, read raw as root).
/// </summary>
public sealed unsafe class PosixAclWriteFormTests
{
    [Theory]
    [InlineData("xattrs/acl", "system.posix_acl_access", "trusted.SGI_ACL_FILE")]
    [InlineData("xattrs/acl-dir", "system.posix_acl_access", "trusted.SGI_ACL_FILE")]
    [InlineData("xattrs/acl-dir", "system.posix_acl_default", "trusted.SGI_ACL_DEFAULT")]
    public void Linux_acl_values_convert_to_the_bytes_the_kernel_stored(string path, string linuxName, string storedName)
    {
        using var k = new KernelMount(TestImages.Tree);
        var full = Path.Combine(k.MountPoint, path);
        var linux = Get(full, linuxName);
        var stored = Get(full, storedName);
        Assert.True(PosixAcl.TryParseLinux(linux, out var acl, out var problem), problem);
        Assert.Equal(Convert.ToHexString(stored), Convert.ToHexString(acl!.ToXfs()));
        Assert.Equal(Convert.ToHexString(linux), Convert.ToHexString(PosixAcl.XfsToLinux(acl.ToXfs())));
    }

    [Theory]
    [InlineData("")]
    [InlineData("01000000")]                       // version 1
    [InlineData("020000000100")]                   // a partial entry
    [InlineData("0200000040000700000000")]         // a short entry
    [InlineData("020000004000070000000000")]       // unknown tag 0x40
    [InlineData("020000000100080000000000")]       // permissions beyond rwx
    public void Malformed_linux_values_are_refused_with_a_reason(string hex)
    {
        Assert.False(PosixAcl.TryParseLinux(Convert.FromHexString(hex), out _, out var problem));
        Assert.NotEmpty(problem);
    }

    private static byte[] Get(string path, string name)
    {
        var buffer = new byte[65536];
        nint n;
        fixed (byte* p = buffer)
            n = Libc.lgetxattr(path, name, p, buffer.Length);
        Assert.True(n >= 0, $"getxattr {name} of {path}: errno {Marshal.GetLastPInvokeError()}");
        return buffer[..(int)n];
    }
}

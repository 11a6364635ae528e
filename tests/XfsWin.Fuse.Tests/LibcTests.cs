namespace XfsWin.Fuse.Tests;

/// <summary>The differential harness's own system calls.</summary>
public sealed class LibcTests
{
    /// <summary>
    /// A file the harness holds open on a mount must not be inherited by the processes other tests
    /// start meanwhile (a background xfswin server lives as long as its own mount): the inherited
    /// descriptor would keep this mount busy and its unmount failing.
    /// </summary>
    [Fact]
    public void Descriptors_the_harness_opens_are_not_inherited_by_child_processes()
    {
        var dir = Shell.MakeTempDirectory("xfswin-libc");
        try
        {
            var path = Path.Combine(dir, "held");
            var fd = Libc.open(path, Libc.O_CREAT | Libc.O_RDWR, 0x180);
            Assert.True(fd >= 0, $"open failed (errno {System.Runtime.InteropServices.Marshal.GetLastPInvokeError()})");
            try
            {
                var childFds = Shell.Bash("ls -l /proc/$$/fd");
                Assert.DoesNotContain(path, childFds, StringComparison.Ordinal);
            }
            finally
            {
                Libc.close(fd);
            }
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

using XfsWin.TestSupport;
using TS = XfsWin.TestSupport.Shell;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// What writes, truncates (truncate(2), ftruncate and open with O_TRUNC, of empty files too, and the times they set),
/// fallocate, copy_file_range and chowns take from files
/// with setuid, setgid or a file
/// capability, through <c>xfswin mount -o rw</c> against the kernel's XFS on copies of one empty volume
/// (Images/killpriv-ops.py: unprivileged steps as uid 65534, root's own, capabilities set again after a write, setuid
/// added to a file writes already found clean, append-only files opened with O_TRUNC). The mount negotiates
/// FUSE_HANDLE_KILLPRIV_V2 and atomic_o_trunc, so the kernel stops
/// asking for security.capability before every write and leaves setuid and setgid to the server: every step must
/// leave the modes and capabilities the kernel's XFS leaves, over /dev/fuse and, when the kernel has it on, over FUSE
/// over io_uring; xfs_repair -n is clean.
/// </summary>
public sealed class KillPrivilegesTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-killpriv");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Setuid_setgid_and_capabilities_go_as_on_the_kernel() => Run(output, _tmp, "io_uring=no");

    internal static void Run(ITestOutputHelper output, string _tmp, string transport, Action<ReadWriteMount>? check = null)
    {
        string baseImage = Path.Combine(_tmp, "base.img"), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        TS.RunChecked("truncate", "-s", "1G", baseImage);
        TS.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", baseImage);
        TS.RunChecked("cp", "--sparse=always", baseImage, kernelImage);
        TS.RunChecked("cp", "--sparse=always", baseImage, ourImage);
        string script = Path.Combine(AppContext.BaseDirectory, "Images", "killpriv-ops.py");
        string kernel, ours;
        using (var k = LoopMount.Mount(kernelImage, readOnly: false))
        {
            TS.RunChecked("chmod", "0777", k.MountPoint);
            kernel = TS.RunChecked("python3", script, k.MountPoint).StandardOutput;
        }
        using (var m = new ReadWriteMount(ourImage, "-o", "allow_other," + transport))
        {
            TS.RunChecked("chmod", "0777", m.MountPoint);
            check?.Invoke(m);
            ours = TS.RunChecked("python3", script, m.MountPoint).StandardOutput;
            m.Unmount();
        }
        output.WriteLine(ours);
        Assert.Equal(kernel, ours);
        // The script's steps took something (a run in which nothing was ever removed would compare equal too).
        Assert.Contains("unprivileged: w mode 0777", ours, StringComparison.Ordinal);
        Assert.Contains("written: c mode 0755 size 1000 cap False", ours, StringComparison.Ordinal);
        // ftruncate to the size an empty file has drops setuid and setgid; truncate(2) to a file's own size sets no time.
        Assert.Contains("empty truncated: ef mode 0777 size 0", ours, StringComparison.Ordinal);
        Assert.Contains("truncate(2) to its size: mtime False ctime False", ours, StringComparison.Ordinal);
        Assert.Contains("ftruncate to its size: mtime True ctime True", ours, StringComparison.Ordinal);
        Assert.Contains("preallocated, truncated to its size: blocks 0", ours, StringComparison.Ordinal);
        // truncate(2) to 0 of an empty file changes nothing, where open(O_TRUNC) of one takes setuid and sets the times.
        Assert.Contains("empty truncated: ez mode 6777 size 0", ours, StringComparison.Ordinal);
        Assert.Contains("empty truncated: eo mode 0777 size 0", ours, StringComparison.Ordinal);
        Assert.Contains("truncate(2) to 0 of an empty file: mtime False ctime False", ours, StringComparison.Ordinal);
        Assert.Contains("open(O_TRUNC) of an empty file: mtime True ctime True", ours, StringComparison.Ordinal);
        Assert.Contains("append-only open O_RDONLY|O_TRUNC: Operation not permitted", ours, StringComparison.Ordinal);
        Assert.Empty(KernelMadeImages.RepairProblems(ourImage, "6.13"));
    }
}

/// <summary><see cref="KillPrivilegesTests"/> through FUSE over io_uring (the switch is machine-wide: run alone).</summary>
[Collection(EnableUringCollection.Name)]
public sealed class KillPrivilegesIoUringTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-killpriv-uring");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Setuid_setgid_and_capabilities_go_as_on_the_kernel_through_io_uring()
    {
        using var on = IoUringMode.Set(true);
        KillPrivilegesTests.Run(output, _tmp, "io_uring=yes", m => IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount -o rw,allow_other"));
    }
}

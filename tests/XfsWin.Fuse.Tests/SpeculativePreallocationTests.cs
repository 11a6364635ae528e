using XfsWin.TestSupport;
using TS = XfsWin.TestSupport.Shell;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Speculative preallocation through <c>xfswin mount -o rw</c> against the kernel's XFS on a copy of the same empty 6.13
/// volume (Images/append-ops.py: two files appended in turn, 64 KiB at a time): both have blocks past EOF while open
/// (the kernel's is delayed allocation) and none once closed and unmounted, the same bytes and sizes; xfswin's files
/// stay in a few extents each (one per append without preallocation) and xfs_repair -n is clean.
/// </summary>
public sealed class SpeculativePreallocationTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-prealloc");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Files_appended_in_turn_preallocate_and_give_back_as_the_kernel_does()
    {
        string baseImage = Path.Combine(_tmp, "base.img"), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        TS.RunChecked("truncate", "-s", "1G", baseImage);
        TS.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-b", "size=4096", baseImage);
        TS.RunChecked("cp", "--sparse=always", baseImage, kernelImage);
        TS.RunChecked("cp", "--sparse=always", baseImage, ourImage);
        string script = Path.Combine(AppContext.BaseDirectory, "Images", "append-ops.py");
        string kernel, ours;
        using (var k = LoopMount.Mount(kernelImage, readOnly: false)) kernel = TS.RunChecked("python3", script, k.MountPoint).StandardOutput;
        using (var m = new ReadWriteMount(ourImage))
        {
            ours = TS.RunChecked("python3", script, m.MountPoint).StandardOutput;
            m.Unmount();
        }
        output.WriteLine(ours);
        Assert.Equal(kernel, ours);
        Assert.Contains("log1: size 8388608, past EOF while open True", ours, StringComparison.Ordinal);

        foreach (var f in new[] { "log0", "log1" })
        {
            var fields = XfsDb.Fields(XfsDb.Run(ourImage, "6.13", $"path /{f}", "print core.nextents core.nblocks core.size"));
            var kernelFields = XfsDb.Fields(XfsDb.Run(kernelImage, "6.13", $"path /{f}", "print core.nextents core.nblocks core.size"));
            output.WriteLine($"{f}: {fields["core.nextents"]} extents (the kernel's: {kernelFields["core.nextents"]}), {fields["core.nblocks"]} blocks");
            Assert.True(XfsDb.Number(fields["core.nextents"]) <= 10, $"{f}: {fields["core.nextents"]} extents");
            Assert.Equal(2048, XfsDb.Number(fields["core.nblocks"]));
            Assert.Equal(kernelFields["core.nblocks"], fields["core.nblocks"]);
            Assert.Equal(kernelFields["core.size"], fields["core.size"]);
        }
        Assert.Equal(Hashes(kernelImage), Hashes(ourImage));
        var repair = KernelMadeImages.RepairProblems(ourImage, "6.13");
        Assert.True(repair.Count == 0, string.Join('\n', repair));
    }

    private static string Hashes(string image)
    {
        using var k = LoopMount.Mount(image, readOnly: true);
        return TS.RunChecked("sh", "-c", $"cd {k.MountPoint} && sha256sum log0 log1").StandardOutput;
    }
}

using XfsWin.TestSupport;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// A volume whose log lives on its own device, end to end through xfswin alone: <c>xfswin mkfs -l logdev=</c> makes it,
/// <c>xfswin mount -o rw,logdev=</c> changes it (every change logged on the log device), and then the kernel mounts the
/// pair and sees the same files, and xfs_repair -n -l finds nothing.
/// </summary>
public sealed class ExternalLogMountTests : IDisposable
{
    private readonly string _dir = Shell.MakeTempDirectory("xfswin-extlog");

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    [Fact]
    public void WritesThroughAnExternalLogThatTheKernelThenMounts()
    {
        string image = Path.Combine(_dir, "data.img"), log = Path.Combine(_dir, "data.log");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "100M", log);
        var made = Shell.RunXfswin(["mkfs", "-q", "-l", "logdev=" + log, "-d", "size=1g", image]);
        Assert.True(made.ExitCode == 0, made.Both);

        var content = new byte[200_000];
        new Random(5).NextBytes(content);
        using (var m = new ReadWriteMount(image, "-o", "logdev=" + log))
        {
            Directory.CreateDirectory(m["dir"]);
            for (int i = 0; i < 40; i++) File.WriteAllBytes(m[$"dir/file{i}"], content.AsSpan(0, 1000 * i).ToArray());
            File.WriteAllBytes(m["big"], content);
            File.Move(m["dir/file3"], m["renamed"]);
            File.Delete(m["dir/file4"]);
            m.Unmount();
        }

        string logLoop = XfsWin.TestSupport.Shell.RunChecked("losetup", "--find", "--show", log).StandardOutput.Trim();
        try
        {
            using var k = LoopMount.Mount(image, readOnly: true, "logdev=" + logLoop);
            Assert.Equal(content, File.ReadAllBytes(Path.Combine(k.MountPoint, "big")));
            Assert.Equal(content.AsSpan(0, 3000).ToArray(), File.ReadAllBytes(Path.Combine(k.MountPoint, "renamed")));
            Assert.False(File.Exists(Path.Combine(k.MountPoint, "dir", "file4")));
            Assert.Equal(38, Directory.GetFiles(Path.Combine(k.MountPoint, "dir")).Length);
        }
        finally
        {
            LoopMount.Detach(logLoop);
        }
        var repair = XfsWin.TestSupport.Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", "-l", log, image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
    }

    [Fact]
    public void RefusesToMountReadWriteWithoutTheLogDevice()
    {
        string image = Path.Combine(_dir, "data.img"), log = Path.Combine(_dir, "data.log");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "100M", log);
        Assert.Equal(0, Shell.RunXfswin(["mkfs", "-q", "-l", "logdev=" + log, "-d", "size=1g", image]).ExitCode);
        string before = Hash(image);
        var error = Assert.Throws<InvalidOperationException>(() => new ReadWriteMount(image));
        Assert.Contains("logdev", error.Message, StringComparison.Ordinal);
        Assert.Equal(before, Hash(image));
    }

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(f));
    }
}

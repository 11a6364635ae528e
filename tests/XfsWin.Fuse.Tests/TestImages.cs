using System.Security.Cryptography;
using System.Text.RegularExpressions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Volumes made by the real mkfs.xfs and filled by the kernel (scripts in Images/), cached under
/// /var/tmp keyed by the script's content hash so a run builds each one once.
/// </summary>
internal static class TestImages
{
    private static readonly Lazy<string> s_tree = new(() => Build("tree.sh"));

    /// <summary>The image of Images/tree.sh: every kind of inode, directory form, xattr form and odd name.</summary>
    public static string Tree
    {
        get
        {
            _ = IoUringMode.SuiteMode; // XFSWIN_TEST_IO_URING: every test that mounts passes here first
            return s_tree.Value;
        }
    }

    private static string Build(string script)
    {
        var scriptPath = Path.Combine(AppContext.BaseDirectory, "Images", script);
        var hash = Convert.ToHexStringLower(SHA256.HashData(File.ReadAllBytes(scriptPath)))[..16];
        var dir = Path.Combine("/var/tmp/xfswin-fuse-test-images", $"{Path.GetFileNameWithoutExtension(script)}-{hash}");
        var image = Path.Combine(dir, "image.img");
        Directory.CreateDirectory(dir);
        // flock serialises concurrent test processes; the image appears under its final name only when complete.
        Shell.Bash($"""
            exec 9>{MountCommandProcessTests.Quote(dir + "/lock")}
            flock 9
            if [ ! -f {MountCommandProcessTests.Quote(image)} ]; then
              bash {MountCommandProcessTests.Quote(scriptPath)} {MountCommandProcessTests.Quote(image + ".tmp")}
              mv {MountCommandProcessTests.Quote(image + ".tmp")} {MountCommandProcessTests.Quote(image)}
            fi
            """);
        return image;
    }
}

/// <summary>A kernel XFS loop mount, read-only: the oracle. nouuid: copies of one image may be mounted at once.</summary>
internal sealed class KernelMount : IDisposable
{
    public KernelMount(string image)
    {
        MountPoint = Shell.MakeTempDirectory("xfswin-kernel");
        try
        {
            Shell.Bash($"mount -t xfs -o loop,ro,nouuid {MountCommandProcessTests.Quote(image)} {MountCommandProcessTests.Quote(MountPoint)}");
        }
        catch
        {
            Directory.Delete(MountPoint);
            throw;
        }
    }

    public string MountPoint { get; }

    public void Dispose()
    {
        // umount detaches the loop device the mount set up (autoclear).
        var r = XfsWin.TestSupport.Shell.UnmountKernel(MountPoint);
        if (r.ExitCode != 0)
            throw new InvalidOperationException($"umount {MountPoint} failed:\n{r.StandardError}");
        Directory.Delete(MountPoint);
    }
}

/// <summary>The same image through <c>xfswin mount</c> (background mode), unmounted with fusermount3.</summary>
internal sealed partial class FuseMount : IDisposable
{
    public FuseMount(string image, params string[] options)
    {
        using var holdSwitch = IoUringMode.HoldSwitch(); // until the transport is checked below
        MountPoint = Shell.MakeTempDirectory("xfswin-fuse");
        var r = Shell.RunXfswin(["mount", .. options, image, MountPoint], TimeSpan.FromMinutes(2));
        if (r.ExitCode != 0 || !Shell.IsMounted(MountPoint, "fuse.xfswin"))
        {
            Shell.UnmountFuse(MountPoint);
            Directory.Delete(MountPoint);
            throw new InvalidOperationException($"xfswin mount failed ({r.ExitCode}):\n{r.Both}");
        }
        var pid = ServerPid().Match(r.Stderr);
        ServerProcessId = pid.Success ? int.Parse(pid.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture) : 0;
        Output = r.Both;
        // (Not when a test has switched io_uring off for itself, holding the switch.)
        if (IoUringMode.SuiteRunsOnIoUring && IoUringMode.Read() == "Y" && !options.Any(o => o.Contains("io_uring=no", StringComparison.Ordinal)) && ServerProcessId > 0)
        {
            try
            {
                _ = Directory.EnumerateFileSystemEntries(MountPoint).Any(); // waits for FUSE_INIT
                IoUringMode.AssertServesThroughIoUring(ServerProcessId, "xfswin mount " + string.Join(' ', options));
            }
            catch
            {
                Dispose();
                throw;
            }
        }
    }

    public string MountPoint { get; }

    /// <summary>The background process serving the mount.</summary>
    public int ServerProcessId { get; }

    public string Output { get; }

    public void Dispose()
    {
        if (Shell.IsMounted(MountPoint, "fuse.xfswin"))
        {
            var r = Shell.UnmountFuse(MountPoint);
            if (r.ExitCode != 0)
                throw new InvalidOperationException($"fusermount3 -u failed:\n{r.Both}");
        }
        Directory.Delete(MountPoint);
    }

    [GeneratedRegex(@"server pid (\d+)")]
    private static partial Regex ServerPid();
}

using System.Text.RegularExpressions;
using XfsWin.TestSupport;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>xfswin mount -o rw</c> of an image (background server). <see cref="Unmount"/> is the clean
/// unmount and waits until the server has closed the volume; <see cref="KillServer"/> is a crash.
/// </summary>
internal sealed partial class ReadWriteMount : IDisposable
{
    private bool _gone;

    public ReadWriteMount(string image, params string[] options)
    {
        using var holdSwitch = IoUringMode.HoldSwitch(); // until the transport is checked below
        MountPoint = Shell.MakeTempDirectory("xfswin-rw");
        var r = Shell.RunXfswin(["mount", "-o", "rw", .. options, image, MountPoint], TimeSpan.FromMinutes(2));
        Output = r.Both;
        if (r.ExitCode != 0 || !Shell.IsMounted(MountPoint, "fuse.xfswin"))
        {
            Shell.UnmountFuse(MountPoint);
            Directory.Delete(MountPoint);
            throw new InvalidOperationException($"xfswin mount -o rw failed ({r.ExitCode}):\n{r.Both}");
        }
        var pid = ServerPid().Match(r.Stderr);
        ServerProcessId = pid.Success ? int.Parse(pid.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture) : 0;
        if (ServerProcessId == 0)
        {
            Shell.UnmountFuse(MountPoint);
            throw new InvalidOperationException($"no server pid in the mount's output:\n{r.Both}");
        }
        if (IoUringMode.SuiteRunsOnIoUring && IoUringMode.Read() == "Y" && !options.Any(o => o.Contains("io_uring=no", StringComparison.Ordinal)))
        {
            try
            {
                _ = Directory.EnumerateFileSystemEntries(MountPoint).Any(); // waits for FUSE_INIT
                IoUringMode.AssertServesThroughIoUring(ServerProcessId, "xfswin mount -o rw " + string.Join(' ', options));
            }
            catch
            {
                Dispose();
                throw;
            }
        }
    }

    public string MountPoint { get; }
    public int ServerProcessId { get; }
    public string Output { get; }

    public string this[string relative] => Path.Combine(MountPoint, relative);

    /// <summary>fusermount3 -u, then waits (bounded: a hang must fail the test) until the server has exited, its volume closed.</summary>
    public void Unmount()
    {
        if (_gone)
            return;
        _gone = true;
        if (Shell.IsMounted(MountPoint, "fuse.xfswin"))
        {
            // A lazy detach (when still busy after the retries) leaves the server running until the last reference
            // goes, which WaitForExit below waits for, so what follows still sees the finished image.
            var r = Shell.UnmountFuse(MountPoint);
            Assert.True(r.ExitCode == 0, $"fusermount3 -u failed:\n{r.Both}");
        }
        WaitForExit(TimeSpan.FromSeconds(120));
        Directory.Delete(MountPoint);
    }

    /// <summary>SIGKILL to the server (nothing of its own runs after it), then the dead mount is detached.</summary>
    public void KillServer()
    {
        if (_gone)
            return;
        _gone = true;
        Shell.Run("kill", ["-9", ServerProcessId.ToString(System.Globalization.CultureInfo.InvariantCulture)]);
        WaitForExit(TimeSpan.FromSeconds(60));
        Shell.Run("umount", ["-l", MountPoint]);
        Directory.Delete(MountPoint);
    }

    /// <summary>Waits until the server process has exited (bounded: a hang fails the test).</summary>
    public void WaitForExit(TimeSpan limit)
    {
        var deadline = DateTime.UtcNow + limit;
        while (Directory.Exists($"/proc/{ServerProcessId}") && !IsZombie())
        {
            if (DateTime.UtcNow > deadline)
                throw new TimeoutException($"the xfswin server (pid {ServerProcessId}) did not exit within {limit.TotalSeconds} s of the unmount");
            Thread.Sleep(20);
        }
    }

    private bool IsZombie()
    {
        try
        {
            var stat = File.ReadAllText($"/proc/{ServerProcessId}/stat");
            return stat[(stat.LastIndexOf(')') + 2)..].StartsWith('Z');
        }
        catch (IOException)
        {
            return true;
        }
    }

    public void Dispose()
    {
        if (_gone)
            return;
        try
        {
            Unmount();
        }
        catch (Exception)
        {
            Shell.Run("umount", ["-l", MountPoint]);
        }
    }

    [GeneratedRegex(@"server pid (\d+)")]
    private static partial Regex ServerPid();
}

/// <summary>Small volumes made by mkfs.xfs and filled by the kernel, for tests that change them.</summary>
internal static class KernelMadeImages
{
    /// <summary>
    /// A volume of <paramref name="size"/> (300 MiB) made by mkfs.xfs of <paramref name="xfsprogs"/> (with
    /// <paramref name="mkfsOptions"/>) and filled by the kernel:
    /// /a (5 bytes), /b (10000 zero bytes), /d/c (5 bytes), /d/e (directory), /big (70000 bytes),
    /// /s (symlink to a), /d/h (hard link of a), user.x on /a; files 0644, directories 0755.
    /// </summary>
    public static string Make(string directory, string xfsprogs, string name = "v.img", IReadOnlyList<string>? mkfsOptions = null, string size = "300M")
    {
        var image = Path.Combine(directory, name);
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", size, image);
        // Options may ask for what only fstests' mode allows (the smallest log); plain volumes are made as users make them.
        XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions ?? [], image],
            environment: mkfsOptions is null ? null : MkfsTestMode);
        using var mount = LoopMount.Mount(image, readOnly: false);
        string P(string relative) => Path.Combine(mount.MountPoint, relative);
        Directory.CreateDirectory(P("d/e"));
        File.WriteAllText(P("a"), "alpha");
        File.WriteAllBytes(P("b"), new byte[10000]);
        File.WriteAllText(P("d/c"), "gamma");
        File.WriteAllBytes(P("big"), Enumerable.Range(0, 70000).Select(i => (byte)(i * 7)).ToArray());
        File.CreateSymbolicLink(P("s"), "a");
        XfsWin.TestSupport.Shell.RunChecked("ln", P("a"), P("d/h"));
        XfsWin.TestSupport.Shell.RunChecked("setfattr", "-n", "user.x", "-v", "0x0102", P("a"));
        XfsWin.TestSupport.Shell.RunChecked("chmod", "0644", P("a"), P("b"), P("d/c"), P("big"));
        XfsWin.TestSupport.Shell.RunChecked("chmod", "0755", P("d"), P("d/e"));
        return image;
    }

    /// <summary>
    /// fstests' variables: mkfs.xfs then lifts the floors it sets for production volumes (a 64 MiB log on volumes over
    /// 300 MB), so that the smallest log a geometry allows can be made, as the kernel's own tests make it.
    /// </summary>
    public static readonly Dictionary<string, string> MkfsTestMode = new()
    {
        ["TEST_DIR"] = "/tmp", ["TEST_DEV"] = "/dev/null", ["QA_CHECK_FS"] = "xfs",
    };

    /// <summary>xfs_repair -n of 6.1 (not for 6.13-made volumes, whose features it may not know) and 6.13; the failures as text.</summary>
    public static List<string> RepairProblems(string image, string xfsprogs)
    {
        var problems = new List<string>();
        foreach (var version in new[] { "6.1", "6.13" }.Where(v => v == "6.13" || xfsprogs == "6.1"))
        {
            var repair = XfsWin.TestSupport.Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            if (repair.ExitCode != 0)
                problems.Add($"xfs_repair -n ({version}) exit {repair.ExitCode}:\n{repair.StandardOutput}{repair.StandardError}");
        }
        return problems;
    }
}

using System.Globalization;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The threads that serve /dev/fuse (<see cref="FuseDeviceLoop"/>) and the read-write mount under a
/// mass of creates and unlinks, the load that ended servers when libfuse's own worker threads ran
/// the callbacks.
/// </summary>
public sealed class DeviceLoopTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-loop");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    /// <summary>
    /// Every thread of this process waiting in read(2) on a /dev/fuse descriptor, with its name.
    /// </summary>
    private static List<(int Tid, string Name)> DeviceReaders()
    {
        var fuseFds = new HashSet<long>();
        foreach (var fd in Directory.EnumerateFileSystemEntries("/proc/self/fd"))
        {
            try
            {
                if (new FileInfo(fd).LinkTarget == "/dev/fuse")
                    fuseFds.Add(long.Parse(Path.GetFileName(fd), CultureInfo.InvariantCulture));
            }
            catch (IOException)
            {
                // Closed while we looked.
            }
        }
        var readers = new List<(int, string)>();
        foreach (var task in Directory.EnumerateDirectories("/proc/self/task"))
        {
            try
            {
                // "0 0x5 ..." : read(2) on descriptor 5.
                var syscall = File.ReadAllText(Path.Combine(task, "syscall")).Split(' ');
                if (syscall.Length < 2 || syscall[0] != "0")
                    continue;
                var fd = Convert.ToInt64(syscall[1], 16);
                if (fuseFds.Contains(fd))
                    readers.Add((int.Parse(Path.GetFileName(task), CultureInfo.InvariantCulture), File.ReadAllText(Path.Combine(task, "comm")).Trim()));
            }
            catch (IOException)
            {
                // The thread ended while we looked.
            }
        }
        return readers;
    }

    /// <summary>
    /// Callbacks run only on threads the runtime created and that end by returning: the host reads
    /// /dev/fuse with threads of its own (xfswin-fuse-N), never with libfuse's workers, which run
    /// managed code only inside callbacks and are ended with pthread_cancel.
    /// </summary>
    [Fact]
    public void Only_the_hosts_own_threads_read_the_fuse_device_and_they_end_at_the_unmount()
    {
        const int threads = 3;
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { MaxThreads = threads, IoUring = false });
        Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(m.MountPoint, "small.txt")));
        // Idle now: every serving thread goes back to its read. Other tests' mounts in this process read too.
        List<(int Tid, string Name)> readers = [];
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(60);
        while (DateTime.UtcNow < deadline)
        {
            readers = DeviceReaders();
            Assert.True(readers.All(r => r.Name.StartsWith("xfswin-fuse-", StringComparison.Ordinal)),
                "threads other than the host's read /dev/fuse: " + string.Join(", ", readers.Select(r => $"{r.Tid} '{r.Name}'")));
            if (readers.Count(r => r.Name.StartsWith("xfswin-fuse-", StringComparison.Ordinal)) >= threads)
                break;
            Thread.Sleep(20);
        }
        Assert.True(readers.Count >= threads, $"expected at least {threads} serving threads waiting in read(2), found {readers.Count}");

        m.Unmount(out var rc);
        Assert.Equal(0, rc);
    }

    /// <summary>
    /// Thousands of files created through `xfswin mount -o rw`, then deleted by find -delete (each
    /// unlink is followed by the kernel's FORGET of the inode, served concurrently with the next
    /// unlinks): the server serves them all and unmounts cleanly, and the kernel's XFS and
    /// xfs_repair see an empty, consistent volume.
    /// </summary>
    [Fact]
    public void Ten_thousand_files_created_and_deleted_through_a_read_write_mount_leave_a_clean_volume() =>
        CreateAndDeleteThroughTheMount(_tmp, output, files: 10_000);

    internal static void CreateAndDeleteThroughTheMount(string directory, ITestOutputHelper output, int files, bool ioUring = false)
    {
        var image = Path.Combine(directory, "mass.img");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "1G", image);
        XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.1"), "-f", "-q", image);
        using (var m = new ReadWriteMount(image))
        {
            if (ioUring)
                IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount -o rw");
            Shell.Bash($$"""
                python3 - {{Q(m.MountPoint)}} {{files}} <<'PY'
                import os, sys
                root, n = sys.argv[1], int(sys.argv[2])
                for d in range(20):
                    os.mkdir(os.path.join(root, f"d{d}"))
                data = b"x" * 4096
                for i in range(n):
                    fd = os.open(os.path.join(root, f"d{i % 20}", f"file-{i:05d}"), os.O_CREAT | os.O_WRONLY, 0o644)
                    os.write(fd, data)
                    os.close(fd)
                PY
                """);
            Assert.Equal(files.ToString(CultureInfo.InvariantCulture), Shell.Bash($"find {Q(m.MountPoint)} -type f | wc -l").Trim());
            var delete = Shell.Run("find", [m.MountPoint, "-type", "f", "-delete"]);
            Assert.True(delete.ExitCode == 0, $"find -delete failed:\n{string.Join('\n', delete.Both.Split('\n').Take(20))}");
            Assert.True(Directory.Exists($"/proc/{m.ServerProcessId}"), "the server ended during the deletes");
            Assert.Equal("0", Shell.Bash($"find {Q(m.MountPoint)} -type f | wc -l").Trim());
            var statfs = Shell.Bash($"stat -f -c '%f %d' {Q(m.MountPoint)}").Trim();
            output.WriteLine($"free blocks, free inodes after the deletes: {statfs}");
            m.Unmount();
        }
        using (var k = LoopMount.Mount(image, readOnly: true))
        {
            Assert.Equal(20, Directory.GetDirectories(k.MountPoint).Length);
            // SearchOption.AllDirectories enumerates every entry, dot-files included (no attribute is left out).
            Assert.Empty(Directory.GetFiles(k.MountPoint, "*", SearchOption.AllDirectories));
        }
        var problems = KernelMadeImages.RepairProblems(image, "6.1");
        Assert.True(problems.Count == 0, string.Join("\n", problems));
    }
}

/// <summary>The same load through FUSE over io_uring: unlinks on the queue threads, FORGETs on the /dev/fuse threads.</summary>
[Collection(EnableUringCollection.Name)]
public sealed class DeviceLoopIoUringTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-loop-uring");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void Ten_thousand_files_created_and_deleted_through_io_uring_leave_a_clean_volume()
    {
        using var on = IoUringMode.Set(true);
        DeviceLoopTests.CreateAndDeleteThroughTheMount(_tmp, output, files: 10_000, ioUring: true);
    }
}

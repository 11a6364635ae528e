using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The XFS file ioctls through <c>xfswin mount -o rw</c> (FUSE_IOCTL) against the kernel's XFS on a copy of the same
/// 6.13 volume (reflink, exchange-range): xfs_io 6.13's chproj, lsproj, extsize, chattr, lsattr and stat, the
/// copy-on-write hint through FS_IOC_FSSETXATTR, what immutable and append-only files and directories refuse,
/// inheritance by new files and directories, links and renames across project trees (Images/fileattr-ops.sh); and
/// XFS_IOC_EXCHANGE_RANGE with its checks and flags (Images/exchange-ops.py). Every output and status must be the
/// kernel's; after both are unmounted, xfs_db shows the same inode fields, the kernel mounts ours and xfs_io shows
/// the same attributes, and xfs_repair -n finds nothing.
/// </summary>
public sealed class FileAttrIoctlTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-ioctl");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string Script(string name) => Path.Combine(AppContext.BaseDirectory, "Images", name);

    private static readonly Dictionary<string, string> Xfs613 = new() { ["XFS_IO"] = OracleImages.Tool("xfs_io", "6.13") };

    private string MakeBase(bool exchangeFiles = false, bool attrForkFiles = false, bool commitFiles = false)
    {
        var image = Path.Combine(_tmp, "base.img");
        XfsWin.TestSupport.Shell.RunChecked("truncate", "-s", "300M", image);
        XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-i", "exchange=1", image);
        using var m = LoopMount.Mount(image, readOnly: false);
        string P(string r) => Path.Combine(m.MountPoint, r);
        foreach (var d in new[] { "d", "imm", "rt" }) Directory.CreateDirectory(P(d));
        File.WriteAllBytes(P("e"), []);
        File.WriteAllBytes(P("f"), new byte[8192]);
        File.WriteAllBytes(P("g"), [1, 2, 3]);
        File.WriteAllText(P("app"), "start\n");
        XfsWin.TestSupport.Shell.RunChecked("chown", "0:1000", P("g"));
        XfsWin.TestSupport.Shell.RunChecked("chmod", "2775", P("g"));
        if (exchangeFiles) XfsWin.TestSupport.Shell.RunChecked("python3", Script("exchange-ops.py"), "prepare", m.MountPoint);
        if (attrForkFiles) XfsWin.TestSupport.Shell.RunChecked("python3", Script("fsgetxattra.py"), "prepare", m.MountPoint);
        if (commitFiles) XfsWin.TestSupport.Shell.RunChecked("python3", Script("commit-ops.py"), "prepare", m.MountPoint);
        return image;
    }

    /// <summary>Runs the same script on the kernel's mount and on ours; returns both outputs.</summary>
    private (string Kernel, string Ours) RunBoth(string baseImage, string kernelImage, string ourImage, string file, string argument, params string[] mountOptions)
    {
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, kernelImage);
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, ourImage);
        string Run(string root) => XfsWin.TestSupport.Shell.Run(file, [.. argument.Split(' '), root], environment: Xfs613).StandardOutput;
        string kernel, ours;
        using (var k = LoopMount.Mount(kernelImage, readOnly: false)) kernel = Run(k.MountPoint);
        using (var m = new ReadWriteMount(ourImage, mountOptions))
        {
            ours = Run(m.MountPoint);
            m.Unmount();
        }
        return (kernel, ours);
    }

    /// <summary>xfs_db's view of what the ioctls change, per path.</summary>
    private static string InodeFields(string image, IEnumerable<string> paths)
    {
        const string Fields = "core.mode core.uid core.gid core.projid_lo core.projid_hi core.extsize core.realtime core.immutable core.append " +
                              "core.sync core.noatime core.nodump core.rtinherit core.projinherit core.nosymlinks core.extsz core.extszinherit " +
                              "core.nodefrag core.filestream v3.dax v3.reflink v3.cowextsize v3.cowextsz core.size";
        var lines = new List<string>();
        foreach (var p in paths)
            lines.Add(p + ": " + XfsWin.TestSupport.Shell.Run(OracleImages.Tool("xfs_db", "6.13"), "-r", "-c", $"path {p}", "-c", $"print {Fields}", image)
                .StandardOutput.ReplaceLineEndings(" ").Trim());
        return string.Join('\n', lines);
    }

    /// <summary>xfs_io's stat of each path on a kernel mount of <paramref name="image"/> (inode numbers left out: new inodes may be placed elsewhere).</summary>
    private static string KernelStat(string image, IEnumerable<string> paths)
    {
        using var k = LoopMount.Mount(image, readOnly: true);
        var r = XfsWin.TestSupport.Shell.Run(OracleImages.Tool("xfs_io", "6.13"), ["-r", "-c", "stat -v", .. paths.Select(p => Path.Combine(k.MountPoint, p.TrimStart('/')))]);
        return string.Join('\n', (r.StandardOutput + r.StandardError).Replace(k.MountPoint, "", StringComparison.Ordinal).Split('\n')
            .Where(l => !l.StartsWith("stat.ino", StringComparison.Ordinal) && !l.Contains("time", StringComparison.Ordinal)));
    }

    private void AssertSameOnDisk(string kernelImage, string ourImage, string[] paths)
    {
        string kernelFields = InodeFields(kernelImage, paths), ourFields = InodeFields(ourImage, paths);
        output.WriteLine(ourFields);
        Assert.Equal(kernelFields, ourFields);
        Assert.Equal(KernelStat(kernelImage, paths), KernelStat(ourImage, paths));
        var repair = KernelMadeImages.RepairProblems(ourImage, "6.13");
        Assert.True(repair.Count == 0, string.Join('\n', repair));
    }

    [Fact]
    public void Xfs_io_attribute_commands_answer_and_store_what_the_kernel_does()
    {
        string baseImage = MakeBase(), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        var (kernel, ours) = RunBoth(baseImage, kernelImage, ourImage, "bash", Script("fileattr-ops.sh"));
        output.WriteLine(ours);
        Assert.Equal(kernel, ours);
        // The script must reach what it tests: a project id, hints, flags set, refusals.
        Assert.Contains("projid = 42", ours, StringComparison.Ordinal);
        Assert.Contains("fsxattr.cowextsize = 131072", ours, StringComparison.Ordinal);
        Assert.Contains("Operation not permitted", ours, StringComparison.Ordinal);
        Assert.Contains("Invalid cross-device link", ours, StringComparison.Ordinal);
        AssertSameOnDisk(kernelImage, ourImage, ["/e", "/d", "/d/sub", "/d/sub/x", "/d/y", "/d/f", "/imm", "/rt", "/app", "/g"]);
    }

    [Fact]
    public void Fsgetxattra_counts_the_attribute_fork_as_the_kernel_does()
    {
        string baseImage = MakeBase(attrForkFiles: true), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        // The attribute forks the kernel made are of the three formats the count comes from.
        string Format(string path) => XfsWin.TestSupport.Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), "-r", "-c", $"path {path}",
            "-c", "print core.aformat core.naextents", baseImage).StandardOutput;
        Assert.Contains("(local)", Format("/al2"), StringComparison.Ordinal);
        Assert.Contains("(extents)", Format("/ae"), StringComparison.Ordinal);
        Assert.Contains("(btree)", Format("/ab"), StringComparison.Ordinal);
        var (kernel, ours) = RunBoth(baseImage, kernelImage, ourImage, "python3", Script("fsgetxattra.py") + " run");
        output.WriteLine(ours);
        Assert.Equal(kernel, ours);
        Assert.Contains("al2 fsgetxattra 0x80000000 0 8 0 0", ours, StringComparison.Ordinal); // 129 bytes of short form
        AssertSameOnDisk(kernelImage, ourImage, ["/al2", "/dir"]);
    }

    [Fact]
    public void Start_commit_and_commit_range_answer_and_exchange_what_the_kernel_does()
    {
        string baseImage = MakeBase(commitFiles: true), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        var (kernel, ours) = RunBoth(baseImage, kernelImage, ourImage, "python3", Script("commit-ops.py") + " run");
        output.WriteLine(ours);
        // The freshness record of an unchanged file is the kernel's, byte for byte (file system id, inode, times,
        // generation, magic); every commit answers as the kernel's.
        Assert.Equal(kernel, ours);
        Assert.Contains("commit t1 c1 0 0 16384 0 0 ok", ours, StringComparison.Ordinal);
        Assert.Contains("commit t1 c1 0 0 16384 0 0 errno 16", ours, StringComparison.Ordinal);
        Assert.Contains("commit t2 c2 0 0 16384 0 0 errno 16", ours, StringComparison.Ordinal);
        Assert.Contains("commit t4 c4 0 0 16384 0 7 ok", ours, StringComparison.Ordinal);
        Assert.Matches("start c1 0{80} [0-9a-f]{88}4b524f44", ours); // the record, with its magic
        Assert.Matches("start d 0{80} [0-9a-f]{88}4b524f44", ours);
        Assert.Matches("\nt6 [0-9a-f]{64}\n", ours); // the script ran to its end
        AssertSameOnDisk(kernelImage, ourImage, ["/c1", "/t1", "/c4", "/t4", "/c6", "/t6"]);
    }

    [Fact]
    public void Exchange_range_answers_and_exchanges_what_the_kernel_does()
    {
        string baseImage = MakeBase(exchangeFiles: true), kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "xfswin.img");
        // allow_other: the script calls some exchanges as an unprivileged user.
        var (kernel, ours) = RunBoth(baseImage, kernelImage, ourImage, "python3", Script("exchange-ops.py") + " run", "-o", "allow_other");
        output.WriteLine(ours);
        Assert.Equal(kernel, ours);
        Assert.Contains(" ok", ours, StringComparison.Ordinal);
        Assert.Contains("errno 22", ours, StringComparison.Ordinal);
        Assert.Contains("errno 9", ours, StringComparison.Ordinal);
        // What file_remove_privs took: p1's capability (root keeps setuid), q1's setuid and capability, q3's setgid.
        Assert.Contains("p1 0o106755 0 0 errno 61", ours, StringComparison.Ordinal);
        Assert.Contains("q1 0o100755 1000 1000 errno 61", ours, StringComparison.Ordinal);
        Assert.Contains("q3 0o100664 1000 2000", ours, StringComparison.Ordinal);
        Assert.Contains("q5 0o100775 1000 1000 errno 61", ours, StringComparison.Ordinal); // a dry run too
        AssertSameOnDisk(kernelImage, ourImage, ["/x1", "/x2", "/x3", "/x4", "/x5", "/p1", "/p2", "/q1", "/q2", "/q3", "/q4", "/q5", "/q6"]);
        // What the kernel reads back from our volume is what it wrote to its own.
        string Hashes(string image)
        {
            using var k = LoopMount.Mount(image, readOnly: true);
            return XfsWin.TestSupport.Shell.RunChecked("sh", "-c", $"cd {k.MountPoint} && sha256sum x1 x2 x3 x4 x5 p1 p2 q1 q2 q3 q4 q5 q6").StandardOutput;
        }
        Assert.Equal(Hashes(kernelImage), Hashes(ourImage));
    }
}

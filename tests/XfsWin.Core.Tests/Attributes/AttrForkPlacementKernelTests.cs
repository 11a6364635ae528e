using System.Text;
using Xunit;
using XfsWin.Attributes;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Attributes;

/// <summary>
/// Where the attribute fork goes (di_forkoff) and which form it has, compared with the kernel's own choices: the same
/// steps run through the kernel on one copy of a volume and through the engine on another, then xfs_db reads both.
/// The fork offset decides when short-form directories, local symlinks and extent lists change form, so a different
/// one shows later as a directory of another size than the kernel's. The steps: new files, directories, device nodes
/// and symlinks (the kernel gives all but symlinks an empty fork at once when a security module keeps per-superblock
/// state, as here); a first attribute too long for short-form on an inode without a fork (xfs_attr_set places the fork
/// for it with 8-bit lengths); a replace of a missing name on an inode without a fork (the fork is added first and
/// stays); a replace in leaf form whose entries then fit short-form (back to short-form, as a removal does).
/// </summary>
public sealed class AttrForkPlacementKernelTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-forkoff.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly string[] Paths = ["file", "dir", "fifo", "link", "long-link", "big-first", "missing-replace", "replace-shrinks"];

    [Fact]
    public void The_attribute_fork_is_placed_and_shaped_as_the_kernel_places_and_shapes_it()
    {
        string baseImage = Path.Combine(_tmp, "base.img");
        Shell.RunChecked("truncate", "-s", "300M", baseImage);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.1"), "-f", "-q", baseImage);
        // Directories whose fork was there and went again (the last attribute removed): no fork left.
        using (var mount = LoopMount.Mount(baseImage, readOnly: false))
        {
            foreach (var d in new[] { "big-first", "missing-replace", "replace-shrinks" })
            {
                string p = Path.Combine(mount.MountPoint, d);
                Directory.CreateDirectory(p);
                File.WriteAllText(Path.Combine(p, "entry"), "x");
                Shell.RunChecked("setfattr", "-n", "user.gone", "-v", "1", p);
                Shell.RunChecked("setfattr", "-x", "user.gone", p);
            }
        }
        foreach (var d in new[] { "big-first", "missing-replace" })
            Assert.Equal("0", Fields(baseImage, d)["core.forkoff"]);

        string kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "ours.img");
        File.Copy(baseImage, kernelImage);
        File.Copy(baseImage, ourImage);
        string longName = new('x', 200);
        var big = new byte[10000];
        new Random(3).NextBytes(big);

        using (var mount = LoopMount.Mount(kernelImage, readOnly: false))
        {
            string m = mount.MountPoint;
            File.WriteAllBytes(Path.Combine(m, "file"), []);
            Directory.CreateDirectory(Path.Combine(m, "dir"));
            Shell.RunChecked("mkfifo", Path.Combine(m, "fifo"));
            File.CreateSymbolicLink(Path.Combine(m, "link"), "t");
            File.CreateSymbolicLink(Path.Combine(m, "long-link"), new string('t', 250));
            Assert.Equal(0, SetFileAttr(Path.Combine(m, "big-first"), "user.b", big));
            Assert.Equal(61, SetFileAttr(Path.Combine(m, "missing-replace"), "user." + longName, [], replace: true)); // ENODATA
            Assert.Equal(0, SetFileAttr(Path.Combine(m, "replace-shrinks"), "user.b", big));
            Assert.Equal(0, SetFileAttr(Path.Combine(m, "replace-shrinks"), "user.b", [], replace: true));
        }

        using (var v = XfsVolume.Open(ourImage, new VolumeOpenOptions { Writable = true }))
        {
            byte[] N(string s) => Encoding.UTF8.GetBytes(s);
            ulong root = v.RootInode;
            v.CreateNode(root, N("file"), 0x81A4, 0, 0);
            v.MakeDirectory(root, N("dir"), 0x1ED, 0, 0);
            v.CreateNode(root, N("fifo"), 0x11A4, 0, 0);
            v.MakeSymlink(root, N("link"), N("t"), 0, 0);
            v.MakeSymlink(root, N("long-link"), N(new string('t', 250)), 0, 0);
            ulong Dir(string name) => v.ResolvePath("/" + name);
            v.SetXattr(Dir("big-first"), XattrNamespace.User, N("b"), big);
            var e = Assert.Throws<XfsException>(() => v.SetXattr(Dir("missing-replace"), XattrNamespace.User, N(longName), [], XattrSetMode.Replace));
            Assert.Equal(XfsError.NoAttribute, e.Error);
            v.SetXattr(Dir("replace-shrinks"), XattrNamespace.User, N("b"), big);
            v.SetXattr(Dir("replace-shrinks"), XattrNamespace.User, N("b"), [], XattrSetMode.Replace);
        }

        foreach (var path in Paths)
        {
            var kernel = Fields(kernelImage, path);
            var ours = Fields(ourImage, path);
            foreach (var field in new[] { "core.forkoff", "core.aformat", "core.format", "core.size" })
                Assert.True(kernel[field] == ours[field], $"{path}: {field} is {ours[field]}, the kernel's {kernel[field]}");
        }
        // What the steps are about happened: forks placed for a truncated size, left by a failed replace, back to short-form.
        Assert.Equal("37", Fields(kernelImage, "big-first")["core.forkoff"]);
        Assert.Equal("16", Fields(kernelImage, "missing-replace")["core.forkoff"]);
        Assert.StartsWith("1", Fields(kernelImage, "replace-shrinks")["core.aformat"]);
        foreach (var version in new[] { "6.1", "6.13" })
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", ourImage);
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version}:\n{repair.StandardOutput}{repair.StandardError}");
        }
    }

    /// <summary>setxattr(2) through the kernel; returns 0 or the errno.</summary>
    private static int SetFileAttr(string path, string name, byte[] value, bool replace = false)
    {
        string file = Path.GetTempFileName();
        try
        {
            File.WriteAllBytes(file, value);
            const string Script = """
                import os, sys
                try:
                    os.setxattr(sys.argv[1], sys.argv[2], open(sys.argv[3], 'rb').read(), os.XATTR_REPLACE if sys.argv[4] == '1' else 0)
                    print(0)
                except OSError as e:
                    print(e.errno)
                """;
            return int.Parse(Shell.RunChecked("python3", "-c", Script, path, name, file, replace ? "1" : "0").StandardOutput.Trim());
        }
        finally
        {
            File.Delete(file);
        }
    }

    private static Dictionary<string, string> Fields(string image, string path) =>
        XfsDb.Fields(XfsDb.Run(image, "6.13", $"path /{path}", "print core.forkoff core.aformat core.format core.size"));
}

using XfsWin.Attributes;
using System.Text;
using XfsWin.Cli.Output;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// extract, checked against the kernel: the extracted tree and the kernel's read-only loop mount
/// of the same image must agree on every name, type, mode, owner, size, time (ns), link target,
/// hard-link grouping, device number, xattr (raw bytes) and ACL (getfacl).
/// </summary>
[System.Runtime.Versioning.SupportedOSPlatform("linux")]
public class ExtractTests
{
    private static void RequireRoot()
    {
        Assert.True(Environment.UserName == "root" || Sh.Check("id", "-u").Trim() == "0",
            "extract oracle tests need root (owners, device nodes, trusted.* xattrs, loop mounts); run the suite as root");
    }

    private static string Manifest(string root, params string[] options) =>
        Sh.Check("python3", [FixtureImages.FixturePath("manifest.py"), root, .. options]);

    private static void AssertSameLines(string expected, string actual)
    {
        var e = expected.Split('\n');
        var a = actual.Split('\n');
        var missing = e.Except(a).ToList();
        var extra = a.Except(e).ToList();
        Assert.True(missing.Count == 0 && extra.Count == 0,
            $"trees differ.\nonly in the kernel mount:\n{string.Join('\n', missing)}\nonly in the extracted tree:\n{string.Join('\n', extra)}");
        Assert.Equal(e.Length, a.Length);
    }

    [Fact]
    public void Extract_as_root_reproduces_the_kernel_mount_exactly()
    {
        RequireRoot();
        using var dir = new TempDir();
        string dest = Path.Combine(dir.Path, "out");
        var r = Xfswin.Run("extract", FixtureImages.Tree, dest);
        Assert.True(r.Code == 0, r.ToString());
        Assert.Equal("", r.Err);
        using var m = new LoopMount(FixtureImages.Tree);
        string kernel = Manifest(m.Path);
        string ours = Manifest(dest);
        Assert.Contains("xattr:system.posix_acl_default=", kernel, StringComparison.Ordinal);   // the fixture really has them
        Assert.Contains("xattr:trusted.secret=", kernel, StringComparison.Ordinal);
        Assert.Contains("linkgroup=", kernel, StringComparison.Ordinal);
        Assert.Contains("rdev=7:200", kernel, StringComparison.Ordinal);
        AssertSameLines(kernel, ours);

        // ACLs as getfacl shows them (it reads system.posix_acl_* through the kernel's own decoding).
        // getfacl -R walks in readdir order, which differs between file systems: compare per-file blocks sorted.
        static string[] Facl(string root) => Sh.Check("bash", "-c", "cd \"$1\" && getfacl -R -n -p -P . 2>&1", "_", root)
            .Split("\n\n", StringSplitOptions.RemoveEmptyEntries).Order(StringComparer.Ordinal).ToArray();
        var kernelAcls = Facl(m.Path);
        Assert.True(kernelAcls.Length > 30, "getfacl saw too few files in the kernel mount");
        Assert.Equal(kernelAcls, Facl(dest));
    }

    [Fact]
    public void Extract_of_a_subtree_matches_that_subtree_of_the_kernel_mount()
    {
        RequireRoot();
        using var dir = new TempDir();
        string dest = Path.Combine(dir.Path, "sub");
        var r = Xfswin.Run("extract", "--no-progress", FixtureImages.Tree, dest, "/dir/sub");
        Assert.True(r.Code == 0, r.ToString());
        using var m = new LoopMount(FixtureImages.Tree);
        // Link counts differ by design: only part of each hard-link group is inside the subtree.
        static string WithoutLinkCounts(string manifest) =>
            System.Text.RegularExpressions.Regex.Replace(manifest, @" nlink=[0-9]+( linkgroup=b'[^']*')?", "");
        string kernel = Manifest(m.Path + "/dir/sub");
        Assert.Contains("nlink=3", kernel, StringComparison.Ordinal);
        AssertSameLines(WithoutLinkCounts(kernel), WithoutLinkCounts(Manifest(dest)));
    }

    [Fact]
    public void Extract_of_one_file_creates_it_inside_dest()
    {
        RequireRoot();
        using var dir = new TempDir();
        var r = Xfswin.Run("extract", FixtureImages.Tree, dir.Path, "/big.bin");
        Assert.True(r.Code == 0, r.ToString());
        using var m = new LoopMount(FixtureImages.Tree);
        Assert.True(File.ReadAllBytes(m.Path + "/big.bin").AsSpan().SequenceEqual(File.ReadAllBytes(Path.Combine(dir.Path, "big.bin"))));
        Assert.Equal(UnixFileMode.SetUser | (UnixFileMode)0x1ED, File.GetUnixFileMode(Path.Combine(dir.Path, "big.bin")));
    }

    [Fact]
    public void Extract_never_overwrites_existing_names()
    {
        RequireRoot();
        using var dir = new TempDir();
        File.WriteAllText(Path.Combine(dir.Path, "big.bin"), "mine");
        var r = Xfswin.Run("extract", FixtureImages.Tree, dir.Path, "/big.bin");
        Assert.Equal(ExitCodes.Partial, r.Code);
        Assert.Contains("already exists", r.Err, StringComparison.Ordinal);
        Assert.Equal("mine", File.ReadAllText(Path.Combine(dir.Path, "big.bin")));
    }

    [Fact]
    public void Acl_conversion_gives_the_value_the_kernel_returns()
    {
        using var m = new LoopMount(FixtureImages.Tree);
        using var volume = XfsVolume.Open(FixtureImages.Tree);
        foreach (var (path, attr, xfsName) in new[]
                 {
                     ("/dir/sub/lines.txt", "system.posix_acl_access", "SGI_ACL_FILE"),
                     ("/dir/sub/deeper", "system.posix_acl_default", "SGI_ACL_DEFAULT"),
                     ("/dir", "system.posix_acl_access", "SGI_ACL_FILE"),
                 })
        {
            ulong ino = volume.ResolvePath(path);
            Assert.True(volume.TryGetXattr(ino, XattrNamespace.Trusted, Encoding.ASCII.GetBytes(xfsName), out var raw), $"{path} has no {xfsName}");
            string kernelHex = Sh.Check("getfattr", "-h", "-n", attr, "-e", "hex", "--only-values", m.Path + path);
            string kernel = Sh.Check("python3", "-c", "import os,sys; print(os.getxattr(sys.argv[1], sys.argv[2], follow_symlinks=False).hex())", m.Path + path, attr).Trim();
            Assert.Equal(kernel, Convert.ToHexString(PosixAcl.XfsToLinux(raw)).ToLowerInvariant());
            Assert.NotEqual("", kernelHex);
        }
    }

    [Fact]
    public void Malicious_image_cannot_write_outside_dest()
    {
        RequireRoot();
        using var sandbox = new TempDir();
        string deep = Path.Combine(sandbox.Path, "a", "b", "c");
        Directory.CreateDirectory(deep);
        string dest = Path.Combine(deep, "dest");
        var r = Xfswin.Run("extract", FixtureImages.Malicious, dest);
        Assert.True(r.Code == ExitCodes.Partial, r.ToString());

        // find never follows symlinks, so it shows exactly what exists inside the sandbox.
        var everything = Sh.Check("find", sandbox.Path, "-mindepth", "1", "-printf", "/%P\\n")
            .Split('\n', StringSplitOptions.RemoveEmptyEntries).Order(StringComparer.Ordinal).ToList();
        Assert.Equal(
        [
            "/a", "/a/b", "/a/b/c", "/a/b/c/dest", "/a/b/c/dest/d",
            "/a/b/c/dest/d/loop1", "/a/b/c/dest/d/loop2", "/a/b/c/dest/d/ok", "/a/b/c/dest/d/ss", "/a/b/c/dest/d/xx",
        ], everything);
        Assert.Equal("../../..", new FileInfo(Path.Combine(dest, "d", "xx")).LinkTarget);
        Assert.Equal("../../outside-file", new FileInfo(Path.Combine(dest, "d", "ss")).LinkTarget);
        Assert.Equal("fine\n", File.ReadAllText(Path.Combine(dest, "d", "ok")));
        Assert.False(File.Exists("/evil"));
        Assert.Contains("refused to extract '/d/..'", r.Err, StringComparison.Ordinal);
        Assert.Contains("contains '/'", r.Err, StringComparison.Ordinal);
        Assert.Contains("appears twice in the tree", r.Err, StringComparison.Ordinal);
        Assert.Contains($"cannot create directory '{dest}/d/xx': File exists", r.Err, StringComparison.Ordinal);
        Assert.Contains($"cannot create '{dest}/d/ss': File exists", r.Err, StringComparison.Ordinal);
    }

    [Fact]
    public void Symlinks_already_in_dest_are_never_followed()
    {
        RequireRoot();
        using var sandbox = new TempDir();
        string dest = Path.Combine(sandbox.Path, "dest");
        string outside = Path.Combine(sandbox.Path, "outside");
        Directory.CreateDirectory(dest);
        Directory.CreateDirectory(outside);
        File.CreateSymbolicLink(Path.Combine(dest, "dir"), outside);
        File.CreateSymbolicLink(Path.Combine(dest, "big.bin"), Path.Combine(outside, "big.bin"));
        var r = Xfswin.Run("extract", FixtureImages.Tree, dest);
        Assert.Equal(ExitCodes.Partial, r.Code);
        Assert.Empty(Directory.EnumerateFileSystemEntries(outside));
    }

    [Fact]
    public void Extract_as_an_ordinary_user_restores_what_it_may_and_names_the_rest()
    {
        RequireRoot(); // to switch to the 'nobody' user
        using var dir = new TempDir();
        Sh.Check("chmod", "0777", dir.Path);
        string dest = Path.Combine(dir.Path, "out");
        var r = Sh.Run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "env", $"HOME={dir.Path}", $"DOTNET_CLI_HOME={dir.Path}",
            "dotnet", Path.Combine(XfsWin.TestSupport.UnprivilegedRun.OutputDirectory, "xfswin.dll"), "extract", FixtureImages.Tree, dest);
        Assert.True(r.Code == ExitCodes.Partial, $"exit {r.Code}\n{r.Err}");
        Assert.Contains("2 device node(s) were not created", r.Err, StringComparison.Ordinal);
        Assert.Contains("trusted.secret", r.Err, StringComparison.Ordinal);
        Assert.Contains("not running as root", r.Err, StringComparison.Ordinal);
        using var m = new LoopMount(FixtureImages.Tree);
        Assert.True(File.ReadAllBytes(m.Path + "/big.bin").AsSpan().SequenceEqual(File.ReadAllBytes(dest + "/big.bin")));
        Assert.Equal("65534 4755 1577934245.999999999", Sh.Check("stat", "-c", "%u %a %.9Y", dest + "/big.bin").Trim());
        Assert.False(File.Exists(dest + "/chardev"));
        Assert.Equal("user.color=\"blue\"", Sh.Check("getfattr", "-n", "user.color", "--absolute-names", dest + "/dir/hello.txt").Split('\n')[1]);
    }

    [Fact]
    public void Extract_to_an_existing_file_is_a_usage_error()
    {
        using var dir = new TempDir();
        string file = Path.Combine(dir.Path, "f");
        File.WriteAllText(file, "x");
        var r = Xfswin.Run("extract", FixtureImages.Tree, file);
        Assert.Equal(ExitCodes.Usage, r.Code);
        Assert.Contains("not a directory", r.Err, StringComparison.Ordinal);
    }

    [Fact]
    public void Extract_progress_reports_bytes_and_rate_when_forced()
    {
        using var dir = new TempDir();
        var r = Xfswin.Run("extract", "--progress", FixtureImages.Tree, Path.Combine(dir.Path, "o"), "/dir");
        Assert.True(r.Code == 0, r.ToString());
        Assert.Matches(@"extract: [0-9.]+ (B|KiB|MiB), [0-9]+ items, [0-9.]+ (B|KiB|MiB|GiB)/s, [0-9.]+ s", r.Err);
    }
}

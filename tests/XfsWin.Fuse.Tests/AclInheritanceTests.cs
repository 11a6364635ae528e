using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// POSIX ACLs that change other inodes: a directory's default ACL gives new files, directories and device nodes their
/// mode (the umask is not used) and their access ACL (stored only when it says more than the mode), and new
/// directories the default ACL itself; a chmod moves the access ACL's owner, mask and other entries with the mode;
/// removing an ACL a file does not have succeeds; an owner outside the file's group who sets an access ACL loses the
/// setgid bit. The same steps on a kernel loop mount and on an xfswin rw mount of
/// copies of one image; after each, the mode and both ACLs of every path named must be equal.
/// </summary>
public sealed unsafe class AclInheritanceTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-aclinherit");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>An ACL's Linux xattr value from (tag, permissions, id) entries (ids of the owner, group, mask and other entries undefined).</summary>
    private static byte[] Acl(params (ushort Tag, ushort Perm, uint Id)[] entries) => PosixAcl.LinuxXattr(entries);

    private const uint Undefined = uint.MaxValue;
    private const ushort UserObj = 1, User = 2, GroupObj = 4, Group = 8, Mask = 0x10, Other = 0x20;

    [Fact]
    public void Default_acls_chmod_and_acl_removal_give_what_the_kernel_gives()
    {
        // A default ACL with named entries and a mask; one the mode bits say all of (nothing to store on new files).
        var named = Acl((UserObj, 7, Undefined), (User, 5, 1000), (GroupObj, 5, Undefined), (Group, 6, 100), (Mask, 7, Undefined), (Other, 1, Undefined));
        var plain = Acl((UserObj, 6, Undefined), (GroupObj, 4, Undefined), (Other, 0, Undefined));
        var steps = new (string Description, Func<string, string> Act, string[] Paths)[]
        {
            ("mkdir d 0755", r => Libc.Result(Libc.mkdir(Path.Combine(r, "d"), 0x1ED)), ["d"]),
            ("default ACL with named entries on d", r => Set(Path.Combine(r, "d"), "system.posix_acl_default", named), ["d"]),
            ("create d/f 0640", r => Create(Path.Combine(r, "d/f"), 0x1A0), ["d/f"]),
            ("create d/all 0777", r => Create(Path.Combine(r, "d/all"), 0x1FF), ["d/all"]),
            ("mkdir d/sub 0750", r => Libc.Result(Libc.mkdir(Path.Combine(r, "d/sub"), 0x1E8)), ["d/sub"]),
            ("create d/sub/g 0666 (inherits through the copied default)", r => Create(Path.Combine(r, "d/sub/g"), 0x1B6), ["d/sub/g"]),
            ("mknod d/fifo 0666", r => Libc.Result(Libc.mknod(Path.Combine(r, "d/fifo"), 0x1000 | 0x1B6, 0)), ["d/fifo"]),
            ("mknod d/chr 0640 1:3", r => Libc.Result(Libc.mknod(Path.Combine(r, "d/chr"), 0x2000 | 0x1A0, Libc.MakeDev(1, 3))), ["d/chr"]),
            ("symlink d/link", r => Libc.Result(Libc.symlink("f", Path.Combine(r, "d/link"))), ["d/link"]),
            ("chmod d/f 0604", r => Libc.Result(Libc.chmod(Path.Combine(r, "d/f"), 0x184)), ["d/f"]),
            ("chmod d/sub 0701", r => Libc.Result(Libc.chmod(Path.Combine(r, "d/sub"), 0x1C1)), ["d/sub"]),
            ("mkdir e 0755", r => Libc.Result(Libc.mkdir(Path.Combine(r, "e"), 0x1ED)), ["e"]),
            ("default ACL without named entries on e", r => Set(Path.Combine(r, "e"), "system.posix_acl_default", plain), ["e"]),
            ("create e/h 0777", r => Create(Path.Combine(r, "e/h"), 0x1FF), ["e/h"]),
            ("remove the access ACL e/h does not have", r => Libc.Result(Libc.lremovexattr(Path.Combine(r, "e/h"), "system.posix_acl_access")), ["e/h"]),
            ("remove the default ACL e/h cannot have", r => Libc.Result(Libc.lremovexattr(Path.Combine(r, "e/h"), "system.posix_acl_default")), ["e/h"]),
            ("remove d/f's access ACL", r => Libc.Result(Libc.lremovexattr(Path.Combine(r, "d/f"), "system.posix_acl_access")), ["d/f"]),
            ("remove d's default ACL", r => Libc.Result(Libc.lremovexattr(Path.Combine(r, "d"), "system.posix_acl_default")), ["d"]),
            ("create d/later 0666 (the umask again)", r => Create(Path.Combine(r, "d/later"), 0x1B6), ["d/later"]),
            // An owner outside the file's group sets an access ACL: the setgid bit goes (posix_acl_update_mode).
            ("mkdir g 0755", r => Libc.Result(Libc.mkdir(Path.Combine(r, "g"), 0x1ED)), ["g"]),
            ("chown g 1000:1", r => Libc.Result(Libc.lchown(Path.Combine(r, "g"), 1000, 1)), ["g"]),
            ("chmod g 02775", r => Libc.Result(Libc.chmod(Path.Combine(r, "g"), 0x5FD)), ["g"]),
            ("[uid 1000] access ACL with a named user on g", r => AsUnprivileged(() => Set(Path.Combine(r, "g"), "system.posix_acl_access", named)), ["g"]),
        };

        var image = KernelMadeImages.Make(_tmp, "6.13");
        var kernelImage = Path.Combine(_tmp, "kernel.img");
        var ourImage = Path.Combine(_tmp, "xfswin.img");
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", image, kernelImage);
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", image, ourImage);
        int inherited = 0;
        using (var kernel = LoopMount.Mount(kernelImage, readOnly: false, "nodev"))
        using (var ours = new ReadWriteMount(ourImage))
        {
            foreach (var (description, act, paths) in steps)
            {
                string expected = act(kernel.MountPoint) + string.Concat(paths.Select(p => State(kernel.MountPoint, p)));
                string actual = act(ours.MountPoint) + string.Concat(paths.Select(p => State(ours.MountPoint, p)));
                output.WriteLine($"{description}: {expected}");
                Assert.True(expected == actual, $"{description}\n  kernel: {expected}\n  xfswin: {actual}");
                if (expected.Contains("posix_acl_access=02", StringComparison.Ordinal)) inherited++;
            }
        }
        // The steps reach what they are about: new inodes with access ACLs from the default ACL.
        Assert.True(inherited >= 5, $"only {inherited} steps showed an access ACL");
        var repair = XfsWin.TestSupport.Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", ourImage);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
    }

    /// <summary>Runs <paramref name="action"/> with fsuid and fsgid 1000 (this thread only; the kernel drops the file system capabilities).</summary>
    private static string AsUnprivileged(Func<string> action)
    {
        Libc.setfsgid(1000);
        Libc.setfsuid(1000);
        try
        {
            return action();
        }
        finally
        {
            Libc.setfsuid(0);
            Libc.setfsgid(0);
        }
    }

    private static string Set(string path, string name, byte[] value)
    {
        fixed (byte* v = value)
            return Libc.Result(Libc.lsetxattr(path, name, v, value.Length, 0));
    }

    private static string Create(string path, uint mode)
    {
        int fd = Libc.open(path, Libc.O_CREAT | Libc.O_EXCL | Libc.O_WRONLY, mode);
        if (fd < 0) return Libc.Result(fd);
        Libc.close(fd);
        return "ok";
    }

    private static string State(string root, string path)
    {
        string full = Path.Combine(root, path);
        return $" | {path}: {Libc.Stat(full, withBlocks: false)} posix_acl_access={Libc.GetXattr(full, "system.posix_acl_access")}" +
               $" posix_acl_default={Libc.GetXattr(full, "system.posix_acl_default")}";
    }
}

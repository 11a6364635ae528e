using System.Text.RegularExpressions;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Attributes;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// File attributes in the engine (<see cref="XfsVolume.GetFileXattr"/>, <see cref="XfsVolume.SetFileXattr"/>) on a
/// volume made by mkfs.xfs 6.13 and filled by the kernel: what the engine reads is what the kernel's xfs_io shows for
/// attributes the kernel set; the caller rules the VFS applies before XFS (owner, privileged flags, setuid and setgid
/// cleared) that the engine applies for hosts without a VFS; what immutable and append-only inodes refuse; and the
/// kernel, mounting the result, shows what the engine set, with xfs_repair -n finding nothing.
/// </summary>
public sealed partial class FileAttrTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-fileattr.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static string XfsIo => OracleImages.Tool("xfs_io", "6.13");

    private string MakeBase()
    {
        string image = Path.Combine(_tmp, "base.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        using var m = LoopMount.Mount(image, readOnly: false);
        string P(string r) => Path.Combine(m.MountPoint, r);
        Directory.CreateDirectory(P("proj"));
        File.WriteAllBytes(P("k"), []);
        File.WriteAllBytes(P("data"), new byte[8192]);
        File.WriteAllBytes(P("mine"), [1]);
        Shell.RunChecked("chown", "1000:1000", P("mine"));
        Shell.RunChecked("chmod", "6755", P("mine"));
        Shell.RunChecked(XfsIo, "-c", "chproj -R 33", "-c", "chattr +P", "-c", "extsize 256k", "-c", "cowextsize 64k", P("proj"));
        Shell.RunChecked(XfsIo, "-c", "chproj 9", "-c", "extsize 16k", "-c", "chattr +d +A", P("k"));
        return image;
    }

    /// <summary>xfs_io stat's fsxattr fields of <paramref name="path"/> (relative) on a kernel mount.</summary>
    private static Dictionary<string, string> KernelFsxattr(string image, string path)
    {
        using var m = LoopMount.Mount(image, readOnly: true);
        var text = Shell.RunChecked(XfsIo, "-r", "-c", "stat", Path.Combine(m.MountPoint, path)).StandardOutput;
        return FieldRegex().Matches(text).ToDictionary(x => x.Groups[1].Value, x => x.Groups[2].Value);
    }

    [GeneratedRegex(@"^fsxattr\.(\w+) = (\S+)", RegexOptions.Multiline)]
    private static partial Regex FieldRegex();

    /// <summary>utimes with no times: both set to one current time (what the FUSE host passes for ATIME_NOW and MTIME_NOW).</summary>
    private static AttributeChanges Touch()
    {
        long ticks = DateTime.UtcNow.Ticks - DateTime.UnixEpoch.Ticks;
        var now = new XfsTimestamp(ticks / TimeSpan.TicksPerSecond, (uint)(ticks % TimeSpan.TicksPerSecond * 100));
        return new AttributeChanges { AccessTime = now, ModifyTime = now, TimesAreNow = true };
    }

    private static void AssertSame(Dictionary<string, string> kernel, FileXattr ours)
    {
        Assert.Equal(Convert.ToUInt32(kernel["xflags"], 16), ours.XFlags);
        Assert.Equal(uint.Parse(kernel["projid"]), ours.ProjectId);
        Assert.Equal(uint.Parse(kernel["extsize"]), ours.ExtentSize);
        Assert.Equal(uint.Parse(kernel["cowextsize"]), ours.CowExtentSize);
        Assert.Equal(uint.Parse(kernel["nextents"]), ours.ExtentCount);
    }

    [Fact]
    public void Attributes_the_kernel_set_read_back_and_ours_read_in_the_kernel()
    {
        string image = MakeBase();
        var expected = new[] { "proj", "k", "data", "mine", "." }.ToDictionary(p => p, p => KernelFsxattr(image, p));
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            foreach (var (path, fields) in expected)
                AssertSame(fields, v.GetFileXattr(path == "." ? v.RootInode : v.ResolvePath("/" + path)));
            ulong proj = v.ResolvePath("/proj");
            // Inheritance from the project directory: project, hints, flags.
            var child = v.CreateNode(proj, "child"u8, 0x81A4, 0, 0).Inode;
            var sub = v.MakeDirectory(proj, "sub"u8, 0x41ED, 0, 0).Inode;
            var x = v.GetFileXattr(child);
            Assert.Equal((33u, 262144u, 65536u), (x.ProjectId, x.ExtentSize, x.CowExtentSize));
            Assert.Equal(FileXFlags.ExtSize | FileXFlags.CowExtSize, x.XFlags & ~FileXFlags.HasAttr);
            var s = v.GetFileXattr(sub);
            Assert.Equal(FileXFlags.ProjInherit | FileXFlags.ExtSzInherit | FileXFlags.CowExtSize, s.XFlags & ~FileXFlags.HasAttr);
            // A file into another project's tree: EXDEV, as xfs_link and xfs_rename answer.
            ulong data = v.ResolvePath("/data");
            Assert.Equal(XfsError.CrossDevice, Assert.Throws<XfsException>(() => v.Link(data, proj, "l"u8)).Error);
            Assert.Equal(XfsError.CrossDevice, Assert.Throws<XfsException>(() => v.Rename(v.RootInode, "data"u8, proj, "data"u8)).Error);
            // The hint of a file with extents does not change; unaligned and oversized hints are refused.
            var d = v.GetFileXattr(data);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() =>
                v.SetFileXattr(data, d with { XFlags = d.XFlags | FileXFlags.ExtSize, ExtentSize = 65536 }, FileAttrCaller.Root)).Error);
            ulong k = v.ResolvePath("/k");
            var kx = v.GetFileXattr(k);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.SetFileXattr(k, kx with { ExtentSize = 6000 }, FileAttrCaller.Root)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.SetFileXattr(k, kx with { ExtentSize = 1u << 30 }, FileAttrCaller.Root)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() =>
                v.SetFileXattr(k, kx with { XFlags = kx.XFlags | FileXFlags.ExtSzInherit }, FileAttrCaller.Root)).Error);
            // A zero hint clears its flag; a new hint and project on the empty file.
            v.SetFileXattr(k, kx with { ExtentSize = 0, ProjectId = 70000, XFlags = kx.XFlags | FileXFlags.Sync }, FileAttrCaller.Root);
        }
        var after = KernelFsxattr(image, "k");
        Assert.Equal("70000", after["projid"]);
        Assert.Equal("0", after["extsize"]);
        Assert.Equal(0x80000000u | FileXFlags.Sync | FileXFlags.NoDump | FileXFlags.NoAtime, Convert.ToUInt32(after["xflags"], 16) | 0x80000000u);
        AssertSameAsKernelSees(image, "proj/child", "proj/sub");
        AssertRepairClean(image);
    }

    private void AssertSameAsKernelSees(string image, params string[] paths)
    {
        using var v = XfsVolume.Open(image, new VolumeOpenOptions());
        foreach (var p in paths)
        {
            var ours = v.GetFileXattr(v.ResolvePath("/" + p));
            output.WriteLine($"{p}: {ours}");
            AssertSame(KernelFsxattr(image, p), ours);
        }
    }

    private static void AssertRepairClean(string image)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n:\n{repair.StandardOutput}{repair.StandardError}");
    }

    [Fact]
    public void Callers_and_locked_inodes_are_refused_as_the_kernel_refuses_them()
    {
        string image = MakeBase();
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong mine = v.ResolvePath("/mine"), data = v.ResolvePath("/data");
            var owner = new FileAttrCaller(1000, false);
            var m = v.GetFileXattr(mine);
            // Not the owner; the owner setting immutable; the owner changing the project (allowed: setuid and setgid go).
            Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.SetFileXattr(mine, m with { ProjectId = 5 }, new FileAttrCaller(1001, false))).Error);
            Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.SetFileXattr(mine, m with { XFlags = m.XFlags | FileXFlags.Immutable }, owner)).Error);
            v.SetFileXattr(mine, m with { ProjectId = 5 }, owner);
            Assert.Equal(0x1EDu, v.GetAttributes(mine).Permissions);
            // Immutable: no data, attribute, xattr, name change.
            var d = v.GetFileXattr(data);
            v.SetFileXattr(data, d with { XFlags = d.XFlags | FileXFlags.Immutable }, FileAttrCaller.Root);
            Action[] refused =
            [
                () => v.Write(data, 0, [1]),
                () => v.Write(data, 8192, [1]),
                () => v.SetAttributes(data, new AttributeChanges { Mode = 0x180 }),
                () => v.SetXattr(data, XattrNamespace.User, "a"u8, [1]),
                () => v.Unlink(v.RootInode, "data"u8),
                () => v.Link(data, v.RootInode, "again"u8),
                () => v.Rename(v.RootInode, "data"u8, v.RootInode, "moved"u8),
                () => v.Allocate(data, 0, 4096, FallocateMode.KeepSize),
                () => v.SetAttributes(data, Touch()),
            ];
            foreach (var change in refused) Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(change).Error);
            // Append-only: writes at EOF only.
            v.SetFileXattr(data, d with { XFlags = d.XFlags | FileXFlags.Append }, FileAttrCaller.Root);
            Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.Write(data, 0, [1])).Error);
            Assert.Equal(3, v.Write(data, 8192, [1, 2, 3]));
            Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.Allocate(data, 0, 4096, FallocateMode.PunchHole)).Error);
            // may_setattr: both times set to now, alone, and nothing else.
            var touched = v.SetAttributes(data, Touch());
            Assert.Equal(touched.ChangeTime, touched.AccessTime);
            Assert.Equal(touched.ChangeTime, touched.ModifyTime);
            var explicitTimes = new AttributeChanges { AccessTime = new XfsTimestamp(1000, 0), ModifyTime = new XfsTimestamp(1000, 0) };
            foreach (var change in new[] { explicitTimes, explicitTimes with { ModifyTime = null }, Touch() with { Mode = 0x1A4 } })
                Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.SetAttributes(data, change)).Error);
            // An immutable directory takes no new names.
            ulong proj = v.ResolvePath("/proj");
            var p = v.GetFileXattr(proj);
            v.SetFileXattr(proj, p with { XFlags = p.XFlags | FileXFlags.Immutable }, FileAttrCaller.Root);
            Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.CreateNode(proj, "n"u8, 0x81A4, 0, 0)).Error);
        }
        var kernel = KernelFsxattr(image, "data");
        Assert.Equal(FileXFlags.Append, Convert.ToUInt32(kernel["xflags"], 16) & (FileXFlags.Append | FileXFlags.Immutable));
        // FSGETXATTRA counts the attribute fork as xfs_io's stat shows it (fsxattr.naextents, through the kernel's ioctl).
        using (var r = XfsVolume.Open(image))
            foreach (var path in new[] { "data", "mine", "k" })
                Assert.Equal(uint.Parse(KernelFsxattr(image, path)["naextents"]), r.GetFileXattrAttrFork(r.ResolvePath("/" + path)).ExtentCount);
        Assert.Equal("5", KernelFsxattr(image, "mine")["projid"]);
        AssertRepairClean(image);
    }
}

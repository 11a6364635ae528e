using System.Buffers.Binary;
using System.Text;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Attributes;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Attributes;

/// <summary>
/// Extended attributes set, replaced and removed through a read-write open, judged by the kernel: on files with empty,
/// extent-list and extent-btree data forks, short-form and block directories, symlinks and device nodes, seeded
/// attributes of 0 bytes to 64 KiB in the user, trusted and security namespaces cross every form (short-form, leaf,
/// node, remote values) both ways; POSIX ACLs go in as XFS stores them. After a clean unmount (and after the kernel
/// replays our log, in the crash case) `getfattr` shows exactly the expected set, `getfacl` the ACLs, xfs_repair -n
/// (6.1 and 6.13) finds nothing, and the kernel can change them further with repair still clean. Inodes whose
/// attributes are in blocks (leaf, node, remote values) are unlinked and freed.
/// </summary>
public sealed class XattrKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-xattr.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly string[] Targets =
        ["f-empty", "f-extents", "f-btree", "d-short", "d-short2", "d-block", "sym", "dev", "f-node", "f-unlink1", "f-unlink2"];

    private string Make(string xfsprogs, string mkfsOptions)
    {
        string image = Path.Combine(_tmp, $"v-{xfsprogs}-{Guid.NewGuid():N}.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        using var mount = LoopMount.Mount(image, readOnly: false);
        string m = mount.MountPoint;
        foreach (var f in new[] { "f-empty", "f-node", "f-unlink1", "f-unlink2" }) File.WriteAllBytes(Path.Combine(m, f), []);
        // 15 separate extents (240 bytes of extent list: more than the default attribute fork offset leaves the data
        // fork), and 40 (an extent btree).
        WriteSeparated(Path.Combine(m, "f-extents"), 15);
        WriteSeparated(Path.Combine(m, "f-btree"), 40);
        Directory.CreateDirectory(Path.Combine(m, "d-short"));
        Directory.CreateDirectory(Path.Combine(m, "d-short2"));
        for (int i = 0; i < 4; i++) File.WriteAllText(Path.Combine(m, "d-short2", $"e{i}"), "x");
        Directory.CreateDirectory(Path.Combine(m, "d-block"));
        for (int i = 0; i < 60; i++) File.WriteAllText(Path.Combine(m, "d-block", $"entry-number-{i:D3}"), "y");
        File.CreateSymbolicLink(Path.Combine(m, "sym"), "some/target");
        Shell.RunChecked("mknod", Path.Combine(m, "dev"), "c", "1", "3");
        return image;
    }

    private static void WriteSeparated(string path, int extents)
    {
        using var f = new FileStream(path, FileMode.Create);
        var chunk = new byte[4096];
        new Random(extents).NextBytes(chunk);
        for (int i = 0; i < extents; i++)
        {
            f.Position = i * 8192L;
            f.Write(chunk);
        }
        f.Flush(true);
    }

    private void AssertRepairClean(string image, string xfsprogs)
    {
        foreach (var version in new[] { "6.1", "6.13" }.Where(v => v == "6.13" || xfsprogs == "6.1"))
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            if (repair.ExitCode != 0) output.WriteLine($"xfs_repair -n ({version}):\n{repair.StandardOutput}{repair.StandardError}");
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version} found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
    }

    /// <summary>Expected attributes per path: Linux name -> hex value (ACLs are checked through getfacl).</summary>
    private sealed class Expected
    {
        public readonly SortedDictionary<string, SortedDictionary<string, string>> Attrs = new(StringComparer.Ordinal);
        public readonly Dictionary<string, string> Acls = new();
        public readonly HashSet<string> Removed = new();
        /// <summary>What else the kernel must show: file content (hex SHA-256), symlink targets, directory listings.</summary>
        public readonly Dictionary<string, string> Content = new();
    }

    private static ulong LookupRoot(XfsVolume v, string name)
    {
        Assert.True(v.TryLookup(v.RootInode, N(name), out ulong ino), name);
        return ino;
    }

    private static byte[] N(string s) => Encoding.UTF8.GetBytes(s);

    private static string Hex(byte[] v) => "0x" + Convert.ToHexString(v).ToLowerInvariant();

    private static readonly XattrNamespace[] Namespaces = [XattrNamespace.User, XattrNamespace.Trusted, XattrNamespace.Secure];

    private sealed class Churner(XfsVolume v, Random rng, Expected expected)
    {
        public void Set(string path, ulong ino, XattrNamespace ns, string name, byte[] value, XattrSetMode mode = XattrSetMode.Any)
        {
            v.SetXattr(ino, ns, N(name), value, mode);
            Map(path)[XattrNames.ToLinuxName(ns, N(name))] = Hex(value);
        }

        public void Remove(string path, ulong ino, string linuxName)
        {
            Assert.True(XattrNames.TryParseLinuxName(linuxName, out var ns, out var name));
            v.RemoveXattr(ino, ns, name);
            Map(path).Remove(linuxName);
        }

        public SortedDictionary<string, string> Map(string path)
        {
            if (!expected.Attrs.TryGetValue(path, out var map)) expected.Attrs[path] = map = new(StringComparer.Ordinal);
            return map;
        }

        public byte[] Value(int length)
        {
            var b = new byte[length];
            rng.NextBytes(b);
            return b;
        }

        public string Name(int i) => $"a{i}-{new string('n', rng.Next(1, 30))}";

        /// <summary>Linux keeps user.* attributes to files and directories (symlinks and devices refuse them).</summary>
        public bool NoUser;

        public XattrNamespace Ns() => NoUser ? Namespaces[1 + rng.Next(Namespaces.Length - 1)] : Namespaces[rng.Next(Namespaces.Length)];

        /// <summary>Short-form, then leaf (a value too long for short-form), remote values up to 64 KiB, replacements across the local/remote line, then back down.</summary>
        public void Cross(string path, ulong ino, int keep)
        {
            int[] sizes = [0, 1, 17, 60, 254, 255, 300, 700, 2000, 3100, 5000, 20000, 65536];
            var names = new List<(XattrNamespace Ns, string Name)>();
            // Short-form first.
            for (int i = 0; i < 3; i++)
            {
                var ns = Ns();
                string name = Name(i);
                Set(path, ino, ns, name, Value(rng.Next(0, 24)), XattrSetMode.Create);
                names.Add((ns, name));
            }
            foreach (int size in sizes)
            {
                var ns = Ns();
                string name = Name(names.Count);
                Set(path, ino, ns, name, Value(size));
                names.Add((ns, name));
            }
            // Replacements: remote to local and local to remote, and the same size again.
            for (int i = 0; i < names.Count; i++)
                if (rng.Next(3) == 0) Set(path, ino, names[i].Ns, names[i].Name, Value(sizes[rng.Next(sizes.Length)]), XattrSetMode.Replace);
            var exists = Assert.Throws<XfsException>(() => v.SetXattr(ino, names[0].Ns, N(names[0].Name), [1], XattrSetMode.Create));
            Assert.Equal(XfsError.Exists, exists.Error);
            var missing = Assert.Throws<XfsException>(() => v.SetXattr(ino, XattrNamespace.Trusted, N("never-set"), [1], XattrSetMode.Replace));
            Assert.Equal(XfsError.NoAttribute, missing.Error);
            var notThere = Assert.Throws<XfsException>(() => v.RemoveXattr(ino, XattrNamespace.Secure, N("never-set")));
            Assert.Equal(XfsError.NoAttribute, notThere.Error);
            // Back down: the big ones go first, then all but `keep` small ones (short-form again, or no fork at all).
            foreach (var linux in Map(path).Where(kv => kv.Value.Length > 2 * 200 + 2).Select(kv => kv.Key).ToList())
                if (!linux.StartsWith("system.", StringComparison.Ordinal)) Remove(path, ino, linux);
            foreach (var linux in Map(path).Keys.Where(k => !k.StartsWith("system.", StringComparison.Ordinal)).Skip(keep).ToList())
                Remove(path, ino, linux);
        }

        /// <summary>Enough attributes for a node-form tree (several leaves), then most removed again (node to leaf to short-form).</summary>
        public void Node(string path, ulong ino, int count, int keep)
        {
            for (int i = 0; i < count; i++) Set(path, ino, Ns(), $"node-{i:D4}-{new string('k', rng.Next(0, 40))}", Value(rng.Next(0, 200)));
            // A few remote values among the leaves.
            for (int i = 0; i < 4; i++) Set(path, ino, Ns(), $"remote-{i}", Value(rng.Next(4000, 30000)));
            var all = Map(path).Keys.ToList();
            foreach (var linux in all.OrderBy(_ => rng.Next()).Skip(keep)) Remove(path, ino, linux);
        }
    }

    /// <summary>An XFS ACL value (be32 count, then {be32 tag, be32 id, be16 perm, be16 pad} entries).</summary>
    private static byte[] XfsAcl(params (int Tag, uint Id, ushort Perm)[] entries)
    {
        var b = new byte[4 + entries.Length * 12];
        BinaryPrimitives.WriteInt32BigEndian(b, entries.Length);
        for (int i = 0; i < entries.Length; i++)
        {
            BinaryPrimitives.WriteInt32BigEndian(b.AsSpan(4 + i * 12), entries[i].Tag);
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(8 + i * 12), entries[i].Id);
            BinaryPrimitives.WriteUInt16BigEndian(b.AsSpan(12 + i * 12), entries[i].Perm);
        }
        return b;
    }

    private const int AclUserObj = 1, AclUser = 2, AclGroupObj = 4, AclMask = 0x10, AclOther = 0x20;
    private const uint AclUndefinedId = 0xFFFFFFFF;

    private static Expected Workload(XfsVolume v, int seed)
    {
        var rng = new Random(seed);
        var expected = new Expected();
        var c = new Churner(v, rng, expected);
        var ino = Targets.ToDictionary(t => t, t => LookupRoot(v, t));
        foreach (var t in Targets) c.Map("/" + t);

        c.Cross("/f-empty", ino["f-empty"], keep: 2);
        c.Cross("/f-extents", ino["f-extents"], keep: 0);
        c.Cross("/f-btree", ino["f-btree"], keep: 3);
        c.Cross("/d-short", ino["d-short"], keep: 1);
        c.Cross("/d-short2", ino["d-short2"], keep: 0);
        c.Cross("/d-block", ino["d-block"], keep: 4);
        c.NoUser = true;
        c.Cross("/sym", ino["sym"], keep: 1);
        c.Cross("/dev", ino["dev"], keep: 2);
        c.NoUser = false;
        c.Node("/f-node", ino["f-node"], count: 160, keep: 40);
        // Many 64 KiB values in node form: replacing one frees blocks and allocates others in one transaction.
        for (int i = 0; i < 60; i++) c.Set("/f-node", ino["f-node"], XattrNamespace.User, $"huge-{i % 40}", c.Value(i < 40 ? 65536 : 65000));
        for (int i = 0; i < 40; i += 2) c.Remove("/f-node", ino["f-node"], $"user.huge-{i}");
        // The form each one ends in differs: a second round on some leaves them in leaf and node form.
        c.Cross("/f-extents", ino["f-extents"], keep: 14);
        c.Node("/d-short", ino["d-short"], count: 120, keep: 100);

        // POSIX ACLs, as the FUSE host hands them over (XFS's form, trusted SGI_ACL_*).
        var access = XfsAcl((AclUserObj, AclUndefinedId, 6), (AclUser, 1000, 4), (AclGroupObj, AclUndefinedId, 4), (AclMask, AclUndefinedId, 4), (AclOther, AclUndefinedId, 4));
        c.Set("/f-empty", ino["f-empty"], XattrNamespace.Trusted, "SGI_ACL_FILE", access);
        expected.Acls["/f-empty"] = "user::rw-\nuser:1000:r--\ngroup::r--\nmask::r--\nother::r--";
        var dflt = XfsAcl((AclUserObj, AclUndefinedId, 7), (AclGroupObj, AclUndefinedId, 5), (AclOther, AclUndefinedId, 0));
        c.Set("/d-short2", ino["d-short2"], XattrNamespace.Trusted, "SGI_ACL_DEFAULT", dflt);
        // The directory's access ACL is its mode (0755).
        expected.Acls["/d-short2"] = "user::rwx\ngroup::r-x\nother::r-x\ndefault:user::rwx\ndefault:group::r-x\ndefault:other::---";

        // Inodes the engine made without an attribute fork, whose data fork is too full for the default fork offset:
        // an extent list that becomes a btree, a short-form directory that becomes a block directory, a symlink
        // target that moves into a block.
        ulong root = v.RootInode;
        var eExtents = v.CreateNode(root, N("e-extents"), 0x81A4, 0, 0).Inode;
        var data = new byte[15 * 8192];
        for (int i = 0; i < 15; i++)
        {
            var piece = c.Value(4096);
            v.Write(eExtents, i * 8192L, piece);
            piece.CopyTo(data, i * 8192);
        }
        v.SetAttributes(eExtents, new AttributeChanges { Size = data.Length });
        expected.Content["/e-extents"] = "f:" + Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(data));
        var eDir = v.MakeDirectory(root, N("e-dir"), 0x1ED, 0, 0).Inode;
        // Its attribute fork (given at create) goes with its last attribute: the entries then fill the whole inode.
        c.Set("/e-dir", eDir, XattrNamespace.User, "gone", c.Value(1));
        c.Remove("/e-dir", eDir, "user.gone");
        var names = Enumerable.Range(0, 8).Select(i => $"entry-{i}-{new string('q', 14)}").ToList();
        foreach (var name in names) v.CreateNode(eDir, N(name), 0x81A4, 0, 0);
        expected.Content["/e-dir"] = "d:" + string.Join(',', names.Order(StringComparer.Ordinal));
        string target = string.Join('/', Enumerable.Range(0, 25).Select(i => $"dir{i:D5}"));
        var eSym = v.MakeSymlink(root, N("e-sym"), N(target), 0, 0).Inode;
        expected.Content["/e-sym"] = "l:" + target;
        // An extent btree whose root (more records than the default fork offset leaves room for) moves a level down.
        var eTree = v.CreateNode(root, N("e-bigtree"), 0x81A4, 0, 0).Inode;
        int blockSize = (int)v.Info.BlockSize;
        // Appended in order, leaves fill up (an entry moves to the left sibling before a split): 16 leaves' worth.
        int extents = 16 * ((blockSize - 72) / 16);
        var piece4 = c.Value(blockSize);
        for (int i = 0; i < extents; i++) v.Write(eTree, 2L * i * blockSize, piece4);
        v.SetAttributes(eTree, new AttributeChanges { Size = 2L * extents * blockSize });
        var treeData = new byte[2L * extents * blockSize];
        for (int i = 0; i < extents; i++) piece4.CopyTo(treeData, 2L * i * blockSize);
        expected.Content["/e-bigtree"] = "f:" + Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(treeData));
        c.Set("/e-bigtree", eTree, XattrNamespace.User, "first", c.Value(300));
        c.Set("/e-extents", eExtents, XattrNamespace.User, "first", c.Value(300));
        // A new fork is placed for its first entry with 8-bit lengths (xfs_attr_sf_entsize_byname): 500 bytes count as
        // 244, too many to leave the directory's entries or the symlink's target their room, so both move into a block.
        c.Set("/e-dir", eDir, XattrNamespace.User, "first", c.Value(500));
        c.Set("/e-sym", eSym, XattrNamespace.Trusted, "first", c.Value(500));
        c.Set("/e-sym", eSym, XattrNamespace.Secure, "small", c.Value(10));
        // Removing the last one leaves an empty short-form fork (the data fork is a btree now).
        c.Remove("/e-extents", eExtents, "user.first");

        // Inodes with attributes in blocks (leaf, node, remote values) are unlinked and freed.
        c.Node("/f-unlink1", ino["f-unlink1"], count: 120, keep: 120);
        c.Set("/f-unlink2", ino["f-unlink2"], XattrNamespace.User, "big", c.Value(65536));
        c.Set("/f-unlink2", ino["f-unlink2"], XattrNamespace.Trusted, "mid", c.Value(3000));
        foreach (var t in new[] { "f-unlink1", "f-unlink2" })
        {
            v.Unlink(v.RootInode, N(t));
            expected.Attrs.Remove("/" + t);
            expected.Removed.Add("/" + t);
        }
        return expected;
    }

    private static SortedDictionary<string, string> KernelAttrs(string path)
    {
        var result = new SortedDictionary<string, string>(StringComparer.Ordinal);
        var run = Shell.RunChecked("getfattr", "--absolute-names", "-d", "-m", "-", "-h", "-e", "hex", path);
        foreach (var line in run.StandardOutput.Split('\n'))
        {
            if (line.Length == 0 || line.StartsWith('#')) continue;
            int eq = line.IndexOf('=');
            string name = eq < 0 ? line : line[..eq];
            if (name.StartsWith("system.posix_acl", StringComparison.Ordinal)) continue;
            result[name] = eq < 0 ? "0x" : line[(eq + 1)..];
        }
        return result;
    }

    private static void AssertKernelShows(Expected expected, string mountPoint)
    {
        var problems = new List<string>();
        foreach (var (path, attrs) in expected.Attrs)
        {
            var actual = KernelAttrs(mountPoint + path);
            // root sees the ACLs' XFS form too, as the trusted attributes they are stored as.
            var want = new SortedDictionary<string, string>(attrs.ToDictionary(kv => kv.Key switch
            {
                "system.posix_acl_access" => "trusted.SGI_ACL_FILE",
                "system.posix_acl_default" => "trusted.SGI_ACL_DEFAULT",
                _ => kv.Key,
            }, kv => kv.Value), StringComparer.Ordinal);
            foreach (var (k, val) in want)
                if (!actual.TryGetValue(k, out var got) || got != val) problems.Add($"{path} {k}: expected {Short(val)}, kernel {(got is null ? "(absent)" : Short(got))}");
            foreach (var k in actual.Keys.Except(want.Keys)) problems.Add($"{path} {k}: unexpected");
        }
        foreach (var (path, acl) in expected.Acls)
        {
            string got = Shell.RunChecked("getfacl", "--omit-header", "-p", "-n", mountPoint + path).StandardOutput.Trim();
            if (got != acl) problems.Add($"{path} ACL: expected\n{acl}\nkernel\n{got}");
        }
        foreach (var (path, want) in expected.Content)
        {
            string full = mountPoint + path;
            string got = want[0] switch
            {
                'f' => "f:" + Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(File.ReadAllBytes(full))),
                'l' => "l:" + new FileInfo(full).LinkTarget,
                _ => "d:" + string.Join(',', Directory.GetFileSystemEntries(full).Select(Path.GetFileName).Order(StringComparer.Ordinal)),
            };
            if (got != want) problems.Add($"{path}: expected {want}, kernel {got}");
        }
        foreach (var path in expected.Removed)
            if (File.Exists(mountPoint + path)) problems.Add($"{path}: still there");
        Assert.True(problems.Count == 0, string.Join('\n', problems.Take(40)));
    }

    private static string Short(string hex) => hex.Length > 40 ? $"{hex[..40]}... ({(hex.Length - 2) / 2} bytes)" : hex;

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    [InlineData("6.13", "-b size=1024")]
    public void Attributes_set_through_the_engine_are_what_the_kernel_shows(string xfsprogs, string mkfsOptions)
    {
        string image = Make(xfsprogs, mkfsOptions);
        Expected expected;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            expected = Workload(v, seed: 5);
            // What the engine reads back agrees before the kernel looks.
            foreach (var (path, attrs) in expected.Attrs)
            {
                ulong ino = LookupRoot(v, path[1..]);
                var listed = v.ListXattrs(ino).Select(e => e.LinuxName).Order(StringComparer.Ordinal).ToList();
                Assert.Equal(attrs.Keys.ToList(), listed);
            }
        }
        AssertRepairClean(image, xfsprogs);
        AssertForms(image, xfsprogs);
        using (var mount = LoopMount.Mount(image, readOnly: true))
            AssertKernelShows(expected, mount.MountPoint);
        // The kernel changes them further; repair still finds nothing.
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            foreach (var t in new[] { "f-empty", "f-extents", "f-btree", "d-short", "d-block", "f-node", "sym" })
            {
                string p = Path.Combine(mount.MountPoint, t);
                Shell.RunChecked("setfattr", "-h", "-n", "trusted.kernel-added", "-v", "0x" + new string('a', 600), p);
                var first = expected.Attrs["/" + t].Keys.FirstOrDefault(k => k.StartsWith("trusted.a", StringComparison.Ordinal) || k.StartsWith("trusted.node", StringComparison.Ordinal));
                if (first is not null) Shell.RunChecked("setfattr", "-h", "-x", first, p);
            }
            File.Delete(Path.Combine(mount.MountPoint, "f-node"));
        }
        AssertRepairClean(image, xfsprogs);
    }

    /// <summary>The forms the workload is built to end in (so the boundaries it claims to cross are crossed).</summary>
    private static void AssertForms(string image, string xfsprogs)
    {
        string Number(string name) =>
            XfsDb.Run(image, xfsprogs, "path /", "ls").Split('\n').First(l => l.TrimEnd().EndsWith($" {name} (good)", StringComparison.Ordinal))
                .Split(' ', StringSplitOptions.RemoveEmptyEntries)[1];
        Dictionary<string, string> Inode(string name) =>
            XfsDb.Fields(XfsDb.Run(image, xfsprogs, $"inode {Number(name)}", "print core.format core.aformat core.forkoff core.naextents"));
        // An extent list too long for the default fork offset became a btree; after its last attribute went, the fork
        // stays as an empty short-form fork at the default offset (the kernel keeps it beside a btree data fork).
        var e = Inode("e-extents");
        Assert.Equal(3, XfsDb.Number(e["core.format"]));
        Assert.Equal(24, XfsDb.Number(e["core.forkoff"]));
        Assert.Equal(1, XfsDb.Number(e["core.aformat"]));
        var t = XfsDb.Fields(XfsDb.Run(image, xfsprogs, $"inode {Number("e-bigtree")}", "print"));
        Assert.Equal(3, XfsDb.Number(t["core.format"]));
        Assert.Equal(24, XfsDb.Number(t["core.forkoff"]));
        Assert.Equal(1, XfsDb.Number(t["u3.bmbt.numrecs"]));
        Assert.True(XfsDb.Number(t["u3.bmbt.level"]) >= 2, $"root level {t["u3.bmbt.level"]}");
        // The short-form directory became a block directory; the symlink target moved into a block.
        Assert.Equal(2, XfsDb.Number(Inode("e-dir")["core.format"]));
        Assert.Equal(2, XfsDb.Number(Inode("e-sym")["core.format"]));
        // Node form (several attribute blocks, a da node at block 0), and short-form with an ACL.
        var d = Inode("d-short");
        Assert.Equal(2, XfsDb.Number(d["core.aformat"]));
        Assert.True(XfsDb.Number(d["core.naextents"]) >= 1);
        var root = XfsDb.Fields(XfsDb.Run(image, xfsprogs, $"inode {Number("d-short")}", "ablock 0", "print hdr.info.hdr.magic"));
        Assert.Equal(0x3ebe, XfsDb.Number(root["hdr.info.hdr.magic"]));
        Assert.Equal(1, XfsDb.Number(Inode("f-empty")["core.aformat"]));
    }

    [Theory]
    [InlineData("", 9)]
    [InlineData("-b size=1024", 13)]
    public void Attributes_forced_to_the_log_survive_a_crash(string mkfsOptions, int seed)
    {
        string image = Make("6.13", mkfsOptions);
        string crashed = Path.Combine(_tmp, "crashed.img");
        Expected expected;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            expected = Workload(v, seed);
            v.Sync();
            File.Copy(image, crashed);
        }
        using (var mount = LoopMount.Mount(crashed, readOnly: false))
            AssertKernelShows(expected, mount.MountPoint);
        AssertRepairClean(crashed, "6.13");
    }
}

using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>The kinds of VFS operation the differential harness draws from.</summary>
public enum VfsOp
{
    // The setattr family and fsync, plus reads: what the engine serves today.
    Chmod, Chown, Utime, TruncateUp, Fsync, Read,
    // The rest of the write API.
    Truncate, Create, Write, Mkdir, Rmdir, Unlink, Link, Symlink,
    Rename, RenameNoReplace, RenameExchange, RenameWhiteout,
    SetXattr, RemoveXattr, Fallocate,
    OpenHeld, WriteHeld, ReadHeld, CloseHeld,
    CopyFileRange,
    // Drawn by the long sequences' soak and the operation groups; the regression seeds found before they existed
    // keep drawing from the kinds above (see LongSequenceSeeds). Collapse and insert range and FICLONE are not here:
    // the kernel's FUSE client refuses them itself (EOPNOTSUPP) before a server sees them; RangeOperationsKernelTests
    // compares them through the engine.
    Mknod, SetAcl, ExchangeRange,
}

/// <summary>
/// Differential harness: one seeded random sequence of VFS operations (system calls through libc)
/// is applied to identical copies of a kernel-made volume, one mounted by the kernel's XFS, the
/// other by <c>xfswin mount -o rw</c>. Every result (return value or errno, bytes read, the
/// attributes of the paths touched) must be equal; then the two trees (every stat field but times
/// and inode numbers, contents, link targets, xattrs, names) must be equal; then both images are
/// unmounted, mounted again by the kernel and compared again (on parent-pointer volumes with the parent
/// pointers the kernel lists, see <see cref="ParentPointers"/>), and xfs_repair -n (6.1 and 6.13) finds nothing in ours.
/// The operation kinds are a parameter: <see cref="Today"/> is what the engine serves now; the
/// full set is run as its own cases.
/// </summary>
public sealed class DifferentialTests(ITestOutputHelper output) : IDisposable
{
    /// <summary>What the engine serves now: every kind.</summary>
    public static readonly VfsOp[] Today = Enum.GetValues<VfsOp>();

    public static readonly VfsOp[] All = Enum.GetValues<VfsOp>();

    /// <summary>The kinds before mknod, POSIX ACLs and exchange-range joined: the regression seeds found with them replay the same sequences.</summary>
    public static readonly VfsOp[] BeforeMknod = All.Where(k => k < VfsOp.Mknod).ToArray();

    private const int Operations = 300;

    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-diff");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(3)]
    public void Todays_operation_kinds_match_the_kernel(int seed) => Run(seed, Today, "6.1");

    [Theory]
    [InlineData(11, "6.1")]
    [InlineData(12, "6.1")]
    [InlineData(13, "6.13")]
    public void Every_operation_kind_matches_the_kernel(int seed, string xfsprogs) => Run(seed, All, xfsprogs);

    [Theory]
    [InlineData(21, VfsOp.Create, VfsOp.Write, VfsOp.Truncate, VfsOp.Fsync, VfsOp.Read, VfsOp.Fallocate)]
    [InlineData(22, VfsOp.Mkdir, VfsOp.Rmdir, VfsOp.Create, VfsOp.Unlink, VfsOp.Link, VfsOp.Symlink, VfsOp.Rename, VfsOp.RenameNoReplace, VfsOp.RenameExchange, VfsOp.RenameWhiteout)]
    [InlineData(23, VfsOp.SetXattr, VfsOp.RemoveXattr, VfsOp.Chmod, VfsOp.Read)]
    [InlineData(24, VfsOp.Create, VfsOp.OpenHeld, VfsOp.WriteHeld, VfsOp.ReadHeld, VfsOp.CloseHeld, VfsOp.Unlink, VfsOp.Rename, VfsOp.Write)]
    [InlineData(25, VfsOp.Create, VfsOp.Write, VfsOp.CopyFileRange, VfsOp.CopyFileRange, VfsOp.Truncate, VfsOp.Read, VfsOp.Fallocate, VfsOp.Unlink)]
    [InlineData(26, VfsOp.Mknod, VfsOp.SetAcl, VfsOp.SetAcl, VfsOp.Create, VfsOp.Mkdir, VfsOp.Chmod, VfsOp.Write, VfsOp.Read, VfsOp.Unlink)]
    [InlineData(27, VfsOp.Create, VfsOp.Write, VfsOp.ExchangeRange, VfsOp.ExchangeRange, VfsOp.Truncate, VfsOp.Read, VfsOp.CopyFileRange)]
    // File capabilities (security.capability) set, then removed by writes and truncates (Mknod widens the xattr names).
    [InlineData(28, VfsOp.SetXattr, VfsOp.SetXattr, VfsOp.SetXattr, VfsOp.Write, VfsOp.OpenHeld, VfsOp.WriteHeld, VfsOp.Truncate, VfsOp.Chown, VfsOp.Mknod)]
    public void Operation_groups_match_the_kernel(int seed, params VfsOp[] kinds) => Run(seed, kinds, "6.1");

    /// <summary>
    /// Long sequences (1,500 operations, every kind), where state built over many steps meets later ones: blocks freed
    /// by one file reused by another, attribute forks removed and added again, directories grown past their inode.
    /// By default the seeds of sequences that once found a difference; bench/differential-soak.sh runs any range of
    /// seeds through the same test (XFSWIN_DIFF_SEEDS="FIRST COUNT"), odd seeds on mkfs 6.13 volumes, even on 6.1.
    /// </summary>
    [Theory]
    [MemberData(nameof(LongSequenceSeeds))]
    public void Long_sequences_match_the_kernel(int seed, string xfsprogs) =>
        RunOn(KernelMadeImages.Make(_tmp, xfsprogs, "base.img", SoakMkfsOptions, Environment.GetEnvironmentVariable("XFSWIN_DIFF_SIZE") ?? "300M"),
            seed, seed < FirstSeedWithEveryKind ? BeforeMknod : All, xfsprogs,
            int.TryParse(Environment.GetEnvironmentVariable("XFSWIN_DIFF_OPS"), out int ops) ? ops : 1500);

    /// <summary>Seeds from here on draw every kind; the seeds below it replay the sequences they were found with.</summary>
    private const int FirstSeedWithEveryKind = 2000;

    /// <summary>mkfs.xfs options for the soak's volumes (XFSWIN_DIFF_MKFS, with mkfs.xfs 6.13 for every seed); none by default.</summary>
    private static string[] SoakMkfsOptions =>
        Environment.GetEnvironmentVariable("XFSWIN_DIFF_MKFS")?.Split(' ', StringSplitOptions.RemoveEmptyEntries) ?? [];

    public static TheoryData<int, string> LongSequenceSeeds()
    {
        var seeds = new TheoryData<int, string>();
        if (SeedRange.FromEnvironment("XFSWIN_DIFF_SEEDS") is { } range)
        {
            bool options = SoakMkfsOptions.Length > 0;
            foreach (int s in range) seeds.Add(s, s % 2 == 0 && !options ? "6.1" : "6.13");
            return seeds;
        }
        // A remote symlink's block reused for file data; attribute forks of directories; a copy_file_range remap cut short;
        // a whiteout made by an unprivileged caller.
        foreach (var s in new[] { 1030, 1056, 1088, 1131, 8010 }) seeds.Add(s, s % 2 == 0 ? "6.1" : "6.13");
        return seeds;
    }

    /// <summary>Runs the harness: <paramref name="kinds"/> is the set of operations drawn from (the lead widens it as the engine grows).</summary>
    internal void Run(int seed, IReadOnlyList<VfsOp> kinds, string xfsprogs, Action<ReadWriteMount>? mounted = null) =>
        RunOn(KernelMadeImages.Make(_tmp, xfsprogs, "base.img"), seed, kinds, xfsprogs, Operations, mounted);

    /// <summary>The harness on copies of <paramref name="baseImage"/>, <paramref name="operations"/> operations long.</summary>
    internal void RunOn(string baseImage, int seed, IReadOnlyList<VfsOp> kinds, string xfsprogs, int operations, Action<ReadWriteMount>? mounted = null,
        Action<string>? afterOurUnmount = null)
    {
        var kernelImage = Path.Combine(_tmp, "kernel.img");
        var ourImage = Path.Combine(_tmp, "xfswin.img");
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, kernelImage);
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, ourImage);

        var log = new List<string>();
        // nodev as FUSE mounts are: opening a device node answers EACCES on both sides.
        using (var kernel = LoopMount.Mount(kernelImage, readOnly: false, "nodev"))
        using (var ours = new ReadWriteMount(ourImage))
        {
            mounted?.Invoke(ours);
            var runner = new Sequence(seed, kinds, kernel.MountPoint, ours.MountPoint);
            try
            {
                for (var i = 0; i < operations; i++)
                {
                    var (description, expected, actual) = runner.Step();
                    log.Add($"{i}: {description} -> {expected}");
                    if (expected != actual)
                        Assert.Fail($"seed {seed}, operation {i}: {description}\n  kernel: {expected}\n  xfswin: {actual}\nlast operations:\n{string.Join('\n', log.TakeLast(25))}");
                }
            }
            finally
            {
                runner.CloseHeld();
            }
            var succeeded = log.Where(l => l.Contains("-> = ", StringComparison.Ordinal) || l.Contains("-> ok", StringComparison.Ordinal)).ToList();
            output.WriteLine($"seed {seed}: {operations} operations, {succeeded.Count} succeeded: " + string.Join(", ", succeeded
                .GroupBy(l => l.Split(' ') is var w && w[1] == "renameat2" ? "renameat2 " + w[4] : w[1]).OrderBy(g => g.Key, StringComparer.Ordinal).Select(g => $"{g.Key} {g.Count()}")));
            JudgeKeepingEvidence(log, seed, kernelImage, ourImage, () => AssertSameTrees(ManifestComparison.Take(kernel.MountPoint), ManifestComparison.Take(ours.MountPoint), withBlocks: false, "live mounts"));
            ours.Unmount();
        }
        afterOurUnmount?.Invoke(ourImage);

        KernelManifest expectedTree, ourTree;
        using (var k = LoopMount.Mount(kernelImage, readOnly: true))
        using (var o = LoopMount.Mount(ourImage, readOnly: true))
        {
            expectedTree = ManifestComparison.Take(k.MountPoint);
            ourTree = ManifestComparison.Take(o.MountPoint);
            // On a parent-pointer volume the kernel lists the same parent pointers (as paths) on both, and on ours
            // exactly the names the tree has.
            if (HasParentPointers(ourImage))
            {
                var parents = ParentPointers.Compare(k.MountPoint, o.MountPoint);
                var listed = ParentPointers.List(o.MountPoint);
                output.WriteLine($"parent pointers of {listed.Count} inodes compared: " + string.Join("; ", listed));
                JudgeKeepingEvidence(log, seed, kernelImage, ourImage, () => Assert.True(parents.Count == 0, string.Join("\n", parents)));
            }
        }
        // Block counts are not compared: the kernel's own count depends on its speculative preallocation and on when
        // writeback ran (delayed allocation), so two kernel runs of one sequence can differ too; contents, sizes and
        // holes read back equal either way.
        JudgeKeepingEvidence(log, seed, kernelImage, ourImage, () => AssertSameTrees(expectedTree, ourTree, withBlocks: false, "both images mounted by the kernel"));
        var problems = KernelMadeImages.RepairProblems(ourImage, xfsprogs);
        JudgeKeepingEvidence(log, seed, kernelImage, ourImage, () => Assert.True(problems.Count == 0, string.Join("\n", problems)));
    }

    /// <summary>
    /// A final comparison that fails shows the whole sequence in the test's output (a step that fails shows the last 25
    /// itself); with XFSWIN_DIFF_KEEP=DIR both images are kept there, as they are when the comparison runs.
    /// </summary>
    private void JudgeKeepingEvidence(List<string> log, int seed, string kernelImage, string ourImage, Action compare)
    {
        try
        {
            compare();
        }
        catch
        {
            output.WriteLine("the operations:\n" + string.Join('\n', log));
            if (Environment.GetEnvironmentVariable("XFSWIN_DIFF_KEEP") is { Length: > 0 } keep)
            {
                Directory.CreateDirectory(keep);
                File.Copy(kernelImage, Path.Combine(keep, $"seed-{seed}-kernel.img"), overwrite: true);
                File.Copy(ourImage, Path.Combine(keep, $"seed-{seed}-xfswin.img"), overwrite: true);
                output.WriteLine($"images kept in {keep}");
            }
            throw;
        }
    }

    private static bool HasParentPointers(string image)
    {
        var sector = new byte[512];
        using (var f = File.OpenRead(image)) f.ReadExactly(sector);
        return (new XfsWin.Format.SuperblockView(sector).FeaturesIncompat & XfsWin.Format.SuperblockFeatures.IncompatParent) != 0;
    }

    /// <summary>Every manifest field but times and inode numbers; directory entries by name (sorted).</summary>
    internal static void AssertSameTrees(KernelManifest expected, KernelManifest actual, bool withBlocks, string what)
    {
        var diffs = new List<string>();
        static string Hex(byte[]? b) => b is null ? "(none)" : Convert.ToHexString(b);
        string Describe(ManifestEntry e) =>
            $"{e.Type} mode {Convert.ToString(e.Mode, 8)} nlink {e.Nlink} uid {e.Uid} gid {e.Gid} size {e.Size} rdev {e.RdevMajor}:{e.RdevMinor}" +
            (withBlocks ? $" blocks {e.Blocks}" : "") + $" sha256 {e.Sha256} target {Hex(e.Target)} xattrs " +
            string.Join(' ', e.Xattrs.OrderBy(x => x.Key, StringComparer.Ordinal).Select(x => $"{x.Key}={Hex(x.Value)}")) +
            (e.Children is null ? "" : " entries " + string.Join(' ', e.Children.Select(c => Hex(c.Name)).Order(StringComparer.Ordinal)));
        foreach (var e in expected.Entries)
        {
            var a = actual.Find(e.Path);
            if (a is null)
                diffs.Add($"{e.Printable}: missing");
            else if (Describe(e) != Describe(a))
                diffs.Add($"{e.Printable}:\n  kernel {Describe(e)}\n  xfswin {Describe(a)}");
        }
        foreach (var a in actual.Entries)
        {
            if (expected.Find(a.Path) is null)
                diffs.Add($"{a.Printable}: only on xfswin");
        }
        Assert.True(diffs.Count == 0, $"{what}: {diffs.Count} difference(s):\n{string.Join('\n', diffs.Take(30))}");
    }

    /// <summary>
    /// The operation sequence: drawn from a seeded generator, each operation applied to the kernel's
    /// tree, then to ours, with what each returned and the attributes of the paths it named.
    /// </summary>
    private sealed unsafe class Sequence(int seed, IReadOnlyList<VfsOp> kinds, string kernelRoot, string ourRoot)
    {
        private readonly Random _random = new(seed);
        private readonly int[] _kernelFds = [-1, -1, -1];
        private readonly int[] _ourFds = [-1, -1, -1];

        private static readonly string[] Directories = ["", "d", "d/e", "n", "n/m"];
        private static readonly string[] Names = ["a", "b", "big", "s", "c", "d", "h", "f", "g", "n", "e", "m"];
        private static readonly uint[] Modes = [0x1A4 /*0644*/, 0x180 /*0600*/, 0x1ED /*0755*/, 0x9ED /*04755*/, 0x5ED /*02755*/, 0x3FF /*01777*/, 0, 0x124 /*0444*/];
        private static readonly uint[] Ids = [0, 1, 1000, 65534, 4_000_000_000];
        private static readonly int[] Lengths = [1, 100, 511, 512, 4095, 4096, 4097, 10000, 65536, 70000];
        private static readonly int[] XattrSizes = [0, 1, 37, 100, 255, 256, 1000, 3000, 4096, 10000, 65536];
        private static readonly string[] XattrNames = ["user.a", "user.b", "user." + new string('x', 200), "trusted.t", "trusted.u"];
        /// <summary>With the security namespace: file capabilities (which a write removes) and a name of its own.</summary>
        private static readonly string[] XattrNamesWithSecurity = [.. XattrNames, "security.s", "security.capability"];
        /// <summary>The kinds include those added with mknod: the arguments' pools may grow too (the older sequences draw from the older pools).</summary>
        private readonly bool _everyKind = kinds.Contains(VfsOp.Mknod);
        private static readonly int[] FallocateModes = [0, 1, 3, 0x10, 0x11];
        /// <summary>S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK and S_IFREG (mknod of a regular file is a create).</summary>
        private static readonly uint[] NodeTypes = [0x1000, 0x2000, 0x6000, 0xC000, 0x8000];
        /// <summary>Majors and minors: small, large, and past what XFS's 32-bit device number holds (EINVAL on both sides).</summary>
        private static readonly uint[] Majors = [0, 1, 8, 259, 16383, 16384], Minors = [0, 3, 255, 256, 262143, 262144];
        private static readonly uint[] AclIds = [0, 1, 1000, 65534];
        private const uint UnprivilegedId = 1000;
        private static readonly ulong[] ExchangeFlags = [0, 0, 1 /*TO_EOF*/, 8 /*FILE1_WRITTEN*/, 9, 2 /*DSYNC*/, 4 /*DRY_RUN*/];

        private T Pick<T>(IReadOnlyList<T> items) => items[_random.Next(items.Count)];

        /// <summary>A path from the fixed pools (it may or may not exist).</summary>
        private string PoolPath()
        {
            var dir = Pick(Directories);
            var name = Pick(Names);
            return dir.Length == 0 ? name : dir + "/" + name;
        }

        /// <summary>
        /// A POSIX ACL in the xattr form Linux passes (little-endian: version 2, then tag, permissions and id of each
        /// entry, sorted by tag then id): the owner, named users, the owning group, named groups, the mask (left out
        /// one time in ten where named entries need it: EINVAL on both sides) and others.
        /// </summary>
        private byte[] Acl()
        {
            var entries = new List<(ushort Tag, ushort Perm, uint Id)>();
            ushort Perm() => (ushort)_random.Next(8);
            entries.Add((0x01, Perm(), uint.MaxValue));
            var users = AclIds.Where(_ => _random.Next(3) == 0).ToList();
            foreach (var id in users) entries.Add((0x02, Perm(), id));
            entries.Add((0x04, Perm(), uint.MaxValue));
            var groups = AclIds.Where(_ => _random.Next(4) == 0).ToList();
            foreach (var id in groups) entries.Add((0x08, Perm(), id));
            bool named = users.Count + groups.Count > 0;
            if (named ? _random.Next(10) != 0 : _random.Next(4) == 0) entries.Add((0x10, Perm(), uint.MaxValue));
            entries.Add((0x20, Perm(), uint.MaxValue));
            return XfsWin.TestSupport.PosixAcl.LinuxXattr(entries);
        }

        /// <summary>
        /// Two times in three a path that exists in the kernel's tree now (sorted walk, so the draw
        /// depends only on the seed and the tree), else one from a fixed pool of names, which may or
        /// may not exist: both sides then get the same misses and conflicts.
        /// </summary>
        private string PickPath()
        {
            if (_random.Next(3) != 0)
            {
                var existing = Directory.EnumerateFileSystemEntries(kernelRoot, "*", SearchOption.AllDirectories)
                    .Select(e => Path.GetRelativePath(kernelRoot, e)).Order(StringComparer.Ordinal).ToList();
                if (existing.Count > 0)
                    return Pick(existing);
            }
            var dir = Pick(Directories);
            var name = Pick(Names);
            return dir.Length == 0 ? name : dir + "/" + name;
        }

        /// <summary>An offset near a block boundary (most of the time) or anywhere in the first 300 KB.</summary>
        private long PickOffset() => _random.Next(3) switch
        {
            0 => Math.Max(0, _random.Next(80) * 4096L + _random.Next(-1, 2)),
            1 => _random.Next(5) * 65536L,
            _ => _random.Next(300_000),
        };

        private byte[] Data(int length)
        {
            var data = new byte[length];
            _random.NextBytes(data);
            return data;
        }

        public (string Description, string Expected, string Actual) Step()
        {
            var op = Pick(kinds);
            var p = PickPath();
            var q = PickPath();
            var slot = _random.Next(_kernelFds.Length);
            // Every argument is drawn here, before either side runs, so both get exactly the same call.
            var mode = Pick(Modes);
            var uid = Pick(Ids);
            var gid = Pick(Ids);
            var offset = PickOffset();
            var length = Pick(Lengths);
            var data = Data(length);
            var xattr = Pick(_everyKind ? XattrNamesWithSecurity : XattrNames);
            var xattrValue = Data(Pick(XattrSizes));
            // A file capability the VFS accepts (struct vfs_cap_data, revision 2, effective), half the time.
            if (xattr == "security.capability" && _random.Next(2) == 0)
                xattrValue = Convert.FromHexString("0100000220000000000000000000000000000000");
            var xattrFlags = _random.Next(3);
            var fallocateMode = Pick(FallocateModes);
            var copyTo = PickOffset();
            var copyLength = Pick(new long[] { 1, 4096, 10000, 65536, 300_000, 1 << 20 });
            var createFlags = Libc.O_CREAT | Libc.O_WRONLY | (_random.Next(3) == 0 ? Libc.O_EXCL : 0) | (_random.Next(4) == 0 ? Libc.O_TRUNC : 0);
            var times = new Libc.Timespec[2];
            for (var i = 0; i < 2; i++)
            {
                times[i] = _random.Next(4) switch
                {
                    0 => new Libc.Timespec { Nanoseconds = Libc.UTIME_NOW },
                    1 => new Libc.Timespec { Nanoseconds = Libc.UTIME_OMIT },
                    _ => new Libc.Timespec { Seconds = _random.NextInt64(-2_000_000_000, 4_000_000_000), Nanoseconds = _random.Next(1_000_000_000) },
                };
            }
            var grow = Pick(new long[] { 0, 1, 4095, 4096, 4097, 65536, 1 << 20 });
            var size = Pick(new long[] { 0, 1, 4095, 4096, 4097, 8205, 100_000, 300_000 });
            var target = _random.Next(2) == 0 ? Pick(Names) : new string('t', _random.Next(1, 1024));
            // The arguments of the later kinds, drawn for them only (the other kinds' sequences stay as they were).
            string nodePath = "", aclName = "";
            uint nodeMode = 0, major = 0, minor = 0;
            byte[]? acl = null;
            long exchange1 = 0, exchange2 = 0, exchangeLength = 0;
            ulong exchangeFlags = 0;
            switch (op)
            {
                case VfsOp.Mknod:
                    nodePath = _random.Next(3) == 0 ? p : PoolPath();
                    nodeMode = Pick(NodeTypes) | (mode & 0xFFF);
                    (major, minor) = (Pick(Majors), Pick(Minors));
                    break;
                case VfsOp.SetAcl:
                    aclName = _random.Next(3) == 0 ? "system.posix_acl_default" : "system.posix_acl_access";
                    acl = _random.Next(5) == 0 ? null : Acl();
                    break;
                case VfsOp.ExchangeRange:
                    exchange1 = _random.Next(6) == 0 ? PickOffset() : _random.Next(40) * 4096L;
                    exchange2 = _random.Next(6) == 0 ? PickOffset() : _random.Next(40) * 4096L;
                    exchangeLength = Pick(new long[] { 4096, 8192, 65536, 300_000, 1 << 20 });
                    exchangeFlags = Pick(ExchangeFlags);
                    break;
            }
            // One operation in four as an unprivileged caller (fsuid and fsgid 1000: the kernel drops the file system
            // capabilities), for the sequences that draw every kind.
            bool unprivileged = _everyKind && _random.Next(4) == 0;

            string description = (unprivileged ? "[uid 1000] " : "") + op switch
            {
                VfsOp.Chmod => $"chmod {p} {Convert.ToString(mode, 8)}",
                VfsOp.Chown => $"lchown {p} {uid}:{gid}",
                VfsOp.Utime => $"utimensat {p} {T(times[0])} {T(times[1])}",
                VfsOp.TruncateUp => $"truncate {p} (size + {grow})",
                VfsOp.Truncate => $"truncate {p} {size}",
                VfsOp.Fsync => $"fsync {p}",
                VfsOp.Read => $"pread {p} {length} at {offset}",
                VfsOp.Create => $"open {p} 0x{createFlags:x} {Convert.ToString(mode, 8)}",
                VfsOp.Write => $"pwrite {p} {length} at {offset}",
                VfsOp.Mkdir => $"mkdir {p} {Convert.ToString(mode, 8)}",
                VfsOp.Rmdir => $"rmdir {p}",
                VfsOp.Unlink => $"unlink {p}",
                VfsOp.Link => $"link {p} {q}",
                VfsOp.Symlink => $"symlink {target.Length}-byte target at {q}",
                VfsOp.Rename => $"rename {p} {q}",
                VfsOp.RenameNoReplace => $"renameat2 {p} {q} NOREPLACE",
                VfsOp.RenameExchange => $"renameat2 {p} {q} EXCHANGE",
                VfsOp.RenameWhiteout => $"renameat2 {p} {q} WHITEOUT",
                VfsOp.SetXattr => $"lsetxattr {p} {xattr[..Math.Min(12, xattr.Length)]} {xattrValue.Length} bytes flags {xattrFlags}",
                VfsOp.RemoveXattr => $"lremovexattr {p} {xattr[..Math.Min(12, xattr.Length)]}",
                VfsOp.Fallocate => $"fallocate {p} mode 0x{fallocateMode:x} {offset}+{length}",
                VfsOp.OpenHeld => $"open [{slot}] {p} O_RDWR",
                VfsOp.WriteHeld => $"pwrite [{slot}] {length} at {offset}",
                VfsOp.ReadHeld => $"pread [{slot}] {length} at {offset}",
                VfsOp.CloseHeld => $"close [{slot}]",
                VfsOp.CopyFileRange => $"copy_file_range {p} at {offset} to {q} at {copyTo}, {copyLength} bytes",
                VfsOp.Mknod => $"mknod {nodePath} {Convert.ToString(nodeMode, 8)} {major}:{minor}",
                VfsOp.SetAcl => acl is null ? $"lremovexattr {p} {aclName}" : $"lsetxattr {p} {aclName} {Convert.ToHexString(acl)}",
                VfsOp.ExchangeRange => $"exchange-range {q} at {exchange1} with {p} at {exchange2}, {exchangeLength} bytes, flags {exchangeFlags}",
                _ => throw new ArgumentOutOfRangeException(nameof(kinds), op, null),
            };

            string Apply(string root, int[] fds)
            {
                string P(string r) => Path.Combine(root, r);
                string r;
                // setfsuid and setfsgid act on this thread only; back to root before the state is read.
                if (unprivileged)
                {
                    Libc.setfsgid(UnprivilegedId);
                    Libc.setfsuid(UnprivilegedId);
                }
                try
                {
                    r = Call(P, fds);
                }
                finally
                {
                    if (unprivileged)
                    {
                        Libc.setfsuid(0);
                        Libc.setfsgid(0);
                    }
                }
                // What the paths named now look like (also checks the kernel's cached copies of ours).
                var touched = op is VfsOp.Mknod ? [nodePath] : op is VfsOp.CopyFileRange or VfsOp.ExchangeRange or VfsOp.Link or VfsOp.Symlink or VfsOp.Rename or VfsOp.RenameNoReplace or VfsOp.RenameExchange or VfsOp.RenameWhiteout
                    ? new[] { p, q } : [p];
                var sb = new StringBuilder(r);
                foreach (var t in touched)
                    sb.Append(" | ").Append(t).Append(": ").Append(Libc.Stat(P(t), withBlocks: false));
                if (op is VfsOp.SetXattr or VfsOp.RemoveXattr or VfsOp.SetAcl)
                    sb.Append(" | xattrs ").Append(Libc.ListXattrs(P(p))).Append(" value ").Append(Libc.GetXattr(P(p), op is VfsOp.SetAcl ? aclName : xattr));
                var parent = Path.GetDirectoryName(op is VfsOp.Mknod ? nodePath : p) ?? "";
                if (op is VfsOp.Mknod or VfsOp.Mkdir or VfsOp.Rmdir or VfsOp.Unlink or VfsOp.Create or VfsOp.RenameWhiteout or VfsOp.Rename)
                    sb.Append(" | parent ").Append(Libc.Stat(P(parent.Length == 0 ? "." : parent), withBlocks: false));
                return sb.ToString();
            }

            string Call(Func<string, string> P, int[] fds)
            {
                return op switch
                {
                    VfsOp.Chmod => Libc.Result(Libc.chmod(P(p), mode)),
                    VfsOp.Chown => Libc.Result(Libc.lchown(P(p), uid, gid)),
                    VfsOp.Utime => Utime(P(p), times),
                    VfsOp.TruncateUp => TruncateUp(P(p), grow),
                    VfsOp.Truncate => Libc.Result(Libc.truncate(P(p), size)),
                    VfsOp.Fsync => WithFile(P(p), Libc.O_RDONLY, 0, fd => Libc.Result(Libc.fsync(fd))),
                    VfsOp.Read => WithFile(P(p), Libc.O_RDONLY, 0, fd => Read(fd, length, offset)),
                    VfsOp.Create => WithFile(P(p), createFlags, mode, _ => "ok"),
                    VfsOp.Write => WithFile(P(p), Libc.O_WRONLY, 0, fd => Write(fd, data, offset)),
                    VfsOp.Mkdir => Libc.Result(Libc.mkdir(P(p), mode)),
                    VfsOp.Rmdir => Libc.Result(Libc.rmdir(P(p))),
                    VfsOp.Unlink => Libc.Result(Libc.unlink(P(p))),
                    VfsOp.Link => Libc.Result(Libc.link(P(p), P(q))),
                    VfsOp.Symlink => Libc.Result(Libc.symlink(target, P(q))),
                    VfsOp.Rename => Libc.Result(Libc.renameat2(Libc.AT_FDCWD, P(p), Libc.AT_FDCWD, P(q), 0)),
                    VfsOp.RenameNoReplace => Libc.Result(Libc.renameat2(Libc.AT_FDCWD, P(p), Libc.AT_FDCWD, P(q), 1)),
                    VfsOp.RenameExchange => Libc.Result(Libc.renameat2(Libc.AT_FDCWD, P(p), Libc.AT_FDCWD, P(q), 2)),
                    VfsOp.RenameWhiteout => Libc.Result(Libc.renameat2(Libc.AT_FDCWD, P(p), Libc.AT_FDCWD, P(q), 4)),
                    VfsOp.SetXattr => SetXattr(P(p), xattr, xattrValue, xattrFlags),
                    VfsOp.RemoveXattr => Libc.Result(Libc.lremovexattr(P(p), xattr)),
                    VfsOp.Fallocate => WithFile(P(p), Libc.O_RDWR, 0, fd => Libc.Result(Libc.fallocate(fd, fallocateMode, offset, length))),
                    VfsOp.OpenHeld => OpenHeld(fds, slot, P(p)),
                    VfsOp.WriteHeld => fds[slot] < 0 ? "no file" : Write(fds[slot], data, offset),
                    VfsOp.ReadHeld => fds[slot] < 0 ? "no file" : Read(fds[slot], length, offset),
                    VfsOp.CloseHeld => CloseHeld(fds, slot),
                    VfsOp.CopyFileRange => WithFile(P(p), Libc.O_RDONLY, 0, from => WithFile(P(q), Libc.O_RDWR, 0, to => CopyFileRange(from, offset, to, copyTo, copyLength))),
                    VfsOp.Mknod => Libc.Result(Libc.mknod(P(nodePath), nodeMode, Libc.MakeDev(major, minor))),
                    VfsOp.SetAcl => acl is null ? Libc.Result(Libc.lremovexattr(P(p), aclName)) : SetXattr(P(p), aclName, acl, 0),
                    VfsOp.ExchangeRange => WithFile(P(q), Libc.O_RDWR, 0, file1 => WithFile(P(p), Libc.O_RDWR, 0, file2 =>
                        ExchangeRange(file1, exchange1, file2, exchange2, exchangeLength, exchangeFlags) + Contents(file1) + Contents(file2))),
                    _ => throw new ArgumentOutOfRangeException(nameof(kinds), op, null),
                };
            }

            return (description, Apply(kernelRoot, _kernelFds), Apply(ourRoot, _ourFds));
        }

        private static string T(Libc.Timespec t) => t.Nanoseconds == Libc.UTIME_NOW ? "NOW" : t.Nanoseconds == Libc.UTIME_OMIT ? "OMIT" : $"{t.Seconds}.{t.Nanoseconds:D9}";

        private static string Utime(string path, Libc.Timespec[] times)
        {
            fixed (Libc.Timespec* t = times)
                return Libc.Result(Libc.utimensat(Libc.AT_FDCWD, path, t, Libc.AT_SYMLINK_NOFOLLOW));
        }

        /// <summary>Truncates to the current size plus <paramref name="grow"/> (never shrinks).</summary>
        private static string TruncateUp(string path, long grow)
        {
            var buffer = stackalloc byte[256];
            if (Libc.statx(Libc.AT_FDCWD, path, 0, 0x200, buffer) != 0)
                return "stat errno " + Marshal.GetLastPInvokeError();
            var size = *(long*)(buffer + 40);
            return Libc.Result(Libc.truncate(path, size + grow));
        }

        /// <summary>
        /// Opens <paramref name="path"/> for <paramref name="action"/>, non-blocking: opening a FIFO then never waits for
        /// the other end (read-only succeeds, write-only answers ENXIO on both sides).
        /// </summary>
        private static string WithFile(string path, int flags, uint mode, Func<int, string> action)
        {
            var fd = Libc.open(path, flags | Libc.O_NONBLOCK, mode);
            if (fd < 0)
                return "open errno " + Marshal.GetLastPInvokeError();
            try
            {
                return action(fd);
            }
            finally
            {
                Libc.close(fd);
            }
        }

        private static string Read(int fd, int length, long offset)
        {
            var buffer = new byte[length];
            nint n;
            fixed (byte* b = buffer)
                n = Libc.pread(fd, b, length, offset);
            return n < 0 ? Libc.Result(n) : $"= {n} sha256 {Convert.ToHexString(SHA256.HashData(buffer.AsSpan(0, (int)n)))[..16]}";
        }

        private static string Write(int fd, byte[] data, long offset)
        {
            fixed (byte* b = data)
                return Libc.Result(Libc.pwrite(fd, b, data.Length, offset));
        }

        /// <summary>copy_file_range(2); the count (the kernel's XFS may shorten a remap to whole blocks) and the contents copied.</summary>
        private static string CopyFileRange(int from, long fromOffset, int to, long toOffset, long length)
        {
            long inOff = fromOffset, outOff = toOffset;
            var n = Libc.copy_file_range(from, &inOff, to, &outOff, (nuint)length, 0);
            if (n < 0)
                return Libc.Result(n);
            return $"= {n} offsets {inOff} {outOff} | copied {Read(to, (int)n, toOffset)}";
        }

        /// <summary>" | contents " and the SHA-256 of the whole file an open descriptor names (size and every byte).</summary>
        private static string Contents(int fd)
        {
            var buffer = stackalloc byte[256];
            if (Libc.statx(fd, "", 0x1000 /*AT_EMPTY_PATH*/, 0x200, buffer) != 0)
                return " | contents: stat errno " + Marshal.GetLastPInvokeError();
            long size = *(long*)(buffer + 40);
            if (size > 64 << 20)
                return $" | contents: {size} bytes";
            return $" | contents {size}: {Read(fd, (int)size, 0)}";
        }

        /// <summary>XFS_IOC_EXCHANGE_RANGE on file 2 with file 1's descriptor in the argument (struct xfs_exchange_range).</summary>
        private static string ExchangeRange(int file1, long offset1, int file2, long offset2, long length, ulong flags)
        {
            var arg = stackalloc byte[40];
            new Span<byte>(arg, 40).Clear();
            *(int*)arg = file1;
            *(long*)(arg + 8) = offset1;
            *(long*)(arg + 16) = offset2;
            *(long*)(arg + 24) = length;
            *(ulong*)(arg + 32) = flags;
            return Libc.Result(Libc.ioctl(file2, 0x40285881, arg));
        }

        private static string SetXattr(string path, string name, byte[] value, int flags)
        {
            fixed (byte* v = value)
                return Libc.Result(Libc.lsetxattr(path, name, v, value.Length, flags));
        }

        private static string OpenHeld(int[] fds, int slot, string path)
        {
            if (fds[slot] >= 0)
                Libc.close(fds[slot]);
            fds[slot] = Libc.open(path, Libc.O_RDWR | Libc.O_NONBLOCK, 0);
            return fds[slot] < 0 ? "open errno " + Marshal.GetLastPInvokeError() : "ok";
        }

        private static string CloseHeld(int[] fds, int slot)
        {
            if (fds[slot] < 0)
                return "no file";
            var r = Libc.Result(Libc.close(fds[slot]));
            fds[slot] = -1;
            return r;
        }

        public void CloseHeld()
        {
            foreach (var fds in new[] { _kernelFds, _ourFds })
            {
                for (var i = 0; i < fds.Length; i++)
                {
                    if (fds[i] >= 0)
                        Libc.close(fds[i]);
                    fds[i] = -1;
                }
            }
        }
    }
}

/// <summary>The read-write requests through FUSE over io_uring (the switch is machine-wide: run alone).</summary>
[Collection(EnableUringCollection.Name)]
public sealed class ReadWriteIoUringTests(ITestOutputHelper output)
{
    [Fact]
    public void Setattr_family_and_fsync_through_io_uring_match_the_kernel()
    {
        using var on = IoUringMode.Set(true);
        using var harness = new DifferentialTests(output);
        harness.Run(4, DifferentialTests.Today, "6.1", m =>
        {
            _ = Directory.EnumerateFileSystemEntries(m.MountPoint).Any(); // waits for FUSE_INIT
            IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount -o rw");
        });
    }

    [Fact]
    public void Every_operation_kind_through_io_uring_matches_the_kernel()
    {
        using var on = IoUringMode.Set(true);
        using var harness = new DifferentialTests(output);
        harness.Run(14, DifferentialTests.All, "6.1", m =>
        {
            _ = Directory.EnumerateFileSystemEntries(m.MountPoint).Any();
            IoUringMode.AssertServesThroughIoUring(m.ServerProcessId, "xfswin mount -o rw");
        });
    }
}

using System.Buffers.Binary;
using System.Runtime.InteropServices;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Directories;

/// <summary>
/// Node-form directories changed by <see cref="DirectoryEditor"/> and judged by the kernel. A kernel-made directory
/// gets long names added through transactions on a <see cref="MountedLog"/> until it is a node directory with several
/// leafN blocks under a da-node root (and, with 1 KiB blocks, more than one free-index block); then random removes,
/// adds and replaces (removes favouring the newest names) bring it down through node, leaf and block form to
/// short-form. The kernel performs the very same changes, in the same order, on a directory of its own; after every
/// session both directories have the same form, the kernel and XfsWin's reader list exactly the expected names with
/// the expected link counts, and xfs_repair -n (6.1 and 6.13) finds nothing.
/// </summary>
public sealed class DirectoryNodeKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-dirnode.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private const int Targets = 16;

    private sealed record Volume(string Image, ulong DirIno, ulong KernelIno, ulong[] TargetInos);

    private Volume Make(string version, string mkfsOptions)
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", version), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        using var mount = LoopMount.Mount(image, readOnly: false);
        foreach (var d in new[] { "t", "d", "e", "s" }) Directory.CreateDirectory(Path.Combine(mount.MountPoint, d));
        for (int i = 0; i < Targets; i++) File.WriteAllBytes(Path.Combine(mount.MountPoint, "t", $"f{i}"), []);
        ulong Ino(string p) => ulong.Parse(Shell.RunChecked("stat", "-c", "%i", p).StandardOutput.Trim());
        return new Volume(image, Ino(Path.Combine(mount.MountPoint, "d")), Ino(Path.Combine(mount.MountPoint, "e")),
            Enumerable.Range(0, Targets).Select(i => Ino(Path.Combine(mount.MountPoint, "t", $"f{i}"))).ToArray());
    }

    /// <summary>Long names (<paramref name="shortest"/> to 250 bytes), unique by their number, so that blocks fill after few entries.</summary>
    private static string NameFor(int n, Random random, int shortest) =>
        $"n{n}-".PadRight(shortest + random.Next(251 - shortest), (char)('a' + random.Next(26)));

    /// <summary>
    /// 4 KiB directory blocks on 4 KiB and (four blocks each) 1 KiB blocks, and 64 KiB directory blocks. The 1 KiB
    /// volume grows past the 2016 data blocks one free-index block covers (about 30000 of the longest names).
    /// </summary>
    public static TheoryData<string, string, int, int> Volumes => new()
    {
        { "6.1", "-m rmapbt=0", 1500, 200 },
        { "6.13", "-m rmapbt=0 -n parent=0 -b size=1024", 31500, 240 },
        { "6.1", "-m rmapbt=0 -n size=65536", 8600, 200 },
    };

    private enum Op { Add, Remove, Replace }

    private sealed record Change(Op Op, string Name, int Target, int From);

    [Theory]
    [MemberData(nameof(Volumes))]
    public void GrowsToNodeFormAndShrinksToShortformAsTheKernelDoes(string version, string mkfsOptions, int peak, int shortest)
    {
        var v = Make(version, mkfsOptions);
        var random = new Random(peak * 17 + mkfsOptions.Length);
        var expected = new Dictionary<string, int>();
        var order = new List<string>();
        var dLinks = new int[Targets];
        var eLinks = new int[Targets];
        int serial = 0;
        var form = DirectoryForm.Shortform;

        Change Added(string name, int target)
        {
            expected[name] = target;
            order.Add(name);
            return new Change(Op.Add, name, target, -1);
        }

        // Sessions end right after a change that moved the directory to another form, so that the kernel is
        // compared just before and just after every conversion.
        List<DirectoryForm> Phase(Func<Change?> next)
        {
            var all = new List<DirectoryForm>();
            while (true)
            {
                var (changes, forms) = Session(v, next, form);
                if (changes.Count == 0) return all;
                Kernel(v, changes, form, forms[^1], dLinks, eLinks);
                form = forms[^1];
                all.AddRange(forms);
            }
        }

        // Up: adds only, to the peak.
        var formsUp = Phase(() => expected.Count < peak ? Added(NameFor(serial++, random, shortest), random.Next(Targets)) : null);
        Assert.Equal(DirectoryForm.Node, formsUp[^1]);
        Assert.Equal([DirectoryForm.Block, DirectoryForm.Leaf, DirectoryForm.Node], formsUp.Where(f => f != DirectoryForm.Shortform).Distinct());
        var shape = Shape(v);
        output.WriteLine($"{mkfsOptions}: at {peak} names: {shape.LeafBlocks} hash-tree blocks (root level {shape.RootLevel}), {shape.FreeBlocks} free-index blocks, {shape.DataBlocks} data blocks");
        Assert.True(shape.RootLevel >= 1, "the hash tree's root is a da node");
        Assert.True(shape.LeafBlocks >= (mkfsOptions.Contains("size=65536") ? 3 : 4), $"several leafN blocks under the root ({shape.LeafBlocks} hash-tree blocks)");
        if (peak > 20000) Assert.True(shape.FreeBlocks >= 2, $"free-index blocks grew ({shape.FreeBlocks})");
        Judge(v, expected, dLinks, eLinks);

        // Down: random removes (mostly of the newest names), adds and replaces; at the end a few short names.
        foreach (int floor in new[] { peak / 3, 0 })
        {
            int shortNames = floor == 0 ? 3 : 0;
            Change? Next()
            {
                if (expected.Count <= floor)
                {
                    if (shortNames == 0) return null;
                    shortNames--;
                    return Added($"s{shortNames}", shortNames);
                }
                int pick = random.Next(10);
                if (pick == 0)
                {
                    string name = order[random.Next(order.Count)];
                    int from = expected[name], to = (from + 1 + random.Next(Targets - 1)) % Targets;
                    expected[name] = to;
                    return new Change(Op.Replace, name, to, from);
                }
                if (pick <= 2) return Added(NameFor(serial++, random, shortest), random.Next(Targets));
                int window = Math.Max(4, order.Count / 6);
                int at = order.Count - 1 - random.Next(Math.Min(window, order.Count));
                string gone = order[at];
                order.RemoveAt(at);
                var change = new Change(Op.Remove, gone, expected[gone], -1);
                expected.Remove(gone);
                return change;
            }
            var forms = Phase(Next);
            output.WriteLine($"{mkfsOptions}: {forms.Count} changes down to {expected.Count} names; forms {string.Join(",", forms.Distinct())}");
            if (floor == 0)
            {
                Assert.Equal(DirectoryForm.Shortform, forms[^1]);
                Assert.Equal([DirectoryForm.Node, DirectoryForm.Leaf, DirectoryForm.Block, DirectoryForm.Shortform], forms.Prepend(formsUp[^1]).Distinct());
            }
            Judge(v, expected, dLinks, eLinks);
        }
    }

    /// <summary>
    /// The kernel makes the same <paramref name="changes"/> in its own directory: before the last one its directory
    /// has the form ours had (<paramref name="before"/>), after it the form ours reached (<paramref name="after"/>).
    /// </summary>
    private static void Kernel(Volume v, List<Change> changes, DirectoryForm before, DirectoryForm after, int[] dLinks, int[] eLinks)
    {
        foreach (var c in changes)
        {
            if (c.Op == Op.Add) dLinks[c.Target]++;
            else if (c.Op == Op.Remove) dLinks[c.Target]--;
            else
            {
                dLinks[c.Target]++;
                dLinks[c.From]--;
            }
        }
        if (changes.Count > 1)
        {
            Replay(v, changes.Take(changes.Count - 1), eLinks);
            Assert.Equal(before, FormOf(v, v.KernelIno));
        }
        Replay(v, changes.TakeLast(1), eLinks);
        Assert.Equal(after, FormOf(v, v.KernelIno));
    }

    private static void Replay(Volume v, IEnumerable<Change> changes, int[] eLinks)
    {
        using (var mount = LoopMount.Mount(v.Image, readOnly: false))
        {
            string E(string name) => Path.Combine(mount.MountPoint, "e", name);
            string T(int i) => Path.Combine(mount.MountPoint, "t", $"f{i}");
            string scratch = Path.Combine(mount.MountPoint, "s", "x");
            foreach (var c in changes)
            {
                switch (c.Op)
                {
                    case Op.Add: Check(link(T(c.Target), E(c.Name)), "link"); eLinks[c.Target]++; break;
                    case Op.Remove: File.Delete(E(c.Name)); eLinks[c.Target]--; break;
                    default:
                        // A replace in the kernel's directory alone: a link made elsewhere renamed over the name.
                        Check(link(T(c.Target), scratch), "link");
                        Check(rename(scratch, E(c.Name)), "rename");
                        eLinks[c.Target]++;
                        eLinks[c.From]--;
                        break;
                }
            }
        }
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int link(string oldPath, string newPath);

    [DllImport("libc", SetLastError = true)]
    private static extern int rename(string oldPath, string newPath);

    private static void Check(int rc, string what)
    {
        if (rc != 0) throw new InvalidOperationException($"{what} failed: errno {Marshal.GetLastPInvokeError()}");
    }

    /// <summary>
    /// One write session: changes from <paramref name="next"/>, each its own transaction (directory and link inodes
    /// logged), until it has none or the directory left form <paramref name="start"/>; then a clean unmount of the
    /// log. Returns the changes made and the form after each.
    /// </summary>
    private static (List<Change> Changes, List<DirectoryForm> Forms) Session(Volume v, Func<Change?> next, DirectoryForm start)
    {
        using var access = WriteGate.Open(v.Image, null, null, WritePurpose.Modify);
        var device = access.Data;
        var sb = access.Superblock;
        var mount = new MountContext(device, sb, 64L << 20);
        var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers));
        var space = new ImageDirectorySpace(sb, device);
        var images = new Dictionary<ulong, byte[]>();
        byte[] Image(ulong ino)
        {
            if (!images.TryGetValue(ino, out var image))
            {
                image = new byte[sb.InodeSize];
                device.Read(sb.InodeToByte(ino), image);
                images[ino] = image;
            }
            return image;
        }
        void Link(Transaction tx, int target, int delta)
        {
            ulong ino = v.TargetInos[target];
            var image = Image(ino);
            var nlink = image.AsSpan(DinodeView.OffNlink);
            BinaryPrimitives.WriteUInt32BigEndian(nlink, (uint)((int)BinaryPrimitives.ReadUInt32BigEndian(nlink) + delta));
            tx.Log(InodeLogItem.Create(ino, InodeClusterLocation.Of(sb, ino), image, InodeLogParts.Core));
        }
        var dir = new DirectoryInodeImage(sb, v.DirIno, Image(v.DirIno));
        int reservation = 10 * sb.DirectoryBlockSize + 65536;
        var forms = new List<DirectoryForm>();
        var changes = new List<Change>();
        while ((forms.Count == 0 || forms[^1] == start) && next() is { } c)
        {
            changes.Add(c);
            using var tx = new Transaction(mount, log, reservation);
            var editor = new DirectoryEditor(tx, dir, space);
            byte[] name = System.Text.Encoding.UTF8.GetBytes(c.Name);
            switch (c.Op)
            {
                case Op.Add:
                    editor.AddEntry(name, v.TargetInos[c.Target], XfsFileType.RegularFile);
                    Link(tx, c.Target, +1);
                    break;
                case Op.Remove:
                    Assert.Equal(v.TargetInos[c.Target], editor.RemoveEntry(name));
                    Link(tx, c.Target, -1);
                    break;
                default:
                    Assert.Equal(v.TargetInos[c.From], editor.ReplaceEntry(name, v.TargetInos[c.Target], XfsFileType.RegularFile));
                    Link(tx, c.Target, +1);
                    Link(tx, c.From, -1);
                    break;
            }
            Assert.True(editor.TryLookup(name, out ulong now) == (c.Op != Op.Remove));
            if (c.Op != Op.Remove) Assert.Equal(v.TargetInos[c.Target], now);
            tx.Log(InodeLogItem.Create(v.DirIno, InodeClusterLocation.Of(sb, v.DirIno), dir.Image, dir.LogParts));
            tx.Commit();
            forms.Add(editor.Form);
        }
        log.Unmount();
        return (changes, forms);
    }

    private static (DirectoryInodeImage Dir, ImageDirectorySpace Space, Superblock Sb, FileBlockDevice Device) Open(Volume v, ulong ino)
    {
        var device = FileBlockDevice.Open(v.Image, writable: false);
        var sector = new byte[512];
        device.Read(0, sector);
        var sb = Superblock.Decode(sector);
        var image = new byte[sb.InodeSize];
        device.Read(sb.InodeToByte(ino), image);
        return (new DirectoryInodeImage(sb, ino, image), new ImageDirectorySpace(sb, device), sb, device);
    }

    /// <summary>The form of a directory, from where its last mapping ends (xfs_dir2_isblock / xfs_dir2_isleaf).</summary>
    private static DirectoryForm FormOf(Volume v, ulong ino)
    {
        var (dir, space, sb, device) = Open(v, ino);
        using (device)
        {
            if (dir.DataFormat == ForkFormat.Local) return DirectoryForm.Shortform;
            ulong last = space.LastOffset(dir);
            ulong per = 1UL << sb.DirBlockLog;
            ulong leaf = (ulong)(Dir2Space.LeafOffset >> sb.BlockLog);
            return last == per ? DirectoryForm.Block : last == leaf + per ? DirectoryForm.Leaf : DirectoryForm.Node;
        }
    }

    /// <summary>How many data, hash-tree and free-index blocks our directory maps, and the level of its hash-tree root.</summary>
    private static (int DataBlocks, int LeafBlocks, int FreeBlocks, int RootLevel) Shape(Volume v)
    {
        var (dir, space, sb, device) = Open(v, v.DirIno);
        using (device)
        {
            ulong leaf = (ulong)(Dir2Space.LeafOffset >> sb.BlockLog), free = (ulong)(Dir2Space.FreeOffset >> sb.BlockLog);
            var root = new byte[sb.DirectoryBlockSize];
            device.Read(space.Map(dir, leaf), root);
            ushort magic = BinaryPrimitives.ReadUInt16BigEndian(root.AsSpan(DaBlockInfoView.OffMagic));
            int level = magic is DaBlockInfoView.DaNodeV4 or DaBlockInfoView.DaNodeV5 ? new DaNodeView(root, sb.IsV5).Level : 0;
            return (space.MappedBlocks(dir, 0, leaf), space.MappedBlocks(dir, leaf, free), space.MappedBlocks(dir, free, ulong.MaxValue), level);
        }
    }

    private static void Judge(Volume v, Dictionary<string, int> expected, int[] dLinks, int[] eLinks)
    {
        foreach (var tool in new[] { "6.1", "6.13" })
        {
            var r = Shell.Run(OracleImages.Tool("xfs_repair", tool), ["-n", v.Image]);
            Assert.True(r.ExitCode == 0, $"xfs_repair -n ({tool}) failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
        }
        var want = expected.Keys.Order(StringComparer.Ordinal).ToList();
        using (var volume = XfsVolume.Open(v.Image))
        {
            var ours = volume.ListDirectory(v.DirIno).Where(e => e.NameString is not "." and not "..").ToList();
            Assert.Equal(want, ours.Select(e => e.NameString).Order(StringComparer.Ordinal).ToList());
            foreach (var e in ours) Assert.Equal(v.TargetInos[expected[e.NameString]], e.Inode);
        }
        using (var mount = LoopMount.Mount(v.Image, readOnly: true))
        {
            string d = Path.Combine(mount.MountPoint, "d");
            var inodes = Shell.RunChecked("find", d, "-mindepth", "1", "-maxdepth", "1", "-printf", "%f %i\\n").StandardOutput
                .Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(' ')).ToDictionary(p => p[0], p => ulong.Parse(p[1]));
            Assert.Equal(want, inodes.Keys.Order(StringComparer.Ordinal).ToList());
            foreach (var (name, target) in expected) Assert.Equal(v.TargetInos[target], inodes[name]);
            var counts = Shell.RunChecked("find", Path.Combine(mount.MountPoint, "t"), "-mindepth", "1", "-printf", "%f %n\\n").StandardOutput
                .Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(' ')).ToDictionary(p => p[0], p => int.Parse(p[1]));
            for (int i = 0; i < Targets; i++) Assert.Equal(1 + dLinks[i] + eLinks[i], counts[$"f{i}"]);
        }
    }
}

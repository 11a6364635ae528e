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

        // Up: adds only, to the peak.
        var up = new List<Change>();
        while (expected.Count < peak)
        {
            string name = NameFor(serial++, random, shortest);
            int target = random.Next(Targets);
            up.Add(new Change(Op.Add, name, target, -1));
            expected[name] = target;
            order.Add(name);
        }
        var formsUp = RunBoth(v, up, dLinks, eLinks);
        Assert.Equal(DirectoryForm.Node, formsUp[^1]);
        Assert.Equal([DirectoryForm.Block, DirectoryForm.Leaf, DirectoryForm.Node], formsUp.Where(f => f != DirectoryForm.Shortform).Distinct());
        var shape = Shape(v);
        output.WriteLine($"{mkfsOptions}: at {peak} names: {shape.LeafBlocks} hash-tree blocks (root level {shape.RootLevel}), {shape.FreeBlocks} free-index blocks, {shape.DataBlocks} data blocks");
        Assert.True(shape.RootLevel >= 1, "the hash tree's root is a da node");
        Assert.True(shape.LeafBlocks >= (mkfsOptions.Contains("size=65536") ? 3 : 4), $"several leafN blocks under the root ({shape.LeafBlocks} hash-tree blocks)");
        if (peak > 20000) Assert.True(shape.FreeBlocks >= 2, $"free-index blocks grew ({shape.FreeBlocks})");
        Judge(v, expected, dLinks, eLinks);

        // Down, in two sessions: random removes (mostly of the newest names), adds and replaces.
        foreach (int floor in new[] { peak / 3, 0 })
        {
            var changes = new List<Change>();
            while (expected.Count > floor)
            {
                int pick = random.Next(10);
                if (pick == 0)
                {
                    string name = order[random.Next(order.Count)];
                    int from = expected[name], to = (from + 1 + random.Next(Targets - 1)) % Targets;
                    changes.Add(new Change(Op.Replace, name, to, from));
                    expected[name] = to;
                }
                else if (pick <= 2)
                {
                    string name = NameFor(serial++, random, shortest);
                    int target = random.Next(Targets);
                    changes.Add(new Change(Op.Add, name, target, -1));
                    expected[name] = target;
                    order.Add(name);
                }
                else
                {
                    int window = Math.Max(4, order.Count / 6);
                    int at = order.Count - 1 - random.Next(Math.Min(window, order.Count));
                    string name = order[at];
                    order.RemoveAt(at);
                    changes.Add(new Change(Op.Remove, name, expected[name], -1));
                    expected.Remove(name);
                }
            }
            if (floor == 0)
            {
                // Short names at the end: a few fit the inode's fork again.
                for (int k = 0; k < 3; k++)
                {
                    changes.Add(new Change(Op.Add, $"s{k}", k, -1));
                    expected[$"s{k}"] = k;
                    order.Add($"s{k}");
                }
            }
            var forms = RunBoth(v, changes, dLinks, eLinks);
            output.WriteLine($"{mkfsOptions}: {changes.Count} changes down to {floor} names; forms {string.Join(",", forms.Distinct())}");
            if (floor == 0)
            {
                Assert.Equal(DirectoryForm.Shortform, forms[^1]);
                Assert.Contains(DirectoryForm.Leaf, forms);
                Assert.Contains(DirectoryForm.Block, forms);
            }
            Judge(v, expected, dLinks, eLinks);
        }
    }

    /// <summary>
    /// One editor session over <paramref name="changes"/> (the form after each recorded), then the kernel makes the
    /// same changes in its own directory; both end in the same form.
    /// </summary>
    private List<DirectoryForm> RunBoth(Volume v, List<Change> changes, int[] dLinks, int[] eLinks)
    {
        var forms = Session(v, changes);
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
        Assert.Equal(forms[^1], FormOf(v, v.KernelIno));
        return forms;
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int link(string oldPath, string newPath);

    [DllImport("libc", SetLastError = true)]
    private static extern int rename(string oldPath, string newPath);

    private static void Check(int rc, string what)
    {
        if (rc != 0) throw new InvalidOperationException($"{what} failed: errno {Marshal.GetLastPInvokeError()}");
    }

    /// <summary>One write session: every change its own transaction (directory and link inodes logged), then a clean unmount of the log.</summary>
    private static List<DirectoryForm> Session(Volume v, List<Change> changes)
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
        var forms = new List<DirectoryForm>(changes.Count);
        foreach (var c in changes)
        {
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
        return forms;
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

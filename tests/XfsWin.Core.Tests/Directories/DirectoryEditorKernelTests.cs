using System.Buffers.Binary;
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
/// Directory changes judged by the kernel: a directory the kernel made (short-form, holding a few hard links to
/// files it made) gets names added by <see cref="DirectoryEditor"/> through transactions on a
/// <see cref="MountedLog"/> until it is a leaf directory, the links' nlink kept through inode items, the log
/// unmounted cleanly; then removed and added at random back down to a short-form directory. After each half the
/// kernel lists exactly the expected names with the expected link counts, XfsWin's reader lists the same,
/// xfs_repair -n (6.1 and 6.13) finds nothing, and after the adds the form equals the form the kernel gives a
/// directory it fills with the same names in the same order.
/// </summary>
public sealed class DirectoryEditorKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-dir.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private const int Targets = 24;
    private const int KernelLinks = 4;

    private sealed record Volume(string Image, ulong DirIno, ulong CompareIno, ulong[] TargetInos);

    private Volume Make(string version, string mkfsOptions)
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", version), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        using var mount = LoopMount.Mount(image, readOnly: false);
        string t = Path.Combine(mount.MountPoint, "t"), d = Path.Combine(mount.MountPoint, "d"), e = Path.Combine(mount.MountPoint, "e");
        Directory.CreateDirectory(t);
        Directory.CreateDirectory(d);
        Directory.CreateDirectory(e);
        for (int i = 0; i < Targets; i++) File.WriteAllBytes(Path.Combine(t, $"f{i}"), []);
        for (int i = 0; i < KernelLinks; i++) Shell.RunChecked("ln", Path.Combine(t, $"f{i}"), Path.Combine(d, KernelName(i)));
        ulong Ino(string p) => ulong.Parse(Shell.RunChecked("stat", "-c", "%i", p).StandardOutput.Trim());
        return new Volume(image, Ino(d), Ino(e), Enumerable.Range(0, Targets).Select(i => Ino(Path.Combine(t, $"f{i}"))).ToArray());
    }

    private static string KernelName(int i) => $"kernel-link-{i}";

    /// <summary>Names of varied lengths (so entries and free regions vary), unique by their number.</summary>
    private static string NameFor(int n, Random random) => $"n{n}-" + new string((char)('a' + random.Next(26)), random.Next(0, 30));

    public static TheoryData<string, string, int> Volumes => new()
    {
        { "6.1", "-m rmapbt=0", 260 },
        { "6.13", "-m rmapbt=0 -n parent=0", 260 },
        { "6.1", "-m rmapbt=0 -b size=1024", 260 },
        { "6.1", "-m rmapbt=0 -n size=65536", 1700 },
    };

    [Theory]
    [MemberData(nameof(Volumes))]
    public void AddsToLeafFormThenRemovesToShortformAsTheKernelJudges(string version, string mkfsOptions, int peak)
    {
        var v = Make(version, mkfsOptions);
        var random = new Random(peak * 31 + mkfsOptions.Length);
        var expected = Enumerable.Range(0, KernelLinks).ToDictionary(KernelName, i => i);
        var links = new int[Targets];
        for (int i = 0; i < Targets; i++) links[i] = i < KernelLinks ? 2 : 1;
        var addOrder = expected.Keys.ToList();
        var forms = new List<DirectoryForm>();
        int serial = 0;

        // First half: adds only, up to the peak.
        Session(v, (editor, add, remove, replace) =>
        {
            while (expected.Count < peak)
            {
                string name = NameFor(serial++, random);
                int target = random.Next(Targets);
                add(name, target);
                expected[name] = target;
                links[target]++;
                addOrder.Add(name);
                forms.Add(editor().Form);
            }
        });
        Assert.Equal(DirectoryForm.Leaf, forms[^1]);
        Assert.Contains(DirectoryForm.Shortform, forms);
        Assert.Contains(DirectoryForm.Block, forms);
        Judge(v, version, expected, links);
        // The kernel fills /e with the same names in the same order: same form.
        using (var mount = LoopMount.Mount(v.Image, readOnly: false))
        {
            foreach (string name in addOrder)
                Shell.RunChecked("ln", Path.Combine(mount.MountPoint, "t", $"f{expected[name]}"), Path.Combine(mount.MountPoint, "e", name));
        }
        Assert.Equal(forms[^1], FormOf(v, v.CompareIno));
        Assert.Equal(FormOf(v, v.DirIno), FormOf(v, v.CompareIno));
        // The comparison directory's links count too.
        foreach (var (_, target) in expected) links[target]++;

        // Second half: random removes, adds and replaces (rename onto another inode), trending down to a few entries.
        var formsDown = new List<DirectoryForm>();
        Session(v, (editor, add, remove, replace) =>
        {
            while (expected.Count > 3)
            {
                int pick = random.Next(8);
                if (pick == 0)
                {
                    var names = expected.Keys.ToList();
                    string name = names[random.Next(names.Count)];
                    int from = expected[name], to = (from + 1 + random.Next(Targets - 1)) % Targets;
                    replace(name, from, to);
                    links[from]--;
                    links[to]++;
                    expected[name] = to;
                }
                else if (pick <= 2)
                {
                    string name = NameFor(serial++, random);
                    int target = random.Next(Targets);
                    add(name, target);
                    expected[name] = target;
                    links[target]++;
                }
                else
                {
                    var names = expected.Keys.ToList();
                    string name = names[random.Next(names.Count)];
                    remove(name, expected[name]);
                    links[expected[name]]--;
                    expected.Remove(name);
                }
                formsDown.Add(editor().Form);
            }
        });
        Assert.Equal(DirectoryForm.Shortform, formsDown[^1]);
        Assert.Contains(DirectoryForm.Leaf, formsDown);
        Judge(v, version, expected, links);
        output.WriteLine($"{mkfsOptions}: {forms.Count} adds, {formsDown.Count} mixed changes; forms up {string.Join(",", forms.Distinct())}, down {string.Join(",", formsDown.Distinct())}");
    }

    private delegate void Body(Func<DirectoryEditor> editor, Action<string, int> add, Action<string, int> remove, Action<string, int, int> replace);

    /// <summary>One write session: every change its own transaction (directory inode and the link's inode logged), then a clean unmount of the log.</summary>
    private static void Session(Volume v, Body body)
    {
        using var access = WriteGate.Open(v.Image, null, null, WritePurpose.Modify);
        var device = access.Data;
        var sb = access.Superblock;
        var mount = new MountContext(device, sb, 64L << 20);
        var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new CachedLogWriteback(device, sb, mount.Buffers));
        var space = new ImageDirectorySpace(sb);
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
        var dir = new DirectoryInodeImage(sb, v.DirIno, Image(v.DirIno));
        int reservation = 4 * sb.DirectoryBlockSize + 65536;
        DirectoryEditor? current = null;
        void Change(int target, int delta, Action<DirectoryEditor> change, int otherTarget = -1)
        {
            var tx = new Transaction(mount, log, reservation);
            try
            {
                current = new DirectoryEditor(tx, dir, space);
                change(current);
                tx.Log(InodeLogItem.Create(v.DirIno, InodeClusterLocation.Of(sb, v.DirIno), dir.Image, dir.LogParts));
                ulong ino = v.TargetInos[target];
                var image = Image(ino);
                var nlink = image.AsSpan(DinodeView.OffNlink);
                BinaryPrimitives.WriteUInt32BigEndian(nlink, (uint)((int)BinaryPrimitives.ReadUInt32BigEndian(nlink) + delta));
                tx.Log(InodeLogItem.Create(ino, InodeClusterLocation.Of(sb, ino), image, InodeLogParts.Core));
                if (otherTarget >= 0)
                {
                    // A replace: the name's old inode loses the link the new one gained.
                    ulong old = v.TargetInos[otherTarget];
                    var oldImage = Image(old);
                    var oldLinks = oldImage.AsSpan(DinodeView.OffNlink);
                    BinaryPrimitives.WriteUInt32BigEndian(oldLinks, BinaryPrimitives.ReadUInt32BigEndian(oldLinks) - 1);
                    tx.Log(InodeLogItem.Create(old, InodeClusterLocation.Of(sb, old), oldImage, InodeLogParts.Core));
                }
                tx.Commit();
            }
            finally
            {
                tx.Dispose();
            }
        }
        body(() => current!,
            (name, target) => Change(target, +1, e => e.AddEntry(System.Text.Encoding.UTF8.GetBytes(name), v.TargetInos[target], XfsFileType.RegularFile)),
            (name, target) => Change(target, -1, e => Assert.Equal(v.TargetInos[target], e.RemoveEntry(System.Text.Encoding.UTF8.GetBytes(name)))),
            (name, from, to) => Change(to, +1, e => Assert.Equal(v.TargetInos[from], e.ReplaceEntry(System.Text.Encoding.UTF8.GetBytes(name), v.TargetInos[to], XfsFileType.RegularFile)), from));
        log.Unmount();
    }

    /// <summary>The form of a directory as the editor sees it (read inside a transaction that changes nothing).</summary>
    private static DirectoryForm FormOf(Volume v, ulong ino)
    {
        using var device = FileBlockDevice.Open(v.Image, writable: false);
        var sector = new byte[512];
        device.Read(0, sector);
        var sb = Superblock.Decode(sector);
        var mount = new MountContext(device, sb, 8L << 20);
        var image = new byte[sb.InodeSize];
        device.Read(sb.InodeToByte(ino), image);
        var dir = new DirectoryInodeImage(sb, ino, image);
        if (dir.DataFormat == ForkFormat.Local) return DirectoryForm.Shortform;
        var space = new ImageDirectorySpace(sb);
        ulong last = space.LastOffset(dir);
        ulong per = 1UL << sb.DirBlockLog;
        ulong leaf = (ulong)(Dir2Space.LeafOffset >> sb.BlockLog);
        return last == per ? DirectoryForm.Block : last == leaf + per ? DirectoryForm.Leaf : DirectoryForm.Node;
    }

    private void Judge(Volume v, string version, Dictionary<string, int> expected, int[] links)
    {
        foreach (var tool in new[] { "6.1", "6.13" })
        {
            var r = Shell.Run(OracleImages.Tool("xfs_repair", tool), ["-n", v.Image]);
            Assert.True(r.ExitCode == 0, $"xfs_repair -n ({tool}) failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
        }
        var want = expected.Keys.Order(StringComparer.Ordinal).ToList();
        using (var volume = XfsVolume.Open(v.Image))
        {
            var ours = volume.ListDirectory(v.DirIno).Select(e => e.NameString).Where(n => n is not "." and not "..").Order(StringComparer.Ordinal).ToList();
            Assert.Equal(want, ours);
            foreach (var e in volume.ListDirectory(v.DirIno).Where(e => e.NameString is not "." and not ".."))
                Assert.Equal(v.TargetInos[expected[e.NameString]], e.Inode);
        }
        using (var mount = LoopMount.Mount(v.Image, readOnly: false))
        {
            string d = Path.Combine(mount.MountPoint, "d");
            var kernel = Directory.EnumerateFileSystemEntries(d).Select(Path.GetFileName).Order(StringComparer.Ordinal).ToList();
            Assert.Equal(want, kernel!);
            var inodes = Shell.RunChecked("find", d, "-mindepth", "1", "-maxdepth", "1", "-printf", "%f %i\\n").StandardOutput
                .Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(' ')).ToDictionary(p => p[0], p => ulong.Parse(p[1]));
            foreach (var (name, target) in expected) Assert.Equal(v.TargetInos[target], inodes[name]);
            var counts = Shell.RunChecked("find", Path.Combine(mount.MountPoint, "t"), "-mindepth", "1", "-printf", "%f %n\\n").StandardOutput
                .Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(' ')).ToDictionary(p => p[0], p => int.Parse(p[1]));
            for (int i = 0; i < Targets; i++) Assert.Equal(links[i], counts[$"f{i}"]);
            Shell.RunChecked("ls", "-la", d);
        }
    }
}

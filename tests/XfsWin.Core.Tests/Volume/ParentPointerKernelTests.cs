using System.Text;
using System.Text.Json;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.Journal;
using XfsWin.TestSupport;
using XfsWin.Tests.Journal;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Parent pointers (mkfs.xfs 6.13 <c>-n parent=1</c>) kept by the write path, judged against the kernel: one sequence of
/// namespace operations (create, mkfifo, symlinks in the inode and in a block, mkdir, link, unlink, rmdir, rename
/// within and across directories, over a file that keeps other names and over one that is freed, RENAME_EXCHANGE of a
/// directory with a fifo and of a file with a directory, RENAME_WHITEOUT, enough hard links to push a file's parent
/// pointers out of the inode) is run by the engine on one copy of a kernel-made volume and by the kernel on another;
/// xfs_repair -n (6.13, which checks every parent pointer against the directory entries) and xfswin check find nothing
/// in ours, and
/// the kernel lists the same parent pointers (as paths, through file handles) and the same attribute fork shapes on
/// both. A crash between the directory change and its parent-pointer update is finished by the kernel's log recovery
/// and by ours alike.
/// </summary>
public sealed class ParentPointerKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-pptr.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private string MakeVolume()
    {
        string image = Path.Combine(_tmp, "base.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-n", "parent=1", image);
        using var mount = LoopMount.Mount(image, readOnly: false);
        Directory.CreateDirectory(Path.Combine(mount.MountPoint, "kernel-dir"));
        File.WriteAllText(Path.Combine(mount.MountPoint, "kernel-dir", "k1"), "made by Linux");
        File.WriteAllText(Path.Combine(mount.MountPoint, "kernel-file"), "made by Linux");
        return image;
    }

    /// <summary>One namespace operation: kind, a path, and a second path or a symlink target; flags for renames.</summary>
    private sealed record Op(string Kind, string A, string B = "", int Flags = 0);

    private const int NoReplace = 1, Exchange = 2, Whiteout = 4;

    private static List<Op> Sequence()
    {
        var ops = new List<Op>
        {
            new("mkdir", "/d1"), new("mkdir", "/d2"), new("create", "/d1/f"), new("mkfifo", "/d1/p"),
            new("symlink", "/d1/s", "short"), new("symlink", "/d1/ls", new string('t', 300)),
            new("mkdir", "/d1/sub"), new("create", "/d1/sub/deep"), new("link", "/d1/f", "/d2/f-link"),
        };
        // Forty more names with long names: the file's parent pointers no longer fit in the inode (a leaf block).
        for (int i = 0; i < 40; i++) ops.Add(new("link", "/d1/f", $"/d2/many-{i:D2}-{new string('n', 60)}"));
        for (int i = 0; i < 40; i += 2) ops.Add(new("unlink", $"/d2/many-{i:D2}-{new string('n', 60)}"));
        ops.AddRange(
        [
            new("rename", "/d1/f", "/d2/g"), new("rename", "/d2/g", "/d2/g2"),
            new("create", "/d2/victim"), new("link", "/d2/victim", "/d1/victim2"),
            new("rename", "/d2/g2", "/d1/victim2"),            // over a file that keeps its other name
            new("create", "/d1/lonely"), new("rename", "/d1/sub/deep", "/d1/lonely"), // over a file that is freed
            new("rename", "/d2", "/d1/p", Flags: Exchange),      // a directory and a fifo trade places across directories
            new("rename", "/kernel-file", "/d1/sub", Flags: Exchange),
            new("rename", "/d1/ls", "/d1/p/ls-moved", Flags: Whiteout),
            new("rename", "/kernel-dir/k1", "/d1/k1", Flags: NoReplace),
            new("mkdir", "/d3"), new("create", "/d3/x"), new("unlink", "/d3/x"), new("rmdir", "/d3"),
            new("unlink", "/d1/p/f-link"),
        ]);
        return ops;
    }

    private static (ulong Dir, byte[] Name) Split(XfsVolume v, string path)
    {
        int slash = path.LastIndexOf('/');
        return (v.ResolvePath(slash == 0 ? "/" : path[..slash]), Encoding.UTF8.GetBytes(path[(slash + 1)..]));
    }

    private static void RunOnEngine(XfsVolume v, IEnumerable<Op> ops)
    {
        foreach (var op in ops)
        {
            var (dir, name) = Split(v, op.A);
            switch (op.Kind)
            {
                case "mkdir": v.MakeDirectory(dir, name, 0x1ED, 0, 0); break;
                case "create": v.CreateNode(dir, name, 0x81A4, 0, 0); break;
                case "mkfifo": v.CreateNode(dir, name, 0x11A4, 0, 0); break;
                case "symlink": v.MakeSymlink(dir, name, Encoding.UTF8.GetBytes(op.B), 0, 0); break;
                case "unlink": v.Unlink(dir, name); break;
                case "rmdir": v.RemoveDirectory(dir, name); break;
                case "link":
                {
                    var (toDir, toName) = Split(v, op.B);
                    v.Link(v.ResolvePath(op.A), toDir, toName);
                    break;
                }
                case "rename":
                {
                    var (toDir, toName) = Split(v, op.B);
                    v.Rename(dir, name, toDir, toName, (RenameFlags)op.Flags);
                    break;
                }
                default: throw new InvalidOperationException(op.Kind);
            }
        }
    }

    private const string KernelScript = """
        import ctypes, json, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        root = sys.argv[1]
        P = lambda p: os.path.join(root, p.lstrip("/"))
        for kind, a, b, flags in json.load(open(sys.argv[2])):
            if kind == "mkdir": os.mkdir(P(a), 0o755)
            elif kind == "create": os.close(os.open(P(a), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            elif kind == "mkfifo": os.mkfifo(P(a), 0o644)
            elif kind == "symlink": os.symlink(b, P(a))
            elif kind == "unlink": os.unlink(P(a))
            elif kind == "rmdir": os.rmdir(P(a))
            elif kind == "link": os.link(P(a), P(b))
            elif kind == "rename":
                if libc.renameat2(-100, P(a).encode(), -100, P(b).encode(), flags) != 0:
                    raise OSError(ctypes.get_errno(), "renameat2 " + a + " " + b)
        """;

    private void RunOnKernel(string image, IEnumerable<Op> ops)
    {
        string json = Path.Combine(_tmp, "ops.json");
        File.WriteAllText(json, JsonSerializer.Serialize(ops.Select(o => new object[] { o.Kind, o.A, o.B, o.Flags })));
        using var mount = LoopMount.Mount(image, readOnly: false);
        Shell.RunChecked("python3", "-c", KernelScript, mount.MountPoint, json);
    }

    private void AssertRepairClean(string image)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        if (repair.ExitCode != 0) output.WriteLine(repair.StandardOutput + repair.StandardError);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n (6.13) found problems:\n{repair.StandardOutput}{repair.StandardError}");
    }

    /// <summary>Each path's inode: type, attribute fork offset and format, data fork format, as xfs_db prints them.</summary>
    private static SortedDictionary<string, string> ForkShapes(string image)
    {
        var inodes = new List<(string Path, string Ino)>();
        using (var mount = LoopMount.Mount(image, readOnly: true))
        {
            var find = Shell.RunChecked("find", mount.MountPoint, "-mindepth", "1", "-printf", "%i %P\\n").StandardOutput;
            foreach (var line in find.Split('\n', StringSplitOptions.RemoveEmptyEntries))
                inodes.Add(("/" + line[(line.IndexOf(' ', StringComparison.Ordinal) + 1)..], line[..line.IndexOf(' ', StringComparison.Ordinal)]));
        }
        var args = new List<string> { "-r" };
        foreach (var (_, ino) in inodes) args.AddRange(["-c", $"inode {ino}", "-c", "print core.mode core.forkoff core.aformat core.format core.naextents"]);
        args.Add(image);
        var lines = Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), args).StandardOutput
            .Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        Assert.Equal(inodes.Count * 5, lines.Length);
        var shapes = new SortedDictionary<string, string>(StringComparer.Ordinal);
        for (int i = 0; i < inodes.Count; i++) shapes[inodes[i].Path] = string.Join(", ", lines.Skip(i * 5).Take(5));
        return shapes;
    }

    [Fact]
    public void Every_namespace_operation_keeps_the_parent_pointers_the_kernels_would()
    {
        string baseImage = MakeVolume();
        string ours = Path.Combine(_tmp, "ours.img"), kernel = Path.Combine(_tmp, "kernel.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, ours);
        Shell.RunChecked("cp", "--sparse=always", baseImage, kernel);
        var ops = Sequence();
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
        {
            Assert.Empty(v.Info.ReadOnlyReasons);
            RunOnEngine(v, ops);
            // A name removed while the inode is held: it stays on the unlinked list, without that parent pointer.
            ulong held = v.ResolvePath("/d1/sub");
            v.Retain(held);
            v.Unlink(v.ResolvePath("/d1"), "sub"u8);
            Assert.DoesNotContain(v.ListXattrs(held, includeParentPointers: true), x => x.Namespace == XfsWin.Attributes.XattrNamespace.Parent);
            v.Release(held);
        }
        RunOnKernel(kernel, [.. ops, new("unlink", "/d1/sub")]);
        AssertRepairClean(ours);
        // xfswin check, which checks every parent pointer against the directory entries, agrees.
        var report = XfsWin.Check.VolumeChecker.Check(ours);
        foreach (var p in report.Problems.Take(10)) output.WriteLine(p.ToString());
        Assert.True(report.IsClean, $"xfswin check: {report.ProblemCount} problems");

        using (var k = LoopMount.Mount(kernel, readOnly: true))
        using (var o = LoopMount.Mount(ours, readOnly: true))
        {
            var problems = ParentPointers.Compare(k.MountPoint, o.MountPoint);
            foreach (var p in ParentPointers.List(o.MountPoint)) output.WriteLine(p.ToString());
            Assert.True(problems.Count == 0, string.Join("\n", problems));
        }
        var kernelShapes = ForkShapes(kernel);
        var ourShapes = ForkShapes(ours);
        var diffs = kernelShapes.Where(kv => !ourShapes.TryGetValue(kv.Key, out var s) || s != kv.Value)
            .Select(kv => $"{kv.Key}: kernel {kv.Value}; ours {(ourShapes.TryGetValue(kv.Key, out var s) ? s : "(absent)")}")
            .Concat(ourShapes.Keys.Except(kernelShapes.Keys).Select(p => $"{p}: only ours")).ToList();
        Assert.True(diffs.Count == 0, string.Join("\n", diffs));

        // The kernel goes on changing what we made, and repair still finds nothing.
        using (var mount = LoopMount.Mount(ours, readOnly: false))
        {
            File.Move(Path.Combine(mount.MountPoint, "d1", "victim2"), Path.Combine(mount.MountPoint, "after"));
            foreach (var f in Directory.GetFiles(Path.Combine(mount.MountPoint, "d1", "p")).Take(5)) File.Delete(f);
        }
        AssertRepairClean(ours);
    }

    /// <summary>
    /// A rename through the engine with a checkpoint after every transaction part: at the crash point where the
    /// directory change and its ATTRI are on disk and the ATTRD is not, the kernel's log recovery and ours finish the
    /// parent-pointer replace alike (clean under xfs_repair -n, the same tree, and the kernel lists the new name).
    /// </summary>
    [Fact]
    public void A_rename_crashed_before_its_parent_pointer_update_is_finished_by_the_kernel_and_by_us()
    {
        string baseImage = MakeVolume();
        string work = Path.Combine(_tmp, "work.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, work);
        var device = new RecordingBlockDevice(FileBlockDevice.Open(work, writable: true));
        using (var v = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 1 }, ownsDevice: true))
        {
            ulong root = v.RootInode;
            v.TryLookup(root, "kernel-dir"u8, out ulong dir);
            v.Rename(dir, "k1"u8, root, "moved"u8);
            v.Sync();
        }
        var events = device.Snapshot();
        var problems = new List<string>();
        int unfinished = 0;
        foreach (int flush in Enumerable.Range(0, events.Count).Where(i => events[i].IsFlush))
        {
            string image = Path.Combine(_tmp, $"crash{flush}.img");
            CrashImage.Build(baseImage, events, CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0)), image);
            using (var data = FileBlockDevice.Open(image, writable: false))
            {
                var memory = LogRecovery.Recover(data, null, DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory);
                if (!memory.UnfinishedIntents.ContainsKey("ATTRI"))
                {
                    File.Delete(image);
                    continue;
                }
            }
            unfinished++;
            // Both recoveries set the child's ctime when they finish the attribute change, each at its own time.
            if (IntentChainTests.RecoverBothWays(image, $"point {flush + 1}", ignoreChangeTimes: true) is { } problem) problems.Add(problem);
            // The kernel's recovery finished the replace: the moved file's one parent pointer names the new place.
            using (var mount = LoopMount.Mount(image + ".kernel", readOnly: true))
            {
                var parents = ParentPointers.List(mount.MountPoint);
                problems.AddRange(ParentPointers.AgainstTree(mount.MountPoint, parents).Select(p => $"point {flush + 1}: {p}"));
                Assert.Contains(parents, p => p.Paths.SequenceEqual(["/moved"]));
            }
        }
        output.WriteLine($"{unfinished} crash points left the ATTRI without its ATTRD");
        Assert.True(unfinished > 0, "no crash point left the ATTRI without its ATTRD");
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
    }
}

using System.Text;
using XfsWin.Attributes;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;
using Xunit;
using Xunit.Abstractions;

namespace XfsWin.Tests.Oracle;

/// <summary>
/// Read-write opens of damaged copies of real images: random bit flips (xfs_db blocktrash), one fuzzed field with its CRC
/// kept valid (xfs_db fuzz -d), and inode fields the kernel's verifier refuses. Every change either succeeds or fails
/// with an <see cref="XfsException"/>, never another exception or a hang; once corruption is reported the volume is
/// unhealthy and refuses every further change; a fuzzed field xfs_repair finds nothing wrong with leaves nothing wrong
/// after the changes. bench/damage-soak.sh runs any range of seeds.
/// </summary>
public sealed class DamagedWriteTests(ITestOutputHelper output) : IDisposable
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(120);
    private readonly DirectoryInfo _dir = Directory.CreateTempSubdirectory("xfswin-damaged-write.");

    public void Dispose() => _dir.Delete(recursive: true);

    /// <summary>
    /// The seeds to run: XFSWIN_DAMAGE_SEEDS="FIRST COUNT" (bench/damage-soak.sh), each seed on one of four images in
    /// turn; otherwise <paramref name="defaults"/>.
    /// </summary>
    private static TheoryData<string, int> SeedsOr(params (string Image, int Seed)[] defaults)
    {
        var data = new TheoryData<string, int>();
        if (SeedRange.FromEnvironment("XFSWIN_DAMAGE_SEEDS") is { } seeds)
        {
            string[] images = ["rmap-nrext64", "mkfs613", "b1k", "default"];
            foreach (int s in seeds) data.Add(images[s % images.Length], s);
            return data;
        }
        foreach (var (image, seed) in defaults) data.Add(image, seed);
        return data;
    }

    public static TheoryData<string, int> TrashSeeds() => SeedsOr(("rmap-nrext64", 240), ("mkfs613", 269));

    [Theory]
    [MemberData(nameof(TrashSeeds))]
    public void Changes_to_a_damaged_volume_give_only_xfs_errors(string name, int seed)
    {
        var image = OracleImages.Ensure(name);
        var copy = OracleImages.CopyTo(image, _dir.FullName, $"{name}-trash{seed}.img");
        XfsDb.Write(copy, image.XfsprogsVersion, "blockget", $"blocktrash -n 20 -s {seed} -3");
        var log = Watchdog.Run(Limit, $"changing {name} trashed with seed {seed}", () => Exercise(copy));
        output.WriteLine(log);
        if (Environment.GetEnvironmentVariable("XFSWIN_DAMAGE_LOG") is { Length: > 0 } file)
            File.AppendAllText(file, $"== {name} {seed}: {log}\n");
    }

    /// <summary>
    /// Inode fields the write path sizes its work by, set (with a valid CRC) to values the kernel's inode verifier
    /// refuses: the read that loads the inode reports it with its address, and a write to it is refused without
    /// anything else thrown (an extent count of four billion was once taken as given and overflowed the write).
    /// </summary>
    [Theory]
    [InlineData("/files/size-0", "core.nextents 4294965279", "extents but 0 blocks")]
    [InlineData("/files/size-4097", "core.nblocks 100;core.nextents 40", "40 extents do not fit the data fork")]
    [InlineData("/files/size-4097", "core.nblocks 0", "extents but 0 blocks")]
    [InlineData("/files/size-0", "core.nblocks 5", "no extents but 5 blocks")]
    [InlineData("/dirs/empty", "core.size 0", "directory of size 0 with links")]
    [InlineData("/files/size-100", "core.extsize 16", "extent size hint")]
    public void An_inode_the_kernel_would_refuse_is_reported_before_a_write_trusts_it(string path, string fields, string problem)
    {
        var image = OracleImages.Ensure("default");
        var victim = image.Manifest.Get(path);
        var copy = OracleImages.CopyTo(image, _dir.FullName, $"default-inode-{victim.Ino}.img");
        XfsDb.Write(copy, image.XfsprogsVersion, [$"inode {victim.Ino}", .. fields.Split(';').Select(f => $"write -d {f}")]);
        long inodeByte = XfsDb.Daddr(copy, image.XfsprogsVersion, $"inode {victim.Ino}") * 512;
        Watchdog.Run(Limit, $"writing inode {victim.Ino} with {fields}", () =>
        {
            using var volume = XfsVolume.Open(copy, new VolumeOpenOptions { Writable = true });
            var e = Assert.Throws<XfsCorruptionException>(() => volume.GetAttributes(victim.Ino));
            Assert.Contains(problem, e.Message, StringComparison.Ordinal);
            Assert.InRange(e.ByteOffset, inodeByte - 65536, inodeByte + 65536);
            Assert.False(volume.IsHealthy);
            var refused = Assert.ThrowsAny<XfsException>(() => volume.Write(victim.Ino, 0, new byte[8192]));
            Assert.Contains(refused.Error, new[] { XfsError.ReadOnly, XfsError.Corrupt });
            return e;
        });
    }

    private static readonly string[] FuzzActions = ["random", "zeroes", "ones", "add", "sub", "firstbit", "middlebit", "lastbit"];

    /// <summary>
    /// (xfs_db selection, fields) of the structures a fuzzed field is drawn from; {F} a file's inode, {D} a directory's,
    /// {B} a directory's with blocks of its own, {M} the file whose extents need a B+tree.
    /// </summary>
    private static readonly (string[] Select, string[] Fields)[] FuzzTargets =
    [
        (["agf 0"], ["freeblks", "longest", "bnolevel", "cntlevel", "flfirst", "fllast", "flcount", "btreeblks", "bnoroot", "cntroot"]),
        (["agf 1"], ["freeblks", "longest", "flcount", "bnoroot", "cntroot"]),
        (["agi 0"], ["count", "freecount", "root", "level", "newino", "dirino", "free_root", "free_level", "unlinked[3]"]),
        (["agf 0", "addr bnoroot"], ["numrecs", "recs[1].startblock", "recs[1].blockcount", "recs[2].startblock", "level"]),
        (["agf 0", "addr cntroot"], ["numrecs", "recs[1].startblock", "recs[1].blockcount", "level"]),
        (["agi 0", "addr root"], ["numrecs", "recs[1].startino", "recs[1].freecount", "recs[1].free", "level"]),
        (["inode {F}"], ["core.size", "core.nextents", "core.nblocks", "core.format", "core.forkoff", "core.naextents", "core.nlinkv2",
            "u3.bmx[0].startblock", "u3.bmx[0].blockcount", "u3.bmx[0].startoff", "core.mode"]),
        (["inode {D}"], ["core.size", "core.nextents", "core.nblocks", "core.format", "core.forkoff", "core.nlinkv2", "core.mode",
            "u3.bmx[0].startblock", "u3.bmx[0].blockcount", "u3.sfdir3.hdr.count"]),
        (["agfl 0"], ["bno[0]", "bno[1]", "bno[2]"]),
        (["agi 0", "addr free_root"], ["numrecs", "recs[0].startino", "recs[0].freecount", "recs[0].free"]),
        (["agf 0", "addr rmaproot"], ["numrecs", "recs[1].startblock", "recs[1].blockcount", "recs[1].owner", "recs[1].offset"]),
        (["sb 0"], ["icount", "ifree", "fdblocks", "rootino", "agblocks", "inprogress"]),
        (["inode {B}", "dblock 0"], ["bhdr.bestfree[0].offset", "bhdr.bestfree[0].length", "btail.count", "btail.stale",
            "dhdr.bestfree[0].offset", "dhdr.bestfree[0].length", "bu[1].inumber", "bu[1].namelen", "du[1].inumber", "du[1].namelen"]),
        (["inode {M}", "addr u3.bmbt.ptrs[1]"], ["numrecs", "level", "rightsib", "leftsib", "recs[1].startoff", "recs[1].startblock",
            "recs[1].blockcount"]),
    ];

    /// <summary>
    /// Seeds that fuzz a single-block directory's stale count and bestfree table (three that once crashed a create), a
    /// bmbt block, the AGFL, an AGF, the finobt, the rmapbt, the bnobt, an AGI unlinked bucket, an inode and a short-form
    /// directory.
    /// </summary>
    public static TheoryData<string, int> FuzzSeeds() => SeedsOr(("b1k", 142), ("b1k", 230), ("rmap-nrext64", 96), ("default", 163),
        ("mkfs613", 105), ("b1k", 238), ("rmap-nrext64", 44), ("mkfs613", 69), ("b1k", 186), ("mkfs613", 221), ("rmap-nrext64", 76),
        ("mkfs613", 57));

    [Theory]
    [MemberData(nameof(FuzzSeeds))]
    public void Changes_to_a_volume_with_a_fuzzed_field_give_only_xfs_errors(string name, int seed)
    {
        var image = OracleImages.Ensure(name);
        var copy = OracleImages.CopyTo(image, _dir.FullName, $"{name}-fuzz{seed}.img");
        var rng = new Random(seed);
        var files = image.Manifest.Entries.Where(e => e.Type == "file").ToList();
        var dirs = image.Manifest.Entries.Where(e => e.Type == "dir").ToList();
        var blockDirs = dirs.Where(e => e.Size >= 4096).ToList();
        var manyExtents = image.Manifest.Get("/extents/many-extents");
        string what = "";
        ManifestEntry? target = null;
        for (int attempt = 0; ; attempt++)
        {
            var (select, fields) = FuzzTargets[rng.Next(FuzzTargets.Length)];
            var file = files[rng.Next(files.Count)];
            var dir = dirs[rng.Next(dirs.Count)];
            var blockDir = blockDirs[rng.Next(blockDirs.Count)];
            target = select[0] switch
            {
                "inode {F}" => file,
                "inode {D}" => dir,
                "inode {B}" => blockDir,
                "inode {M}" => manyExtents,
                _ => null,
            };
            var commands = select.Select((c, i) => i == 0 && target is not null ? $"inode {target.Ino}" : c).ToList();
            var field = fields[rng.Next(fields.Length)];
            var action = FuzzActions[rng.Next(FuzzActions.Length)];
            commands.Add($"fuzz -d {field} {action}");
            what = string.Join(" / ", commands) + (target is null ? "" : $" ({target.Printable})");
            try
            {
                XfsDb.Write(copy, image.XfsprogsVersion, [.. commands]);
                break;
            }
            catch (InvalidOperationException) when (attempt < 20)
            {
            }
        }
        var before = Shell.Run(image.Tool("xfs_repair"), "-n", copy);
        var log = Watchdog.Run(Limit, $"changing {name} fuzzed with seed {seed}", () => Exercise(copy, target));
        var after = Shell.Run(image.Tool("xfs_repair"), "-n", copy);
        log += $"xfs_repair -n: {before.ExitCode} before, {after.ExitCode} after\n";
        output.WriteLine(what + "\n" + log);
        if (Environment.GetEnvironmentVariable("XFSWIN_DAMAGE_LOG") is { Length: > 0 } logFile)
            File.AppendAllText(logFile, $"== {name} {seed}: {what}\n{log}\n");
        // A field xfs_repair finds nothing wrong with must not lead our changes to leave what it does find wrong.
        Assert.True(before.ExitCode != 0 || after.ExitCode == 0,
            $"{what}: xfs_repair -n was clean before the changes and is not after them:\n{after.StandardOutput}{after.StandardError}");
    }

    private static string Exercise(string path, ManifestEntry? target = null)
    {
        var log = new StringBuilder();
        XfsVolume volume;
        try
        {
            volume = XfsVolume.Open(path, new VolumeOpenOptions { Writable = true });
        }
        catch (XfsException e)
        {
            return "open refused: " + e.Message;
        }
        int done = 0, refused = 0;
        bool corruptSeen = false;
        var others = new HashSet<XfsError>();
        void Try(string what, Action action, bool change = true)
        {
            try
            {
                bool wasCorrupt = corruptSeen || !volume.IsHealthy;
                action();
                done++;
                if (change && wasCorrupt) Assert.Fail($"{what} succeeded on a volume that had reported corruption");
            }
            catch (XfsException e)
            {
                refused++;
                if (e.Error == XfsError.Corrupt)
                {
                    corruptSeen = true;
                    Assert.False(volume.IsHealthy, $"{what}: corruption reported but the volume says it is healthy");
                    if (log.Length < 4000) log.AppendLine($"{what}: {e.Message}");
                }
                else if (others.Add(e.Error) && log.Length < 4000) log.AppendLine($"{what}: {e.Error}: {e.Message}");
            }
        }
        try
        {
            if (target is { Type: "file" })
            {
                ulong ino = target.Ino;
                var bytes = new byte[9000];
                Try("stat target", () => volume.GetAttributes(ino), change: false);
                Try("read target", () => volume.Read(ino, 0, bytes), change: false);
                Try("overwrite target", () => volume.Write(ino, 0, bytes));
                Try("write target far", () => volume.Write(ino, 3 << 20, bytes));
                Try("truncate target", () => volume.SetAttributes(ino, new AttributeChanges { Size = 4096 }));
                Try("xattr target", () => volume.SetXattr(ino, XattrNamespace.User, "fz"u8, bytes.AsSpan(0, 100)));
            }
            else if (target is { Type: "dir" })
            {
                ulong ino = target.Ino;
                Try("list target", () => volume.ListDirectory(ino), change: false);
                Try("create in target", () => volume.CreateNode(ino, "fuzz-new"u8, 0x81A4, 0, 0));
                Try("mkdir in target", () => volume.MakeDirectory(ino, "fuzz-dir"u8, 0x1ED, 0, 0));
                Try("rename in target", () => volume.Rename(ino, "fuzz-new"u8, ino, "fuzz-renamed"u8));
                Try("rmdir in target", () => volume.RemoveDirectory(ino, "fuzz-dir"u8));
                Try("unlink in target", () => volume.Unlink(ino, "fuzz-renamed"u8));
            }
            var dirs = new List<ulong> { 64 };
            try { dirs[0] = volume.ResolvePath("/"); } catch (XfsException) { }
            for (int i = 0; i < dirs.Count && dirs.Count < 200; i++)
            {
                IReadOnlyList<DirectoryEntry> entries = [];
                Try($"list {dirs[i]}", () => entries = volume.ListDirectory(dirs[i]), change: false);
                foreach (var e in entries)
                {
                    if (e.FileType == XfsFileType.Directory && e.Name is not [(byte)'.'] and not [(byte)'.', (byte)'.']) dirs.Add(e.Inode);
                }
            }
            var rng = new Random(17);
            var data = new byte[20000];
            rng.NextBytes(data);
            int n = 0;
            foreach (var dir in dirs)
            {
                n++;
                IReadOnlyList<DirectoryEntry> entries = [];
                Try($"list {dir}", () => entries = volume.ListDirectory(dir), change: false);
                var name = Encoding.ASCII.GetBytes($"new-{n}");
                ulong made = 0;
                Try($"create in {dir}", () => made = volume.CreateNode(dir, name, 0x81A4, 0, 0).Inode);
                if (made != 0)
                {
                    Try($"write {made}", () => volume.Write(made, 0, data));
                    Try($"append {made}", () => volume.Write(made, 70000, data.AsSpan(0, 5000)));
                    Try($"xattr {made}", () => volume.SetXattr(made, XattrNamespace.User, "k"u8, data.AsSpan(0, 300)));
                    Try($"rename in {dir}", () => volume.Rename(dir, name, dir, Encoding.ASCII.GetBytes($"renamed-{n}")));
                }
                Try($"mkdir in {dir}", () => volume.MakeDirectory(dir, Encoding.ASCII.GetBytes($"sub-{n}"), 0x1ED, 0, 0));
                foreach (var e in entries.Take(6))
                {
                    if (e.Name is [(byte)'.'] or [(byte)'.', (byte)'.']) continue;
                    var victim = e;
                    if (victim.FileType == XfsFileType.Directory) continue;
                    Try($"stat {victim.Inode}", () => volume.GetAttributes(victim.Inode), change: false);
                    Try($"truncate {victim.Inode}", () => volume.SetAttributes(victim.Inode, new AttributeChanges { Size = 100 }));
                    Try($"unlink {Encoding.UTF8.GetString(victim.Name)} in {dir}", () => volume.Unlink(dir, victim.Name));
                    break;
                }
            }
            Try("sync", volume.Sync);
        }
        finally
        {
            try { volume.Dispose(); }
            catch (XfsException e) { log.AppendLine("unmount: " + e.Message); }
        }
        log.Insert(0, $"{done} changes done, {refused} refused, corruption seen: {corruptSeen}\n");
        return log.ToString();
    }
}

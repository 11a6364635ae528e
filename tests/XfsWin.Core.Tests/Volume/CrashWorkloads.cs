using System.Text;
using Xunit;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>A file's name and content after one change (null path: it has no name left).</summary>
internal sealed record FileState(int StartEvent, string? Path, byte[] Content);

/// <summary>One regular file of a workload: its current name and content, every state it went through, its fsyncs.</summary>
internal sealed class Track
{
    public string? Path;
    public byte[] Content = [];
    public readonly List<FileState> States = [];
    /// <summary>fsyncs that returned: the event count at return and the state they made durable.</summary>
    public readonly List<(int Event, int State)> Fsyncs = [];
}

/// <summary>
/// A workload's view of the tree: what every regular file holds after each change, and its fsyncs. A change that
/// throws (a device fault) is recorded as if it had happened: whether it reached the disk is for the judge, which
/// accepts any state at or after a file's last durable fsync.
/// </summary>
internal sealed class CrashModel(XfsVolume v, RecordingBlockDevice dev)
{
    public readonly XfsVolume V = v;
    public readonly Dictionary<ulong, Track> Files = [];
    private readonly Dictionary<string, ulong> _dirs = new(StringComparer.Ordinal) { [""] = v.RootInode };
    private readonly Dictionary<string, ulong> _names = new(StringComparer.Ordinal);

    private static byte[] N(string s) => Encoding.UTF8.GetBytes(s);
    private static string Join(string dir, string name) => dir + "/" + name;

    private void Changed(ulong ino, int start)
    {
        var t = Files[ino];
        t.States.Add(new FileState(start, t.Path, t.Content));
    }

    public string Mkdir(string dir, string name)
    {
        var ino = V.MakeDirectory(_dirs[dir], N(name), 0x1ED, 0, 0).Inode;
        _dirs[Join(dir, name)] = ino;
        return Join(dir, name);
    }

    public ulong Create(string dir, string name, byte[] data)
    {
        int start = dev.EventCount;
        var ino = V.CreateNode(_dirs[dir], N(name), 0x81A4, 1000, 1000).Inode;
        string path = Join(dir, name);
        _names[path] = ino;
        Files[ino] = new Track { Path = path };
        Changed(ino, start);
        if (data.Length > 0) Write(ino, 0, data);
        return ino;
    }

    public void Write(ulong ino, long offset, byte[] data)
    {
        int start = dev.EventCount;
        try
        {
            Assert.Equal(data.Length, V.Write(ino, offset, data));
        }
        finally
        {
            var t = Files[ino];
            var content = new byte[Math.Max(t.Content.Length, offset + data.Length)];
            t.Content.CopyTo(content, 0);
            data.CopyTo(content, offset);
            t.Content = content;
            Changed(ino, start);
        }
    }

    public void Truncate(ulong ino, long size)
    {
        int start = dev.EventCount;
        try
        {
            V.SetAttributes(ino, new AttributeChanges { Size = size });
        }
        finally
        {
            var t = Files[ino];
            var content = new byte[size];
            t.Content.AsSpan(0, (int)Math.Min(size, t.Content.Length)).CopyTo(content);
            t.Content = content;
            Changed(ino, start);
        }
    }

    public void Unlink(string path)
    {
        int start = dev.EventCount;
        int slash = path.LastIndexOf('/');
        try
        {
            V.Unlink(_dirs[path[..slash]], N(path[(slash + 1)..]));
        }
        finally
        {
            var ino = _names[path];
            _names.Remove(path);
            Files[ino].Path = null;
            Changed(ino, start);
        }
    }

    public void Rmdir(string path)
    {
        int slash = path.LastIndexOf('/');
        V.RemoveDirectory(_dirs[path[..slash]], N(path[(slash + 1)..]));
        _dirs.Remove(path);
    }

    /// <summary>rename(2) of a file or directory; a file it replaces loses its name.</summary>
    public void Rename(string from, string to)
    {
        int start = dev.EventCount;
        int fs = from.LastIndexOf('/'), ts = to.LastIndexOf('/');
        try
        {
            V.Rename(_dirs[from[..fs]], N(from[(fs + 1)..]), _dirs[to[..ts]], N(to[(ts + 1)..]));
        }
        finally
        {
            Renamed(from, to, start);
        }
    }

    private void Renamed(string from, string to, int start)
    {
        if (_names.Remove(to, out var replaced))
        {
            Files[replaced].Path = null;
            Changed(replaced, start);
        }
        if (_names.Remove(from, out var moved))
        {
            _names[to] = moved;
            Files[moved].Path = to;
            Changed(moved, start);
            return;
        }
        // A directory: everything under it has a new path.
        foreach (var dir in _dirs.Keys.Where(d => d == from || d.StartsWith(from + "/", StringComparison.Ordinal)).ToList())
        {
            _dirs.Remove(dir, out var ino);
            _dirs[to + dir[from.Length..]] = ino;
        }
        foreach (var name in _names.Keys.Where(n => n.StartsWith(from + "/", StringComparison.Ordinal)).ToList())
        {
            _names.Remove(name, out var ino);
            string renamed = to + name[from.Length..];
            _names[renamed] = ino;
            Files[ino].Path = renamed;
            Changed(ino, start);
        }
    }

    /// <summary>FICLONE: <paramref name="to"/> (a new file in <paramref name="dir"/>) shares every block of <paramref name="from"/>.</summary>
    public ulong Clone(ulong from, string dir, string name)
    {
        var ino = Create(dir, name, []);
        int start = dev.EventCount;
        try
        {
            V.CloneRange(from, 0, ino, 0, 0);
        }
        finally
        {
            Files[ino].Content = (byte[])Files[from].Content.Clone();
            Changed(ino, start);
        }
        return ino;
    }

    /// <summary>The release of a writable open: staged copy-on-write blocks and blocks past EOF are given back.</summary>
    public void Close(ulong ino) => V.CloseFile(ino, writable: true);

    public void Fsync(ulong ino)
    {
        V.Flush(ino);
        var t = Files[ino];
        t.Fsyncs.Add((dev.EventCount, t.States.Count - 1));
    }

    public ulong Ino(string path) => _names[path];
    public IEnumerable<string> Names => _names.Keys;
}

/// <summary>The workloads the crash points and the fault tests run (fixed seeds make them repeatable).</summary>
internal static class CrashWorkloads
{
    public static byte[] Bytes(Random rng, int length)
    {
        var data = new byte[length];
        rng.NextBytes(data);
        return data;
    }

    /// <summary>Small files created and fsynced, then renamed, replaced, unlinked, appended to and truncated.</summary>
    private static void SmallFiles(CrashModel m, Random rng)
    {
        string d = m.Mkdir("", "small");
        var inos = new List<ulong>();
        for (int i = 0; i < 60; i++)
        {
            var ino = m.Create(d, $"f{i:D3}", Bytes(rng, rng.Next(0, 3) == 0 ? 0 : rng.Next(1, 20000)));
            inos.Add(ino);
            if (i % 3 == 0) m.Fsync(ino);
        }
        m.Rename(d + "/f000", d + "/renamed-000");
        m.Fsync(m.Ino(d + "/renamed-000"));
        m.Rename(d + "/f003", d + "/f006"); // over a fsynced file
        m.Fsync(m.Ino(d + "/f006"));
        m.Unlink(d + "/f009");
        m.Unlink(d + "/f010");
        m.Fsync(inos[12]);
        for (int i = 12; i < 30; i += 3)
        {
            m.Write(inos[i], m.Files[inos[i]].Content.Length, Bytes(rng, rng.Next(1, 9000)));
            m.Fsync(inos[i]);
        }
        for (int i = 30; i < 45; i += 3)
        {
            // Block-aligned sizes: a truncate to the middle of a block zeroes the tail of that block in place first,
            // which a crash may leave without the size change (as on Linux).
            m.Truncate(inos[i], m.Files[inos[i]].Content.Length / 4096 * 4096 / 2 / 4096 * 4096);
            m.Fsync(inos[i]);
        }
        for (int i = 45; i < 60; i++)
            if (i % 4 == 0) m.Unlink(d + $"/f{i:D3}");
        m.Fsync(inos[51]);
    }

    /// <summary>One directory grown through block and leaf into node form, fsyncs along the way, then shrunk.</summary>
    private static void DirectoryGrowth(CrashModel m, Random rng)
    {
        string d = m.Mkdir("", "grow");
        var names = new List<string>();
        for (int i = 0; i < 900; i++)
        {
            string name = $"entry-{i:D4}-{new string((char)('a' + i % 26), rng.Next(10, 40))}";
            var ino = m.Create(d, name, Bytes(rng, rng.Next(0, 200)));
            names.Add(d + "/" + name);
            if (i % 60 == 7) m.Fsync(ino);
        }
        for (int i = 0; i < names.Count; i += 2) m.Unlink(names[i]);
        m.Fsync(m.Ino(names[^1]));
        for (int i = 1; i < 200; i += 4) m.Rename(names[i], d + $"/moved-{i:D4}");
        m.Fsync(m.Ino(d + "/moved-0001"));
    }

    /// <summary>
    /// Files of many blocks written in pieces (appends, sparse writes, overwrites), fsynced, truncated. The first four
    /// files are written in 64 KiB pieces (held until a checkpoint), the others in pieces of 256 KiB and 1.25 MiB
    /// (written behind by the data cache's writer thread, the larger ones in two writes).
    /// </summary>
    private static void Data(CrashModel m, Random rng)
    {
        string d = m.Mkdir("", "data");
        var inos = new List<ulong>();
        for (int i = 0; i < 8; i++)
        {
            var ino = m.Create(d, $"big{i}", []);
            inos.Add(ino);
            int size = rng.Next(100_000, 1_500_000);
            int piece = i < 4 ? 65536 : i < 6 ? 256 << 10 : 1280 << 10;
            for (int off = 0; off < size; off += piece) m.Write(ino, off, Bytes(rng, Math.Min(piece, size - off)));
            if (i % 2 == 0) m.Fsync(ino);
        }
        // Sparse: a write far past EOF, fsynced.
        var sparse = m.Create(d, "sparse", []);
        m.Write(sparse, 3 << 20, Bytes(rng, 10000));
        m.Fsync(sparse);
        // Appends to fsynced files, fsynced again.
        for (int i = 0; i < 8; i += 2)
        {
            m.Write(inos[i], m.Files[inos[i]].Content.Length, Bytes(rng, rng.Next(1000, 200_000)));
            m.Fsync(inos[i]);
        }
        // Overwrites and truncates of files never fsynced (judged by repair only), then of fsynced ones.
        m.Write(inos[1], 5000, Bytes(rng, 70000));
        m.Truncate(inos[3], 12345);
        m.Truncate(inos[0], 8192);
        m.Fsync(inos[0]);
        m.Unlink(d + "/big2");
        m.Truncate(inos[4], 0);
        m.Fsync(inos[4]);
    }

    /// <summary>Directories made, nested, renamed across each other with fsynced files inside, emptied and removed.</summary>
    private static void Namespace(CrashModel m, Random rng)
    {
        var dirs = new List<string> { m.Mkdir("", "ns") };
        for (int i = 0; i < 12; i++) dirs.Add(m.Mkdir(dirs[rng.Next(dirs.Count)], $"d{i}"));
        var files = new List<ulong>();
        for (int i = 0; i < 40; i++)
        {
            var ino = m.Create(dirs[rng.Next(dirs.Count)], $"n{i}", Bytes(rng, rng.Next(0, 6000)));
            files.Add(ino);
            if (i % 4 == 0) m.Fsync(ino);
        }
        // A leaf directory moved under the top one, with a fsync of a file inside after the move.
        string leaf = dirs.Last(d => !dirs.Any(o => o.StartsWith(d + "/", StringComparison.Ordinal)));
        string newPath = "/ns/moved-" + leaf[(leaf.LastIndexOf('/') + 1)..];
        m.Rename(leaf, newPath);
        var inside = m.Names.FirstOrDefault(n => n.StartsWith(newPath + "/", StringComparison.Ordinal));
        if (inside is not null) m.Fsync(m.Ino(inside));
        // Files moved between directories and over each other.
        var names = m.Names.OrderBy(n => n, StringComparer.Ordinal).ToList();
        for (int i = 0; i + 1 < names.Count && i < 16; i += 2)
        {
            string target = i % 4 == 0 ? names[i + 1] : newPath + $"/from-{i}";
            m.Rename(names[i], target);
            m.Fsync(m.Ino(target));
        }
        // A directory made, filled, emptied and removed.
        string gone = m.Mkdir("/ns", "gone");
        var g = m.Create(gone, "x", Bytes(rng, 100));
        m.Fsync(g);
        m.Unlink(gone + "/x");
        m.Rmdir(gone);
        m.Fsync(files[0]);
    }

    /// <summary>
    /// Files held (open) while their names go, so they sit on the AGI unlinked lists (several to a bucket), released in
    /// a shuffled order (unlinking from the middle of a list), some still held at the unmount; fsyncs of other files
    /// make the lists durable at many points.
    /// </summary>
    private static void HeldUnlinked(CrashModel m, Random rng)
    {
        string d = m.Mkdir("", "held");
        var files = new List<(string Path, ulong Ino)>();
        for (int i = 0; i < 160; i++)
        {
            string name = $"h{i:D3}";
            files.Add((d + "/" + name, m.Create(d, name, Bytes(rng, rng.Next(0, 3) == 0 ? 0 : rng.Next(1, 30000)))));
        }
        var keep = files.Where((_, i) => i % 2 == 1).ToList();
        m.Fsync(keep[0].Ino);
        var held = files.Where((_, i) => i % 2 == 0).ToList();
        foreach (var (path, ino) in held)
        {
            m.V.Retain(ino);
            m.Unlink(path);
            if (rng.Next(8) == 0) m.Fsync(keep[rng.Next(keep.Count)].Ino);
        }
        // A held file replaced by a rename.
        m.V.Retain(keep[1].Ino);
        m.Rename(keep[2].Path, keep[1].Path);
        m.Fsync(m.Ino(keep[1].Path));
        held.Add(keep[1]);
        var order = held.OrderBy(_ => rng.Next()).ToList();
        foreach (var (_, ino) in order.Take(order.Count * 3 / 4))
        {
            m.V.Release(ino);
            if (rng.Next(6) == 0) m.Fsync(keep[3 + rng.Next(keep.Count - 3)].Ino);
        }
        m.Fsync(keep[5].Ino);
    }

    /// <summary>
    /// Clones rewritten in small pieces (copy-on-write taking blocks staged for the hint-aligned range, the rest left
    /// staged until the file's close), the source rewritten under its clones, clones truncated and removed, so crashes
    /// find staging extents in use, left over and freed. The judge holds a file to one of its states from its last
    /// durable fsync on; a crash may keep any subset of the writes since (on Linux too: copy-on-write remaps complete
    /// in writeback order), and a write over a block the file no longer shares goes in place, where a torn write
    /// leaves a block of neither state. So the judged files (the sources and the even clones) take one write inside one
    /// block at a time, each fsynced, always to a block that file still shares (copied, then remapped in one
    /// transaction); the odd clones take runs of writes without a fsync and are judged by the kernel's mount and
    /// xfs_repair, and by their content once their last change is fsynced.
    /// </summary>
    private static void Reflink(CrashModel m, Random rng)
    {
        string d = m.Mkdir("", "reflink");
        var sources = new List<ulong>();
        for (int i = 0; i < 3; i++)
        {
            var ino = m.Create(d, $"src{i}", Bytes(rng, rng.Next(200_000, 600_000)));
            m.Fsync(ino);
            sources.Add(ino);
        }
        var clones = new List<ulong>();
        for (int i = 0; i < 6; i++)
        {
            var clone = m.Clone(sources[i % 3], d, $"clone{i}");
            if (i % 2 == 0) m.Fsync(clone);
            clones.Add(clone);
        }
        // Per source, the blocks any file of its group (the source and its two clones) has written: a block none of
        // them wrote is still shared by all three.
        var touched = new[] { new HashSet<int>(), new HashSet<int>(), new HashSet<int>() };
        void JudgedWrite(ulong ino, int group)
        {
            int blocks = m.Files[ino].Content.Length / 4096;
            var free = Enumerable.Range(0, blocks).Where(b => !touched[group].Contains(b)).ToList();
            if (free.Count == 0) return;
            int block = free[rng.Next(free.Count)];
            touched[group].Add(block);
            int length = rng.Next(2) == 0 ? 4096 : rng.Next(1, 600);
            m.Write(ino, block * 4096L + (length == 4096 ? 0 : rng.Next(0, 4096 - length)), Bytes(rng, length));
            m.Fsync(ino);
        }
        for (int round = 0; round < 4; round++)
        {
            for (int i = 0; i < clones.Count; i++)
            {
                if (i % 2 == 0)
                {
                    for (int k = 0; k < 5; k++) JudgedWrite(clones[i], i % 3);
                    continue;
                }
                for (int k = 0; k < 3; k++)
                {
                    int size = m.Files[clones[i]].Content.Length, length = rng.Next(1, 8_000), at = rng.Next(0, size - length);
                    for (int b = at / 4096; b <= (at + length - 1) / 4096; b++) touched[i % 3].Add(b);
                    m.Write(clones[i], at, Bytes(rng, length));
                }
            }
            // The source under its clones, then some closes give staged blocks back.
            JudgedWrite(sources[round % 3], round % 3);
            foreach (var clone in clones.Where((_, i) => (i + round) % 3 == 0)) m.Close(clone);
        }
        // Block-aligned: a cut inside a block zeroes that block's tail first, which a crash may keep without the cut.
        m.Truncate(clones[1], 17 * 4096);
        m.Fsync(clones[1]);
        m.Unlink(d + "/clone4");
        m.Fsync(clones[0]);
        m.Write(clones[5], 0, Bytes(rng, 50_000));
        m.Fsync(clones[5]);
        m.Write(clones[3], 8192, Bytes(rng, 30_000));
        m.Fsync(clones[3]);
    }

    public static readonly (string Name, Action<CrashModel, Random> Run)[] All =
        [("small-files", SmallFiles), ("directory-growth", DirectoryGrowth), ("data", Data), ("namespace", Namespace), ("held-unlinked", HeldUnlinked),
         ("reflink", Reflink)];

    /// <summary>A 512 MiB volume made by mkfs.xfs 6.13 with its defaults, with one file the kernel wrote.</summary>
    public static string MakeBase(string directory)
    {
        string image = Path.Combine(directory, "base.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        using (var mount = LoopMount.Mount(image, readOnly: false))
            File.WriteAllText(Path.Combine(mount.MountPoint, "kernel-file"), "made by Linux");
        return image;
    }

    /// <summary>Judges one crash image; returns what is wrong, or null.</summary>
    public static string? Judge(string image, CrashModel model, IReadOnlyList<DeviceEvent> events, CrashPoint crash)
    {
        int flush = CrashImage.LastFlushBefore(events, crash.Point);
        var problems = new List<string>();
        LoopMount mount;
        try
        {
            mount = LoopMount.Mount(image, readOnly: false);
        }
        catch (Exception e)
        {
            return $"the kernel did not mount it: {e.Message}";
        }
        try
        {
            foreach (var (ino, t) in model.Files)
            {
                // The last fsync whose events all precede the last flush is durable.
                int g = t.Fsyncs.FindLastIndex(f => f.Event - 1 <= flush);
                if (g < 0) continue;
                int from = t.Fsyncs[g].State;
                var acceptable = t.States.Skip(from).Where((s, i) => i == 0 || s.StartEvent < crash.Point).ToList();
                bool ok = acceptable.Any(s => s.Path is null || Matches(Path.Combine(mount.MountPoint, s.Path.TrimStart('/')), s.Content));
                if (!ok)
                {
                    var s0 = acceptable[0];
                    string full = Path.Combine(mount.MountPoint, s0.Path!.TrimStart('/'));
                    string found = File.Exists(full) ? $"{new FileInfo(full).Length} bytes, different content" : "absent";
                    problems.Add($"inode {ino} fsynced as {s0.Path} ({s0.Content.Length} bytes; {acceptable.Count} acceptable states): {found}");
                }
            }
        }
        finally
        {
            mount.Dispose();
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        if (repair.ExitCode != 0)
            problems.Add($"xfs_repair -n exit {repair.ExitCode}: {string.Join(" | ", (repair.StandardOutput + repair.StandardError).Split('\n').Where(IsFinding).Take(12))}");
        return problems.Count == 0 ? null : string.Join("; ", problems);
    }

    /// <summary>A line of xfs_repair's output that says something about the volume (not a phase banner or a host notice).</summary>
    public static bool IsFinding(string line) =>
        line.Length > 0 && !line.StartsWith("Phase ", StringComparison.Ordinal) && !line.StartsWith("        - ", StringComparison.Ordinal) &&
        !line.Contains("host filesystem geometry", StringComparison.Ordinal) && !line.StartsWith("Repair may fail", StringComparison.Ordinal) &&
        !line.StartsWith("the image and the host", StringComparison.Ordinal) && !line.StartsWith("No modify flag set", StringComparison.Ordinal);

    public static bool Matches(string path, byte[] content)
    {
        if (!File.Exists(path)) return false;
        var actual = File.ReadAllBytes(path);
        return actual.AsSpan().SequenceEqual(content);
    }

}

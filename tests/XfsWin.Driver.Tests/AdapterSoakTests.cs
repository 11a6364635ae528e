using System.Globalization;
using XfsWin.Driver.Semantics;
using XfsWin.TestSupport;
using XfsWin.Volume;
using Xunit.Abstractions;

namespace XfsWin.Driver.Tests;

/// <summary>
/// Seeded random sequences of what Windows programs do through WinFsp, against the read-write adapter on a volume made
/// by mkfs.xfs: creates of files and directories; writes anywhere (at most 64 KiB at a time, as WinFsp sends them), to
/// end of file and constrained (paging I/O, never past EOF); end of file and allocation size; overwrites; renames (with
/// and without replace, into other directories, refused into themselves or over directories); delete-on-close of files
/// and directories (refused when not empty); the POSIX delete of a file another open still writes; symbolic links as
/// CreateSymbolicLink makes them; modification times set through SetBasicInfo. Every status and every byte read must be
/// what a simple model of the tree says; then the volume is closed, the kernel mounts it and must show the model's tree
/// (names, bytes, link targets, the times set), and xfs_repair -n finds nothing.
/// <para>
/// <c>XFSWIN_ADAPTER_SEEDS="FIRST COUNT"</c> runs other seeds (a soak); a failure names the seed and the step.
/// </para>
/// </summary>
public sealed class AdapterSoakTests(ITestOutputHelper output) : IDisposable
{
    private const int Operations = 1200;
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-winsoak.").FullName;

    public void Dispose()
    {
        try { Directory.Delete(_dir, recursive: true); }
        catch (IOException) { /* a failed test may leave the mount point busy */ }
    }

    public static TheoryData<int> Seeds()
    {
        var data = new TheoryData<int>();
        var configured = Environment.GetEnvironmentVariable("XFSWIN_ADAPTER_SEEDS")?.Split(' ', StringSplitOptions.RemoveEmptyEntries);
        int first = configured is { Length: 2 } ? int.Parse(configured[0], CultureInfo.InvariantCulture) : 1;
        int count = configured is { Length: 2 } ? int.Parse(configured[1], CultureInfo.InvariantCulture) : 3;
        for (int s = first; s < first + count; s++) data.Add(s);
        return data;
    }

    /// <summary>What the tree holds: paths (Windows form, "" the root) to a directory or a file's bytes.</summary>
    private sealed class Model(string root, bool caseInsensitive, int seed)
    {
        /// <summary>The directory this model's steps stay in ("" the volume's root).</summary>
        public readonly string Root = root;
        /// <summary>Names are looked up whatever their case (a case-insensitive mount); the model keeps them as stored.</summary>
        public readonly bool CaseInsensitive = caseInsensitive;
        private readonly Random _cases = new(seed);
        public readonly SortedDictionary<string, List<byte>?> Entries = new(StringComparer.Ordinal) { [root] = null };
        public IEnumerable<string> Movable => Entries.Keys.Where(k => k != Root);

        public bool IsDirectory(string path) => Entries.TryGetValue(path, out var v) && v is null;
        public IEnumerable<string> Directories => Entries.Where(e => e.Value is null).Select(e => e.Key);
        public IEnumerable<string> Files => Entries.Where(e => e.Value is not null && !Links.ContainsKey(e.Key)).Select(e => e.Key);
        /// <summary>Symbolic links (in <see cref="Entries"/> too, with no bytes) and their targets as Linux shows them.</summary>
        public readonly Dictionary<string, string> Links = new(StringComparer.Ordinal);
        /// <summary>Modification times set through SetBasicInfo since the file's last change of contents.</summary>
        public readonly Dictionary<string, DateTime> Times = new(StringComparer.Ordinal);

        public void Remove(string path)
        {
            Entries.Remove(path);
            Links.Remove(path);
            Times.Remove(path);
        }
        public bool HasChildren(string dir) => Entries.Keys.Any(k => k.StartsWith(dir + "\\", StringComparison.Ordinal));

        /// <summary>The stored path a request for <paramref name="path"/> reaches, or null.</summary>
        public string? Find(string path) =>
            !CaseInsensitive ? (Entries.ContainsKey(path) ? path : null)
            : Entries.Keys.FirstOrDefault(k => string.Equals(k, path, StringComparison.OrdinalIgnoreCase));

        /// <summary>How a request names <paramref name="path"/>: as stored, or on a case-insensitive mount in any case.</summary>
        public string Asked(string path) =>
            !CaseInsensitive || path.Length == 0 ? path
            : new string(path.Select(c => _cases.Next(2) == 0 ? char.ToUpperInvariant(c) : char.ToLowerInvariant(c)).ToArray());

        public string NewName(Random rng) =>
            new(Enumerable.Range(0, rng.Next(1, 3)).Select(_ => CaseInsensitive && rng.Next(2) == 0 ? (char)('A' + rng.Next(4)) : (char)('a' + rng.Next(CaseInsensitive ? 4 : 5))).ToArray());

        public void Move(string from, string to)
        {
            foreach (var key in Entries.Keys.Where(k => k == from || k.StartsWith(from + "\\", StringComparison.Ordinal)).ToList())
            {
                var value = Entries[key];
                bool link = Links.Remove(key, out var target), timed = Times.Remove(key, out var time);
                Entries.Remove(key);
                string moved = to + key[from.Length..];
                Entries[moved] = value;
                if (link) Links[moved] = target!;
                if (timed) Times[moved] = time;
            }
        }
    }

    [Theory]
    [MemberData(nameof(Seeds))]
    public void Random_windows_changes_are_what_the_kernel_and_xfs_repair_see(int seed) => Run(seed, threads: 1, caseInsensitive: false);

    /// <summary>
    /// The same on a case-insensitive mount: names are asked for in any case, a create meeting another case of a name
    /// collides, a rename to another case of the same name changes its case, a rename over another case of another
    /// name replaces it; the kernel sees the names as they were stored.
    /// </summary>
    [Theory]
    [MemberData(nameof(Seeds))]
    public void Random_windows_changes_on_a_case_insensitive_mount_are_what_the_kernel_sees(int seed) => Run(seed, threads: 1, caseInsensitive: true);

    /// <summary>
    /// The same on four threads at once, each in a directory of its own with its own model (the Windows host calls
    /// the adapter from many threads): every thread's statuses and bytes are what its model says whatever the
    /// interleaving, and the kernel sees the four trees.
    /// </summary>
    [Theory]
    [MemberData(nameof(Seeds))]
    public void Random_windows_changes_on_four_threads_are_what_the_kernel_sees(int seed) => Run(seed, threads: 4, caseInsensitive: false);

    private void Run(int seed, int threads, bool caseInsensitive)
    {
        string image = Path.Combine(_dir, $"soak-{seed}-{threads}-{caseInsensitive}.img");
        Shell.RunChecked("truncate", "-s", "320M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-q", "-f", image);
        var models = Enumerable.Range(0, threads).Select(t => new Model(threads == 1 ? "" : $"\\t{t}", caseInsensitive, seed * 1000 + t + 500)).ToArray();

        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            var options = new MountOptions { ReadWrite = true, IdMapping = IdMappingMode.Unix, CreatorUid = 1000, CreatorGid = 1000, CaseInsensitive = caseInsensitive };
            var fs = new XfsWindowsFileSystem(volume, options, options.CreateIdentityMap(Sid.Parse("S-1-5-21-1-2-3-1001")), "X:");
            foreach (var model in models.Where(m => m.Root.Length > 0))
            {
                Expect(NtStatus.Success, fs.Create(model.Root, XfsWindowsFileSystem.FileDirectoryFile, 0, 0, null, 0, default, out var dir, out _), $"mkdir {model.Root}");
                Close(fs, dir!);
            }
            var failures = new System.Collections.Concurrent.ConcurrentQueue<Exception>();
            var workers = models.Select((model, t) => new Thread(() =>
            {
                var rng = new Random(seed * 1000 + t);
                var log = new List<string>();
                for (int step = 0; step < Operations; step++)
                {
                    try
                    {
                        Step(fs, model, rng, log);
                    }
                    catch (Exception e) when (e is not OutOfMemoryException)
                    {
                        failures.Enqueue(new InvalidOperationException(
                            $"seed {seed}, thread {t} of {threads}, step {step}: {e.Message}\nlast steps:\n{string.Join("\n", log.TakeLast(12))}", e));
                        return;
                    }
                }
            })).ToList();
            workers.ForEach(w => w.Start());
            workers.ForEach(w => w.Join());
            if (!failures.IsEmpty) throw new AggregateException(failures);
            foreach (var model in models)
            {
                foreach (var file in model.Files) AssertContent(fs, file, model.Entries[file]!, $"seed {seed}, final read");
                output.WriteLine($"seed {seed}, {Shown(model.Root)}: {model.Directories.Count() - 1} directories, {model.Files.Count()} files, {model.Files.Sum(f => model.Entries[f]!.Count)} bytes");
            }
        }

        var expected = new SortedDictionary<string, List<byte>?>(StringComparer.Ordinal) { [""] = null };
        var expectedLinks = new Dictionary<string, string>(StringComparer.Ordinal);
        var times = new Dictionary<string, DateTime>(StringComparer.Ordinal);
        foreach (var model in models)
        {
            foreach (var (path, bytes) in model.Entries) expected[path] = bytes;
            foreach (var (path, target) in model.Links) expectedLinks[path] = target;
            foreach (var (path, when) in model.Times) times[path] = when;
        }
        using (var mount = LoopMount.Mount(image, readOnly: true))
        {
            var seen = new SortedDictionary<string, List<byte>?>(StringComparer.Ordinal) { [""] = null };
            var links = new Dictionary<string, string>(StringComparer.Ordinal);
            foreach (var path in Walk(mount.MountPoint))
            {
                string key = "\\" + Path.GetRelativePath(mount.MountPoint, path).Replace('/', '\\');
                if (new FileInfo(path).LinkTarget is { } target)
                {
                    links[key] = target;
                    seen[key] = [];
                    continue;
                }
                seen[key] = Directory.Exists(path) ? null : [.. File.ReadAllBytes(path)];
                if (times.TryGetValue(key, out var when))
                    Assert.True(File.GetLastWriteTimeUtc(path) == when, $"seed {seed}: the kernel shows {path} modified {File.GetLastWriteTimeUtc(path):O}, set to {when:O}");
            }
            Assert.Equal(expectedLinks.OrderBy(l => l.Key, StringComparer.Ordinal), links.OrderBy(l => l.Key, StringComparer.Ordinal));
            Assert.Equal(expected.Keys, seen.Keys);
            foreach (var (path, bytes) in expected)
            {
                Assert.True((bytes is null) == (seen[path] is null), $"seed {seed}: {path} is a {(bytes is null ? "directory" : "file")} in the model");
                if (bytes is not null) Assert.True(bytes.SequenceEqual(seen[path]!), $"seed {seed}: the kernel reads other bytes in {path}");
            }
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"seed {seed}: xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}");
    }

    /// <summary>Every entry under <paramref name="dir"/>, descending into directories but not through symbolic links.</summary>
    private static IEnumerable<string> Walk(string dir)
    {
        foreach (var path in Directory.EnumerateFileSystemEntries(dir))
        {
            yield return path;
            if (new FileInfo(path).LinkTarget is null && Directory.Exists(path))
                foreach (var inner in Walk(path)) yield return inner;
        }
    }

    private static string Pick(Random rng, IEnumerable<string> from)
    {
        var list = from.ToList();
        return list[rng.Next(list.Count)];
    }

    private static string Child(string dir, string name) => dir + "\\" + name;

    private static string Shown(string path) => path.Length == 0 ? "\\" : path;

    private static void Expect(int expected, int status, string what)
    {
        if (status != expected) throw new InvalidOperationException($"{what}: {NtStatus.Describe(status)}, expected {NtStatus.Describe(expected)}");
    }

    private static OpenFile OpenExisting(XfsWindowsFileSystem fs, string path)
    {
        Expect(NtStatus.Success, fs.Open(Shown(path), 0, 0, out var file, out _), $"open {Shown(path)}");
        return file!;
    }

    private static void Close(XfsWindowsFileSystem fs, OpenFile file, bool delete = false)
    {
        fs.Cleanup(file, file.Path, delete ? XfsWindowsFileSystem.CleanupDelete : 0);
        fs.Close(file);
    }

    private static void AssertContent(XfsWindowsFileSystem fs, string path, List<byte> expected, string what)
    {
        var file = OpenExisting(fs, path);
        try
        {
            Expect(NtStatus.Success, fs.GetFileInfo(file, out var info), $"{what}: info of {path}");
            if (info.FileSize != (ulong)expected.Count) throw new InvalidOperationException($"{what}: {path} has {info.FileSize} bytes, expected {expected.Count}");
            var buffer = new byte[expected.Count + 100];
            int done = 0;
            while (true)
            {
                int status = fs.Read(file, buffer.AsSpan(done, Math.Min(65536, buffer.Length - done)), (ulong)done, out int n);
                if (status == NtStatus.EndOfFile || n == 0) break;
                Expect(NtStatus.Success, status, $"{what}: read {path} at {done}");
                done += n;
            }
            if (done != expected.Count || !buffer.AsSpan(0, done).SequenceEqual(expected.ToArray()))
                throw new InvalidOperationException($"{what}: {path} reads {done} bytes that differ from the {expected.Count} written");
        }
        finally
        {
            Close(fs, file);
        }
    }

    private static void WriteModel(List<byte> content, long offset, ReadOnlySpan<byte> data)
    {
        if (data.IsEmpty) return;
        while (content.Count < offset + data.Length) content.Add(0);
        for (int i = 0; i < data.Length; i++) content[(int)offset + i] = data[i];
    }

    /// <summary>
    /// Creates a file or directory of a new name in a directory of the model's, asked for in any case the mount allows;
    /// where the name is taken the create must collide, and null is returned.
    /// </summary>
    private static (string Path, OpenFile File)? CreateNew(XfsWindowsFileSystem fs, Model model, Random rng, List<string> log, bool directory)
    {
        string parent = Pick(rng, model.Directories), name = model.NewName(rng);
        string path = Child(parent, name), asked = Child(model.Asked(parent), name);
        string what = directory ? "mkdir" : "create";
        log.Add($"{what} {asked}");
        int status = fs.Create(asked, directory ? XfsWindowsFileSystem.FileDirectoryFile : 0, 0, 0, null, 0, default, out var file, out _);
        if (model.Find(path) is not null)
        {
            Expect(NtStatus.ObjectNameCollision, status, $"{what} of existing {path}");
            return null;
        }
        Expect(NtStatus.Success, status, $"{what} {path}");
        return (path, file!);
    }

    private static void Step(XfsWindowsFileSystem fs, Model model, Random rng, List<string> log)
    {
        int roll = rng.Next(100);
        var files = model.Files.ToList();
        if (roll < 16 || files.Count == 0)
        {
            // Create a file (or meet the name already there).
            if (CreateNew(fs, model, rng, log, directory: false) is not var (path, file)) return;
            model.Entries[path] = [];
            Close(fs, file);
        }
        else if (roll < 22)
        {
            if (CreateNew(fs, model, rng, log, directory: true) is not var (path, dir)) return;
            model.Entries[path] = null;
            Close(fs, dir);
        }
        else if (roll < 44)
        {
            // A write anywhere (WinFsp sends at most 64 KiB), to end of file, or constrained (paging I/O: never past EOF).
            string path = Pick(rng, files);
            int kind = rng.Next(8);
            bool toEnd = kind < 2, constrained = kind == 2;
            var data = new byte[rng.Next(4) == 0 ? rng.Next(1, 65537) : rng.Next(1, 9000)];
            rng.NextBytes(data);
            var content = model.Entries[path]!;
            long offset = toEnd ? content.Count : constrained ? rng.Next(0, content.Count + 5000) : rng.Next(0, 300_000);
            log.Add($"write {path} at {(toEnd ? "end" : offset)} +{data.Length}{(constrained ? " constrained" : "")}");
            var file = OpenExisting(fs, model.Asked(path));
            Expect(NtStatus.Success, fs.Write(file, data, toEnd ? ulong.MaxValue : (ulong)offset, toEnd, constrained, out int n, out var info), $"write {path}");
            int expectedCount = constrained ? (int)Math.Clamp(content.Count - offset, 0, data.Length) : data.Length;
            if (n != expectedCount) throw new InvalidOperationException($"write {path}: {n} of {data.Length} bytes, expected {expectedCount}");
            WriteModel(content, offset, data.AsSpan(0, n));
            model.Times.Remove(path);
            if (info.FileSize != (ulong)content.Count) throw new InvalidOperationException($"write {path}: size {info.FileSize}, expected {content.Count}");
            Close(fs, file);
        }
        else if (roll < 52)
        {
            string path = Pick(rng, files);
            var content = model.Entries[path]!;
            int size = rng.Next(3) == 0 ? rng.Next(0, 400_000) : rng.Next(0, content.Count + 1);
            // End of file, or allocation size (which cuts the file when below its size and otherwise leaves it).
            bool allocation = rng.Next(4) == 0;
            log.Add($"{(allocation ? "allocation size" : "size")} {path} to {size}");
            var file = OpenExisting(fs, model.Asked(path));
            Expect(NtStatus.Success, fs.SetFileSize(file, (ulong)size, allocation, out var info), $"size of {path}");
            model.Times.Remove(path);
            if (size < content.Count) content.RemoveRange(size, content.Count - size);
            else if (!allocation) while (content.Count < size) content.Add(0);
            if (info.FileSize != (ulong)content.Count) throw new InvalidOperationException($"size {path}: {info.FileSize}, expected {content.Count}");
            // Past EOF the allocation is made (a sparse file's holes below EOF stay holes).
            ulong blockEnd = ((ulong)content.Count + 4095) / 4096 * 4096;
            if (allocation && (ulong)size > blockEnd && info.AllocationSize < (ulong)size - blockEnd)
                throw new InvalidOperationException($"allocation size {path}: {info.AllocationSize}, expected at least the {(ulong)size - blockEnd} bytes past EOF");
            Close(fs, file);
        }
        else if (roll < 56)
        {
            string path = Pick(rng, files);
            log.Add($"overwrite {path}");
            var file = OpenExisting(fs, model.Asked(path));
            Expect(NtStatus.Success, fs.Overwrite(file, 0, false, 0, default, out var info), $"overwrite {path}");
            model.Entries[path]!.Clear();
            model.Times.Remove(path);
            if (info.FileSize != 0) throw new InvalidOperationException($"overwrite {path}: size {info.FileSize}");
            Close(fs, file);
        }
        else if (roll < 70)
        {
            Rename(fs, model, rng, log);
        }
        else if (roll < 82)
        {
            // Delete-on-close of a file or a directory (a directory with entries refuses).
            string path = Pick(rng, model.Movable.DefaultIfEmpty(files[0]));
            bool dir = model.IsDirectory(path);
            log.Add($"delete {path}");
            var file = OpenExisting(fs, model.Asked(path));
            int status = fs.SetDelete(file, file.Path, true);
            if (dir && model.HasChildren(path))
            {
                Expect(NtStatus.DirectoryNotEmpty, status, $"delete of non-empty {path}");
                Close(fs, file);
                return;
            }
            Expect(NtStatus.Success, status, $"delete {path}");
            Close(fs, file, delete: true);
            model.Remove(path);
            Expect(NtStatus.ObjectNameNotFound, fs.Open(model.Asked(path), 0, 0, out _, out _), $"open of deleted {path}");
        }
        else if (roll < 86)
        {
            // POSIX delete while another open writes and reads the file.
            string path = Pick(rng, files);
            log.Add($"posix delete {path} while open");
            var kept = OpenExisting(fs, model.Asked(path));
            var deleter = OpenExisting(fs, model.Asked(path));
            Expect(NtStatus.Success, fs.SetDelete(deleter, deleter.Path, true), $"delete {path}");
            Close(fs, deleter, delete: true);
            var content = model.Entries[path]!;
            model.Remove(path);
            Expect(NtStatus.ObjectNameNotFound, fs.Open(model.Asked(path), 0, 0, out _, out _), $"open of deleted {path}");
            var data = new byte[rng.Next(1, 5000)];
            rng.NextBytes(data);
            Expect(NtStatus.Success, fs.Write(kept, data, 0, false, false, out int n, out _), $"write to deleted {path}");
            WriteModel(content, 0, data.AsSpan(0, n));
            var back = new byte[content.Count + 10];
            Expect(NtStatus.Success, fs.Read(kept, back, 0, out int got), $"read of deleted {path}");
            if (got != content.Count || !back.AsSpan(0, got).SequenceEqual(content.ToArray()))
                throw new InvalidOperationException($"{path}: the open of the deleted file reads other bytes");
            Close(fs, kept);
        }
        else if (roll < 89)
        {
            // A symbolic link as CreateSymbolicLink makes it: a file, then its reparse point (a relative target).
            if (CreateNew(fs, model, rng, log, directory: false) is not var (path, file)) return;
            string target = string.Join('\\', Enumerable.Range(0, rng.Next(1, 3)).Select(_ => model.NewName(rng)));
            log.Add($"symlink {path} -> {target}");
            var buffer = new byte[ReparseData.SymlinkSize(target, target)];
            ReparseData.WriteSymlink(buffer, target, target, relative: true);
            Expect(NtStatus.Success, fs.SetReparsePoint(file, file.Path, buffer), $"reparse point on {path}");
            Close(fs, file);
            model.Entries[path] = [];
            model.Links[path] = target.Replace('\\', '/');
        }
        else if (roll < 92)
        {
            // A modification time set from Windows (whole seconds: FILETIME counts 100 ns).
            string path = Pick(rng, files);
            var when = new DateTime(2001, 1, 1, 0, 0, 0, DateTimeKind.Utc).AddSeconds(rng.Next(0, 600_000_000));
            log.Add($"time {path} {when:O}");
            var file = OpenExisting(fs, model.Asked(path));
            Expect(NtStatus.Success, fs.SetBasicInfo(file, XfsWindowsFileSystem.InvalidFileAttributes, 0, 0, (ulong)when.ToFileTimeUtc(), 0, out var info),
                $"time of {path}");
            if (info.LastWriteTime != (ulong)when.ToFileTimeUtc()) throw new InvalidOperationException($"time of {path}: {DateTime.FromFileTimeUtc((long)info.LastWriteTime):O}");
            Close(fs, file);
            model.Times[path] = when;
        }
        else
        {
            string path = Pick(rng, files);
            log.Add($"read {path}");
            AssertContent(fs, model.Asked(path), model.Entries[path]!, "read");
        }
    }

    private static void Rename(XfsWindowsFileSystem fs, Model model, Random rng, List<string> log)
    {
        var movable = model.Movable.ToList();
        if (movable.Count == 0) return;
        string from = movable[rng.Next(movable.Count)];
        string toDir = Pick(rng, model.Directories);
        string name = rng.Next(3) == 0 && movable.Count > 1 ? Path.GetFileName(model.Asked(Pick(rng, movable)).Replace('\\', '/')) : model.NewName(rng);
        string to = Child(toDir, name);
        bool replace = rng.Next(2) == 0;
        bool fromDir = model.IsDirectory(from);
        string? existing = model.Find(to);
        // A directory moved over an existing file is left out: what Windows does there is not a question for XFS.
        if (fromDir && existing is not null && existing != from && !model.IsDirectory(existing)) return;
        string asked = Child(model.Asked(toDir), name);
        log.Add($"rename {from} -> {asked}{(replace ? " (replace)" : "")}");
        var file = OpenExisting(fs, model.Asked(from));
        int status = fs.Rename(file, file.Path, asked, replace);
        try
        {
            if (fromDir && (toDir == from || toDir.StartsWith(from + "\\", StringComparison.Ordinal)))
            {
                Expect(NtStatus.InvalidParameter, status, $"rename {from} into itself");
                return;
            }
            if (existing == from)
            {
                // The same entry: on a case-insensitive mount the name takes the case asked for.
                Expect(NtStatus.Success, status, $"rename {from} to {to}");
                if (to != from) model.Move(from, to);
                return;
            }
            if (existing is not null && !replace)
            {
                Expect(NtStatus.ObjectNameCollision, status, $"rename {from} over {existing}");
                return;
            }
            if (existing is not null && model.IsDirectory(existing))
            {
                Expect(NtStatus.AccessDenied, status, $"rename {from} over directory {existing}");
                return;
            }
            Expect(NtStatus.Success, status, $"rename {from} to {to}");
            if (existing is not null) model.Remove(existing);
            model.Move(from, to);
        }
        finally
        {
            Close(fs, file);
        }
    }
}

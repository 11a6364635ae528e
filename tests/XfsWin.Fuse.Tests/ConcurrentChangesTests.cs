using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Requests from many threads at once on one <c>xfswin mount -o rw</c>: four threads each change a tree of their own
/// (creates, overwrites inside and past EOF, appends, truncates up and down, punched holes, copy_file_range within
/// the tree (which shares blocks where the offsets allow), renames, links, unlinks, directories made and removed,
/// xattrs local and remote, symlinks, fsyncs) and check every read against a model of their tree, while a fifth thread
/// lists, stats and reads all the trees as they change. Each tree's final state depends only on its thread's seeded
/// operations, whatever the interleaving: each thread then checks its whole tree through the mount, the clean unmount
/// leaves a volume xfs_repair -n (6.13) finds clean, and the kernel mounts it and shows every tree as its model says.
/// <para>
/// The server takes the requests on several threads as they come (the mount's default), so requests run side by side
/// in the engine. XFSWIN_STRESS_MOUNT_OPTIONS adds mount options (max_threads=1 serves one request at a time). Run
/// longer with XFSWIN_STRESS_ROUNDS (rounds of fresh volumes, seeds from XFSWIN_STRESS_SEED) and XFSWIN_STRESS_OPS
/// (operations per thread), as <c>bench/concurrent-soak.sh</c> does. A link(2) refused by the kernel's own cached link
/// count (a FUSE limitation, see StaleKernelLinkCount) is tried again and counted; everything else fails the run.
/// </para>
/// </summary>
public sealed class ConcurrentChangesTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-concurrent");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static int Setting(string name, int fallback) =>
        int.TryParse(Environment.GetEnvironmentVariable(name), out int n) && n > 0 ? n : fallback;

    private const int Threads = 4;

    /// <summary>A file as its thread knows it: shared by its hard links.</summary>
    private sealed class FileModel
    {
        public byte[] Content = [];
        public readonly List<string> History = [];
        public readonly SortedDictionary<string, byte[]> Xattrs = new(StringComparer.Ordinal);
    }

    /// <summary>One thread's tree: names (relative to its directory) of files, symlinks (target) and directories.</summary>
    private sealed class Worker(int index, int seed, string root)
    {
        private readonly Random _rng = new(seed);
        private int _names;
        public readonly Dictionary<string, FileModel> Files = new(StringComparer.Ordinal);
        public readonly Dictionary<string, string> Symlinks = new(StringComparer.Ordinal);
        public readonly SortedSet<string> Directories = new(StringComparer.Ordinal) { "" };
        public readonly Dictionary<string, int> Done = new(StringComparer.Ordinal);
        public readonly List<string> Log = [];
        public string? Error;
        public string Dir => $"t{index}";

        private string Full(string relative) => Path.Combine(root, Dir, relative);

        public void Run(int operations)
        {
            try
            {
                for (int i = 0; i < operations && Error is null; i++) Step();
                if (Error is null) Error = Verify(Path.Combine(root, Dir), "through the mount at the end");
            }
            catch (Exception e)
            {
                Error = $"thread {index} threw: {e}";
            }
        }

        private string NewName()
        {
            var dirs = Directories.ToList();
            string dir = dirs[_rng.Next(dirs.Count)];
            string name = $"n{_names++}";
            return dir.Length == 0 ? name : dir + "/" + name;
        }

        private T Pick<T>(IReadOnlyList<T> list) => list[_rng.Next(list.Count)];

        private byte[] Bytes(int n)
        {
            var b = new byte[n];
            _rng.NextBytes(b);
            return b;
        }

        private void Fail(string what) => Error ??= $"thread {index}: {what} (errno {Marshal.GetLastPInvokeError()}); its last operations:\n  " + string.Join("\n  ", Log.TakeLast(15));

        private void Note(string op, string detail, FileModel? f = null, FileModel? g = null)
        {
            f?.History.Add(op + " " + detail);
            g?.History.Add(op + " " + detail);
            Log.Add(op + " " + detail);
            Done[op] = Done.GetValueOrDefault(op) + 1;
        }

        private void Step()
        {
            var names = Files.Keys.Order(StringComparer.Ordinal).ToList();
            int op = names.Count < 3 ? 0 : _rng.Next(20);
            switch (op)
            {
                case 0 or 1: Create(NewName(), _rng.Next(4) == 0 ? _rng.Next(100_000, 400_000) : _rng.Next(0, 20_000)); break;
                case 2 or 3 or 4: Write(Pick(names)); break;
                case 5: Append(Pick(names)); break;
                case 6: Truncate(Pick(names)); break;
                case 7: Punch(Pick(names)); break;
                case 8: CopyRange(Pick(names), Pick(names)); break;
                case 9 or 10: Read(Pick(names)); break;
                case 11: Rename(Pick(names), names); break;
                case 12: Link(Pick(names)); break;
                case 13: Unlink(Pick(names)); break;
                case 14: Directory(); break;
                case 15 or 16: Xattr(Pick(names)); break;
                case 17: Symlink(); break;
                default: Sync(Pick(names)); break;
            }
        }

        private unsafe bool PWrite(int fd, byte[] data, long offset)
        {
            fixed (byte* p = data)
                for (int done = 0; done < data.Length;)
                {
                    nint n = Libc.pwrite(fd, p + done, data.Length - done, offset + done);
                    if (n <= 0) return false;
                    done += (int)n;
                }
            return true;
        }

        private static void Place(FileModel f, byte[] data, long offset)
        {
            long end = offset + data.Length;
            if (end > f.Content.Length) Array.Resize(ref f.Content, (int)end);
            data.CopyTo(f.Content, (int)offset);
        }

        private void Create(string name, int size)
        {
            int fd = Libc.open(Full(name), Libc.O_CREAT | Libc.O_EXCL | Libc.O_WRONLY, 0x1A4);
            if (fd < 0) { Fail($"create {name}"); return; }
            var data = Bytes(size);
            bool ok = PWrite(fd, data, 0);
            Libc.close(fd);
            if (!ok) { Fail($"write of new {name}"); return; }
            Files[name] = new FileModel { Content = data };
            Note("create", $"{name} {size}", Files[name]);
        }

        private void Write(string name)
        {
            var f = Files[name];
            // Inside the file (an overwrite, of written blocks or of holes), or past its end (a hole in between).
            long offset = _rng.Next(3) == 0 ? f.Content.Length + _rng.Next(0, 70_000) : _rng.Next(0, Math.Max(1, f.Content.Length));
            if (_rng.Next(2) == 0) offset &= ~4095L;
            var data = Bytes(_rng.Next(4) == 0 ? 4096 : _rng.Next(1, 70_000));
            int fd = Libc.open(Full(name), Libc.O_WRONLY, 0);
            if (fd < 0) { Fail($"open {name} to write"); return; }
            bool ok = PWrite(fd, data, offset);
            Libc.close(fd);
            if (!ok) { Fail($"pwrite {name} at {offset} (+{data.Length})"); return; }
            Place(f, data, offset);
            Note("write", $"{name} at {offset} +{data.Length}", f);
        }

        private void Append(string name)
        {
            var f = Files[name];
            var data = Bytes(_rng.Next(1, 140_000));
            int fd = Libc.open(Full(name), Libc.O_WRONLY | Libc.O_APPEND, 0);
            if (fd < 0) { Fail($"open {name} to append"); return; }
            bool ok = PWrite(fd, data, f.Content.Length);
            Libc.close(fd);
            if (!ok) { Fail($"append to {name}"); return; }
            Place(f, data, f.Content.Length);
            Note("append", $"{name} +{data.Length}", f);
        }

        private void Truncate(string name)
        {
            var f = Files[name];
            int size = _rng.Next(3) == 0 ? f.Content.Length + _rng.Next(1, 100_000) : _rng.Next(0, Math.Max(1, f.Content.Length));
            if (Libc.truncate(Full(name), size) != 0) { Fail($"truncate {name} to {size}"); return; }
            Array.Resize(ref f.Content, size);
            Note("truncate", $"{name} {size}", f);
        }

        private void Punch(string name)
        {
            var f = Files[name];
            if (f.Content.Length == 0) return;
            int offset = _rng.Next(0, f.Content.Length);
            int length = _rng.Next(1, 80_000);
            int fd = Libc.open(Full(name), Libc.O_WRONLY, 0);
            if (fd < 0) { Fail($"open {name} to punch"); return; }
            const int PunchHoleKeepSize = 0x02 | 0x01;
            int rc = Libc.fallocate(fd, PunchHoleKeepSize, offset, length);
            Libc.close(fd);
            if (rc != 0) { Fail($"punch {name} at {offset} (+{length})"); return; }
            Array.Clear(f.Content, offset, Math.Min(length, f.Content.Length - offset));
            Note("punch", $"{name} at {offset} +{length}", f);
        }

        private unsafe void CopyRange(string from, string to)
        {
            var source = Files[from];
            var target = Files[to];
            if (source.Content.Length == 0 || ReferenceEquals(source, target)) return;
            // Block-aligned offsets share blocks (the rest copies bytes); either way the bytes are what the model copies.
            bool aligned = _rng.Next(2) == 0;
            long inOffset = _rng.Next(0, source.Content.Length);
            long outOffset = _rng.Next(0, target.Content.Length + 8192);
            if (aligned) { inOffset &= ~4095L; outOffset &= ~4095L; }
            long length = _rng.Next(1, 200_000);
            int fdIn = Libc.open(Full(from), Libc.O_RDONLY, 0);
            int fdOut = Libc.open(Full(to), Libc.O_WRONLY, 0);
            try
            {
                if (fdIn < 0 || fdOut < 0) { Fail($"open {from} and {to} to copy"); return; }
                long i = inOffset, o = outOffset;
                nint n = Libc.copy_file_range(fdIn, &i, fdOut, &o, (nuint)length, 0);
                if (n < 0) { Fail($"copy_file_range {from} at {inOffset} to {to} at {outOffset} (+{length})"); return; }
                long copied = Math.Min(length, source.Content.Length - inOffset);
                if (n != copied && !(aligned && n > 0 && n < copied)) { Fail($"copy_file_range copied {n} of {copied} bytes"); return; }
                Place(target, source.Content.AsSpan((int)inOffset, (int)n).ToArray(), outOffset);
                Note("copy_file_range", $"{from}@{inOffset} -> {to}@{outOffset} {n}", target, source);
            }
            finally
            {
                if (fdIn >= 0) Libc.close(fdIn);
                if (fdOut >= 0) Libc.close(fdOut);
            }
        }

        private unsafe void Read(string name)
        {
            var f = Files[name];
            var got = new byte[f.Content.Length + 1];
            int fd = Libc.open(Full(name), Libc.O_RDONLY, 0);
            if (fd < 0) { Fail($"open {name} to read"); return; }
            int total = 0;
            fixed (byte* p = got)
                while (total < got.Length)
                {
                    nint n = Libc.pread(fd, p + total, got.Length - total, total);
                    if (n < 0) { Libc.close(fd); Fail($"read {name}"); return; }
                    if (n == 0) break;
                    total += (int)n;
                }
            Libc.close(fd);
            if (total != f.Content.Length || !got.AsSpan(0, total).SequenceEqual(f.Content))
            {
                int at = 0;
                while (at < Math.Min(total, f.Content.Length) && got[at] == f.Content[at]) at++;
                int end = at;
                while (end < Math.Min(total, f.Content.Length) && got[end] != f.Content[end]) end++;
                bool zeros = got.AsSpan(at, Math.Max(0, Math.Min(end, total) - at)).IndexOfAnyExcept((byte)0) < 0;
                Fail($"read of {name} gave {total} bytes, the model holds {f.Content.Length}; first difference at byte {at}, differing run to {end} (read bytes all zero: {zeros}); "
                     + $"read again: {ReadAgain(name, f, 0)}; read with O_DIRECT: {ReadAgain(name, f, ODirect)}; the file's operations:\n    " + string.Join("\n    ", f.History.TakeLast(30)));
                return;
            }
            Note("read", name);
        }

        // O_DIRECT as x86-64 and arm64 define it.
        private static readonly int ODirect = RuntimeInformation.ProcessArchitecture == Architecture.Arm64 ? 0x10000 : 0x4000;

        /// <summary>
        /// After a link(2) that failed with ENOENT: whether it failed on the kernel's cached link count alone, a FUSE
        /// limitation whatever the server (docs/fuse.md, "Read-write mounts", hard links and a concurrent stat): the
        /// kernel's cached count is 0 and the server's (asked with AT_STATX_FORCE_SYNC, which also puts it into the
        /// kernel's cache) at least 1. Such a link is counted and tried once more; anything else fails the run.
        /// </summary>
        private unsafe bool StaleKernelLinkCount(string name)
        {
            if (CachedLinkCount(name) != "0") return false;
            const int AtStatxForceSync = 0x2000;
            var buffer = stackalloc byte[256];
            if (Libc.statx(Libc.AT_FDCWD, Full(name), Libc.AT_SYMLINK_NOFOLLOW | AtStatxForceSync, 0x4, buffer) != 0 || *(uint*)(buffer + 16) == 0) return false;
            Done["link retried (stale kernel link count)"] = Done.GetValueOrDefault("link retried (stale kernel link count)") + 1;
            return true;
        }

        /// <summary>st_nlink as the kernel has it cached (statx with AT_STATX_DONT_SYNC: no request to the server).</summary>
        private unsafe string CachedLinkCount(string name)
        {
            const int AtStatxDontSync = 0x4000;
            const uint StatxNlink = 0x4;
            var buffer = stackalloc byte[256];
            return Libc.statx(Libc.AT_FDCWD, Full(name), Libc.AT_SYMLINK_NOFOLLOW | AtStatxDontSync, StatxNlink, buffer) == 0
                ? (*(uint*)(buffer + 16)).ToString(System.Globalization.CultureInfo.InvariantCulture)
                : $"statx errno {Marshal.GetLastPInvokeError()}";
        }

        /// <summary>The file read again from the start, with extra open flags (O_DIRECT: past the kernel's page cache), compared with the model.</summary>
        private unsafe string ReadAgain(string name, FileModel f, int flags)
        {
            int fd = Libc.open(Full(name), Libc.O_RDONLY | flags, 0);
            if (fd < 0) return $"open failed (errno {Marshal.GetLastPInvokeError()})";
            int size = (f.Content.Length + 8192) & ~4095;
            byte* p = (byte*)NativeMemory.AlignedAlloc((nuint)size, 4096);
            try
            {
                int total = 0;
                while (total < size)
                {
                    nint n = Libc.pread(fd, p + total, size - total, total);
                    if (n < 0) return $"pread failed (errno {Marshal.GetLastPInvokeError()}) after {total}";
                    if (n == 0) break;
                    total += (int)n;
                }
                var got = new ReadOnlySpan<byte>(p, total);
                int at = 0;
                while (at < Math.Min(total, f.Content.Length) && got[at] == f.Content[at]) at++;
                return total == f.Content.Length && at == total ? "matches the model" : $"{total} bytes, first difference at {at}";
            }
            finally
            {
                NativeMemory.AlignedFree(p);
                Libc.close(fd);
            }
        }

        private void Rename(string name, List<string> names)
        {
            // Onto a new name, or over another file of the tree (which loses that name).
            string to = _rng.Next(3) == 0 ? Pick(names) : NewName();
            if (to == name) return;
            if (Libc.renameat2(Libc.AT_FDCWD, Full(name), Libc.AT_FDCWD, Full(to), 0) != 0) { Fail($"rename {name} to {to}"); return; }
            // Two names of one file: rename(2) leaves both.
            if (Files.TryGetValue(to, out var there) && ReferenceEquals(there, Files[name])) { Note("rename", $"{name} -> {to} (the same file)"); return; }
            Files[to] = Files[name];
            Files.Remove(name);
            Note("rename", $"{name} -> {to}", Files[to]);
        }

        private void Link(string name)
        {
            string to = NewName();
            int errno = Libc.link(Full(name), Full(to)) == 0 ? 0 : Marshal.GetLastPInvokeError();
            if (errno == 2 && StaleKernelLinkCount(name))
                errno = Libc.link(Full(name), Full(to)) == 0 ? 0 : Marshal.GetLastPInvokeError();
            if (errno != 0)
            {
                Fail($"link {name} to {to} (errno {errno}; the link count the kernel has cached: {CachedLinkCount(name)}; " +
                     $"the server's: {Libc.Stat(Full(name), withBlocks: false)}); the file's operations:\n    " + string.Join("\n    ", Files[name].History.TakeLast(30)));
                return;
            }
            Files[to] = Files[name];
            Note("link", $"{name} -> {to}", Files[to]);
        }

        private void Unlink(string name)
        {
            if (Libc.unlink(Full(name)) != 0) { Fail($"unlink {name}"); return; }
            Files.Remove(name);
            Note("unlink", name);
        }

        private void Directory()
        {
            // An empty directory goes; otherwise a new one is made (at most two levels).
            var empty = Directories.Where(d => d.Length > 0 && !Files.Keys.Concat(Symlinks.Keys).Concat(Directories).Any(n => n.StartsWith(d + "/", StringComparison.Ordinal))).ToList();
            if (empty.Count > 0 && _rng.Next(2) == 0)
            {
                string gone = Pick(empty);
                if (Libc.rmdir(Full(gone)) != 0) { Fail($"rmdir {gone}"); return; }
                Directories.Remove(gone);
                Note("rmdir", gone);
                return;
            }
            var parents = Directories.Where(d => !d.Contains('/', StringComparison.Ordinal)).ToList();
            string parent = Pick(parents);
            string made = (parent.Length == 0 ? "" : parent + "/") + $"d{_names++}";
            if (Libc.mkdir(Full(made), 0x1ED) != 0) { Fail($"mkdir {made}"); return; }
            Directories.Add(made);
            Note("mkdir", made);
        }

        private unsafe void Xattr(string name)
        {
            var f = Files[name];
            if (f.Xattrs.Count > 0 && _rng.Next(3) == 0)
            {
                string gone = f.Xattrs.Keys.ElementAt(_rng.Next(f.Xattrs.Count));
                if (Libc.lremovexattr(Full(name), gone) != 0) { Fail($"removexattr {gone} of {name}"); return; }
                f.Xattrs.Remove(gone);
                Note("removexattr", $"{name} {gone}");
                return;
            }
            string key = $"user.k{_rng.Next(12)}";
            // Local values, and now and then one too large for the attribute fork (a remote value in blocks of its own).
            var value = Bytes(_rng.Next(6) == 0 ? _rng.Next(2000, 9000) : _rng.Next(0, 250));
            fixed (byte* p = value)
                if (Libc.lsetxattr(Full(name), key, p, value.Length, 0) != 0) { Fail($"setxattr {key} of {name} ({value.Length} bytes)"); return; }
            f.Xattrs[key] = value;
            Note("setxattr", $"{name} {key} {value.Length}");
        }

        private void Symlink()
        {
            string name = NewName();
            string target = _rng.Next(4) == 0 ? new string('t', _rng.Next(200, 1000)) : $"target-{_rng.Next(1000)}";
            if (Libc.symlink(target, Full(name)) != 0) { Fail($"symlink {name}"); return; }
            Symlinks[name] = target;
            Note("symlink", name);
        }

        private void Sync(string name)
        {
            int fd = Libc.open(Full(name), Libc.O_RDONLY, 0);
            if (fd < 0) { Fail($"open {name} to fsync"); return; }
            int rc = Libc.fsync(fd);
            Libc.close(fd);
            if (rc != 0) { Fail($"fsync {name}"); return; }
            Note("fsync", name);
        }

        /// <summary>The tree at <paramref name="top"/> against the model: names, kinds, contents, xattrs, targets; null when equal.</summary>
        public string? Verify(string top, string where)
        {
            var problems = new List<string>();
            var seen = new SortedSet<string>(StringComparer.Ordinal);
            foreach (var entry in new DirectoryInfo(top).EnumerateFileSystemInfos("*", SearchOption.AllDirectories))
            {
                string rel = Path.GetRelativePath(top, entry.FullName);
                seen.Add(rel);
                if (entry.LinkTarget is { } target)
                {
                    if (!Symlinks.TryGetValue(rel, out var want) || want != target) problems.Add($"symlink {rel} -> {target}, the model has {(want is null ? "none" : want)}");
                }
                else if ((entry.Attributes & FileAttributes.Directory) != 0)
                {
                    if (!Directories.Contains(rel)) problems.Add($"directory {rel} is not in the model");
                }
                else if (!Files.TryGetValue(rel, out var f))
                {
                    problems.Add($"file {rel} is not in the model");
                }
                else
                {
                    var bytes = File.ReadAllBytes(entry.FullName);
                    if (!bytes.AsSpan().SequenceEqual(f.Content))
                    {
                        int at = 0;
                        while (at < Math.Min(bytes.Length, f.Content.Length) && bytes[at] == f.Content[at]) at++;
                        int end = Math.Min(bytes.Length, f.Content.Length);
                        while (end > at && bytes[end - 1] == f.Content[end - 1]) end--;
                        bool zeros = bytes.AsSpan(at, Math.Max(0, Math.Min(end, bytes.Length) - at)).IndexOfAnyExcept((byte)0) < 0;
                        problems.Add($"{rel}: {bytes.Length} bytes (sha256 {Convert.ToHexString(SHA256.HashData(bytes))[..12]}), the model {f.Content.Length} " +
                            $"({Convert.ToHexString(SHA256.HashData(f.Content))[..12]}); bytes {at} to {end} differ{(zeros ? " (zeros on disk)" : "")}; " +
                            "the operations on it: " + string.Join(" | ", Log.Where(l => l.Contains(rel.Split('/')[^1], StringComparison.Ordinal)).TakeLast(40)));
                    }
                    string xattrs = string.Join(",", Libc.ListXattrs(entry.FullName).Split(',').Where(n => n.StartsWith("user.", StringComparison.Ordinal)));
                    string want = string.Join(",", f.Xattrs.Keys);
                    if (xattrs != want) problems.Add($"{rel}: xattrs [{xattrs}], the model [{want}]");
                    foreach (var (key, value) in f.Xattrs)
                    {
                        string got = Libc.GetXattr(entry.FullName, key);
                        string expected = value.Length <= 64 ? Convert.ToHexString(value) : $"{value.Length} bytes sha256 " + Convert.ToHexString(SHA256.HashData(value));
                        if (got != expected) problems.Add($"{rel}: {key} {got[..Math.Min(40, got.Length)]}, the model {expected[..Math.Min(40, expected.Length)]}");
                    }
                }
            }
            foreach (var missing in Files.Keys.Concat(Symlinks.Keys).Concat(Directories.Where(d => d.Length > 0)).Where(n => !seen.Contains(n)))
                problems.Add($"{missing} is missing");
            return problems.Count == 0 ? null : $"thread {index}, {where}: " + string.Join("; ", problems.Take(10));
        }
    }

    /// <summary>Lists, stats and reads every tree while the threads change them; what it sees may change under it, but no call may fail other than with ENOENT.</summary>
    private sealed class Reader(string root)
    {
        public volatile bool Stop;
        public int Reads;
        public string? Error;

        public void Run()
        {
            var buffer = new byte[1 << 16];
            try
            {
                while (!Stop)
                {
                    foreach (var path in Enumerate(root))
                    {
                        try
                        {
                            using var f = File.OpenRead(path);
                            while (f.Read(buffer) > 0) { }
                            Reads++;
                        }
                        catch (Exception e) when (e is FileNotFoundException or DirectoryNotFoundException) { }
                        catch (UnauthorizedAccessException) { }
                        if (Stop) break;
                    }
                }
            }
            catch (Exception e)
            {
                Error = $"the reader threw: {e}";
            }
        }

        private static IEnumerable<string> Enumerate(string root)
        {
            var pending = new Stack<string>([root]);
            while (pending.Count > 0)
            {
                string dir = pending.Pop();
                string[] entries;
                try
                {
                    entries = System.IO.Directory.GetFileSystemEntries(dir);
                }
                catch (Exception e) when (e is DirectoryNotFoundException or FileNotFoundException)
                {
                    continue;
                }
                foreach (var entry in entries)
                {
                    FileSystemInfo info = new FileInfo(entry);
                    if (!info.Exists && System.IO.Directory.Exists(entry)) { pending.Push(entry); continue; }
                    if (info.Exists && info.LinkTarget is null) yield return entry;
                }
            }
        }
    }

    [Fact]
    public void Threads_changing_their_own_trees_at_once_leave_each_tree_as_its_thread_made_it_and_the_volume_clean()
    {
        int rounds = Setting("XFSWIN_STRESS_ROUNDS", 1);
        int operations = Setting("XFSWIN_STRESS_OPS", 600);
        int firstSeed = Setting("XFSWIN_STRESS_SEED", 500);
        string baseImage = KernelMadeImages.Make(_tmp, "6.13", "base.img");
        var failures = new List<string>();
        for (int round = 0; round < rounds; round++)
        {
            int seed = firstSeed + round;
            string image = Path.Combine(_tmp, "v.img");
            File.Delete(image);
            XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, image);
            var rng = new Random(unchecked(seed * 1_103_515_245 + 12_345));
            var workers = new List<Worker>();
            Reader reader;
            // XFSWIN_STRESS_MOUNT_OPTIONS: more mount options (max_threads=1 serves one request at a time).
            string[] extra = Environment.GetEnvironmentVariable("XFSWIN_STRESS_MOUNT_OPTIONS") is { Length: > 0 } o ? ["-o", o] : [];
            using (var m = new ReadWriteMount(image, extra))
            {
                for (int t = 0; t < Threads; t++)
                {
                    System.IO.Directory.CreateDirectory(m[$"t{t}"]);
                    workers.Add(new Worker(t, rng.Next(), m.MountPoint));
                }
                reader = new Reader(m.MountPoint);
                var readerThread = new Thread(reader.Run) { IsBackground = true };
                readerThread.Start();
                var threads = workers.Select(w => new Thread(() => w.Run(operations)) { IsBackground = true }).ToList();
                threads.ForEach(t => t.Start());
                foreach (var t in threads)
                    Assert.True(t.Join(TimeSpan.FromMinutes(10)), "a thread did not finish within 10 minutes");
                reader.Stop = true;
                Assert.True(readerThread.Join(TimeSpan.FromMinutes(2)), "the reader did not stop");
                m.Unmount();
            }
            var problems = workers.Where(w => w.Error is not null).Select(w => w.Error!).ToList();
            if (reader.Error is not null) problems.Add(reader.Error);
            if (problems.Count == 0)
            {
                problems.AddRange(KernelMadeImages.RepairProblems(image, "6.13"));
                using var k = LoopMount.Mount(image, readOnly: true);
                problems.AddRange(workers.Select(w => w.Verify(Path.Combine(k.MountPoint, w.Dir), "as the kernel shows it")).OfType<string>());
            }
            var done = workers.SelectMany(w => w.Done).GroupBy(p => p.Key).ToDictionary(g => g.Key, g => g.Sum(p => p.Value));
            output.WriteLine($"seed {seed}: {(problems.Count == 0 ? "ok" : "FAIL")}; {Threads} threads x {operations} operations " +
                $"[{string.Join(", ", done.OrderBy(p => p.Key, StringComparer.Ordinal).Select(p => $"{p.Key} {p.Value}"))}], the reader read {reader.Reads} files");
            if (problems.Count > 0) failures.Add($"seed {seed}: " + string.Join("\n", problems));
            // The run did what it is for: every kind of operation, and reads beside the changes.
            if (problems.Count == 0)
            {
                foreach (var kind in new[] { "create", "write", "append", "truncate", "punch", "copy_file_range", "read", "rename", "link", "unlink", "mkdir", "setxattr", "symlink", "fsync" })
                    Assert.True(done.GetValueOrDefault(kind) > 0, $"seed {seed}: no {kind} was made");
                Assert.True(reader.Reads > 0, $"seed {seed}: the reader read nothing while the threads ran");
            }
        }
        Assert.True(failures.Count == 0, string.Join("\n\n", failures));
    }
}

using System.Runtime.InteropServices;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// <c>kill -9</c> of a busy <c>xfswin mount -o rw</c> server, and what durability means through it. Three threads
/// work on their own files through the mount (create, append, rename, rename over, unlink; writes through files opened
/// with O_DSYNC or O_SYNC; fsync and fdatasync), and one of them SIGKILLs the server after a seeded number of its own
/// operations, while the others are in the middle of theirs. Nothing of the check depends on when the kill landed:
/// every file whose fsync, fdatasync, O_DSYNC or O_SYNC write had returned before must be found under its name then
/// with its content then, or under the name one of its later operations (finished or cut short) gave it, holding at
/// least those durable bytes and otherwise a prefix of what the later appends wrote; a file never made durable may be
/// in any of its states or absent. The image is then recovered either by the kernel (mount, which
/// replays our log) or by XfsWin (a new <c>xfswin mount -o rw</c>, whose open replays it, checked through that mount);
/// both images must then pass xfs_repair -n (6.1 and 6.13) after a kernel mount.
/// <para>
/// Kills: 4 (the CI sample, alternating mkfs.xfs 6.1 and 6.13 volumes and the two recoveries) or XFSWIN_KILLS
/// (bench/kill-rw-mount.sh). Seeds are fixed.
/// </para>
/// </summary>
public sealed class KilledServerTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-kill");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static int Kills =>
        int.TryParse(Environment.GetEnvironmentVariable("XFSWIN_KILLS"), out int n) && n > 0 ? n : 4;

    private static int FirstSeed =>
        int.TryParse(Environment.GetEnvironmentVariable("XFSWIN_KILL_SEED"), out int n) ? n : 100;

    /// <summary>How a file is opened for its writes: plain (durable at fsync/fdatasync), O_DSYNC or O_SYNC (durable when the write returns).</summary>
    private enum SyncMode { None, DSync, Sync }

    /// <summary>
    /// A file's name and content after one operation (null path: no name left). Files only grow by appends, so the
    /// content of every later state starts with that of every earlier one.
    /// </summary>
    private sealed record State(string? Path, byte[] Content);

    private sealed class FileTrack(string path, SyncMode mode)
    {
        public string? Path = path;
        public byte[] Content = [];
        public readonly SyncMode Mode = mode;
        public readonly List<State> States = [];
        /// <summary>The first state a crash may leave: the last one a durability call returned for (-1: none).</summary>
        public int Durable = -1;
        public string DurableBy = "";
        public void Changed() => States.Add(new State(Path, Content));
    }

    /// <summary>One thread's work: its own directory and files, drawn from its own seeded generator.</summary>
    private sealed class Worker(int index, int seed, string root, KillSwitch killSwitch, int killAfter)
    {
        private readonly Random _rng = new(seed);
        private int _names;
        public readonly List<FileTrack> Files = [];
        public int Operations, DurableCalls;
        /// <summary>Durability calls that returned, by kind (fsync, fdatasync, DSync, Sync).</summary>
        public readonly Dictionary<string, int> DurableBy = [];
        public string? Error;
        public string Dir => $"w{index}";

        private string Full(string relative) => System.IO.Path.Combine(root, relative);

        /// <summary>Runs until the kill (its own, or the server's death seen as an error) or until it has done <paramref name="limit"/> operations.</summary>
        public void Run(int limit)
        {
            try
            {
                for (; Operations < limit; Operations++)
                {
                    if (killAfter >= 0 && Operations == killAfter)
                    {
                        killSwitch.Kill();
                        return;
                    }
                    if (!Step()) return;
                }
            }
            catch (Exception e)
            {
                Error = $"worker {index} threw: {e}";
            }
        }

        /// <summary>One operation; false when it failed (after the kill: the server is gone; before: an error to report).</summary>
        private bool Step()
        {
            var live = Files.Where(f => f.Path is not null).ToList();
            int op = live.Count < 2 ? 0 : _rng.Next(index == 2 ? 5 : 10);
            // Worker 2 mostly appends big pieces (writeback and checkpoint pressure) and rarely syncs.
            return op switch
            {
                0 => Create(),
                1 or 2 or 3 or 4 => Append(live[_rng.Next(live.Count)], index == 2 ? 65536 : _rng.Next(1, 40000)),
                5 or 6 => Sync(live[_rng.Next(live.Count)], datasync: _rng.Next(2) == 0),
                7 => Rename(live[_rng.Next(live.Count)], live),
                8 => Unlink(live[_rng.Next(live.Count)]),
                _ => Create(),
            };
        }

        private byte[] Bytes(int n)
        {
            var b = new byte[n];
            _rng.NextBytes(b);
            return b;
        }

        private bool Failed(string what, int errno)
        {
            if (!killSwitch.Killed) Error = $"worker {index}: {what} failed with errno {errno} before the kill";
            return false;
        }

        private static int Flags(SyncMode mode) => mode switch
        {
            SyncMode.DSync => Libc.O_DSYNC,
            SyncMode.Sync => Libc.O_SYNC,
            _ => 0,
        };

        private bool Create()
        {
            var mode = (SyncMode)_rng.Next(3);
            var f = new FileTrack($"{Dir}/f{_names++:D4}", mode);
            var data = Bytes(_rng.Next(0, 20000));
            Files.Add(f);
            // The name exists (maybe empty) from the create on, whatever the write does.
            f.Changed();
            int fd = Libc.open(Full(f.Path!), Libc.O_CREAT | Libc.O_EXCL | Libc.O_WRONLY | Flags(mode), 0x1A4);
            if (fd < 0) return Failed($"create {f.Path}", Marshal.GetLastPInvokeError());
            try
            {
                if (data.Length > 0 && !Write(f, fd, data)) return false;
                // O_DSYNC / O_SYNC: the create and the write are durable once the write returned (the create too: its
                // name went into the log the write's sync forced). An empty file is only durable once synced.
                if (data.Length > 0 && mode != SyncMode.None) MarkDurable(f, mode.ToString());
                return true;
            }
            finally
            {
                Libc.close(fd);
            }
        }

        private unsafe bool Write(FileTrack f, int fd, byte[] data)
        {
            long offset = f.Content.Length;
            var content = new byte[offset + data.Length];
            f.Content.CopyTo(content, 0);
            data.CopyTo(content, offset);
            // Recorded first: a write cut short by the kill may or may not have landed.
            f.Content = content;
            f.Changed();
            nint n;
            fixed (byte* p = data)
                n = Libc.pwrite(fd, p, data.Length, offset);
            if (n == data.Length) return true;
            if (n < 0) return Failed($"write to {f.Path}", Marshal.GetLastPInvokeError());
            if (!killSwitch.Killed) Error = $"worker {index}: write to {f.Path} wrote {n} of {data.Length} bytes before the kill";
            return false;
        }

        private void MarkDurable(FileTrack f, string by)
        {
            f.Durable = f.States.Count - 1;
            f.DurableBy = by;
            DurableCalls++;
            DurableBy[by] = DurableBy.GetValueOrDefault(by) + 1;
        }

        private bool Append(FileTrack f, int length)
        {
            int fd = Libc.open(Full(f.Path!), Libc.O_WRONLY | Flags(f.Mode), 0);
            if (fd < 0) return Failed($"open {f.Path}", Marshal.GetLastPInvokeError());
            try
            {
                if (!Write(f, fd, Bytes(length))) return false;
                if (f.Mode != SyncMode.None) MarkDurable(f, f.Mode.ToString());
                return true;
            }
            finally
            {
                Libc.close(fd);
            }
        }

        private bool Sync(FileTrack f, bool datasync)
        {
            int fd = Libc.open(Full(f.Path!), Libc.O_RDONLY, 0);
            if (fd < 0) return Failed($"open {f.Path}", Marshal.GetLastPInvokeError());
            try
            {
                int rc = datasync ? Libc.fdatasync(fd) : Libc.fsync(fd);
                if (rc != 0) return Failed($"{(datasync ? "fdatasync" : "fsync")} {f.Path}", Marshal.GetLastPInvokeError());
                MarkDurable(f, datasync ? "fdatasync" : "fsync");
                return true;
            }
            finally
            {
                Libc.close(fd);
            }
        }

        /// <summary>rename(2) to a new name, or over another live file of this worker (which loses its name).</summary>
        private bool Rename(FileTrack f, List<FileTrack> live)
        {
            var over = _rng.Next(3) == 0 ? live.FirstOrDefault(o => o != f) : null;
            string from = f.Path!, to = over?.Path ?? $"{Dir}/r{_names++:D4}";
            if (over is not null)
            {
                over.Path = null;
                over.Changed();
            }
            f.Path = to;
            f.Changed();
            if (Libc.renameat2(Libc.AT_FDCWD, Full(from), Libc.AT_FDCWD, Full(to), 0) != 0)
                return Failed($"rename {from} {to}", Marshal.GetLastPInvokeError());
            return true;
        }

        private bool Unlink(FileTrack f)
        {
            string path = f.Path!;
            f.Path = null;
            f.Changed();
            if (Libc.unlink(Full(path)) != 0) return Failed($"unlink {path}", Marshal.GetLastPInvokeError());
            return true;
        }
    }

    /// <summary>SIGKILL to the server, once; <see cref="Killed"/> is set before the signal, so an error seen after it is the kill's.</summary>
    private sealed class KillSwitch(int pid)
    {
        private int _killed;
        public bool Killed => Volatile.Read(ref _killed) != 0;

        public void Kill()
        {
            if (Interlocked.Exchange(ref _killed, 1) != 0) return;
            Libc.kill(pid, Libc.SIGKILL);
        }
    }

    /// <summary>What is wrong with the files under <paramref name="root"/> (a kernel or xfswin mount of the recovered image); empty when nothing.</summary>
    private static List<string> Check(string root, IEnumerable<FileTrack> files, out int checkedDurable)
    {
        var problems = new List<string>();
        checkedDurable = 0;
        foreach (var f in files)
        {
            if (f.Durable < 0) continue;
            checkedDurable++;
            var acceptable = f.States.Skip(f.Durable).ToList();
            int durableLength = acceptable[0].Content.Length;
            bool ok = acceptable.Any(s => s.Path is null || Matches(Path.Combine(root, s.Path), s, durableLength));
            if (ok) continue;
            var s0 = acceptable[0];
            string full = Path.Combine(root, s0.Path!);
            string found = File.Exists(full) ? $"{new FileInfo(full).Length} bytes, different content ({Differences(full, acceptable)})" : "absent";
            problems.Add($"{s0.Path} ({s0.Content.Length} bytes, durable by {f.DurableBy}; {acceptable.Count} acceptable states): {found}");
        }
        return problems;
    }

    /// <summary>Where the found file parts from each acceptable state under its name (for the failure message).</summary>
    private static string Differences(string path, List<State> acceptable)
    {
        var actual = File.ReadAllBytes(path);
        var parts = new List<string>();
        foreach (var s in acceptable)
        {
            if (s.Path is null || Path.GetFileName(path) != Path.GetFileName(s.Path)) continue;
            int n = Math.Min(actual.Length, s.Content.Length), at = 0;
            while (at < n && actual[at] == s.Content[at]) at++;
            int zeros = 0;
            while (at + zeros < actual.Length && actual[at + zeros] == 0) zeros++;
            parts.Add($"state of {s.Content.Length}: same up to {at}, then {zeros} zero bytes");
        }
        return string.Join(", ", parts);
    }

    /// <summary>
    /// True when <paramref name="path"/> holds a prefix of <paramref name="state"/>'s content at least
    /// <paramref name="durableLength"/> bytes long. Only the durable bytes are promised: an append after the durability
    /// call (finished or cut short by the kill) may have landed in part, since the kernel sends one write to a FUSE
    /// server as several requests, each applied and logged on its own, and a crash keeps any prefix of them.
    /// </summary>
    private static bool Matches(string path, State state, int durableLength)
    {
        if (!File.Exists(path)) return false;
        var actual = File.ReadAllBytes(path);
        return actual.Length >= durableLength && actual.Length <= state.Content.Length && actual.AsSpan().SequenceEqual(state.Content.AsSpan(0, actual.Length));
    }

    /// <summary>One kill: what is wrong, or null; <paramref name="summary"/> says what was done.</summary>
    private string? KillOnce(string baseImage, string xfsprogs, int seed, bool recoverWithXfswin, ISet<string> killerKinds, out string summary)
    {
        var image = Path.Combine(_tmp, "killed.img");
        File.Delete(image);
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, image);
        // (Spread: System.Random's first draws of nearby seeds are close to each other.)
        var rng = new Random(unchecked(seed * 1_103_515_245 + 12_345));
        const int Limit = 400;
        int killAfter = 5 + rng.Next(60);
        var workers = new List<Worker>();
        var m = new ReadWriteMount(image);
        try
        {
            var killSwitch = new KillSwitch(m.ServerProcessId);
            for (int t = 0; t < 3; t++)
            {
                Directory.CreateDirectory(m[$"w{t}"]);
                workers.Add(new Worker(t, rng.Next(), m.MountPoint, killSwitch, t == 0 ? killAfter : -1));
            }
            var threads = workers.Select(w => new Thread(() => w.Run(Limit)) { IsBackground = true }).ToList();
            threads.ForEach(t => t.Start());
            foreach (var t in threads)
                Assert.True(t.Join(TimeSpan.FromMinutes(5)), "a worker did not finish within 5 minutes of the kill");
            killSwitch.Kill();
        }
        finally
        {
            m.KillServer();
        }
        var files = workers.SelectMany(w => w.Files).ToList();
        // The killing worker's own calls all returned before its kill: which kinds it made depends on the seed alone.
        killerKinds.UnionWith(workers[0].DurableBy.Keys);
        int durableCalls = workers.Sum(w => w.DurableCalls);
        summary = $"seed {seed} ({xfsprogs}): kill after {killAfter} operations of worker 0; operations {string.Join('/', workers.Select(w => w.Operations))}, " +
                  $"{files.Count} files, {durableCalls} durability calls returned; recovered by {(recoverWithXfswin ? "xfswin" : "the kernel")}";
        var problems = workers.Where(w => w.Error is not null).Select(w => w.Error!).ToList();
        if (problems.Count > 0) return string.Join("; ", problems);
        int checkedDurable;
        if (recoverWithXfswin)
        {
            using var again = new ReadWriteMount(image);
            problems.AddRange(Check(again.MountPoint, files, out checkedDurable));
            again.Unmount();
        }
        else
        {
            using var k = LoopMount.Mount(image, readOnly: false);
            problems.AddRange(Check(k.MountPoint, files, out checkedDurable));
        }
        summary += $", {checkedDurable} durable files checked";
        if (recoverWithXfswin)
        {
            // The image XfsWin recovered and closed: the kernel mounts it and finds the same files.
            using var k = LoopMount.Mount(image, readOnly: true);
            problems.AddRange(Check(k.MountPoint, files, out _).Select(p => "after xfswin's recovery, the kernel: " + p));
        }
        problems.AddRange(KernelMadeImages.RepairProblems(image, xfsprogs));
        return problems.Count == 0 ? null : string.Join("; ", problems);
    }

    [Fact]
    public void Killing_a_busy_read_write_server_loses_nothing_fsync_fdatasync_O_DSYNC_or_O_SYNC_made_durable()
    {
        var bases = new Dictionary<string, string>
        {
            ["6.1"] = KernelMadeImages.Make(_tmp, "6.1", "base-6.1.img"),
            ["6.13"] = KernelMadeImages.Make(_tmp, "6.13", "base-6.13.img"),
        };
        var failures = new List<string>();
        var killerKinds = new HashSet<string>();
        int durableTotal = 0;
        for (int i = 0; i < Kills; i++)
        {
            int seed = FirstSeed + i;
            string xfsprogs = i % 2 == 0 ? "6.1" : "6.13";
            bool ours = i / 2 % 2 == 1;
            string? problem = KillOnce(bases[xfsprogs], xfsprogs, seed, ours, killerKinds, out string summary);
            output.WriteLine((problem is null ? "ok   " : "FAIL ") + summary + (problem is null ? "" : ": " + problem));
            if (problem is not null) failures.Add(summary + ": " + problem);
            var durable = System.Text.RegularExpressions.Regex.Match(summary, @"(\d+) durable files checked");
            if (durable.Success) durableTotal += int.Parse(durable.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture);
        }
        output.WriteLine($"total: {Kills} kills, {durableTotal} durable files checked, {failures.Count} failures");
        Assert.True(failures.Count == 0, $"{failures.Count} of {Kills} kills failed:\n" + string.Join('\n', failures));
        // The check must have had something to check: durable files, made so by every kind of call before a kill.
        Assert.True(durableTotal > 0, "no file was durable at any kill");
        Assert.True(killerKinds.SetEquals(["fsync", "fdatasync", "DSync", "Sync"]), "the killing worker's durability calls were only " + string.Join(", ", killerKinds));
    }
}

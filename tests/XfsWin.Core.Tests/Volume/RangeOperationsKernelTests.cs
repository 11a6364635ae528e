using System.Security.Cryptography;
using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Seeded random sequences of the file range operations, each done by the engine on one copy of a kernel-made volume
/// and by the kernel (xfs_io on a loop mount) on the other, in lockstep: writes, truncates, fallocate (allocate,
/// keep-size, punch, zero, collapse and insert range), clones of whole files and ranges (FICLONE, FICLONERANGE),
/// copy_file_range and exchange-range. The kernel's FUSE client refuses collapse, insert and clones before a server
/// sees them, so the differential harness through the mount cannot reach them; here every step's outcome (done, or
/// the error) and the size and contents of the files it touched must be equal; at the end the contents, sizes and
/// which blocks are shared (fiemap), then xfs_repair -n and our own check of the engine's volume.
/// </summary>
public sealed class RangeOperationsKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-rangeops.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly string[] Files = ["a", "b", "c", "d", "e"];

    [Theory]
    [InlineData(1, "6.13", "-i exchange=1")]
    [InlineData(2, "6.1", "")]
    [InlineData(3, "6.13", "-b size=1024 -i exchange=1")]
    [InlineData(4, "6.13", "-m reflink=0")]
    public void Random_range_operations_give_what_the_kernel_gives(int seed, string xfsprogs, string mkfsOptions) =>
        Run(seed, xfsprogs, mkfsOptions, operations: 150);

    /// <summary>
    /// More seeds than CI runs, for a soak: XFSWIN_RANGE_SEEDS="FIRST COUNT" (odd seeds mkfs.xfs 6.13 with exchange-range,
    /// even ones 6.1 defaults; XFSWIN_RANGE_MKFS overrides the options, with 6.13), 300 operations each.
    /// </summary>
    [Theory]
    [MemberData(nameof(SoakSeeds))]
    public void Soak(int seed, string xfsprogs, string mkfsOptions) => Run(seed, xfsprogs, mkfsOptions, operations: 300);

    public static TheoryData<int, string, string> SoakSeeds()
    {
        var seeds = new TheoryData<int, string, string>();
        if (SeedRange.FromEnvironment("XFSWIN_RANGE_SEEDS") is not { } range)
        {
            // The soak's one seed in CI: the test stays a test of something.
            seeds.Add(5, "6.13", "-i exchange=1");
            return seeds;
        }
        string? options = Environment.GetEnvironmentVariable("XFSWIN_RANGE_MKFS");
        foreach (int s in range)
        {
            if (options is not null) seeds.Add(s, "6.13", options);
            else if (s % 2 == 1) seeds.Add(s, "6.13", "-i exchange=1");
            else seeds.Add(s, "6.1", "");
        }
        return seeds;
    }

    private void Run(int seed, string xfsprogs, string mkfsOptions, int operations)
    {
        string ours = Path.Combine(_tmp, "ours.img");
        Shell.RunChecked("truncate", "-s", "512M", ours);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), ours]);
        using (var mount = LoopMount.Mount(ours, readOnly: false))
        {
            var rng = new Random(seed);
            foreach (var name in Files)
            {
                var bytes = new byte[rng.Next(0, 600_000)];
                rng.NextBytes(bytes);
                File.WriteAllBytes(Path.Combine(mount.MountPoint, name), bytes);
            }
        }
        string theirs = Path.Combine(_tmp, "kernel.img");
        Shell.RunChecked("cp", "--sparse=always", ours, theirs);

        var log = new List<string>();
        int blockSize;
        using (var kernel = LoopMount.Mount(theirs, readOnly: false))
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
        {
            blockSize = v.Info.BlockSize;
            var sequence = new Sequence(seed, blockSize, OracleImages.Tool("xfs_io", "6.13"));
            for (int i = 0; i < operations; i++)
            {
                var step = sequence.Next();
                string kernelResult = step.OnKernel(kernel.MountPoint);
                string ourResult = step.OnEngine(v);
                string kernelState = string.Join(" ", step.Touched.Select(f => $"{f}: {KernelState(kernel.MountPoint, f)}"));
                string ourState = string.Join(" ", step.Touched.Select(f => $"{f}: {EngineState(v, f)}"));
                log.Add($"{i}: {step.Description} -> {kernelResult}");
                if (kernelResult != ourResult || kernelState != ourState)
                    Assert.Fail($"seed {seed}, operation {i}: {step.Description}\n  kernel: {kernelResult} | {kernelState}\n  xfswin: {ourResult} | {ourState}\n" +
                        $"the operations:\n{string.Join('\n', log)}");
            }
        }
        output.WriteLine($"seed {seed}: {operations} operations, {log.Count(l => l.EndsWith("-> ok", StringComparison.Ordinal))} done");
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", ours);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}\nthe operations:\n{string.Join('\n', log)}");
        var report = XfsWin.Check.VolumeChecker.Check(ours);
        Assert.True(report.IsClean, "xfswin check: " + string.Join("\n", report.Problems.Take(20)));
        SortedDictionary<string, string> expected, actual;
        using (var mount = LoopMount.Mount(theirs, readOnly: true)) expected = Describe(mount.MountPoint, blockSize);
        using (var mount = LoopMount.Mount(ours, readOnly: true)) actual = Describe(mount.MountPoint, blockSize);
        var problems = expected.Keys.Union(actual.Keys).Where(k => expected.GetValueOrDefault(k) != actual.GetValueOrDefault(k))
            .Select(k => $"{k}:\n kernel {expected.GetValueOrDefault(k)}\n ours   {actual.GetValueOrDefault(k)}").ToList();
        Assert.True(problems.Count == 0, string.Join("\n", problems) + $"\nthe operations:\n{string.Join('\n', log)}");
    }

    private static string KernelState(string root, string name)
    {
        var bytes = File.ReadAllBytes(Path.Combine(root, name));
        return $"{bytes.Length} {Convert.ToHexString(SHA256.HashData(bytes))[..16]}";
    }

    private static string EngineState(XfsVolume v, string name)
    {
        ulong ino = v.ResolvePath("/" + name);
        long size = v.GetAttributes(ino).Size;
        var bytes = new byte[size];
        for (long at = 0; at < size;)
        {
            int n = v.Read(ino, at, bytes.AsSpan((int)at));
            if (n <= 0) break;
            at += n;
        }
        return $"{bytes.Length} {Convert.ToHexString(SHA256.HashData(bytes))[..16]}";
    }

    /// <summary>Contents, size and which blocks fiemap reports shared ('S') or not ('-'), per file.</summary>
    private static SortedDictionary<string, string> Describe(string mountPoint, int blockSize)
    {
        var result = new SortedDictionary<string, string>(StringComparer.Ordinal);
        foreach (var name in Files)
        {
            string path = Path.Combine(mountPoint, name);
            var bytes = File.ReadAllBytes(path);
            int blocks = (bytes.Length + blockSize - 1) / blockSize;
            var map = Enumerable.Repeat('-', blocks).ToArray();
            var fiemap = Shell.RunChecked("xfs_io", "-r", "-c", "fiemap -v", path).StandardOutput;
            foreach (System.Text.RegularExpressions.Match m in System.Text.RegularExpressions.Regex.Matches(fiemap,
                         @"^\s*\d+:\s*\[(\d+)\.\.(\d+)\]:\s*(\S+)\s+\d+\s+0x([0-9a-f]+)\s*$", System.Text.RegularExpressions.RegexOptions.Multiline))
            {
                if (m.Groups[3].Value == "hole" || (Convert.ToInt32(m.Groups[4].Value, 16) & 0x2000) == 0) continue;
                long from = long.Parse(m.Groups[1].Value) * 512 / blockSize, to = (long.Parse(m.Groups[2].Value) + 1) * 512 / blockSize;
                for (long b = from; b < to && b < blocks; b++) map[b] = 'S';
            }
            result[name] = $"{Convert.ToHexString(SHA256.HashData(bytes))} {bytes.Length}\n{new string(map)}";
        }
        return result;
    }

    /// <summary>One operation: what xfs_io is asked on the kernel's mount, what the engine is asked, the files it changes.</summary>
    private sealed record Step(string Description, Func<string, string> OnKernel, Func<XfsVolume, string> OnEngine, string[] Touched);

    private sealed class Sequence(int seed, int blockSize, string xfsIo)
    {
        private readonly Random _random = new(seed * 7919 + 1);

        private T Pick<T>(IReadOnlyList<T> items) => items[_random.Next(items.Count)];

        /// <summary>Block-aligned most of the time (what the shifting and cloning calls need), else any byte.</summary>
        private long Offset() => _random.Next(5) == 0 ? _random.Next(700_000) : _random.Next(700_000 / blockSize) * (long)blockSize;

        private long Length() => _random.Next(5) == 0 ? _random.Next(1, 200_000) : _random.Next(1, 200_000 / blockSize) * (long)blockSize;

        public Step Next()
        {
            string f = Pick(Files), g = Pick(Files);
            long off = Offset(), off2 = Offset(), len = Length();
            byte fill = (byte)_random.Next(1, 256);
            int kind = _random.Next(13);
            return kind switch
            {
                0 or 1 => Make($"pwrite -S 0x{fill:x2} {off} {len}", f, v => v.Write(Ino(v, f), off, Filled(fill, len))),
                2 => Make($"truncate {off}", f, v => v.SetAttributes(Ino(v, f), new AttributeChanges { Size = off })),
                3 => Make($"fpunch {off} {len}", f, v => v.Allocate(Ino(v, f), off, len, FallocateMode.PunchHole)),
                4 => Make($"fzero {off} {len}", f, v => v.Allocate(Ino(v, f), off, len, FallocateMode.ZeroRange)),
                5 => _random.Next(2) == 0
                    ? Make($"falloc {off} {len}", f, v => v.Allocate(Ino(v, f), off, len, FallocateMode.Allocate))
                    : Make($"falloc -k {off} {len}", f, v => v.Allocate(Ino(v, f), off, len, FallocateMode.KeepSize)),
                6 => Make($"fcollapse {off} {len}", f, v => v.Allocate(Ino(v, f), off, len, FallocateMode.CollapseRange)),
                7 => Make($"finsert {off} {len}", f, v => v.Allocate(Ino(v, f), off, len, FallocateMode.InsertRange)),
                8 => Make($"reflink {{0}}/{g}", f, v => v.CloneRange(Ino(v, g), 0, Ino(v, f), 0, 0), source: g),
                9 or 10 => Make($"reflink {{0}}/{g} {off2} {off} {len}", f, v => v.CloneRange(Ino(v, g), off2, Ino(v, f), off, len), source: g),
                // xfs_io calls copy_file_range again after a short count (a remap stops at the last whole block).
                11 => Make($"copy_range -s {off2} -d {off} -l {len} {{0}}/{g}", f, v =>
                {
                    for (long done = 0, n; done < len; done += n)
                        if ((n = v.CopyFileRange(Ino(v, g), off2 + done, Ino(v, f), off + done, len - done)) == 0) break;
                }, source: g),
                _ => Make($"exchangerange -s {off2} -d {off} -l {len} {{0}}/{g}", f,
                    v => v.ExchangeRange(Ino(v, g), off2, Ino(v, f), off, len, ExchangeRangeFlags.None), source: g, changesSource: true),
            };
        }

        private static ulong Ino(XfsVolume v, string name) => v.ResolvePath("/" + name);

        private static byte[] Filled(byte b, long length) => Enumerable.Repeat(b, (int)length).ToArray();

        /// <param name="command">The xfs_io command on the open file <paramref name="file"/>; {0} stands for the mount point.</param>
        private Step Make(string command, string file, Action<XfsVolume> engine, string? source = null, bool changesSource = false)
        {
            string description = $"{file}: {string.Format(command, "")}";
            string OnKernel(string root)
            {
                var run = Shell.Run(xfsIo, "-c", string.Format(command, root), Path.Combine(root, file));
                string text = (run.StandardOutput + run.StandardError).Trim();
                // xfs_io reports a failed call as "<command>: <strerror>" and exits 0 (1 for a few commands).
                var error = System.Text.RegularExpressions.Regex.Match(text, @"^\S+: (.+)$", System.Text.RegularExpressions.RegexOptions.Multiline);
                return error.Success && !text.StartsWith("wrote", StringComparison.Ordinal) && !text.Contains("bytes", StringComparison.Ordinal) || run.ExitCode != 0
                    ? "error " + (error.Success ? error.Groups[1].Value : text)
                    : "ok";
            }
            string OnEngine(XfsVolume v)
            {
                try
                {
                    engine(v);
                    return "ok";
                }
                catch (XfsException e)
                {
                    return "error " + Strerror(e.Errno) + (Strerror(e.Errno).Length == 0 ? $"{e.Error}: {e.Message}" : "");
                }
            }
            var touched = changesSource && source is not null && source != file ? new[] { file, source } : [file];
            return new Step(description, OnKernel, OnEngine, touched);
        }

        /// <summary>The strerror text xfs_io prints for the errno an engine error stands for.</summary>
        private static string Strerror(int errno) => errno switch
        {
            1 => "Operation not permitted",
            5 => "Input/output error",
            16 => "Device or resource busy",
            18 => "Invalid cross-device link",
            21 => "Is a directory",
            22 => "Invalid argument",
            27 => "File too large",
            28 => "No space left on device",
            95 => "Operation not supported",
            117 => "Structure needs cleaning",
            _ => "",
        };
    }
}

using System.Security.Cryptography;
using System.Text;
using System.Text.RegularExpressions;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Check;
using XfsWin.Device;
using XfsWin.Journal;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Reflink (FICLONE, FICLONERANGE) and copy-on-write through the engine, judged by the kernel: the same operations
/// are done by the kernel (xfs_io reflink, pwrite, truncate, fpunch, fzero) on a copy of the volume; then the file
/// contents, and which blocks of each file fiemap reports shared, are equal; xfs_repair -n (which checks reference
/// counts against the reverse mappings and the files' mappings) and our own check find nothing; crash images cut in
/// the middle of the remap chains are recovered by the kernel and by us alike.
/// </summary>
public sealed class ReflinkKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-reflink.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static readonly string[] Files = ["a", "b", "c", "d", "e"];

    /// <summary>A volume where the kernel wrote a (1 MiB + 1000 bytes), b (512 KiB), c (300,000 bytes) and e (200 KiB) of seeded random bytes.</summary>
    private string Make(string xfsprogs, string mkfsOptions)
    {
        string image = Path.Combine(_tmp, $"v-{xfsprogs}-{Guid.NewGuid():N}.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", xfsprogs), ["-f", "-q", .. mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries), image]);
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            var rng = new Random(11);
            foreach (var (name, size) in new[] { ("a", (1 << 20) + 1000), ("b", 512 << 10), ("c", 300_000), ("e", 200 << 10) })
            {
                var bytes = new byte[size];
                rng.NextBytes(bytes);
                File.WriteAllBytes(Path.Combine(mount.MountPoint, name), bytes);
            }
        }
        return image;
    }

    /// <summary>One operation, as the engine does it and as xfs_io asks the kernel for it.</summary>
    private sealed record Op(string Kernel, Action<XfsVolume> Engine);

    private static ulong Ino(XfsVolume v, string name) => v.ResolvePath("/" + name);

    private static byte[] Pattern(byte b, int length) => Enumerable.Repeat(b, length).ToArray();

    /// <summary>
    /// Clones whole and ranges (into a new file, over another file's blocks, to the source's unaligned EOF, growing the
    /// destination), then writes, truncates, punches and zeroes over shared blocks, in source and destinations.
    /// </summary>
    private static List<Op> Workload() =>
    [
        new("-f -c 'reflink {0}/a' {0}/d", v =>
        {
            var d = v.CreateNode(v.RootInode, "d"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal((1 << 20) + 1000, v.CloneRange(Ino(v, "a"), 0, d, 0, 0));
        }),
        new("-c 'reflink {0}/a 4096 524288 65536' {0}/a", v => v.CloneRange(Ino(v, "a"), 4096, Ino(v, "a"), 524288, 65536)),
        new("-c 'reflink {0}/a 65536 131072 262144' {0}/b", v => v.CloneRange(Ino(v, "a"), 65536, Ino(v, "b"), 131072, 262144)),
        new("-c 'pwrite -S 0x5a 5000 3000' {0}/d", v => v.Write(Ino(v, "d"), 5000, Pattern(0x5a, 3000))),
        new("-c 'truncate 300000' {0}/d", v => v.SetAttributes(Ino(v, "d"), new AttributeChanges { Size = 300000 })),
        new("-c 'fpunch 8192 8192' {0}/a", v => v.Allocate(Ino(v, "a"), 8192, 8192, FallocateMode.PunchHole)),
        new("-c 'fpunch 20000 10000' {0}/a", v => v.Allocate(Ino(v, "a"), 20000, 10000, FallocateMode.PunchHole)),
        new("-c 'pwrite -S 0x33 140000 10000' {0}/b", v => v.Write(Ino(v, "b"), 140000, Pattern(0x33, 10000))),
        new("-c 'reflink {0}/c 0 524288 0' {0}/b", v => Assert.Equal(300000, v.CloneRange(Ino(v, "c"), 0, Ino(v, "b"), 524288, 0))),
        new("-c 'fzero 100000 50000' {0}/d", v => v.Allocate(Ino(v, "d"), 100000, 50000, FallocateMode.ZeroRange)),
        new("-c 'reflink {0}/a 524288 0 131072' {0}/e", v => v.CloneRange(Ino(v, "a"), 524288, Ino(v, "e"), 0, 131072)),
        new("-c 'pwrite -S 0x11 600000 100' {0}/a", v => v.Write(Ino(v, "a"), 600000, Pattern(0x11, 100))),
        new("-c 'truncate 1000' {0}/c", v => v.SetAttributes(Ino(v, "c"), new AttributeChanges { Size = 1000 })),
        new("-c 'pwrite -S 0x77 520000 20000' {0}/b", v => v.Write(Ino(v, "b"), 520000, Pattern(0x77, 20000))),
    ];

    /// <summary>Per file: its SHA-256 and size, and, per block within EOF, whether fiemap reports it shared (S), mapped (m) or a hole (-).</summary>
    private static SortedDictionary<string, string> Describe(string mountPoint, int blockSize)
    {
        var result = new SortedDictionary<string, string>(StringComparer.Ordinal);
        foreach (var name in Files)
        {
            string path = Path.Combine(mountPoint, name);
            if (!File.Exists(path)) continue;
            var bytes = File.ReadAllBytes(path);
            int blocks = (bytes.Length + blockSize - 1) / blockSize;
            var map = Enumerable.Repeat('-', blocks).ToArray();
            var fiemap = Shell.RunChecked("xfs_io", "-r", "-c", "fiemap -v", path).StandardOutput;
            foreach (Match m in Regex.Matches(fiemap, @"^\s*\d+:\s*\[(\d+)\.\.(\d+)\]:\s*(\S+)\s+\d+\s+0x([0-9a-f]+)\s*$", RegexOptions.Multiline))
            {
                if (m.Groups[3].Value == "hole") continue;
                long from = long.Parse(m.Groups[1].Value) * 512 / blockSize, to = (long.Parse(m.Groups[2].Value) + 1) * 512 / blockSize;
                bool shared = (Convert.ToInt32(m.Groups[4].Value, 16) & 0x2000) != 0;
                for (long b = from; b < to && b < blocks; b++) map[b] = shared ? 'S' : 'm';
            }
            result[name] = $"{Convert.ToHexString(SHA256.HashData(bytes))} {bytes.Length}\n{new string(map)}";
        }
        return result;
    }

    private void AssertClean(string image)
    {
        foreach (var version in new[] { "6.1", "6.13" })
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            Assert.True(repair.ExitCode == 0, $"xfs_repair -n {version} found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
        var report = VolumeChecker.Check(image);
        Assert.True(report.IsClean, "xfswin check: " + string.Join("\n", report.Problems.Take(20)));
    }

    private static void AssertSame(SortedDictionary<string, string> kernel, SortedDictionary<string, string> ours)
    {
        var problems = kernel.Keys.Union(ours.Keys).Where(k => kernel.GetValueOrDefault(k) != ours.GetValueOrDefault(k))
            .Select(k => $"{k}:\n kernel {kernel.GetValueOrDefault(k)}\n ours   {ours.GetValueOrDefault(k)}").ToList();
        Assert.True(problems.Count == 0, string.Join("\n", problems));
    }

    private void RunKernel(string image, IEnumerable<Op> ops)
    {
        using var mount = LoopMount.Mount(image, readOnly: false);
        foreach (var op in ops)
        {
            string command = "xfs_io " + string.Format(op.Kernel, mount.MountPoint);
            var run = Shell.RunChecked("sh", "-c", command);
            Assert.True(run.StandardError.Length == 0 && !run.StandardOutput.Contains(':'), $"{command}: {run.StandardOutput}{run.StandardError}");
        }
    }

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    [InlineData("6.13", "-b size=1024")]
    public void Clones_and_copy_on_write_give_what_the_kernel_gives(string xfsprogs, string mkfsOptions)
    {
        string ours = Make(xfsprogs, mkfsOptions);
        string theirs = ours + ".kernel";
        Shell.RunChecked("cp", "--sparse=always", ours, theirs);
        int blockSize;
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
        {
            blockSize = v.Info.BlockSize;
            foreach (var op in Workload()) op.Engine(v);
        }
        RunKernel(theirs, Workload());
        AssertClean(ours);
        SortedDictionary<string, string> expected, actual;
        using (var mount = LoopMount.Mount(theirs, readOnly: true)) expected = Describe(mount.MountPoint, blockSize);
        using (var mount = LoopMount.Mount(ours, readOnly: true)) actual = Describe(mount.MountPoint, blockSize);
        output.WriteLine(string.Join("\n", actual.Select(kv => $"{kv.Key}: {kv.Value}")));
        AssertSame(expected, actual);
        Assert.Contains('S', actual["d"]);
        // Removing every file leaves no sharing and nothing leaked.
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
            foreach (var name in Files) v.Unlink(v.RootInode, Encoding.UTF8.GetBytes(name));
        AssertClean(ours);
    }

    /// <summary>Collapse and insert ranges, in plain files and in reflinked ones (shared extents move too), then a write over moved shared blocks.</summary>
    private static List<Op> ShiftWorkload(bool reflink)
    {
        var ops = new List<Op>
        {
            new("-c 'fcollapse 65536 131072' {0}/a", v => v.Allocate(Ino(v, "a"), 65536, 131072, FallocateMode.CollapseRange)),
            new("-c 'finsert 4096 8192' {0}/b", v => v.Allocate(Ino(v, "b"), 4096, 8192, FallocateMode.InsertRange)),
            new("-c 'fcollapse 0 4096' {0}/c", v => v.Allocate(Ino(v, "c"), 0, 4096, FallocateMode.CollapseRange)),
            new("-c 'finsert 102400 40960' {0}/e", v => v.Allocate(Ino(v, "e"), 102400, 40960, FallocateMode.InsertRange)),
            new("-c 'fpunch 16384 8192' {0}/e", v => v.Allocate(Ino(v, "e"), 16384, 8192, FallocateMode.PunchHole)),
            new("-c 'fcollapse 8192 12288' {0}/e", v => v.Allocate(Ino(v, "e"), 8192, 12288, FallocateMode.CollapseRange)),
        };
        if (reflink)
            ops.AddRange(
            [
                new("-f -c 'reflink {0}/a' {0}/d", v => v.CloneRange(Ino(v, "a"), 0, v.CreateNode(v.RootInode, "d"u8, 0x81A4, 0, 0).Inode, 0, 0)),
                new("-c 'fcollapse 0 4096' {0}/d", v => v.Allocate(Ino(v, "d"), 0, 4096, FallocateMode.CollapseRange)),
                new("-c 'finsert 8192 4096' {0}/d", v => v.Allocate(Ino(v, "d"), 8192, 4096, FallocateMode.InsertRange)),
                new("-c 'finsert 4096 12288' {0}/a", v => v.Allocate(Ino(v, "a"), 4096, 12288, FallocateMode.InsertRange)),
                new("-c 'pwrite -S 0x44 0 20000' {0}/d", v => v.Write(Ino(v, "d"), 0, Pattern(0x44, 20000))),
            ]);
        return ops;
    }

    [Theory]
    [InlineData("6.1", "")]
    [InlineData("6.13", "")]
    [InlineData("6.13", "-m reflink=0")]
    public void Collapse_and_insert_give_what_the_kernel_gives(string xfsprogs, string mkfsOptions)
    {
        string ours = Make(xfsprogs, mkfsOptions);
        string theirs = ours + ".kernel";
        Shell.RunChecked("cp", "--sparse=always", ours, theirs);
        bool reflink = !mkfsOptions.Contains("reflink=0", StringComparison.Ordinal);
        int blockSize;
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
        {
            blockSize = v.Info.BlockSize;
            foreach (var op in ShiftWorkload(reflink)) op.Engine(v);
            // The kernel's EINVAL cases (checked against xfs_io below).
            ulong c = Ino(v, "c");
            long size = v.GetAttributes(c).Size;
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.Allocate(c, 100, 4096, FallocateMode.CollapseRange)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.Allocate(c, 0, size / 4096 * 4096 + 4096, FallocateMode.CollapseRange)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.Allocate(c, size / 4096 * 4096 + 4096, 4096, FallocateMode.InsertRange)).Error);
            Assert.Equal(size, v.GetAttributes(c).Size);
        }
        RunKernel(theirs, ShiftWorkload(reflink));
        using (var mount = LoopMount.Mount(theirs, readOnly: false))
        {
            string c = Path.Combine(mount.MountPoint, "c");
            long size = new FileInfo(c).Length;
            foreach (var command in new[] { "fcollapse 100 4096", $"fcollapse 0 {size / 4096 * 4096 + 4096}", $"finsert {size / 4096 * 4096 + 4096} 4096" })
            {
                var run = Shell.Run("xfs_io", "-c", command, c);
                Assert.Contains("Invalid argument", run.StandardOutput + run.StandardError);
            }
        }
        AssertClean(ours);
        SortedDictionary<string, string> expected, actual;
        using (var mount = LoopMount.Mount(theirs, readOnly: true)) expected = Describe(mount.MountPoint, blockSize);
        using (var mount = LoopMount.Mount(ours, readOnly: true)) actual = Describe(mount.MountPoint, blockSize);
        output.WriteLine(string.Join("\n", actual.Select(kv => $"{kv.Key}: {kv.Value}")));
        AssertSame(expected, actual);
    }

    /// <summary>
    /// copy_file_range tries a remap first and returns what it remapped (REMAP_FILE_CAN_SHORTEN): a source ending in a
    /// partial block, copied to the start of a longer file, is remapped up to its last whole block only
    /// (generic_remap_check_len) and the call returns that count; the caller copies the rest with a second call.
    /// </summary>
    [Fact]
    public void Copy_file_range_of_a_partial_last_block_into_a_longer_file_stops_at_the_last_whole_block()
    {
        string image = Make("6.13", "");
        string kernelImage = Path.Combine(_tmp, "kernel.img");
        File.Copy(image, kernelImage);
        long kernelCount;
        using (var mount = LoopMount.Mount(kernelImage, readOnly: false))
        {
            const string Script = """
                import os, sys
                src = os.open(sys.argv[1], os.O_RDONLY); dst = os.open(sys.argv[2], os.O_WRONLY)
                print(os.copy_file_range(src, dst, 1 << 20, 0, 0))
                """;
            kernelCount = long.Parse(Shell.RunChecked("python3", "-c", Script, Path.Combine(mount.MountPoint, "c"), Path.Combine(mount.MountPoint, "a")).StandardOutput.Trim());
        }
        long ourCount;
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
            ourCount = v.CopyFileRange(v.ResolvePath("/c"), 0, v.ResolvePath("/a"), 0, 1 << 20);
        // c has 300,000 bytes: 73 whole blocks and 992 bytes.
        Assert.Equal(73 * 4096, kernelCount);
        Assert.Equal(kernelCount, ourCount);
        using var k = LoopMount.Mount(kernelImage, readOnly: true);
        using var o = LoopMount.Mount(image, readOnly: true);
        Assert.Equal(SHA256.HashData(File.ReadAllBytes(Path.Combine(k.MountPoint, "a"))), SHA256.HashData(File.ReadAllBytes(Path.Combine(o.MountPoint, "a"))));
    }

    [Fact]
    public void Clone_checks_answer_as_the_kernel_does()
    {
        string image = Make("6.13", "");
        string theirs = image + ".kernel";
        Shell.RunChecked("cp", "--sparse=always", image, theirs);
        using (var mount = LoopMount.Mount(theirs, readOnly: false))
        {
            string Kernel(string command)
            {
                var run = Shell.Run("sh", "-c", "xfs_io " + string.Format(command, mount.MountPoint));
                return run.StandardError + run.StandardOutput;
            }
            Directory.CreateDirectory(Path.Combine(mount.MountPoint, "dir"));
            Assert.Contains("Invalid argument", Kernel("-c 'reflink {0}/a 100 0 4096' {0}/b"));      // unaligned offset
            Assert.Contains("Invalid argument", Kernel("-c 'reflink {0}/a 0 0 5000' {0}/b"));        // unaligned length inside EOF
            Assert.Contains("Invalid argument", Kernel("-c 'reflink {0}/a 0 4096 65536' {0}/a"));    // overlap in one file
            Assert.Contains("Invalid argument", Kernel("-c 'reflink {0}/c 0 0 1048576' {0}/b"));     // past the source's EOF
            Assert.Contains("Invalid argument", Kernel("-c 'reflink {0}/c 303104 0 4096' {0}/b"));   // starting past EOF
            Assert.Contains("Is a directory", Kernel("-c 'reflink {0}/dir' {0}/b"));
            Assert.Contains("Invalid argument", Kernel("-c 'reflink {0}/c 294912 0 0' {0}/b"));      // c's partial last block inside b
        }
        using var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        ulong a = Ino(v, "a"), b = Ino(v, "b"), c = Ino(v, "c");
        var dir = v.MakeDirectory(v.RootInode, "dir"u8, 0x1ED, 0, 0).Inode;
        XfsError Error(Action act) => Assert.Throws<XfsException>(act).Error;
        Assert.Equal(XfsError.InvalidArgument, Error(() => v.CloneRange(a, 100, b, 0, 4096)));
        Assert.Equal(XfsError.InvalidArgument, Error(() => v.CloneRange(a, 0, b, 0, 5000)));
        Assert.Equal(XfsError.InvalidArgument, Error(() => v.CloneRange(a, 0, a, 4096, 65536)));
        Assert.Equal(XfsError.InvalidArgument, Error(() => v.CloneRange(c, 0, b, 0, 1 << 20)));
        Assert.Equal(XfsError.InvalidArgument, Error(() => v.CloneRange(c, 303104, b, 0, 4096)));
        Assert.Equal(XfsError.IsADirectory, Error(() => v.CloneRange(dir, 0, b, 0, 0)));
        Assert.Equal(XfsError.InvalidArgument, Error(() => v.CloneRange(c, 294912, b, 0, 0)));
        // Nothing was shared by the refused clones.
        Assert.Equal(0UL, v.GetAttributes(b).Flags2 & XfsWin.Format.DinodeView.Flag2Reflink);
    }

    [Fact]
    public void A_volume_without_reflink_refuses_clones()
    {
        string image = Make("6.13", "-m reflink=0");
        using var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        Assert.Equal(XfsError.Unsupported, Assert.Throws<XfsException>(() => v.CloneRange(Ino(v, "a"), 0, Ino(v, "b"), 0, 0)).Error);
    }

    /// <summary>Per file block of <paramref name="name"/>: the disk address fiemap reports (in 512-byte units), -1 for a hole.</summary>
    private static long[] DiskAddresses(string mountPoint, string name, int blockSize)
    {
        string path = Path.Combine(mountPoint, name);
        var blocks = new long[(new FileInfo(path).Length + blockSize - 1) / blockSize];
        Array.Fill(blocks, -1);
        var fiemap = Shell.RunChecked("xfs_io", "-r", "-c", "fiemap -v", path).StandardOutput;
        foreach (Match m in Regex.Matches(fiemap, @"^\s*\d+:\s*\[(\d+)\.\.(\d+)\]:\s*(\d+)\.\.\d+\s", RegexOptions.Multiline))
        {
            long from = long.Parse(m.Groups[1].Value) * 512 / blockSize, to = (long.Parse(m.Groups[2].Value) + 1) * 512 / blockSize;
            long disk = long.Parse(m.Groups[3].Value);
            for (long b = from; b < to && b < blocks.Length; b++) blocks[b] = disk + (b - from) * (blockSize / 512);
        }
        return blocks;
    }

    /// <summary>
    /// The copy-on-write extent size hint, as the kernel applies it: the first write to shared blocks stages the whole
    /// hint-aligned range (16 blocks for a file with a 64 KiB cowextsize, the default 32 for one without), the writes that
    /// follow in that range are remapped into the same staging extent, so their blocks lie at the distance their file
    /// offsets lie, in the kernel's volume and in ours; what no write used is freed at a writable close and at unmount.
    /// </summary>
    [Fact]
    public void Copy_on_write_stages_hint_sized_extents_as_the_kernel_does()
    {
        string ours = Make("6.13", "");
        using (var mount = LoopMount.Mount(ours, readOnly: false))
        {
            string m = mount.MountPoint;
            Shell.RunChecked("sh", "-c", $"cp --reflink=always {m}/a {m}/d && cp --reflink=always {m}/a {m}/e && xfs_io -c 'cowextsize 65536' {m}/d");
        }
        string theirs = ours + ".kernel";
        Shell.RunChecked("cp", "--sparse=always", ours, theirs);
        // (file, file block) of each 4 KiB write: d's blocks 3 and 9 share one 16-block hint, e's 5 and 30 one 32-block one, e's 40 the next.
        var writes = new (string File, int Block, byte Fill)[] { ("d", 3, 0x21), ("d", 9, 0x22), ("e", 5, 0x23), ("e", 30, 0x24), ("e", 40, 0x25) };
        using (var mount = LoopMount.Mount(theirs, readOnly: false))
            foreach (var (file, block, fill) in writes)
                Shell.RunChecked("xfs_io", "-d", "-c", $"pwrite -S 0x{fill:x2} {block * 4096} 4096", Path.Combine(mount.MountPoint, file));
        ulong before, staged, closedD;
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions { Writable = true }))
        {
            Assert.Equal(4096, v.Info.BlockSize);
            before = v.GetStats().FreeBlocks;
            foreach (var (file, block, fill) in writes) v.Write(Ino(v, file), block * 4096L, Pattern(fill, 4096));
            staged = v.GetStats().FreeBlocks;
            v.CloseFile(Ino(v, "d"), writable: true);
            closedD = v.GetStats().FreeBlocks;
        }
        ulong after;
        using (var v = XfsVolume.Open(ours, new VolumeOpenOptions()))
            after = v.GetStats().FreeBlocks;
        output.WriteLine($"free blocks: {before} before, {staged} with staging, {closedD} after d's close, {after} after unmount");
        // Staged: d's 16 blocks and e's 2 × 32; at d's close its 14 unused ones go; at unmount e's 61.
        Assert.Equal(16UL + 64, before - staged);
        Assert.Equal(14UL, closedD - staged);
        Assert.Equal(5UL, before - after);
        AssertClean(ours);
        foreach (var image in new[] { theirs, ours })
        {
            using var mount = LoopMount.Mount(image, readOnly: true);
            var d = DiskAddresses(mount.MountPoint, "d", 4096);
            var e = DiskAddresses(mount.MountPoint, "e", 4096);
            var a = DiskAddresses(mount.MountPoint, "a", 4096);
            string who = image == ours ? "ours" : "kernel";
            output.WriteLine($"{who}: d[3] {d[3]} d[9] {d[9]}, e[5] {e[5]} e[30] {e[30]} e[40] {e[40]}");
            Assert.True(d[9] - d[3] == 6 * 8, $"{who}: d's blocks 3 and 9 at {d[3]} and {d[9]}, not in one staging extent");
            Assert.True(e[30] - e[5] == 25 * 8, $"{who}: e's blocks 5 and 30 at {e[5]} and {e[30]}, not in one staging extent");
            foreach (var (file, block, _) in writes)
                Assert.NotEqual(a[block], (file == "d" ? d : e)[block]);
            Assert.Equal(a[4], d[4]);
        }
        var expected = new SortedDictionary<string, string>();
        var actual = new SortedDictionary<string, string>();
        using (var mount = LoopMount.Mount(theirs, readOnly: true))
            foreach (var f in new[] { "a", "d", "e" }) expected[f] = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(Path.Combine(mount.MountPoint, f))));
        using (var mount = LoopMount.Mount(ours, readOnly: true))
            foreach (var f in new[] { "a", "d", "e" }) actual[f] = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(Path.Combine(mount.MountPoint, f))));
        AssertSame(expected, actual);
    }

    /// <summary>
    /// On a volume with fewer usable blocks than the hint-aligned staging takes: the write stages only the
    /// block it needs, as before the hint, and goes ahead; the kernel reads what was written and repair finds nothing.
    /// </summary>
    [Fact]
    public void Copy_on_write_on_a_nearly_full_volume_stages_only_what_the_write_needs()
    {
        string image = Make("6.13", "");
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            var d = v.CreateNode(v.RootInode, "d"u8, 0x81A4, 0, 0).Inode;
            v.CloneRange(Ino(v, "a"), 0, d, 0, 0);
            // Fill every block ordinary allocations may use (fallocate in shrinking pieces, then single-block writes,
            // which need the least room), then free 10 single blocks apart from each other: fewer usable blocks than
            // the 21 a staging extent reaching file block 20 from its 32-block hint's start needs.
            var filler = v.CreateNode(v.RootInode, "filler"u8, 0x81A4, 0, 0).Inode;
            long at = 0;
            foreach (long chunk in new[] { 64L << 20, 1 << 20, 4096 })
                while (true)
                {
                    try { v.Allocate(filler, at, chunk, FallocateMode.Allocate); }
                    catch (XfsException e) when (e.Error == XfsError.NoSpace) { break; }
                    at += chunk;
                }
            while (true)
            {
                try { v.Write(filler, at, Pattern(0x11, 4096)); }
                catch (XfsException e) when (e.Error == XfsError.NoSpace) { break; }
                at += 4096;
            }
            for (int i = 0; i < 10; i++) v.Allocate(filler, 4096L * 2 * i, 4096, FallocateMode.PunchHole);
            ulong free = v.GetStats().FreeBlocks;
            Assert.Equal(4096, v.Write(d, 20 * 4096L, Pattern(0x3c, 4096)));
            // One block staged and mapped in, none left staged: a 32-block staging extent would have taken 32 (statfs
            // also counts the blocks only the per-AG reservations may use, so it does not read as nearly full).
            output.WriteLine($"filler {at} bytes, {free} blocks free before the write, {v.GetStats().FreeBlocks} after");
            Assert.Equal(free - 1, v.GetStats().FreeBlocks);
            var back = new byte[4096];
            v.Read(d, 20 * 4096L, back);
            Assert.Equal(Pattern(0x3c, 4096), back);
        }
        AssertClean(image);
        using var mount = LoopMount.Mount(image, readOnly: true);
        var a = File.ReadAllBytes(Path.Combine(mount.MountPoint, "a"));
        var dBytes = File.ReadAllBytes(Path.Combine(mount.MountPoint, "d"));
        Assert.Equal(Pattern(0x3c, 4096), dBytes.AsSpan(20 * 4096, 4096).ToArray());
        Assert.True(a.AsSpan(0, 20 * 4096).SequenceEqual(dBytes.AsSpan(0, 20 * 4096)));
        Assert.True(a.AsSpan(21 * 4096).SequenceEqual(dBytes.AsSpan(21 * 4096)));
    }

    [Fact]
    public void A_crash_during_copy_on_write_leaves_staging_extents_that_the_kernel_and_we_remove()
    {
        string image = Make("6.13", "");
        string baseImage = image + ".base";
        Shell.RunChecked("cp", "--sparse=always", image, baseImage);
        var device = new RecordingBlockDevice(FileBlockDevice.Open(image, writable: true));
        int start, end;
        using (var v = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 1 }, ownsDevice: true))
        {
            Workload()[0].Engine(v); // d shares all of a's blocks
            v.Sync();
            start = device.EventCount;
            v.Write(Ino(v, "d"), 5000, Pattern(0x5a, 3000)); // copy-on-write of two blocks
            end = device.EventCount;
        }
        var events = device.Snapshot();
        var flushes = Enumerable.Range(start, end - start).Where(i => events[i].IsFlush).ToList();
        var problems = new List<string>();
        int withStaging = 0;
        foreach (int flush in flushes)
        {
            string crash = Path.Combine(_tmp, $"cow{flush}.img");
            CrashImage.Build(baseImage, events, CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0)), crash);
            string counted = crash + ".count";
            Shell.RunChecked("cp", "--sparse=always", crash, counted);
            using (var data = FileBlockDevice.Open(counted, writable: true))
                withStaging += InPlaceRecovery.Run(XfsWin.Metadata.WriteGate.Admit(data, null, XfsWin.Metadata.WritePurpose.LogRecovery)).CowStagingExtentsRemoved > 0 ? 1 : 0;
            if (Journal.IntentChainTests.RecoverBothWays(crash, $"point {flush + 1}") is { } problem) problems.Add(problem);
            foreach (var f in Directory.GetFiles(_tmp, Path.GetFileName(crash) + "*")) File.Delete(f);
        }
        output.WriteLine($"{flushes.Count} crash points in the copy-on-write, {withStaging} with staging extents left");
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
        Assert.True(withStaging > 0, $"none of {flushes.Count} crash points left a staging extent");
    }

    [Fact]
    public void Crashes_in_the_middle_of_clone_and_copy_on_write_chains_are_finished_by_the_kernel_and_by_us()
    {
        string image = Make("6.13", "");
        string baseImage = image + ".base";
        Shell.RunChecked("cp", "--sparse=always", image, baseImage);
        var device = new RecordingBlockDevice(FileBlockDevice.Open(image, writable: true));
        int start;
        using (var v = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 1 }, ownsDevice: true))
        {
            start = device.EventCount;
            foreach (var op in Workload().Take(8)) op.Engine(v);
        }
        AssertClean(image);
        var events = device.Snapshot();
        var flushes = Enumerable.Range(start, events.Count - start).Where(i => events[i].IsFlush).ToList();
        var kinds = new HashSet<string>();
        var problems = new List<string>();
        const int Points = 8;
        for (int k = 1; k <= Points; k++)
        {
            int flush = flushes[(int)((long)k * (flushes.Count - 1) / (Points + 1))];
            string crash = Path.Combine(_tmp, $"crash{flush}.img");
            CrashImage.Build(baseImage, events, CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0)), crash);
            using (var data = FileBlockDevice.Open(crash, writable: false))
                kinds.UnionWith(LogRecovery.Recover(data, null, Journal.DirtyLogScenarios.ReadSuperblock(data), LogReplayMode.Memory).UnfinishedIntents.Keys);
            if (Journal.IntentChainTests.RecoverBothWays(crash, $"point {flush + 1}") is { } problem) problems.Add(problem);
            foreach (var f in Directory.GetFiles(_tmp, Path.GetFileName(crash) + "*")) File.Delete(f);
        }
        output.WriteLine($"{flushes.Count} flushes; unfinished intents seen: {string.Join(", ", kinds)}");
        Assert.True(problems.Count == 0, string.Join("\n\n", problems));
        foreach (var kind in new[] { "BUI", "CUI" }) Assert.Contains(kind, kinds);
    }
}

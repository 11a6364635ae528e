using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text.RegularExpressions;
using XfsWin.TestSupport;
using Xunit.Abstractions;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// copy_file_range(2) through <c>xfswin mount -o rw</c> (FUSE_COPY_FILE_RANGE) against the kernel's XFS on a copy of
/// the same volume: every call's count (the kernel's XFS remaps whole blocks where both offsets are aligned and may
/// shorten the count to them; it copies bytes otherwise) or errno, and the bytes copied, are equal; after both are
/// unmounted, the kernel mounts each and fiemap reports the same blocks of each file shared; xfs_repair -n finds
/// nothing in ours.
/// </summary>
public sealed unsafe class CopyFileRangeTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Shell.MakeTempDirectory("xfswin-cfr");

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>(from, offset, to, offset, length): aligned, unaligned, to the source's unaligned EOF, past the destination's EOF, shortened, overlapping.</summary>
    private static readonly (string From, long FromOffset, string To, long ToOffset, long Length)[] Calls =
    [
        ("x", 0, "y", 0, 1 << 20),          // aligned, shortened to whole blocks
        ("x", 1 << 20, "y", 1 << 20, 4096), // the source's unaligned tail: to EOF
        ("x", 1 << 20, "w", 0, 4096),       // the unaligned tail inside another file's data: bytes
        ("x", 8192, "z", 0, 65536),         // into an empty file
        ("x", 100, "z", 70000, 5000),       // unaligned: bytes
        ("y", 0, "z", 409600, 3000),        // aligned but under a block, not at EOF: bytes
        ("x", 4096, "x", 524288, 65536),    // one file, apart
        ("x", 4096, "x", 8192, 65536),      // one file, overlapping: EINVAL
        ("z", 0, "w", 12288, 1 << 20),      // past the destination's EOF, to the source's EOF
        ("y", 2 << 20, "z", 0, 4096),       // at or past the source's EOF: 0
    ];

    private static string Call(string root, (string From, long FromOffset, string To, long ToOffset, long Length) c)
    {
        int from = Libc.open(Path.Combine(root, c.From), Libc.O_RDONLY, 0);
        int to = Libc.open(Path.Combine(root, c.To), Libc.O_RDWR, 0);
        try
        {
            if (from < 0 || to < 0) return "open failed";
            long inOff = c.FromOffset, outOff = c.ToOffset;
            var n = Libc.copy_file_range(from, &inOff, to, &outOff, (nuint)c.Length, 0);
            if (n < 0) return "errno " + Marshal.GetLastPInvokeError();
            return $"= {n} offsets {inOff} {outOff} size {new FileInfo(Path.Combine(root, c.To)).Length}";
        }
        finally
        {
            if (from >= 0) Libc.close(from);
            if (to >= 0) Libc.close(to);
        }
    }

    private static void Prepare(string root)
    {
        var rng = new Random(5);
        foreach (var (name, size) in new[] { ("x", (1 << 20) + 777), ("y", 300 << 10), ("z", 0), ("w", 5000) })
        {
            var bytes = new byte[size];
            rng.NextBytes(bytes);
            File.WriteAllBytes(Path.Combine(root, name), bytes);
        }
    }

    /// <summary>Per file: SHA-256, size, and per 4 KiB block whether fiemap reports it shared (S), mapped (m) or a hole (-).</summary>
    private static string Describe(string root)
    {
        var lines = new List<string>();
        foreach (var name in new[] { "w", "x", "y", "z" })
        {
            string path = Path.Combine(root, name);
            var bytes = File.ReadAllBytes(path);
            var map = Enumerable.Repeat('-', (bytes.Length + 4095) / 4096).ToArray();
            var fiemap = XfsWin.TestSupport.Shell.RunChecked("xfs_io", "-r", "-c", "fiemap -v", path).StandardOutput;
            foreach (Match m in Regex.Matches(fiemap, @"^\s*\d+:\s*\[(\d+)\.\.(\d+)\]:\s*(\S+)\s+\d+\s+0x([0-9a-f]+)\s*$", RegexOptions.Multiline))
            {
                if (m.Groups[3].Value == "hole") continue;
                long first = long.Parse(m.Groups[1].Value) / 8, end = (long.Parse(m.Groups[2].Value) + 1) / 8;
                bool shared = (Convert.ToInt32(m.Groups[4].Value, 16) & 0x2000) != 0;
                for (long b = first; b < end && b < map.Length; b++) map[b] = shared ? 'S' : 'm';
            }
            lines.Add($"{name}: {Convert.ToHexString(SHA256.HashData(bytes))[..16]} {bytes.Length} {new string(map)}");
        }
        return string.Join('\n', lines);
    }

    [Fact]
    public void Counts_bytes_and_sharing_are_the_kernels()
    {
        var baseImage = KernelMadeImages.Make(_tmp, "6.13", "base.img");
        var kernelImage = Path.Combine(_tmp, "kernel.img");
        var ourImage = Path.Combine(_tmp, "xfswin.img");
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, kernelImage);
        XfsWin.TestSupport.Shell.RunChecked("cp", "--sparse=always", baseImage, ourImage);
        var problems = new List<string>();
        using (var kernel = LoopMount.Mount(kernelImage, readOnly: false))
        using (var ours = new ReadWriteMount(ourImage))
        {
            Prepare(kernel.MountPoint);
            Prepare(ours.MountPoint);
            foreach (var c in Calls)
            {
                string expected = Call(kernel.MountPoint, c), actual = Call(ours.MountPoint, c);
                output.WriteLine($"{c}: {expected}");
                if (expected != actual) problems.Add($"{c}: kernel {expected}, xfswin {actual}");
            }
            ours.Unmount();
        }
        Assert.True(problems.Count == 0, string.Join('\n', problems));
        string kernelView, ourView;
        using (var k = LoopMount.Mount(kernelImage, readOnly: true)) kernelView = Describe(k.MountPoint);
        using (var k = LoopMount.Mount(ourImage, readOnly: true)) ourView = Describe(k.MountPoint);
        output.WriteLine(ourView);
        Assert.Equal(kernelView, ourView);
        Assert.Contains('S', ourView);
        var repair = KernelMadeImages.RepairProblems(ourImage, "6.13");
        Assert.True(repair.Count == 0, string.Join('\n', repair));
    }
}

using System.Security.Cryptography;
using Xunit;
using Xunit.Abstractions;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Reads of a file of thousands of one-block extents, whose pieces the engine reads concurrently: through a read-only
/// open and through a read-write open holding overwrites not yet written out, whole and in pieces at odd offsets, they
/// equal what the kernel reads (and what was written over it).
/// </summary>
public sealed class FragmentedReadTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-fragread.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    // Two files written a block at a time, interleaved and from the end (O_DIRECT: each block allocated on its own),
    // every 97th block of "a" left a hole, then an unwritten extent past its end.
    private const string MakeFragmented = """
import mmap, os, sys
n = 3000
buf = mmap.mmap(-1, 4096)
fa = os.open(os.path.join(sys.argv[1], "a"), os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
fb = os.open(os.path.join(sys.argv[1], "b"), os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
for i in range(n - 1, -1, -1):
    buf[:] = bytes([(i * 7 + k) % 251 for k in range(4096)]) if i % 13 == 0 else os.urandom(4096)
    if i % 97 != 0 or i == n - 1:
        os.pwritev(fa, [buf], i * 4096)
    os.pwritev(fb, [buf], i * 4096)
os.posix_fallocate(fa, n * 4096, 10 * 4096)
os.close(fa)
os.close(fb)
""";

    private static void ReadWhole(XfsVolume v, ulong ino, byte[] into, int bufferSize)
    {
        var buffer = new byte[bufferSize];
        for (long at = 0; at < into.Length;)
        {
            int n = v.Read(ino, at, buffer);
            Assert.True(n > 0, $"read at {at} returned {n}");
            buffer.AsSpan(0, n).CopyTo(into.AsSpan((int)at));
            at += n;
        }
    }

    private static void AssertPieces(XfsVolume v, ulong ino, byte[] expected, Random rng)
    {
        for (int i = 0; i < 200; i++)
        {
            int length = rng.Next(1, 300_000);
            long at = rng.Next(0, expected.Length);
            var got = new byte[length];
            int n = v.Read(ino, at, got);
            Assert.Equal((int)Math.Min(length, expected.Length - at), n);
            Assert.True(got.AsSpan(0, n).SequenceEqual(expected.AsSpan((int)at, n)), $"read of {length} bytes at {at} differs");
        }
    }

    [Fact]
    public void Reads_of_a_fragmented_file_equal_the_kernels()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        byte[] expected;
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            Shell.RunChecked("python3", "-c", MakeFragmented, mount.MountPoint);
            int extents = Shell.RunChecked("xfs_bmap", Path.Combine(mount.MountPoint, "a")).StandardOutput.Split('\n').Count(l => l.Contains(": ["));
            output.WriteLine($"a: {extents} extents and holes");
            Assert.True(extents > 2000, $"a has only {extents} extents");
        }
        using (var mount = LoopMount.Mount(image, readOnly: true)) expected = File.ReadAllBytes(Path.Combine(mount.MountPoint, "a"));

        using (var v = XfsVolume.Open(image, new VolumeOpenOptions()))
        {
            ulong a = v.ResolvePath("/a");
            var whole = new byte[expected.Length];
            ReadWhole(v, a, whole, 1 << 20);
            Assert.Equal(SHA256.HashData(expected), SHA256.HashData(whole));
            AssertPieces(v, a, expected, new Random(5));
        }

        var rng = new Random(6);
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }))
        {
            ulong a = v.ResolvePath("/a");
            // Small overwrites (held by the data cache), a write into a hole, and a large one (written behind).
            foreach (var (at, length) in new[] { (5000L, 300), (97L * 4096 + 10, 2000), (1_000_000L, 100), (2_000_003L, 70_000), (11_000_000L, 5) })
            {
                var bytes = new byte[length];
                rng.NextBytes(bytes);
                Assert.Equal(length, v.Write(a, at, bytes));
                bytes.CopyTo(expected.AsSpan((int)at));
            }
            var whole = new byte[expected.Length];
            ReadWhole(v, a, whole, 1 << 20);
            Assert.Equal(SHA256.HashData(expected), SHA256.HashData(whole));
            AssertPieces(v, a, expected, rng);
        }
        using (var mount = LoopMount.Mount(image, readOnly: true))
            Assert.Equal(SHA256.HashData(expected), SHA256.HashData(File.ReadAllBytes(Path.Combine(mount.MountPoint, "a"))));
    }
}

using Xunit;
using Xunit.Abstractions;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Writes over a file's written blocks inside EOF update its timestamps at most once per granule
/// (<see cref="XfsVolume.TimestampGranuleNanoseconds"/>), as the kernel's coarse clock does, and log nothing otherwise;
/// timestamps never move back. The volume's clock is set by the test. The bytes of every write, logged or not, are what
/// the kernel reads: from a copy of the image taken after an fsync (a crash then) and after the unmount, with
/// xfs_repair -n clean on both.
/// </summary>
public sealed class OverwriteTimestampTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-otime.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static XfsTimestamp Plus(XfsTimestamp t, long nanoseconds)
    {
        long total = t.Nanoseconds + nanoseconds;
        return new XfsTimestamp(t.Seconds + Math.DivRem(total, 1_000_000_000, out long rest), (uint)rest);
    }

    [Fact]
    public void Overwrites_within_a_granule_log_nothing_and_their_bytes_survive()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "512M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        var expected = new byte[70_000];
        expected.AsSpan().Fill(0x11);
        string crash = Path.Combine(_tmp, "crash.img");
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }))
        {
            ulong ino = v.CreateNode(v.RootInode, "f"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal(expected.Length, v.Write(ino, 0, expected));
            // An hour ahead, a microsecond into a granule.
            var t0 = new XfsTimestamp(XfsVolume.SystemNow().Seconds + 3600, 1000);
            var clock = t0;
            v.Clock = () => clock;
            long Transactions() => v.WriteLogStatistics!.Transactions;
            void Write(int offset, int length, byte value)
            {
                var bytes = new byte[length];
                bytes.AsSpan().Fill(value);
                Assert.Equal(length, v.Write(ino, offset, bytes));
                bytes.CopyTo(expected.AsSpan(offset));
            }

            long tx = Transactions();
            Write(0, 4096, 0x22);
            Assert.Equal(tx + 1, Transactions());
            Assert.Equal(t0, v.GetAttributes(ino).ModifyTime);

            // The same granule: whole blocks, a partial block, a run across blocks; none logs anything.
            clock = Plus(t0, 1_000_000);
            tx = Transactions();
            Write(4096, 4096, 0x33);
            Write(10_000, 1000, 0x44);
            Write(20_000, 30_000, 0x55);
            Assert.Equal(tx, Transactions());
            var attrs = v.GetAttributes(ino);
            Assert.Equal(t0, attrs.ModifyTime);
            Assert.Equal(t0, attrs.ChangeTime);
            var read = new byte[expected.Length];
            Assert.Equal(read.Length, v.Read(ino, 0, read));
            Assert.Equal(expected, read);

            // The next granule: one update, then quiet again.
            var t1 = Plus(t0, XfsVolume.TimestampGranuleNanoseconds);
            clock = t1;
            tx = Transactions();
            Write(8192, 4096, 0x66);
            Assert.Equal(tx + 1, Transactions());
            Assert.Equal(t1, v.GetAttributes(ino).ModifyTime);
            Write(12_288, 4096, 0x77);
            Assert.Equal(tx + 1, Transactions());

            // A clock behind the file's times moves nothing back.
            clock = t0;
            Write(0, 100, 0x88);
            Assert.Equal(tx + 1, Transactions());
            Assert.Equal(t1, v.GetAttributes(ino).ModifyTime);

            // A write past EOF in the same granule is logged: the size changes.
            clock = t1;
            var grown = new byte[expected.Length + 5000];
            expected.CopyTo(grown, 0);
            expected = grown;
            Write(70_000, 5000, 0x99);
            Assert.True(Transactions() > tx + 1, "a write that grew the file logged nothing");
            Assert.Equal(expected.Length, (long)v.GetAttributes(ino).Size);

            // Quiet writes after the last logged change, then fsync: the crash image right after it holds them.
            tx = Transactions();
            Write(0, 4096, 0xAA);
            Write(30_000, 3, 0xBB);
            Assert.Equal(tx, Transactions());
            v.Flush(ino);
            Shell.RunChecked("cp", "--sparse=always", image, crash);
        }

        foreach (var (name, path) in new[] { ("crash after fsync", crash), ("after unmount", image) })
        {
            using (var kernel = LoopMount.Mount(path, readOnly: false))
            {
                var bytes = File.ReadAllBytes(Path.Combine(kernel.MountPoint, "f"));
                Assert.True(expected.AsSpan().SequenceEqual(bytes), $"{name}: the kernel reads other bytes");
            }
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", path);
            output.WriteLine($"{name}: xfs_repair -n exit {repair.ExitCode}");
            Assert.True(repair.ExitCode == 0, $"{name}: xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}");
        }
    }
}

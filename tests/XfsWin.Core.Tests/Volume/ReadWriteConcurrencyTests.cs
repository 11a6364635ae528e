using System.Text;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Reads and changes of one volume opened read-write from several threads: reads share the volume's change lock (one
/// read waits for no other), changes hold it alone, and what readers see is always a committed state; writes that
/// change only file bytes share the lock with reads and with each other, each holding its file's data lock. The kernel
/// judges the result: it mounts the image and finds the tree the writers left, and xfs_repair -n finds nothing.
/// </summary>
public sealed class ReadWriteConcurrencyTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-rwconc.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>A 300 MiB volume (mkfs.xfs 6.13 defaults) the kernel filled with /f0../f19 (4 KiB each) and /link.</summary>
    private string Make()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        using var mount = LoopMount.Mount(image, readOnly: false);
        for (int i = 0; i < 20; i++) File.WriteAllBytes(Path.Combine(mount.MountPoint, $"f{i}"), Content($"f{i}", 4096));
        File.CreateSymbolicLink(Path.Combine(mount.MountPoint, "link"), "f0");
        return image;
    }

    /// <summary>The bytes a file named <paramref name="name"/> holds: a function of its name, so a reader can tell a whole file from a torn one.</summary>
    private static byte[] Content(string name, int length)
    {
        var bytes = new byte[length];
        uint x = 2166136261;
        foreach (char c in name) x = (x ^ c) * 16777619;
        x |= 1;
        for (int i = 0; i < length; i++)
        {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            bytes[i] = (byte)x;
        }
        return bytes;
    }

    /// <summary>Calls <see cref="Action"/> at the first entry a listing visits, then ends the listing.</summary>
    private struct PausingVisitor(Action action) : IDirectoryVisitor
    {
        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            action();
            return false;
        }
    }

    [Fact]
    public void A_read_inside_another_read_of_a_read_write_volume_does_not_wait_for_it()
    {
        string image = Make();
        using var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true });
        Assert.False(volume.IsReadOnly);
        ulong root = volume.ResolvePath("/"), file = volume.ResolvePath("/f3");
        using var listing = new ManualResetEventSlim();
        using var otherDone = new ManualResetEventSlim();
        string? otherSaw = null;
        var other = new Thread(() =>
        {
            listing.Wait();
            // The listing on the first thread holds the lock shared and waits for this: every read must go through.
            try
            {
                var data = new byte[4096];
                int n = volume.Read(file, 0, data);
                otherSaw = $"{n} bytes, {(data.AsSpan().SequenceEqual(Content("f3", 4096)) ? "same" : "different")} content, " +
                           $"size {volume.GetAttributes(file).Size}, link to {Encoding.UTF8.GetString(volume.ReadLink(volume.ResolvePath("/link")))}";
            }
            catch (Exception e)
            {
                otherSaw = e.ToString();
            }
            otherDone.Set();
        }) { IsBackground = true };
        other.Start();
        bool otherFinished = false;
        var visitor = new PausingVisitor(() =>
        {
            listing.Set();
            // Not a timing assumption: the other read either finishes (reads share the lock) or waits for this listing
            // to end, which it does only after this bound, and the assertion below fails.
            otherFinished = otherDone.Wait(TimeSpan.FromSeconds(60));
        });
        volume.ReadDirectory(root, 0, ref visitor);
        Assert.True(otherFinished, "a read of the read-write volume waited for a listing in progress on another thread");
        Assert.True(other.Join(TimeSpan.FromSeconds(60)));
        Assert.Equal("4096 bytes, same content, size 4096, link to f0", otherSaw);
    }

    [Fact]
    public void Readers_beside_writers_see_only_committed_states_and_the_kernel_finds_what_the_writers_left()
    {
        string image = Make();
        const int Writers = 2, Readers = 2, FilesPerWriter = 150;
        var errors = new System.Collections.Concurrent.ConcurrentQueue<string>();
        var expected = new Dictionary<string, byte[]>();
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong root = volume.ResolvePath("/");
            var dirs = new ulong[Writers];
            for (int w = 0; w < Writers; w++) dirs[w] = volume.MakeDirectory(root, Encoding.UTF8.GetBytes($"w{w}"), 0x1ED, 0, 0).Inode;
            int writersLeft = Writers;
            // Halfway through, each writer waits until every reader has read a file: reads then certainly run beside
            // the writers' second half, however the threads happen to be scheduled.
            using var everyReaderRead = new CountdownEvent(Readers);
            var threads = new List<Thread>();
            for (int w = 0; w < Writers; w++)
            {
                int index = w;
                threads.Add(new Thread(() =>
                {
                    try
                    {
                        // Each file: create, one write of its whole content, and every third one renamed, every fifth removed.
                        for (int i = 0; i < FilesPerWriter; i++)
                        {
                            if (i == FilesPerWriter / 2 && !everyReaderRead.Wait(TimeSpan.FromMinutes(2)))
                                errors.Enqueue($"writer {index}: the readers read no file in 2 minutes");
                            string name = $"n{i}";
                            ulong ino = volume.CreateNode(dirs[index], Encoding.UTF8.GetBytes(name), 0x81A4, 0, 0).Inode;
                            volume.Write(ino, 0, Content(name, 1000 + 97 * i));
                            if (i % 3 == 0) volume.Rename(dirs[index], Encoding.UTF8.GetBytes(name), dirs[index], Encoding.UTF8.GetBytes("r" + name));
                            if (i % 5 == 0) volume.Unlink(dirs[index], Encoding.UTF8.GetBytes(i % 3 == 0 ? "r" + name : name));
                        }
                    }
                    catch (Exception e)
                    {
                        errors.Enqueue($"writer {index}: {e}");
                    }
                    finally
                    {
                        Interlocked.Decrement(ref writersLeft);
                    }
                }) { IsBackground = true });
            }
            int reads = 0;
            for (int r = 0; r < Readers; r++)
            {
                int index = r;
                threads.Add(new Thread(() =>
                {
                    var buffer = new byte[64 << 10];
                    bool counted = false;
                    try
                    {
                        while (Volatile.Read(ref writersLeft) > 0)
                        {
                            foreach (ulong dir in dirs)
                            {
                                foreach (var (name, ino) in List(volume, dir))
                                {
                                    // Files the writers remove are left alone (their inodes may be freed and reused at
                                    // any moment); the others keep their inode, whatever their name.
                                    string plain = name.StartsWith('r') ? name[1..] : name;
                                    if (int.Parse(plain.AsSpan(1), System.Globalization.CultureInfo.InvariantCulture) % 5 == 0) continue;
                                    // Its content is either not written yet (size 0) or whole: never part of a write.
                                    long size = volume.GetAttributes(ino).Size;
                                    int n = volume.Read(ino, 0, buffer);
                                    if (n != 0 && !buffer.AsSpan(0, n).SequenceEqual(Content(plain, n)))
                                        errors.Enqueue($"reader {index}: {name} read {n} bytes (size {size}) that are not its content");
                                    Interlocked.Increment(ref reads);
                                    if (!counted)
                                    {
                                        counted = true;
                                        everyReaderRead.Signal();
                                    }
                                }
                            }
                        }
                    }
                    catch (Exception e)
                    {
                        errors.Enqueue($"reader {index}: {e}");
                    }
                }) { IsBackground = true });
            }
            threads.ForEach(t => t.Start());
            foreach (var t in threads) Assert.True(t.Join(TimeSpan.FromMinutes(5)), "a thread did not finish in 5 minutes");
            output.WriteLine($"{reads} file reads beside the writers");
            Assert.True(errors.IsEmpty, string.Join('\n', errors));
            Assert.True(reads > 0, "no reader read a file");
            for (int w = 0; w < Writers; w++)
                for (int i = 0; i < FilesPerWriter; i++)
                    if (i % 5 != 0) expected[$"w{w}/{(i % 3 == 0 ? "r" : "")}n{i}"] = Content($"n{i}", 1000 + 97 * i);
        }
        using (var mount = LoopMount.Mount(image, readOnly: true))
        {
            var found = Directory.EnumerateFiles(mount.MountPoint, "*", SearchOption.AllDirectories)
                .Select(p => Path.GetRelativePath(mount.MountPoint, p)).Where(p => p.StartsWith('w')).Order(StringComparer.Ordinal).ToList();
            Assert.Equal(expected.Keys.Order(StringComparer.Ordinal), found);
            foreach (var (path, content) in expected) Assert.Equal(content, File.ReadAllBytes(Path.Combine(mount.MountPoint, path)));
        }
        AssertRepairClean(image);
    }

    /// <summary>
    /// An overwrite of one file waits for no overwrite or read of another: while an overwrite of /f3 is held inside
    /// its device read (the partial block it reads to patch), an overwrite and a read of another file finish, a read of /f3
    /// waits for the overwrite and then sees it whole, and nothing is logged (no change ran). The kernel reads the
    /// bytes both writes left.
    /// </summary>
    [Fact]
    public void An_overwrite_waits_for_no_overwrite_or_read_of_another_file()
    {
        string image = Make();
        var device = new PausingDevice(PartitionSpec.Open(image, null, writable: true));
        var patch = new byte[10];
        patch.AsSpan().Fill(0xAA);
        var whole = new byte[4096];
        whole.AsSpan().Fill(0xBB);
        byte[]? sawOfF3 = null;
        string otherName;
        using (var volume = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true))
        {
            // A clock behind every timestamp the kernel set: no write needs to move them (no change, see TimestampsBehind).
            volume.Clock = () => new XfsTimestamp(1, 0);
            ulong f3 = volume.ResolvePath("/f3");
            // The other file: one whose data lock is not /f3's (files of one stripe share one).
            otherName = Enumerable.Range(4, 16).Select(i => $"f{i}")
                .First(n => VolumeChangeLock.FileDataStripe(volume.ResolvePath("/" + n)) != VolumeChangeLock.FileDataStripe(f3));
            ulong f4 = volume.ResolvePath("/" + otherName);
            Assert.Equal(4096, volume.GetAttributes(f3).Size);
            Assert.Equal(4096, volume.GetAttributes(f4).Size);
            long transactions = volume.WriteLogStatistics!.Transactions;
            var failures = new System.Collections.Concurrent.ConcurrentQueue<string>();
            Thread Run(string what, Action action)
            {
                var t = new Thread(() =>
                {
                    try { action(); }
                    catch (Exception e) { failures.Enqueue($"{what}: {e}"); }
                }) { IsBackground = true };
                t.Start();
                return t;
            }

            var held = Run("overwrite of /f3", () =>
            {
                device.PauseNextReadOnThisThread();
                Assert.Equal(patch.Length, volume.Write(f3, 100, patch));
            });
            // Whatever fails below, the held thread is let go (the volume's unmount waits for it).
            try
            {
                Assert.True(device.Paused.Wait(TimeSpan.FromSeconds(60)), "the overwrite of /f3 did not read its block: " + string.Join('\n', failures));
                Assert.Equal(4096, device.PausedLength);
                // Not a timing assumption: each bound only tells a thread that waits for the held overwrite (and so never
                // finishes before the release below) from one that does not.
                var other = Run("overwrite and read of " + otherName, () =>
                {
                    Assert.Equal(whole.Length, volume.Write(f4, 0, whole));
                    var back = new byte[4096];
                    Assert.Equal(4096, volume.Read(f4, 0, back));
                    Assert.Equal(whole, back);
                });
                Assert.True(other.Join(TimeSpan.FromSeconds(60)), $"an overwrite of {otherName} waited for an overwrite of /f3");
                var reader = Run("read of /f3", () =>
                {
                    var back = new byte[4096];
                    Assert.Equal(4096, volume.Read(f3, 0, back));
                    sawOfF3 = back;
                });
                var waited = System.Diagnostics.Stopwatch.StartNew();
                while (volume.ChangeLock.FileDataReadersWaiting(f3) == 0)
                {
                    Assert.True(reader.IsAlive, "a read of /f3 did not wait for the overwrite of it in progress: " + string.Join('\n', failures));
                    Assert.True(waited.Elapsed < TimeSpan.FromSeconds(60), "the read of /f3 never reached its file's data lock");
                    Thread.Sleep(1);
                }
                device.Release.Set();
                Assert.True(held.Join(TimeSpan.FromSeconds(60)) && reader.Join(TimeSpan.FromSeconds(60)), "the overwrite or read of /f3 did not finish");
            }
            finally
            {
                device.Release.Set();
            }
            Assert.True(failures.IsEmpty, string.Join('\n', failures));
            Assert.Equal(transactions, volume.WriteLogStatistics!.Transactions);
        }
        var expectedF3 = Content("f3", 4096);
        patch.CopyTo(expectedF3.AsSpan(100));
        Assert.Equal(expectedF3, sawOfF3);
        using (var mount = LoopMount.Mount(image, readOnly: true))
        {
            Assert.Equal(expectedF3, File.ReadAllBytes(Path.Combine(mount.MountPoint, "f3")));
            Assert.Equal(whole, File.ReadAllBytes(Path.Combine(mount.MountPoint, otherName)));
        }
        AssertRepairClean(image);
    }

    /// <summary>
    /// A read that waited for a change goes before the next change of a thread making one after another: while a write
    /// that grows /f3 is held inside its change (its device read of the block it patches), a reader asks for /f3's
    /// attributes and waits; the writer's thread goes on to a second change at once, and the reader still sees the
    /// size the first change left. (The volume's bound on that hand-off, a few milliseconds, is lifted here, so that
    /// the outcome does not depend on how soon the machine runs the reader.)
    /// </summary>
    [Fact]
    public void A_waiting_reader_goes_before_the_next_change_of_a_busy_writer()
    {
        string image = Make();
        var device = new PausingDevice(PartitionSpec.Open(image, null, writable: true));
        long sawSize = -1;
        using (var volume = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true))
        {
            volume.ChangeLock.ReaderHandOff = TimeSpan.FromMinutes(5);
            ulong f3 = volume.ResolvePath("/f3");
            Assert.Equal(4096, volume.GetAttributes(f3).Size);
            var failures = new System.Collections.Concurrent.ConcurrentQueue<string>();
            var writer = new Thread(() =>
            {
                try
                {
                    device.PauseNextReadOnThisThread();
                    // Bytes 4000..4199: block 0 is read to be patched (the pause), block 1 is new; the file grows to 4200.
                    Assert.Equal(200, volume.Write(f3, 4000, new byte[200]));
                    Assert.Equal(10, volume.Write(f3, 8192, new byte[10]));
                }
                catch (Exception e)
                {
                    failures.Enqueue($"writer: {e}");
                }
            }) { IsBackground = true };
            var reader = new Thread(() =>
            {
                try { sawSize = volume.GetAttributes(f3).Size; }
                catch (Exception e) { failures.Enqueue($"reader: {e}"); }
            }) { IsBackground = true };
            writer.Start();
            try
            {
                Assert.True(device.Paused.Wait(TimeSpan.FromSeconds(60)), "the growing write did not read from the device: " + string.Join('\n', failures));
                reader.Start();
                var waited = System.Diagnostics.Stopwatch.StartNew();
                while (volume.ChangeLock.ReadersWaiting == 0)
                {
                    Assert.True(reader.IsAlive, "the read did not wait for the change in progress: " + string.Join('\n', failures));
                    Assert.True(waited.Elapsed < TimeSpan.FromSeconds(60), "the read never waited for the change lock");
                    Thread.Sleep(1);
                }
            }
            finally
            {
                device.Release.Set();
            }
            Assert.True(writer.Join(TimeSpan.FromSeconds(60)) && reader.Join(TimeSpan.FromSeconds(60)), "the writer or the reader did not finish");
            Assert.True(failures.IsEmpty, string.Join('\n', failures));
            Assert.Equal(8202, volume.GetAttributes(f3).Size);
        }
        Assert.Equal(4200, sawSize);
        using (var mount = LoopMount.Mount(image, readOnly: true))
            Assert.Equal(8202, new FileInfo(Path.Combine(mount.MountPoint, "f3")).Length);
        AssertRepairClean(image);
    }

    /// <summary>
    /// Threads overwriting pieces of the same blocks of one file at once (each block patched by every thread, so each
    /// write reads, patches and writes back a block another thread is patching) lose no piece, with readers beside
    /// them that only ever see pieces whole; the kernel reads every piece after the unmount.
    /// </summary>
    [Fact]
    public void Overwrites_of_the_same_blocks_from_several_threads_lose_no_piece()
    {
        string image = Make();
        const int Writers = 4, Piece = 64, Rounds = 8;
        const int Length = 256 << 10;
        var expected = new byte[Length];
        // Before the writers: every piece one byte value too (a reader tells a piece half written by its bytes alone).
        expected.AsSpan().Fill(0x01);
        var failures = new System.Collections.Concurrent.ConcurrentQueue<string>();
        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }))
        {
            ulong file = volume.CreateNode(volume.RootInode, "shared"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal(Length, volume.Write(file, 0, expected));
            volume.Sync();
            // A clock behind the file's timestamps: every overwrite below changes file bytes only.
            volume.Clock = () => new XfsTimestamp(1, 0);
            long transactions = volume.WriteLogStatistics!.Transactions;
            // Writer t owns the pieces whose index is t modulo Writers: every 4 KiB block holds pieces of all of them.
            // Each piece is written Rounds times, a byte pattern of (writer, round), so the last round's must remain.
            static byte Fill(int writer, int round) => (byte)(0x10 * (round + 1) + writer);
            for (int at = 0, index = 0; at < Length; at += Piece, index++)
                expected.AsSpan(at, Piece).Fill(Fill(index % Writers, Rounds - 1));
            int writersLeft = Writers;
            var threads = new List<Thread>();
            for (int t = 0; t < Writers; t++)
            {
                int writer = t;
                threads.Add(new Thread(() =>
                {
                    var bytes = new byte[Piece];
                    try
                    {
                        for (int round = 0; round < Rounds; round++)
                        {
                            bytes.AsSpan().Fill(Fill(writer, round));
                            for (int at = writer * Piece; at < Length; at += Writers * Piece)
                                if (volume.Write(file, at, bytes) != Piece) failures.Enqueue($"writer {writer}: a short write at {at}");
                        }
                    }
                    catch (Exception e)
                    {
                        failures.Enqueue($"writer {writer}: {e}");
                    }
                    finally
                    {
                        Interlocked.Decrement(ref writersLeft);
                    }
                }) { IsBackground = true });
            }
            threads.Add(new Thread(() =>
            {
                var back = new byte[Length];
                try
                {
                    while (Volatile.Read(ref writersLeft) > 0)
                    {
                        Assert.Equal(Length, volume.Read(file, 0, back));
                        // Each piece is one write: all of its bytes alike.
                        for (int at = 0; at < Length; at += Piece)
                            if (back.AsSpan(at, Piece).IndexOfAnyExcept(back[at]) >= 0) failures.Enqueue($"a read saw the piece at {at} torn");
                    }
                }
                catch (Exception e)
                {
                    failures.Enqueue($"reader: {e}");
                }
            }) { IsBackground = true });
            threads.ForEach(t => t.Start());
            foreach (var t in threads) Assert.True(t.Join(TimeSpan.FromMinutes(5)), "a thread did not finish in 5 minutes");
            Assert.True(failures.IsEmpty, string.Join('\n', failures.Take(20)));
            Assert.Equal(transactions, volume.WriteLogStatistics!.Transactions);
            var read = new byte[Length];
            Assert.Equal(Length, volume.Read(file, 0, read));
            Assert.True(expected.AsSpan().SequenceEqual(read), "the engine lost a piece: " + FirstDifference(expected, read));
        }
        using (var mount = LoopMount.Mount(image, readOnly: true))
        {
            var onDisk = File.ReadAllBytes(Path.Combine(mount.MountPoint, "shared"));
            Assert.True(expected.AsSpan().SequenceEqual(onDisk), "the kernel read another file: " + FirstDifference(expected, onDisk));
        }
        AssertRepairClean(image);
    }

    private static void AssertRepairClean(string image)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}");
    }

    private static string FirstDifference(byte[] expected, byte[] actual)
    {
        if (expected.Length != actual.Length) return $"{actual.Length} bytes instead of {expected.Length}";
        int at = expected.AsSpan().CommonPrefixLength(actual);
        if (at == expected.Length) return "none";
        return $"byte {at}: 0x{actual[at]:X2} instead of 0x{expected[at]:X2}";
    }

    /// <summary>A device that holds one thread's next read until released (and reports its length).</summary>
    private sealed class PausingDevice(IBlockDevice inner) : IBlockDevice
    {
        private int _pauseThread = -1;

        public ManualResetEventSlim Paused { get; } = new();
        public ManualResetEventSlim Release { get; } = new();
        public int PausedLength { get; private set; }

        public void PauseNextReadOnThisThread() => Volatile.Write(ref _pauseThread, Environment.CurrentManagedThreadId);

        public long Length => inner.Length;
        public int SectorSize => inner.SectorSize;
        public bool CanWrite => inner.CanWrite;
        public string IoMode => "pausing: " + inner.IoMode;

        public void Read(long offset, Span<byte> destination)
        {
            if (Interlocked.CompareExchange(ref _pauseThread, -1, Environment.CurrentManagedThreadId) == Environment.CurrentManagedThreadId)
            {
                PausedLength = destination.Length;
                Paused.Set();
                Release.Wait();
            }
            inner.Read(offset, destination);
        }

        public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
        {
            Read(offset, destination.Span);
            return ValueTask.CompletedTask;
        }

        public void Write(long offset, ReadOnlySpan<byte> source) => inner.Write(offset, source);
        public void Flush() => inner.Flush();

        public void Dispose()
        {
            inner.Dispose();
            Paused.Dispose();
            Release.Dispose();
        }
    }

    private static List<(string Name, ulong Inode)> List(XfsVolume volume, ulong directory)
    {
        var collector = new Collector { Entries = [] };
        volume.ReadDirectory(directory, 0, ref collector);
        return collector.Entries;
    }

    private struct Collector : IDirectoryVisitor
    {
        public List<(string, ulong)> Entries;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (!name.SequenceEqual("."u8) && !name.SequenceEqual(".."u8)) Entries.Add((Encoding.UTF8.GetString(name), inode));
            return true;
        }
    }
}

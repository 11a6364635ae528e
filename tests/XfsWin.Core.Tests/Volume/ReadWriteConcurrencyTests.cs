using System.Text;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// Reads and changes of one volume opened read-write from several threads: reads share the volume's change lock (one
/// read waits for no other), changes hold it alone, and what readers see is always a committed state. The kernel
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
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems:\n{repair.StandardOutput}{repair.StandardError}");
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

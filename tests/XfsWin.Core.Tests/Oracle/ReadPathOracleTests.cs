using System.Text;
using XfsWin.Attributes;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.TestSupport;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Tests.Oracle;

/// <summary>
/// The read path against the real thing: every image of the matrix (scripts/oracles/make-images.sh),
/// opened with XfsVolume, must show exactly what the Linux kernel showed (or, for V4, what mkfs.xfs was
/// told to write): names, types, modes, owners, sizes, link counts, inode numbers, times with ns,
/// creation times, content hashes, link targets, xattrs and device numbers.
/// </summary>
public sealed class ReadPathOracleTests
{
    public static TheoryData<string> Images()
    {
        var data = new TheoryData<string>();
        foreach (var n in OracleImages.All)
            data.Add(n);
        return data;
    }

    [Theory]
    [MemberData(nameof(Images))]
    public void Whole_tree_equals_the_manifest(string name)
    {
        var image = OracleImages.Ensure(name);
        var manifest = image.Manifest;
        using var volume = XfsVolume.Open(image.ImagePath);
        var result = Watchdog.Run(TimeSpan.FromMinutes(5), $"comparing {name}",
            () => TreeComparer.Compare(volume, manifest, new TreeComparisonOptions { DirectoryFileTypes = image.DirectoryFileTypes }));
        Assert.Equal(manifest.Entries.Count, result.EntriesCompared);
        Assert.True(result.Identical, $"{name} ({image.MkfsOptions}, xfsprogs {image.XfsprogsVersion}): {result.Format()}");
        Assert.True(volume.IsHealthy, $"{name}: volume marked unhealthy after a clean walk");
    }

    [Theory]
    [MemberData(nameof(Images))]
    public void Volume_info_matches_the_superblock(string name)
    {
        var image = OracleImages.Ensure(name);
        var sb = XfsDb.Fields(XfsDb.Run(image, "sb 0", "print"));
        using var volume = XfsVolume.Open(image.ImagePath);
        var info = volume.Info;
        var wrong = new List<string>();
        void Check(string field, object expected, object actual)
        {
            if (!Equals(expected, actual))
                wrong.Add($"{field}: expected {expected}, actual {actual}");
        }
        Check("BlockSize", XfsDb.Number(sb["blocksize"]), (long)info.BlockSize);
        Check("SectorSize", XfsDb.Number(sb["sectsize"]), (long)info.SectorSize);
        Check("InodeSize", XfsDb.Number(sb["inodesize"]), (long)info.InodeSize);
        Check("AgCount", XfsDb.Number(sb["agcount"]), (long)info.AgCount);
        Check("AgBlocks", XfsDb.Number(sb["agblocks"]), (long)info.AgBlocks);
        Check("DataBlocks", XfsDb.Number(sb["dblocks"]), (long)info.DataBlocks);
        Check("RootInode", XfsDb.Number(sb["rootino"]), (long)info.RootInode);
        Check("LogBlocks", XfsDb.Number(sb["logblocks"]), (long)info.LogBlocks);
        Check("DirectoryBlockSize", XfsDb.Number(sb["blocksize"]) << (int)XfsDb.Number(sb["dirblklog"]), (long)info.DirectoryBlockSize);
        Check("Label", name, info.Label);
        Check("Uuid", Guid.Parse(sb["uuid"]), info.Uuid);
        Check("FormatVersion", name.StartsWith("v4", StringComparison.Ordinal) ? 4 : 5, info.FormatVersion);
        Check("ExternalLog", false, info.ExternalLog);
        // Cleanly unmounted by the kernel (or fresh from mkfs): xfs_repair -n, which refuses dirty logs, passed at build time.
        Check("LogState", LogState.Clean, info.LogState);
        Check("volume.RootInode", image.Manifest.Root.Ino, volume.RootInode);
        Assert.True(wrong.Count == 0, $"{name}: {string.Join("; ", wrong)}");
    }

    [Fact]
    public void Every_name_of_the_100k_directory_is_found_by_lookup()
    {
        var image = OracleImages.Ensure("default");
        var dir = image.Manifest.Get("/extents/big-dir");
        using var volume = XfsVolume.Open(image.ImagePath);
        var wrong = new List<string>();
        foreach (var (name, ino) in dir.Children!)
        {
            if (!volume.TryLookup(dir.Ino, name, out var found))
                wrong.Add($"{Encoding.UTF8.GetString(name)}: not found (expected {ino})");
            else if (found != ino)
                wrong.Add($"{Encoding.UTF8.GetString(name)}: {found} (expected {ino})");
        }
        foreach (var absent in new[] { "e100000-", "e000000-x", "E000001-n", "", "zzzz" })
        {
            if (volume.TryLookup(dir.Ino, Encoding.UTF8.GetBytes(absent), out var ghost))
                wrong.Add($"'{absent}' should be absent, lookup gave {ghost}");
        }
        Assert.True(wrong.Count == 0, $"{wrong.Count} lookups wrong of {dir.Children.Count}:\n{string.Join('\n', wrong.Take(50))}");
        Assert.Equal(dir.Ino, volume.ResolvePath("/extents/big-dir"));
        Assert.Equal(dir.Children[12345].Ino, volume.ResolvePath("/extents/big-dir/" + Encoding.UTF8.GetString(dir.Children[12345].Name)));
    }

    private sealed class Collector(int stopAfter) : IDirectoryVisitor
    {
        public readonly List<(string Name, ulong Ino, long Cookie)> Seen = [];

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            Seen.Add((Convert.ToHexString(name), inode, nextCookie));
            return Seen.Count < stopAfter;
        }
    }

    [Theory]
    [InlineData("default", "/extents/big-dir")]
    [InlineData("default", "/dirs/leaf")]
    [InlineData("dir64k", "/dirs/node")]
    [InlineData("v4", "/dirs/node")]
    public void Enumeration_resumed_from_cookies_yields_every_entry_once(string name, string path)
    {
        var image = OracleImages.Ensure(name);
        var dir = image.Manifest.Get(path);
        using var volume = XfsVolume.Open(image.ImagePath);
        var all = new List<(string Name, ulong Ino, long Cookie)>();
        long cookie = 0;
        for (var batch = 0; batch < 1_000_000; batch++)
        {
            var c = new Collector(777);
            volume.ReadDirectory(dir.Ino, cookie, ref c);
            if (c.Seen.Count == 0)
                break;
            all.AddRange(c.Seen);
            cookie = c.Seen[^1].Cookie;
        }
        var expected = dir.Children!.Select(x => Convert.ToHexString(x.Name)).Append(Convert.ToHexString("."u8)).Append(Convert.ToHexString(".."u8)).Order().ToList();
        Assert.Equal(expected, all.Select(x => x.Name).Order().ToList());
        Assert.Equal(all.Count, all.Select(x => x.Cookie).Distinct().Count());
    }

    [Fact]
    public void Default_image_still_has_every_on_disk_form_the_tests_rely_on()
    {
        // If mkfs.xfs, the kernel or fill.py change, these make sure the read-path tests do not silently
        // stop covering a format.
        var image = OracleImages.Ensure("default");
        var m = image.Manifest;
        var problems = new List<string>();

        void Expect(string path, string command, string field, Func<long, bool> ok, string what)
        {
            var e = m.Get(path);
            var fields = XfsDb.Fields(XfsDb.Run(image, [$"inode {e.Ino}", .. command.Split('\n')]));
            if (!fields.TryGetValue(field, out var v) || !ok(XfsDb.Number(v)))
                problems.Add($"{path}: {field} = {(v ?? "missing")}, expected {what}");
        }

        const long Local = 1, Extents = 2, Btree = 3;
        Expect("/extents/big-dir", "print core.format", "core.format", v => v == Btree, "btree");
        Expect("/extents/big-dir", "print u3.bmbt.level", "u3.bmbt.level", v => v >= 1, ">= 1");
        Expect("/extents/many-extents", "print core.format", "core.format", v => v == Btree, "btree");
        Expect("/extents/many-extents", "print u3.bmbt.level", "u3.bmbt.level", v => v >= 2, ">= 2");
        Expect("/extents/many-extents", "print core.nextents", "core.nextents", v => v >= 10_000, ">= 10000");
        Expect("/dirs/shortform", "print core.format", "core.format", v => v == Local, "local (shortform directory)");
        Expect("/dirs/block", "print core.format", "core.format", v => v == Extents, "extents");
        Expect("/symlinks/short", "print core.format", "core.format", v => v == Local, "local symlink");
        Expect("/symlinks/remote-1000", "print core.format", "core.format", v => v == Extents, "remote symlink");
        Expect("/xattrs/shortform", "print core.aformat", "core.aformat", v => v == Local, "shortform attributes");

        // Directory block kinds, by magic: block (XDB3), leaf (XDD3 + LEAF1 0x3df1), node (DA3 node 0x3ebe + free XDF3).
        var leafOffset = (32L << 30) / image.Manifest.Get("/dirs/block").Size; // first leaf dir block (4 KiB dir blocks)
        Expect("/dirs/block", "dblock 0\nprint bhdr.hdr.magic", "bhdr.hdr.magic", v => v == 0x58444233, "XDB3");
        Expect("/dirs/leaf", $"dblock {leafOffset}\nprint lhdr.info.hdr.magic", "lhdr.info.hdr.magic", v => v == 0x3df1, "leaf1 0x3df1");
        Expect("/dirs/node", $"dblock {leafOffset}\nprint nhdr.info.hdr.magic", "nhdr.info.hdr.magic", v => v == 0x3ebe, "da3 node 0x3ebe");
        Expect("/dirs/node", $"dblock {2 * leafOffset}\nprint fhdr.hdr.magic", "fhdr.hdr.magic", v => v == 0x58444633, "free index XDF3");
        Expect("/extents/big-dir", $"dblock {leafOffset}\nprint nhdr.info.hdr.magic", "nhdr.info.hdr.magic", v => v == 0x3ebe, "da3 node 0x3ebe");
        Expect("/extents/big-dir", $"dblock {leafOffset}\nprint nhdr.level", "nhdr.level", v => v >= 1, "da node level >= 1");
        // Attribute forks: leaf (0x3bee) and node (0x3ebe) blocks, and remote values.
        Expect("/xattrs/leaf", "ablock 0\nprint hdr.info.hdr.magic", "hdr.info.hdr.magic", v => v == 0x3bee, "attr3 leaf 0x3bee");
        Expect("/xattrs/node", "ablock 0\nprint hdr.info.hdr.magic", "hdr.info.hdr.magic", v => v == 0x3ebe, "da3 node 0x3ebe");
        Expect("/xattrs/remote", "print core.naextents", "core.naextents", v => v >= 2, ">= 2 attr extents (remote values)");
        Assert.True(problems.Count == 0, string.Join('\n', problems));
    }
}

/// <summary>Reads at odd offsets and lengths, compared byte for byte with the same file read through the kernel.</summary>
public sealed class ReadRangeOracleTests
{
    public static TheoryData<string, string> Files() => new()
    {
        { "default", "/sparse/holes" },
        { "default", "/sparse/prealloc-partial" },
        { "default", "/sparse/prealloc-beyond-eof" },
        { "default", "/extents/many-extents" },
        { "default", "/reflink/clone-modified" },
        { "default", "/files/size-65537" },
        { "b1k", "/extents/many-extents" },
        { "b64k", "/sparse/holes" },
        { "mkfs613", "/files/large-24M" },
    };

    [Theory]
    [MemberData(nameof(Files))]
    public async Task Random_ranges_equal_the_kernels_bytes(string name, string path)
    {
        var image = OracleImages.Ensure(name);
        var entry = image.Manifest.Get(path);
        byte[] kernel;
        using (var mount = LoopMount.Mount(image.ImagePath, readOnly: true))
            kernel = await File.ReadAllBytesAsync(Path.Combine(mount.MountPoint, path.TrimStart('/')));
        Assert.Equal(entry.Size, kernel.Length);

        using var volume = XfsVolume.Open(image.ImagePath);
        var rnd = new Random(entry.Path.Length * 7919 + (int)(entry.Ino % 100_000));
        var bs = volume.Info.BlockSize;
        var wrong = new List<string>();
        for (var i = 0; i < 300; i++)
        {
            long offset = i switch
            {
                0 => 0,
                1 => Math.Max(0, kernel.Length - 1),
                2 => kernel.Length,
                3 => kernel.Length + 12345L,
                _ when i % 3 == 0 => (long)rnd.Next(0, Math.Max(1, kernel.Length / bs)) * bs - rnd.Next(0, 2), // at or just before a block boundary
                _ => rnd.NextInt64(0, Math.Max(1, kernel.Length)),
            };
            var length = i % 5 == 0 ? rnd.Next(1, 3 * bs) : rnd.Next(1, 300_000);
            offset = Math.Max(0, offset);
            var buf = new byte[length];
            var n = i % 2 == 0 ? volume.Read(entry.Ino, offset, buf) : await volume.ReadAsync(entry.Ino, offset, buf);
            var want = (int)Math.Clamp(kernel.Length - offset, 0, length);
            if (n != want)
                wrong.Add($"Read({offset}, {length}) returned {n}, expected {want}");
            else if (!buf.AsSpan(0, n).SequenceEqual(kernel.AsSpan((int)Math.Min(offset, kernel.Length), n)))
                wrong.Add($"Read({offset}, {length}): bytes differ from the kernel's");
        }
        Assert.True(wrong.Count == 0, $"{name}:{path}: {wrong.Count} of 300 reads wrong:\n{string.Join('\n', wrong.Take(30))}");
    }

    [Theory]
    [InlineData("default")]
    [InlineData("rmap-nrext64")]
    [InlineData("v4")]
    public void Every_path_resolves_to_the_manifest_inode(string name)
    {
        var image = OracleImages.Ensure(name);
        using var volume = XfsVolume.Open(image.ImagePath);
        var wrong = new List<string>();
        var strict = new UTF8Encoding(false, throwOnInvalidBytes: true);
        var checkedCount = 0;
        foreach (var e in image.Manifest.Entries)
        {
            string path;
            try { path = "/" + strict.GetString(e.Path); }
            catch (DecoderFallbackException) { continue; } // ResolvePath takes strings: non-UTF-8 names are covered by TryLookup
            checkedCount++;
            try
            {
                var ino = volume.ResolvePath(path);
                if (ino != e.Ino)
                    wrong.Add($"{e.Printable}: {ino}, expected {e.Ino}");
            }
            catch (XfsException ex)
            {
                wrong.Add($"{e.Printable}: {ex.Message}");
            }
        }
        Assert.True(checkedCount > 3000);
        Assert.True(wrong.Count == 0, $"{wrong.Count} paths resolve wrongly:\n{string.Join('\n', wrong.Take(30))}");
        // A symlink in the middle is followed; the final one only when asked.
        if (image.Manifest.Find("symlinks/to-dir") is { } toDir)
        {
            Assert.Equal(toDir.Ino, volume.ResolvePath("/symlinks/to-dir"));
            Assert.Equal(image.Manifest.Get("/names").Ino, volume.ResolvePath("/symlinks/to-dir", followFinalSymlink: true));
            Assert.Equal(image.Manifest.Get("/names/.hidden").Ino, volume.ResolvePath("/symlinks/to-dir/.hidden"));
        }
    }
}

/// <summary>Parent pointers (mkfs613 image, -n parent=1) against the directory tree the kernel showed.</summary>
public sealed class ParentPointerOracleTests
{
    private static string Show(byte[] name)
    {
        var text = Encoding.UTF8.GetString(name).Replace("\n", "\\n", StringComparison.Ordinal);
        return text.Length <= 24 ? text : $"{text[..20]}...({name.Length} bytes)";
    }

    [Fact]
    public void Every_link_has_a_parent_pointer_naming_its_directory_and_name()
    {
        var image = OracleImages.Ensure("mkfs613");
        var m = image.Manifest;
        var expected = new Dictionary<ulong, List<string>>();
        foreach (var dir in m.Entries.Where(e => e.IsDirectory))
        {
            foreach (var (name, ino) in dir.Children!)
            {
                if (!expected.TryGetValue(ino, out var list))
                    expected[ino] = list = [];
                list.Add($"{dir.Ino}/{Show(name)}");
            }
        }
        Assert.True(expected.Values.Any(v => v.Count == 3), "the image should have a file with three links");

        using var volume = XfsVolume.Open(image.ImagePath);
        var wrong = new List<string>();
        foreach (var (ino, links) in expected)
        {
            try
            {
                var got = new List<string>();
                foreach (var x in volume.ListXattrs(ino, includeParentPointers: true).Where(x => x.Namespace == XattrNamespace.Parent))
                {
                    if (!volume.TryGetXattr(ino, XattrNamespace.Parent, x.Name, out var value) || value.Length != 12)
                    {
                        got.Add($"TryGetXattr failed:{Show(x.Name)}");
                        continue;
                    }
                    got.Add($"{System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(value)}/{Show(x.Name)}");
                }
                if (!links.Order().SequenceEqual(got.Order()))
                    wrong.Add($"ino {ino}: expected [{string.Join(", ", links.Order())}], got [{string.Join(", ", got.Order())}]");
                if (volume.ListXattrs(ino).Any(x => x.Namespace == XattrNamespace.Parent))
                    wrong.Add($"ino {ino}: parent pointers listed without being asked for");
            }
            catch (XfsException ex)
            {
                wrong.Add($"ino {ino}: {ex.Message}");
            }
        }
        Assert.True(wrong.Count == 0, $"{wrong.Count} of {expected.Count} inodes wrong:\n{string.Join('\n', wrong.Take(30))}");
    }
}

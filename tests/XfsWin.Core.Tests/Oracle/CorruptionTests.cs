using XfsWin.TestSupport;
using XfsWin.Volume;
using Xunit;
using Xunit.Abstractions;

namespace XfsWin.Tests.Oracle;

/// <summary>
/// Damaged copies of real images: random metadata damage (xfs_db blocktrash) and targeted bad fields.
/// XfsWin must answer with <see cref="XfsException"/> (corruption as <see cref="XfsCorruptionException"/>
/// naming the structure and its address), never another exception, a hang, or (on CRC volumes) data
/// that differs from the kernel's without an error.
/// </summary>
public sealed class CorruptionTests(ITestOutputHelper output) : IDisposable
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(60);
    private readonly DirectoryInfo _dir = Directory.CreateTempSubdirectory("xfswin-corrupt.");

    public void Dispose() => _dir.Delete(recursive: true);

    private string Copy(OracleImage image, string suffix) => OracleImages.CopyTo(image, _dir.FullName, $"{image.Name}-{suffix}.img");

    private sealed record WalkOutcome(XfsException? OpenError, TreeComparison? Comparison, bool Healthy);

    private static WalkOutcome Walk(string path, OracleImage image) =>
        Watchdog.Run(Limit, $"walking {Path.GetFileName(path)}", () =>
        {
            XfsVolume volume;
            try
            {
                volume = XfsVolume.Open(path);
            }
            catch (XfsException ex)
            {
                return new WalkOutcome(ex, null, false);
            }
            using (volume)
            {
                var r = TreeComparer.Compare(volume, image.Manifest, new TreeComparisonOptions { DirectoryFileTypes = image.DirectoryFileTypes });
                return new WalkOutcome(null, r, volume.IsHealthy);
            }
        });

    /// <summary>The rules every damaged volume must follow; returns the XfsExceptions seen.</summary>
    private static List<XfsException> AssertOnlyXfsErrors(WalkOutcome o, string imagePath, bool requireNoSilentDifferences)
    {
        var length = new FileInfo(imagePath).Length;
        var errors = new List<XfsException>();
        if (o.OpenError is not null)
        {
            errors.Add(o.OpenError);
        }
        else
        {
            var r = o.Comparison!;
            var foreign = r.Differences.Where(d => d.Error is not null and not XfsException).ToList();
            Assert.True(foreign.Count == 0,
                "exceptions other than XfsException:\n" + string.Join('\n', foreign.Take(20).Select(d => $"{d}\n{d.Error!.StackTrace}")));
            if (requireNoSilentDifferences)
            {
                var silent = r.Differences.Where(d => d.Error is null).ToList();
                Assert.True(silent.Count == 0,
                    "data differs from the kernel's without an error (CRC-protected volume):\n" + string.Join('\n', silent.Take(50)));
            }
            errors.AddRange(r.Differences.Select(d => d.Error).OfType<XfsException>());
            if (errors.Count > 0)
                Assert.False(o.Healthy, "the volume reported corruption but still says it is healthy");
        }
        foreach (var e in errors)
        {
            Assert.False(string.IsNullOrWhiteSpace(e.Message));
            if (e.Error == XfsError.Corrupt)
            {
                var c = Assert.IsType<XfsCorruptionException>(e);
                Assert.False(string.IsNullOrWhiteSpace(c.Structure), c.Message);
                Assert.InRange(c.ByteOffset, 0, length - 1);
            }
        }
        return errors;
    }

    [Theory]
    [InlineData("rmap-nrext64", 1)]
    [InlineData("rmap-nrext64", 2)]
    [InlineData("rmap-nrext64", 3)]
    [InlineData("rmap-nrext64", 4)]
    [InlineData("b1k", 5)]
    [InlineData("b1k", 6)]
    [InlineData("mkfs613", 7)]
    [InlineData("v4", 8)]
    [InlineData("v4", 9)]
    public void Random_metadata_damage_gives_only_xfs_errors(string name, int seed)
    {
        var image = OracleImages.Ensure(name);
        var copy = Copy(image, $"trash{seed}");
        XfsDb.Write(copy, image.XfsprogsVersion, "blockget", $"blocktrash -n 20 -s {seed} -3");
        Assert.NotEqual(0, Shell.Run(image.Tool("xfs_repair"), "-n", copy).ExitCode); // the damage is real

        var outcome = Walk(copy, image);
        // V5 metadata is CRC-protected: any damaged block the walk reads must be noticed.
        // V4 has no CRCs, so only "no crash, no hang, only XfsException" holds there.
        var errors = AssertOnlyXfsErrors(outcome, copy, requireNoSilentDifferences: !name.StartsWith("v4", StringComparison.Ordinal));
        output.WriteLine(outcome.OpenError is not null
            ? $"open refused: {outcome.OpenError.Message}"
            : $"{outcome.Comparison!.EntriesCompared} entries walked, {errors.Count} XfsException(s), {outcome.Comparison.TotalDifferences - errors.Count} silent difference(s)");
        foreach (var e in errors.Take(5))
            output.WriteLine("  " + e.Message);
    }

    [Fact]
    public void Inode_with_an_impossible_data_fork_format_is_reported_with_its_address()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var victim = image.Manifest.Get("/files/size-4097");
        var copy = Copy(image, "format9");
        var daddr = XfsDb.Daddr(copy, image.XfsprogsVersion, $"inode {victim.Ino}");
        XfsDb.Write(copy, image.XfsprogsVersion, $"inode {victim.Ino}", "write -d core.format 9");

        var outcome = Walk(copy, image);
        Assert.Null(outcome.OpenError);
        var errors = AssertOnlyXfsErrors(outcome, copy, requireNoSilentDifferences: true);
        var mine = outcome.Comparison!.Differences.Where(d => d.Path == victim.Printable && d.Error is XfsCorruptionException).ToList();
        Assert.True(mine.Count > 0, $"no corruption error for {victim.Printable}: {outcome.Comparison.Format()}");
        var ex = (XfsCorruptionException)mine[0].Error!;
        Assert.InRange(ex.ByteOffset, daddr * 512 - 65536, daddr * 512 + 65536);
        Assert.NotEmpty(errors);
    }

    /// <summary>
    /// The first lookup in a directory reads its children's inodes ahead and decodes them in the
    /// background. A damaged one is neither cached nor reported there: the volume stays healthy
    /// until someone asks for that inode, who gets the error with its address.
    /// </summary>
    [Fact]
    public void A_damaged_inode_decoded_ahead_is_reported_only_to_whoever_asks_for_it()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var dir = image.Manifest.Get("/dirs/node");
        var (victimName, victimIno) = dir.Children![^1];
        var copy = Copy(image, "readahead-inode");
        var daddr = XfsDb.Daddr(copy, image.XfsprogsVersion, $"inode {victimIno}");
        XfsDb.Write(copy, image.XfsprogsVersion, $"inode {victimIno}", "write -d core.format 9");

        Watchdog.Run(Limit, "looking up beside a damaged inode", () =>
        {
            using var volume = XfsVolume.Open(copy);
            var (firstName, firstIno) = dir.Children[0];
            Assert.True(volume.TryLookup(dir.Ino, firstName, out var found));
            Assert.Equal(firstIno, found);
            Assert.True(volume.WaitForReadAhead(TimeSpan.FromSeconds(30)));
            Assert.True(volume.IsInodeCached(dir.Children[1].Ino), "the children were not decoded ahead");
            Assert.False(volume.IsInodeCached(victimIno));
            Assert.True(volume.IsHealthy, "the read-ahead reported damage nobody asked about");

            Assert.True(volume.TryLookup(dir.Ino, victimName, out var victim));
            var ex = Assert.Throws<XfsCorruptionException>(() => volume.GetAttributes(victim));
            Assert.InRange(ex.ByteOffset, daddr * 512 - 65536, daddr * 512 + 65536);
            Assert.False(volume.IsHealthy);
            return ex;
        });
    }

    [Fact]
    public void Directory_block_with_a_bad_magic_is_reported_with_its_address()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var dir = image.Manifest.Get("/dirs/leaf");
        var copy = Copy(image, "dirmagic");
        var daddr = XfsDb.Daddr(copy, image.XfsprogsVersion, $"inode {dir.Ino}", "dblock 0");
        // The CRC is recomputed: only the structure check can catch this.
        XfsDb.Write(copy, image.XfsprogsVersion, $"inode {dir.Ino}", "dblock 0", "write -d dhdr.hdr.magic 0x12345678");

        var ex = Watchdog.Run(Limit, "listing the damaged directory", () =>
        {
            using var volume = XfsVolume.Open(copy);
            return Assert.Throws<XfsCorruptionException>(() => volume.ListDirectory(dir.Ino));
        });
        Assert.Equal(daddr * 512, ex.ByteOffset);
        AssertOnlyXfsErrors(Walk(copy, image), copy, requireNoSilentDifferences: true);
    }

    [Fact]
    public void Extent_btree_pointer_out_of_range_fails_the_read()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var file = image.Manifest.Get("/extents/many-extents");
        var copy = Copy(image, "bmbtptr");
        var fields = XfsDb.Fields(XfsDb.Run(copy, image.XfsprogsVersion, $"inode {file.Ino}", "print core.format"));
        Assert.Equal(3, XfsDb.Number(fields["core.format"])); // btree: the pointer exists
        XfsDb.Write(copy, image.XfsprogsVersion, $"inode {file.Ino}", "write -d u3.bmbt.ptrs[1] 0x7fffffffff");

        Watchdog.Run(Limit, "reading past a bad bmbt pointer", () =>
        {
            using var volume = XfsVolume.Open(copy);
            var buffer = new byte[1 << 20];
            var ex = Assert.ThrowsAny<XfsException>(() =>
            {
                for (long off = 0; off < file.Size; off += buffer.Length)
                    volume.Read(file.Ino, off, buffer);
            });
            Assert.True(ex.Error is XfsError.Corrupt, ex.ToString());
            return ex;
        });
        AssertOnlyXfsErrors(Walk(copy, image), copy, requireNoSilentDifferences: true);
    }

    [Fact]
    public void Directory_btree_node_pointing_to_itself_does_not_hang_lookups()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var dir = image.Manifest.Get("/dirs/node");
        var copy = Copy(image, "daloop");
        var leafOffset = (32L << 30) / image.Manifest.Get("/dirs/block").Size;
        var node = XfsDb.Fields(XfsDb.Run(copy, image.XfsprogsVersion, $"inode {dir.Ino}", $"dblock {leafOffset}", "print nhdr.info.hdr.magic"));
        Assert.Equal(0x3ebe, XfsDb.Number(node["nhdr.info.hdr.magic"]));
        XfsDb.Write(copy, image.XfsprogsVersion, $"inode {dir.Ino}", $"dblock {leafOffset}", $"write -d nbtree[0].before {leafOffset}");

        var (threw, wrong) = Watchdog.Run(Limit, "looking names up through a looping node", () =>
        {
            using var volume = XfsVolume.Open(copy);
            int t = 0;
            var w = new List<string>();
            foreach (var (name, ino) in dir.Children!)
            {
                try
                {
                    if (!volume.TryLookup(dir.Ino, name, out var got) || got != ino)
                        w.Add(System.Text.Encoding.UTF8.GetString(name));
                }
                catch (XfsException)
                {
                    t++;
                }
            }
            return (t, w);
        });
        Assert.True(threw > 0, "no lookup reached the looping node");
        Assert.True(wrong.Count == 0, $"lookups answered wrongly without an error: {string.Join(", ", wrong.Take(20))}");
    }

    [Fact]
    public void Extent_btree_node_pointing_to_itself_does_not_hang_reads()
    {
        var image = OracleImages.Ensure("default");
        var file = image.Manifest.Get("/extents/many-extents");
        var copy = Copy(image, "bmbtloop");
        var root = XfsDb.Fields(XfsDb.Run(copy, image.XfsprogsVersion, $"inode {file.Ino}", "print u3.bmbt.level u3.bmbt.ptrs[1]"));
        Assert.True(XfsDb.Number(root["u3.bmbt.level"]) >= 2, "the file's extent btree needs a node level for this test");
        var node = XfsDb.Number(root["u3.bmbt.ptrs[1]"]);
        XfsDb.Write(copy, image.XfsprogsVersion, $"inode {file.Ino}", "addr u3.bmbt.ptrs[1]", $"write -d ptrs[1] {node}");

        var ex = Watchdog.Run(Limit, "reading through a looping extent btree", () =>
        {
            using var volume = XfsVolume.Open(copy);
            var buffer = new byte[1 << 20];
            return Assert.ThrowsAny<XfsException>(() =>
            {
                for (long off = 0; off < file.Size; off += buffer.Length)
                    volume.Read(file.Ino, off, buffer);
            });
        });
        Assert.Equal(XfsError.Corrupt, ex.Error);
    }

    private static XfsException OpenFails(string path) =>
        Watchdog.Run(Limit, "opening " + Path.GetFileName(path), () =>
        {
            try
            {
                using var v = XfsVolume.Open(path);
            }
            catch (XfsException ex)
            {
                return ex;
            }
            throw new Xunit.Sdk.XunitException($"{path} opened although it must be refused");
        });

    private void SetIncompat(OracleImage image, string copy, long bits)
    {
        var current = XfsDb.Number(XfsDb.Fields(XfsDb.Run(copy, image.XfsprogsVersion, "sb 0", "print features_incompat"))["features_incompat"]);
        XfsDb.Write(copy, image.XfsprogsVersion, "sb 0", $"write -d features_incompat 0x{current | bits:x}");
    }

    [Fact]
    public void Unknown_incompatible_feature_is_refused_with_a_clear_message()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var copy = Copy(image, "incompat");
        SetIncompat(image, copy, 1L << 28);
        var ex = OpenFails(copy);
        Assert.Equal(XfsError.Unsupported, ex.Error);
        Assert.Contains("feature", ex.Message, StringComparison.OrdinalIgnoreCase);
    }

    [Fact]
    public void Needsrepair_volume_is_refused_and_points_to_xfs_repair()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var copy = Copy(image, "needsrepair");
        SetIncompat(image, copy, 1L << 4); // XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR
        var ex = OpenFails(copy);
        Assert.Equal(XfsError.NeedsRepair, ex.Error);
        Assert.Contains("xfs_repair", ex.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Bad_superblock_magic_and_zeroed_file_are_not_xfs()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var copy = Copy(image, "sbmagic");
        XfsDb.Write(copy, image.XfsprogsVersion, "sb 0", "write -d magicnum 0x41424344");
        Assert.Equal(XfsError.NotXfs, OpenFails(copy).Error);

        var zeros = Path.Combine(_dir.FullName, "zeros.img");
        using (var f = File.Create(zeros))
            f.SetLength(64L << 20);
        Assert.Equal(XfsError.NotXfs, OpenFails(zeros).Error);
    }

    [Fact]
    public void Truncated_image_never_reads_as_zeros()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var copy = Copy(image, "truncated");
        using (var f = new FileStream(copy, FileMode.Open, FileAccess.Write))
            f.SetLength(f.Length / 4);
        AssertOnlyXfsErrors(Walk(copy, image), copy, requireNoSilentDifferences: true);
    }
}

using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Tests.Oracle;

/// <summary>
/// Self-tests of the oracle harness: the images hold what the read-path tests rely on, the manifests
/// agree with the kernel and xfs_db, and loop mounts clean up after themselves.
/// </summary>
public sealed class OracleHarnessTests
{
    [Fact]
    public void Default_image_has_the_100k_directory_and_the_10k_extent_file()
    {
        var image = OracleImages.Ensure("default");
        var m = image.Manifest;
        Assert.Equal("kernel", m.Source);
        var bigDir = m.Get("/extents/big-dir");
        Assert.Equal("dir", bigDir.Type);
        Assert.True(bigDir.Children!.Count >= 100_000, $"big-dir has {bigDir.Children!.Count} entries");
        var many = m.Get("/extents/many-extents");
        Assert.Equal("file", many.Type);
        var core = XfsDb.Fields(XfsDb.Run(image, $"inode {many.Ino}", "print core.format core.nextents u3.bmbt.level"));
        Assert.True(XfsDb.Number(core["core.nextents"]) >= 10_000, $"many-extents has {core["core.nextents"]} extents");
        Assert.True(m.Entries.Count > 110_000, $"{m.Entries.Count} manifest entries");
    }

    [Fact]
    public void Default_manifest_records_links_times_owners_devices_and_xattrs()
    {
        var m = OracleImages.Ensure("default").Manifest;
        var original = m.Get("/links/original");
        Assert.Equal(3u, original.Nlink);
        Assert.Equal(original.Ino, m.Get("/links/sub/third").Ino);
        Assert.Equal(original.Sha256, m.Get("/links/second").Sha256);

        var pre = m.Get("/times/pre-1970");
        Assert.Equal(new ManifestTime(-1, 1), pre.Mtime);
        Assert.Equal(new ManifestTime(-1_234_567_890, 500_000_000), pre.Atime);
        Assert.Equal(new ManifestTime(2_147_483_648, 1), m.Get("/times/post-2038").Mtime);
        Assert.Equal(new ManifestTime(16_000_000_000, 0), m.Get("/times/far-future").Mtime);
        Assert.NotNull(pre.Btime);

        Assert.Equal(4_000_000_000u, m.Get("/owners/u4e9").Uid);
        var dev = m.Get("/special/bigdev");
        Assert.Equal((300u, 70000u), (dev.RdevMajor, dev.RdevMinor));
        Assert.Equal("socket", m.Get("/special/socket").Type);

        var odd = m.Entries.Where(e => e.Path.AsSpan().StartsWith("names/"u8)).ToList();
        byte[] invalidUtf8 = [.. "names/invalid-"u8, 0xff, 0xfe];
        Assert.Contains(odd, e => e.Path.AsSpan().SequenceEqual(invalidUtf8));
        Assert.Contains(odd, e => e.Path.Length == "names/".Length + 255 && e.Path[^1] == (byte)'n');
        Assert.Contains(odd, e => e.Printable.Contains("new\\nline", StringComparison.Ordinal));

        Assert.Equal(1023, m.Get("/symlinks/remote-max-1023").Target!.Length);
        Assert.Equal(2000, m.Get("/xattrs/node").Xattrs.Count);
        Assert.Equal(65536, m.Get("/xattrs/remote").Xattrs["user.remote-64k"].Length);
        Assert.True(m.Get("/xattrs/namespaces").Xattrs.ContainsKey("trusted.secret"));
        Assert.True(m.Get("/xattrs/acl-dir").Xattrs.ContainsKey("system.posix_acl_default"));
    }

    [Fact]
    public void Acl_values_in_linux_and_on_disk_form_describe_the_same_acl()
    {
        // The kernel (as root) shows each ACL both ways; the comparer relies on reading both.
        var x = OracleImages.Ensure("default").Manifest.Get("/xattrs/acl-file").Xattrs;
        var linux = PosixAcl.Describe(x["system.posix_acl_access"]);
        var disk = PosixAcl.Describe(x["trusted.SGI_ACL_FILE"]);
        Assert.NotNull(linux);
        Assert.Equal(linux, disk);
        Assert.Contains("2:7:1000", linux, StringComparison.Ordinal);          // user:1000:rwx
        Assert.Contains("2:4:4000000000", linux, StringComparison.Ordinal);    // user:4000000000:r
        Assert.NotEqual(x["system.posix_acl_access"], x["trusted.SGI_ACL_FILE"]);
    }

    [Fact]
    public void Kernel_manifest_matches_a_fresh_read_only_mount()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var outFile = Path.Combine(Directory.CreateTempSubdirectory("xfswin-manifest.").FullName, "m.json");
        string mountPoint;
        using (var mount = LoopMount.Mount(image.ImagePath, readOnly: true))
        {
            mountPoint = mount.MountPoint;
            Assert.True(LoopMount.IsMounted(mountPoint));
            Shell.RunChecked("python3", Path.Combine(OracleImages.ScriptsDirectory, "manifest.py"), mount.MountPoint, outFile);
        }
        Assert.False(LoopMount.IsMounted(mountPoint));
        Assert.False(Directory.Exists(mountPoint));
        var again = KernelManifest.Load(outFile);
        var cached = image.Manifest;
        Assert.Equal(cached.Entries.Count, again.Entries.Count);
        for (var i = 0; i < cached.Entries.Count; i++)
        {
            var (a, b) = (cached.Entries[i], again.Entries[i]);
            Assert.Equal(a.Printable, b.Printable);
            Assert.Equal((a.Ino, a.Mode, a.Size, a.Mtime, a.Atime, a.Sha256), (b.Ino, b.Mode, b.Size, b.Mtime, b.Atime, b.Sha256));
        }
        Directory.Delete(Path.GetDirectoryName(outFile)!, recursive: true);
    }

    [Fact]
    public void Loop_mount_is_released_even_when_the_body_throws()
    {
        // A private copy: other tests may mount the shared image (and reuse loop numbers) meanwhile.
        var dir = Directory.CreateTempSubdirectory("xfswin-loop.");
        try
        {
            var copy = OracleImages.CopyTo(OracleImages.Ensure("b1k"), dir.FullName);
            string? mountPoint = null;
            Assert.Throws<InvalidOperationException>((Action)(() =>
            {
                using var mount = LoopMount.Mount(copy, readOnly: true);
                mountPoint = mount.MountPoint;
                Assert.Contains(copy, Shell.RunChecked("losetup", "-j", copy).StandardOutput, StringComparison.Ordinal);
                throw new InvalidOperationException("test body failed");
            }));
            Assert.NotNull(mountPoint);
            Assert.False(LoopMount.IsMounted(mountPoint!));
            Assert.False(Directory.Exists(mountPoint));
            Assert.Equal("", Shell.RunChecked("losetup", "-j", copy).StandardOutput.Trim());
        }
        finally
        {
            dir.Delete(recursive: true);
        }
    }

    [Theory]
    [InlineData("default", "CRC,FTYPE,FINOBT,SPARSE_INODES,REFLINK,INOBTCNT,BIGTIME", "RMAPBT,NREXT64,PARENT,METADIR", 4096, 4096)]
    [InlineData("rmap-nrext64", "CRC,RMAPBT,NREXT64", "PARENT,METADIR", 4096, 4096)]
    [InlineData("b1k", "CRC", "", 1024, 4096)]
    [InlineData("b64k", "CRC", "", 65536, 65536)]
    [InlineData("dir64k", "CRC", "", 4096, 65536)]
    [InlineData("mkfs613", "CRC,RMAPBT,NREXT64,EXCHANGE,PARENT,METADIR", "", 4096, 4096)]
    [InlineData("v4", "FTYPE", "CRC,BIGTIME", 4096, 4096)]
    [InlineData("v4-ftype0", "", "CRC,FTYPE", 4096, 4096)]
    public void Image_has_the_features_its_name_promises(string name, string present, string absent, int blockSize, int dirBlockSize)
    {
        var image = OracleImages.Ensure(name);
        var version = XfsDb.Run(image, "version");
        var features = version[(version.IndexOf('=', StringComparison.Ordinal) + 1)..].Trim().Split(',').ToHashSet();
        foreach (var f in present.Split(',', StringSplitOptions.RemoveEmptyEntries))
            Assert.True(features.Contains(f), $"{name} lacks {f}: {version}");
        foreach (var f in absent.Split(',', StringSplitOptions.RemoveEmptyEntries))
            Assert.False(features.Contains(f), $"{name} has {f}: {version}");
        Assert.Equal(name.StartsWith("v4", StringComparison.Ordinal), !features.Contains("V5"));
        var sb = XfsDb.Fields(XfsDb.Run(image, "sb 0", "print blocksize dirblklog"));
        Assert.Equal(blockSize, XfsDb.Number(sb["blocksize"]));
        Assert.Equal(dirBlockSize, blockSize << (int)XfsDb.Number(sb["dirblklog"]));
        Assert.Equal(image.XfsprogsVersion == "6.13", name == "mkfs613");
    }

    [Theory]
    [MemberData(nameof(ReadPathOracleTests.Images), MemberType = typeof(ReadPathOracleTests))]
    public void Every_image_is_built_checked_and_described(string name)
    {
        var image = OracleImages.Ensure(name);
        Assert.True(new FileInfo(image.ImagePath).Length >= 512L << 20);
        var m = image.Manifest;
        Assert.Equal(name.StartsWith("v4", StringComparison.Ordinal) ? "protofile" : "kernel", m.Source);
        Assert.True(m.Entries.Count > 3000, $"{name}: only {m.Entries.Count} entries");
        Assert.Equal(m.Root.Ino, ulong.Parse(XfsDb.Fields(XfsDb.Run(image, "sb 0", "print rootino"))["rootino"], System.Globalization.CultureInfo.InvariantCulture));
        var versionNum = XfsDb.Fields(XfsDb.Run(image, "sb 0", "print versionnum"))["versionnum"];
        Assert.Equal(name.StartsWith("v4", StringComparison.Ordinal) ? 4 : 5, (int)(XfsDb.Number(versionNum) & 0xF));
        Assert.Equal(0, Shell.Run(image.Tool("xfs_repair"), "-n", image.ImagePath).ExitCode);
    }
}

/// <summary>The comparer itself: every field it claims to compare must be able to fail.</summary>
public sealed class TreeComparerSelfTests
{
    [Fact]
    public void Every_altered_field_is_reported_with_its_path()
    {
        var image = OracleImages.Ensure("rmap-nrext64");
        var m = image.Manifest;
        var file = m.Get("/files/size-4097");
        var link = m.Get("/symlinks/remote-1000");
        var dev = m.Get("/special/bigdev");
        var xa = m.Get("/xattrs/leaf");
        var acl = m.Get("/xattrs/acl-file");
        var dir = m.Get("/dirs/block");
        var times = m.Get("/times/pre-1970");
        var xattrs = new Dictionary<string, byte[]>(xa.Xattrs) { ["user.leaf-005"] = [1, 2, 3] };
        xattrs.Remove("user.leaf-006");
        var aclX = new Dictionary<string, byte[]>(acl.Xattrs);
        var aclValue = (byte[])aclX["system.posix_acl_access"].Clone();
        aclValue[^6] ^= 1; // one permission bit of the last entry
        aclX["system.posix_acl_access"] = aclValue;
        var aclDisk = (byte[])aclX["trusted.SGI_ACL_FILE"].Clone(); // the comparer accepts either form: alter both
        aclDisk[^3] ^= 1;
        aclX["trusted.SGI_ACL_FILE"] = aclDisk;
        var children = dir.Children!.Skip(1).Append(("not-there"u8.ToArray(), 12345UL)).ToList();
        var altered = m.With(
        [
            file with { Mode = file.Mode ^ 1, Uid = file.Uid + 1, Size = file.Size + 1, Sha256 = new string('0', 64) },
            link with { Target = [.. link.Target!, (byte)'x'], Nlink = 2 },
            dev with { RdevMinor = 1 },
            xa with { Xattrs = xattrs },
            acl with { Xattrs = aclX },
            dir with { Children = children },
            times with { Mtime = new ManifestTime(-1, 2), Btime = times.Btime!.Value with { Seconds = 0 }, Atime = times.Atime!.Value with { Nanoseconds = 0 } },
        ]);

        using var volume = XfsWin.Volume.XfsVolume.Open(image.ImagePath);
        var r = TreeComparer.Compare(volume, altered);
        var got = r.Differences.Select(d => $"{d.Path}|{d.Field}").Order().ToList();
        string[] expected =
        [
            "/dirs/block/not-there|directory entry",
            "/dirs/block/not-there|lookup",
            $"/dirs/block/{System.Text.Encoding.UTF8.GetString(dir.Children![0].Name)}|directory entry",
            "/files/size-4097|bytes read until Read returned 0",
            "/files/size-4097|content sha256",
            "/files/size-4097|mode",
            "/files/size-4097|size",
            "/files/size-4097|uid",
            "/special/bigdev|rdev minor",
            "/symlinks/remote-1000|nlink",
            "/symlinks/remote-1000|symlink target",
            "/times/pre-1970|atime",
            "/times/pre-1970|crtime",
            "/times/pre-1970|mtime",
            "/xattrs/acl-file|xattr system.posix_acl_access (ACL)",
            "/xattrs/leaf|xattr user.leaf-005 value",
            "/xattrs/leaf|xattr user.leaf-006",
        ];
        Assert.Equal(expected.Order().ToList(), got);
    }
}

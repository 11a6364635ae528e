using XfsWin.TestSupport;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// Every image of the shared oracle matrix (scripts/oracles/make-images.sh: V4 and V5, 1 KiB to
/// 64 KiB blocks, 64 KiB directory blocks, rmapbt + nrext64, parent pointers and metadir from
/// mkfs.xfs 6.13) mounted through FUSE: manifest.py over the mount must equal the image's manifest
/// (written by manifest.py over the kernel's own mount, or from the protofile for V4 volumes, which
/// this kernel cannot mount at all).
/// </summary>
public sealed class OracleImageFuseTests
{
    public static TheoryData<string> Images()
    {
        var data = new TheoryData<string>();
        foreach (var name in OracleImages.All)
            data.Add(name);
        return data;
    }

    [Theory]
    [MemberData(nameof(Images))]
    public void Fuse_mount_shows_the_oracle_manifest(string name)
    {
        var image = OracleImages.Ensure(name);
        using var f = new FuseMount(image.ImagePath);
        var actual = ManifestComparison.Take(f.MountPoint);
        var expected = image.Manifest;
        Assert.True(expected.Entries.Count > 10, $"{name}: the oracle manifest has only {expected.Entries.Count} entries");
        var diffs = ManifestComparison.Differences(expected, actual);
        Assert.True(diffs.Count == 0, $"{name} ({image.MkfsOptions}, manifest from {image.ManifestSource}):\n" + ManifestComparison.Format(diffs));
    }
}

/// <summary>SEEK_DATA / SEEK_HOLE through FUSE answer exactly what the kernel's own XFS answers.</summary>
public sealed class SeekDataHoleTests
{
    // Walks a file's data/hole map with lseek from every extent boundary it finds, the way
    // cp --sparse and tar --sparse do, and prints it; ENXIO ends a walk.
    private const string Walker = """
        import os, sys, errno
        root = sys.argv[1]
        for rel in sys.argv[2:]:
            p = os.path.join(root, rel)
            fd = os.open(p, os.O_RDONLY)
            size = os.fstat(fd).st_size
            out = []
            for start in sorted({0, 1, 4095, 4096, size // 3, size // 2, max(size - 1, 0), size, size + 4096}):
                for whence, tag in ((os.SEEK_DATA, "D"), (os.SEEK_HOLE, "H")):
                    try:
                        out.append(f"{tag}{start}={os.lseek(fd, start, whence)}")
                    except OSError as e:
                        out.append(f"{tag}{start}=E{errno.errorcode[e.errno]}")
            pos = 0
            while True:
                try:
                    d = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:
                    break
                h = os.lseek(fd, d, os.SEEK_HOLE)
                out.append(f"[{d},{h})")
                pos = h
            os.close(fd)
            print(rel, " ".join(out))
        """;

    [Fact]
    public void Seek_data_and_seek_hole_match_the_kernel()
    {
        var image = OracleImages.Ensure("default");
        string[] files = ["sparse/holes", "sparse/hole-only", "sparse/prealloc", "sparse/prealloc-partial",
                          "sparse/prealloc-beyond-eof", "extents/many-extents"];
        foreach (var f in files)
            Assert.NotNull(image.Manifest.Get("/" + f));
        var script = Path.Combine(Shell.MakeTempDirectory("xfswin-seek"), "walk.py");
        File.WriteAllText(script, Walker);
        string kernel;
        using (var k = LoopMount.Mount(image.ImagePath, readOnly: true))
            kernel = Shell.Run("python3", [script, k.MountPoint, .. files]).Stdout;
        string fuse;
        using (var m = new FuseMount(image.ImagePath))
            fuse = Shell.Run("python3", [script, m.MountPoint, .. files]).Stdout;
        Assert.Contains("[", kernel);
        Assert.Equal(files.Length, kernel.Split('\n', StringSplitOptions.RemoveEmptyEntries).Length);
        Assert.Equal(kernel, fuse);
    }
}

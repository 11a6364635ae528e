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

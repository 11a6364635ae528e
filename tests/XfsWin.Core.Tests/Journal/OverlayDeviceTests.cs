using Xunit;
using XfsWin.Device;

namespace XfsWin.Tests.Journal;

/// <summary>The copy-on-write overlay over a real file device.</summary>
public sealed class OverlayDeviceTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-overlay.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private string MakeFile(int bytes, out byte[] content)
    {
        content = new byte[bytes];
        new Random(42).NextBytes(content);
        string path = Path.Combine(_tmp, "base.img");
        File.WriteAllBytes(path, content);
        return path;
    }

    [Fact]
    public void WritesStayInMemoryUntilFlushed()
    {
        string path = MakeFile(1 << 20, out var original);
        using var dev = FileBlockDevice.Open(path, writable: true, unbuffered: false);
        using var overlay = new OverlayDevice(dev);
        var patch = new byte[1000];
        Array.Fill(patch, (byte)0xAB);
        overlay.Write(7800, patch);                      // straddles pages 1 and 2, unaligned
        overlay.Write(100_000, patch.AsSpan(0, 512));    // another page

        var read = new byte[20_000];
        overlay.Read(0, read);
        var expected = original.AsSpan(0, 20_000).ToArray();
        patch.CopyTo(expected, 7800);
        Assert.Equal(expected, read);
        Assert.Equal(original, File.ReadAllBytes(path));
        Assert.Equal(new[] { (4096L, 8192L), (98304L, 4096L) }, overlay.DirtyRanges());

        long reported = 0;
        overlay.FlushTo(dev, (done, total) => reported = total);
        Assert.Equal(3 * 4096, reported);
        var after = File.ReadAllBytes(path);
        var want = (byte[])original.Clone();
        patch.CopyTo(want, 7800);
        patch.AsSpan(0, 512).CopyTo(want.AsSpan(100_000));
        Assert.Equal(want, after);
    }

    [Fact]
    public void PrefetchedPagesAreReadFromMemoryAndNeverFlushedUnlessWritten()
    {
        string path = MakeFile(1 << 20, out var original);
        using var dev = FileBlockDevice.Open(path, writable: true, unbuffered: false);
        using var overlay = new OverlayDevice(dev);
        overlay.Prefetch([(8192, 3 * 4096), (500_000, 100)]);
        Assert.Empty(overlay.DirtyRanges());
        // Change the base behind the overlay: prefetched pages keep the old bytes, others show the new ones.
        var zeros = new byte[4096];
        dev.Write(8192, zeros);
        dev.Write(0, zeros);
        var page = new byte[4096];
        overlay.Read(8192, page);
        Assert.Equal(original.AsSpan(8192, 4096).ToArray(), page);
        overlay.Read(0, page);
        Assert.Equal(zeros, page);
        overlay.Write(12288 + 10, new byte[] { 1, 2, 3 });
        Assert.Equal(new[] { (12288L, 4096L) }, overlay.DirtyRanges());
        overlay.Read(12288, page);
        Assert.Equal(original.AsSpan(12288, 10).ToArray(), page.AsSpan(0, 10).ToArray());
        Assert.Equal(new byte[] { 1, 2, 3 }, page.AsSpan(10, 3).ToArray());
        overlay.DropCleanPages();
        overlay.Read(8192, page);
        Assert.Equal(zeros, page);
    }

    [Fact]
    public void AccessPastTheEndIsAnError()
    {
        string path = MakeFile(64 * 1024, out _);
        using var dev = FileBlockDevice.Open(path, writable: false, unbuffered: false);
        using var overlay = new OverlayDevice(dev);
        Assert.Throws<XfsException>(() => overlay.Read(64 * 1024 - 10, new byte[20]));
        Assert.Throws<XfsException>(() => overlay.Write(-1, new byte[1]));
        Assert.Throws<XfsException>(() => overlay.FlushTo(dev, null)); // read-only target
    }
}

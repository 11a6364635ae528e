namespace XfsWin.Fuse.Tests;

/// <summary>
/// The kernel keeps the listings of small directories only (see FuseHost.CachesListing): a second
/// listing of a small directory asks this server nothing, one of a big directory asks again, and
/// both list what the kernel's XFS lists.
/// </summary>
public sealed class ListingCacheTests
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    [Theory]
    [InlineData(60, 4096, true)]      // short-form directory: entries in the inode
    [InlineData(4096, 4096, true)]    // block directory: one directory block
    [InlineData(8192, 4096, false)]   // leaf or node directory
    [InlineData(8192, 8192, true)]    // one 8 KiB directory block (mkfs -n size=8k)
    [InlineData(20480, 8192, false)]
    public void Only_listings_that_fit_in_the_inode_or_one_directory_block_are_kept_by_the_kernel(long size, int directoryBlockSize, bool cached)
    {
        Assert.Equal(cached, FuseHost.CachesListing(size, directoryBlockSize));
    }

    [Fact]
    public void A_small_listing_is_asked_for_once_and_a_big_one_every_time_and_both_match_the_kernel()
    {
        const string small = "dirs/block";  // 60 entries: one directory block
        const string big = "dirs/node";     // 6000 entries: a node directory
        string kernelSmall, kernelBig;
        using (var k = new KernelMount(TestImages.Tree))
        {
            Assert.Equal("4096", Shell.Bash($"stat -c %s {Q(Path.Combine(k.MountPoint, small))}").Trim());
            Assert.True(long.Parse(Shell.Bash($"stat -c %s {Q(Path.Combine(k.MountPoint, big))}").Trim()) > 4096);
            kernelSmall = List(k.MountPoint, small);
            kernelBig = List(k.MountPoint, big);
        }
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { IoUring = false });

        var before = m.Host.ListingRequests;
        Assert.Equal(kernelSmall, List(m.MountPoint, small));
        var afterFirst = m.Host.ListingRequests;
        Assert.True(afterFirst > before, "the first listing of the small directory asked nothing");
        Assert.Equal(kernelSmall, List(m.MountPoint, small));
        Assert.Equal(afterFirst, m.Host.ListingRequests);

        Assert.Equal(kernelBig, List(m.MountPoint, big));
        var afterBig = m.Host.ListingRequests;
        Assert.True(afterBig > afterFirst + 1, $"the 6000 entries came in {afterBig - afterFirst} request(s)");
        Assert.Equal(kernelBig, List(m.MountPoint, big));
        Assert.True(m.Host.ListingRequests - afterBig == afterBig - afterFirst,
            $"the second listing of the big directory took {m.Host.ListingRequests - afterBig} requests, the first {afterBig - afterFirst}");
    }

    private static string List(string mountPoint, string directory) =>
        Shell.Bash($"ls -fa {Q(Path.Combine(mountPoint, directory))} | LC_ALL=C sort");
}

/// <summary>
/// What the kernel keeps between opens follows the mount's mode (see FuseHost.FileOpenBits and
/// FuseHost.DirectoryOpenBits): file pages and small directories' listings on a read-only mount,
/// where nothing can change them; neither on a read-write mount, where a kept copy could be older
/// than a change.
/// </summary>
public sealed class MountModeCachingTests
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    [Theory]
    [InlineData(true, 60, 4096, true)]
    [InlineData(true, 8192, 4096, false)]
    [InlineData(false, 60, 4096, false)]
    [InlineData(false, 8192, 4096, false)]
    public void Listings_are_kept_on_read_only_mounts_only(bool readOnly, long size, int directoryBlockSize, bool kept)
    {
        var bits = FuseHost.DirectoryOpenBits(readOnly, size, directoryBlockSize);
        Assert.Equal(kept, (bits & Interop.FuseFileInfo.CacheReaddirBit) != 0);
        Assert.Equal(kept, (bits & Interop.FuseFileInfo.KeepCacheBit) != 0);
    }

    [Theory]
    [InlineData(true, true)]
    [InlineData(false, false)]
    public void File_pages_are_kept_across_opens_on_read_only_mounts_only(bool readOnly, bool kept)
    {
        Assert.Equal(kept, (FuseHost.FileOpenBits(readOnly) & Interop.FuseFileInfo.KeepCacheBit) != 0);
    }

    /// <summary>
    /// Through the kernel: a small directory listed twice asks this server once on a read-only
    /// mount and twice on a read-write one; a file read whole keeps its pages in the kernel's cache
    /// across the next open on a read-only mount, and loses them at that open on a read-write one
    /// (fincore opens the file to look). Writing is refused on both (the volume is opened read-only).
    /// </summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void The_kernel_keeps_listings_and_pages_on_a_read_only_mount_and_not_on_a_read_write_one(bool readOnly)
    {
        using var m = new InProcessMount(TestImages.Tree, new FuseMountOptions { ReadOnly = readOnly });
        var options = File.ReadLines("/proc/self/mountinfo").Single(l => l.Split(' ')[4] == m.MountPoint).Split(' ')[5].Split(',');
        Assert.Equal(readOnly ? "ro" : "rw", options[0]);

        var directory = Path.Combine(m.MountPoint, "dirs/block");
        var before = m.Host.ListingRequests;
        var first = Shell.Bash($"ls -fa {Q(directory)} | LC_ALL=C sort");
        var afterFirst = m.Host.ListingRequests;
        Assert.True(afterFirst > before, "the first listing asked nothing");
        Assert.Equal(first, Shell.Bash($"ls -fa {Q(directory)} | LC_ALL=C sort"));
        Assert.Equal(readOnly ? afterFirst : afterFirst + (afterFirst - before), m.Host.ListingRequests);

        var file = Path.Combine(m.MountPoint, "random.bin");
        var size = new FileInfo(file).Length;
        Shell.Bash($"cat {Q(file)} > /dev/null");
        var resident = long.Parse(Shell.Bash($"fincore --bytes --noheadings --output RES {Q(file)}").Trim(), System.Globalization.CultureInfo.InvariantCulture);
        if (readOnly)
            Assert.True(resident >= size, $"{resident} of {size} bytes stayed in the page cache across an open of a read-only mount");
        else
            Assert.True(resident == 0, $"{resident} bytes stayed in the page cache across an open of a read-write mount");

        var write = Shell.Run("bash", ["-c", $"echo x >> {Q(Path.Combine(m.MountPoint, "small.txt"))}"]);
        Assert.NotEqual(0, write.ExitCode);
        Assert.Contains("Read-only file system", write.Stderr, StringComparison.Ordinal);
    }
}

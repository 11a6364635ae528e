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

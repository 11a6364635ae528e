using Xunit;
using XfsWin.Extents;
using XfsWin.Format;

namespace XfsWin.Tests.Allocation;

/// <summary>
/// <see cref="ExtentSizeHint.Align"/> (xfs_bmap_extsize_align) on the requests of ExtentSizeHintTests (XfsWin.Fuse.Tests),
/// in 4 KiB blocks; the expected allocations are what the kernel's extent maps of the same writes show before their
/// blocks past EOF are given back. Every result must cover the request and stay between the neighbouring extents.
/// </summary>
public sealed class ExtentSizeHintTests
{
    private const ulong None = ulong.MaxValue;

    [Theory]
    // 4 KiB at 100 KiB, 1 MiB hint, empty file: the whole first MiB.
    [InlineData(25, 1, 256, 0, None, 0, 256)]
    // 8 KiB at 60 KiB across a 64 KiB boundary: two hints.
    [InlineData(15, 2, 16, 0, None, 0, 32)]
    // Far past EOF: the hint holding the block.
    [InlineData(769, 1, 256, 0, None, 768, 256)]
    // After an extent that ends off a boundary (a truncated file): from its end, a whole hint long.
    [InlineData(7, 2, 16, 5, None, 5, 16)]
    // A hole smaller than a hint between two extents: the hole.
    [InlineData(35, 1, 16, 34, 36, 34, 2)]
    // A next extent inside the rounded-out range: the range moves down to end at it.
    [InlineData(40, 1, 16, 20, 44, 28, 16)]
    // A request that fills its hint already.
    [InlineData(64, 16, 16, 0, None, 64, 16)]
    // A hint of a size other than a power of two.
    [InlineData(10, 1, 3, 0, None, 9, 3)]
    public void Rounds_out_as_the_kernel(ulong offset, ulong length, uint hint, ulong previousEnd, ulong nextStart, ulong expectOffset, ulong expectLength)
    {
        var (o, l) = ExtentSizeHint.Align(offset, length, hint, previousEnd, nextStart);
        Assert.Equal((expectOffset, expectLength), (o, l));
        Assert.True(o <= offset && o + l >= offset + length, "the allocation covers the request");
        Assert.True(o >= previousEnd && (nextStart == None || o + l <= nextStart), "the allocation stays in its hole");
    }

    [Fact]
    public void Never_asks_for_more_than_one_extent_record_holds()
    {
        const uint hint = 1u << 20;
        var (o, l) = ExtentSizeHint.Align(hint - 1, 2, hint, 0, None);
        Assert.True(l <= BmbtRecord.MaxBlockCount);
        Assert.Equal((0UL, (ulong)hint), (o, l));
    }

    [Fact]
    public void Without_a_hint_the_request_is_the_allocation()
    {
        Assert.Equal((7UL, 3UL), ExtentSizeHint.Align(7, 3, 0, 0, None));
    }
}

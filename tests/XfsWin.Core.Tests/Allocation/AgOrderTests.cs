using Xunit;
using XfsWin.Allocation;

namespace XfsWin.Tests.Allocation;

public sealed class AgOrderTests
{
    [Fact]
    public void Deferred_items_are_sorted_by_AG_keeping_their_queued_order_within_an_AG()
    {
        var rng = new Random(7);
        for (int round = 0; round < 200; round++)
        {
            const int AgBlkLog = 16;
            var items = new List<ExtentToFree>();
            int count = rng.Next(0, 40);
            for (int i = 0; i < count; i++)
                items.Add(new ExtentToFree(((ulong)(uint)rng.Next(4) << AgBlkLog) | (uint)rng.Next(1 << AgBlkLog), (uint)i + 1, default));
            // LINQ's OrderBy is a stable sort: the order the kernel's list_sort gives too.
            var expected = items.OrderBy(e => e.StartBlock >> AgBlkLog).ToList();
            AgOrder.Sort(items, AgBlkLog);
            Assert.Equal(expected, items);
        }
    }
}

using Xunit;
using XfsWin.Journal;

namespace XfsWin.Tests.Journal;

/// <summary>
/// The memory a checkpoint's items format into: pieces are zeroed, never overlap until a reset, and after a reset the
/// same memory serves again (a steady stream of checkpoints allocates nothing for its formats).
/// </summary>
public sealed class LogFormatArenaTests
{
    [Fact]
    public void Pieces_are_zeroed_apart_and_the_same_memory_serves_after_a_reset()
    {
        var arena = new LogFormatArena();
        var pieces = new List<Memory<byte>>();
        // More than one 64 KiB block's worth, in sizes items take (formats, log dinodes, fork copies).
        int[] sizes = [24, 176, 16, 56, 100, 4];
        for (int i = 0; i < 2000; i++)
        {
            var piece = arena.Take(sizes[i % sizes.Length]);
            Assert.Equal(sizes[i % sizes.Length], piece.Length);
            Assert.All(piece.ToArray(), b => Assert.Equal(0, b));
            piece.Span.Fill((byte)(i % 251 + 1));
            pieces.Add(piece);
        }
        // Every piece still holds what was written into it: none overlaps another.
        for (int i = 0; i < pieces.Count; i++) Assert.All(pieces[i].ToArray(), b => Assert.Equal((byte)(i % 251 + 1), b));

        arena.Reset();
        var again = arena.Take(sizes[0]);
        Assert.True(System.Runtime.InteropServices.MemoryMarshal.TryGetArray<byte>(again, out var a));
        Assert.True(System.Runtime.InteropServices.MemoryMarshal.TryGetArray<byte>(pieces[0], out var first));
        Assert.Same(first.Array, a.Array);
        Assert.Equal(first.Offset, a.Offset);
        Assert.All(again.ToArray(), b => Assert.Equal(0, b)); // zeroed again though it held bytes

        long before = GC.GetAllocatedBytesForCurrentThread();
        for (int i = 1; i < 2000; i++) arena.Take(sizes[i % sizes.Length]);
        Assert.True(GC.GetAllocatedBytesForCurrentThread() - before < 1024, "a second round of the same pieces allocated memory");

        // A piece longer than a block is memory of its own.
        Assert.Equal(100_000, arena.Take(100_000).Length);
    }
}

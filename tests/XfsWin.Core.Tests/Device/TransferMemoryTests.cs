using System.Globalization;
using XfsWin.Device;
using Xunit;

namespace XfsWin.Tests.Device;

public sealed unsafe class TransferMemoryTests
{
    private const long HugePage = 2 << 20;

    /// <summary>The mapping /proc/self/smaps shows at <paramref name="address"/>: its size and VmFlags, or null.</summary>
    private static (long Size, string Flags)? Mapping(nint address)
    {
        long size = -1;
        foreach (var line in File.ReadLines("/proc/self/smaps"))
        {
            // A mapping's first line is "start-end perms ...", its attribute lines "Name: value".
            var range = line.Split(' ', 2)[0];
            var dash = range.IndexOf('-', StringComparison.Ordinal);
            if (dash > 0 && !range.EndsWith(':') &&
                long.TryParse(range.AsSpan(0, dash), NumberStyles.HexNumber, CultureInfo.InvariantCulture, out var start) &&
                long.TryParse(range.AsSpan(dash + 1), NumberStyles.HexNumber, CultureInfo.InvariantCulture, out var end))
                size = start == address ? end - start : -1;
            else if (size > 0 && line.StartsWith("VmFlags:", StringComparison.Ordinal))
                return (size, line[8..].Trim());
        }
        return null;
    }

    [Fact]
    public void Large_transfer_buffers_are_huge_page_aligned_advised_for_huge_pages_and_unmapped_when_freed()
    {
        Assert.True(OperatingSystem.IsLinux(), "these tests run on Linux");
        const int length = (3 << 20) + 5;
        var p = (byte*)TransferMemory.Allocate(length);
        try
        {
            Assert.Equal(0, (long)p % HugePage);
            new Span<byte>(p, length).Fill(0xA5);
            Assert.Equal(0xA5, p[length - 1]);
            var mapping = Mapping((nint)p);
            Assert.NotNull(mapping);
            // Exactly the rounded length: the slack taken for alignment was given back.
            Assert.Equal(4L << 20, mapping.Value.Size);
            Assert.Contains("hg", mapping.Value.Flags.Split(' '));
        }
        finally
        {
            TransferMemory.Free(p, length);
        }
        Assert.Null(Mapping((nint)p));
    }

    [Fact]
    public void Aligned_buffers_of_a_megabyte_come_from_transfer_memory_and_small_ones_do_not()
    {
        using (var big = new AlignedBuffer(TransferMemory.MinimumSize))
        {
            Assert.Equal(0, (long)big.Pointer % HugePage);
            Assert.Contains("hg", Mapping((nint)big.Pointer)!.Value.Flags.Split(' '));
            big.Span.Fill(1);
        }
        using var small = new AlignedBuffer(4096);
        Assert.Equal(0, (long)small.Pointer % AlignedBuffer.Alignment);
        small.Span.Fill(2);
    }
}

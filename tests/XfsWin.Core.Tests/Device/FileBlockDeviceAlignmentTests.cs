using System.Buffers;
using System.Runtime.InteropServices;
using XfsWin.Device;
using Xunit;

namespace XfsWin.Tests.Device;

/// <summary>
/// Asynchronous reads into caller memory that the collector may move: the alignment an unbuffered (O_DIRECT) read
/// needs is checked on the address the read then uses. The memory here behaves as a movable array does: while it is
/// not pinned, any look at its bytes may find them somewhere else (here: each look moves them between a sector-aligned
/// place and one byte past it); a pin keeps them where they are.
/// </summary>
public sealed class FileBlockDeviceAlignmentTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-align.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>Memory that moves between two places (one byte past an aligned place, and that place) whenever its bytes are looked at unpinned.</summary>
    private sealed unsafe class MovingMemory : MemoryManager<byte>
    {
        private readonly byte* _block;
        private readonly int _length;
        private int _pins;
        private int _offset = 1;

        public MovingMemory(int length)
        {
            _length = length;
            _block = (byte*)NativeMemory.AlignedAlloc((nuint)(length + 4096), 4096);
        }

        public int Moves { get; private set; }

        private byte* Current => _block + _offset;

        private void MaybeMove()
        {
            if (_pins > 0) return;
            var from = new Span<byte>(Current, _length);
            _offset ^= 1;
            from.CopyTo(new Span<byte>(Current, _length));
            Moves++;
        }

        public override Span<byte> GetSpan()
        {
            MaybeMove();
            Console.Error.WriteLine($"GetSpan at {(long)Current % 4096} pins {_pins} {Environment.StackTrace.Split('\n')[2]}"); return new Span<byte>(Current, _length);
        }

        public override MemoryHandle Pin(int elementIndex = 0)
        {
            _pins++;
            return new MemoryHandle(Current + elementIndex, default, this);
        }

        public override void Unpin() => _pins--;

        protected override void Dispose(bool disposing) => NativeMemory.AlignedFree(_block);
    }

    [Fact]
    public async Task An_unbuffered_read_into_memory_that_moves_while_unpinned_reads_the_bytes()
    {
        string image = Path.Combine(_tmp, "image");
        var bytes = new byte[64 * 1024];
        new Random(3).NextBytes(bytes);
        File.WriteAllBytes(image, bytes);
        using var device = FileBlockDevice.Open(image);
        Assert.Contains("O_DIRECT", device.IoMode);
        const int length = 16 * 1024;
        using var memory = new MovingMemory(length);
        // Taking its Memory looks at it once: it moves onto the aligned place, where the read finds it first.
        var target = memory.Memory;
        await device.ReadAsync(8192, target);
        Assert.True(memory.Moves > 0);
        Assert.True(bytes.AsSpan(8192, length).SequenceEqual(memory.GetSpan()), "the bytes read differ from the file's");
    }
}

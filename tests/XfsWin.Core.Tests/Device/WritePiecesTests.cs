using Xunit;
using XfsWin.Device;

namespace XfsWin.Tests.Device;

/// <summary>
/// <see cref="IBlockDevice.WritePieces"/>: scattered writes handed to the device together. On a file opened O_DIRECT
/// (the test files are on the machine's disk) they go to the kernel through asynchronous I/O in turns of
/// <see cref="LinuxAioWriter.MaxInFlight"/>; on a handle opened for asynchronous I/O (Windows: overlapped) through
/// <see cref="OverlappedPieceWriter"/>. What lands is read back through the cache and compared byte for byte.
/// </summary>
public sealed class WritePiecesTests : IDisposable
{
    private const int Block = 4096;
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-pieces.").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private string NewFile(int blocks)
    {
        string path = Path.Combine(_dir, $"f{Guid.NewGuid():N}.img");
        using (var f = File.Create(path)) f.SetLength((long)blocks * Block);
        return path;
    }

    [Fact]
    public void Scattered_aligned_pieces_go_to_the_kernel_together_and_land_where_they_were_meant()
    {
        const int Blocks = 2000;
        string path = NewFile(Blocks);
        var model = new byte[Blocks * Block];
        using var source = new AlignedBuffer(4 << 20);
        var rng = new Random(11);
        rng.NextBytes(source.Span);
        // 600 pieces (more than one turn): single blocks at every third block, and every tenth piece three blocks long.
        var pieces = new List<WritePiece>();
        int used = 0;
        for (int block = 0; pieces.Count < 600; block += 3)
        {
            int blocks = pieces.Count % 10 == 9 ? 2 : 1;
            pieces.Add(new WritePiece((long)block * Block, used, blocks * Block));
            source.Span.Slice(used, blocks * Block).CopyTo(model.AsSpan(block * Block));
            used += blocks * Block;
        }
        using (var device = FileBlockDevice.Open(path, writable: true))
        {
            Assert.Contains("O_DIRECT", device.IoMode);
            ((IBlockDevice)device).WritePieces(source.Span[..used], pieces.ToArray());
            Assert.Equal(600, device.PiecesWrittenTogether);
            device.Flush();
        }
        Assert.True(File.ReadAllBytes(path).AsSpan().SequenceEqual(model), "the file holds every piece at its offset and nothing else");
    }

    [Fact]
    public void Unaligned_pieces_and_partition_windows_are_written_right_and_pieces_outside_write_nothing()
    {
        string path = NewFile(64);
        var model = new byte[64 * Block];
        var source = new byte[3 * Block + 100];
        new Random(5).NextBytes(source);
        using (var device = FileBlockDevice.Open(path, writable: true))
        {
            // A piece of a few bytes: written through a read-modify-write, the others one by one beside it.
            var mixed = new[] { new WritePiece(7, 0, 100), new WritePiece(10L * Block, 100, Block), new WritePiece(20L * Block, 100 + Block, 2 * Block) };
            ((IBlockDevice)device).WritePieces(source, mixed);
            foreach (var p in mixed) source.AsSpan(p.Start, p.Length).CopyTo(model.AsSpan((int)p.Offset));
            Assert.Equal(0, device.PiecesWrittenTogether);

            // Through a window starting at block 32: offsets move by the window's start.
            IBlockDevice window = new PartitionDevice(device, 32L * Block, 16L * Block, ownsBase: false);
            var inWindow = new[] { new WritePiece(0, 100, Block), new WritePiece(5L * Block, 100 + Block, Block) };
            window.WritePieces(source, inWindow);
            foreach (var p in inWindow) source.AsSpan(p.Start, p.Length).CopyTo(model.AsSpan(32 * Block + (int)p.Offset));

            // One piece past the window's end: refused before anything is written.
            var past = new[] { new WritePiece(1L * Block, 100, Block), new WritePiece(16L * Block, 100, Block) };
            Assert.Throws<XfsException>(() => window.WritePieces(source, past));
            // One piece past the file's end: the same.
            Assert.Throws<XfsException>(() => ((IBlockDevice)device).WritePieces(source, [new WritePiece(2L * Block, 100, Block), new WritePiece(64L * Block, 100, Block)]));
            device.Flush();
        }
        Assert.True(File.ReadAllBytes(path).AsSpan().SequenceEqual(model), "the file holds exactly the pieces written");
    }

    /// <summary>
    /// The device on a handle opened for asynchronous I/O: on Windows the device <see cref="FileBlockDevice.Open"/> makes
    /// (FILE_FLAG_NO_BUFFERING, overlapped: the Windows workflow runs this test); elsewhere a buffered handle opened with
    /// <see cref="FileOptions.Asynchronous"/>, where the runtime runs the same calls on its own threads.
    /// </summary>
    private static FileBlockDevice OpenAsynchronous(string path, FileAccess access)
    {
        if (OperatingSystem.IsWindows() && access == FileAccess.ReadWrite) return FileBlockDevice.Open(path, writable: true);
        var handle = File.OpenHandle(path, FileMode.Open, access, FileShare.ReadWrite, FileOptions.Asynchronous);
        Assert.True(handle.IsAsync);
        return FileBlockDevice.FromHandle(handle, RandomAccess.GetLength(handle), 512, direct: false, writable: true, "asynchronous", path);
    }

    [Fact]
    public void On_a_handle_for_asynchronous_io_scattered_pieces_are_written_together_and_land_where_they_were_meant()
    {
        const int Blocks = 1200;
        string path = NewFile(Blocks);
        var model = new byte[Blocks * Block];
        using var source = new AlignedBuffer(2 << 20);
        new Random(17).NextBytes(source.Span);
        // 300 pieces (several turns of OverlappedPieceWriter.MaxInFlight), in descending order of offset, some two blocks long.
        var pieces = new List<WritePiece>();
        int used = 0;
        for (int block = Blocks - 3; pieces.Count < 300; block -= 4)
        {
            int blocks = pieces.Count % 7 == 6 ? 2 : 1;
            pieces.Add(new WritePiece((long)block * Block, used, blocks * Block));
            source.Span.Slice(used, blocks * Block).CopyTo(model.AsSpan(block * Block));
            used += blocks * Block;
        }
        using (var device = OpenAsynchronous(path, FileAccess.ReadWrite))
        {
            ((IBlockDevice)device).WritePieces(source.Span[..used], pieces.ToArray());
            Assert.Equal(300, device.PiecesWrittenTogether);
            device.Flush();
        }
        Assert.True(File.ReadAllBytes(path).AsSpan().SequenceEqual(model), "the file holds every piece at its offset and nothing else");
    }

    [Fact]
    public void On_a_handle_for_asynchronous_io_a_batch_whose_writes_fail_throws_once_every_write_has_ended()
    {
        string path = NewFile(64);
        using var source = new AlignedBuffer(8 * Block);
        new Random(3).NextBytes(source.Span);
        var pieces = Enumerable.Range(0, 8).Select(i => new WritePiece(i * 5L * Block, i * Block, Block)).ToArray();
        // A handle that may only read: every write of the batch fails, and the batch reports it rather than hanging or
        // returning as if written.
        using (var device = OpenAsynchronous(path, FileAccess.Read))
            Assert.ThrowsAny<Exception>(() => ((IBlockDevice)device).WritePieces(source.Span, pieces));
        Assert.True(File.ReadAllBytes(path).AsSpan().IndexOfAnyExcept((byte)0) < 0, "nothing was written");
    }
}

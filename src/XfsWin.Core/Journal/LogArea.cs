using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// The log as a circular array of 512-byte basic blocks (BB) on its device: internal logs start at
/// sb_logstart inside the data device, external logs at byte 0 of the log device. Reads and writes
/// take BB numbers and wrap at the end.
/// </summary>
public sealed class LogArea
{
    public const int BBSize = 512;
    public const int BBShift = 9;

    public LogArea(IBlockDevice device, long byteOffset, long blocks, int sectorSize, bool external)
    {
        Device = device;
        ByteOffset = byteOffset;
        Blocks = blocks;
        SectorBlocks = Math.Max(1, sectorSize >> BBShift);
        External = external;
    }

    public static LogArea For(IBlockDevice dataDevice, IBlockDevice? externalLogDevice, Superblock sb)
    {
        long blocks = (long)sb.LogBlocks << (sb.BlockLog - BBShift);
        if (sb.LogStart != 0)
        {
            long offset = sb.FsbToByte(sb.LogStart);
            if (offset + (blocks << BBShift) > dataDevice.Length)
                throw new XfsCorruptionException("superblock log geometry", offset, $"the internal log ({blocks} BB) runs past the end of the device");
            return new LogArea(dataDevice, offset, blocks, sb.LogSectorSize, external: false);
        }
        if (externalLogDevice is null) throw new InvalidOperationException("external log device required");
        if (blocks << BBShift > externalLogDevice.Length)
            throw new XfsException(XfsError.InvalidArgument, $"the external log device holds {externalLogDevice.Length} bytes but the log is {blocks << BBShift} bytes: wrong log device?");
        return new LogArea(externalLogDevice, 0, blocks, sb.LogSectorSize, external: true);
    }

    public IBlockDevice Device { get; }
    public long ByteOffset { get; }
    /// <summary>Log length in BB.</summary>
    public long Blocks { get; }
    /// <summary>BB per log sector (1 or 8).</summary>
    public int SectorBlocks { get; }
    public bool External { get; }

    public long Wrap(long blk) => ((blk % Blocks) + Blocks) % Blocks;

    public long ByteOfBlock(long blk) => ByteOffset + (Wrap(blk) << BBShift);

    /// <summary>Reads destination.Length/512 blocks starting at <paramref name="blk"/>, wrapping at the end.</summary>
    public void Read(long blk, Span<byte> destination)
    {
        blk = Wrap(blk);
        while (destination.Length > 0)
        {
            long n = Math.Min(destination.Length >> BBShift, Blocks - blk);
            int bytes = (int)(n << BBShift);
            Device.Read(ByteOffset + (blk << BBShift), destination[..bytes]);
            destination = destination[bytes..];
            blk = 0;
        }
    }

    public void Write(long blk, ReadOnlySpan<byte> source)
    {
        blk = Wrap(blk);
        while (source.Length > 0)
        {
            long n = Math.Min(source.Length >> BBShift, Blocks - blk);
            int bytes = (int)(n << BBShift);
            Device.Write(ByteOffset + (blk << BBShift), source[..bytes]);
            source = source[bytes..];
            blk = 0;
        }
    }

    /// <summary>xlog_get_cycle: the cycle stamped in a block (the second word when the block is a record header).</summary>
    public uint ReadCycle(long blk, Span<byte> scratch)
    {
        Read(blk, scratch[..BBSize]);
        return CycleOf(scratch);
    }

    public static uint CycleOf(ReadOnlySpan<byte> block)
    {
        uint w0 = System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(block);
        return w0 == LogRecordHeader.HeaderMagic ? System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(block[4..]) : w0;
    }

    public static int BytesToBlocks(int bytes) => (bytes + BBSize - 1) >> BBShift;
}

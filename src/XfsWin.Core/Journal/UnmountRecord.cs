using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// The unmount record: one op (client XFS_LOG, flag UNMOUNT) whose 8-byte payload is the host-order
/// u16 magic 0x556E followed by zeros. A log whose last record is this is clean.
/// </summary>
public static class UnmountRecord
{
    public const ushort Magic = 0x556E;
    public const int PayloadSize = 8;
    /// <summary>Op header plus payload.</summary>
    public const int Size = LogOpHeader.Size + PayloadSize;
    /// <summary>The ticket id xfsprogs uses for the unmount transaction.</summary>
    public const uint Tid = 0xB0C0D0D0;

    public static void Write(Span<byte> b)
    {
        LogOpHeader.Write(b, Tid, PayloadSize, LogOpHeader.ClientLog, LogOpHeader.FlagUnmount);
        BinaryPrimitives.WriteUInt16LittleEndian(b[LogOpHeader.Size..], Magic);
        b.Slice(LogOpHeader.Size + 2, PayloadSize - 2).Clear();
    }
}

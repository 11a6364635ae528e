using System.Buffers;
using System.Runtime.ExceptionServices;
using Microsoft.Win32.SafeHandles;

namespace XfsWin.Device;

/// <summary>
/// Many writes handed to the operating system at once on a handle opened for asynchronous I/O: on Windows (the devices
/// <see cref="WindowsDevice"/> opens, FILE_FLAG_OVERLAPPED) each <see cref="RandomAccess.WriteAsync(SafeFileHandle, ReadOnlyMemory{byte}, long, CancellationToken)"/>
/// is an overlapped WriteFile that is queued to the disk before the next one starts, so a batch of scattered writes
/// pays one wait rather than one round trip to the disk per write (the Windows side of what <see cref="LinuxAioWriter"/>
/// does). Completions arrive on the runtime's I/O completion threads, never on the caller's, so the caller may block
/// for them. Used only for pieces that meet the handle's alignment. Stateless: callers on several threads each run
/// their own batch.
/// </summary>
internal static unsafe class OverlappedPieceWriter
{
    /// <summary>Writes in flight at once; larger batches go in turns of this many.</summary>
    public const int MaxInFlight = 64;

    /// <summary>
    /// Writes every piece of the <paramref name="length"/> bytes at <paramref name="source"/> (pinned by the caller until
    /// this returns) and returns when all are done. When one fails, the others of its turn are waited for (no write is
    /// still reading the caller's memory when this returns), no later turn starts, and the first failure is thrown.
    /// </summary>
    public static void Write(SafeFileHandle handle, byte* source, int length, ReadOnlySpan<WritePiece> pieces)
    {
        using var memory = new PinnedMemory(source, length);
        var whole = memory.Memory;
        var pending = new Task[Math.Min(MaxInFlight, pieces.Length)];
        for (int first = 0; first < pieces.Length; first += MaxInFlight)
        {
            var turn = pieces.Slice(first, Math.Min(MaxInFlight, pieces.Length - first));
            Exception? failure = null;
            int started = 0;
            for (; started < turn.Length; started++)
            {
                var piece = turn[started];
                try
                {
                    pending[started] = RandomAccess.WriteAsync(handle, whole.Slice(piece.Start, piece.Length), piece.Offset).AsTask();
                }
                catch (Exception e)
                {
                    failure = e;
                    break;
                }
            }
            for (int i = 0; i < started; i++)
            {
                try
                {
                    pending[i].GetAwaiter().GetResult();
                }
                catch (Exception e)
                {
                    failure ??= e;
                }
                pending[i] = null!;
            }
            if (failure is not null) ExceptionDispatchInfo.Throw(failure);
        }
    }

    /// <summary>Memory over bytes the caller keeps pinned (pinning it again is a no-op).</summary>
    private sealed class PinnedMemory(byte* pointer, int length) : MemoryManager<byte>
    {
        public override Span<byte> GetSpan() => new(pointer, length);

        public override MemoryHandle Pin(int elementIndex = 0)
        {
            ArgumentOutOfRangeException.ThrowIfGreaterThan((uint)elementIndex, (uint)length, nameof(elementIndex));
            return new MemoryHandle(pointer + elementIndex);
        }

        public override void Unpin()
        {
        }

        protected override void Dispose(bool disposing)
        {
        }
    }
}

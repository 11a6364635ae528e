using System.Collections.Concurrent;
using System.Runtime.InteropServices;

namespace XfsWin.Device;

/// <summary>
/// A native buffer aligned for unbuffered I/O (O_DIRECT / FILE_FLAG_NO_BUFFERING need the buffer
/// address, file offset and length to be multiples of the sector size; 4096 covers every device).
/// Buffers of a megabyte or more come from <see cref="TransferMemory"/> (huge pages where possible).
/// </summary>
public sealed unsafe class AlignedBuffer : IDisposable
{
    public const int Alignment = 4096;
    private void* _ptr;

    public AlignedBuffer(int length)
    {
        Length = length;
        _ptr = length >= TransferMemory.MinimumSize ? TransferMemory.Allocate((nuint)length) : NativeMemory.AlignedAlloc((nuint)length, Alignment);
    }

    public int Length { get; }

    public Span<byte> Span => new(_ptr, Length);

    public void* Pointer => _ptr;

    public void Dispose()
    {
        if (_ptr != null)
        {
            if (Length >= TransferMemory.MinimumSize)
                TransferMemory.Free(_ptr, (nuint)Length);
            else
                NativeMemory.AlignedFree(_ptr);
            _ptr = null;
        }
    }
}

/// <summary>
/// A bounded pool of aligned buffers of one size, per device (no process-global state).
/// </summary>
public sealed class AlignedBufferPool : IDisposable
{
    private readonly ConcurrentBag<AlignedBuffer> _free = new();
    private readonly int _maxRetained;
    private int _retained;

    public AlignedBufferPool(int bufferSize, int maxRetained = 16)
    {
        BufferSize = bufferSize;
        _maxRetained = maxRetained;
    }

    public int BufferSize { get; }

    public AlignedBuffer Rent()
    {
        if (_free.TryTake(out var buffer))
        {
            Interlocked.Decrement(ref _retained);
            return buffer;
        }
        return new AlignedBuffer(BufferSize);
    }

    public void Return(AlignedBuffer buffer)
    {
        if (Interlocked.Increment(ref _retained) <= _maxRetained)
        {
            _free.Add(buffer);
        }
        else
        {
            Interlocked.Decrement(ref _retained);
            buffer.Dispose();
        }
    }

    public void Dispose()
    {
        while (_free.TryTake(out var buffer)) buffer.Dispose();
    }
}

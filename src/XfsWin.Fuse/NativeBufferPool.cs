using XfsWin.Device;

namespace XfsWin.Fuse;

/// <summary>
/// Page-aligned native buffers shared by the FUSE worker threads. Renting and returning never
/// allocate managed memory: each slot holds one buffer pointer and is claimed with an atomic
/// exchange. When every slot is busy a fresh buffer is allocated and freed after the call.
/// Reads go from the device straight into them, so they come from <see cref="TransferMemory"/>.
/// </summary>
internal sealed unsafe class NativeBufferPool : IDisposable
{
    private readonly nint[] _slots;
    private int _disposed;

    public NativeBufferPool(int bufferSize, int slotCount)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(bufferSize, 4096);
        BufferSize = bufferSize;
        _slots = new nint[slotCount];
    }

    /// <summary>Bytes in every pooled buffer.</summary>
    public int BufferSize { get; }

    /// <summary>A buffer of at least <see cref="BufferSize"/> bytes (or <paramref name="minimumSize"/> when larger).</summary>
    public byte* Rent(int minimumSize = 0)
    {
        if (minimumSize > BufferSize)
            return (byte*)TransferMemory.Allocate((nuint)minimumSize);
        for (var i = 0; i < _slots.Length; i++)
        {
            var p = Interlocked.Exchange(ref _slots[i], 0);
            if (p != 0)
                return (byte*)p;
        }
        return (byte*)TransferMemory.Allocate((nuint)BufferSize);
    }

    /// <summary>Gives back a buffer from <see cref="Rent"/>; <paramref name="size"/> is what was asked for.</summary>
    public void Return(byte* buffer, int size = 0)
    {
        if (size <= BufferSize && Volatile.Read(ref _disposed) == 0)
        {
            for (var i = 0; i < _slots.Length; i++)
            {
                if (Interlocked.CompareExchange(ref _slots[i], (nint)buffer, 0) == 0)
                    return;
            }
        }
        TransferMemory.Free(buffer, (nuint)Math.Max(size, BufferSize));
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        for (var i = 0; i < _slots.Length; i++)
        {
            var p = Interlocked.Exchange(ref _slots[i], 0);
            if (p != 0)
                TransferMemory.Free((void*)p, (nuint)BufferSize);
        }
    }
}

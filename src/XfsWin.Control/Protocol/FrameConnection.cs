using System.Buffers;
using System.IO.Pipelines;
using System.Text.Json;
using System.Text.Json.Serialization.Metadata;

namespace XfsWin.Control.Protocol;

/// <summary>How a read of the next frame ended.</summary>
public enum FrameReadStatus
{
    /// <summary>A whole frame was read and decoded.</summary>
    Frame,
    /// <summary>The peer closed the stream between frames.</summary>
    End,
    /// <summary>The peer closed the stream inside a frame.</summary>
    Truncated,
    /// <summary>The first two bytes are not the magic: the stream is not this protocol.</summary>
    BadMagic,
    /// <summary>The header announces more bytes than this side accepts; nothing of the payload was buffered.</summary>
    TooLarge,
}

/// <summary>
/// One end of a control channel over a duplex stream (Unix socket, named pipe), through
/// System.IO.Pipelines. Reads are one at a time (one reader loop per connection); writes may come
/// from several tasks (responses, progress, events) and are serialized by a lock, each frame
/// written whole. Memory per connection is bounded by <see cref="Frame.HeaderSize"/> plus the
/// incoming limit plus the largest frame written.
/// </summary>
public sealed class FrameConnection : IAsyncDisposable
{
    private readonly Stream _stream;
    private readonly PipeReader _reader;
    private readonly PipeWriter _writer;
    private readonly int _maxIncoming;
    private readonly SemaphoreSlim _writeLock = new(1, 1);
    // Reused under _writeLock: the payload is serialized here first, since the header carries its length.
    private readonly ArrayBufferWriter<byte> _payload = new(1024);
    private Utf8JsonWriter? _json;

    public FrameConnection(Stream stream, int maxIncomingPayload)
    {
        _stream = stream;
        _maxIncoming = maxIncomingPayload;
        _reader = PipeReader.Create(stream, new StreamPipeReaderOptions(bufferSize: 4096, leaveOpen: true));
        _writer = PipeWriter.Create(stream, new StreamPipeWriterOptions(leaveOpen: true));
    }

    /// <summary>
    /// Reads the next frame and hands its header and payload to <paramref name="decode"/>, which runs
    /// before the payload's memory is released (it must not keep the sequence). The payload is
    /// buffered only once its header passed the magic and length checks.
    /// </summary>
    public async ValueTask<(FrameReadStatus Status, FrameHeader Header, T? Value)> ReadAsync<T>(
        Func<FrameHeader, ReadOnlySequence<byte>, T> decode, CancellationToken cancellationToken)
    {
        while (true)
        {
            var result = await _reader.ReadAsync(cancellationToken).ConfigureAwait(false);
            var buffer = result.Buffer;
            if (Frame.TryReadHeader(buffer, out var header))
            {
                if (!header.MagicOk)
                {
                    _reader.AdvanceTo(buffer.Start, buffer.End);
                    return (FrameReadStatus.BadMagic, header, default);
                }
                if (header.PayloadLength > (uint)_maxIncoming)
                {
                    _reader.AdvanceTo(buffer.Start, buffer.End);
                    return (FrameReadStatus.TooLarge, header, default);
                }
                long total = Frame.HeaderSize + header.PayloadLength;
                if (buffer.Length >= total)
                {
                    T value;
                    try
                    {
                        value = decode(header, buffer.Slice(Frame.HeaderSize, header.PayloadLength));
                    }
                    finally
                    {
                        _reader.AdvanceTo(buffer.GetPosition(total));
                    }
                    return (FrameReadStatus.Frame, header, value);
                }
            }
            if (result.IsCompleted || result.IsCanceled)
            {
                var status = buffer.IsEmpty ? FrameReadStatus.End : FrameReadStatus.Truncated;
                _reader.AdvanceTo(buffer.End);
                return (status, header, default);
            }
            // Not a whole frame yet: keep what is there and ask for more.
            _reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    /// <summary>Writes one frame: header (with <paramref name="version"/>), then <paramref name="value"/> as JSON.</summary>
    public async ValueTask SendAsync<T>(FrameKind kind, T value, JsonTypeInfo<T> typeInfo, byte version = Frame.CurrentVersion, CancellationToken cancellationToken = default)
    {
        await _writeLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            _payload.ResetWrittenCount();
            if (_json is null) _json = new Utf8JsonWriter(_payload);
            else _json.Reset(_payload);
            JsonSerializer.Serialize(_json, value, typeInfo);
            _json.Flush();
            await WriteFrameLocked(kind, _payload.WrittenSpan.Length, version, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _writeLock.Release();
        }
    }

    /// <summary>Writes raw bytes as they are (tests use it to send hostile frames).</summary>
    public async ValueTask SendRawAsync(ReadOnlyMemory<byte> bytes, CancellationToken cancellationToken = default)
    {
        await _writeLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await _writer.WriteAsync(bytes, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _writeLock.Release();
        }
    }

    private async ValueTask WriteFrameLocked(FrameKind kind, int length, byte version, CancellationToken cancellationToken)
    {
        var header = _writer.GetSpan(Frame.HeaderSize);
        Frame.WriteHeader(header, kind, length, version);
        _writer.Advance(Frame.HeaderSize);
        _writer.Write(_payload.WrittenSpan);
        var flush = await _writer.FlushAsync(cancellationToken).ConfigureAwait(false);
        if (flush.IsCompleted) throw new IOException("the peer closed the control channel");
    }

    /// <summary>Decodes a JSON payload with a source-generated type; null when it is not valid JSON of that shape.</summary>
    public static T? Deserialize<T>(ReadOnlySequence<byte> payload, JsonTypeInfo<T> typeInfo, out string? error) where T : class
    {
        error = null;
        try
        {
            var reader = new Utf8JsonReader(payload, new JsonReaderOptions { MaxDepth = 16 });
            var value = JsonSerializer.Deserialize(ref reader, typeInfo);
            if (value is null) error = "the payload is JSON null";
            return value;
        }
        catch (JsonException e)
        {
            error = $"the payload is not valid JSON for this message: {e.Message}";
            return null;
        }
        catch (Exception e) when (e is InvalidOperationException or NotSupportedException or ArgumentException or FormatException or OverflowException)
        {
            error = $"the payload could not be decoded: {e.Message}";
            return null;
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _reader.CompleteAsync().ConfigureAwait(false);
        try
        {
            await _writer.CompleteAsync().ConfigureAwait(false);
        }
        catch (IOException)
        {
            // The peer is gone: nothing left to flush to.
        }
        await _stream.DisposeAsync().ConfigureAwait(false);
        _json?.Dispose();
        _writeLock.Dispose();
    }
}

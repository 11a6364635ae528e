using System.Buffers;
using System.Buffers.Binary;

namespace XfsWin.Control.Protocol;

/// <summary>What a frame carries. A client sends only <see cref="Request"/>; the server sends the rest.</summary>
public enum FrameKind : byte
{
    Request = 1,
    Response = 2,
    Progress = 3,
    Event = 4,
}

/// <summary>
/// The control channel's framing: an 8-byte header, then a UTF-8 JSON payload.
/// <code>
/// offset 0  'X' 'W'        magic: anything else means the peer does not speak this protocol
/// offset 2  version (u8)   <see cref="CurrentVersion"/>; a server answers other versions with an error
/// offset 3  kind (u8)      <see cref="FrameKind"/>
/// offset 4  length (u32)   payload bytes, big-endian; never more than the reader's limit
/// </code>
/// The length is checked against the reader's limit before any payload is buffered, so a hostile
/// length costs nothing; the magic is checked first, so a stream that is not this protocol is
/// rejected at its first 8 bytes.
/// </summary>
public static class Frame
{
    public const int HeaderSize = 8;
    public const byte Magic0 = (byte)'X', Magic1 = (byte)'W';

    /// <summary>
    /// The newest protocol version this build speaks. A version names a set of messages: a new
    /// operation, or a field that changes what a request means, takes a new number. A server speaks
    /// every version from <see cref="OldestVersion"/> to this one and answers each request in the
    /// version it was asked in, offering that version's operations only (<see cref="Operations"/>);
    /// other versions are answered with an error. Version 1: hello, list, info, mount, unmount,
    /// recover, subscribe. Version 2: format and check. Version 3: grow, and mount's readOnly.
    /// </summary>
    public const byte CurrentVersion = 3;

    /// <summary>The oldest version a server still serves.</summary>
    public const byte OldestVersion = 1;

    public static bool IsSpoken(byte version) => version is >= OldestVersion and <= CurrentVersion;

    /// <summary>Largest request a server accepts: requests are a few hundred bytes.</summary>
    public const int MaxRequestPayload = 64 * 1024;

    /// <summary>Largest frame a client accepts (a listing of many disks is the largest reply).</summary>
    public const int MaxReplyPayload = 16 * 1024 * 1024;

    public static void WriteHeader(Span<byte> header, FrameKind kind, int payloadLength, byte version = CurrentVersion)
    {
        header[0] = Magic0;
        header[1] = Magic1;
        header[2] = version;
        header[3] = (byte)kind;
        BinaryPrimitives.WriteUInt32BigEndian(header[4..], (uint)payloadLength);
    }

    /// <summary>
    /// Reads a header from the start of <paramref name="buffer"/>. Returns false when fewer than
    /// <see cref="HeaderSize"/> bytes are there yet.
    /// </summary>
    public static bool TryReadHeader(in ReadOnlySequence<byte> buffer, out FrameHeader header)
    {
        header = default;
        if (buffer.Length < HeaderSize) return false;
        Span<byte> bytes = stackalloc byte[HeaderSize];
        buffer.Slice(0, HeaderSize).CopyTo(bytes);
        header = new FrameHeader(bytes[0] == Magic0 && bytes[1] == Magic1, bytes[2], (FrameKind)bytes[3],
            BinaryPrimitives.ReadUInt32BigEndian(bytes[4..]));
        return true;
    }
}

/// <summary>A decoded frame header; nothing in it is trusted until checked.</summary>
public readonly record struct FrameHeader(bool MagicOk, byte Version, FrameKind Kind, uint PayloadLength);

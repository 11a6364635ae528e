using System.Buffers.Binary;
using System.Net.Sockets;
using System.Text;
using XfsWin.Control.Protocol;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;
using XfsWin.Driver.Semantics;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>The channel's framing and its answers to bad, hostile and random input.</summary>
public sealed class ProtocolTests : IAsyncLifetime
{
    private TestServer _server = null!;

    public Task InitializeAsync()
    {
        _server = new TestServer([]);
        return Task.CompletedTask;
    }

    public async Task DisposeAsync() => await _server.DisposeAsync();

    private static byte[] FrameBytes(byte version, byte kind, byte[] payload, uint? announcedLength = null, bool badMagic = false)
    {
        var bytes = new byte[Frame.HeaderSize + payload.Length];
        Frame.WriteHeader(bytes, (FrameKind)kind, payload.Length, version);
        if (announcedLength is { } l) BinaryPrimitives.WriteUInt32BigEndian(bytes.AsSpan(4), l);
        if (badMagic) bytes[0] = (byte)'G';
        payload.CopyTo(bytes, Frame.HeaderSize);
        return bytes;
    }

    private static byte[] Json(string text) => Encoding.UTF8.GetBytes(text);

    /// <summary>
    /// A connection read frame by frame, so each reply is seen in the order the server sent it (the
    /// server answers a bad frame before it reads the next one).
    /// </summary>
    private sealed class Raw : IAsyncDisposable
    {
        private readonly FrameConnection _connection;

        private Raw(Stream stream) => _connection = new FrameConnection(stream, Frame.MaxReplyPayload);

        public static async Task<Raw> Open(string socket) => new(await ControlEndpoint.ConnectAsync(socket, CancellationToken.None));

        public ValueTask Send(byte[] bytes) => _connection.SendRawAsync(bytes);

        /// <summary>The protocol version of the last frame read.</summary>
        public byte LastVersion { get; private set; }

        /// <summary>The next response, or null when the server closed the connection.</summary>
        public async Task<ControlResponse?> Reply()
        {
            using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(30));
            while (true)
            {
                var (status, header, value) = await _connection.ReadAsync(
                    (h, payload) => h.Kind == FrameKind.Response ? FrameConnection.Deserialize(payload, ControlJsonContext.Default.ControlResponse, out _) : null,
                    limit.Token);
                if (status != FrameReadStatus.Frame) return null;
                LastVersion = header.Version;
                if (value is not null) return value;
            }
        }

        public async Task<ControlResponse?> Hello()
        {
            await Send(FrameBytes(1, 1, Json("{\"id\":77,\"op\":\"hello\"}")));
            return await Reply();
        }

        public ValueTask DisposeAsync() => _connection.DisposeAsync();
    }

    [Fact]
    public void Header_round_trips_and_is_big_endian()
    {
        var header = new byte[Frame.HeaderSize];
        Frame.WriteHeader(header, FrameKind.Progress, 0x01020304);
        Assert.Equal(new byte[] { (byte)'X', (byte)'W', Frame.CurrentVersion, 3, 1, 2, 3, 4 }, header);
        Assert.True(Frame.TryReadHeader(new System.Buffers.ReadOnlySequence<byte>(header), out var read));
        Assert.Equal(new FrameHeader(true, Frame.CurrentVersion, FrameKind.Progress, 0x01020304), read);
        Assert.False(Frame.TryReadHeader(new System.Buffers.ReadOnlySequence<byte>(header, 0, 7), out _));
    }

    [Fact]
    public async Task Hello_names_the_version_the_platform_and_only_the_operations_that_exist()
    {
        await using var client = await _server.Connect();
        var hello = (await client.CallAsync(new ControlRequest { Op = Operations.Hello })).Hello!;
        Assert.Equal(3, hello.ProtocolVersion);
        Assert.Equal("linux", hello.Platform);
        Assert.Equal("directory", hello.MountPointKind);
        Assert.Equal(["hello", "list", "info", "mount", "unmount", "recover", "subscribe", "format", "check", "grow"], hello.Operations);
        var shrink = await client.SendAsync(new ControlRequest { Op = "shrink", Source = "/nonexistent" });
        Assert.False(shrink.Ok);
        Assert.Equal(ErrorCodes.UnknownOperation, shrink.Error!.Code);
    }

    [Fact]
    public async Task A_version_1_client_is_answered_in_version_1_with_the_version_1_operations()
    {
        await using var raw = await Raw.Open(_server.Socket);
        var hello = await raw.Hello();
        Assert.Equal(1, raw.LastVersion);
        Assert.Equal(1, hello!.Hello!.ProtocolVersion);
        Assert.Equal(["hello", "list", "info", "mount", "unmount", "recover", "subscribe"], hello.Hello.Operations);
        foreach (var later in new[] { "format", "check" })
        {
            await raw.Send(FrameBytes(1, 1, Json($"{{\"id\":9,\"op\":\"{later}\",\"source\":\"/nonexistent\"}}")));
            var r = await raw.Reply();
            Assert.Equal(1, raw.LastVersion);
            Assert.Equal(9, r!.Id);
            Assert.Equal(ErrorCodes.UnknownOperation, r.Error!.Code);
            Assert.Contains("needs protocol version 2", r.Error.Message);
        }
        // The same connection may speak version 2 next.
        await raw.Send(FrameBytes(2, 1, Json("{\"id\":10,\"op\":\"check\",\"source\":\"/nonexistent\"}")));
        var two = await raw.Reply();
        Assert.Equal(2, raw.LastVersion);
        Assert.Equal(ErrorCodes.NotFound, two!.Error!.Code);
    }

    [Fact]
    public async Task Bad_magic_is_answered_once_and_the_connection_closed()
    {
        await using var raw = await Raw.Open(_server.Socket);
        await raw.Send(FrameBytes(1, 1, Json("{\"op\":\"hello\"}"), badMagic: true));
        var reply = await raw.Reply();
        Assert.Equal(ErrorCodes.BadFrame, reply!.Error!.Code);
        Assert.Null(await raw.Reply());
    }

    [Theory]
    [InlineData(uint.MaxValue)]
    [InlineData((uint)Frame.MaxRequestPayload + 1)]
    [InlineData(0x7fffffffu)]
    public async Task An_oversized_length_is_refused_without_reading_the_payload(uint length)
    {
        await using (var raw = await Raw.Open(_server.Socket))
        {
            // Only the header is sent: a server that waited for the announced bytes would hang here.
            await raw.Send(FrameBytes(1, 1, [], announcedLength: length));
            var reply = await raw.Reply();
            Assert.Equal(ErrorCodes.TooLarge, reply!.Error!.Code);
            Assert.Null(await raw.Reply());
        }
        // The server still serves others.
        await using var other = await _server.Connect();
        Assert.True((await other.SendAsync(new ControlRequest { Op = Operations.Hello })).Ok);
    }

    [Fact]
    public async Task Frame_level_errors_that_keep_the_stream_in_step_leave_the_connection_usable()
    {
        await using var raw = await Raw.Open(_server.Socket);
        var cases = new (byte[] Bytes, string Code)[]
        {
            (FrameBytes((byte)(Frame.CurrentVersion + 1), 1, Json("{\"op\":\"hello\"}")), ErrorCodes.UnsupportedVersion),
            (FrameBytes(255, 1, Json("{\"op\":\"hello\"}")), ErrorCodes.UnsupportedVersion),
            (FrameBytes(0, 1, Json("{\"op\":\"hello\"}")), ErrorCodes.UnsupportedVersion),
            (FrameBytes(1, 2, Json("{\"op\":\"hello\"}")), ErrorCodes.BadKind),
            (FrameBytes(1, 99, Json("{}")), ErrorCodes.BadKind),
            (FrameBytes(1, 1, Json("not json at all")), ErrorCodes.BadRequest),
            (FrameBytes(1, 1, Json("null")), ErrorCodes.BadRequest),
            (FrameBytes(1, 1, Json("{\"op\": 12}")), ErrorCodes.BadRequest),
            (FrameBytes(1, 1, Json("{\"id\": 1e400}")), ErrorCodes.BadRequest),
            (FrameBytes(1, 1, Json(new string('[', 5000) + new string(']', 5000))), ErrorCodes.BadRequest),
            (FrameBytes(1, 1, []), ErrorCodes.BadRequest),
            (FrameBytes(1, 1, [0xff, 0xfe, 0x00, 0x80]), ErrorCodes.BadRequest),
            // format's options of the wrong shape are refused when decoded, before anything runs.
            (FrameBytes(2, 1, Json("{\"op\":\"format\",\"source\":\"/tmp/x.img\",\"format\":\"all of it\"}")), ErrorCodes.BadRequest),
            (FrameBytes(2, 1, Json("{\"op\":\"format\",\"source\":\"/tmp/x.img\",\"format\":{\"agcount\":1e400}}")), ErrorCodes.BadRequest),
            (FrameBytes(2, 1, Json("{\"op\":\"format\",\"source\":\"/tmp/x.img\",\"format\":{\"blockSize\":\"4096\"}}")), ErrorCodes.BadRequest),
            (FrameBytes(2, 1, Json("{\"op\":\"format\",\"source\":\"/tmp/x.img\",\"format\":{\"crc\":\"yes\"}}")), ErrorCodes.BadRequest),
            (FrameBytes(2, 1, Json("{\"op\":\"format\",\"format\":{\"label\":" + new string('[', 20) + new string(']', 20) + "}}")), ErrorCodes.BadRequest),
        };
        foreach (var (bytes, code) in cases)
        {
            await raw.Send(bytes);
            var reply = await raw.Reply();
            Assert.False(reply!.Ok);
            Assert.Equal(code, reply.Error!.Code);
            var hello = await raw.Hello();
            Assert.True(hello!.Ok);
            Assert.Equal(77, hello.Id);
        }
    }

    [Fact]
    public async Task Requests_with_unknown_ops_or_missing_fields_get_errors()
    {
        await using var client = await _server.Connect();
        async Task<string> Code(ControlRequest r) => (await client.SendAsync(r)).Error!.Code;
        Assert.Equal(ErrorCodes.UnknownOperation, await Code(new ControlRequest { Op = "format-everything" }));
        Assert.Equal(ErrorCodes.UnknownOperation, await Code(new ControlRequest { Op = new string('x', 50_000) }));
        Assert.Equal(ErrorCodes.BadRequest, await Code(new ControlRequest { Op = null }));
        Assert.Equal(ErrorCodes.BadRequest, await Code(new ControlRequest { Op = Operations.Info }));
        Assert.Equal(ErrorCodes.BadRequest, await Code(new ControlRequest { Op = Operations.Mount, Source = "/x.img" }));
        Assert.Equal(ErrorCodes.BadRequest, await Code(new ControlRequest { Op = Operations.Unmount }));
        Assert.Equal(ErrorCodes.NotMounted, await Code(new ControlRequest { Op = Operations.Unmount, Source = "/no/such.img" }));
        Assert.Equal(ErrorCodes.NotFound, await Code(new ControlRequest { Op = Operations.Info, Source = "/no/such.img" }));
        Assert.Equal(ErrorCodes.VolumeError, await Code(new ControlRequest { Op = Operations.Info, Source = "/etc/hostname" }));
        Assert.Equal(ErrorCodes.VolumeError, await Code(new ControlRequest { Op = Operations.Info, Source = "/no/such.img@99999999" }));
    }

    [Fact]
    public async Task A_flood_of_pipelined_requests_gets_exactly_one_reply_each()
    {
        await using var client = await _server.Connect();
        var tasks = Enumerable.Range(0, 300).Select(_ => client.SendAsync(new ControlRequest { Op = Operations.Hello })).ToList();
        var replies = await Task.WhenAll(tasks).WaitAsync(TimeSpan.FromMinutes(1));
        Assert.All(replies, r => Assert.True(r.Ok || r.Error!.Code == ErrorCodes.Busy));
        Assert.Equal(300, replies.Select(r => r.Id).Distinct().Count());
    }

    [Fact]
    public async Task More_clients_than_allowed_are_told_busy()
    {
        await using var server = new TestServer([], new ServerOptions { MaxConnections = 2 });
        await using var a = await server.Connect();
        await using var b = await server.Connect();
        Assert.True((await a.SendAsync(new ControlRequest { Op = Operations.Hello })).Ok);
        Assert.True((await b.SendAsync(new ControlRequest { Op = Operations.Hello })).Ok);
        await using var c = await Raw.Open(server.Socket);
        var refused = await c.Reply();
        Assert.Equal(ErrorCodes.Busy, refused!.Error!.Code);
        Assert.Null(await c.Reply());
    }

    [Fact]
    public async Task Random_bytes_never_crash_the_server()
    {
        var random = new Random(20261125);
        for (int round = 0; round < 300; round++)
        {
            byte[] bytes;
            switch (round % 3)
            {
                case 0:
                    bytes = new byte[random.Next(1, 2048)];
                    random.NextBytes(bytes);
                    break;
                case 1:
                    // A valid header (any version/kind) with random payload bytes.
                    var payload = new byte[random.Next(0, 512)];
                    random.NextBytes(payload);
                    bytes = FrameBytes((byte)random.Next(0, 3), (byte)random.Next(0, 6), payload);
                    break;
                default:
                    // Valid JSON shapes with random values in every field.
                    string[] ops = ["hello", "list", "info", "mount", "unmount", "recover", "subscribe", "", "\u0000", "ünïcode"];
                    var json = $"{{\"id\":{random.NextInt64()},\"op\":\"{ops[random.Next(ops.Length)]}\",\"source\":\"/no/such/{random.Next()}\",\"mountPoint\":\"rel{random.Next()}\",\"dryRun\":true,\"extra\":[1,2,{{\"x\":null}}]}}";
                    bytes = FrameBytes(1, 1, Json(json));
                    break;
            }
            await using var raw = await Raw.Open(_server.Socket);
            await raw.Send(bytes);
            // Whatever came, the server answers (an error, a reply, or closing the connection) and
            // a hello after it gets a reply or a closed connection, never silence (Reply's limit).
            try
            {
                await raw.Hello();
            }
            catch (IOException)
            {
                // The server closed the connection while the hello was being written.
            }
        }
        await using var after = await _server.Connect();
        Assert.True((await after.SendAsync(new ControlRequest { Op = Operations.Hello })).Ok);
        Assert.DoesNotContain("internal error", _server.Log.ToString());
    }

    [Fact]
    public async Task The_socket_is_mode_0600_and_other_users_cannot_connect()
    {
        var dir = Directory.CreateDirectory(Path.Combine("/tmp", "xfswin-socket-mode." + Guid.NewGuid().ToString("N"))).FullName;
        try
        {
            File.SetUnixFileMode(dir, (UnixFileMode)Convert.ToInt32("755", 8));
            var path = Path.Combine(dir, "control.sock");
            var options = new ServerOptions { ScanDevices = false };
            using var volumes = new VolumeManager(options, null);
            await using (var server = new ControlServer(ControlEndpoint.Listen(path), volumes, options))
            {
                server.Start();
                Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(path));
                var nobody = Shell.Run("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                    "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('connected')\nexcept PermissionError: print('refused')", path],
                    workingDirectory: "/");
                Assert.True(nobody.StandardOutput.Trim() == "refused", nobody.StandardOutput + nobody.StandardError);
                // A second server on the same live socket is refused.
                Assert.Throws<IOException>(() => ControlEndpoint.Listen(path));
            }
            Assert.False(File.Exists(path));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void Pipe_security_descriptors_grant_system_administrators_and_interactive_users_what_they_need()
    {
        static IReadOnlyList<Ace> Dacl(ListenerAccess access)
        {
            var sd = SecurityDescriptors.Parse(PipeSecurityDescriptor.Build(access));
            Assert.Null(sd.Owner);
            Assert.Null(sd.Group);
            Assert.Equal(0x8000 | 0x1000 | 0x0004, sd.Control & (0x8000 | 0x1000 | 0x0004));
            return sd.Dacl!;
        }
        Assert.Collection(Dacl(ListenerAccess.Private),
            a => { Assert.Equal(AceType.AccessAllowed, a.Type); Assert.Equal(Sid.LocalSystem, a.Sid); Assert.Equal(0x001F01FFu, (uint)a.Mask); },
            a => { Assert.Equal(AceType.AccessAllowed, a.Type); Assert.Equal(Sid.Administrators, a.Sid); Assert.Equal(0x001F01FFu, (uint)a.Mask); });
        Assert.Equal("D:P(A;;FA;;;SY)(A;;FA;;;BA)", PipeSecurityDescriptor.Sddl(ListenerAccess.Private));

        var users = Dacl(ListenerAccess.LocalUsers);
        Assert.Equal(3, users.Count);
        Assert.Equal(Sid.Parse("S-1-5-4"), users[2].Sid);
        uint mask = (uint)users[2].Mask;
        // Read and write data (what PipeAccessRights.ReadWrite asks for, 0x2019B) and SYNCHRONIZE; never
        // FILE_CREATE_PIPE_INSTANCE (0x4, FILE_APPEND_DATA), WRITE_DAC, WRITE_OWNER or DELETE.
        Assert.Equal(0x2019Bu, mask & 0x2019Bu);
        Assert.Equal(0u, mask & (0x4u | 0x40000u | 0x80000u | 0x10000u));
        Assert.Equal(0x0012019Bu, mask);
        Assert.Equal("D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x0012019b;;;IU)", PipeSecurityDescriptor.Sddl(ListenerAccess.LocalUsers));
    }

    [Fact]
    public void Service_configuration_parses_statements_and_names_bad_lines()
    {
        var c = ServiceConfiguration.Parse("""
            # XfsWin service
            source /srv/images/a.img
            source "/srv/images/with space.img"   # quoted
            mount /srv/images/a.img /mnt/xfswin/a
            scan no
            socket /run/xfswin/other.sock
            """);
        Assert.Equal(["/srv/images/a.img", "/srv/images/with space.img"], c.Sources);
        Assert.Equal([new AutoMount("/srv/images/a.img", "/mnt/xfswin/a", 4)], c.Mounts);
        Assert.False(c.ScanDevices);
        Assert.Equal("/run/xfswin/other.sock", c.Socket);
        Assert.Contains("line 2", Assert.Throws<FormatException>(() => ServiceConfiguration.Parse("\nmount a.img relative/dir")).Message);
        Assert.Contains("line 1", Assert.Throws<FormatException>(() => ServiceConfiguration.Parse("frobnicate x")).Message);
        Assert.Contains("line 1", Assert.Throws<FormatException>(() => ServiceConfiguration.Parse("scan maybe")).Message);
        Assert.Contains("line 1", Assert.Throws<FormatException>(() => ServiceConfiguration.Parse("source \"unterminated")).Message);
        Assert.Contains("line 1", Assert.Throws<FormatException>(() => ServiceConfiguration.Parse("source a b")).Message);
    }
}

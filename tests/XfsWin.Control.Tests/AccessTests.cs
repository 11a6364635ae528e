using System.Text.Json;
using XfsWin.Control.Protocol;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// Who may do what over the control channel (<see cref="AccessPolicy"/>): the decisions themselves, and a server on a
/// socket open to every user, spoken to by a client running as user nobody (uid 65534), whose uid the server learns
/// from SO_PEERCRED: it may look and mount what an administrator configured, nothing else.
/// </summary>
public sealed class AccessTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-access.").FullName;

    public void Dispose()
    {
        try { Directory.Delete(_dir, recursive: true); }
        catch (IOException) { /* a mount left by a failed test; the directory goes with the machine */ }
    }

    private sealed class Facts(IReadOnlyList<ConfiguredMount> configured, IReadOnlyList<string> listed, bool driveLetters) : IAccessFacts
    {
        public Dictionary<string, string> Mounted { get; } = new(StringComparer.Ordinal);

        public ConfiguredMount? ConfiguredFor(string source) => configured.FirstOrDefault(c => c.Source == source);

        public string? SourceMountedAt(string mountPoint) => Mounted.TryGetValue(mountPoint, out var s) ? s : null;

        public bool IsListed(string source) => listed.Contains(source.Split('@')[0]);

        public bool DriveLetterMountPoints => driveLetters;
    }

    private static ControlRequest R(string op, string? source = null, string? mountPoint = null, bool? readOnly = null) =>
        new() { Op = op, Source = source, MountPoint = mountPoint, ReadOnly = readOnly };

    [Fact]
    public void Administrators_may_do_everything_and_users_what_an_administrator_configured()
    {
        var configured = new[]
        {
            new ConfiguredMount("/srv/a.img", "/mnt/a", ReadWrite: false, 1),
            new ConfiguredMount("/srv/b.img@2", "/mnt/b", ReadWrite: true, 2),
        };
        var facts = new Facts(configured, ["/srv/a.img", "/srv/b.img", "/srv/listed.img"], driveLetters: false);
        var admin = new ControlPeer("uid 0", true);
        var user = new ControlPeer("uid 1000", false);

        foreach (var op in new[] { Operations.Hello, Operations.List, Operations.Info, Operations.Mount, Operations.Unmount,
                     Operations.Recover, Operations.Format, Operations.Check, Operations.Grow, Operations.Subscribe })
            Assert.Null(AccessPolicy.Refusal(admin, R(op, "/etc/shadow", "/etc", readOnly: false), facts));

        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Hello), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.List), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Subscribe), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Info, "/srv/listed.img"), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Info, "/srv/b.img@1"), facts));
        Assert.NotNull(AccessPolicy.Refusal(user, R(Operations.Info, "/home/other/private.img"), facts));
        foreach (var op in AccessPolicy.AdministratorOnly)
            Assert.Contains("needs an administrator", AccessPolicy.Refusal(user, R(op, "/srv/a.img"), facts));

        // Mount: only configured sources, at their mount point, read-write only where configured.
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "/mnt/a"), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "/mnt/a/"), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img"), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "/mnt/a", readOnly: true), facts));
        Assert.Contains("read-only", AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "/mnt/a", readOnly: false), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/b.img@2", "/mnt/b", readOnly: false), facts));
        Assert.Contains("/mnt/a", AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "/etc"), facts));
        Assert.Contains("X:", AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "X:"), facts));
        Assert.Contains("configured", AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/listed.img", "/mnt/a"), facts));
        Assert.NotNull(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/b.img@1", "/mnt/b"), facts));
        Assert.NotNull(AccessPolicy.Refusal(user, R(Operations.Mount, "/dev/sda", "/mnt/a"), facts));
        // Where mount points are drive letters (Windows), any free letter will do; a folder will not.
        var windows = new Facts(configured, [], driveLetters: true);
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "Q:"), windows));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", "*"), windows));
        Assert.NotNull(AccessPolicy.Refusal(user, R(Operations.Mount, "/srv/a.img", @"C:\Windows\System32\xfs"), windows));

        // Unmount: what is configured, by source or by where it is mounted.
        facts.Mounted["/mnt/a"] = "/srv/a.img";
        facts.Mounted["/mnt/adhoc"] = "/srv/listed.img";
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Unmount, "/srv/a.img"), facts));
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Unmount, mountPoint: "/mnt/a"), facts));
        Assert.NotNull(AccessPolicy.Refusal(user, R(Operations.Unmount, mountPoint: "/mnt/adhoc"), facts));
        Assert.NotNull(AccessPolicy.Refusal(user, R(Operations.Unmount, "/srv/listed.img"), facts));
        // Nothing mounted there: the server answers not-mounted, not a refusal.
        Assert.Null(AccessPolicy.Refusal(user, R(Operations.Unmount, mountPoint: "/mnt/none"), facts));
    }

    [Fact]
    public void A_unix_peer_is_an_administrator_when_it_is_root_or_the_servers_own_user()
    {
        Assert.True(UnixSocketListener.PeerOf(0, 1000).IsAdministrator);
        Assert.True(UnixSocketListener.PeerOf(1000, 1000).IsAdministrator);
        Assert.False(UnixSocketListener.PeerOf(1001, 1000).IsAdministrator);
        Assert.False(UnixSocketListener.PeerOf(65534, 0).IsAdministrator);
        Assert.Equal("uid 65534", UnixSocketListener.PeerOf(65534, 0).Name);
    }

    /// <summary>
    /// A minimal client of the control protocol (frames: "XW", version, kind, big-endian length, JSON), run as user
    /// nobody: one connection, one request per argument, one line per reply (progress frames skipped).
    /// </summary>
    private const string NobodyClient = """
        import json, socket, struct, sys
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[1])
        def exactly(n):
            b = b''
            while len(b) < n:
                c = s.recv(n - len(b))
                if not c:
                    raise EOFError('the server closed the connection')
                b += c
            return b
        for i, text in enumerate(sys.argv[2:], 1):
            request = json.loads(text)
            request['id'] = i
            payload = json.dumps(request).encode()
            s.sendall(b'XW' + bytes([3, 1]) + struct.pack('>I', len(payload)) + payload)
            while True:
                header = exactly(8)
                body = exactly(struct.unpack('>I', header[4:8])[0])
                if header[3] == 2:
                    print(body.decode(), flush=True)
                    break
        """;

    private static List<JsonElement> AsNobody(string socket, params object[] requests)
    {
        var args = new List<string> { "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", NobodyClient, socket };
        args.AddRange(requests.Select(r => JsonSerializer.Serialize(r)));
        var run = Shell.Run("setpriv", [.. args], workingDirectory: "/");
        Assert.True(run.ExitCode == 0, $"the client as nobody failed ({run.ExitCode}): {run.StandardError}\n{run.StandardOutput}");
        var lines = run.StandardOutput.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(requests.Length, lines.Length);
        return [.. lines.Select(l => JsonDocument.Parse(l).RootElement.Clone())];
    }

    private static void Refused(JsonElement reply, string contains)
    {
        Assert.False(reply.GetProperty("ok").GetBoolean(), reply.ToString());
        Assert.Equal(ErrorCodes.AccessDenied, reply.GetProperty("error").GetProperty("code").GetString());
        Assert.Contains(contains, reply.GetProperty("error").GetProperty("message").GetString());
    }

    private static void Ok(JsonElement reply) => Assert.True(reply.GetProperty("ok").GetBoolean(), reply.ToString());

    [Fact]
    public async Task A_user_who_is_not_root_may_look_and_mount_what_is_configured_and_nothing_more()
    {
        var configured = TestVolumes.Make(_dir, "configured.img", "SHARED", m => File.WriteAllText(Path.Combine(m, "shared.txt"), "for everyone\n"));
        var other = TestVolumes.Make(_dir, "other.img", "PRIVATE");
        string mountPoint = Path.Combine(_dir, "shared");
        var options = new ServerOptions { ConfiguredMounts = [new ConfiguredMount(configured, mountPoint, ReadWrite: false, 1)] };
        byte[] otherBefore = await File.ReadAllBytesAsync(other);
        await using var server = new TestServer([other], options, ListenerAccess.LocalUsers);
        Assert.Equal((UnixFileMode)Convert.ToInt32("666", 8), File.GetUnixFileMode(server.Socket));

        var replies = AsNobody(server.Socket,
            new { op = "hello" },
            new { op = "list" },
            new { op = "info", source = other },
            new { op = "info", source = "/etc/shadow" },
            new { op = "format", source = other, format = new { force = true } },
            new { op = "check", source = other },
            new { op = "recover", source = other },
            new { op = "grow", source = other, dryRun = true },
            new { op = "mount", source = other, mountPoint = Path.Combine(_dir, "other") },
            new { op = "mount", source = configured, mountPoint = Path.Combine(_dir, "elsewhere") },
            new { op = "mount", source = configured, readOnly = false },
            new { op = "mount", source = configured });
        var hello = replies[0].GetProperty("hello");
        Assert.False(hello.GetProperty("administrator").GetBoolean());
        Assert.Equal("uid 65534", hello.GetProperty("client").GetString());
        Ok(replies[1]);
        var listed = replies[1].GetProperty("list").GetProperty("disks").EnumerateArray()
            .ToDictionary(d => d.GetProperty("path").GetString()!, d => d.GetProperty("volume"));
        Assert.Equal(mountPoint, listed[configured].GetProperty("configuredMountPoint").GetString());
        Assert.False(listed[configured].GetProperty("configuredReadWrite").GetBoolean());
        Assert.False(listed[other].TryGetProperty("configuredMountPoint", out var none) && none.ValueKind == JsonValueKind.String);
        Ok(replies[2]);
        Assert.Equal("PRIVATE", replies[2].GetProperty("volume").GetProperty("summary").GetProperty("label").GetString());
        Refused(replies[3], "not one of the volumes this server lists");
        foreach (var i in new[] { 4, 5, 6, 7 }) Refused(replies[i], "needs an administrator");
        Refused(replies[8], "only the volumes an administrator configured");
        Refused(replies[9], "configured to be mounted at " + mountPoint);
        Refused(replies[10], "configured read-only");
        Ok(replies[11]);
        Assert.Equal(mountPoint, replies[11].GetProperty("mount").GetProperty("mountPoint").GetString());
        Assert.True(replies[11].GetProperty("mount").GetProperty("readOnly").GetBoolean());

        // The kernel serves the configured volume where it was configured; nothing was written to the other one.
        Assert.True(TestVolumes.IsMountPoint(mountPoint));
        Assert.Equal("for everyone\n", await File.ReadAllTextAsync(Path.Combine(mountPoint, "shared.txt")));
        Assert.Equal(otherBefore, await File.ReadAllBytesAsync(other));

        // An administrator's ad hoc mount is not the user's to unmount; the configured one is.
        await using (var root = await server.Connect())
        {
            var rootHello = (await root.CallAsync(new ControlRequest { Op = Operations.Hello })).Hello!;
            Assert.True(rootHello.Administrator);
            Assert.True((await root.CallAsync(new ControlRequest { Op = Operations.Mount, Source = other, MountPoint = Path.Combine(_dir, "adhoc") })).Ok);
        }
        var unmounts = AsNobody(server.Socket,
            new { op = "unmount", mountPoint = Path.Combine(_dir, "adhoc") },
            new { op = "unmount", mountPoint });
        Refused(unmounts[0], "only the volumes an administrator configured");
        Ok(unmounts[1]);
        Assert.False(TestVolumes.IsMountPoint(mountPoint));
        Assert.True(TestVolumes.IsMountPoint(Path.Combine(_dir, "adhoc")));
        Assert.Contains("refused format of uid 65534", server.Log.ToString());
    }
}

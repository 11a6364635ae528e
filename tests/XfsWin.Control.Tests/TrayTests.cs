using System.Net;
using System.Threading.Channels;
using XfsWin.Cli.Service;
using XfsWin.Control.Protocol;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;
using XfsWin.TestSupport;
using XfsWin.Tray;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// The tray app's logic (driver/XfsWin.Tray) against a real control server on a Unix socket serving
/// FUSE mounts of volumes made by mkfs.xfs and filled by the kernel: the menu built from the
/// service's list, commands run from that menu, balloons for the service's events, reconnection
/// when the service restarts. Only the desktop (Explorer, browser, registry) is replaced, by
/// <see cref="RecordingTrayHost"/>, which records what the tray asked of it.
/// </summary>
public sealed class TrayTests : IAsyncDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-tray.").FullName;
    private readonly RecordingTrayHost _host;
    private readonly List<IAsyncDisposable> _owned = [];

    public TrayTests() => _host = new RecordingTrayHost(Path.Combine(_dir, "mnt"));

    public async ValueTask DisposeAsync()
    {
        for (int i = _owned.Count - 1; i >= 0; i--) await _owned[i].DisposeAsync();
        foreach (var m in Directory.Exists(_host.MountRoot) ? Directory.GetDirectories(_host.MountRoot) : [])
            if (TestVolumes.IsMountPoint(m)) Shell.UnmountFuse(m);
        Directory.Delete(_dir, recursive: true);
    }

    private TrayController Tray(Func<CancellationToken, Task<ControlClient>> connect, ManageLauncher? manage = null)
    {
        var tray = new TrayController(connect, _host, manage, [TimeSpan.FromMilliseconds(100)]);
        _owned.Add(tray);
        tray.Start();
        return tray;
    }

    private async Task<TestServer> Server(params string[] sources)
    {
        var server = new TestServer(sources);
        _owned.Add(server);
        await Task.CompletedTask;
        return server;
    }

    /// <summary>Waits for a snapshot matching <paramref name="match"/>; fails after a minute (only a broken tray takes that long).</summary>
    private static async Task<TraySnapshot> WaitFor(TrayController tray, Func<TraySnapshot, bool> match)
    {
        var seen = new TaskCompletionSource<TraySnapshot>(TaskCreationOptions.RunContinuationsAsynchronously);
        void Check(TraySnapshot s)
        {
            if (match(s)) seen.TrySetResult(s);
        }
        tray.Changed += Check;
        try
        {
            Check(tray.Snapshot);
            return await seen.Task.WaitAsync(TimeSpan.FromMinutes(1));
        }
        catch (TimeoutException)
        {
            throw new Xunit.Sdk.XunitException($"the tray did not reach the expected state within a minute; it shows: {tray.Snapshot}");
        }
        finally
        {
            tray.Changed -= Check;
        }
    }

    private static TrayMenuItem VolumeItem(TraySnapshot s, string label) =>
        TrayMenu.Build(s).Single(i => i.Text.StartsWith(label + " (", StringComparison.Ordinal));

    private static TrayCommand Command(TrayMenuItem item, string text) => item.Children!.Single(c => c.Text == text).Command!;

    [Fact]
    public async Task Menu_lists_the_service_volumes_and_mounts_opens_and_unmounts_through_it()
    {
        var clean = TestVolumes.Make(_dir, "clean.img", "trayclean", m => File.WriteAllText(Path.Combine(m, "hello.txt"), "hello from the kernel\n"));
        var dirty = TestVolumes.MakeDirty(_dir, "dirty.img", "traydirty");
        var server = await Server(clean, dirty);
        var tray = Tray(ct => ControlClient.ConnectAsync(server.Socket, ct));
        var s = await WaitFor(tray, s => s.Connection == TrayConnection.Connected);

        var menu = TrayMenu.Build(s);
        Assert.Equal("XfsWin: connected to xfswin", menu[0].Text);
        Assert.False(menu[0].Enabled);
        Assert.Equal(["trayclean (clean.img): not mounted", "traydirty (dirty.img): needs recovery (dirty log)"],
            menu.Where(i => i.Children is not null).Select(i => i.Text));
        Assert.Equal(["Mount (next free drive letter)"], VolumeItem(s, "trayclean").Children!.Select(c => c.Text));
        Assert.Equal(["Mount (next free drive letter)", "Recover: replay the log onto the disk"], VolumeItem(s, "traydirty").Children!.Select(c => c.Text));
        Assert.Contains(menu, i => i.Text == TrayMenu.OpenManagementText && i.Enabled);
        Assert.Equal("XfsWin: 0 of 2 volume(s) mounted", s.Tooltip);

        // Mount from the menu: the kernel sees the FUSE mount and reads the file through it.
        Assert.True(await tray.ExecuteAsync(Command(VolumeItem(s, "trayclean"), "Mount (next free drive letter)")));
        var mountPoint = Path.Combine(_host.MountRoot, "trayclean");
        Assert.True(TestVolumes.IsMountPoint(mountPoint));
        Assert.Equal("hello from the kernel\n", File.ReadAllText(Path.Combine(mountPoint, "hello.txt")));
        var mounted = await _host.WaitForBalloon(b => b.Title == "trayclean mounted");
        Assert.Equal(($"trayclean is mounted read-only at {mountPoint}.", BalloonIcon.Info), (mounted.Text, mounted.Icon));
        s = await WaitFor(tray, s => s.Volumes.Any(v => v.State == VolumeState.Mounted));
        var item = VolumeItem(s, "trayclean");
        Assert.Equal($"trayclean (clean.img): mounted at {mountPoint} (read-only)", item.Text);
        Assert.Equal([$"Open {mountPoint} in Explorer", "Unmount"], item.Children!.Select(c => c.Text));
        Assert.Equal("XfsWin: 1 of 2 volume(s) mounted", s.Tooltip);

        Assert.True(await tray.ExecuteAsync(Command(item, $"Open {mountPoint} in Explorer")));
        Assert.Equal([mountPoint], _host.Folders);

        Assert.True(await tray.ExecuteAsync(Command(item, "Unmount")));
        Assert.False(TestVolumes.IsMountPoint(mountPoint));
        var unmounted = await _host.WaitForBalloon(b => b.Title == "trayclean unmounted");
        Assert.Contains(mountPoint, unmounted.Text);
        await WaitFor(tray, s => s.Volumes.All(v => v.MountPoint is null));

        // A command the service refuses becomes an error balloon, not an exception.
        Assert.False(await tray.ExecuteAsync(new TrayCommand(TrayCommandKind.Unmount, clean)));
        var refused = await _host.WaitForBalloon(b => b.Title == "Unmount failed");
        Assert.Equal(BalloonIcon.Error, refused.Icon);
    }

    [Fact]
    public async Task Recover_from_the_menu_ends_in_a_finished_balloon_and_a_clean_log()
    {
        var dirty = TestVolumes.MakeDirty(_dir, "dirty.img", "traydirty");
        var server = await Server(dirty);
        var tray = Tray(ct => ControlClient.ConnectAsync(server.Socket, ct));
        var s = await WaitFor(tray, s => s.Connection == TrayConnection.Connected);
        Assert.Equal(VolumeState.NeedsRecovery, s.Volumes.Single().State);

        Assert.True(await tray.ExecuteAsync(Command(VolumeItem(s, "traydirty"), "Recover: replay the log onto the disk")));
        var done = await _host.WaitForBalloon(b => b.Title.StartsWith("Log recovery", StringComparison.Ordinal));
        Assert.Equal(("Log recovery finished: traydirty", BalloonIcon.Info), (done.Title, done.Icon));
        s = await WaitFor(tray, s => s.Volumes.Single().State == VolumeState.NotMounted);
        Assert.Equal("clean", s.Volumes.Single().LogState);
        Assert.DoesNotContain(VolumeItem(s, "traydirty").Children!, c => c.Command?.Kind == TrayCommandKind.Recover);
        Assert.Equal(0, TestVolumes.Repair(dirty).ExitCode);
    }

    [Fact]
    public async Task Corruption_found_while_mounted_shows_a_warning_and_the_volume_as_corrupt()
    {
        var image = TestVolumes.Make(_dir, "c.img", "traycorrupt", m =>
        {
            var dir = Directory.CreateDirectory(Path.Combine(m, "blockdir")).FullName;
            for (int i = 0; i < 40; i++) File.WriteAllText(Path.Combine(dir, $"entry_with_a_long_name_{i}"), "x");
        });
        var number = System.Text.RegularExpressions.Regex.Match(
            Shell.RunChecked("xfs_db", "-r", "-c", "path /blockdir", "-c", "inode", image).StandardOutput, @"current inode number is (\d+)").Groups[1].Value;
        // A directory data block with a wrong magic and a valid CRC: only the structure check catches it.
        XfsDb.Write(image, "6.1", $"inode {number}", "dblock 0", "write -d bhdr.hdr.magic 0x12345678");
        var server = await Server(image);
        var tray = Tray(ct => ControlClient.ConnectAsync(server.Socket, ct));
        var s = await WaitFor(tray, s => s.Connection == TrayConnection.Connected);
        Assert.True(await tray.ExecuteAsync(Command(VolumeItem(s, "traycorrupt"), "Mount (next free drive letter)")));
        var mountPoint = Path.Combine(_host.MountRoot, "traycorrupt");
        try
        {
            Assert.ThrowsAny<IOException>(() => Directory.GetFileSystemEntries(Path.Combine(mountPoint, "blockdir")));
            var warning = await _host.WaitForBalloon(b => b.Icon == BalloonIcon.Warning);
            Assert.Equal("traycorrupt dropped to read-only", warning.Title);
            Assert.StartsWith("Corruption found: ", warning.Text);
            Assert.Contains("directory", warning.Text);
            Assert.True(warning.Text.Length <= Notifications.MaxText);
            s = await WaitFor(tray, s => s.Volumes.Single().State == VolumeState.Corrupt);
            Assert.Equal($"traycorrupt (c.img): corrupt, mounted read-only at {mountPoint}", VolumeItem(s, "traycorrupt").Text);
            Assert.True(s.NeedsAttention);
        }
        finally
        {
            await tray.ExecuteAsync(new TrayCommand(TrayCommandKind.Unmount, image, mountPoint));
        }
    }

    [Fact]
    public async Task Tray_reconnects_when_the_service_restarts()
    {
        var image = TestVolumes.Make(_dir, "r.img", "trayrestart");
        var socket = Path.Combine(_dir, "service", "control.sock");
        var options = new ServerOptions { Sources = [image], ScanDevices = false };
        async Task<(VolumeManager, ControlServer)> StartService()
        {
            var volumes = new VolumeManager(options, new FuseMountBackend(TextWriter.Null));
            var server = new ControlServer(ControlEndpoint.Listen(socket), volumes, options);
            server.Start();
            await Task.CompletedTask;
            return (volumes, server);
        }

        var (volumes, server) = await StartService();
        var tray = Tray(ct => ControlClient.ConnectAsync(socket, ct));
        await WaitFor(tray, s => s.Connection == TrayConnection.Connected && s.Volumes.Count == 1);

        await server.DisposeAsync();
        volumes.Dispose();
        var down = await WaitFor(tray, s => s.Connection == TrayConnection.ServiceNotRunning);
        Assert.Empty(down.Volumes);
        Assert.Equal("XfsWin: the service is not running", TrayMenu.Build(down)[0].Text);
        Assert.Contains(TrayMenu.Build(down), i => i.Command?.Kind == TrayCommandKind.Reconnect);
        Assert.DoesNotContain(TrayMenu.Build(down), i => i.Command?.Kind == TrayCommandKind.OpenManagement);
        Assert.True(down.NeedsAttention);
        await _host.WaitForBalloon(b => b.Title == "XfsWin service stopped");

        (volumes, server) = await StartService();
        try
        {
            var up = await WaitFor(tray, s => s.Connection == TrayConnection.Connected);
            Assert.Equal("trayrestart", up.Volumes.Single().Label);
            // Subscribed again: the new service's events reach the tray.
            var mountPoint = _host.ChooseMountPoint(up.Volumes.Single(), [])!;
            await using var other = await ControlClient.ConnectAsync(socket);
            await other.CallAsync(new ControlRequest { Op = Operations.Mount, Source = image, MountPoint = mountPoint });
            await _host.WaitForBalloon(b => b.Title == "trayrestart mounted");
            await other.CallAsync(new ControlRequest { Op = Operations.Unmount, Source = image });
        }
        finally
        {
            await server.DisposeAsync();
            volumes.Dispose();
        }
    }

    [Fact]
    public async Task A_refused_pipe_offers_restart_as_administrator()
    {
        var tray = Tray(_ => throw new UnauthorizedAccessException("Access to the path is denied."));
        var s = await WaitFor(tray, s => s.Connection == TrayConnection.AccessDenied);
        var menu = TrayMenu.Build(s);
        Assert.Equal("XfsWin: the service refused this user", menu[0].Text);
        var restart = menu.Single(i => i.Text == "Restart as administrator");
        Assert.True(await tray.ExecuteAsync(restart.Command!));
        Assert.Equal((1, 1), (_host.Restarts, _host.Exits));
    }

    [Fact]
    public async Task Management_UI_opens_the_address_xfswin_manage_prints()
    {
        var image = TestVolumes.Make(_dir, "m.img", "traymanage");
        var server = await Server(image);
        using var manage = new ManageLauncher("dotnet", [Path.Combine(AppContext.BaseDirectory, "xfswin.dll")], server.Socket);
        var tray = Tray(ct => ControlClient.ConnectAsync(server.Socket, ct), manage);
        var s = await WaitFor(tray, s => s.Connection == TrayConnection.Connected);
        var open = TrayMenu.Build(s).Single(i => i.Text == TrayMenu.OpenManagementText).Command!;

        Assert.True(await tray.ExecuteAsync(open));
        var url = Assert.Single(_host.Urls);
        Assert.Matches("^http://127\\.0\\.0\\.1:\\d+/[0-9a-f]{48}/$", url);
        using var http = new HttpClient();
        using (var list = await http.PostAsync(url + "api/request", new StringContent("{\"op\":\"list\"}")))
        {
            Assert.Equal(HttpStatusCode.OK, list.StatusCode);
            Assert.Contains("\"label\":\"traymanage\"", await list.Content.ReadAsStringAsync());
        }
        // One xfswin manage serves every later click.
        int pid = manage.ProcessId!.Value;
        Assert.True(await tray.ExecuteAsync(open));
        Assert.Equal([url, url], _host.Urls);
        Assert.Equal(pid, manage.ProcessId);

        manage.Dispose();
        Assert.Throws<ArgumentException>(() => System.Diagnostics.Process.GetProcessById(pid));
    }

    [Fact]
    public void The_installed_cli_is_found_where_the_msi_puts_it()
    {
        var tray = Directory.CreateDirectory(Path.Combine(_dir, "installed")).FullName;
        Assert.Equal(Path.Combine(tray, "xfswin"), ManageLauncher.InstalledCli(tray));
        Directory.CreateDirectory(Path.Combine(tray, "cli"));
        File.WriteAllText(Path.Combine(tray, "cli", "xfswin"), "");
        Assert.Equal(Path.Combine(tray, "cli", "xfswin"), ManageLauncher.InstalledCli(tray));
    }

    [Fact]
    public async Task A_missing_xfswin_manage_is_an_error_balloon()
    {
        var server = await Server();
        using var manage = new ManageLauncher(Path.Combine(_dir, "no-such-xfswin"), [], server.Socket);
        var tray = Tray(ct => ControlClient.ConnectAsync(server.Socket, ct), manage);
        await WaitFor(tray, s => s.Connection == TrayConnection.Connected);
        Assert.False(await tray.ExecuteAsync(new TrayCommand(TrayCommandKind.OpenManagement)));
        var b = await _host.WaitForBalloon(b => b.Icon == BalloonIcon.Error);
        Assert.Equal("Opening the management UI failed", b.Title);
        Assert.Contains("no-such-xfswin", b.Text);
        Assert.Empty(_host.Urls);
    }

    [Fact]
    public async Task Start_at_logon_is_toggled_through_the_host_and_shown_checked()
    {
        var tray = Tray(_ => throw new IOException("no service here"));
        Assert.False(TrayMenu.Build(tray.Snapshot).Single(i => i.Text == TrayMenu.StartAtLogonText).Checked);
        Assert.True(await tray.ExecuteAsync(new TrayCommand(TrayCommandKind.ToggleStartAtLogon)));
        Assert.True(_host.StartAtLogon);
        Assert.True(TrayMenu.Build(tray.Snapshot).Single(i => i.Text == TrayMenu.StartAtLogonText).Checked);
        Assert.True(await tray.ExecuteAsync(new TrayCommand(TrayCommandKind.ToggleStartAtLogon)));
        Assert.False(_host.StartAtLogon);
        Assert.False(TrayMenu.Build(tray.Snapshot).Single(i => i.Text == TrayMenu.StartAtLogonText).Checked);
    }

    [Fact]
    public void Run_key_value_is_the_quoted_path_and_is_recognised_in_any_spelling()
    {
        Assert.Equal("\"/opt/x y/xfswin-tray.exe\"", StartAtLogon.CommandLine("/opt/x y/xfswin-tray.exe"));
        Assert.Throws<ArgumentException>(() => StartAtLogon.CommandLine("xfswin-tray.exe"));
        Assert.True(StartAtLogon.Starts("\"/opt/x y/xfswin-tray.exe\"", "/opt/x y/xfswin-tray.exe"));
        Assert.True(StartAtLogon.Starts("/opt/xfswin-tray.exe --flag", "/opt/xfswin-tray.exe"));
        Assert.False(StartAtLogon.Starts("\"/opt/other.exe\"", "/opt/xfswin-tray.exe"));
        Assert.False(StartAtLogon.Starts(null, "/opt/xfswin-tray.exe"));
    }

    [Fact]
    public void Next_free_drive_letter_is_the_first_the_service_offers_that_the_session_does_not_use()
    {
        Assert.Equal("Y:", MountPointChoice.NextFreeDriveLetter(["Z:", "Y:", "X:"], ['C', 'z']));
        Assert.Equal("X:", MountPointChoice.NextFreeDriveLetter(["z:", "y:", "x:"], ['Z', 'Y']));
        Assert.Null(MountPointChoice.NextFreeDriveLetter(["Z:"], ['Z']));
        Assert.Null(MountPointChoice.NextFreeDriveLetter(["/mnt/xfswin/volume"], []));
        Assert.Equal(@"X:\", MountPointChoice.ExplorerPath("X:"));
        Assert.Equal(@"C:\mnt\data", MountPointChoice.ExplorerPath(@"C:\mnt\data"));
    }

    [Fact]
    public void Every_event_kind_has_its_balloon_within_the_shell_limits()
    {
        TrayVolume[] known = [new("/srv/a.img", "data", VolumeState.Mounted, "X:", true, "clean", null)];
        ControlEvent E(string kind, bool ok = true, string? op = null, string message = "m") =>
            new() { Kind = kind, Source = "/srv/a.img", MountPoint = "X:", Ok = ok, Op = op, Message = message };
        Assert.Equal(new Balloon("data mounted", "data is mounted read-only at X:.", BalloonIcon.Info), Notifications.For(E(EventKinds.Mounted), known));
        Assert.Equal(new Balloon("data unmounted", "m", BalloonIcon.Info), Notifications.For(E(EventKinds.Unmounted), known));
        Assert.Equal(BalloonIcon.Warning, Notifications.For(E(EventKinds.VolumeReadOnly, ok: false), known).Icon);
        Assert.Equal(new Balloon("Log recovery failed: data", "m", BalloonIcon.Error), Notifications.For(E(EventKinds.OperationFinished, false, Operations.Recover), known));
        Assert.Equal(new Balloon("Check finished: data", "m", BalloonIcon.Info), Notifications.For(E(EventKinds.OperationFinished, true, "check"), known));
        // An unknown source shows its file name; an unknown kind still shows the server's message.
        Assert.Equal(new Balloon("b.img", "m", BalloonIcon.Info), Notifications.For(new ControlEvent { Kind = "future-kind", Source = "/srv/b.img", Message = "m" }, []));

        var longText = Notifications.For(E(EventKinds.Unmounted, message: new string('x', 300) + "😀"), known);
        Assert.Equal(Notifications.MaxText, longText.Text.Length);
        Assert.EndsWith("…", longText.Text);
        var longTitle = Notifications.Make(new string('t', 61) + "😀😀", "x", BalloonIcon.Info);
        Assert.True(longTitle.Title.Length <= Notifications.MaxTitle);
        Assert.False(char.IsHighSurrogate(longTitle.Title[^2])); // never half a surrogate pair before the ellipsis
    }
    [Fact]
    public void A_user_who_is_not_an_administrator_gets_configured_volumes_and_the_elevated_ui_for_the_rest()
    {
        TrayVolume[] volumes =
        [
            new("/srv/shared.img", "shared", VolumeState.NotMounted, null, true, "clean", null) { ConfiguredMountPoint = "S:" },
            new("/srv/other.img", "other", VolumeState.NeedsRecovery, null, true, "dirty", null),
            new("/srv/adhoc.img", "adhoc", VolumeState.Mounted, "Q:", true, "clean", null),
        ];
        var user = new TraySnapshot(TrayConnection.Connected, "connected to XfsWin service", volumes, Operations.Accepted, false) { Administrator = false };
        var menu = TrayMenu.Build(user);
        Assert.Equal(["Mount at S:"], VolumeItem(user, "shared").Children!.Select(c => c.Text));
        Assert.Equal(new TrayCommand(TrayCommandKind.Mount, "/srv/shared.img"), Command(VolumeItem(user, "shared"), "Mount at S:"));
        Assert.Equal(["Mount" + TrayMenu.AsAdministrator, "Recover" + TrayMenu.AsAdministrator], VolumeItem(user, "other").Children!.Select(c => c.Text));
        Assert.All(VolumeItem(user, "other").Children!, c => Assert.Equal(TrayCommandKind.OpenManagementAsAdministrator, c.Command!.Kind));
        Assert.Equal(["Open Q: in Explorer", "Unmount" + TrayMenu.AsAdministrator], VolumeItem(user, "adhoc").Children!.Select(c => c.Text));
        Assert.Contains(menu, i => i.Text == TrayMenu.OpenManagementAsAdministratorText && i.Command!.Kind == TrayCommandKind.OpenManagementAsAdministrator);

        // An administrator gets every command directly, and no elevation item.
        var admin = user with { Administrator = true };
        Assert.Equal(["Mount (next free drive letter)", "Recover: replay the log onto the disk"], VolumeItem(admin, "other").Children!.Select(c => c.Text));
        Assert.Equal(["Open Q: in Explorer", "Unmount"], VolumeItem(admin, "adhoc").Children!.Select(c => c.Text));
        Assert.DoesNotContain(TrayMenu.Build(admin), i => i.Text == TrayMenu.OpenManagementAsAdministratorText);
    }

    [Fact]
    public async Task A_configured_volume_mounts_where_it_is_configured_and_the_elevated_ui_is_asked_of_the_host()
    {
        var image = TestVolumes.Make(_dir, "cfg.img", "trayconf", m => File.WriteAllText(Path.Combine(m, "c.txt"), "configured\n"));
        var where = Path.Combine(_dir, "configured-here");
        var server = new TestServer([], new ServerOptions { ConfiguredMounts = [new ConfiguredMount(image, where, ReadWrite: false, 1)] });
        _owned.Add(server);
        var tray = Tray(ct => ControlClient.ConnectAsync(server.Socket, ct));
        var s = await WaitFor(tray, s => s.Connection == TrayConnection.Connected && s.Volumes.Count == 1);
        Assert.True(s.Administrator);
        Assert.Equal(where, s.Volumes.Single().ConfiguredMountPoint);
        Assert.True(await tray.ExecuteAsync(Command(VolumeItem(s, "trayconf"), $"Mount at {where}")));
        Assert.True(TestVolumes.IsMountPoint(where));
        Assert.Equal("configured\n", File.ReadAllText(Path.Combine(where, "c.txt")));
        s = await WaitFor(tray, s => s.Volumes.Single().MountPoint == where);
        Assert.True(await tray.ExecuteAsync(Command(VolumeItem(s, "trayconf"), "Unmount")));
        Assert.False(TestVolumes.IsMountPoint(where));

        Assert.True(await tray.ExecuteAsync(new TrayCommand(TrayCommandKind.OpenManagementAsAdministrator)));
        Assert.Equal(1, _host.ElevatedManagementStarts);
    }

    [Fact]
    public void The_management_ui_shows_in_webview2_only_when_its_runtime_is_installed_and_only_its_own_address()
    {
        const string url = "http://127.0.0.1:37041/119c6dc8863824db275ba390372fd16aa4bdade1708acf37/";
        Assert.Equal(ManagementViewKind.WebView2Window, ManagementView.Choose(url, [null, "131.0.2903.112", null]));
        Assert.Equal(ManagementViewKind.WebView2Window, ManagementView.Choose(url, ["0.0.0.0", null, "120.0.2210.91"]));
        // What an uninstall leaves, nothing at all, or garbage: the default browser.
        Assert.Equal(ManagementViewKind.Browser, ManagementView.Choose(url, ["0.0.0.0", "", null]));
        Assert.Equal(ManagementViewKind.Browser, ManagementView.Choose(url, []));
        Assert.Equal(ManagementViewKind.Browser, ManagementView.Choose(url, ["not a version"]));
        // Only xfswin manage's own address, with its token, is ever shown.
        foreach (var bad in new[] { "http://127.0.0.1:37041/", "http://evil.example/119c6dc8863824db275ba390372fd16a/",
                     "https://127.0.0.1:37041/119c6dc8863824db275ba390372fd16a/", "http://127.0.0.1:37041/119C6DC8863824DB275BA390372FD16A/",
                     "http://127.0.0.1:37041/119c6dc8/", "file:///C:/Windows/" })
            Assert.Throws<ArgumentException>(() => ManagementView.Choose(bad, ["131.0.2903.112"]));
        // Navigations stay in the window only under the token.
        Assert.True(ManagementView.StaysInWindow(url, url + "index.html?x=1"));
        Assert.True(ManagementView.StaysInWindow(url, url));
        Assert.False(ManagementView.StaysInWindow(url, "http://127.0.0.1:37041/"));
        Assert.False(ManagementView.StaysInWindow(url, "http://127.0.0.1:37042/119c6dc8863824db275ba390372fd16aa4bdade1708acf37/"));
        Assert.False(ManagementView.StaysInWindow(url, "https://winfsp.dev/rel/"));
        Assert.False(ManagementView.StaysInWindow(url, null));
        Assert.Equal(Path.Combine("/home/u/.local", "XfsWin", "WebView2"), ManagementView.UserDataFolder("/home/u/.local"));
        Assert.All(ManagementView.RuntimeKeys, k => Assert.EndsWith(@"\Microsoft\EdgeUpdate\Clients\{F3017226-FE2A-4295-8BDF-00C3A9A7E4C5}", k.Key));
        Assert.Equal(Path.Combine("runtimes", "win-x64", "native"), ManagementView.LoaderFolder(System.Runtime.InteropServices.Architecture.X64));
        Assert.Equal(Path.Combine("runtimes", "win-arm64", "native"), ManagementView.LoaderFolder(System.Runtime.InteropServices.Architecture.Arm64));
    }
}

/// <summary>The desktop as the tray's tests see it: mount points under a test directory, and a record of every request.</summary>
public sealed class RecordingTrayHost(string mountRoot) : ITrayHost
{
    private readonly Channel<Balloon> _balloons = Channel.CreateUnbounded<Balloon>();
    private readonly List<Balloon> _seen = [];

    public string MountRoot { get; } = mountRoot;
    public List<string> Folders { get; } = [];
    public List<string> Urls { get; } = [];
    public int Restarts { get; private set; }
    public int Exits { get; private set; }
    public bool StartAtLogon { get; set; }

    public void Notify(Balloon balloon) => _balloons.Writer.TryWrite(balloon);

    /// <summary>Waits for a balloon matching <paramref name="match"/> (those seen before included); fails after a minute.</summary>
    public async Task<Balloon> WaitForBalloon(Func<Balloon, bool> match)
    {
        lock (_seen)
            foreach (var b in _seen)
                if (match(b)) return b;
        using var limit = new CancellationTokenSource(TimeSpan.FromMinutes(1));
        try
        {
            while (true)
            {
                var b = await _balloons.Reader.ReadAsync(limit.Token);
                lock (_seen) _seen.Add(b);
                if (match(b)) return b;
            }
        }
        catch (OperationCanceledException)
        {
            string seen;
            lock (_seen) seen = string.Join("; ", _seen.Select(b => b.Title));
            throw new Xunit.Sdk.XunitException($"the expected balloon did not come within a minute; seen: {seen}");
        }
    }

    public void OpenFolder(string path)
    {
        lock (Folders) Folders.Add(path);
    }

    public void ShowManagement(string url)
    {
        lock (Urls) Urls.Add(url);
    }

    public int ElevatedManagementStarts { get; private set; }

    public bool OpenManagementAsAdministrator()
    {
        ElevatedManagementStarts++;
        return true;
    }

    /// <summary>A directory per label (FUSE mounts on an existing directory, where Windows takes a free letter).</summary>
    public string? ChooseMountPoint(TrayVolume volume, IReadOnlyList<string> suggested) =>
        Directory.CreateDirectory(Path.Combine(MountRoot, volume.Label)).FullName;

    public bool RestartAsAdministrator()
    {
        Restarts++;
        return true;
    }

    public void Exit() => Exits++;
}

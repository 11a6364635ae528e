using System.Net;
using Microsoft.Playwright;
using XfsWin.Manage;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// The management UI in a real browser (Debian's chromium driven by Playwright) against volumes
/// made by mkfs.xfs: list, mount through FUSE (read-only and read-write) and unmount, recover a log the
/// kernel left dirty, grow offline and while mounted read-write;
/// and every request without the token refused. Screenshots of each screen go to
/// $XFSWIN_SCREENSHOTS (docs/images when refreshed by hand), or the test's temp directory.
/// </summary>
public sealed class ManageBrowserTests : IAsyncLifetime
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-manage-test.").FullName;
    private string _plain = "", _disk = "", _dirty = "", _scratch = "", _broken = "";
    private TestServer _server = null!;
    private ManageServer _manage = null!;
    private IPlaywright _playwright = null!;
    private IBrowser _browser = null!;

    private static readonly string[] ChromiumFlags =
    [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync",
    ];

    private string ScreenshotDirectory => Environment.GetEnvironmentVariable("XFSWIN_SCREENSHOTS") is { Length: > 0 } d ? d : _dir;

    public async Task InitializeAsync()
    {
        if (!File.Exists("/usr/bin/chromium"))
            throw new InvalidOperationException("/usr/bin/chromium is missing: run scripts/install-deps.sh (apt-get install chromium)");
        _plain = TestVolumes.Make(_dir, "data.img", "data", m =>
        {
            Directory.CreateDirectory(Path.Combine(m, "photos"));
            File.WriteAllText(Path.Combine(m, "photos", "readme.txt"), "served by xfswin\n");
            File.WriteAllBytes(Path.Combine(m, "photos", "big.bin"), new byte[64 << 20]);
        });
        _disk = TestVolumes.MakeGptDisk(_dir, "disk.img", "backup");
        _dirty = TestVolumes.MakeDirty(_dir, "crashed.img", "crashed");
        // A scratch image holding ext4 (format names it before destroying it) and an XFS volume whose
        // AGF 0 free-block count was corrupted with xfs_db (check lists what xfs_repair -n finds).
        _scratch = Path.Combine(_dir, "scratch.img");
        using (var f = File.Create(_scratch)) f.SetLength(400L << 20);
        Shell.RunChecked("mkfs.ext4", "-q", "-F", "-L", "scratch", _scratch);
        _broken = TestVolumes.Make(_dir, "broken.img", "broken");
        Shell.RunChecked("xfs_db", "-x", "-c", "agf 0", "-c", "write -d freeblks 7", _broken);
        _server = new TestServer([_plain, _disk, _dirty, _scratch, _broken]);
        _manage = await ManageServer.StartAsync(ct => ControlClient.ConnectAsync(_server.Socket, ct));
        _playwright = await Playwright.CreateAsync();
        _browser = await _playwright.Chromium.LaunchAsync(new BrowserTypeLaunchOptions
        {
            ExecutablePath = "/usr/bin/chromium", Headless = true, Args = ChromiumFlags,
        });
    }

    public async Task DisposeAsync()
    {
        await _browser.DisposeAsync();
        _playwright.Dispose();
        await _manage.DisposeAsync();
        await _server.DisposeAsync();
        Directory.Delete(_dir, recursive: true);
    }

    private async Task<IPage> Open()
    {
        var page = await _browser.NewPageAsync(new BrowserNewPageOptions { ViewportSize = new ViewportSize { Width = 1280, Height = 800 } });
        page.SetDefaultTimeout(60_000);
        await page.GotoAsync(_manage.Url);
        await page.WaitForSelectorAsync("body[data-ready=true]");
        return page;
    }

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(f));
    }

    private static ILocator Row(IPage page, string source) => page.Locator($"tr[data-source=\"{source}\"]");

    private async Task Shot(IPage page, string name) =>
        await page.ScreenshotAsync(new PageScreenshotOptions { Path = Path.Combine(ScreenshotDirectory, name), FullPage = true });

    [Fact]
    public async Task Lists_disks_partitions_and_volumes_with_usage_and_state()
    {
        var page = await Open();
        Assert.Equal(5, await page.Locator(".disk").CountAsync());
        var plain = Row(page, _plain);
        Assert.Equal("data", (await plain.Locator("td").Nth(1).InnerTextAsync()).Trim());
        var uuid = XfsDb.Fields(Shell.RunChecked("xfs_db", "-r", "-c", "sb 0", "-c", "print uuid", _plain).StandardOutput)["uuid"];
        Assert.Equal(uuid, (await plain.Locator("td").Nth(2).InnerTextAsync()).Trim());
        Assert.Equal("healthy", (await plain.Locator("td").Nth(6).InnerTextAsync()).Trim());
        Assert.Equal("partition 1", (await Row(page, _disk + "@1").Locator("td").First.InnerTextAsync()).Trim());
        Assert.Equal("backup", (await Row(page, _disk + "@1").Locator("td").Nth(1).InnerTextAsync()).Trim());
        Assert.Equal("dirty", (await Row(page, _dirty).Locator("td").Nth(5).InnerTextAsync()).Trim());
        // Only operations the service accepts are offered.
        var ops = await plain.Locator("button").EvaluateAllAsync<string[]>("b => b.map(x => x.dataset.op)");
        Assert.Equal(["info", "mount", "recover", "check", "grow", "format"], ops);
        // What holds no XFS volume is offered for formatting as a whole.
        Assert.Equal(1, await page.Locator($".disk[data-disk=\"{_scratch}\"] .disk-head button[data-op=format]").CountAsync());
        Assert.Equal(0, await page.Locator($".disk[data-disk=\"{_plain}\"] .disk-head button[data-op=format]").CountAsync());
        await Shot(page, "manage-volumes.png");

        await plain.Locator("button[data-op=info]").ClickAsync();
        await page.WaitForSelectorAsync("#details dl");
        Assert.Contains("XFS v5", await page.Locator("#details").InnerTextAsync());
        await Shot(page, "manage-info.png");
    }

    [Fact]
    public async Task Mounts_through_fuse_and_unmounts()
    {
        var page = await Open();
        var mountPoint = Path.Combine(_dir, "mounted", "data");
        await Row(page, _plain).Locator("button[data-op=mount]").ClickAsync();
        await page.FillAsync("#mount-point", mountPoint);
        await Shot(page, "manage-mount-dialog.png");
        await page.ClickAsync("#mount-confirm");
        await page.WaitForFunctionAsync($"() => document.querySelector('tr[data-source=\"{_plain}\"] td.mountpoint')?.textContent === {System.Text.Json.JsonSerializer.Serialize(mountPoint)}");
        Assert.True(TestVolumes.IsMountPoint(mountPoint));
        Assert.Equal("served by xfswin\n", File.ReadAllText(Path.Combine(mountPoint, "photos", "readme.txt")));
        await page.WaitForSelectorAsync("#events li[data-kind=mounted]");
        await Shot(page, "manage-mounted.png");

        await Row(page, _plain).Locator("button[data-op=unmount]").ClickAsync();
        await page.WaitForFunctionAsync($"() => document.querySelector('tr[data-source=\"{_plain}\"] button[data-op=mount]') !== null");
        Assert.False(TestVolumes.IsMountPoint(mountPoint));
        await page.WaitForSelectorAsync("#events li[data-kind=unmounted]");
    }

    [Fact]
    public async Task Grows_a_volume_offline_then_while_mounted_read_write()
    {
        // The image file grows first (as a disk or partition would), to 480 MiB; the volume is 320 MiB.
        using (var f = new FileStream(_plain, FileMode.Open)) f.SetLength(480L << 20);
        var page = await Open();
        await Row(page, _plain).Locator("button[data-op=grow]").ClickAsync();
        await page.WaitForSelectorAsync("#grow-dialog[open]");
        Assert.Contains("320.0 MiB (81920 blocks)", await page.InnerTextAsync("#grow-current"));
        Assert.Contains("480.0 MiB (122880 blocks)", await page.InnerTextAsync("#grow-device"));
        // The shrink limit: the free tail of the last AG can go, down to what the CLI's refusal names.
        var smallest = ulong.Parse(System.Text.RegularExpressions.Regex.Match(await page.InnerTextAsync("#grow-smallest"), @"\((\d+) blocks\)").Groups[1].Value);
        var cliErr = new StringWriter();
        int cliCode = XfsWin.Cli.Program.Run(["grow", "--no-progress", "-D", (smallest - 1).ToString(), _plain],
            new XfsWin.Cli.CliConsole { Out = new StringWriter(), Error = cliErr, StdoutStream = new MemoryStream() });
        Assert.NotEqual(0, cliCode);
        Assert.Contains($"the smallest size is {smallest} blocks", cliErr.ToString());
        Assert.Contains("Not mounted", await page.InnerTextAsync("#grow-where"));
        await page.FillAsync("#grow-size", "400m");
        await Shot(page, "manage-grow-dialog.png");
        await page.ClickAsync("#grow-confirm");
        await page.WaitForFunctionAsync("() => document.getElementById('operation-stage').textContent === 'done'");
        Assert.Contains("grown from 81920 to 102400 blocks", await page.InnerTextAsync("#operation-result"));
        await page.WaitForSelectorAsync("#events li[data-kind=operation-finished]");
        await Shot(page, "manage-grown.png");

        // Mount read-write: the dialog's checkbox.
        var mountPoint = Path.Combine(_dir, "mounted", "rw");
        await Row(page, _plain).Locator("button[data-op=mount]").ClickAsync();
        await page.FillAsync("#mount-point", mountPoint);
        await page.CheckAsync("#mount-rw");
        await Shot(page, "manage-mount-rw-dialog.png");
        await page.ClickAsync("#mount-confirm");
        await page.WaitForFunctionAsync("() => document.getElementById('operation-stage').textContent === 'done'");
        Assert.Contains("Mounted read-write", await page.InnerTextAsync("#operation-result"));
        File.WriteAllText(Path.Combine(mountPoint, "photos", "written.txt"), "written through the service's mount\n");

        // Grow while mounted: to the whole device.
        await Row(page, _plain).Locator("button[data-op=grow]").ClickAsync();
        await page.WaitForSelectorAsync("#grow-dialog[open]");
        Assert.Contains("Mounted read-write", await page.InnerTextAsync("#grow-where"));
        Assert.Contains("400.0 MiB (102400 blocks)", await page.InnerTextAsync("#grow-current"));
        await Shot(page, "manage-grow-online-dialog.png");
        await page.ClickAsync("#grow-confirm");
        await page.WaitForFunctionAsync("() => document.getElementById('operation-stage').textContent === 'done'");
        Assert.Contains("grown from 102400 to 122880 blocks while mounted", await page.InnerTextAsync("#operation-result"));
        await Shot(page, "manage-grown-online.png");
        long statfs = long.Parse(Shell.RunChecked("stat", "-f", "-c", "%b", mountPoint).StandardOutput.Trim());

        await Row(page, _plain).Locator("button[data-op=unmount]").ClickAsync();
        await page.WaitForFunctionAsync($"() => document.querySelector('tr[data-source=\"{_plain}\"] button[data-op=mount]') !== null");
        var repair = TestVolumes.Repair(_plain);
        Assert.True(repair.ExitCode == 0, repair.StandardError + repair.StandardOutput);
        using var kernel = LoopMount.Mount(_plain, readOnly: true);
        Assert.Equal(statfs, long.Parse(Shell.RunChecked("stat", "-f", "-c", "%b", kernel.MountPoint).StandardOutput.Trim()));
        Assert.Equal("written through the service's mount\n", File.ReadAllText(Path.Combine(kernel.MountPoint, "photos", "written.txt")));
        Assert.Equal("served by xfswin\n", File.ReadAllText(Path.Combine(kernel.MountPoint, "photos", "readme.txt")));
    }

    [Fact]
    public async Task Recovers_a_log_the_kernel_left_dirty()
    {
        var page = await Open();
        await Row(page, _dirty).Locator("button[data-op=recover]").ClickAsync();
        await page.ClickAsync("#recover-confirm");
        await page.WaitForFunctionAsync("() => document.getElementById('operation-stage').textContent === 'done'");
        Assert.Contains("recovered", await page.Locator("#operation-result").InnerTextAsync());
        await page.WaitForFunctionAsync($"() => document.querySelector('tr[data-source=\"{_dirty}\"] td:nth-child(6)')?.textContent === 'clean'");
        await page.WaitForSelectorAsync("#events li[data-kind=operation-finished]");
        await Shot(page, "manage-recovered.png");
        var repair = TestVolumes.Repair(_dirty);
        Assert.True(repair.ExitCode == 0, repair.StandardError + repair.StandardOutput);
        using var kernel = LoopMount.Mount(_dirty, readOnly: true, extraOptions: "norecovery");
        Assert.Equal(200, Directory.GetFiles(Path.Combine(kernel.MountPoint, "late")).Length);
    }

    [Fact]
    public async Task Formats_a_scratch_image_checks_it_and_refuses_a_format_without_the_token()
    {
        var page = await Open();
        await page.ClickAsync($".disk[data-disk=\"{_scratch}\"] button[data-op=format]");
        await page.WaitForSelectorAsync("#format-dialog[open]");
        // mkfs.xfs 6.13's defaults for this image are filled in, and what it holds is named.
        var oracle = Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-N", "-f", _scratch).StandardOutput;
        string agcount = System.Text.RegularExpressions.Regex.Match(oracle, @"agcount=(\d+)").Groups[1].Value;
        Assert.Equal(agcount, await page.InputValueAsync("#format-agcount"));
        Assert.Equal("4096", await page.InputValueAsync("#format-blockSize"));
        Assert.Equal("512", await page.InputValueAsync("#format-inodeSize"));
        foreach (var (feature, on) in new[] { ("crc", true), ("finobt", true), ("sparse", true), ("rmapbt", true), ("reflink", true), ("bigtime", true),
                     ("inobtcount", true), ("nrext64", true), ("exchange", false), ("parent", false), ("metadir", false) })
        {
            Assert.True(on == await page.IsCheckedAsync("#format-" + feature), feature);
            Assert.Contains($"{feature}={(on ? 1 : 0)}", oracle);
        }
        Assert.Contains("Holds an ext4 file system labelled 'scratch'", await page.InnerTextAsync("#format-holds"));
        await page.FillAsync("#format-label", "fresh");
        await Shot(page, "manage-format-dialog.png");

        await page.ClickAsync("#format-next");
        await page.WaitForSelectorAsync("#format-confirm-dialog[open]");
        Assert.Equal(_scratch, await page.InnerTextAsync("#format-confirm-target"));
        Assert.Contains("This destroys an ext4 file system labelled 'scratch'", await page.InnerTextAsync("#format-confirm-destroys"));
        Assert.Contains("agcount=" + agcount, await page.InnerTextAsync("#format-confirm-summary"));
        await Shot(page, "manage-format-confirm.png");
        await page.ClickAsync("#format-confirm");
        await page.WaitForFunctionAsync("() => document.getElementById('operation-stage').textContent === 'done'");
        Assert.Contains("made an XFS volume labelled 'fresh'", await page.InnerTextAsync("#operation-result"));
        await page.WaitForFunctionAsync($"() => document.querySelector('tr[data-source=\"{_scratch}\"] td:nth-child(2)')?.textContent === 'fresh'");
        await page.WaitForSelectorAsync("#events li[data-kind=operation-finished]");
        await Shot(page, "manage-formatted.png");
        var repair = TestVolumes.Repair(_scratch);
        Assert.True(repair.ExitCode == 0, repair.StandardError + repair.StandardOutput);
        using (var kernel = LoopMount.Mount(_scratch, readOnly: false))
            File.WriteAllText(Path.Combine(kernel.MountPoint, "after.txt"), "the kernel writes here\n");

        // Check the new volume: clean.
        await Row(page, _scratch).Locator("button[data-op=check]").ClickAsync();
        await page.WaitForSelectorAsync("#operation-details .check[data-clean=true]");
        Assert.Contains("clean", await page.InnerTextAsync("#operation-result"));
        await Shot(page, "manage-check-clean.png");

        // Check the corrupted one: the problems xfs_repair -n also reports, in a table.
        var oracleRepair = TestVolumes.Repair(_broken);
        Assert.Contains("agf_freeblks 7, counted", oracleRepair.StandardOutput + oracleRepair.StandardError);
        await Row(page, _broken).Locator("button[data-op=check]").ClickAsync();
        await page.WaitForSelectorAsync("#operation-details .check[data-clean=false]");
        var rows = await page.Locator("#operation-details table.problems tbody tr").AllInnerTextsAsync();
        Assert.Contains(rows, r => r.Contains("AGF", StringComparison.OrdinalIgnoreCase) && r.Contains("0x1") && r.Contains('7'));
        await Shot(page, "manage-check-problems.png");

        // Without the token a format is refused, and nothing is written.
        string before = Hash(_broken);
        using var http = new HttpClient();
        string body = "{\"op\":\"format\",\"source\":" + System.Text.Json.JsonSerializer.Serialize(_broken) + ",\"format\":{\"force\":true}}";
        foreach (var url in new[] { $"http://127.0.0.1:{_manage.Port}/api/request", $"http://127.0.0.1:{_manage.Port}/{new string('0', _manage.Token.Length)}/api/request" })
        {
            using var r = await http.PostAsync(url, new StringContent(body));
            Assert.Equal(HttpStatusCode.Forbidden, r.StatusCode);
        }
        Assert.Equal(before, Hash(_broken));
    }

    [Fact]
    public async Task Every_request_without_the_token_is_refused()
    {
        using var http = new HttpClient();
        string origin = $"http://127.0.0.1:{_manage.Port}";
        string wrong = new string('0', _manage.Token.Length);
        foreach (var path in new[] { "/", "/index.html", "/app.js", "/app.css", "/api/events", $"/{wrong}/", $"/{wrong}/app.js", $"/{_manage.Token[..^1]}/", $"/{_manage.Token}x/" })
        {
            using var r = await http.GetAsync(origin + path);
            Assert.True(r.StatusCode == HttpStatusCode.Forbidden, $"GET {path}: {r.StatusCode}");
        }
        using (var post = await http.PostAsync(origin + "/api/request", new StringContent("{\"op\":\"list\"}")))
            Assert.Equal(HttpStatusCode.Forbidden, post.StatusCode);
        using (var post = await http.PostAsync($"{origin}/{wrong}/api/request", new StringContent("{\"op\":\"list\"}")))
            Assert.Equal(HttpStatusCode.Forbidden, post.StatusCode);
        // The right token under another host name (DNS rebinding) is refused too.
        using (var rebound = new HttpRequestMessage(HttpMethod.Get, _manage.Url))
        {
            rebound.Headers.Host = $"attacker.example:{_manage.Port}";
            using var r = await http.SendAsync(rebound);
            Assert.Equal(HttpStatusCode.Forbidden, r.StatusCode);
        }
        // With the token everything answers.
        using (var ok = await http.GetAsync(_manage.Url + "app.js"))
            Assert.Equal(HttpStatusCode.OK, ok.StatusCode);
        using (var ok = await http.PostAsync(_manage.Url + "api/request", new StringContent("{\"op\":\"list\"}")))
        {
            Assert.Equal(HttpStatusCode.OK, ok.StatusCode);
            Assert.Contains("\"ok\":true", await ok.Content.ReadAsStringAsync());
        }

        var page = await _browser.NewPageAsync();
        var response = await page.GotoAsync(origin + "/");
        Assert.Equal(403, response!.Status);
        await Shot(page, "manage-forbidden.png");
    }
}

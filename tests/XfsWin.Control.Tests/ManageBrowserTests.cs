using System.Net;
using Microsoft.Playwright;
using XfsWin.Manage;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>
/// The management UI in a real browser (Debian's chromium driven by Playwright) against volumes
/// made by mkfs.xfs: list, mount through FUSE and unmount, recover a log the kernel left dirty;
/// and every request without the token refused. Screenshots of each screen go to
/// $XFSWIN_SCREENSHOTS (docs/images when refreshed by hand), or the test's temp directory.
/// </summary>
public sealed class ManageBrowserTests : IAsyncLifetime
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-manage-test.").FullName;
    private string _plain = "", _disk = "", _dirty = "";
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
        _server = new TestServer([_plain, _disk, _dirty]);
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

    private static ILocator Row(IPage page, string source) => page.Locator($"tr[data-source=\"{source}\"]");

    private async Task Shot(IPage page, string name) =>
        await page.ScreenshotAsync(new PageScreenshotOptions { Path = Path.Combine(ScreenshotDirectory, name), FullPage = true });

    [Fact]
    public async Task Lists_disks_partitions_and_volumes_with_usage_and_state()
    {
        var page = await Open();
        Assert.Equal(3, await page.Locator(".disk").CountAsync());
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
        Assert.Equal(["info", "mount", "recover"], ops);
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

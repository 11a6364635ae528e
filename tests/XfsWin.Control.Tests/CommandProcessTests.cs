using System.Diagnostics;
using System.Net;
using System.Text.RegularExpressions;
using XfsWin.Control.Protocol;
using Xunit;

namespace XfsWin.Control.Tests;

/// <summary>`xfswin service` and `xfswin manage` as processes: what they print, serve, and how they stop.</summary>
public sealed partial class CommandProcessTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-commands.").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private static Process Start(params string[] args)
    {
        var psi = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        psi.ArgumentList.Add(Path.Combine(AppContext.BaseDirectory, "xfswin.dll"));
        foreach (var a in args) psi.ArgumentList.Add(a);
        return Process.Start(psi)!;
    }

    private static async Task<string> FirstLine(Process p)
    {
        var line = await p.StandardOutput.ReadLineAsync().WaitAsync(TimeSpan.FromMinutes(1));
        return line ?? throw new Xunit.Sdk.XunitException($"no output; stderr: {await p.StandardError.ReadToEndAsync()}");
    }

    private static async Task Terminate(Process p)
    {
        Assert.Equal(0, Kill(p.Id, 15));
        await p.WaitForExitAsync().WaitAsync(TimeSpan.FromMinutes(1));
        Assert.True(p.ExitCode == 0, await p.StandardError.ReadToEndAsync());
    }

    [System.Runtime.InteropServices.LibraryImport("libc", EntryPoint = "kill")]
    private static partial int Kill(int pid, int signal);

    [GeneratedRegex("^http://127\\.0\\.0\\.1:(\\d+)/([0-9a-f]{48})/$")]
    private static partial Regex ManageUrl();

    [Fact]
    public async Task Manage_prints_its_tokened_url_first_and_serves_only_with_it()
    {
        var image = TestVolumes.Make(_dir, "v.img", "procvol");
        using var manage = Start("manage", "--no-browser", "--socket", Path.Combine(_dir, "nothing-here.sock"), "--source", image, "--no-scan");
        try
        {
            var url = await FirstLine(manage);
            var match = ManageUrl().Match(url);
            Assert.True(match.Success, url);
            using var http = new HttpClient();
            using (var page = await http.GetAsync(url))
                Assert.Equal(HttpStatusCode.OK, page.StatusCode);
            using (var bare = await http.GetAsync($"http://127.0.0.1:{match.Groups[1].Value}/"))
                Assert.Equal(HttpStatusCode.Forbidden, bare.StatusCode);
            using var list = await http.PostAsync(url + "api/request", new StringContent("{\"op\":\"list\"}"));
            var body = await list.Content.ReadAsStringAsync();
            Assert.Contains("\"label\":\"procvol\"", body);
        }
        finally
        {
            await Terminate(manage);
        }
    }

    [Fact]
    public async Task Service_listens_serves_auto_mounts_and_unmounts_everything_when_stopped()
    {
        var image = TestVolumes.Make(_dir, "s.img", "svcvol", m => File.WriteAllText(Path.Combine(m, "a.txt"), "auto\n"));
        var socket = Path.Combine(_dir, "run", "control.sock");
        var mountPoint = Path.Combine(_dir, "auto");
        using var service = Start("service", "--socket", socket, "--source", image, "--no-scan", "--mount", image, mountPoint);
        try
        {
            Assert.Equal("xfswin service: listening on " + socket, await FirstLine(service));
            Assert.True(TestVolumes.IsMountPoint(mountPoint));
            Assert.Equal("auto\n", File.ReadAllText(Path.Combine(mountPoint, "a.txt")));
            await using var client = await ControlClient.ConnectAsync(socket);
            var volume = (await client.CallAsync(new ControlRequest { Op = Operations.List })).List!.Disks.Single().Volume!;
            Assert.Equal(mountPoint, volume.MountPoint);
        }
        finally
        {
            await Terminate(service);
        }
        Assert.False(TestVolumes.IsMountPoint(mountPoint));
        Assert.False(File.Exists(socket));
    }
}

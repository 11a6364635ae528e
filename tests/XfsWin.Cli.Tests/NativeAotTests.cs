using System.Diagnostics;
using System.Text.Json;
using System.Text.Json.Nodes;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// The Linux x64 CLI as it ships: the Native AOT binary scripts/publish-cli.sh makes, published once for this class
/// into a directory of the run (its build tree there too, never the source tree's bin/ and obj/), removed afterwards.
/// </summary>
public sealed class NativeAotBinary : IDisposable
{
    private readonly string _dir;

    public NativeAotBinary()
    {
        _dir = Sh.Check("mktemp", "-d", "/tmp/xfswin-aot-test.XXXXXX").Trim();
        var r = Sh.Run("bash", System.IO.Path.Combine(XfsWin.TestSupport.OracleImages.RepoRoot, "scripts", "publish-cli.sh"), System.IO.Path.Combine(_dir, "out"));
        if (r.Code != 0) throw new InvalidOperationException($"scripts/publish-cli.sh failed with exit code {r.Code}:\n{r.Err}\n{r.Out}");
        Path = r.Out.Trim();
    }

    public string Path { get; }

    public void Dispose() => Sh.Run("rm", "-rf", _dir);
}

/// <summary>
/// The AOT binary against the CLI run in process (the JIT build every other test uses): the same bytes for listings,
/// JSON (source-generated, no reflection) and file contents, the same check report, a FUSE mount (native callbacks)
/// serving what the kernel serves, and the management web UI (ASP.NET Core) answering a control request.
/// </summary>
public sealed class NativeAotTests(NativeAotBinary aot) : IClassFixture<NativeAotBinary>
{
    private static string Tree => FixtureImages.Tree;

    private Sh.Result RunAot(params string[] args) => Sh.Run(aot.Path, args);

    [Theory]
    [InlineData("info", "TREE", "--json")]
    [InlineData("info", "TREE")]
    [InlineData("ls", "-R", "-l", "-a", "--json", "TREE", "/")]
    [InlineData("ls", "-l", "TREE", "/dir")]
    [InlineData("stat", "--json", "TREE", "/dir/hello.txt")]
    [InlineData("cat", "TREE", "/big.bin")]
    [InlineData("cat", "TREE", "/sparse.bin")]
    [InlineData("ls", "TREE", "/no/such/dir")]
    public async Task Gives_the_same_output_and_exit_code_as_the_cli_in_process(params string[] args)
    {
        args = args.Select(a => a == "TREE" ? Tree : a).ToArray();
        var expected = Xfswin.Run(args);
        var psi = new ProcessStartInfo(aot.Path) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in args) psi.ArgumentList.Add(a);
        using var p = Process.Start(psi)!;
        var errTask = p.StandardError.ReadToEndAsync();
        using var stdout = new MemoryStream();
        await p.StandardOutput.BaseStream.CopyToAsync(stdout);
        await p.WaitForExitAsync();
        string err = await errTask;
        Assert.True(expected.Code == p.ExitCode, $"exit {p.ExitCode}, in process {expected.Code}; stderr: {err}");
        byte[] want = expected.Stdout.Length > 0 ? expected.Stdout : System.Text.Encoding.UTF8.GetBytes(expected.Out);
        Assert.True(want.AsSpan().SequenceEqual(stdout.ToArray()), $"xfswin {string.Join(' ', args)}: {stdout.Length} bytes from the AOT binary, {want.Length} in process");
        Assert.Equal(expected.Err.Length == 0, err.Length == 0);
    }

    [Fact]
    public void Check_reports_the_same_as_the_cli_in_process_on_a_clean_and_a_damaged_volume()
    {
        // Private copies: tests of other classes loop-mount the shared images at times, and check names a mount of
        // its volume (where and by whom) in its report.
        using var dir = new TempDir();
        foreach (var (shared, code) in new[] { (Tree, 0), (FixtureImages.Malicious, 1) })
        {
            string image = System.IO.Path.Combine(dir.Path, System.IO.Path.GetFileName(shared));
            Sh.Check("cp", "--sparse=always", shared, image);
            var expected = Xfswin.Run("check", "--json", "--no-progress", image);
            var r = RunAot("check", "--json", "--no-progress", image);
            Assert.True(expected.Code == code && r.Code == code, $"{image}: exit {r.Code} from the AOT binary, {expected.Code} in process, {code} expected\n{r.Err}");
            Assert.Equal(WithoutTimes(expected.Out), WithoutTimes(r.Out));
        }
    }

    /// <summary>The report with its times (which differ from run to run) left out.</summary>
    private static string WithoutTimes(string json)
    {
        var node = JsonNode.Parse(json)!.AsObject();
        var summary = node["summary"]!.AsObject();
        summary.Remove("elapsedSeconds");
        foreach (var phase in summary["phases"]!.AsArray()) phase!.AsObject().Remove("seconds");
        return node.ToJsonString();
    }

    [Fact]
    public void A_fuse_mount_by_the_aot_binary_serves_the_tree_the_kernel_serves()
    {
        using var kernel = new LoopMount(Tree);
        using var dir = new TempDir();
        string mnt = System.IO.Path.Combine(dir.Path, "mnt");
        Directory.CreateDirectory(mnt);
        var mount = RunAot("mount", Tree, mnt);
        Assert.True(mount.Code == 0, $"mount failed: {mount.Err}");
        try
        {
            // Names, types, sizes, modes, owners and link targets of every object, then every regular file's bytes.
            const string List = "cd \"$1\" && find . -printf '%p %y %s %m %U %G %l\\n' | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum";
            string fromKernel = Sh.Check("bash", "-c", List, "list", kernel.Path);
            string fromAot = Sh.Check("bash", "-c", List, "list", mnt);
            Assert.Equal(fromKernel, fromAot);
            Assert.Contains("./dir/hello.txt", fromAot, StringComparison.Ordinal);
        }
        finally
        {
            XfsWin.TestSupport.Shell.UnmountFuse(mnt);
        }
    }

    [Fact]
    public async Task The_management_ui_of_the_aot_binary_answers_a_control_request()
    {
        using var dir = new TempDir();
        var psi = new ProcessStartInfo(aot.Path) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in new[] { "manage", "--no-browser", "--no-scan", "--socket", System.IO.Path.Combine(dir.Path, "none.sock"), "--source", Tree })
            psi.ArgumentList.Add(a);
        using var p = Process.Start(psi)!;
        try
        {
            string url = (await p.StandardOutput.ReadLineAsync().WaitAsync(TimeSpan.FromMinutes(2)))?.Trim() ?? "";
            Assert.StartsWith("http://127.0.0.1:", url, StringComparison.Ordinal);
            using var http = new HttpClient();
            string page = await http.GetStringAsync(url);
            Assert.Contains("<html", page, StringComparison.OrdinalIgnoreCase);
            using var reply = await http.PostAsync(url + "api/request", new StringContent("{\"op\":\"list\"}"));
            string body = await reply.Content.ReadAsStringAsync();
            Assert.True(reply.IsSuccessStatusCode, body);
            using var json = JsonDocument.Parse(body);
            Assert.True(json.RootElement.GetProperty("ok").GetBoolean(), body);
            Assert.Contains("\"label\":\"cli-tree\"", body, StringComparison.Ordinal);
        }
        finally
        {
            p.Kill(entireProcessTree: true);
            await p.WaitForExitAsync();
        }
    }
}

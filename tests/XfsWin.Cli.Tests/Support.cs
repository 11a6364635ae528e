using System.Diagnostics;
using System.Security.Cryptography;
using System.Text;
using XfsWin.Cli;

namespace XfsWin.Cli.Tests;

/// <summary>Runs external tools (mkfs.xfs, mount, sfdisk, python3, ...). Missing tools fail the test loudly.</summary>
public static class Sh
{
    public sealed record Result(int Code, string Out, string Err);

    public static Result Run(string file, params string[] args)
    {
        var psi = new ProcessStartInfo(file) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in args) psi.ArgumentList.Add(a);
        Process p;
        try
        {
            p = Process.Start(psi)!;
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            throw new InvalidOperationException($"cannot run '{file}': {e.Message}. Install the test dependencies: scripts/install-deps.sh (as root)", e);
        }
        using (p)
        {
            var err = p.StandardError.ReadToEndAsync();
            string output = p.StandardOutput.ReadToEnd();
            p.WaitForExit();
            return new Result(p.ExitCode, output, err.Result);
        }
    }

    public static string Check(string file, params string[] args)
    {
        var r = Run(file, args);
        if (r.Code != 0)
            throw new InvalidOperationException($"'{file} {string.Join(' ', args)}' failed with exit code {r.Code}:\n{r.Err}\n{r.Out}");
        return r.Out;
    }
}

/// <summary>
/// Images the tests use, built by the scripts in Fixtures/ (mkfs.xfs, kernel loop mounts, sfdisk,
/// sgdisk, xfs_db) and cached per script content under $XFSWIN_TEST_CACHE (default: the temp dir),
/// so a test run builds each once and a changed script builds afresh.
/// </summary>
public static class FixtureImages
{
    private static readonly Lazy<string> TreeDir = new(() => Build("make-tree.sh"));
    private static readonly Lazy<string> DisksDir = new(() => Build("make-disks.sh"));
    private static readonly Lazy<string> MaliciousDir = new(() => Build("make-malicious.sh"));

    public static string Tree => Path.Combine(TreeDir.Value, "tree.img");
    public static string Disks => DisksDir.Value;
    public static string Malicious => Path.Combine(MaliciousDir.Value, "malicious.img");

    public static string FixturePath(string name) => Path.Combine(AppContext.BaseDirectory, "Fixtures", name);

    private static string Build(string script)
    {
        string path = FixturePath(script);
        string hash = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(path)))[..16].ToLowerInvariant();
        string cacheRoot = Environment.GetEnvironmentVariable("XFSWIN_TEST_CACHE") is { Length: > 0 } c
            ? c : Path.Combine(Path.GetTempPath(), "xfswin-cli-test-cache");
        string final = Path.Combine(cacheRoot, $"{Path.GetFileNameWithoutExtension(script)}-{hash}");
        if (Directory.Exists(final)) return final;
        Directory.CreateDirectory(cacheRoot);
        using var lockFile = AcquireLock(final + ".lock");
        if (Directory.Exists(final)) return final;
        string work = final + ".building";
        if (Directory.Exists(work)) Directory.Delete(work, recursive: true);
        Directory.CreateDirectory(work);
        Sh.Check("bash", path, work);
        Directory.Move(work, final);
        return final;
    }

    private static FileStream AcquireLock(string path)
    {
        for (int i = 0; ; i++)
        {
            try
            {
                return new FileStream(path, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None);
            }
            catch (IOException) when (i < 1200)
            {
                Thread.Sleep(250);
            }
        }
    }

    /// <summary>A sparse copy of an image the test may damage.</summary>
    public static string CopyToTemp(string image, TempDir dir)
    {
        string copy = Path.Combine(dir.Path, Path.GetFileName(image));
        Sh.Check("cp", "--sparse=always", image, copy);
        return copy;
    }
}

public sealed class TempDir : IDisposable
{
    public TempDir() => Path = Sh.Check("mktemp", "-d", "/tmp/xfswin-cli-test.XXXXXX").Trim();

    public string Path { get; }

    public void Dispose()
    {
        try { Directory.Delete(Path, recursive: true); }
        catch (IOException) { Sh.Run("rm", "-rf", Path); }
        catch (UnauthorizedAccessException) { Sh.Run("rm", "-rf", Path); }
    }
}

/// <summary>A read-only kernel loop mount of a fixture image (the shared harness's mount: nouuid, always detached).</summary>
public sealed class LoopMount : IDisposable
{
    private readonly XfsWin.TestSupport.LoopMount _mount;

    public LoopMount(string image, string? extraOptions = null) =>
        _mount = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: true, extraOptions);

    public string Path => _mount.MountPoint;

    public void Dispose() => _mount.Dispose();
}

/// <summary>Runs xfswin in-process with captured output.</summary>
public static class Xfswin
{
    public sealed record Result(int Code, string Out, string Err, byte[] Stdout)
    {
        public override string ToString() => $"exit {Code}\nstdout:\n{Out}\nstderr:\n{Err}";
    }

    public static Result Run(params string[] args)
    {
        var output = new StringWriter();
        var error = new StringWriter();
        using var stdout = new MemoryStream();
        var console = new CliConsole { Out = output, Error = error, StdoutStream = stdout };
        int code = Program.Run(args, console);
        return new Result(code, output.ToString(), error.ToString(), stdout.ToArray());
    }

    public static Result Ok(params string[] args)
    {
        var r = Run(args);
        Xunit.Assert.True(r.Code == 0, $"xfswin {string.Join(' ', args)} failed: {r}");
        return r;
    }
}

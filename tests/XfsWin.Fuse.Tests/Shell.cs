using System.Diagnostics;

namespace XfsWin.Fuse.Tests;

/// <summary>Runs real tools (gcc, mkfs.xfs, mount, tar, ...) and the xfswin CLI.</summary>
internal static class Shell
{
    public sealed record Result(int ExitCode, string Stdout, string Stderr)
    {
        public string Both => Stdout + Stderr;
    }

    public static Result Run(string file, IEnumerable<string> args, string? workingDirectory = null,
        IDictionary<string, string>? environment = null, TimeSpan? timeout = null)
    {
        var psi = new ProcessStartInfo(file)
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
        };
        foreach (var a in args)
            psi.ArgumentList.Add(a);
        if (workingDirectory is not null)
            psi.WorkingDirectory = workingDirectory;
        if (environment is not null)
            foreach (var (k, v) in environment)
                psi.Environment[k] = v;
        using var p = Process.Start(psi) ?? throw new InvalidOperationException($"cannot start {file}");
        p.StandardInput.Close();
        var stdout = p.StandardOutput.ReadToEndAsync();
        var stderr = p.StandardError.ReadToEndAsync();
        if (!p.WaitForExit(timeout ?? TimeSpan.FromMinutes(5)))
        {
            p.Kill(entireProcessTree: true);
            throw new TimeoutException($"{file} {string.Join(' ', args)} did not finish in time");
        }
        return new Result(p.ExitCode, stdout.Result, stderr.Result);
    }

    /// <summary>Runs a bash script; throws with its output when it fails.</summary>
    public static string Bash(string script, string? workingDirectory = null)
    {
        var r = Run("bash", ["-euo", "pipefail", "-c", script], workingDirectory);
        if (r.ExitCode != 0)
            throw new InvalidOperationException($"bash failed ({r.ExitCode}):\n{script}\n--- stdout\n{r.Stdout}\n--- stderr\n{r.Stderr}");
        return r.Stdout;
    }

    public static string MakeTempDirectory(string prefix)
    {
        var path = Path.Combine(Path.GetTempPath(), $"{prefix}-{Guid.NewGuid():N}");
        Directory.CreateDirectory(path);
        return path;
    }

    /// <summary>The xfswin CLI built next to the tests: run through the dotnet host.</summary>
    public static (string File, string[] Prefix) Xfswin
    {
        get
        {
            _ = IoUringMode.SuiteMode; // XFSWIN_TEST_IO_URING is in force before any server starts
            var dll = Path.Combine(AppContext.BaseDirectory, "xfswin.dll");
            if (!File.Exists(dll))
                throw new FileNotFoundException($"xfswin.dll is not next to the tests ({AppContext.BaseDirectory}); build the solution.");
            var dotnet = Environment.ProcessPath is { } p && Path.GetFileNameWithoutExtension(p) == "dotnet" ? p : "dotnet";
            return (dotnet, [dll]);
        }
    }

    public static Result RunXfswin(IEnumerable<string> args, TimeSpan? timeout = null)
    {
        var (file, prefix) = Xfswin;
        return Run(file, prefix.Concat(args), timeout: timeout);
    }

    /// <summary>True when <paramref name="mountPoint"/> is a mount point of the given type in /proc/self/mountinfo.</summary>
    public static bool IsMounted(string mountPoint, string fsType) =>
        MountInfo.Parse(MountInfo.ReadCurrent()).Any(m => m.MountPoint == mountPoint && m.FileSystemType == fsType);

    /// <summary>fusermount3 -u, retried while busy, then detached lazily (see <see cref="XfsWin.TestSupport.Shell.UnmountFuse"/>).</summary>
    public static Result UnmountFuse(string mountPoint)
    {
        var r = XfsWin.TestSupport.Shell.UnmountFuse(mountPoint);
        return new Result(r.ExitCode, r.StandardOutput, r.StandardError);
    }
}

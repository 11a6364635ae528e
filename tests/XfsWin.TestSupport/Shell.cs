using System.Diagnostics;
using System.Text;

namespace XfsWin.TestSupport;

/// <summary>The outcome of one process run.</summary>
public sealed record ShellResult(string FileName, IReadOnlyList<string> Arguments, int ExitCode, string StandardOutput, string StandardError)
{
    public string CommandLine => Shell.Quote(FileName, Arguments);
}

/// <summary>Thrown when a command fails; the message carries the command line, exit code and stderr.</summary>
public sealed class ShellException(ShellResult result, string message) : Exception(message)
{
    public ShellResult Result { get; } = result;
}

/// <summary>Runs external programs (mkfs.xfs, xfs_db, mount, ...) and captures their output.</summary>
public static class Shell
{
    /// <summary>Default limit for one command; image builds pass a longer one.</summary>
    public static readonly TimeSpan DefaultTimeout = TimeSpan.FromMinutes(5);

    /// <summary>
    /// fusermount3 -u until it is not refused as busy. Test processes fork children all the time, and a child holds
    /// copies of the parent's descriptors (a file a test just read on the mount) between fork and exec, so a mount is
    /// briefly busy with nothing of the test's left open; a dropped, unfinalized handle does the same. After a bounded
    /// number of tries the mount is detached lazily: its server finishes once the last reference goes.
    /// </summary>
    public static ShellResult UnmountFuse(string mountPoint) => UnmountRetrying(["fusermount3", "-u"], ["fusermount3", "-u", "-z"], mountPoint);

    /// <summary>umount of a kernel mount, retried while busy and then detached lazily, as <see cref="UnmountFuse"/>.</summary>
    public static ShellResult UnmountKernel(string mountPoint) => UnmountRetrying(["umount"], ["umount", "-l"], mountPoint);

    private static ShellResult UnmountRetrying(string[] unmount, string[] detach, string mountPoint)
    {
        static bool Busy(ShellResult r) => r.ExitCode != 0 && (r.StandardError + r.StandardOutput).Contains("busy", StringComparison.Ordinal);
        var r = Run(unmount[0], [.. unmount[1..], mountPoint]);
        for (int attempt = 0; attempt < 25 && Busy(r); attempt++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            Thread.Sleep(200);
            r = Run(unmount[0], [.. unmount[1..], mountPoint]);
        }
        return Busy(r) ? Run(detach[0], [.. detach[1..], mountPoint]) : r;
    }

    /// <summary>Runs a program and returns its result whatever the exit code.</summary>
    public static ShellResult Run(string fileName, IEnumerable<string> arguments, TimeSpan? timeout = null,
        IReadOnlyDictionary<string, string>? environment = null, string? workingDirectory = null)
    {
        var args = arguments.ToList();
        var psi = new ProcessStartInfo(fileName)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
            UseShellExecute = false,
            StandardOutputEncoding = Encoding.UTF8,
            StandardErrorEncoding = Encoding.UTF8,
        };
        if (workingDirectory is not null)
            psi.WorkingDirectory = workingDirectory;
        foreach (var a in args)
            psi.ArgumentList.Add(a);
        if (environment is not null)
        {
            foreach (var (k, v) in environment)
                psi.Environment[k] = v;
        }

        using var process = new Process { StartInfo = psi };
        var stdout = new StringBuilder();
        var stderr = new StringBuilder();
        process.OutputDataReceived += (_, e) => { if (e.Data is not null) lock (stdout) stdout.Append(e.Data).Append('\n'); };
        process.ErrorDataReceived += (_, e) => { if (e.Data is not null) lock (stderr) stderr.Append(e.Data).Append('\n'); };
        try
        {
            process.Start();
        }
        catch (System.ComponentModel.Win32Exception ex)
        {
            throw new ShellException(new ShellResult(fileName, args, -1, "", ex.Message),
                $"cannot start '{Quote(fileName, args)}': {ex.Message}. Run scripts/oracles/install.sh as root to install the test tools.");
        }
        process.StandardInput.Close();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        var limit = timeout ?? DefaultTimeout;
        if (!process.WaitForExit(limit))
        {
            try { process.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
            process.WaitForExit();
            throw new ShellException(new ShellResult(fileName, args, -1, stdout.ToString(), stderr.ToString()),
                $"'{Quote(fileName, args)}' did not finish within {limit}; killed. stderr:\n{Tail(stderr.ToString())}");
        }
        process.WaitForExit(); // drains the asynchronous readers
        return new ShellResult(fileName, args, process.ExitCode, stdout.ToString(), stderr.ToString());
    }

    public static ShellResult Run(string fileName, params string[] arguments) => Run(fileName, (IEnumerable<string>)arguments);

    /// <summary>Runs a program and throws <see cref="ShellException"/> (with its stderr) unless it exits 0.</summary>
    public static ShellResult RunChecked(string fileName, IEnumerable<string> arguments, TimeSpan? timeout = null,
        IReadOnlyDictionary<string, string>? environment = null, string? workingDirectory = null)
    {
        var result = Run(fileName, arguments, timeout, environment, workingDirectory);
        if (result.ExitCode != 0)
        {
            throw new ShellException(result,
                $"'{result.CommandLine}' failed with exit code {result.ExitCode}.\nstderr:\n{Tail(result.StandardError)}\nstdout:\n{Tail(result.StandardOutput)}");
        }
        return result;
    }

    public static ShellResult RunChecked(string fileName, params string[] arguments) => RunChecked(fileName, (IEnumerable<string>)arguments);

    public static string Quote(string fileName, IEnumerable<string> args) =>
        string.Join(' ', new[] { fileName }.Concat(args).Select(a =>
            a.Length > 0 && a.All(c => char.IsLetterOrDigit(c) || "-_./=:,@+".Contains(c)) ? a : "'" + a.Replace("'", "'\\''") + "'"));

    private static string Tail(string text, int max = 8000) => text.Length <= max ? text : "..." + text[^max..];
}

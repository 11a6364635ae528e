using System.Text.RegularExpressions;

namespace XfsWin.TestSupport;

/// <summary>Runs xfs_db (read-only, or expert mode for writes) and parses its "field = value" output.</summary>
public static partial class XfsDb
{
    /// <summary>Runs read-only commands; returns the raw output.</summary>
    public static string Run(OracleImage image, params string[] commands) => Run(image.ImagePath, image.XfsprogsVersion, commands);

    public static string Run(string imagePath, string xfsprogsVersion, params string[] commands) =>
        Invoke(imagePath, xfsprogsVersion, expert: false, commands);

    /// <summary>Runs commands in expert mode (-x), which may write to the image.</summary>
    public static string Write(string imagePath, string xfsprogsVersion, params string[] commands) =>
        Invoke(imagePath, xfsprogsVersion, expert: true, commands);

    private static string Invoke(string imagePath, string version, bool expert, string[] commands)
    {
        var args = new List<string> { expert ? "-x" : "-r" };
        foreach (var c in commands)
        {
            args.Add("-c");
            args.Add(c);
        }
        args.Add(imagePath);
        var r = Shell.RunChecked(OracleImages.Tool("xfs_db", version), args, environment: new Dictionary<string, string> { ["TZ"] = "UTC" });
        // xfs_db reports many command errors on stdout/stderr but exits 0; surface the obvious ones.
        foreach (var line in (r.StandardOutput + r.StandardError).Split('\n'))
        {
            if (line.Contains("not found", StringComparison.Ordinal) || line.StartsWith("bad ", StringComparison.Ordinal) ||
                line.Contains("invalid", StringComparison.OrdinalIgnoreCase) || line.Contains("unknown command", StringComparison.Ordinal))
            {
                throw new InvalidOperationException($"xfs_db {string.Join(' ', args)}: {line}\n{r.StandardOutput}{r.StandardError}");
            }
        }
        return r.StandardOutput;
    }

    /// <summary>The disk address (512-byte units) of what the commands <paramref name="select"/> (xfs_db's "daddr" after them).</summary>
    public static long Daddr(string imagePath, string xfsprogsVersion, params string[] select)
    {
        var text = Run(imagePath, xfsprogsVersion, [.. select, "daddr"]);
        var m = DaddrLine().Match(text);
        if (!m.Success) throw new InvalidOperationException($"no daddr in xfs_db output: {text}");
        return long.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture);
    }

    [GeneratedRegex(@"current daddr is (\d+)")]
    private static partial Regex DaddrLine();

    /// <summary>Parses "name = value" lines (later ones win).</summary>
    public static Dictionary<string, string> Fields(string output)
    {
        var d = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (Match m in FieldLine().Matches(output))
            d[m.Groups[1].Value] = m.Groups[2].Value.Trim();
        return d;
    }

    /// <summary>The leading number of a field value ("3 (btree)" -> 3, "0x3ebe" -> 16062).</summary>
    public static long Number(string value)
    {
        var token = value.Split(' ', 2)[0];
        return token.StartsWith("0x", StringComparison.OrdinalIgnoreCase)
            ? Convert.ToInt64(token[2..], 16)
            : long.Parse(token, System.Globalization.CultureInfo.InvariantCulture);
    }

    [GeneratedRegex(@"^(\S+) = (.*)$", RegexOptions.Multiline)]
    private static partial Regex FieldLine();
}

/// <summary>Runs an action on its own thread with a time limit, so a hang becomes a test failure.</summary>
public static class Watchdog
{
    public static T Run<T>(TimeSpan limit, string what, Func<T> action)
    {
        T? result = default;
        Exception? error = null;
        var thread = new Thread(() =>
        {
            try { result = action(); }
            catch (Exception ex) { error = ex; }
        }, 16 << 20) { IsBackground = true, Name = "watchdog: " + what };
        thread.Start();
        if (!thread.Join(limit))
            throw new TimeoutException($"{what} did not finish within {limit.TotalSeconds:0} s (a hang or an endless loop over corrupt metadata)");
        if (error is not null)
            System.Runtime.ExceptionServices.ExceptionDispatchInfo.Capture(error).Throw();
        return result!;
    }
}

namespace XfsWin.TestSupport;

/// <summary>
/// Tests that run xfswin as an ordinary user (setpriv) need the program somewhere that user can
/// read: the checkout may sit under a private directory (a 0700 temp dir, root's home). This copies
/// the test's output directory once per process into a world-readable temp directory.
/// </summary>
public static class UnprivilegedRun
{
    private static readonly Lazy<string> Copy = new(MakeCopy);

    /// <summary>A world-readable copy of the test output directory (holds xfswin.dll and its dependencies).</summary>
    public static string OutputDirectory => Copy.Value;

    private static string MakeCopy()
    {
        var target = Directory.CreateTempSubdirectory("xfswin-unprivileged.").FullName;
        SetMode(target, ReadableDirectory);
        AppDomain.CurrentDomain.ProcessExit += (_, _) =>
        {
            try { Directory.Delete(target, recursive: true); }
            catch (IOException) { }
        };
        CopyTree(AppContext.BaseDirectory, target);
        return target;
    }

    private const UnixFileMode ReadableDirectory = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute |
        UnixFileMode.GroupRead | UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute;

    private static void SetMode(string path, UnixFileMode mode)
    {
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(path, mode);
    }

    private static void CopyTree(string from, string to)
    {
        foreach (var dir in Directory.EnumerateDirectories(from))
        {
            var sub = Path.Combine(to, Path.GetFileName(dir));
            Directory.CreateDirectory(sub);
            SetMode(sub, ReadableDirectory);
            CopyTree(dir, sub);
        }
        foreach (var file in Directory.EnumerateFiles(from))
        {
            var dest = Path.Combine(to, Path.GetFileName(file));
            File.Copy(file, dest);
            SetMode(dest, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
        }
    }
}

using XfsWin.Control.Server;
using XfsWin.Driver;

namespace XfsWin.Service;

/// <summary>One mount the service keeps: source, mount point and driver options.</summary>
public sealed record MountEntry(string Source, string MountPoint, MountOptions Options, int Line)
{
    /// <summary>The option words as written (what the WinFsp backend parses again for this mount).</summary>
    public IReadOnlyList<string> Words { get; init; } = [];
}

/// <summary>
/// The service's mount list (%ProgramData%\XfsWin\mounts.conf): one mount per line,
/// <c>SOURCE MOUNTPOINT [options]</c>, '#' starts a comment, double quotes group words.
/// </summary>
public static class MountTable
{
    public static string DefaultPath =>
        Path.Combine(Environment.GetFolderPath(Environment.SpecialFolder.CommonApplicationData), "XfsWin", "mounts.conf");

    public static IReadOnlyList<MountEntry> Parse(string text)
    {
        var entries = new List<MountEntry>();
        int lineNumber = 0;
        foreach (var raw in text.Split('\n'))
        {
            lineNumber++;
            var words = Words.Split(raw.Trim());
            if (words.Count == 0) continue;
            if (words.Count < 2)
                throw new FormatException($"mounts.conf line {lineNumber}: expected SOURCE MOUNTPOINT [options], got '{raw.Trim()}'");
            MountOptions options;
            try
            {
                options = MountOptions.Parse(words.Skip(2).ToList());
            }
            catch (Exception e) when (e is ArgumentException or FormatException)
            {
                throw new FormatException($"mounts.conf line {lineNumber}: {e.Message}", e);
            }
            entries.Add(new MountEntry(words[0], words[1], options, lineNumber) { Words = [.. words.Skip(2)] });
        }
        return entries;
    }

    /// <summary>The driver option words of an entry, without --partition (already part of the source given to the server).</summary>
    public static IReadOnlyList<string> OptionWords(MountEntry entry)
    {
        var words = new List<string>();
        for (int i = 0; i < entry.Words.Count; i++)
        {
            if (entry.Words[i] == "--partition") { i++; continue; }
            if (entry.Words[i].StartsWith("--partition=", StringComparison.Ordinal)) continue;
            words.Add(entry.Words[i]);
        }
        return words;
    }
}

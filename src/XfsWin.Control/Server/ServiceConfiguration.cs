
namespace XfsWin.Control.Server;

/// <summary>A mount the server makes when it starts.</summary>
public sealed record AutoMount(string Source, string MountPoint, int Line);

/// <summary>
/// The Linux service's configuration (<c>/etc/xfswin/service.conf</c>, or <c>--config FILE</c>), one
/// statement per line, '#' starts a comment, double quotes group words:
/// <code>
/// source PATH                 list this image file or device (repeatable)
/// mount SOURCE DIRECTORY      mount SOURCE read-only at DIRECTORY when the service starts (repeatable)
/// scan yes|no                 list the machine's disks too (default yes)
/// socket PATH                 where the control channel listens (default /run/xfswin/control.sock)
/// </code>
/// </summary>
public sealed record ServiceConfiguration
{
    public const string DefaultPath = "/etc/xfswin/service.conf";

    public IReadOnlyList<string> Sources { get; init; } = [];
    public IReadOnlyList<AutoMount> Mounts { get; init; } = [];
    public bool ScanDevices { get; init; } = true;
    public string? Socket { get; init; }

    /// <summary>Parses the file's text; a bad line throws <see cref="FormatException"/> naming its number.</summary>
    public static ServiceConfiguration Parse(string text)
    {
        var sources = new List<string>();
        var mounts = new List<AutoMount>();
        bool scan = true;
        string? socket = null;
        int lineNumber = 0;
        foreach (var raw in text.Split('\n'))
        {
            lineNumber++;
            List<string> words;
            try
            {
                words = Words.Split(raw.Trim());
            }
            catch (FormatException e)
            {
                throw new FormatException($"line {lineNumber}: {e.Message}", e);
            }
            if (words.Count == 0) continue;
            string Need(int count, string shape) => words.Count == count ? words[1]
                : throw new FormatException($"line {lineNumber}: expected '{shape}', got '{raw.Trim()}'");
            switch (words[0])
            {
                case "source":
                    sources.Add(Need(2, "source PATH"));
                    break;
                case "mount":
                    Need(3, "mount SOURCE DIRECTORY");
                    if (!Path.IsPathFullyQualified(words[2]))
                        throw new FormatException($"line {lineNumber}: the mount point '{words[2]}' must be an absolute path");
                    mounts.Add(new AutoMount(words[1], words[2], lineNumber));
                    break;
                case "scan":
                    scan = Need(2, "scan yes|no") switch
                    {
                        "yes" => true,
                        "no" => false,
                        var v => throw new FormatException($"line {lineNumber}: scan {v}: use yes or no"),
                    };
                    break;
                case "socket":
                    socket = Need(2, "socket PATH");
                    break;
                default:
                    throw new FormatException($"line {lineNumber}: unknown statement '{words[0]}' (use source, mount, scan or socket)");
            }
        }
        return new ServiceConfiguration { Sources = sources, Mounts = mounts, ScanDevices = scan, Socket = socket };
    }
}

/// <summary>Splits a configuration line into words: whitespace separates, double quotes group, '#' outside quotes ends the line.</summary>
public static class Words
{
    public static List<string> Split(string line)
    {
        var words = new List<string>();
        var current = new System.Text.StringBuilder();
        bool quoted = false, any = false;
        foreach (char c in line)
        {
            if (c == '#' && !quoted) break;
            if (c == '"') { quoted = !quoted; any = true; continue; }
            if (char.IsWhiteSpace(c) && !quoted)
            {
                if (any) { words.Add(current.ToString()); current.Clear(); any = false; }
                continue;
            }
            current.Append(c);
            any = true;
        }
        if (quoted) throw new FormatException($"unbalanced quote in '{line}'");
        if (any) words.Add(current.ToString());
        return words;
    }
}

using XfsWin.Control.Server;
using XfsWin.Driver;
using XfsWin.Driver.Semantics;

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

    /// <summary>
    /// Why mounts.conf must not be trusted, or null when only administrators can have written it. The service runs as
    /// LocalSystem: a line of this file opens any file or raw disk, read-write with --rw, and makes the volume one that
    /// every user may mount (docs/service.md, "Who may do what"). So its owner must be SYSTEM, Administrators or
    /// TrustedInstaller (a file a user creates, even in a folder they may write, is theirs), and no allow entry of its
    /// DACL may give anyone else a right that changes it (write or append data, write EAs, delete, change the
    /// permissions or the owner). <paramref name="securityDescriptor"/> is the file's self-relative security
    /// descriptor (owner and DACL).
    /// </summary>
    public static string? Untrusted(ReadOnlySpan<byte> securityDescriptor)
    {
        ParsedSecurityDescriptor sd;
        try
        {
            sd = SecurityDescriptors.Parse(securityDescriptor);
        }
        catch (FormatException e)
        {
            return $"its security descriptor cannot be read ({e.Message})";
        }
        if (sd.Owner is not { } owner || !IsAdministrative(owner))
            return $"it is owned by {sd.Owner?.ToString() ?? "nobody"}, not by SYSTEM or Administrators";
        if ((sd.Control & SecurityDescriptors.SeDaclPresent) == 0 || sd.Dacl is null)
            return "it has no DACL, so everyone may change it";
        foreach (var ace in sd.Dacl)
        {
            if (ace.Type != AceType.AccessAllowed || (ace.Flags & InheritOnly) != 0 || IsAdministrative(ace.Sid)) continue;
            if (((uint)ace.Mask & ChangingRights) != 0)
                return $"{ace.Sid} may change it (access 0x{(uint)ace.Mask:X8})";
        }
        return null;
    }

    private const byte InheritOnly = 0x08;

    /// <summary>FILE_WRITE_DATA, FILE_APPEND_DATA, FILE_WRITE_EA, DELETE, WRITE_DAC, WRITE_OWNER, GENERIC_ALL, GENERIC_WRITE.</summary>
    private const uint ChangingRights = 0x2 | 0x4 | 0x10 | 0x10000 | 0x40000 | 0x80000 | 0x10000000 | 0x40000000;

    private static readonly Sid TrustedInstaller = Sid.Parse("S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464");

    private static bool IsAdministrative(Sid sid) => sid == Sid.LocalSystem || sid == Sid.Administrators || sid == TrustedInstaller;

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

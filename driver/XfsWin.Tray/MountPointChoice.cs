namespace XfsWin.Tray;

/// <summary>Which mount point the tray's "Mount" takes.</summary>
public static class MountPointChoice
{
    /// <summary>
    /// The first drive letter the service suggests (it lists the letters free for it, Z: downwards)
    /// that this user's session does not use either: a network drive mapped by the user is invisible
    /// to the service, which runs as LocalSystem. Null when none is left.
    /// </summary>
    public static string? NextFreeDriveLetter(IEnumerable<string> suggested, IEnumerable<char> usedInSession)
    {
        var used = usedInSession.Select(char.ToUpperInvariant).ToHashSet();
        foreach (var s in suggested)
            if (IsDriveLetter(s) && !used.Contains(char.ToUpperInvariant(s[0])))
                return $"{char.ToUpperInvariant(s[0])}:";
        return null;
    }

    public static bool IsDriveLetter(string s) => s.Length == 2 && s[1] == ':' && char.IsAsciiLetter(s[0]);

    /// <summary>What Explorer opens for a mount point: a drive letter needs its root, "X:\".</summary>
    public static string ExplorerPath(string mountPoint) => IsDriveLetter(mountPoint) ? mountPoint + "\\" : mountPoint;
}

namespace XfsWin.Volume;

/// <summary>
/// A set of inode numbers that changes on several inodes may update at once (each entry belongs to the change that
/// holds its inode; the set itself takes a leaf lock, under which nothing else is taken).
/// </summary>
internal sealed class InodeSet
{
    private readonly HashSet<ulong> _inodes = new();

    /// <summary>True when <paramref name="inode"/> was not in the set.</summary>
    public bool Add(ulong inode)
    {
        lock (_inodes) return _inodes.Add(inode);
    }

    /// <summary>True when <paramref name="inode"/> was in the set.</summary>
    public bool Remove(ulong inode)
    {
        lock (_inodes) return _inodes.Remove(inode);
    }

    public bool Contains(ulong inode)
    {
        lock (_inodes) return _inodes.Contains(inode);
    }

    /// <summary>The inodes in the set now, in ascending order (a copy: the set may change while the caller goes through it).</summary>
    public List<ulong> Ascending()
    {
        lock (_inodes) return _inodes.Order().ToList();
    }
}

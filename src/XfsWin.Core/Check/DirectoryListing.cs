using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>One entry of a directory: its name is <c>Arena[NameOffset..+NameLength]</c> of the directory's <see cref="DirectoryListing"/>.</summary>
internal readonly record struct DirectoryListingEntry(int NameOffset, int NameLength, ulong Ino, XfsFileType Type);

/// <summary>
/// A directory's entries as the check reads them, in directory order: names packed into one growing byte array, so that
/// reading a directory allocates per directory, not per entry. Used by one thread at a time.
/// </summary>
internal sealed class DirectoryListing : IEqualityComparer<int>
{
    /// <summary>Entries beyond this many are not listed (a bound on what a damaged directory can make the check hold).</summary>
    public const int MaxEntries = 50_000_000;

    private byte[] _arena = new byte[256];
    private int _used;

    public List<DirectoryListingEntry> Entries { get; } = [];

    public ReadOnlySpan<byte> Name(in DirectoryListingEntry e) => _arena.AsSpan(e.NameOffset, e.NameLength);

    public void Add(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        if (_used + name.Length > _arena.Length) Array.Resize(ref _arena, Math.Max(_arena.Length * 2, _used + name.Length));
        name.CopyTo(_arena.AsSpan(_used));
        Entries.Add(new DirectoryListingEntry(_used, name.Length, ino, type));
        _used += name.Length;
    }

    public void Clear()
    {
        Entries.Clear();
        _used = 0;
    }

    // Entry indices compared by name (duplicate names).
    public bool Equals(int x, int y) => Name(Entries[x]).SequenceEqual(Name(Entries[y]));

    public int GetHashCode(int i)
    {
        var h = new HashCode();
        h.AddBytes(Name(Entries[i]));
        return h.ToHashCode();
    }
}

using System.Collections.Concurrent;
using XfsWin.Inodes;
using XfsWin.Metadata;

namespace XfsWin.Extents;

/// <summary>
/// Keeps the extent maps of recently used inode forks so repeated reads and directory calls do not
/// rebuild them. Bounded; entries are tied to the <see cref="Inode"/> object and revision they were built from,
/// so a re-read or changed inode gets a fresh map.
/// </summary>
public sealed class ExtentMapCache
{
    private const int MaxEntries = 4096;
    private readonly MountContext _mount;
    private readonly ConcurrentDictionary<(ulong Ino, ForkKind Fork), ExtentMap> _maps = new();
    // Maps added since the last clear, kept by hand (ConcurrentDictionary.Count takes every lock of
    // the table); it only bounds the cache, so a few miscounts racing with a clear are harmless.
    private int _added;

    public ExtentMapCache(MountContext mount) => _mount = mount;

    public ExtentMap Get(Inode inode, ForkKind fork)
    {
        var key = (inode.Number, fork);
        if (_maps.TryGetValue(key, out var map) && map.Inode == inode && map.Revision == inode.Revision) return map;
        map = new ExtentMap(_mount, inode, fork);
        if (Interlocked.Increment(ref _added) > MaxEntries)
        {
            _maps.Clear();
            Volatile.Write(ref _added, 1);
        }
        _maps[key] = map;
        return map;
    }
}

using System.Collections.Concurrent;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>
/// Reads inodes by number and keeps recently used ones. An inode number from a directory entry is
/// untrusted input: it is range-checked, then its core is verified (magic, version, CRC, recorded
/// number and UUID on V5, fork formats consistent with the file type); a free inode (mode 0) named by
/// a directory is corruption.
/// </summary>
public sealed class InodeCache
{
    private const int MaxEntries = 131072;
    private int _trimming;
    private readonly MountContext _mount;
    private readonly ConcurrentDictionary<ulong, Inode> _inodes = new();
    // Entries in _inodes, kept by hand: ConcurrentDictionary.Count takes every lock of the table (up
    // to 1024 once it has grown), which cost tens of microseconds on every cache miss.
    private int _count;
    private readonly InodeAllocation _allocation;

    public InodeCache(MountContext mount)
    {
        _mount = mount;
        _allocation = new InodeAllocation(mount);
    }

    public Inode Get(ulong ino)
    {
        if (_inodes.TryGetValue(ino, out var cached)) return cached;
        var inode = Load(ino);
        if (_inodes.TryAdd(ino, inode) && Interlocked.Increment(ref _count) > MaxEntries) Trim();
        return inode;
    }

    /// <summary>Drops about a quarter of the cached inodes (enumeration order is arbitrary, so this is a random sample).</summary>
    private void Trim()
    {
        if (Interlocked.Exchange(ref _trimming, 1) != 0) return;
        try
        {
            int excess = Volatile.Read(ref _count) - MaxEntries * 3 / 4;
            foreach (var pair in _inodes)
            {
                if (excess <= 0) break;
                if (_inodes.TryRemove(pair.Key, out _))
                {
                    Interlocked.Decrement(ref _count);
                    excess--;
                }
            }
        }
        finally
        {
            Volatile.Write(ref _trimming, 0);
        }
    }

    private Inode Load(ulong ino)
    {
        var sb = _mount.Superblock;
        if (!sb.IsValidInode(ino))
            throw _mount.Corrupt("inode number", 0, $"inode {ino} does not exist on this volume (outside every allocation group)");
        long offset = sb.InodeToByte(ino);
        // Inodes are read through their cluster block so neighbours come from the cache.
        long blockOffset = offset & ~((long)sb.BlockSize - 1);
        var block = _mount.Buffers.Read(blockOffset, (int)sb.BlockSize, 0, new RawBlockVerifier("inode cluster", 1));
        var raw = block.AsSpan((int)(offset - blockOffset), sb.InodeSize).ToArray();
        var check = DinodeView.Verify(raw, ino, sb);
        if (!check.IsOk) throw _mount.Corrupt($"inode {ino}", offset, check.ToString());
        if (new DinodeView(raw).Mode == 0)
            throw _mount.Corrupt($"inode {ino}", offset, "a directory names this inode but it is free");
        // V4 inodes carry no CRC or self-address: only the inode btree can prove this one is in use.
        if (!sb.IsV5 && !_allocation.IsAllocated(ino))
            throw _mount.Corrupt($"inode {ino}", offset, "the inode btree says this inode is not allocated");
        return new Inode(ino, raw, offset, sb);
    }
}

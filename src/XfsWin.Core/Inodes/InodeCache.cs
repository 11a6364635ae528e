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
    private const int MaxEntries = 65536;
    private readonly MountContext _mount;
    private readonly ConcurrentDictionary<ulong, Inode> _inodes = new();
    // Entries added since the last clear. ConcurrentDictionary.Count takes every lock of the table
    // (up to 1024 once it has grown), which made each cache miss cost tens of microseconds; this
    // counter only bounds the cache, so racing with a clear (a few entries miscounted) is harmless.
    private int _count;

    public InodeCache(MountContext mount) => _mount = mount;

    public Inode Get(ulong ino)
    {
        if (_inodes.TryGetValue(ino, out var cached)) return cached;
        var inode = Load(ino);
        if (Volatile.Read(ref _count) >= MaxEntries)
        {
            _inodes.Clear();
            Volatile.Write(ref _count, 0);
        }
        if (_inodes.TryAdd(ino, inode)) Interlocked.Increment(ref _count);
        return inode;
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
        return new Inode(ino, raw, offset, sb);
    }
}

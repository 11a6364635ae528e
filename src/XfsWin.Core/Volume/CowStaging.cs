namespace XfsWin.Volume;

/// <summary>
/// Copy-on-write staging blocks allocated ahead of the writes that use them (the kernel's CoW fork). A write to shared
/// blocks of a reflinked file stages the whole range its copy-on-write extent size hint rounds the write out to
/// (<see cref="Extents.ExtentSizeHint.CopyOnWrite"/>), remaps only the blocks it writes and keeps the rest here for the
/// writes that follow nearby: a shared file rewritten in small pieces gets its new blocks in extents of the hint's
/// size instead of one extent per write.
/// <para>
/// Every staged block is a staging extent on disk (the refcount btree's CoW domain and an OWN_COW reverse mapping), so
/// a crash leaves them for the next mount's recovery to free, as the kernel's do. A staged block holds no file data
/// until a write copies a whole block into it and remaps it. What is left is freed when a writable open of the file is
/// closed, when its last hold goes, and at unmount (xfs_reflink_cancel_cow_range).
/// </para>
/// <para>Used under the volume's change lock, except <see cref="Any"/>, which a close reads without it.</para>
/// </summary>
internal sealed class CowStaging
{
    /// <summary>Staged blocks of one file: file blocks [FileOffset, +BlockCount) would go to disk blocks from StartBlock.</summary>
    internal readonly record struct StagedExtent(ulong FileOffset, ulong StartBlock, uint BlockCount)
    {
        public ulong FileEnd => FileOffset + BlockCount;
    }

    // Per inode, sorted by file offset, never overlapping.
    private readonly Dictionary<ulong, List<StagedExtent>> _byInode = new();
    private bool _any;

    /// <summary>False while no file has staged blocks (read without the change lock: a stale true only costs a lock).</summary>
    public bool Any => Volatile.Read(ref _any);

    public bool Has(ulong ino) => _byInode.ContainsKey(ino);

    /// <summary>Every inode with staged blocks, in ascending order.</summary>
    public List<ulong> Inodes() => _byInode.Keys.Order().ToList();

    /// <summary>Index of the staged extent holding <paramref name="fileBlock"/>, or the complement of where one would go.</summary>
    private static int Find(List<StagedExtent> list, ulong fileBlock)
    {
        int lo = 0, hi = list.Count - 1;
        while (lo <= hi)
        {
            int mid = (lo + hi) >>> 1;
            var e = list[mid];
            if (fileBlock < e.FileOffset) hi = mid - 1;
            else if (fileBlock >= e.FileEnd) lo = mid + 1;
            else return mid;
        }
        return ~lo;
    }

    /// <summary>
    /// Takes the staged blocks for file blocks [<paramref name="fileBlock"/>, +<paramref name="max"/>) that continue from
    /// <paramref name="fileBlock"/> (none when it is not staged): the caller remaps them into the file.
    /// </summary>
    public bool TryTake(ulong ino, ulong fileBlock, uint max, out ulong startBlock, out uint count)
    {
        startBlock = 0;
        count = 0;
        if (max == 0 || !_byInode.TryGetValue(ino, out var list)) return false;
        int i = Find(list, fileBlock);
        if (i < 0) return false;
        var e = list[i];
        ulong skip = fileBlock - e.FileOffset;
        count = (uint)Math.Min(max, e.FileEnd - fileBlock);
        startBlock = e.StartBlock + skip;
        list.RemoveAt(i);
        ulong takenEnd = fileBlock + count;
        if (takenEnd < e.FileEnd)
            list.Insert(i, new StagedExtent(takenEnd, e.StartBlock + (takenEnd - e.FileOffset), (uint)(e.FileEnd - takenEnd)));
        if (skip > 0) list.Insert(i, e with { BlockCount = (uint)skip });
        if (list.Count == 0 && _byInode.Remove(ino) && _byInode.Count == 0) Volatile.Write(ref _any, false);
        return true;
    }

    /// <summary>The end of the staged extent before <paramref name="fileBlock"/> (0: none) and the start of the one after it (<see cref="ulong.MaxValue"/>: none); <paramref name="fileBlock"/> is not staged.</summary>
    public (ulong PreviousEnd, ulong NextStart) Neighbours(ulong ino, ulong fileBlock)
    {
        if (!_byInode.TryGetValue(ino, out var list)) return (0, ulong.MaxValue);
        int i = Find(list, fileBlock);
        if (i >= 0) throw new InvalidOperationException($"inode {ino}: file block {fileBlock} is staged already");
        i = ~i;
        return (i > 0 ? list[i - 1].FileEnd : 0, i < list.Count ? list[i].FileOffset : ulong.MaxValue);
    }

    /// <summary>Keeps newly staged blocks for file blocks [<paramref name="fileOffset"/>, +<paramref name="count"/>), which none of the file's staged extents overlap.</summary>
    public void Add(ulong ino, ulong fileOffset, ulong startBlock, uint count)
    {
        if (!_byInode.TryGetValue(ino, out var list)) _byInode[ino] = list = new List<StagedExtent>();
        int i = Find(list, fileOffset);
        if (i >= 0 || (~i < list.Count && list[~i].FileOffset < fileOffset + count))
            throw new InvalidOperationException($"inode {ino}: staging [{fileOffset}+{count}] overlaps staged blocks");
        list.Insert(~i, new StagedExtent(fileOffset, startBlock, count));
        Volatile.Write(ref _any, true);
    }

    /// <summary>Forgets every staged extent of <paramref name="ino"/> and returns them (the caller frees them).</summary>
    public List<StagedExtent> Remove(ulong ino)
    {
        if (!_byInode.Remove(ino, out var list)) return [];
        if (_byInode.Count == 0) Volatile.Write(ref _any, false);
        return list;
    }
}

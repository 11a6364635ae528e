namespace XfsWin.Check;

/// <summary>What a block of an allocation group is used for, as the check found it.</summary>
public enum BlockUse : byte
{
    Unseen = 0,
    Free,
    AgHeaders,
    Log,
    Agfl,
    /// <summary>bnobt, cntbt and rmapbt blocks (the trees the AGFL feeds; rmap owner OWN_AG).</summary>
    AgfBtree,
    InodeBtree,
    RefcountBtree,
    InodeChunk,
    /// <summary>A regular file's data fork: the one use reflink volumes let several owners share.</summary>
    FileData,
    /// <summary>The data fork of a directory, symbolic link or metadata file (never shared).</summary>
    OtherData,
    AttrData,
    BmbtBlock,
    CowStaging,
}

/// <summary>
/// One byte per block of every AG saying what uses it: the per-AG block usage map every owner claims
/// its blocks in, so that each block is found used exactly once (free space, headers, log, btree
/// blocks, inode chunks, file extents). Claims from many threads are lock-free (compare-and-swap per
/// block). Regular files' data blocks of reflink volumes may be claimed more than once (their reference
/// counts are worked out from the reverse mappings, <see cref="ReverseMappings"/>).
/// </summary>
public sealed class BlockUsageMap
{
    private readonly byte[][] _ags;
    private readonly bool _sharingAllowed;
    private readonly int[] _lengths;

    public BlockUsageMap(uint agCount, Func<uint, uint> agLength, bool sharingAllowed)
    {
        _ags = new byte[agCount][];
        _lengths = new int[agCount];
        for (uint ag = 0; ag < agCount; ag++)
        {
            _ags[ag] = new byte[(agLength(ag) + 3) & ~3u];
            _lengths[ag] = (int)agLength(ag);
        }
        _sharingAllowed = sharingAllowed;
    }

    public int AgLength(uint agno) => _lengths[agno];

    public BlockUse Get(uint agno, uint agbno) => (BlockUse)Volatile.Read(ref _ags[agno][agbno]);

    /// <summary>
    /// Claims <paramref name="count"/> blocks from <paramref name="agbno"/> for <paramref name="use"/>.
    /// Returns the first conflicting run (what already used it, where, and how many blocks in a row),
    /// or null when every block was unclaimed. Blocks outside the AG are the caller's to reject first.
    /// </summary>
    public (BlockUse Previous, uint Start, uint Count)? Claim(uint agno, uint agbno, uint count, BlockUse use)
    {
        var map = _ags[agno];
        (BlockUse, uint, uint)? conflict = null;
        uint end = (uint)Math.Min((ulong)agbno + count, (ulong)_lengths[agno]);
        for (uint b = agbno; b < end; b++)
        {
            byte previous = CompareExchange(map, b, (byte)use);
            if (previous == 0) continue;
            var prev = (BlockUse)previous;
            if (prev == use && IsShareable(use)) continue;
            if (conflict is null) conflict = (prev, b, 1);
            else if (conflict.Value.Item1 == prev && conflict.Value.Item2 + conflict.Value.Item3 == b)
                conflict = (prev, conflict.Value.Item2, conflict.Value.Item3 + 1);
        }
        return conflict;
    }

    /// <summary>
    /// Sets block <paramref name="index"/> to <paramref name="value"/> if it is unclaimed; returns what
    /// it held. A compare-and-swap on the aligned 32-bit word holding the byte (the arrays are padded
    /// to whole words), so it works where a byte-wide compare-and-swap does not exist.
    /// </summary>
    private static byte CompareExchange(byte[] map, uint index, byte value)
    {
        ref int word = ref System.Runtime.CompilerServices.Unsafe.As<byte, int>(ref map[index & ~3u]);
        int shift = (int)(index & 3) * 8;
        if (!BitConverter.IsLittleEndian) shift = 24 - shift;
        while (true)
        {
            int old = Volatile.Read(ref word);
            byte current = (byte)(old >> shift);
            if (current != 0) return current;
            int updated = old | (value << shift);
            if (Interlocked.CompareExchange(ref word, updated, old) == old) return 0;
        }
    }

    /// <summary>Several inobt records share one block when a block holds more than 64 inodes; file data is shared under reflink.</summary>
    private bool IsShareable(BlockUse use) => use == BlockUse.InodeChunk || (use == BlockUse.FileData && _sharingAllowed);

    public static string Describe(BlockUse use) => use switch
    {
        BlockUse.Free => "free space",
        BlockUse.AgHeaders => "the AG headers",
        BlockUse.Log => "the log",
        BlockUse.Agfl => "the AG free list",
        BlockUse.AgfBtree => "a free-space or rmap btree block",
        BlockUse.InodeBtree => "an inode btree block",
        BlockUse.RefcountBtree => "a refcount btree block",
        BlockUse.InodeChunk => "an inode chunk",
        BlockUse.FileData => "file data",
        BlockUse.OtherData => "directory, link or metadata file data",
        BlockUse.AttrData => "attribute data",
        BlockUse.BmbtBlock => "an extent btree block",
        BlockUse.CowStaging => "a copy-on-write staging extent",
        _ => "nothing",
    };
}

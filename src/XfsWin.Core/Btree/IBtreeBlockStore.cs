namespace XfsWin.Btree;

/// <summary>
/// How a <see cref="BtreeCursor{TOps}"/> reaches the blocks of one tree: the transaction layer's view of it.
/// <para>
/// A transaction-backed store joins every buffer it hands out to its transaction (held and locked until
/// commit), turns <see cref="Changed"/> into logged byte ranges of that buffer, allocates from and frees to the
/// AG's free space (or the AGFL, for the free-space and reverse-map trees) inside the same transaction, and logs
/// the AG header (or inode core) field that <see cref="SetRoot"/> or <see cref="InodeRootChanged"/> touches.
/// </para>
/// Pointers are what the tree's nodes store: AG block numbers for short-pointer trees, file system block numbers
/// for long-pointer trees. The cursor writes every header field of a new block itself; on V5 volumes the store
/// stamps the LSN and the CRC when the block goes to disk.
/// </summary>
public interface IBtreeBlockStore
{
    /// <summary>V5 (self-describing, CRC) block headers rather than V4 ones.</summary>
    bool IsV5 { get; }

    int BlockSize { get; }

    /// <summary>The owner V5 headers record: the AG number (short pointers) or the inode number (long pointers).</summary>
    ulong Owner { get; }

    /// <summary>The 16 bytes V5 headers carry as their UUID (the superblock's meta UUID as stored on disk).</summary>
    ReadOnlySpan<byte> MetadataUuid { get; }

    /// <summary>True when the root is kept in an inode fork (bmbt) rather than in a block named by an AG header.</summary>
    bool RootInInode { get; }

    /// <summary>The root block (trees rooted in AG headers).</summary>
    ulong RootPointer { get; }

    /// <summary>Levels of the tree, counting a root kept in an inode.</summary>
    int Levels { get; }

    /// <summary>Records a new root and level count (for an inode-rooted tree the pointer is ignored).</summary>
    void SetRoot(ulong pointer, int levels);

    /// <summary>The inode fork holding the root (xfs_bmdr_block): <c>InodeRoot.Array[Offset..Offset+Count]</c>; its size fixes the root's capacity.</summary>
    ArraySegment<byte> InodeRoot { get; }

    /// <summary>Bytes [offset, offset+length) of <see cref="InodeRoot"/> changed.</summary>
    void InodeRootChanged(int offset, int length);

    /// <summary>
    /// The verified contents of the block at <paramref name="pointer"/> (magic, CRC, self-description checked by
    /// the store). A pointer outside the tree's space, or a block that fails verification, is reported as an
    /// <see cref="XfsCorruptionException"/> naming the block, or <paramref name="referrerByteOffset"/> (the block
    /// holding the pointer) when the pointer itself is bad. The same array is returned for the same block while the
    /// cursor's operation runs, and writing to it is allowed only after <see cref="Changed"/> is called for it.
    /// </summary>
    byte[] Read(ulong pointer, uint magic, long referrerByteOffset);

    /// <summary>The device byte offset of a block (what V5 headers record, in 512-byte units, and errors name).</summary>
    long ByteOffset(ulong pointer);

    /// <summary>Bytes [offset, offset+length) of <paramref name="block"/>, the block at <paramref name="pointer"/>, changed.</summary>
    void Changed(ulong pointer, byte[] block, int offset, int length);

    /// <summary>A new block for the tree, preferably near <paramref name="near"/>; <paramref name="block"/> is its zeroed buffer.</summary>
    ulong Allocate(ulong near, out byte[] block);

    /// <summary>The tree no longer uses the block.</summary>
    void Free(ulong pointer);

    /// <summary>The error for corrupt metadata (a transaction-backed store also marks the volume unhealthy).</summary>
    XfsCorruptionException Corrupt(string structure, long byteOffset, string problem);
}

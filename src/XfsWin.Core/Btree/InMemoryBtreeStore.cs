using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Btree;

/// <summary>
/// A B+tree whose blocks live in memory (for property tests and scratch trees): pointers are block numbers in a
/// private space starting at 1, a block's byte offset is its number times the block size, and every block read
/// back is checked for the self-description a V5 block carries (block number, UUID, owner). The root is either
/// a block or an xfs_bmdr_block in a private inode fork of a chosen size.
/// </summary>
public sealed class InMemoryBtreeStore : IBtreeBlockStore
{
    private readonly Dictionary<ulong, byte[]> _blocks = new();
    private readonly byte[] _uuid;
    private readonly bool _longPointers;
    private readonly byte[]? _fork;
    private ulong _next = 1;
    private ulong _root;
    private int _levels;

    /// <summary>A tree rooted in a block: <paramref name="rootPointer"/> must name a leaf made with <see cref="CreateEmptyLeaf"/>.</summary>
    private InMemoryBtreeStore(bool v5, int blockSize, ulong owner, bool longPointers, int forkSize)
    {
        IsV5 = v5;
        BlockSize = blockSize;
        Owner = owner;
        _longPointers = longPointers;
        _uuid = new byte[16];
        BinaryPrimitives.WriteUInt64BigEndian(_uuid, 0x0123_4567_89AB_CDEFUL ^ owner);
        BinaryPrimitives.WriteUInt64BigEndian(_uuid.AsSpan(8), 0xFEDC_BA98_7654_3210UL);
        if (forkSize > 0) _fork = new byte[forkSize];
    }

    /// <summary>An empty tree rooted in a block (AG btrees): one empty leaf.</summary>
    public static InMemoryBtreeStore CreateAgRooted(uint magic, bool v5, int blockSize, uint agno)
    {
        var store = new InMemoryBtreeStore(v5, blockSize, agno, longPointers: false, forkSize: 0);
        store._root = store.CreateEmptyLeaf(magic);
        store._levels = 1;
        return store;
    }

    /// <summary>
    /// An empty tree rooted in an inode fork of <paramref name="forkSize"/> bytes (bmbt): a level-1 root in the fork
    /// with one entry pointing at an empty leaf, as a fork just converted from extents would be before its records go in.
    /// </summary>
    public static InMemoryBtreeStore CreateInodeRooted(uint magic, bool v5, int blockSize, ulong ino, int forkSize)
    {
        var store = new InMemoryBtreeStore(v5, blockSize, ino, longPointers: true, forkSize);
        ulong leaf = store.CreateEmptyLeaf(magic);
        var fork = store._fork!;
        BinaryPrimitives.WriteUInt16BigEndian(fork, 1);
        BinaryPrimitives.WriteUInt16BigEndian(fork.AsSpan(2), 1);
        int maxrecs = (forkSize - BmdrBlockView.HeaderSize) / 16;
        BinaryPrimitives.WriteUInt64BigEndian(fork.AsSpan(BmdrBlockView.HeaderSize), 0);
        BinaryPrimitives.WriteUInt64BigEndian(fork.AsSpan(BmdrBlockView.HeaderSize + maxrecs * 8), leaf);
        store._levels = 2;
        return store;
    }

    private ulong CreateEmptyLeaf(uint magic)
    {
        ulong ptr = Allocate(0, out var b);
        BinaryPrimitives.WriteUInt32BigEndian(b, magic);
        if (_longPointers)
        {
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(BtreeBlockView.OffLeftSib), BtreeBlockView.NullLongPtr);
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(BtreeBlockView.LongOffRightSib), BtreeBlockView.NullLongPtr);
            if (IsV5)
            {
                BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(BtreeBlockView.LongOffBlkno), (ulong)(ByteOffset(ptr) >> 9));
                _uuid.CopyTo(b, BtreeBlockView.LongOffUuid);
                BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(BtreeBlockView.LongOffOwner), Owner);
            }
        }
        else
        {
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(BtreeBlockView.OffLeftSib), BtreeBlockView.NullShortPtr);
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(BtreeBlockView.ShortOffRightSib), BtreeBlockView.NullShortPtr);
            if (IsV5)
            {
                BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(BtreeBlockView.ShortOffBlkno), (ulong)(ByteOffset(ptr) >> 9));
                _uuid.CopyTo(b, BtreeBlockView.ShortOffUuid);
                BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(BtreeBlockView.ShortOffOwner), (uint)Owner);
            }
        }
        return ptr;
    }

    public bool IsV5 { get; }
    public int BlockSize { get; }
    public ulong Owner { get; }
    public ReadOnlySpan<byte> MetadataUuid => _uuid;
    public bool RootInInode => _fork is not null;
    public ulong RootPointer => _root;
    public int Levels => _levels;
    public ArraySegment<byte> InodeRoot => _fork is null ? default : new ArraySegment<byte>(_fork);

    /// <summary>Blocks the tree holds now.</summary>
    public int BlockCount => _blocks.Count;

    /// <summary>Blocks allocated and freed so far (a tree that only grew has freed none).</summary>
    public long Allocations { get; private set; }
    public long Frees { get; private set; }

    public void SetRoot(ulong pointer, int levels)
    {
        if (_fork is null) _root = pointer;
        _levels = levels;
    }

    public void InodeRootChanged(int offset, int length)
    {
        if (_fork is null || offset < 0 || offset + length > _fork.Length)
            throw new InvalidOperationException($"inode root change [{offset}, +{length}) outside the fork");
    }

    public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
    {
        if (!_blocks.TryGetValue(pointer, out var b))
            throw Corrupt("btree pointer", referrerByteOffset, $"block {pointer} is not part of the tree");
        long at = ByteOffset(pointer);
        if (IsV5)
        {
            int blknoOff = _longPointers ? BtreeBlockView.LongOffBlkno : BtreeBlockView.ShortOffBlkno;
            int uuidOff = _longPointers ? BtreeBlockView.LongOffUuid : BtreeBlockView.ShortOffUuid;
            ulong owner = _longPointers ? BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(BtreeBlockView.LongOffOwner)) : BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(BtreeBlockView.ShortOffOwner));
            if (BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(blknoOff)) != (ulong)(at >> 9))
                throw Corrupt("btree block", at, "block records a different disk address");
            if (!b.AsSpan(uuidOff, 16).SequenceEqual(_uuid))
                throw Corrupt("btree block", at, "block UUID does not match");
            if (owner != Owner)
                throw Corrupt("btree block", at, $"block owned by {owner}, expected {Owner}");
        }
        return b;
    }

    public long ByteOffset(ulong pointer) => (long)pointer * BlockSize;

    public void Changed(ulong pointer, byte[] block, int offset, int length)
    {
        if (!_blocks.TryGetValue(pointer, out var b) || !ReferenceEquals(b, block) || offset < 0 || length < 0 || offset + length > BlockSize)
            throw new InvalidOperationException($"change [{offset}, +{length}) of block {pointer}, which is not a block of this tree");
    }

    public ulong Allocate(ulong near, out byte[] block)
    {
        ulong ptr = _next++;
        block = new byte[BlockSize];
        _blocks.Add(ptr, block);
        Allocations++;
        return ptr;
    }

    public void Free(ulong pointer)
    {
        if (!_blocks.Remove(pointer)) throw new InvalidOperationException($"free of block {pointer}, which the tree does not hold");
        Frees++;
    }

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) => new(structure, byteOffset, problem);
}

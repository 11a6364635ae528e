using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Btree;

/// <summary>
/// What differs between B+tree kinds. Implemented by empty structs so the generic cursor is
/// specialised per kind by the JIT (no boxing, no virtual calls).
/// </summary>
public interface IBtreeOps
{
    string Name { get; }
    /// <summary>Long (64-bit, bmbt) or short (32-bit, AG-relative) block pointers.</summary>
    bool LongPointers { get; }
    int RecordSize { get; }
    int KeySize { get; }
    uint Magic(bool v5);
    int MaxLevels { get; }
    /// <summary>The sort key of a record (first key field), as an unsigned number.</summary>
    ulong RecordKey(ReadOnlySpan<byte> record);
    ulong NodeKey(ReadOnlySpan<byte> key);
}

/// <summary>
/// A read cursor over any XFS B+tree: descends from the root by key, then walks records in order
/// using the path (never sibling pointers, so a sibling cycle in a corrupt tree cannot trap it).
/// Every block is verified (magic, CRC, self-address, owner, level one less than its parent) before use.
/// The root lives either in a block or in an inode fork (bmbt root, xfs_bmdr_block).
/// </summary>
public sealed class BtreeCursor<TOps> where TOps : struct, IBtreeOps
{
    private readonly MountContext _mount;
    private readonly ulong _owner;
    private readonly uint _agno;
    private readonly byte[]? _inodeRoot;
    private readonly int _inodeRootOffset, _inodeRootLength;
    private readonly ulong _rootPointer;
    private readonly int _levels;
    private readonly byte[][] _blocks;
    private readonly long[] _blockOffsets;
    private readonly int[] _index;
    private readonly int _headerSize;
    private readonly int _blockSize;
    private static readonly TOps Ops = default;

    private BtreeCursor(MountContext mount, ulong owner, uint agno, int levels, byte[]? inodeRoot, int rootOffset, int rootLength, ulong rootPointer)
    {
        _mount = mount;
        _owner = owner;
        _agno = agno;
        _levels = levels;
        _inodeRoot = inodeRoot;
        _inodeRootOffset = rootOffset;
        _inodeRootLength = rootLength;
        _rootPointer = rootPointer;
        _blocks = new byte[levels][];
        _blockOffsets = new long[levels];
        _index = new int[levels];
        _headerSize = BtreeBlockView.HeaderSize(Ops.LongPointers, mount.Superblock.IsV5);
        _blockSize = (int)mount.Superblock.BlockSize;
    }

    /// <summary>A cursor over a tree whose root is in an inode fork (bmbt): <paramref name="inode"/>[offset..offset+length] is the xfs_bmdr_block.</summary>
    public static BtreeCursor<TOps> FromInodeRoot(MountContext mount, ulong ownerIno, byte[] inode, int offset, int length, long inodeByteOffset)
    {
        var root = new BmdrBlockView(inode.AsSpan(offset, length));
        int level = root.Level;
        if (level == 0 || level >= Ops.MaxLevels || root.NumRecs == 0 || root.NumRecs > root.MaxRecs)
            throw mount.Corrupt($"{Ops.Name} root in inode {ownerIno}", inodeByteOffset, $"level {level} with {root.NumRecs} records (room for {root.MaxRecs})");
        // Levels below the in-inode root; index [level] is the root itself (not a block).
        return new BtreeCursor<TOps>(mount, ownerIno, 0, level + 1, inode, offset, length, 0);
    }

    /// <summary>A cursor over an AG btree rooted at AG block <paramref name="rootBlock"/>.</summary>
    public static BtreeCursor<TOps> FromAgRoot(MountContext mount, uint agno, uint rootBlock, int levels)
    {
        if (levels <= 0 || levels > Ops.MaxLevels || rootBlock >= mount.Superblock.AgBlocks)
            throw mount.Corrupt($"{Ops.Name} root of AG {agno}", mount.Superblock.AgBlockToByte(agno, 0), $"root block {rootBlock}, {levels} levels");
        return new BtreeCursor<TOps>(mount, agno, agno, levels, null, 0, 0, rootBlock);
    }

    private bool RootInInode => _inodeRoot is not null;

    /// <summary>The current record (valid after a successful positioning call).</summary>
    public ReadOnlySpan<byte> Record => _blocks[0].AsSpan(_headerSize + _index[0] * Ops.RecordSize, Ops.RecordSize);

    public long RecordBlockOffset => _blockOffsets[0];

    /// <summary>
    /// Positions at the last record whose key is ≤ <paramref name="key"/>, or the first record when
    /// all keys are larger. False only for an empty tree.
    /// </summary>
    public bool SeekLessOrEqual(ulong key)
    {
        int top = _levels - 1;
        ulong child;
        if (RootInInode)
        {
            var root = new BmdrBlockView(_inodeRoot.AsSpan(_inodeRootOffset, _inodeRootLength));
            int i = 0, hi = root.NumRecs - 1;
            while (i < hi)
            {
                int mid = (i + hi + 1) >> 1;
                if (root.Key(mid) <= key) i = mid; else hi = mid - 1;
            }
            _index[top] = i;
            child = root.Pointer(i);
            top--;
        }
        else
        {
            child = _rootPointer;
        }
        for (int level = top; level >= 0; level--)
        {
            LoadBlock(level, child, level == top && !RootInInode ? -1 : level);
            var block = _blocks[level];
            int n = new BtreeBlockView(block).NumRecs;
            if (level == 0)
            {
                if (n == 0) return false;
                int i = 0, hi = n - 1;
                while (i < hi)
                {
                    int mid = (i + hi + 1) >> 1;
                    if (Ops.RecordKey(block.AsSpan(_headerSize + mid * Ops.RecordSize)) <= key) i = mid; else hi = mid - 1;
                }
                _index[0] = i;
                return true;
            }
            int k = SearchNodeKeys(block, n, key);
            _index[level] = k;
            child = NodePointer(block, k);
        }
        return true;
    }

    /// <summary>Moves to the next record in key order; false after the last.</summary>
    public bool MoveNext()
    {
        if (new BtreeBlockView(_blocks[0]).NumRecs > _index[0] + 1)
        {
            _index[0]++;
            return true;
        }
        int level = 1;
        while (true)
        {
            if (level >= _levels) return false;
            int count = level == _levels - 1 && RootInInode
                ? new BmdrBlockView(_inodeRoot.AsSpan(_inodeRootOffset, _inodeRootLength)).NumRecs
                : new BtreeBlockView(_blocks[level]).NumRecs;
            if (_index[level] + 1 < count) break;
            level++;
        }
        _index[level]++;
        for (; level > 0; level--)
        {
            ulong child = level == _levels - 1 && RootInInode
                ? new BmdrBlockView(_inodeRoot.AsSpan(_inodeRootOffset, _inodeRootLength)).Pointer(_index[level])
                : NodePointer(_blocks[level], _index[level]);
            LoadBlock(level - 1, child, level - 1);
            _index[level - 1] = 0;
            if (new BtreeBlockView(_blocks[level - 1]).NumRecs == 0)
                throw _mount.Corrupt($"{Ops.Name} block", _blockOffsets[level - 1], "empty block inside the tree");
        }
        return true;
    }

    private int SearchNodeKeys(byte[] block, int n, ulong key)
    {
        int i = 0, hi = n - 1;
        while (i < hi)
        {
            int mid = (i + hi + 1) >> 1;
            if (Ops.NodeKey(block.AsSpan(_headerSize + mid * Ops.KeySize)) <= key) i = mid; else hi = mid - 1;
        }
        return i;
    }

    private int NodeMaxRecs => (_blockSize - _headerSize) / (Ops.KeySize + (Ops.LongPointers ? 8 : 4));

    private ulong NodePointer(byte[] block, int i)
    {
        int off = _headerSize + NodeMaxRecs * Ops.KeySize + i * (Ops.LongPointers ? 8 : 4);
        return Ops.LongPointers ? BinaryPrimitives.ReadUInt64BigEndian(block.AsSpan(off)) : BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(off));
    }

    /// <summary>Reads and verifies the block at <paramref name="pointer"/>, expected at tree level <paramref name="expectedLevel"/> (-1: any, for the root).</summary>
    private void LoadBlock(int slot, ulong pointer, int expectedLevel)
    {
        var sb = _mount.Superblock;
        long offset;
        if (Ops.LongPointers)
        {
            if (!sb.IsValidFsb(pointer))
                throw _mount.Corrupt($"{Ops.Name} pointer in inode {_owner}", _blockOffsets.Length > slot + 1 ? _blockOffsets[slot + 1] : 0, $"block {pointer} is outside the volume");
            offset = sb.FsbToByte(pointer);
        }
        else
        {
            if (pointer >= sb.AgBlocks || pointer == 0)
                throw _mount.Corrupt($"{Ops.Name} pointer in AG {_agno}", _blockOffsets.Length > slot + 1 ? _blockOffsets[slot + 1] : 0, $"AG block {pointer} is outside the AG");
            offset = sb.AgBlockToByte(_agno, (uint)pointer);
        }
        if (_blockOffsets[slot] == offset && _blocks[slot] is not null) return;
        var block = _mount.Buffers.Read(offset, _blockSize, _owner, new Verifier(sb, _owner));
        int level = new BtreeBlockView(block).Level;
        int want = expectedLevel >= 0 ? expectedLevel : slot;
        if (level != want)
            throw _mount.Corrupt($"{Ops.Name} block", offset, $"level {level} where level {want} belongs (a loop or misplaced block)");
        int n = new BtreeBlockView(block).NumRecs;
        int max = level == 0 ? (_blockSize - _headerSize) / Ops.RecordSize : NodeMaxRecs;
        if (n > max) throw _mount.Corrupt($"{Ops.Name} block", offset, $"{n} records, room for {max}");
        _blocks[slot] = block;
        _blockOffsets[slot] = offset;
    }

    private readonly struct Verifier(Superblock sb, ulong owner) : IBufferVerifier
    {
        // The tree's V5 magic: distinct for every tree kind (the inode and free-inode trees share their V4 magic's last byte).
        public int Kind => (int)Ops.Magic(true);
        public string Structure => Ops.Name + " block";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) =>
            BtreeBlockView.Verify(buffer, Ops.Magic(sb.IsV5), Ops.LongPointers, sb, byteOffset, owner);
    }
}

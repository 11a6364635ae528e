using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Btree;

/// <summary>Where a tree changed through a transaction gets new blocks and returns freed ones (the allocation layer's answer).</summary>
public interface IBtreeSpace
{
    /// <summary>A free block for the tree, preferably near <paramref name="near"/> (same pointer kind as the tree's).</summary>
    ulong Allocate(Transaction tx, ulong near);

    /// <summary>The tree no longer uses <paramref name="pointer"/>.</summary>
    void Free(Transaction tx, ulong pointer);
}

/// <summary>The inode fork that holds a bmbt's root: the caller's working image of the inode and how to log it.</summary>
public interface IInodeRootHolder
{
    ArraySegment<byte> Root { get; }

    /// <summary>Bytes [offset, offset+length) of <see cref="Root"/> changed.</summary>
    void RootChanged(int offset, int length);
}

/// <summary>
/// The blocks of one tree as a transaction sees them (the kernel's btree buffer ops inside xfs_trans): every block
/// the cursor reads is read through the buffer cache, verified, locked and joined; every change the cursor reports
/// becomes a logged byte range; new blocks come from <see cref="IBtreeSpace"/> as zeroed, joined buffers; freed
/// blocks are invalidated (recovery skips their older images). The root of an AG tree lives in an AG header buffer
/// the transaction has joined (AGF or AGI) and <see cref="SetRoot"/> logs it there; a bmbt root lives in an inode fork.
/// </summary>
public sealed class TransactionBtreeStore : IBtreeBlockStore
{
    private readonly Transaction _tx;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly bool _longPointers;
    private readonly string _name;
    private readonly uint _magic;
    private readonly IBtreeSpace _space;
    private readonly MetadataBuffer? _header;
    private readonly int _rootField, _levelField;
    private readonly IInodeRootHolder? _inodeRoot;
    private readonly long _ownerByteOffset;
    private byte[]? _uuid;
    // The blocks this store handed out (a handful per operation: searched in order rather than hashed).
    private (ulong Pointer, MetadataBuffer Buffer)[] _blocks = new (ulong, MetadataBuffer)[4];
    private int _blockCount;
    // The write verifier of the blocks read with the tree's magic (one per store, not one per block read).
    private IBufferWriteVerifier? _writeVerifier;
    private uint _writeVerifierMagic;
    private int _inodeLevels;

    private TransactionBtreeStore(Transaction tx, string name, uint magic, bool longPointers, ulong owner, uint agno, IBtreeSpace space,
        MetadataBuffer? header, int rootField, int levelField, IInodeRootHolder? inodeRoot, long ownerByteOffset)
    {
        _tx = tx;
        _sb = tx.Mount.Superblock;
        _name = name;
        _magic = magic;
        _longPointers = longPointers;
        Owner = owner;
        _agno = agno;
        _space = space;
        _header = header;
        _rootField = rootField;
        _levelField = levelField;
        _inodeRoot = inodeRoot;
        _ownerByteOffset = ownerByteOffset;
        if (inodeRoot is not null)
            _inodeLevels = new BmdrBlockView(inodeRoot.Root.AsSpan()).Level + 1;
    }

    /// <summary>
    /// An AG tree whose root block and level are the big-endian u32 fields at <paramref name="rootField"/> and
    /// <paramref name="levelField"/> of <paramref name="header"/> (the joined AGF or AGI of AG <paramref name="agno"/>).
    /// </summary>
    public static TransactionBtreeStore ForAgTree<TOps>(Transaction tx, uint agno, MetadataBuffer header, int rootField, int levelField, IBtreeSpace space)
        where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        return new TransactionBtreeStore(tx, ops.Name, ops.Magic(tx.Mount.Superblock.IsV5), false, agno, agno, space, header, rootField, levelField,
            null, header.Offset);
    }

    /// <summary>A bmbt rooted in an inode fork (<paramref name="root"/>), owned by inode <paramref name="ino"/>.</summary>
    public static TransactionBtreeStore ForInodeRoot<TOps>(Transaction tx, ulong ino, IInodeRootHolder root, long inodeByteOffset, IBtreeSpace space)
        where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        return new TransactionBtreeStore(tx, ops.Name, ops.Magic(tx.Mount.Superblock.IsV5), true, ino, 0, space, null, 0, 0, root, inodeByteOffset);
    }

    public bool IsV5 => _sb.IsV5;
    public int BlockSize => (int)_sb.BlockSize;
    public ulong Owner { get; }
    public ReadOnlySpan<byte> MetadataUuid
    {
        get
        {
            if (_uuid is null)
            {
                _uuid = new byte[16];
                _sb.MetaUuid.TryWriteBytes(_uuid, bigEndian: true, out _);
            }
            return _uuid;
        }
    }

    private MetadataBuffer? Joined(ulong pointer)
    {
        for (int i = 0; i < _blockCount; i++)
            if (_blocks[i].Pointer == pointer) return _blocks[i].Buffer;
        return null;
    }

    private void Remember(ulong pointer, MetadataBuffer buffer)
    {
        for (int i = 0; i < _blockCount; i++)
            if (_blocks[i].Pointer == pointer)
            {
                _blocks[i].Buffer = buffer;
                return;
            }
        if (_blockCount == _blocks.Length) Array.Resize(ref _blocks, _blocks.Length * 2);
        _blocks[_blockCount++] = (pointer, buffer);
    }

    private void Forget(ulong pointer)
    {
        for (int i = 0; i < _blockCount; i++)
            if (_blocks[i].Pointer == pointer)
            {
                _blocks[i] = _blocks[--_blockCount];
                _blocks[_blockCount] = default;
                return;
            }
    }
    public bool RootInInode => _inodeRoot is not null;
    public ArraySegment<byte> InodeRoot => _inodeRoot?.Root ?? default;

    public ulong RootPointer => _header is null ? 0 : BinaryPrimitives.ReadUInt32BigEndian(_header.Contents.AsSpan(_rootField));

    public int Levels => _header is null ? _inodeLevels : (int)BinaryPrimitives.ReadUInt32BigEndian(_header.Contents.AsSpan(_levelField));

    public void SetRoot(ulong pointer, int levels)
    {
        if (_header is null)
        {
            _inodeLevels = levels;
            return;
        }
        var h = _header.Contents;
        BinaryPrimitives.WriteUInt32BigEndian(h.AsSpan(_rootField), (uint)pointer);
        BinaryPrimitives.WriteUInt32BigEndian(h.AsSpan(_levelField), (uint)levels);
        _tx.LogRange(_header, _rootField, _rootField + 3);
        _tx.LogRange(_header, _levelField, _levelField + 3);
    }

    public void InodeRootChanged(int offset, int length) =>
        (_inodeRoot ?? throw new InvalidOperationException($"the {_name} of AG {_agno} has no inode root")).RootChanged(offset, length);

    public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
    {
        if (Joined(pointer) is { } joined) return joined.Contents;
        if (_longPointers ? !_sb.IsValidFsb(pointer) : pointer == 0 || pointer >= _sb.AgBlocks)
            throw Corrupt($"{_name} pointer", referrerByteOffset, $"block {pointer} is outside the {(_longPointers ? "volume" : "AG")}");
        long at = ByteOffset(pointer);
        var verifier = new BlockVerifier(_sb, Owner, magic, _longPointers, _name);
        if (_writeVerifier is null || _writeVerifierMagic != magic)
        {
            _writeVerifier = verifier.ForWrite();
            _writeVerifierMagic = magic;
        }
        var buffer = _tx.Read(at, BlockSize, Owner, verifier, _writeVerifier, BufType.Btree);
        Remember(pointer, buffer);
        return buffer.Contents;
    }

    public long ByteOffset(ulong pointer) => _longPointers ? _sb.FsbToByte(pointer) : _sb.AgBlockToByte(_agno, (uint)pointer);

    public void Changed(ulong pointer, byte[] block, int offset, int length)
    {
        if (Joined(pointer) is not { } buffer || !ReferenceEquals(buffer.Contents, block))
            throw new InvalidOperationException($"{_name}: change of block {pointer}, which this transaction did not read or allocate");
        if (length > 0) _tx.LogRange(buffer, offset, offset + length - 1);
    }

    public ulong Allocate(ulong near, out byte[] block)
    {
        ulong pointer = _space.Allocate(_tx, near);
        var verifier = new BlockVerifier(_sb, Owner, _magic, _longPointers, _name);
        var buffer = _tx.GetNew(ByteOffset(pointer), BlockSize, verifier.Kind, Owner, verifier.ForWrite(), BufType.Btree);
        Remember(pointer, buffer);
        block = buffer.Contents;
        return pointer;
    }

    public void Free(ulong pointer)
    {
        Forget(pointer);
        _tx.Invalidate(ByteOffset(pointer), BlockSize);
        _space.Free(_tx, pointer);
    }

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
        _tx.Mount.Corrupt(structure, byteOffset < 0 ? _ownerByteOffset : byteOffset, problem);

    /// <summary>Verifies a tree block as the read cursor does (same kind: the whole magic), and finishes it for writing (LSN, CRC).</summary>
    private readonly struct BlockVerifier(Superblock sb, ulong owner, uint magic, bool longPointers, string name) : IBufferVerifier
    {
        public int Kind => unchecked((int)magic);
        public string Structure => name + " block";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => BtreeBlockView.Verify(buffer, magic, longPointers, sb, byteOffset, owner);

        public IBufferWriteVerifier ForWrite() => longPointers
            ? new SelfDescribingWriteVerifier<BlockVerifier>(this, sb.IsV5 ? BtreeBlockView.LongOffLsn : -1, sb.IsV5 ? BtreeBlockView.LongOffCrc : -1)
            : new SelfDescribingWriteVerifier<BlockVerifier>(this, sb.IsV5 ? BtreeBlockView.ShortOffLsn : -1, sb.IsV5 ? BtreeBlockView.ShortOffCrc : -1);
    }
}

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
/// <para>
/// Stores and their cursors (<see cref="Cursor{TOps}"/>) are lent by the transaction (<see cref="Transaction.Scratch{T}"/>)
/// and made again for its next use: a store is valid until its transaction is disposed, and no code keeps one, or a
/// cursor over one, past that.
/// </para>
/// </summary>
public sealed class TransactionBtreeStore : IBtreeBlockStore
{
    // Set by Init for each transaction the store is lent to.
    private Transaction _tx = null!;
    private Superblock _sb = null!;
    private uint _agno;
    private bool _longPointers;
    private string _name = "";
    private uint _magic;
    private IBtreeSpace _space = null!;
    private MetadataBuffer? _header;
    private int _rootField, _levelField;
    private IInodeRootHolder? _inodeRoot;
    private long _ownerByteOffset;
    private byte[]? _uuid;
    // The blocks this store handed out (a handful per operation: searched in order rather than hashed).
    private (ulong Pointer, MetadataBuffer Buffer)[] _blocks = new (ulong, MetadataBuffer)[4];
    private int _blockCount;
    // The rental that lent this store: it keeps the write verifiers of the trees its stores served.
    private Rental _rental = null!;
    private int _inodeLevels;
    // Lent for lookups only (ForInodeRootLookups): blocks are read without a private copy, and any change is refused.
    private bool _lookupOnly;
    // Cursors made over this store (Cursor<TOps>), of any tree kind, and which of them are lent now: set up again when
    // lent again (a store is lent for different trees from one transaction to the next).
    private readonly List<object> _cursors = new(4);
    private readonly List<bool> _cursorLent = new(4);
    private const int MaxKeptCursors = 8;

    private TransactionBtreeStore(Rental rental) => _rental = rental;

    private TransactionBtreeStore Init(Transaction tx, string name, uint magic, bool longPointers, ulong owner, uint agno, IBtreeSpace space,
        MetadataBuffer? header, int rootField, int levelField, IInodeRootHolder? inodeRoot, long ownerByteOffset)
    {
        var sb = tx.Mount.Superblock;
        if (!ReferenceEquals(sb, _sb)) _uuid = null;
        _tx = tx;
        _sb = sb;
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
        _inodeLevels = inodeRoot is not null ? new BmdrBlockView(inodeRoot.Root.AsSpan()).Level + 1 : 0;
        _blockCount = 0;
        _lookupOnly = false;
        return this;
    }

    /// <summary>The transaction ended: the store forgets its buffers (they are the transaction's) until it is lent again.</summary>
    private void Release()
    {
        Array.Clear(_blocks, 0, _blockCount);
        _blockCount = 0;
        for (int i = 0; i < _cursorLent.Count; i++) _cursorLent[i] = false;
        _tx = null!;
        _space = null!;
        _header = null;
        _inodeRoot = null;
    }

    /// <summary>
    /// A cursor over this store: a new one, or one this store lent for an earlier transaction, set up again (see
    /// <see cref="BtreeCursor{TOps}.Reuse"/>). Valid as long as the store.
    /// </summary>
    public BtreeCursor<TOps> Cursor<TOps>() where TOps : struct, IBtreeOps
    {
        for (int i = 0; i < _cursors.Count; i++)
        {
            if (_cursorLent[i] || _cursors[i] is not BtreeCursor<TOps> kept) continue;
            kept.Reuse(this);
            _cursorLent[i] = true;
            return kept;
        }
        var cursor = new BtreeCursor<TOps>(this);
        if (_cursors.Count < MaxKeptCursors)
        {
            _cursors.Add(cursor);
            _cursorLent.Add(true);
        }
        return cursor;
    }

    /// <summary>The stores one transaction object lends (see <see cref="Transaction.Scratch{T}"/>).</summary>
    public sealed class Rental : ITransactionScratch
    {
        private readonly List<TransactionBtreeStore> _stores = new();
        private int _lent;
        // A transaction that walks many trees (a large truncate) makes the rest anew rather than keeping them all.
        private const int MaxKept = 16;
        // Write verifiers by tree (immutable, so shared by every store and transaction that writes the tree's blocks);
        // a bounded list (bmbts are many), replaced round-robin once full.
        private readonly List<(Superblock Sb, ulong Owner, uint Magic, bool LongPointers, IBufferWriteVerifier Verifier)> _verifiers = new();
        private int _nextVerifierSlot;
        private const int MaxVerifiers = 32;

        internal TransactionBtreeStore Lend()
        {
            if (_lent < _stores.Count) return _stores[_lent++];
            var store = new TransactionBtreeStore(this);
            if (_stores.Count < MaxKept)
            {
                _stores.Add(store);
                _lent++;
            }
            return store;
        }

        internal IBufferWriteVerifier WriteVerifier(BlockVerifier verifier, Superblock sb, ulong owner, uint magic, bool longPointers)
        {
            foreach (var kept in _verifiers)
                if (kept.Owner == owner && kept.Magic == magic && kept.LongPointers == longPointers && ReferenceEquals(kept.Sb, sb))
                    return kept.Verifier;
            var made = verifier.ForWrite();
            if (_verifiers.Count < MaxVerifiers) _verifiers.Add((sb, owner, magic, longPointers, made));
            else _verifiers[_nextVerifierSlot++ % MaxVerifiers] = (sb, owner, magic, longPointers, made);
            return made;
        }

        public void TransactionEnded()
        {
            for (int i = 0; i < _lent; i++) _stores[i].Release();
            _lent = 0;
        }
    }

    private static TransactionBtreeStore Lend(Transaction tx) => tx.Scratch<Rental>().Lend();

    /// <summary>
    /// An AG tree whose root block and level are the big-endian u32 fields at <paramref name="rootField"/> and
    /// <paramref name="levelField"/> of <paramref name="header"/> (the joined AGF or AGI of AG <paramref name="agno"/>).
    /// </summary>
    public static TransactionBtreeStore ForAgTree<TOps>(Transaction tx, uint agno, MetadataBuffer header, int rootField, int levelField, IBtreeSpace space)
        where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        return Lend(tx).Init(tx, ops.Name, ops.Magic(tx.Mount.Superblock.IsV5), false, agno, agno, space, header, rootField, levelField,
            null, header.Offset);
    }

    /// <summary>A bmbt rooted in an inode fork (<paramref name="root"/>), owned by inode <paramref name="ino"/>.</summary>
    public static TransactionBtreeStore ForInodeRoot<TOps>(Transaction tx, ulong ino, IInodeRootHolder root, long inodeByteOffset, IBtreeSpace space)
        where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        return Lend(tx).Init(tx, ops.Name, ops.Magic(tx.Mount.Superblock.IsV5), true, ino, 0, space, null, 0, 0, root, inodeByteOffset);
    }

    /// <summary>
    /// The bmbt rooted in <paramref name="root"/>, for lookups and walks only: its blocks are locked and joined as for a
    /// change, but read as the transaction sees them without a private copy (<see cref="MetadataBuffer.ContentsToRead"/>);
    /// a change through it throws. A cursor over it is valid until the transaction changes the tree.
    /// </summary>
    public static TransactionBtreeStore ForInodeRootLookups<TOps>(Transaction tx, ulong ino, IInodeRootHolder root, long inodeByteOffset)
        where TOps : struct, IBtreeOps
    {
        var store = ForInodeRoot<TOps>(tx, ino, root, inodeByteOffset, NoSpace.Instance);
        store._lookupOnly = true;
        return store;
    }

    private sealed class NoSpace : IBtreeSpace
    {
        public static readonly NoSpace Instance = new();
        public ulong Allocate(Transaction tx, ulong near) => throw new InvalidOperationException("a tree opened for lookups was asked for a block");
        public void Free(Transaction tx, ulong pointer) => throw new InvalidOperationException("a tree opened for lookups was asked to free a block");
    }

    private void RefuseIfLookupOnly()
    {
        if (_lookupOnly) throw new InvalidOperationException($"the {_name} of {Owner} was opened for lookups and cannot change");
    }

    public bool IsV5 => _sb.IsV5;
    public int BlockSize => (int)_sb.BlockSize;
    public ulong Owner { get; private set; }
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
        RefuseIfLookupOnly();
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

    public void InodeRootChanged(int offset, int length)
    {
        RefuseIfLookupOnly();
        (_inodeRoot ?? throw new InvalidOperationException($"the {_name} of AG {_agno} has no inode root")).RootChanged(offset, length);
    }

    public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
    {
        if (Joined(pointer) is { } joined) return _lookupOnly ? joined.ContentsToRead : joined.Contents;
        if (_longPointers ? !_sb.IsValidFsb(pointer) : pointer == 0 || pointer >= _sb.AgBlocks)
            throw Corrupt($"{_name} pointer", referrerByteOffset, $"block {pointer} is outside the {(_longPointers ? "volume" : "AG")}");
        long at = ByteOffset(pointer);
        var verifier = new BlockVerifier(_sb, Owner, magic, _longPointers, _name);
        var buffer = _tx.Read(at, BlockSize, Owner, verifier, WriteVerifier(verifier, magic), BufType.Btree);
        Remember(pointer, buffer);
        return _lookupOnly ? buffer.ContentsToRead : buffer.Contents;
    }

    private IBufferWriteVerifier WriteVerifier(BlockVerifier verifier, uint magic) => _rental.WriteVerifier(verifier, _sb, Owner, magic, _longPointers);

    public long ByteOffset(ulong pointer) => _longPointers ? _sb.FsbToByte(pointer) : _sb.AgBlockToByte(_agno, (uint)pointer);

    public void Changed(ulong pointer, byte[] block, int offset, int length)
    {
        RefuseIfLookupOnly();
        if (Joined(pointer) is not { } buffer || !ReferenceEquals(buffer.Contents, block))
            throw new InvalidOperationException($"{_name}: change of block {pointer}, which this transaction did not read or allocate");
        if (length > 0) _tx.LogRange(buffer, offset, offset + length - 1);
    }

    public ulong Allocate(ulong near, out byte[] block)
    {
        RefuseIfLookupOnly();
        ulong pointer = _space.Allocate(_tx, near);
        var verifier = new BlockVerifier(_sb, Owner, _magic, _longPointers, _name);
        var buffer = _tx.GetNew(ByteOffset(pointer), BlockSize, verifier.Kind, Owner, WriteVerifier(verifier, _magic), BufType.Btree);
        Remember(pointer, buffer);
        block = buffer.Contents;
        return pointer;
    }

    public void Free(ulong pointer)
    {
        RefuseIfLookupOnly();
        Forget(pointer);
        _tx.Invalidate(ByteOffset(pointer), BlockSize);
        _space.Free(_tx, pointer);
    }

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
        _tx.Mount.Corrupt(structure, byteOffset < 0 ? _ownerByteOffset : byteOffset, problem);

    /// <summary>Verifies a tree block as the read cursor does (same kind: the whole magic), and finishes it for writing (LSN, CRC).</summary>
    internal readonly struct BlockVerifier(Superblock sb, ulong owner, uint magic, bool longPointers, string name) : IBufferVerifier
    {
        public int Kind => unchecked((int)magic);
        public string Structure => name + " block";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => BtreeBlockView.Verify(buffer, magic, longPointers, sb, byteOffset, owner);

        public IBufferWriteVerifier ForWrite() => longPointers
            ? new SelfDescribingWriteVerifier<BlockVerifier>(this, sb.IsV5 ? BtreeBlockView.LongOffLsn : -1, sb.IsV5 ? BtreeBlockView.LongOffCrc : -1)
            : new SelfDescribingWriteVerifier<BlockVerifier>(this, sb.IsV5 ? BtreeBlockView.ShortOffLsn : -1, sb.IsV5 ? BtreeBlockView.ShortOffCrc : -1);
    }
}

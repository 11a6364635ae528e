using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Btree;

/// <summary>
/// The blocks of one on-disk tree, read through the mount's verified-buffer cache (magic, CRC, block number,
/// UUID and owner checked once per cached block). Read-only: the read path uses it; changes go through a
/// transaction-backed store.
/// </summary>
public sealed class MountedBtreeStore : IBtreeBlockStore
{
    private readonly MountContext _mount;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly ulong _root;
    private readonly int _levels;
    private readonly ArraySegment<byte> _inodeRoot;
    private readonly long _inodeByteOffset;
    private readonly bool _longPointers;
    private readonly string _name;
    private readonly byte[] _uuid = new byte[16];

    private MountedBtreeStore(MountContext mount, string name, bool longPointers, ulong owner, uint agno, ulong root, int levels, ArraySegment<byte> inodeRoot, long inodeByteOffset)
    {
        _mount = mount;
        _sb = mount.Superblock;
        _name = name;
        _longPointers = longPointers;
        Owner = owner;
        _agno = agno;
        _root = root;
        _levels = levels;
        _inodeRoot = inodeRoot;
        _inodeByteOffset = inodeByteOffset;
        _sb.MetaUuid.TryWriteBytes(_uuid, bigEndian: true, out _);
    }

    /// <summary>An AG btree rooted at AG block <paramref name="rootBlock"/> with <paramref name="levels"/> levels (from the AGF or AGI).</summary>
    public static MountedBtreeStore ForAgTree<TOps>(MountContext mount, uint agno, uint rootBlock, int levels) where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        if (levels <= 0 || levels > ops.MaxLevels || rootBlock == 0 || rootBlock >= mount.Superblock.AgBlocks)
            throw mount.Corrupt($"{ops.Name} root of AG {agno}", mount.Superblock.AgBlockToByte(agno, 0), $"root block {rootBlock}, {levels} levels");
        return new MountedBtreeStore(mount, ops.Name, false, agno, agno, rootBlock, levels, default, 0);
    }

    /// <summary>A bmbt whose root is <paramref name="inode"/>[offset..offset+length] (xfs_bmdr_block in the fork).</summary>
    public static MountedBtreeStore ForInodeRoot<TOps>(MountContext mount, ulong ino, byte[] inode, int offset, int length, long inodeByteOffset) where TOps : struct, IBtreeOps
    {
        var ops = default(TOps);
        var root = new BmdrBlockView(inode.AsSpan(offset, length));
        int level = root.Level;
        if (level == 0 || level >= ops.MaxLevels || root.NumRecs == 0 || root.NumRecs > root.MaxRecs)
            throw mount.Corrupt($"{ops.Name} root in inode {ino}", inodeByteOffset, $"level {level} with {root.NumRecs} records (room for {root.MaxRecs})");
        return new MountedBtreeStore(mount, ops.Name, true, ino, 0, 0, level + 1, new ArraySegment<byte>(inode, offset, length), inodeByteOffset);
    }

    public bool IsV5 => _sb.IsV5;
    public int BlockSize => (int)_sb.BlockSize;
    public ulong Owner { get; }
    public ReadOnlySpan<byte> MetadataUuid => _uuid;
    public bool RootInInode => _inodeRoot.Array is not null;
    public ulong RootPointer => _root;
    public int Levels => _levels;
    public ArraySegment<byte> InodeRoot => _inodeRoot;

    public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
    {
        if (_longPointers)
        {
            if (!_sb.IsValidFsb(pointer))
                throw Corrupt($"{_name} pointer in inode {Owner}", referrerByteOffset, $"block {pointer} is outside the volume");
        }
        else if (pointer == 0 || pointer >= _sb.AgBlocks)
        {
            throw Corrupt($"{_name} pointer in AG {_agno}", referrerByteOffset, $"AG block {pointer} is outside the AG");
        }
        return _mount.Buffers.Read(ByteOffset(pointer), BlockSize, Owner, new Verifier(_sb, Owner, magic, _longPointers, _name));
    }

    public long ByteOffset(ulong pointer) => _longPointers ? _sb.FsbToByte(pointer) : _sb.AgBlockToByte(_agno, (uint)pointer);

    public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
        _mount.Corrupt(structure, byteOffset < 0 ? (RootInInode ? _inodeByteOffset : _sb.AgBlockToByte(_agno, 0)) : byteOffset, problem);

    public void SetRoot(ulong pointer, int levels) => throw ReadOnly();
    public void InodeRootChanged(int offset, int length) => throw ReadOnly();
    public void Changed(ulong pointer, byte[] block, int offset, int length) => throw ReadOnly();
    public ulong Allocate(ulong near, out byte[] block) => throw ReadOnly();
    public void Free(ulong pointer) => throw ReadOnly();

    private InvalidOperationException ReadOnly() => new($"the {_name} is read through the buffer cache; change it through a transaction");

    private readonly struct Verifier(Superblock sb, ulong owner, uint magic, bool longPointers, string name) : IBufferVerifier
    {
        // The whole magic: inobt, finobt and rmapbt share their last magic byte.
        public int Kind => unchecked((int)magic);
        public string Structure => name + " block";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) =>
            BtreeBlockView.Verify(buffer, magic, longPointers, sb, byteOffset, owner);
    }
}

using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Btree;

/// <summary>The file extent map B+tree (bmbt): long pointers, keyed by file block offset.</summary>
public readonly struct BmbtOps : IBtreeOps
{
    public string Name => "extent btree (bmbt)";
    public bool LongPointers => true;
    public int RecordSize => BmbtRecord.Size;
    public int KeySize => 8;
    public uint Magic(bool v5) => v5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4;
    public int MaxLevels => 10;
    public ulong RecordKey(ReadOnlySpan<byte> record) => (BinaryPrimitives.ReadUInt64BigEndian(record) & 0x7FFF_FFFF_FFFF_FFFFUL) >> 9;
    public ulong NodeKey(ReadOnlySpan<byte> key) => BinaryPrimitives.ReadUInt64BigEndian(key);
}

/// <summary>The inode allocation B+tree (inobt): short pointers, keyed by the chunk's first AG inode.</summary>
public readonly struct InobtOps : IBtreeOps
{
    public string Name => "inode btree (inobt)";
    public bool LongPointers => false;
    public int RecordSize => InobtRecord.Size;
    public int KeySize => InobtRecord.KeySize;
    public uint Magic(bool v5) => v5 ? BtreeMagic.InoV5 : BtreeMagic.InoV4;
    public int MaxLevels => 9;
    public ulong RecordKey(ReadOnlySpan<byte> record) => BinaryPrimitives.ReadUInt32BigEndian(record);
    public ulong NodeKey(ReadOnlySpan<byte> key) => BinaryPrimitives.ReadUInt32BigEndian(key);
}

/// <summary>The free inode B+tree (finobt): same records as the inobt, only chunks with free inodes.</summary>
public readonly struct FinobtOps : IBtreeOps
{
    public string Name => "free inode btree (finobt)";
    public bool LongPointers => false;
    public int RecordSize => InobtRecord.Size;
    public int KeySize => InobtRecord.KeySize;
    public uint Magic(bool v5) => v5 ? BtreeMagic.FinoV5 : BtreeMagic.FinoV4;
    public int MaxLevels => 9;
    public ulong RecordKey(ReadOnlySpan<byte> record) => BinaryPrimitives.ReadUInt32BigEndian(record);
    public ulong NodeKey(ReadOnlySpan<byte> key) => BinaryPrimitives.ReadUInt32BigEndian(key);
}

/// <summary>The free space by block number B+tree (bnobt): records (startblock, blockcount).</summary>
public readonly struct BnobtOps : IBtreeOps
{
    public string Name => "free space btree (bnobt)";
    public bool LongPointers => false;
    public int RecordSize => 8;
    public int KeySize => 8;
    public uint Magic(bool v5) => v5 ? BtreeMagic.BnoV5 : BtreeMagic.BnoV4;
    public int MaxLevels => 9;
    public ulong RecordKey(ReadOnlySpan<byte> record) => BinaryPrimitives.ReadUInt32BigEndian(record);
    public ulong NodeKey(ReadOnlySpan<byte> key) => BinaryPrimitives.ReadUInt32BigEndian(key);
}

using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Admin;

/// <summary>
/// One AG's free space inside an offline transaction: its AGF, AGI and AGFL, and its two free-space btrees
/// (bnobt by start, cntbt by length then start) changed through the generic <see cref="BtreeCursor{TOps}"/>.
/// Invariants kept: both trees hold the same extents, an extent touching free space at its left is merged with
/// it (as xfs_free_ag_extent merges), agf_freeblks counts them and agf_longest is the largest. Blocks the trees
/// grow by come from the AGFL head and blocks they shrink by go to its tail, as the kernel's allocbt block hooks
/// do: agf_btreeblks follows and sb_fdblocks does not change (it counts AGFL and btree blocks as free), nor the
/// reverse mapping (OWN_AG covers the AGFL and these trees alike).
/// </summary>
internal sealed class AgFreeSpace
{
    private readonly LoggedBuffers _buffers;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly long _agByte, _agfByte, _agiByte, _agflByte;
    private readonly byte[] _agf, _agi;
    private byte[]? _agfl;
    private readonly byte[] _uuid = new byte[16];

    public AgFreeSpace(LoggedBuffers buffers, Superblock sb, uint agno)
    {
        _buffers = buffers;
        _sb = sb;
        _agno = agno;
        _agByte = sb.AgBlockToByte(agno, 0);
        _agfByte = _agByte + sb.SectorSize;
        _agiByte = _agByte + 2L * sb.SectorSize;
        _agflByte = _agByte + 3L * sb.SectorSize;
        sb.MetaUuid.TryWriteBytes(_uuid, bigEndian: true, out _);
        _agi = buffers.Read(_agiByte, sb.SectorSize, BufType.Agi, $"AGI of AG {agno}", (b, _) => AgiView.Verify(b, sb, agno));
        _agf = buffers.Read(_agfByte, sb.SectorSize, BufType.Agf, $"AGF of AG {agno}", (b, _) => AgfView.Verify(b, sb, agno));
    }

    public uint Length => U32(_agf, AgfView.OffLength);
    public uint FreeBlocks => U32(_agf, AgfView.OffFreeblks);
    public uint FreeListCount => U32(_agf, AgfView.OffFlcount);
    public uint Longest => U32(_agf, AgfView.OffLongest);
    public uint BtreeBlocks => U32(_agf, AgfView.OffBtreeblks);
    public uint AgiLength => U32(_agi, AgiView.OffLength);
    public uint InobtRoot => U32(_agi, AgiView.OffRoot);
    public int InobtLevels => (int)U32(_agi, AgiView.OffLevel);
    public uint FinobtBlocks => U32(_agi, AgiView.OffFblocks);
    public uint RmapBlocks => U32(_agf, AgfView.OffRmapBlocks);
    public uint RefcountBlocks => U32(_agf, AgfView.OffRefcountBlocks);
    public uint BnoLevels => U32(_agf, AgfView.OffBnoLevel);
    public uint CntLevels => U32(_agf, AgfView.OffCntLevel);
    public uint RmapLevels => U32(_agf, AgfView.OffRmapLevel);

    /// <summary>Sets agf_length and agi_length (a grow or shrink of the AG; the free space follows through the trees).</summary>
    public void SetLength(uint length)
    {
        SetU32(_agf, AgfView.OffLength, length);
        _buffers.Changed(_agfByte, AgfView.OffLength, 4);
        SetU32(_agi, AgiView.OffLength, length);
        _buffers.Changed(_agiByte, AgiView.OffLength, 4);
    }

    /// <summary>The free extent ending at the AG's end, or null when its last block is in use.</summary>
    public AllocRecord? TailExtent()
    {
        uint end = Length;
        var bno = new BtreeCursor<BnobtOps>(new Store(this, bno: true));
        if (!bno.Lookup(Key(end - 1, 0), BtreeLookup.LessOrEqual)) return null;
        var r = AllocRecord.Decode(bno.Record);
        return (ulong)r.StartBlock + r.BlockCount == end ? r : null;
    }

    /// <summary>Makes [<paramref name="start"/>, +<paramref name="length"/>) free space, merged with a free extent ending at <paramref name="start"/>.</summary>
    public void Free(uint start, uint length)
    {
        var bno = new BtreeCursor<BnobtOps>(new Store(this, bno: true));
        uint newStart = start, newLength = length;
        AllocRecord? left = null;
        if (bno.Lookup(Key(start, 0), BtreeLookup.LessOrEqual))
        {
            var r = AllocRecord.Decode(bno.Record);
            if ((ulong)r.StartBlock + r.BlockCount > start)
                throw Corrupt($"blocks {start}+{length} are already free (bnobt record {r.StartBlock}+{r.BlockCount})");
            if (r.StartBlock + r.BlockCount == start)
            {
                left = r;
                newStart = r.StartBlock;
                newLength = r.BlockCount + length;
            }
        }
        if (bno.Lookup(Key(start, 0), BtreeLookup.GreaterOrEqual))
        {
            var r = AllocRecord.Decode(bno.Record);
            if (r.StartBlock < start + length)
                throw Corrupt($"blocks {start}+{length} overlap free space (bnobt record {r.StartBlock}+{r.BlockCount})");
        }
        if (left is { } l)
        {
            if (!bno.Lookup(Key(l.StartBlock, 0), BtreeLookup.Equal)) throw Corrupt($"bnobt record {l.StartBlock} vanished");
            bno.Update(Rec(newStart, newLength));
            ReplaceInCntbt(l, new AllocRecord(newStart, newLength));
        }
        else
        {
            bno.Insert(Rec(newStart, newLength));
            ReplaceInCntbt(null, new AllocRecord(newStart, newLength));
        }
        SetFreeBlocks(FreeBlocks + length);
    }

    /// <summary>Removes the last <paramref name="length"/> blocks of free extent <paramref name="tail"/> (which ends at the AG's end) from free space.</summary>
    public void TrimTail(AllocRecord tail, uint length)
    {
        if (length > tail.BlockCount) throw new ArgumentOutOfRangeException(nameof(length));
        var bno = new BtreeCursor<BnobtOps>(new Store(this, bno: true));
        if (!bno.Lookup(Key(tail.StartBlock, 0), BtreeLookup.Equal)) throw Corrupt($"bnobt record {tail.StartBlock} vanished");
        uint left = tail.BlockCount - length;
        if (left == 0) bno.Delete();
        else bno.Update(Rec(tail.StartBlock, left));
        ReplaceInCntbt(tail, left == 0 ? null : new AllocRecord(tail.StartBlock, left));
        SetFreeBlocks(FreeBlocks - length);
    }

    /// <summary>True when an inode chunk (sparse or not) of this AG holds inodes at or past AG block <paramref name="agbno"/>.</summary>
    public bool InodeChunkReaches(uint agbno)
    {
        var store = new InobtStore(this);
        var inobt = new BtreeCursor<InobtOps>(store);
        ulong endAgino = (ulong)agbno << _sb.InoPBlog;
        // A chunk is 64 inodes from its aligned start: one starting within 64 inodes before the end crosses it.
        ulong from = endAgino > InobtRecord.InodesPerChunk ? endAgino - InobtRecord.InodesPerChunk + 1 : 0;
        Span<byte> key = stackalloc byte[InobtRecord.KeySize];
        BinaryPrimitives.WriteUInt32BigEndian(key, (uint)Math.Min(from, uint.MaxValue));
        return inobt.Lookup(key, BtreeLookup.GreaterOrEqual);
    }

    private void ReplaceInCntbt(AllocRecord? old, AllocRecord? now)
    {
        var cnt = new BtreeCursor<CntbtOps>(new Store(this, bno: false));
        if (old is { } o)
        {
            if (!cnt.Lookup(Rec(o.StartBlock, o.BlockCount), BtreeLookup.Equal))
                throw Corrupt($"free extent {o.StartBlock}+{o.BlockCount} is in the bnobt but not in the cntbt");
            cnt.Delete();
        }
        if (now is { } n && !cnt.Insert(Rec(n.StartBlock, n.BlockCount)))
            throw Corrupt($"free extent {n.StartBlock}+{n.BlockCount} is in the cntbt twice");
        // agf_longest: the last record by size.
        uint longest = 0;
        if (cnt.Lookup(Rec(uint.MaxValue, uint.MaxValue), BtreeLookup.LessOrEqual)) longest = AllocRecord.Decode(cnt.Record).BlockCount;
        SetU32(_agf, AgfView.OffLongest, longest);
        _buffers.Changed(_agfByte, AgfView.OffLongest, 4);
    }

    private void SetFreeBlocks(uint value)
    {
        SetU32(_agf, AgfView.OffFreeblks, value);
        _buffers.Changed(_agfByte, AgfView.OffFreeblks, 4);
    }

    private static byte[] Key(uint start, uint count) => Rec(start, count);

    private static byte[] Rec(uint start, uint count)
    {
        var r = new byte[8];
        BinaryPrimitives.WriteUInt32BigEndian(r, start);
        BinaryPrimitives.WriteUInt32BigEndian(r.AsSpan(4), count);
        return r;
    }

    private static uint U32(byte[] b, int offset) => BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(offset));
    private static void SetU32(byte[] b, int offset, uint value) => BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(offset), value);

    private XfsCorruptionException Corrupt(string problem) => new($"free space of AG {_agno} (AGF)", _agfByte, problem);

    private int AgflSlots => (_sb.SectorSize - AgflLayout.OffBno) / 4;

    private byte[] Agfl => _agfl ??= _buffers.Read(_agflByte, _sb.SectorSize, BufType.Agfl, $"AGFL of AG {_agno}", (b, _) =>
        BinaryPrimitives.ReadUInt32BigEndian(b) != AgflLayout.Magic ? VerifyResult.Fail("bad AGFL magic", 0)
        : BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(AgflLayout.OffSeqno)) != _agno ? VerifyResult.Fail("AGFL of another AG", AgflLayout.OffSeqno)
        : !XfsCrc.Verify(b, AgflLayout.OffCrc) ? VerifyResult.Fail("AGFL CRC mismatch", AgflLayout.OffCrc)
        : VerifyResult.Ok);

    /// <summary>A block for a free-space btree from the head of the AGFL (xfs_alloc_get_freelist).</summary>
    private uint TakeFromFreeList()
    {
        uint count = FreeListCount;
        if (count == 0)
            throw new XfsException(XfsError.Unsupported,
                $"the free list of AG {_agno} is empty, so its free-space btrees cannot grow; mount the volume once with Linux and try again. Nothing was changed in place.");
        var agfl = Agfl;
        uint first = U32(_agf, AgfView.OffFlfirst);
        if (first >= AgflSlots) throw Corrupt($"agf_flfirst {first} is outside the AGFL's {AgflSlots} slots");
        uint agbno = U32(agfl, AgflLayout.OffBno + 4 * (int)first);
        if (agbno == 0 || agbno >= Length) throw Corrupt($"AGFL slot {first} holds block {agbno}, outside the AG");
        SetU32(_agf, AgfView.OffFlfirst, (first + 1) % (uint)AgflSlots);
        SetU32(_agf, AgfView.OffFlcount, count - 1);
        SetU32(_agf, AgfView.OffBtreeblks, BtreeBlocks + 1);
        _buffers.Changed(_agfByte, AgfView.OffFlfirst, 4);
        _buffers.Changed(_agfByte, AgfView.OffFlcount, 4);
        _buffers.Changed(_agfByte, AgfView.OffBtreeblks, 4);
        return agbno;
    }

    /// <summary>A block a free-space btree gave up, onto the tail of the AGFL (xfs_alloc_put_freelist).</summary>
    private void PutOnFreeList(uint agbno)
    {
        uint count = FreeListCount;
        if (count + 1 >= AgflSlots)
            throw new XfsException(XfsError.Unsupported, $"the free list of AG {_agno} is full; mount the volume once with Linux and try again. Nothing was changed in place.");
        var agfl = Agfl;
        uint last = (U32(_agf, AgfView.OffFllast) + 1) % (uint)AgflSlots;
        SetU32(agfl, AgflLayout.OffBno + 4 * (int)last, agbno);
        _buffers.Changed(_agflByte, AgflLayout.OffBno + 4 * (int)last, 4);
        SetU32(_agf, AgfView.OffFllast, last);
        SetU32(_agf, AgfView.OffFlcount, count + 1);
        SetU32(_agf, AgfView.OffBtreeblks, BtreeBlocks - 1);
        _buffers.Changed(_agfByte, AgfView.OffFllast, 4);
        _buffers.Changed(_agfByte, AgfView.OffFlcount, 4);
        _buffers.Changed(_agfByte, AgfView.OffBtreeblks, 4);
        _buffers.Forget(_sb.AgBlockToByte(_agno, agbno));
    }

    /// <summary>The bnobt or cntbt of the AG, its blocks joined to the transaction's buffers.</summary>
    private sealed class Store(AgFreeSpace ag, bool bno) : IBtreeBlockStore
    {
        private readonly uint _magic = bno ? BtreeMagic.BnoV5 : BtreeMagic.CntV5;
        private string Name => bno ? "bnobt" : "cntbt";
        private int RootOffset => bno ? AgfView.OffBnoRoot : AgfView.OffCntRoot;
        private int LevelOffset => bno ? AgfView.OffBnoLevel : AgfView.OffCntLevel;

        public bool IsV5 => true;
        public int BlockSize => (int)ag._sb.BlockSize;
        public ulong Owner => ag._agno;
        public ReadOnlySpan<byte> MetadataUuid => ag._uuid;
        public bool RootInInode => false;
        public ulong RootPointer => U32(ag._agf, RootOffset);
        public int Levels => (int)U32(ag._agf, LevelOffset);
        public ArraySegment<byte> InodeRoot => default;

        public void SetRoot(ulong pointer, int levels)
        {
            SetU32(ag._agf, RootOffset, (uint)pointer);
            SetU32(ag._agf, LevelOffset, (uint)levels);
            ag._buffers.Changed(ag._agfByte, RootOffset, 4);
            ag._buffers.Changed(ag._agfByte, LevelOffset, 4);
        }

        public void InodeRootChanged(int offset, int length) => throw new InvalidOperationException($"the {Name} is rooted in the AGF");

        public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
        {
            if (pointer == 0 || pointer >= ag.Length)
                throw Corrupt($"{Name} pointer in AG {ag._agno}", referrerByteOffset, $"AG block {pointer} is outside the AG");
            var sb = ag._sb;
            uint agno = ag._agno;
            return ag._buffers.Read(ByteOffset(pointer), BlockSize, BufType.Btree, $"{Name} block of AG {agno}",
                (b, at) => BtreeBlockView.Verify(b, magic, false, sb, at, agno));
        }

        public long ByteOffset(ulong pointer) => ag._sb.AgBlockToByte(ag._agno, (uint)pointer);

        public void Changed(ulong pointer, byte[] block, int offset, int length) => ag._buffers.Changed(ByteOffset(pointer), offset, length);

        public ulong Allocate(ulong near, out byte[] block)
        {
            uint agbno = ag.TakeFromFreeList();
            block = ag._buffers.New(ByteOffset(agbno), BlockSize, BufType.Btree);
            return agbno;
        }

        public void Free(ulong pointer) => ag.PutOnFreeList((uint)pointer);

        public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
            new(structure, byteOffset < 0 ? ag._agfByte : byteOffset, problem);
    }

    /// <summary>The inobt of the AG, read only (a shrink checks no inode chunk crosses the new end).</summary>
    private sealed class InobtStore(AgFreeSpace ag) : IBtreeBlockStore
    {
        public bool IsV5 => true;
        public int BlockSize => (int)ag._sb.BlockSize;
        public ulong Owner => ag._agno;
        public ReadOnlySpan<byte> MetadataUuid => ag._uuid;
        public bool RootInInode => false;
        public ulong RootPointer => ag.InobtRoot;
        public int Levels => ag.InobtLevels;
        public ArraySegment<byte> InodeRoot => default;
        public void SetRoot(ulong pointer, int levels) => throw ReadOnly();
        public void InodeRootChanged(int offset, int length) => throw ReadOnly();

        public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
        {
            if (pointer == 0 || pointer >= ag.Length)
                throw Corrupt($"inobt pointer in AG {ag._agno}", referrerByteOffset, $"AG block {pointer} is outside the AG");
            var sb = ag._sb;
            uint agno = ag._agno;
            return ag._buffers.Read(ByteOffset(pointer), BlockSize, BufType.Btree, $"inobt block of AG {agno}",
                (b, at) => BtreeBlockView.Verify(b, magic, false, sb, at, agno));
        }

        public long ByteOffset(ulong pointer) => ag._sb.AgBlockToByte(ag._agno, (uint)pointer);
        public void Changed(ulong pointer, byte[] block, int offset, int length) => throw ReadOnly();
        public ulong Allocate(ulong near, out byte[] block) => throw ReadOnly();
        public void Free(ulong pointer) => throw ReadOnly();
        public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
            new(structure, byteOffset < 0 ? ag._agiByte : byteOffset, problem);
        private static InvalidOperationException ReadOnly() => new("the inobt is only read by a shrink");
    }
}

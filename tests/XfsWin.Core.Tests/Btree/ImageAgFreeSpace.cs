using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Tests.Btree;

/// <summary>
/// One AG's free-space trees (bnobt, cntbt) and inode trees (inobt, finobt) of a V5 image, for changing them with
/// <see cref="BtreeCursor{TOps}"/> and handing the result to the kernel and xfs_repair: blocks are read and
/// CRC-verified from the device; new free-space tree blocks come from the AGFL and freed ones go back onto it (as
/// the kernel's allocbt block hooks do, with agf_btreeblks following). Inode tree blocks also come from and go to
/// the AGFL here (free space the AG already set aside), counted in agi_iblocks/agi_fblocks and the superblock's free
/// block count, which counts AGFL blocks as free and inode tree blocks as used. <see cref="RefillAgflFromFreeSpace"/>
/// carves blocks off the largest free extent, through the cursor, as xfs_alloc_fix_freelist does. Roots and levels go
/// into the AGF and AGI; <see cref="Commit"/> writes every changed tree block (CRC stamped), the AGFL, the AGF, the
/// AGI and the primary superblock. Nothing reaches the device before <see cref="Commit"/>.
/// </summary>
internal sealed class ImageAgFreeSpace
{
    private readonly IBlockDevice _device;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly byte[] _agf, _agfl, _agi, _super;
    private readonly long _agfOffset, _agflOffset, _agiOffset;
    private readonly int _agflSlots;
    private readonly Dictionary<uint, byte[]> _blocks = new();
    private readonly HashSet<uint> _dirty = new();
    private readonly byte[] _uuid = new byte[16];

    public ImageAgFreeSpace(IBlockDevice device, Superblock sb, uint agno)
    {
        if (!sb.IsV5) throw new ArgumentException("V5 volumes only", nameof(sb));
        _device = device;
        _sb = sb;
        _agno = agno;
        _agfOffset = sb.AgBlockToByte(agno, 0) + sb.SectorSize;
        _agflOffset = sb.AgBlockToByte(agno, 0) + 3L * sb.SectorSize;
        _agf = new byte[sb.SectorSize];
        _agfl = new byte[sb.SectorSize];
        _agiOffset = sb.AgBlockToByte(agno, 0) + 2L * sb.SectorSize;
        _agi = new byte[sb.SectorSize];
        _super = new byte[sb.SectorSize];
        device.Read(_agfOffset, _agf);
        device.Read(_agflOffset, _agfl);
        device.Read(_agiOffset, _agi);
        device.Read(0, _super);
        var agiCheck = AgiView.Verify(_agi, sb, agno);
        if (!agiCheck.IsOk) throw new XfsCorruptionException($"AGI of AG {agno}", _agiOffset, agiCheck.Problem!);
        var agfCheck = AgfView.Verify(_agf, sb, agno);
        if (!agfCheck.IsOk) throw new XfsCorruptionException($"AGF of AG {agno}", _agfOffset, agfCheck.Problem!);
        if (BinaryPrimitives.ReadUInt32BigEndian(_agfl) != AgflLayout.Magic || !XfsCrc.Verify(_agfl, AgflLayout.OffCrc))
            throw new XfsCorruptionException($"AGFL of AG {agno}", _agflOffset, "bad magic or CRC");
        _agflSlots = (sb.SectorSize - AgflLayout.SizeV5) / 4;
        sb.MetaUuid.TryWriteBytes(_uuid, bigEndian: true, out _);
        ByBlock = new Store(this, _agf, AgfView.OffBnoRoot, AgfView.OffBnoLevel, -1);
        ByCount = new Store(this, _agf, AgfView.OffCntRoot, AgfView.OffCntLevel, -1);
        Inodes = new Store(this, _agi, AgiView.OffRoot, AgiView.OffLevel, AgiView.OffIblocks);
        FreeInodes = new Store(this, _agi, AgiView.OffFreeRoot, AgiView.OffFreeLevel, AgiView.OffFblocks);
    }

    public IBtreeBlockStore ByBlock { get; }
    public IBtreeBlockStore ByCount { get; }
    public IBtreeBlockStore Inodes { get; }
    public IBtreeBlockStore FreeInodes { get; }

    public uint AgiField(int offset) => BinaryPrimitives.ReadUInt32BigEndian(_agi.AsSpan(offset));
    public ulong FreeBlocks => BinaryPrimitives.ReadUInt64BigEndian(_super.AsSpan(SuperblockView.OffFdblocks));

    /// <summary>
    /// Moves <paramref name="blocks"/> blocks from the end of the largest free extent onto the AGFL, changing the
    /// extent's record in both free-space trees with the cursor (xfs_alloc_fix_freelist's refill).
    /// </summary>
    public void RefillAgflFromFreeSpace(int blocks)
    {
        var cnt = new BtreeCursor<CntbtOps>(ByCount);
        var bno = new BtreeCursor<BnobtOps>(ByBlock);
        Span<byte> key = stackalloc byte[8];
        key.Fill(0xFF);
        if (!cnt.Lookup(key, BtreeLookup.LessOrEqual)) throw new InvalidOperationException($"AG {_agno} has no free space");
        var rec = cnt.Record.ToArray();
        uint start = BinaryPrimitives.ReadUInt32BigEndian(rec), count = BinaryPrimitives.ReadUInt32BigEndian(rec.AsSpan(4));
        if (count <= (uint)blocks) throw new InvalidOperationException($"the largest free extent of AG {_agno} has {count} blocks");
        cnt.Delete();
        BinaryPrimitives.WriteUInt32BigEndian(rec.AsSpan(4), count - (uint)blocks);
        if (!bno.Lookup(rec.AsSpan(0, 8), BtreeLookup.Equal)) throw new InvalidOperationException($"free extent {start} is in the cntbt but not the bnobt");
        bno.Update(rec);
        if (!cnt.Insert(rec)) throw new InvalidOperationException($"free extent {start} is in the cntbt twice");
        // The trees may have taken AGFL blocks for splits; the carved blocks go on after.
        for (uint b = start + count - (uint)blocks; b < start + count; b++) RefillAgfl(b);
        SetAgfField(AgfView.OffFreeblks, AgfField(AgfView.OffFreeblks) - (uint)blocks);
        key.Fill(0xFF);
        cnt.Lookup(key, BtreeLookup.LessOrEqual);
        SetAgfField(AgfView.OffLongest, BinaryPrimitives.ReadUInt32BigEndian(cnt.Record[4..]));
    }

    public uint AgfField(int offset) => BinaryPrimitives.ReadUInt32BigEndian(_agf.AsSpan(offset));
    public void SetAgfField(int offset, uint value) => BinaryPrimitives.WriteUInt32BigEndian(_agf.AsSpan(offset), value);

    /// <summary>Blocks taken from and put on the AGFL so far.</summary>
    public int Taken { get; private set; }
    public int Returned { get; private set; }

    private uint TakeFromAgfl()
    {
        uint count = AgfField(AgfView.OffFlcount);
        if (count == 0) throw new InvalidOperationException($"the AGFL of AG {_agno} is empty");
        uint first = AgfField(AgfView.OffFlfirst);
        uint bno = BinaryPrimitives.ReadUInt32BigEndian(_agfl.AsSpan(AgflLayout.OffBno + 4 * (int)first));
        SetAgfField(AgfView.OffFlfirst, (first + 1) % (uint)_agflSlots);
        SetAgfField(AgfView.OffFlcount, count - 1);
        SetAgfField(AgfView.OffBtreeblks, AgfField(AgfView.OffBtreeblks) + 1);
        Taken++;
        return bno;
    }

    /// <summary>Puts a block that was free space onto the AGFL (the refill of xfs_alloc_fix_freelist): agf_btreeblks does not change.</summary>
    public void RefillAgfl(uint agbno)
    {
        PutOnAgfl(agbno);
        SetAgfField(AgfView.OffBtreeblks, AgfField(AgfView.OffBtreeblks) + 1);
        Returned--;
    }

    public int AgflCount => (int)AgfField(AgfView.OffFlcount);

    private void PutOnAgfl(uint agbno)
    {
        uint count = AgfField(AgfView.OffFlcount);
        if (count >= _agflSlots) throw new InvalidOperationException($"the AGFL of AG {_agno} is full");
        uint last = (AgfField(AgfView.OffFllast) + 1) % (uint)_agflSlots;
        BinaryPrimitives.WriteUInt32BigEndian(_agfl.AsSpan(AgflLayout.OffBno + 4 * (int)last), agbno);
        SetAgfField(AgfView.OffFllast, last);
        SetAgfField(AgfView.OffFlcount, count + 1);
        SetAgfField(AgfView.OffBtreeblks, AgfField(AgfView.OffBtreeblks) - 1);
        Returned++;
    }

    /// <summary>An inode tree took (+1) or gave back (-1) an AGFL block: not a free-space tree block, and not free.</summary>
    private void MovedToInodeTree(int agiCounter, int delta)
    {
        AddToField(_agf, AgfView.OffBtreeblks, -delta);
        AddToField(_agi, agiCounter, delta);
        BinaryPrimitives.WriteUInt64BigEndian(_super.AsSpan(SuperblockView.OffFdblocks), (ulong)((long)FreeBlocks - delta));
    }

    /// <summary>Writes the changed tree blocks (CRC stamped), then the AGFL and the AGF.</summary>
    public void Commit()
    {
        int crcOff = BtreeBlockView.ShortOffCrc;
        foreach (var bno in _dirty.Order())
        {
            var b = _blocks[bno];
            XfsCrc.Stamp(b, crcOff);
            _device.Write(_sb.AgBlockToByte(_agno, bno), b);
        }
        _dirty.Clear();
        XfsCrc.Stamp(_agfl, AgflLayout.OffCrc);
        _device.Write(_agflOffset, _agfl);
        XfsCrc.Stamp(_agf, AgfView.OffCrc);
        _device.Write(_agfOffset, _agf);
        XfsCrc.Stamp(_agi, AgiView.OffCrc);
        _device.Write(_agiOffset, _agi);
        XfsCrc.Stamp(_super, SuperblockView.OffCrc);
        _device.Write(0, _super);
        _device.Flush();
    }

    private void AddToField(byte[] header, int offset, int delta) =>
        BinaryPrimitives.WriteUInt32BigEndian(header.AsSpan(offset), (uint)((int)BinaryPrimitives.ReadUInt32BigEndian(header.AsSpan(offset)) + delta));

    /// <summary>
    /// A tree rooted in <paramref name="header"/> (AGF or AGI). <paramref name="blockCountField"/> is the AGI's block
    /// counter of an inode tree, or -1 for a free-space tree (counted by agf_btreeblks).
    /// </summary>
    private sealed class Store(ImageAgFreeSpace ag, byte[] header, int rootField, int levelField, int blockCountField) : IBtreeBlockStore
    {
        public bool IsV5 => true;
        public int BlockSize => (int)ag._sb.BlockSize;
        public ulong Owner => ag._agno;
        public ReadOnlySpan<byte> MetadataUuid => ag._uuid;
        public bool RootInInode => false;
        public ulong RootPointer => BinaryPrimitives.ReadUInt32BigEndian(header.AsSpan(rootField));
        public int Levels => (int)BinaryPrimitives.ReadUInt32BigEndian(header.AsSpan(levelField));
        public ArraySegment<byte> InodeRoot => default;

        public void SetRoot(ulong pointer, int levels)
        {
            BinaryPrimitives.WriteUInt32BigEndian(header.AsSpan(rootField), (uint)pointer);
            BinaryPrimitives.WriteUInt32BigEndian(header.AsSpan(levelField), (uint)levels);
        }

        public void InodeRootChanged(int offset, int length) => throw new InvalidOperationException("AG trees have no inode root");

        public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
        {
            if (pointer == 0 || pointer >= ag._sb.AgBlocks)
                throw Corrupt("AG btree pointer", referrerByteOffset, $"AG block {pointer} is outside the AG");
            if (ag._blocks.TryGetValue((uint)pointer, out var cached)) return cached;
            var b = new byte[BlockSize];
            long at = ByteOffset(pointer);
            ag._device.Read(at, b);
            var check = BtreeBlockView.Verify(b, magic, false, ag._sb, at, ag._agno);
            if (!check.IsOk) throw Corrupt("AG btree block", at, check.Problem!);
            ag._blocks[(uint)pointer] = b;
            return b;
        }

        public long ByteOffset(ulong pointer) => ag._sb.AgBlockToByte(ag._agno, (uint)pointer);

        public void Changed(ulong pointer, byte[] block, int offset, int length)
        {
            if (!ag._blocks.TryGetValue((uint)pointer, out var b) || !ReferenceEquals(b, block))
                throw new InvalidOperationException($"change of AG block {pointer}, which was not read or allocated");
            ag._dirty.Add((uint)pointer);
        }

        public ulong Allocate(ulong near, out byte[] block)
        {
            uint bno = ag.TakeFromAgfl();
            if (blockCountField >= 0) ag.MovedToInodeTree(blockCountField, +1);
            block = new byte[BlockSize];
            ag._blocks[bno] = block;
            ag._dirty.Add(bno);
            return bno;
        }

        public void Free(ulong pointer)
        {
            ag._blocks.Remove((uint)pointer);
            ag._dirty.Remove((uint)pointer);
            ag.PutOnAgfl((uint)pointer);
            if (blockCountField >= 0) ag.MovedToInodeTree(blockCountField, -1);
        }

        public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
            new(structure, byteOffset < 0 ? (header == ag._agi ? ag._agiOffset : ag._agfOffset) : byteOffset, problem);
    }
}

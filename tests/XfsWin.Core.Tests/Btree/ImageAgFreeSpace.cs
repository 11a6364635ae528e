using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Tests.Btree;

/// <summary>
/// One AG's free-space trees (bnobt, cntbt) of a V5 image, for changing them with <see cref="BtreeCursor{TOps}"/>
/// and handing the result to the kernel and xfs_repair: blocks are read and CRC-verified from the device, new
/// tree blocks come from the AGFL and freed ones go back onto it (as the kernel's allocbt block hooks do, with
/// agf_btreeblks following), roots and levels go into the AGF, and <see cref="Commit"/> writes every changed tree
/// block (CRC stamped), the AGFL and the AGF. Nothing reaches the device before <see cref="Commit"/>.
/// </summary>
internal sealed class ImageAgFreeSpace
{
    private readonly IBlockDevice _device;
    private readonly Superblock _sb;
    private readonly uint _agno;
    private readonly byte[] _agf, _agfl;
    private readonly long _agfOffset, _agflOffset;
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
        device.Read(_agfOffset, _agf);
        device.Read(_agflOffset, _agfl);
        var agfCheck = AgfView.Verify(_agf, sb, agno);
        if (!agfCheck.IsOk) throw new XfsCorruptionException($"AGF of AG {agno}", _agfOffset, agfCheck.Problem!);
        if (BinaryPrimitives.ReadUInt32BigEndian(_agfl) != AgflLayout.Magic || !XfsCrc.Verify(_agfl, AgflLayout.OffCrc))
            throw new XfsCorruptionException($"AGFL of AG {agno}", _agflOffset, "bad magic or CRC");
        _agflSlots = (sb.SectorSize - AgflLayout.SizeV5) / 4;
        sb.MetaUuid.TryWriteBytes(_uuid, bigEndian: true, out _);
        ByBlock = new Store(this, AgfView.OffBnoRoot, AgfView.OffBnoLevel);
        ByCount = new Store(this, AgfView.OffCntRoot, AgfView.OffCntLevel);
    }

    public IBtreeBlockStore ByBlock { get; }
    public IBtreeBlockStore ByCount { get; }

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
        _device.Flush();
    }

    private sealed class Store(ImageAgFreeSpace ag, int rootField, int levelField) : IBtreeBlockStore
    {
        public bool IsV5 => true;
        public int BlockSize => (int)ag._sb.BlockSize;
        public ulong Owner => ag._agno;
        public ReadOnlySpan<byte> MetadataUuid => ag._uuid;
        public bool RootInInode => false;
        public ulong RootPointer => ag.AgfField(rootField);
        public int Levels => (int)ag.AgfField(levelField);
        public ArraySegment<byte> InodeRoot => default;

        public void SetRoot(ulong pointer, int levels)
        {
            ag.SetAgfField(rootField, (uint)pointer);
            ag.SetAgfField(levelField, (uint)levels);
        }

        public void InodeRootChanged(int offset, int length) => throw new InvalidOperationException("AG trees have no inode root");

        public byte[] Read(ulong pointer, uint magic, long referrerByteOffset)
        {
            if (pointer == 0 || pointer >= ag._sb.AgBlocks)
                throw Corrupt("free space btree pointer", referrerByteOffset, $"AG block {pointer} is outside the AG");
            if (ag._blocks.TryGetValue((uint)pointer, out var cached)) return cached;
            var b = new byte[BlockSize];
            long at = ByteOffset(pointer);
            ag._device.Read(at, b);
            var check = BtreeBlockView.Verify(b, magic, false, ag._sb, at, ag._agno);
            if (!check.IsOk) throw Corrupt("free space btree block", at, check.Problem!);
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
        }

        public XfsCorruptionException Corrupt(string structure, long byteOffset, string problem) =>
            new(structure, byteOffset < 0 ? ag._agfOffset : byteOffset, problem);
    }
}

using System.Buffers.Binary;
using System.Runtime.CompilerServices;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Metadata;

namespace XfsWin.Directories;

/// <summary>
/// Reads directories in every form XFS uses: short-form (in the inode), block (one directory block
/// with its own hash array), leaf (data blocks plus one LEAF1 hash block), node (a hash B+tree of
/// LEAFN blocks) and B+tree (any of those whose extent map is a bmbt).
/// Lookups go by name hash through the leaf/node structures, never by scanning data blocks.
/// Enumeration positions ("cookies") are the entry's byte offset in the directory's data space
/// divided by 8, plus one: stable while the directory is unchanged, and valid to resume from.
/// </summary>
public sealed class DirectoryReader
{
    private readonly MountContext _mount;
    private readonly Superblock _sb;
    private readonly int _dirBlockSize;
    private readonly int _dirBlockByteLog;
    private readonly bool _v5;
    private readonly bool _ftype;

    private readonly ExtentMapCache _maps;

    public DirectoryReader(MountContext mount, ExtentMapCache maps)
    {
        _mount = mount;
        _maps = maps;
        _sb = mount.Superblock;
        _dirBlockSize = _sb.DirectoryBlockSize;
        _dirBlockByteLog = _sb.BlockLog + _sb.DirBlockLog;
        _v5 = _sb.IsV5;
        _ftype = _sb.HasFtype;
    }

    /// <summary>
    /// Listings read data blocks ahead in windows of this many bytes, one window beyond the block
    /// being listed, in the background. Big directories are often fragmented into small extents
    /// (they grow a block at a time, interleaved with their leaf blocks), so a window spans extents.
    /// </summary>
    private const int ReadAheadWindowBytes = 512 * 1024;


    private int DataHeaderSize => DirectoryDataBlock.HeaderSize(_v5);
    /// <summary>First directory block (in directory-block units) past the data space.</summary>
    private ulong LeafDirBlock => (ulong)(Dir2Space.LeafOffset >> _dirBlockByteLog);

    /// <summary>The leaf/node root as a da block number: hash-tree pointers (node "before", sibling links) count filesystem blocks.</summary>
    private ulong LeafDaBlock => (ulong)(Dir2Space.LeafOffset >> _sb.BlockLog);

    private enum Form { Shortform, Block, Leaf, Node }

    // ---------------------------------------------------------------- lookup

    public bool TryLookup(Inode dir, ReadOnlySpan<byte> name, out ulong ino)
    {
        ino = 0;
        if (name.Length is 0 or > 255) return false;
        if (name.SequenceEqual("."u8))
        {
            ino = dir.Number;
            return true;
        }
        var form = FormOf(dir, out var map);
        if (form == Form.Shortform)
        {
            if (name.SequenceEqual(".."u8))
            {
                ino = new ShortformDirectoryView(dir.DataFork, _ftype).Parent;
                return true;
            }
            return ShortformLookup(dir, name, out ino);
        }
        uint hash = _sb.HasAsciiCi ? DaHash.HashAsciiCi(name) : DaHash.Hash(name);
        switch (form)
        {
            case Form.Block:
            {
                var (block, _) = ReadDataBlock(dir, map!, 0, singleBlock: true);
                int tail = block.Length - DirectoryDataBlock.BlockTailSize;
                int count = (int)BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(tail));
                int leafStart = tail - count * 8;
                return SearchHashArray(dir, map!, block, leafStart, count, hash, name, out ino, out _);
            }
            case Form.Leaf:
            {
                var leaf1 = _v5 ? DaBlockInfoView.Dir3Leaf1V5 : DaBlockInfoView.Dir2Leaf1V4;
                var leaf = ReadTreeBlock(dir, map!, LeafDaBlock, leaf1, leaf1, "directory leaf block");
                var view = new DirectoryLeafView(leaf, _v5);
                int count = view.Count;
                if (count > view.MaxEntries(leaf1: true)) throw BadCount(dir, "leaf", count);
                return SearchHashArray(dir, map!, leaf, view.HeaderSize, count, hash, name, out ino, out _);
            }
            default:
                return NodeLookup(dir, map!, hash, name, out ino);
        }
    }

    private bool ShortformLookup(Inode dir, ReadOnlySpan<byte> name, out ulong ino)
    {
        var fork = dir.DataFork;
        var sf = new ShortformDirectoryView(fork, _ftype);
        int off = sf.HeaderSize;
        for (int i = 0; i < sf.Count; i++)
        {
            int len = fork[off];
            if (fork.Slice(off + 3, len).SequenceEqual(name))
            {
                ino = sf.ReadIno(off + 3 + len + (_ftype ? 1 : 0));
                return true;
            }
            off += sf.EntrySize(len);
        }
        ino = 0;
        return false;
    }

    /// <summary>Binary-searches a sorted (hash, address) array for <paramref name="hash"/> and checks each candidate's name.</summary>
    private bool SearchHashArray(Inode dir, ExtentMap map, byte[] block, int start, int count, uint hash, ReadOnlySpan<byte> name, out ulong ino, out bool ranToEnd)
    {
        ino = 0;
        int lo = 0, hi = count;
        while (lo < hi)
        {
            int mid = (lo + hi) >> 1;
            if (BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(start + mid * 8)) < hash) lo = mid + 1; else hi = mid;
        }
        for (int i = lo; i < count; i++)
        {
            uint h = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(start + i * 8));
            if (h != hash)
            {
                ranToEnd = false;
                return false;
            }
            uint address = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(start + i * 8 + 4));
            if (address == 0) continue; // stale
            if (EntryMatches(dir, map, address, name, out ino))
            {
                ranToEnd = false;
                return true;
            }
        }
        ranToEnd = true;
        return false;
    }

    private bool NodeLookup(Inode dir, ExtentMap map, uint hash, ReadOnlySpan<byte> name, out ulong ino)
    {
        ino = 0;
        ushort nodeMagic = _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4;
        ushort leafMagic = _v5 ? DaBlockInfoView.Dir3LeafNV5 : DaBlockInfoView.Dir2LeafNV4;
        ulong dablk = LeafDaBlock;
        int expectedLevel = -1;
        byte[] block;
        // Descend: each node names, per child, the largest hash in that child.
        for (int depth = 0; ; depth++)
        {
            if (depth > 8) throw _mount.Corrupt($"directory hash tree of inode {dir.Number}", dir.ByteOffset, "deeper than any valid tree (a loop?)");
            block = ReadTreeBlock(dir, map, dablk, nodeMagic, leafMagic, "directory node/leaf block");
            if (new DaBlockInfoView(block).Magic == leafMagic)
            {
                if (expectedLevel > 0) throw _mount.Corrupt($"directory node of inode {dir.Number}", 0, "leaf found where a node belongs");
                break;
            }
            var node = new DaNodeView(block, _v5);
            int count = node.Count;
            if (count == 0 || count > node.MaxEntries) throw BadCount(dir, "node", count);
            if (expectedLevel >= 0 && node.Level != expectedLevel) throw _mount.Corrupt($"directory node of inode {dir.Number}", 0, $"level {node.Level}, expected {expectedLevel}");
            expectedLevel = node.Level - 1;
            // The child to follow is the first whose largest hash is >= ours (the last one otherwise):
            // binary search, as node blocks hold hundreds of entries.
            int lo = 0, hi = count - 1;
            while (lo < hi)
            {
                int mid = (lo + hi) >> 1;
                if (node.HashVal(mid) < hash) lo = mid + 1; else hi = mid;
            }
            dablk = node.Before(lo);
        }
        // Scan LEAFN blocks from here while hashes match (equal hashes may continue in the next leaf).
        for (int hops = 0; hops < 1024; hops++)
        {
            var leaf = new DirectoryLeafView(block, _v5);
            int count = leaf.Count;
            if (count > leaf.MaxEntries(leaf1: false)) throw BadCount(dir, "leaf", count);
            if (SearchHashArray(dir, map, block, leaf.HeaderSize, count, hash, name, out ino, out bool ranToEnd)) return true;
            uint forw = new DaBlockInfoView(block).Forw;
            if (!ranToEnd || forw == 0) return false;
            block = ReadTreeBlock(dir, map, forw, leafMagic, leafMagic, "directory leaf block");
        }
        throw _mount.Corrupt($"directory leaf chain of inode {dir.Number}", dir.ByteOffset, "too many leaves with one hash (a loop?)");
    }

    /// <summary>Reads the data entry at directory address <paramref name="address"/> (offset / 8) and compares its name.</summary>
    private bool EntryMatches(Inode dir, ExtentMap map, uint address, ReadOnlySpan<byte> name, out ulong ino)
    {
        ino = 0;
        long byteOffset = (long)address << 3;
        ulong db = (ulong)(byteOffset >> _dirBlockByteLog);
        int off = (int)(byteOffset & (_dirBlockSize - 1));
        if (byteOffset >= Dir2Space.LeafOffset) throw _mount.Corrupt($"directory hash entry of inode {dir.Number}", dir.ByteOffset, $"address {address} outside the data space");
        bool single = FormOf(dir, out _) == Form.Block;
        var (block, _) = ReadDataBlock(dir, map, db, single);
        int end = DirectoryDataBlock.EntriesEnd(block, single);
        if (off < DataHeaderSize || off + 12 > end)
            throw _mount.Corrupt($"directory hash entry of inode {dir.Number}", dir.ByteOffset, $"address {address} outside the entries of its block");
        int len = block[off + 8];
        if (off + DirectoryDataBlock.EntrySize(len, _ftype) > end || len == 0)
            throw _mount.Corrupt($"directory entry of inode {dir.Number}", dir.ByteOffset, $"entry at {byteOffset} runs past its block");
        if (!block.AsSpan(off + 9, len).SequenceEqual(name)) return false;
        ino = BinaryPrimitives.ReadUInt64BigEndian(block.AsSpan(off));
        return true;
    }

    // ---------------------------------------------------------------- enumeration

    public void Enumerate<TVisitor>(Inode dir, long cookie, ref TVisitor visitor) where TVisitor : IDirectoryVisitor
    {
        if (cookie < 0) return;
        var form = FormOf(dir, out var map);
        if (form == Form.Shortform)
        {
            EnumerateShortform(dir, cookie, ref visitor);
            return;
        }
        // Data blocks live below the leaf offset; walk them in order, skipping holes by the extent map.
        ulong fsbPerDirBlock = 1UL << _sb.DirBlockLog;
        ulong db = (ulong)((cookie << 3) >> _dirBlockByteLog);
        ulong limit = form == Form.Block ? 1 : LeafDirBlock;
        ulong windowBlocks = (ulong)Math.Max(1, ReadAheadWindowBytes / _dirBlockSize);
        bool first = true;
        while (db < limit)
        {
            ulong fileBlock = db * fsbPerDirBlock;
            if (!map!.TryFind(fileBlock, out var ext, out ulong next))
            {
                if (next == ulong.MaxValue) return;
                db = (next + fsbPerDirBlock - 1) / fsbPerDirBlock;
                continue;
            }
            if (form != Form.Block && (first || db % windowBlocks == 0))
            {
                // The rest of this window (waited for by ReadDataBlock when not yet cached) and the next one.
                ulong windowEnd = (db / windowBlocks + 1) * windowBlocks;
                ReadAheadDataBlocks(dir, map, db, windowEnd);
                ReadAheadDataBlocks(dir, map, windowEnd, windowEnd + windowBlocks);
            }
            first = false;
            var (block, _) = ReadDataBlock(dir, map, db, form == Form.Block);
            if (!EnumerateDataBlock(dir, block, db, form == Form.Block, cookie, ref visitor)) return;
            db++;
        }
    }

    /// <summary>
    /// Starts background reads of the data blocks [<paramref name="fromDb"/>, <paramref name="toDb"/>)
    /// that are neither cached nor already on their way, close neighbours on disk merged into one read
    /// (directories that grew a block at a time often have their blocks in reverse or interleaved
    /// order on disk).
    /// </summary>
    private void ReadAheadDataBlocks(Inode dir, ExtentMap map, ulong fromDb, ulong toDb)
    {
        toDb = Math.Min(toDb, Math.Min(LeafDirBlock, fromDb + (ulong)Math.Max(1, ReadAheadWindowBytes / _dirBlockSize)));
        if (fromDb >= toDb) return;
        var verifier = new DirectoryAnyBlockVerifier(_sb, dir.Number);
        ulong fsbPerDirBlock = 1UL << _sb.DirBlockLog;
        Span<long> wanted = stackalloc long[(int)(toDb - fromDb)];
        int count = 0;
        ulong db = fromDb;
        while (db < toDb)
        {
            ulong fileBlock = db * fsbPerDirBlock;
            if (!map.TryFind(fileBlock, out var ext, out ulong next))
            {
                if (next == ulong.MaxValue) break;
                db = (next + fsbPerDirBlock - 1) / fsbPerDirBlock;
                continue;
            }
            // Every directory block of this extent inside the window, without looking the map up again.
            ulong extentEndDb = Math.Min(toDb, ext.FileEnd / fsbPerDirBlock);
            ulong startDb = db;
            for (; db < extentEndDb; db++)
            {
                long offset = _sb.FsbToByte(ext.StartBlock + (db * fsbPerDirBlock - ext.FileOffset));
                if (!ext.Unwritten && !_mount.Buffers.IsCachedOrPending(offset, _dirBlockSize, dir.Number, verifier.Kind))
                    wanted[count++] = offset;
            }
            if (db == startDb)
                db++; // a directory block split across extents: left to its reader, which gathers the pieces
        }
        _mount.Buffers.StartPrefetchScattered(wanted[..count], _dirBlockSize, dir.Number, verifier);
    }

    private bool EnumerateDataBlock<TVisitor>(Inode dir, byte[] block, ulong db, bool single, long cookie, ref TVisitor visitor) where TVisitor : IDirectoryVisitor
    {
        int end = DirectoryDataBlock.EntriesEnd(block, single);
        int pos = DataHeaderSize;
        long blockBase = (long)db << _dirBlockByteLog;
        while (pos < end)
        {
            if (pos + 8 > end) throw BadEntry(dir, blockBase + pos, "truncated entry");
            ushort tag = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(pos));
            if (tag == Dir2Space.FreeTag)
            {
                int length = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(pos + 2));
                if (length < 8 || (length & 7) != 0 || pos + length > end) throw BadEntry(dir, blockBase + pos, $"free region of length {length}");
                pos += length;
                continue;
            }
            int len = block[pos + 8];
            int size = DirectoryDataBlock.EntrySize(len, _ftype);
            if (len == 0 || pos + size > end) throw BadEntry(dir, blockBase + pos, "entry runs past its block");
            if (BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(pos + size - 2)) != pos) throw BadEntry(dir, blockBase + pos, "entry tag does not match its offset");
            long position = (blockBase + pos) >> 3;
            if (position >= cookie)
            {
                ulong ino = BinaryPrimitives.ReadUInt64BigEndian(block.AsSpan(pos));
                var type = _ftype ? ToFileType(block[pos + 9 + len]) : XfsFileType.Unknown;
                if (!visitor.Visit(block.AsSpan(pos + 9, len), ino, type, position + 1)) return false;
            }
            pos += size;
        }
        return true;
    }

    private void EnumerateShortform<TVisitor>(Inode dir, long cookie, ref TVisitor visitor) where TVisitor : IDirectoryVisitor
    {
        var fork = dir.DataFork;
        var sf = new ShortformDirectoryView(fork, _ftype);
        long dotPos = DataHeaderSize >> 3;
        long dotdotPos = (DataHeaderSize + DirectoryDataBlock.EntrySize(1, _ftype)) >> 3;
        if (cookie <= dotPos && !visitor.Visit("."u8, dir.Number, XfsFileType.Directory, dotPos + 1)) return;
        if (cookie <= dotdotPos && !visitor.Visit(".."u8, sf.Parent, XfsFileType.Directory, dotdotPos + 1)) return;
        int off = sf.HeaderSize;
        for (int i = 0; i < sf.Count; i++)
        {
            int len = fork[off];
            long position = BinaryPrimitives.ReadUInt16BigEndian(fork[(off + 1)..]) >> 3;
            if (position >= cookie)
            {
                var type = _ftype ? ToFileType(fork[off + 3 + len]) : XfsFileType.Unknown;
                ulong ino = sf.ReadIno(off + 3 + len + (_ftype ? 1 : 0));
                if (!visitor.Visit(fork.Slice(off + 3, len), ino, type, position + 1)) return;
            }
            off += sf.EntrySize(len);
        }
    }

    private static XfsFileType ToFileType(byte ftype) => ftype <= 8 ? (XfsFileType)ftype : XfsFileType.Unknown;

    // ---------------------------------------------------------------- forms and block access

    /// <summary>
    /// The form and extent map of a directory, worked out once per revision of its <see cref="Inode"/> (a
    /// commit that changes the inode clears what was kept, see <see cref="Inode.Refresh"/>). Reusing
    /// the map also reuses its B+tree cursor and the path it last descended, instead of allocating a
    /// cursor and re-reading the first leaf/node block on every lookup.
    /// </summary>
    private Form FormOf(Inode dir, out ExtentMap? map)
    {
        if (dir.DirectoryShape is DirectoryShape shape && ReferenceEquals(shape.Reader, this))
        {
            map = shape.Map;
            return shape.Form;
        }
        var form = WorkOutForm(dir, out map);
        dir.DirectoryShape = new DirectoryShape(this, form, map);
        return form;
    }

    private sealed record DirectoryShape(DirectoryReader Reader, Form Form, ExtentMap? Map);

    private Form WorkOutForm(Inode dir, out ExtentMap? map)
    {
        map = null;
        if (!dir.IsDirectory) throw new XfsException(XfsError.NotADirectory, $"inode {dir.Number} is not a directory");
        switch (dir.DataFormat)
        {
            case ForkFormat.Local:
            {
                var check = new ShortformDirectoryView(dir.DataFork, _ftype).Verify((int)Math.Min(dir.Size, dir.DataForkSize), _sb.IsV5);
                if (!check.IsOk || dir.Size > dir.DataForkSize) throw _mount.Corrupt($"short-form directory in inode {dir.Number}", dir.ByteOffset, check.IsOk ? "size larger than the fork" : check.ToString());
                return Form.Shortform;
            }
            case ForkFormat.Extents or ForkFormat.Btree:
                map = _maps.Get(dir, ForkKind.Data);
                // Block form is a single directory block and nothing mapped after it (xfs_dir2_isblock looks at the
                // end of the last extent, not at the size): a leaf directory that has shrunk back to one data block
                // also has the size of one block, but keeps its leaf block at the leaf offset.
                if (dir.Size == _dirBlockSize && !map.TryFind(LeafDaBlock, out _, out _)) return Form.Block;
                // Beyond block form the size does not shape anything (the kernel and xfs_repair go by the mapping); one
                // that would fit in the inode contradicts the format, as xfs_repair says.
                if (dir.Size <= dir.DataForkSize)
                    throw _mount.Corrupt($"directory inode {dir.Number}", dir.ByteOffset, $"size {dir.Size} fits in the inode, but the directory is in {dir.DataFormat} format");
                if (!map.TryFind(LeafDaBlock, out _, out _))
                    throw _mount.Corrupt($"directory inode {dir.Number}", dir.ByteOffset, "multi-block directory without a leaf block");
                var first = ReadTreeBlock(dir, map, LeafDaBlock,
                    _v5 ? DaBlockInfoView.Dir3Leaf1V5 : DaBlockInfoView.Dir2Leaf1V4,
                    _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4, "directory leaf/node block",
                    _v5 ? DaBlockInfoView.Dir3LeafNV5 : DaBlockInfoView.Dir2LeafNV4);
                ushort magic = new DaBlockInfoView(first).Magic;
                return magic is DaBlockInfoView.Dir3Leaf1V5 or DaBlockInfoView.Dir2Leaf1V4 ? Form.Leaf : Form.Node;
            default:
                throw _mount.Corrupt($"directory inode {dir.Number}", dir.ByteOffset, $"data fork format {dir.DataFormat}");
        }
    }

    /// <summary>
    /// Reads a data block (or the single block of a block-form directory) and checks that it is that kind of block.
    /// Every directory block is verified and cached as one kind, <see cref="DirectoryAnyBlockVerifier"/> (a known
    /// directory magic, then CRC and self-description, and the contents of data and single blocks), the kind the write path's <c>DirectoryEditor</c> reads and
    /// publishes them as; which block kind the caller expects is checked here on every read, without the CRC. A
    /// lookup between two changes of a directory so finds its blocks as the change left them, instead of verifying
    /// them again as another kind.
    /// </summary>
    private (byte[] Block, long ByteOffset) ReadDataBlock(Inode dir, ExtentMap map, ulong db, bool singleBlock)
    {
        var (block, offset) = ReadDirBlock(dir, map, db << _sb.DirBlockLog, new DirectoryAnyBlockVerifier(_sb, dir.Number));
        var shape = DirectoryDataBlock.VerifyShape(block, singleBlock, _v5);
        if (!shape.IsOk)
            throw _mount.Corrupt(singleBlock ? $"directory block of inode {dir.Number}" : $"directory data block of inode {dir.Number}", offset, shape.ToString());
        return (block, offset);
    }

    /// <summary>
    /// Reads a block of the directory's hash tree (leaf, node or leafN) and checks that it is one of
    /// the kinds the caller expects (cached as any directory block, see <see cref="ReadDataBlock"/>): the
    /// directory's form is learned from its first block, and the lookup that follows finds that block
    /// cached instead of reading it again (one disk read per cold directory).
    /// </summary>
    private byte[] ReadTreeBlock(Inode dir, ExtentMap map, ulong dablk, ushort magicA, ushort magicB, string structure, ushort magicC = 0)
    {
        var (block, offset) = ReadDirBlock(dir, map, dablk, new DirectoryAnyBlockVerifier(_sb, dir.Number));
        uint magic32 = BinaryPrimitives.ReadUInt32BigEndian(block);
        ushort magic = new DaBlockInfoView(block).Magic;
        if (DirectoryAnyBlockVerifier.IsDataHeader(magic32))
            throw _mount.Corrupt($"{structure} of inode {dir.Number}", offset, $"data or free-index block (magic 0x{magic32:x8}) in the hash tree");
        if (magic != magicA && magic != magicB && magic != (magicC == 0 ? magicA : magicC))
            throw _mount.Corrupt($"{structure} of inode {dir.Number}", offset, $"bad magic 0x{magic:x4}");
        return block;
    }

    /// <summary>
    /// Reads the directory block starting at file block <paramref name="fileBlock"/> (a da block number:
    /// directory blocks may span several filesystem blocks; usually contiguous and then cached,
    /// otherwise gathered and verified here).
    /// </summary>
    private (byte[] Block, long ByteOffset) ReadDirBlock<TVerifier>(Inode dir, ExtentMap map, ulong fileBlock, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        ulong fsbPer = 1UL << _sb.DirBlockLog;
        ulong db = fileBlock >> _sb.DirBlockLog;
        if ((fileBlock & (fsbPer - 1)) != 0)
            throw _mount.Corrupt(verifier.Structure, dir.ByteOffset, $"hash tree points at file block {fileBlock}, not the start of a directory block");
        if (!map.TryFind(fileBlock, out var ext, out _))
            throw _mount.Corrupt(verifier.Structure, dir.ByteOffset, $"directory block {db} is not mapped (hole in the directory)");
        if (ext.Unwritten) throw _mount.Corrupt(verifier.Structure, dir.ByteOffset, $"directory block {db} is unwritten");
        ulong within = fileBlock - ext.FileOffset;
        if (ext.BlockCount - within >= fsbPer)
        {
            long offset = _sb.FsbToByte(ext.StartBlock + within);
            return (_mount.Buffers.Read(offset, _dirBlockSize, dir.Number, verifier), offset);
        }
        // Discontiguous directory block: gather its pieces, then verify the whole.
        var buffer = new byte[_dirBlockSize];
        long firstOffset = -1;
        ulong done = 0;
        while (done < fsbPer)
        {
            if (!map.TryFind(fileBlock + done, out var piece, out _) || piece.Unwritten)
                throw _mount.Corrupt(verifier.Structure, dir.ByteOffset, $"directory block {db} is partly unmapped");
            ulong skip = fileBlock + done - piece.FileOffset;
            ulong n = Math.Min(piece.BlockCount - skip, fsbPer - done);
            long offset = _sb.FsbToByte(piece.StartBlock + skip);
            if (firstOffset < 0) firstOffset = offset;
            _mount.Device.Read(offset, buffer.AsSpan((int)(done << _sb.BlockLog), (int)(n << _sb.BlockLog)));
            done += n;
        }
        var result = verifier.Verify(buffer, firstOffset);
        if (!result.IsOk) throw _mount.Corrupt(verifier.Structure, firstOffset, result.ToString());
        return (buffer, firstOffset);
    }

    private XfsCorruptionException BadCount(Inode dir, string what, int count) =>
        _mount.Corrupt($"directory {what} block of inode {dir.Number}", dir.ByteOffset, $"entry count {count} does not fit the block");

    private XfsCorruptionException BadEntry(Inode dir, long dirOffset, string problem) =>
        _mount.Corrupt($"directory entry of inode {dir.Number}", dir.ByteOffset, $"{problem} at directory offset {dirOffset}");
}

using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Directories;

/// <summary>The on-disk form of a directory, as the kernel's xfs_dir2_format tells them apart.</summary>
public enum DirectoryForm { Shortform, Block, Leaf, Node }

/// <summary>
/// Changes a directory inside a <see cref="Transaction"/>, as the kernel's xfs_dir_createname, xfs_dir_removename
/// and xfs_dir_replace do: short-form, block, leaf and node directories, and the conversions between them at the
/// points the kernel converts (short-form to block when the entry does not fit the inode's data fork or its block
/// would not hold it; block to leaf when the block has no room for the entry and its hash; leaf to node when the
/// leaf block has no room for another hash entry; node back to leaf when a single leaf block is left and it can
/// take the best-free table again; leaf back to block when the only data block can take the hash array again;
/// block back to short-form when the entries fit the fork). Entry placement follows the kernel too (best free
/// region, first hole of a short-form directory, stale hash entries reused nearest the insertion point, the
/// free-index blocks searched from the last), so that the shapes the kernel would choose later stay the same.
/// <para>
/// A node directory's hash entries live in a B+tree of leafN blocks under da-node blocks rooted at the first leaf
/// block; leaves split and join, and the root splits and collapses, as xfs_da3_split and xfs_da3_join do (see
/// DirectoryEditor.Node.cs).
/// </para>
/// <para>
/// Every block the editor reads is joined to the transaction; the bytes each operation changed are logged when it
/// returns (compared with the block as joined, in the log's 128-byte chunks); new blocks are logged whole; freed
/// blocks are invalidated. The inode's working image (<see cref="DirectoryInodeImage"/>) is the caller's to log.
/// One editor serves one directory in one transaction.
/// </para>
/// </summary>
public sealed partial class DirectoryEditor
{
    /// <summary>Largest inode number a 4-byte short-form field holds (XFS_DIR2_MAX_SHORT_INUM).</summary>
    private const ulong MaxShortIno = 0xFFFF_FFFFUL;
    private const ushort NullDataOff = 0xFFFF;

    private readonly Transaction _tx;
    private readonly Superblock _sb;
    private readonly DirectoryInodeImage _dir;
    private readonly IDirectorySpace _space;
    private readonly int _blk;
    private readonly int _fsbPer;
    private readonly bool _v5;
    private readonly bool _ftype;
    private readonly int _hdr;
    private readonly int _bestFreeOffset;
    private readonly int _leafHdr;
    private readonly ulong _leafFsb;
    private readonly ulong _freeFsb;
    private readonly int _freeHdr;
    private readonly int _maxBests;
    private readonly int _daMax;
    private readonly byte[] _uuid = new byte[16];
    private readonly Dictionary<long, Joined> _joined = new();
    private DirectoryBlockWriteVerifier? _writeVerifier;
    /// <summary>The write verifier of this directory's blocks (one per editor).</summary>
    private DirectoryBlockWriteVerifier WriteVerifier => _writeVerifier ??= new DirectoryBlockWriteVerifier(_sb, _dir.Number);

    private sealed class Joined(MetadataBuffer buffer, byte[]? before, NewBlockLogging logging = NewBlockLogging.Whole)
    {
        public readonly MetadataBuffer Buffer = buffer;
        /// <summary>The block before the transaction (its published bytes: never written to), null for a new block.</summary>
        public readonly byte[]? Before = before;
        public readonly NewBlockLogging Logging = logging;
    }

    /// <summary>
    /// What of a new block (zeroed in memory, anything on disk) is logged, as the kernel logs only the parts it wrote:
    /// what the structure reads must be logged, the rest may stay whatever the disk had after a replay.
    /// </summary>
    private enum NewBlockLogging
    {
        /// <summary>Every byte.</summary>
        Whole,
        /// <summary>
        /// Block-form blocks: their data area as <see cref="NonZero"/>, and from the chunk holding the first hash entry to
        /// the end (the hash array and the tail, which count how many entries are read) every chunk.
        /// </summary>
        BlockForm,
        /// <summary>
        /// The header and the entries in use (or the valid bests) from the start: hash-tree and free-index blocks, past
        /// whose count nothing is read.
        /// </summary>
        Prefix,
        /// <summary>
        /// The 128-byte chunks that hold a non-zero byte: data blocks, whose every field the structure reads (entry
        /// numbers, name lengths, free tags and lengths, tags) is non-zero, so a zero chunk is free space.
        /// </summary>
        NonZero,
    }

    public DirectoryEditor(Transaction tx, DirectoryInodeImage dir, IDirectorySpace space)
    {
        _tx = tx;
        _sb = tx.Mount.Superblock;
        _dir = dir;
        _space = space;
        _blk = _sb.DirectoryBlockSize;
        _fsbPer = 1 << _sb.DirBlockLog;
        _v5 = _sb.IsV5;
        _ftype = _sb.HasFtype;
        _hdr = DirectoryDataBlock.HeaderSize(_v5);
        _bestFreeOffset = _v5 ? 48 : 4;
        _leafHdr = _v5 ? 64 : 16;
        _leafFsb = (ulong)(Dir2Space.LeafOffset >> _sb.BlockLog);
        _freeFsb = (ulong)(Dir2Space.FreeOffset >> _sb.BlockLog);
        _freeHdr = _v5 ? 64 : 16;
        _maxBests = (_blk - _freeHdr) / 2;
        _daMax = (_blk - _leafHdr) / 8;
        _sb.MetaUuid.TryWriteBytes(_uuid, bigEndian: true, out _);
    }

    private int EntSize(int nameLength) => DirectoryDataBlock.EntrySize(nameLength, _ftype);
    private int DataFirstOffset => _hdr + EntSize(1) + EntSize(2);
    private uint Hash(ReadOnlySpan<byte> name) => _sb.HasAsciiCi ? DaHash.HashAsciiCi(name) : DaHash.Hash(name);

    // ================================================================ public operations

    /// <summary>The directory's form now (xfs_dir2_isblock / xfs_dir2_isleaf: where its last mapping ends).</summary>
    public DirectoryForm Form
    {
        get
        {
            if (_dir.DataFormat == ForkFormat.Local) return DirectoryForm.Shortform;
            if (_dir.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree))
                throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"data fork format {_dir.DataFormat}");
            ulong last = _space.LastOffset(_dir);
            if (last == (ulong)_fsbPer)
            {
                if (_dir.Size != (ulong)_blk)
                    throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"block directory of size {_dir.Size}");
                return DirectoryForm.Block;
            }
            return last == _leafFsb + (ulong)_fsbPer ? DirectoryForm.Leaf : DirectoryForm.Node;
        }
    }

    /// <summary>
    /// A short-form directory becomes a block directory (xfs_dir2_sf_to_block), as when a new attribute fork leaves its
    /// entries no room in the inode; other forms are left as they are.
    /// </summary>
    public void MoveOutOfInode()
    {
        if (Form != DirectoryForm.Shortform) return;
        ShortformToBlock(ReadShortform());
        LogChanges();
    }

    /// <summary>The inode an entry names, or false when there is none.</summary>
    public bool TryLookup(ReadOnlySpan<byte> name, out ulong ino)
    {
        ino = 0;
        var form = Form;
        if (form == DirectoryForm.Shortform)
        {
            var sf = ReadShortform();
            if (name.SequenceEqual(".."u8)) { ino = sf.Parent; return true; }
            int i = sf.IndexOf(name);
            if (i < 0) return false;
            ino = sf.Entries[i].Ino;
            return true;
        }
        var hit = FindEntry(form, name);
        if (hit is null) return false;
        ino = BinaryPrimitives.ReadUInt64BigEndian(hit.Value.Block.AsSpan(hit.Value.Offset));
        return true;
    }

    /// <summary>Adds <paramref name="name"/> naming <paramref name="ino"/> of type <paramref name="type"/> (the caller keeps link counts).</summary>
    public void AddEntry(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        if (!TryAddEntry(name, ino, type)) throw new XfsException(XfsError.InvalidArgument, $"directory {_dir.Number} already has an entry \"{Show(name)}\"");
    }

    /// <summary>As <see cref="AddEntry"/>, but false (and nothing changed) when <paramref name="name"/> exists already.</summary>
    public bool TryAddEntry(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        CheckName(name);
        var form = Form;
        if (form == DirectoryForm.Node)
        {
            // One descent of the hash tree finds the name or where it goes.
            if (!NodeTryAdd(name, ino, type)) return false;
            LogChanges();
            return true;
        }
        if (TryLookup(name, out _)) return false;
        switch (form)
        {
            case DirectoryForm.Shortform: ShortformAdd(name, ino, type); break;
            case DirectoryForm.Block: BlockAdd(name, ino, type); break;
            case DirectoryForm.Leaf: LeafAdd(name, ino, type); break;
            default: NodeAdd(name, ino, type); break;
        }
        LogChanges();
        return true;
    }

    /// <summary>Removes <paramref name="name"/> and returns the inode it named.</summary>
    public ulong RemoveEntry(ReadOnlySpan<byte> name)
    {
        CheckName(name);
        ulong removed;
        switch (Form)
        {
            case DirectoryForm.Shortform: removed = ShortformRemove(name); break;
            case DirectoryForm.Block: removed = BlockRemove(name); break;
            case DirectoryForm.Leaf: removed = LeafRemove(name); break;
            default: removed = NodeRemove(name); break;
        }
        LogChanges();
        return removed;
    }

    /// <summary>Points <paramref name="name"/> (or "..") at <paramref name="ino"/> of type <paramref name="type"/>; returns the inode it named before.</summary>
    public ulong ReplaceEntry(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        if (!name.SequenceEqual(".."u8)) CheckName(name);
        ulong old;
        var form = Form;
        if (form == DirectoryForm.Shortform) old = ShortformReplace(name, ino, type);
        else old = DataReplace(form, name, ino, type);
        LogChanges();
        return old;
    }

    private static void CheckName(ReadOnlySpan<byte> name)
    {
        if (name.Length is 0 or > 255) throw new XfsException(XfsError.NameTooLong, $"a directory entry name has 1 to 255 bytes, not {name.Length}");
        if (name.IndexOfAny((byte)'/', (byte)0) >= 0) throw new XfsException(XfsError.InvalidArgument, $"the name \"{Show(name)}\" holds '/' or NUL");
        if (name.SequenceEqual("."u8) || name.SequenceEqual(".."u8)) throw new XfsException(XfsError.InvalidArgument, "\".\" and \"..\" are kept by the directory itself");
    }

    private static string Show(ReadOnlySpan<byte> name) => System.Text.Encoding.UTF8.GetString(name);

    // ================================================================ short form

    private sealed record SfEntry(byte[] Name, int Offset, ulong Ino, byte Ftype);

    private sealed class Shortform(ulong parent, List<SfEntry> entries)
    {
        public ulong Parent = parent;
        public readonly List<SfEntry> Entries = entries;

        public int IndexOf(ReadOnlySpan<byte> name)
        {
            for (int i = 0; i < Entries.Count; i++)
                if (name.SequenceEqual(Entries[i].Name)) return i;
            return -1;
        }

        /// <summary>i8count: inode numbers (the parent's included) that need 8 bytes.</summary>
        public int I8Count => (Parent > MaxShortIno ? 1 : 0) + Entries.Count(e => e.Ino > MaxShortIno);
    }

    private Shortform ReadShortform()
    {
        var fork = _dir.DataFork;
        int size = (int)Math.Min(_dir.Size, (ulong)fork.Length);
        var view = new ShortformDirectoryView(fork, _ftype);
        var check = view.Verify(size, _sb.IsV5);
        if (!check.IsOk || _dir.Size > (ulong)fork.Length)
            throw _tx.Mount.Corrupt($"short-form directory in inode {_dir.Number}", _sb.InodeToByte(_dir.Number), check.IsOk ? "size larger than the fork" : check.ToString());
        var list = new List<SfEntry>(view.Count);
        int off = view.HeaderSize;
        for (int i = 0; i < view.Count; i++)
        {
            int len = fork[off];
            int offset = BinaryPrimitives.ReadUInt16BigEndian(fork[(off + 1)..]);
            byte ftype = _ftype ? fork[off + 3 + len] : (byte)0;
            ulong ino = view.ReadIno(off + 3 + len + (_ftype ? 1 : 0));
            list.Add(new SfEntry(fork.Slice(off + 3, len).ToArray(), offset, ino, ftype));
            off += view.EntrySize(len);
        }
        return new Shortform(view.Parent, list);
    }

    private int SfEntSize(int nameLength, bool i8) => 3 + nameLength + (_ftype ? 1 : 0) + (i8 ? 8 : 4);

    private int SfSize(Shortform sf)
    {
        bool i8 = sf.I8Count != 0;
        int size = 2 + (i8 ? 8 : 4);
        foreach (var e in sf.Entries) size += SfEntSize(e.Name.Length, i8);
        return size;
    }

    private void WriteShortform(Shortform sf)
    {
        int i8count = sf.I8Count;
        bool i8 = i8count != 0;
        var bytes = new byte[SfSize(sf)];
        bytes[0] = checked((byte)sf.Entries.Count);
        bytes[1] = (byte)i8count;
        PutSfIno(bytes, 2, sf.Parent, i8);
        int off = 2 + (i8 ? 8 : 4);
        foreach (var e in sf.Entries)
        {
            bytes[off] = (byte)e.Name.Length;
            BinaryPrimitives.WriteUInt16BigEndian(bytes.AsSpan(off + 1), (ushort)e.Offset);
            e.Name.CopyTo(bytes, off + 3);
            int at = off + 3 + e.Name.Length;
            if (_ftype) bytes[at++] = e.Ftype;
            PutSfIno(bytes, at, e.Ino, i8);
            off += SfEntSize(e.Name.Length, i8);
        }
        _dir.SetLocal(bytes);
    }

    private static void PutSfIno(byte[] b, int at, ulong ino, bool i8)
    {
        if (i8) BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(at), ino);
        else BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(at), checked((uint)ino));
    }

    private void ShortformAdd(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        var sf = ReadShortform();
        bool i8 = sf.I8Count != 0;
        int increase = SfEntSize(name.Length, i8);
        bool toIno8 = ino > MaxShortIno && !i8;
        if (toIno8) increase += (sf.Entries.Count + 2) * 4;
        long newSize = (long)_dir.Size + increase;
        int pick = newSize > _dir.DataForkSize ? 0 : PickShortformPlace(sf, name.Length, toIno8);
        if (pick == 0)
        {
            ShortformToBlock(sf);
            BlockAdd(name, ino, type);
            return;
        }
        int size = EntSize(name.Length);
        var entry = new SfEntry(name.ToArray(), 0, ino, _ftype ? (byte)type : (byte)0);
        if (pick == 1)
        {
            // At the end, after the last entry's data-block offset.
            int offset = sf.Entries.Count == 0 ? DataFirstOffset : sf.Entries[^1].Offset + EntSize(sf.Entries[^1].Name.Length);
            sf.Entries.Add(entry with { Offset = offset });
        }
        else
        {
            // The first gap between entries' data-block offsets that holds the new entry, else the end.
            int offset = DataFirstOffset, i = 0;
            for (; i < sf.Entries.Count; i++)
            {
                if (offset + size <= sf.Entries[i].Offset) break;
                offset = sf.Entries[i].Offset + EntSize(sf.Entries[i].Name.Length);
            }
            sf.Entries.Insert(i, entry with { Offset = offset });
        }
        WriteShortform(sf);
    }

    /// <summary>xfs_dir2_sf_addname_pick: 0 = the block form would not hold it, 1 = append, 2 = into the first hole.</summary>
    private int PickShortformPlace(Shortform sf, int nameLength, bool toIno8)
    {
        int size = EntSize(nameLength);
        int offset = DataFirstOffset;
        bool holeFit = false;
        foreach (var e in sf.Entries)
        {
            if (!holeFit) holeFit = offset + size <= e.Offset;
            offset = e.Offset + EntSize(e.Name.Length);
        }
        int used = offset + (sf.Entries.Count + 3) * 8 + DirectoryDataBlock.BlockTailSize;
        if (used + (holeFit ? 0 : size) > _blk) return 0;
        if (toIno8) return 2;
        return used + size > _blk ? 2 : 1;
    }

    private ulong ShortformRemove(ReadOnlySpan<byte> name)
    {
        var sf = ReadShortform();
        int i = sf.IndexOf(name);
        if (i < 0) throw NotFound(name);
        ulong ino = sf.Entries[i].Ino;
        sf.Entries.RemoveAt(i);
        WriteShortform(sf);
        return ino;
    }

    private ulong ShortformReplace(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        var sf = ReadShortform();
        bool dotdot = name.SequenceEqual(".."u8);
        int i = dotdot ? -1 : sf.IndexOf(name);
        if (!dotdot && i < 0) throw NotFound(name);
        if (ino > MaxShortIno && sf.I8Count == 0 && (long)_dir.Size + (sf.Entries.Count + 1) * 4 > _dir.DataForkSize)
        {
            ShortformToBlock(sf);
            return DataReplace(DirectoryForm.Block, name, ino, type);
        }
        ulong old;
        if (dotdot)
        {
            old = sf.Parent;
            sf.Parent = ino;
        }
        else
        {
            old = sf.Entries[i].Ino;
            sf.Entries[i] = sf.Entries[i] with { Ino = ino, Ftype = _ftype ? (byte)type : (byte)0 };
        }
        WriteShortform(sf);
        return old;
    }

    /// <summary>xfs_dir2_sf_to_block: block 0 with ".", "..", every entry at its short-form offset, holes as free space.</summary>
    private void ShortformToBlock(Shortform sf)
    {
        _dir.SetEmptyExtents();
        var b = NewDataBlock(0, block: true, out _);
        int count = sf.Entries.Count + 2;
        int leafStart = _blk - DirectoryDataBlock.BlockTailSize - count * 8;
        SetTail(b, count, 0);
        var ents = new List<(uint Hash, uint Address)>(count);
        int dot = _hdr;
        PutEntry(b, dot, "."u8, _dir.Number, (byte)XfsFileType.Directory);
        ents.Add((Hash("."u8), (uint)(dot >> 3)));
        int dotdot = dot + EntSize(1);
        PutEntry(b, dotdot, ".."u8, sf.Parent, (byte)XfsFileType.Directory);
        ents.Add((Hash(".."u8), (uint)(dotdot >> 3)));
        int offset = DataFirstOffset;
        foreach (var e in sf.Entries)
        {
            if (e.Offset < offset || e.Offset + EntSize(e.Name.Length) > leafStart)
                throw _tx.Mount.Corrupt($"short-form directory in inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"entry offset {e.Offset} overlaps another or the block's hash array");
            if (offset < e.Offset) PutUnused(b, offset, e.Offset - offset);
            PutEntry(b, e.Offset, e.Name, e.Ino, e.Ftype);
            ents.Add((Hash(e.Name), (uint)(e.Offset >> 3)));
            offset = e.Offset + EntSize(e.Name.Length);
        }
        if (offset < leafStart) PutUnused(b, offset, leafStart - offset);
        ents.Sort((x, y) => x.Hash.CompareTo(y.Hash));
        WriteEntries(b, leafStart, ents);
        FreeScan(b, leafStart);
    }

    // ================================================================ data block primitives

    private static ushort U16(byte[] b, int at) => BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(at));
    private static void SetU16(byte[] b, int at, int v) => BinaryPrimitives.WriteUInt16BigEndian(b.AsSpan(at), (ushort)v);
    private static bool IsUnused(byte[] b, int at) => U16(b, at) == Dir2Space.FreeTag;

    private void PutEntry(byte[] b, int at, ReadOnlySpan<byte> name, ulong ino, byte ftype)
    {
        int size = EntSize(name.Length);
        b.AsSpan(at, size).Clear();
        BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(at), ino);
        b[at + 8] = (byte)name.Length;
        name.CopyTo(b.AsSpan(at + 9));
        if (_ftype) b[at + 9 + name.Length] = ftype;
        SetU16(b, at + size - 2, at);
    }

    private static void PutUnused(byte[] b, int at, int length)
    {
        SetU16(b, at, Dir2Space.FreeTag);
        SetU16(b, at + 2, length);
        SetU16(b, at + length - 2, at);
    }

    /// <summary>Takes [<paramref name="at"/>, +<paramref name="length"/>) out of the free region starting at <paramref name="dup"/> (xfs_dir2_data_use_free).</summary>
    private void UseFree(byte[] b, int dup, int at, int length)
    {
        if (!IsUnused(b, dup)) throw new InvalidOperationException($"directory {_dir.Number}: offset {dup} is not free space");
        int dupLength = U16(b, dup + 2);
        if (at < dup || at + length > dup + dupLength) throw new InvalidOperationException($"directory {_dir.Number}: [{at}, +{length}) is outside the free region at {dup} (+{dupLength})");
        if (at > dup) PutUnused(b, dup, at - dup);
        if (at + length < dup + dupLength) PutUnused(b, at + length, dup + dupLength - at - length);
    }

    /// <summary>Returns [<paramref name="at"/>, +<paramref name="length"/>) to free space, merged with free neighbours (xfs_dir2_data_make_free).</summary>
    private void MakeFree(byte[] b, int at, int length, int end)
    {
        int start = at, stop = at + length;
        if (start > _hdr)
        {
            int prev = U16(b, start - 2);
            if (prev >= _hdr && prev < start && IsUnused(b, prev) && prev + U16(b, prev + 2) == start) start = prev;
        }
        if (stop < end && IsUnused(b, stop)) stop += U16(b, stop + 2);
        PutUnused(b, start, stop - start);
    }

    /// <summary>Rebuilds bestfree[] from the free regions of [header, <paramref name="end"/>) (xfs_dir2_data_freescan).</summary>
    private void FreeScan(byte[] b, int end)
    {
        Span<(int Off, int Len)> best = stackalloc (int, int)[3];
        best.Clear();
        int pos = _hdr;
        while (pos < end)
        {
            if (IsUnused(b, pos))
            {
                int len = U16(b, pos + 2);
                if (len < 8 || pos + len > end) throw new InvalidOperationException($"directory {_dir.Number}: free region at {pos} of length {len}");
                // Insert in descending order; an equal length goes after the ones already there.
                for (int i = 0; i < 3; i++)
                {
                    if (len > best[i].Len)
                    {
                        for (int j = 2; j > i; j--) best[j] = best[j - 1];
                        best[i] = (pos, len);
                        break;
                    }
                }
                pos += len;
            }
            else
            {
                int size = EntSize(b[pos + 8]);
                pos += size;
            }
        }
        for (int i = 0; i < 3; i++)
        {
            SetU16(b, _bestFreeOffset + i * 4, best[i].Off);
            SetU16(b, _bestFreeOffset + i * 4 + 2, best[i].Len);
        }
    }

    private (int Off, int Len) BestFree(byte[] b, int i) => (U16(b, _bestFreeOffset + i * 4), U16(b, _bestFreeOffset + i * 4 + 2));

    private (int Count, int Stale) Tail(byte[] b) =>
        ((int)BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(_blk - 8)), (int)BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(_blk - 4)));

    private void SetTail(byte[] b, int count, int stale)
    {
        BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(_blk - 8), (uint)count);
        BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(_blk - 4), (uint)stale);
    }

    private static List<(uint Hash, uint Address)> ReadEntries(byte[] b, int start, int count)
    {
        var list = new List<(uint, uint)>(count + 1);
        for (int i = 0; i < count; i++)
            list.Add((BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(start + i * 8)), BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(start + i * 8 + 4))));
        return list;
    }

    private static void WriteEntries(byte[] b, int start, List<(uint Hash, uint Address)> ents)
    {
        for (int i = 0; i < ents.Count; i++)
        {
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(start + i * 8), ents[i].Hash);
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(start + i * 8 + 4), ents[i].Address);
        }
    }

    private static uint EntHash(byte[] b, int start, int i) => BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(start + i * 8));
    private static uint EntAddress(byte[] b, int start, int i) => BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(start + i * 8 + 4));

    /// <summary>The first of <paramref name="count"/> hash entries at <paramref name="start"/> of a block whose hash is at least <paramref name="hash"/>.</summary>
    private static int FirstAtOrAbove(byte[] b, int start, int count, uint hash)
    {
        int lo = 0, hi = count;
        while (lo < hi)
        {
            int mid = (lo + hi) >> 1;
            if (EntHash(b, start, mid) < hash) lo = mid + 1; else hi = mid;
        }
        return lo;
    }

    private static int FirstAtOrAbove(List<(uint Hash, uint Address)> ents, uint hash)
    {
        int lo = 0, hi = ents.Count;
        while (lo < hi)
        {
            int mid = (lo + hi) >> 1;
            if (ents[mid].Hash < hash) lo = mid + 1; else hi = mid;
        }
        return lo;
    }

    /// <summary>
    /// Inserts a hash entry into a sorted array that has stale entries, taking the stale entry nearest the insertion
    /// point (the lower one on a tie), as xfs_dir3_leaf_find_entry and the block form do.
    /// </summary>
    private static void InsertReusingStale(List<(uint Hash, uint Address)> ents, uint hash, uint address)
    {
        int mid = FirstAtOrAbove(ents, hash) - 1;
        int low = mid;
        while (low >= 0 && ents[low].Address != 0) low--;
        int high = mid + 1;
        while (high < ents.Count && ents[high].Address != 0) high++;
        int take = low >= 0 && (high == ents.Count || mid - low <= high - mid) ? low : high;
        if (take >= ents.Count) throw new InvalidOperationException("no stale hash entry to reuse");
        ents.RemoveAt(take);
        ents.Insert(FirstAtOrAbove(ents, hash), (hash, address));
    }

    // ================================================================ block access

    private long ByteOffsetOf(ulong fileBlock)
    {
        long at = _space.Map(_dir, fileBlock);
        if (at < 0) throw _tx.Mount.Corrupt($"directory inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"directory block at file block {fileBlock} is not mapped");
        return at;
    }

    private byte[] ReadBlock(ulong fileBlock, BufType type)
    {
        long at = ByteOffsetOf(fileBlock);
        var verifier = new DirectoryAnyBlockVerifier(_sb, _dir.Number);
        var buffer = _tx.Read(at, _blk, _dir.Number, verifier, WriteVerifier, type);
        // The published bytes are the block as it was before this transaction (they change only when it commits).
        if (!_joined.ContainsKey(at)) _joined[at] = new Joined(buffer, buffer.Published!.Data);
        return buffer.Contents;
    }

    /// <summary>Allocates the directory block at <paramref name="fileBlock"/> and starts it as an empty data block (xfs_dir3_data_init) or block-form block.</summary>
    private byte[] NewDataBlock(ulong fileBlock, bool block, out long byteOffset)
    {
        byteOffset = _space.Allocate(_tx, _dir, fileBlock, _fsbPer);
        var buffer = _tx.GetNew(byteOffset, _blk, new DirectoryAnyBlockVerifier(_sb, _dir.Number).Kind, _dir.Number,
            WriteVerifier, block ? BufType.DirBlock : BufType.DirData);
        _joined[byteOffset] = new Joined(buffer, null, block ? NewBlockLogging.BlockForm : NewBlockLogging.NonZero);
        var b = buffer.Contents;
        uint magic = _v5 ? (block ? DirectoryDataBlock.BlockMagicV5 : DirectoryDataBlock.DataMagicV5)
            : (block ? DirectoryDataBlock.BlockMagicV4 : DirectoryDataBlock.DataMagicV4);
        BinaryPrimitives.WriteUInt32BigEndian(b, magic);
        if (_v5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(DirectoryDataBlock.OffBlkno), (ulong)(byteOffset >> 9));
            _uuid.CopyTo(b, DirectoryDataBlock.OffUuid);
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(DirectoryDataBlock.OffOwner), _dir.Number);
        }
        PutUnused(b, _hdr, _blk - _hdr);
        FreeScan(b, _blk);
        // xfs_dir2_grow_inode: the data space's size reaches the end of the new block.
        ulong end = (fileBlock + (ulong)_fsbPer) << _sb.BlockLog;
        if (fileBlock < _leafFsb && end > _dir.Size) _dir.Size = end;
        return b;
    }

    private void SetDataMagic(byte[] b, bool block)
    {
        uint magic = _v5 ? (block ? DirectoryDataBlock.BlockMagicV5 : DirectoryDataBlock.DataMagicV5)
            : (block ? DirectoryDataBlock.BlockMagicV4 : DirectoryDataBlock.DataMagicV4);
        BinaryPrimitives.WriteUInt32BigEndian(b, magic);
    }

    /// <summary>Unmaps and frees a directory block; for data blocks, the size drops to the end of the last one left (xfs_dir2_shrink_inode).</summary>
    private void FreeBlock(ulong fileBlock)
    {
        long at = ByteOffsetOf(fileBlock);
        _tx.Invalidate(at, _blk);
        _joined.Remove(at);
        _space.Free(_tx, _dir, fileBlock, _fsbPer);
        if (fileBlock >= _leafFsb) return;
        if (_dir.Size > (fileBlock + (ulong)_fsbPer) << _sb.BlockLog) return;
        _dir.Size = _space.LastBefore(_dir, fileBlock) << _sb.BlockLog;
    }

    /// <summary>
    /// Logs what the joined blocks changed: new blocks whole, others by the 128-byte chunks that differ from the block
    /// before this transaction (chunks an earlier operation of the editor changed are logged again, which is harmless).
    /// </summary>
    private void LogChanges()
    {
        const int chunk = MetadataBuffer.DirtyChunkSize;
        Span<bool> chunks = stackalloc bool[_blk / chunk];
        foreach (var (_, j) in _joined)
        {
            var now = j.Buffer.Contents;
            // The bytes before the change must be another array than the change's own (a copy made after an earlier part
            // of the transaction committed would diff against itself and log nothing).
            if (ReferenceEquals(now, j.Before))
                throw new InvalidOperationException($"directory block at byte {j.Buffer.Offset} of inode {_dir.Number}: the change's copy is the block it started from");
            var logging = LoggingOf(now, j.Logging);
            if (j.Before is null)
            {
                LogNew(j, now, logging);
                continue;
            }
            // Past a hash-tree or free-index block's last non-zero byte nothing is read: what a change zeroed there
            // (entries moved out by a split) need not be logged, as the kernel logs only the entries it keeps.
            int end = logging == NewBlockLogging.Prefix ? (UsedLength(now) + chunk - 1) / chunk : now.Length / chunk;
            int alwaysFrom = AlwaysLoggedChunk(now, logging);
            var changed = chunks[..end];
            for (int c = 0; c < end; c++)
                changed[c] = !now.AsSpan(c * chunk, chunk).SequenceEqual(j.Before.AsSpan(c * chunk, chunk)) &&
                             (c >= alwaysFrom || now.AsSpan(c * chunk, chunk).IndexOfAnyExcept((byte)0) >= 0);
            LogChunkRuns(j.Buffer, changed);
        }
    }

    /// <summary>Logs the 128-byte chunks of <paramref name="buffer"/> marked in <paramref name="logged"/>, neighbours as one range.</summary>
    private void LogChunkRuns(MetadataBuffer buffer, ReadOnlySpan<bool> logged)
    {
        const int chunk = MetadataBuffer.DirtyChunkSize;
        int runStart = -1;
        for (int c = 0; c <= logged.Length; c++)
        {
            bool log = c < logged.Length && logged[c];
            if (log && runStart < 0) runStart = c;
            else if (!log && runStart >= 0)
            {
                _tx.LogRange(buffer, runStart * chunk, c * chunk - 1);
                runStart = -1;
            }
        }
    }

    /// <summary>How a block's bytes are logged, from what it is now (its magic): see <see cref="NewBlockLogging"/>.</summary>
    private NewBlockLogging LoggingOf(byte[] b, NewBlockLogging asCreated)
    {
        uint magic32 = BinaryPrimitives.ReadUInt32BigEndian(b);
        if (magic32 is DirectoryDataBlock.DataMagicV5 or DirectoryDataBlock.DataMagicV4) return NewBlockLogging.NonZero;
        if (magic32 == FreeMagic) return NewBlockLogging.Prefix;
        ushort magic16 = U16(b, DaBlockInfoView.OffMagic);
        if (magic16 == LeafNMagic || magic16 == NodeMagic) return NewBlockLogging.Prefix;
        return magic32 is DirectoryDataBlock.BlockMagicV5 or DirectoryDataBlock.BlockMagicV4 ? NewBlockLogging.BlockForm : asCreated;
    }

    /// <summary>
    /// The first 128-byte chunk from which every changed chunk is logged, zero or not: 0 but for data areas, whose zero
    /// chunks are free space no one reads (<see cref="NewBlockLogging.NonZero"/>, <see cref="NewBlockLogging.BlockForm"/>).
    /// </summary>
    private static int AlwaysLoggedChunk(byte[] b, NewBlockLogging logging)
    {
        const int chunk = MetadataBuffer.DirtyChunkSize;
        switch (logging)
        {
            case NewBlockLogging.NonZero:
                return int.MaxValue;
            case NewBlockLogging.BlockForm:
                // The tail (count, stale) ends the block; the hash array of count entries ends at the tail.
                long count = BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(b.Length - 8));
                long hashStart = Math.Clamp(b.Length - 8 - 8 * count, 0, b.Length - 8);
                return (int)(hashStart / chunk);
            default:
                return 0;
        }
    }

    /// <summary>
    /// The bytes a hash-tree or free-index block uses from its start: the header and its entries (leafN, node) or its
    /// valid bests (free index); the rest is never read.
    /// </summary>
    private int UsedLength(byte[] b)
    {
        int used = BinaryPrimitives.ReadUInt32BigEndian(b) == FreeMagic
            ? _freeHdr + 2 * (int)BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(FreeFields + 4))
            : _leafHdr + 8 * DaCount(b);
        return Math.Clamp(used, 1, b.Length);
    }

    private void LogNew(Joined j, byte[] now, NewBlockLogging logging)
    {
        const int chunk = MetadataBuffer.DirtyChunkSize;
        switch (logging)
        {
            case NewBlockLogging.Prefix:
                _tx.LogRange(j.Buffer, 0, UsedLength(now) - 1);
                return;
            case NewBlockLogging.NonZero:
            case NewBlockLogging.BlockForm:
                int alwaysFrom = AlwaysLoggedChunk(now, logging);
                Span<bool> needed = stackalloc bool[now.Length / chunk];
                for (int c = 0; c < needed.Length; c++)
                    needed[c] = c >= alwaysFrom || now.AsSpan(c * chunk, chunk).IndexOfAnyExcept((byte)0) >= 0;
                LogChunkRuns(j.Buffer, needed);
                return;
            default:
                _tx.LogRange(j.Buffer, 0, now.Length - 1);
                return;
        }
    }

    private XfsException NotFound(ReadOnlySpan<byte> name) => new(XfsError.NotFound, $"directory {_dir.Number} has no entry \"{Show(name)}\"");

    // ================================================================ lookup in block and leaf form

    private readonly record struct Hit(byte[] Block, int Offset, ulong FileBlock, int HashIndex);

    private Hit? FindEntry(DirectoryForm form, ReadOnlySpan<byte> name)
    {
        if (form == DirectoryForm.Node) return NodeLookup(Hash(name), name)?.Hit;
        uint hash = Hash(name);
        byte[] hashBlock;
        int start, n;
        byte[]? block = null;
        if (form == DirectoryForm.Block)
        {
            hashBlock = block = ReadBlock(0, BufType.DirBlock);
            (n, _) = Tail(block);
            start = _blk - 8 - n * 8;
        }
        else
        {
            hashBlock = ReadBlock(_leafFsb, BufType.DirLeaf1);
            n = LeafCount(hashBlock);
            start = _leafHdr;
        }
        for (int i = FirstAtOrAbove(hashBlock, start, n, hash); i < n && EntHash(hashBlock, start, i) == hash; i++)
        {
            uint address = EntAddress(hashBlock, start, i);
            if (address == 0) continue;
            long byteAddress = (long)address << 3;
            ulong fileBlock = (ulong)(byteAddress / _blk) * (ulong)_fsbPer;
            int off = (int)(byteAddress % _blk);
            var data = form == DirectoryForm.Block ? block! : ReadBlock(fileBlock, BufType.DirData);
            if (off < _hdr || off + 12 > _blk) throw _tx.Mount.Corrupt($"directory hash entry of inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"address {address} outside its block");
            int len = data[off + 8];
            if (data.AsSpan(off + 9, len).SequenceEqual(name)) return new Hit(data, off, fileBlock, i);
        }
        return null;
    }

    private ulong DataReplace(DirectoryForm form, ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        var hit = FindEntry(form, name) ?? throw NotFound(name);
        ulong old = BinaryPrimitives.ReadUInt64BigEndian(hit.Block.AsSpan(hit.Offset));
        BinaryPrimitives.WriteUInt64BigEndian(hit.Block.AsSpan(hit.Offset), ino);
        if (_ftype) hit.Block[hit.Offset + 9 + hit.Block[hit.Offset + 8]] = (byte)type;
        return old;
    }

    // ================================================================ block form

    private void BlockAdd(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        var b = ReadBlock(0, BufType.DirBlock);
        var (count, stale) = Tail(b);
        int leafStart = _blk - 8 - count * 8;
        int len = EntSize(name.Length);
        var bf0 = BestFree(b, 0);
        int dup = -1, endDup = -1;
        bool compact = false;
        // xfs_dir2_block_need_space.
        if (stale > 0)
        {
            if (bf0.Len >= len) dup = bf0.Off;
            else
            {
                compact = true;
                int before = U16(b, leafStart - 2);
                if (IsUnused(b, before)) { if (U16(b, before + 2) + (stale - 1) * 8 >= len) dup = before; }
                else if ((stale - 1) * 8 >= len) dup = leafStart;
            }
        }
        else
        {
            int before = U16(b, leafStart - 2);
            if (IsUnused(b, before))
            {
                endDup = before;
                if (bf0.Off != endDup) dup = bf0.Len >= len ? bf0.Off : -1;
                else if (bf0.Len >= len + 8) dup = bf0.Off;
                else
                {
                    var bf1 = BestFree(b, 1);
                    dup = bf1.Len >= len ? bf1.Off : -1;
                }
            }
        }
        if (dup < 0)
        {
            BlockToLeaf(b);
            LeafAdd(name, ino, type);
            return;
        }
        uint hash = Hash(name);
        if (!compact && stale == 0)
        {
            // No stale entry: the array grows down by one slot into the free space before it, the entries below the
            // insertion point move down with it, and the new one goes in the gap (no list of the entries is made).
            int index = FirstAtOrAbove(b, leafStart, count, hash);
            UseFree(b, endDup, leafStart - 8, 8);
            b.AsSpan(leafStart, index * 8).CopyTo(b.AsSpan(leafStart - 8));
            leafStart -= 8;
            count++;
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(leafStart + index * 8), hash);
            BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(leafStart + index * 8 + 4), (uint)(dup >> 3));
            SetTail(b, count, stale);
            UseFree(b, dup, dup, len);
            PutEntry(b, dup, name, ino, (byte)type);
            FreeScan(b, leafStart);
            return;
        }
        var ents = ReadEntries(b, leafStart, count);
        if (compact)
        {
            // Drop every stale entry but the last one; their room joins the free space before the array.
            int keep = ents.FindLastIndex(e => e.Address == 0);
            var kept = new List<(uint, uint)>(count);
            for (int i = 0; i < ents.Count; i++)
                if (ents[i].Address != 0 || i == keep) kept.Add(ents[i]);
            int freed = (stale - 1) * 8;
            ents = kept;
            count -= stale - 1;
            stale = 1;
            leafStart += freed;
            WriteEntries(b, leafStart, ents);
            MakeFree(b, leafStart - freed, freed, leafStart);
        }
        if (stale == 0)
        {
            UseFree(b, endDup, leafStart - 8, 8);
            leafStart -= 8;
            count++;
            ents.Insert(FirstAtOrAbove(ents, hash), (hash, (uint)(dup >> 3)));
        }
        else
        {
            InsertReusingStale(ents, hash, (uint)(dup >> 3));
            stale--;
        }
        WriteEntries(b, leafStart, ents);
        SetTail(b, count, stale);
        UseFree(b, dup, dup, len);
        PutEntry(b, dup, name, ino, (byte)type);
        FreeScan(b, leafStart);
    }

    private ulong BlockRemove(ReadOnlySpan<byte> name)
    {
        var hit = FindEntry(DirectoryForm.Block, name) ?? throw NotFound(name);
        var b = hit.Block;
        var (count, stale) = Tail(b);
        int leafStart = _blk - 8 - count * 8;
        ulong ino = BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(hit.Offset));
        MakeFree(b, hit.Offset, EntSize(b[hit.Offset + 8]), leafStart);
        BinaryPrimitives.WriteUInt32BigEndian(b.AsSpan(leafStart + hit.HashIndex * 8 + 4), 0);
        SetTail(b, count, stale + 1);
        FreeScan(b, leafStart);
        TryBlockToShortform(b);
        return ino;
    }

    /// <summary>xfs_dir2_block_sfsize then xfs_dir2_block_to_sf: when every entry fits the inode's data fork.</summary>
    private void TryBlockToShortform(byte[] b)
    {
        var (count, _) = Tail(b);
        int end = _blk - 8 - count * 8;
        ulong parent = 0;
        var entries = new List<SfEntry>();
        for (int pos = _hdr; pos < end;)
        {
            if (IsUnused(b, pos)) { pos += U16(b, pos + 2); continue; }
            int len = b[pos + 8];
            var name = b.AsSpan(pos + 9, len);
            ulong ino = BinaryPrimitives.ReadUInt64BigEndian(b.AsSpan(pos));
            if (name.SequenceEqual(".."u8)) parent = ino;
            else if (!name.SequenceEqual("."u8)) entries.Add(new SfEntry(name.ToArray(), pos, ino, _ftype ? b[pos + 9 + len] : (byte)0));
            pos += EntSize(len);
        }
        var sf = new Shortform(parent, entries);
        if (SfSize(sf) > _dir.DataForkSize) return;
        FreeBlock(0);
        WriteShortform(sf);
    }

    /// <summary>xfs_dir2_block_to_leaf: the hash array moves to a new leaf block; the block becomes data block 0.</summary>
    private void BlockToLeaf(byte[] b)
    {
        var (count, stale) = Tail(b);
        int leafStart = _blk - 8 - count * 8;
        var ents = ReadEntries(b, leafStart, count);
        ulong leafFb = _space.FirstUnused(_dir, _leafFsb, _fsbPer);
        var leaf = NewLeafBlock(leafFb);
        MakeFree(b, leafStart, _blk - leafStart, _blk);
        SetDataMagic(b, block: false);
        ReadBlock(0, BufType.DirData);
        FreeScan(b, _blk);
        WriteLeaf(leaf, ents, stale, [(ushort)BestFree(b, 0).Len]);
    }

    // ================================================================ leaf form

    private int LeafCount(byte[] leaf) => U16(leaf, _v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4);
    private int LeafStale(byte[] leaf) => U16(leaf, (_v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4) + 2);

    private List<ushort> ReadBests(byte[] leaf)
    {
        int n = (int)BinaryPrimitives.ReadUInt32BigEndian(leaf.AsSpan(_blk - 4));
        int start = _blk - 4 - n * 2;
        if (n < 0 || start < _leafHdr) throw _tx.Mount.Corrupt($"directory leaf block of inode {_dir.Number}", _sb.InodeToByte(_dir.Number), $"best-free count {n} does not fit the block");
        var list = new List<ushort>(n + 1);
        for (int i = 0; i < n; i++) list.Add(U16(leaf, start + i * 2));
        return list;
    }

    private void WriteLeaf(byte[] leaf, List<(uint Hash, uint Address)> ents, int stale, List<ushort> bests)
    {
        CheckLeafRoom(ents.Count, bests.Count);
        WriteEntries(leaf, _leafHdr, ents);
        WriteLeafCountsAndBests(leaf, ents.Count, stale, bests);
    }

    /// <summary>Refuses a leaf1 layout whose hash entries would run into its best-free table (our bug, not the disk's).</summary>
    private void CheckLeafRoom(int entries, int bests)
    {
        if (_leafHdr + entries * 8 > _blk - 4 - bests * 2) throw new InvalidOperationException($"directory {_dir.Number}: leaf entries run into the best-free table");
    }

    /// <summary>A leaf1 block's entry and stale counts, and its best-free table with its count (the entries written already).</summary>
    private void WriteLeafCountsAndBests(byte[] leaf, int count, int stale, List<ushort> bests)
    {
        int infoSize = _v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4;
        SetU16(leaf, infoSize, count);
        SetU16(leaf, infoSize + 2, stale);
        BinaryPrimitives.WriteUInt32BigEndian(leaf.AsSpan(_blk - 4), (uint)bests.Count);
        for (int i = 0; i < bests.Count; i++) SetU16(leaf, _blk - 4 - (bests.Count - i) * 2, bests[i]);
    }

    private byte[] NewLeafBlock(ulong fileBlock) =>
        NewDaBlock(fileBlock, _v5 ? DaBlockInfoView.Dir3Leaf1V5 : DaBlockInfoView.Dir2Leaf1V4, BufType.DirLeaf1);

    /// <summary>Allocates a hash-tree block (leaf1, leafN or da node) at <paramref name="fileBlock"/> with an empty header.</summary>
    private byte[] NewDaBlock(ulong fileBlock, ushort magic, BufType type)
    {
        long at = _space.Allocate(_tx, _dir, fileBlock, _fsbPer);
        var buffer = _tx.GetNew(at, _blk, new DirectoryAnyBlockVerifier(_sb, _dir.Number).Kind, _dir.Number,
            WriteVerifier, type);
        _joined[at] = new Joined(buffer, null, NewBlockLogging.Prefix);
        var b = buffer.Contents;
        SetU16(b, DaBlockInfoView.OffMagic, magic);
        if (_v5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(DaBlockInfoView.OffBlkno), (ulong)(at >> 9));
            _uuid.CopyTo(b, DaBlockInfoView.OffUuid);
            BinaryPrimitives.WriteUInt64BigEndian(b.AsSpan(DaBlockInfoView.OffOwner), _dir.Number);
        }
        return b;
    }

    private void LeafAdd(ReadOnlySpan<byte> name, ulong ino, XfsFileType type)
    {
        var leaf = ReadBlock(_leafFsb, BufType.DirLeaf1);
        int count = LeafCount(leaf), stale = LeafStale(leaf);
        var bests = ReadBests(leaf);
        uint hash = Hash(name);
        int len = EntSize(name.Length);
        // A block already holding this hash, with room: same-hash entries stay together.
        int use = -1;
        for (int i = FirstAtOrAbove(leaf, _leafHdr, count, hash); i < count && EntHash(leaf, _leafHdr, i) == hash; i++)
        {
            uint entAddress = EntAddress(leaf, _leafHdr, i);
            if (entAddress == 0) continue;
            int db = (int)(((long)entAddress << 3) / _blk);
            if (db < bests.Count && bests[db] != NullDataOff && bests[db] >= len) { use = db; break; }
        }
        if (use == -1)
        {
            for (int i = 0; i < bests.Count; i++)
            {
                if (bests[i] == NullDataOff && use == -1) use = i;
                else if (bests[i] >= len) { use = i; break; }
            }
        }
        int needBytes = (stale == 0 ? 8 : 0) + (use == -1 ? 2 : 0);
        if (use != -1 && bests[use] == NullDataOff) use = -1;
        int room = (_blk - 4 - bests.Count * 2) - (_leafHdr + count * 8);
        bool compact = false;
        if (room < needBytes)
        {
            if (stale > 1) compact = true;
            else
            {
                // xfs_dir2_leaf_addname: no room for the hash entry (or the table's growth), nothing to compact.
                LeafToNode(leaf, bests);
                NodeAdd(name, ino, type);
                return;
            }
        }
        // The hash entries are read into a list only where stale ones are taken out or reused; otherwise the new entry
        // goes in place.
        var ents = stale == 0 ? null : ReadEntries(leaf, _leafHdr, count);
        if (compact)
        {
            // xfs_dir3_leaf_compact_x1 keeps one stale entry for the insert to take; dropping all and growing by one leaves the same counts.
            ents!.RemoveAll(e => e.Address == 0);
            stale = 0;
        }
        byte[] data;
        if (use == -1)
        {
            ulong fb = _space.FirstUnused(_dir, 0, _fsbPer);
            if (fb >= _leafFsb) throw new XfsException(XfsError.Unsupported, $"directory {_dir.Number}: its data space is full");
            use = (int)(fb / (ulong)_fsbPer);
            data = NewDataBlock(fb, block: false, out _);
            if (use >= bests.Count)
            {
                while (bests.Count < use) bests.Add(NullDataOff);
                bests.Add(0);
            }
        }
        else data = ReadBlock((ulong)use * (ulong)_fsbPer, BufType.DirData);
        int dup = BestFree(data, 0).Off;
        UseFree(data, dup, dup, len);
        PutEntry(data, dup, name, ino, (byte)type);
        FreeScan(data, _blk);
        bests[use] = (ushort)BestFree(data, 0).Len;
        uint address = (uint)((((long)use * _blk) + dup) >> 3);
        if (ents is null)
        {
            // No stale entry (xfs_dir3_leaf_find_entry's common case): the entries from the insertion point move up one
            // slot and the new one goes in the gap.
            CheckLeafRoom(count + 1, bests.Count);
            int at = _leafHdr + FirstAtOrAbove(leaf, _leafHdr, count, hash) * 8;
            leaf.AsSpan(at, _leafHdr + count * 8 - at).CopyTo(leaf.AsSpan(at + 8));
            BinaryPrimitives.WriteUInt32BigEndian(leaf.AsSpan(at), hash);
            BinaryPrimitives.WriteUInt32BigEndian(leaf.AsSpan(at + 4), address);
            WriteLeafCountsAndBests(leaf, count + 1, stale, bests);
            return;
        }
        if (stale == 0) ents.Insert(FirstAtOrAbove(ents, hash), (hash, address));
        else
        {
            InsertReusingStale(ents, hash, address);
            stale--;
        }
        WriteLeaf(leaf, ents, stale, bests);
    }

    private ulong LeafRemove(ReadOnlySpan<byte> name)
    {
        var hit = FindEntry(DirectoryForm.Leaf, name) ?? throw NotFound(name);
        var leaf = ReadBlock(_leafFsb, BufType.DirLeaf1);
        int count = LeafCount(leaf), stale = LeafStale(leaf);
        var ents = ReadEntries(leaf, _leafHdr, count);
        var bests = ReadBests(leaf);
        var data = hit.Block;
        int db = (int)(hit.FileBlock / (ulong)_fsbPer);
        ulong ino = BinaryPrimitives.ReadUInt64BigEndian(data.AsSpan(hit.Offset));
        if (db >= bests.Count || bests[db] != BestFree(data, 0).Len)
            throw _tx.Mount.Corrupt($"directory leaf block of inode {_dir.Number}", ByteOffsetOf(_leafFsb), $"best free of data block {db} disagrees with the block");
        MakeFree(data, hit.Offset, EntSize(data[hit.Offset + 8]), _blk);
        FreeScan(data, _blk);
        ents[hit.HashIndex] = (ents[hit.HashIndex].Hash, 0);
        stale++;
        bests[db] = (ushort)BestFree(data, 0).Len;
        if (bests[db] == _blk - _hdr)
        {
            // An empty data block is freed; at the end of the table, the table shrinks past the holes before it.
            FreeBlock(hit.FileBlock);
            if (db == bests.Count - 1)
            {
                int i = db - 1;
                while (i > 0 && bests[i] == NullDataOff) i--;
                bests.RemoveRange(i + 1, db - i);
            }
            else bests[db] = NullDataOff;
        }
        WriteLeaf(leaf, ents, stale, bests);
        LeafToBlock(leaf, ents, stale, bests);
        return ino;
    }

    /// <summary>xfs_dir2_leaf_to_block: when data block 0 is the only one and its last free region holds the live hash entries and the tail.</summary>
    private void LeafToBlock(byte[] leaf, List<(uint Hash, uint Address)> ents, int stale, List<ushort> bests)
    {
        while (_dir.Size > (ulong)_blk)
        {
            if (bests[^1] != _blk - _hdr) return;
            FreeBlock((ulong)(bests.Count - 1) * (ulong)_fsbPer);
            bests.RemoveAt(bests.Count - 1);
            WriteLeaf(leaf, ents, stale, bests);
        }
        var b = ReadBlock(0, BufType.DirData);
        int live = ents.Count - stale;
        int size = DirectoryDataBlock.BlockTailSize + live * 8;
        int last = U16(b, _blk - 2);
        if (!IsUnused(b, last) || U16(b, last + 2) < size) return;
        SetDataMagic(b, block: true);
        ReadBlock(0, BufType.DirBlock);
        UseFree(b, last, _blk - size, size);
        var kept = ents.Where(e => e.Address != 0).ToList();
        SetTail(b, kept.Count, 0);
        WriteEntries(b, _blk - size, kept);
        FreeScan(b, _blk - size);
        FreeBlock(_leafFsb);
        TryBlockToShortform(b);
    }
}

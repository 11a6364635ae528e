using System.Buffers.Binary;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Attributes;

/// <summary>
/// Sets and removes one inode's extended attributes inside a transaction, keeping the forms the kernel's
/// xfs_attr.c, xfs_attr_leaf.c, xfs_attr_remote.c and xfs_da_btree.c keep:
/// <list type="bullet">
/// <item>short-form in the inode's attribute fork while every entry is small (name and value under 255 bytes) and the
/// set fits the literal area; di_forkoff follows xfs_attr_shortform_bytesfit, and a new fork starts where
/// xfs_bmap_add_attrfork puts it (moving the data fork's extents into a btree when the data fork shrinks below them,
/// laying a btree root out again at the new size or moving it one level down into a block when it no longer fits);</item>
/// <item>a leaf block at attribute block 0 once short-form does not fit (the fork becomes extents), values of at
/// least three quarters of a block in remote blocks (one XARM header per block on V5) mapped at the first hole of
/// the attribute fork;</item>
/// <item>a da-btree (node blocks over a chain of leaves, the root at block 0) when one leaf cannot hold the set;</item>
/// <item>back down on removal: node to leaf when one leaf holds everything, leaf to short-form when every entry fits
/// it (xfs_attr_shortform_allfit), and the fork removed with its last attribute (kept as an empty short-form fork when
/// the data fork is a btree, as the kernel keeps it).</item>
/// </list>
/// A change that stays within one leaf rewrites that leaf in place and the hashes on its node path; one that overflows
/// or empties a leaf, or changes the form, lays the leaf and node blocks out again (hash-ordered, leaves filled in
/// order), keeping the remote value blocks of attributes that stay where they are. Freed blocks are invalidated so log recovery never replays
/// an older image over their next owner. The caller logs the inode.
/// </summary>
public sealed class AttributeEditor
{
    private const int MinDataBtreePointers = 3, MinAttrBtreePointers = 2;
    /// <summary>XFS_ATTR_SF_ENTSIZE_MAX: short-form names and values are shorter than this.</summary>
    private const int ShortformLimit = 255;
    private const int LeafVerifierKind = 30, RemoteVerifierKind = 31;

    private readonly Transaction _tx;
    private readonly InodeUpdate _inode;
    private readonly IFileSpace _space;
    private readonly Superblock _sb;
    private readonly int _bs;
    private readonly bool _v5;
    private readonly List<Entry> _entries = new();
    /// <summary>The leaves of a block-form fork in hash order, with the node path to each (root first).</summary>
    private readonly List<Leaf> _leaves = new();

    private sealed class Leaf
    {
        public ulong Dablk;
        public List<Entry> Entries = new();
        public List<(ulong Node, int Index)> Path = new();
    }

    private sealed class Entry
    {
        public byte Namespace;
        public byte[] Name = [];
        /// <summary>The value when it is known here (short-form, local leaf entries, a new value); null for a kept remote value.</summary>
        public byte[]? Value;
        public int ValueLength;
        /// <summary>First attribute-fork block of a kept remote value.</summary>
        public uint RemoteBlock;
        public uint Hash;
    }

    private readonly Action<InodeUpdate>? _moveLocalData;

    /// <param name="moveLocalData">
    /// Moves data kept in the inode (a short-form directory, a short symbolic link) into blocks when a new attribute
    /// fork leaves it no room (xfs_bmap_add_attrfork_local); null where the caller has no such inodes.
    /// </param>
    public AttributeEditor(Transaction tx, InodeUpdate inode, IFileSpace space, Action<InodeUpdate>? moveLocalData = null)
    {
        _moveLocalData = moveLocalData;
        _tx = tx;
        _inode = inode;
        _space = space;
        _sb = tx.Mount.Superblock;
        _bs = (int)_sb.BlockSize;
        _v5 = _sb.IsV5;
        Load();
    }

    private bool HasFork => _inode.ForkOffset != 0;
    private bool HasBlocks => HasFork && _inode.AttrFormat is ForkFormat.Extents or ForkFormat.Btree && _inode.AttrExtentCount > 0;

    private XfsCorruptionException Corrupt(string problem) => _tx.Mount.Corrupt($"attribute fork of inode {_inode.Number}", _inode.ByteOffset, problem);

    private static byte FlagsOf(XattrNamespace ns) => ns switch
    {
        XattrNamespace.Trusted => AttrFlags.Root,
        XattrNamespace.Secure => AttrFlags.Secure,
        XattrNamespace.Parent => AttrFlags.Parent,
        _ => 0,
    };

    private int IndexOf(byte ns, ReadOnlySpan<byte> name)
    {
        for (int i = 0; i < _entries.Count; i++)
            if (_entries[i].Namespace == ns && _entries[i].Name.AsSpan().SequenceEqual(name)) return i;
        return -1;
    }

    public bool Contains(XattrNamespace ns, ReadOnlySpan<byte> name) => IndexOf(FlagsOf(ns), name) >= 0;

    /// <summary>Sets (adds or replaces) an attribute; the caller checked the create/replace mode.</summary>
    public void Set(XattrNamespace ns, ReadOnlySpan<byte> name, ReadOnlySpan<byte> value)
    {
        byte flags = FlagsOf(ns);
        var entry = new Entry { Namespace = flags, Name = name.ToArray(), Value = value.ToArray(), ValueLength = value.Length, Hash = DaHash.Hash(name) };
        int i = IndexOf(flags, name);
        var old = i >= 0 ? _entries[i] : null;
        if (i >= 0) _entries[i] = entry;
        else _entries.Add(entry);
        // A replace in block form ends as the kernel's does, with the old entry's removal (xfs_attr_leaf_remove_attr):
        // a fork whose entries then all fit short-form goes back to short-form.
        if (HasBlocks && (old is null || !ShrinksOnRemoval()) && TryChangeOneLeaf(old, entry)) return;
        Write(removing: old is not null);
    }

    /// <summary>
    /// Adds parent pointer (<paramref name="name"/>, <paramref name="value"/>) (value: the xfs_parent_rec naming the
    /// parent), replacing an identical one: parent pointers are told apart by name and value together, and hashed with
    /// the parent (xfs_parent_hashval).
    /// </summary>
    public void SetParent(ReadOnlySpan<byte> name, ReadOnlySpan<byte> value)
    {
        var entry = new Entry { Namespace = AttrFlags.Parent, Name = name.ToArray(), Value = value.ToArray(), ValueLength = value.Length };
        entry.Hash = HashOf(entry);
        int i = IndexOfParent(name, value);
        var old = i >= 0 ? _entries[i] : null;
        if (i >= 0) _entries[i] = entry;
        else _entries.Add(entry);
        if (HasBlocks && TryChangeOneLeaf(old, entry)) return;
        Write(removing: false);
    }

    /// <summary>Removes parent pointer (<paramref name="name"/>, <paramref name="value"/>); false when there is none.</summary>
    public bool RemoveParent(ReadOnlySpan<byte> name, ReadOnlySpan<byte> value)
    {
        int i = IndexOfParent(name, value);
        if (i < 0) return false;
        var old = _entries[i];
        _entries.RemoveAt(i);
        if (HasBlocks && !ShrinksOnRemoval() && TryChangeOneLeaf(old, null)) return true;
        Write(removing: true);
        return true;
    }

    private int IndexOfParent(ReadOnlySpan<byte> name, ReadOnlySpan<byte> value)
    {
        for (int i = 0; i < _entries.Count; i++)
        {
            var e = _entries[i];
            if (e.Namespace == AttrFlags.Parent && e.Name.AsSpan().SequenceEqual(name) && e.Value is { } v && v.AsSpan().SequenceEqual(value)) return i;
        }
        return -1;
    }

    /// <summary>Removes an attribute; false when there is none of that name.</summary>
    public bool Remove(XattrNamespace ns, ReadOnlySpan<byte> name)
    {
        int i = IndexOf(FlagsOf(ns), name);
        if (i < 0) return false;
        var old = _entries[i];
        _entries.RemoveAt(i);
        if (HasBlocks && !ShrinksOnRemoval() && TryChangeOneLeaf(old, null)) return true;
        Write(removing: true);
        return true;
    }

    // ================================================================ reading the current fork

    private void Load()
    {
        if (!HasFork) return;
        switch (_inode.AttrFormat)
        {
            case ForkFormat.Local:
                LoadShortform();
                break;
            case ForkFormat.Extents or ForkFormat.Btree:
                if (_inode.AttrExtentCount == 0) return;
                var map = new ExtentMapEditor(_tx, _inode, _space, ForkKind.Attr);
                var seen = new HashSet<ulong>();
                LoadTree(map, 0, 0, seen, new List<(ulong, int)>());
                break;
            default:
                throw Corrupt($"attribute fork format {_inode.AttrFormat}");
        }
    }

    private void LoadShortform()
    {
        var fork = _inode.AttrFork;
        if (fork.Length < AttrShortformView.HeaderSize) throw Corrupt("short-form fork smaller than its header");
        int total = BinaryPrimitives.ReadUInt16BigEndian(fork);
        if (total > fork.Length || total < AttrShortformView.HeaderSize) throw Corrupt($"short-form total size {total} outside the fork ({fork.Length} bytes)");
        int off = AttrShortformView.HeaderSize;
        for (int i = 0; i < fork[2]; i++)
        {
            if (off + 3 > total || fork[off] == 0 || off + 3 + fork[off] + fork[off + 1] > total) throw Corrupt($"short-form entry {i} runs past the fork");
            int nameLen = fork[off], valueLen = fork[off + 1];
            var e = new Entry
            {
                Namespace = (byte)(fork[off + 2] & AttrFlags.NamespaceMask),
                Name = fork.Slice(off + 3, nameLen).ToArray(),
                Value = fork.Slice(off + 3 + nameLen, valueLen).ToArray(),
                ValueLength = valueLen,
            };
            e.Hash = HashOf(e);
            if ((fork[off + 2] & AttrFlags.Incomplete) == 0) _entries.Add(e);
            off += 3 + nameLen + valueLen;
        }
    }

    /// <summary>The entry's hash: the name's da hash, with a parent pointer's parent inode mixed in (xfs_parent_hashval).</summary>
    private static uint HashOf(Entry e)
    {
        uint h = DaHash.Hash(e.Name);
        if ((e.Namespace & AttrFlags.Parent) != 0 && e.Value is { Length: >= 8 })
        {
            ulong parent = BinaryPrimitives.ReadUInt64BigEndian(e.Value);
            h ^= (uint)(parent >> 32) ^ (uint)parent;
        }
        return h;
    }

    private byte[] ReadBlock(ExtentMapEditor map, ulong dablk)
    {
        if (!map.TryMap(dablk, out var ext)) throw Corrupt($"attribute block {dablk} is not mapped");
        long at = _sb.FsbToByte(ext.StartBlock + (dablk - ext.FileOffset));
        return ReadBuffer(at).Contents;
    }

    private Metadata.MetadataBuffer ReadBuffer(long at)
    {
        ushort leaf = _v5 ? DaBlockInfoView.AttrLeafV5 : DaBlockInfoView.AttrLeafV4;
        ushort node = _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4;
        var verifier = new DaTreeBlockVerifier(_sb, _inode.Number, leaf, node, node, "attribute leaf/node block", LeafVerifierKind);
        var buffer = _tx.Read(at, _bs, _inode.Number, verifier, new DaBlockWriteVerifier(_sb, _inode.Number), BufType.AttrLeaf);
        // The log item's buffer type tells recovery which verifier to run: a node must not go as a leaf.
        if (new DaBlockInfoView(buffer.Contents).Magic == node)
            buffer = _tx.Read(at, _bs, _inode.Number, verifier, new DaBlockWriteVerifier(_sb, _inode.Number), BufType.DaNode);
        return buffer;
    }

    private void LoadTree(ExtentMapEditor map, ulong dablk, int depth, HashSet<ulong> seen, List<(ulong Node, int Index)> path)
    {
        if (depth > 8 || !seen.Add(dablk)) throw Corrupt($"attribute block {dablk} is reached twice or too deep (a loop?)");
        var block = ReadBlock(map, dablk);
        ushort magic = new DaBlockInfoView(block).Magic;
        if (magic is DaBlockInfoView.DaNodeV5 or DaBlockInfoView.DaNodeV4)
        {
            var node = new DaNodeView(block, _v5);
            int count = node.Count;
            if (count == 0 || count > node.MaxEntries) throw Corrupt($"attribute node at block {dablk} has {count} entries");
            var children = new uint[count];
            for (int i = 0; i < count; i++) children[i] = node.Before(i);
            for (int i = 0; i < count; i++) LoadTree(map, children[i], depth + 1, seen, [.. path, (dablk, i)]);
            return;
        }
        var leafInfo = new Leaf { Dablk = dablk, Path = path };
        _leaves.Add(leafInfo);
        var leaf = new AttrLeafView(block, _v5);
        int n = leaf.Count;
        int hdr = leaf.HeaderSize;
        if (hdr + n * AttrLeafView.EntrySize > block.Length) throw Corrupt($"attribute leaf at block {dablk}: {n} entries do not fit");
        for (int i = 0; i < n; i++)
        {
            byte flags = leaf.Flags(i);
            int idx = leaf.NameIndex(i);
            bool local = (flags & AttrFlags.Local) != 0;
            if (idx < hdr + n * AttrLeafView.EntrySize || idx + (local ? 3 : 9) > block.Length) throw Corrupt($"attribute leaf at block {dablk}: entry {i} name index {idx} outside the name area");
            var e = new Entry { Namespace = (byte)(flags & AttrFlags.NamespaceMask), Hash = leaf.HashVal(i) };
            if (local)
            {
                int valueLen = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(idx));
                int nameLen = block[idx + 2];
                if (nameLen == 0 || idx + 3 + nameLen + valueLen > block.Length) throw Corrupt($"attribute leaf at block {dablk}: entry {i} runs past the block");
                e.Name = block.AsSpan(idx + 3, nameLen).ToArray();
                e.Value = block.AsSpan(idx + 3 + nameLen, valueLen).ToArray();
                e.ValueLength = valueLen;
            }
            else
            {
                e.RemoteBlock = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(idx));
                e.ValueLength = checked((int)BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(idx + 4)));
                int nameLen = block[idx + 8];
                if (nameLen == 0 || idx + 9 + nameLen > block.Length || e.ValueLength > AttributeReader.XattrMaxValueLength)
                    throw Corrupt($"attribute leaf at block {dablk}: remote entry {i} is malformed");
                e.Name = block.AsSpan(idx + 9, nameLen).ToArray();
            }
            // An incomplete entry is a set the kernel did not finish: it is dropped (its blocks are freed below).
            if ((flags & AttrFlags.Incomplete) == 0)
            {
                _entries.Add(e);
                leafInfo.Entries.Add(e);
            }
            else _incomplete = true;
        }
    }

    /// <summary>An incomplete entry was found: the next change lays the blocks out again (dropping it and its blocks).</summary>
    private bool _incomplete;

    // ================================================================ sizes and fork offsets

    private int RemoteHeader => _v5 ? RemoteBlockHeader.Size : 0;
    private int LeafHeader => _v5 ? 80 : 32;
    private int NodeHeader => _v5 ? 64 : 16;

    private static int ShortformEntrySize(Entry e) => AttrShortformView.EntryHeaderSize + e.Name.Length + e.ValueLength;

    private bool FitsShortformEntry(Entry e) => e.Value is not null && e.Name.Length < ShortformLimit && e.ValueLength < ShortformLimit;

    private int ShortformBytes() => AttrShortformView.HeaderSize + _entries.Sum(ShortformEntrySize);

    /// <summary>xfs_attr_leaf_newentsize: an entry stays local while its name area is under three quarters of a block.</summary>
    private bool IsLocal(Entry e) => LocalEntrySize(e.Name.Length, e.ValueLength) < _bs * 3 / 4;

    private static int LocalEntrySize(int nameLen, int valueLen) => (3 + nameLen + valueLen + 3) & ~3;
    /// <summary>
    /// xfs_attr_leaf_entsize_remote: sizeof(xfs_attr_leaf_name_remote) is 12 (valueblk, valuelen, namelen, a one-byte
    /// name array, padded to 4), less the one name byte, plus the name, rounded to 4. The fields themselves take 9 bytes.
    /// </summary>
    private static int RemoteEntrySize(int nameLen) => (11 + nameLen + 3) & ~3;

    /// <summary>An entry's name area: local while its value is held here and small enough; remote otherwise (as it is or will be written).</summary>
    private int LeafEntrySize(Entry e) => e.Value is not null && IsLocal(e) ? LocalEntrySize(e.Name.Length, e.ValueLength) : RemoteEntrySize(e.Name.Length);

    private int RemoteBlocks(int length) => Math.Max(1, (length + _bs - RemoteHeader - 1) / (_bs - RemoteHeader));

    /// <summary>The default attribute fork offset in bytes (xfs_default_attroffset).</summary>
    private int DefaultAttrOffset => DefaultForkOffsetBytes(_sb, _inode.LiteralSize);

    private static int DefaultForkOffsetBytes(Superblock sb, int literalSize) => sb.InodeSize == 256
        ? literalSize - ExtentMapEditor.RootSpace(MinAttrBtreePointers)
        : ExtentMapEditor.RootSpace(6 * MinAttrBtreePointers);

    /// <summary>
    /// di_forkoff (8-byte units) of the empty attribute fork a new inode gets when attributes follow at once, as on
    /// parent-pointer volumes (xfs_init_new_inode with XFS_ICREATE_INIT_XATTRS): xfs_default_attroffset, which for a
    /// device inode is right after its 4-byte device number, rounded to 8.
    /// </summary>
    public static byte DefaultForkOffset(Superblock sb, int literalSize, bool deviceInode) =>
        deviceInode ? (byte)1 : (byte)(DefaultForkOffsetBytes(sb, literalSize) >> 3);

    /// <summary>The data fork's extent btree root as the kernel sizes it in memory (a long-format block header and its records).</summary>
    private int DataBtreeRootSpace()
    {
        int header = _v5 ? BtreeBlockView.LongHeaderV5 : BtreeBlockView.LongHeaderV4;
        return header + new BmdrBlockView(_inode.DataFork).NumRecs * 16;
    }

    /// <summary>
    /// xfs_attr_shortform_bytesfit: the fork offset (8-byte units) that gives short-form attributes of
    /// <paramref name="bytes"/> room while the data fork keeps what it holds, or 0 when none does.
    /// </summary>
    private int BytesFit(int bytes)
    {
        int literal = _inode.LiteralSize;
        int offset = (literal - bytes) >> 3;
        int forkoff = _inode.ForkOffset;
        if (_inode.DataFormat == ForkFormat.Device) return offset >= 1 ? 1 : 0;
        int attrSize = forkoff != 0 ? literal - forkoff * 8 : 0;
        if (bytes <= attrSize) return forkoff;
        int dataSize;
        switch (_inode.DataFormat)
        {
            case ForkFormat.Local:
                dataSize = checked((int)_inode.Size);
                break;
            case ForkFormat.Extents:
                dataSize = checked((int)_inode.DataExtentCount) * BmbtRecord.Size;
                // With no attribute fork yet, extents past the default offset move into a btree: only its root must fit.
                if (forkoff == 0 && dataSize > DefaultAttrOffset) dataSize = ExtentMapEditor.RootSpace(MinDataBtreePointers);
                break;
            case ForkFormat.Btree:
                if (forkoff != 0) return offset < forkoff ? 0 : forkoff;
                dataSize = DataBtreeRootSpace();
                break;
            default:
                dataSize = 0;
                break;
        }
        int min = ((Math.Max(dataSize, ExtentMapEditor.RootSpace(MinDataBtreePointers)) + 7) & ~7) >> 3;
        int max = (literal - ExtentMapEditor.RootSpace(MinAttrBtreePointers)) >> 3;
        if (offset >= max) return max;
        if (offset >= min) return offset;
        return 0;
    }

    // ================================================================ writing the new set

    private void Write(bool removing)
    {
        bool canShort = _entries.All(FitsShortformEntry);
        int sfBytes = ShortformBytes();
        bool wasShort = !HasBlocks;
        bool keepEmptyFork = _sb.HasParentPointers || _inode.DataFormat == ForkFormat.Btree;

        if (_entries.Count == 0 && !keepEmptyFork)
        {
            FreeBlocks(keep: null);
            RemoveFork();
            return;
        }
        if (canShort && (wasShort || removing))
        {
            if (!HasFork) AddFork(sfBytes);
            int fit = BytesFit(sfBytes);
            if (fit != 0)
            {
                FreeBlocks(keep: null);
                WriteShortform(fit, sfBytes);
                return;
            }
        }
        if (!HasFork) AddEmptyFork(_entries[^1].Name.Length, _entries[^1].ValueLength);
        WriteBlocks(removing);
    }

    /// <summary>
    /// The empty fork xfs_attr_set adds (xfs_bmap_add_attrfork, in a transaction of its own) to an inode that has none
    /// before it looks the name up, placed for the entry the set would make: a replace of a name that is not there
    /// fails after it, leaving the fork. The entry is sized with xfs_attr_sf_entsize_byname, whose lengths are 8-bit:
    /// a value too long for short-form counts its length modulo 256 there, and the fork is placed accordingly.
    /// </summary>
    public void AddEmptyFork(int nameLength, int valueLength)
    {
        if (HasFork) return;
        AddFork(AttrShortformView.HeaderSize + AttrShortformView.EntryHeaderSize + nameLength + (byte)valueLength);
    }

    /// <summary>xfs_bmap_add_attrfork: places the new fork and moves the data fork's content where it no longer fits.</summary>
    private void AddFork(int size)
    {
        int forkoff;
        if (_inode.DataFormat == ForkFormat.Device) forkoff = 1;
        else
        {
            forkoff = BytesFit(size);
            if (forkoff == 0) forkoff = DefaultAttrOffset >> 3;
        }
        SetForkOffset(forkoff);
        _inode.AttrFormat = ForkFormat.Extents;
        _inode.AttrExtentCount = 0;
        _inode.AttrFork.Clear();
        _inode.Parts |= InodeLogParts.AttrFork;
    }

    /// <summary>Moves di_forkoff; the data fork's mapping is laid out again for its new size.</summary>
    private void SetForkOffset(int forkoff)
    {
        if (forkoff == _inode.ForkOffset) return;
        int newDataSize = forkoff == 0 ? _inode.LiteralSize : forkoff * 8;
        if (_inode.DataFormat == ForkFormat.Local && (long)_inode.Size > newDataSize && _moveLocalData is not null)
        {
            _moveLocalData(_inode);
            if (_inode.DataFormat == ForkFormat.Local) throw new InvalidOperationException($"inode {_inode.Number}: its local data stayed in the inode");
        }
        var oldData = _inode.DataFork.ToArray();
        if (_inode.DataFormat == ForkFormat.Local && (long)_inode.Size > newDataSize)
            throw new XfsException(XfsError.Unsupported,
                $"inode {_inode.Number} keeps {_inode.Size} bytes in its inode where the attribute fork must go, and this kind of inode cannot move them into a block; nothing was changed");
        // The mapping is read at the fork's old size, then written at the new one; the attribute fork's bytes are
        // rewritten by the caller, the literal area past the data fork's content is cleared.
        var data = _inode.DataFormat is ForkFormat.Extents or ForkFormat.Btree ? new ExtentMapEditor(_tx, _inode, _space, ForkKind.Data) : null;
        _inode.ForkOffset = (byte)forkoff;
        var literal = _inode.Image.AsSpan(_inode.CoreSize);
        if (data is not null)
        {
            if (oldData.Length < newDataSize) literal[oldData.Length..newDataSize].Clear();
            data.FitFork(oldData);
        }
        else if (_inode.DataFormat == ForkFormat.Local && oldData.Length > newDataSize)
        {
            literal[newDataSize..].Clear();
        }
        else if (oldData.Length < newDataSize)
        {
            literal[oldData.Length..newDataSize].Clear();
        }
        _inode.Parts |= InodeLogParts.DataFork | InodeLogParts.AttrFork;
    }

    /// <summary>xfs_attr_fork_remove: the inode loses its attribute fork; the data fork takes the whole literal area.</summary>
    private void RemoveFork()
    {
        if (!HasFork) return;
        _inode.AttrFork.Clear();
        _inode.AttrFormat = ForkFormat.Extents;
        _inode.AttrExtentCount = 0;
        SetForkOffset(0);
        _inode.Parts |= InodeLogParts.AttrFork | InodeLogParts.DataFork;
    }

    private void WriteShortform(int forkoff, int total)
    {
        SetForkOffset(forkoff);
        _inode.AttrFormat = ForkFormat.Local;
        _inode.AttrExtentCount = 0;
        var fork = _inode.AttrFork;
        if (total > fork.Length) throw new InvalidOperationException($"inode {_inode.Number}: {total} bytes of short-form attributes in a {fork.Length}-byte fork");
        fork.Clear();
        BinaryPrimitives.WriteUInt16BigEndian(fork, (ushort)total);
        fork[2] = (byte)_entries.Count;
        int off = AttrShortformView.HeaderSize;
        foreach (var e in _entries)
        {
            fork[off] = (byte)e.Name.Length;
            fork[off + 1] = (byte)e.ValueLength;
            fork[off + 2] = e.Namespace;
            e.Name.CopyTo(fork[(off + 3)..]);
            e.Value!.CopyTo(fork[(off + 3 + e.Name.Length)..]);
            off += ShortformEntrySize(e);
        }
        _inode.Parts |= InodeLogParts.AttrFork;
    }

    /// <summary>
    /// Unmaps and frees every attribute-fork block except the remote values of entries in <paramref name="keep"/>
    /// (each freed block is invalidated first).
    /// </summary>
    private void FreeBlocks(ICollection<Entry>? keep)
    {
        if (!HasBlocks) return;
        var map = new ExtentMapEditor(_tx, _inode, _space, ForkKind.Attr);
        var kept = new List<(ulong Start, ulong End)>();
        if (keep is not null)
            foreach (var e in keep)
                if (e.Value is null) kept.Add((e.RemoteBlock, e.RemoteBlock + (ulong)RemoteBlocks(e.ValueLength)));
        kept.Sort();
        var free = new List<(ulong Start, ulong Count)>();
        foreach (var ext in map.Extents)
        {
            ulong pos = ext.FileOffset;
            while (pos < ext.FileEnd)
            {
                var k = kept.FirstOrDefault(r => r.End > pos && r.Start < ext.FileEnd);
                if (k.End == 0 || k.Start > pos)
                {
                    ulong stop = k.End == 0 ? ext.FileEnd : Math.Min(ext.FileEnd, k.Start);
                    free.Add((pos, stop - pos));
                    pos = stop;
                }
                else pos = Math.Min(ext.FileEnd, k.End);
            }
        }
        foreach (var (start, count) in free)
        {
            for (ulong b = start; b < start + count; b++) InvalidateBlock(map, b);
            map.Unmap(start, count);
        }
        map.Save();
        if (_inode.AttrExtentCount == 0 && keep is null) _inode.AttrFormat = ForkFormat.Extents;
    }

    private void InvalidateBlock(ExtentMapEditor map, ulong dablk)
    {
        if (!map.TryMap(dablk, out var ext)) return;
        long at = _sb.FsbToByte(ext.StartBlock + (dablk - ext.FileOffset));
        _tx.Read(at, _bs, _inode.Number, new AnyAttrBlockVerifier(), null, BufType.AttrLeaf);
        _tx.Invalidate(at, _bs);
    }

    /// <summary>Accepts any bytes: a block about to be freed is read only so its buffer can be invalidated.</summary>
    private readonly struct AnyAttrBlockVerifier : IBufferVerifier
    {
        public int Kind => 32;
        public string Structure => "attribute block being freed";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => VerifyResult.Ok;
    }

    private void WriteBlocks(bool removing)
    {
        // The remote values that stay keep their blocks; every other attribute block is freed and the structure rebuilt.
        var keep = _entries.Where(e => e.Value is null).ToList();
        if (HasBlocks) FreeBlocks(keep);
        else
        {
            // Short-form to leaf: the fork becomes an (empty) extent list first, and its offset moves up to the default
            // unless the data fork is a device or a btree (xfs_bmap_local_to_extents_empty, xfs_bmap_forkoff_reset).
            _inode.AttrFork.Clear();
            _inode.AttrFormat = ForkFormat.Extents;
            _inode.AttrExtentCount = 0;
            if (_inode.DataFormat is not (ForkFormat.Device or ForkFormat.Btree) && DefaultAttrOffset >> 3 > _inode.ForkOffset)
            {
                SetForkOffset(DefaultAttrOffset >> 3);
                _inode.AttrFork.Clear();
            }
        }
        var map = new ExtentMapEditor(_tx, _inode, _space, ForkKind.Attr);
        foreach (var e in _entries)
            if (e.Value is not null && !IsLocal(e)) WriteRemote(map, e);

        var sorted = _entries.OrderBy(e => e.Hash).ToList();
        var leaves = PackLeaves(sorted);
        if (leaves.Count == 1)
        {
            ulong dablk = AllocateStructureBlock(map, 0);
            WriteLeaf(map, dablk, leaves[0], 0, 0);
        }
        else
        {
            WriteTree(map, leaves);
        }
        map.Save();
        _inode.Parts |= InodeLogParts.AttrFork;
    }

    /// <summary>Leaves in hash order, each filled while its entries and name areas fit the block.</summary>
    private List<List<Entry>> PackLeaves(List<Entry> sorted)
    {
        var leaves = new List<List<Entry>> { new() };
        int room = _bs - LeafHeader;
        foreach (var e in sorted)
        {
            int need = AttrLeafView.EntrySize + LeafEntrySize(e);
            if (need > room && leaves[^1].Count > 0)
            {
                leaves.Add(new());
                room = _bs - LeafHeader;
            }
            leaves[^1].Add(e);
            room -= need;
        }
        return leaves;
    }

    /// <summary>The first attribute block at or after <paramref name="from"/> starting a hole of <paramref name="count"/> blocks (xfs_bmap_first_unused).</summary>
    private static ulong FirstUnused(ExtentMapEditor map, ulong from, ulong count)
    {
        ulong candidate = from;
        foreach (var e in map.Extents)
        {
            if (e.FileEnd <= candidate) continue;
            if (e.FileOffset >= candidate + count) break;
            candidate = e.FileEnd;
        }
        return candidate;
    }

    private ulong AllocateStructureBlock(ExtentMapEditor map, ulong? at)
    {
        ulong dablk = at ?? FirstUnused(map, 1, 1);
        if (map.TryMap(dablk, out _)) throw new InvalidOperationException($"inode {_inode.Number}: attribute block {dablk} is mapped already");
        map.AllocateHoles(dablk, 1, unwritten: false);
        return dablk;
    }

    private long ByteOf(ExtentMapEditor map, ulong dablk)
    {
        if (!map.TryMap(dablk, out var ext)) throw new InvalidOperationException($"inode {_inode.Number}: attribute block {dablk} is not mapped");
        return _sb.FsbToByte(ext.StartBlock + (dablk - ext.FileOffset));
    }

    /// <summary>xfs_attr_rmtval_set: the value in blocks at the first hole that holds it, one header per block on V5.</summary>
    private void WriteRemote(ExtentMapEditor map, Entry e)
    {
        int blocks = RemoteBlocks(e.ValueLength);
        // Block 0 is the leaf's (or the node root's), even while it is unmapped here.
        ulong first = FirstUnused(map, 1, (ulong)blocks);
        map.AllocateHoles(first, (ulong)blocks, unwritten: false);
        int perBlock = _bs - RemoteHeader;
        var value = e.Value!;
        for (int k = 0; k < blocks; k++)
        {
            long at = ByteOf(map, first + (ulong)k);
            var buffer = _tx.GetNew(at, _bs, RemoteVerifierKind, _inode.Number, new RemoteValueWriteVerifier(_sb, _inode.Number), BufType.AttrRemote);
            var b = buffer.Contents.AsSpan();
            int done = k * perBlock;
            int bytes = Math.Min(perBlock, value.Length - done);
            if (_v5)
            {
                BinaryPrimitives.WriteUInt32BigEndian(b, RemoteBlockHeader.AttrMagic);
                BinaryPrimitives.WriteUInt32BigEndian(b[RemoteBlockHeader.OffOffset..], (uint)done);
                BinaryPrimitives.WriteUInt32BigEndian(b[RemoteBlockHeader.OffBytes..], (uint)bytes);
                _sb.MetaUuid.TryWriteBytes(b.Slice(RemoteBlockHeader.OffUuid, 16), bigEndian: true, out _);
                BinaryPrimitives.WriteUInt64BigEndian(b[RemoteBlockHeader.OffOwner..], _inode.Number);
                BinaryPrimitives.WriteUInt64BigEndian(b[RemoteBlockHeader.OffBlkno..], (ulong)(at >> 9));
                BinaryPrimitives.WriteUInt64BigEndian(b[RemoteBlockHeader.OffLsn..], ulong.MaxValue);
            }
            if (bytes > 0) value.AsSpan(done, bytes).CopyTo(b[RemoteHeader..]);
            _tx.LogRange(buffer, 0, _bs - 1);
        }
        e.RemoteBlock = checked((uint)first);
        e.Value = null;
    }

    /// <summary>
    /// Remote value blocks are written without a transactional LSN (NULLCOMMITLSN, as the kernel writes them
    /// synchronously); the CRC covers the block.
    /// </summary>
    private sealed class RemoteValueWriteVerifier(Superblock sb, ulong ino) : IBufferWriteVerifier
    {
        public string Structure => $"remote attribute value block of inode {ino}";

        public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
        {
            if (!sb.IsV5) return VerifyResult.Ok;
            BinaryPrimitives.WriteUInt64BigEndian(block[RemoteBlockHeader.OffLsn..], ulong.MaxValue);
            XfsCrc.Stamp(block, RemoteBlockHeader.OffCrc);
            return BinaryPrimitives.ReadUInt32BigEndian(block) == RemoteBlockHeader.AttrMagic ? VerifyResult.Ok : VerifyResult.Fail("bad magic", 0);
        }
    }

    /// <summary>The write verifier of attribute leaf and da-node blocks: LSN and CRC in the block info, then the read checks.</summary>
    private sealed class DaBlockWriteVerifier(Superblock sb, ulong ino) : IBufferWriteVerifier
    {
        public string Structure => $"attribute leaf/node block of inode {ino}";

        public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
        {
            if (!sb.IsV5) return VerifyResult.Ok;
            if (lsn != 0) BinaryPrimitives.WriteUInt64BigEndian(block[DaBlockInfoView.OffLsn..], lsn);
            XfsCrc.Stamp(block, DaBlockInfoView.OffCrc);
            ushort leaf = DaBlockInfoView.AttrLeafV5, node = DaBlockInfoView.DaNodeV5;
            return new DaTreeBlockVerifier(sb, ino, leaf, node, node, "attribute leaf/node block", LeafVerifierKind).Verify(block, byteOffset);
        }
    }

    private Span<byte> NewDaBlock(ExtentMapEditor map, ulong dablk, ushort magic, uint forw, uint back, out Metadata.MetadataBuffer buffer)
    {
        long at = ByteOf(map, dablk);
        buffer = _tx.GetNew(at, _bs, LeafVerifierKind, _inode.Number, new DaBlockWriteVerifier(_sb, _inode.Number), magic is DaBlockInfoView.AttrLeafV5 or DaBlockInfoView.AttrLeafV4 ? BufType.AttrLeaf : BufType.DaNode);
        var b = buffer.Contents.AsSpan();
        BinaryPrimitives.WriteUInt32BigEndian(b[DaBlockInfoView.OffForw..], forw);
        BinaryPrimitives.WriteUInt32BigEndian(b[DaBlockInfoView.OffBack..], back);
        BinaryPrimitives.WriteUInt16BigEndian(b[DaBlockInfoView.OffMagic..], magic);
        if (_v5)
        {
            BinaryPrimitives.WriteUInt64BigEndian(b[DaBlockInfoView.OffBlkno..], (ulong)(at >> 9));
            _sb.MetaUuid.TryWriteBytes(b.Slice(DaBlockInfoView.OffUuid, 16), bigEndian: true, out _);
            BinaryPrimitives.WriteUInt64BigEndian(b[DaBlockInfoView.OffOwner..], _inode.Number);
        }
        return b;
    }

    /// <summary>An attribute leaf (xfs_attr3_leafblock): entries sorted by hash, name areas packed down from the block's end.</summary>
    private void WriteLeaf(ExtentMapEditor map, ulong dablk, List<Entry> entries, uint forw, uint back)
    {
        var b = NewDaBlock(map, dablk, _v5 ? DaBlockInfoView.AttrLeafV5 : DaBlockInfoView.AttrLeafV4, forw, back, out var buffer);
        WriteLeafBody(b, entries);
        _tx.LogRange(buffer, 0, _bs - 1);
    }

    /// <summary>Everything of a leaf after its block info: the header, the hash-sorted entries, the name areas.</summary>
    private void WriteLeafBody(Span<byte> b, List<Entry> entries)
    {
        int h = _v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4;
        b[h..].Clear();
        int pos = _bs, used = 0;
        for (int i = 0; i < entries.Count; i++)
        {
            var e = entries[i];
            int size = LeafEntrySize(e);
            pos -= size;
            used += size;
            var name = b.Slice(pos, size);
            if (e.Value is not null)
            {
                BinaryPrimitives.WriteUInt16BigEndian(name, (ushort)e.ValueLength);
                name[2] = (byte)e.Name.Length;
                e.Name.CopyTo(name[3..]);
                e.Value.CopyTo(name[(3 + e.Name.Length)..]);
            }
            else
            {
                BinaryPrimitives.WriteUInt32BigEndian(name, e.RemoteBlock);
                BinaryPrimitives.WriteUInt32BigEndian(name[4..], (uint)e.ValueLength);
                name[8] = (byte)e.Name.Length;
                e.Name.CopyTo(name[9..]);
            }
            int at = LeafHeader + i * AttrLeafView.EntrySize;
            BinaryPrimitives.WriteUInt32BigEndian(b[at..], e.Hash);
            BinaryPrimitives.WriteUInt16BigEndian(b[(at + 4)..], (ushort)pos);
            b[at + 6] = (byte)(e.Namespace | (e.Value is not null ? AttrFlags.Local : 0));
        }
        int firstFree = LeafHeader + entries.Count * AttrLeafView.EntrySize;
        BinaryPrimitives.WriteUInt16BigEndian(b[h..], (ushort)entries.Count);
        BinaryPrimitives.WriteUInt16BigEndian(b[(h + 2)..], (ushort)used);
        // A leaf of 64 KiB with no names would record firstused 65536: XFS stores that as XFS_ATTR3_LEAF_NULLOFF (0).
        BinaryPrimitives.WriteUInt16BigEndian(b[(h + 4)..], (ushort)(pos == 65536 ? 0 : pos));
        b[h + 6] = 0; // holes
        BinaryPrimitives.WriteUInt16BigEndian(b[(h + 8)..], (ushort)firstFree);
        BinaryPrimitives.WriteUInt16BigEndian(b[(h + 10)..], (ushort)(pos - firstFree));
    }

    /// <summary>
    /// Whether a removal changes the fork's form: everything fits short-form (xfs_attr_shortform_allfit), nothing is
    /// left, or a node tree's entries fit one leaf (the kernel's node-to-leaf shrink).
    /// </summary>
    private bool ShrinksOnRemoval()
    {
        if (_entries.Count == 0) return true;
        if (_entries.All(FitsShortformEntry) && BytesFit(ShortformBytes()) != 0) return true;
        return _leaves.Count > 1 && PackLeaves(_entries.OrderBy(e => e.Hash).ToList()).Count == 1;
    }

    /// <summary>
    /// The common change in block form (xfs_attr3_leaf_add / xfs_attr3_leaf_remove without a split or join): the one
    /// leaf that holds <paramref name="old"/> (or where <paramref name="neu"/>'s hash goes) is written again in place,
    /// remote value blocks are freed or written, and the hashes on the node path follow the leaf's last hash. False
    /// when the leaf would overflow or empty (the caller lays the blocks out again).
    /// </summary>
    private bool TryChangeOneLeaf(Entry? old, Entry? neu)
    {
        if (_incomplete || _leaves.Count == 0) return false;
        Leaf? leaf = old is not null ? _leaves.FirstOrDefault(l => l.Entries.Contains(old)) : null;
        if (leaf is null && neu is not null)
            leaf = _leaves.FirstOrDefault(l => l.Entries.Count > 0 && l.Entries[^1].Hash >= neu.Hash) ?? _leaves[^1];
        if (leaf is null) return false;
        var list = leaf.Entries.Where(e => !ReferenceEquals(e, old)).ToList();
        if (neu is not null) list.Add(neu);
        list = list.OrderBy(e => e.Hash).ToList();
        if (list.Count == 0 || list.Sum(e => AttrLeafView.EntrySize + LeafEntrySize(e)) > _bs - LeafHeader) return false;

        var map = new ExtentMapEditor(_tx, _inode, _space, ForkKind.Attr);
        if (old is not null && old.Value is null)
        {
            ulong count = (ulong)RemoteBlocks(old.ValueLength);
            for (ulong k = 0; k < count; k++) InvalidateBlock(map, old.RemoteBlock + k);
            map.Unmap(old.RemoteBlock, count);
            map.Save();
        }
        if (neu is not null && !IsLocal(neu)) WriteRemote(map, neu);
        uint oldLast = leaf.Entries.Count > 0 ? leaf.Entries[^1].Hash : 0;
        var buffer = ReadBuffer(ByteOf(map, leaf.Dablk));
        WriteLeafBody(buffer.Contents, list);
        _tx.LogRange(buffer, 0, _bs - 1);
        leaf.Entries = list;
        uint newLast = list[^1].Hash;
        // A node entry carries its child's largest hash: it changes up the path while the child is the node's last.
        for (int k = leaf.Path.Count - 1; k >= 0 && newLast != oldLast; k--)
        {
            var (nodeBlk, index) = leaf.Path[k];
            var node = ReadBuffer(ByteOf(map, nodeBlk));
            int at = NodeHeader + index * 8;
            BinaryPrimitives.WriteUInt32BigEndian(node.Contents.AsSpan(at), newLast);
            _tx.LogRange(node, at, at + 3);
            if (index != new DaNodeView(node.Contents, _v5).Count - 1) break;
        }
        map.Save();
        _inode.Parts |= InodeLogParts.AttrFork;
        return true;
    }

    /// <summary>A da btree over the leaves: node levels until one root, which goes to attribute block 0.</summary>
    private void WriteTree(ExtentMapEditor map, List<List<Entry>> leaves)
    {
        // Block 0 is the root's; leaves and lower nodes take the first free blocks after it.
        map.AllocateHoles(0, 1, unwritten: false);
        var level = new List<(ulong Dablk, uint Hash)>();
        var leafBlocks = new List<ulong>();
        foreach (var leaf in leaves) leafBlocks.Add(AllocateStructureBlock(map, null));
        for (int i = 0; i < leaves.Count; i++)
        {
            uint forw = i + 1 < leaves.Count ? (uint)leafBlocks[i + 1] : 0;
            uint back = i > 0 ? (uint)leafBlocks[i - 1] : 0;
            WriteLeaf(map, leafBlocks[i], leaves[i], forw, back);
            level.Add((leafBlocks[i], leaves[i][^1].Hash));
        }
        int perNode = (_bs - NodeHeader) / 8;
        int height = 1;
        while (true)
        {
            int nodes = (level.Count + perNode - 1) / perNode;
            if (nodes == 1)
            {
                WriteNode(map, 0, level, height, 0, 0);
                return;
            }
            var blocks = new List<ulong>();
            for (int i = 0; i < nodes; i++) blocks.Add(AllocateStructureBlock(map, null));
            var next = new List<(ulong, uint)>();
            int per = (level.Count + nodes - 1) / nodes;
            for (int i = 0; i < nodes; i++)
            {
                var part = level.Skip(i * per).Take(per).ToList();
                uint forw = i + 1 < nodes ? (uint)blocks[i + 1] : 0;
                uint back = i > 0 ? (uint)blocks[i - 1] : 0;
                WriteNode(map, blocks[i], part, height, forw, back);
                next.Add((blocks[i], part[^1].Hash));
            }
            level = next;
            height++;
        }
    }

    private void WriteNode(ExtentMapEditor map, ulong dablk, List<(ulong Dablk, uint Hash)> children, int level, uint forw, uint back)
    {
        var b = NewDaBlock(map, dablk, _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4, forw, back, out var buffer);
        int h = _v5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4;
        BinaryPrimitives.WriteUInt16BigEndian(b[h..], (ushort)children.Count);
        BinaryPrimitives.WriteUInt16BigEndian(b[(h + 2)..], (ushort)level);
        for (int i = 0; i < children.Count; i++)
        {
            BinaryPrimitives.WriteUInt32BigEndian(b[(NodeHeader + i * 8)..], children[i].Hash);
            BinaryPrimitives.WriteUInt32BigEndian(b[(NodeHeader + i * 8 + 4)..], (uint)children[i].Dablk);
        }
        _tx.LogRange(buffer, 0, _bs - 1);
    }

    /// <summary>
    /// xfs_attr_inactive: frees every attribute block (leaves, nodes, remote values) and the fork itself, for an inode
    /// being freed.
    /// </summary>
    public void FreeAll()
    {
        FreeBlocks(keep: null);
        if (HasFork)
        {
            _inode.AttrFork.Clear();
            _inode.AttrFormat = ForkFormat.Extents;
            _inode.AttrExtentCount = 0;
        }
    }
}

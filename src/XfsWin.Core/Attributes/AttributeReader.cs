using System.Buffers.Binary;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Metadata;

namespace XfsWin.Attributes;

/// <summary>
/// Reads extended attributes in every form: short-form (in the inode's attribute fork), leaf (one
/// block), node (a hash B+tree of leaf blocks), with values stored locally or in remote blocks.
/// Lookups go by name hash; listing walks the leaf chain with loop protection.
/// </summary>
public sealed class AttributeReader
{
    private readonly MountContext _mount;
    private readonly Superblock _sb;
    private readonly bool _v5;
    private readonly int _blockSize;

    private readonly ExtentMapCache _maps;

    public AttributeReader(MountContext mount, ExtentMapCache maps)
    {
        _mount = mount;
        _maps = maps;
        _sb = mount.Superblock;
        _v5 = _sb.IsV5;
        _blockSize = (int)_sb.BlockSize;
    }

    /// <summary>
    /// For the volume check: blocks are read as xfs_repair reads them, without the checks it does not make (a remote
    /// value block's owner, value offset and byte count; the self-description of the blocks below the root of a node
    /// form), so that what the check counts is what xfs_repair -n counts. Magic numbers, CRCs, a remote block's UUID,
    /// address and byte bound stay checked.
    /// </summary>
    internal bool ReadAsXfsRepair { get; init; }

    /// <summary>XATTR_SIZE_MAX: the largest value Linux stores.</summary>
    public const int XattrMaxValueLength = 65536;

    private ushort LeafMagic => _v5 ? DaBlockInfoView.AttrLeafV5 : DaBlockInfoView.AttrLeafV4;
    private ushort NodeMagic => _v5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4;

    public static XattrNamespace NamespaceOf(byte flags) =>
        (flags & AttrFlags.Parent) != 0 ? XattrNamespace.Parent :
        (flags & AttrFlags.Root) != 0 ? XattrNamespace.Trusted :
        (flags & AttrFlags.Secure) != 0 ? XattrNamespace.Secure : XattrNamespace.User;

    private static byte FlagsOf(XattrNamespace ns) => ns switch
    {
        XattrNamespace.Trusted => AttrFlags.Root,
        XattrNamespace.Secure => AttrFlags.Secure,
        XattrNamespace.Parent => AttrFlags.Parent,
        _ => 0,
    };

    // ---------------------------------------------------------------- listing

    public List<XattrEntry> List(Inode inode, bool includeParentPointers)
    {
        var result = new List<XattrEntry>();
        if (!HasAttributes(inode)) return result;
        switch (inode.AttrFormat)
        {
            case ForkFormat.Local:
            {
                var fork = inode.AttrFork;
                int total = CheckShortform(inode);
                int off = AttrShortformView.HeaderSize;
                int count = fork[2];
                for (int i = 0; i < count; i++)
                {
                    int nameLen = fork[off], valueLen = fork[off + 1];
                    byte flags = fork[off + 2];
                    if ((flags & AttrFlags.Incomplete) == 0 && (includeParentPointers || (flags & AttrFlags.Parent) == 0))
                        result.Add(new XattrEntry(NamespaceOf(flags), fork.Slice(off + 3, nameLen).ToArray(), valueLen));
                    off += 3 + nameLen + valueLen;
                }
                _ = total;
                return result;
            }
            case ForkFormat.Extents or ForkFormat.Btree:
            {
                var map = _maps.Get(inode, ForkKind.Attr);
                var block = FirstLeaf(inode, map);
                ulong maxLeaves = Math.Max(inode.Nblocks, 1);
                for (ulong hops = 0; ; hops++)
                {
                    if (hops > maxLeaves) throw _mount.Corrupt($"attribute leaf chain of inode {inode.Number}", inode.ByteOffset, "more leaves than the inode owns blocks (a loop?)");
                    ListLeaf(inode, block, includeParentPointers, result);
                    uint forw = new DaBlockInfoView(block).Forw;
                    if (forw == 0) break;
                    block = ReadAttrBlock(inode, map, forw, LeafMagic, LeafMagic);
                }
                return result;
            }
            default:
                throw _mount.Corrupt($"inode {inode.Number}", inode.ByteOffset, $"attribute fork format {inode.AttrFormat}");
        }
    }

    private void ListLeaf(Inode inode, byte[] block, bool includeParent, List<XattrEntry> result)
    {
        var leaf = new AttrLeafView(block, _v5);
        int count = CheckLeafCount(inode, block);
        for (int i = 0; i < count; i++)
        {
            byte flags = leaf.Flags(i);
            if ((flags & AttrFlags.Incomplete) != 0) continue;
            if (!includeParent && (flags & AttrFlags.Parent) != 0) continue;
            var (nameOffset, nameLength, valueLength, _, _) = DecodeLeafEntry(inode, block, i);
            result.Add(new XattrEntry(NamespaceOf(flags), block.AsSpan(nameOffset, nameLength).ToArray(), valueLength));
        }
    }

    // ---------------------------------------------------------------- lookup

    public bool TryGet(Inode inode, XattrNamespace ns, ReadOnlySpan<byte> name, out byte[] value)
    {
        value = [];
        if (!HasAttributes(inode) || name.Length is 0 or > 255) return false;
        byte want = FlagsOf(ns);
        switch (inode.AttrFormat)
        {
            case ForkFormat.Local:
            {
                var fork = inode.AttrFork;
                CheckShortform(inode);
                int off = AttrShortformView.HeaderSize;
                for (int i = 0; i < fork[2]; i++)
                {
                    int nameLen = fork[off], valueLen = fork[off + 1];
                    byte flags = fork[off + 2];
                    if ((flags & AttrFlags.NamespaceMask) == want && (flags & AttrFlags.Incomplete) == 0 && fork.Slice(off + 3, nameLen).SequenceEqual(name))
                    {
                        value = fork.Slice(off + 3 + nameLen, valueLen).ToArray();
                        return true;
                    }
                    off += 3 + nameLen + valueLen;
                }
                return false;
            }
            case ForkFormat.Extents or ForkFormat.Btree when ns == XattrNamespace.Parent:
            {
                // Parent pointers are hashed with their parent's inode number mixed in (it is in the
                // value, not the name), so a name alone cannot be looked up by hash: scan the leaves.
                var map = _maps.Get(inode, ForkKind.Attr);
                var block = FirstLeaf(inode, map);
                for (ulong hops = 0; ; hops++)
                {
                    if (hops > Math.Max(inode.Nblocks, 1)) throw _mount.Corrupt($"attribute leaf chain of inode {inode.Number}", inode.ByteOffset, "more leaves than the inode owns blocks (a loop?)");
                    var leaf = new AttrLeafView(block, _v5);
                    int count = CheckLeafCount(inode, block);
                    for (int j = 0; j < count; j++)
                    {
                        byte flags = leaf.Flags(j);
                        if ((flags & AttrFlags.NamespaceMask) != want || (flags & AttrFlags.Incomplete) != 0) continue;
                        var (nameOffset, nameLength, valueLength, localValueOffset, remoteBlock) = DecodeLeafEntry(inode, block, j);
                        if (!block.AsSpan(nameOffset, nameLength).SequenceEqual(name)) continue;
                        value = localValueOffset >= 0 ? block.AsSpan(localValueOffset, valueLength).ToArray() : ReadRemoteValue(inode, map, remoteBlock, valueLength);
                        return true;
                    }
                    uint forw = new DaBlockInfoView(block).Forw;
                    if (forw == 0) return false;
                    block = ReadAttrBlock(inode, map, forw, LeafMagic, LeafMagic);
                }
            }
            case ForkFormat.Extents or ForkFormat.Btree:
            {
                var map = _maps.Get(inode, ForkKind.Attr);
                uint hash = DaHash.Hash(name);
                var block = ReadAttrBlock(inode, map, 0, LeafMagic, NodeMagic);
                for (int depth = 0; new DaBlockInfoView(block).Magic == NodeMagic; depth++)
                {
                    var node = new DaNodeView(block, _v5);
                    int count = node.Count;
                    if (count == 0 || count > node.MaxEntries || depth > 8)
                        throw _mount.Corrupt($"attribute node of inode {inode.Number}", inode.ByteOffset, "bad entry count or depth");
                    int i = 0;
                    while (i < count - 1 && node.HashVal(i) < hash) i++;
                    block = ReadAttrBlock(inode, map, node.Before(i), LeafMagic, NodeMagic);
                }
                for (int hops = 0; hops < 1024; hops++)
                {
                    var leaf = new AttrLeafView(block, _v5);
                    int count = CheckLeafCount(inode, block);
                    int lo = 0, hi = count;
                    while (lo < hi)
                    {
                        int mid = (lo + hi) >> 1;
                        if (leaf.HashVal(mid) < hash) lo = mid + 1; else hi = mid;
                    }
                    int j = lo;
                    for (; j < count && leaf.HashVal(j) == hash; j++)
                    {
                        byte flags = leaf.Flags(j);
                        if ((flags & AttrFlags.NamespaceMask) != want || (flags & AttrFlags.Incomplete) != 0) continue;
                        var (nameOffset, nameLength, valueLength, localValueOffset, remoteBlock) = DecodeLeafEntry(inode, block, j);
                        if (!block.AsSpan(nameOffset, nameLength).SequenceEqual(name)) continue;
                        value = localValueOffset >= 0
                            ? block.AsSpan(localValueOffset, valueLength).ToArray()
                            : ReadRemoteValue(inode, map, remoteBlock, valueLength);
                        return true;
                    }
                    uint forw = new DaBlockInfoView(block).Forw;
                    if (j < count || forw == 0) return false;
                    block = ReadAttrBlock(inode, map, forw, LeafMagic, LeafMagic);
                }
                throw _mount.Corrupt($"attribute leaf chain of inode {inode.Number}", inode.ByteOffset, "too many leaves with one hash (a loop?)");
            }
            default:
                throw _mount.Corrupt($"inode {inode.Number}", inode.ByteOffset, $"attribute fork format {inode.AttrFormat}");
        }
    }

    // ---------------------------------------------------------------- helpers

    /// <summary>The leftmost leaf: block 0 itself, or found by descending the first child of each node.</summary>
    private byte[] FirstLeaf(Inode inode, ExtentMap map)
    {
        var block = ReadAttrBlock(inode, map, 0, LeafMagic, NodeMagic);
        int depth = 0;
        while (new DaBlockInfoView(block).Magic == NodeMagic)
        {
            var node = new DaNodeView(block, _v5);
            if (node.Count == 0 || node.Count > node.MaxEntries || ++depth > 8)
                throw _mount.Corrupt($"attribute node of inode {inode.Number}", inode.ByteOffset, "bad entry count or depth");
            block = ReadAttrBlock(inode, map, node.Before(0), LeafMagic, NodeMagic);
        }
        return block;
    }

    /// <summary>An attribute fork in extent format with no extents is an empty fork (left after the last attribute was removed).</summary>
    private static bool HasAttributes(Inode inode) =>
        inode.HasAttrFork && !(inode.AttrFormat == ForkFormat.Extents && inode.AttrExtentCount == 0);

    private int CheckShortform(Inode inode)
    {
        if (ShortformProblem(inode.AttrFork) is { } problem)
            throw _mount.Corrupt($"short-form attributes of inode {inode.Number}", inode.ByteOffset, problem);
        return new AttrShortformView(inode.AttrFork).TotalSize;
    }

    /// <summary>What is wrong with a short-form attribute fork's header and entry sizes, or null when they fit the fork.</summary>
    public static string? ShortformProblem(ReadOnlySpan<byte> fork)
    {
        if (fork.Length < AttrShortformView.HeaderSize) return "fork smaller than its header";
        int total = new AttrShortformView(fork).TotalSize;
        if (total > fork.Length || total < AttrShortformView.HeaderSize) return $"total size {total} larger than the fork ({fork.Length})";
        int off = AttrShortformView.HeaderSize;
        for (int i = 0; i < fork[2]; i++)
        {
            if (off + 3 > total || off + 3 + fork[off] + fork[off + 1] > total || fork[off] == 0) return $"entry {i} runs past the fork";
            off += 3 + fork[off] + fork[off + 1];
        }
        return null;
    }

    private int CheckLeafCount(Inode inode, byte[] block)
    {
        var leaf = new AttrLeafView(block, _v5);
        int count = leaf.Count;
        if (leaf.HeaderSize + count * AttrLeafView.EntrySize > block.Length)
            throw _mount.Corrupt($"attribute leaf of inode {inode.Number}", inode.ByteOffset, $"{count} entries do not fit the block");
        return count;
    }

    /// <summary>Decodes leaf entry <paramref name="i"/>: its name, value length, and either the local value's offset or the remote value's first block.</summary>
    private (int NameOffset, int NameLength, int ValueLength, int LocalValueOffset, uint RemoteBlock) DecodeLeafEntry(Inode inode, byte[] block, int i)
    {
        var leaf = new AttrLeafView(block, _v5);
        int idx = leaf.NameIndex(i);
        byte flags = leaf.Flags(i);
        int minIdx = leaf.HeaderSize + leaf.Count * AttrLeafView.EntrySize;
        bool local = (flags & AttrFlags.Local) != 0;
        if (idx < minIdx || idx + (local ? 3 : 9) > block.Length)
            throw _mount.Corrupt($"attribute leaf of inode {inode.Number}", inode.ByteOffset, $"entry {i} name index {idx} outside the name area");
        if (local)
        {
            int valueLen = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(idx));
            int nameLen = block[idx + 2];
            if (idx + 3 + nameLen + valueLen > block.Length || nameLen == 0)
                throw _mount.Corrupt($"attribute leaf of inode {inode.Number}", inode.ByteOffset, $"entry {i} runs past the block");
            return (idx + 3, nameLen, valueLen, idx + 3 + nameLen, 0);
        }
        uint valueBlock = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(idx));
        uint remoteLen = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(idx + 4));
        int rNameLen = block[idx + 8];
        if (idx + 9 + rNameLen > block.Length || rNameLen == 0 || remoteLen > XattrMaxValueLength)
            throw _mount.Corrupt($"attribute leaf of inode {inode.Number}", inode.ByteOffset, $"remote entry {i} is malformed");
        return (idx + 9, rNameLen, (int)remoteLen, -1, valueBlock);
    }

    /// <summary>
    /// A remote value of <paramref name="length"/> bytes from its first block, as a lookup reads it (the volume check
    /// reads every remote value this way while it walks the leaves, instead of looking each name up).
    /// </summary>
    internal byte[] ReadRemoteValue(Inode inode, ExtentMap map, uint firstBlock, int length)
    {
        var value = new byte[length];
        int perBlock = _v5 ? _blockSize - RemoteBlockHeader.Size : _blockSize;
        int done = 0;
        ulong fileBlock = firstBlock;
        while (done < length)
        {
            if (!map.TryFind(fileBlock, out var ext, out _))
                throw _mount.Corrupt($"remote attribute value of inode {inode.Number}", inode.ByteOffset, $"attribute block {fileBlock} is not mapped");
            long offset = _sb.FsbToByte(ext.StartBlock + (fileBlock - ext.FileOffset));
            int want = Math.Min(perBlock, length - done);
            var block = _mount.Buffers.Read(offset, _blockSize, inode.Number, new RemoteValueVerifier(_sb, inode.Number, (uint)done, want, ReadAsXfsRepair));
            block.AsSpan(_v5 ? RemoteBlockHeader.Size : 0, want).CopyTo(value.AsSpan(done));
            done += want;
            fileBlock++;
        }
        return value;
    }

    private byte[] ReadAttrBlock(Inode inode, ExtentMap map, ulong fileBlock, ushort magicA, ushort magicB)
    {
        if (!map.TryFind(fileBlock, out var ext, out _))
            throw _mount.Corrupt($"attribute fork of inode {inode.Number}", inode.ByteOffset, $"attribute block {fileBlock} is not mapped");
        long offset = _sb.FsbToByte(ext.StartBlock + (fileBlock - ext.FileOffset));
        if (ReadAsXfsRepair && fileBlock != 0)
            return _mount.Buffers.Read(offset, _blockSize, inode.Number, new BelowRootVerifier(_sb, inode.Number, magicA, magicB));
        return _mount.Buffers.Read(offset, _blockSize, inode.Number,
            new DaTreeBlockVerifier(_sb, inode.Number, magicA, magicB, magicB, "attribute leaf/node block", 30));
    }

    /// <summary>A block below the root of a node-form attribute fork as xfs_repair reads it: its magic and (V5) CRC.</summary>
    private readonly struct BelowRootVerifier(Superblock sb, ulong owner, ushort magicA, ushort magicB) : IBufferVerifier
    {
        public int Kind => 35;
        public string Structure => $"attribute leaf/node block of inode {owner}";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
        {
            ushort magic = BinaryPrimitives.ReadUInt16BigEndian(buffer[DaBlockInfoView.OffMagic..]);
            if (magic != magicA && magic != magicB) return VerifyResult.Fail($"bad magic 0x{magic:x4}", DaBlockInfoView.OffMagic);
            return !sb.IsV5 || XfsCrc.Verify(buffer, DaBlockInfoView.OffCrc) ? VerifyResult.Ok : VerifyResult.Fail("CRC mismatch", DaBlockInfoView.OffCrc);
        }
    }

    private readonly struct RemoteValueVerifier(Superblock sb, ulong owner, uint valueOffset, int bytes, bool asXfsRepair) : IBufferVerifier
    {
        public int Kind => asXfsRepair ? 34 : 31;
        public string Structure => $"remote attribute value block of inode {owner}";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset)
        {
            if (!sb.IsV5) return VerifyResult.Ok;
            if (asXfsRepair)
            {
                // The kernel's read verifier only (xfs_attr3_rmt_verify: magic, CRC, UUID, address, byte bound).
                return RemoteBlockHeader.Verify(buffer, RemoteBlockHeader.AttrMagic, sb, byteOffset,
                    BinaryPrimitives.ReadUInt64BigEndian(buffer[RemoteBlockHeader.OffOwner..]),
                    BinaryPrimitives.ReadUInt32BigEndian(buffer[RemoteBlockHeader.OffOffset..]), out _);
            }
            var r = RemoteBlockHeader.Verify(buffer, RemoteBlockHeader.AttrMagic, sb, byteOffset, owner, valueOffset, out int recorded);
            if (!r.IsOk) return r;
            return recorded == bytes ? VerifyResult.Ok : VerifyResult.Fail($"block holds {recorded} bytes, expected {bytes}", RemoteBlockHeader.OffBytes);
        }
    }
}

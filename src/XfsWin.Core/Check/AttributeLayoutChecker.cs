using System.Buffers.Binary;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;

namespace XfsWin.Check;

/// <summary>
/// The block layout of an attribute fork in leaf or node form, beyond what reading attributes needs: what the kernel's
/// attribute leaf and da node verifiers and xfs_repair's attribute checks look at. Leaf blocks: the header (firstused
/// inside the block and past the entry array, the entry count, usedbytes equal to the entries' name and value sizes),
/// the free map (each region 4-byte aligned and inside the block), every
/// entry (hashes in order, name offset at or past firstused (which a split may leave below the lowest name) and inside
/// the block, a name, a remote value's block, the name's hash, entries'
/// names and values not overlapping); node blocks as in directories (count, level, ordered keys, each child's last hash
/// equal to its key, siblings linked level by level).
/// </summary>
internal sealed class AttributeLayoutChecker(CheckContext cx)
{
    /// <summary>
    /// A short-form attribute fork, in place and without allocating: its layout
    /// (<see cref="Attributes.AttributeReader.ShortformProblem"/>), no empty name, and for a name given twice in one
    /// namespace the same value length in both (a lookup by name finds the first). Returns the parent pointers in it,
    /// or -1 when the layout is broken (reported).
    /// </summary>
    public static int CheckShortform(CheckContext cx, ulong ino, long byteOffset, ReadOnlySpan<byte> fork)
    {
        if (Attributes.AttributeReader.ShortformProblem(fork) is { } problem)
        {
            cx.ReportAt($"short-form attributes of inode {ino}", byteOffset, problem);
            return -1;
        }
        int count = fork[2], parents = 0;
        int off = AttrShortformView.HeaderSize;
        for (int i = 0; i < count; i++)
        {
            int nameLength = fork[off], valueLength = fork[off + 1];
            byte flags = fork[off + 2];
            int at = off;
            off += 3 + nameLength + valueLength;
            if ((flags & AttrFlags.Incomplete) != 0) continue;
            if ((flags & AttrFlags.Parent) != 0)
            {
                parents++;
                continue;
            }
            var name = fork.Slice(at + 3, nameLength);
            if (nameLength == 0) cx.ReportAt($"inode {ino}", byteOffset, "attribute with an empty name");
            // The first entry of this namespace and name (possibly this one).
            for (int o = AttrShortformView.HeaderSize, j = 0; j < i; j++)
            {
                int nl = fork[o], vl = fork[o + 1];
                byte f = fork[o + 2];
                if ((f & AttrFlags.NamespaceMask) == (flags & AttrFlags.NamespaceMask) && (f & AttrFlags.Incomplete) == 0 && fork.Slice(o + 3, nl).SequenceEqual(name))
                {
                    if (vl != valueLength)
                        cx.ReportAt($"attributes of inode {ino}", byteOffset,
                            $"attribute {Attributes.XattrNames.ToLinuxName(Attributes.AttributeReader.NamespaceOf(flags), name)}: value of {vl} bytes, {valueLength} recorded");
                    break;
                }
                o += 3 + nl + vl;
            }
        }
        return parents;
    }

    private readonly Superblock _sb = cx.Sb;
    private bool V5 => _sb.IsV5;
    private int LeafHeader => V5 ? 80 : 32;
    private int BlockSize => (int)_sb.BlockSize;

    private sealed class State(Inode inode, ExtentMap map, Attributes.AttributeReader reader)
    {
        public readonly Inode Inode = inode;
        public readonly ExtentMap Map = map;
        public readonly Attributes.AttributeReader Reader = reader;
        public readonly string Name = $"attributes of inode {inode.Number}";
        public bool Damaged;

        // The attributes as a reader meets them, leaf by leaf in hash order (see ListLeaf).
        public int Parents, Leaves;
        /// <summary>Something a listing or a lookup by name would find wrong: the caller lists and looks up again to report it.</summary>
        public bool Unsure;
        /// <summary>The last hash of the latest leaf that had entries.</summary>
        public uint PreviousLeafLast;
        public bool AnyLeaf;
        /// <summary>The named entries with the current hash so far (possibly over several leaves): block, entry index.</summary>
        public readonly List<(byte[] Block, int Index)> Run = [];
        public uint RunHash;
        public int RunLeaves;
    }

    private void Report(State st, long byteOffset, string message)
    {
        if (st.Damaged) return;
        st.Damaged = true;
        cx.ReportAt(st.Name, byteOffset >= 0 ? byteOffset : st.Inode.ByteOffset, message);
    }

    /// <summary>
    /// Checks the layout of a leaf or node attribute fork and, in the same pass over its leaves, what listing the
    /// attributes and looking each one up by its name would meet (<see cref="Attributes.AttributeReader.List"/>,
    /// <see cref="Attributes.AttributeReader.TryGet"/>): every remote value is read back through
    /// <paramref name="reader"/>, and every name must be where a lookup by its hash finds it first. Returns the parent
    /// pointers in the fork, or -1 when a problem was found or a listing or lookup might find one: the caller then lists
    /// and looks up through the reader, which reports it.
    /// </summary>
    public int Check(Inode inode, ExtentMap map, Attributes.AttributeReader reader)
    {
        var st = new State(inode, map, reader);
        var visited = new HashSet<ulong>();
        var lastAtLevel = new Dictionary<int, (ulong Da, byte[] Bytes, long Offset)>();
        ushort nodeMagic = V5 ? DaBlockInfoView.DaNodeV5 : DaBlockInfoView.DaNodeV4;
        ushort leafMagic = V5 ? DaBlockInfoView.AttrLeafV5 : DaBlockInfoView.AttrLeafV4;

        uint? Visit(ulong da, int expectedLevel)
        {
            if (visited.Count > 100_000 || !visited.Add(da))
            {
                Report(st, -1, $"the attribute hash tree reaches block {da} twice");
                return null;
            }
            var read = Read(st, map, da);
            if (read is not { } r) return null;
            var info = new DaBlockInfoView(r.Bytes);
            if (info.Magic != nodeMagic && info.Magic != leafMagic)
            {
                Report(st, r.Offset, $"attribute block {da}: magic 0x{info.Magic:x4}");
                return null;
            }
            if (V5) cx.CheckLsn(st.Name, r.Offset, r.Bytes, DaBlockInfoView.OffLsn);
            // xfs_repair reads the leaves below a node without their verifier: their self-description is not its concern.
            bool underNode = expectedLevel == 0;
            if (V5 && !underNode)
            {
                var v = DaBlockInfoView.VerifyV5(r.Bytes, _sb, r.Offset, st.Inode.Number);
                if (!v.IsOk)
                {
                    Report(st, r.Offset, $"attribute block {da}: {v}");
                    return null;
                }
            }
            int level = info.Magic == nodeMagic ? new DaNodeView(r.Bytes, V5).Level : 0;
            if (expectedLevel >= 0 && level != expectedLevel)
            {
                Report(st, r.Offset, $"attribute block {da} at level {level} where level {expectedLevel} belongs");
                return null;
            }
            if (lastAtLevel.TryGetValue(level, out var prev))
            {
                if (info.Back != prev.Da || new DaBlockInfoView(prev.Bytes).Forw != da)
                    Report(st, r.Offset, $"attribute block {da}: sibling pointers do not link it to block {prev.Da}");
            }
            else if (info.Back != 0)
            {
                Report(st, r.Offset, $"first attribute block of level {level} has a back pointer");
            }
            lastAtLevel[level] = (da, r.Bytes, r.Offset);
            if (level == 0)
            {
                var leafLast = CheckLeaf(st, r.Bytes, r.Offset, da, underNode);
                if (leafLast is not null && !st.Damaged) ListLeaf(st, r.Bytes, underNode);
                return leafLast;
            }
            var node = new DaNodeView(r.Bytes, V5);
            int count = node.Count;
            if (count == 0 || count > node.MaxEntries || level > 5)
            {
                Report(st, r.Offset, $"attribute node block {da}: count {count}, level {level}");
                return null;
            }
            uint previous = 0, last = 0;
            for (int i = 0; i < count; i++)
            {
                uint key = node.HashVal(i);
                if (i > 0 && key < previous)
                {
                    Report(st, r.Offset, $"attribute node block {da}: keys out of order at {i}");
                    return null;
                }
                previous = key;
                var child = Visit(node.Before(i), level - 1);
                if (child is null) return null;
                if (child.Value != key)
                {
                    Report(st, r.Offset, $"attribute node block {da}: key {i} is 0x{key:x8} but its child's last hash is 0x{child.Value:x8}");
                    return null;
                }
                last = key;
            }
            return last;
        }

        // An attribute fork left empty in extents form (every attribute removed) has nothing to check.
        bool any = false;
        try
        {
            map.Walk(0, _ =>
            {
                any = true;
                return false;
            });
        }
        catch (XfsCorruptionException e)
        {
            cx.Report(e);
            return -1;
        }
        if (!any) return inode.AttrExtentCount == 0 ? 0 : -1;
        if (Visit(0, -1) is null) return -1;
        foreach (var (level, last) in lastAtLevel)
            if (new DaBlockInfoView(last.Bytes).Forw != 0) Report(st, last.Offset, $"last attribute block of level {level} has a forward pointer");
        // A listing follows the leaf chain for at most as many leaves as the inode has blocks.
        if (st.Leaves > (long)Math.Max(inode.Nblocks, 1)) st.Unsure = true;
        return st.Damaged || st.Unsure ? -1 : st.Parents;
    }

    /// <summary>
    /// One leaf that passed <see cref="CheckLeaf"/>, as a listing and lookups by name meet it: counts its parent pointers
    /// and reads its remote values back. An entry a lookup by its name would not find first (a hash below the previous
    /// leaf's last, where the lookup stops; a second entry of the same namespace and name; more than one namespace flag)
    /// or a value that does not read back leaves the fork <see cref="State.Unsure"/>.
    /// </summary>
    private void ListLeaf(State st, byte[] b, bool underNode)
    {
        st.Leaves++;
        // The blocks below a node are read with their CRC checked by the reader (xfs_repair's way), not by the walk.
        if (V5 && underNode && !XfsCrc.Verify(b, DaBlockInfoView.OffCrc))
        {
            st.Unsure = true;
            return;
        }
        var view = new AttrLeafView(b, V5);
        int count = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(V5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4));
        if (count == 0 || st.Unsure) return;
        // A lookup goes on to the next leaf while the hash continues, for up to 1024 leaves.
        if (st.AnyLeaf && st.RunHash == view.HashVal(0) && ++st.RunLeaves >= 1000) st.Unsure = true;
        for (int i = 0; i < count && !st.Unsure; i++)
        {
            uint hash = view.HashVal(i);
            byte flags = view.Flags(i);
            if (hash != st.RunHash || !st.AnyLeaf && i == 0)
            {
                st.Run.Clear();
                st.RunHash = hash;
                st.RunLeaves = 0;
            }
            if ((flags & AttrFlags.Incomplete) != 0) continue;
            int nameIdx = view.NameIndex(i);
            bool local = (flags & AttrFlags.Local) != 0;
            int nameLength = local ? b[nameIdx + 2] : b[nameIdx + 8];
            int nameAt = local ? nameIdx + 3 : nameIdx + 9;
            uint remoteLength = local ? 0 : BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(nameIdx + 4));
            if (remoteLength > Attributes.AttributeReader.XattrMaxValueLength)
            {
                st.Unsure = true;
                break;
            }
            if ((flags & AttrFlags.Parent) != 0)
            {
                st.Parents++;
                continue;
            }
            var ns = Attributes.AttributeReader.NamespaceOf(flags);
            byte nsFlags = (byte)(flags & AttrFlags.NamespaceMask);
            if (nsFlags != (ns == Attributes.XattrNamespace.Trusted ? AttrFlags.Root : ns == Attributes.XattrNamespace.Secure ? AttrFlags.Secure : 0)
                || (st.AnyLeaf && hash < st.PreviousLeafLast))
            {
                st.Unsure = true;
                break;
            }
            var name = b.AsSpan(nameAt, nameLength);
            foreach (var (other, j) in st.Run)
            {
                var ov = new AttrLeafView(other, V5);
                byte of = ov.Flags(j);
                int oi = ov.NameIndex(j);
                bool ol = (of & AttrFlags.Local) != 0;
                if ((of & AttrFlags.NamespaceMask) == nsFlags && other.AsSpan(ol ? oi + 3 : oi + 9, ol ? other[oi + 2] : other[oi + 8]).SequenceEqual(name))
                {
                    st.Unsure = true; // the lookup finds the other one first and compares its value's length
                    break;
                }
            }
            if (st.Unsure) break;
            st.Run.Add((b, i));
            if (!local && remoteLength > 0)
            {
                try
                {
                    // No LSN check here: xfs_repair -n reads remote value blocks without comparing their LSN with the log head.
                    st.Reader.ReadRemoteValue(st.Inode, st.Map, BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(nameIdx)), (int)remoteLength);
                }
                catch (Exception e) when (e is XfsException or InvalidOperationException or IndexOutOfRangeException or ArgumentException or OverflowException)
                {
                    st.Unsure = true;
                }
            }
        }
        st.AnyLeaf = true;
        st.PreviousLeafLast = view.HashVal(count - 1);
    }

    private (byte[] Bytes, long Offset)? Read(State st, ExtentMap map, ulong da)
    {
        try
        {
            if (!map.TryFind(da, out var ext, out _) || ext.Unwritten)
            {
                Report(st, -1, $"attribute block {da} is not mapped");
                return null;
            }
            ulong fsb = ext.StartBlock + (da - ext.FileOffset);
            if (!_sb.IsValidFsb(fsb)) return null;
            long offset = _sb.FsbToByte(fsb);
            var bytes = new byte[BlockSize];
            return cx.TryRead(offset, bytes, st.Name) ? (bytes, offset) : null;
        }
        catch (XfsCorruptionException e)
        {
            cx.Report(e);
            st.Damaged = true;
            return null;
        }
    }

    /// <summary>One leaf block; returns its last hash (0 when empty), or null when it is damaged.</summary>
    private uint? CheckLeaf(State st, byte[] b, long offset, ulong da, bool underNode)
    {
        int bs = BlockSize;
        int h = V5 ? DaBlockInfoView.SizeV5 : DaBlockInfoView.SizeV4;
        int count = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(h));
        int usedBytes = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(h + 2));
        int firstUsed = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(h + 4));
        if (firstUsed == 0 && V5 && bs > 0xFFFF) firstUsed = bs; // XFS_ATTR3_LEAF_NULLOFF: a 64 KiB block's end
        string what = $"attribute leaf block {da}";
        if (firstUsed > bs || firstUsed < LeafHeader)
        {
            Report(st, offset, $"{what}: firstused {firstUsed} outside the block's name area");
            return null;
        }
        if (LeafHeader + count * AttrLeafView.EntrySize > firstUsed)
        {
            Report(st, offset, $"{what}: {count} entries run into the names at {firstUsed}");
            return null;
        }
        for (int i = 0; i < 3 && !underNode; i++)
        {
            int fbase = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(h + 8 + i * 4));
            int fsize = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(h + 10 + i * 4));
            if (fbase > bs || (fbase & 3) != 0 || fsize > bs || (fsize & 3) != 0 || fbase + fsize > bs)
            {
                Report(st, offset, $"{what}: free map entry {i} ({fbase}, {fsize}) is not a 4-byte aligned region of the block");
                return null;
            }
        }
        var view = new AttrLeafView(b, V5);
        var used = new bool[bs];
        uint last = 0;
        int total = 0, lowestName = bs;
        for (int i = 0; i < count; i++)
        {
            uint hash = view.HashVal(i);
            int nameIdx = view.NameIndex(i);
            byte flags = view.Flags(i);
            if (i > 0 && hash < last)
            {
                Report(st, offset, $"{what}: hashes out of order at entry {i}");
                return null;
            }
            last = hash;
            if (nameIdx < firstUsed || nameIdx >= bs)
            {
                Report(st, offset, $"{what}: entry {i} has its name at {nameIdx}, outside the name area [{firstUsed}, {bs})");
                return null;
            }
            int size, nameLength;
            ReadOnlySpan<byte> name, value = default;
            if ((flags & AttrFlags.Local) != 0)
            {
                if (nameIdx + 3 > bs) { Report(st, offset, $"{what}: entry {i} runs past the block"); return null; }
                int valueLength = BinaryPrimitives.ReadUInt16BigEndian(b.AsSpan(nameIdx));
                nameLength = b[nameIdx + 2];
                size = (3 + nameLength + valueLength + 3) & ~3;
                if (nameIdx + size > bs || nameLength == 0) { Report(st, offset, $"{what}: entry {i} (name {nameLength}, value {valueLength} bytes) runs past the block or has no name"); return null; }
                name = b.AsSpan(nameIdx + 3, nameLength);
                value = b.AsSpan(nameIdx + 3 + nameLength, valueLength);
            }
            else
            {
                if (nameIdx + 9 > bs) { Report(st, offset, $"{what}: entry {i} runs past the block"); return null; }
                uint valueBlock = BinaryPrimitives.ReadUInt32BigEndian(b.AsSpan(nameIdx));
                nameLength = b[nameIdx + 8];
                size = (11 + nameLength + 3) & ~3; // xfs_attr_leaf_entsize_remote: the name follows a 12-byte padded header, less its one-byte name
                if (nameIdx + size > bs || nameLength == 0) { Report(st, offset, $"{what}: remote entry {i} runs past the block or has no name"); return null; }
                if (valueBlock == 0 && (flags & AttrFlags.Incomplete) == 0) { Report(st, offset, $"{what}: remote entry {i} has no value block"); return null; }
                name = b.AsSpan(nameIdx + 9, nameLength);
            }
            if ((flags & AttrFlags.Parent) == 0 ? name.IndexOf((byte)0) >= 0 : name.IndexOfAny((byte)0, (byte)'/') >= 0)
            {
                Report(st, offset, $"{what}: entry {i}'s name holds a byte a name may not");
                return null;
            }
            for (int x = nameIdx; x < nameIdx + size; x++)
            {
                if (used[x]) { Report(st, offset, $"{what}: entry {i}'s name and value overlap another entry's"); return null; }
                used[x] = true;
            }
            total += size;
            lowestName = Math.Min(lowestName, nameIdx);
            uint expected = (flags & AttrFlags.Parent) != 0 && value.Length >= 8
                ? DaHash.Hash(name) ^ (uint)(BinaryPrimitives.ReadUInt64BigEndian(value) >> 32) ^ (uint)BinaryPrimitives.ReadUInt64BigEndian(value)
                : DaHash.Hash(name);
            if ((flags & AttrFlags.Parent) == 0 || value.Length >= 8)
            {
                if (hash != expected) { Report(st, offset, $"{what}: entry {i} has hash 0x{hash:x8}, its name hashes to 0x{expected:x8}"); return null; }
            }
            if ((flags & AttrFlags.Incomplete) != 0 && !cx.LogReplayed) { Report(st, offset, $"{what}: entry {i} is incomplete (an attribute change did not finish)"); return null; }
        }
        if (usedBytes != total)
        {
            Report(st, offset, $"{what}: usedbytes {usedBytes}, the entries use {total}");
            return null;
        }
        // Without the holes flag the names are packed from firstused on (xfs_repair resets firstused otherwise).
        if (b[h + 6] == 0 && firstUsed != lowestName)
        {
            Report(st, offset, $"{what}: no holes recorded, but firstused is {firstUsed} and the names begin at {lowestName}");
            return null;
        }
        return last;
    }
}

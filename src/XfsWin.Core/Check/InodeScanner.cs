using System.Buffers.Binary;
using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>An in-use inode as the scan found it (what the namespace and quota checks need).</summary>
internal readonly record struct InodeEntry(ulong Ino, ushort Mode, uint Nlink, uint Generation, bool Unusable, bool HasAttrFork = false)
{
    public uint Uid { get; init; }
    public uint Gid { get; init; }
    public uint ProjectId { get; init; }
    public ulong Nblocks { get; init; }
    /// <summary>Realtime file (its data blocks count as realtime blocks) or metadata directory inode (not charged to quota).</summary>
    public bool Realtime { get; init; }
    public bool Metadata { get; init; }
    /// <summary>
    /// An attribute fork checked by the inode scan (short form, or extents form left empty): its parent pointers, or -1
    /// when its layout is broken (reported); <see cref="AttrNotChecked"/> for leaf and node forks (the namespace pass
    /// reads them).
    /// </summary>
    public int ScannedAttrParents { get; init; } = AttrNotChecked;
    public const int AttrNotChecked = int.MinValue;
}

/// <summary>
/// Reads every inode of an AG's inode chunks (as the inobt lists them) and checks it: core verifier
/// (magic, version, CRC, number, UUID, fork formats for the file type), free/in-use agreement with the
/// inobt free mask, next_unlinked, fork offsets, extent records (in range, ordered, not overlapping),
/// the bmbt of B+tree forks (through <see cref="TreeWalker"/>), extent counts and the block count.
/// Every data, attribute and bmbt block is claimed in the usage map.
/// </summary>
internal sealed class InodeScanner
{
    private readonly CheckContext _cx;
    private readonly Superblock _sb;
    private readonly uint _agno;

    public InodeScanner(CheckContext cx, uint agno)
    {
        _cx = cx;
        _sb = cx.Sb;
        _agno = agno;
    }

    public List<InodeEntry> InUse { get; } = [];

    public void Scan(IReadOnlyList<InobtRecord> chunks) => Scan(chunks, 0, chunks.Count);

    /// <summary>Checks the inodes of chunks [<paramref name="from"/>, <paramref name="to"/>).</summary>
    public void Scan(IReadOnlyList<InobtRecord> allChunks, int from, int to)
    {
        var chunks = allChunks;
        int isize = _sb.InodeSize;
        int chunkBytes = 64 * isize;
        // Chunks that follow each other on disk are read together, up to MaxRunBytes at a time (a volume's chunks
        // mostly do): one read instead of one per chunk. A run that cannot be read whole is read chunk by chunk, so
        // that each failure is reported for its own chunk.
        int maxRun = Math.Max(1, MaxRunBytes / chunkBytes);
        var buffer = new byte[Math.Min(maxRun, Math.Max(1, to - from)) * chunkBytes];
        for (int c = from; c < to;)
        {
            _cx.Cancel.ThrowIfCancellationRequested();
            long runOffset = ChunkOffset(chunks[c]);
            int run = 1;
            while (run < maxRun && c + run < to && ChunkOffset(chunks[c + run]) == runOffset + (long)run * chunkBytes) run++;
            bool whole = run > 1 && runOffset >= 0 && runOffset + (long)run * chunkBytes <= _cx.Mount.Device.Length &&
                         TryReadQuietly(runOffset, buffer.AsSpan(0, run * chunkBytes));
            for (int k = 0; k < run; k++)
            {
                var chunk = chunks[c + k];
                ulong firstIno = ((ulong)_agno << _sb.AgInoLog) | chunk.StartIno;
                long offset = _sb.InodeToByte(firstIno);
                var bytes = buffer.AsSpan(whole ? k * chunkBytes : 0, chunkBytes);
                if (!whole && !_cx.TryRead(offset, bytes, $"inode chunk {firstIno}")) continue;
                for (int i = 0; i < 64; i++)
                {
                    if ((chunk.HoleMask & (1 << (i / 4))) != 0) continue;
                    bool free = (chunk.FreeMask & (1UL << i)) != 0;
                    CheckInode(firstIno + (ulong)i, bytes.Slice(i * isize, isize), offset + (long)i * isize, free);
                }
            }
            c += run;
        }
    }

    /// <summary>Largest read of consecutive inode chunks.</summary>
    private const int MaxRunBytes = 1024 * 1024;

    private long ChunkOffset(InobtRecord chunk) => _sb.InodeToByte(((ulong)_agno << _sb.AgInoLog) | chunk.StartIno);

    private bool TryReadQuietly(long offset, Span<byte> into)
    {
        try
        {
            _cx.Mount.Device.Read(offset, into);
            return true;
        }
        catch (IOException)
        {
            return false;
        }
    }

    private void CheckInode(ulong ino, ReadOnlySpan<byte> raw, long offset, bool freeInInobt)
    {
        string name = $"inode {ino}";
        var verdict = DinodeView.VerifyStructure(raw, ino, _sb);
        var d = new DinodeView(raw);
        if (!verdict.IsOk)
        {
            _cx.ReportAt(name, offset, freeInInobt ? $"free inode is damaged: {verdict}" : verdict.ToString());
            if (!freeInInobt && d.MagicNumber == DinodeView.Magic && d.Mode != 0)
                InUse.Add(new InodeEntry(ino, d.Mode, d.LinkCount, d.Generation, Unusable: true));
            return;
        }
        if (d.Mode == 0)
        {
            if (!freeInInobt) _cx.ReportAt(name, offset, "the inode btree marks it in use, but it is free (mode 0)");
            return;
        }
        if (freeInInobt) _cx.ReportAt(name, offset, "in use, but the inode btree marks it free");
        if (InodeRules.Problem(raw, ino, _cx) is { } broken)
        {
            // The kernel refuses to read such an inode; xfs_repair would clear it or its flags.
            _cx.ReportAt(name, offset, broken);
        }
        bool beingFreed = _cx.UnlinkedExpected && d.LinkCount == 0;
        if (d.NextUnlinked != AgiView.NullAgino && !beingFreed) _cx.ReportAt(name, offset, $"in use with next_unlinked {d.NextUnlinked} (left on an unlinked list)");
        int litSize = raw.Length - d.CoreSize;
        if (d.ForkOffset != 0 && d.ForkOffset * 8 >= litSize)
        {
            _cx.ReportAt(name, offset, $"attribute fork offset {d.ForkOffset * 8} is past the literal area ({litSize} bytes)");
            InUse.Add(new InodeEntry(ino, d.Mode, d.LinkCount, d.Generation, Unusable: true));
            return;
        }
        if (!d.HasBigtime)
        {
            // Legacy timestamps: seconds in the high half, nanoseconds (below 10^9) in the low half.
            CheckNanoseconds(name, offset, "atime", d.AccessTime.Raw);
            CheckNanoseconds(name, offset, "mtime", d.ModifyTime.Raw);
            CheckNanoseconds(name, offset, "ctime", d.ChangeTime.Raw);
            if (d.Version >= 3) CheckNanoseconds(name, offset, "crtime", d.CreationTime.Raw);
        }
        int type = d.Mode & 0xF000;
        if (type == 0x4000 && d.LinkCount == 0 && !beingFreed) _cx.ReportAt(name, offset, "directory with link count 0");
        ulong blocks = 0;
        bool usable = true;
        bool realtime = (d.Flags & DinodeView.FlagRealtime) != 0;
        var dataFork = raw.Slice(d.CoreSize, d.DataForkSize(raw.Length));
        // Only a regular file's data may be shared (reflink); a metadata file's never is.
        var owner = new ForkOwner(ino, Regular: type == 0x8000,
            Shareable: type == 0x8000 && (d.Flags2 & DinodeView.Flag2Metadata) == 0 && !_cx.InternalInodes.Contains(ino),
            Reflink: (d.Flags2 & DinodeView.Flag2Reflink) != 0);
        usable &= CheckFork(owner, name, offset, d.Format, dataFork, d.DataExtentCount, attr: false, realtime, ref blocks);
        if (d.ForkOffset != 0)
        {
            var attrFork = raw.Slice(d.AttrForkOffset, d.AttrForkSize(raw.Length));
            usable &= CheckFork(owner, name, offset, d.AttrFormat, attrFork, d.AttrExtentCount, attr: true, realtime: false, ref blocks);
        }
        else if (d.AttrExtentCount != 0)
        {
            _cx.ReportAt(name, offset, $"{d.AttrExtentCount} attribute extents without an attribute fork");
        }
        if (usable && !realtime && blocks != d.Nblocks)
            _cx.ReportAt(name, offset, $"nblocks {d.Nblocks}, counted {blocks}");
        if (type is 0x2000 or 0x6000 or 0x1000 or 0xC000 && d.Size != 0 && d.Format == ForkFormat.Device)
            _cx.ReportAt(name, offset, $"special file with size {d.Size}");
        // A short-form or empty attribute fork is checked here, in the bytes at hand, rather than read again by the
        // namespace pass.
        int scannedAttrParents = InodeEntry.AttrNotChecked;
        if (usable && d.ForkOffset != 0 && d.AttrFormat == ForkFormat.Local)
            scannedAttrParents = AttributeLayoutChecker.CheckShortform(_cx, ino, offset, raw.Slice(d.AttrForkOffset, d.AttrForkSize(raw.Length)));
        else if (usable && d.ForkOffset != 0 && d.AttrFormat == ForkFormat.Extents && d.AttrExtentCount == 0)
            scannedAttrParents = 0; // an attribute fork left empty (every attribute removed): nothing in it to check

        InUse.Add(new InodeEntry(ino, d.Mode, d.LinkCount, d.Generation, Unusable: !usable, HasAttrFork: d.ForkOffset != 0)
        {
            ScannedAttrParents = scannedAttrParents,
            Uid = d.Uid, Gid = d.Gid, ProjectId = d.ProjectId, Nblocks = d.Nblocks, Realtime = realtime,
            Metadata = (d.Flags2 & DinodeView.Flag2Metadata) != 0,
        });
    }

    private void CheckNanoseconds(string name, long offset, string field, ulong raw)
    {
        uint ns = (uint)raw;
        if (ns >= 1_000_000_000) _cx.ReportAt(name, offset, $"{field} nanoseconds {ns} are not below one second");
    }

    /// <summary>Checks one fork's mapping; adds its blocks (extents and non-root bmbt blocks) to <paramref name="blocks"/>. False when the fork is unreadable.</summary>
    private bool CheckFork(ForkOwner owner, string name, long offset, ForkFormat format, ReadOnlySpan<byte> fork, ulong extentCount, bool attr,
        bool realtime, ref ulong blocks)
    {
        ulong ino = owner.Ino;
        string forkName = attr ? "attribute fork" : "data fork";
        switch (format)
        {
            case ForkFormat.Device:
            case ForkFormat.Local:
                if (extentCount != 0) _cx.ReportAt(name, offset, $"{forkName} in {(format == ForkFormat.Local ? "local" : "device")} format with {extentCount} extents");
                if (attr && format == ForkFormat.Local && ShortformAttributeProblem(fork) is { } sf)
                {
                    _cx.ReportAt(name, offset, $"short-form attributes: {sf}");
                    return false;
                }
                return true;
            case ForkFormat.Extents:
            {
                if (extentCount * BmbtRecord.Size > (ulong)fork.Length)
                {
                    _cx.ReportAt(name, offset, $"{extentCount} extents do not fit in the {forkName} ({fork.Length} bytes)");
                    return false;
                }
                var mapper = new ExtentChecker(this, owner, $"{name} {forkName}", attr, realtime);
                for (int i = 0; i < (int)extentCount; i++) mapper.Add(fork.Slice(i * BmbtRecord.Size, BmbtRecord.Size), offset);
                blocks += mapper.Blocks;
                return true;
            }
            case ForkFormat.Btree:
            {
                if (extentCount <= (ulong)(fork.Length / BmbtRecord.Size))
                    _cx.ReportAt(name, offset, $"{forkName} is a btree but its {extentCount} extents would fit in the inode");
                var mapper = new ExtentChecker(this, owner, $"{name} {forkName}", attr, realtime);
                var walker = new TreeWalker(_cx, $"extent btree of inode {ino} ({forkName})", _sb.IsV5 ? BtreeMagic.BmapV5 : BtreeMagic.BmapV4, true,
                    BmbtRecord.Size, 8, ino, 0, BmbtKey, BmbtNodeKey, mapper);
                walker.WalkFromInodeRoot(fork, offset);
                if ((ulong)walker.RecordsVisited != extentCount)
                    _cx.ReportAt(name, offset, $"{forkName} extent count {extentCount}, counted {walker.RecordsVisited}");
                blocks += mapper.Blocks + (ulong)walker.BlocksVisited;
                return true;
            }
            default:
                _cx.ReportAt(name, offset, $"{forkName} format {(int)format} is unknown");
                return false;
        }
    }

    /// <summary>
    /// xfs_attr_shortform_verify and xfs_repair's short-form attribute rules: the header inside the fork, every entry
    /// (a name, name and value inside totsize, no incomplete flag, a parent pointer's 12-byte value) and totsize equal
    /// to where the entries end.
    /// </summary>
    private string? ShortformAttributeProblem(ReadOnlySpan<byte> fork)
    {
        if (fork.Length < AttrShortformView.HeaderSize) return "the fork is smaller than its header";
        int total = BinaryPrimitives.ReadUInt16BigEndian(fork);
        int count = fork[2];
        if (total < AttrShortformView.HeaderSize || total > fork.Length) return $"totsize {total} in a {fork.Length}-byte fork";
        int off = AttrShortformView.HeaderSize;
        for (int i = 0; i < count; i++)
        {
            if (off + 3 > total) return $"entry {i} starts past totsize {total}";
            int nameLength = fork[off], valueLength = fork[off + 1];
            byte flags = fork[off + 2];
            if (nameLength == 0) return $"entry {i} has no name";
            var entryName = fork.Slice(off + 3, nameLength);
            if ((flags & AttrFlags.Parent) == 0 ? entryName.IndexOf((byte)0) >= 0 : entryName.IndexOfAny((byte)0, (byte)'/') >= 0)
                return $"entry {i}'s name holds a byte a name may not";
            if (off + 3 + nameLength + valueLength > total) return $"entry {i} runs past totsize {total}";
            if ((flags & AttrFlags.Incomplete) != 0 && !_cx.LogReplayed) return $"entry {i} is incomplete";
            if ((flags & AttrFlags.Parent) != 0 && valueLength != 12) return $"parent pointer entry {i} has a {valueLength}-byte value";
            off += 3 + nameLength + valueLength;
        }
        return off != total ? $"totsize {total}, the entries end at {off}" : null;
    }

    private static UInt128 BmbtKey(ReadOnlySpan<byte> rec) => (BinaryPrimitives.ReadUInt64BigEndian(rec) & 0x7FFF_FFFF_FFFF_FFFFUL) >> 9;
    private static UInt128 BmbtNodeKey(ReadOnlySpan<byte> key) => BinaryPrimitives.ReadUInt64BigEndian(key);

    /// <summary>Checks a fork's extent records in order and claims their blocks; also the bmbt's blocks when walking a tree.</summary>
    /// <summary>The inode a fork belongs to: its number, whether it is a regular file, whether its data may be shared, its reflink flag.</summary>
    private readonly record struct ForkOwner(ulong Ino, bool Regular, bool Shareable, bool Reflink);

    private sealed class ExtentChecker(InodeScanner owner, ForkOwner file, string name, bool attr, bool realtime) : ITreeVisitor
    {
        private readonly ulong ino = file.Ino;
        private readonly bool regular = file.Regular;
        private ulong _nextFileBlock;
        private bool _first = true;
        public ulong Blocks;

        public void Record(ReadOnlySpan<byte> record, long blockByteOffset) => Add(record, blockByteOffset);

        public bool Block(ulong pointer, long byteOffset, int level)
        {
            var sb = owner._sb;
            uint agno = (uint)(pointer >> sb.AgBlkLog);
            uint agbno = (uint)(pointer & ((1UL << sb.AgBlkLog) - 1));
            if (!owner._cx.Claim(agno, agbno, 1, BlockUse.BmbtBlock, $"extent btree of inode {ino}")) return false;
            owner._cx.Rmaps.Add(agno, agbno, 1, ino, 0, RmapRecord.BmbtBlockFlag | (attr ? RmapRecord.AttrForkFlag : 0));
            return true;
        }

        public void Add(ReadOnlySpan<byte> raw, long where)
        {
            var cx = owner._cx;
            var sb = owner._sb;
            var e = BmbtRecord.Decode(raw);
            if (e.BlockCount == 0)
            {
                cx.ReportAt(name, where, $"extent at file block {e.FileOffset} has length 0");
                return;
            }
            if (!_first && e.FileOffset < _nextFileBlock)
                cx.ReportAt(name, where, $"extent at file block {e.FileOffset} overlaps or precedes the one before (which ends at {_nextFileBlock})");
            _first = false;
            _nextFileBlock = e.FileEnd;
            if (e.FileEnd > 1UL << 54) cx.ReportAt(name, where, $"extent at file block {e.FileOffset} runs past the largest file offset");
            if (e.Unwritten && (attr || !regular)) cx.ReportAt(name, where, $"unwritten extent at file block {e.FileOffset} outside a regular file's data fork");
            Blocks += e.BlockCount;
            if (realtime && !attr) return;
            uint agno = (uint)(e.StartBlock >> sb.AgBlkLog);
            uint agbno = (uint)(e.StartBlock & ((1UL << sb.AgBlkLog) - 1));
            if (agno >= sb.AgCount || agbno == 0 || (ulong)agbno + e.BlockCount > cx.AgLength(agno))
            {
                cx.ReportAt(name, where, $"extent [{e.FileOffset}+{e.BlockCount}] at block {e.StartBlock} (AG {agno} block {agbno}) is outside the volume or its AG");
                return;
            }
            var use = attr ? BlockUse.AttrData : file.Shareable ? BlockUse.FileData : BlockUse.OtherData;
            if (cx.Claim(agno, agbno, e.BlockCount, use, name))
            {
                ulong flags = (attr ? RmapRecord.AttrForkFlag : 0) | (e.Unwritten ? RmapRecord.UnwrittenFlag : 0);
                cx.Rmaps.Add(agno, agbno, e.BlockCount, ino, e.FileOffset, flags, shareable: !attr && file.Shareable, ownerReflink: file.Reflink);
            }
        }
    }
}

using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Journal;

/// <summary>
/// Applies committed transactions to a device (the copy-on-write overlay), as the kernel's two
/// recovery passes do: pass 1 builds the buffer cancel table and gathers the quota types that
/// quota-off items switched off; pass 2 replays buffers, inodes, inode chunks and dquots in the
/// kernel's item order, honours cancellations, quota-off items and the V5 LSN rule, pairs intents
/// with their done items, and stamps LSN and CRC into replayed blocks once per recovery LSN (the
/// point where the kernel submits its delayed-write list).
/// <para>
/// Every block it changes goes through a <see cref="BufferCache"/> over the target, keyed as the log
/// names it (a buffer item's daddr and length; an inode item's or dquot item's cluster buffer; an
/// icreate item's clusters), as the kernel's recovery reads them: a replayed item locks its buffer,
/// changes it, logs what it changed and commits; at each new recovery LSN (and at the end) the
/// delayed-write list is written back in disk order, regular V5 blocks through a write verifier that
/// stamps the LSN of the transaction that last replayed them and their CRC, and the clean buffers are
/// dropped so that the next window reads the target afresh. Two different buffers over the same bytes
/// in one window (a block freed and reused at another length) would not see each other's changes:
/// the second one's first use writes the window back first.
/// </para>
/// </summary>
public sealed class LogReplayer : IDisposable
{
    private readonly IBlockDevice _target;
    private readonly BufferCache _buffers;
    private readonly IBufferWriteVerifier _stamper;
    // Buffers changed since the last writeback, by disk range (start, end), to find overlaps.
    private readonly SortedSet<(long Start, long End)> _window = new();
    private readonly List<MetadataBuffer> _stampedInWindow = new();
    private static readonly RawBlockVerifier ReplayedBlock = new("block replayed from the log", 7);
    /// <summary>The geometry replay works with: the superblock as found, then as each replayed primary superblock buffer leaves it (a logged grow).</summary>
    private Superblock _sb;
    /// <summary>The superblock sector as the log leaves it (pass 1), for the quota decision.</summary>
    private readonly byte[] _lastSuperblock;
    private readonly ulong _diskSuperblockLsn;
    private readonly Func<long, string, XfsCorruptionException> _corrupt;
    private readonly Dictionary<(long Blkno, int Len), int> _cancelled = new();
    /// <summary>Intents not (yet) matched by a done item, in log order, and where each (type, id) is in that list.</summary>
    private readonly LinkedList<RecoveredIntent> _pendingIntents = new();
    private readonly Dictionary<(ushort Type, ulong Id), List<LinkedListNode<RecoveredIntent>>> _intents = new();
    private readonly Dictionary<ushort, int> _intentsLogged = new();
    private readonly Dictionary<ushort, int> _intentsFinished = new();
    private ulong _recoveryLsn;
    private long _currentRecordBlock;

    /// <param name="target">The device replayed into; its sector 0 must still be the superblock on disk.</param>
    public LogReplayer(IBlockDevice target, Superblock sb, Func<long, string, XfsCorruptionException> corrupt)
    {
        _target = target;
        _buffers = new BufferCache(target, new VolumeHealth(), 64L << 20);
        _stamper = new LsnStamper(sb);
        _sb = sb;
        _corrupt = corrupt;
        _lastSuperblock = new byte[LogArea.BBSize];
        target.Read(0, _lastSuperblock);
        _diskSuperblockLsn = sb.IsV5 ? new SuperblockView(_lastSuperblock).Lsn : 0;
    }

    public int TransactionsReplayed { get; private set; }
    public long BuffersReplayed { get; private set; }
    public long BuffersSkippedNewer { get; private set; }
    public long BuffersCancelled { get; private set; }
    public long InodesReplayed { get; private set; }
    public long InodesSkippedNewer { get; private set; }
    public long InodeChunksCreated { get; private set; }
    public long DquotsReplayed { get; private set; }
    /// <summary>Quota-off items between tail and head (pass 1; a switch-off logs two, its start and its end).</summary>
    public int QuotaOffItems { get; private set; }
    /// <summary>Logged dquots and dquot buffers not replayed because a quota-off item in the log switched their type off.</summary>
    public long DquotsSkippedQuotaOff { get; private set; }
    /// <summary>
    /// Test hook: when false, quota-off items are still counted but no longer stop dquots of their types from being
    /// replayed (what XfsWin did before honouring them); the quota-off scenario's tests use it to show that the
    /// comparison with the kernel catches the difference.
    /// </summary>
    internal bool HonourQuotaOff { get; init; } = true;
    public List<string> Warnings { get; } = new();

    /// <summary>Records the record currently being processed, for error messages.</summary>
    public long CurrentRecordBlock { set => _currentRecordBlock = value; }

    // ---------------------------------------------------------------- pass 1

    private readonly HashSet<(long Blkno, int Len)> _touched = new();

    public void CommitPass1(LogTransaction trans)
    {
        foreach (var item in trans.Items)
        {
            if (item.Type == LogItemType.QuotaOff)
            {
                NoteQuotaOff(trans, item);
                continue;
            }
            if (item.Type == LogItemType.Inode && item.Regions[0].Length is InodeLogFormat.Size or InodeLogFormat.Size32)
            {
                var inf = new InodeLogFormat(item.Regions[0]);
                if (inf.Blkno >= 0 && inf.Len > 0) _touched.Add((inf.Blkno, inf.Len));
                continue;
            }
            if (item.Type != LogItemType.Buf) continue;
            var f = CheckBufFormat(trans, item);
            if ((f.Flags & BufLogFormat.FlagCancel) == 0)
            {
                _touched.Add((f.Blkno, f.Len));
                if (f.Blkno == 0) FollowSuperblock(trans, item, f);
                continue;
            }
            var key = (f.Blkno, (int)f.Len);
            _cancelled[key] = _cancelled.GetValueOrDefault(key) + 1;
        }
    }

    // ---------------------------------------------------------------- quota accounting

    private const ushort UquotaAcct = 0x1, PquotaAcct = 0x8, GquotaAcct = 0x40;

    /// <summary>
    /// Whether dquots and dquot buffers are replayed. Invariant: the kernel replays them only when it is mounted
    /// with quota, i.e. when accounting was on for the mount that wrote the log; the superblock's quota flags say
    /// so, but the sector on disk may predate the log (accounting switched on by the mount that crashed: the new
    /// flags were logged, never written back). So the flags that count are those of the superblock as the log
    /// leaves it, known after pass 1 and used throughout pass 2.
    /// </summary>
    public bool QuotaAccounting => (new SuperblockView(_lastSuperblock).Qflags & (UquotaAcct | PquotaAcct | GquotaAcct)) != 0;

    /// <summary>Dquot types (d_type bits: user 1, project 2, group 4) some quota-off item in the log switched off.</summary>
    private byte _quotaOffTypes;

    /// <summary>
    /// The quota types switched off somewhere in the log, by name ("user", "group", "project"). Invariant, as in the
    /// kernel: pass 1 gathers them from every quota-off item between tail and head, whether it comes before or after
    /// a given dquot, and pass 2 replays no dquot item and no dquot buffer of those types (their quota file may have
    /// been truncated and its blocks reused since, and nothing reads those dquots again without a quotacheck).
    /// </summary>
    public IReadOnlyList<string> QuotaTypesOff =>
        new[] { (DquotTypeUser, "user"), (DquotTypeGroup, "group"), (DquotTypeProject, "project") }
            .Where(t => (_quotaOffTypes & t.Item1) != 0).Select(t => t.Item2).ToList();

    private const byte DquotTypeUser = 0x1, DquotTypeProject = 0x2, DquotTypeGroup = 0x4, DquotTypeMask = 0x7;

    /// <summary>
    /// xfs_qoff_logformat: u16 type, u16 size, u32 qf_flags (host order), padding. Its accounting bits name the
    /// types switched off. Only the first 8 bytes are read: Linux 5.10 logs 160 bytes (its whole in-memory item).
    /// </summary>
    private void NoteQuotaOff(LogTransaction trans, LogItem item)
    {
        var r0 = item.Regions[0];
        if (r0.Length < 8) throw Corrupt(trans, $"quota-off item of {r0.Length} bytes");
        uint flags = BinaryPrimitives.ReadUInt32LittleEndian(r0.AsSpan(4));
        if ((flags & UquotaAcct) != 0) _quotaOffTypes |= DquotTypeUser;
        if ((flags & GquotaAcct) != 0) _quotaOffTypes |= DquotTypeGroup;
        if ((flags & PquotaAcct) != 0) _quotaOffTypes |= DquotTypeProject;
        QuotaOffItems++;
    }

    /// <summary>Whether dquots of these types (d_type bits) are left alone because the log switched one of them off.</summary>
    private bool SwitchedOff(byte types) => HonourQuotaOff && (_quotaOffTypes & types) != 0;

    /// <summary>For the assembler's cancel pass: keep the data of superblock buffer items (daddr 0), which pass 1 follows.</summary>
    public static bool KeepsDataInPass1(ReadOnlySpan<byte> format) =>
        format.Length >= 2 && BinaryPrimitives.ReadUInt16LittleEndian(format) == LogItemType.Buf &&
        (format.Length < BufLogFormat.OffMapSize || BinaryPrimitives.ReadInt64LittleEndian(format[BufLogFormat.OffBlkno..]) == 0);

    /// <summary>Applies a logged superblock to the copy pass 1 keeps, unless (V5) the one on disk is not older, as pass 2 does.</summary>
    private void FollowSuperblock(LogTransaction trans, LogItem item, BufLogFormat f)
    {
        if (item.Regions.Count < item.Total) return;
        if (_diskSuperblockLsn != 0 && _diskSuperblockLsn != ulong.MaxValue && _diskSuperblockLsn >= trans.Lsn) return;
        var buf = new byte[Math.Max(f.Len << LogArea.BBShift, LogArea.BBSize)];
        _lastSuperblock.CopyTo(buf, 0);
        CopyRegions(trans, item, f, buf);
        buf.AsSpan(0, LogArea.BBSize).CopyTo(_lastSuperblock);
    }

    /// <summary>
    /// The metadata pass 2 will read, as device byte ranges sorted by offset, neighbours closer than
    /// <paramref name="gap"/> merged (up to <paramref name="maxRange"/> bytes each): the kernel's readahead.
    /// </summary>
    public List<(long Offset, long Length)> ReadAheadRanges(long gap = 256 * 1024, long maxRange = 4 << 20)
    {
        var sorted = _touched.Select(t => (Offset: t.Blkno << LogArea.BBShift, End: (t.Blkno + t.Len) << LogArea.BBShift))
            .Where(t => t.End <= _target.Length).OrderBy(t => t.Offset).ToList();
        var ranges = new List<(long, long)>();
        int i = 0;
        while (i < sorted.Count)
        {
            long start = sorted[i].Offset, end = sorted[i].End;
            int j = i + 1;
            while (j < sorted.Count && sorted[j].Offset - end <= gap && Math.Max(end, sorted[j].End) - start <= maxRange)
            {
                end = Math.Max(end, sorted[j].End);
                j++;
            }
            ranges.Add((start, end - start));
            i = j;
        }
        return ranges;
    }

    // ---------------------------------------------------------------- pass 2

    public void CommitPass2(LogTransaction trans)
    {
        // The kernel writes its delayed-write buffers (stamping LSN and CRC) whenever a commit with a new LSN arrives.
        if (trans.Lsn != _recoveryLsn)
        {
            FlushStamps();
            _recoveryLsn = trans.Lsn;
        }
        foreach (var item in Reorder(trans.Items)) ApplyItem(trans, item);
        TransactionsReplayed++;
    }

    /// <summary>
    /// Writes back every block replayed since the last LSN change (stamping LSN and CRC into the regular V5
    /// ones) and empties the cache; call once more at the end of pass 2, before anything reads the target.
    /// </summary>
    public void FlushStamps()
    {
        _buffers.Writeback();
        foreach (var buffer in _stampedInWindow) buffer.Lsn = 0;
        _stampedInWindow.Clear();
        _window.Clear();
        _buffers.Clear();
    }

    public void Dispose() => _buffers.Dispose();

    /// <summary>The write verifier of replayed regular V5 blocks: the LSN of the transaction that last replayed it, then the CRC (MetadataLsn.Stamp).</summary>
    private sealed class LsnStamper(Superblock sb) : IBufferWriteVerifier
    {
        public string Structure => "block replayed from the log";

        public VerifyResult PrepareForWrite(Span<byte> block, long byteOffset, ulong lsn)
        {
            if (lsn != 0) MetadataLsn.Stamp(block, sb, lsn);
            return VerifyResult.Ok;
        }
    }

    /// <summary>Locks the buffer of [offset, +length) for this replay (writing the window back first if another buffer of it overlaps).</summary>
    private MetadataBuffer LockBuffer(long offset, int length)
    {
        long end = offset + length;
        if (!_window.Contains((offset, end)))
        {
            // The window's ranges never overlap (an overlap flushes it), so only the range starting last at or
            // before this one, and any starting inside it, can overlap. An empty view's Min and Max are (0, 0).
            var before = _window.GetViewBetween((long.MinValue, long.MinValue), (offset, long.MaxValue)).Max;
            var inside = _window.GetViewBetween((offset, long.MinValue), (end - 1, long.MaxValue)).Min;
            bool overlaps = before.End > before.Start && before.End > offset || inside.End > inside.Start;
            if (overlaps) FlushStamps();
            _window.Add((offset, end));
        }
        // The stamper stamps only buffers given an LSN (regular V5 blocks); the rest are written as replayed.
        return _buffers.ReadForWrite(offset, length, 0, ReplayedBlock, _stamper, this);
    }

    /// <summary>Unlocks a buffer; what was logged in it is published and queued for writeback.</summary>
    private void UnlockBuffer(MetadataBuffer buffer) => _buffers.Unlock(buffer, this, commit: true);

    /// <summary>Intents never matched by a done item, counted by kind.</summary>
    public IReadOnlyDictionary<string, int> UnfinishedIntents()
    {
        var counts = new SortedDictionary<string, int>(StringComparer.Ordinal);
        foreach (var intent in _pendingIntents)
        {
            string name = LogItemType.Name(intent.Type);
            counts[name] = counts.GetValueOrDefault(name) + 1;
        }
        return counts;
    }

    /// <summary>The intents no done item finished, in log order, as the kernel's recovery queues them (r_dfops).</summary>
    public IReadOnlyList<RecoveredIntent> PendingIntents() => _pendingIntents.ToList();

    /// <summary>Intent items replayed (between tail and head), counted by kind.</summary>
    public IReadOnlyDictionary<string, int> IntentsLogged() => ByName(_intentsLogged);

    /// <summary>Of <see cref="IntentsLogged"/>, those a later done item in the log finished, by kind.</summary>
    public IReadOnlyDictionary<string, int> IntentsFinished() => ByName(_intentsFinished);

    private static SortedDictionary<string, int> ByName(Dictionary<ushort, int> counts) =>
        new(counts.ToDictionary(kv => LogItemType.Name(kv.Key), kv => kv.Value), StringComparer.Ordinal);

    /// <summary>xlog_recover_reorder_trans: buffers and icreates, then the rest, then inode buffers, then cancels.</summary>
    private static IEnumerable<LogItem> Reorder(List<LogItem> items)
    {
        var buffers = new List<LogItem>();
        var others = new List<LogItem>();
        var inodeBuffers = new List<LogItem>();
        var cancels = new List<LogItem>();
        foreach (var item in items)
        {
            switch (item.Type)
            {
                case LogItemType.Icreate:
                    buffers.Add(item);
                    break;
                case LogItemType.Buf:
                    ushort flags = item.Regions[0].Length >= 6 ? BinaryPrimitives.ReadUInt16LittleEndian(item.Regions[0].AsSpan(BufLogFormat.OffFlags)) : (ushort)0;
                    if ((flags & BufLogFormat.FlagCancel) != 0) cancels.Insert(0, item);
                    else if ((flags & BufLogFormat.FlagInodeBuf) != 0) inodeBuffers.Add(item);
                    else buffers.Add(item);
                    break;
                default:
                    others.Add(item);
                    break;
            }
        }
        return buffers.Concat(others).Concat(inodeBuffers).Concat(cancels);
    }

    private void ApplyItem(LogTransaction trans, LogItem item)
    {
        ushort type = item.Type;
        switch (type)
        {
            case LogItemType.Buf:
                ApplyBuffer(trans, item);
                return;
            case LogItemType.Inode:
                ApplyInode(trans, item);
                return;
            case LogItemType.Icreate:
                ApplyIcreate(trans, item);
                return;
            case LogItemType.Dquot:
                ApplyDquot(trans, item);
                return;
            case LogItemType.QuotaOff:
                return; // pass 1 only
        }
        if (IntentLogFormat.IsIntent(type))
        {
            string? bad = IntentLogFormat.CheckLength(type, item.Regions[0]);
            if (bad is not null) throw Corrupt(trans, bad);
            var key = (type, IntentLogFormat.Id(item.Regions[0]));
            var node = _pendingIntents.AddLast(new RecoveredIntent(type, key.Item2, trans.Lsn, item.Regions.ToArray()));
            if (!_intents.TryGetValue(key, out var nodes)) _intents[key] = nodes = new();
            nodes.Add(node);
            _intentsLogged[type] = _intentsLogged.GetValueOrDefault(type) + 1;
            return;
        }
        ushort intent = IntentLogFormat.IntentOf(type);
        if (intent != 0)
        {
            string? bad = IntentLogFormat.CheckLength(type, item.Regions[0]);
            if (bad is not null) throw Corrupt(trans, bad);
            // An EFD names its EFI by efd_efi_id at offset 8, like every other done item. One whose intent lies
            // before the tail finishes nothing.
            // Every pending intent of that type and id goes (xlog_recover_release_intent).
            if (_intents.Remove((intent, IntentLogFormat.Id(item.Regions[0])), out var finished))
            {
                foreach (var node in finished) _pendingIntents.Remove(node);
                _intentsFinished[intent] = _intentsFinished.GetValueOrDefault(intent) + finished.Count;
            }
            return;
        }
        throw Corrupt(trans, $"unrecognized log item type 0x{type:x4}");
    }

    private XfsCorruptionException Corrupt(LogTransaction trans, string problem) =>
        _corrupt(_currentRecordBlock, $"transaction 0x{trans.Tid:x8} (LSN {Lsn.Format(trans.Lsn)}): {problem}");

    private BufLogFormat CheckBufFormat(LogTransaction trans, LogItem item)
    {
        var r0 = item.Regions[0];
        if (r0.Length < BufLogFormat.OffDataMap) throw Corrupt(trans, $"buffer item format region is {r0.Length} bytes");
        var f = new BufLogFormat(r0);
        if (f.MapSize < 0 || f.MapSize > BufLogFormat.MaxMapWords || f.FormatLength > r0.Length)
            throw Corrupt(trans, $"buffer item bitmap of {f.MapSize} words does not fit its {r0.Length}-byte region");
        if (f.Len == 0) throw Corrupt(trans, "buffer item of length 0");
        long end = (f.Blkno + f.Len) << LogArea.BBShift;
        if (f.Blkno < 0 || end > _target.Length)
            throw Corrupt(trans, $"buffer item at daddr {f.Blkno} (+{f.Len}) is outside the data device");
        return f;
    }

    private bool IsCancelled(long blkno, int len) => _cancelled.ContainsKey((blkno, len));

    private void ApplyBuffer(LogTransaction trans, LogItem item)
    {
        var f = CheckBufFormat(trans, item);
        long blkno = f.Blkno;
        int len = f.Len;
        if ((f.Flags & BufLogFormat.FlagCancel) != 0)
        {
            var key = (blkno, len);
            if (_cancelled.TryGetValue(key, out int refs))
            {
                if (refs <= 1) _cancelled.Remove(key);
                else _cancelled[key] = refs - 1;
            }
            return;
        }
        if (IsCancelled(blkno, len))
        {
            BuffersCancelled++;
            return;
        }
        long offset = blkno << LogArea.BBShift;
        var buffer = LockBuffer(offset, len << LogArea.BBShift);
        try
        {
            ApplyBuffer(trans, item, f, buffer);
        }
        finally
        {
            UnlockBuffer(buffer);
        }
    }

    private void ApplyBuffer(LogTransaction trans, LogItem item, BufLogFormat f, MetadataBuffer buffer)
    {
        var buf = buffer.Contents;
        ulong lsn = MetadataLsn.BufferLsn(buf, _sb);
        if (lsn != 0 && lsn != ulong.MaxValue && lsn >= trans.Lsn)
        {
            BuffersSkippedNewer++;
            return;
        }
        if ((f.Flags & BufLogFormat.FlagInodeBuf) != 0)
        {
            ApplyInodeBuffer(trans, item, f, buf);
        }
        else if ((f.Flags & (BufLogFormat.FlagUserDquot | BufLogFormat.FlagProjectDquot | BufLogFormat.FlagGroupDquot)) != 0)
        {
            if (!QuotaAccounting) return;
            byte types = 0;
            if ((f.Flags & BufLogFormat.FlagUserDquot) != 0) types |= DquotTypeUser;
            if ((f.Flags & BufLogFormat.FlagProjectDquot) != 0) types |= DquotTypeProject;
            if ((f.Flags & BufLogFormat.FlagGroupDquot) != 0) types |= DquotTypeGroup;
            if (SwitchedOff(types))
            {
                DquotsSkippedQuotaOff++;
                return;
            }
            CopyRegions(trans, item, f, buf);
        }
        else
        {
            CopyRegions(trans, item, f, buf);
            if (_sb.IsV5)
            {
                if (buffer.Lsn == 0) _stampedInWindow.Add(buffer);
                buffer.Lsn = trans.Lsn;
            }
        }
        buffer.LogRange(0, buf.Length - 1);
        BuffersReplayed++;
        if (buffer.Offset == 0) AdoptReplayedGeometry(trans, buf);
    }

    /// <summary>
    /// xlog_recover_do_primary_sb_buffer: a replayed primary superblock carries the geometry every later item of
    /// the log was written with (growfs logs the new AG count and size), so replay goes on with it.
    /// </summary>
    private void AdoptReplayedGeometry(LogTransaction trans, byte[] buf)
    {
        if (new SuperblockView(buf).MagicNumber != SuperblockView.Magic)
            throw Corrupt(trans, "the replayed primary superblock has a bad magic number");
        var replayed = Superblock.Decode(buf);
        if (replayed.AgCount < _sb.AgCount)
            throw Corrupt(trans, $"the replayed superblock shrinks the AG count from {_sb.AgCount} to {replayed.AgCount}, which log recovery does not do");
        if (replayed.BlockSize != _sb.BlockSize || replayed.AgBlocks != _sb.AgBlocks || replayed.InodeSize != _sb.InodeSize)
            throw Corrupt(trans, "the replayed superblock changes the block, AG or inode size");
        _sb = replayed;
    }

    /// <summary>xlog_recover_do_reg_buffer: copy each run of dirty chunks, capped at its region's length.</summary>
    private void CopyRegions(LogTransaction trans, LogItem item, BufLogFormat f, byte[] buf)
    {
        int bits = f.MapSize * 32;
        int bit = 0, region = 1;
        while (true)
        {
            while (bit < bits && !f.IsChunkDirty(bit)) bit++;
            if (bit >= bits) break;
            int nbits = 0;
            while (bit + nbits < bits && f.IsChunkDirty(bit + nbits)) nbits++;
            if (region >= item.Regions.Count) throw Corrupt(trans, $"buffer daddr {f.Blkno}: bitmap names more regions than the {item.Regions.Count - 1} logged");
            var src = item.Regions[region];
            if (src.Length < nbits * BufLogFormat.ChunkSize) nbits = src.Length / BufLogFormat.ChunkSize;
            if (nbits == 0) throw Corrupt(trans, $"buffer daddr {f.Blkno}: region {region} is shorter than a chunk");
            int dst = bit * BufLogFormat.ChunkSize, n = nbits * BufLogFormat.ChunkSize;
            if (dst + n > buf.Length) throw Corrupt(trans, $"buffer daddr {f.Blkno}: dirty chunk {bit} lies beyond the {buf.Length}-byte buffer");
            src.AsSpan(0, n).CopyTo(buf.AsSpan(dst));
            region++;
            bit += nbits;
        }
    }

    /// <summary>xlog_recover_do_inode_buffer: only the di_next_unlinked fields inside logged chunks are copied.</summary>
    private void ApplyInodeBuffer(LogTransaction trans, LogItem item, BufLogFormat f, byte[] buf)
    {
        int inodeSize = _sb.InodeSize;
        int perBuf = buf.Length / inodeSize;
        int bits = f.MapSize * 32;
        int bit = 0, index = 0, regOffset = 0, regBytes = 0;
        for (int i = 0; i < perBuf; i++)
        {
            int field = i * inodeSize + DinodeView.OffNextUnlinked;
            while (field >= regOffset + regBytes)
            {
                while (bit < bits && !f.IsChunkDirty(bit)) bit++;
                if (bit >= bits) return;
                int n = 0;
                while (bit + n < bits && f.IsChunkDirty(bit + n)) n++;
                regOffset = bit * BufLogFormat.ChunkSize;
                regBytes = n * BufLogFormat.ChunkSize;
                bit += n;
                index++;
            }
            if (field < regOffset) continue;
            if (index >= item.Regions.Count || field - regOffset + 4 > item.Regions[index].Length)
                throw Corrupt(trans, $"inode buffer daddr {f.Blkno}: logged region {index} is too short");
            uint logged = BinaryPrimitives.ReadUInt32BigEndian(item.Regions[index].AsSpan(field - regOffset));
            if (logged == 0) throw Corrupt(trans, $"inode buffer daddr {f.Blkno}: logged di_next_unlinked of inode {i} is 0");
            BinaryPrimitives.WriteUInt32BigEndian(buf.AsSpan(field), logged);
            if (_sb.IsV5) XfsCrc.Stamp(buf.AsSpan(i * inodeSize, inodeSize), DinodeView.OffCrc);
        }
    }

    /// <summary>xlog_recover_inode_commit_pass2.</summary>
    private void ApplyInode(LogTransaction trans, LogItem item)
    {
        var r0 = item.Regions[0];
        if (r0.Length is not (InodeLogFormat.Size or InodeLogFormat.Size32))
            throw Corrupt(trans, $"inode item format region is {r0.Length} bytes");
        var f = new InodeLogFormat(r0);
        ulong ino = f.Ino;
        if (IsCancelled(f.Blkno, f.Len)) return;
        if (item.Regions.Count < 2) throw Corrupt(trans, $"inode {ino}: no inode core logged");
        int inodeSize = _sb.InodeSize;
        long clusterBytes = (long)f.Len << LogArea.BBShift;
        if (f.Blkno < 0 || f.Boffset < 0 || f.Boffset + inodeSize > clusterBytes || (f.Blkno << LogArea.BBShift) + clusterBytes > _target.Length)
            throw Corrupt(trans, $"inode {ino}: cluster buffer daddr {f.Blkno} (+{f.Len}), offset {f.Boffset} is out of range");
        var cluster = LockBuffer(f.Blkno << LogArea.BBShift, (int)clusterBytes);
        try
        {
            var dip = cluster.Contents.AsSpan(f.Boffset, inodeSize).ToArray();
            if (ApplyInode(trans, item, f, dip))
            {
                dip.CopyTo(cluster.Contents, f.Boffset);
                cluster.LogRange(f.Boffset, f.Boffset + inodeSize - 1);
            }
        }
        finally
        {
            UnlockBuffer(cluster);
        }
    }

    /// <summary>Replays an inode item into <paramref name="dip"/> (a copy of the inode from its cluster); false when it is skipped.</summary>
    private bool ApplyInode(LogTransaction trans, LogItem item, InodeLogFormat f, byte[] dip)
    {
        ulong ino = f.Ino;
        int inodeSize = _sb.InodeSize;
        var log = item.Regions[1];
        if (BinaryPrimitives.ReadUInt16BigEndian(dip) != DinodeView.Magic)
            throw Corrupt(trans, $"inode {ino}: the on-disk inode at daddr {f.Blkno} +{f.Boffset} has no IN magic");
        if (log.Length < LogDinode.SizeV2 || LogDinode.Magic(log) != DinodeView.Magic)
            throw Corrupt(trans, $"inode {ino}: the logged inode core has no IN magic");

        if (dip[DinodeView.OffVersion] >= 3)
        {
            ulong diskLsn = BinaryPrimitives.ReadUInt64BigEndian(dip.AsSpan(DinodeView.OffLsn));
            if (diskLsn != 0 && diskLsn != ulong.MaxValue && diskLsn > trans.Lsn)
            {
                InodesSkippedNewer++;
                return false;
            }
        }
        else
        {
            // V4: replay unless the logged flush counter is older than the one on disk.
            ushort diskIter = BinaryPrimitives.ReadUInt16BigEndian(dip.AsSpan(30));
            ushort logIter = BinaryPrimitives.ReadUInt16LittleEndian(log.AsSpan(30));
            if (logIter < diskIter && !(diskIter == ushort.MaxValue && logIter < ushort.MaxValue >> 1))
            {
                InodesSkippedNewer++;
                return false;
            }
        }

        ushort mode = LogDinode.Mode(log);
        byte format = LogDinode.Format(log);
        const ushort S_IFMT = 0xF000, S_IFREG = 0x8000, S_IFDIR = 0x4000;
        if ((mode & S_IFMT) == S_IFREG && format is not ((byte)ForkFormat.Extents or (byte)ForkFormat.Btree))
            throw Corrupt(trans, $"inode {ino}: regular file with data fork format {format}");
        if ((mode & S_IFMT) == S_IFDIR && format is not ((byte)ForkFormat.Extents or (byte)ForkFormat.Btree or (byte)ForkFormat.Local))
            throw Corrupt(trans, $"inode {ino}: directory with data fork format {format}");
        if (LogDinode.DataExtents(log) + LogDinode.AttrExtents(log) > LogDinode.Nblocks(log))
            throw Corrupt(trans, $"inode {ino}: more extents than blocks");
        if (LogDinode.ForkOffset(log) * 8 > inodeSize)
            throw Corrupt(trans, $"inode {ino}: fork offset {LogDinode.ForkOffset(log)} beyond the inode");
        int coreSize = _sb.IsV5 ? LogDinode.SizeV3 : LogDinode.SizeV2;
        if (log.Length > coreSize) throw Corrupt(trans, $"inode {ino}: logged core of {log.Length} bytes (at most {coreSize})");

        LogDinode.ToDisk(log, dip, trans.Lsn);
        int dataFork = dip[DinodeView.OffVersion] >= 3 ? DinodeView.V3CoreSize : DinodeView.V2CoreSize;
        int forkoff = dip[DinodeView.OffForkoff] << 3;
        int dsize = forkoff != 0 ? forkoff : inodeSize - dataFork;
        int attrFork = dataFork + forkoff;
        int asize = forkoff != 0 ? inodeSize - attrFork : 0;

        uint fields = f.Fields;
        if ((fields & InodeLogFormat.FieldDev) != 0) BinaryPrimitives.WriteUInt32BigEndian(dip.AsSpan(dataFork), f.Rdev);

        int next = 2;
        if (f.RegionCount > 2 && (fields & InodeLogFormat.DataForkContentMask) != 0)
        {
            if (next >= item.Regions.Count) throw Corrupt(trans, $"inode {ino}: data fork region missing");
            var src = item.Regions[next++];
            switch (fields & InodeLogFormat.DataForkContentMask)
            {
                case InodeLogFormat.FieldDdata:
                case InodeLogFormat.FieldDext:
                    if (src.Length > dsize) throw Corrupt(trans, $"inode {ino}: data fork of {src.Length} bytes exceeds {dsize}");
                    src.CopyTo(dip.AsSpan(dataFork));
                    break;
                case InodeLogFormat.FieldDbroot:
                    BtreeRootToDisk(trans, ino, src, dip.AsSpan(dataFork, dsize));
                    break;
                default:
                    throw Corrupt(trans, $"inode {ino}: conflicting data fork flags 0x{fields:x}");
            }
        }
        if ((fields & InodeLogFormat.AttrForkMask) != 0 && f.RegionCount > next)
        {
            if (next >= item.Regions.Count) throw Corrupt(trans, $"inode {ino}: attribute fork region missing");
            var src = item.Regions[next];
            if (asize == 0) throw Corrupt(trans, $"inode {ino}: attribute fork logged but the inode has none");
            switch (fields & InodeLogFormat.AttrForkMask)
            {
                case InodeLogFormat.FieldAdata:
                case InodeLogFormat.FieldAext:
                    if (src.Length > asize) throw Corrupt(trans, $"inode {ino}: attribute fork of {src.Length} bytes exceeds {asize}");
                    src.CopyTo(dip.AsSpan(attrFork));
                    break;
                case InodeLogFormat.FieldAbroot:
                    BtreeRootToDisk(trans, ino, src, dip.AsSpan(attrFork, asize));
                    break;
                default:
                    throw Corrupt(trans, $"inode {ino}: conflicting attribute fork flags 0x{fields:x}");
            }
        }
        if ((fields & (InodeLogFormat.FieldDowner | InodeLogFormat.FieldAowner)) != 0 && BinaryPrimitives.ReadUInt16BigEndian(dip.AsSpan(DinodeView.OffMode)) != 0)
            Warnings.Add($"inode {ino}: a btree owner change (extent swap) was logged; its bmbt blocks' owner fields are left as they are");

        if (dip[DinodeView.OffVersion] >= 3) XfsCrc.Stamp(dip, DinodeView.OffCrc);
        InodesReplayed++;
        return true;
    }

    /// <summary>xfs_bmbt_to_bmdr: the in-memory long-form root (full block header) to the on-disk fork root.</summary>
    private void BtreeRootToDisk(LogTransaction trans, ulong ino, byte[] src, Span<byte> fork)
    {
        int hdr = _sb.IsV5 ? 72 : 24;
        if (src.Length < hdr || fork.Length < BmdrBlockView.HeaderSize + 16)
            throw Corrupt(trans, $"inode {ino}: logged btree root of {src.Length} bytes");
        ushort level = BinaryPrimitives.ReadUInt16BigEndian(src.AsSpan(BtreeBlockView.OffLevel));
        ushort numrecs = BinaryPrimitives.ReadUInt16BigEndian(src.AsSpan(BtreeBlockView.OffNumrecs));
        int maxrecs = (src.Length - hdr) / 16;
        int dmxr = (fork.Length - BmdrBlockView.HeaderSize) / 16;
        if (numrecs > maxrecs || numrecs > dmxr) throw Corrupt(trans, $"inode {ino}: btree root with {numrecs} records does not fit");
        // Slots past numrecs keep whatever the fork held before, as in the kernel (it copies only what is used).
        BinaryPrimitives.WriteUInt16BigEndian(fork, level);
        BinaryPrimitives.WriteUInt16BigEndian(fork[2..], numrecs);
        src.AsSpan(hdr, numrecs * 8).CopyTo(fork[BmdrBlockView.HeaderSize..]);
        src.AsSpan(hdr + maxrecs * 8, numrecs * 8).CopyTo(fork[(BmdrBlockView.HeaderSize + dmxr * 8)..]);
    }

    /// <summary>xlog_recover_icreate_commit_pass2 + xfs_ialloc_inode_init: write a fresh inode chunk.</summary>
    private void ApplyIcreate(LogTransaction trans, LogItem item)
    {
        var r0 = item.Regions[0];
        if (r0.Length != IcreateLogFormat.Size) throw Corrupt(trans, $"icreate item of {r0.Length} bytes");
        var ic = new IcreateLogFormat(r0);
        if (ic.Ag >= _sb.AgCount || ic.Agbno == 0 || ic.Agbno >= _sb.AgBlocks || ic.Length == 0 || ic.Agbno + ic.Length > _sb.AgBlocks)
            throw Corrupt(trans, $"icreate item names AG {ic.Ag} block {ic.Agbno} (+{ic.Length}) outside the file system");
        if (ic.Isize != _sb.InodeSize) throw Corrupt(trans, $"icreate inode size {ic.Isize} differs from the superblock's {_sb.InodeSize}");
        if (ic.Count >> _sb.InoPBlog != ic.Length) throw Corrupt(trans, $"icreate count {ic.Count} does not fill {ic.Length} blocks");

        // Skip only when every cluster of the chunk was cancelled.
        int clusterBlocks = Math.Max(1, InodeClusterBytes() / (int)_sb.BlockSize);
        int clusters = (int)Math.Max(1, ic.Length / (uint)clusterBlocks);
        int cancelled = 0;
        long chunkByte = _sb.AgBlockToByte(ic.Ag, ic.Agbno);
        int clusterBB = clusterBlocks * (int)_sb.BlockSize >> LogArea.BBShift;
        for (int c = 0; c < clusters; c++)
        {
            long daddr = (chunkByte >> LogArea.BBShift) + (long)c * clusterBB;
            if (IsCancelled(daddr, clusterBB)) cancelled++;
        }
        if (cancelled == clusters) return;

        int inodeSize = _sb.InodeSize;
        var chunk = new byte[checked((int)ic.Length * (int)_sb.BlockSize)];
        ulong firstIno = ((ulong)ic.Ag << _sb.AgInoLog) | ((ulong)ic.Agbno << _sb.InoPBlog);
        byte version = (byte)(_sb.IsV5 ? 3 : 2);
        for (int i = 0; i < ic.Count; i++)
        {
            var d = chunk.AsSpan(i * inodeSize, inodeSize);
            BinaryPrimitives.WriteUInt16BigEndian(d, DinodeView.Magic);
            d[DinodeView.OffVersion] = version;
            BinaryPrimitives.WriteUInt32BigEndian(d[DinodeView.OffGen..], ic.Gen);
            BinaryPrimitives.WriteUInt32BigEndian(d[DinodeView.OffNextUnlinked..], AgiView.NullAgino);
            if (version == 3)
            {
                BinaryPrimitives.WriteUInt64BigEndian(d[DinodeView.OffIno..], firstIno + (ulong)i);
                _sb.MetaUuid.TryWriteBytes(d.Slice(DinodeView.OffUuid, 16), bigEndian: true, out _);
                XfsCrc.Stamp(d, DinodeView.OffCrc);
            }
        }
        // Cluster by cluster, as xfs_ialloc_inode_init gets each cluster's buffer.
        int clusterBytes = clusterBlocks * (int)_sb.BlockSize;
        for (int off = 0; off < chunk.Length; off += clusterBytes)
        {
            int n = Math.Min(clusterBytes, chunk.Length - off);
            var cluster = LockBuffer(chunkByte + off, n);
            try
            {
                chunk.AsSpan(off, n).CopyTo(cluster.Contents);
                cluster.LogRange(0, n - 1);
            }
            finally
            {
                UnlockBuffer(cluster);
            }
        }
        InodeChunksCreated++;
    }

    /// <summary>Inode cluster size: 8 KiB scaled by inode size on V5 (inode_cluster_size), at least a block.</summary>
    private int InodeClusterBytes()
    {
        int size = 8192;
        if (_sb.IsV5) size = size * _sb.InodeSize / 256;
        return Math.Max(size, (int)_sb.BlockSize);
    }

    /// <summary>
    /// xlog_recover_dquot_commit_pass2: replayed only when quota accounting is on (<see cref="QuotaAccounting"/>)
    /// and no quota-off item in the log switched the dquot's type off (<see cref="QuotaTypesOff"/>).
    /// Invariant: only the logged xfs_disk_dquot and (V5) the dqblk CRC change. Unlike buffers, inodes and the
    /// kernel's own dquot flushes, recovery leaves dd_lsn and the UUID of the dqblk as they are on disk; the kernel
    /// stamps dd_lsn only when it later flushes a dquot it changed itself.
    /// </summary>
    private void ApplyDquot(LogTransaction trans, LogItem item)
    {
        if (!QuotaAccounting) return;
        var r0 = item.Regions[0];
        if (r0.Length < DquotLogFormat.Size || item.Regions.Count < 2) throw Corrupt(trans, "dquot item is too short");
        var q = new DquotLogFormat(r0);
        var src = item.Regions[1];
        if (src.Length < DquotLogFormat.DiskDquotSize) throw Corrupt(trans, $"dquot {q.Id}: logged dquot of {src.Length} bytes");
        // Like the kernel, before any other check of the logged dquot: a type switched off is not looked at.
        if (SwitchedOff((byte)(src[DquotLogFormat.OffDiskType] & DquotTypeMask)))
        {
            DquotsSkippedQuotaOff++;
            return;
        }
        int size = _sb.IsV5 ? DquotLogFormat.DqblkSize : DquotLogFormat.DiskDquotSize;
        if (src.Length > size) throw Corrupt(trans, $"dquot {q.Id}: logged dquot of {src.Length} bytes is larger than a dquot block entry");
        if (BinaryPrimitives.ReadUInt16BigEndian(src) != DquotLogFormat.Magic || src[DquotLogFormat.OffVersion] != DquotLogFormat.Version ||
            BinaryPrimitives.ReadUInt32BigEndian(src.AsSpan(DquotLogFormat.OffDiskId)) != q.Id)
            throw Corrupt(trans, $"dquot {q.Id}: the logged dquot has no DQ magic, a bad version or another id");
        if (IsCancelled(q.Blkno, (int)(_sb.BlockSize >> LogArea.BBShift) * q.Len)) return;
        long offset = (q.Blkno << LogArea.BBShift) + q.Boffset;
        if (q.Blkno < 0 || q.Boffset < 0 || offset + size > _target.Length) throw Corrupt(trans, $"dquot {q.Id} at daddr {q.Blkno} is out of range");
        long bufferOffset = q.Blkno << LogArea.BBShift;
        int bufferLength = checked((int)_sb.BlockSize * Math.Max(1, q.Len));
        if (q.Boffset + size > bufferLength || bufferOffset + bufferLength > _target.Length)
            throw Corrupt(trans, $"dquot {q.Id}: buffer daddr {q.Blkno} (+{q.Len} blocks), offset {q.Boffset} is out of range");
        var buffer = LockBuffer(bufferOffset, bufferLength);
        try
        {
            var dq = buffer.Contents.AsSpan(q.Boffset, size);
            if (_sb.IsV5)
            {
                ulong lsn = BinaryPrimitives.ReadUInt64BigEndian(dq[DquotLogFormat.DqblkOffLsn..]);
                if (lsn != 0 && lsn != ulong.MaxValue && lsn >= trans.Lsn) return;
            }
            src.CopyTo(dq);
            if (_sb.IsV5) XfsCrc.Stamp(dq, DquotLogFormat.DqblkOffCrc);
            buffer.LogRange(q.Boffset, q.Boffset + size - 1);
        }
        finally
        {
            UnlockBuffer(buffer);
        }
        DquotsReplayed++;
    }
}

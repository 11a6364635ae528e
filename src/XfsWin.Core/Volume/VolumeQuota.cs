using System.Buffers.Binary;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

/// <summary>
/// The dquots of a read-write volume with quota accounting on, kept as the kernel keeps them (xfs_dquot.c,
/// xfs_trans_dquot.c, xfs_qm.c): every transaction's changes of inode use, ownership and block counts reach the
/// user, group and project dquots of the inodes' owners as count deltas (<see cref="Transaction.ChargeInode"/>);
/// <see cref="Apply"/> adds them to d_bcount and d_icount (realtime counts untouched), fills unset limits from the
/// type's defaults (the id 0 dquot's limits) and starts or clears the grace timers (the id 0 dquot's grace periods,
/// else 7 days), as the kernel does whether limits are enforced or not, and logs each changed dquot as a dquot item
/// of the committing part. A dquot a change is about to charge for the first time is created beforehand
/// (<see cref="Prepare"/>, the kernel's xfs_qm_dqread with allocation): its quota file block, a chunk of
/// block size / 136 dquots, is allocated in its own transaction and initialised through the log as
/// xfs_qm_init_dquot_blk does.
/// <para>
/// Enforcement (xfs_trans_dqresv): before a change that adds blocks or inodes, <see cref="Reserve"/> checks what the
/// change may add (the kernel's reservation for it) against each dquot of a type whose limits the superblock says are
/// enforced: past a hard limit, or past a soft limit whose grace timer has expired, the change is refused before
/// anything is written (EDQUOT for users and groups, ENOSPC for projects). The id 0 dquots are never enforced (they
/// hold the defaults); a dquot without a limit of its own takes the type's default. All calls come with the
/// volume's change lock held exclusively, one change at a time, so the dquots' committed counts are all that is
/// reserved besides the change being checked.
/// </para>
/// <para>
/// Invariants: the in-core dquots are never dropped while the volume is open, so a dquot not in core is as the quota
/// file held it at open (or as its chunk was initialised); every change of an in-core dquot is a logged dquot item,
/// written in place only after its checkpoint (<see cref="DquotLogItem"/>). The sb_qflags checked bits are not
/// touched: counts stay exact, so the kernel's next mount trusts them without a quotacheck. All calls come with the
/// volume's change lock held exclusively.
/// </para>
/// </summary>
internal sealed class VolumeQuota : IDquotAccounting
{
    // sb_qflags accounting and enforcement bits (V4 superblocks share one enforcement bit between group and project).
    private const ushort UquotaAcct = 0x0001, PquotaAcct = 0x0008, GquotaAcct = 0x0040;
    private const ushort UquotaEnfd = 0x0002, OquotaEnfd = 0x0010, GquotaEnfd = 0x0080, PquotaEnfd = 0x0200;
    private const ushort AccountingFlags = UquotaAcct | PquotaAcct | GquotaAcct;
    /// <summary>XFS_QM_BTIMELIMIT, ITIMELIMIT and RTBTIMELIMIT: the grace period when the id 0 dquot sets none.</summary>
    private const long DefaultGrace = 7 * 24 * 60 * 60;
    private const int VerifierKind = 41;

    private readonly MountContext _mount;
    private readonly Superblock _sb;
    private readonly InodeCache _inodes;
    private readonly ExtentMapCache _maps;
    private readonly Dictionary<DquotKey, Dquot> _dquots = new();
    private readonly Dictionary<byte, Defaults> _defaults = new();

    private sealed class Dquot(byte[] record, long blockDaddr, int offset)
    {
        /// <summary>The committed xfs_dqblk image (never changed in place: a change makes a new array).</summary>
        public byte[] Record = record;
        public readonly long BlockDaddr = blockDaddr;
        public readonly int Offset = offset;
    }

    /// <summary>xfs_def_quota: the limits and grace periods the id 0 dquot of a type sets.</summary>
    private sealed record Defaults(ulong BlkHard, ulong BlkSoft, ulong InoHard, ulong InoSoft, ulong RtbHard, ulong RtbSoft,
        long BlkGrace, long InoGrace, long RtbGrace);

    private VolumeQuota(MountContext mount, InodeCache inodes, ExtentMapCache maps, byte types, byte enforced, ulong userFile, ulong groupFile, ulong projectFile)
    {
        _mount = mount;
        _sb = mount.Superblock;
        _inodes = inodes;
        _maps = maps;
        Types = types;
        Enforced = enforced;
        _userFile = userFile;
        _groupFile = groupFile;
        _projectFile = projectFile;
    }

    public byte Types { get; }

    /// <summary>The accounted types whose limits are enforced (d_type bits).</summary>
    public byte Enforced { get; }

    private ulong FileOf(byte type) => type switch
    {
        DquotView.TypeUser => _userFile,
        DquotView.TypeGroup => _groupFile,
        _ => _projectFile,
    };

    private readonly ulong _userFile, _groupFile, _projectFile;

    /// <summary>
    /// The accounting of the volume whose primary superblock sector is <paramref name="sector"/>, or null when no quota
    /// type is accounted; the quota files are those the superblock names.
    /// </summary>
    public static VolumeQuota? Create(ReadOnlySpan<byte> sector, MountContext mount, InodeCache inodes, ExtentMapCache maps)
    {
        var view = new SuperblockView(sector);
        ushort q = view.Qflags;
        if ((q & AccountingFlags) == 0 || (view.VersionNum & SuperblockFeatures.VersionQuota) == 0) return null;
        static bool Valid(ulong ino) => ino != 0 && ino != ulong.MaxValue;
        byte types = 0;
        if ((q & UquotaAcct) != 0 && Valid(view.UquotIno)) types |= DquotView.TypeUser;
        if ((q & GquotaAcct) != 0 && Valid(view.GquotIno)) types |= DquotView.TypeGroup;
        if ((q & PquotaAcct) != 0 && Valid(view.PquotIno)) types |= DquotView.TypeProject;
        if (types == 0) return null;
        // xfs_sb_quota_from_disk: a V4 superblock's one "other" enforcement bit is the project's or the group's,
        // whichever is accounted; V5 superblocks have a bit per type.
        byte enforced = 0;
        if ((q & UquotaEnfd) != 0) enforced |= DquotView.TypeUser;
        if (mount.Superblock.IsV5)
        {
            if ((q & GquotaEnfd) != 0) enforced |= DquotView.TypeGroup;
            if ((q & PquotaEnfd) != 0) enforced |= DquotView.TypeProject;
        }
        else if ((q & OquotaEnfd) != 0)
        {
            enforced |= (q & PquotaAcct) != 0 ? DquotView.TypeProject : (q & GquotaAcct) != 0 ? DquotView.TypeGroup : (byte)0;
        }
        return new VolumeQuota(mount, inodes, maps, types, (byte)(enforced & types), view.UquotIno, view.GquotIno, view.PquotIno);
    }

    public bool Accounts(ulong ino) => ino != _userFile && ino != _groupFile && ino != _projectFile;

    private int PerBlock => DquotView.PerBlock(_sb.BlockSize);

    private static IEnumerable<byte> AllTypes => [DquotView.TypeUser, DquotView.TypeGroup, DquotView.TypeProject];

    /// <summary>
    /// Makes sure the dquots of <paramref name="uid"/>, <paramref name="gid"/> and <paramref name="projectId"/> exist
    /// (for the accounted types), allocating and initialising the quota file blocks of those that do not, each in its own
    /// transaction from <paramref name="begin"/>. Call before the transaction that charges them, never inside one.
    /// </summary>
    public void Prepare(Func<Transaction> begin, IFileSpace space, uint uid, uint gid, uint projectId)
    {
        foreach (byte type in AllTypes)
        {
            if ((Types & type) == 0) continue;
            uint id = type switch { DquotView.TypeUser => uid, DquotView.TypeGroup => gid, _ => projectId };
            if (Find(new DquotKey(type, id)) is null) Allocate(begin, space, type, id);
        }
    }

    /// <summary>
    /// xfs_trans_reserve_quota_bydquots: refuses a change that may add <paramref name="blocks"/> blocks and
    /// <paramref name="inodes"/> inodes to the dquots of <paramref name="uid"/>, <paramref name="gid"/> and
    /// <paramref name="projectId"/> when, for an enforced type (users first, then groups, then projects), the dquot's
    /// count plus that would pass its hard limit, or pass its soft limit after its grace timer expired (xfs_dqresv_check);
    /// <paramref name="freedBlocks"/> are blocks the change frees before it allocates (taken off the count first).
    /// Limits of 0 take the type's defaults (the id 0 dquot's). Only the types in <paramref name="types"/> are checked
    /// (a chown reserves against the dquots it moves the file to). Throws <see cref="XfsError.QuotaExceeded"/> (users
    /// and groups) or <see cref="XfsError.NoSpace"/> (projects, as the kernel answers); changes nothing.
    /// </summary>
    public void Reserve(uint uid, uint gid, uint projectId, long blocks, long inodes, long freedBlocks = 0, byte types = DquotView.TypeMask)
    {
        if ((Enforced & types) == 0 || blocks <= 0 && inodes <= 0) return;
        long now = XfsVolume.SystemNow().Seconds;
        foreach (byte type in AllTypes)
        {
            if ((Enforced & types & type) == 0) continue;
            uint id = type switch { DquotView.TypeUser => uid, DquotView.TypeGroup => gid, _ => projectId };
            // The id 0 dquot holds the defaults; it is counted but never enforced.
            if (id == 0) continue;
            var defaults = DefaultsOf(type);
            var record = Find(new DquotKey(type, id))?.Record;
            ulong Count(int offset) => record is null ? 0 : DquotRecord.U64(record, offset);
            ulong Limit(int offset, ulong fallback) => record is not null && DquotRecord.U64(record, offset) is ulong own and not 0 ? own : fallback;
            long Timer(int offset)
            {
                if (record is null) return 0;
                uint stored = DquotRecord.U32(record, offset);
                return (record[DquotView.OffType] & DquotView.TypeBigtime) != 0 ? (long)stored << 2 : stored;
            }
            ulong blockCount = Count(DquotView.OffBcount);
            blockCount = freedBlocks > 0 ? blockCount - Math.Min(blockCount, (ulong)freedBlocks) : blockCount;
            string? why = Exceeds(blockCount, blocks, Limit(DquotView.OffBlkSoftlimit, defaults.BlkSoft), Limit(DquotView.OffBlkHardlimit, defaults.BlkHard),
                    Timer(DquotView.OffBtimer), now, "block")
                ?? Exceeds(Count(DquotView.OffIcount), inodes, Limit(DquotView.OffInoSoftlimit, defaults.InoSoft), Limit(DquotView.OffInoHardlimit, defaults.InoHard),
                    Timer(DquotView.OffItimer), now, "inode");
            if (why is null) continue;
            throw new XfsException(type == DquotView.TypeProject ? XfsError.NoSpace : XfsError.QuotaExceeded,
                $"the {TypeName(type)} quota of id {id} is exceeded: {why}. Nothing was changed.");
        }
    }

    /// <summary>xfs_dqresv_check: why adding <paramref name="delta"/> to <paramref name="count"/> is refused, or null.</summary>
    private static string? Exceeds(ulong count, long delta, ulong soft, ulong hard, long timer, long now, string what)
    {
        if (delta <= 0) return null;
        ulong total = count + (ulong)delta;
        if (hard != 0 && total > hard) return $"{count} {what}s used and {delta} more needed pass the hard limit of {hard}";
        if (soft != 0 && total > soft && timer != 0 && now > timer)
            return $"{count} {what}s used and {delta} more needed pass the soft limit of {soft}, whose grace period has expired";
        return null;
    }

    /// <summary>The in-core dquot of <paramref name="key"/>, read from its quota file block when first asked for; null when that block is a hole.</summary>
    private Dquot? Find(DquotKey key)
    {
        if (_dquots.TryGetValue(key, out var dq)) return dq;
        ulong file = FileOf(key.Type);
        var quotaInode = _inodes.Get(file);
        ulong fileBlock = key.Id / (ulong)PerBlock;
        var map = _maps.Get(quotaInode, ForkKind.Data);
        if (!map.TryFind(fileBlock, out var extent, out _) || extent.Unwritten) return null;
        ulong fsb = extent.StartBlock + (fileBlock - extent.FileOffset);
        if (!_sb.IsValidFsb(fsb)) throw new XfsCorruptionException($"quota file (inode {file})", quotaInode.ByteOffset, $"block {fileBlock} maps outside the volume");
        long offset = _sb.FsbToByte(fsb);
        var block = _mount.Buffers.Read(offset, (int)_sb.BlockSize, file, new DquotBlockVerifier());
        int at = (int)(key.Id % (uint)PerBlock) * DquotView.Size;
        var record = block.AsSpan(at, DquotView.Size);
        var verdict = DquotView.Verify(record, key.Type, key.Id, _sb);
        if (!verdict.IsOk) throw new XfsCorruptionException($"dquot of {TypeName(key.Type)} id {key.Id}", offset + at, verdict.ToString());
        dq = new Dquot(record.ToArray(), offset >> LogArea.BBShift, at);
        _dquots.Add(key, dq);
        return dq;
    }

    private static string TypeName(byte type) => type switch { DquotView.TypeUser => "user", DquotView.TypeGroup => "group", _ => "project" };

    /// <summary>
    /// xfs_dquot_disk_alloc: one block mapped into the quota file at the dquot's chunk, its dquots initialised and the
    /// whole block logged as a dquot buffer, in one transaction (the quota file's own blocks are charged to no one).
    /// </summary>
    private void Allocate(Func<Transaction> begin, IFileSpace space, byte type, uint id)
    {
        ulong file = FileOf(type);
        ulong fileBlock = id / (ulong)PerBlock;
        int blockSize = (int)_sb.BlockSize;
        using var tx = begin();
        var quotaInode = new InodeUpdate(_inodes.Get(file), _sb);
        var editor = new ExtentMapEditor(tx, quotaInode, space);
        editor.AllocateHoles(fileBlock, 1, unwritten: false);
        if (!editor.TryMap(fileBlock, out var extent) || extent.Unwritten)
            throw new InvalidOperationException($"quota file {file}: block {fileBlock} unmapped after allocation");
        editor.Save();
        long offset = _sb.FsbToByte(extent.StartBlock + (fileBlock - extent.FileOffset));
        var bufType = type switch { DquotView.TypeUser => BufType.UserDquot, DquotView.TypeGroup => BufType.GroupDquot, _ => BufType.ProjectDquot };
        var buffer = tx.GetNew(offset, blockSize, VerifierKind, file, null, bufType);
        uint firstId = (uint)(fileBlock * (ulong)PerBlock);
        var contents = buffer.Contents.AsSpan();
        for (int i = 0; i < PerBlock && firstId + (ulong)i <= uint.MaxValue; i++)
            DquotRecord.Init(contents.Slice(i * DquotView.Size, DquotView.Size), type, firstId + (uint)i, _sb);
        tx.LogRange(buffer, 0, blockSize - 1);
        quotaInode.Log(tx, _inodes);
        int at = (int)(id % (uint)PerBlock) * DquotView.Size;
        var record = contents.Slice(at, DquotView.Size).ToArray();
        tx.Commit();
        _dquots[new DquotKey(type, id)] = new Dquot(record, offset >> LogArea.BBShift, at);
    }

    public void Apply(Transaction tx, IReadOnlyDictionary<DquotKey, DquotDelta> deltas)
    {
        long now = XfsVolume.SystemNow().Seconds;
        foreach (var (key, delta) in deltas.OrderBy(d => d.Key.Type).ThenBy(d => d.Key.Id))
        {
            if (delta.Blocks == 0 && delta.Inodes == 0) continue;
            var dq = Find(key) ?? throw new InvalidOperationException(
                $"the {TypeName(key.Type)} dquot of id {key.Id} was charged before it was created in the quota file");
            var old = dq.Record;
            var record = (byte[])old.Clone();
            var r = record.AsSpan();
            // Counts never go below zero (the kernel asserts it; a quotacheck the flags ask for repairs any such drift).
            static ulong Add(ulong count, long delta) => delta < 0 && (ulong)(-delta) > count ? 0 : (ulong)((long)count + delta);
            DquotRecord.SetU64(r, DquotView.OffBcount, Add(DquotRecord.U64(r, DquotView.OffBcount), delta.Blocks));
            DquotRecord.SetU64(r, DquotView.OffIcount, Add(DquotRecord.U64(r, DquotView.OffIcount), delta.Inodes));
            if (key.Id != 0)
            {
                var defaults = DefaultsOf(key.Type);
                AdjustLimits(r, defaults);
                AdjustTimer(r, DquotView.OffBcount, DquotView.OffBlkSoftlimit, DquotView.OffBlkHardlimit, DquotView.OffBtimer, now + defaults.BlkGrace);
                AdjustTimer(r, DquotView.OffIcount, DquotView.OffInoSoftlimit, DquotView.OffInoHardlimit, DquotView.OffItimer, now + defaults.InoGrace);
                AdjustTimer(r, DquotView.OffRtbcount, DquotView.OffRtbSoftlimit, DquotView.OffRtbHardlimit, DquotView.OffRtbtimer, now + defaults.RtbGrace);
            }
            // xfs_dquot_to_disk: warning counts and padding are written as zero.
            BinaryPrimitives.WriteUInt16BigEndian(r[DquotView.OffIwarns..], 0);
            BinaryPrimitives.WriteUInt16BigEndian(r[DquotView.OffBwarns..], 0);
            BinaryPrimitives.WriteUInt32BigEndian(r[68..], 0);
            BinaryPrimitives.WriteUInt16BigEndian(r[DquotView.OffRtbwarns..], 0);
            BinaryPrimitives.WriteUInt16BigEndian(r[102..], 0);
            dq.Record = record;
            tx.OnCancel(() => dq.Record = old);
            tx.Log(new DquotLogItem(key.Type, key.Id, dq.BlockDaddr, dq.Offset, record));
        }
    }

    /// <summary>xfs_qm_adjust_dqlimits: unset limits take the type's defaults.</summary>
    private static void AdjustLimits(Span<byte> r, Defaults d)
    {
        static void Fill(Span<byte> r, int offset, ulong value)
        {
            if (DquotRecord.U64(r, offset) == 0 && value != 0) DquotRecord.SetU64(r, offset, value);
        }
        Fill(r, DquotView.OffBlkSoftlimit, d.BlkSoft);
        Fill(r, DquotView.OffBlkHardlimit, d.BlkHard);
        Fill(r, DquotView.OffInoSoftlimit, d.InoSoft);
        Fill(r, DquotView.OffInoHardlimit, d.InoHard);
        Fill(r, DquotView.OffRtbSoftlimit, d.RtbSoft);
        Fill(r, DquotView.OffRtbHardlimit, d.RtbHard);
    }

    /// <summary>
    /// xfs_qm_adjust_res_timer: over a soft or hard limit, a timer not yet running starts at <paramref name="expiry"/>
    /// (clamped to what the record can hold; bigtime records store seconds / 4, rounded up); under both, it stops.
    /// </summary>
    private static void AdjustTimer(Span<byte> r, int countOffset, int softOffset, int hardOffset, int timerOffset, long expiry)
    {
        ulong count = DquotRecord.U64(r, countOffset), soft = DquotRecord.U64(r, softOffset), hard = DquotRecord.U64(r, hardOffset);
        bool over = soft != 0 && count > soft || hard != 0 && count > hard;
        if (!over)
        {
            DquotRecord.SetU32(r, timerOffset, 0);
            return;
        }
        if (DquotRecord.U32(r, timerOffset) != 0) return;
        bool bigtime = (r[DquotView.OffType] & DquotView.TypeBigtime) != 0;
        long max = bigtime ? (long)uint.MaxValue << 2 : uint.MaxValue;
        long seconds = Math.Clamp(expiry, 1, max);
        uint stored = bigtime ? (uint)((seconds + 3) >> 2) : (uint)seconds;
        DquotRecord.SetU32(r, timerOffset, stored);
    }

    /// <summary>xfs_qm_init_timelimits and the default limits: from the type's id 0 dquot, read once.</summary>
    private Defaults DefaultsOf(byte type)
    {
        if (_defaults.TryGetValue(type, out var d)) return d;
        var zero = Find(new DquotKey(type, 0));
        if (zero is null)
        {
            d = new Defaults(0, 0, 0, 0, 0, 0, DefaultGrace, DefaultGrace, DefaultGrace);
        }
        else
        {
            var r = zero.Record.AsSpan();
            static long Grace(ReadOnlySpan<byte> r, int offset) => DquotRecord.U32(r, offset) is uint t and not 0 ? t : DefaultGrace;
            d = new Defaults(DquotRecord.U64(r, DquotView.OffBlkHardlimit), DquotRecord.U64(r, DquotView.OffBlkSoftlimit),
                DquotRecord.U64(r, DquotView.OffInoHardlimit), DquotRecord.U64(r, DquotView.OffInoSoftlimit),
                DquotRecord.U64(r, DquotView.OffRtbHardlimit), DquotRecord.U64(r, DquotView.OffRtbSoftlimit),
                Grace(r, DquotView.OffBtimer), Grace(r, DquotView.OffItimer), Grace(r, DquotView.OffRtbtimer));
        }
        _defaults[type] = d;
        return d;
    }

    /// <summary>
    /// A quota file block read for its dquots: each record is verified when its dquot is first used (a bad record
    /// elsewhere in the block does not stop the others, as in the kernel's per-dquot reads).
    /// </summary>
    private readonly struct DquotBlockVerifier : IBufferVerifier
    {
        public int Kind => VerifierKind;
        public string Structure => "quota file block";
        public VerifyResult Verify(ReadOnlySpan<byte> buffer, long byteOffset) => VerifyResult.Ok;
    }
}

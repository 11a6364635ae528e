using XfsWin.Metadata;

namespace XfsWin.Journal;

/// <summary>
/// A metadata transaction of a read-write volume, in the shape of the kernel's xfs_trans: it reserves log space up
/// front (<see cref="MountedLog.Begin"/>), joins every metadata buffer it reads for change (held and locked until
/// commit or cancel, see <see cref="MetadataChangeSet"/>), records the byte ranges it changed in each, and carries the
/// inode and intent items the layers above build. <see cref="Commit"/> turns each changed buffer into one
/// <see cref="BufferLogItem"/> logging exactly the 128-byte chunks this transaction changed, hands every item to the
/// CIL, then publishes and unlocks the buffers: from then on the change is visible to readers and durable once the log
/// is forced.
/// <para>
/// Inode cluster buffers are joined with <see cref="JoinInodeCluster"/>: the inode bytes this transaction copies
/// into them are published with the buffer but logged by the inode's <see cref="InodeLogItem"/>, never as a
/// buffer image (recovery replays inodes from inode items; the kernel logs inodes the same way).
/// </para>
/// <para>
/// Deferred work (the kernel's xfs_defer.c): the layers queue work items with <see cref="Defer{TItem}"/> (extent frees,
/// reverse-map, refcount and mapping updates, ...). <see cref="FinishDeferred"/>, which <see cref="Commit"/> runs
/// first, logs an intent for each batch in the current transaction, rolls (<see cref="Roll"/>: this part commits and
/// the transaction goes on with the same permanent reservation, held buffers and joined inodes), and does each batch
/// in a following part together with its done item; work queued while finishing is done before older batches. An
/// intent that waits while the log fills is logged again (a done item for it and a new intent in one part) so the
/// log's tail can move. A failure after the first roll leaves committed intents without done items: the log shuts
/// down and the next mount's recovery finishes them.
/// </para>
/// <para>
/// Lock order: inode locks (the caller's) before the transaction starts joining buffers; AG headers in ascending AG
/// order, the AGI before the AGF of one AG, then every other buffer. A roll releases every buffer lock but those held.
/// One thread uses a transaction at a time.
/// </para>
/// </summary>
public sealed class Transaction : IDisposable
{
    private readonly MountedLog _mountedLog;
    private int _logReservationBytes, _logCount;
    private readonly MetadataChangeSet _changes;
    private MetadataTransaction _log;
    private readonly Dictionary<MetadataBuffer, Joined> _joined = new(ReferenceEqualityComparer.Instance);
    // Joined records of earlier parts, reused (their maps cleared) by the buffers joined next.
    private readonly List<Joined> _spareJoined = new();
    private readonly List<JournalItem> _items = new();
    // What runs when the current part commits or is cancelled, in the order it was asked for; the second list of
    // each pair is the one being run (a callback may queue more for the next part).
    private List<CommitCallback> _onCommit = new(), _runningOnCommit = new();
    // Cancel actions of the current part; the other list is the one being run (swapped, so an action may add more).
    private List<Action> _onCancel = new(), _runningOnCancel = new();
    private readonly List<MetadataBuffer> _held = new();
    private readonly List<BufType> _heldTypes = new();
    private readonly Dictionary<ulong, IJoinedInode> _inodes = new();
    // The pool this transaction goes back to when disposed (null: not pooled), and whether it is there now.
    private readonly TransactionPool? _pool;
    private bool _inPool;
    // Batches queued since intents were last logged (the kernel's t_dfops), then those logged and waiting.
    private readonly List<DeferPending> _intake = new();
    private List<DeferPending>? _pending;
    private bool _finished;

    private sealed class Joined
    {
        public BufType Type;
        public bool InodeCluster;
        // The dirty bitmap's words: the first MapWords of an array kept from the largest buffer this record served.
        private uint[] _map = [];
        public int MapWords;
        public Span<uint> Map => _map.AsSpan(0, MapWords);
        public bool Logged;
        public bool Invalidated;

        public Joined Reset(BufType type, bool inodeCluster, int chunks)
        {
            Type = type;
            InodeCluster = inodeCluster;
            MapWords = (chunks + 31) / 32;
            if (_map.Length < MapWords) _map = new uint[MapWords];
            else Array.Clear(_map, 0, MapWords);
            Logged = false;
            Invalidated = false;
            return this;
        }
    }

    /// <summary>A callback of <see cref="OnCommit(Action)"/> or <see cref="OnCommit(ICommitCallback)"/>.</summary>
    private readonly record struct CommitCallback(Action? Action, ICommitCallback? Callback)
    {
        public void Run()
        {
            if (Action is not null) Action();
            else Callback!.Committed();
        }
    }

    /// <summary>A transaction with one part's reservation (no rolls granted up front).</summary>
    public Transaction(MountContext mount, MountedLog log, int logReservationBytes) : this(mount, log, logReservationBytes, 1) { }

    /// <summary>
    /// A transaction reserving <paramref name="logReservationBytes"/> for each of <paramref name="logCount"/> parts
    /// granted up front (the kernel's tr_logres and tr_logcount); rolls beyond them are regranted from the log.
    /// </summary>
    public Transaction(MountContext mount, MountedLog log, int logReservationBytes, int logCount)
    {
        Mount = mount;
        _mountedLog = log;
        _logReservationBytes = logReservationBytes;
        _logCount = logCount;
        _log = log.Begin(logReservationBytes, logCount);
        _changes = new MetadataChangeSet(mount.Buffers);
    }

    /// <summary>A pooled transaction, started by <see cref="Start"/> (see <see cref="TransactionPool"/>).</summary>
    internal Transaction(MountContext mount, MountedLog log, TransactionPool pool, int logReservationBytes, int logCount)
        : this(mount, log, logReservationBytes, logCount)
    {
        _pool = pool;
    }

    /// <summary>Starts a pooled transaction again with a new reservation; everything of its last use was reset when it went back to the pool.</summary>
    internal void Start(int logReservationBytes, int logCount)
    {
        _changes.Restart();
        _log.Restart(logReservationBytes, logCount);
        _logReservationBytes = logReservationBytes;
        _logCount = logCount;
        _finished = false;
        _inPool = false;
    }

    public MountContext Mount { get; }

    /// <summary>The log the transaction writes to.</summary>
    public MountedLog MountedLog => _mountedLog;

    /// <summary>Parts committed by rolls so far.</summary>
    public int Rolls { get; private set; }

    /// <summary>Reads a verified buffer (through the cache), locks it for this transaction and joins it.</summary>
    public MetadataBuffer Read<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier, IBufferWriteVerifier? writeVerifier, BufType type)
        where TVerifier : struct, IBufferVerifier
    {
        var buffer = _changes.Read(byteOffset, length, owner, verifier, writeVerifier);
        Join(buffer, type, inodeCluster: false);
        return buffer;
    }

    /// <summary>A buffer for a block this transaction initialises: locked, joined, zeroed. Every byte it writes must be logged.</summary>
    public MetadataBuffer GetNew(long byteOffset, int length, int kind, ulong owner, IBufferWriteVerifier? writeVerifier, BufType type)
    {
        var buffer = _changes.GetNew(byteOffset, length, kind, owner, writeVerifier);
        var joined = Join(buffer, type, inodeCluster: false);
        joined.Invalidated = false;
        return buffer;
    }

    /// <summary>
    /// A new inode cluster buffer (a new chunk's, initialised by this transaction): locked, joined as an inode cluster
    /// (see <see cref="JoinInodeCluster"/>), zeroed, nothing read. Its bytes are published at commit and logged by the
    /// chunk's icreate item, not as a buffer item.
    /// </summary>
    public MetadataBuffer GetNewInodeCluster(long byteOffset, int length, int kind, ulong owner)
    {
        var buffer = _changes.GetNew(byteOffset, length, kind, owner, null);
        var joined = Join(buffer, BufType.Dinode, inodeCluster: true);
        joined.Invalidated = false;
        return buffer;
    }

    /// <summary>
    /// Joins an inode cluster buffer whose inode bytes this transaction changes and logs through inode items: the
    /// bytes are published at commit, but no buffer image of them is logged.
    /// </summary>
    public MetadataBuffer JoinInodeCluster<TVerifier>(long byteOffset, int length, ulong owner, TVerifier verifier)
        where TVerifier : struct, IBufferVerifier
    {
        var buffer = _changes.Read(byteOffset, length, owner, verifier, null);
        Join(buffer, BufType.Dinode, inodeCluster: true);
        return buffer;
    }

    /// <summary>
    /// An inode's new bytes for the cluster buffer <paramref name="cluster"/> (joined with <see cref="JoinInodeCluster"/>)
    /// at <paramref name="offset"/>: copied in as the transaction commits, so a cancelled transaction leaves the cluster
    /// untouched and a committed one never copies the whole cluster (see <see cref="MetadataBuffer.PatchAtCommit"/>).
    /// The inode itself is logged by its <see cref="InodeLogItem"/>.
    /// </summary>
    public void PatchInodeCluster(MetadataBuffer cluster, int offset, byte[] inode)
    {
        CheckOpen();
        if (!_joined.TryGetValue(cluster, out var joined))
            throw new InvalidOperationException($"buffer at {cluster.Offset} (+{cluster.Length}) is not part of this transaction");
        if (!joined.InodeCluster)
        {
            // Joined as a logged buffer in this transaction (a new chunk's clusters): the inode goes into its image too.
            inode.CopyTo(cluster.Contents, offset);
            LogRange(cluster, offset, offset + inode.Length - 1);
            return;
        }
        _clusterPatches.Add((cluster, offset, inode));
    }

    private readonly List<(MetadataBuffer Cluster, int Offset, byte[] Inode)> _clusterPatches = new();
    // Buffer items the current part made, and those of earlier parts the log merged into items it already held (nothing
    // refers to them any more): the objects are made again for the buffers of later parts (see BufferLogItem.CreateShared).
    private readonly List<BufferLogItem> _madeBufferItems = new();
    private readonly Stack<BufferLogItem> _spentBufferItems = new();
    private const int MaxSpentBufferItems = 64;
    // Inode items made by InodeItem in the current part, and those the journal merged away in earlier parts (see InodeItem).
    private readonly List<InodeLogItem> _madeInodeItems = new();
    private readonly Stack<InodeLogItem> _spentInodeItems = new();
    private const int MaxSpentInodeItems = 16;
    // What layers above keep with this transaction object (see Scratch), at most a few kinds: searched in order.
    private readonly List<ITransactionScratch> _scratch = new(2);

    /// <summary>
    /// The <typeparamref name="T"/> that layers above keep with this transaction object (made at the first call): working
    /// objects they would otherwise allocate for every transaction, such as tree stores and cursors. A pooled
    /// transaction keeps it for its next use; <see cref="ITransactionScratch.TransactionEnded"/> runs when the
    /// transaction is disposed, after which nothing lent from it for this transaction may be used.
    /// </summary>
    public T Scratch<T>() where T : class, ITransactionScratch, new()
    {
        foreach (var kept in _scratch)
            if (kept is T scratch) return scratch;
        var made = new T();
        _scratch.Add(made);
        return made;
    }
    // Patches of clusters this part made no copy of, applied once nothing can fail (see CommitPart).
    private readonly List<(MetadataBuffer Cluster, int Offset, byte[] Inode)> _inPlacePatches = new();

    private Joined Join(MetadataBuffer buffer, BufType type, bool inodeCluster)
    {
        CheckOpen();
        if (!_joined.TryGetValue(buffer, out var joined))
        {
            int chunks = (buffer.Length + MetadataBuffer.DirtyChunkSize - 1) / MetadataBuffer.DirtyChunkSize;
            joined = _spareJoined.Count > 0 ? _spareJoined[^1] : new Joined();
            if (_spareJoined.Count > 0) _spareJoined.RemoveAt(_spareJoined.Count - 1);
            _joined.Add(buffer, joined.Reset(type, inodeCluster, chunks));
        }
        else if (!inodeCluster)
        {
            joined.Type = type;
        }
        return joined;
    }

    /// <summary>
    /// Keeps a joined buffer locked across rolls (the kernel's xfs_trans_bhold): each roll commits what this part
    /// changed in it and joins it, locked, to the next part. Held until the transaction commits or cancels.
    /// </summary>
    public void Hold(MetadataBuffer buffer)
    {
        CheckOpen();
        if (!_joined.ContainsKey(buffer)) throw new InvalidOperationException($"buffer at {buffer.Offset} (+{buffer.Length}) is not part of this transaction");
        if (!_held.Contains(buffer)) _held.Add(buffer);
    }

    /// <summary>
    /// Lets go of a joined buffer this transaction has not changed in its current part (the kernel's xfs_trans_brelse):
    /// it is unlocked at once rather than at commit, so that other changes may lock it meanwhile. A buffer this part
    /// logged, invalidated, holds across rolls or patches inodes into stays joined (false). The caller must not use the
    /// buffer afterwards without joining it again.
    /// </summary>
    public bool Release(MetadataBuffer buffer)
    {
        CheckOpen();
        if (!_joined.TryGetValue(buffer, out var joined) || joined.Logged || joined.Invalidated || _held.Contains(buffer))
            return false;
        foreach (var patch in _clusterPatches)
            if (ReferenceEquals(patch.Cluster, buffer)) return false;
        if (_unlinkedFields is not null)
            foreach (var (cluster, _, _, _) in _unlinkedFields.Values)
                if (ReferenceEquals(cluster, buffer)) return false;
        _joined.Remove(buffer);
        _spareJoined.Add(joined);
        _changes.Release(buffer);
        return true;
    }

    /// <summary>Whether <paramref name="buffer"/> is joined to the current part.</summary>
    public bool IsJoined(MetadataBuffer buffer) => _joined.ContainsKey(buffer);

    /// <summary>Bytes [<paramref name="first"/>, <paramref name="last"/>] (inclusive) of a joined buffer changed.</summary>
    public void LogRange(MetadataBuffer buffer, int first, int last)
    {
        CheckOpen();
        if (!_joined.TryGetValue(buffer, out var joined))
            throw new InvalidOperationException($"buffer at {buffer.Offset} (+{buffer.Length}) is not part of this transaction");
        buffer.LogRange(first, last);
        for (int chunk = first / MetadataBuffer.DirtyChunkSize, end = last / MetadataBuffer.DirtyChunkSize; chunk <= end; chunk++)
            joined.Map[chunk >> 5] |= 1u << (chunk & 31);
        joined.Logged = true;
    }

    /// <summary>
    /// The di_next_unlinked field at [<paramref name="fieldOffset"/>, +4) of an inode cluster joined with
    /// <see cref="JoinInodeCluster"/> changed. Inode items do not carry that field through recovery, so it is logged as
    /// the kernel's xfs_iunlink_log_dinode does: a buffer item of the cluster flagged INODE_BUF, from which recovery
    /// copies only the di_next_unlinked fields inside the logged chunks (and recomputes those inodes' CRCs).
    /// </summary>
    /// <para>
    /// The item covers <paramref name="logCluster"/>, the inode's cluster as the kernel maps it (the one its inode items
    /// name), which may be a part of the cached buffer: recovery must never meet overlapping buffers of different sizes.
    /// </para>
    public void LogInodeUnlinkedField(MetadataBuffer cluster, int fieldOffset, InodeClusterLocation logCluster)
    {
        CheckOpen();
        if (!_joined.TryGetValue(cluster, out var joined) || !joined.InodeCluster)
            throw new InvalidOperationException($"buffer at {cluster.Offset} (+{cluster.Length}) is not an inode cluster of this transaction");
        int start = checked((int)((logCluster.Daddr << LogArea.BBShift) - cluster.Offset));
        int length = logCluster.LengthBB << LogArea.BBShift;
        if (start < 0 || start + length > cluster.Length || fieldOffset < start || fieldOffset + 4 > start + length)
            throw new InvalidOperationException($"inode cluster {logCluster} does not hold byte {fieldOffset} of buffer {cluster.Offset} (+{cluster.Length})");
        cluster.LogRange(fieldOffset, fieldOffset + 3);
        _unlinkedFields ??= new();
        if (!_unlinkedFields.TryGetValue(logCluster.Daddr, out var entry))
            _unlinkedFields[logCluster.Daddr] = entry = (cluster, start, logCluster.LengthBB, new uint[(length / MetadataBuffer.DirtyChunkSize + 31) / 32]);
        int chunk = (fieldOffset - start) / MetadataBuffer.DirtyChunkSize;
        entry.Map[chunk >> 5] |= 1u << (chunk & 31);
    }

    /// <summary>di_next_unlinked changes by the kernel's cluster daddr: the cached buffer, the cluster's offset in it, its length and dirty chunks.</summary>
    private Dictionary<long, (MetadataBuffer Buffer, int Start, int LengthBB, uint[] Map)>? _unlinkedFields;

    /// <summary>The block at [<paramref name="byteOffset"/>, +<paramref name="length"/>) was freed: its buffer is dropped and recovery skips its older images.</summary>
    public void Invalidate(long byteOffset, int length)
    {
        CheckOpen();
        _changes.Invalidate(byteOffset, length);
        var buffer = _changes.Cache.Find(byteOffset, length)
            ?? throw new InvalidOperationException($"invalidated buffer at {byteOffset} (+{length}) is not in the cache");
        var joined = Join(buffer, BufType.Unknown, inodeCluster: false);
        joined.Invalidated = true;
        _held.Remove(buffer);
    }

    /// <summary>
    /// Logs that the buffer [<paramref name="daddr"/>, +<paramref name="lengthBB"/>) was freed without joining it (the
    /// kernel's inode clusters of a released chunk, whose inode items name them): recovery replays none of its older
    /// images, and the AIL drops the inode items inside it once this is checkpointed.
    /// </summary>
    public void LogCancel(long daddr, int lengthBB)
    {
        CheckOpen();
        _items.Add(BufferLogItem.Cancel(daddr, lengthBB));
    }

    /// <summary>Logs an inode, intent or done item; the same item logged again in this transaction merges into the first.</summary>
    public void Log(JournalItem item)
    {
        CheckOpen();
        _items.Add(item);
        if (item is InodeLogItem inode) (_inodesLogged ??= new()).Add(inode.Ino);
    }

    // Inodes logged in the current part: a roll logs again only the joined inodes that were not.
    private HashSet<ulong>? _inodesLogged;

    /// <summary>
    /// Joins an inode's working copy for the rest of the transaction, across rolls (see <see cref="IJoinedInode"/>);
    /// joining it again replaces nothing.
    /// </summary>
    public void JoinInode(IJoinedInode inode)
    {
        CheckOpen();
        if (_inodes.TryGetValue(inode.Number, out var existing))
        {
            if (!ReferenceEquals(existing, inode))
                throw new InvalidOperationException($"inode {inode.Number} is joined to this transaction as another working copy");
            return;
        }
        _inodes.Add(inode.Number, inode);
    }

    /// <summary>The working copy of inode <paramref name="ino"/> joined to this transaction, or null.</summary>
    public IJoinedInode? FindInode(ulong ino) => _inodes.TryGetValue(ino, out var i) ? i : null;

    // Dquot count changes of the current part (the kernel's t_dqinfo), applied and logged as it commits.
    private Dictionary<DquotKey, DquotDelta>? _dquotDeltas;

    /// <summary>
    /// Inode <paramref name="ino"/> changed from <paramref name="before"/> to <paramref name="after"/> in this part: when
    /// the log's volume accounts quota, its old owners' dquots lose what it counted for them and its new owners' gain
    /// what it counts now (one inode, its blocks), applied to the dquots as the part commits.
    /// </summary>
    public void ChargeInode(ulong ino, QuotaOwner before, QuotaOwner after)
    {
        CheckOpen();
        if (before == after || _mountedLog.Dquots is not { } quota || !quota.Accounts(ino)) return;
        Charge(quota.Types, before, -1);
        Charge(quota.Types, after, 1);
    }

    private void Charge(byte types, QuotaOwner owner, long sign)
    {
        if (!owner.Counted) return;
        long blocks = sign * checked((long)owner.Blocks);
        if ((types & 0x1) != 0) AddDelta(new DquotKey(0x1, owner.Uid), blocks, sign);
        if ((types & 0x4) != 0) AddDelta(new DquotKey(0x4, owner.Gid), blocks, sign);
        if ((types & 0x2) != 0) AddDelta(new DquotKey(0x2, owner.ProjectId), blocks, sign);
    }

    private void AddDelta(DquotKey key, long blocks, long inodes)
    {
        _dquotDeltas ??= new();
        var d = _dquotDeltas.GetValueOrDefault(key);
        _dquotDeltas[key] = new DquotDelta(d.Blocks + blocks, d.Inodes + inodes);
    }

    /// <summary>Runs after the part that is committed next (publishing in-core state that mirrors the committed metadata).</summary>
    public void OnCommit(Action action)
    {
        CheckOpen();
        _onCommit.Add(new CommitCallback(action, null));
    }

    /// <summary>As <see cref="OnCommit(Action)"/>, without a delegate: <see cref="ICommitCallback.Committed"/> runs after the part commits.</summary>
    public void OnCommit(ICommitCallback callback)
    {
        CheckOpen();
        _onCommit.Add(new CommitCallback(null, callback));
    }

    /// <summary>Runs when the current part is cancelled (dropping in-core state that mirrored its uncommitted changes).</summary>
    public void OnCancel(Action action)
    {
        CheckOpen();
        _onCancel.Add(action);
    }

    /// <summary>The log checkpoint sequence the last committed part went into (<see cref="MountedLog.DurableSequence"/> reaching it means they are on disk); 0 before commit.</summary>
    public long CommitSequence { get; private set; }

    /// <summary>A fresh intent id (unique among the intents of this log).</summary>
    public ulong NextIntentId() => _mountedLog.NextIntentId();

    // ---- deferred work ----------------------------------------------------------------------------------------

    /// <summary>
    /// Queues <paramref name="item"/> of <paramref name="type"/>: it joins the last batch queued when that batch is of
    /// the same kind, has no intent yet and room left (xfs_defer_add), else starts a new batch. Its intent is logged
    /// when the transaction next finishes its deferred work (at the latest, at <see cref="Commit"/>).
    /// </summary>
    public void Defer<TItem>(DeferredWorkType<TItem> type, TItem item) where TItem : struct
    {
        CheckOpen();
        if (_intake.Count > 0 && _intake[^1] is DeferPending<TItem> last && ReferenceEquals(last.Type, type) && last.CanAppend)
        {
            last.Items.Add(item);
            return;
        }
        var batch = new DeferPending<TItem>(type);
        batch.Items.Add(item);
        _intake.Add(batch);
    }

    /// <summary>True when work is queued or waiting to be finished.</summary>
    public bool HasDeferredWork => _intake.Count > 0 || _pending is { Count: > 0 };

    /// <summary>
    /// Finishes every queued batch and what finishing them queues (xfs_defer_finish_noroll): intents of new batches are
    /// logged in the current part, the transaction rolls, intents that hold the log's tail are logged again, then the
    /// first waiting batch is done (its done item and its work in one part); repeated until nothing waits. The last
    /// batch's work is in the current part when this returns.
    /// </summary>
    public void FinishDeferred()
    {
        CheckOpen();
        var pending = _pending ??= new();
        DeferPending? last = null;
        while (pending.Count > 0 || _intake.Count > 0)
        {
            bool hasIntents = false;
            foreach (var batch in _intake) hasIntents |= batch.LogIntent(this, sort: true);
            // Work queued while finishing goes before older batches: fewer intents wait, and not for long.
            pending.InsertRange(0, _intake);
            _intake.Clear();
            if (hasIntents || last is not null)
            {
                Roll();
                if (RelogWaitingIntents(pending)) Roll();
            }
            last = pending.Count > 0 ? pending[0] : null;
            if (last is null) break;
            if (last.FinishAll(this)) pending.RemoveAt(0);
        }
    }

    /// <summary>xfs_defer_relog: intents checkpointed below the log's push threshold get a done item and a new copy in this part.</summary>
    private bool RelogWaitingIntents(List<DeferPending> pending)
    {
        ulong? threshold = null;
        bool relogged = false;
        foreach (var batch in pending)
        {
            if (batch.Intent is null) continue;
            ulong? lsn = _mountedLog.AilLsnOf(batch.Intent.Key);
            if (lsn is null) continue; // still in the CIL: part of the current checkpoint
            threshold ??= _mountedLog.RelogThreshold();
            if (threshold is null) break;
            if (lsn.Value >= threshold.Value) continue;
            batch.Relog(this);
            _mountedLog.NoteRelog();
            relogged = true;
        }
        return relogged;
    }

    /// <summary>
    /// Log recovery: finishes an intent recovered from the log (xlog_recover_finish_intent): its done item and the work
    /// <paramref name="items"/> describe, in this transaction. Work that needs a fresh transaction, and work it queues,
    /// waits for <see cref="CommitCapturing"/>.
    /// </summary>
    public void FinishRecovered<TItem>(DeferredWorkType<TItem> type, IntentLogItem recovered, IEnumerable<TItem> items) where TItem : struct
    {
        CheckOpen();
        var batch = new DeferPending<TItem>(type) { Intent = recovered };
        batch.Items.AddRange(items);
        if (!batch.FinishAll(this)) _intake.Insert(0, batch);
    }

    /// <summary>
    /// Commits without finishing the deferred work: intents for the queued batches are logged in this part and the
    /// batches are returned, to be finished later with <see cref="Resume"/> (xfs_defer_ops_capture_and_commit).
    /// Null when nothing was queued.
    /// </summary>
    public CapturedWork? CommitCapturing()
    {
        CheckOpen();
        CapturedWork? captured = null;
        if (HasDeferredWork)
        {
            var all = new List<DeferPending>(_intake);
            if (_pending is not null) all.AddRange(_pending);
            foreach (var batch in _intake) batch.LogIntent(this, sort: true);
            _intake.Clear();
            _pending = null;
            captured = new CapturedWork(all, _logReservationBytes, _logCount);
        }
        CommitPart(regrant: false);
        _finished = true;
        _inodes.Clear();
        _held.Clear();
        return captured;
    }

    /// <summary>
    /// A new transaction that finishes work a recovery transaction captured (xfs_defer_ops_continue); the caller
    /// commits it (which finishes the work).
    /// </summary>
    public static Transaction Resume(MountContext mount, MountedLog log, CapturedWork captured)
    {
        ArgumentNullException.ThrowIfNull(captured);
        var tx = new Transaction(mount, log, captured.LogReservationBytes, captured.LogCount);
        tx._intake.AddRange(captured.Pending);
        return tx;
    }

    // ---- commit, roll, cancel -----------------------------------------------------------------------------------

    /// <summary>
    /// Finishes the deferred work (rolling as needed), then logs every changed buffer and item of the last part,
    /// publishes the buffers and hands the items to the CIL. A transaction that changed nothing gives its reservation back.
    /// </summary>
    public void Commit()
    {
        CheckOpen();
        FinishDeferred();
        CommitPart(regrant: false);
        _finished = true;
        _inodes.Clear();
        _held.Clear();
    }

    /// <summary>
    /// Commits this part and goes on as the next part of the same transaction (xfs_trans_roll): joined inodes are
    /// logged in the part that commits, held buffers are joined to the next one still locked, every other buffer is
    /// released; the reservation is the same. Deferred work stays queued.
    /// </summary>
    public void Roll()
    {
        CheckOpen();
        foreach (var inode in _inodes.Values)
            if (_inodesLogged is null || !_inodesLogged.Contains(inode.Number)) inode.Relog(this);
        _heldTypes.Clear();
        foreach (var b in _held) _heldTypes.Add(_joined[b].Type);
        CommitPart(regrant: true);
        Rolls++;
        int kept = 0;
        for (int i = 0; i < _held.Count; i++)
        {
            // A buffer evicted meanwhile cannot be held on.
            if (!_changes.Rejoin(_held[i])) continue;
            Join(_held[i], _heldTypes[i], inodeCluster: false);
            _held[kept++] = _held[i];
        }
        _held.RemoveRange(kept, _held.Count - kept);
    }

    private BufferLogItem MadeBufferItem(BufferLogItem item)
    {
        _madeBufferItems.Add(item);
        return item;
    }

    /// <summary>
    /// An inode log item holding a copy of <paramref name="diskInode"/>, made in an item (and image array) that an
    /// earlier part of a transaction of this object made and the journal merged away, when there is one: a file
    /// changed write after write logs its inode every time, and the journal keeps one item per inode. The caller logs
    /// it in this part (<see cref="Log"/>); its image array is the caller's to read until this part's commit
    /// callbacks ran.
    /// </summary>
    public InodeLogItem InodeItem(ulong ino, InodeClusterLocation cluster, ReadOnlySpan<byte> diskInode, InodeLogParts parts)
    {
        CheckOpen();
        var item = InodeLogItem.Create(_spentInodeItems.TryPop(out var spent) ? spent : null, ino, cluster, diskInode, parts);
        _madeInodeItems.Add(item);
        return item;
    }

    /// <summary>Logs and commits the current part; with <paramref name="regrant"/> starts the next one.</summary>
    private void CommitPart(bool regrant)
    {
        var inPlace = _inPlacePatches;
        inPlace.Clear();
        // Items a part that failed made are not reused: the log may still have been handed some of them.
        _madeBufferItems.Clear();
        try
        {
            // The part's dquot changes become dquot items of this part (xfs_trans_apply_dquot_deltas).
            if (_dquotDeltas is { Count: > 0 } deltas)
            {
                _dquotDeltas = null;
                _mountedLog.Dquots!.Apply(this, deltas);
            }
            // Inode bytes go into the private copies first (buffer items formatted from those copies then carry them);
            // a cluster this part made no copy of is patched in place once nothing can fail any more.
            foreach (var patch in _clusterPatches)
                if (!patch.Cluster.TryPatchPrivate(patch.Offset, patch.Inode)) inPlace.Add(patch);
            foreach (var (buffer, joined) in _joined)
            {
                long daddr = buffer.Offset >> LogArea.BBShift;
                int lengthBB = buffer.Length >> LogArea.BBShift;
                if (joined.Invalidated)
                {
                    // A buffer longer than one item carries (the inode cache reads a whole chunk of large inodes at
                    // once) is cancelled in pieces: recovery matches a cancel to buffers logged with its very range,
                    // and none is logged that long.
                    for (int done = 0; done < lengthBB; done += BufferLogItem.MaxLengthBB)
                        _log.Log(BufferLogItem.Cancel(daddr + done, Math.Min(BufferLogItem.MaxLengthBB, lengthBB - done)));
                }
                else if (joined.Logged && !joined.InodeCluster)
                    // The item keeps the private copy, which becomes the published bytes and is never changed again
                    // (the next change copies it); inode cluster bytes can be patched in place, so their item copies.
                    _log.Log(joined.Type == BufType.Dinode
                        ? BufferLogItem.Create(daddr, lengthBB, joined.Type, buffer.Contents, joined.Map)
                        : MadeBufferItem(BufferLogItem.CreateShared(_spentBufferItems.TryPop(out var spent) ? spent : null, daddr, lengthBB,
                            joined.Type, buffer.Contents, joined.Map, DquotBufferFlag(joined.Type))));
            }
            if (_unlinkedFields is not null)
                foreach (var (clusterDaddr, (buffer, start, lengthBB, map)) in _unlinkedFields)
                    _log.Log(BufferLogItem.Create(clusterDaddr, lengthBB, BufType.Dinode,
                        buffer.Contents.AsSpan(start, lengthBB << LogArea.BBShift), map, BufLogFormat.FlagInodeBuf));
            foreach (var item in _items) _log.Log(item);
        }
        catch
        {
            CancelPart();
            throw;
        }
        foreach (var (cluster, offset, inode) in inPlace) cluster.PatchAtCommit(offset, inode);
        inPlace.Clear();
        _clusterPatches.Clear();
        // Nothing can cancel the part any more: the buffers it publishes take their change's write verifier now, before
        // their items reach the log, whose writeback may write an image before the buffer is published.
        foreach (var (buffer, joined) in _joined)
            if (joined.Logged && !joined.Invalidated && !joined.InodeCluster) buffer.AdoptChangeWriteVerifier();
        // The items reach the CIL while the buffers are still locked, and only then are the buffers published and
        // unlocked (the kernel's xfs_trans_commit: xlog_cil_commit before the items are unlocked): a change that locks one
        // of these buffers next reaches the CIL after this one, so the CIL never takes an older image for a newer.
        Exception? logFailure = null;
        try
        {
            if (regrant) _log.RollInPlace();
            else _log.Commit();
        }
        catch (Exception e)
        {
            logFailure = e;
        }
        // Published even when the log failed: the part may be in the CIL already, and a failed log is shut down.
        _changes.Commit();
        if (logFailure is not null)
        {
            if (regrant)
            {
                // The chain cannot go on.
                _finished = true;
                RunCancelActions();
                _mountedLog.Shutdown(logFailure);
            }
            System.Runtime.ExceptionServices.ExceptionDispatchInfo.Throw(logFailure);
        }
        foreach (var made in _madeBufferItems)
            if (made.MergedAway && _spentBufferItems.Count < MaxSpentBufferItems) _spentBufferItems.Push(made);
        _madeBufferItems.Clear();
        foreach (var made in _madeInodeItems)
            if (made.MergedAway && _spentInodeItems.Count < MaxSpentInodeItems) _spentInodeItems.Push(made);
        _madeInodeItems.Clear();
        CommitSequence = _log.CommitSequence;
        (_onCommit, _runningOnCommit) = (_runningOnCommit, _onCommit);
        _onCancel.Clear();
        ReleaseJoined();
        _unlinkedFields = null;
        _items.Clear();
        _inodesLogged?.Clear();
        if (regrant) _changes.Restart();
        try
        {
            foreach (var callback in _runningOnCommit) callback.Run();
        }
        finally
        {
            _runningOnCommit.Clear();
        }
    }

    private void ReleaseJoined()
    {
        foreach (var joined in _joined.Values) _spareJoined.Add(joined);
        _joined.Clear();
    }

    /// <summary>blf_flags of a dquot chunk buffer (xfs_trans_dquot_buf): recovery replays it only while its quota type is on.</summary>
    private static ushort DquotBufferFlag(BufType type) => type switch
    {
        BufType.UserDquot => BufLogFormat.FlagUserDquot,
        BufType.ProjectDquot => BufLogFormat.FlagProjectDquot,
        BufType.GroupDquot => BufLogFormat.FlagGroupDquot,
        _ => 0,
    };

    /// <summary>
    /// Drops every change of the current part: the buffers keep what they had, the reservation goes back. Parts already
    /// committed by rolls stay; if they left intents without done items, the log shuts down (as the kernel's
    /// xfs_force_shutdown): recovery at the next mount finishes them.
    /// </summary>
    public void Cancel()
    {
        if (_finished) return;
        _finished = true;
        CancelPart();
        ShutDownIfIntentsLeft(new InvalidOperationException("a transaction was cancelled after it had rolled with deferred work unfinished"));
    }

    private void CancelPart()
    {
        _clusterPatches.Clear();
        // The log may have been handed some of the part's inode items: none is reused.
        _madeInodeItems.Clear();
        _dquotDeltas = null;
        _changes.Cancel();
        _log.Dispose();
        RunCancelActions();
        _finished = true;
    }

    private void ShutDownIfIntentsLeft(Exception reason)
    {
        // Batches wait only once their intents were logged and a part committed them.
        if (Rolls > 0 && _pending is { Count: > 0 }) _mountedLog.Shutdown(reason);
    }

    private void RunCancelActions()
    {
        (_onCancel, _runningOnCancel) = (_runningOnCancel, _onCancel);
        _onCommit.Clear();
        try
        {
            foreach (var action in _runningOnCancel) action();
        }
        finally
        {
            _runningOnCancel.Clear();
        }
    }

    /// <summary>Cancels what was not committed; a pooled transaction then goes back to its pool, reset for its next use.</summary>
    public void Dispose()
    {
        Cancel();
        if (_pool is null || _inPool) return;
        _inPool = true;
        ReleaseJoined();
        _items.Clear();
        _onCommit.Clear();
        _onCancel.Clear();
        _held.Clear();
        _inodes.Clear();
        _inodesLogged?.Clear();
        _intake.Clear();
        _pending?.Clear();
        _dquotDeltas = null;
        _unlinkedFields = null;
        _clusterPatches.Clear();
        _madeInodeItems.Clear();
        Rolls = 0;
        CommitSequence = 0;
        foreach (var scratch in _scratch) scratch.TransactionEnded();
        _pool.Return(this);
    }

    private void CheckOpen()
    {
        if (_finished) throw new InvalidOperationException("this transaction was already committed or cancelled");
    }
}

/// <summary>Working state a layer keeps with a transaction object (see <see cref="Transaction.Scratch{T}"/>).</summary>
public interface ITransactionScratch
{
    /// <summary>The transaction was disposed: whatever was lent for it is free for the next one (and must drop references to its buffers).</summary>
    void TransactionEnded();
}

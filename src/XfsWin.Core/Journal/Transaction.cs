using XfsWin.Metadata;

namespace XfsWin.Journal;

/// <summary>
/// A metadata transaction of a read-write volume, in the shape of the kernel's xfs_trans: it reserves log space up
/// front (<see cref="MountedLog.Begin"/>), joins every metadata buffer it reads for change (held and locked until
/// commit or cancel, see <see cref="MetadataChangeSet"/>), records the byte ranges it changed in each, and carries the
/// inode and intent items the layers above build. <see cref="Commit"/> turns each changed buffer into one
/// <see cref="BufferLogItem"/> logging exactly the 128-byte chunks this transaction changed, publishes the buffers,
/// and hands every item to the CIL: from then on the change is visible to readers and durable once the log is forced.
/// <para>
/// Inode cluster buffers are joined with <see cref="JoinInodeCluster"/>: the inode bytes this transaction copies
/// into them are published with the buffer but logged by the inode's <see cref="InodeLogItem"/>, never as a
/// buffer image (recovery replays inodes from inode items; the kernel logs inodes the same way).
/// </para>
/// <para>
/// Lock order: inode locks (the caller's) before the transaction starts joining buffers; AG headers in ascending AG
/// order, the AGI before the AGF of one AG, then every other buffer. One thread uses a transaction at a time.
/// </para>
/// </summary>
public sealed class Transaction : IDisposable
{
    private readonly MetadataChangeSet _changes;
    private readonly MetadataTransaction _log;
    private readonly Dictionary<MetadataBuffer, Joined> _joined = new(ReferenceEqualityComparer.Instance);
    private readonly List<JournalItem> _items = new();
    private List<Action>? _onCommit, _onCancel;
    private bool _finished;

    private sealed class Joined(BufType type, bool inodeCluster, int chunks)
    {
        public BufType Type = type;
        public readonly bool InodeCluster = inodeCluster;
        public readonly uint[] Map = new uint[(chunks + 31) / 32];
        public bool Logged;
        public bool Invalidated;
    }

    public Transaction(MountContext mount, MountedLog log, int logReservationBytes)
    {
        Mount = mount;
        _log = log.Begin(logReservationBytes);
        _changes = new MetadataChangeSet(mount.Buffers);
    }

    public MountContext Mount { get; }

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
        (_clusterPatches ??= new()).Add((cluster, offset, inode));
    }

    private List<(MetadataBuffer Cluster, int Offset, byte[] Inode)>? _clusterPatches;

    private Joined Join(MetadataBuffer buffer, BufType type, bool inodeCluster)
    {
        CheckOpen();
        if (!_joined.TryGetValue(buffer, out var joined))
        {
            joined = new Joined(type, inodeCluster, (buffer.Length + MetadataBuffer.DirtyChunkSize - 1) / MetadataBuffer.DirtyChunkSize);
            _joined.Add(buffer, joined);
        }
        else if (!inodeCluster)
        {
            joined.Type = type;
        }
        return joined;
    }

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
    /// The di_next_unlinked field at [<paramref name="first"/>, <paramref name="last"/>] of an inode cluster joined with
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
    }

    /// <summary>Logs an inode, intent or done item; the same item logged again in this transaction merges into the first.</summary>
    public void Log(JournalItem item)
    {
        CheckOpen();
        _items.Add(item);
    }

    /// <summary>Runs after a successful commit (publishing in-core state that mirrors the committed metadata).</summary>
    public void OnCommit(Action action)
    {
        CheckOpen();
        (_onCommit ??= new()).Add(action);
    }

    /// <summary>
    /// Runs at the start of <see cref="Commit"/>, while the transaction can still change things (deferred work that
    /// must happen in it, in an order only known at the end, such as frees in ascending AG order).
    /// </summary>
    public void OnPrecommit(Action action)
    {
        CheckOpen();
        (_onPrecommit ??= new()).Add(action);
    }

    private List<Action>? _onPrecommit;

    /// <summary>Runs when the transaction is cancelled (dropping in-core state that mirrored its uncommitted changes).</summary>
    public void OnCancel(Action action)
    {
        CheckOpen();
        (_onCancel ??= new()).Add(action);
    }

    /// <summary>The log checkpoint sequence the committed changes went into (<see cref="MountedLog.DurableSequence"/> reaching it means they are on disk); 0 before commit.</summary>
    public long CommitSequence => _log.CommitSequence;

    /// <summary>
    /// Logs every changed buffer and item, publishes the buffers and hands the items to the CIL. A transaction that
    /// changed nothing gives its reservation back.
    /// </summary>
    public void Commit()
    {
        CheckOpen();
        if (_onPrecommit is not null)
        {
            // Precommit work may add more of its own; run until none is left.
            for (int i = 0; i < _onPrecommit.Count; i++) _onPrecommit[i]();
        }
        _finished = true;
        List<(MetadataBuffer Cluster, int Offset, byte[] Inode)>? inPlace = null;
        try
        {
            // Inode bytes go into the private copies first (buffer items formatted from those copies then carry them);
            // a cluster this transaction made no copy of is patched in place once nothing can fail any more.
            if (_clusterPatches is not null)
                foreach (var patch in _clusterPatches)
                    if (!patch.Cluster.TryPatchPrivate(patch.Offset, patch.Inode)) (inPlace ??= new()).Add(patch);
            foreach (var (buffer, joined) in _joined)
            {
                long daddr = buffer.Offset >> LogArea.BBShift;
                int lengthBB = buffer.Length >> LogArea.BBShift;
                if (joined.Invalidated)
                    _log.Log(BufferLogItem.Cancel(daddr, lengthBB));
                else if (joined.Logged && !joined.InodeCluster)
                    // The item keeps the private copy, which becomes the published bytes and is never changed again
                    // (the next change copies it); inode cluster bytes can be patched in place, so their item copies.
                    _log.Log(joined.Type == BufType.Dinode
                        ? BufferLogItem.Create(daddr, lengthBB, joined.Type, buffer.Contents, joined.Map)
                        : BufferLogItem.CreateShared(daddr, lengthBB, joined.Type, buffer.Contents, joined.Map));
            }
            if (_unlinkedFields is not null)
                foreach (var (clusterDaddr, (buffer, start, lengthBB, map)) in _unlinkedFields)
                    _log.Log(BufferLogItem.Create(clusterDaddr, lengthBB, BufType.Dinode,
                        buffer.Contents.AsSpan(start, lengthBB << LogArea.BBShift), map, BufLogFormat.FlagInodeBuf));
            foreach (var item in _items) _log.Log(item);
        }
        catch
        {
            _changes.Cancel();
            _log.Dispose();
            RunCancelActions();
            throw;
        }
        if (inPlace is not null)
            foreach (var (cluster, offset, inode) in inPlace) cluster.PatchAtCommit(offset, inode);
        _changes.Commit();
        _log.Commit();
        if (_onCommit is not null)
            foreach (var action in _onCommit) action();
    }

    /// <summary>Drops every change: the buffers keep what they had, the reservation goes back.</summary>
    public void Cancel()
    {
        if (_finished) return;
        _finished = true;
        _changes.Cancel();
        _log.Dispose();
        RunCancelActions();
    }

    private void RunCancelActions()
    {
        if (_onCancel is null) return;
        foreach (var action in _onCancel) action();
    }

    public void Dispose() => Cancel();

    private void CheckOpen()
    {
        if (_finished) throw new InvalidOperationException("this transaction was already committed or cancelled");
    }
}

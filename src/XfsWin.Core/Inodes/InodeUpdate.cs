using System.Buffers.Binary;
using XfsWin.Btree;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Inodes;

/// <summary>
/// A change to one inode inside a transaction: a working copy of its on-disk image that the operation edits through
/// named setters, and what of it changed (core, data fork, attribute fork). <see cref="Log"/> copies the image into
/// the inode's cluster buffer (published at commit, so readers decode the new inode) and logs it as an inode item
/// (how recovery replays it); the cached decoded inode is dropped when the transaction commits.
/// <para>
/// Logging the inode joins this working copy to the transaction for the rest of its chain of rolls
/// (<see cref="IJoinedInode"/>): deferred work that changes the inode later finds it with <see cref="Find"/>, and every
/// roll logs it again.
/// </para>
/// <para>
/// The caller holds the inode's lock (see the volume's lock order) from reading <see cref="Inode"/> until commit.
/// </para>
/// </summary>
public sealed class InodeUpdate : IInodeRootHolder, IJoinedInode, ICommitCallback
{
    private InodeCache? _cache;

    private readonly Superblock _sb;
    // The image last logged: the inode cache's entry once that part commits (see ICommitCallback.Committed).
    private byte[]? _committed;

    public InodeUpdate(Inode inode, Superblock sb)
    {
        _sb = sb;
        Number = inode.Number;
        ByteOffset = inode.ByteOffset;
        Image = (byte[])inode.Raw.Clone();
        _charged = QuotaOwner;
    }

    /// <summary>
    /// Starts this working copy over as a fresh one of <paramref name="inode"/> (what the constructor makes), its image
    /// copied into the same array: for a caller that changes inode after inode with one working copy, each only after
    /// the transaction that logged the previous one committed or was cancelled.
    /// </summary>
    public InodeUpdate Reload(Inode inode)
    {
        Number = inode.Number;
        ByteOffset = inode.ByteOffset;
        if (Image.Length == inode.Raw.Length) inode.Raw.CopyTo(Image, 0);
        else Image = (byte[])inode.Raw.Clone();
        Parts = InodeLogParts.Core;
        _cache = null;
        _committed = null;
        _charged = QuotaOwner;
        return this;
    }

    /// <summary>A new inode's image (already initialised by the caller) at <paramref name="byteOffset"/>.</summary>
    public InodeUpdate(ulong number, long byteOffset, byte[] image, Superblock sb)
    {
        _sb = sb;
        Number = number;
        ByteOffset = byteOffset;
        Image = image;
        Parts = InodeLogParts.DataFork | InodeLogParts.AttrFork;
        // A new inode was free: no dquot counts it yet.
        _charged = default;
    }

    // What the dquots count for this inode as of its last logged image (see Log).
    private QuotaOwner _charged;

    /// <summary>What the quota owners of the inode are charged for in its current image: in use (mode set), owners, di_nblocks.</summary>
    public QuotaOwner QuotaOwner => View.Mode == 0 ? default : new QuotaOwner(true, View.Uid, View.Gid, View.ProjectId, View.Nblocks);

    public ulong Number { get; private set; }
    public long ByteOffset { get; private set; }

    /// <summary>The working image (inode-size bytes, big-endian, as on disk).</summary>
    public byte[] Image { get; private set; }

    public InodeLogParts Parts { get; set; }

    private DinodeView View => new(Image);
    private DinodeWriter Writer => new(Image);

    public ushort Mode { get => View.Mode; set { var w = Writer; w.Mode = value; } }
    public uint Uid { get => View.Uid; set { var w = Writer; w.Uid = value; } }
    public uint Gid { get => View.Gid; set { var w = Writer; w.Gid = value; } }
    public uint LinkCount { get => View.LinkCount; set { var w = Writer; w.LinkCount = value; } }
    public ulong Size { get => View.Size; set { var w = Writer; w.Size = value; } }
    public ushort Flags { get => View.Flags; set { var w = Writer; w.Flags = value; } }
    public ulong Flags2 { get => View.Flags2; set { var w = Writer; w.Flags2 = value; } }
    public ForkFormat DataFormat { get => View.Format; set { var w = Writer; w.Format = value; } }
    public bool Bigtime => View.HasBigtime;
    public int CoreSize => View.CoreSize;

    public ulong Nblocks
    {
        get => View.Nblocks;
        set => BinaryPrimitives.WriteUInt64BigEndian(Image.AsSpan(DinodeView.OffNblocks), value);
    }

    public uint ProjectId
    {
        get => View.ProjectId;
        set
        {
            BinaryPrimitives.WriteUInt16BigEndian(Image.AsSpan(DinodeView.OffProjidLo), (ushort)value);
            BinaryPrimitives.WriteUInt16BigEndian(Image.AsSpan(DinodeView.OffProjidHi), (ushort)(value >> 16));
        }
    }

    /// <summary>di_extsize: the extent size hint, in blocks.</summary>
    public uint ExtentSizeHint
    {
        get => View.ExtSize;
        set => BinaryPrimitives.WriteUInt32BigEndian(Image.AsSpan(DinodeView.OffExtsize), value);
    }

    /// <summary>di_cowextsize (V3 inodes): the copy-on-write extent size hint, in blocks.</summary>
    public uint CowExtentSizeHint
    {
        get => View.Version >= 3 ? BinaryPrimitives.ReadUInt32BigEndian(Image.AsSpan(DinodeView.OffCowextsize)) : 0;
        set => BinaryPrimitives.WriteUInt32BigEndian(Image.AsSpan(DinodeView.OffCowextsize), value);
    }

    public ulong DataExtentCount
    {
        get => View.DataExtentCount;
        set
        {
            if (View.HasNrext64) BinaryPrimitives.WriteUInt64BigEndian(Image.AsSpan(DinodeView.OffBigNextents), value);
            else BinaryPrimitives.WriteUInt32BigEndian(Image.AsSpan(DinodeView.OffNextents), checked((uint)value));
        }
    }

    /// <summary>The data fork's bytes in the literal area (up to the attribute fork, or the inode's end).</summary>
    public Span<byte> DataFork => Image.AsSpan(View.CoreSize, View.DataForkSize(Image.Length));

    /// <summary>di_forkoff: where the attribute fork starts, in 8-byte units past the core (0: no attribute fork).</summary>
    public byte ForkOffset { get => View.ForkOffset; set { var w = Writer; w.ForkOffset = value; } }

    public ForkFormat AttrFormat { get => View.AttrFormat; set { var w = Writer; w.AttrFormat = value; } }

    /// <summary>The bytes of the literal area (data and attribute forks together).</summary>
    public int LiteralSize => Image.Length - View.CoreSize;

    /// <summary>The attribute fork's bytes (empty when the inode has none).</summary>
    public Span<byte> AttrFork => View.ForkOffset == 0 ? Span<byte>.Empty : Image.AsSpan(View.AttrForkOffset, View.AttrForkSize(Image.Length));

    /// <summary>di_anextents (the 32-bit field of nrext64 inodes, else the 16-bit one).</summary>
    public ulong AttrExtentCount
    {
        get => View.AttrExtentCount;
        set
        {
            if (View.HasNrext64) BinaryPrimitives.WriteUInt32BigEndian(Image.AsSpan(DinodeView.OffBigAnextents), checked((uint)value));
            else BinaryPrimitives.WriteUInt16BigEndian(Image.AsSpan(DinodeView.OffAnextents), checked((ushort)value));
        }
    }

    /// <summary>The attribute fork as a bmbt root holder (its changes log the attribute fork).</summary>
    public IInodeRootHolder AttrRoot => new AttrRootHolder(this);

    private sealed class AttrRootHolder(InodeUpdate inode) : IInodeRootHolder
    {
        public ArraySegment<byte> Root
        {
            get
            {
                var v = inode.View;
                return new(inode.Image, v.AttrForkOffset, v.AttrForkSize(inode.Image.Length));
            }
        }

        public void RootChanged(int offset, int length) => inode.Parts |= InodeLogParts.AttrFork;
    }

    public void SetAccessTime(long seconds, uint nanoseconds) { var w = Writer; w.AccessTime = DinodeWriter.EncodeTime(seconds, nanoseconds, Bigtime); }
    public void SetModifyTime(long seconds, uint nanoseconds) { var w = Writer; w.ModifyTime = DinodeWriter.EncodeTime(seconds, nanoseconds, Bigtime); }
    public void SetChangeTime(long seconds, uint nanoseconds) { var w = Writer; w.ChangeTime = DinodeWriter.EncodeTime(seconds, nanoseconds, Bigtime); }

    /// <summary>Sets ctime (and mtime with <paramref name="modified"/>) to <paramref name="now"/>, and counts the change (di_changecount).</summary>
    public void Touch(XfsTimestamp now, bool modified)
    {
        SetChangeTime(now.Seconds, now.Nanoseconds);
        if (modified) SetModifyTime(now.Seconds, now.Nanoseconds);
        if (View.Version >= 3)
            BinaryPrimitives.WriteUInt64BigEndian(Image.AsSpan(DinodeView.OffChangecount),
                BinaryPrimitives.ReadUInt64BigEndian(Image.AsSpan(DinodeView.OffChangecount)) + 1);
    }

    ArraySegment<byte> IInodeRootHolder.Root => new(Image, View.CoreSize, View.DataForkSize(Image.Length));

    void IInodeRootHolder.RootChanged(int offset, int length) => Parts |= InodeLogParts.DataFork;

    /// <summary>Copies the image into the cluster buffer and logs the inode in <paramref name="tx"/>; the cache forgets the old copy at commit.</summary>
    public void Log(Transaction tx, InodeCache cache)
    {
        _cache = cache;
        tx.JoinInode(this);
        // Quota: what changed since the image last logged (or read) moves between the owners' dquots in this part.
        var owner = QuotaOwner;
        tx.ChargeInode(Number, _charged, owner);
        _charged = owner;
        var (cluster, offset) = cache.JoinCluster(tx, Number);
        // Readers verify what they decode from the cluster bytes: the copy there carries a current CRC (the LSN is
        // stamped when the log writes the inode back).
        if (View.Version >= 3) XfsCrc.Stamp(Image, DinodeView.OffCrc);
        // The item's copy of the image serves the log, the cluster (copied in at commit) and the inode cache (copied
        // into its entry at commit): the working copy may go on changing meanwhile.
        var item = tx.InodeItem(Number, InodeClusterLocation.Of(_sb, Number), Image, Parts);
        tx.PatchInodeCluster(cluster, offset, item.DiskImageArray);
        tx.Log(item);
        _committed = item.DiskImageArray;
        tx.OnCommit(this);
    }

    /// <summary>The part that logged this inode committed: the image it logged last becomes the cached inode's.</summary>
    void ICommitCallback.Committed() => _cache!.Committed(Number, ByteOffset, _committed!);

    void IJoinedInode.Relog(Transaction tx) => Log(tx, _cache!);

    /// <summary>
    /// The working copy of inode <paramref name="ino"/> in <paramref name="tx"/>: the one joined to it (logged earlier in
    /// its chain), or a new one from <paramref name="cache"/> (the committed inode).
    /// </summary>
    public static InodeUpdate Find(Transaction tx, InodeCache cache, ulong ino)
    {
        if (tx.FindInode(ino) is InodeUpdate joined) return joined;
        return new InodeUpdate(cache.Get(ino), tx.Mount.Superblock);
    }
}

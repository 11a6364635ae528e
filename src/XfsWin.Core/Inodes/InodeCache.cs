using System.Runtime.InteropServices;
using System.Collections.Concurrent;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Inodes;

/// <summary>
/// Reads inodes by number and keeps recently used ones. An inode number from a directory entry is
/// untrusted input: it is range-checked, then its core is verified (magic, version, CRC, recorded
/// number and UUID on V5, fork formats consistent with the file type); a free inode (mode 0) named by
/// a directory is corruption.
/// </summary>
public sealed class InodeCache
{
    private const int MaxEntries = 131072;
    private int _trimming;
    private readonly MountContext _mount;
    private readonly ConcurrentDictionary<ulong, Inode> _inodes = new();
    // Entries in _inodes, kept by hand: ConcurrentDictionary.Count takes every lock of the table (up
    // to 1024 once it has grown), which cost tens of microseconds on every cache miss.
    private int _count;
    private readonly InodeAllocation _allocation;

    public InodeCache(MountContext mount)
    {
        _mount = mount;
        _allocation = new InodeAllocation(mount);
    }

    public Inode Get(ulong ino)
    {
        if (_inodes.TryGetValue(ino, out var cached)) return cached;
        var inode = Load(ino);
        if (_inodes.TryAdd(ino, inode) && Interlocked.Increment(ref _count) > MaxEntries) Trim();
        return inode;
    }

    /// <summary>
    /// The inode <see cref="Get"/> returns, not kept when it was not cached already: for passes that visit each of
    /// many inodes once (a check), where keeping them would only push out inodes that are used again and leave the
    /// garbage collector copying short-lived inodes between generations.
    /// </summary>
    public Inode GetTransient(ulong ino) => _inodes.TryGetValue(ino, out var cached) ? cached : Load(ino);

    internal bool IsCached(ulong ino) => _inodes.ContainsKey(ino);

    /// <summary>Drops the cached copy of an inode a transaction changed: the next <see cref="Get"/> decodes the published cluster bytes.</summary>
    public void Invalidate(ulong ino)
    {
        if (_inodes.TryRemove(ino, out _)) Interlocked.Decrement(ref _count);
    }

    /// <summary>
    /// A transaction that logged inode <paramref name="ino"/> committed <paramref name="image"/>: the cached inode takes
    /// the new bytes in place (<see cref="Inode.Refresh"/>; the caller holds the volume's change lock exclusively), or
    /// an inode not cached is added with a copy of them (the cluster buffer holds the same bytes, so a later miss
    /// decodes the same inode). The image stays the caller's.
    /// </summary>
    public void Committed(ulong ino, long byteOffset, ReadOnlySpan<byte> image)
    {
        if (_inodes.TryGetValue(ino, out var cached) && cached.Raw.Length == image.Length && cached.ByteOffset == byteOffset)
        {
            cached.Refresh(image, _mount.Superblock);
            return;
        }
        var inode = new Inode(ino, image.ToArray(), byteOffset, _mount.Superblock);
        if (!_inodes.TryAdd(ino, inode)) _inodes[ino] = inode;
        else if (Interlocked.Increment(ref _count) > MaxEntries) Trim();
    }

    /// <summary>
    /// The cluster buffers (those <see cref="Get"/> reads) that hold the <paramref name="blocks"/> blocks of a new inode
    /// chunk at AG block <paramref name="agbno"/>, joined to <paramref name="tx"/>: with each, where the chunk's part
    /// starts in it, its first AG block and its block count. A buffer that lies wholly inside the chunk is taken new
    /// (nothing read: the chunk's bytes are all about to be written); one the chunk only partly covers (a sparse chunk)
    /// is read. <paramref name="logged"/> false joins them as inode clusters, whose changes are published at commit but
    /// not logged as buffer items (an icreate item stands for them).
    /// </summary>
    public List<(Metadata.MetadataBuffer Buffer, int Offset, uint FirstBlock, uint Blocks)> NewChunkClusters(Journal.Transaction tx, uint agno, uint agbno,
        uint blocks, bool logged)
    {
        var sb = _mount.Superblock;
        var result = new List<(Metadata.MetadataBuffer, int, uint, uint)>(1);
        for (uint b = agbno; b < agbno + blocks;)
        {
            ulong ino = ((ulong)agno << sb.AgInoLog) | ((ulong)b << sb.InoPBlog);
            var (offset, length) = ClusterOf(ino);
            long chunkByte = sb.AgBlockToByte(agno, b);
            uint inBuffer = (uint)(Math.Min(offset + length, sb.AgBlockToByte(agno, agbno + blocks)) - chunkByte) >> sb.BlockLog;
            bool whole = offset >= sb.AgBlockToByte(agno, agbno) && offset + length <= sb.AgBlockToByte(agno, agbno + blocks);
            Metadata.MetadataBuffer buffer = (whole, logged) switch
            {
                (true, true) => tx.GetNew(offset, length, ClusterVerifier.Kind, 0, null, Journal.BufType.Dinode),
                (true, false) => tx.GetNewInodeCluster(offset, length, ClusterVerifier.Kind, 0),
                (false, true) => tx.Read(offset, length, 0, ClusterVerifier, null, Journal.BufType.Dinode),
                (false, false) => tx.JoinInodeCluster(offset, length, 0, ClusterVerifier),
            };
            result.Add((buffer, (int)(chunkByte - offset), b, inBuffer));
            b += inBuffer;
        }
        return result;
    }

    /// <summary>
    /// Joins the cluster buffer that holds <paramref name="ino"/> (the one <see cref="Get"/> reads) to
    /// <paramref name="tx"/>, locked for a change; returns it and the inode's byte offset inside it.
    /// </summary>
    public (Metadata.MetadataBuffer Cluster, int Offset) JoinCluster(Journal.Transaction tx, ulong ino)
    {
        var (offset, length) = ClusterOf(ino);
        var buffer = tx.JoinInodeCluster(offset, length, 0, ClusterVerifier);
        return (buffer, (int)(_mount.Superblock.InodeToByte(ino) - offset));
    }

    /// <summary>
    /// The inode chunk holding AG blocks [<paramref name="agbno"/>, +<paramref name="blocks"/>) is released: every buffer
    /// of this cache over it is invalidated in <paramref name="tx"/> (the blocks go back to free space), and its inodes
    /// leave the cache when it commits.
    /// </summary>
    public void ChunkReleased(Journal.Transaction tx, uint agno, uint agbno, uint blocks)
    {
        var sb = _mount.Superblock;
        long previous = -1;
        for (uint b = agbno; b < agbno + blocks; b++)
        {
            ulong first = ((ulong)agno << sb.AgInoLog) | ((ulong)b << sb.InoPBlog);
            var (offset, length) = ClusterOf(first);
            if (offset != previous) tx.Invalidate(offset, length);
            previous = offset;
            tx.OnCommit(() =>
            {
                for (int i = 0; i < sb.InodesPerBlock; i++) Invalidate(first + (ulong)i);
            });
        }
    }

    /// <summary>Blocks per read: one inode chunk (64 inodes) when chunks are aligned, else one block.</summary>
    private static uint ClusterBlocks(Format.Superblock sb)
    {
        uint chunkBlocks = Math.Max(1u, (uint)(InobtChunkInodes >> sb.InoPBlog));
        bool aligned = (sb.VersionNum & Format.SuperblockFeatures.VersionAlign) != 0 && sb.InodeAlignment >= chunkBlocks;
        return aligned ? chunkBlocks : 1;
    }

    private const int InobtChunkInodes = 64;

    /// <summary>Drops about a quarter of the cached inodes (enumeration order is arbitrary, so this is a random sample).</summary>
    private void Trim()
    {
        if (Interlocked.Exchange(ref _trimming, 1) != 0) return;
        try
        {
            int excess = Volatile.Read(ref _count) - MaxEntries * 3 / 4;
            foreach (var pair in _inodes)
            {
                if (excess <= 0) break;
                if (_inodes.TryRemove(pair.Key, out _))
                {
                    Interlocked.Decrement(ref _count);
                    excess--;
                }
            }
        }
        finally
        {
            Volatile.Write(ref _trimming, 0);
        }
    }

    private static RawBlockVerifier ClusterVerifier => new("inode cluster", 1);

    /// <summary>
    /// Where the cluster holding <paramref name="ino"/> lies. Inodes are read a whole chunk-aligned
    /// cluster at a time (what the kernel reads too), so the neighbours a listing asks for next come
    /// from the cache. Chunks start on inode-alignment boundaries inside their AG; the cluster never
    /// leaves the AG (or the device: a truncated image falls back to the one block).
    /// </summary>
    private (long Offset, int Length) ClusterOf(ulong ino)
    {
        var sb = _mount.Superblock;
        uint agno = sb.InoToAgno(ino);
        uint agbno = sb.InoToAgino(ino) >> sb.InoPBlog;
        uint clusterBlocks = ClusterBlocks(sb);
        uint clusterStart = agbno / clusterBlocks * clusterBlocks;
        uint blocks = Math.Min(clusterBlocks, sb.AgBlocks - clusterStart);
        long clusterOffset = sb.AgBlockToByte(agno, clusterStart);
        int clusterLength = (int)(blocks << sb.BlockLog);
        if (clusterOffset + clusterLength > _mount.Device.Length)
            return (sb.InodeToByte(ino) & ~((long)sb.BlockSize - 1), (int)sb.BlockSize);
        return (clusterOffset, clusterLength);
    }

    /// <summary>
    /// Starts background reads of the clusters holding <paramref name="inodes"/> that are not cached,
    /// clusters close together on disk merged into one read of up to 1 MiB. Invalid numbers are
    /// skipped: whoever asks for them gets the error. Meant for background callers: it waits when
    /// many read-aheads are in flight.
    /// </summary>
    public void ReadAhead(List<ulong> inodes)
    {
        var sb = _mount.Superblock;
        var clusters = new List<long>(inodes.Count);
        int length = 0;
        foreach (var ino in inodes)
        {
            if (!sb.IsValidInode(ino) || _inodes.ContainsKey(ino)) continue;
            var (offset, len) = ClusterOf(ino);
            if (length == 0) length = len;
            if (len == length && !_mount.Buffers.IsCachedOrPending(offset, len, 0, ClusterVerifier.Kind)) clusters.Add(offset);
        }
        // Each cluster once (many inodes share one), then scattered read-ahead merges neighbours.
        clusters.Sort();
        int unique = 0;
        for (int k = 0; k < clusters.Count; k++)
            if (unique == 0 || clusters[k] != clusters[unique - 1]) clusters[unique++] = clusters[k];
        _mount.Buffers.StartPrefetchScattered(CollectionsMarshal.AsSpan(clusters)[..unique], length, 0, ClusterVerifier, waitForSlot: true);
    }

    /// <summary>
    /// Decodes into the cache, on a background thread, the inodes whose clusters <see cref="ReadAhead"/>
    /// started reading (waiting for those reads): the lookups that follow a directory's first one then
    /// find their inodes decoded. Only what verifies is kept, and nothing is reported: an inode that
    /// fails is left to whoever asks for it, who gets the error. V5 only (a V4 inode's use is proven
    /// by the inode btree, whose reads report).
    /// </summary>
    public void Preload(List<ulong> inodes)
    {
        var sb = _mount.Superblock;
        if (!sb.IsV5) return;
        long cachedOffset = -1;
        byte[]? cluster = null;
        foreach (var ino in inodes)
        {
            if (!sb.IsValidInode(ino) || _inodes.ContainsKey(ino)) continue;
            var (clusterOffset, clusterLength) = ClusterOf(ino);
            if (clusterOffset != cachedOffset)
            {
                cachedOffset = clusterOffset;
                if (!_mount.Buffers.TryGetCached(clusterOffset, clusterLength, 0, ClusterVerifier.Kind, out cluster))
                {
                    // Its read-ahead did not leave it cached (the read was dropped, or the cluster evicted since): read
                    // it here, on this background thread, so every child is decoded ahead whatever the timing.
                    try
                    {
                        cluster = _mount.Buffers.Read(clusterOffset, clusterLength, 0, ClusterVerifier);
                    }
                    catch (XfsException)
                    {
                        cluster = null; // reported to whoever asks for these inodes
                    }
                }
            }
            if (cluster is null || Decode(ino, cluster, clusterOffset, out _) is not { } inode) continue;
            if (_inodes.TryAdd(ino, inode) && Interlocked.Increment(ref _count) > MaxEntries) Trim();
        }
    }

    /// <summary>
    /// Inode <paramref name="ino"/> from its cluster, verified (magic, version, CRC, self-address;
    /// in use), or null with the reason in <paramref name="failure"/>.
    /// </summary>
    private Inode? Decode(ulong ino, byte[] cluster, long clusterOffset, out string failure)
    {
        var sb = _mount.Superblock;
        long offset = sb.InodeToByte(ino);
        var raw = cluster.AsSpan((int)(offset - clusterOffset), sb.InodeSize);
        var check = DinodeView.Verify(raw, ino, sb);
        failure = !check.IsOk ? check.ToString() : new DinodeView(raw).Mode == 0 ? "a directory names this inode but it is free" : "";
        return failure.Length == 0 ? new Inode(ino, raw.ToArray(), offset, sb) : null;
    }

    private Inode Load(ulong ino)
    {
        var sb = _mount.Superblock;
        if (!sb.IsValidInode(ino))
            throw _mount.Corrupt("inode number", 0, $"inode {ino} does not exist on this volume (outside every allocation group)");
        long offset = sb.InodeToByte(ino);
        var (clusterOffset, clusterLength) = ClusterOf(ino);
        var cluster = _mount.Buffers.Read(clusterOffset, clusterLength, 0, ClusterVerifier);
        var inode = Decode(ino, cluster, clusterOffset, out var failure) ?? throw _mount.Corrupt($"inode {ino}", offset, failure);
        // V4 inodes carry no CRC or self-address: only the inode btree can prove this one is in use.
        if (!sb.IsV5 && !_allocation.IsAllocated(ino))
            throw _mount.Corrupt($"inode {ino}", offset, "the inode btree says this inode is not allocated");
        return inode;
    }
}

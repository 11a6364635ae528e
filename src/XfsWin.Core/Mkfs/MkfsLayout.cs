using XfsWin.Format;

namespace XfsWin.Mkfs;

/// <summary>An inode chunk mkfs allocates: where, and how many of its first inodes are in use.</summary>
public sealed record InodeChunk(uint AgNumber, uint AgBlock, int UsedInodes);

/// <summary>One AG as mkfs leaves it: free extents, the AGFL's blocks, its inode chunk, and (with rmapbt) who owns every used block.</summary>
public sealed record AgLayout(
    uint AgNumber,
    uint Length,
    IReadOnlyList<AllocRecord> FreeExtents,
    IReadOnlyList<uint> FreelistBlocks,
    IReadOnlyList<(uint Start, uint Length, ulong Owner)> Rmaps,
    InodeChunk? Chunk)
{
    public uint FreeBlocks => (uint)FreeExtents.Sum(e => (long)e.BlockCount);
    public uint Longest => FreeExtents.Count == 0 ? 0 : FreeExtents.Max(e => e.BlockCount);
}

/// <summary>
/// Where everything goes: per AG, the headers, btree roots, AGFL blocks (taken the way
/// xfs_alloc_fix_freelist takes them: the start of the smallest free extent that holds them all), the
/// internal log (an external one takes nothing here), and in AG 0 the first inode chunk at the root inode mkfs.xfs predicts.
/// </summary>
public sealed class MkfsLayout
{
    public MkfsGeometry Geometry { get; }
    public IReadOnlyList<AgLayout> Ags { get; }
    public ulong RootInode { get; }
    /// <summary>AG 0 block where the first inode chunk starts, and its length in blocks.</summary>
    public uint ChunkBlock { get; }
    public uint ChunkBlocks { get; }
    /// <summary>Inodes in the first allocation (64, or one block's worth when a block holds more).</summary>
    public int ChunkInodes { get; }
    /// <summary>Without metadir: root directory, realtime bitmap and summary, all in the first chunk.</summary>
    public const int InodesUsed = 3;
    /// <summary>metadir: the metadata directory root (after the root directory) and its "rtgroups" directory.</summary>
    public ulong MetadirInode { get; }
    public ulong RtGroupsInode { get; }
    /// <summary>The metadata directory root's generation, which the parent pointer of "rtgroups" records.</summary>
    public uint MetadirGeneration { get; } = (uint)System.Security.Cryptography.RandomNumberGenerator.GetInt32(int.MinValue, int.MaxValue);
    public IReadOnlyList<InodeChunk> Chunks { get; }
    public ulong InodeCount => (ulong)(Chunks.Count * ChunkInodes);
    public ulong FreeInodeCount => InodeCount - (ulong)Chunks.Sum(c => c.UsedInodes);

    public MkfsLayout(MkfsGeometry g)
    {
        Geometry = g;
        RootInode = g.RootInode;
        ChunkBlock = (uint)(RootInode >> g.InoPBlog);
        ChunkBlocks = g.InodeChunkBlocks;
        ChunkInodes = g.InodesPerChunkAllocation;
        int n = g.InitialFreelistBlocks;
        var ags = new AgLayout[g.AgCount];
        var chunks = new List<InodeChunk>();
        // metadir: "rtgroups" is a child of a metadata directory, and those start in the log's AG.
        bool metadirChunk = g.Metadir && g.LogAgNumber != 0;
        if (g.Metadir) MetadirInode = RootInode + 1;
        for (uint agno = 0; agno < g.AgCount; agno++)
        {
            uint length = g.AgLength(agno);
            var free = new List<(uint Start, uint Len)>();
            var rmaps = HeaderRmaps(g);

            uint prealloc = g.PreallocBlocks;
            if (!g.ExternalLog && agno == g.LogAgNumber)
            {
                uint logStart = g.LogAgBlock;
                if (logStart > prealloc) free.Add((prealloc, logStart - prealloc));
                uint tail = logStart + g.LogBlocks;
                if (tail < length) free.Add((tail, length - tail));
                rmaps.Add((logStart, g.LogBlocks, RmapRecord.OwnLog));
            }
            else
            {
                free.Add((prealloc, length - prealloc));
            }

            // The AGFL fill: the smallest free extent that holds n blocks (lowest block on ties), from its start.
            var freelist = new List<uint>();
            if (n > 0)
            {
                int pick = -1;
                for (int i = 0; i < free.Count; i++)
                {
                    if (free[i].Len >= n && (pick < 0 || free[i].Len < free[pick].Len)) pick = i;
                }
                if (pick < 0) throw new MkfsUsageException($"allocation group {agno} has no room for its {n}-block free list");
                var (s, l) = free[pick];
                for (uint b = 0; b < n; b++) freelist.Add(s + b);
                free[pick] = (s + (uint)n, l - (uint)n);
                rmaps.Add((s, (uint)n, RmapRecord.OwnAg));
            }

            if (agno == 0)
            {
                int hit = free.FindIndex(e => e.Start <= ChunkBlock && ChunkBlock + ChunkBlocks <= e.Start + e.Len);
                if (hit < 0)
                    throw new MkfsUsageException($"the first inode chunk (block {ChunkBlock}) does not fit in allocation group 0; make the log smaller or place it in another AG");
                var (s, l) = free[hit];
                free.RemoveAt(hit);
                if (ChunkBlock + ChunkBlocks < s + l) free.Insert(hit, (ChunkBlock + ChunkBlocks, s + l - ChunkBlock - ChunkBlocks));
                if (ChunkBlock > s) free.Insert(hit, (s, ChunkBlock - s));
                rmaps.Add((ChunkBlock, ChunkBlocks, RmapRecord.OwnInodes));
                chunks.Add(new InodeChunk(0, ChunkBlock, g.Metadir ? (metadirChunk ? 2 : 3) : InodesUsed));
                if (g.Metadir && !metadirChunk) RtGroupsInode = RootInode + 2;
            }
            else if (metadirChunk && agno == g.LogAgNumber)
            {
                // The inode allocator's empty-AG case: the lowest suitably aligned free range of a chunk.
                uint align = g.InodeAllocationAlignment;
                uint at = 0;
                int hit = -1;
                for (int i = 0; i < free.Count && hit < 0; i++)
                {
                    uint start = (free[i].Start + align - 1) / align * align;
                    if (start + ChunkBlocks <= free[i].Start + free[i].Len)
                    {
                        hit = i;
                        at = start;
                    }
                }
                if (hit < 0) throw new MkfsUsageException($"allocation group {agno} has no room for the metadata directory's inode chunk");
                var (s2, l2) = free[hit];
                free.RemoveAt(hit);
                if (at + ChunkBlocks < s2 + l2) free.Insert(hit, (at + ChunkBlocks, s2 + l2 - at - ChunkBlocks));
                if (at > s2) free.Insert(hit, (s2, at - s2));
                rmaps.Add((at, ChunkBlocks, RmapRecord.OwnInodes));
                chunks.Add(new InodeChunk(agno, at, 1));
                RtGroupsInode = ((ulong)agno << g.AgInoLog) | ((ulong)at << g.InoPBlog);
            }

            free.RemoveAll(e => e.Len == 0);
            free.Sort((a, b) => a.Start.CompareTo(b.Start));
            ags[agno] = new AgLayout(agno, length,
                [.. free.Select(e => new AllocRecord(e.Start, e.Len))],
                freelist,
                g.Rmapbt ? MergeRmaps(rmaps) : [],
                chunks.Find(c => c.AgNumber == agno));
        }
        Ags = ags;
        Chunks = chunks;
    }

    /// <summary>The reverse mappings every AG starts with (xfs_rmaproot_init): headers, the free-space and inode btree roots, the rmapbt and refcountbt roots.</summary>
    private static List<(uint Start, uint Length, ulong Owner)> HeaderRmaps(MkfsGeometry g)
    {
        var rmaps = new List<(uint Start, uint Length, ulong Owner)>
        {
            (0, g.FirstRootBlock, RmapRecord.OwnFs),
            (g.BnoRoot, 2, RmapRecord.OwnAg),
            (g.InoRoot, g.Finobt ? 2u : 1u, RmapRecord.OwnInobt),
        };
        if (g.Rmapbt) rmaps.Add((g.RmapRoot, 1, RmapRecord.OwnAg));
        if (g.Reflink) rmaps.Add((g.RefcountRoot, 1, RmapRecord.OwnRefcount));
        return rmaps;
    }

    /// <summary>
    /// An AG a grow adds (xfs_ag_init_headers on a mounted volume): its headers and empty btree roots, one free
    /// extent from the first block after the roots to its end, an empty free list and no inodes.
    /// </summary>
    public static AgLayout GrownAg(MkfsGeometry g, uint agno, uint length)
    {
        uint prealloc = g.PreallocBlocks;
        if (length <= prealloc) throw new ArgumentOutOfRangeException(nameof(length), $"an AG of {length} blocks cannot hold its {prealloc} header and root blocks");
        return new AgLayout(agno, length, [new AllocRecord(prealloc, length - prealloc)], [],
            g.Rmapbt ? MergeRmaps(HeaderRmaps(g)) : [], null);
    }

    /// <summary>Sorted by start, adjacent extents of one non-inode owner merged (as xfs_rmap_map does).</summary>
    private static List<(uint Start, uint Length, ulong Owner)> MergeRmaps(List<(uint Start, uint Length, ulong Owner)> rmaps)
    {
        rmaps.Sort((a, b) => a.Start.CompareTo(b.Start));
        var merged = new List<(uint Start, uint Length, ulong Owner)>();
        foreach (var r in rmaps)
        {
            if (merged.Count > 0 && merged[^1].Owner == r.Owner && merged[^1].Start + merged[^1].Length == r.Start)
                merged[^1] = (merged[^1].Start, merged[^1].Length + r.Length, r.Owner);
            else
                merged.Add(r);
        }
        return merged;
    }

    /// <summary>sb_fdblocks after mkfs: every AG's free extents plus its AGFL blocks (the AGFL counts as free space).</summary>
    public ulong FreeDataBlocks => (ulong)Ags.Sum(a => (long)a.FreeBlocks + a.FreelistBlocks.Count);
}

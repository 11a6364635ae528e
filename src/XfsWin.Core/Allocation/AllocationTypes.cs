using XfsWin.Format;

namespace XfsWin.Allocation;

/// <summary>Flags of a reverse mapping (rm_offset's top bits).</summary>
[Flags]
public enum RmapFlags
{
    None = 0,
    /// <summary>The extent belongs to the attribute fork.</summary>
    AttrFork = 1,
    /// <summary>The block is an extent B+tree (bmbt) block of the inode.</summary>
    BmbtBlock = 2,
    /// <summary>The extent is unwritten (preallocated) file data.</summary>
    Unwritten = 4,
}

/// <summary>
/// Who owns an extent in the reverse map (the kernel's xfs_owner_info): an inode with the file offset of the
/// extent's first block and its flags, or one of the special owners (<see cref="RmapRecord.OwnAg"/> and friends),
/// which map no offset.
/// </summary>
public readonly record struct RmapOwner(ulong Owner, ulong Offset, RmapFlags Flags)
{
    public static RmapOwner Fs => new(RmapRecord.OwnFs, 0, RmapFlags.None);
    public static RmapOwner Log => new(RmapRecord.OwnLog, 0, RmapFlags.None);
    /// <summary>Free-space and reverse-map tree blocks and AGFL blocks.</summary>
    public static RmapOwner Ag => new(RmapRecord.OwnAg, 0, RmapFlags.None);
    /// <summary>Inode and free-inode tree blocks.</summary>
    public static RmapOwner Inobt => new(RmapRecord.OwnInobt, 0, RmapFlags.None);
    /// <summary>Inode chunks.</summary>
    public static RmapOwner Inodes => new(RmapRecord.OwnInodes, 0, RmapFlags.None);
    /// <summary>Reference count tree blocks.</summary>
    public static RmapOwner Refcount => new(RmapRecord.OwnRefcount, 0, RmapFlags.None);
    /// <summary>Copy-on-write staging extents.</summary>
    public static RmapOwner Cow => new(RmapRecord.OwnCow, 0, RmapFlags.None);
    /// <summary>No reverse-map change here: a deferred rmap update (RUI) makes it (XFS_RMAP_OINFO_SKIP_UPDATE).</summary>
    public static RmapOwner Null => new(RmapRecord.OwnNull, 0, RmapFlags.None);
    /// <summary>Whatever maps the extent (log recovery freeing an EFI's extent: XFS_RMAP_OWN_UNKNOWN).</summary>
    public static RmapOwner Unknown => new(RmapRecord.OwnUnknown, 0, RmapFlags.None);

    /// <summary>True when the allocator leaves the reverse map alone (<see cref="Null"/>).</summary>
    public bool SkipsReverseMap => Owner == RmapRecord.OwnNull;

    /// <summary>File data (or attribute-fork blocks) of inode <paramref name="ino"/> starting at file block <paramref name="fileOffset"/>.</summary>
    public static RmapOwner InodeData(ulong ino, ulong fileOffset, bool attrFork = false, bool unwritten = false) =>
        new(ino, fileOffset, (attrFork ? RmapFlags.AttrFork : 0) | (unwritten ? RmapFlags.Unwritten : 0));

    /// <summary>An extent B+tree block of inode <paramref name="ino"/> (offset 0 by definition).</summary>
    public static RmapOwner InodeBmbt(ulong ino, bool attrFork = false) =>
        new(ino, 0, RmapFlags.BmbtBlock | (attrFork ? RmapFlags.AttrFork : 0));

    public bool IsSpecial => RmapRecord.IsNonInodeOwner(Owner);

    /// <summary>True when consecutive blocks map consecutive file offsets (inode data, not bmbt blocks).</summary>
    internal bool AdvancesOffset => !IsSpecial && (Flags & RmapFlags.BmbtBlock) == 0;

    /// <summary>The on-disk rm_offset: file offset and flag bits.</summary>
    internal ulong EncodedOffset =>
        (AdvancesOffset ? Offset & RmapRecord.OffsetMask : 0)
        | ((Flags & RmapFlags.AttrFork) != 0 ? RmapRecord.AttrForkFlag : 0)
        | ((Flags & RmapFlags.BmbtBlock) != 0 ? RmapRecord.BmbtBlockFlag : 0)
        | ((Flags & RmapFlags.Unwritten) != 0 ? RmapRecord.UnwrittenFlag : 0);

    /// <summary>The owner of the block <paramref name="blocks"/> further on.</summary>
    internal RmapOwner Advance(ulong blocks) => AdvancesOffset ? this with { Offset = Offset + blocks } : this;

    public override string ToString() => IsSpecial
        ? Owner switch
        {
            RmapRecord.OwnFs => "OWN_FS", RmapRecord.OwnLog => "OWN_LOG", RmapRecord.OwnAg => "OWN_AG",
            RmapRecord.OwnInobt => "OWN_INOBT", RmapRecord.OwnInodes => "OWN_INODES", RmapRecord.OwnRefcount => "OWN_REFC",
            RmapRecord.OwnCow => "OWN_COW", RmapRecord.OwnNull => "OWN_NULL", RmapRecord.OwnUnknown => "OWN_UNKNOWN",
            _ => $"owner {(long)Owner}",
        }
        : $"inode {Owner} offset {Offset}{(Flags != 0 ? " " + Flags : "")}";
}

/// <summary>How an extent is searched for inside an AG (the kernel's allocation types).</summary>
public enum AllocationMode
{
    /// <summary>Any extent of the wanted size (xfs_alloc_ag_vextent_size, by the cntbt).</summary>
    BySize,
    /// <summary>As close to the target as possible, searching the bnobt both ways (xfs_alloc_ag_vextent_near).</summary>
    Near,
    /// <summary>Exactly at the target block (xfs_alloc_ag_vextent_exact); fails rather than move.</summary>
    Exact,
}

/// <summary>Which AGs an allocation may use.</summary>
public enum AllocationScope
{
    /// <summary>Only the target's AG.</summary>
    ThisAg,
    /// <summary>The target's AG, then every other AG in rotation (xfs_alloc_vextent_start_ag).</summary>
    StartAg,
    /// <summary>The target's AG, then the AGs above it only (xfs_alloc_vextent_first_ag): safe while the transaction holds AGFs.</summary>
    FirstAg,
}

/// <summary>Which per-AG reservation an allocation may dip into (xfs_ag_resv_type).</summary>
public enum AgReservation
{
    /// <summary>Ordinary allocations: leave every reservation untouched.</summary>
    None,
    /// <summary>Blocks of the trees the metadata reservation exists for (finobt, refcountbt).</summary>
    Metadata,
}

/// <summary>
/// One extent allocation (the kernel's xfs_alloc_arg). <see cref="Target"/> is a file system block number
/// (AG-encoded); for <see cref="AllocationMode.BySize"/> only its AG matters.
/// </summary>
public readonly record struct AllocationRequest()
{
    public required ulong Target { get; init; }
    public uint MinLength { get; init; } = 1;
    public required uint MaxLength { get; init; }
    /// <summary>Start block alignment in AG blocks (stripe unit, extent size hint); 1 = none. Not allowed with <see cref="AllocationMode.Exact"/>.</summary>
    public uint Alignment { get; init; } = 1;
    public AllocationMode Mode { get; init; } = AllocationMode.Near;
    public AllocationScope Scope { get; init; } = AllocationScope.StartAg;
    public required RmapOwner Owner { get; init; }
    /// <summary>Blocks that must stay free in the chosen AG after this allocation (for the caller's further needs, e.g. bmbt splits).</summary>
    public uint MinLeft { get; init; }
    /// <summary>Blocks the whole operation needs from the AG (at least the allocation itself).</summary>
    public uint Total { get; init; }
    public AgReservation Reservation { get; init; } = AgReservation.None;
    /// <summary>
    /// The AG blocks the allocation must lie in: from <see cref="MinAgBlock"/> up to (not including) <see cref="EndAgBlock"/>
    /// (the kernel's min_agbno and max_agbno; a sparse inode chunk keeps the whole chunk it belongs to inside the AG).
    /// </summary>
    public uint MinAgBlock { get; init; }
    public uint EndAgBlock { get; init; } = uint.MaxValue;
}

/// <summary>An allocated extent: <see cref="Length"/> blocks at <see cref="AgBlock"/> of AG <see cref="Agno"/>.</summary>
public readonly record struct AllocatedExtent(uint Agno, uint AgBlock, uint Length, ulong StartBlock);

/// <summary>The committed state of one AG's space as the allocator keeps it in memory.</summary>
public readonly record struct AgSpaceInfo(uint Agno, uint FreeBlocks, uint Longest, uint FreeListCount, uint BtreeBlocks,
    uint RmapBlocks, int BusyExtents, uint ReservedBlocks);

using System.Buffers.Binary;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

/// <summary>
/// The state of an exchange of file mappings (xfs_exchmaps_intent): the two inodes (with their generations, as the
/// XMI names them), where the ranges still to exchange start, how many blocks are left, the flags, and the sizes each
/// file gets at the end (-1: unchanged).
/// </summary>
internal readonly record struct ExchangeState(ulong Ino1, ulong Ino2, uint Gen1, uint Gen2, ulong StartOffset1, ulong StartOffset2,
    ulong BlockCount, ulong Flags, long Size1, long Size2)
{
    public const ulong AttrFork = 1, SetSizes = 2, Ino1Written = 4, ClearIno1Reflink = 8, ClearIno2Reflink = 16;
    /// <summary>XFS_EXCHMAPS_LOGGED_FLAGS: what an XMI may carry.</summary>
    public const ulong LoggedFlags = AttrFork | SetSizes | Ino1Written | ClearIno1Reflink | ClearIno2Reflink;
    /// <summary>XFS_EXCHMAPS_PARAMS: what recovery takes from the log (the rest it works out from the inodes again).</summary>
    public const ulong Params = AttrFork | SetSizes | Ino1Written;

    public ForkKind Fork => (Flags & AttrFork) != 0 ? ForkKind.Attr : ForkKind.Data;
    public bool HasPostOpWork => (Flags & (ClearIno1Reflink | ClearIno2Reflink)) != 0;

    /// <summary>The state after exchanging <paramref name="blocks"/> more blocks (xmi_advance).</summary>
    public ExchangeState Advance(ulong blocks) =>
        this with { StartOffset1 = StartOffset1 + blocks, StartOffset2 = StartOffset2 + blocks, BlockCount = BlockCount - blocks };
}

/// <summary>
/// Exchanges of file mappings as deferred work (xfs_exchmaps.c, xfs_exchmaps_item.c): an XMI promises the rest of the
/// exchange; each step finds the next pair of mappings that differ, queues their unmapping and mapping into the other
/// file as bmap intents (BUI), raises the on-disk sizes so no mapping lies past EOF, and logs an XMD and a new XMI for
/// what is left; the last step sets the sizes (when asked), the last part clears reflink flags that were exchanged.
/// Used by XFS_IOC_EXCHANGE_RANGE (<see cref="XfsVolume.ExchangeRange"/>) and by log recovery to finish an exchange
/// left unfinished, for regular files' data forks (exchanges of
/// attribute forks, directories and symlinks, which only online repair makes, need work on their short forms after
/// the exchange, which this engine does not do: recovery refuses them).
/// </summary>
internal sealed class ExchangeWork(InodeCache inodes, BmapUpdateWork bmaps) : DeferredWorkType<ExchangeState>
{
    public override string Name => "mapping exchange";
    public override int MaxItems => 1;

    public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<ExchangeState> items)
    {
        var s = items[0];
        return IntentLogItem.ExchangeMapping(id, s.Ino1, s.Ino2, s.Gen1, s.Gen2, s.StartOffset1, s.StartOffset2, s.BlockCount, s.Flags, s.Size1, s.Size2);
    }

    public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<ExchangeState> items) => IntentLogItem.Done(LogItemType.Xmd, intent.Id);

    /// <summary>One step (xfs_exchmaps_finish_one); the state left when more steps or the post-op work remain.</summary>
    public override ExchangeState? Finish(Transaction tx, ExchangeState s)
    {
        if (s.BlockCount > 0)
        {
            s = FindMappings(tx, s, out var irec1, out var irec2);
            if (s.BlockCount > 0) s = OneStep(tx, s, irec1, irec2);
            if ((s.Flags & ExchangeState.SetSizes) != 0 && s.BlockCount == 0)
            {
                SetSize(tx, s.Ino1, s.Size1);
                SetSize(tx, s.Ino2, s.Size2);
            }
        }
        else if (s.HasPostOpWork)
        {
            if ((s.Flags & ExchangeState.ClearIno1Reflink) != 0) ClearReflink(tx, s.Ino1);
            if ((s.Flags & ExchangeState.ClearIno2Reflink) != 0) ClearReflink(tx, s.Ino2);
            s = s with { Flags = s.Flags & ~(ExchangeState.ClearIno1Reflink | ExchangeState.ClearIno2Reflink) };
        }
        return s.BlockCount > 0 || s.HasPostOpWork ? s : null;
    }

    /// <summary>A mapping of a fork at <paramref name="offset"/>: the extent there (trimmed), or the hole up to the next one, at most <paramref name="max"/> blocks.</summary>
    private static (BmbtRecord Map, bool Hole) Read(ExtentMapEditor editor, ulong offset, ulong max)
    {
        if (editor.TryMap(offset, out var e))
        {
            ulong len = Math.Min(e.FileEnd - offset, max);
            return (new BmbtRecord(offset, e.StartBlock + (offset - e.FileOffset), (uint)len, e.Unwritten), false);
        }
        ulong next = editor.NextMapped(offset);
        ulong holeLen = Math.Min(next == ulong.MaxValue ? max : next - offset, max);
        return (new BmbtRecord(offset, 0, (uint)Math.Min(holeLen, BmbtRecord.MaxBlockCount), false), true);
    }

    /// <summary>xfs_exchmaps_find_mappings: walks both ranges to the next pair of mappings that differ (holes in both, or the same blocks, are skipped).</summary>
    private ExchangeState FindMappings(Transaction tx, ExchangeState s, out (BmbtRecord Map, bool Hole) irec1, out (BmbtRecord Map, bool Hole) irec2)
    {
        var f1 = bmaps.Editor(tx, InodeUpdate.Find(tx, inodes, s.Ino1), s.Fork);
        var f2 = bmaps.Editor(tx, InodeUpdate.Find(tx, inodes, s.Ino2), s.Fork);
        irec1 = irec2 = default;
        for (; s.BlockCount > 0; s = s.Advance(irec1.Map.BlockCount))
        {
            irec1 = Read(f1, s.StartOffset1, s.BlockCount);
            // INO1_WRITTEN: only the first file's written mappings are exchanged.
            if ((s.Flags & ExchangeState.Ino1Written) != 0 && (irec1.Hole || irec1.Map.Unwritten)) continue;
            irec2 = Read(f2, s.StartOffset2, irec1.Map.BlockCount);
            irec1 = (irec1.Map with { BlockCount = Math.Min(irec1.Map.BlockCount, irec2.Map.BlockCount) }, irec1.Hole);
            irec2 = (irec2.Map with { BlockCount = irec1.Map.BlockCount }, irec2.Hole);
            if (irec1.Hole != irec2.Hole || (!irec1.Hole && irec1.Map.StartBlock != irec2.Map.StartBlock)) return s;
            if (!irec1.Hole && irec1.Map.Unwritten != irec2.Map.Unwritten)
                throw tx.Mount.Corrupt($"inode {s.Ino1}", tx.Mount.Superblock.InodeToByte(s.Ino1),
                    $"it and inode {s.Ino2} map block {irec1.Map.StartBlock} in different states");
        }
        return s;
    }

    /// <summary>xfs_exchmaps_one_step: both mappings leave their files and each enters the other's (bmap intents).</summary>
    private ExchangeState OneStep(Transaction tx, ExchangeState s, (BmbtRecord Map, bool Hole) irec1, (BmbtRecord Map, bool Hole) irec2)
    {
        var fork = s.Fork;
        if (!irec1.Hole) tx.Defer(bmaps, new BmapUpdate(BmapUpdateKind.Unmap, s.Ino1, fork, irec1.Map));
        if (!irec2.Hole) tx.Defer(bmaps, new BmapUpdate(BmapUpdateKind.Unmap, s.Ino2, fork, irec2.Map));
        var into1 = irec2.Map with { FileOffset = s.StartOffset1 };
        var into2 = irec1.Map with { FileOffset = s.StartOffset2 };
        if (!irec2.Hole) tx.Defer(bmaps, new BmapUpdate(BmapUpdateKind.Map, s.Ino1, fork, into1));
        if (!irec1.Hole) tx.Defer(bmaps, new BmapUpdate(BmapUpdateKind.Map, s.Ino2, fork, into2));
        if (fork == ForkKind.Data)
        {
            // No mapping may lie past EOF on disk (recovery would not expect it): raise the sizes first.
            RaiseSize(tx, s.Ino1, into1, s.Size1);
            RaiseSize(tx, s.Ino2, into2, s.Size2);
        }
        return s.Advance(irec1.Map.BlockCount);
    }

    /// <summary>xfs_exchmaps_update_size.</summary>
    private void RaiseSize(Transaction tx, ulong ino, BmbtRecord map, long newSize)
    {
        if (newSize < 0) return;
        var inode = InodeUpdate.Find(tx, inodes, ino);
        long len = Math.Min((long)(map.FileEnd << tx.Mount.Superblock.BlockLog), newSize);
        if (len <= (long)inode.Size) return;
        inode.Size = (ulong)len;
        inode.Log(tx, inodes);
    }

    private void SetSize(Transaction tx, ulong ino, long size)
    {
        var inode = InodeUpdate.Find(tx, inodes, ino);
        inode.Size = (ulong)size;
        inode.Log(tx, inodes);
    }

    private void ClearReflink(Transaction tx, ulong ino)
    {
        var inode = InodeUpdate.Find(tx, inodes, ino);
        inode.Flags2 &= ~DinodeView.Flag2Reflink;
        inode.Log(tx, inodes);
    }

    /// <summary>
    /// The exchange a recovered XMI describes, set up as the kernel's recovery does (xfs_xmi_item_recover_intent,
    /// xfs_exchmaps_init_intent): the range and XFS_EXCHMAPS_PARAMS flags from the log; the final sizes and the reflink
    /// flags to exchange worked out from the inodes as they are now. Null, with the reason, when it cannot be finished here.
    /// </summary>
    public ExchangeState? Recovered(Transaction tx, RecoveredIntent intent, out string? refusal)
    {
        var b = intent.Regions[0].AsSpan();
        var sb = tx.Mount.Superblock;
        ulong ino1 = BinaryPrimitives.ReadUInt64LittleEndian(b[16..]), ino2 = BinaryPrimitives.ReadUInt64LittleEndian(b[24..]);
        uint gen1 = BinaryPrimitives.ReadUInt32LittleEndian(b[32..]), gen2 = BinaryPrimitives.ReadUInt32LittleEndian(b[36..]);
        ulong off1 = BinaryPrimitives.ReadUInt64LittleEndian(b[40..]), off2 = BinaryPrimitives.ReadUInt64LittleEndian(b[48..]);
        ulong count = BinaryPrimitives.ReadUInt64LittleEndian(b[56..]), flags = BinaryPrimitives.ReadUInt64LittleEndian(b[64..]);
        refusal = null;
        if (BinaryPrimitives.ReadUInt32LittleEndian(b[4..]) != 0 || (flags & ~ExchangeState.LoggedFlags) != 0 || !sb.IsValidInode(ino1) ||
            !sb.IsValidInode(ino2) || off1 + count < off1 || off2 + count < off2)
            throw tx.Mount.Corrupt($"XMI intent {intent.Id:x}", 0, "bad padding, flags, inode numbers or ranges");
        var ip1 = InodeUpdate.Find(tx, inodes, ino1);
        var ip2 = InodeUpdate.Find(tx, inodes, ino2);
        if (new DinodeView(ip1.Image).Generation != gen1 || new DinodeView(ip2.Image).Generation != gen2)
            throw tx.Mount.Corrupt($"XMI intent {intent.Id:x}", 0, $"inode {ino1} or {ino2} is not the generation the log names");
        var s = new ExchangeState(ino1, ino2, gen1, gen2, off1, off2, count, flags & ExchangeState.Params, -1, -1);
        if (s.Fork == ForkKind.Attr || (ip2.Mode & 0xF000) is 0x4000 or 0xA000)
        {
            refusal = $"an exchange of {(s.Fork == ForkKind.Attr ? "attribute forks" : "a directory's or symlink's mappings")} (inodes {ino1}, {ino2}) " +
                "needs short-form conversions after it that this build does not do";
            return null;
        }
        return Start(tx, s);
    }

    /// <summary>
    /// Sets up the exchange <paramref name="s"/> describes in <paramref name="tx"/> before its XMI is queued
    /// (xfs_exchmaps_init_intent, xfs_exchmaps_ensure_reflink, xfs_exchmaps_upgrade_extent_counts): the final sizes when
    /// the sizes are exchanged, whether the reflink flags go with the whole files, the reflink flag on both inodes when
    /// either has it (shared blocks may move into the other), wide extent counters on nrext64 volumes.
    /// </summary>
    public ExchangeState Start(Transaction tx, ExchangeState s)
    {
        var sb = tx.Mount.Superblock;
        var ip1 = InodeUpdate.Find(tx, inodes, s.Ino1);
        var ip2 = InodeUpdate.Find(tx, inodes, s.Ino2);
        ulong off1 = s.StartOffset1, off2 = s.StartOffset2, count = s.BlockCount;
        if ((s.Flags & ExchangeState.SetSizes) != 0) s = s with { Size1 = (long)ip2.Size, Size2 = (long)ip1.Size };
        bool r1 = (ip1.Flags2 & DinodeView.Flag2Reflink) != 0, r2 = (ip2.Flags2 & DinodeView.Flag2Reflink) != 0;
        ulong blocks1 = (ip1.Size + sb.BlockSize - 1) >> sb.BlockLog, blocks2 = (ip2.Size + sb.BlockSize - 1) >> sb.BlockLog;
        // xmi_can_exchange_reflink_flags: the whole files exchanged, one of them reflinked.
        if (r1 != r2 && off1 == 0 && off2 == 0 && count == blocks1 && count == blocks2)
            s = s with { Flags = s.Flags | (r1 ? ExchangeState.ClearIno1Reflink : ExchangeState.ClearIno2Reflink) };
        // xfs_exchmaps_ensure_reflink and xfs_exchmaps_upgrade_extent_counts.
        if (r1 && !r2) SetFlag2(tx, ip2, DinodeView.Flag2Reflink);
        if (r2 && !r1) SetFlag2(tx, ip1, DinodeView.Flag2Reflink);
        if (sb.HasNrext64)
        {
            UpgradeExtentCounts(tx, ip1);
            UpgradeExtentCounts(tx, ip2);
        }
        return s;
    }

    private void SetFlag2(Transaction tx, InodeUpdate inode, ulong flag)
    {
        inode.Flags2 |= flag;
        inode.Log(tx, inodes);
    }

    /// <summary>Widens an inode's extent counters (XFS_DIFLAG2_NREXT64): the counts move to the 64- and 32-bit fields.</summary>
    private void UpgradeExtentCounts(Transaction tx, InodeUpdate inode)
    {
        if ((inode.Flags2 & DinodeView.Flag2Nrext64) != 0) return;
        ulong data = inode.DataExtentCount, attr = inode.AttrExtentCount;
        BinaryPrimitives.WriteUInt32BigEndian(inode.Image.AsSpan(DinodeView.OffNextents), 0);
        BinaryPrimitives.WriteUInt16BigEndian(inode.Image.AsSpan(DinodeView.OffAnextents), 0);
        inode.Flags2 |= DinodeView.Flag2Nrext64;
        inode.DataExtentCount = data;
        inode.AttrExtentCount = attr;
        inode.Log(tx, inodes);
    }
}

using System.Buffers.Binary;
using XfsWin.Allocation;
using XfsWin.Attributes;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

// What the kernel does at mount after its log replay (xlog_recover_finish, then xfs_reflink_recover_cow), done by this
// volume's own write engine on a log opened after an in-place replay (MountedLog.OpenAfterReplay): unfinished intents
// are finished, inodes left on the AGI unlinked lists freed, leftover copy-on-write staging extents removed. Every
// change is a logged transaction: a crash part way leaves a log whose replay gets back to where it stopped, with what
// is left still promised by intents or still on the unlinked lists.
public sealed partial class XfsVolume
{
    /// <summary>
    /// Opens a writable volume on a device whose log replay <see cref="InPlaceRecovery"/> has just written in place
    /// (the log still dirty, holding <paramref name="intents"/> without done items from <paramref name="position"/> on),
    /// for the work after the replay. The access's write gate admitted log recovery: features the write path does not
    /// maintain in files (quota files in the metadata directory) do not stop it; what recovery cannot do there it refused
    /// beforehand. Quota accounting is kept by the engine here as on every write open (<see cref="VolumeQuota"/>).
    /// </summary>
    internal static XfsVolume OpenForRecovery(WriteAccess access, LogPosition position, IReadOnlyList<RecoveredIntent> intents)
    {
        var own = new WriteAccess(access.Data, access.Log, access.Superblock, WritePurpose.LogRecovery, ownsDevices: false);
        var volume = OpenDevice(access.Data, new VolumeOpenOptions { Writable = true, Replay = LogReplayMode.None }, ownsDevice: false);
        try
        {
            volume.StartWriting(own, null, position, intents);
            return volume;
        }
        catch
        {
            volume.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Finishes what the log's replay left (xlog_recover_finish): each unfinished intent in log order in a transaction of
    /// its own that logs its done item and does its work, the work that queues waiting until all are done (captured,
    /// then finished chain by chain); then the inodes on the AGI unlinked lists are freed as their last close would
    /// have (blocks, attribute fork, the inode, a chunk left empty); then the copy-on-write staging extents of the
    /// AGs in <paramref name="cowAgs"/> are removed. Counts go to <paramref name="result"/>.
    /// </summary>
    internal void FinishRecovery(IReadOnlyList<RecoveredIntent> intents, IReadOnlyList<uint> cowAgs, LogRecoveryResult result, IProgress<double>? progress)
    {
        var w = Writer();
        using (w.Changes.Change())
        {
            var allocator = w.FileSpace.Allocator;
            var bmaps = new BmapUpdateWork(_inodes, w.FileSpace) { KeepEditors = true };
            var exchanges = new ExchangeWork(_inodes, bmaps);
            var attrs = new AttrIntentWork(_inodes, w.FileSpace, (tx, inode) => MoveLocalData(tx, w, inode));
            var recovered = new SortedDictionary<string, int>(StringComparer.Ordinal);
            var captured = new List<CapturedWork>();
            int done = 0;
            foreach (var intent in intents)
            {
                using var tx = Begin(w, intent.Type switch
                {
                    LogItemType.Xmi => TransactionKind.Write,
                    LogItemType.Attri => TransactionKind.AttrSetM,
                    _ => TransactionKind.Itruncate,
                });
                FinishIntent(tx, intent, allocator, bmaps, exchanges, attrs);
                if (tx.CommitCapturing() is { } work) captured.Add(work);
                recovered[intent.Kind] = recovered.GetValueOrDefault(intent.Kind) + 1;
                progress?.Report(0.5 * ++done / Math.Max(1, intents.Count));
            }
            foreach (var work in captured)
            {
                using var tx = Transaction.Resume(_mount, w.Log, work);
                tx.Commit();
            }
            result.IntentsRecovered = recovered;
            w.Log.Force();
            progress?.Report(0.6);

            result.UnlinkedInodesFreed = FreeUnlinkedInodes(w);
            progress?.Report(0.9);
            // Finishing a CUI can itself leave a staging extent (a copy-on-write cut off before its remap): after
            // intents, every AG is looked at, as the kernel's xfs_reflink_recover_cow does.
            var sb = _mount.Superblock;
            var agsToScan = intents.Count > 0 && sb.HasReflink ? Enumerable.Range(0, (int)sb.AgCount).Select(a => (uint)a).ToList() : cowAgs;
            foreach (uint ag in agsToScan) result.CowStagingExtentsRemoved += RemoveCowStaging(w, ag);
            w.Log.Force();
            progress?.Report(1.0);
        }
    }

    private void FinishIntent(Transaction tx, RecoveredIntent intent, AgAllocator allocator, BmapUpdateWork bmaps, ExchangeWork exchanges, AttrIntentWork attrs)
    {
        var sb = _mount.Superblock;
        var item = intent.Item;
        XfsCorruptionException Bad(string what) => _mount.Corrupt($"{intent.Kind} intent {intent.Id:x} (LSN {Lsn.Format(intent.Lsn)})", 0, what);
        switch (intent.Type)
        {
            case LogItemType.Efi:
            {
                var extents = intent.ExtentFreeExtents();
                foreach (var e in extents)
                    if (!sb.IsValidExtent(e.StartBlock, e.Length) ||
                        (e.StartBlock >> sb.AgBlkLog) != ((e.StartBlock + e.Length - 1) >> sb.AgBlkLog))
                        throw Bad($"extent {e.StartBlock}+{e.Length} is not inside one AG");
                // Whoever owned them, their reverse mapping goes with them (XFS_RMAP_OWN_UNKNOWN).
                tx.FinishRecovered(allocator.ExtentFrees, item, extents.Select(e => new ExtentToFree(e.StartBlock, e.Length, RmapOwner.Unknown)));
                return;
            }
            case LogItemType.Rui:
            {
                var updates = intent.MapExtents().Select(m => RmapUpdateWork.Decode(m) ?? throw Bad($"map extent flags 0x{m.Flags:x}")).ToList();
                tx.FinishRecovered(allocator.RmapUpdates, item, updates);
                return;
            }
            case LogItemType.Cui:
            {
                var updates = intent.PhysExtents().Select(e => RefcountUpdateWork.Decode(e) ?? throw Bad($"extent flags 0x{e.Flags:x}")).ToList();
                tx.FinishRecovered(allocator.RefcountUpdates, item, updates);
                return;
            }
            case LogItemType.Bui:
            {
                var map = intent.MapExtents()[0];
                var update = BmapUpdateWork.Decode(map) ?? throw Bad($"map extent flags 0x{map.Flags:x}");
                if (!sb.IsValidInode(update.Ino)) throw Bad($"owner {update.Ino} is not an inode");
                tx.FinishRecovered(bmaps, item, [update]);
                return;
            }
            case LogItemType.Xmi:
            {
                var state = exchanges.Recovered(tx, intent, out string? refusal)
                    ?? throw new XfsException(XfsError.Unsupported, refusal!);
                tx.FinishRecovered(exchanges, item, [state]);
                return;
            }
            case LogItemType.Attri:
            {
                var op = AttrOperation.FromLog(intent) ?? throw Bad("operation, filter or regions");
                if (!sb.IsValidInode(op.Ino)) throw Bad($"inode {op.Ino} is not valid");
                tx.FinishRecovered(attrs, item, [op]);
                return;
            }
            default:
                throw new XfsException(XfsError.Unsupported, $"{intent.Kind} intents (realtime) cannot be finished by this build");
        }
    }

    /// <summary>
    /// xlog_recover_process_iunlinks: every inode on an AGI unlinked bucket, head first, is freed as its last close
    /// would have freed it (<see cref="FreeOrphan"/>: blocks first, in a rolling transaction, then the inode, which
    /// leaves the list). Returns how many.
    /// </summary>
    private int FreeUnlinkedInodes(VolumeWriteState w)
    {
        var sb = _mount.Superblock;
        int freed = 0;
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            for (int bucket = 0; bucket < UnlinkedList.Buckets; bucket++)
            {
                long guard = (long)sb.AgBlocks << sb.InoPBlog;
                while (true)
                {
                    var agi = _mount.Buffers.Read(sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize, sb.SectorSize, ag, new AgiBufferVerifier(sb, ag));
                    uint head = BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffUnlinked + 4 * bucket));
                    if (head == UnlinkedList.NullAgino) break;
                    ulong ino = ((ulong)ag << sb.AgInoLog) | head;
                    if (!sb.IsValidInode(ino) || guard-- <= 0)
                        throw _mount.Corrupt($"AGI {ag} unlinked bucket {bucket}", sb.AgBlockToByte(ag, 0) + 2L * sb.SectorSize, $"it leads to a bad inode ({head}) or does not end");
                    var inode = _inodes.Get(ino);
                    if (inode.Mode == 0 || inode.Attributes.LinkCount != 0)
                        throw _mount.Corrupt($"inode {ino} (on an unlinked list)", sb.InodeToByte(ino), inode.Mode == 0 ? "it is free" : $"it has {inode.Attributes.LinkCount} link(s)");
                    // xfs_inactive_truncate: a file's (or a directory's) blocks go in a rolling transaction first.
                    if (inode.DataFormat is ForkFormat.Extents or ForkFormat.Btree && (inode.IsRegular || inode.IsDirectory)) ShrinkInSteps(w, ino, 0);
                    using (var tx = Begin(w, TransactionKind.Ifree))
                    {
                        var update = new InodeUpdate(_inodes.Get(ino), sb);
                        w.Unlinked.Remove(tx, update);
                        FreeInode(tx, w, update);
                        update.Log(tx, _inodes);
                        tx.Commit();
                    }
                    freed++;
                    AfterCommit(w);
                }
            }
        }
        return freed;
    }

    /// <summary>
    /// xfs_refcount_recover_cow_leftovers: each staging extent of the AG leaves the refcount btree's CoW domain, its
    /// OWN_COW reverse mapping goes and its blocks are freed, one transaction (and its deferred work) each.
    /// </summary>
    private int RemoveCowStaging(VolumeWriteState w, uint ag)
    {
        var allocator = w.FileSpace.Allocator;
        List<(ulong StartBlock, uint Length)> staging;
        using (var tx = Begin(w, TransactionKind.Write))
        {
            staging = allocator.CowStagingExtents(tx, ag);
            tx.Cancel();
        }
        foreach (var (start, length) in staging) FreeStagingExtent(w, start, length);
        return staging.Count;
    }
}

using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Admin;

/// <summary>What <c>xfswin uuid</c> sets: a given UUID, a random one, the nil UUID, or (V5) the original one back.</summary>
public abstract record UuidChange
{
    private UuidChange() { }
    public sealed record To(Guid Uuid) : UuidChange;
    public sealed record Generate : UuidChange;
    public sealed record Nil : UuidChange;
    /// <summary>V5: back to the UUID the metadata carries (sb_meta_uuid); nothing to do when it was never changed.</summary>
    public sealed record Restore : UuidChange;

    /// <summary>xfs_admin -U's words: a UUID, "generate", "nil" or "restore".</summary>
    public static UuidChange Parse(string text) => text.ToLowerInvariant() switch
    {
        "generate" => new Generate(),
        "nil" => new Nil(),
        "restore" => new Restore(),
        _ => Guid.TryParse(text, out var g) ? new To(g)
            : throw new XfsException(XfsError.InvalidArgument, $"'{text}' is not a UUID; give a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), generate, nil or restore."),
    };
}

/// <summary>
/// The label and UUID of a volume, changed as xfs_admin -L / -U (xfs_db's label and uuid commands) change them:
/// in the primary and every secondary superblock, each keeping its other fields, with its CRC recomputed; the
/// log must be clean. A UUID change on V5 follows the meta-UUID rule: metadata blocks keep recording the UUID
/// they were made with, so the first change sets the META_UUID incompat bit and keeps the old UUID in
/// sb_meta_uuid; changing back to sb_meta_uuid clears the bit and zeroes the field. The log's records carry the
/// UUID too (the kernel checks it when it finds the log's head): a UUID change appends the log's unmount record
/// with the new UUID, after the superblocks.
/// </summary>
public static class VolumeIdentity
{
    public const int MaxLabelBytes = Superblock.MaxLabelBytes;

    /// <summary>What the change did: the values before and after.</summary>
    public sealed record Outcome(string OldLabel, string NewLabel, Guid OldUuid, Guid NewUuid, Guid? MetaUuid, int SuperblocksWritten);

    public static void ValidateLabel(string label) => Superblock.LabelBytes(label);

    /// <summary>Sets the label of every superblock (empty clears it).</summary>
    public static Outcome SetLabel(WriteAccess access, string label)
    {
        byte[] name = Superblock.LabelBytes(label);
        var sb = access.Superblock;
        RequireCleanLog(access);
        int written = Rewrite(access, sector => new SuperblockWriter(sector).Fname = name);
        return new Outcome(sb.Label, label, sb.Uuid, sb.Uuid, MetaUuidOf(access, sb.Uuid), written);
    }

    /// <summary>Changes the UUID of every superblock (see the class remarks for V5) and appends an unmount record carrying it.</summary>
    public static Outcome SetUuid(WriteAccess access, UuidChange change)
    {
        var sb = access.Superblock;
        RequireCleanLog(access);
        bool v5 = sb.IsV5;
        bool hasMeta = v5 && (sb.Incompat & SuperblockFeatures.IncompatMetaUuid) != 0;
        Guid target = change switch
        {
            UuidChange.To to => to.Uuid,
            UuidChange.Generate => Guid.NewGuid(),
            UuidChange.Nil => Guid.Empty,
            UuidChange.Restore when !v5 => throw new XfsException(XfsError.InvalidArgument, "restore needs a V5 volume (only V5 keeps the original UUID). Nothing was written."),
            UuidChange.Restore => hasMeta ? sb.MetaUuid : sb.Uuid,
            _ => throw new ArgumentOutOfRangeException(nameof(change)),
        };
        if (change is UuidChange.Restore && !hasMeta) return new Outcome(sb.Label, sb.Label, sb.Uuid, sb.Uuid, null, 0);

        // The metadata UUID (what AG headers and btree blocks record) never changes.
        Guid metadata = sb.MetaUuid;
        bool setMeta = v5 && target != metadata;
        int written = Rewrite(access, sector =>
        {
            var view = new SuperblockView(sector);
            uint incompat = view.FeaturesIncompat;
            var w = new SuperblockWriter(sector);
            w.Uuid = target;
            if (!v5) return;
            if (setMeta)
            {
                w.FeaturesIncompat = incompat | SuperblockFeatures.IncompatMetaUuid;
                w.MetaUuid = metadata;
            }
            else
            {
                w.FeaturesIncompat = incompat & ~SuperblockFeatures.IncompatMetaUuid;
                w.MetaUuid = Guid.Empty;
            }
        });

        // The unmount record at the log's head now names the new UUID; the records before it are history.
        var area = LogArea.For(access.Data, access.Log, sb);
        var log = MountedLog.Open(area, sb, new DeviceImageWriteback(access.Data, sb), new MountedLogOptions { RecordUuid = target });
        log.Unmount();
        return new Outcome(sb.Label, sb.Label, sb.Uuid, target, setMeta ? metadata : null, written);
    }

    private static Guid? MetaUuidOf(WriteAccess access, Guid uuid) =>
        (access.Superblock.Incompat & SuperblockFeatures.IncompatMetaUuid) != 0 ? access.Superblock.MetaUuid : null;

    private static void RequireCleanLog(WriteAccess access)
    {
        var sb = access.Superblock;
        if (sb.LogStart == 0 && access.Log is null)
            throw new XfsException(XfsError.InvalidArgument, "the volume has an external log; give it with --log-device. Nothing was written.");
        if (MountedLog.NeedsReplay(LogArea.For(access.Data, access.Log, sb), sb))
            throw new XfsException(XfsError.ReadOnly, "the log is dirty: replay it first: xfswin recover (or mount the volume once with Linux). Nothing was written.");
    }

    /// <summary>
    /// Applies <paramref name="edit"/> to every superblock that is there, each edited in its own sector (its other fields
    /// kept), its CRC restamped, written secondaries first and the primary last. Returns how many were written.
    /// </summary>
    private static int Rewrite(WriteAccess access, SectorEdit edit)
    {
        var sb = access.Superblock;
        var device = access.Data;
        // Every superblock is read and checked before the first is written: a bad one refuses the change whole.
        var sectors = new List<(long At, byte[] Sector)>();
        for (uint agno = 0; agno < sb.AgCount; agno++)
        {
            long at = sb.AgBlockToByte(agno, 0);
            if (at + sb.SectorSize > device.Length) continue;
            var sector = new byte[sb.SectorSize];
            device.Read(at, sector);
            var check = Superblock.Verify(sector);
            if (!check.IsOk)
                throw new XfsCorruptionException(agno == 0 ? "primary superblock" : $"superblock of AG {agno}", at,
                    check + ": run xfs_repair from Linux first. Nothing was written.");
            sectors.Add((at, sector));
        }
        for (int i = sectors.Count; i-- > 0;)
        {
            var (at, sector) = sectors[i];
            edit(sector);
            if (sb.IsV5) new SuperblockWriter(sector).StampCrc(sb.SectorSize);
            device.Write(at, sector);
        }
        device.Flush();
        return sectors.Count;
    }

    private delegate void SectorEdit(Span<byte> sector);
}

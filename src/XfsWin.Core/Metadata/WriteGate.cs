using System.Buffers.Binary;
using System.Numerics;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Metadata;

/// <summary>What a path that writes to a volume is about to do; the gate's rules depend on it.</summary>
public enum WritePurpose
{
    /// <summary>Replaying a log Linux left dirty onto the device (<c>xfswin recover</c>, <c>--replay=place</c>).</summary>
    LogRecovery,
    /// <summary>Changing the file system through read-write opens: every feature the write path touches must be maintained.</summary>
    Modify,
    /// <summary>
    /// Growing or shrinking the data section (<c>xfswin grow</c>): AG headers, free-space btrees and superblocks only,
    /// so features kept in files, quotas or names (see <see cref="WriteGate.Unmaintained"/>) do not stop it.
    /// </summary>
    Grow,
    /// <summary>Changing the label or UUID in every superblock (<c>xfswin label</c>, <c>xfswin uuid</c>): superblocks and the log head only.</summary>
    Relabel,
}

/// <summary>A feature the volume carries that the write path does not maintain: writes would leave it inconsistent.</summary>
public sealed record UnmaintainedFeature(string Name, string Why);

/// <summary>
/// The one gate every path that writes to an existing XFS volume passes: in-place log recovery today,
/// read-write opens, grow and label changes tomorrow. It reads and verifies the primary superblock and
/// refuses, before a single byte is written, volumes that must not be written by anyone but the kernel
/// or xfs_repair: NEEDSREPAIR set, an incompatible, read-only-compatible or log-incompatible feature bit
/// this build does not know, V4 (no metadata CRCs: XfsWin keeps V4 read-only), a superblock that fails
/// verification, and (for <see cref="WritePurpose.Modify"/>) any feature in <see cref="Unmaintained"/>.
/// A refusal is an <see cref="XfsException"/> naming the feature and what to do; the device is unchanged.
/// Write paths in lower layers (the journal's in-place replay) take a <see cref="WriteAccess"/>, which only
/// this gate creates, so they cannot be reached around it.
/// </summary>
public static class WriteGate
{
    /// <summary>
    /// Opens <paramref name="source"/> (and the external log device, if given) for writing and checks the
    /// volume. The returned access owns both devices; on refusal they are closed again.
    /// </summary>
    public static WriteAccess Open(string source, int? partition, string? logSource, WritePurpose purpose)
    {
        ArgumentNullException.ThrowIfNull(source);
        var data = PartitionSpec.Open(source, partition, writable: true);
        IBlockDevice? log = null;
        try
        {
            log = logSource is null ? null : PartitionSpec.Open(logSource, null, writable: true);
            return Admit(data, log, purpose, ownsDevices: true);
        }
        catch
        {
            log?.Dispose();
            data.Dispose();
            throw;
        }
    }

    /// <summary>Checks a volume on devices the caller opened for writing; the caller keeps them unless <paramref name="ownsDevices"/>.</summary>
    public static WriteAccess Admit(IBlockDevice data, IBlockDevice? log, WritePurpose purpose, bool ownsDevices = false)
    {
        ArgumentNullException.ThrowIfNull(data);
        var sector = ReadPrimarySuperblock(data);
        var refusal = Check(sector, purpose);
        if (refusal is not null) throw refusal;
        var sb = Superblock.Decode(sector);
        if (!data.CanWrite || log is { CanWrite: false })
            throw new XfsException(XfsError.ReadOnly, "the device was opened read-only; writing needs it opened for writing (run as administrator/root).");
        if (log is not null && sb.LogStart != 0)
            throw new XfsException(XfsError.InvalidArgument, "a log device was given but this volume's log is internal; drop the log device option.");
        if (log is null && sb.LogStart == 0)
            throw new XfsException(XfsError.InvalidArgument,
                "this volume's log is on an external device (made with mkfs -l logdev=...): give that device (xfswin mount -o logdev=DEVICE; " +
                "--log-device DEVICE for recover, grow, label and uuid). Nothing was written.");
        return new WriteAccess(data, log, sb, purpose, ownsDevices);
    }

    /// <summary>
    /// Why writing to the volume whose primary superblock sector is <paramref name="sector"/> must be refused,
    /// or null when the gate lets it through. Pure: reads nothing, writes nothing.
    /// </summary>
    public static XfsException? Check(ReadOnlySpan<byte> sector, WritePurpose purpose)
    {
        var verify = Superblock.Verify(sector);
        if (!verify.IsOk)
            return new XfsCorruptionException("primary superblock", 0, verify.ToString());
        var view = new SuperblockView(sector);
        if ((view.VersionNum & SuperblockFeatures.VersionNumberMask) != 5)
            return new XfsException(XfsError.Unsupported,
                $"this is a V4 volume (version {view.VersionNum & SuperblockFeatures.VersionNumberMask}, made with mkfs.xfs -m crc=0): XfsWin only reads V4 " +
                "volumes and never writes them (Linux has deprecated the format). Nothing was written; recover or change it with Linux, " +
                "or open it read-only (for a dirty log: --replay=memory).");
        uint incompat = view.FeaturesIncompat;
        if ((incompat & SuperblockFeatures.IncompatNeedsRepair) != 0)
            return new XfsException(XfsError.NeedsRepair,
                "the volume is marked as needing repair (needsrepair): run xfs_repair on it from Linux first. Nothing was written.");
        uint unknownIncompat = incompat & ~SuperblockFeatures.IncompatKnown;
        if (unknownIncompat != 0)
            return new XfsException(XfsError.Unsupported,
                $"the volume uses an incompatible feature XfsWin does not know ({SuperblockFeatures.IncompatName(BitOperations.TrailingZeroCount(unknownIncompat))}, " +
                $"features_incompat 0x{incompat:x}): writing could damage it. Nothing was written; use Linux or a newer XfsWin.");
        uint unknownRoCompat = view.FeaturesRoCompat & ~SuperblockFeatures.RoCompatKnown;
        if (unknownRoCompat != 0)
            return new XfsException(XfsError.Unsupported,
                $"the volume uses a read-only-compatible feature XfsWin does not know (features_ro_compat bit {BitOperations.TrailingZeroCount(unknownRoCompat)}, " +
                $"0x{unknownRoCompat:x}): it may be read but not written by software that does not know it. Nothing was written; use Linux or a newer XfsWin.");
        uint unknownLogIncompat = view.FeaturesLogIncompat & ~SuperblockFeatures.LogIncompatKnown;
        if (unknownLogIncompat != 0)
            return new XfsException(XfsError.Unsupported,
                $"the volume's log uses an incompatible log feature XfsWin does not know (features_log_incompat bit {BitOperations.TrailingZeroCount(unknownLogIncompat)}, " +
                $"0x{unknownLogIncompat:x}): its log must be replayed and cleaned by Linux. Nothing was written; mount it once with Linux.");
        if ((incompat & SuperblockFeatures.IncompatZoned) != 0)
            return new XfsException(XfsError.Unsupported,
                "the volume has zoned realtime groups, which XfsWin can neither read nor write. Nothing was written; use Linux.");
        if (purpose == WritePurpose.Modify)
        {
            var unmaintained = Unmaintained(sector);
            if (unmaintained.Count > 0)
                return new XfsException(XfsError.ReadOnly,
                    "the volume uses features XfsWin cannot keep consistent when it writes: " +
                    string.Join("; ", unmaintained.Select(f => $"{f.Name} ({f.Why})")) + ". It can only be opened read-only; change it with Linux.");
        }
        return null;
    }

    /// <summary>
    /// The features the volume carries that XfsWin knows but its write path does not maintain: the one list
    /// every read-write open reports by name (each entry leaves when the write path learns to keep it).
    /// </summary>
    public static IReadOnlyList<UnmaintainedFeature> Unmaintained(ReadOnlySpan<byte> sector)
    {
        var view = new SuperblockView(sector);
        var list = new List<UnmaintainedFeature>();
        if (view.RtBlocks != 0)
            list.Add(new("realtime section", "its bitmap and summary are not updated"));
        if ((view.FeaturesIncompat & SuperblockFeatures.IncompatZoned) != 0)
            list.Add(new("zoned realtime groups", "not supported at all"));
        // Quota accounting and enforcement are maintained (dquot counts, limits from the defaults, grace timers, EDQUOT)
        // for quota files the superblock names.
        if ((view.Qflags & QuotaAccountingFlags) != 0 && (view.FeaturesIncompat & SuperblockFeatures.IncompatMetadir) != 0)
            list.Add(new("quota files in the metadata directory", "dquots are charged only in the quota files the superblock names"));
        if ((view.VersionNum & SuperblockFeatures.VersionBorg) != 0)
            list.Add(new("ascii-ci", "case-insensitive name hashing is not implemented"));
        return list;
    }

    /// <summary>sb_qflags accounting bits (XFS_UQUOTA_ACCT, XFS_PQUOTA_ACCT, XFS_GQUOTA_ACCT).</summary>
    private const ushort QuotaAccountingFlags = 0x0001 | 0x0008 | 0x0040;

    private static byte[] ReadPrimarySuperblock(IBlockDevice device)
    {
        if (device.Length < 512)
            throw new XfsException(XfsError.NotXfs, $"the device is only {device.Length} bytes: not an XFS volume. Nothing was written.");
        var sector = new byte[(int)Math.Min(device.Length, Math.Max(512, Math.Min(device.SectorSize, 4096)))];
        device.Read(0, sector);
        if (BinaryPrimitives.ReadUInt32BigEndian(sector) != SuperblockView.Magic)
            throw new XfsException(XfsError.NotXfs, "no XFS superblock at the start of the device: it is not an XFS volume. Nothing was written.");
        int sectSize = new SuperblockView(sector).SectSize;
        if (sectSize > sector.Length && sectSize <= 32768 && sectSize <= device.Length)
        {
            sector = new byte[sectSize];
            device.Read(0, sector);
        }
        return sector;
    }
}

/// <summary>
/// Permission to write a volume, granted by <see cref="WriteGate"/> after its checks: the devices, and the
/// superblock as the gate read it. Disposing it closes the devices when the gate opened them.
/// </summary>
public sealed class WriteAccess : IDisposable
{
    private readonly bool _ownsDevices;

    internal WriteAccess(IBlockDevice data, IBlockDevice? log, Superblock superblock, WritePurpose purpose, bool ownsDevices)
    {
        Data = data;
        Log = log;
        Superblock = superblock;
        Purpose = purpose;
        _ownsDevices = ownsDevices;
    }

    public IBlockDevice Data { get; }
    /// <summary>The external log device, or null for an internal log.</summary>
    public IBlockDevice? Log { get; }
    /// <summary>The primary superblock as the gate read it (before any log replay).</summary>
    public Superblock Superblock { get; }
    public WritePurpose Purpose { get; }

    /// <summary>Corruption the writers found on this volume (the first is kept), as a mounted volume's health records it.</summary>
    public VolumeHealth Health { get; } = new();

    public void Dispose()
    {
        if (!_ownsDevices) return;
        Log?.Dispose();
        Data.Dispose();
    }
}

using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

public sealed partial class XfsVolume
{
    /// <summary>
    /// Decides what the volume is read from given the state of its log: the device itself (clean
    /// log, replay declined, or replayed in place), or an in-memory overlay holding the replayed log.
    /// </summary>
    private static (IBlockDevice Device, LogRecoveryResult Recovery) PrepareLog(IBlockDevice device, Superblock sb, VolumeOpenOptions options,
        List<string> warnings)
    {
        IBlockDevice? logDevice = null;
        if (options.LogDevice is not null)
        {
            if (sb.LogStart != 0)
                throw new XfsException(XfsError.InvalidArgument, "a log device was given but this volume's log is internal; drop the log device option.");
            logDevice = PartitionSpec.Open(options.LogDevice, null, writable: options.Replay == LogReplayMode.InPlace);
        }
        LogRecoveryResult recovery;
        try
        {
            // In place, the log replay writes: only through the write gate, which reads the superblock again
            // and refuses (NEEDSREPAIR, unknown features, V4) before anything is written.
            recovery = options.Replay == LogReplayMode.InPlace
                ? InPlaceRecovery.Run(WriteGate.Admit(device, logDevice, WritePurpose.LogRecovery))
                : LogRecovery.Recover(device, logDevice, sb, options.Replay);
        }
        finally
        {
            // Recovery reads (and in place, writes) the log device only while it runs.
            logDevice?.Dispose();
        }
        warnings.AddRange(recovery.Warnings);
        if (recovery.State == LogState.ReplayedInMemory)
            warnings.Add($"Linux did not unmount this volume cleanly: {recovery.TransactionsReplayed} logged transaction(s) " +
                         $"({recovery.LogBytesReplayed / 1024} KiB of log) were replayed in memory; the device was not written");
        return (recovery.Device, recovery);
    }
}

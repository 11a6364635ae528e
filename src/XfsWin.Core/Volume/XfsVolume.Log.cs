using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;

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
        var recovery = LogRecovery.Recover(device, null, sb, options.Replay);
        warnings.AddRange(recovery.Warnings);
        if (recovery.State == LogState.ReplayedInMemory)
            warnings.Add($"Linux did not unmount this volume cleanly: {recovery.TransactionsReplayed} logged transaction(s) " +
                         $"({recovery.LogBytesReplayed / 1024} KiB of log) were replayed in memory; the device was not written");
        return (recovery.Device, recovery);
    }
}

using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Volume;

public sealed partial class XfsVolume
{
    /// <summary>
    /// Decides what the volume is read from given the state of its log: the device itself, or an
    /// overlay holding the replayed log. Log recovery is wired in here.
    /// </summary>
    private static (IBlockDevice Device, LogState State) PrepareLog(IBlockDevice device, Superblock sb, VolumeOpenOptions options,
        List<string> warnings, List<string> readOnlyReasons)
    {
        _ = options;
        _ = readOnlyReasons;
        if (sb.LogStart == 0)
        {
            warnings.Add("the log is on an external device that was not given; if Linux did not unmount cleanly, the view may be stale");
            return (device, LogState.External);
        }
        return (device, LogState.Unknown);
    }
}

using Xunit;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>What the tests of inode chunks on nearly full volumes share: the volume, its filling, xfs_repair's verdict.</summary>
internal static class NearlyFullVolumes
{
    /// <summary>
    /// A 300 MB volume of two AGs with sparse inode chunks, made by mkfs.xfs 6.13 in <paramref name="image"/>: no
    /// finobt, rmapbt or refcountbt, so no per-AG reservation keeps free space out of a filling file's reach.
    /// </summary>
    public static void Make(string image)
    {
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-m", "rmapbt=0,reflink=0,finobt=0", "-i", "sparse=1", "-d", "agcount=2", image);
    }

    /// <summary>
    /// Allocates blocks to <paramref name="file"/> until the engine's allocator gives no more: 64 MiB pieces, halved at
    /// each refusal down to one block (what it keeps back, for a file's extent tree to grow, stays free).
    /// </summary>
    public static void FillWith(XfsVolume v, ulong file)
    {
        long offset = 0;
        for (long piece = 64L << 20; piece >= 4096;)
        {
            try
            {
                v.Allocate(file, offset, piece, FallocateMode.Allocate);
                offset += piece;
            }
            catch (XfsException e) when (e.Error == XfsError.NoSpace)
            {
                piece /= 2;
            }
        }
    }

    /// <summary>xfs_repair -n (6.13) finds nothing in <paramref name="image"/>; otherwise the test fails with its output.</summary>
    public static void AssertRepairClean(string image, string when)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n found problems {when}:\n{repair.StandardOutput}{repair.StandardError}");
    }
}

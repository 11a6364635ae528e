using System.Buffers.Binary;
using XfsWin.Cli.Commands;
using XfsWin.Journal;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// <c>xfswin mkfs -l logdev=...</c> against mkfs.xfs: the same data section (every superblock, AG header, btree root and
/// first inode, as xfs_db prints them), the same clean log on the log device (byte for byte but for the UUID and the
/// record CRC), xfs_repair -n clean with the log device, and the kernel mounting the pair, filling it and leaving it clean.
/// </summary>
public sealed partial class MkfsTests
{
    public static TheoryData<string, string, string> ExternalLogMatrix => new()
    {
        { "1G", "100M", "" },
        { "1G", "100M", "-l size=65m" },
        { "300M", "64M", "" },
        { "16G", "1G", "" },
        { "1G", "100M", "-l sectsize=4096" },
        { "1G", "100M", "-s size=4096" },
        { "1G", "100M", "-l su=64k" },
        { "1G", "100M", "-d su=64k,sw=4" },
        { "1G", "100M", "-b size=1024" },
        { "1G", "100M", "-m metadir=1" },
        { "16G", "100M", "-m metadir=1 -n parent=1 -d agcount=7" },
        { "1G", "100M", "-m crc=0" },
        { "1G", "100M", "-m crc=0 -l version=1 -n ftype=0" },
    };

    [Theory]
    [MemberData(nameof(ExternalLogMatrix))]
    public void ExternalLogLayoutMatchesMkfsXfs613(string size, string logSize, string options)
    {
        string ours = Path.Combine(_dir, "ours.img"), theirs = Path.Combine(_dir, "theirs.img");
        string ourLog = Path.Combine(_dir, "ours.log"), theirLog = Path.Combine(_dir, "theirs.log");
        Shell.RunChecked("truncate", "-s", logSize, ourLog);
        Shell.RunChecked("truncate", "-s", logSize, theirLog);
        RunOurs(0, [.. Split(options), "-q", "-l", "logdev=" + ourLog, "-d", "size=" + size, ours]);
        Shell.RunChecked("truncate", "-s", size, theirs);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), [.. Split(options), "-q", "-f", "-l", "logdev=" + theirLog, theirs]);

        string what = $"{size} log {logSize} {options}";
        AssertSameLayout(theirs, ours, what);
        var sb = ReadSuperblock(ours);
        Assert.Equal(0UL, sb.LogStart);
        AssertSameLog(theirLog, ourLog, (long)sb.LogBlocks * sb.BlockSize, what);
        AssertRepairClean(ours, ourLog);
        // The log device stays sparse: one record written, the rest zeroed by punching (mkfs.xfs writes zeros through).
        Assert.True(AllocatedBytes(ourLog) <= 1 << 20, $"{what}: the log device has {AllocatedBytes(ourLog)} bytes allocated");
        Assert.True(AllocatedBytes(ours) <= Math.Max(AllocatedBytes(theirs), 1 << 20),
            $"{what}: ours allocates {AllocatedBytes(ours)} bytes, mkfs.xfs {AllocatedBytes(theirs)}");
    }

    /// <summary>With sectors over 512 bytes an internal log's stripe unit is one block, not the data stripe unit (mkfs.xfs 6.13).</summary>
    [Theory]
    [InlineData("1G", "-s size=4096 -d su=64k,sw=4")]
    [InlineData("1G", "-s size=2048 -b size=2048 -d su=32k,sw=2")]
    public void LargeSectorStripedLayoutMatchesMkfsXfs613(string size, string options) => LayoutMatchesMkfsXfs613(size, options);

    [Fact]
    public void ExternalLogLayoutMatchesMkfsXfs61()
    {
        string ours = Path.Combine(_dir, "ours.img"), theirs = Path.Combine(_dir, "theirs61.img");
        string ourLog = Path.Combine(_dir, "ours.log"), theirLog = Path.Combine(_dir, "theirs61.log");
        foreach (var log in new[] { ourLog, theirLog }) Shell.RunChecked("truncate", "-s", "128M", log);
        RunOurs(0, ["-q", "-m", "rmapbt=0", "-i", "nrext64=0", "-l", "logdev=" + ourLog, "-d", "size=2G", ours]);
        Shell.RunChecked("truncate", "-s", "2G", theirs);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.1"), ["-q", "-f", "-l", "logdev=" + theirLog, theirs]);
        AssertSameLayout(theirs, ours, "2G log 128M (6.1)");
        var sb = ReadSuperblock(ours);
        AssertSameLog(theirLog, ourLog, (long)sb.LogBlocks * sb.BlockSize, "2G log 128M (6.1)");
        AssertRepairClean(ours, ourLog);
    }

    [Theory]
    [InlineData("1G", "100M", "")]
    [InlineData("1G", "100M", "-s size=4096 -n parent=1")]
    [InlineData("1G", "100M", "-b size=2048 -l su=32k")]
    [InlineData("2T", "2G", "-l size=512m")]
    public void KernelMountsAVolumeWithAnExternalLogFillsAndLeavesItClean(string size, string logSize, string options)
    {
        string image = Path.Combine(_dir, "kernel.img"), log = Path.Combine(_dir, "kernel.log");
        Shell.RunChecked("truncate", "-s", logSize, log);
        RunOurs(0, [.. Split(options), "-q", "-L", "outside", "-l", "logdev=" + log, "-d", "size=" + size, image]);
        string logLoop = Shell.RunChecked("losetup", "--find", "--show", log).StandardOutput.Trim();
        try
        {
            using var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: false, "logdev=" + logLoop);
            Stress(m.MountPoint);
        }
        finally
        {
            XfsWin.TestSupport.LoopMount.Detach(logLoop);
        }
        AssertRepairClean(image, log);
        Assert.Equal("outside", ReadSuperblock(image).Label);
        var check = Xfswin.Run("check", "--no-progress", "--log-device", log, image);
        Assert.True(check.Code == 0, check.ToString());
    }

    [Fact]
    public void MakesTheLogFileWithLogFileAndSize()
    {
        string image = Path.Combine(_dir, "data.img"), log = Path.Combine(_dir, "made.log");
        RunOurs(0, ["-q", "-l", $"file,logdev={log},size=70m", "-d", "size=1g", image]);
        Assert.Equal(70L << 20, new FileInfo(log).Length);
        Assert.Equal((ulong)(70 << 20) / 4096, ReadSuperblock(image).LogBlocks);
        AssertRepairClean(image, log);
    }

    [Fact]
    public void DryRunWithAnExternalLogPrintsWhatMkfsXfsPrints()
    {
        string image = Path.Combine(_dir, "summary.img"), log = Path.Combine(_dir, "summary.log");
        Shell.RunChecked("truncate", "-s", "1G", image);
        Shell.RunChecked("truncate", "-s", "100M", log);
        string[] args = ["-N", "-l", $"logdev={log},su=32k", image];
        var (_, ours, _) = RunOurs(0, args);
        var theirs = Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), args).StandardOutput;
        Assert.Equal(theirs, ours);
        Assert.Equal(0, AllocatedBytes(log));
    }

    /// <summary>A log device holding a file system is refused without -f like the data device (mkfs.xfs does not look; we do), and nothing is written to either.</summary>
    [Fact]
    public void RefusesALogDeviceHoldingAFileSystemWithoutForce()
    {
        string image = Path.Combine(_dir, "data.img"), log = Path.Combine(_dir, "occupied.log");
        Shell.RunChecked("truncate", "-s", "1G", image);
        Shell.RunChecked("truncate", "-s", "100M", log);
        Shell.RunChecked("mkfs.ext4", "-q", "-F", "-L", "oldlog", log);
        string before = Hash(log);
        var (_, _, err) = RunOurs(4, ["-l", "logdev=" + log, image]);
        Assert.Contains("an ext4 file system labelled 'oldlog'", err, StringComparison.Ordinal);
        Assert.Contains("-f", err, StringComparison.Ordinal);
        Assert.Equal(before, Hash(log));
        Assert.Equal(0, AllocatedBytes(image));

        RunOurs(0, ["-q", "-f", "-l", "logdev=" + log, image]);
        AssertRepairClean(image, log);
    }

    [Theory]
    [InlineData("-l internal=0", "no log device given")]
    [InlineData("-l logdev={log},internal=1", "Cannot specify both -l logdev and -l internal")]
    [InlineData("-l logdev={log},agnum=1", "Cannot specify both -l logdev and -l agnum")]
    [InlineData("-l agnum=1,logdev={log}", "Cannot specify both -l agnum and -l logdev")]
    [InlineData("-l sectsize=4096", "Can't change sector size on internal log!")]
    [InlineData("-l logdev={log},sectsize=8192", "illegal log sector size 8192")]
    [InlineData("-l logdev={small}", "external log device size 2560 blocks too small, must be at least")]
    [InlineData("-l logdev={medium}", "Log size must be at least 64MB.")]
    [InlineData("-l logdev={log},size=200m", "specified for log subvolume is too large, maximum is 25600 blocks")]
    [InlineData("-l logdev={log},size=66564k,su=64k", "log size 16641 is not a multiple of the log stripe unit 16")]
    [InlineData("-l logdev={missing}", "does not exist")]
    [InlineData("-l logdev={self}", "is the data device")]
    public void RefusesWhatMkfsXfsRefusesForExternalLogs(string options, string message)
    {
        string image = Path.Combine(_dir, "refused.img");
        string log = Path.Combine(_dir, "log.img"), small = Path.Combine(_dir, "small.log"), medium = Path.Combine(_dir, "medium.log");
        Shell.RunChecked("truncate", "-s", "1G", image);
        Shell.RunChecked("truncate", "-s", "100M", log);
        Shell.RunChecked("truncate", "-s", "10M", small);
        Shell.RunChecked("truncate", "-s", "40M", medium);
        string missing = Path.Combine(_dir, "missing.log");
        var args = Split(options).Select(a => a.Replace("{log}", log).Replace("{small}", small).Replace("{medium}", medium)
            .Replace("{missing}", missing).Replace("{self}", image)).ToArray();
        var (code, _, err) = TryOurs([.. args, image]);
        Assert.True(code is 1 or 2, $"exit {code}: {err}");
        Assert.Contains(message, err, StringComparison.Ordinal);
        foreach (var f in new[] { image, log, small, medium }) Assert.Equal(0, AllocatedBytes(f));
        Assert.False(File.Exists(missing));
    }

    /// <summary>
    /// The whole log as mkfs left it: one record at block 0 holding the unmount record, zeros after. The record's
    /// CRC and the file system UUID are masked (they differ by design; mkfs.xfs leaves h_crc zero).
    /// </summary>
    private static void AssertSameLog(string expectedLog, string actualLog, long logBytes, string what)
    {
        var expected = ReadPrefix(expectedLog, logBytes);
        var actual = ReadPrefix(actualLog, logBytes);
        foreach (var b in new[] { expected, actual })
        {
            Assert.Equal(LogRecordHeader.HeaderMagic, BinaryPrimitives.ReadUInt32BigEndian(b));
            b.AsSpan(LogRecordHeader.OffCrc, 4).Clear();
            b.AsSpan(LogRecordHeader.OffFsUuid, 16).Clear();
        }
        int diff = expected.AsSpan().CommonPrefixLength(actual);
        Assert.True(diff == expected.Length, $"{what}: the log differs from mkfs.xfs's at byte {diff}");
    }

    private static byte[] ReadPrefix(string path, long length)
    {
        var b = new byte[length];
        using var f = File.OpenRead(path);
        f.ReadExactly(b);
        return b;
    }

    private static void AssertRepairClean(string image, string log)
    {
        var r = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", "-l", log, image);
        Assert.True(r.ExitCode == 0, $"xfs_repair -n -l {log} {image} exited {r.ExitCode}:\n{r.StandardOutput}{r.StandardError}");
    }
}

using System.Security.Cryptography;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Attributes;
using XfsWin.Device;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// XFS_IOC_EXCHANGE_RANGE in the engine (<see cref="XfsVolume.ExchangeRange"/>) on a volume made by mkfs.xfs 6.13 with
/// exchange-range and filled by the kernel. The exchange of a file of 64 one-block extents between holes with a file
/// of one extent is recorded on the device with a checkpoint after every transaction part; crash images at every flush
/// after it began are replayed by the kernel (mount) and by XfsWin (a read-write open, which finishes the XMI it finds
/// through the same deferred work), and both must show the same two files, either as before the exchange or as after
/// it, never a mix; where the log held an unfinished XMI, as after it. xfs_repair -n (6.13) finds nothing in either.
/// The kernel's checks (what it answers for bad requests) are compared through FUSE in FileAttrIoctlTests.
/// </summary>
public sealed class ExchangeRangeTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-xchg.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private const int Blocks = 128;

    private string MakeBase()
    {
        string image = Path.Combine(_tmp, "base.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", "-i", "exchange=1", image);
        using var m = LoopMount.Mount(image, readOnly: false);
        var rng = new Random(7);
        var block = new byte[4096];
        // a: every other block written (64 extents between holes); b: every block, in one extent.
        using (var a = new FileStream(Path.Combine(m.MountPoint, "a"), FileMode.Create))
        {
            a.SetLength(Blocks * 4096L);
            for (int i = 0; i < Blocks; i += 2)
            {
                rng.NextBytes(block);
                a.Position = i * 4096L;
                a.Write(block);
                a.Flush(flushToDisk: true);
            }
        }
        var b = new byte[Blocks * 4096];
        rng.NextBytes(b);
        File.WriteAllBytes(Path.Combine(m.MountPoint, "b"), b);
        Shell.RunChecked("sync");
        return image;
    }

    private static string Hashes(string mountPoint) =>
        string.Join(' ', new[] { "a", "b" }.Select(n => Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(Path.Combine(mountPoint, n))))[..16]));

    private static string KernelView(string image)
    {
        using var m = LoopMount.Mount(image, readOnly: true);
        return Hashes(m.MountPoint);
    }

    private static string? RepairProblem(string image)
    {
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        return repair.ExitCode == 0 ? null : string.Join(' ', (repair.StandardOutput + repair.StandardError).Split('\n')
            .Where(l => !l.StartsWith(' ') && !l.StartsWith("Phase", StringComparison.Ordinal) && !l.Contains("geometry", StringComparison.Ordinal) &&
                        !l.Contains("sector size", StringComparison.Ordinal) && !l.StartsWith("No modify", StringComparison.Ordinal)));
    }

    private static void AssertRepairClean(string image) => Assert.Null(RepairProblem(image));

    /// <summary>With XFSWIN_CRASH_KEEP set, a failing crash image is kept there (rebuilt: the judged copy was replayed).</summary>
    private static void Keep(string baseImage, IReadOnlyList<DeviceEvent> events, List<int> writes, int flush)
    {
        if (Environment.GetEnvironmentVariable("XFSWIN_CRASH_KEEP") is not { Length: > 0 } keep) return;
        Directory.CreateDirectory(keep);
        string kept = Path.Combine(keep, $"exchange-{flush}.img");
        File.Delete(kept);
        CrashImage.Build(baseImage, events, writes, kept);
    }

    [Fact]
    public void A_crash_after_the_XMI_is_logged_is_finished_alike_by_the_kernel_and_by_xfswin()
    {
        string baseImage = MakeBase();
        string before = KernelView(baseImage);
        string work = Path.Combine(_tmp, "work.img");
        File.Copy(baseImage, work);
        var dev = new RecordingBlockDevice(PartitionSpec.Open(work, null, writable: true));
        int start;
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 1 }, ownsDevice: true))
        {
            ulong a = v.ResolvePath("/a"), b = v.ResolvePath("/b");
            start = dev.EventCount;
            Assert.Equal(Blocks * 4096L, v.ExchangeRange(a, 0, b, 0, Blocks * 4096L, ExchangeRangeFlags.None));
            v.Sync();
        }
        var events = dev.Snapshot();
        string after = KernelView(work);
        Assert.NotEqual(before, after);
        AssertRepairClean(work);

        var all = Enumerable.Range(start, events.Count - start).Where(i => events[i].IsFlush).ToList();
        output.WriteLine($"{events.Count - start} events, {all.Count} flushes after the exchange began");
        Assert.True(all.Count >= 4, "the exchange must span several checkpoints");
        // The first steps one by one, then every n-th flush to the end, and the last.
        var flushes = all.Take(24).Concat(all.Skip(24).Where((_, i) => i % Math.Max(1, all.Count / 24) == 0)).Append(all[^1]).Distinct().ToList();
        var failures = new List<string>();
        int xmiPoints = 0;
        string kernelImage = Path.Combine(_tmp, "kernel.img"), ourImage = Path.Combine(_tmp, "ours.img");
        foreach (int flush in flushes)
        {
            var writes = CrashImage.DurableWrites(events, new CrashPoint(flush + 1, CrashSubset.None, 0));
            File.Delete(kernelImage);
            File.Delete(ourImage);
            CrashImage.Build(baseImage, events, writes, kernelImage);
            CrashImage.Build(baseImage, events, writes, ourImage);
            string byKernel;
            try
            {
                using var m = LoopMount.Mount(kernelImage, readOnly: false);
                byKernel = Hashes(m.MountPoint);
            }
            catch (ShellException e)
            {
                failures.Add($"flush {flush}: the kernel's mount failed: {e.Message.Split('\n')[0]}");
                Keep(baseImage, events, writes, flush);
                continue;
            }
            bool finishedXmi;
            using (var v = XfsVolume.Open(ourImage, new VolumeOpenOptions { Writable = true }))
                finishedXmi = v.RecoveredAtOpen?.IntentsRecovered.ContainsKey("XMI") == true;
            string byUs = KernelView(ourImage);
            output.WriteLine($"flush {flush}: kernel {byKernel}, xfswin {byUs}{(finishedXmi ? " (XMI finished)" : "")}");
            if (byKernel != byUs) failures.Add($"flush {flush}: kernel {byKernel}, xfswin {byUs}");
            if (byUs != before && byUs != after) failures.Add($"flush {flush}: the files are neither as before nor as after the exchange");
            if (finishedXmi)
            {
                xmiPoints++;
                if (byUs != after) failures.Add($"flush {flush}: an unfinished XMI was not finished");
            }
            if (RepairProblem(kernelImage) is { } k)
            {
                failures.Add($"flush {flush}: after the kernel's recovery: {k}");
                Keep(baseImage, events, writes, flush);
            }
            if (RepairProblem(ourImage) is { } o) failures.Add($"flush {flush}: after xfswin's recovery: {o}");
        }
        Assert.True(failures.Count == 0, string.Join('\n', failures));
        Assert.True(xmiPoints > 0, "no crash image held an unfinished XMI");
    }

    [Fact]
    public void A_dry_run_and_refused_requests_change_nothing()
    {
        string baseImage = MakeBase();
        string before = KernelView(baseImage);
        using (var v = XfsVolume.Open(baseImage, new VolumeOpenOptions { Writable = true }))
        {
            ulong a = v.ResolvePath("/a"), b = v.ResolvePath("/b");
            Assert.Equal(0, v.ExchangeRange(a, 0, b, 0, 8192, ExchangeRangeFlags.DryRun));
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 100, b, 0, 4096, 0)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 0, b, 0, (Blocks + 1) * 4096L, 0)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 0, a, 4096, 8192, 0)).Error);
            Assert.Equal(XfsError.InvalidArgument, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 0, b, 0, 4096, (ExchangeRangeFlags)16)).Error);
            Assert.Equal(XfsError.IsADirectory, Assert.Throws<XfsException>(() => v.ExchangeRange(v.RootInode, 0, b, 0, 4096, 0)).Error);
            // Immutable files take no part.
            var x = v.GetFileXattr(a);
            v.SetFileXattr(a, x with { XFlags = x.XFlags | FileXFlags.Immutable }, FileAttrCaller.Root);
            Assert.Equal(XfsError.NotPermitted, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 0, b, 0, 4096, 0)).Error);
            v.SetFileXattr(a, x, FileAttrCaller.Root);
        }
        Assert.Equal(before, KernelView(baseImage));
        AssertRepairClean(baseImage);
    }
    [Fact]
    public void A_commit_exchanges_only_while_file2_is_fresh_and_removes_privileges()
    {
        string image = MakeBase();
        string before = KernelView(image);
        byte[] capability = [1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // v2, effective, cap_net_bind_service
        using (var v = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            ulong a = v.ResolvePath("/a"), b = v.ResolvePath("/b");
            v.SetXattr(b, XattrNamespace.Secure, "capability"u8, capability);
            v.SetAttributes(a, new AttributeChanges { Mode = 0x9ED }); // 04755
            var fresh = v.GetExchangeFreshness(b);
            Assert.Equal(b, fresh.Inode);
            // Fresh: exchanged; file 1 loses setuid (an unprivileged caller), file 2 its capability.
            Assert.Equal(4096, v.ExchangeRange(a, 0, b, 0, 4096, 0, privileged: false, freshness: fresh));
            Assert.Equal(0x1EDu, v.GetAttributes(a).Permissions);
            Assert.False(v.TryGetXattr(b, XattrNamespace.Secure, "capability"u8, out _));
            // The commit moved b's times: the record is stale now (EBUSY), except for an empty range.
            Assert.Equal(XfsError.Changed, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 0, b, 0, 4096, 0, freshness: fresh)).Error);
            Assert.Equal(XfsError.Changed, Assert.Throws<XfsException>(() => v.ExchangeRange(a, 0, b, 0, 4096, ExchangeRangeFlags.DryRun, freshness: fresh)).Error);
            Assert.Equal(0, v.ExchangeRange(a, 0, b, 0, 0, 0, freshness: fresh));
            // Root keeps setuid; the capability goes for every caller, a dry run included.
            v.SetAttributes(a, new AttributeChanges { Mode = 0x9ED });
            v.SetXattr(a, XattrNamespace.Secure, "capability"u8, capability);
            Assert.Equal(0, v.ExchangeRange(a, 0, b, 0, 4096, ExchangeRangeFlags.DryRun, freshness: v.GetExchangeFreshness(b)));
            Assert.Equal(0x9EDu, v.GetAttributes(a).Permissions);
            Assert.False(v.TryGetXattr(a, XattrNamespace.Secure, "capability"u8, out _));
        }
        Assert.NotEqual(before, KernelView(image));
        AssertRepairClean(image);
    }
}

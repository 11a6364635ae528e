using System.Diagnostics;
using System.Security.Cryptography;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Volume;

/// <summary>
/// A device that fails a write or a flush under a read-write volume (<see cref="FaultyBlockDevice"/>): the crash-point
/// workloads run until the fault, which must shut the volume down as the kernel's XFS does: the failing call is an
/// <see cref="XfsException"/> (EIO), never another exception; the volume is read-only from then on and refuses every
/// later change and fsync with EIO; closing it writes nothing. The image as the device left it is then mounted by the
/// kernel (replaying our log), every file whose fsync returned before the fault holds what it held then (or a later
/// state), and xfs_repair -n finds nothing after the kernel's unmount.
/// <para>
/// Faults per workload: 3 (the CI sample: two writes and a flush, 15 in all) or XFSWIN_FAULTS
/// (bench/device-faults.sh); transient (only that write or flush fails) or persistent (every later one fails too),
/// chosen by a fixed seed.
/// </para>
/// </summary>
public sealed class DeviceFaultTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-faults.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static int FaultsPerWorkload =>
        int.TryParse(Environment.GetEnvironmentVariable("XFSWIN_FAULTS"), out int n) && n > 0 ? n : 3;

    /// <summary>The writes and flushes a workload asks of the device, from the open to the clean unmount.</summary>
    private (int Writes, int Flushes) Count(string baseImage, int w)
    {
        string work = Path.Combine(_tmp, "count.img");
        Shell.RunChecked("cp", "--sparse=always", baseImage, work);
        var faulty = new FaultyBlockDevice(PartitionSpec.Open(work, null, writable: true), FaultKind.Write, int.MaxValue, persistent: false, seed: 0);
        var dev = new RecordingBlockDevice(faulty);
        using (var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true))
            CrashWorkloads.All[w].Run(new CrashModel(v, dev), new Random(1000 + w));
        File.Delete(work);
        return faulty.Counts;
    }

    /// <summary>Runs workload <paramref name="w"/> on a device with <paramref name="fault"/>'s fault and judges the result; what is wrong, or null.</summary>
    private string? RunWithFault(string baseImage, int w, FaultKind kind, int nth, bool persistent, int seed, out string summary)
    {
        var (name, run) = CrashWorkloads.All[w];
        string image = Path.Combine(_tmp, "fault.img");
        File.Delete(image);
        Shell.RunChecked("cp", "--sparse=always", baseImage, image);
        var faulty = new FaultyBlockDevice(PartitionSpec.Open(image, null, writable: true), kind, nth, persistent, seed);
        var dev = new RecordingBlockDevice(faulty);
        var problems = new List<string>();
        CrashModel? model = null;
        string where = "after the unmount began";
        var v = XfsVolume.Open(dev, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: true);
        try
        {
            model = new CrashModel(v, dev);
            try
            {
                run(model, new Random(1000 + w));
            }
            catch (Exception e)
            {
                where = "during the workload";
                if (!faulty.Failed)
                    problems.Add($"the workload failed before the fault: {e.GetType().Name}: {e.Message}");
                else if (e is not XfsException { Error: XfsError.IoError })
                    problems.Add($"the failing call threw {e.GetType().Name} ({(e as XfsException)?.Error}), not an I/O error: {e.Message}");
                else if (!v.IsReadOnly)
                    problems.Add("the volume did not shut down: it still reports itself writable");
                else
                {
                    // Every later change and fsync is refused with EIO; reads still answer.
                    foreach (var (what, call) in new (string, Action)[]
                    {
                        ("create", () => v.CreateNode(v.RootInode, "after-the-fault"u8, 0x81A4, 0, 0)),
                        ("mkdir", () => v.MakeDirectory(v.RootInode, "after-dir"u8, 0x1ED, 0, 0)),
                        ("chmod", () => v.SetAttributes(v.RootInode, new AttributeChanges { Mode = 0x1FF })),
                        ("fsync", () => v.Flush(v.RootInode)),
                    })
                    {
                        var refused = Record.Exception(call);
                        if (refused is not XfsException { Error: XfsError.IoError })
                            problems.Add($"{what} after the fault: {(refused is null ? "succeeded" : $"{refused.GetType().Name} ({(refused as XfsException)?.Error}): {refused.Message}")}");
                    }
                    if (Record.Exception(() => v.GetAttributes(v.RootInode)) is { } read)
                        problems.Add($"reading after the fault failed: {read.Message}");
                }
            }
        }
        finally
        {
            // Closing a shut-down volume writes nothing and throws nothing; a fault during the close itself is an I/O error.
            var closed = Record.Exception(v.Dispose);
            if (closed is not null && (closed is not XfsException { Error: XfsError.IoError } || where == "during the workload"))
                problems.Add($"closing the volume threw {closed.GetType().Name}: {closed.Message}");
        }
        var events = dev.Snapshot();
        summary = $"{name} {kind} {nth}{(persistent ? " persistent" : " transient")}: fault {(faulty.Failed ? where : "never reached")}";
        if (!faulty.Failed) problems.Add("the fault was never reached");
        if (problems.Count > 0) return string.Join("; ", problems);
        string? kept = null;
        if (Environment.GetEnvironmentVariable("XFSWIN_CRASH_KEEP") is { Length: > 0 } keep)
        {
            // Copied before the judge's kernel mount changes it; removed again when the judge finds nothing.
            Directory.CreateDirectory(keep);
            kept = Path.Combine(keep, $"fault-{name}-{kind}-{nth}-{(persistent ? "persistent" : "transient")}.img");
            File.Delete(kept);
            Shell.RunChecked("cp", "--sparse=always", image, kept);
        }
        string? verdict = CrashWorkloads.Judge(image, model!, events, new CrashPoint(events.Count, CrashSubset.All, 0));
        if (verdict is null && kept is not null) File.Delete(kept);
        return verdict;
    }

    [Fact]
    public void A_failed_write_or_flush_shuts_the_volume_down_and_leaves_what_the_kernel_replays()
    {
        string baseImage = CrashWorkloads.MakeBase(_tmp);
        var failures = new List<string>();
        int judged = 0;
        var total = Stopwatch.StartNew();
        for (int w = 0; w < CrashWorkloads.All.Length; w++)
        {
            var (writes, flushes) = Count(baseImage, w);
            output.WriteLine($"{CrashWorkloads.All[w].Name}: {writes} writes, {flushes} flushes");
            var rng = new Random(4000 + w);
            for (int f = 0; f < FaultsPerWorkload; f++)
            {
                // Two writes for every flush; the write faults spread over the whole run, the unmount's writes included.
                var kind = f % 3 == 2 ? FaultKind.Flush : FaultKind.Write;
                int nth = 1 + rng.Next(kind == FaultKind.Write ? writes : flushes);
                bool persistent = rng.Next(2) == 0;
                string? problem = RunWithFault(baseImage, w, kind, nth, persistent, rng.Next(), out string summary);
                judged++;
                output.WriteLine((problem is null ? "ok   " : "FAIL ") + summary + (problem is null ? "" : ": " + problem));
                if (problem is not null) failures.Add(summary + ": " + problem);
            }
        }
        output.WriteLine($"total: {judged} faults, {failures.Count} failures, {total.Elapsed.TotalSeconds:F1} s");
        Assert.True(failures.Count == 0, $"{failures.Count} of {judged} faults failed:\n" + string.Join('\n', failures.Take(30)));
    }

    [Fact]
    public void A_device_opened_read_only_is_refused_for_writing_with_nothing_written()
    {
        string image = Path.Combine(_tmp, "v.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-f", "-q", image);
        string before = Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(image)));
        using (var device = FileBlockDevice.Open(image, writable: false))
        {
            var e = Assert.Throws<XfsException>(() => XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero }, ownsDevice: false).Dispose());
            Assert.Equal(XfsError.ReadOnly, e.Error);
            Assert.Contains("read-only", e.Message, StringComparison.Ordinal);
            // The device still serves a read-only open.
            using var v = XfsVolume.Open(device, new VolumeOpenOptions(), ownsDevice: false);
            Assert.True(v.IsReadOnly);
        }
        // A read-only loop device (what a write-protected disk looks like): the open for writing fails clearly.
        string loop = Shell.RunChecked("losetup", "--find", "--show", "--read-only", image).StandardOutput.Trim();
        try
        {
            var e = Assert.ThrowsAny<XfsException>(() => XfsVolume.Open(loop, new VolumeOpenOptions { Writable = true }).Dispose());
            output.WriteLine($"{loop}: {e.Error}: {e.Message}");
            Assert.Equal(XfsError.ReadOnly, e.Error);
            Assert.Contains("read-only", e.Message, StringComparison.Ordinal);
        }
        finally
        {
            Shell.Run("losetup", "-d", loop);
        }
        Assert.Equal(before, Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(image))));
    }
}

using System.Security.Cryptography;
using Xunit;
using XfsWin.Device;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Journal;

/// <summary>
/// A grow that is only in the log: the kernel grows a mounted 2-AG volume to 4 AGs with xfs_growfs, files are
/// made in the new AGs, and the kernel shuts down (shutdown -f) before the primary superblock is written back.
/// XfsWin must replay the log and from then on use the geometry the log left: the new AG count and size, files
/// in the new AGs readable, statfs as the kernel's after its own replay, and an in-place recovery that
/// xfs_repair -n calls clean.
/// </summary>
public sealed class GrowReplayTests : IDisposable
{
    private const uint OldAgCount = 2;
    private const int Directories = 12;
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-grow.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>The content of dN/f: the numbers N..N+20000, one a line (what `seq` writes).</summary>
    private static byte[] Content(int n) =>
        System.Text.Encoding.ASCII.GetBytes(string.Concat(Enumerable.Range(n, 20001).Select(i => i + "\n")));

    private const string Script = """
        set -euo pipefail
        img=$1; mnt=$(mktemp -d)
        export TEST_DIR=/tmp TEST_DEV=/dev/null QA_CHECK_FS=xfs
        rm -f "$img"; truncate -s 64M "$img"
        mkfs.xfs -q -f -d agcount=2 "$img"
        loop=$(losetup -f --show "$img")
        cleanup() { mountpoint -q "$mnt" && umount "$mnt"; losetup -d "$loop"; rmdir "$mnt"; }
        trap cleanup EXIT
        mount -t xfs "$loop" "$mnt"
        mkdir "$mnt/before"; seq 0 20000 > "$mnt/before/f"; sync
        truncate -s 128M "$img"; losetup -c "$loop"
        xfs_growfs "$mnt" > /dev/null
        # New directories rotor across the AGs: some land in the new ones.
        for i in $(seq 1 DIRS); do mkdir "$mnt/d$i"; seq $i $((i + 20000)) > "$mnt/d$i/f"; done
        # Data and the log reach the disk; metadata stays in the log until the AIL would write it back.
        sync
        xfs_io -x -c 'shutdown -f' "$mnt"
        umount "$mnt"
        """;

    /// <summary>Makes the dirty image; true when the grow is in the log only (the primary superblock on disk still has the old AG count).</summary>
    private bool MakeDirtyImage(string img)
    {
        Shell.RunChecked("bash", ["-c", Script.Replace("DIRS", Directories.ToString(), StringComparison.Ordinal), "grow", img], TimeSpan.FromMinutes(5));
        var onDisk = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(img, "6.1", "sb 0", "print agcount"));
        return Convert.ToUInt32(onDisk["agcount"]) == OldAgCount;
    }

    [Fact]
    public void A_grow_only_in_the_log_is_seen_after_replay_in_memory_and_in_place()
    {
        string dirty = Path.Combine(_tmp, "dirty.img");
        bool inLogOnly = false;
        // The kernel writes the superblock back on its own schedule; in the rare case it did before the shutdown, make it again.
        for (int attempt = 0; attempt < 5 && !inLogOnly; attempt++) inLogOnly = MakeDirtyImage(dirty);
        Assert.True(inLogOnly, "the grown superblock reached the disk before the shutdown in 5 attempts: the scenario needs it in the log only");

        // The kernel's replay of a copy: its geometry and statfs are what XfsWin must show.
        string kernelCopy = DirtyLogScenarios.Copy(dirty, _tmp, "kernel.img");
        ulong kernelTotal, kernelFree;
        uint blockSize;
        using (var mount = LoopMount.Mount(kernelCopy, readOnly: false))
        {
            var statfs = Shell.RunChecked("stat", "-f", "-c", "%S %b %f", mount.MountPoint).StandardOutput.Split(' ', StringSplitOptions.TrimEntries);
            blockSize = uint.Parse(statfs[0]);
            kernelTotal = ulong.Parse(statfs[1]);
            kernelFree = ulong.Parse(statfs[2]);
        }
        var kernelSb = TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(kernelCopy, "6.1", "sb 0", "print agcount dblocks agblklog inopblog"));
        uint agCount = Convert.ToUInt32(kernelSb["agcount"]);
        ulong dataBlocks = Convert.ToUInt64(kernelSb["dblocks"]);
        int agInoLog = int.Parse(kernelSb["agblklog"]) + int.Parse(kernelSb["inopblog"]);
        Assert.Equal(4u, agCount);

        string before = Hash(dirty);
        using (var volume = XfsVolume.Open(dirty))
        {
            Assert.Equal(LogState.ReplayedInMemory, volume.Info.LogState);
            Assert.Equal(agCount, volume.Info.AgCount);
            Assert.Equal(dataBlocks, volume.Info.DataBlocks);
            var stats = volume.GetStats();
            Assert.Equal(blockSize, (uint)stats.BlockSize);
            Assert.Equal(kernelTotal, stats.TotalBlocks);
            // The kernel keeps its reserve pool (5% up to 8192 blocks) and per-AG metadata reservations out of f_bfree;
            // the AG headers include them. Counting only the old AGs would give about half.
            Assert.InRange(stats.FreeBlocks, kernelFree, kernelFree + kernelTotal / 10);
            AssertFilesReadable(volume, agInoLog);
        }
        Assert.Equal(before, Hash(dirty));

        // In place, through the write gate: the counters are rebuilt over every AG, new ones included.
        using (var access = WriteGate.Open(dirty, null, null, WritePurpose.LogRecovery))
        {
            var result = InPlaceRecovery.Run(access);
            Assert.Equal(LogState.ReplayedInPlace, result.State);
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", dirty);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
        Assert.Equal(agCount, Convert.ToUInt32(TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(dirty, "6.1", "sb 0", "print agcount"))["agcount"]));
        using (var volume = XfsVolume.Open(dirty))
        {
            Assert.Equal(LogState.Clean, volume.Info.LogState);
            Assert.Equal(agCount, volume.Info.AgCount);
            Assert.Equal(kernelTotal, volume.GetStats().TotalBlocks);
            AssertFilesReadable(volume, agInoLog);
        }
    }

    private static void AssertFilesReadable(XfsVolume volume, int agInoLog)
    {
        int inNewAgs = 0;
        for (int i = 1; i <= Directories; i++)
        {
            ulong ino = volume.ResolvePath($"/d{i}/f");
            if (ino >> agInoLog >= OldAgCount) inNewAgs++;
            var expected = Content(i);
            var buffer = new byte[expected.Length + 1];
            Assert.Equal(expected.Length, volume.Read(ino, 0, buffer));
            Assert.True(expected.AsSpan().SequenceEqual(buffer.AsSpan(0, expected.Length)), $"/d{i}/f differs");
        }
        Assert.True(inNewAgs > 0, "no file landed in the new AGs: the scenario does not test them");
        ulong beforeIno = volume.ResolvePath("/before/f");
        var old = Content(0);
        var b = new byte[old.Length];
        Assert.Equal(old.Length, volume.Read(beforeIno, 0, b));
        Assert.True(old.AsSpan().SequenceEqual(b));
    }

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(SHA256.HashData(f));
    }
}

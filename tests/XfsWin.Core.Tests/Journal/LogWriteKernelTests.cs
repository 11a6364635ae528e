using System.Buffers.Binary;
using System.Text;
using System.Text.RegularExpressions;
using Xunit;
using Xunit.Abstractions;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Tests.Journal;

/// <summary>
/// The log writer judged by the kernel: volumes made by mkfs.xfs and filled by the kernel get transactions written
/// only to the log (metadata in place untouched, the log left dirty), or written back and unmounted. Then
/// xfs_logprint parses the log, the kernel mounts the image (replaying it) and shows the change, xfs_repair -n finds
/// nothing, and XfsWin's own replay of the same log gives the same metadata blocks as the kernel's.
/// </summary>
public sealed partial class LogWriteKernelTests(ITestOutputHelper output) : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-logwrite.").FullName;

    /// <summary>How many times the wrap tests go round the log.</summary>
    private const int TargetWraps = 3;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private sealed record Volume(string Image, string? LogImage, ulong FileIno, ulong FragIno, ulong DirIno, ulong DeviceIno);

    /// <summary>A 512 MiB volume (mkfs 6.1) holding /f (64 KiB, user.k = "value-one", mode 0640, owner 1000:1000) and /d.</summary>
    private Volume Make(string mkfsOptions, bool externalLog = false, bool minimumLog = false)
    {
        string image = Path.Combine(_tmp, "v.img");
        string? logImage = externalLog ? Path.Combine(_tmp, "log.img") : null;
        Shell.RunChecked("truncate", "-s", "512M", image);
        if (logImage is not null) Shell.RunChecked("truncate", "-s", "64M", logImage);
        var options = mkfsOptions.Split(' ', StringSplitOptions.RemoveEmptyEntries).ToList();
        if (logImage is not null) options = [.. options, "-l", "logdev=" + logImage];
        if (minimumLog)
        {
            // mkfs names the smallest log it accepts for this geometry.
            var probe = Shell.Run(OracleImages.Tool("mkfs.xfs"), ["-f", "-q", .. MergeLogOptions([.. options, "-l", "size=2m"]), image], environment: MkfsTestMode);
            var m = MinimumLog().Match(probe.StandardOutput + probe.StandardError);
            Assert.True(m.Success, $"mkfs did not name its minimum log size:\n{probe.StandardOutput}{probe.StandardError}");
            options = [.. options, "-l", $"size={m.Groups[1].Value}b"];
        }
        else if (logImage is not null) options = [.. options, "-l", "size=16384b"];
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), ["-f", "-q", .. MergeLogOptions(options), image], environment: MkfsTestMode);

        string? logLoop = null;
        try
        {
            if (logImage is not null) logLoop = Shell.RunChecked("losetup", "--find", "--show", logImage).StandardOutput.Trim();
            using var mount = LoopMount.Mount(image, readOnly: false, logLoop is null ? null : "logdev=" + logLoop);
            string f = Path.Combine(mount.MountPoint, "f");
            File.WriteAllBytes(f, Enumerable.Range(0, 65536).Select(i => (byte)i).ToArray());
            Shell.RunChecked("setfattr", "-n", "user.k", "-v", "value-one", f);
            Shell.RunChecked("chown", "1000:1000", f);
            Shell.RunChecked("chmod", "0640", f);
            Directory.CreateDirectory(Path.Combine(mount.MountPoint, "d"));
            // /frag: 32 one-block extents (every other block of 64 punched), more than the inode holds: a btree fork.
            string frag = Path.Combine(mount.MountPoint, "frag");
            var io = new List<string> { "-f", "-c", "pwrite -q -S 0x61 0 256k", "-c", "fsync" };
            for (int i = 0; i < 32; i++) io.AddRange(["-c", $"fpunch {i * 8192 + 4096} 4096"]);
            Shell.RunChecked(OracleImages.Tool("xfs_io"), [.. io, frag]);
            Shell.RunChecked("mknod", Path.Combine(mount.MountPoint, "c"), "c", "1", "3");
            ulong Ino(string name) => ulong.Parse(Shell.RunChecked("stat", "-c", "%i", Path.Combine(mount.MountPoint, name)).StandardOutput.Trim());
            return new Volume(image, logImage, Ino("f"), Ino("frag"), Ino("d"), Ino("c"));
        }
        finally
        {
            if (logLoop is not null) Shell.Run("losetup", "-d", logLoop);
        }
    }

    /// <summary>mkfs takes one -l option list: "-l a -l b" becomes "-l a,b".</summary>
    private static List<string> MergeLogOptions(List<string> options)
    {
        var result = new List<string>();
        var log = new List<string>();
        for (int i = 0; i < options.Count; i++)
        {
            if (options[i] == "-l" && i + 1 < options.Count) log.Add(options[++i]);
            else result.Add(options[i]);
        }
        if (log.Count > 0) result.AddRange(["-l", string.Join(',', log)]);
        return result;
    }

    /// <summary>
    /// Under fstests' variables mkfs.xfs lifts its floors for production volumes (a 64 MiB log on volumes over
    /// 300 MB), so that logs of the minimum size the geometry allows can be made, as the kernel's tests make them.
    /// </summary>
    private static readonly Dictionary<string, string> MkfsTestMode = new()
    {
        ["TEST_DIR"] = "/tmp", ["TEST_DEV"] = "/dev/null", ["QA_CHECK_FS"] = "xfs",
    };

    [GeneratedRegex(@"(?:minimum size is|must be at least) (\d+) blocks")]
    private static partial Regex MinimumLog();

    private static Superblock ReadSuperblock(IBlockDevice device)
    {
        var sector = new byte[512];
        device.Read(0, sector);
        return Superblock.Decode(sector);
    }

    private static byte[] Read(IBlockDevice device, long offset, int length)
    {
        var b = new byte[length];
        device.Read(offset, b);
        return b;
    }

    private static int SectorBB(Superblock sb) => sb.SectorSize >> LogArea.BBShift;
    private static long AgfDaddr(Superblock sb, uint ag) => (sb.AgBlockToByte(ag, 0) >> LogArea.BBShift) + SectorBB(sb);
    private static long AgiDaddr(Superblock sb, uint ag) => (sb.AgBlockToByte(ag, 0) >> LogArea.BBShift) + 2 * SectorBB(sb);

    private static BufferLogItem Label(Superblock sb, IBlockDevice device, string label)
    {
        var sector = Read(device, 0, sb.SectorSize);
        var name = sector.AsSpan(SuperblockView.OffFname, 12);
        name.Clear();
        Encoding.ASCII.GetBytes(label).CopyTo(name);
        return BufferLogItem.Create(0, SectorBB(sb), BufType.Superblock, sector, SuperblockView.OffFname, 12);
    }

    /// <summary>A header or btree block logged whole and unchanged: replay stamps the checkpoint's LSN into it.</summary>
    private static BufferLogItem Unchanged(IBlockDevice device, long daddr, int lengthBB, BufType type)
    {
        var image = Read(device, daddr << LogArea.BBShift, lengthBB << LogArea.BBShift);
        return BufferLogItem.Create(daddr, lengthBB, type, image, 0, image.Length);
    }

    /// <summary>The blocks a checkpoint of the wrap test logs besides the superblock: every AG's AGF, AGI and btree roots.</summary>
    private static List<(long Daddr, int LengthBB, BufType Type)> HeaderBlocks(Superblock sb, IBlockDevice device)
    {
        var blocks = new List<(long, int, BufType)>();
        int blockBB = (int)sb.BlockSize >> LogArea.BBShift;
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            blocks.Add((AgfDaddr(sb, ag), SectorBB(sb), BufType.Agf));
            blocks.Add((AgiDaddr(sb, ag), SectorBB(sb), BufType.Agi));
            var agf = Read(device, AgfDaddr(sb, ag) << LogArea.BBShift, 512);
            var agi = Read(device, AgiDaddr(sb, ag) << LogArea.BBShift, 512);
            foreach (uint root in new[] { BinaryPrimitives.ReadUInt32BigEndian(agf.AsSpan(16)), BinaryPrimitives.ReadUInt32BigEndian(agf.AsSpan(20)),
                         BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(20)) })
                blocks.Add((sb.AgBlockToByte(ag, root) >> LogArea.BBShift, blockBB, BufType.Btree));
        }
        return blocks;
    }

    private static (string Output, int ExitCode) LogPrint(Volume v)
    {
        var args = new List<string> { "-t" };
        if (v.LogImage is not null) args.AddRange(["-l", v.LogImage]);
        args.Add(v.Image);
        var r = Shell.Run(OracleImages.Tool("xfs_logprint", "6.13"), args);
        return (r.StandardOutput + r.StandardError, r.ExitCode);
    }

    private static void AssertRepairClean(Volume v)
    {
        var args = new List<string> { "-n" };
        if (v.LogImage is not null) args.AddRange(["-l", v.LogImage]);
        args.Add(v.Image);
        var r = Shell.Run(OracleImages.Tool("xfs_repair"), args);
        Assert.True(r.ExitCode == 0, $"xfs_repair -n failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
    }

    /// <summary>Mounts with the kernel (replaying the log), runs <paramref name="inspect"/> on the mount point, unmounts.</summary>
    private static void WithKernelMount(Volume v, Action<string> inspect)
    {
        string? logLoop = null;
        try
        {
            if (v.LogImage is not null) logLoop = Shell.RunChecked("losetup", "--find", "--show", v.LogImage).StandardOutput.Trim();
            // noatime: reading the files must not change the inodes compared with XfsWin's replay afterwards.
            using var mount = LoopMount.Mount(v.Image, readOnly: false, "noatime" + (logLoop is null ? "" : ",logdev=" + logLoop));
            inspect(mount.MountPoint);
        }
        finally
        {
            if (logLoop is not null) Shell.Run("losetup", "-d", logLoop);
        }
    }

    /// <summary>The primary superblock's label as xfs_db prints it (only the primary carries what the log changed).</summary>
    private static string KernelLabel(Volume v) =>
        TestSupport.XfsDb.Fields(TestSupport.XfsDb.Run(v.Image, "6.1", "sb 0", "print fname"))["fname"].Trim('"').Replace("\\000", "", StringComparison.Ordinal);

    /// <summary>Each (daddr, length) replayed by XfsWin equals the kernel's replay; the superblock but for what the kernel's unmount rewrites.</summary>
    private static void AssertSameAsKernel(Dictionary<(long Daddr, int Bytes), byte[]> ours, Volume v)
    {
        using var kernel = FileBlockDevice.Open(v.Image, writable: false);
        foreach (var ((daddr, bytes), mine) in ours)
        {
            var theirs = Read(kernel, daddr << LogArea.BBShift, bytes);
            var a = (byte[])mine.Clone();
            if (daddr == 0)
            {
                foreach (var s in new[] { a, theirs })
                {
                    s.AsSpan(SuperblockView.OffIcount, 24).Clear();
                    s.AsSpan(SuperblockView.OffCrc, 4).Clear();
                    s.AsSpan(SuperblockView.OffLsn, 8).Clear();
                }
            }
            int diff = Enumerable.Range(0, bytes).FirstOrDefault(i => a[i] != theirs[i], -1);
            Assert.True(diff < 0, $"daddr {daddr} (+{bytes} bytes) after XfsWin's replay differs from the kernel's at byte {diff}: ours 0x{(diff < 0 ? 0 : a[diff]):x2}, kernel 0x{(diff < 0 ? 0 : theirs[diff]):x2}");
        }
    }

    /// <summary>XfsWin's in-memory replay of the volume's log: the given ranges as it leaves them.</summary>
    private static Dictionary<(long, int), byte[]> OurReplay(Volume v, IEnumerable<(long Daddr, int Bytes)> ranges)
    {
        using var data = FileBlockDevice.Open(v.Image, writable: false);
        using var log = v.LogImage is null ? null : FileBlockDevice.Open(v.LogImage, writable: false);
        var result = LogRecovery.Recover(data, log, ReadSuperblock(data), LogReplayMode.Memory);
        Assert.Equal(LogState.ReplayedInMemory, result.State);
        Assert.True(result.TransactionsReplayed > 0);
        return ranges.Distinct().ToDictionary(r => (r.Daddr, r.Bytes), r => Read(result.Device, r.Daddr << LogArea.BBShift, r.Bytes));
    }

    private static long Timestamp(ReadOnlySpan<byte> inode, int offset, bool bigtime) => bigtime
        ? (long)(BinaryPrimitives.ReadUInt64BigEndian(inode[offset..]) / 1_000_000_000UL) - (1L << 31)
        : BinaryPrimitives.ReadInt32BigEndian(inode[offset..]);

    private static void SetTimestamp(Span<byte> inode, int offset, bool bigtime, long seconds)
    {
        if (bigtime) BinaryPrimitives.WriteUInt64BigEndian(inode[offset..], (ulong)(seconds + (1L << 31)) * 1_000_000_000UL);
        else
        {
            BinaryPrimitives.WriteInt32BigEndian(inode[offset..], (int)seconds);
            BinaryPrimitives.WriteInt32BigEndian(inode[(offset + 4)..], 0);
        }
    }

    [Fact]
    public void KernelReplaysBufferInodeAndIntentItemsOnlyInTheLog()
    {
        var v = Make("");
        byte[] imageBefore;
        InodeClusterLocation cluster;
        Superblock sb;
        var logged = new List<(long Daddr, int Bytes)>();
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        {
            sb = ReadSuperblock(device);
            var log = MountedLog.Open(LogArea.For(device, null, sb), sb, new DeviceImageWriteback(device, sb));

            using (var tx = log.Begin(4096))
            {
                tx.Log(Label(sb, device, "logwrite"));
                tx.Commit();
            }
            using (var tx = log.Begin(4096))
            {
                tx.Log(Unchanged(device, AgfDaddr(sb, 1), SectorBB(sb), BufType.Agf));
                tx.Commit();
            }

            cluster = InodeClusterLocation.Of(sb, v.FileIno);
            Assert.Equal(sb.InodeToByte(v.FileIno), cluster.InodeByte);
            var inode = Read(device, cluster.InodeByte, sb.InodeSize);
            bool bigtime = (BinaryPrimitives.ReadUInt64BigEndian(inode.AsSpan(DinodeView.OffFlags2)) & DinodeView.Flag2Bigtime) != 0;
            BinaryPrimitives.WriteUInt16BigEndian(inode.AsSpan(DinodeView.OffMode), 0x8000 | 0x1A4); // regular, 0644
            BinaryPrimitives.WriteUInt32BigEndian(inode.AsSpan(DinodeView.OffUid), 4242);
            BinaryPrimitives.WriteUInt32BigEndian(inode.AsSpan(DinodeView.OffGid), 4343);
            SetTimestamp(inode, DinodeView.OffMtime, bigtime, 1_234_567_890);
            int literal = 176, attrStart = literal + inode[DinodeView.OffForkoff] * 8;
            Assert.Equal((byte)ForkFormat.Local, inode[DinodeView.OffAformat]);
            int at = inode.AsSpan(attrStart).IndexOf("kvalue-one"u8);
            Assert.True(at > 0, "user.k is not in the short-form attribute fork");
            "kvalue-two"u8.CopyTo(inode.AsSpan(attrStart + at));
            imageBefore = Read(device, cluster.Daddr << LogArea.BBShift, cluster.LengthBB << LogArea.BBShift);
            using (var tx = log.Begin(8192))
            {
                tx.Log(InodeLogItem.Create(v.FileIno, cluster, inode, InodeLogParts.DataFork | InodeLogParts.AttrFork));
                // A btree data fork (logged as the in-memory root), a short-form directory (local data) and a device (rdev).
                foreach (var (ino, form, edit) in new (ulong, ForkFormat, Action<byte[]>)[]
                {
                    (v.FragIno, ForkFormat.Btree, d => BinaryPrimitives.WriteUInt32BigEndian(d.AsSpan(DinodeView.OffUid), 77)),
                    (v.DirIno, ForkFormat.Local, d => BinaryPrimitives.WriteUInt16BigEndian(d.AsSpan(DinodeView.OffMode), 0x4000 | 0x1C0)),
                    (v.DeviceIno, ForkFormat.Device, d => BinaryPrimitives.WriteUInt32BigEndian(d.AsSpan(DinodeView.OffUid), 88)),
                })
                {
                    var where = InodeClusterLocation.Of(sb, ino);
                    var image = Read(device, where.InodeByte, sb.InodeSize);
                    Assert.Equal((byte)form, image[DinodeView.OffFormat]);
                    edit(image);
                    tx.Log(InodeLogItem.Create(ino, where, image, InodeLogParts.DataFork));
                    logged.Add((where.Daddr, where.LengthBB << LogArea.BBShift));
                }
                // An intent checkpointed, its done item in the next checkpoint: recovery pairs them and has nothing to do.
                tx.Log(IntentLogItem.ExtentFree(done: false, 0x51, [new IntentExtent(100, 1)]));
                tx.Commit();
            }
            log.Force();
            Assert.Equal(7, log.AilCount); // the intent holds the tail until its done item is checkpointed
            using (var tx = log.Begin(4096))
            {
                tx.Log(IntentLogItem.ExtentFree(done: true, 0x51, [new IntentExtent(100, 1)]));
                tx.Commit();
            }
            log.Force();
            var stats = log.Statistics;
            Assert.Equal(4, stats.Transactions);
            Assert.Equal(2, stats.Checkpoints);
            Assert.Equal(0, stats.AilPushes);
            Assert.Equal(6, log.AilCount); // superblock, AGF, four inodes: the EFD took its EFI out
            logged.Add((0, sb.SectorSize));
            logged.Add((AgfDaddr(sb, 1), sb.SectorSize));
            logged.Add((cluster.Daddr, cluster.LengthBB << LogArea.BBShift));
            // The log is now dirty: nobody may append to it before it is replayed.
            var refused = Assert.Throws<XfsException>(() => MountedLog.Open(LogArea.For(device, null, sb), sb, new DeviceImageWriteback(device, sb)));
            Assert.Contains("dirty", refused.Message);
        }

        // The metadata in place is untouched: the change is only in the log.
        Assert.NotEqual("logwrite", KernelLabel(v));
        var (print, code) = LogPrint(v);
        Assert.True(code == 0, $"xfs_logprint -t failed ({code}):\n{print}");
        Assert.Contains("BUF", print);
        Assert.Contains("INODE", print);
        Assert.Contains("EFI", print);
        Assert.Contains("EFD", print);
        var dirty = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", v.Image);
        Assert.True(dirty.ExitCode != 0 && (dirty.StandardOutput + dirty.StandardError).Contains("log", StringComparison.Ordinal),
            $"xfs_repair -n did not find the dirty log ({dirty.ExitCode}):\n{dirty.StandardOutput}{dirty.StandardError}");

        var ours = OurReplay(v, logged);
        Assert.Equal("logwrite", Encoding.ASCII.GetString(ours[(0, sb.SectorSize)].AsSpan(SuperblockView.OffFname, 8)));
        if (Environment.GetEnvironmentVariable("XFSWIN_KEEP_LOGWRITE") is { } keep) File.Copy(v.Image, keep, overwrite: true);
        WithKernelMount(v, mnt =>
        {
            string f = Path.Combine(mnt, "f");
            var st = Shell.RunChecked("stat", "-c", "%f %u %g %Y %s", f).StandardOutput.Trim();
            Assert.Equal("81a4 4242 4343 1234567890 65536", st);
            var attr = Shell.RunChecked("getfattr", "--only-values", "-n", "user.k", f).StandardOutput;
            Assert.Equal("value-two", attr.TrimEnd('\n'));
            Assert.Equal(Enumerable.Range(0, 65536).Select(i => (byte)i).ToArray(), File.ReadAllBytes(f));
            Assert.Equal("77 262144", Shell.RunChecked("stat", "-c", "%u %s", Path.Combine(mnt, "frag")).StandardOutput.Trim());
            var frag = File.ReadAllBytes(Path.Combine(mnt, "frag"));
            Assert.All(Enumerable.Range(0, 64), b => Assert.Equal(b % 2 == 0 ? (byte)0x61 : (byte)0, frag[b * 4096]));
            Assert.Equal("41c0", Shell.RunChecked("stat", "-c", "%f", Path.Combine(mnt, "d")).StandardOutput.Trim());
            Assert.Equal("88 1 3", Shell.RunChecked("stat", "-c", "%u %t %T", Path.Combine(mnt, "c")).StandardOutput.Trim());
        });
        Assert.Equal("logwrite", KernelLabel(v));
        AssertRepairClean(v);
        AssertSameAsKernel(ours, v);
        _ = imageBefore;
    }

    public static TheoryData<string, string, int, bool> WrapCases => new()
    {
        // name, mkfs options, record size (0 = default), external log
        { "512-byte log sectors", "", 0, false },
        { "4 KiB log sectors", "-s size=4096", 0, false },
        { "log stripe unit 256k", "-l su=256k", 0, false },
        { "256 KiB records (extended headers)", "", 256 * 1024, false },
        { "external log", "", 0, true },
    };

    [Theory]
    [MemberData(nameof(WrapCases))]
    public void LogWrapsWithTheAilWritingBackAndTheKernelReplaysTheEnd(string name, string mkfs, int recordSize, bool externalLog)
    {
        var v = Make(mkfs, externalLog, minimumLog: true);
        var logged = new List<(long Daddr, int Bytes)>();
        string finalLabel = "";
        LogWriteStatistics stats;
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        using (var logDevice = v.LogImage is null ? null : FileBlockDevice.Open(v.LogImage, writable: true))
        {
            var sb = ReadSuperblock(device);
            var area = LogArea.For(device, logDevice, sb);
            var writeback = new DeviceImageWriteback(device, sb);
            // Images the log lets go are poisoned, as a buffer reusing them for its next copy would change them: were
            // one still held (by the CIL, a checkpoint or an AIL item waiting for writeback), the replays and the
            // writebacks below would carry the poison. Those let go while a checkpoint is written are AIL items a
            // newer checkpoint of the same block replaced.
            var poison = new PoisonedReleases();
            var log = MountedLog.Open(area, sb, writeback, new MountedLogOptions { RecordSize = recordSize, ImageReleased = poison.Release });
            if (recordSize > 32768) Assert.Equal(recordSize / 32768, log.HeaderBlocks);
            var blocks = HeaderBlocks(sb, device);
            // Blocks logged once each (free space of AG 1, type unknown: replay writes them exactly as logged) keep
            // old checkpoints in the AIL, so the head catches up with the tail and the AIL must be pushed.
            var (freeStart, freeCount) = LastFreeExtent(v, 1);
            Assert.True(freeCount >= 4096, $"AG 1 has no large free extent ({freeStart}+{freeCount})");
            int blockBB = (int)sb.BlockSize >> LogArea.BBShift;
            long nextFree = 0;
            var zero = new byte[sb.BlockSize];
            for (int i = 0; ; i++)
            {
                Assert.True(i < 20000, $"the log did not wrap {TargetWraps} times in {i} transactions");
                using var tx = log.Begin(64 * 1024);
                finalLabel = $"w{i:D6}";
                tx.Log(Label(sb, device, finalLabel));
                foreach (var (daddr, len, type) in blocks) tx.Log(Unchanged(device, daddr, len, type));
                for (int k = 0; k < 4; k++, nextFree++)
                {
                    long daddr = sb.AgBlockToByte(1, (uint)(freeStart + nextFree % freeCount)) >> LogArea.BBShift;
                    zero.AsSpan().Fill((byte)i);
                    tx.Log(BufferLogItem.Create(daddr, blockBB, BufType.Unknown, zero, 0, zero.Length));
                }
                tx.Commit();
                // A checkpoint every few transactions: relogged items merge in the CIL.
                if (i % 7 != 6) continue;
                poison.Force(log);
                if (log.Statistics.Wraps >= TargetWraps) break;
            }
            stats = log.Statistics;
            output.WriteLine($"{name}: log {area.Blocks} BB, records of {log.RecordSize} bytes ({log.HeaderBlocks} header sectors): {stats}; " +
                             $"{writeback.BuffersWritten} buffers written back");
            Assert.True(stats.AilPushes > 0, "the AIL was never pushed");
            Assert.True(writeback.BuffersWritten > 0);
            Assert.True(log.AilCount > 0, "everything was written back: the kernel would have nothing to replay");
            poison.AssertBothKinds(output);
            logged.Add((0, sb.SectorSize));
            foreach (var (daddr, len, _) in blocks) logged.Add((daddr, len << LogArea.BBShift));
        }

        var (print, code) = LogPrint(v);
        Assert.True(code == 0, $"xfs_logprint -t failed ({code}):\n{print}");
        Assert.NotEqual(finalLabel, KernelLabel(v));
        var ours = OurReplay(v, logged);
        WithKernelMount(v, _ => { });
        Assert.Equal(finalLabel, KernelLabel(v));
        AssertRepairClean(v);
        AssertSameAsKernel(ours, v);
        Assert.True(stats.Wraps >= TargetWraps, $"{stats}");
    }

    /// <summary>The last free extent of an AG's by-block free-space btree root (a fresh volume's AG holds one).</summary>
    /// <summary>
    /// Deferred work for the relog test: each step logs four scratch blocks (free space of AG 1, written back as
    /// logged) and asks for a fresh transaction until its steps run out. Its intents are EFIs naming a scratch block.
    /// </summary>
    private sealed class FillingWork(long[] daddrs, int blockBB, ulong scratchFsb) : DeferredWorkType<int>
    {
        private long _next;
        public override string Name => "log filler";
        public override int MaxItems => 1;
        public override IntentLogItem CreateIntent(ulong id, IReadOnlyList<int> items) => IntentLogItem.ExtentFree(false, id, [new IntentExtent(scratchFsb, 1)]);
        public override IntentLogItem CreateDone(IntentLogItem intent, IReadOnlyList<int> items) => IntentLogItem.ExtentFree(true, intent.Id, [new IntentExtent(scratchFsb, 1)]);

        public override int? Finish(Transaction tx, int steps)
        {
            var image = new byte[blockBB << LogArea.BBShift];
            for (int k = 0; k < 4; k++, _next++)
            {
                image.AsSpan().Fill((byte)steps);
                tx.Log(BufferLogItem.Create(daddrs[_next % daddrs.Length], blockBB, BufType.Unknown, image, 0, image.Length));
            }
            return steps > 0 ? steps - 1 : null;
        }
    }

    [Fact]
    public void AnIntentThatWaitsWhileTheLogFillsIsLoggedAgainSoTheTailMoves()
    {
        // Two batches of deferred work: the first goes on for hundreds of parts, logging enough to go round the smallest
        // log twice, while the second's intent waits. Without relogging (a done item for it and a new copy), that intent
        // would hold the tail and the log would run out of space; with it, the chain finishes and the log unmounts clean.
        var v = Make("", minimumLog: true);
        LogWriteStatistics stats;
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        {
            var sb = ReadSuperblock(device);
            var area = LogArea.For(device, null, sb);
            var log = MountedLog.Open(area, sb, new DeviceImageWriteback(device, sb), new MountedLogOptions { CheckpointThresholdBytes = 64 * 1024 });
            var mount = new XfsWin.Metadata.MountContext(device, sb, 16L << 20);
            var (freeStart, freeCount) = LastFreeExtent(v, 1);
            Assert.True(freeCount >= 256, $"AG 1 has no large free extent ({freeStart}+{freeCount})");
            var daddrs = Enumerable.Range(0, 256).Select(i => sb.AgBlockToByte(1, (uint)(freeStart + i)) >> LogArea.BBShift).ToArray();
            int blockBB = (int)sb.BlockSize >> LogArea.BBShift;
            ulong scratch = ((ulong)1 << sb.AgBlkLog) | (ulong)freeStart;
            int steps = (int)(2 * area.Blocks / (4 * blockBB)) + 1;
            using (var tx = new Transaction(mount, log, 64 * 1024, 2))
            {
                tx.Defer(new FillingWork(daddrs, blockBB, scratch), steps);
                tx.Defer(new FillingWork(daddrs, blockBB, scratch), 0);
                tx.Commit();
                Assert.True(tx.Rolls > steps, $"{tx.Rolls} rolls for {steps} steps");
            }
            stats = log.Statistics;
            output.WriteLine($"relog: log {area.Blocks} BB: {stats}");
            Assert.True(stats.Wraps >= 1, $"the log wrapped {stats.Wraps} time(s)");
            Assert.True(stats.IntentsRelogged > 0, "the waiting intent was never logged again");
            log.Unmount();
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", v.Image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n failed ({repair.ExitCode}):\n{repair.StandardOutput}");
        WithKernelMount(v, _ => { });
    }

    private static (long Start, long Count) LastFreeExtent(Volume v, uint ag)
    {
        string output = TestSupport.XfsDb.Run(v.Image, "6.1", $"agf {ag}", "addr bnoroot", "print recs");
        var m = FreeRecord().Matches(output);
        Assert.True(m.Count > 0, $"no free-space records in AG {ag}:\n{output}");
        var last = m[^1];
        return (long.Parse(last.Groups[1].Value), long.Parse(last.Groups[2].Value));
    }

    [GeneratedRegex(@"\d+:\[(\d+),(\d+)\]")]
    private static partial Regex FreeRecord();

    [Fact]
    public void CleanUnmountLeavesALogTheKernelSeesAsClean()
    {
        var v = Make("");
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        {
            var sb = ReadSuperblock(device);
            var area = LogArea.For(device, null, sb);
            var log = MountedLog.Open(area, sb, new DeviceImageWriteback(device, sb));
            for (int i = 0; i < 3; i++)
            {
                using var tx = log.Begin(4096);
                tx.Log(Label(sb, device, $"clean{i}"));
                tx.Log(Unchanged(device, AgiDaddr(sb, 2), SectorBB(sb), BufType.Agi));
                tx.Commit();
            }
            // A reservation the log could never hold is refused up front, not waited for.
            var tooBig = Assert.Throws<XfsException>(() => log.Begin((int)(area.Blocks << LogArea.BBShift)));
            Assert.Equal(XfsError.Unsupported, tooBig.Error);
            log.Unmount();
            Assert.Equal(0, log.AilCount);
            Assert.Throws<ObjectDisposedException>(() => log.Begin(4096));
            var pos = LogScanner.Find(new LogReader(area, sb.Uuid), v2: true, crcFilesystem: true);
            Assert.True(pos.Clean);
        }
        // Written in place: xfs_db sees it without any replay, and xfs_repair finds a clean log.
        Assert.Equal("clean2", KernelLabel(v));
        var (print, code) = LogPrint(v);
        Assert.True(code == 0, $"xfs_logprint -t failed ({code}):\n{print}");
        Assert.Contains("<CLEAN>", print);
        AssertRepairClean(v);
        WithKernelMount(v, _ => { });
        Assert.Equal("clean2", KernelLabel(v));
        AssertRepairClean(v);
    }

    /// <summary>
    /// The log's <see cref="MountedLogOptions.ImageReleased"/> for tests: every image the log lets go is poisoned at once,
    /// as a buffer reusing it for its next copy would change it, and counted by where it was let go (a relog in the CIL
    /// during a commit, or an AIL item a newer checkpoint replaced during <see cref="Force"/>).
    /// </summary>
    private sealed class PoisonedReleases
    {
        private bool _forcing;
        public int InCommits { get; private set; }
        public int InCheckpoints { get; private set; }

        public void Release(long daddr, byte[] image)
        {
            if (_forcing) InCheckpoints++;
            else InCommits++;
            image.AsSpan().Fill(0xEE);
        }

        public void Force(MountedLog log)
        {
            _forcing = true;
            try
            {
                log.Force();
            }
            finally
            {
                _forcing = false;
            }
        }

        public void AssertBothKinds(ITestOutputHelper output)
        {
            output.WriteLine($"images let go: {InCommits} by relogs in the CIL, {InCheckpoints} by AIL items replaced");
            Assert.True(InCommits > 0 && InCheckpoints > 0, $"images let go: {InCommits} in commits, {InCheckpoints} in checkpoints");
        }
    }

    [Fact]
    public void Images_the_log_lets_go_are_never_written_afterwards()
    {
        var v = Make("");
        var poison = new PoisonedReleases();
        using (var device = FileBlockDevice.Open(v.Image, writable: true))
        {
            var sb = ReadSuperblock(device);
            var area = LogArea.For(device, null, sb);
            // A checkpoint or a writeback of a poisoned image still held would put the poison on disk.
            var log = MountedLog.Open(area, sb, new DeviceImageWriteback(device, sb), new MountedLogOptions { ImageReleased = poison.Release });
            // The same blocks logged again and again, with a checkpoint every third transaction: relogs in the CIL let
            // images go, and so does each checkpoint, whose items replace the ones the AIL held for the same blocks.
            for (int i = 0; i < 12; i++)
            {
                using (var tx = log.Begin(8192))
                {
                    tx.Log(Label(sb, device, $"poison{i}"));
                    tx.Log(Unchanged(device, AgiDaddr(sb, 2), SectorBB(sb), BufType.Agi));
                    tx.Commit();
                }
                if (i % 3 != 2) continue;
                poison.Force(log);
            }
            log.Unmount();
        }
        poison.AssertBothKinds(output);
        // What unmount wrote back is the last image of each block: the label of the last transaction, an AGI xfs_repair
        // and the kernel accept.
        Assert.Equal("poison11", KernelLabel(v));
        AssertRepairClean(v);
        WithKernelMount(v, _ => { });
        Assert.Equal("poison11", KernelLabel(v));
    }
}

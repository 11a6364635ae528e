using System.Security.Cryptography;
using System.Text.RegularExpressions;
using XfsWin.Cli.Commands;
using XfsWin.Format;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>
/// <c>xfswin mkfs</c> against mkfs.xfs itself: for each size and option set both make a volume, and
/// xfs_db must print the same primary and secondary superblocks, AGF, AGI, AGFL, every btree root and
/// the first inodes (UUID, CRCs, times and generations aside); xfs_repair -n (6.13) must find nothing,
/// and for some the kernel mounts the volume, works in it and leaves it clean.
/// </summary>
public sealed partial class MkfsTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-mkfs-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    public static TheoryData<string, string> Matrix => new()
    {
        { "300M", "" },
        { "1G", "" },
        { "16G", "" },
        { "2T", "" },
        { "1G", "-b size=1024" },
        { "1G", "-b size=65536" },
        { "1G", "-n size=65536" },
        { "1G", "-m crc=1,rmapbt=0,reflink=0" },
        { "1G", "-d agcount=7" },
        { "1G", "-d su=64k,sw=4" },
        { "16G", "-d su=1m,sw=2" },
        { "1G", "-l size=128m" },
        { "1G", "-n parent=1" },
        { "1G", "-i sparse=0" },
        { "1G", "-s size=4096" },
        { "1G", "-i size=1024 -m finobt=0" },
        { "1G", "-b size=2048 -L scratch" },
        { "1G", "-m metadir=1" },
        { "16G", "-m metadir=1 -n parent=1 -d agcount=7" },
        // V4 (crc=0): no V5 features, 256-byte V2 inodes, headers without UUID/CRC, and the V4-only choices.
        { "1G", "-m crc=0" },
        { "300M", "-m crc=0" },
        { "16G", "-m crc=0" },
        { "1G", "-m crc=0 -b size=1024" },
        { "1G", "-m crc=0 -b size=512" },
        { "1G", "-m crc=0 -i size=512" },
        { "1G", "-m crc=0 -i size=2048" },
        { "1G", "-m crc=0 -i align=0" },
        { "1G", "-m crc=0 -l version=1" },
        { "1G", "-m crc=0 -l version=1 -d su=64k,sw=4" },
        { "1G", "-m crc=0 -l lazy-count=0 -n ftype=0" },
        { "1G", "-m crc=0 -d su=64k,sw=4" },
        { "1G", "-m crc=0 -s size=4096" },
        { "1G", "-m crc=0,finobt=0 -i sparse=0 -L old4" },
        { "1G", "-m crc=0 -i attr=1,projid32bit=0 -l lazy-count=0 -n ftype=0" },
        { "1G", "-m crc=0 -i attr=0" },
    };

    [Theory]
    [MemberData(nameof(Matrix))]
    public void LayoutMatchesMkfsXfs613(string size, string options)
    {
        string ours = Path.Combine(_dir, "ours.img"), theirs = Path.Combine(_dir, "theirs.img");
        RunOurs(0, [.. Split(options), "-q", "-d", "size=" + size, ours]);
        Shell.RunChecked("truncate", "-s", size, theirs);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), [.. Split(options), "-q", "-f", theirs]);

        AssertSameLayout(theirs, ours, $"{size} {options}");
        AssertRepairClean(ours);
        // Sparse: ours writes headers, roots, one inode chunk and one log record, never more than mkfs.xfs.
        Assert.True(AllocatedBytes(ours) <= Math.Max(AllocatedBytes(theirs), 1 << 20),
            $"{size} {options}: ours allocates {AllocatedBytes(ours)} bytes, mkfs.xfs {AllocatedBytes(theirs)}");
    }

    public static TheoryData<string, string, string> Matrix61 => new()
    {
        // 6.1 knows these features but defaults them off: give them to it explicitly.
        { "300M", "", "-m rmapbt=1 -i nrext64=1" },
        { "1G", "", "-m rmapbt=1 -i nrext64=1" },
        { "16G", "-b size=1024", "-m rmapbt=1 -i nrext64=1" },
        { "2T", "", "-m rmapbt=1 -i nrext64=1" },
        { "1G", "-m rmapbt=0 -i nrext64=0", "" },
        { "1G", "-d su=256k,sw=8", "-m rmapbt=1 -i nrext64=1" },
        { "1G", "-m crc=0", "" },
        { "300M", "-m crc=0", "" },
        { "16G", "-m crc=0 -b size=1024", "" },
        { "1G", "-m crc=0 -i size=512", "" },
        { "1G", "-m crc=0 -i align=0", "" },
        { "1G", "-m crc=0 -l version=1", "" },
        { "1G", "-m crc=0 -l lazy-count=0 -n ftype=0", "" },
        { "1G", "-m crc=0 -d su=64k,sw=4", "" },
        { "1G", "-m crc=0 -s size=4096", "" },
        { "1G", "-m crc=0 -b size=512", "" },
        { "1G", "-m crc=0 -l version=1 -d su=64k,sw=4", "" },
        { "1G", "-m crc=0 -i attr=1,projid32bit=0 -l lazy-count=0 -n ftype=0", "" },
    };

    [Theory]
    [MemberData(nameof(Matrix61))]
    public void LayoutMatchesMkfsXfs61WithTheSameFeatures(string size, string options, string options61)
    {
        string ours = Path.Combine(_dir, "ours.img"), theirs = Path.Combine(_dir, "theirs61.img");
        RunOurs(0, [.. Split(options), "-q", "-d", "size=" + size, ours]);
        Shell.RunChecked("truncate", "-s", size, theirs);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.1"), [.. Split(options), .. Split(options61), "-q", "-f", theirs]);
        AssertSameLayout(theirs, ours, $"{size} {options} (6.1 {options61})");
        AssertRepairClean(ours);
    }

    /// <summary>The size matrix's ends and middle (sparse images: 300 MiB, 16 GiB, 2 TiB) and option sets the kernel fills.</summary>
    [Theory]
    [InlineData("300M", "")]
    [InlineData("1G", "")]
    [InlineData("16G", "-m metadir=1 -d agcount=7")]
    [InlineData("2T", "")]
    [InlineData("1G", "-b size=1024 -n parent=1")]
    [InlineData("1G", "-d su=64k,sw=4 -i sparse=0")]
    public void KernelMountsFillsAndLeavesItClean(string size, string options)
    {
        string image = Path.Combine(_dir, "kernel.img");
        RunOurs(0, [.. Split(options), "-q", "-L", "fresh", "-d", "size=" + size, image]);
        using (var m = XfsWin.TestSupport.LoopMount.Mount(image, readOnly: false))
        {
            Stress(m.MountPoint);
        }
        AssertRepairClean(image);
        var sb = ReadSuperblock(image);
        Assert.Equal("fresh", sb.Label);
        ulong blocks = (ulong)ParseSize(size) / sb.BlockSize;
        Assert.True(sb.DataBlocks <= blocks && sb.DataBlocks > blocks / 100 * 99, $"{sb.DataBlocks} data blocks on a {size} image"); // stripes round it down
        // What the kernel left is what our own check finds clean too.
        var check = Xfswin.Run("check", "--no-progress", image);
        Assert.True(check.Code == 0, check.ToString());
    }

    /// <summary>
    /// V4 volumes judged by a kernel that still mounts them (user-mode Linux 6.1, ../XfsWin.Core.Tests/Journal/uml.sh;
    /// the machine's kernel is built without V4 support): our engine opens the fresh volume (read-only, as it keeps
    /// every V4 volume) and lists its empty root; the kernel mounts it, runs v4-workload.sh (directories of every
    /// form, files, deletes, renames, xattrs, links, symlinks, a shutdown and log replay half way) and unmounts it;
    /// then xfs_repair -n (6.13) and our check find nothing, and our engine lists exactly the paths the guest found.
    /// </summary>
    [Theory]
    [InlineData("1G", "-m crc=0")]
    [InlineData("1G", "-m crc=0 -l version=1 -d su=64k,sw=4")]
    [InlineData("1G", "-m crc=0 -l version=1,lazy-count=0 -n ftype=0 -i size=512 -b size=1024")]
    [InlineData("300M", "-m crc=0 -i align=0 -s size=4096")]
    [InlineData("1G", "-m crc=0 -i attr=1,projid32bit=0 -l lazy-count=0")]
    public void KernelWithV4SupportMountsFillsAndLeavesItClean(string size, string options)
    {
        string image = Path.Combine(_dir, "v4.img"), listing = Path.Combine(_dir, "v4.list");
        RunOurs(0, [.. Split(options), "-q", "-d", "size=" + size, image]);
        var sb = ReadSuperblock(image);
        Assert.False(sb.IsV5);
        var fresh = Xfswin.Run("ls", "-a", image);
        Assert.True(fresh.Code == 0, fresh.ToString());
        Assert.Equal(".\n..\n", fresh.Out);

        string tests = Path.Combine(OracleImages.RepoRoot, "tests");
        var r = Shell.Run("bash", [Path.Combine(tests, "XfsWin.Core.Tests", "Journal", "uml.sh"), "run", image, "--",
            Path.Combine(tests, "XfsWin.Cli.Tests", "v4-workload.sh"), "/dev/ubda", listing], TimeSpan.FromMinutes(10),
            new Dictionary<string, string> { ["XFSWIN_CACHE"] = OracleImages.CacheRoot });
        Assert.True(r.ExitCode == 0, $"v4-workload.sh in user-mode Linux failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");

        AssertRepairClean(image);
        var check = Xfswin.Run("check", "--no-progress", image);
        Assert.True(check.Code == 0, check.ToString());
        var expected = File.ReadAllLines(listing);
        Assert.True(expected.Length > 700, $"the workload left only {expected.Length} paths");
        var listed = Xfswin.Run("ls", "-R", "--json", image);
        Assert.True(listed.Code == 0, listed.ToString());
        using var json = System.Text.Json.JsonDocument.Parse(listed.Out);
        var actual = json.RootElement.EnumerateArray().Select(e => e.GetProperty("path").GetString()![1..]).Order(StringComparer.Ordinal).ToArray();
        Assert.Equal(expected, actual);
    }

    private static long ParseSize(string size) => long.Parse(size[..^1]) << (size[^1] switch { 'M' => 20, 'G' => 30, 'T' => 40, _ => 0 });

    /// <summary>A short deterministic workload: directories of every form, writes, deletes, renames, xattrs, hard links, symlinks.</summary>
    private static void Stress(string root)
    {
        var rng = new Random(12);
        var buffer = new byte[300_000];
        for (int d = 0; d < 8; d++) Directory.CreateDirectory(Path.Combine(root, $"dir{d}"));
        for (int d = 0; d < 8; d++)
        {
            string dir = Path.Combine(root, $"dir{d}");
            int files = d == 0 ? 600 : 25; // one directory grows past short form into leaf/node blocks
            for (int f = 0; f < files; f++)
            {
                string file = Path.Combine(dir, $"file-{f:D4}-{new string('x', f % 40)}");
                rng.NextBytes(buffer);
                int len = rng.Next(0, buffer.Length);
                File.WriteAllBytes(file, buffer.AsSpan(0, len).ToArray());
                if (f % 5 == 0) Shell.RunChecked("setfattr", "-n", "user.tag", "-v", new string('v', 1 + f % 300), file);
                if (f % 7 == 0) File.Delete(file);
                else if (f % 11 == 0) File.Move(file, Path.Combine(root, $"dir{(d + 1) % 8}", $"moved-{d}-{f}"), overwrite: true);
            }
        }
        File.CreateSymbolicLink(Path.Combine(root, "link"), "dir1");
        Shell.RunChecked("ln", Path.Combine(root, "dir2", "file-0001-x"), Path.Combine(root, "hardlink"));
        Directory.Delete(Path.Combine(root, "dir3"), recursive: true);
        Shell.RunChecked("sync");
    }

    [Fact]
    public void DryRunPrintsTheGeometryAndWritesNothing()
    {
        string image = Path.Combine(_dir, "existing.img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        Shell.RunChecked("mkfs.ext4", "-q", "-F", "-L", "keepme", image);
        string before = Hash(image);
        var (code, output, _) = RunOurs(0, ["-N", "-f", image]);
        Assert.Equal(0, code);
        Assert.Contains("agcount=4, agsize=65536 blks", output, StringComparison.Ordinal);
        Assert.Contains("blocks=16384, version=2", output, StringComparison.Ordinal);
        Assert.Equal(before, Hash(image));

        string missing = Path.Combine(_dir, "not-made.img");
        RunOurs(0, ["-N", "-d", "size=1g", missing]);
        Assert.False(File.Exists(missing));
    }

    [Theory]
    [InlineData("-d su=64k,sw=4 -n parent=1")]
    [InlineData("-m crc=0")]
    [InlineData("-m crc=0 -l version=1 -i size=512")]
    [InlineData("-m crc=0 -l lazy-count=0 -n ftype=0 -d su=64k,sw=4")]
    [InlineData("-m crc=0 -l version=1,su=32k")]
    [InlineData("-m crc=0 -i attr=1,projid32bit=0")]
    public void SummaryIsTheOneMkfsXfsPrints(string options)
    {
        string image = Path.Combine(_dir, "summary.img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        var (_, ours, _) = RunOurs(0, ["-N", .. Split(options), image]);
        var theirs = Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-N", .. Split(options), image]).StandardOutput;
        Assert.Equal(theirs, ours);
        // Making it with -q prints nothing but mkfs.xfs's V4 deprecation notice: ours too.
        var (_, quiet, _) = RunOurs(0, ["-q", "-f", .. Split(options), image]);
        var theirsQuiet = Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), ["-q", "-f", .. Split(options), image]).StandardOutput;
        Assert.Equal(theirsQuiet, quiet);
    }

    public static TheoryData<string, string> Occupants => new()
    {
        { "xfs", "an XFS file system labelled 'olddata'" },
        { "ext4", "an ext4 file system labelled 'oldext'" },
        { "ntfs", "an NTFS file system" },
        { "fat", "a FAT file system labelled 'OLDFAT'" },
        { "gpt", "a GPT partition table" },
        { "mbr", "an MBR partition table" },
    };

    [Theory]
    [MemberData(nameof(Occupants))]
    public void RefusesToOverwriteWithoutForceAndLeavesItUntouched(string kind, string named)
    {
        string image = Path.Combine(_dir, kind + ".img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        switch (kind)
        {
            case "xfs": Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-q", "-L", "olddata", image); break;
            case "ext4": Shell.RunChecked("mkfs.ext4", "-q", "-F", "-L", "oldext", image); break;
            case "ntfs": Shell.RunChecked("mkntfs", "-q", "-Q", "-F", "-L", "oldntfs", image); break;
            case "fat": Shell.RunChecked("mkfs.fat", "-F", "32", "-n", "OLDFAT", image); break;
            case "gpt": Shell.RunChecked("sgdisk", "-n", "1:2048:+100M", image); break;
            case "mbr": Shell.RunChecked("bash", "-c", $"echo 'start=2048, size=204800, type=83' | sfdisk -q --label dos {image}"); break;
        }
        string before = Hash(image);
        var (code, _, err) = RunOurs(4, [image]);
        Assert.Equal(4, code);
        Assert.Contains(named, err, StringComparison.Ordinal);
        Assert.Contains("-f", err, StringComparison.Ordinal);
        Assert.Equal(before, Hash(image));

        RunOurs(0, ["-q", "-f", image]);
        AssertRepairClean(image);
    }

    [Fact]
    public void MakesAVolumeInAPartition()
    {
        string disk = Path.Combine(_dir, "disk.img");
        Shell.RunChecked("truncate", "-s", "1200M", disk);
        Shell.RunChecked("sgdisk", "-n", "1:2048:+100M", "-n", "2:0:0", disk);
        RunOurs(0, ["-q", disk + "@2"]);
        // The partition as its own image (sparse copy) for xfs_repair; the table and partition 1 stay as they were.
        long start = 2048L * 512 + 100L * 1024 * 1024;
        string part = Path.Combine(_dir, "part2.img");
        Shell.RunChecked("dd", $"if={disk}", $"of={part}", "bs=1M", $"skip={start}", "iflag=skip_bytes", "conv=sparse", "status=none");
        AssertRepairClean(part);
        var sb = ReadSuperblock(part);
        Assert.True(sb.DataBlocks * sb.BlockSize <= (ulong)new FileInfo(part).Length);
        Assert.Contains("No problems found", Shell.RunChecked("sgdisk", "-v", disk).StandardOutput, StringComparison.Ordinal);
    }

    [Fact]
    public void MakesTheSameVolumeAsMkfsXfsOnALoopDevice()
    {
        string backing = Path.Combine(_dir, "loop.img");
        Shell.RunChecked("truncate", "-s", "2G", backing);
        string loop = Shell.RunChecked("losetup", "--find", "--show", backing).StandardOutput.Trim();
        try
        {
            // mkfs.xfs first (on a solid-state loop device 6.13 sizes AGs and log for the CPUs): ours must choose the same.
            Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-q", "-f", "-K", loop);
            string theirs = Path.Combine(_dir, "theirs-loop.img");
            Shell.RunChecked("dd", $"if={loop}", $"of={theirs}", "bs=1M", "count=1", "status=none");
            var theirSb = ReadSuperblock(theirs);
            RunOurs(0, ["-q", "-f", loop]);
            Shell.RunChecked("dd", $"if={loop}", $"of={theirs}", "bs=1M", "count=1", "status=none");
            var ourSb = ReadSuperblock(theirs);
            Assert.Equal((theirSb.AgCount, theirSb.AgBlocks, theirSb.LogBlocks, theirSb.LogStart, theirSb.SectorSize, theirSb.RootIno),
                (ourSb.AgCount, ourSb.AgBlocks, ourSb.LogBlocks, ourSb.LogStart, ourSb.SectorSize, ourSb.RootIno));
            var r = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", loop);
            Assert.True(r.ExitCode == 0, r.StandardOutput + r.StandardError);
        }
        finally
        {
            XfsWin.TestSupport.LoopMount.Detach(loop);
        }
    }

    /// <summary>
    /// On a block device mkfs discards the whole device first (a file-backed loop device punches the range out, so it
    /// reads back as zeroes) unless -K; data written past the new metadata shows which happened.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void DiscardsABlockDeviceUnlessK(bool keep)
    {
        string backing = Path.Combine(_dir, "discard.img");
        Shell.RunChecked("truncate", "-s", "2G", backing);
        string loop = Shell.RunChecked("losetup", "--find", "--show", backing).StandardOutput.Trim();
        try
        {
            // 1 MiB of non-zero bytes in the middle of AG 2's free space (AGs of 512 MiB: nothing of mkfs goes there).
            const long at = 1200L << 20;
            var pattern = new byte[1 << 20];
            new Random(7).NextBytes(pattern);
            pattern[0] = 1;
            using (var f = new FileStream(loop, FileMode.Open, FileAccess.Write))
            {
                f.Position = at;
                f.Write(pattern);
                f.Flush(flushToDisk: true);
            }
            RunOurs(0, keep ? ["-q", "-K", loop] : ["-q", loop]);
            string copy = Path.Combine(_dir, "range.bin");
            Shell.RunChecked("dd", $"if={loop}", $"of={copy}", "bs=1M", $"skip={at >> 20}", "count=1", "iflag=direct", "status=none");
            var after = File.ReadAllBytes(copy);
            if (keep) Assert.Equal(pattern, after);
            else Assert.True(after.All(b => b == 0), "the range still holds data after mkfs without -K");
            var r = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", loop);
            Assert.True(r.ExitCode == 0, r.StandardOutput + r.StandardError);
        }
        finally
        {
            XfsWin.TestSupport.LoopMount.Detach(loop);
        }
    }

    [Theory]
    [InlineData("-m metadir=1 -i exchange=0", "metadir not supported without exchange-range support")]
    [InlineData("-b size=3000", "illegal block size 3000")]
    [InlineData("-m finobt=0,inobtcount=1", "inode btree counters not supported without finobt support")]
    [InlineData("-d su=64k", "both data su and data sw options must be specified")]
    [InlineData("-q -d size=200m", "Filesystem must be larger than 300MB.")]
    [InlineData("-x", "unknown option -x")]
    public void RefusesWhatMkfsXfsRefusesOrWeCannotMake(string options, string message)
    {
        string image = Path.Combine(_dir, "refused.img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        var (code, _, err) = RunOurs(1, [.. Split(options), image]);
        Assert.Equal(1, code);
        Assert.Contains(message, err, StringComparison.Ordinal);
        Assert.Equal(1L << 30, new FileInfo(image).Length);
        Assert.Equal(0, AllocatedBytes(image));
    }

    /// <summary>What mkfs.xfs 6.13 refuses about V4 and V5 choices: ours refuses it too, with its message, and writes nothing.</summary>
    [Theory]
    [InlineData("-m crc=0,finobt=1", "finobt not supported without CRC support")]
    [InlineData("-m crc=0,inobtcount=1", "inode btree counters not supported without CRC support")]
    [InlineData("-m crc=0 -i sparse=1", "sparse inodes not supported without CRC support")]
    [InlineData("-m crc=0,rmapbt=1", "rmapbt not supported without CRC support")]
    [InlineData("-m crc=0,reflink=1", "reflink not supported without CRC support")]
    [InlineData("-m crc=0,bigtime=1", "timestamps later than 2038 not supported without CRC support")]
    [InlineData("-m crc=0 -i nrext64=1", "64 bit extent count not supported without CRC support")]
    [InlineData("-m crc=0 -i exchange=1", "exchange-range not supported without CRC support")]
    [InlineData("-m crc=0 -n parent=1", "parent pointers not supported without CRC support")]
    [InlineData("-m crc=0,metadir=1", "metadata directory not supported without CRC support")]
    [InlineData("-m crc=0 -i size=128", "Invalid value 128 for -i size option. Value is too small.")]
    [InlineData("-m crc=0 -i size=4096 -b size=8192", "Invalid value 4096 for -i size option. Value is too large.")]
    [InlineData("-m crc=0 -l version=3", "Invalid value 3 for -l version option. Value is too large.")]
    [InlineData("-m crc=0 -l version=1 -s size=4096", "Version 1 logs do not support sector size 4096")]
    [InlineData("-i size=256", "Minimum inode size for CRCs is 512 bytes")]
    [InlineData("-l version=1", "V2 logs always enabled for CRC enabled filesystems")]
    [InlineData("-l lazy-count=0", "Lazy superblock counters always enabled for CRC enabled filesystems")]
    [InlineData("-n ftype=0", "Directory ftype field always enabled on CRC enabled filesystems")]
    [InlineData("-i align=0", "Inodes always aligned for CRC enabled filesystems")]
    [InlineData("-i attr=1", "V2 attribute format always enabled on CRC enabled filesystems")]
    [InlineData("-i projid32bit=0", "32 bit Project IDs always enabled on CRC enabled filesystems")]
    [InlineData("-m crc=0 -i attr=3", "Invalid value 3 for -i attr option. Value is too large.")]
    public void RefusesWhatMkfsXfsRefusesWithItsMessage(string options, string message)
    {
        string image = Path.Combine(_dir, "refused.img");
        Shell.RunChecked("truncate", "-s", "1G", image);
        var theirs = Shell.Run(OracleImages.Tool("mkfs.xfs", "6.13"), [.. Split(options), "-N", "-f", image]);
        Assert.True(theirs.ExitCode != 0, $"mkfs.xfs accepted {options}");
        Assert.Contains(message, theirs.StandardError, StringComparison.Ordinal);
        var (code, _, err) = RunOurs(1, [.. Split(options), image]);
        Assert.Equal(1, code);
        Assert.Contains(message, err, StringComparison.Ordinal);
        Assert.Equal(0, AllocatedBytes(image));
    }

    // ---- helpers ----

    private static string[] Split(string s) => s.Split(' ', StringSplitOptions.RemoveEmptyEntries);

    private static (int Code, string Out, string Err) RunOurs(int expected, string[] args)
    {
        var r = TryOurs(args);
        Assert.True(r.Code == expected, $"xfswin mkfs {string.Join(' ', args)} exited {r.Code}, expected {expected}:\n{r.Out}{r.Err}");
        return r;
    }

    /// <summary>xfswin mkfs in process, whatever its exit code.</summary>
    private static (int Code, string Out, string Err) TryOurs(string[] args)
    {
        var stdout = new StringWriter();
        var stderr = new StringWriter();
        int code = MkfsCommand.Run(args, stdout, stderr);
        return (code, stdout.ToString(), stderr.ToString());
    }

    /// <summary>Everything mkfs writes, as xfs_db prints it: every superblock, AGF, AGI, AGFL, btree root, and the first inodes.</summary>
    private static string Dump(string image)
    {
        var sb = ReadSuperblock(image);
        var cmds = new List<string>();
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            cmds.AddRange([$"echo AG {ag}", $"sb {ag}", "print", $"agf {ag}", "print", $"agi {ag}", "print", $"agfl {ag}", "print"]);
            cmds.AddRange([$"agf {ag}", "addr bnoroot", "print", $"agf {ag}", "addr cntroot", "print", $"agi {ag}", "addr root", "print"]);
            if (sb.HasFinobt) cmds.AddRange([$"agi {ag}", "addr free_root", "print"]);
            if (sb.HasRmapbt) cmds.AddRange([$"agf {ag}", "addr rmaproot", "print"]);
            if (sb.HasReflink) cmds.AddRange([$"agf {ag}", "addr refcntroot", "print"]);
        }
        for (ulong i = 0; i < 4; i++) cmds.AddRange([$"inode {sb.RootIno + i}", "print"]);
        var args = new List<string> { "-r" };
        foreach (var c in cmds)
        {
            args.Add("-c");
            args.Add(c);
        }
        args.Add(image);
        string text = Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), args).StandardOutput;
        if (sb.HasMetadir)
        {
            // The metadata directory's "rtgroups" directory lives in the log's AG.
            var m = Regex.Match(text, @"sfdir3\.list\[0\]\.name = ""rtgroups""\n.*inumber\.i4 = (\d+)");
            Assert.True(m.Success, "no rtgroups entry in the metadata directory:\n" + text);
            text += Shell.RunChecked(OracleImages.Tool("xfs_db", "6.13"), ["-r", "-c", "inode " + m.Groups[1].Value, "-c", "print", image]).StandardOutput;
        }
        return Volatile().Replace(text, "");
    }

    private static void AssertSameLayout(string expectedImage, string actualImage, string what)
    {
        var expected = Dump(expectedImage).Split('\n');
        var actual = Dump(actualImage).Split('\n');
        for (int i = 0; i < Math.Max(expected.Length, actual.Length); i++)
        {
            string e = i < expected.Length ? expected[i] : "<end>", a = i < actual.Length ? actual[i] : "<end>";
            Assert.True(e == a, $"{what}: line {i} differs from mkfs.xfs\n  mkfs.xfs: {e}\n  xfswin:   {a}\ncontext:\n{string.Join('\n', expected.Skip(Math.Max(0, i - 8)).Take(9))}");
        }
    }

    private static void AssertRepairClean(string image)
    {
        var r = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(r.ExitCode == 0, $"xfs_repair -n {image} exited {r.ExitCode}:\n{r.StandardOutput}{r.StandardError}");
    }

    private static Superblock ReadSuperblock(string image)
    {
        var sector = new byte[4096];
        using (var f = File.OpenRead(image)) f.ReadExactly(sector);
        var check = Superblock.Verify(sector);
        Assert.True(check.IsOk, check.ToString());
        return Superblock.Decode(sector);
    }

    private static long AllocatedBytes(string path) =>
        long.Parse(Shell.RunChecked("stat", "-c", "%b", path).StandardOutput.Trim()) * 512;

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(SHA256.HashData(f));
    }

    /// <summary>Fields that differ by design between two runs: UUIDs, CRCs, times, generations (xfs_repair checks that parent pointers carry the right one), LSNs.</summary>
    [GeneratedRegex(@"^(\S*uuid|\S*crc|\S*\.sec|\S*\.nsec|\S*\.gen|\S*lsn) = .*\n", RegexOptions.Multiline)]
    private static partial Regex Volatile();
}

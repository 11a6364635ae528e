using System.Buffers.Binary;
using System.Text;
using Xunit;
using XfsWin.Allocation;
using XfsWin.Btree;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Allocation;

/// <summary>The volumes the allocator tests run on: made by mkfs.xfs, fragmented by the kernel, cached for the test run.</summary>
public static class AllocatorImages
{
    public const int Files = 1200, FileBytes = 12288;

    private static readonly object Gate = new();
    private static readonly Dictionary<string, string> Made = new();
    private static readonly string CacheDir = Directory.CreateTempSubdirectory("xfswin-alloc-cache.").FullName;

    static AllocatorImages() => AppDomain.CurrentDomain.ProcessExit += (_, _) => { try { Directory.Delete(CacheDir, true); } catch (IOException) { } };

    /// <summary>Volume kinds: mkfs 6.1 defaults (no rmapbt), mkfs 6.13 defaults (rmapbt, reflink), 6.13 with 1 KiB blocks, and a small one to fill.</summary>
    public static string Options(string kind) => kind switch
    {
        "6.1" => "6.1|256M|-d agcount=4",
        "6.13" => "6.13|256M|-d agcount=4",
        "6.13-1k" => "6.13|192M|-b size=1024 -d agcount=3",
        "small-6.13" => "6.13|64M|-d agcount=2",
        "small-6.1" => "6.1|64M|-d agcount=2",
        _ => throw new ArgumentOutOfRangeException(nameof(kind)),
    };

    /// <summary>The file i holds "file i\n" repeated; odd-numbered files survive the fragmentation.</summary>
    public static byte[] Content(int i)
    {
        var line = Encoding.ASCII.GetBytes($"file {i}\n");
        var b = new byte[FileBytes];
        for (int o = 0; o < b.Length; o++) b[o] = line[o % line.Length];
        return b;
    }

    /// <summary>A private copy of the volume of <paramref name="kind"/> in <paramref name="directory"/>.</summary>
    public static string Copy(string kind, string directory, bool fragment = true)
    {
        string cached;
        lock (Gate)
        {
            string key = kind + (fragment ? "+frag" : "");
            if (!Made.TryGetValue(key, out cached!))
            {
                cached = Path.Combine(CacheDir, key.Replace('+', '-') + ".img");
                Make(kind, cached, fragment);
                Made[key] = cached;
            }
        }
        string copy = Path.Combine(directory, Path.GetFileName(cached));
        Shell.RunChecked("cp", "--sparse=always", cached, copy);
        return copy;
    }

    private static void Make(string kind, string image, bool fragment)
    {
        var parts = Options(kind).Split('|');
        Shell.RunChecked("truncate", "-s", parts[1], image);
        // fstests' variables let mkfs make volumes under 300 MB, as the kernel's own tests do.
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", parts[0]), ["-q", "-f", .. parts[2].Split(' '), image],
            environment: new Dictionary<string, string> { ["TEST_DIR"] = "/tmp", ["TEST_DEV"] = "/dev/null", ["QA_CHECK_FS"] = "xfs" });
        if (!fragment) return;
        using var mount = LoopMount.Mount(image, readOnly: false);
        // Many small files, then every other one deleted: free space in holes all over every AG; a punched file
        // adds thousands of one-block holes in one AG so the free-space trees get several levels.
        string script = $$"""
            set -e
            cd '{{mount.MountPoint}}'
            for i in $(seq 0 {{Files - 1}}); do yes "file $i" | head -c {{FileBytes}} > f$i; done
            sync
            for i in $(seq 0 2 {{Files - 1}}); do rm f$i; done
            """;
        Shell.RunChecked("bash", "-c", script);
        var io = new List<string> { "-f", "-c", $"falloc 0 {2 * 2500 * 4096}" };
        for (int i = 0; i < 2500; i++) io.AddRange(["-c", $"fpunch {(2 * i + 1) * 4096} 4096"]);
        io.Add(Path.Combine(mount.MountPoint, "punched"));
        Shell.RunChecked(OracleImages.Tool("xfs_io"), io);
        Shell.RunChecked("sync");
    }
}

/// <summary>
/// A volume opened for writing as the engine will open it: a buffer cache, the log opened at its head with the
/// AIL writing back through the cache, and the allocator. <see cref="Unmount"/> writes the superblock counters in a
/// last transaction and unmounts the log cleanly.
/// </summary>
public sealed class AllocatorVolume : IDisposable
{
    public AllocatorVolume(string image, MountedLogOptions? logOptions = null)
    {
        Image = image;
        Device = FileBlockDevice.Open(image, writable: true);
        var sector = new byte[512];
        Device.Read(0, sector);
        var sb = Superblock.Decode(sector);
        Mount = new MountContext(Device, sb, 64L << 20);
        Log = MountedLog.Open(LogArea.For(Device, null, sb), sb, new CachedLogWriteback(Device, sb, Mount.Buffers), logOptions);
        Allocator = new AgAllocator(Mount, Log);
    }

    public string Image { get; }
    public FileBlockDevice Device { get; }
    public MountContext Mount { get; }
    public MountedLog Log { get; }
    public AgAllocator Allocator { get; }
    public Superblock Sb => Mount.Superblock;

    public Transaction Begin() => new(Mount, Log, 256 * 1024);

    public void Unmount()
    {
        using (var tx = Begin())
        {
            Allocator.LogSuperblockCounters(tx);
            tx.Commit();
        }
        Log.Unmount();
    }

    public void Dispose()
    {
        Mount.Buffers.Dispose();
        Device.Dispose();
    }

    /// <summary>The committed records of one AG's bnobt and cntbt (structure checked), read through the cache.</summary>
    public (List<(uint Start, uint Count)> ByBlock, List<(uint Start, uint Count)> ByCount) FreeSpace(uint agno)
    {
        var agf = Mount.Buffers.Read(Sb.AgBlockToByte(agno, 0) + Sb.SectorSize, Sb.SectorSize, agno, new AgfBufferVerifier(Sb, agno));
        var v = new AgfView(agf);
        return (Records<BnobtOps>(MountedBtreeStore.ForAgTree<BnobtOps>(Mount, agno, v.BnoRoot, (int)v.BnoLevel)),
            Records<CntbtOps>(MountedBtreeStore.ForAgTree<CntbtOps>(Mount, agno, v.CntRoot, (int)v.CntLevel)));
    }

    private static List<(uint, uint)> Records<TOps>(IBtreeBlockStore store) where TOps : struct, IBtreeOps
    {
        var raw = new List<byte[]>();
        var check = new BtreeCursor<TOps>(store).CheckStructure(raw);
        Assert.True(check.Ok, $"{default(TOps).Name}: {check.Problem} at byte {check.ProblemByteOffset}");
        return raw.Select(r => (BinaryPrimitives.ReadUInt32BigEndian(r), BinaryPrimitives.ReadUInt32BigEndian(r.AsSpan(4)))).ToList();
    }

    /// <summary>Both free-space trees of every AG hold the same extents, and the AGF and the allocator count what they hold.</summary>
    public void AssertTreesAgree()
    {
        for (uint ag = 0; ag < Sb.AgCount; ag++)
        {
            var (bno, cnt) = FreeSpace(ag);
            Assert.Equal(bno.Order(), cnt.Order());
            for (int i = 1; i < bno.Count; i++)
                Assert.True(bno[i - 1].Start + bno[i - 1].Count < bno[i].Start, $"AG {ag}: free extents {bno[i - 1]} and {bno[i]} touch or overlap");
            var info = Allocator.AgInfo(ag);
            Assert.Equal((long)info.FreeBlocks, bno.Sum(r => (long)r.Count));
            Assert.Equal(info.Longest, cnt.Count == 0 ? 0u : cnt[^1].Count);
        }
    }

    public static void AssertRepairClean(string image)
    {
        foreach (var version in new[] { "6.1", "6.13" })
        {
            var r = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", image);
            Assert.True(r.ExitCode == 0, $"xfs_repair -n {version} exit {r.ExitCode}:\n{r.StandardOutput}\n{r.StandardError}");
        }
    }

    /// <summary>xfs_db's freesp totals (free extents' blocks) and the superblock's fdblocks.</summary>
    public static (long FreespBlocks, long Fdblocks) XfsDbCounts(string image)
    {
        var freesp = XfsDb.Run(image, "6.13", "freesp -s");
        var m = System.Text.RegularExpressions.Regex.Match(freesp, @"total free blocks (\d+)");
        Assert.True(m.Success, $"xfs_db freesp printed no total:\n{freesp}");
        var sb = XfsDb.Fields(XfsDb.Run(image, "6.13", "sb 0", "print fdblocks"));
        return (long.Parse(m.Groups[1].Value), XfsDb.Number(sb["fdblocks"]));
    }

    /// <summary>The kernel mounts the volume, the surviving files read back, and it can write and delete a file.</summary>
    public static void AssertKernelReadsFiles(string image, bool fragmented = true)
    {
        using var mount = LoopMount.Mount(image, readOnly: false);
        if (fragmented)
            for (int i = 1; i < AllocatorImages.Files; i += 2)
                Assert.True(AllocatorImages.Content(i).AsSpan().SequenceEqual(File.ReadAllBytes(Path.Combine(mount.MountPoint, "f" + i))), $"f{i} differs");
        string probe = Path.Combine(mount.MountPoint, "kernel-probe");
        File.WriteAllBytes(probe, new byte[1 << 20]);
        Shell.RunChecked("sync");
        File.Delete(probe);
    }
}

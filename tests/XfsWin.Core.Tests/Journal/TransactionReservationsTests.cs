using System.Text.RegularExpressions;
using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.TestSupport;
using Xunit;

namespace XfsWin.Tests.Journal;

/// <summary>
/// The transaction reservation table against the kernel's own, as xfs_db's <c>logres</c> prints it for
/// volumes made by mkfs.xfs 6.13 and 6.1, and the minimum log size against the one mkfs.xfs refuses
/// to go below.
/// </summary>
public sealed partial class TransactionReservationsTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-resv-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    public static TheoryData<string, string, string> Volumes => new()
    {
        { "6.13", "1G", "" },
        { "6.13", "16G", "" },
        { "6.13", "2T", "" },
        { "6.13", "1G", "-b size=1024" },
        { "6.13", "1G", "-b size=65536" },
        { "6.13", "1G", "-n size=65536" },
        { "6.13", "1G", "-m rmapbt=0,reflink=0" },
        { "6.13", "1G", "-m finobt=0" },
        { "6.13", "1G", "-n parent=1" },
        { "6.13", "1G", "-b size=1024 -n parent=1" },
        { "6.13", "1G", "-n parent=1,size=65536 -m rmapbt=0,reflink=0" },
        { "6.13", "16G", "-n parent=1 -i exchange=1 -m metadir=1" },
        { "6.13", "1G", "-s size=4096" },
        { "6.13", "1G", "-i size=1024" },
        { "6.13", "1G", "-d su=256k,sw=4" },
        { "6.13", "1G", "-i nrext64=0,sparse=0" },
        { "6.1", "1G", "" },
        { "6.1", "16G", "-b size=1024" },
    };

    /// <summary>
    /// Also 6.1 with rmapbt and reflink: its kernel table predates deferred rmap/refcount updates (so only
    /// its minimum log size, which 6.13 reproduces on purpose, is compared).
    /// </summary>
    public static TheoryData<string, string, string> LogVolumes
    {
        get
        {
            var data = new TheoryData<string, string, string>();
            foreach (var row in Volumes) data.Add((string)row[0], (string)row[1], (string)row[2]);
            data.Add("6.1", "1G", "-m rmapbt=1");
            data.Add("6.1", "1G", "-b size=65536");
            data.Add("6.1", "300M", "-m reflink=0");
            return data;
        }
    }

    [Theory]
    [MemberData(nameof(Volumes))]
    public void EveryReservationMatchesTheKernelTable(string version, string size, string options)
    {
        string image = MakeImage(version, size, options);
        var sb = ReadSuperblock(image);
        var resv = new TransactionReservations(ReservationGeometry.From(sb));
        string output = XfsWin.TestSupport.XfsDb.Run(image, version, "logres");
        var rows = LogresRow().Matches(output);
        Assert.Equal(Enum.GetValues<TransactionKind>().Length, rows.Count);
        foreach (Match m in rows)
        {
            int type = int.Parse(m.Groups[1].Value);
            var ours = resv[(TransactionKind)type];
            Assert.True(int.Parse(m.Groups[2].Value) == ours.LogRes && int.Parse(m.Groups[3].Value) == ours.LogCount
                    && (Convert.ToInt32(m.Groups[4].Value, 16) & 4) != 0 == ours.Permanent,
                $"{version} {size} {options}: {(TransactionKind)type} kernel '{m.Value}', ours logres {ours.LogRes} logcount {ours.LogCount} permanent {ours.Permanent} (rmap levels {resv.RmapMaxLevels}, alloc {resv.AllocMaxLevels}, bmap {resv.BmapMaxLevelsData}, refcount {resv.RefcountMaxLevels}; agblocks {sb.AgBlocks})");
        }
        if (version == "6.13")
        {
            var min = MinLogRow().Match(output);
            Assert.True(min.Success, output);
            var ourMax = resv.MaxReservationForMinimumLog();
            Assert.Equal((int.Parse(min.Groups[1].Value), int.Parse(min.Groups[2].Value)), (ourMax.LogRes, ourMax.LogCount));
        }
    }

    [Theory]
    [MemberData(nameof(LogVolumes))]
    public void MinimumLogSizeIsTheOneMkfsEnforces(string version, string size, string options)
    {
        string image = MakeImage(version, size, options);
        var sb = ReadSuperblock(image);
        int ours = Math.Max(512, new TransactionReservations(ReservationGeometry.From(sb)).MinimumLogBlocks());
        // Ask mkfs.xfs for a 2 MiB log (the smallest its option parser takes), below every real minimum: it names its minimum.
        var r = Shell.Run(OracleImages.Tool("mkfs.xfs", version),
            [.. Split(options), "-N", "-f", "-l", "size=2m", image]);
        var m = MkfsMinimum().Match(r.StandardError + r.StandardOutput);
        Assert.True(m.Success, $"mkfs.xfs did not refuse a 2 MiB log: {r.StandardError}{r.StandardOutput}");
        Assert.Equal(int.Parse(m.Groups[1].Value), ours);
    }

    [Fact]
    public void HeightsFollowTheBtreeFormulas()
    {
        // 4 KiB blocks: free-space leaves hold 505 records (252 half full), nodes 336 (168).
        Assert.Equal(3, TransactionReservations.ComputeMaxLevels(252, 168, 1_000_000));
        Assert.Equal(1, TransactionReservations.ComputeMaxLevels(252, 168, 252));
        Assert.Equal(2, TransactionReservations.ComputeMaxLevels(252, 168, 253));
        Assert.Equal(0, TransactionReservations.SpaceToHeight(45, 0));
        Assert.Equal(1, TransactionReservations.SpaceToHeight(45, 2));
        Assert.Equal(2, TransactionReservations.SpaceToHeight(45, 4));
    }

    private static string[] Split(string options) => options.Split(' ', StringSplitOptions.RemoveEmptyEntries);

    private string MakeImage(string version, string size, string options)
    {
        string path = Path.Combine(_dir, $"{version}-{size}-{Regex.Replace(options, "[^a-z0-9]", "_")}.img");
        Shell.RunChecked("truncate", "-s", size, path);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", version), [.. Split(options), "-q", "-f", path]);
        return path;
    }

    private static Superblock ReadSuperblock(string image)
    {
        var sector = new byte[4096];
        using (var f = File.OpenRead(image)) f.ReadExactly(sector);
        Assert.True(Superblock.Verify(sector).IsOk);
        return Superblock.Decode(sector);
    }

    [GeneratedRegex(@"^type (\d+) logres (\d+) logcount (\d+) flags 0x([0-9a-f]+)$", RegexOptions.Multiline)]
    private static partial Regex LogresRow();

    [GeneratedRegex(@"^minlogsize logres (\d+) logcount (\d+)$", RegexOptions.Multiline)]
    private static partial Regex MinLogRow();

    [GeneratedRegex(@"minimum size is (\d+) blocks")]
    private static partial Regex MkfsMinimum();
}

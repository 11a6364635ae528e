using System.Globalization;

namespace XfsWin.Mkfs;

/// <summary>The geometry report mkfs.xfs prints (libfrog xfs_report_geom), line for line.</summary>
public static class MkfsSummary
{
    /// <summary>The line mkfs.xfs prints first (even with -q) when it makes a V4 volume.</summary>
    public const string V4Deprecation = "V4 filesystems are deprecated and will not be supported by future versions.";

    /// <param name="logName">The external log device as given with -l logdev (shown on the log line), or null for an internal log.</param>
    public static string Format(MkfsGeometry g, string name, string? logName = null)
    {
        ArgumentNullException.ThrowIfNull(g);
        var c = CultureInfo.InvariantCulture;
        int logSectSize = g.SectorSize > 512 || g.LogSectorSize > 512 ? g.LogSectorSize : 512;
        static string P(string s, int w) => s.PadRight(w);
        var lines = new[]
        {
            string.Format(c, "meta-data={0} isize={1} agcount={2}, agsize={3} blks", P(name, 22), P(g.InodeSize.ToString(c), 6), g.AgCount, g.AgBlocks),
            string.Format(c, "         ={0} sectsz={1} attr={2}, projid32bit={3}", P("", 22), P(g.SectorSize.ToString(c), 5), g.AttrVersion, B(g.ProjId32)),
            string.Format(c, "         ={0} crc={1} finobt={2}, sparse={3}, rmapbt={4}", P("", 22), P(B(g.Crc), 8), B(g.Finobt), B(g.SparseInodes), B(g.Rmapbt)),
            string.Format(c, "         ={0} reflink={1} bigtime={2} inobtcount={3} nrext64={4}", P("", 22), P(B(g.Reflink), 4), B(g.Bigtime), B(g.InobtCount), B(g.Nrext64)),
            string.Format(c, "         ={0} exchange={1} metadir={2}", P("", 22), P(B(g.Exchange), 3), B(g.Metadir)),
            string.Format(c, "data     ={0} bsize={1} blocks={2}, imaxpct={3}", P("", 22), P(g.BlockSize.ToString(c), 6), g.DataBlocks, g.ImaxPct),
            string.Format(c, "         ={0} sunit={1} swidth={2} blks", P("", 22), P(g.StripeUnit.ToString(c), 6), g.StripeWidth),
            string.Format(c, "naming   =version {0} bsize={1} ascii-ci=0, ftype={2}, parent={3}", P("2", 14), P(g.DirBlockSize.ToString(c), 6), B(g.Ftype), B(g.Parent)),
            string.Format(c, "log      ={0} bsize={1} blocks={2}, version={3}", P(g.ExternalLog ? logName ?? "external log" : "internal log", 22), P(g.BlockSize.ToString(c), 6), g.LogBlocks, g.LogVersion),
            string.Format(c, "         ={0} sectsz={1} sunit={2} blks, lazy-count={3}", P("", 22), P(logSectSize.ToString(c), 5), g.LogStripeUnitBytes / (uint)g.BlockSize, B(g.LazyCount)),
            string.Format(c, "realtime ={0} extsz={1} blocks=0, rtextents=0", P("none", 22), P((g.RtExtSize * (uint)g.BlockSize).ToString(c), 6)),
            string.Format(c, "         ={0} rgcount={1} rgsize={2} extents", P("", 22), P("0", 4), g.RgExtents),
        };
        return (g.Crc ? "" : V4Deprecation + "\n") + string.Join('\n', lines) + "\n";
    }

    private static string B(bool v) => v ? "1" : "0";
}

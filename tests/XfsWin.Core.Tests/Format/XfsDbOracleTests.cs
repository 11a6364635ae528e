using System.Diagnostics;
using System.Globalization;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Tests.Format;

/// <summary>
/// Decodes structures of volumes made by the real mkfs.xfs and compares every field with what
/// xfs_db prints for the same bytes: offsets, byte order and feature logic checked against xfsprogs.
/// </summary>
public sealed class XfsDbOracleTests : IClassFixture<XfsDbOracleTests.Images>
{
    public sealed class Images : IDisposable
    {
        private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-format-").FullName;
        private readonly Dictionary<string, string> _paths = new();

        public string Get(string name, string mkfsOptions)
        {
            lock (_paths)
            {
                if (_paths.TryGetValue(name, out var p)) return p;
                p = Path.Combine(_dir, name + ".img");
                using (var f = File.Create(p)) f.SetLength(1L << 30);
                Run("mkfs.xfs", $"-q -f -L {name} {mkfsOptions} {p}");
                _paths[name] = p;
                return p;
            }
        }

        public void Dispose() => Directory.Delete(_dir, recursive: true);
    }

    private readonly Images _images;

    public XfsDbOracleTests(Images images) => _images = images;

    public static TheoryData<string, string> Variants => new()
    {
        { "v5default", "" },
        { "v4", "-m crc=0" },
        { "rmapnrext", "-m rmapbt=1 -i nrext64=1" },
        { "b1k", "-b size=1024" },
        { "dir64k", "-n size=65536" },
        { "agcount9", "-d agcount=9 -l size=64m" },
        { "sect4k", "-s size=4096 -i size=1024" },
    };

    [Theory]
    [MemberData(nameof(Variants))]
    public void SuperblockFieldsMatchXfsDb(string name, string options)
    {
        string img = _images.Get(name, options);
        var sector = ReadBytes(img, 0, 4096);
        Assert.True(Superblock.Verify(sector).IsOk, Superblock.Verify(sector).ToString());
        var v = new SuperblockView(sector);
        var sb = Superblock.Decode(sector);
        var db = XfsDbPrint(img, "sb 0");
        Assert.Equal(Num(db["blocksize"]), v.BlockSize);
        Assert.Equal(Num(db["dblocks"]), v.DataBlocks);
        Assert.Equal(Guid.Parse(db["uuid"]), sb.Uuid);
        Assert.Equal(Num(db["logstart"]), v.LogStart);
        Assert.Equal(Num(db["rootino"]), v.RootIno);
        Assert.Equal(Num(db["agblocks"]), v.AgBlocks);
        Assert.Equal(Num(db["agcount"]), v.AgCount);
        Assert.Equal(Num(db["logblocks"]), v.LogBlocks);
        Assert.Equal(Num(db["versionnum"]), v.VersionNum);
        Assert.Equal(Num(db["sectsize"]), v.SectSize);
        Assert.Equal(Num(db["inodesize"]), v.InodeSize);
        Assert.Equal(Num(db["inopblock"]), v.InodesPerBlock);
        Assert.Equal(Num(db["agblklog"]), v.AgBlkLog);
        Assert.Equal(Num(db["icount"]), v.Icount);
        Assert.Equal(Num(db["ifree"]), v.Ifree);
        Assert.Equal(Num(db["fdblocks"]), v.Fdblocks);
        Assert.Equal(Num(db["dirblklog"]), v.DirBlkLog);
        Assert.Equal(Num(db["logsunit"]), v.LogSunit);
        Assert.Equal(Num(db["features2"]), v.Features2);
        Assert.Equal(name, sb.Label);
        if (sb.IsV5)
        {
            Assert.Equal(Num(db["features_ro_compat"]), v.FeaturesRoCompat);
            Assert.Equal(Num(db["features_incompat"]), v.FeaturesIncompat);
            Assert.Equal(Num(db["lsn"]), v.Lsn);
            Assert.Contains("(correct)", db["crc"]);
        }
        Assert.Equal(name != "v4", sb.IsV5);
        Assert.Equal(options.Contains("nrext64=1"), sb.HasNrext64);
        Assert.Equal(options.Contains("rmapbt=1"), sb.HasRmapbt);
    }

    [Theory]
    [MemberData(nameof(Variants))]
    public void EveryAgHeaderMatchesXfsDbAndVerifies(string name, string options)
    {
        string img = _images.Get(name, options);
        var sb = Superblock.Decode(ReadBytes(img, 0, 4096));
        for (uint agno = 0; agno < sb.AgCount; agno++)
        {
            long ag = sb.AgBlockToByte(agno, 0);
            var agfBytes = ReadBytes(img, ag + sb.SectorSize, sb.SectorSize);
            var agiBytes = ReadBytes(img, ag + 2L * sb.SectorSize, sb.SectorSize);
            Assert.True(AgfView.Verify(agfBytes, sb, agno).IsOk, AgfView.Verify(agfBytes, sb, agno).ToString());
            Assert.True(AgiView.Verify(agiBytes, sb, agno).IsOk, AgiView.Verify(agiBytes, sb, agno).ToString());
            var agf = new AgfView(agfBytes);
            var agi = new AgiView(agiBytes);
            var dbf = XfsDbPrint(img, $"agf {agno}");
            Assert.Equal(Num(dbf["length"]), agf.Length);
            Assert.Equal(Num(dbf["bnoroot"]), agf.BnoRoot);
            Assert.Equal(Num(dbf["cntroot"]), agf.CntRoot);
            Assert.Equal(Num(dbf["bnolevel"]), agf.BnoLevel);
            Assert.Equal(Num(dbf["flfirst"]), agf.FlFirst);
            Assert.Equal(Num(dbf["fllast"]), agf.FlLast);
            Assert.Equal(Num(dbf["flcount"]), agf.FlCount);
            Assert.Equal(Num(dbf["freeblks"]), agf.FreeBlocks);
            Assert.Equal(Num(dbf["longest"]), agf.Longest);
            if (sb.HasRmapbt) Assert.Equal(Num(dbf["rmaproot"]), agf.RmapRoot);
            if (sb.HasReflink) Assert.Equal(Num(dbf["refcntroot"]), agf.RefcountRoot);
            var dbi = XfsDbPrint(img, $"agi {agno}");
            Assert.Equal(Num(dbi["count"]), agi.Count);
            Assert.Equal(Num(dbi["root"]), agi.Root);
            Assert.Equal(Num(dbi["level"]), agi.Level);
            Assert.Equal(Num(dbi["freecount"]), agi.FreeCount);
            if (sb.HasFinobt) Assert.Equal(Num(dbi["free_root"]), agi.FreeRoot);
        }
    }

    [Theory]
    [MemberData(nameof(Variants))]
    public void RootInodeCoreMatchesXfsDb(string name, string options)
    {
        string img = _images.Get(name, options);
        using var volume = XfsVolume.Open(img);
        var attrs = volume.GetAttributes(volume.RootInode);
        var db = XfsDbPrint(img, $"inode {volume.RootInode}");
        Assert.Equal(Num(db["core.mode"]), attrs.Mode);
        Assert.Equal(Num(db["core.uid"]), attrs.Uid);
        Assert.Equal(Num(db["core.gid"]), attrs.Gid);
        Assert.Equal(Num(db["core.nlinkv2"]), attrs.LinkCount);
        Assert.Equal((long)Num(db["core.size"]), attrs.Size);
        Assert.Equal(Num(db["core.gen"]), attrs.Generation);
        var mtime = DateTime.ParseExact(string.Join(' ', db["core.mtime.sec"].Split(' ', StringSplitOptions.RemoveEmptyEntries)),
            "ddd MMM d HH:mm:ss yyyy", CultureInfo.InvariantCulture, DateTimeStyles.AssumeUniversal | DateTimeStyles.AdjustToUniversal);
        Assert.Equal(new DateTimeOffset(mtime, TimeSpan.Zero).ToUnixTimeSeconds(), attrs.ModifyTime.Seconds);
        Assert.Equal(Num(db["core.mtime.nsec"]), attrs.ModifyTime.Nanoseconds);
        Assert.Equal(XfsFileType.Directory, attrs.FileType);
        var names = volume.ListDirectory(volume.RootInode).Select(e => e.NameString).ToList();
        Assert.Equal(new[] { ".", ".." }, names.Take(2));
    }

    [Fact]
    public void NameHashesMatchXfsDb()
    {
        string img = _images.Get("v5default", "");
        var names = new[] { "a", "ab", "abc", "abcd", "abcde", "hello", "file00001", "a-much-longer-name.with.dots.txt", "ÄÖÜ-utf8-ünïcödé", new string('z', 255) };
        var args = string.Join(' ', names.Select(n => $"-c \"hash {n}\""));
        var lines = Run("xfs_db", $"-r {args} {img}").Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(names.Length, lines.Length);
        for (int i = 0; i < names.Length; i++)
            Assert.Equal(Num(lines[i].Trim()), DaHash.Hash(System.Text.Encoding.UTF8.GetBytes(names[i])));
    }

    [Fact]
    public void BufferedFallbackIsReportedWhenAsked()
    {
        string img = _images.Get("v5default", "");
        using var direct = FileBlockDevice.Open(img);
        using var buffered = FileBlockDevice.Open(img, unbuffered: false);
        Assert.StartsWith("buffered", buffered.IoMode);
        var a = new byte[12345];
        var b = new byte[12345];
        direct.Read(777, a);
        buffered.Read(777, b);
        Assert.Equal(a, b);
        Assert.Equal(File.ReadAllBytes(img).AsSpan(777, 12345).ToArray(), a);
    }

    private static ulong Num(string text)
    {
        text = text.Trim();
        int space = text.IndexOf(' ');
        if (space > 0) text = text[..space];
        if (text == "null") return ulong.MaxValue;
        if (text.Length > 1 && text[0] == '0' && text[1] != 'x') return Convert.ToUInt64(text, 8);
        return text.StartsWith("0x", StringComparison.Ordinal)
            ? ulong.Parse(text[2..], NumberStyles.HexNumber, CultureInfo.InvariantCulture)
            : ulong.Parse(text, CultureInfo.InvariantCulture);
    }

    private static Dictionary<string, string> XfsDbPrint(string img, string command)
    {
        var result = new Dictionary<string, string>();
        foreach (var line in Run("xfs_db", $"-r -c \"{command}\" -c print {img}").Split('\n'))
        {
            int eq = line.IndexOf(" = ", StringComparison.Ordinal);
            if (eq > 0) result[line[..eq].Trim()] = line[(eq + 3)..].Trim();
        }
        return result;
    }

    private static byte[] ReadBytes(string path, long offset, int length)
    {
        using var f = File.OpenRead(path);
        var b = new byte[length];
        f.Position = offset;
        f.ReadExactly(b);
        return b;
    }

    internal static string Run(string file, string arguments)
    {
        var psi = new ProcessStartInfo(file, arguments) { RedirectStandardOutput = true, RedirectStandardError = true };
        psi.Environment["TZ"] = "UTC";
        using var p = Process.Start(psi) ?? throw new InvalidOperationException($"cannot start {file}");
        var stdout = p.StandardOutput.ReadToEndAsync();
        var stderr = p.StandardError.ReadToEndAsync();
        p.WaitForExit();
        if (p.ExitCode != 0) throw new InvalidOperationException($"{file} {arguments} failed ({p.ExitCode}): {stderr.Result}");
        return stdout.Result;
    }
}

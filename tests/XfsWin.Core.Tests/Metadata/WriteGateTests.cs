using System.Security.Cryptography;
using Xunit;
using XfsWin.Cli.Commands;
using XfsWin.Device;
using XfsWin.Journal;
using XfsWin.Metadata;
using XfsWin.TestSupport;
using XfsWin.Tests.Journal;
using XfsDb = XfsWin.TestSupport.XfsDb;
using XfsWin.Volume;

namespace XfsWin.Tests.Metadata;

/// <summary>
/// The write gate: volumes made by mkfs.xfs and altered with <c>xfs_db -x</c> (which keeps V5 CRCs right) that
/// nobody but the kernel or xfs_repair may write. <c>xfswin recover</c>, <c>XfsVolume.Open</c> with in-place
/// replay and the gate itself must refuse them, saying why, and leave every byte of the image as it was.
/// </summary>
public sealed class WriteGateTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-gate.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    /// <summary>How each case alters a fresh volume, and a word its refusal must contain.</summary>
    public static TheoryData<string> Cases => new() { "needsrepair", "incompat", "rocompat", "logincompat", "v4" };

    private string MakeVolume(string name)
    {
        string img = Path.Combine(_tmp, name + ".img");
        Shell.RunChecked("truncate", "-s", "64M", img);
        // The fstests environment lets mkfs.xfs make a volume this small.
        var env = new Dictionary<string, string> { ["TEST_DIR"] = _tmp, ["TEST_DEV"] = "/dev/null", ["QA_CHECK_FS"] = "xfs" };
        var mkfsArgs = new List<string> { "-q", "-f" };
        if (name == "v4") mkfsArgs.AddRange(["-m", "crc=0"]);
        mkfsArgs.Add(img);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), mkfsArgs, environment: env);
        switch (name)
        {
            case "needsrepair": SetBits(img, "features_incompat", 0x10); break;
            case "incompat": SetBits(img, "features_incompat", 0x80000000); break;
            case "rocompat": SetBits(img, "features_ro_compat", 0x80000000); break;
            case "logincompat": SetBits(img, "features_log_incompat", 0x80000000); break;
        }
        return img;
    }

    /// <summary>ORs <paramref name="bits"/> into a superblock field with xfs_db, then checks the kernel's tools see them and the CRC is right.</summary>
    private static void SetBits(string img, string field, uint bits)
    {
        uint before = Convert.ToUInt32(XfsDb.Fields(XfsDb.Run(img, "6.1", "sb 0", $"print {field}"))[field], 16);
        XfsDb.Write(img, "6.1", "sb 0", $"write -d {field} {before | bits}");
        var after = XfsDb.Fields(XfsDb.Run(img, "6.1", "sb 0", $"print {field} crc"));
        Assert.Equal(before | bits, Convert.ToUInt32(after[field], 16));
        Assert.Contains("correct", after["crc"], StringComparison.Ordinal);
    }

    private static string Hash(string path)
    {
        using var f = File.OpenRead(path);
        return Convert.ToHexString(SHA256.HashData(f));
    }

    private static (int Code, string Out, string Err) Recover(params string[] args)
    {
        var o = new StringWriter();
        var e = new StringWriter();
        int code = RecoverCommand.Run(args, o, e);
        return (code, o.ToString(), e.ToString());
    }

    private static string ExpectedWord(string name) => name switch
    {
        "needsrepair" => "needsrepair",
        "incompat" => "incompatible feature",
        "rocompat" => "read-only-compatible",
        "logincompat" => "log feature",
        _ => "V4",
    };

    [Theory]
    [MemberData(nameof(Cases))]
    public void Recover_command_refuses_and_leaves_the_image_byte_identical(string name)
    {
        string img = MakeVolume(name);
        string before = Hash(img);

        var real = Recover(img);
        Assert.True(real.Code != 0, $"recover accepted a {name} volume:\n{real.Out}{real.Err}");
        Assert.Contains(ExpectedWord(name), real.Err, StringComparison.OrdinalIgnoreCase);
        Assert.Contains("Nothing was written", real.Err, StringComparison.Ordinal);

        var dry = Recover(img, "--dry-run");
        Assert.True(dry.Code != 0, $"recover --dry-run did not report the refusal of a {name} volume:\n{dry.Out}{dry.Err}");
        Assert.Contains(ExpectedWord(name), dry.Err, StringComparison.OrdinalIgnoreCase);

        Assert.Equal(before, Hash(img));
    }

    [Theory]
    [MemberData(nameof(Cases))]
    public void Library_refuses_in_place_replay_and_the_gate_refuses_writers(string name)
    {
        string img = MakeVolume(name);
        string before = Hash(img);

        var open = Assert.ThrowsAny<XfsException>(() =>
            XfsVolume.Open(img, new VolumeOpenOptions { Replay = LogReplayMode.InPlace }).Dispose());
        Assert.Contains(ExpectedWord(name), open.Message, StringComparison.OrdinalIgnoreCase);

        foreach (var purpose in new[] { WritePurpose.LogRecovery, WritePurpose.Modify })
        {
            var gate = Assert.ThrowsAny<XfsException>(() => WriteGate.Open(img, null, null, purpose).Dispose());
            Assert.Contains(ExpectedWord(name), gate.Message, StringComparison.OrdinalIgnoreCase);
            Assert.Contains("Nothing was written", gate.Message, StringComparison.Ordinal);
        }
        using (var device = FileBlockDevice.Open(img, writable: true))
            Assert.ThrowsAny<XfsException>(() => WriteGate.Admit(device, null, WritePurpose.LogRecovery));

        Assert.Equal(before, Hash(img));
    }

    [Fact]
    public void The_gate_admits_a_volume_made_by_mkfs_and_the_journal_cannot_write_without_it()
    {
        string img = MakeVolume("plain");
        string before = Hash(img);
        using (var access = WriteGate.Open(img, null, null, WritePurpose.LogRecovery))
        {
            Assert.True(access.Data.CanWrite);
            Assert.True(access.Superblock.IsV5);
            var result = InPlaceRecovery.Run(access);
            Assert.Equal(LogState.Clean, result.State);
        }
        using (var device = FileBlockDevice.Open(img, writable: true))
            Assert.Throws<ArgumentException>(() => LogRecovery.Recover(device, null, DirtyLogScenarios.ReadSuperblock(device), LogReplayMode.InPlace));
        Assert.Equal(before, Hash(img));
    }

    [Fact]
    public void A_dirty_log_on_a_volume_marked_needsrepair_is_refused_and_left_unchanged()
    {
        var s = DirtyLogScenarios.Ensure("crash");
        string img = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "crash-needsrepair.img");
        SetBits(img, "features_incompat", 0x10);
        // The log is still dirty: the kernel's xfs_logprint sees records past the tail.
        using (var device = FileBlockDevice.Open(img))
            Assert.Equal(LogState.ReplayedInMemory, LogRecovery.Recover(device, null, DirtyLogScenarios.ReadSuperblock(device), LogReplayMode.Memory).State);
        string before = Hash(img);

        var real = Recover(img);
        Assert.True(real.Code != 0, real.Out + real.Err);
        Assert.Contains("needsrepair", real.Err, StringComparison.OrdinalIgnoreCase);
        var open = Assert.ThrowsAny<XfsException>(() =>
            XfsVolume.Open(img, new VolumeOpenOptions { Replay = LogReplayMode.InPlace }).Dispose());
        Assert.Equal(XfsError.NeedsRepair, open.Error);
        Assert.Equal(before, Hash(img));
    }

    [Fact]
    public void A_read_write_open_names_the_features_writes_cannot_maintain()
    {
        string img = MakeVolume("plain");
        // Quota accounting (accounting and checked bits of all three types) is maintained: the gate lets it through.
        XfsDb.Write(img, "6.1", "sb 0", "write -d qflags 0x54d");
        using (WriteGate.Open(img, null, null, WritePurpose.Modify)) { }
        // Enforced limits (user quota accounting and enforcement bits) are maintained too (EDQUOT).
        XfsDb.Write(img, "6.1", "sb 0", "write -d qflags 3");
        using (WriteGate.Open(img, null, null, WritePurpose.Modify)) { }
        using (var writable = XfsVolume.Open(img, new VolumeOpenOptions { Writable = true }))
            Assert.False(writable.IsReadOnly, string.Join("; ", writable.Info.ReadOnlyReasons));
        // Quota files in the metadata directory (mkfs 6.13 -m metadir=1,uquota) are not: read-only, named.
        string metadir = Path.Combine(_tmp, "metadir-quota.img");
        Shell.RunChecked("truncate", "-s", "300M", metadir);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.13"), "-q", "-f", "-m", "metadir=1,uquota", metadir);
        using var volume = XfsVolume.Open(metadir, new VolumeOpenOptions { Writable = true });
        Assert.True(volume.IsReadOnly);
        Assert.Contains(volume.Info.ReadOnlyReasons, r => r.Contains("quota files in the metadata directory", StringComparison.Ordinal));
        var refusal = Assert.ThrowsAny<XfsException>(() => WriteGate.Open(metadir, null, null, WritePurpose.Modify).Dispose());
        Assert.Contains("quota files in the metadata directory", refusal.Message, StringComparison.Ordinal);
        using (WriteGate.Open(metadir, null, null, WritePurpose.LogRecovery)) { }
    }
}

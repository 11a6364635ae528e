using Xunit;
using XfsWin.Cli.Commands;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Journal;

/// <summary><c>xfswin recover</c> on kernel-made dirty logs.</summary>
public sealed class RecoverCommandTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-recover.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private static (int Code, string Out, string Err) Run(params string[] args)
    {
        var o = new StringWriter();
        var e = new StringWriter();
        int code = RecoverCommand.Run(args, o, e);
        return (code, o.ToString(), e.ToString());
    }

    [Fact]
    public void DryRunReportsAndWritesNothingThenRecoverCleansTheLog()
    {
        var s = DirtyLogScenarios.Ensure("crash");
        string img = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "crash.img");

        var dry = Run(img, "--dry-run");
        Assert.True(dry.Code == 0, dry.Out + dry.Err);
        Assert.Contains("ReplayedInMemory", dry.Out);
        Assert.Contains("Nothing was written", dry.Out);
        Assert.True(DirtyLogScenarios.FilesEqual(img, s.DirtyImage), "--dry-run changed the image");

        var real = Run(img);
        Assert.True(real.Code == 0, real.Out + real.Err);
        Assert.Contains("ReplayedInPlace", real.Out);
        // Progress is drawn only on a terminal; on a pipe the output is the report alone.
        Assert.DoesNotContain("%", real.Err);
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", img);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);

        var again = Run(img);
        Assert.Equal(0, again.Code);
        Assert.Contains("nothing to recover", again.Out);
    }

    [Fact]
    public void FreesInodesUnlinkedWhileOpenAndSaysSo()
    {
        var s = DirtyLogScenarios.Ensure("unlinked");
        string img = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "unlinked.img");
        var dry = Run(img, "--dry-run");
        Assert.True(dry.Code == 0, dry.Out + dry.Err);
        Assert.Contains("unlinked:      6 inode(s) unlinked while open", dry.Out);
        Assert.DoesNotContain("would be refused", dry.Out);
        Assert.True(DirtyLogScenarios.FilesEqual(img, s.DirtyImage), "--dry-run changed the image");

        var real = Run(img);
        Assert.True(real.Code == 0, real.Out + real.Err);
        Assert.Contains("unlinked:      6 inode(s) unlinked while open, 6 freed", real.Out);
        Assert.Contains("freed 6 inode(s) unlinked while open", real.Out);
        Assert.Equal(0, Shell.Run(OracleImages.Tool("xfs_repair"), "-n", img).ExitCode);
    }

    [Fact]
    public void FinishesTheIntentsTheLogLeftAndSaysSo()
    {
        // intents: a truncate cut short leaves unfinished free-extent and rmap intents.
        var s = DirtyLogScenarios.Ensure("intents");
        string img = DirtyLogScenarios.Copy(s.DirtyImage, _tmp, "intents.img");
        var dry = Run(img, "--dry-run");
        Assert.True(dry.Code == 0, dry.Out + dry.Err);
        Assert.Contains("then finish what the log left", dry.Out);
        Assert.True(DirtyLogScenarios.FilesEqual(img, s.DirtyImage), "--dry-run changed the image");
        var real = Run(img);
        Assert.True(real.Code == 0, real.Out + real.Err);
        Assert.Matches(@"unfinished: +\d+ (EFI|RUI) intent\(s\), \d+ finished", real.Out);
        Assert.Contains("intent(s) the log left unfinished, as Linux does after its replay", real.Out);
        Assert.Equal(0, Shell.Run(OracleImages.Tool("xfs_repair"), "-n", img).ExitCode);
    }

    [Fact]
    public void ReportsTheQuotaTypesTheLogSwitchedOff()
    {
        var s = DirtyLogScenarios.Ensure("quotaoff");
        var dry = Run(s.DirtyImage, "--dry-run");
        Assert.True(dry.Code == 0, dry.Out + dry.Err);
        var line = Assert.Single(dry.Out.Split('\n'), l => l.StartsWith("quota:", StringComparison.Ordinal));
        Assert.Matches(@"^quota: +[1-9]\d* logged dquot\(s\) replayed; [2-9]\d* quota-off item\(s\) switched off user quota, whose [1-9]\d* logged dquot", line);
    }

    [Fact]
    public void ExternalLogNeedsTheLogDevice()
    {
        var s = DirtyLogScenarios.Ensure("extlog");
        var r = Run(s.DirtyImage, "--dry-run");
        Assert.Equal(2, r.Code);
        Assert.Contains("--log-device", r.Err);
        var withLog = Run(s.DirtyImage, "--dry-run", "--log-device", s.DirtyLogDevice!);
        Assert.True(withLog.Code == 0, withLog.Out + withLog.Err);
    }

    [Fact]
    public void UsageErrors()
    {
        Assert.Equal(2, Run().Code);
        Assert.Equal(2, Run("a", "b").Code);
        var missing = Run(Path.Combine(_tmp, "no-such-image"));
        Assert.Equal(1, missing.Code);
        Assert.Contains("no-such-image", missing.Err);
    }
}

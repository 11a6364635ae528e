using System.Runtime.InteropServices;
using XfsWin.Driver.Semantics;
using XfsWin.Service;

namespace XfsWin.Driver.Tests;

public unsafe class ServiceTests
{
    [Fact]
    public void LauncherEntryHasTheValuesWinFspReads()
    {
        string exe = OperatingSystem.IsWindows() ? @"C:\Program Files\XfsWin\xfswin-service.exe" : "/opt/xfswin/xfswin-service.exe";
        var values = LauncherRegistration.Values(exe).ToDictionary(v => v.Name);
        Assert.Equal(@"SOFTWARE\WOW6432Node\WinFsp\Services\xfswin", LauncherRegistration.KeyPath);
        Assert.Equal((RegistryValueKind.String, (object)exe), (values["Executable"].Kind, values["Executable"].Value));
        Assert.Equal("launch %1 %2 %3 %4 %5 %6 %7 %8 %9", values["CommandLine"].Value);
        Assert.Equal(Path.GetDirectoryName(exe) + Path.DirectorySeparatorChar, values["WorkDirectory"].Value);
        Assert.Equal((RegistryValueKind.DWord, (object)1), (values["JobControl"].Kind, values["JobControl"].Value));
        Assert.Equal("D:P(A;;RPWPLC;;;SY)(A;;RPWPLC;;;BA)", values["Security"].Value);
        Assert.Throws<ArgumentException>(() => LauncherRegistration.Values("xfswin-service.exe"));
        // The launcher quotes every %N, so unused ones arrive as empty arguments.
        Assert.Equal(["img", "X:", "--case-insensitive"], LauncherRegistration.LaunchArguments(["img", "X:", "--case-insensitive", "", "", ""]));
    }

    [Fact]
    public void MountTableParsesLinesOptionsAndQuotes()
    {
        var table = MountTable.Parse("""
            # XfsWin mounts
            "C:\images\my disk.img" X: --case-insensitive
            \\.\PhysicalDrive2 Y: --partition 1 --replay=place   # the backup disk

            D:\v.img C:\mnt\xfs
            """);
        Assert.Equal(3, table.Count);
        Assert.Equal((@"C:\images\my disk.img", "X:"), (table[0].Source, table[0].MountPoint));
        Assert.True(table[0].Options.CaseInsensitive);
        Assert.Equal(1, table[1].Options.Partition);
        Assert.Equal(Journal.LogReplayMode.InPlace, table[1].Options.Replay);
        Assert.Equal(5, table[2].Line);
        var e = Assert.Throws<FormatException>(() => MountTable.Parse("a.img X: --nope"));
        Assert.Contains("line 1", e.Message);
        Assert.Throws<FormatException>(() => MountTable.Parse("lonely.img"));
        Assert.Throws<FormatException>(() => MountTable.Parse("\"unterminated X:"));
    }

    [Fact]
    public void MountTableKeepsOptionWordsForTheWinFspBackendWithoutThePartition()
    {
        var entry = MountTable.Parse("disk.img X: --partition 2 --case-insensitive --replay=place")[0];
        Assert.Equal("disk.img@2", entry.Options.VolumeSource(entry.Source));
        Assert.Equal(["--case-insensitive", "--replay=place"], MountTable.OptionWords(entry));
        Assert.True(MountOptions.Parse(MountTable.OptionWords(entry)).CaseInsensitive);
    }

    [Fact]
    public void NtStatusDescriptionsAreHex() =>
        Assert.Equal("NTSTATUS 0xC00000A2", NtStatus.Describe(NtStatus.MediaWriteProtected));
}

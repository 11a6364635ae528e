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
    public void MountsConfIsTrustedOnlyWhenNoOneButAdministratorsCanHaveWrittenIt()
    {
        var users = Sid.Parse("S-1-5-32-545");
        var alice = Sid.Parse("S-1-5-21-1111111111-2222222222-3333333333-1001");
        var creatorOwner = Sid.Parse("S-1-3-0");
        var trustedInstaller = Sid.Parse("S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464");
        const AccessRights Full = (AccessRights)0x1F01FF, ReadExecute = (AccessRights)0x1200A9;
        byte[] Sd(Sid owner, params Ace[] dacl) => SecurityDescriptors.Serialize(owner, Sid.LocalSystem, dacl);
        Ace Allow(Sid sid, AccessRights mask, byte flags = 0) => new(AceType.AccessAllowed, mask, sid, flags);

        // What an administrator's file in %ProgramData%\XfsWin gets: SYSTEM and Administrators full, Users read.
        Assert.Null(MountTable.Untrusted(Sd(Sid.Administrators, Allow(Sid.LocalSystem, Full), Allow(Sid.Administrators, Full), Allow(users, ReadExecute))));
        Assert.Null(MountTable.Untrusted(Sd(Sid.LocalSystem, Allow(Sid.LocalSystem, Full))));
        Assert.Null(MountTable.Untrusted(Sd(trustedInstaller, Allow(trustedInstaller, Full), Allow(users, ReadExecute))));
        // An entry that only passes to what is created inside (inherit-only) changes nothing here; a deny never grants.
        Assert.Null(MountTable.Untrusted(Sd(Sid.Administrators, Allow(Sid.Administrators, Full), Allow(creatorOwner, Full, 0x08 | 0x02),
            new Ace(AceType.AccessDenied, Full, users))));

        // A file a user made (ProgramData lets users create files): theirs, so refused whatever its DACL says.
        Assert.Contains("owned by", MountTable.Untrusted(Sd(alice, Allow(Sid.Administrators, Full)))!);
        // Rights that change the file, for anyone else: write, append, EAs, delete, permissions, owner, generic ones.
        foreach (uint right in new uint[] { 0x2, 0x4, 0x10, 0x10000, 0x40000, 0x80000, 0x10000000, 0x40000000, 0x1301BF })
            Assert.Contains("may change it", MountTable.Untrusted(Sd(Sid.Administrators, Allow(Sid.Administrators, Full), Allow(users, (AccessRights)right)))!);
        Assert.Contains("may change it", MountTable.Untrusted(Sd(Sid.Administrators, Allow(Sid.Parse("S-1-5-11"), (AccessRights)0x1301BF)))!);
        // Reading and changing attributes (times, read-only) is not changing what it says.
        Assert.Null(MountTable.Untrusted(Sd(Sid.Administrators, Allow(Sid.Administrators, Full), Allow(Sid.World, (AccessRights)(0x1200A9 | 0x100)))));
        Assert.Contains("cannot be read", MountTable.Untrusted([1, 2, 3])!);
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

using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using XfsWin.Driver.Interop;
using XfsWin.Driver.Semantics;

namespace XfsWin.Driver.Tests;

/// <summary>
/// Pins every interop struct to the sizes WinFsp's headers assert (fsctl.h, winfsp.h static_asserts)
/// and to the field offsets that follow from their declarations on 64-bit Windows.
/// </summary>
public unsafe class InteropLayoutTests
{
    private static int Offset<T>(ref T field, ref byte start) => (int)Unsafe.ByteOffset(ref start, ref Unsafe.As<T, byte>(ref field));

    [Fact]
    public void VolumeParamsMatchFsctlH()
    {
        Assert.Equal(504, sizeof(FspFsctlVolumeParams)); // static_assert(504 == sizeof(FSP_FSCTL_VOLUME_PARAMS))
        var p = new FspFsctlVolumeParams();
        ref byte s = ref Unsafe.As<FspFsctlVolumeParams, byte>(ref p);
        Assert.Equal(2, Offset(ref p.SectorSize, ref s));
        Assert.Equal(6, Offset(ref p.MaxComponentLength, ref s));
        Assert.Equal(8, Offset(ref p.VolumeCreationTime, ref s));
        Assert.Equal(16, Offset(ref p.VolumeSerialNumber, ref s));
        Assert.Equal(32, Offset(ref p.FileInfoTimeout, ref s));
        Assert.Equal(36, Offset(ref p.Flags, ref s));
        Assert.Equal(40, Offset(ref p.Prefix[0], ref s));
        Assert.Equal(40 + 192 * 2, Offset(ref p.FileSystemName[0], ref s));
        Assert.Equal(456, Offset(ref p.AdditionalFlags, ref s)); // sizeof(FSP_FSCTL_VOLUME_PARAMS_V0) == 456
        Assert.Equal(460, Offset(ref p.VolumeInfoTimeout, ref s));
        Assert.Equal(480, Offset(ref p.FsextControlCode, ref s));
        Assert.Equal(488, Offset(ref p.Reserved64A, ref s));
    }

    [Fact]
    public void VolumeFlagBitsFollowDeclarationOrder()
    {
        // The bit fields of fsctl.h in order: 10 FILE_FS_ATTRIBUTE bits, 6 kernel bits, 3+5 user-mode bits, 8 more kernel bits.
        Assert.Equal(1u << 0, (uint)VolumeFlags.CaseSensitiveSearch);
        Assert.Equal(1u << 9, (uint)VolumeFlags.ReadOnlyVolume);
        Assert.Equal(1u << 13, (uint)VolumeFlags.PassQueryDirectoryFileName);
        Assert.Equal(1u << 16, (uint)VolumeFlags.UmFileContextIsUserContext2);
        Assert.Equal(1u << 24, (uint)VolumeFlags.AllowOpenInKernelMode);
        Assert.Equal(1u << 27, (uint)VolumeFlags.DirectoryMarkerAsNextOffset);
        Assert.Equal(1u << 30, (uint)VolumeFlags.PostDispositionWhenNecessaryOnly);
        var all = Enum.GetValues<VolumeFlags>().Select(f => (uint)f).ToArray();
        Assert.Equal(all.Length, all.Distinct().Count());
        Assert.All(all, b => Assert.Equal(1, System.Numerics.BitOperations.PopCount(b)));
    }

    [Fact]
    public void FileInfoVolumeInfoAndDirInfoMatchFsctlH()
    {
        Assert.Equal(72, sizeof(FileInformation));      // FSP_FSCTL_FILE_INFO
        Assert.Equal(88, sizeof(FspFsctlVolumeInfo));   // FSP_FSCTL_VOLUME_INFO
        Assert.Equal(104, sizeof(FspFsctlDirInfo));     // FSP_FSCTL_DIR_INFO
        Assert.Equal(88, sizeof(FspFsctlOpenFileInfo)); // FILE_INFO + PWSTR + UINT16, padded
        Assert.Equal(72, (int)Marshal.OffsetOf<FspFsctlOpenFileInfo>(nameof(FspFsctlOpenFileInfo.NormalizedName)));
        Assert.Equal(80, (int)Marshal.OffsetOf<FspFsctlOpenFileInfo>(nameof(FspFsctlOpenFileInfo.NormalizedNameSize)));

        var f = new FileInformation();
        ref byte fs = ref Unsafe.As<FileInformation, byte>(ref f);
        Assert.Equal(4, Offset(ref f.ReparseTag, ref fs));
        Assert.Equal(8, Offset(ref f.AllocationSize, ref fs));
        Assert.Equal(16, Offset(ref f.FileSize, ref fs));
        Assert.Equal(24, Offset(ref f.CreationTime, ref fs));
        Assert.Equal(48, Offset(ref f.ChangeTime, ref fs));
        Assert.Equal(56, Offset(ref f.IndexNumber, ref fs));
        Assert.Equal(64, Offset(ref f.HardLinks, ref fs));
        Assert.Equal(68, Offset(ref f.EaSize, ref fs));

        var v = new FspFsctlVolumeInfo();
        ref byte vs = ref Unsafe.As<FspFsctlVolumeInfo, byte>(ref v);
        Assert.Equal(16, Offset(ref v.VolumeLabelLength, ref vs));
        Assert.Equal(18, Offset(ref v.VolumeLabel[0], ref vs));

        var d = new FspFsctlDirInfo();
        ref byte ds = ref Unsafe.As<FspFsctlDirInfo, byte>(ref d);
        Assert.Equal(DirInfoLayout.FileInfoOffset, Offset(ref d.FileInfo, ref ds));
        Assert.Equal(DirInfoLayout.NextOffsetOffset, Offset(ref d.NextOffset, ref ds));
        Assert.Equal(DirInfoLayout.NameOffset, sizeof(FspFsctlDirInfo));
    }

    [Fact]
    public void FileSystemMatchesWinfspH()
    {
        Assert.Equal(792, sizeof(FspFileSystem)); // static_assert: 792 on 64-bit
        Assert.Equal(8, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.UserContext)));
        Assert.Equal(16, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.VolumeName)));
        Assert.Equal(528, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.VolumeHandle)));
        Assert.Equal(552, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.Operations)));
        Assert.Equal(728, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.Interface)));
        Assert.Equal(748, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.DispatcherResult)));
        Assert.Equal(752, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.MountPoint)));
        Assert.Equal(784, (int)Marshal.OffsetOf<FspFileSystem>(nameof(FspFileSystem.UmFileContextIsUserContext2)));
    }

    [Fact]
    public void InterfaceHasSixtyFourEntriesInHeaderOrder()
    {
        Assert.Equal(FspFileSystemInterface.EntryCount * 8, sizeof(FspFileSystemInterface));
        // Slot numbers as declared in FSP_FILE_SYSTEM_INTERFACE.
        (string Name, int Slot)[] slots =
        [
            ("GetVolumeInfo", 0), ("SetVolumeLabel", 1), ("GetSecurityByName", 2), ("Create", 3), ("Open", 4),
            ("Overwrite", 5), ("Cleanup", 6), ("Close", 7), ("Read", 8), ("Write", 9), ("Flush", 10),
            ("GetFileInfo", 11), ("SetBasicInfo", 12), ("SetFileSize", 13), ("CanDelete", 14), ("Rename", 15),
            ("GetSecurity", 16), ("SetSecurity", 17), ("ReadDirectory", 18), ("ResolveReparsePoints", 19),
            ("GetReparsePoint", 20), ("SetReparsePoint", 21), ("DeleteReparsePoint", 22), ("GetStreamInfo", 23),
            ("GetDirInfoByName", 24), ("Control", 25), ("SetDelete", 26), ("CreateEx", 27), ("OverwriteEx", 28),
            ("GetEa", 29), ("SetEa", 30), ("Obsolete0", 31), ("DispatcherStopped", 32), ("Reserved", 33),
        ];
        foreach (var (name, slot) in slots)
            Assert.Equal(slot * 8, (int)Marshal.OffsetOf<FspFileSystemInterface>(name));
    }

    [Fact]
    public void VolumeParametersCarryTheOptions()
    {
        var p = VolumeParameters.Build(new MountOptions(), 512, 8, 1234, 0xCAFE);
        Assert.Equal(504, p.Version);
        Assert.Equal(255, p.MaxComponentLength);
        Assert.Equal("XFS", new string(p.FileSystemName));
        Assert.True(p.Flags.HasFlag(VolumeFlags.ReadOnlyVolume));
        Assert.True(p.Flags.HasFlag(VolumeFlags.CaseSensitiveSearch));
        Assert.True(p.Flags.HasFlag(VolumeFlags.DirectoryMarkerAsNextOffset));
        Assert.True(p.Flags.HasFlag(VolumeFlags.UmFileContextIsUserContext2));
        Assert.False(p.Flags.HasFlag(VolumeFlags.PassQueryDirectoryPattern));
        // EA names as NTFS shows them: upper-cased by the WinFsp kernel (winfsp-tests' EA tests expect it).
        Assert.True(p.Flags.HasFlag(VolumeFlags.ExtendedAttributes));
        Assert.False(p.Flags.HasFlag(VolumeFlags.CasePreservedExtendedAttributes));
        Assert.Equal("WinFsp.Disk", VolumeParameters.DevicePath(new MountOptions()));

        var o = MountOptions.Parse(["--case-insensitive", "--fs-name", "NTFS", "--name-markers", "--no-ea", "--unc", @"\xfs\vol"]);
        var q = VolumeParameters.Build(o, 4096, 1, 0, 0);
        Assert.False(q.Flags.HasFlag(VolumeFlags.CaseSensitiveSearch));
        Assert.False(q.Flags.HasFlag(VolumeFlags.DirectoryMarkerAsNextOffset));
        Assert.False(q.Flags.HasFlag(VolumeFlags.ExtendedAttributes));
        Assert.Equal("NTFS", new string(q.FileSystemName));
        Assert.Equal(@"\xfs\vol", new string(q.Prefix));
        Assert.Equal("WinFsp.Net", VolumeParameters.DevicePath(o));
    }

    [Fact]
    public void DllIsFoundUnderTheInstallDirectory()
    {
        Assert.Equal(Path.Combine(@"C:\Program Files (x86)\WinFsp\", "bin", "winfsp-x64.dll"),
            WinFspLibrary.DllPath(@"C:\Program Files (x86)\WinFsp\", Architecture.X64));
        Assert.Equal("winfsp-a64.dll", WinFspLibrary.DllName(Architecture.Arm64));
        Assert.Equal(@"SOFTWARE\WOW6432Node\WinFsp", WinFspLibrary.RegistryKey);
    }
}

using XfsWin.Driver.Semantics;

namespace XfsWin.Driver.Interop;

/// <summary>Builds FSP_FSCTL_VOLUME_PARAMS for a mount. Pure data: tested on Linux.</summary>
public static class VolumeParameters
{
    public const string DiskDeviceName = "WinFsp.Disk";
    public const string NetDeviceName = "WinFsp.Net";

    public static unsafe FspFsctlVolumeParams Build(MountOptions options, ushort sectorSize, ushort sectorsPerAllocationUnit,
        ulong volumeCreationTime, uint serialNumber)
    {
        var p = new FspFsctlVolumeParams
        {
            Version = (ushort)sizeof(FspFsctlVolumeParams),
            SectorSize = sectorSize,
            SectorsPerAllocationUnit = sectorsPerAllocationUnit,
            MaxComponentLength = WindowsNames.MaxWindowsNameChars,
            VolumeCreationTime = volumeCreationTime,
            VolumeSerialNumber = serialNumber,
            FileInfoTimeout = options.FileInfoTimeoutMs,
            Flags = FlagsFor(options),
        };
        Copy(options.FileSystemName, p.FileSystemName, FspFsctlVolumeParams.FileSystemNameChars);
        if (options.UncPrefix is { } prefix) Copy(prefix, p.Prefix, FspFsctlVolumeParams.PrefixChars);
        return p;
    }

    public static VolumeFlags FlagsFor(MountOptions options)
    {
        // EA names are not case-preserved: Windows shows them upper-cased, as NTFS does (the WinFsp kernel upper-cases
        // them on the way out and matches them ignoring case; the adapter stores the spelling a program gave).
        var f = VolumeFlags.CasePreservedNames | VolumeFlags.UnicodeOnDisk | VolumeFlags.PersistentAcls |
                VolumeFlags.ReparsePoints | VolumeFlags.PostCleanupWhenModifiedOnly |
                VolumeFlags.PassQueryDirectoryFileName | VolumeFlags.UmFileContextIsUserContext2;
        // Read-write: POSIX unlink and rename (FILE_DISPOSITION_POSIX_SEMANTICS, FILE_RENAME_POSIX_SEMANTICS) map
        // straight onto XFS, whose open files outlive their names.
        f |= options.ReadWrite ? VolumeFlags.SupportsPosixUnlinkRename : VolumeFlags.ReadOnlyVolume;
        if (!options.CaseInsensitive) f |= VolumeFlags.CaseSensitiveSearch;
        if (options.ExtendedAttributes) f |= VolumeFlags.ExtendedAttributes;
        if (options.LxSpecialFiles) f |= VolumeFlags.WslFeatures;
        if (options.MarkersAsOffsets) f |= VolumeFlags.DirectoryMarkerAsNextOffset;
        return f;
    }

    public static string DevicePath(MountOptions options) => options.UncPrefix is null ? DiskDeviceName : NetDeviceName;

    private static unsafe void Copy(string text, char* destination, int capacity)
    {
        if (text.Length >= capacity) throw new ArgumentException($"'{text}' is longer than {capacity - 1} characters");
        for (int i = 0; i < text.Length; i++) destination[i] = text[i];
        destination[text.Length] = '\0';
    }
}

using System.Runtime.Versioning;
using XfsWin.Control.Server;
using XfsWin.Driver;
using XfsWin.Volume;

namespace XfsWin.Service;

/// <summary>Serves the control server's mounts through WinFsp: drive letters ("X:", "*" for any free one) or folders.</summary>
[SupportedOSPlatform("windows")]
public sealed class WinFspMountBackend : IMountBackend
{
    public string Name => "WinFsp";

    /// <summary>The adapter serves every write path (docs/windows.md, "Read-write").</summary>
    public bool ServesWrites => true;

    public string MountPointKind => "drive-letter-or-folder";

    public IReadOnlyList<string> SuggestMountPoints(string? label)
    {
        var used = DriveInfo.GetDrives().Select(d => char.ToUpperInvariant(d.Name[0])).ToHashSet();
        var free = new List<string>();
        for (char c = 'Z'; c >= 'D'; c--)
            if (!used.Contains(c)) free.Add($"{c}:");
        return free;
    }

    public string? CheckMountPoint(string mountPoint)
    {
        if (WindowsMount.IsDriveLetter(mountPoint))
            return mountPoint != "*" && Directory.Exists(mountPoint + "\\") ? $"drive {mountPoint} is in use: choose a free letter" : null;
        if (!Path.IsPathFullyQualified(mountPoint)) return $"'{mountPoint}' is neither a drive letter (X:) nor a full folder path";
        if (Directory.Exists(mountPoint) || File.Exists(mountPoint)) return $"'{mountPoint}' exists: WinFsp mounts on a folder path that does not exist yet (its parent must)";
        return Directory.Exists(Path.GetDirectoryName(mountPoint)) ? null : $"the parent folder of '{mountPoint}' does not exist";
    }

    public IMountedVolume Mount(XfsVolume volume, string source, string mountPoint, IReadOnlyList<string> hostOptions)
    {
        // A volume the control server opened writable (mount with readOnly=false, or --rw in mounts.conf) is served read-write;
        // one it opened read-only is served read-only whatever the option words say.
        var options = MountOptions.Parse(hostOptions) with { ReadWrite = !volume.IsReadOnly };
        return new Mounted(WindowsMount.Host(volume, source, mountPoint, options));
    }

    private sealed class Mounted(MountSession session) : IMountedVolume
    {
        public string MountPoint => session.MountPoint;

        public Task Stopped => session.Stopped;

        public void Dispose() => session.Dispose();
    }
}

using XfsWin.Attributes;
using System.CommandLine;
using System.Runtime.InteropServices;
using System.Text;
using Microsoft.Win32.SafeHandles;
using XfsWin.Cli.Native;
using XfsWin.Cli.Output;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin extract SOURCE DEST [PATH]</c>: copies a tree out of the volume with its metadata.
/// Safety invariant: every object is created with an exclusive create (O_CREAT|O_EXCL|O_NOFOLLOW,
/// mkdir, symlink, mknod, link: all fail on an existing name and never follow a final symlink),
/// only in directories this run created itself, under names checked to be single components. So a
/// symlink from the image (or one already in DEST) can never redirect a later write, and nothing
/// is written outside DEST.
/// </summary>
public static class ExtractCommand
{
    public const string Description = "Copy files out of the volume with type, mode, owner, times (ns), links, devices, xattrs and ACLs";

    public static Command Build(CliConsole console)
    {
        var source = CommandSupport.SourceArgument();
        var dest = new Argument<string>("DEST") { Description = "Directory to extract into (created if missing; existing names are never overwritten)" };
        var path = new Argument<string>("PATH") { Description = "Directory or file inside the volume to extract", DefaultValueFactory = _ => "/" };
        var partition = CommandSupport.PartitionOption();
        var progress = CommandSupport.ProgressOption();
        var noProgress = CommandSupport.NoProgressOption();
        var command = new Command("extract", Description) { source, dest, path, partition, progress, noProgress };
        command.SetAction(parse => CommandSupport.Run(console, "extract", () =>
        {
            if (!OperatingSystem.IsLinux())
                throw new XfsException(XfsError.Unsupported, "extract recreates POSIX metadata and runs on Linux for now; on Windows mount the volume instead");
            using var volume = CommandSupport.OpenVolume(parse.GetValue(source)!, parse.GetValue(partition));
            var bar = CliProgress.Start(console, CommandSupport.ProgressFlag(parse, progress, noProgress), "extract");
            var extractor = new Extractor(volume, console, bar);
            int code = extractor.Run(CommandSupport.NormalizeVolumePath(parse.GetValue(path)), parse.GetValue(dest)!);
            bar.Finish();
            return code;
        }));
        return command;
    }

    private sealed class Extractor(XfsVolume volume, CliConsole console, CliProgress progress)
    {
        private readonly bool _root = Posix.IsRoot;
        private readonly Dictionary<ulong, byte[]> _firstPathOfInode = [];
        private readonly HashSet<ulong> _directoriesSeen = [];
        private readonly FileCopy _copy = new();
        private int _problems;
        private bool _sawCorruption;
        private int _skippedDevices;

        public int Run(string volumePath, string dest)
        {
            ulong inode = volume.ResolvePath(volumePath);
            var attrs = volume.GetAttributes(inode);
            string fullDest = Path.GetFullPath(dest);
            bool created = false;
            if (Directory.Exists(fullDest))
            {
                // Existing directory: extract into it, leave its own metadata alone.
            }
            else if (File.Exists(fullDest) || IsDanglingLink(fullDest))
            {
                throw new XfsException(XfsError.InvalidArgument, $"'{dest}' exists and is not a directory; give a new or existing directory as DEST");
            }
            else
            {
                string? parent = Path.GetDirectoryName(fullDest);
                if (parent is not null) Directory.CreateDirectory(parent);
                if (Posix.Mkdir(Posix.Z(fullDest), 0x1C0) != 0)
                {
                    int errno = Marshal.GetLastPInvokeError();
                    throw new IOException($"cannot create '{dest}': {Posix.ErrorText(errno)}");
                }
                created = true;
            }
            byte[] destBytes = Encoding.UTF8.GetBytes(fullDest);
            try
            {
                if (attrs.FileType == XfsFileType.Directory)
                {
                    _directoriesSeen.Add(inode);
                    ExtractChildren(inode, destBytes, volumePath);
                    if (created) ApplyMetadata(destBytes, inode, attrs, volumePath);
                }
                else
                {
                    string name = volumePath[(volumePath.LastIndexOf('/') + 1)..];
                    byte[] nameBytes = Encoding.UTF8.GetBytes(name);
                    ExtractEntry(nameBytes, inode, attrs.FileType, Join(destBytes, nameBytes), volumePath);
                }
            }
            finally
            {
                _copy.Dispose();
            }
            if (_skippedDevices > 0)
                Problem($"{_skippedDevices} device node(s) were not created: creating device nodes needs root. Run extract as root to recreate them.");
            if (!_root)
                console.Error.WriteLine("xfswin extract: note: not running as root, so owners (uid/gid) were not restored and trusted.* xattrs cannot be set.");
            if (_sawCorruption) return ExitCodes.Corrupt;
            return _problems > 0 ? ExitCodes.Partial : ExitCodes.Ok;
        }

        private static bool IsDanglingLink(string path) => new FileInfo(path).LinkTarget is not null;

        private void Problem(string message)
        {
            _problems++;
            console.Error.WriteLine($"xfswin extract: {message}");
        }

        private void ExtractChildren(ulong dirInode, byte[] destDir, string imageDir)
        {
            IReadOnlyList<DirectoryEntry> entries;
            try
            {
                entries = volume.ListDirectory(dirInode);
            }
            catch (XfsException e)
            {
                Failed(imageDir, e);
                return;
            }
            bool dotSeen = false, dotDotSeen = false;
            foreach (var e in entries)
            {
                // The first "." and ".." are the directory's own links; any further one is a crafted entry.
                if (e.Name is [(byte)'.'] && !dotSeen) { dotSeen = true; continue; }
                if (e.Name is [(byte)'.', (byte)'.'] && !dotDotSeen) { dotDotSeen = true; continue; }
                string display = CommandSupport.JoinPath(imageDir, Formatting.DisplayName(e.Name));
                if (!IsSafeName(e.Name, out string why))
                {
                    Problem($"refused to extract '{display}': {why}. The volume is damaged or crafted; nothing was written for it. Run xfs_repair on it.");
                    continue;
                }
                byte[] target = Join(destDir, e.Name);
                try
                {
                    var type = e.FileType == XfsFileType.Unknown ? volume.GetAttributes(e.Inode).FileType : e.FileType;
                    ExtractEntry(e.Name, e.Inode, type, target, display);
                }
                catch (XfsException ex)
                {
                    Failed(display, ex);
                }
            }
        }

        private void Failed(string display, XfsException e)
        {
            if (e.Error is XfsError.Corrupt or XfsError.NeedsRepair) _sawCorruption = true;
            Problem($"'{display}' could not be read: {e.Message}");
        }

        private static bool IsSafeName(byte[] name, out string why)
        {
            why = "";
            if (name.Length == 0) why = "it has an empty name";
            else if (name is [(byte)'.'] or [(byte)'.', (byte)'.']) why = "its name is '.' or '..'";
            else if (Array.IndexOf(name, (byte)'/') >= 0) why = "its name contains '/'";
            else if (Array.IndexOf(name, (byte)0) >= 0) why = "its name contains a NUL byte";
            else if (name.Length > 255) why = "its name is longer than 255 bytes";
            return why.Length == 0;
        }

        private static byte[] Join(byte[] dir, byte[] name)
        {
            var path = new byte[dir.Length + 1 + name.Length];
            dir.CopyTo(path, 0);
            path[dir.Length] = (byte)'/';
            name.CopyTo(path, dir.Length + 1);
            return path;
        }

        private static string Show(byte[] path) => Formatting.DisplayName(path);

        private void ExtractEntry(byte[] name, ulong inode, XfsFileType type, byte[] target, string display)
        {
            var attrs = volume.GetAttributes(inode);
            if (attrs.FileType != type && type != XfsFileType.Unknown)
            {
                Problem($"'{display}': the directory entry says {Formatting.TypeName(type)} but inode {inode} is a {Formatting.TypeName(attrs.FileType)}; using the inode's type. Run xfs_repair on the volume.");
            }
            type = attrs.FileType;

            if (type != XfsFileType.Directory && attrs.LinkCount > 1)
            {
                if (_firstPathOfInode.TryGetValue(inode, out var existing))
                {
                    if (Posix.Link(Posix.Z(existing), Posix.Z(target)) != 0)
                        Errno($"cannot hard-link '{display}' to '{Show(existing)}'");
                    progress.Add(0, 1);
                    return;
                }
            }

            switch (type)
            {
                case XfsFileType.Directory:
                    if (!_directoriesSeen.Add(inode))
                    {
                        Problem($"refused to extract '{display}': directory inode {inode} appears twice in the tree (a directory cycle or a hard-linked directory). Run xfs_repair on the volume.");
                        return;
                    }
                    if (Posix.Mkdir(Posix.Z(target), 0x1C0) != 0) { Errno($"cannot create directory '{Show(target)}'"); return; }
                    progress.Add(0, 1);
                    ExtractChildren(inode, target, display);
                    ApplyMetadata(target, inode, attrs, display);
                    return;
                case XfsFileType.RegularFile:
                    if (!WriteFile(target, inode, attrs, display)) return;
                    break;
                case XfsFileType.Symlink:
                    byte[] link = volume.ReadLink(inode);
                    if (link.Length == 0 || Array.IndexOf(link, (byte)0) >= 0)
                    {
                        Problem($"refused to create symlink '{display}': its target is empty or contains a NUL byte. Run xfs_repair on the volume.");
                        return;
                    }
                    if (Posix.Symlink(Posix.Z(link), Posix.Z(target)) != 0) { Errno($"cannot create symlink '{Show(target)}'"); return; }
                    break;
                case XfsFileType.Fifo:
                case XfsFileType.Socket:
                case XfsFileType.CharacterDevice:
                case XfsFileType.BlockDevice:
                    bool device = type is XfsFileType.CharacterDevice or XfsFileType.BlockDevice;
                    if (device && !_root) { _skippedDevices++; return; }
                    ulong dev = device ? Posix.MakeDev(attrs.DeviceMajor, attrs.DeviceMinor) : 0;
                    if (Posix.Mknod(Posix.Z(target), (attrs.Mode & 0xF000) | 0x180, dev) != 0) { Errno($"cannot create {Formatting.TypeName(type)} '{Show(target)}'"); return; }
                    break;
                default:
                    Problem($"'{display}' is a {Formatting.TypeName(type)} (inode {inode}), which cannot be extracted; skipped.");
                    return;
            }
            progress.Add(0, 1);
            if (attrs.LinkCount > 1) _firstPathOfInode[inode] = target;
            ApplyMetadata(target, inode, attrs, display);
        }

        private bool WriteFile(byte[] target, ulong inode, InodeAttributes attrs, string display)
        {
            int fd = Posix.Open(Posix.Z(target), Posix.O_WRONLY | Posix.O_CREAT | Posix.O_EXCL | Posix.O_NOFOLLOW | Posix.O_CLOEXEC, 0x180);
            if (fd < 0) { Errno($"cannot create '{Show(target)}'"); return false; }
            using var handle = new SafeFileHandle(fd, ownsHandle: true);
            using (var stream = new FileStream(handle, FileAccess.Write, bufferSize: 0))
            {
                try
                {
                    _copy.Copy(volume, inode, attrs.Size, stream, progress);
                }
                catch (XfsException e)
                {
                    Failed(display, e);
                    return true; // keep what was written; its metadata still gets applied
                }
                catch (IOException e)
                {
                    throw new IOException($"writing '{Show(target)}' failed: {e.Message}. Is the destination full?", e);
                }
            }
            return true;
        }

        private void Errno(string what)
        {
            int errno = Marshal.GetLastPInvokeError();
            string hint = errno == Posix.EEXIST ? " (the name already exists: extract never overwrites; use an empty DEST)" : "";
            Problem($"{what}: {Posix.ErrorText(errno)}{hint}");
        }

        /// <summary>Owner, then xattrs (chown would drop security.capability), then mode (chown clears setuid), then times last.</summary>
        private void ApplyMetadata(byte[] target, ulong inode, InodeAttributes attrs, string display)
        {
            var z = Posix.Z(target);
            bool symlink = attrs.FileType == XfsFileType.Symlink;
            if (_root && Posix.Lchown(z, attrs.Uid, attrs.Gid) != 0)
                Errno($"cannot set owner {attrs.Uid}:{attrs.Gid} of '{Show(target)}'");
            SetXattrs(z, inode, display, symlink);
            if (!symlink && Posix.Chmod(z, attrs.Mode & 0xFFF) != 0)
                Errno($"cannot set mode {Formatting.Octal(attrs.Mode & 0xFFF)} of '{Show(target)}'");
            Span<Posix.Timespec> times =
            [
                new() { Seconds = attrs.AccessTime.Seconds, Nanoseconds = attrs.AccessTime.Nanoseconds },
                new() { Seconds = attrs.ModifyTime.Seconds, Nanoseconds = attrs.ModifyTime.Nanoseconds },
            ];
            if (Posix.Utimensat(Posix.AT_FDCWD, z, times, Posix.AT_SYMLINK_NOFOLLOW) != 0)
                Errno($"cannot set times of '{Show(target)}'");
        }

        private void SetXattrs(byte[] z, ulong inode, string display, bool symlink)
        {
            IReadOnlyList<XattrEntry> list;
            try
            {
                list = volume.ListXattrs(inode);
            }
            catch (XfsException e)
            {
                Failed(display + " (extended attributes)", e);
                return;
            }
            var failed = new Dictionary<string, List<string>>(StringComparer.Ordinal);
            foreach (var x in list)
            {
                string name = x.LinuxName;
                if (x.Namespace == XattrNamespace.Parent) continue;
                // Linux allows user.* only on regular files and directories; skip quietly on symlinks as tar does.
                if (symlink && x.Namespace == XattrNamespace.User) continue;
                byte[] value;
                try
                {
                    if (!volume.TryGetXattr(inode, x.Namespace, x.Name, out value))
                    {
                        Problem($"'{display}': xattr {name} is listed but has no value; skipped");
                        continue;
                    }
                }
                catch (XfsException e)
                {
                    Failed($"{display} (xattr {name})", e);
                    continue;
                }
                if (name is "system.posix_acl_access" or "system.posix_acl_default")
                {
                    try
                    {
                        value = PosixAcl.XfsToLinux(value);
                    }
                    catch (FormatException e)
                    {
                        Problem($"'{display}': ACL {name} is malformed ({e.Message}); not set");
                        continue;
                    }
                }
                if (Posix.Lsetxattr(z, Posix.Z(name), value, (nuint)value.Length, 0) != 0)
                {
                    string reason = Posix.ErrorText(Marshal.GetLastPInvokeError());
                    if (!failed.TryGetValue(reason, out var names)) failed[reason] = names = [];
                    names.Add(name);
                }
            }
            // One line per reason: a destination that holds fewer xattrs per file than XFS can fail hundreds at once.
            foreach (var (reason, names) in failed)
                Problem($"could not set {names.Count} xattr(s) on '{display}' ({reason}; the destination file system may not accept them): {string.Join(", ", names)}");
        }
    }
}

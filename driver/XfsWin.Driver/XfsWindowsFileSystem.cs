using XfsWin.Attributes;
using System.Buffers.Binary;
using System.Collections.Concurrent;
using XfsWin.Driver.Semantics;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Driver;

/// <summary>Receives directory entries in WinFsp's order; false when the caller's buffer is full.</summary>
public interface IDirInfoSink
{
    bool Add(in FileInformation info, ReadOnlySpan<char> name, ulong nextOffset);

    /// <summary>Called once after the last entry, when every entry fitted.</summary>
    void End();
}

/// <summary>
/// Where a directory listing resumes: nothing (from the start), the NextOffset of the last entry
/// returned (WinFsp's DirectoryMarkerAsNextOffset; an XFS cookie), or the last name returned.
/// </summary>
public readonly ref struct DirectoryMarker
{
    public DirectoryMarker(ulong offset) { Offset = offset; HasOffset = true; Name = default; HasName = false; }
    public DirectoryMarker(ReadOnlySpan<char> name) { Name = name; HasName = true; Offset = 0; HasOffset = false; }

    public ReadOnlySpan<char> Name { get; }
    public bool HasName { get; }
    public ulong Offset { get; }
    public bool HasOffset { get; }
    public static DirectoryMarker None => default;
}

/// <summary>
/// The XFS volume as WinFsp sees it: one method per WinFsp callback, returning NTSTATUS. It only
/// translates between <see cref="XfsVolume"/> and Windows semantics; it holds no WinFsp types, so
/// tests call it exactly as WinFsp would, on Linux. Thread-safe.
/// </summary>
public sealed partial class XfsWindowsFileSystem
{
    /// <summary>NextOffset of entries returned by <see cref="GetDirInfoByName"/>: resuming after them lists nothing more.</summary>
    public const ulong EndOfDirectoryOffset = ulong.MaxValue;

    private const int MaxSymlinkFollows = 40;
    private static readonly byte[] AclAttributeName = "SGI_ACL_FILE"u8.ToArray();
    /// <summary>Where XFS keeps system.posix_acl_default (a directory's default ACL).</summary>
    private static readonly byte[] DefaultAclAttributeName = "SGI_ACL_DEFAULT"u8.ToArray();

    private readonly XfsVolume _volume;
    private readonly MountOptions _options;
    private readonly IdentityMap _ids;
    private readonly ulong _root;
    private readonly ConcurrentDictionary<(uint Uid, uint Gid, uint Mode), byte[]> _plainSecurity = new();
    private long _entriesVisited;

    public XfsWindowsFileSystem(XfsVolume volume, MountOptions options, IdentityMap ids, string? mountPoint = null)
    {
        _volume = volume;
        _options = options;
        _ids = ids;
        _root = volume.RootInode;
        MountPoint = mountPoint;
    }

    public XfsVolume Volume => _volume;
    public MountOptions Options => _options;
    public IdentityMap Identities => _ids;
    public string? MountPoint { get; set; }

    /// <summary>Directory entries the engine has handed to listings so far (shows that markers resume without rescanning).</summary>
    public long EntriesVisited => Interlocked.Read(ref _entriesVisited);

    // ---------------------------------------------------------------- volume

    /// <summary>Sector size and cluster size for FSP_FSCTL_VOLUME_PARAMS.</summary>
    public (ushort SectorSize, ushort SectorsPerAllocationUnit) Geometry
    {
        get
        {
            var info = _volume.Info;
            int sector = Math.Clamp(info.SectorSize, 512, 4096);
            return ((ushort)sector, (ushort)Math.Max(1, info.BlockSize / sector));
        }
    }

    /// <summary>Volume serial number: the first four bytes of the XFS UUID as printed (what "vol" shows as XXXX-XXXX).</summary>
    public static uint SerialNumber(Guid uuid)
    {
        Span<byte> bytes = stackalloc byte[16];
        uuid.TryWriteBytes(bytes, bigEndian: true, out _);
        return BinaryPrimitives.ReadUInt32BigEndian(bytes);
    }

    public uint VolumeSerialNumber => SerialNumber(_volume.Info.Uuid);

    /// <summary>Creation time of the volume: the root directory's creation time (V5) or change time.</summary>
    public ulong VolumeCreationTime
    {
        get
        {
            var root = _volume.GetAttributes(_root);
            return ToFileTime(root.CreationTime ?? root.ChangeTime);
        }
    }

    public int GetVolumeInfo(out VolumeInformation info)
    {
        try
        {
            var stats = _volume.GetStats();
            string label = _volume.Info.Label;
            if (label.Length > 32) label = label[..32];
            info = new VolumeInformation((ulong)stats.BlockSize * stats.TotalBlocks, (ulong)stats.BlockSize * stats.FreeBlocks, label);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            info = default;
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// WinFsp's SetVolumeLabel: relabels the mounted volume (<see cref="XfsVolume.SetLabel"/>: the primary superblock
    /// through the log, then every secondary) and answers the volume information with the new label. An XFS label is
    /// at most 12 bytes of UTF-8: a longer one, or one with a control character or an unpaired surrogate, is
    /// STATUS_INVALID_VOLUME_LABEL (what Windows reports as "the volume label exceeds the limit"), with nothing
    /// changed. An empty label clears it. Read-only mounts answer STATUS_MEDIA_WRITE_PROTECTED.
    /// </summary>
    public int SetVolumeLabel(ReadOnlySpan<char> label, out VolumeInformation info)
    {
        info = default;
        if (!_options.ReadWrite) return NtStatus.MediaWriteProtected;
        if (!IsValidLabel(label)) return NtStatus.InvalidVolumeLabel;
        try
        {
            _volume.SetLabel(label.ToString());
            return GetVolumeInfo(out info);
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>Whether Windows may set <paramref name="label"/> on an XFS volume: at most 12 UTF-8 bytes, no control characters, valid UTF-16.</summary>
    public static bool IsValidLabel(ReadOnlySpan<char> label)
    {
        int bytes = 0;
        for (int i = 0; i < label.Length; i++)
        {
            char c = label[i];
            if (c < 0x20 || c == 0x7F) return false;
            if (char.IsHighSurrogate(c))
            {
                if (i + 1 >= label.Length || !char.IsLowSurrogate(label[i + 1])) return false;
                i++;
                bytes += 4;
            }
            else if (char.IsLowSurrogate(c)) return false;
            else bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
        }
        return bytes <= Format.Superblock.MaxLabelBytes;
    }

    // ---------------------------------------------------------------- names and paths

    /// <summary>Result of walking a Windows path down from the root.</summary>
    private struct Walk
    {
        public int Status;
        public ulong Inode;
        public InodeAttributes Attributes;
        public byte[] Name;
        /// <summary>The path spelled with the names as stored (only built for case-insensitive mounts).</summary>
        public System.Text.StringBuilder? Normalized;
        public List<ulong> Ancestors;
        /// <summary>Char index in the path of the first intermediate component that is a reparse point, or -1.</summary>
        public int ReparseIndex;
    }

    /// <summary>
    /// Resolves "\a\b\c" component by component. Intermediate symlinks stop the walk with their index
    /// (WinFsp then resolves them); missing intermediate components give OBJECT_PATH_NOT_FOUND.
    /// </summary>
    private Walk WalkPath(ReadOnlySpan<char> path, bool stopAtReparse)
    {
        var walk = new Walk { Inode = _root, Name = [], Ancestors = new List<ulong>(8), ReparseIndex = -1,
            Normalized = _options.CaseInsensitive ? new System.Text.StringBuilder(path.Length + 1) : null };
        walk.Attributes = _volume.GetAttributes(_root);
        Span<byte> nameBytes = stackalloc byte[WindowsNames.MaxXfsNameBytes];
        int i = 0;
        while (i < path.Length)
        {
            while (i < path.Length && path[i] == '\\') i++;
            if (i >= path.Length) break;
            int start = i;
            while (i < path.Length && path[i] != '\\') i++;
            var component = path[start..i];
            bool last = i >= path.Length || path[i..].TrimStart('\\').IsEmpty;

            if (component.IndexOf(':') >= 0)
            {
                // Named streams ("file:stream") do not exist on XFS.
                walk.Status = NtStatus.ObjectNameNotFound;
                return walk;
            }
            if (walk.Attributes.FileType != XfsFileType.Directory)
            {
                if (stopAtReparse && IsReparse(walk.Attributes.FileType))
                {
                    walk.ReparseIndex = LastComponentStart(path, start);
                    walk.Status = NtStatus.Reparse;
                }
                else
                {
                    walk.Status = NtStatus.ObjectPathNotFound;
                }
                return walk;
            }

            if (!LookupComponent(walk.Inode, component, nameBytes, out ulong child, out int nameLength))
            {
                walk.Status = last ? NtStatus.ObjectNameNotFound : NtStatus.ObjectPathNotFound;
                return walk;
            }
            walk.Ancestors.Add(walk.Inode);
            walk.Inode = child;
            walk.Name = nameBytes[..nameLength].ToArray();
            walk.Normalized?.Append('\\').Append(WindowsNames.EncodeToString(walk.Name));
            walk.Attributes = _volume.GetAttributes(child);
        }
        walk.Status = NtStatus.Success;
        return walk;
    }

    private static int LastComponentStart(ReadOnlySpan<char> path, int nextStart)
    {
        // The component before nextStart: skip the separators, then back to the previous one.
        int j = nextStart - 1;
        while (j >= 0 && path[j] == '\\') j--;
        while (j >= 0 && path[j] != '\\') j--;
        return j + 1;
    }

    private bool IsReparse(XfsFileType type) => ReparseTags.ForFileType(type, _options.LxSpecialFiles) != 0;

    /// <summary>
    /// Finds a Windows name in a directory: the exact XFS name by hash lookup; with
    /// <see cref="MountOptions.CaseInsensitive"/>, otherwise the first entry in directory order whose
    /// Windows name equals it ignoring case.
    /// </summary>
    private bool LookupComponent(ulong directory, ReadOnlySpan<char> windowsName, Span<byte> nameBytes, out ulong inode, out int nameLength)
    {
        nameLength = windowsName.Length <= WindowsNames.MaxWindowsNameChars ? WindowsNames.Decode(windowsName, nameBytes) : -1;
        if (nameLength > 0 && _volume.TryLookup(directory, nameBytes[..nameLength], out inode))
            return true;
        inode = 0;
        if (!_options.CaseInsensitive || windowsName.Length > WindowsNames.MaxWindowsNameChars) return false;

        var finder = new CaseInsensitiveFinder(windowsName.ToString());
        _volume.ReadDirectory(directory, 0, ref finder);
        if (finder.Match is null) return false;
        finder.Match.CopyTo(nameBytes);
        nameLength = finder.Match.Length;
        inode = finder.MatchInode;
        return true;
    }

    private struct CaseInsensitiveFinder(string target) : IDirectoryVisitor
    {
        public byte[]? Match;
        public ulong MatchInode;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (WindowsNames.IsDotOrDotDot(name)) return true;
            Span<char> buffer = stackalloc char[WindowsNames.MaxWindowsNameChars];
            int n = WindowsNames.Encode(name, buffer);
            if (n == target.Length && buffer[..n].Equals(target, StringComparison.OrdinalIgnoreCase))
            {
                Match = name.ToArray();
                MatchInode = inode;
                return false;
            }
            return true;
        }
    }

    // ---------------------------------------------------------------- file information

    internal static ulong ToFileTime(XfsTimestamp t)
    {
        long ft = t.Seconds < -11644473600L ? 0 : t.ToFileTime();
        return ft < 0 ? 0 : (ulong)ft;
    }

    /// <summary>Fills FSP_FSCTL_FILE_INFO from inode attributes. <paramref name="symlinkIsDirectory"/> marks directory symlinks.</summary>
    public FileInformation MakeFileInformation(in InodeAttributes a, ReadOnlySpan<byte> name, bool symlinkIsDirectory, uint eaSize = 0)
    {
        var info = new FileInformation();
        uint tag = ReparseTags.ForFileType(a.FileType, _options.LxSpecialFiles);
        WindowsFileAttributes attributes = 0;
        if (a.FileType == XfsFileType.Directory)
        {
            attributes |= WindowsFileAttributes.Directory;
        }
        else
        {
            if ((a.Mode & 0x80) == 0) attributes |= WindowsFileAttributes.ReadOnly; // no owner write bit
            if (a.FileType == XfsFileType.RegularFile || tag == 0)
            {
                info.FileSize = a.FileType == XfsFileType.RegularFile ? (ulong)Math.Max(0, a.Size) : 0;
                info.AllocationSize = a.FileType == XfsFileType.RegularFile ? (ulong)Math.Max(0, a.AllocatedBytes) : 0;
            }
        }
        if (tag != 0)
        {
            attributes |= WindowsFileAttributes.ReparsePoint;
            if (symlinkIsDirectory) attributes |= WindowsFileAttributes.Directory;
        }
        if (_options.HideDotFiles && WindowsNames.IsDotFile(name)) attributes |= WindowsFileAttributes.Hidden;
        if (attributes == 0) attributes = WindowsFileAttributes.Normal;

        info.FileAttributes = (uint)attributes;
        info.ReparseTag = tag;
        info.CreationTime = ToFileTime(a.CreationTime ?? a.ChangeTime);
        info.LastAccessTime = ToFileTime(a.AccessTime);
        info.LastWriteTime = ToFileTime(a.ModifyTime);
        info.ChangeTime = ToFileTime(a.ChangeTime);
        info.IndexNumber = a.Inode;
        info.HardLinks = a.LinkCount;
        info.EaSize = eaSize;
        return info;
    }

    /// <summary>Whether a symlink (in <paramref name="directory"/>, below <paramref name="ancestors"/>) points at a directory of this volume.</summary>
    private bool SymlinkTargetIsDirectory(ulong link, ulong directory, IReadOnlyList<ulong> ancestors)
    {
        try
        {
            var chain = new List<ulong>(ancestors) { directory };
            int budget = MaxSymlinkFollows;
            return ResolveWithin(link, chain, ref budget) is { } target &&
                   _volume.GetAttributes(target).FileType == XfsFileType.Directory;
        }
        catch (XfsException)
        {
            return false; // dangling, looping or unreadable: a file symlink
        }
    }

    /// <summary>Follows a symlink inside the volume; <paramref name="chain"/> is root..link's directory. Null when it leaves or dangles.</summary>
    private ulong? ResolveWithin(ulong link, List<ulong> chain, ref int budget)
    {
        if (--budget < 0) return null;
        byte[] target = _volume.ReadLink(link);
        var dirs = target.Length > 0 && target[0] == '/' ? new List<ulong> { _root } : new List<ulong>(chain);
        ulong current = dirs[^1];
        var parts = target.AsSpan();
        foreach (var range in parts.Split((byte)'/'))
        {
            var c = parts[range];
            if (c.IsEmpty || c.SequenceEqual("."u8)) continue;
            if (c.SequenceEqual(".."u8))
            {
                if (dirs.Count > 1) dirs.RemoveAt(dirs.Count - 1);
                current = dirs[^1];
                continue;
            }
            if (_volume.GetAttributes(current).FileType != XfsFileType.Directory) return null;
            if (!_volume.TryLookup(current, c, out ulong next)) return null;
            var type = _volume.GetAttributes(next).FileType;
            if (type == XfsFileType.Symlink)
            {
                if (ResolveWithin(next, dirs, ref budget) is not { } resolved) return null;
                next = resolved;
                type = _volume.GetAttributes(next).FileType;
            }
            if (type == XfsFileType.Directory) dirs.Add(next);
            current = next;
        }
        return current;
    }

    private uint EaSize(ulong inode)
    {
        if (!_options.ExtendedAttributes) return 0;
        uint size = 0;
        foreach (var x in _volume.ListXattrs(inode))
            if (x.Namespace == XattrNamespace.User && IsVisibleEa(x.Name))
                size += ExtendedAttributes.PackedSize(x.Name.Length, x.ValueLength);
        return size;
    }

    private static bool IsVisibleEa(ReadOnlySpan<byte> name) =>
        ExtendedAttributes.IsValidEaName(name) && !name.StartsWith("$LX"u8) && name.Length <= ExtendedAttributes.MaxNameLength;

    private FileInformation InfoFor(OpenFile file)
    {
        bool dirLink = file.Attributes.FileType == XfsFileType.Symlink &&
                       SymlinkTargetIsDirectory(file.Inode, file.Ancestors[^1], file.Ancestors[..^1]);
        return MakeFileInformation(file.Attributes, file.Name, dirLink, EaSize(file.Inode));
    }

    // ---------------------------------------------------------------- security

    /// <summary>
    /// The self-relative security descriptor of an inode: owner, group, mode and its POSIX access ACL; a directory's
    /// default ACL as inherit-only ACEs (see <see cref="SecurityDescriptors.InheritableAces"/>).
    /// </summary>
    public byte[] SecurityDescriptorFor(in InodeAttributes a)
    {
        PosixAcl? acl = null, defaultAcl = null;
        if (_volume.TryGetXattr(a.Inode, XattrNamespace.Trusted, AclAttributeName, out var aclValue))
            acl = PosixAcl.ParseXfs(aclValue);
        if (a.FileType == XfsFileType.Directory && _volume.TryGetXattr(a.Inode, XattrNamespace.Trusted, DefaultAclAttributeName, out var defaultValue))
            defaultAcl = PosixAcl.ParseXfs(defaultValue);
        if (acl is not null || defaultAcl is not null)
            return SecurityDescriptors.Build(_ids.OwnerSid(a.Uid), _ids.GroupSid(a.Gid), a.Mode, acl, _ids, defaultAcl);
        return _plainSecurity.GetOrAdd((a.Uid, a.Gid, a.Mode), static (k, ids) =>
            SecurityDescriptors.Build(ids.OwnerSid(k.Uid), ids.GroupSid(k.Gid), k.Mode), _ids);
    }

    /// <summary>
    /// WinFsp's GetSecurityByName: attributes and security of a path before it is opened. When an
    /// intermediate component is a reparse point it returns STATUS_REPARSE with that component's char
    /// index in <paramref name="fileAttributesOrReparseIndex"/>.
    /// </summary>
    public int GetSecurityByName(ReadOnlySpan<char> fileName, out uint fileAttributesOrReparseIndex, out byte[]? securityDescriptor, bool wantSecurity = true)
    {
        fileAttributesOrReparseIndex = 0;
        securityDescriptor = null;
        try
        {
            var walk = WalkPath(fileName, stopAtReparse: true);
            if (walk.Status == NtStatus.Reparse)
            {
                fileAttributesOrReparseIndex = (uint)walk.ReparseIndex;
                return NtStatus.Reparse;
            }
            if (walk.Status != NtStatus.Success) return walk.Status;
            bool dirLink = walk.Attributes.FileType == XfsFileType.Symlink &&
                           SymlinkTargetIsDirectory(walk.Inode, walk.Ancestors[^1], walk.Ancestors[..^1]);
            fileAttributesOrReparseIndex = MakeFileInformation(walk.Attributes, walk.Name, dirLink).FileAttributes;
            if (wantSecurity) securityDescriptor = SecurityDescriptorFor(walk.Attributes);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    public int GetSecurity(OpenFile file, out byte[]? securityDescriptor)
    {
        try
        {
            securityDescriptor = SecurityDescriptorFor(file.Attributes);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            securityDescriptor = null;
            return NtStatus.FromException(e);
        }
    }


    // ---------------------------------------------------------------- open / close

    public const uint FileDirectoryFile = 0x1;
    public const uint FileNonDirectoryFile = 0x40;

    /// <summary>WinFsp's Open. The volume is read-only: the kernel refuses write access before this is called.</summary>
    public int Open(ReadOnlySpan<char> fileName, uint createOptions, uint grantedAccess, out OpenFile? file, out FileInformation info)
    {
        file = null;
        info = default;
        try
        {
            var walk = WalkPath(fileName, stopAtReparse: false);
            if (walk.Status != NtStatus.Success) return walk.Status;
            bool isDirectory = walk.Attributes.FileType == XfsFileType.Directory;
            if ((createOptions & FileDirectoryFile) != 0 && !isDirectory && walk.Attributes.FileType != XfsFileType.Symlink)
                return NtStatus.NotADirectory;
            if ((createOptions & FileNonDirectoryFile) != 0 && isDirectory)
                return NtStatus.FileIsADirectory;
            file = new OpenFile(walk.Inode, walk.Attributes, walk.Name, [.. walk.Ancestors], fileName.ToString())
            {
                NormalizedPath = walk.Normalized is { Length: > 0 } n ? n.ToString() : walk.Normalized is not null ? "\\" : null,
            };
            // What Windows asks about an open file is computed here; a read-write mount refreshes it after each change.
            file.Information = InfoFor(file);
            info = file.Information;
            Hold(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            file = null;
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- data

    /// <summary>WinFsp's Read: up to <paramref name="buffer"/>.Length bytes at <paramref name="offset"/>; STATUS_END_OF_FILE at or past the end.</summary>
    public int Read(OpenFile file, Span<byte> buffer, ulong offset, out int bytesTransferred)
    {
        bytesTransferred = 0;
        try
        {
            if (file.IsDirectory) return NtStatus.InvalidDeviceRequest;
            // Read-write: another open may have moved EOF since this one last looked.
            long size = _options.ReadWrite ? _volume.GetAttributes(file.Inode).Size : file.Attributes.Size;
            if (offset >= (ulong)Math.Max(0, size)) return NtStatus.EndOfFile;
            bytesTransferred = _volume.Read(file.Inode, (long)offset, buffer);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// WinFsp's GetFileInfo: on a read-only mount the information computed at open; on a read-write one the
    /// inode's current attributes (another open may have changed them).
    /// </summary>
    public int GetFileInfo(OpenFile file, out FileInformation info)
    {
        if (!_options.ReadWrite)
        {
            info = file.Information;
            return NtStatus.Success;
        }
        try
        {
            info = Refresh(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            info = file.Information;
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- directories

    /// <summary>
    /// WinFsp's ReadDirectory. Entries go to <paramref name="sink"/> in XFS directory order with
    /// NextOffset = the XFS cookie after each entry; it stops when the sink is full and resumes from
    /// <paramref name="marker"/> (a cookie, or the last name: matched against the name this open
    /// last returned, else found by one scan). "." and ".." are listed except in the root.
    /// The search pattern is applied by the WinFsp kernel driver (PassQueryDirectoryPattern is off).
    /// </summary>
    public int ReadDirectory<TSink>(OpenFile directory, DirectoryMarker marker, ref TSink sink) where TSink : IDirInfoSink
    {
        if (!directory.IsDirectory) return NtStatus.NotADirectory;
        try
        {
            long cookie = 0;
            bool skipUntilName = false;
            Span<byte> markerBytes = stackalloc byte[WindowsNames.MaxXfsNameBytes * 4];
            int markerLength = 0;
            if (marker.HasOffset)
            {
                if (marker.Offset == EndOfDirectoryOffset || marker.Offset > long.MaxValue)
                {
                    sink.End();
                    return NtStatus.Success;
                }
                cookie = (long)marker.Offset;
            }
            // One listing at a time per open directory: the resume state below belongs to it.
            lock (directory.MarkerGate)
            {
                if (marker.HasName)
                {
                    markerLength = MarkerNameBytes(marker.Name, markerBytes);
                    if (markerLength < 0) return NtStatus.ObjectNameInvalid;
                    if (directory.LastNameLength == markerLength &&
                        directory.LastName.AsSpan(0, markerLength).SequenceEqual(markerBytes[..markerLength]))
                        cookie = directory.LastNextCookie;
                    else
                        skipUntilName = true;
                }

                var visitor = new ListingVisitor<TSink>(this, directory, sink, skipUntilName ? markerBytes[..markerLength].ToArray() : null);
                _volume.ReadDirectory(directory.Inode, cookie, ref visitor);
                sink = visitor.Sink;
                if (visitor.Error is { } error) throw error;
                if (!visitor.Full) sink.End();
                if (visitor.LastLength >= 0)
                {
                    visitor.LastName.AsSpan(0, visitor.LastLength).CopyTo(directory.LastName);
                    directory.LastNameLength = visitor.LastLength;
                    directory.LastNextCookie = visitor.LastCookie;
                }
            }
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>The marker name as XFS bytes ("." and ".." as themselves).</summary>
    private static int MarkerNameBytes(ReadOnlySpan<char> name, Span<byte> bytes)
    {
        if (name is ".") { bytes[0] = (byte)'.'; return 1; }
        if (name is "..") { bytes[0] = bytes[1] = (byte)'.'; return 2; }
        return WindowsNames.Decode(name, bytes);
    }

    private struct ListingVisitor<TSink>(XfsWindowsFileSystem fs, OpenFile directory, TSink sink, byte[]? skipUntil) : IDirectoryVisitor
        where TSink : IDirInfoSink
    {
        public TSink Sink = sink;
        public bool Full;
        public Exception? Error;
        public byte[] LastName = directory.PendingName;
        public int LastLength = -1;
        public long LastCookie;
        private byte[]? _skipUntil = skipUntil;
        private readonly bool _isRoot = directory.Inode == fs._root;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            Interlocked.Increment(ref fs._entriesVisited);
            if (_skipUntil is not null)
            {
                if (name.SequenceEqual(_skipUntil)) _skipUntil = null;
                return true;
            }
            bool dots = WindowsNames.IsDotOrDotDot(name);
            if (dots && _isRoot) return true;
            try
            {
                var attributes = fs._volume.GetAttributes(inode);
                bool dirLink = attributes.FileType == XfsFileType.Symlink &&
                               fs.SymlinkTargetIsDirectory(inode, directory.Inode, directory.Ancestors);
                var info = fs.MakeFileInformation(attributes, name, dirLink);
                Span<char> winName = stackalloc char[WindowsNames.MaxWindowsNameChars];
                int n = WindowsNames.Encode(name, winName);
                if (!Sink.Add(info, winName[..n], (ulong)nextCookie))
                {
                    Full = true;
                    return false;
                }
                name.CopyTo(LastName);
                LastLength = name.Length;
                LastCookie = nextCookie;
                return true;
            }
            catch (Exception e)
            {
                Error = e;
                return false;
            }
        }
    }

    /// <summary>WinFsp's GetDirInfoByName: one entry of a directory by name (PassQueryDirectoryFileName).</summary>
    public int GetDirInfoByName(OpenFile directory, ReadOnlySpan<char> fileName, out FileInformation info, Span<char> name, out int nameLength)
    {
        info = default;
        nameLength = 0;
        try
        {
            if (!directory.IsDirectory) return NtStatus.NotADirectory;
            Span<byte> bytes = stackalloc byte[WindowsNames.MaxXfsNameBytes * 4];
            if (!LookupComponent(directory.Inode, fileName, bytes, out ulong inode, out int length))
                return NtStatus.ObjectNameNotFound;
            var attributes = _volume.GetAttributes(inode);
            bool dirLink = attributes.FileType == XfsFileType.Symlink && SymlinkTargetIsDirectory(inode, directory.Inode, directory.Ancestors);
            info = MakeFileInformation(attributes, bytes[..length], dirLink);
            nameLength = WindowsNames.Encode(bytes[..length], name);
            return nameLength < 0 ? NtStatus.BufferTooSmall : NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- reparse points

    /// <summary>WinFsp's GetReparsePoint: the REPARSE_DATA_BUFFER of an open symlink or special file.</summary>
    public int GetReparsePoint(OpenFile file, Span<byte> buffer, out int size) =>
        ReparsePointOf(file.Inode, file.Attributes, file.ParentDepth, buffer, out size);

    /// <summary>
    /// The reparse buffer for a path (WinFsp's GetReparsePointByName, used while it resolves paths
    /// through symlinks). STATUS_NOT_A_REPARSE_POINT for ordinary files and directories.
    /// </summary>
    public int GetReparsePointByName(ReadOnlySpan<char> fileName, Span<byte> buffer, out int size)
    {
        size = 0;
        try
        {
            var walk = WalkPath(fileName, stopAtReparse: false);
            if (walk.Status != NtStatus.Success) return walk.Status;
            return ReparsePointOf(walk.Inode, walk.Attributes, walk.Ancestors.Count - 1, buffer, out size);
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    private int ReparsePointOf(ulong inode, in InodeAttributes a, int parentDepth, Span<byte> buffer, out int size)
    {
        size = 0;
        try
        {
            uint tag = ReparseTags.ForFileType(a.FileType, _options.LxSpecialFiles);
            if (tag == 0) return NtStatus.NotAReparsePoint;
            int written;
            if (tag == ReparseTags.Symlink)
            {
                var (path, relative) = ReparseData.TranslateTarget(_volume.ReadLink(inode), Math.Max(0, parentDepth),
                    _options.AbsoluteSymlinks, MountPoint);
                string print = path.StartsWith(@"\??\", StringComparison.Ordinal) ? path[4..] : path;
                written = ReparseData.WriteSymlink(buffer, path, print, relative);
            }
            else
            {
                written = ReparseData.WriteEmpty(buffer, tag);
            }
            if (written < 0)
            {
                size = -written;
                return NtStatus.BufferTooSmall;
            }
            size = written;
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- extended attributes

    /// <summary>
    /// WinFsp's GetEa: user.* xattrs as FILE_FULL_EA_INFORMATION, in the volume's order, plus (unless
    /// <c>--no-lx</c>) WSL's $LXUID, $LXGID, $LXMOD (and $LXDEV for devices) so WSL sees Linux ownership.
    /// Stops quietly when the buffer is full, as FspFileSystemAddEa does.
    /// </summary>
    public int GetEa(OpenFile file, Span<byte> buffer, out int bytesTransferred)
    {
        bytesTransferred = 0;
        if (!_options.ExtendedAttributes) return NtStatus.EasNotSupported;
        try
        {
            int used = 0;
            foreach (var x in _volume.ListXattrs(file.Inode))
            {
                if (x.Namespace != XattrNamespace.User || !IsVisibleEa(x.Name) || x.ValueLength > ExtendedAttributes.MaxValueLength) continue;
                if (!_volume.TryGetXattr(file.Inode, XattrNamespace.User, x.Name, out var value)) continue;
                if (!ExtendedAttributes.Append(buffer, ref used, x.Name, value)) goto done;
            }
            if (!_options.LxSpecialFiles) goto done;
            Span<byte> v = stackalloc byte[8];
            var a = file.Attributes;
            BinaryPrimitives.WriteUInt32LittleEndian(v, a.Uid);
            if (!ExtendedAttributes.Append(buffer, ref used, "$LXUID"u8, v[..4])) goto done;
            BinaryPrimitives.WriteUInt32LittleEndian(v, a.Gid);
            if (!ExtendedAttributes.Append(buffer, ref used, "$LXGID"u8, v[..4])) goto done;
            BinaryPrimitives.WriteUInt32LittleEndian(v, a.Mode);
            if (!ExtendedAttributes.Append(buffer, ref used, "$LXMOD"u8, v[..4])) goto done;
            if (a.FileType is XfsFileType.CharacterDevice or XfsFileType.BlockDevice)
            {
                BinaryPrimitives.WriteUInt32LittleEndian(v, a.DeviceMajor);
                BinaryPrimitives.WriteUInt32LittleEndian(v[4..], a.DeviceMinor);
                if (!ExtendedAttributes.Append(buffer, ref used, "$LXDEV"u8, v)) goto done;
            }
        done:
            ExtendedAttributes.Finish(buffer, used);
            bytesTransferred = used;
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }
}

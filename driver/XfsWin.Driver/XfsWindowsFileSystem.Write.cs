using System.Buffers.Binary;
using System.Text;
using XfsWin.Attributes;
using XfsWin.Driver.Semantics;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Driver;

// The write callbacks. On a read-only mount every one answers STATUS_MEDIA_WRITE_PROTECTED (WinFsp's
// ReadOnlyVolume flag makes the kernel refuse most of them before they get here). On a read-write mount each
// translates one Windows request into engine calls; every engine call is its own logged transaction, so a
// request that fails part-way has changed nothing or only what it reports.
public sealed partial class XfsWindowsFileSystem
{
    public const uint InvalidFileAttributes = 0xFFFFFFFF;
    public const uint CleanupDelete = 0x01;
    public const uint SecurityOwner = 0x1, SecurityGroup = 0x2, SecurityDacl = 0x4;

    private const ushort TypeRegular = 0x8000, TypeFifo = 0x1000, TypeCharDevice = 0x2000, TypeBlockDevice = 0x6000, TypeSocket = 0xC000;
    private const ushort WriteBits = 0x92; // 0222
    /// <summary>
    /// What new files and directories get at most from their DACL (Samba's "create mask" 0744 and "directory mask"
    /// 0755: the owner keeps execute, so programs copied from Windows run), and what they get without one.
    /// </summary>
    private const uint FileCreateMask = 0x1E4, DirectoryCreateMask = 0x1ED; // 0744, 0755
    private const uint FileDefaultMode = 0x1A4; // 0644
    private static readonly byte[] LxUid = "$LXUID"u8.ToArray(), LxGid = "$LXGID"u8.ToArray(), LxMod = "$LXMOD"u8.ToArray(), LxDev = "$LXDEV"u8.ToArray();

    private int ReadOnlyStatus => NtStatus.MediaWriteProtected;

    // ---------------------------------------------------------------- open handles

    /// <summary>A read-write open holds its inode, so an unlink while it is open frees it only at Close.</summary>
    private void Hold(OpenFile file)
    {
        if (!_options.ReadWrite || file.Held) return;
        _volume.Retain(file.Inode);
        file.Held = true;
    }

    /// <summary>WinFsp's Close: releases the open's hold (an unlinked inode without other holds is freed now).</summary>
    public void Close(OpenFile file)
    {
        if (!file.Held) return;
        file.Held = false;
        try { _volume.Release(file.Inode); }
        catch (ObjectDisposedException) { /* the volume was unmounted first: nothing to release */ }
    }

    /// <summary>
    /// WinFsp's Cleanup (the last handle of this open closed). With <see cref="CleanupDelete"/> (delete-on-close, or
    /// a POSIX delete) the name goes now; the inode stays while other opens hold it.
    /// </summary>
    public void Cleanup(OpenFile file, ReadOnlySpan<char> fileName, uint flags)
    {
        if (!_options.ReadWrite || (flags & CleanupDelete) == 0 || file.Unlinked || file.Ancestors.Length == 0) return;
        ulong parent = file.Ancestors[^1];
        // Only the name this open reached, and only while it still names this inode.
        if (!_volume.TryLookup(parent, file.Name, out ulong current) || current != file.Inode) return;
        if (file.IsDirectory) _volume.RemoveDirectory(parent, file.Name);
        else _volume.Unlink(parent, file.Name);
        file.Unlinked = true;
    }

    /// <summary>
    /// Re-reads the open's inode and its FILE_INFO (a directory symlink stays one; EaSize as last computed unless
    /// <paramref name="eaSize"/> gives the new one).
    /// </summary>
    private FileInformation Refresh(OpenFile file, uint? eaSize = null)
    {
        var a = _volume.GetAttributes(file.Inode);
        lock (file.InfoGate)
        {
            file.Attributes = a;
            bool dirLink = a.FileType == XfsFileType.Symlink && file.Information.IsDirectory;
            file.Information = MakeFileInformation(a, file.Name, dirLink, eaSize ?? file.Information.EaSize);
            return file.Information;
        }
    }

    // ---------------------------------------------------------------- create, overwrite

    public const uint FileAttributeReadOnly = (uint)WindowsFileAttributes.ReadOnly;

    /// <summary>
    /// WinFsp's Create (and CreateEx): a new file, or a directory with FILE_DIRECTORY_FILE. The security descriptor's
    /// owner and group become uid and gid (through the identity map; the mounting user is <c>--uid</c>/<c>--gid</c>),
    /// its DACL the permission bits (at most 0744 for files and 0755 for directories; 0644/0755 without a DACL);
    /// FILE_ATTRIBUTE_READONLY removes the write bits; EAs become user.* xattrs. In a directory with a default POSIX ACL
    /// the new file or directory gets the ACLs and the mode Linux gives an inode created with that mode there.
    /// STATUS_OBJECT_NAME_COLLISION when the name exists (on case-insensitive mounts also in another case).
    /// </summary>
    public int Create(ReadOnlySpan<char> fileName, uint createOptions, uint grantedAccess, uint fileAttributes,
        ReadOnlySpan<byte> securityDescriptor, ulong allocationSize, ReadOnlySpan<byte> extendedAttributes,
        out OpenFile? file, out FileInformation info)
    {
        file = null;
        info = default;
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            int status = ResolveParent(fileName, out var parent, out var name);
            if (status != NtStatus.Success) return status;
            Span<byte> scratch = stackalloc byte[WindowsNames.MaxXfsNameBytes * 4];
            if (LookupComponent(parent.Inode, WindowsNames.EncodeToString(name), scratch, out _, out _))
                return NtStatus.ObjectNameCollision;

            bool directory = (createOptions & FileDirectoryFile) != 0;
            uint uid = _ids.CreatorUid, gid = _ids.CreatorGid;
            uint mode = directory ? DirectoryCreateMask : FileDefaultMode;
            if (!securityDescriptor.IsEmpty)
            {
                var sd = ParseDescriptor(securityDescriptor);
                if (sd is null) return NtStatus.InvalidSecurityDescriptor;
                if (sd.Owner is { } o) uid = _ids.UidOf(o) ?? uid;
                if (sd.Group is { } g) gid = _ids.GidOf(g) ?? gid;
                if ((sd.Control & SecurityDescriptors.SeDaclPresent) != 0)
                    mode = (directory ? DirectoryCreateMask : FileCreateMask) & SecurityDescriptors.ModeFromDacl(sd.Dacl, sd.Owner ?? _ids.OwnerSid(uid), sd.Group ?? _ids.GroupSid(gid));
            }
            if (!directory && (fileAttributes & FileAttributeReadOnly) != 0) mode &= ~(uint)WriteBits;

            // A directory with a default POSIX ACL gives the new inode its ACLs and masks its mode, as Linux does for the
            // mode a Linux program asks for (the mode from the descriptor or the defaults stands for that request).
            var inherit = _volume.InheritAcls(parent.Inode, (ushort)((directory ? 0x4000u : TypeRegular) | mode), umask: 0);
            var created = directory
                ? _volume.MakeDirectory(parent.Inode, name, (ushort)(inherit.Mode & 0xFFF), uid, gid)
                : _volume.CreateNode(parent.Inode, name, inherit.Mode, uid, gid);
            created = _volume.SetInheritedAcls(parent.Inode, name, created, inherit);
            var opened = new OpenFile(created.Inode, created, name, [.. parent.Ancestors, parent.Inode],
                fileName.ToString())
            {
                NormalizedPath = parent.Normalized is { } n ? n.Append('\\').Append(WindowsNames.EncodeToString(name)).ToString() : null,
            };
            Hold(opened);
            try
            {
                if (!directory && allocationSize > 0)
                    _volume.Allocate(created.Inode, 0, (long)Math.Min(allocationSize, long.MaxValue), FallocateMode.KeepSize);
                if (!extendedAttributes.IsEmpty)
                {
                    status = ApplyEas(opened, extendedAttributes);
                    if (status != NtStatus.Success) throw new EaRefused(status);
                }
            }
            catch (Exception)
            {
                // Nothing half-made stays behind: the new name goes, and Close frees the inode.
                if (directory) _volume.RemoveDirectory(parent.Inode, name);
                else _volume.Unlink(parent.Inode, name);
                Close(opened);
                throw;
            }
            opened.Information = MakeFileInformation(_volume.GetAttributes(created.Inode), name, false, EaSize(created.Inode));
            opened.Attributes = _volume.GetAttributes(created.Inode);
            file = opened;
            info = opened.Information;
            return NtStatus.Success;
        }
        catch (EaRefused e)
        {
            return e.Status;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    private sealed class EaRefused(int status) : Exception
    {
        public int Status { get; } = status;
    }

    /// <summary>Where a new name goes: the parent directory (walked like any path) and the name as XFS bytes.</summary>
    private struct ParentDirectory
    {
        public ulong Inode;
        public List<ulong> Ancestors;
        public System.Text.StringBuilder? Normalized;
    }

    /// <summary>
    /// Splits "\a\b\name" into the directory \a\b and the XFS bytes of "name". Names XFS cannot hold (unpaired
    /// surrogates, longer than 255 bytes, non-canonical escapes) and stream names ("name:stream") are
    /// STATUS_OBJECT_NAME_INVALID.
    /// </summary>
    private int ResolveParent(ReadOnlySpan<char> path, out ParentDirectory parent, out byte[] name)
    {
        parent = default;
        name = [];
        var trimmed = path.TrimEnd('\\');
        int slash = trimmed.LastIndexOf('\\');
        var last = trimmed[(slash + 1)..];
        if (last.IsEmpty) return NtStatus.ObjectNameInvalid;
        if (last.IndexOf(':') >= 0) return NtStatus.ObjectNameInvalid; // alternate data streams do not exist on XFS
        var bytes = last.Length <= WindowsNames.MaxWindowsNameChars ? WindowsNames.DecodeToBytes(last) : null;
        if (bytes is null || WindowsNames.IsDotOrDotDot(bytes)) return NtStatus.ObjectNameInvalid;
        var walk = WalkPath(slash <= 0 ? "\\" : trimmed[..slash], stopAtReparse: false);
        if (walk.Status != NtStatus.Success)
            return walk.Status == NtStatus.ObjectNameNotFound ? NtStatus.ObjectPathNotFound : walk.Status;
        if (walk.Attributes.FileType != XfsFileType.Directory) return NtStatus.ObjectPathNotFound;
        parent = new ParentDirectory { Inode = walk.Inode, Ancestors = walk.Ancestors, Normalized = walk.Normalized };
        name = bytes;
        return NtStatus.Success;
    }

    private static ParsedSecurityDescriptor? ParseDescriptor(ReadOnlySpan<byte> sd)
    {
        try { return SecurityDescriptors.Parse(sd); }
        catch (FormatException) { return null; }
    }

    /// <summary>
    /// WinFsp's Overwrite (FILE_OVERWRITE, FILE_OVERWRITE_IF, FILE_SUPERSEDE on an existing file): EAs given replace
    /// the ones Windows sees (checked and applied first: a refused list changes nothing); then the data goes (size 0,
    /// blocks freed); FILE_ATTRIBUTE_READONLY in <paramref name="fileAttributes"/> sets or (when
    /// <paramref name="replaceFileAttributes"/>) replaces the read-only state.
    /// </summary>
    public int Overwrite(OpenFile file, uint fileAttributes, bool replaceFileAttributes, ulong allocationSize,
        ReadOnlySpan<byte> extendedAttributes, out FileInformation info)
    {
        info = file.Information;
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            if (file.IsDirectory) return NtStatus.FileIsADirectory;
            uint? eaSize = null;
            if (!extendedAttributes.IsEmpty)
            {
                if (!_options.ExtendedAttributes) return NtStatus.EasNotSupported;
                int status = ApplyEas(file, extendedAttributes, replaceVisible: true);
                if (status != NtStatus.Success) return status;
                eaSize = EaSize(file.Inode);
            }
            var a = _volume.GetAttributes(file.Inode);
            ushort mode = (ushort)(a.Mode & 0xFFF);
            bool readOnly = (fileAttributes & FileAttributeReadOnly) != 0;
            if (readOnly) mode = (ushort)(mode & ~WriteBits);
            else if (replaceFileAttributes && (mode & 0x80) == 0) mode |= 0x80;
            _volume.SetAttributes(file.Inode, new AttributeChanges { Size = 0, Mode = mode == (a.Mode & 0xFFF) ? null : mode });
            if (allocationSize > 0)
                _volume.Allocate(file.Inode, 0, (long)Math.Min(allocationSize, long.MaxValue), FallocateMode.KeepSize);
            info = Refresh(file, eaSize);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- data

    /// <summary>
    /// WinFsp's Write. <paramref name="writeToEndOfFile"/> appends (offset -1 / FILE_WRITE_TO_END_OF_FILE);
    /// <paramref name="constrainedIo"/> (paging I/O) never moves EOF: nothing is written at or past it and a write
    /// that crosses it is cut there.
    /// </summary>
    public int Write(OpenFile file, ReadOnlySpan<byte> buffer, ulong offset, bool writeToEndOfFile, bool constrainedIo,
        out int bytesTransferred, out FileInformation info)
    {
        bytesTransferred = 0;
        info = file.Information;
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            if (file.IsDirectory) return NtStatus.InvalidDeviceRequest;
            long size = _volume.GetAttributes(file.Inode).Size;
            if (writeToEndOfFile) offset = (ulong)size;
            if (offset > long.MaxValue) return NtStatus.InvalidParameter;
            if (constrainedIo)
            {
                if ((long)offset >= size)
                {
                    info = Refresh(file);
                    return NtStatus.Success;
                }
                buffer = buffer[..(int)Math.Min(buffer.Length, size - (long)offset)];
            }
            // A quota limit inside the range refuses the whole write (STATUS_DISK_QUOTA_EXCEEDED, nothing written), as
            // NTFS does: a Windows program takes a successful WriteFile as all of it written.
            bytesTransferred = _volume.Write(file.Inode, (long)offset, buffer, shortAtQuotaLimit: false);
            info = Refresh(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// WinFsp's SetFileSize. The file size: truncate or extend (the new range reads as zeros). The allocation size:
    /// below the file size it cuts the file there (as NTFS does); above what is allocated it preallocates
    /// (fallocate with KEEP_SIZE).
    /// </summary>
    public int SetFileSize(OpenFile file, ulong newSize, bool setAllocationSize, out FileInformation info)
    {
        info = file.Information;
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            if (file.IsDirectory) return NtStatus.FileIsADirectory;
            if (newSize > long.MaxValue) return NtStatus.InvalidParameter;
            var a = _volume.GetAttributes(file.Inode);
            if (!setAllocationSize)
            {
                if ((long)newSize != a.Size) _volume.SetAttributes(file.Inode, new AttributeChanges { Size = (long)newSize });
            }
            else if ((long)newSize < a.Size)
            {
                _volume.SetAttributes(file.Inode, new AttributeChanges { Size = (long)newSize });
            }
            else if ((long)newSize > a.AllocatedBytes && newSize > 0)
            {
                _volume.Allocate(file.Inode, 0, (long)newSize, FallocateMode.KeepSize);
            }
            info = Refresh(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>FILETIME (100 ns since 1601) → an XFS timestamp.</summary>
    internal static XfsTimestamp FromFileTime(ulong fileTime)
    {
        long ticks = (long)Math.Min(fileTime, long.MaxValue) - 116444736000000000L;
        long seconds = Math.DivRem(ticks, TimeSpan.TicksPerSecond, out long rest);
        if (rest < 0) { seconds--; rest += TimeSpan.TicksPerSecond; }
        return new XfsTimestamp(seconds, (uint)(rest * 100));
    }

    private static bool IsTimeGiven(ulong t) => t != 0 && t < ulong.MaxValue - 1; // 0: unchanged; -1/-2: WinFsp's "stop/resume updating"

    /// <summary>
    /// WinFsp's SetBasicInfo. Last access and last write times become atime and mtime (change time follows the
    /// change, as on Linux; the creation time is fixed when XFS creates the inode). FILE_ATTRIBUTE_READONLY on a
    /// file removes every write bit; clearing it gives the owner write back. Other attributes have no XFS form and
    /// are accepted unchanged.
    /// </summary>
    public int SetBasicInfo(OpenFile file, uint fileAttributes, ulong creationTime, ulong lastAccessTime, ulong lastWriteTime,
        ulong changeTime, out FileInformation info)
    {
        info = file.Information;
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            var a = _volume.GetAttributes(file.Inode);
            ushort? mode = null;
            if (fileAttributes != InvalidFileAttributes && a.FileType != XfsFileType.Directory && a.FileType != XfsFileType.Symlink)
            {
                ushort current = (ushort)(a.Mode & 0xFFF);
                ushort wanted = (fileAttributes & FileAttributeReadOnly) != 0 ? (ushort)(current & ~WriteBits)
                    : (current & 0x80) == 0 ? (ushort)(current | 0x80) : current;
                if (wanted != current) mode = wanted;
            }
            var changes = new AttributeChanges
            {
                Mode = mode,
                AccessTime = IsTimeGiven(lastAccessTime) ? FromFileTime(lastAccessTime) : null,
                ModifyTime = IsTimeGiven(lastWriteTime) ? FromFileTime(lastWriteTime) : null,
            };
            if (changes.Mode is not null || changes.AccessTime is not null || changes.ModifyTime is not null)
                _volume.SetAttributes(file.Inode, changes);
            info = Refresh(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>WinFsp's Flush: the file's data and the log reach the disk (a null file: the whole volume).</summary>
    public int Flush(OpenFile? file, out FileInformation info)
    {
        info = file?.Information ?? default;
        if (!_options.ReadWrite) return NtStatus.Success;
        try
        {
            if (file is null) _volume.Sync();
            else
            {
                _volume.Flush(file.Inode);
                info = Refresh(file);
            }
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- delete, rename

    /// <summary>WinFsp's CanDelete: the root cannot go; a directory must be empty.</summary>
    public int CanDelete(OpenFile file, ReadOnlySpan<char> fileName)
    {
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            if (file.Inode == _root || file.Ancestors.Length == 0) return NtStatus.CannotDelete;
            if (file.IsDirectory && !IsEmptyDirectory(file.Inode)) return NtStatus.DirectoryNotEmpty;
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>WinFsp's SetDelete (FILE_DISPOSITION_INFORMATION[_EX]): checks as CanDelete; the name goes at Cleanup.</summary>
    public int SetDelete(OpenFile file, ReadOnlySpan<char> fileName, bool deleteFile) =>
        !_options.ReadWrite ? ReadOnlyStatus : deleteFile ? CanDelete(file, fileName) : NtStatus.Success;

    private bool IsEmptyDirectory(ulong inode)
    {
        var probe = new EmptyProbe();
        _volume.ReadDirectory(inode, 0, ref probe);
        return !probe.Found;
    }

    private struct EmptyProbe : Directories.IDirectoryVisitor
    {
        public bool Found;

        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (WindowsNames.IsDotOrDotDot(name)) return true;
            Found = true;
            return false;
        }
    }

    /// <summary>
    /// WinFsp's Rename. An existing target is STATUS_OBJECT_NAME_COLLISION unless <paramref name="replaceIfExists"/>;
    /// a directory is never replaced (STATUS_ACCESS_DENIED, as NTFS). Replacing a file that is open elsewhere is the
    /// POSIX rename: that open keeps the old file until it closes. On case-insensitive mounts renaming a name to
    /// another case of itself changes its case.
    /// </summary>
    public int Rename(OpenFile file, ReadOnlySpan<char> fileName, ReadOnlySpan<char> newFileName, bool replaceIfExists)
    {
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            if (file.Ancestors.Length == 0) return NtStatus.AccessDenied;
            ulong fromParent = file.Ancestors[^1];
            int status = ResolveParent(newFileName, out var to, out var newName);
            if (status != NtStatus.Success) return status;
            if (to.Inode == file.Inode || to.Ancestors.Contains(file.Inode)) return NtStatus.InvalidParameter; // into itself

            Span<byte> existing = stackalloc byte[WindowsNames.MaxXfsNameBytes * 4];
            bool sameEntry = false;
            if (LookupComponent(to.Inode, WindowsNames.EncodeToString(newName), existing, out ulong target, out int existingLength))
            {
                var stored = existing[..existingLength];
                sameEntry = to.Inode == fromParent && stored.SequenceEqual(file.Name);
                if (!sameEntry)
                {
                    if (!replaceIfExists) return NtStatus.ObjectNameCollision;
                    if (_volume.GetAttributes(target).FileType == XfsFileType.Directory) return NtStatus.AccessDenied;
                    if (!stored.SequenceEqual(newName))
                    {
                        // A case twin on a case-insensitive mount: it is the entry being replaced; its name goes first.
                        _volume.Unlink(to.Inode, stored);
                    }
                }
            }
            if (sameEntry && newName.AsSpan().SequenceEqual(file.Name)) return NtStatus.Success;
            _volume.Rename(fromParent, file.Name, to.Inode, newName, sameEntry || !replaceIfExists ? RenameFlags.NoReplace : RenameFlags.None);
            file.Ancestors = [.. to.Ancestors, to.Inode];
            file.Name = newName;
            file.Path = newFileName.ToString();
            Refresh(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    // ---------------------------------------------------------------- security

    /// <summary>
    /// WinFsp's SetSecurity: the owner and group SIDs become uid and gid (an owner that maps to no uid is
    /// STATUS_INVALID_OWNER; the SID a file already shows keeps its uid), the DACL the rwx bits of owner, group and
    /// others (setuid, setgid and sticky are kept); ACEs for other SIDs that map to ids become a POSIX access ACL. On a
    /// directory the ACEs its children inherit become its default ACL (see <see cref="WriteDefaultAcl"/>).
    /// </summary>
    public int SetSecurity(OpenFile file, uint securityInformation, ReadOnlySpan<byte> modificationDescriptor)
    {
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            var sd = ParseDescriptor(modificationDescriptor);
            if (sd is null) return NtStatus.InvalidSecurityDescriptor;
            var a = _volume.GetAttributes(file.Inode);
            uint uid = a.Uid, gid = a.Gid;
            Sid ownerSid = _ids.OwnerSid(a.Uid), groupSid = _ids.GroupSid(a.Gid);
            if ((securityInformation & SecurityOwner) != 0 && sd.Owner is { } owner && owner != ownerSid)
            {
                if (_ids.UidOf(owner) is not { } u) return NtStatus.InvalidOwner;
                uid = u;
                ownerSid = owner;
            }
            if ((securityInformation & SecurityGroup) != 0 && sd.Group is { } group && group != groupSid)
            {
                if (_ids.GidOf(group) is not { } g) return NtStatus.InvalidPrimaryGroup;
                gid = g;
                groupSid = group;
            }
            ushort? mode = null;
            if ((securityInformation & SecurityDacl) != 0 && (sd.Control & SecurityDescriptors.SeDaclPresent) != 0)
            {
                uint bits = SecurityDescriptors.ModeFromDacl(sd.Dacl, ownerSid, groupSid);
                if (a.FileType == XfsFileType.Directory)
                {
                    int defaultStatus = WriteDefaultAcl(file.Inode, sd.Dacl, bits);
                    if (defaultStatus != NtStatus.Success) return defaultStatus;
                }
                int status = WriteAccessAcl(file.Inode, sd.Dacl, ownerSid, groupSid, ref bits);
                if (status != NtStatus.Success) return status;
                mode = (ushort)((a.Mode & 0xE00) | bits);
                if (mode == (a.Mode & 0xFFF)) mode = null;
            }
            // A new owner or group is held to its quota (the check Linux makes for a caller without CAP_FOWNER): the file
            // system cannot tell an administrator's SetSecurity from another caller's.
            var changes = new AttributeChanges { Uid = uid != a.Uid ? uid : null, Gid = gid != a.Gid ? gid : null, Mode = mode, CheckQuota = true };
            if (changes.Uid is not null || changes.Gid is not null || changes.Mode is not null)
                _volume.SetAttributes(file.Inode, changes);
            Refresh(file);
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// Named users and groups of a DACL (SIDs that map to a uid or gid) become the file's POSIX access ACL (trusted
    /// SGI_ACL_FILE, as XFS stores system.posix_acl_access), with the group bits of the mode becoming its mask; a DACL
    /// without them removes an ACL the file had. STATUS_NOT_SUPPORTED, with nothing changed, when the engine cannot
    /// write xattrs. SIDs that map to no id (SYSTEM, Administrators under the default mapping) are not stored.
    /// </summary>
    private int WriteAccessAcl(ulong inode, IReadOnlyList<Ace>? dacl, Sid owner, Sid group, ref uint bits)
    {
        var (users, groups) = NamedEntries(dacl, owner, group);
        bool hadAcl = _volume.TryGetXattr(inode, XattrNamespace.Trusted, AclAttributeName, out _);
        try
        {
            if (users.Count == 0 && groups.Count == 0)
            {
                if (hadAcl) _volume.RemoveXattr(inode, XattrNamespace.Trusted, AclAttributeName);
                return NtStatus.Success;
            }
            var acl = AclOf((bits >> 6) & 7, (bits >> 3) & 7, bits & 7, users, groups, out uint mask);
            _volume.SetXattr(inode, XattrNamespace.Trusted, AclAttributeName, acl.ToXfs());
            bits = (bits & ~0x38u) | mask << 3; // with an ACL the mode's group bits are its mask
            return NtStatus.Success;
        }
        catch (XfsException x) when (x.Error == XfsError.Unsupported)
        {
            return NtStatus.NotSupported;
        }
    }

    /// <summary>
    /// A directory's default POSIX ACL (trusted SGI_ACL_DEFAULT, as XFS stores system.posix_acl_default) from the ACEs of
    /// <paramref name="dacl"/> that children inherit: CREATOR OWNER's rights become the owner entry, CREATOR GROUP's the
    /// owning group's, Everyone's the others', SIDs that map to ids named entries (the mask their union with the
    /// owning group's); a class no inheritable ACE names takes its bits from <paramref name="bits"/>, as setfacl fills
    /// a default ACL's missing entries from the access permissions. Without inheritable ACEs for any of those SIDs the
    /// directory has no default ACL (one it had is removed). STATUS_NOT_SUPPORTED, nothing changed, when the engine
    /// cannot write xattrs.
    /// </summary>
    private int WriteDefaultAcl(ulong directory, IReadOnlyList<Ace>? dacl, uint bits)
    {
        var inherited = SecurityDescriptors.InheritedByChildren(dacl);
        var (users, groups) = NamedEntries(inherited, Sid.CreatorOwner, Sid.CreatorGroup);
        bool hasOwner = SecurityDescriptors.Names(inherited, Sid.CreatorOwner), hasGroup = SecurityDescriptors.Names(inherited, Sid.CreatorGroup);
        bool hasOthers = SecurityDescriptors.Names(inherited, Sid.World);
        try
        {
            bool had = _volume.TryGetXattr(directory, XattrNamespace.Trusted, DefaultAclAttributeName, out _);
            if (!hasOwner && !hasGroup && !hasOthers && users.Count == 0 && groups.Count == 0)
            {
                if (had) _volume.RemoveXattr(directory, XattrNamespace.Trusted, DefaultAclAttributeName);
                return NtStatus.Success;
            }
            uint Class(bool named, Sid sid, int shift) => named ? SecurityDescriptors.PermissionFor(inherited, sid) : (bits >> shift) & 7;
            var acl = AclOf(Class(hasOwner, Sid.CreatorOwner, 6), Class(hasGroup, Sid.CreatorGroup, 3), Class(hasOthers, Sid.World, 0), users, groups, out _);
            _volume.SetXattr(directory, XattrNamespace.Trusted, DefaultAclAttributeName, acl.ToXfs());
            return NtStatus.Success;
        }
        catch (XfsException x) when (x.Error == XfsError.Unsupported)
        {
            return NtStatus.NotSupported;
        }
    }

    /// <summary>
    /// The named users and groups of <paramref name="aces"/> with their rwx: SIDs besides the owner, group and Everyone
    /// that map to a uid (the mounting user excepted: it stands for the creator, not a named user) or else a gid. SIDs
    /// that map to no id (SYSTEM, Administrators under the default mapping) are left out.
    /// </summary>
    private (SortedDictionary<uint, ushort> Users, SortedDictionary<uint, ushort> Groups) NamedEntries(IReadOnlyList<Ace>? aces, Sid owner, Sid group)
    {
        var users = new SortedDictionary<uint, ushort>();
        var groups = new SortedDictionary<uint, ushort>();
        foreach (var sid in SecurityDescriptors.NamedSids(aces, owner, group))
        {
            ushort perm = (ushort)SecurityDescriptors.PermissionFor(aces, sid);
            if (_ids.UidOf(sid) is uint u && sid != _ids.MountingUser) users[u] = perm;
            else if (_ids.GidOf(sid) is uint g) groups[g] = perm;
        }
        return (users, groups);
    }

    /// <summary>A POSIX ACL in the order Linux keeps one; the mask is the union of the owning group's and the named entries' rights.</summary>
    private static PosixAcl AclOf(uint ownerPerm, uint groupPerm, uint otherPerm, SortedDictionary<uint, ushort> users, SortedDictionary<uint, ushort> groups, out uint mask)
    {
        mask = groupPerm;
        var entries = new List<PosixAclEntry> { new(PosixAclTag.UserObj, PosixAcl.UndefinedId, (ushort)ownerPerm) };
        foreach (var (id, perm) in users) { entries.Add(new(PosixAclTag.User, id, perm)); mask |= perm; }
        entries.Add(new(PosixAclTag.GroupObj, PosixAcl.UndefinedId, (ushort)groupPerm));
        foreach (var (id, perm) in groups) { entries.Add(new(PosixAclTag.Group, id, perm)); mask |= perm; }
        entries.Add(new(PosixAclTag.Mask, PosixAcl.UndefinedId, (ushort)mask));
        entries.Add(new(PosixAclTag.Other, PosixAcl.UndefinedId, (ushort)otherPerm));
        return new PosixAcl(entries);
    }

    // ---------------------------------------------------------------- extended attributes

    /// <summary>
    /// WinFsp's SetEa: FILE_FULL_EA_INFORMATION entries become user.NAME xattrs (an empty value removes one);
    /// WSL's $LXUID, $LXGID and $LXMOD set uid, gid and permission bits, $LXDEV the device numbers an LX_CHR or
    /// LX_BLK reparse point set next will use.
    /// </summary>
    public int SetEa(OpenFile file, ReadOnlySpan<byte> ea, out FileInformation info)
    {
        info = file.Information;
        if (!_options.ReadWrite) return ReadOnlyStatus;
        if (!_options.ExtendedAttributes) return NtStatus.EasNotSupported;
        try
        {
            int status = ApplyEas(file, ea);
            if (status != NtStatus.Success) return status;
            var a = _volume.GetAttributes(file.Inode);
            bool dirLink = a.FileType == XfsFileType.Symlink && file.Information.IsDirectory;
            file.Attributes = a;
            file.Information = MakeFileInformation(a, file.Name, dirLink, EaSize(file.Inode));
            info = file.Information;
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// Applies a FILE_FULL_EA_INFORMATION list. Every entry is checked before anything changes (a name Windows cannot
    /// hold is STATUS_INVALID_EA_NAME, a WSL value of the wrong size STATUS_INVALID_PARAMETER). EA names are
    /// case-insensitive on Windows: an entry replaces the user.* xattr of any spelling of its name (the spelling given
    /// is stored), an empty value removes every spelling. With <paramref name="replaceVisible"/> (FILE_OVERWRITE and
    /// FILE_SUPERSEDE with EAs) the EAs Windows sees go first, as NTFS replaces a file's EAs; xattrs Windows does not
    /// see (other namespaces, names that are not EA names) stay. FILE_NEED_EA has no XFS form: it is not kept.
    /// </summary>
    private int ApplyEas(OpenFile file, ReadOnlySpan<byte> ea, bool replaceVisible = false)
    {
        List<(string Name, byte[] Value, byte Flags)> entries;
        try { entries = ExtendedAttributes.Parse(ea); }
        catch (FormatException) { return NtStatus.InvalidParameter; }
        var names = new List<byte[]>(entries.Count);
        foreach (var (nameText, value, _) in entries)
        {
            var name = Encoding.ASCII.GetBytes(nameText);
            names.Add(name);
            if (IsLxEa(name))
            {
                if (value.Length != (name.AsSpan().SequenceEqual(LxDev) ? 8 : 4)) return NtStatus.InvalidParameter;
            }
            else if (!IsVisibleEa(name))
            {
                return NtStatus.InvalidEaName;
            }
        }

        var stored = new List<byte[]>();
        foreach (var x in _volume.ListXattrs(file.Inode))
            if (x.Namespace == XattrNamespace.User && IsVisibleEa(x.Name)) stored.Add(x.Name);
        if (replaceVisible)
        {
            foreach (var old in stored) RemoveUserXattr(file.Inode, old);
            stored.Clear();
        }

        // $LXUID/$LXGID give the file away: held to the new owner's quota, as SetSecurity is.
        var changes = new AttributeChanges { CheckQuota = true };
        for (int i = 0; i < entries.Count; i++)
        {
            var name = names[i];
            var value = entries[i].Value;
            if (IsLxEa(name))
            {
                if (name.AsSpan().SequenceEqual(LxDev))
                {
                    file.PendingDevice = (BinaryPrimitives.ReadUInt32LittleEndian(value), BinaryPrimitives.ReadUInt32LittleEndian(value.AsSpan(4)));
                    continue;
                }
                uint v = BinaryPrimitives.ReadUInt32LittleEndian(value);
                changes = name[3] == (byte)'U' ? changes with { Uid = v }
                    : name[3] == (byte)'G' ? changes with { Gid = v }
                    : changes with { Mode = (ushort)(v & 0xFFF) };
                continue;
            }
            for (int k = stored.Count - 1; k >= 0; k--)
            {
                if (!Ascii.EqualsIgnoreCase(stored[k], name)) continue;
                if (value.Length == 0 || !stored[k].AsSpan().SequenceEqual(name)) RemoveUserXattr(file.Inode, stored[k]);
                stored.RemoveAt(k);
            }
            if (value.Length == 0) continue;
            _volume.SetXattr(file.Inode, XattrNamespace.User, name, value);
            stored.Add(name);
        }
        if (changes.Uid is not null || changes.Gid is not null || changes.Mode is not null)
            _volume.SetAttributes(file.Inode, changes);
        return NtStatus.Success;
    }

    private static bool IsLxEa(ReadOnlySpan<byte> name) =>
        name.SequenceEqual(LxUid) || name.SequenceEqual(LxGid) || name.SequenceEqual(LxMod) || name.SequenceEqual(LxDev);

    private void RemoveUserXattr(ulong inode, byte[] name)
    {
        try { _volume.RemoveXattr(inode, XattrNamespace.User, name); }
        catch (XfsException x) when (x.Error == XfsError.NoAttribute) { /* removing what is not there is no error */ }
    }

    // ---------------------------------------------------------------- reparse points

    /// <summary>
    /// WinFsp's SetReparsePoint. IO_REPARSE_TAG_SYMLINK (as CreateSymbolicLink writes it) and WSL's
    /// IO_REPARSE_TAG_LX_SYMLINK make an XFS symlink; IO_REPARSE_TAG_LX_FIFO, LX_CHR, LX_BLK and AF_UNIX a fifo,
    /// device or socket. The open file must be empty (a file of size 0 or an empty directory): it is replaced by
    /// the new node under the same name, keeping its permission bits and owner. Symlink targets are translated
    /// back (relative components unescaped, '\' → '/'; absolute targets inside this volume's mount become
    /// absolute XFS paths); a target on another drive is STATUS_IO_REPARSE_DATA_INVALID.
    /// </summary>
    public int SetReparsePoint(OpenFile file, ReadOnlySpan<char> fileName, ReadOnlySpan<byte> buffer)
    {
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            if (buffer.Length < ReparseData.HeaderSize) return NtStatus.IoReparseDataInvalid;
            uint tag = BinaryPrimitives.ReadUInt32LittleEndian(buffer);
            int dataLength = BinaryPrimitives.ReadUInt16LittleEndian(buffer[4..]);
            if (ReparseData.HeaderSize + dataLength > buffer.Length) return NtStatus.IoReparseDataInvalid;
            var data = buffer.Slice(ReparseData.HeaderSize, dataLength);
            if (file.Ancestors.Length == 0) return NtStatus.AccessDenied;

            var a = _volume.GetAttributes(file.Inode);
            uint existingTag = ReparseTags.ForFileType(a.FileType, true);
            if (existingTag != 0 && existingTag != tag && !(existingTag == ReparseTags.Symlink && tag == ReparseTags.LxSymlink))
                return NtStatus.IoReparseTagMismatch;
            if (a.FileType == XfsFileType.Directory ? !IsEmptyDirectory(file.Inode) : a.FileType == XfsFileType.RegularFile && a.Size != 0)
                return a.FileType == XfsFileType.Directory ? NtStatus.DirectoryNotEmpty : NtStatus.NotSupported;

            byte[]? target = null;
            ushort type = 0;
            switch (tag)
            {
                case ReparseTags.Symlink:
                    target = SymlinkTargetFromReparse(buffer[..(ReparseData.HeaderSize + dataLength)]);
                    if (target is null) return NtStatus.IoReparseDataInvalid;
                    break;
                case ReparseTags.LxSymlink:
                    if (data.Length <= 4 || BinaryPrimitives.ReadUInt32LittleEndian(data) != 2) return NtStatus.IoReparseDataInvalid;
                    target = data[4..].ToArray();
                    break;
                case ReparseTags.LxFifo: type = TypeFifo; break;
                case ReparseTags.LxCharDevice: type = TypeCharDevice; break;
                case ReparseTags.LxBlockDevice: type = TypeBlockDevice; break;
                case ReparseTags.AfUnix: type = TypeSocket; break;
                default: return NtStatus.NotSupported; // other tags have no XFS form
            }

            ReplaceNode(file, a, target, type, file.PendingDevice ?? (a.DeviceMajor, a.DeviceMinor));
            bool dirLink = target is not null && (a.FileType == XfsFileType.Directory ||
                                                  SymlinkTargetIsDirectory(file.Inode, file.Ancestors[^1], file.Ancestors[..^1]));
            file.Information = MakeFileInformation(file.Attributes, file.Name, dirLink, EaSize(file.Inode));
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// WinFsp's DeleteReparsePoint: a symlink, fifo, device or socket becomes an empty file (an empty directory when
    /// Windows saw a directory symlink), keeping its name, permission bits and owner.
    /// </summary>
    public int DeleteReparsePoint(OpenFile file, ReadOnlySpan<char> fileName, ReadOnlySpan<byte> buffer)
    {
        if (!_options.ReadWrite) return ReadOnlyStatus;
        try
        {
            var a = _volume.GetAttributes(file.Inode);
            uint existingTag = ReparseTags.ForFileType(a.FileType, true);
            if (existingTag == 0) return NtStatus.NotAReparsePoint;
            if (buffer.Length < 4) return NtStatus.IoReparseDataInvalid;
            uint tag = BinaryPrimitives.ReadUInt32LittleEndian(buffer);
            if (tag != existingTag && !(existingTag == ReparseTags.Symlink && tag == ReparseTags.LxSymlink)) return NtStatus.IoReparseTagMismatch;
            bool directory = file.Information.IsDirectory;
            ReplaceNode(file, a, null, directory ? (ushort)0x4000 : TypeRegular, (0, 0));
            file.Information = MakeFileInformation(file.Attributes, file.Name, false, EaSize(file.Inode));
            return NtStatus.Success;
        }
        catch (Exception e)
        {
            return NtStatus.FromException(e);
        }
    }

    /// <summary>
    /// Replaces the open's inode under its name by a new symlink (<paramref name="target"/>), directory (type 0x4000),
    /// or node of <paramref name="type"/>, with the old permission bits and owner. The open moves its hold to the new inode.
    /// </summary>
    private void ReplaceNode(OpenFile file, in InodeAttributes old, byte[]? target, ushort type, (uint Major, uint Minor) device)
    {
        ulong parent = file.Ancestors[^1];
        if (old.FileType == XfsFileType.Directory) _volume.RemoveDirectory(parent, file.Name);
        else _volume.Unlink(parent, file.Name);
        // A symlink's bits mean nothing (always 0777): what replaces one gets the create mask instead.
        ushort permissions = old.FileType == XfsFileType.Symlink
            ? (ushort)(type == 0x4000 ? DirectoryCreateMask : FileDefaultMode)
            : (ushort)(old.Mode & 0xFFF);
        var created = target is not null ? _volume.MakeSymlink(parent, file.Name, target, old.Uid, old.Gid)
            : type == 0x4000 ? _volume.MakeDirectory(parent, file.Name, permissions, old.Uid, old.Gid)
            : _volume.CreateNode(parent, file.Name, (ushort)(type | permissions), old.Uid, old.Gid,
                type is TypeCharDevice or TypeBlockDevice ? device.Major : 0, type is TypeCharDevice or TypeBlockDevice ? device.Minor : 0);
        Close(file); // drops the hold on the old inode (freed now unless other opens hold it)
        file.Inode = created.Inode;
        file.Attributes = created;
        file.Unlinked = false;
        Hold(file);
    }

    /// <summary>
    /// The XFS target of an IO_REPARSE_TAG_SYMLINK buffer, or null when it has no form on this volume: relative
    /// substitute names are unescaped component by component ("\\dir\\file", relative to the drive's root, becomes
    /// "/dir/file"); absolute ones must lie under this volume's mount point and become paths from the XFS root.
    /// </summary>
    private byte[]? SymlinkTargetFromReparse(ReadOnlySpan<byte> buffer)
    {
        (string substitute, string print, uint flags) parsed;
        try { parsed = ReparseData.ParseSymlink(buffer); }
        catch (FormatException) { return null; }
        string path = parsed.substitute;
        bool relative = (parsed.flags & ReparseData.SymlinkFlagRelative) != 0;
        var result = new List<byte>(path.Length);
        bool rooted = relative && path.StartsWith('\\'); // "\dir\file": from the root of this volume
        if (rooted) result.Add((byte)'/');
        if (!relative)
        {
            string prefix = path.StartsWith(@"\??\", StringComparison.Ordinal) ? path[4..] : path;
            string? mount = MountPoint?.TrimEnd('\\');
            if (mount is null || !prefix.StartsWith(mount, StringComparison.OrdinalIgnoreCase) ||
                (prefix.Length > mount.Length && prefix[mount.Length] != '\\'))
                return null;
            path = prefix[mount.Length..];
            result.Add((byte)'/');
        }
        bool first = true;
        foreach (var part in path.Split('\\', StringSplitOptions.RemoveEmptyEntries))
        {
            if (!first) result.Add((byte)'/');
            first = false;
            if (part is "." or "..") { result.AddRange(Encoding.ASCII.GetBytes(part)); continue; }
            var bytes = WindowsNames.DecodeToBytes(part);
            if (bytes is null) return null;
            result.AddRange(bytes);
        }
        if (result.Count == 0) return null;
        return [.. result];
    }
}

namespace XfsWin.Volume;

/// <summary>File types as XFS records them (directory ftype values, XFS_DIR3_FT_*).</summary>
public enum XfsFileType : byte
{
    Unknown = 0,
    RegularFile = 1,
    Directory = 2,
    CharacterDevice = 3,
    BlockDevice = 4,
    Fifo = 5,
    Socket = 6,
    Symlink = 7,
    Whiteout = 8,
}

/// <summary>What to do with a log Linux left dirty.</summary>
public enum LogReplayMode
{
    /// <summary>Replay into memory only; the device is never written (default for read-only opens).</summary>
    Memory,
    /// <summary>Replay and write the result to the device, then mark the log clean.</summary>
    InPlace,
    /// <summary>Ignore the log; the view may be stale.</summary>
    None,
}

public sealed record VolumeOpenOptions
{
    /// <summary>Open for writing. Until the write path lands every open is read-only.</summary>
    public bool Writable { get; init; }

    public LogReplayMode Replay { get; init; } = LogReplayMode.Memory;

    /// <summary>Partition number of a partitioned disk or image (same as a <c>source@N</c> suffix).</summary>
    public int? Partition { get; init; }

    /// <summary>The device holding an external log (path, optionally <c>@N</c>); null for an internal log.</summary>
    public string? LogDevice { get; init; }

    /// <summary>Metadata buffers kept in memory, in bytes.</summary>
    public long MetadataCacheBytes { get; init; } = 64L << 20;
}

/// <summary>
/// A timestamp as XFS stores it: seconds since the Unix epoch (may be negative) and nanoseconds.
/// </summary>
public readonly record struct XfsTimestamp(long Seconds, uint Nanoseconds)
{
    public DateTimeOffset ToDateTimeOffset() =>
        DateTimeOffset.UnixEpoch.AddTicks(checked(Seconds * TimeSpan.TicksPerSecond + Nanoseconds / 100));

    /// <summary>100 ns intervals since 1601-01-01 (Windows FILETIME).</summary>
    public long ToFileTime() => (Seconds + 11644473600L) * 10_000_000L + Nanoseconds / 100;

    public override string ToString() => $"{ToDateTimeOffset():yyyy-MM-dd HH:mm:ss}.{Nanoseconds:D9}";
}

/// <summary>Everything stat(2) reports for an inode, plus the V5 creation time.</summary>
public readonly record struct InodeAttributes
{
    public ulong Inode { get; init; }
    /// <summary>Full st_mode: type bits and permission bits.</summary>
    public uint Mode { get; init; }
    public XfsFileType FileType { get; init; }
    public uint LinkCount { get; init; }
    public uint Uid { get; init; }
    public uint Gid { get; init; }
    public uint ProjectId { get; init; }
    public long Size { get; init; }
    /// <summary>Bytes allocated to the inode (data and attribute forks, including btree blocks).</summary>
    public long AllocatedBytes { get; init; }
    public XfsTimestamp AccessTime { get; init; }
    public XfsTimestamp ModifyTime { get; init; }
    public XfsTimestamp ChangeTime { get; init; }
    /// <summary>Creation time (V5 inodes only).</summary>
    public XfsTimestamp? CreationTime { get; init; }
    public uint DeviceMajor { get; init; }
    public uint DeviceMinor { get; init; }
    public uint Generation { get; init; }
    /// <summary>di_flags (XFS_DIFLAG_*): immutable, append-only, ...</summary>
    public ushort Flags { get; init; }
    public ulong Flags2 { get; init; }
    public ulong DataExtentCount { get; init; }
    public uint AttrExtentCount { get; init; }

    public uint Permissions => Mode & 0xFFF;
}

/// <summary>One directory entry; <see cref="NextCookie"/> resumes enumeration just after it.</summary>
public readonly record struct DirectoryEntry(byte[] Name, ulong Inode, XfsFileType FileType, long NextCookie)
{
    public string NameString => System.Text.Encoding.UTF8.GetString(Name);
}

/// <summary>
/// Receives directory entries without allocation. Return false to stop. The name span is valid only
/// during the call.
/// </summary>
public interface IDirectoryVisitor
{
    bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie);
}

/// <summary>Extended attribute namespaces as XFS stores them (flag bits of each entry).</summary>
public enum XattrNamespace
{
    User,
    Trusted,  // XFS_ATTR_ROOT
    Secure,   // XFS_ATTR_SECURE
    /// <summary>Parent pointers (XFS_ATTR_PARENT): file-system metadata, never shown as user xattrs.</summary>
    Parent,
}

public sealed record XattrEntry(XattrNamespace Namespace, byte[] Name, int ValueLength)
{
    /// <summary>The name as Linux tools show it: "user.foo", "trusted.foo", "security.foo", "system.posix_acl_access".</summary>
    public string LinuxName => XattrNames.ToLinuxName(Namespace, Name);
}

public static class XattrNames
{
    public static string ToLinuxName(XattrNamespace ns, ReadOnlySpan<byte> name)
    {
        var text = System.Text.Encoding.UTF8.GetString(name);
        return ns switch
        {
            XattrNamespace.User => "user." + text,
            // POSIX ACLs live in the trusted (root) namespace as SGI_ACL_FILE / SGI_ACL_DEFAULT.
            XattrNamespace.Trusted when text == "SGI_ACL_FILE" => "system.posix_acl_access",
            XattrNamespace.Trusted when text == "SGI_ACL_DEFAULT" => "system.posix_acl_default",
            XattrNamespace.Trusted => "trusted." + text,
            XattrNamespace.Secure => "security." + text,
            _ => "parent." + text,
        };
    }

    /// <summary>Parses a Linux xattr name into namespace and on-disk name; false for names XFS cannot hold.</summary>
    public static bool TryParseLinuxName(string linuxName, out XattrNamespace ns, out byte[] name)
    {
        (ns, var rest) = linuxName switch
        {
            "system.posix_acl_access" => (XattrNamespace.Trusted, "SGI_ACL_FILE"),
            "system.posix_acl_default" => (XattrNamespace.Trusted, "SGI_ACL_DEFAULT"),
            _ when linuxName.StartsWith("user.", StringComparison.Ordinal) => (XattrNamespace.User, linuxName[5..]),
            _ when linuxName.StartsWith("trusted.", StringComparison.Ordinal) => (XattrNamespace.Trusted, linuxName[8..]),
            _ when linuxName.StartsWith("security.", StringComparison.Ordinal) => (XattrNamespace.Secure, linuxName[9..]),
            _ => (XattrNamespace.User, (string?)null),
        };
        name = rest is null ? [] : System.Text.Encoding.UTF8.GetBytes(rest);
        return rest is { Length: > 0 };
    }
}

/// <summary>statfs(2) figures, from the superblock counters.</summary>
public readonly record struct FileSystemStats(
    int BlockSize,
    ulong TotalBlocks,
    ulong FreeBlocks,
    ulong TotalInodes,
    ulong FreeInodes,
    int MaxNameLength);

/// <summary>State of the journal as found at open.</summary>
public enum LogState
{
    Clean,
    /// <summary>Linux did not unmount cleanly; changes may be in the log only.</summary>
    Dirty,
    /// <summary>Dirty, and replayed into memory for this open.</summary>
    ReplayedInMemory,
    /// <summary>Dirty, and replayed onto the device for this open.</summary>
    ReplayedInPlace,
    /// <summary>The log is on another device (external log) we were not given.</summary>
    External,
    Unknown,
}

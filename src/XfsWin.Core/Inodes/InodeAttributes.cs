using XfsWin.Format;

namespace XfsWin.Inodes;

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

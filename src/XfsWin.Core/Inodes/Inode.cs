using XfsWin.Format;

namespace XfsWin.Inodes;

/// <summary>
/// An inode read from disk and verified: a private copy of its bytes with the core decoded, shared between threads
/// through <see cref="InodeCache"/>. On a read-only volume it never changes; on a read-write one the cache updates it
/// in place when a change to the inode commits (<see cref="Refresh"/>), under the volume's change lock held
/// exclusively, so a reader (holding that lock shared) sees one committed state throughout.
/// </summary>
public sealed class Inode
{
    /// <summary>Set once the inodes this directory names were read ahead (see XfsVolume.TryLookup).</summary>
    internal int ChildrenReadAhead;

    /// <summary>
    /// What a directory reader worked out about this directory (its form and mapping), kept with the snapshot it was
    /// worked out from: cleared when the inode changes (<see cref="Refresh"/>). Set and read by <c>DirectoryReader</c>
    /// only, tagged with the reader that set it.
    /// </summary>
    internal object? DirectoryShape;

    internal Inode(ulong number, byte[] raw, long byteOffset, Superblock sb)
    {
        Number = number;
        Raw = raw;
        ByteOffset = byteOffset;
        Decode(sb);
    }

    /// <summary>
    /// Takes <paramref name="image"/> (the inode's newest committed bytes, inode-size long) as this inode's bytes and
    /// decodes them again: the inode cache updates its entry in place when a change to the inode commits. Callers hold
    /// the volume's change lock exclusively (no reader holds this object meanwhile: readers look at inodes only while
    /// holding that lock shared); what readers worked out from the old bytes is dropped (<see cref="Revision"/> moves
    /// on, <see cref="DirectoryShape"/> is cleared).
    /// </summary>
    internal void Refresh(ReadOnlySpan<byte> image, Superblock sb)
    {
        if (image.Length != Raw.Length) throw new ArgumentException($"inode {Number}: an image of {image.Length} bytes for an inode of {Raw.Length}", nameof(image));
        image.CopyTo(Raw);
        DirectoryShape = null;
        Decode(sb);
        Revision++;
    }

    /// <summary>How many times <see cref="Refresh"/> changed this inode: what was worked out from it at another revision is stale.</summary>
    public long Revision { get; private set; }

    private void Decode(Superblock sb)
    {
        var raw = Raw;
        ulong number = Number;
        var d = new DinodeView(raw);
        Mode = d.Mode;
        Version = d.Version;
        DataFormat = d.Format;
        AttrFormat = d.ForkOffset != 0 ? d.AttrFormat : ForkFormat.Device;
        HasAttrFork = d.ForkOffset != 0;
        Size = (long)d.Size;
        Nblocks = d.Nblocks;
        DataExtentCount = d.DataExtentCount;
        AttrExtentCount = d.AttrExtentCount;
        CoreSize = d.CoreSize;
        DataForkSize = d.DataForkSize(raw.Length);
        AttrForkOffset = d.AttrForkOffset;
        AttrForkSize = d.AttrForkSize(raw.Length);
        Flags2 = d.Flags2;
        var (aSec, aNs) = d.AccessTime.Decode();
        var (mSec, mNs) = d.ModifyTime.Decode();
        var (cSec, cNs) = d.ChangeTime.Decode();
        XfsTimestamp? crtime = null;
        if (d.Version >= 3)
        {
            var (bSec, bNs) = d.CreationTime.Decode();
            crtime = new XfsTimestamp(bSec, bNs);
        }
        uint major = 0, minor = 0;
        if (d.Format == ForkFormat.Device && (d.Mode & 0xF000) is 0x2000 or 0x6000)
        {
            // xfs_dev_t: the old SysV encoding, 14-bit major and 18-bit minor.
            uint dev = System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(raw.AsSpan(d.CoreSize));
            major = (dev >> 18) & 0x3FFF;
            minor = dev & 0x3FFFF;
        }
        Attributes = new InodeAttributes
        {
            Inode = number,
            Mode = d.Mode,
            FileType = FileTypeOf(d.Mode),
            LinkCount = d.LinkCount,
            Uid = d.Uid,
            Gid = d.Gid,
            ProjectId = d.ProjectId,
            Size = (long)d.Size,
            AllocatedBytes = (long)(d.Nblocks << sb.BlockLog),
            AccessTime = new XfsTimestamp(aSec, aNs),
            ModifyTime = new XfsTimestamp(mSec, mNs),
            ChangeTime = new XfsTimestamp(cSec, cNs),
            CreationTime = crtime,
            DeviceMajor = major,
            DeviceMinor = minor,
            Generation = d.Generation,
            Flags = d.Flags,
            Flags2 = d.Flags2,
            DataExtentCount = d.DataExtentCount,
            AttrExtentCount = d.AttrExtentCount,
        };
    }

    public ulong Number { get; }
    /// <summary>The inode's on-disk bytes (inode size long).</summary>
    internal byte[] Raw { get; }
    public long ByteOffset { get; }
    public ushort Mode { get; private set; }
    public byte Version { get; private set; }
    public ForkFormat DataFormat { get; private set; }
    public ForkFormat AttrFormat { get; private set; }
    public bool HasAttrFork { get; private set; }
    public long Size { get; private set; }
    public ulong Nblocks { get; private set; }
    public ulong DataExtentCount { get; private set; }
    public uint AttrExtentCount { get; private set; }
    public int CoreSize { get; private set; }
    public int DataForkSize { get; private set; }
    public int AttrForkOffset { get; private set; }
    public int AttrForkSize { get; private set; }
    public ulong Flags2 { get; private set; }
    public InodeAttributes Attributes { get; private set; }

    public XfsFileType FileType => Attributes.FileType;
    public bool IsDirectory => (Mode & 0xF000) == 0x4000;
    public bool IsRegular => (Mode & 0xF000) == 0x8000;
    public bool IsSymlink => (Mode & 0xF000) == 0xA000;

    public ReadOnlySpan<byte> DataFork => Raw.AsSpan(CoreSize, DataForkSize);
    public ReadOnlySpan<byte> AttrFork => Raw.AsSpan(AttrForkOffset, AttrForkSize);

    public static XfsFileType FileTypeOf(uint mode) => (mode & 0xF000) switch
    {
        0x8000 => XfsFileType.RegularFile,
        0x4000 => XfsFileType.Directory,
        0x2000 => XfsFileType.CharacterDevice,
        0x6000 => XfsFileType.BlockDevice,
        0x1000 => XfsFileType.Fifo,
        0xC000 => XfsFileType.Socket,
        0xA000 => XfsFileType.Symlink,
        _ => XfsFileType.Unknown,
    };
}

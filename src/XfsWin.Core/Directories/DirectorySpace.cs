using System.Buffers.Binary;
using XfsWin.Format;
using XfsWin.Journal;

namespace XfsWin.Directories;

/// <summary>
/// The blocks of a directory's data fork, as <see cref="DirectoryEditor"/> needs them (the kernel's bmap calls made
/// by xfs_da_grow_inode and xfs_dir2_shrink_inode). File block numbers count filesystem blocks; a directory block
/// is <c>1 &lt;&lt; sb_dirblklog</c> of them and must be mapped to one contiguous device range. The implementation
/// keeps the inode's extent list (or bmbt), di_nextents and di_nblocks in <see cref="DirectoryInodeImage"/> right;
/// the editor keeps di_size, the fork format and the directory's contents.
/// </summary>
public interface IDirectorySpace
{
    /// <summary>Device byte offset of the directory block starting at <paramref name="fileBlock"/>; -1 when it is not mapped.</summary>
    long Map(DirectoryInodeImage dir, ulong fileBlock);

    /// <summary>The first file block at or after <paramref name="from"/> starting <paramref name="count"/> unmapped blocks (xfs_bmap_first_unused).</summary>
    ulong FirstUnused(DirectoryInodeImage dir, ulong from, int count);

    /// <summary>The end (file block) of the last mapping below <paramref name="fileBlock"/>, 0 when none (xfs_bmap_last_before).</summary>
    ulong LastBefore(DirectoryInodeImage dir, ulong fileBlock);

    /// <summary>The end (file block) of the last mapping of the fork, 0 when none (xfs_bmap_last_offset).</summary>
    ulong LastOffset(DirectoryInodeImage dir);

    /// <summary>Allocates <paramref name="count"/> contiguous blocks, maps them at <paramref name="fileBlock"/> and returns their device byte offset.</summary>
    long Allocate(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count);

    /// <summary>Unmaps the <paramref name="count"/> blocks at <paramref name="fileBlock"/> and frees them.</summary>
    void Free(Transaction tx, DirectoryInodeImage dir, ulong fileBlock, int count);
}

/// <summary>
/// A directory inode's on-disk image (inode-size bytes, big-endian) as a working copy the directory code changes:
/// size, data fork format and local data here, extents through <see cref="IDirectorySpace"/>. The caller logs the
/// image when the operation is done (an <see cref="InodeLogItem"/> with <see cref="LogParts"/>).
/// </summary>
public sealed class DirectoryInodeImage
{
    private readonly Superblock _sb;

    public DirectoryInodeImage(Superblock sb, ulong ino, byte[] image)
    {
        if (image.Length != sb.InodeSize) throw new ArgumentException($"inode {ino}: image of {image.Length} bytes, inodes are {sb.InodeSize}", nameof(image));
        if (BinaryPrimitives.ReadUInt16BigEndian(image) != DinodeView.Magic) throw new ArgumentException($"inode {ino}: the image has no inode magic", nameof(image));
        if ((BinaryPrimitives.ReadUInt16BigEndian(image.AsSpan(DinodeView.OffMode)) & 0xF000) != 0x4000)
            throw new XfsException(XfsError.NotADirectory, $"inode {ino} is not a directory");
        _sb = sb;
        Number = ino;
        Image = image;
    }

    public ulong Number { get; }

    /// <summary>The working copy: whole on-disk inode.</summary>
    public byte[] Image { get; }

    /// <summary>What changed so far: the core always once anything did; the data fork when its bytes did.</summary>
    public bool CoreChanged { get; private set; }
    public bool DataForkChanged { get; private set; }
    public InodeLogParts LogParts => DataForkChanged ? InodeLogParts.DataFork : InodeLogParts.Core;

    private int CoreSize => Image[DinodeView.OffVersion] >= 3 ? DinodeView.V3CoreSize : DinodeView.V2CoreSize;

    /// <summary>Bytes of the data fork (XFS_IFORK_DSIZE): up to the attribute fork, or the whole literal area.</summary>
    public int DataForkSize => Image[DinodeView.OffForkoff] != 0 ? Image[DinodeView.OffForkoff] << 3 : _sb.InodeSize - CoreSize;

    public Span<byte> DataFork => Image.AsSpan(CoreSize, DataForkSize);

    public ForkFormat DataFormat => (ForkFormat)Image[DinodeView.OffFormat];

    public ulong Size
    {
        get => BinaryPrimitives.ReadUInt64BigEndian(Image.AsSpan(DinodeView.OffSize));
        set
        {
            BinaryPrimitives.WriteUInt64BigEndian(Image.AsSpan(DinodeView.OffSize), value);
            CoreChanged = true;
        }
    }

    public bool HasNrext64 => (BinaryPrimitives.ReadUInt64BigEndian(Image.AsSpan(DinodeView.OffFlags2)) & DinodeView.Flag2Nrext64) != 0;

    public ulong DataExtentCount
    {
        get => HasNrext64 ? BinaryPrimitives.ReadUInt64BigEndian(Image.AsSpan(DinodeView.OffBigNextents)) : BinaryPrimitives.ReadUInt32BigEndian(Image.AsSpan(DinodeView.OffNextents));
        set
        {
            if (HasNrext64) BinaryPrimitives.WriteUInt64BigEndian(Image.AsSpan(DinodeView.OffBigNextents), value);
            else BinaryPrimitives.WriteUInt32BigEndian(Image.AsSpan(DinodeView.OffNextents), checked((uint)value));
            CoreChanged = true;
        }
    }

    public ulong BlockCount
    {
        get => BinaryPrimitives.ReadUInt64BigEndian(Image.AsSpan(DinodeView.OffNblocks));
        set
        {
            BinaryPrimitives.WriteUInt64BigEndian(Image.AsSpan(DinodeView.OffNblocks), value);
            CoreChanged = true;
        }
    }

    /// <summary>The data fork's bytes changed (extent records, local data).</summary>
    public void MarkDataForkChanged()
    {
        DataForkChanged = true;
        CoreChanged = true;
    }

    /// <summary>A local (short-form) data fork holding exactly <paramref name="data"/>; di_size is its length.</summary>
    public void SetLocal(ReadOnlySpan<byte> data)
    {
        if (data.Length > DataForkSize) throw new InvalidOperationException($"inode {Number}: {data.Length} bytes of local data do not fit a {DataForkSize}-byte fork");
        var fork = DataFork;
        fork.Clear();
        data.CopyTo(fork);
        Image[DinodeView.OffFormat] = (byte)ForkFormat.Local;
        Size = (ulong)data.Length;
        MarkDataForkChanged();
    }

    /// <summary>An extents fork with no extents (xfs_bmap_local_to_extents_empty); di_size 0.</summary>
    public void SetEmptyExtents()
    {
        DataFork.Clear();
        Image[DinodeView.OffFormat] = (byte)ForkFormat.Extents;
        DataExtentCount = 0;
        Size = 0;
        MarkDataForkChanged();
    }
}

using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;

namespace XfsWin.Volume;

/// <summary>
/// Blocks past EOF that writes leave (an extent size hint rounds an allocation out past the bytes written) are given
/// back as the kernel gives them back (xfs_free_eofblocks): at the first close of a writable open of the file
/// (xfs_file_release), when the last hold on the inode goes (xfs_inactive), and at unmount (every inode is inactivated
/// then). A file preallocated with fallocate (XFS_DIFLAG_PREALLOC) or append-only keeps them, as in the kernel.
/// </summary>
public sealed partial class XfsVolume
{
    private const ushort DiFlagPrealloc = 0x2, DiFlagAppend = 0x10;

    /// <summary>
    /// xfs_file_release: an open of <paramref name="inode"/> was closed (<paramref name="writable"/>: it was open for
    /// writing). The first such close of a linked, not append-only file gives back the blocks writes left past its EOF; later
    /// closes keep them (files written in open/write/close cycles keep their preallocation) until the inode's last hold
    /// goes or the volume is unmounted.
    /// </summary>
    public void CloseFile(ulong inode, bool writable)
    {
        var w = _write;
        if (!writable || w is null || w.Unmounted || !_mount.Health.IsHealthy || ShutdownReason is not null) return;
        // Only writes of this open leave blocks past EOF or staged copy-on-write blocks (files other writers left them
        // on keep them until the kernel mounts the volume again): a close of any other file takes no lock.
        if (!Volatile.Read(ref w.AnyEofBlocks) && !w.CowStaging.Any) return;
        using (w.Changes.Change())
        {
            if (w.Unmounted) return;
            // Staged copy-on-write blocks no write used go at every writable close (the kernel keeps them until the
            // inode leaves memory or its background collection, 30 minutes by default, takes them).
            if (w.CowStaging.Has(inode)) CancelCowStaging(w, inode);
            if (w.EofReleased.Contains(inode) || !w.EofBlocks.Contains(inode)) return;
            var current = _inodes.Get(inode);
            if (current.Attributes.LinkCount == 0 || (current.Attributes.Flags & DiFlagAppend) != 0) return;
            if (!CanFreeEofBlocks(current)) return;
            w.EofReleased.Add(inode);
            FreeEofBlocks(w, current);
        }
    }

    /// <summary>
    /// xfs_can_free_eofblocks: a regular file with a size, neither preallocated (fallocate) nor append-only, that maps
    /// blocks at or past its last block.
    /// </summary>
    private bool CanFreeEofBlocks(Inode inode)
    {
        if (!inode.IsRegular || inode.Size == 0) return false;
        if ((inode.Attributes.Flags & (DiFlagPrealloc | DiFlagAppend)) != 0) return false;
        return MapsPastEof(inode);
    }

    /// <summary>True when <paramref name="inode"/>'s data fork maps a block at or past its last block.</summary>
    private bool MapsPastEof(Inode inode)
    {
        if (inode.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree) || inode.DataExtentCount == 0) return false;
        ulong end = EofBlock(inode);
        var map = _maps.Get(inode, ForkKind.Data);
        return map.TryFind(end, out _, out ulong next) || next != ulong.MaxValue;
    }

    /// <summary>The first file block wholly past EOF.</summary>
    private ulong EofBlock(Inode inode)
    {
        var sb = _mount.Superblock;
        return (ulong)((inode.Size + sb.BlockSize - 1) >> sb.BlockLog);
    }

    /// <summary>xfs_free_eofblocks: unmaps and frees every block at or past the file's last block (sizes and times stay).</summary>
    private void FreeEofBlocks(VolumeWriteState w, Inode inode)
    {
        w.EofBlocks.Remove(inode.Number);
        UnmapInSteps(w, inode.Number, EofBlock(inode), ulong.MaxValue);
    }

    /// <summary>
    /// xfs_inactive for a linked file: its staged copy-on-write blocks and post-EOF blocks go when the inode leaves
    /// memory (last hold, unmount). Under the change lock. A file that keeps its blocks past EOF for now (append-only or
    /// preallocated) stays in <see cref="VolumeWriteState.EofBlocks"/>: a host's holds follow the host's own cache (a
    /// FUSE forget comes whenever the kernel's caches shrink), so what unmount gives back must not depend on whether a
    /// hold went before the flag was cleared.
    /// </summary>
    private void InactivateEofBlocks(VolumeWriteState w, ulong inode)
    {
        if (w.CowStaging.Has(inode)) CancelCowStaging(w, inode);
        w.EofReleased.Remove(inode);
        if (!w.EofBlocks.Contains(inode)) return;
        var current = _inodes.Get(inode);
        if (current.Attributes.LinkCount != 0 && CanFreeEofBlocks(current)) FreeEofBlocks(w, current);
        else if (current.Attributes.LinkCount == 0 || !MapsPastEof(current)) w.EofBlocks.Remove(inode);
    }
}

using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

// fallocate's collapse-range and insert-range, in the shape of the kernel's xfs_collapse_file_space and
// xfs_insert_file_space (xfs_bmap_collapse_extents, xfs_bmap_insert_extents): the file's mappings past a point move by
// a whole number of blocks, one extent per part of a rolling transaction, each move logged as the mapping leaving its
// old offset and entering its new one (the reverse mapping follows through rmap intents; blocks are neither allocated
// nor freed, so reference counts stay). Collapse moves extents down in ascending order, insert moves them up in
// descending order, so no move lands on a mapping not yet moved, and a crash between parts leaves a consistent file.
public sealed partial class XfsVolume
{
    /// <summary>
    /// FALLOC_FL_COLLAPSE_RANGE: [offset, +length) is removed (its blocks freed or their counts lowered) and what follows
    /// moves down by <paramref name="length"/>; the size shrinks by it. Both must be multiples of the block size and
    /// the range must end before EOF (<see cref="XfsError.InvalidArgument"/> otherwise, as on the kernel).
    /// </summary>
    private void CollapseRange(VolumeWriteState w, Inode current, long offset, long length)
    {
        var sb = _mount.Superblock;
        long bs = sb.BlockSize;
        if (offset % bs != 0 || length % bs != 0)
            throw new XfsException(XfsError.InvalidArgument, $"collapse-range needs an offset and length that are multiples of the block size ({bs})");
        if (offset + length >= current.Size)
            throw new XfsException(XfsError.InvalidArgument, "collapse-range must end before the end of the file");
        ulong first = (ulong)(offset >> sb.BlockLog), shift = (ulong)(length >> sb.BlockLog);
        // xfs_free_file_space: the range's blocks go first.
        UnmapInSteps(w, current.Number, first, shift);
        ShiftExtents(w, current.Number, first + shift, shift, up: false);
        // As the truncate that ends the kernel's collapse: the new last block's bytes past EOF are zeroed (a shared
        // block is copied on write).
        long newSize = current.Size - length;
        if (newSize % bs != 0 && (current.Attributes.Flags2 & DinodeView.Flag2Reflink) != 0)
            ZeroPartialBlocks(w, _inodes.Get(current.Number), newSize, (newSize + bs - 1) / bs * bs);
        using (var tx = Begin(w, TransactionKind.Itruncate))
        {
            var update = new InodeUpdate(_inodes.Get(current.Number), sb);
            update.Size -= (ulong)length;
            update.Touch(Now(), modified: true);
            update.Log(tx, _inodes);
            tx.Commit();
        }
        AfterCommit(w);
    }

    /// <summary>
    /// FALLOC_FL_INSERT_RANGE: a hole of <paramref name="length"/> bytes opens at <paramref name="offset"/>, what
    /// follows moving up; the size grows by it first (as the kernel does, so no mapping ever lies past EOF). Both must
    /// be multiples of the block size and the offset inside the file (<see cref="XfsError.InvalidArgument"/>); a size
    /// past the largest file is <see cref="XfsError.FileTooLarge"/>.
    /// </summary>
    private void InsertRange(VolumeWriteState w, Inode current, long offset, long length)
    {
        var sb = _mount.Superblock;
        long bs = sb.BlockSize;
        if (offset % bs != 0 || length % bs != 0)
            throw new XfsException(XfsError.InvalidArgument, $"insert-range needs an offset and length that are multiples of the block size ({bs})");
        if (offset >= current.Size)
            throw new XfsException(XfsError.InvalidArgument, "insert-range must start inside the file");
        if (current.Size > MaxFileSize - length)
            throw new XfsException(XfsError.FileTooLarge, "insert-range would pass the largest file size");
        current = ZeroTailOfShared(w, current, current.Size + length);
        using (var tx = Begin(w, TransactionKind.Ichange))
        {
            var update = new InodeUpdate(current, sb);
            update.Size += (ulong)length;
            update.Touch(Now(), modified: true);
            update.Log(tx, _inodes);
            tx.Commit();
        }
        ShiftExtents(w, current.Number, (ulong)(offset >> sb.BlockLog), (ulong)(length >> sb.BlockLog), up: true);
        AfterCommit(w);
    }

    /// <summary>
    /// Moves every mapping at or past file block <paramref name="from"/> by <paramref name="shift"/> blocks, down or
    /// <paramref name="up"/>; an extent that starts below <paramref name="from"/> is split there (xfs_bmap_split_extent).
    /// One extent per part of one rolling transaction.
    /// </summary>
    private void ShiftExtents(VolumeWriteState w, ulong ino, ulong from, ulong shift, bool up)
    {
        var current = _inodes.Get(ino);
        if (current.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree)) return;
        using var tx = Begin(w, TransactionKind.Write);
        var update = new InodeUpdate(current, _mount.Superblock);
        var editor = new ExtentMapEditor(tx, update, w.FileSpace);
        // The pieces to move, in the order they move: ascending for a collapse, descending for an insert.
        var pieces = new List<BmbtRecord>();
        foreach (var e in editor.Extents)
        {
            if (e.FileEnd <= from) continue;
            ulong start = Math.Max(e.FileOffset, from);
            pieces.Add(new BmbtRecord(start, e.StartBlock + (start - e.FileOffset), (uint)(e.FileEnd - start), e.Unwritten));
        }
        if (pieces.Count == 0)
        {
            tx.Cancel();
            return;
        }
        if (up) pieces.Reverse();
        for (int i = 0; i < pieces.Count; i++)
        {
            var piece = pieces[i];
            editor.UnmapRemap(piece.FileOffset, piece.BlockCount);
            editor.Remap(piece with { FileOffset = up ? piece.FileOffset + shift : piece.FileOffset - shift });
            editor.Save();
            update.Log(tx, _inodes);
            if (i + 1 < pieces.Count) tx.FinishDeferred();
        }
        tx.Commit();
    }
}

using System.Buffers;
using XfsWin.Allocation;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

// Reflink and copy-on-write, in the shape of the kernel's fs/xfs/xfs_reflink.c. Sharing is recorded in the refcount
// btree (counts of two and more; a block in no record is used once); a file that may share blocks carries
// XFS_DIFLAG2_REFLINK, and every mapping change of such a file uses the shared reverse-map operations and lowers
// reference counts instead of freeing (blocks reaching zero are freed). Every change is deferred work (BUI, CUI, RUI,
// EFI) chained in rolling transactions, so that a crash at any point leaves intents the kernel's log recovery finishes.
public sealed partial class XfsVolume
{
    /// <summary>
    /// FICLONE / FICLONERANGE (the kernel's xfs_file_remap_range): the destination's range
    /// [<paramref name="destinationOffset"/>, +length) comes to share the source's blocks of
    /// [<paramref name="sourceOffset"/>, +length); the destination's old blocks there are unmapped (freed when no other
    /// file shares them). <paramref name="length"/> 0 means up to the source's EOF (FICLONE is
    /// <c>CloneRange(src, 0, dst, 0, 0)</c>). Offsets must be multiples of the block size, and so must the length unless
    /// the range ends at the source's EOF. The destination grows to cover the range when it ends past its EOF; it never
    /// shrinks. Returns the bytes remapped. The checks are the VFS's (generic_remap_checks) and XFS's:
    /// <see cref="XfsError.Unsupported"/> on a volume without reflink, <see cref="XfsError.IsADirectory"/> /
    /// <see cref="XfsError.InvalidArgument"/> for other than regular files, unaligned or overlapping ranges, a source range
    /// past EOF, the source's partial last block going to before the destination's EOF;
    /// <see cref="XfsError.NotPermitted"/> for an immutable or append-only destination.
    /// <para>
    /// Each piece of the range reserves the destination's quota in turn (xfs_reflink_remap_extent), so a clone that
    /// reaches a limit stops there: the pieces before stay remapped and the refusal is thrown, as FICLONE and
    /// FICLONERANGE report it; both files carry the reflink flag and the destination's times change even then.
    /// </para>
    /// </summary>
    public long CloneRange(ulong source, long sourceOffset, ulong destination, long destinationOffset, long length) =>
        RemapRange(source, sourceOffset, destination, destinationOffset, length, canShorten: false);

    /// <summary>
    /// The kernel's xfs_file_remap_range. With <paramref name="canShorten"/> (REMAP_FILE_CAN_SHORTEN, copy_file_range's
    /// remap) a quota refusal after some pieces were remapped returns the bytes remapped instead of the refusal.
    /// </summary>
    private long RemapRange(ulong source, long sourceOffset, ulong destination, long destinationOffset, long length, bool canShorten)
    {
        if (sourceOffset < 0 || destinationOffset < 0 || length < 0)
            throw new XfsException(XfsError.InvalidArgument, "clone offsets and length cannot be negative");
        var w = Writer();
        var sb = _mount.Superblock;
        if (!sb.HasReflink) throw new XfsException(XfsError.Unsupported, "the volume was made without reflink (mkfs.xfs -m reflink=1)");
        using (w.Changes.Change())
        {
            var src = _inodes.Get(source);
            var dst = _inodes.Get(destination);
            foreach (var f in new[] { src, dst })
            {
                if (f.IsDirectory) throw new XfsException(XfsError.IsADirectory, "a directory cannot be cloned");
                if (!f.IsRegular) throw new XfsException(XfsError.InvalidArgument, "only regular files can share blocks");
                if (f.Attributes.LinkCount == 0 && !IsHeld(f.Number)) throw new XfsException(XfsError.NotFound, $"inode {f.Number} has been removed");
                if ((f.Attributes.Flags & DinodeView.FlagRealtime) != 0) throw new XfsException(XfsError.InvalidArgument, "realtime files cannot be cloned");
            }
            if ((dst.Attributes.Flags & (DinodeView.FlagImmutable | DinodeView.FlagAppend)) != 0)
                throw new XfsException(XfsError.NotPermitted, "the destination is immutable or append-only");
            long bs = sb.BlockSize;
            long sizeIn = src.Size;
            // generic_remap_file_range_prep: a zero length reaches the source's EOF.
            if (length == 0)
            {
                if (sourceOffset == sizeIn) return 0;
                if (sourceOffset > sizeIn) throw new XfsException(XfsError.InvalidArgument, "the source offset is past the source's EOF");
                length = sizeIn - sourceOffset;
            }
            // generic_remap_checks.
            if (sourceOffset % bs != 0 || destinationOffset % bs != 0)
                throw new XfsException(XfsError.InvalidArgument, $"clone offsets must be multiples of the block size ({bs})");
            if (sourceOffset + length < sourceOffset || destinationOffset + length < destinationOffset || destinationOffset + length > MaxFileSize - bs)
                throw new XfsException(XfsError.InvalidArgument, "the clone range wraps or passes the largest file size");
            if (sourceOffset >= sizeIn) throw new XfsException(XfsError.InvalidArgument, "the source range starts at or past the source's EOF");
            if (length > sizeIn - sourceOffset)
                throw new XfsException(XfsError.InvalidArgument, "the source range passes the source's EOF");
            long blockLength;
            if (sourceOffset + length == sizeIn) blockLength = (sizeIn + bs - 1) / bs * bs - sourceOffset;
            else if (length % bs != 0) throw new XfsException(XfsError.InvalidArgument, $"a clone length that does not reach the source's EOF must be a multiple of the block size ({bs})");
            else blockLength = length;
            if (source == destination && destinationOffset + blockLength > sourceOffset && destinationOffset < sourceOffset + blockLength)
                throw new XfsException(XfsError.InvalidArgument, "the ranges overlap in the same file");
            // The source's partial EOF block would bring its zeros past EOF inside the destination's data.
            if (blockLength != length && destinationOffset + length < dst.Size)
                throw new XfsException(XfsError.InvalidArgument, "a partial last block of the source cannot be cloned to before the destination's EOF");

            // xfs_reflink_remap_prep: both files carry the reflink flag before any block is shared.
            SetReflinkFlags(w, source, destination);
            // Past the destination's EOF, what its old last block holds beyond EOF must read as zeros.
            ZeroTailOfShared(w, _inodes.Get(destination), destinationOffset + length);
            ulong remapped = RemapBlocks(w, source, (ulong)(sourceOffset >> sb.BlockLog), destination, (ulong)(destinationOffset >> sb.BlockLog),
                (ulong)(blockLength >> sb.BlockLog), destinationOffset + length, out var refusal);
            TouchModified(w, destination);
            AfterCommit(w);
            if (refusal is null) return length;
            // xfs_file_remap_range: a caller that cannot take a short remap gets the refusal, so does one for which
            // nothing was remapped; otherwise the bytes remapped.
            long done = Math.Min(length, (long)(remapped << sb.BlockLog));
            if (!canShorten || done == 0) throw refusal;
            return done;
        }
    }

    /// <summary>
    /// copy_file_range(2) as the kernel's XFS answers it (vfs_copy_file_range): at most <paramref name="length"/> bytes,
    /// up to the source's EOF, 0 at or past it. Where the volume has reflink and both offsets are block-aligned, the
    /// blocks are shared instead of copied (a remap that may shorten: to the source's EOF, or a whole number of blocks),
    /// and the count remapped is returned, as the kernel's returns it; otherwise, or when no whole block fits, the bytes
    /// are copied. Overlapping ranges of one file are <see cref="XfsError.InvalidArgument"/>.
    /// </summary>
    public long CopyFileRange(ulong source, long sourceOffset, ulong destination, long destinationOffset, long length)
    {
        if (sourceOffset < 0 || destinationOffset < 0 || length < 0)
            throw new XfsException(XfsError.InvalidArgument, "copy offsets and length cannot be negative");
        _ = Writer();
        // MAX_RW_COUNT: what one call copies at most.
        length = Math.Min(length, 0x7FFFF000L);
        var src = GetAttributes(source);
        var dst = GetAttributes(destination);
        if (src.FileType == XfsFileType.Directory || dst.FileType == XfsFileType.Directory)
            throw new XfsException(XfsError.IsADirectory, "a directory cannot be copied into or from");
        if (src.FileType != XfsFileType.RegularFile || dst.FileType != XfsFileType.RegularFile) throw new XfsException(XfsError.InvalidArgument, "only regular files can be copied between");
        long sizeIn = src.Size;
        if (sourceOffset >= sizeIn || length == 0) return 0;
        long count = Math.Min(length, sizeIn - sourceOffset);
        if (source == destination && destinationOffset + count > sourceOffset && destinationOffset < sourceOffset + count)
            throw new XfsException(XfsError.InvalidArgument, "the ranges overlap in the same file");
        long bs = _mount.Superblock.BlockSize;
        if (_mount.Superblock.HasReflink && sourceOffset % bs == 0 && destinationOffset % bs == 0)
        {
            long remap = sourceOffset + count == sizeIn ? count : count / bs * bs;
            // generic_remap_check_len with REMAP_FILE_CAN_SHORTEN: a partial EOF block is linked only at or past the
            // destination's EOF; inside it the remap stops at the last whole block, and the call returns that count.
            if (remap % bs != 0 && destinationOffset + remap < dst.Size) remap = remap / bs * bs;
            if (remap > 0)
            {
                try
                {
                    return RemapRange(source, sourceOffset, destination, destinationOffset, remap, canShorten: true);
                }
                catch (XfsException e) when (e.Error is XfsError.InvalidArgument or XfsError.Unsupported or XfsError.QuotaExceeded or XfsError.NoSpace)
                {
                    // The kernel falls back to copying the bytes (splice) whenever the remap remapped nothing.
                }
            }
        }
        var buffer = ArrayPool<byte>.Shared.Rent((int)Math.Min(count, 1L << 20));
        long done = 0;
        try
        {
            while (done < count)
            {
                int n = Read(source, sourceOffset + done, buffer.AsSpan(0, (int)Math.Min(buffer.Length, count - done)));
                if (n <= 0) break;
                // A write that reaches a quota or the end of free space returns short: the copy ends there.
                int written = WriteUpToLimit(destination, destinationOffset + done, buffer.AsSpan(0, n));
                done += written;
                if (written < n) break;
            }
            return done;
        }
        catch (XfsException e) when (done > 0 && e.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
        {
            // As the kernel's splice: what was copied before the refusal is the result.
            return done;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }

    /// <summary>
    /// A write of <paramref name="data"/> that, refused whole for quota or space (a write reserves each hole it fills
    /// at once), writes block by block up to the limit instead, as the kernel's page-cache copy does; throws the
    /// refusal when not one block fits.
    /// </summary>
    private int WriteUpToLimit(ulong inode, long offset, ReadOnlySpan<byte> data)
    {
        try
        {
            return Write(inode, offset, data);
        }
        catch (XfsException e) when (e.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
        {
            int bs = (int)_mount.Superblock.BlockSize, done = 0;
            while (done < data.Length)
            {
                // Pieces end on block boundaries of the file.
                int piece = (int)Math.Min(data.Length - done, bs - (offset + done) % bs);
                int written;
                try
                {
                    written = Write(inode, offset + done, data.Slice(done, piece));
                }
                catch (XfsException q) when (q.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
                {
                    if (done == 0) throw;
                    break;
                }
                done += written;
                if (written < piece) break;
            }
            return done;
        }
    }

    /// <summary>
    /// Before EOF moves up to <paramref name="newEnd"/> (a size change, a write or clone past EOF, an insert): the old
    /// last block's bytes past EOF are zeroed as the kernel's xfs_zero_range does there, which for a reflinked file's
    /// shared block means copy-on-write (so the file stops sharing it, as on the kernel). Other files' bytes past EOF
    /// are zeros already. Returns the inode as it is now.
    /// </summary>
    private Inode ZeroTailOfShared(VolumeWriteState w, Inode current, long newEnd)
    {
        long bs = _mount.Superblock.BlockSize, size = current.Size;
        if ((current.Attributes.Flags2 & DinodeView.Flag2Reflink) == 0 || size % bs == 0 || newEnd <= size) return current;
        ZeroPartialBlocks(w, current, size, Math.Min(newEnd, (size + bs - 1) / bs * bs));
        return _inodes.Get(current.Number);
    }

    /// <summary>xfs_reflink_set_inode_flag: XFS_DIFLAG2_REFLINK on both files (one transaction).</summary>
    private void SetReflinkFlags(VolumeWriteState w, ulong source, ulong destination)
    {
        var sb = _mount.Superblock;
        bool srcSet = (_inodes.Get(source).Attributes.Flags2 & DinodeView.Flag2Reflink) != 0;
        bool dstSet = (_inodes.Get(destination).Attributes.Flags2 & DinodeView.Flag2Reflink) != 0;
        if (srcSet && dstSet) return;
        using var tx = Begin(w, TransactionKind.Ichange);
        foreach (var ino in source == destination ? new[] { source } : [source, destination])
        {
            var update = new InodeUpdate(_inodes.Get(ino), sb);
            if ((update.Flags2 & DinodeView.Flag2Reflink) != 0) continue;
            update.Flags2 |= DinodeView.Flag2Reflink;
            update.Log(tx, _inodes);
        }
        tx.Commit();
    }

    /// <summary>
    /// xfs_reflink_remap_blocks: walks the source range a mapping at a time; each piece (where the source's and the
    /// destination's mappings are both uniform) is remapped in a transaction of its own (xfs_reflink_remap_extent):
    /// the destination's old mapping is unmapped (BUI) and its reference count lowered (CUI, freed at zero); a written
    /// source extent has its count raised (CUI) and is mapped into the destination (BUI); holes and unwritten source
    /// extents leave a hole. A piece where both files have a hole, both are unwritten, or both map the same blocks is
    /// left as it is. The destination's size grows with each piece remapped, and to <paramref name="newSize"/> at the
    /// end (xfs_reflink_update_dest).
    /// <para>
    /// Quota, per piece as the kernel reserves it: a mapping split and the piece's blocks; when that is refused, the
    /// split alone, then the piece's blocks only if it maps written blocks over a hole (replacing mapped blocks adds
    /// none). A refusal stops the walk: it is returned in <paramref name="refusal"/>, with the blocks remapped before
    /// it (the pieces done stay done, and the size is not taken to <paramref name="newSize"/>).
    /// </para>
    /// </summary>
    private ulong RemapBlocks(VolumeWriteState w, ulong source, ulong srcBlock, ulong destination, ulong dstBlock, ulong blocks, long newSize,
        out XfsException? refusal)
    {
        var sb = _mount.Superblock;
        var allocator = w.FileSpace.Allocator;
        bool enforced = w.Quota is { Enforced: not 0 };
        refusal = null;
        ulong done = 0;
        for (; done < blocks;)
        {
            ulong remaining = blocks - done;
            ulong srcAt = srcBlock + done, dstAt = dstBlock + done;
            // The source's mapping here (from its committed state): an extent, or a hole up to the next one.
            var srcInode = _inodes.Get(source);
            BmbtRecord e = default;
            ulong next = ulong.MaxValue;
            bool found = srcInode.DataFormat is ForkFormat.Extents or ForkFormat.Btree && _maps.Get(srcInode, ForkKind.Data).TryFind(srcAt, out e, out next);
            (BmbtRecord Map, bool Real) smap = found
                ? (new BmbtRecord(dstAt, e.StartBlock + (srcAt - e.FileOffset), (uint)Math.Min(Math.Min(e.FileEnd - srcAt, remaining), BmbtRecord.MaxBlockCount), e.Unwritten), !e.Unwritten)
                : (new BmbtRecord(dstAt, 0, (uint)Math.Min(next == ulong.MaxValue || next <= srcAt ? remaining : Math.Min(next - srcAt, remaining), BmbtRecord.MaxBlockCount), false), false);

            bool quotaReserved = true;
            if (enforced)
            {
                var owner = _inodes.Get(destination);
                try
                {
                    ReserveQuota(w, owner, w.Reservations.ExtentAddSpaceBlocks + smap.Map.BlockCount);
                }
                catch (XfsException q) when (q.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
                {
                    quotaReserved = false;
                    try
                    {
                        ReserveQuota(w, owner, w.Reservations.ExtentAddSpaceBlocks);
                    }
                    catch (XfsException split) when (split.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
                    {
                        refusal = split;
                        break;
                    }
                }
            }

            using var tx = Begin(w, TransactionKind.Write);
            var dst = InodeUpdate.Find(tx, _inodes, destination);
            uint len = smap.Map.BlockCount;
            BmbtRecord? dmap = null;
            if (dst.DataFormat is ForkFormat.Extents or ForkFormat.Btree)
            {
                var editor = new ExtentMapEditor(tx, dst, w.FileSpace);
                if (editor.TryMap(dstAt, out var d))
                {
                    len = (uint)Math.Min(len, d.FileEnd - dstAt);
                    dmap = new BmbtRecord(dstAt, d.StartBlock + (dstAt - d.FileOffset), len, d.Unwritten);
                }
                else len = (uint)Math.Min(len, editor.NextMapped(dstAt) - dstAt);
            }
            var map = smap.Map with { BlockCount = len };
            // Nothing to do (the kernel cancels these): holes in both, unwritten extents in both, or the same blocks.
            bool leave = dmap is not { } already
                ? !found
                : found && (already.StartBlock == map.StartBlock || already.Unwritten && e.Unwritten);
            if (leave)
            {
                tx.Cancel();
                done += len;
                continue;
            }
            if (enforced && !quotaReserved && dmap is null && smap.Real)
            {
                try
                {
                    ReserveQuota(w, _inodes.Get(destination), len);
                }
                catch (XfsException q) when (q.Error is XfsError.QuotaExceeded or XfsError.NoSpace)
                {
                    tx.Cancel();
                    refusal = q;
                    break;
                }
            }
            if (dmap is { } old)
            {
                tx.Defer(w.Bmaps, new BmapUpdate(BmapUpdateKind.Unmap, destination, ForkKind.Data, old));
                tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.Decrease, old.StartBlock, old.BlockCount));
            }
            if (smap.Real)
            {
                tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.Increase, map.StartBlock, map.BlockCount));
                tx.Defer(w.Bmaps, new BmapUpdate(BmapUpdateKind.Map, destination, ForkKind.Data, map));
            }
            // The size covers what is now mapped (no mapping lies past EOF on disk).
            long end = Math.Min((long)((dstAt + len) << sb.BlockLog), newSize);
            bool grows = end > (long)dst.Size;
            if (grows)
            {
                dst.Size = (ulong)end;
                dst.Log(tx, _inodes);
            }
            if (!grows && !tx.HasDeferredWork) tx.Cancel();
            else tx.Commit();
            AfterCommit(w);
            done += len;
        }
        if (refusal is null && (long)_inodes.Get(destination).Size < newSize)
        {
            using var tx = Begin(w, TransactionKind.Ichange);
            var dst = InodeUpdate.Find(tx, _inodes, destination);
            dst.Size = (ulong)newSize;
            dst.Log(tx, _inodes);
            tx.Commit();
            AfterCommit(w);
        }
        return done;
    }

    /// <summary>
    /// Copy-on-write of the shared blocks of file blocks [<paramref name="first"/>, <paramref name="end"/>) of a
    /// reflinked file (xfs_reflink_allocate_cow, then xfs_reflink_end_cow): each shared run gets staging blocks (a CoW
    /// staging extent in the refcount btree, so a crash before the remap leaves them to recovery to free; staged ahead
    /// for the range the copy-on-write extent size hint rounds the run out to, see <see cref="CowStaging"/>), its data
    /// is copied there with <paramref name="overlay"/> (the bytes of a write at <paramref name="overlayOffset"/>) laid
    /// over it, then one transaction chain remaps the run: the old blocks leave the file (their count lowered, freed at
    /// zero), the staging blocks leave the CoW domain and are mapped in. Blocks the file alone uses are left in place.
    /// </summary>
    private void Unshare(VolumeWriteState w, ulong ino, ulong first, ulong end, long overlayOffset, ReadOnlySpan<byte> overlay)
    {
        foreach (var run in SharedRuns(w, _inodes.Get(ino), first, end)) CopyOnWrite(w, ino, run, overlayOffset, overlay);
    }

    /// <summary>The written blocks of file blocks [<paramref name="first"/>, <paramref name="end"/>) of a reflinked file that other files share (file offset, disk block, length).</summary>
    private List<BmbtRecord> SharedRuns(VolumeWriteState w, Inode current, ulong first, ulong end)
    {
        var shared = new List<BmbtRecord>();
        if ((current.Attributes.Flags2 & DinodeView.Flag2Reflink) == 0 || current.DataFormat is not (ForkFormat.Extents or ForkFormat.Btree)) return shared;
        var allocator = w.FileSpace.Allocator;
        var map = _maps.Get(current, ForkKind.Data);
        for (ulong fb = first; fb < end;)
        {
            if (!map.TryFind(fb, out var e, out ulong next))
            {
                fb = next == ulong.MaxValue || next <= fb ? end : next;
                continue;
            }
            ulong stop = Math.Min(end, e.FileEnd);
            if (!e.Unwritten)
            {
                ulong fsb = e.StartBlock + (fb - e.FileOffset);
                using var q = Begin(w, TransactionKind.Write);
                foreach (var (start, length) in allocator.SharedRuns(q, fsb, (uint)(stop - fb)))
                    shared.Add(new BmbtRecord(fb + (start - fsb), start, length, false));
                q.Cancel();
            }
            fb = stop;
        }
        return shared;
    }

    private void CopyOnWrite(VolumeWriteState w, ulong ino, BmbtRecord run, long overlayOffset, ReadOnlySpan<byte> overlay)
    {
        var sb = _mount.Superblock;
        var allocator = w.FileSpace.Allocator;
        uint hint = ExtentSizeHint.CopyOnWrite(_inodes.Get(ino));
        for (uint done = 0; done < run.BlockCount;)
        {
            ulong fileBlock = run.FileOffset + done, oldFsb = run.StartBlock + done;
            if (!w.CowStaging.TryTake(ino, fileBlock, run.BlockCount - done, out ulong newFsb, out uint got))
            {
                Stage(w, ino, fileBlock, run.BlockCount - done, oldFsb, hint);
                if (!w.CowStaging.TryTake(ino, fileBlock, run.BlockCount - done, out newFsb, out got))
                    throw new InvalidOperationException($"inode {ino}: file block {fileBlock} is not staged after staging it");
            }
            CopyBlocks(w, oldFsb, newFsb, got, fileBlock, overlayOffset, overlay);
            // xfs_reflink_end_cow_extent: the data is in the staging blocks before the remap that maps them commits
            // (held file data is written before the checkpoint that holds the remap).
            using (var tx = Begin(w, TransactionKind.Write))
            {
                var oldMap = new BmbtRecord(fileBlock, oldFsb, got, false);
                tx.Defer(w.Bmaps, new BmapUpdate(BmapUpdateKind.Unmap, ino, ForkKind.Data, oldMap));
                tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.Decrease, oldFsb, got));
                tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.FreeCow, newFsb, got));
                if (sb.HasRmapbt) tx.Defer(allocator.RmapUpdates, new RmapUpdate(RmapUpdateKind.Free, newFsb, got, RmapOwner.Cow));
                tx.Defer(w.Bmaps, new BmapUpdate(BmapUpdateKind.Map, ino, ForkKind.Data, oldMap with { StartBlock = newFsb }));
                tx.Commit();
            }
            AfterCommit(w);
            done += got;
        }
    }

    /// <summary>
    /// Stages blocks for file block <paramref name="fileBlock"/> (not staged) and the <paramref name="count"/> - 1 after
    /// it, rounded out to <paramref name="hint"/> between the file's staged neighbours (xfs_bmap_extsize_align on the
    /// CoW fork): one staging extent per contiguous piece the allocator finds, the first reaching
    /// <paramref name="fileBlock"/> and near <paramref name="nearFsb"/> (where the shared block lies), each next one
    /// after the last. The write needs only the blocks from <paramref name="fileBlock"/> on: when no extent reaching it
    /// is free, those alone are staged, and the rest of the range only as far as space allows. Throws NoSpace when not
    /// even <paramref name="fileBlock"/> can be staged.
    /// </summary>
    private void Stage(VolumeWriteState w, ulong ino, ulong fileBlock, uint count, ulong nearFsb, uint hint)
    {
        var (previousEnd, nextStart) = w.CowStaging.Neighbours(ino, fileBlock);
        ulong want = Math.Min(count, nextStart - fileBlock);
        var (offset, length) = ExtentSizeHint.Align(fileBlock, want, hint, previousEnd, nextStart);
        ulong near = nearFsb >= fileBlock - offset ? nearFsb - (fileBlock - offset) : nearFsb;
        ulong pos = offset, end = offset + length;
        if (!TryStagePiece(w, ino, ref pos, end, (uint)(fileBlock - offset + 1), ref near))
        {
            pos = fileBlock;
            end = fileBlock + want;
            near = nearFsb;
            if (!TryStagePiece(w, ino, ref pos, end, 1, ref near))
                throw new XfsException(XfsError.NoSpace, $"no space left on the volume for a copy of a shared block of inode {ino}; free some space and retry");
        }
        while (pos < end && TryStagePiece(w, ino, ref pos, end, 1, ref near)) { }
    }

    /// <summary>
    /// Stages file blocks from <paramref name="from"/> (at least <paramref name="minBlocks"/>, at most up to
    /// <paramref name="end"/>) in one transaction, near <paramref name="near"/>; both move past what was staged. False
    /// when no extent that long is free.
    /// </summary>
    private bool TryStagePiece(VolumeWriteState w, ulong ino, ref ulong from, ulong end, uint minBlocks, ref ulong near)
    {
        using var tx = Begin(w, TransactionKind.Write);
        uint max = (uint)Math.Min(end - from, BmbtRecord.MaxBlockCount);
        var piece = w.FileSpace.TryAllocateCow(tx, ino, near, Math.Min(minBlocks, max), max);
        // A search that found nothing leaves only consistent free-list fixes: it commits like any other change.
        tx.Commit();
        if (piece is null) return false;
        var (fsb, got) = piece.Value;
        w.CowStaging.Add(ino, from, fsb, got);
        from += got;
        near = fsb + got;
        return true;
    }

    /// <summary>Frees the blocks staged for <paramref name="ino"/> that no write used (xfs_reflink_cancel_cow_range over the whole file). Under the change lock.</summary>
    private void CancelCowStaging(VolumeWriteState w, ulong ino)
    {
        foreach (var e in w.CowStaging.Remove(ino)) FreeStagingExtent(w, e.StartBlock, e.BlockCount);
    }

    /// <summary>
    /// One staging extent leaves the refcount btree's CoW domain, its OWN_COW reverse mapping goes and its blocks are
    /// freed, in one transaction and its deferred work.
    /// </summary>
    private void FreeStagingExtent(VolumeWriteState w, ulong start, uint length)
    {
        var allocator = w.FileSpace.Allocator;
        using var tx = Begin(w, TransactionKind.Write);
        if (_mount.Superblock.HasRmapbt)
            tx.Defer(allocator.RmapUpdates, new RmapUpdate(RmapUpdateKind.Free, start, length, RmapOwner.Cow));
        tx.Defer(allocator.RefcountUpdates, new RefcountUpdate(RefcountUpdateKind.FreeCow, start, length));
        tx.Defer(allocator.ExtentFrees, new ExtentToFree(start, length, RmapOwner.Null));
        tx.Commit();
        AfterCommit(w);
    }

    /// <summary>Copies <paramref name="count"/> blocks from <paramref name="fromFsb"/> to <paramref name="toFsb"/> through the file data cache, with the overlay's bytes (file offsets) laid over them.</summary>
    private void CopyBlocks(VolumeWriteState w, ulong fromFsb, ulong toFsb, uint count, ulong fileBlock, long overlayOffset, ReadOnlySpan<byte> overlay)
    {
        var sb = _mount.Superblock;
        const uint ChunkBlocks = 256;
        int chunkBytes = (int)(Math.Min(count, ChunkBlocks) << sb.BlockLog);
        var buffer = ArrayPool<byte>.Shared.Rent(chunkBytes);
        try
        {
            for (uint i = 0; i < count;)
            {
                uint n = Math.Min(ChunkBlocks, count - i);
                var span = buffer.AsSpan(0, (int)(n << sb.BlockLog));
                long fileStart = (long)((fileBlock + i) << sb.BlockLog);
                long overlayEnd = overlayOffset + overlay.Length;
                bool covered = overlay.Length > 0 && overlayOffset <= fileStart && overlayEnd >= fileStart + span.Length;
                if (!covered) w.Data.Read(sb.FsbToByte(fromFsb + i), span);
                long s = Math.Max(fileStart, overlayOffset), e = Math.Min(fileStart + span.Length, overlayEnd);
                if (overlay.Length > 0 && e > s) overlay.Slice((int)(s - overlayOffset), (int)(e - s)).CopyTo(span[(int)(s - fileStart)..]);
                w.Data.Write(sb.FsbToByte(toFsb + i), span);
                i += n;
            }
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }
}

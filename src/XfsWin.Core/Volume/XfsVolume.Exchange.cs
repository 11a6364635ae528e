using XfsWin.Attributes;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

/// <summary>The flags of XFS_IOC_EXCHANGE_RANGE (struct xfs_exchange_range, xfs_fs.h).</summary>
[Flags]
public enum ExchangeRangeFlags : ulong
{
    None = 0,
    /// <summary>Exchange everything from the offsets to the end of both files, and the files' sizes.</summary>
    ToEof = 1,
    /// <summary>The exchange is durable when the call returns.</summary>
    Dsync = 2,
    /// <summary>Check the request only.</summary>
    DryRun = 4,
    /// <summary>Move only the written mappings of file 1 (holes and unwritten extents of file 1 stay as file 2 has them).</summary>
    File1Written = 8,
    All = ToEof | Dsync | DryRun | File1Written,
}

/// <summary>
/// What XFS_IOC_START_COMMIT samples of file 2 (xfs_ioc_start_commit) and XFS_IOC_COMMIT_RANGE checks before it
/// exchanges: the inode, its generation, mtime and ctime.
/// </summary>
public readonly record struct ExchangeFreshness(ulong Inode, uint Generation, long MtimeSeconds, uint MtimeNanoseconds, long CtimeSeconds, uint CtimeNanoseconds);

// XFS_IOC_EXCHANGE_RANGE (the kernel's xfs_exchrange.c): the mappings of a range of one file and the same-sized range
// of another trade places, all or nothing, through the deferred mapping exchange (ExchangeWork: an XMI promising the
// rest, each step's bmap intents, an XMD and a new XMI per step), so that a crash at any point leaves either file's
// range as it was or as it became, never a mix the log cannot finish.
//
// No log-incompatible feature bit is set for it: mainline kernels (6.10 on) protect exchange intents with the
// exchange-range incompat feature mkfs sets (sb_features_incompat 0x40), which such volumes carry permanently.
public sealed partial class XfsVolume
{
    /// <summary>
    /// Exchanges <paramref name="length"/> bytes of <paramref name="file1"/> at <paramref name="offset1"/> with as many of
    /// <paramref name="file2"/> at <paramref name="offset2"/> (file 2 is the one the ioctl was called on), with the
    /// kernel's checks: <see cref="XfsError.Unsupported"/> on a volume without the exchange-range feature,
    /// <see cref="XfsError.IsADirectory"/> / <see cref="XfsError.InvalidArgument"/> for other than regular files,
    /// unknown flags, ranges starting past EOF, ending past EOF (unless <see cref="ExchangeRangeFlags.ToEof"/>),
    /// offsets not on block boundaries, lengths neither on block boundaries nor reaching an EOF, a partial last
    /// block going into the middle of the other file, overlapping ranges of one file;
    /// <see cref="XfsError.NotPermitted"/> for an immutable file. Both files' mtime and ctime move. After the exchange
    /// each file loses its privileges as a write's file_remove_privs takes them (file 1, then file 2): its
    /// security.capability attribute whoever calls, and for a caller without CAP_FSETID (<paramref name="privileged"/>
    /// false) setuid, and setgid when the group may execute or the caller is not in the file's group
    /// (<paramref name="callerInGroup"/>; null: in every group). Returns the bytes exchanged (0 for a dry run).
    /// </summary>
    /// <remarks>
    /// With <paramref name="freshness"/> (XFS_IOC_COMMIT_RANGE) a non-empty exchange first checks, after the range
    /// checks, that file 2 is the inode sampled and unchanged since (generation, mtime, ctime):
    /// <see cref="XfsError.Changed"/> (EBUSY) otherwise, dry runs included.
    /// </remarks>
    public long ExchangeRange(ulong file1, long offset1, ulong file2, long offset2, long length, ExchangeRangeFlags flags, bool privileged = true,
        Func<uint, bool>? callerInGroup = null, ExchangeFreshness? freshness = null)
    {
        if ((flags & ~ExchangeRangeFlags.All) != 0) throw Invalid($"unknown exchange flags 0x{(ulong)(flags & ~ExchangeRangeFlags.All):x}");
        if (offset1 < 0 || offset2 < 0 || length < 0) throw Invalid("exchange offsets and length cannot be negative");
        var w = Writer();
        var sb = _mount.Superblock;
        if ((sb.Incompat & SuperblockFeatures.IncompatExchangeRange) == 0)
            throw new XfsException(XfsError.Unsupported, "the volume was made without exchange-range (mkfs.xfs -i exchange=1)");
        using (w.Changes.Change())
        {
            var ip1 = _inodes.Get(file1);
            var ip2 = _inodes.Get(file2);
            foreach (var f in new[] { ip1, ip2 })
            {
                if (f.IsDirectory) throw new XfsException(XfsError.IsADirectory, "a directory's contents cannot be exchanged");
                if (!f.IsRegular) throw Invalid("only regular files' contents can be exchanged");
                if (f.Attributes.LinkCount == 0 && !IsHeld(f.Number)) throw new XfsException(XfsError.NotFound, $"inode {f.Number} has been removed");
            }
            // xfs_exchange_range_checks.
            foreach (var f in new[] { ip1, ip2 })
                if ((f.Attributes.Flags & DiImmutable) != 0) throw new XfsException(XfsError.NotPermitted, $"inode {f.Number} is immutable");
            long size1 = ip1.Size, size2 = ip2.Size, bs = sb.BlockSize;
            if (offset1 > size1 || offset2 > size2) throw Invalid("an exchange range starts past its file's EOF");
            if ((flags & ExchangeRangeFlags.ToEof) != 0) length = Math.Max(size1 - offset1, size2 - offset2);
            if (offset1 % bs != 0 || offset2 % bs != 0) throw Invalid($"exchange offsets must be multiples of the block size ({bs})");
            if (offset1 + length < offset1 || offset2 + length < offset2) throw Invalid("the exchange range wraps");
            if ((flags & ExchangeRangeFlags.ToEof) == 0 && (offset1 + length > size1 || offset2 + length > size2))
                throw Invalid("an exchange range passes its file's EOF");
            long blen;
            if (offset1 + length == size1) blen = (size1 + bs - 1) / bs * bs - offset1;
            else if (offset2 + length == size2) blen = (size2 + bs - 1) / bs * bs - offset2;
            else if (length % bs != 0) throw Invalid($"an exchange length that reaches neither EOF must be a multiple of the block size ({bs})");
            else blen = length;
            if (file1 == file2 && offset2 + blen > offset1 && offset1 + blen > offset2) throw Invalid("the ranges overlap in the same file");
            if (length % bs != 0)
            {
                // A partial last block goes only where it stays the last block.
                long check = length;
                if (offset2 + check < size2) check -= check % bs;
                if (offset1 + check < size1) check -= check % bs;
                if (check != length) throw Invalid("a partial last block cannot go into the middle of the other file");
            }
            // xfs_exchrange_check_freshness, for a range that is not empty.
            if (length != 0 && freshness is { } fresh && fresh != FreshnessOf(ip2))
                throw new XfsException(XfsError.Changed, $"inode {file2} changed since the commit was started");
            // A dry run changes no mapping and no time; the privileges go all the same (xfs_exchange_range_finish runs
            // after every exchange that did not fail). An empty range still moves both files' times.
            if ((flags & ExchangeRangeFlags.DryRun) != 0)
            {
                RemovePrivileges(w, file1, privileged, callerInGroup);
                if (file2 != file1) RemovePrivileges(w, file2, privileged, callerInGroup);
                return 0;
            }

            var state = new ExchangeState(file1, file2, ip1.Attributes.Generation, ip2.Attributes.Generation,
                (ulong)offset1 >> sb.BlockLog, (ulong)offset2 >> sb.BlockLog, (ulong)((length + bs - 1) / bs),
                ((flags & ExchangeRangeFlags.ToEof) != 0 ? ExchangeState.SetSizes : 0) |
                ((flags & ExchangeRangeFlags.File1Written) != 0 ? ExchangeState.Ino1Written : 0), -1, -1);
            var exchanges = new ExchangeWork(_inodes, w.Bmaps);
            using (var tx = Begin(w, TransactionKind.Write))
            {
                var now = Now();
                foreach (var ino in file1 == file2 ? new[] { file1 } : [file1, file2])
                {
                    var update = InodeUpdate.Find(tx, _inodes, ino);
                    update.Touch(now, modified: true);
                    update.Log(tx, _inodes);
                }
                if (length > 0)
                {
                    state = exchanges.Start(tx, state);
                    tx.Defer(exchanges, state);
                }
                tx.Commit();
            }
            AfterCommit(w);
            // xfs_exchange_range_finish: as a write would, after the exchange committed.
            RemovePrivileges(w, file1, privileged, callerInGroup);
            if (file2 != file1) RemovePrivileges(w, file2, privileged, callerInGroup);
            if ((flags & ExchangeRangeFlags.Dsync) != 0)
            {
                w.Data.WriteOut();
                w.Access.Data.Flush();
                w.Log.Force();
            }
            return length;
        }

        static XfsException Invalid(string why) => new(XfsError.InvalidArgument, why);
    }

    /// <summary>XFS_IOC_START_COMMIT: what a later <see cref="ExchangeRange"/> with freshness checks of <paramref name="inode"/>.</summary>
    public ExchangeFreshness GetExchangeFreshness(ulong inode)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        return FreshnessOf(_inodes.Get(inode));
    }

    /// <summary>
    /// The kernel's m_fixedfsid of this volume (from the superblock's UUID: bytes 8-9 and 4-5, then bytes 0-3, big
    /// endian), which XFS_IOC_START_COMMIT puts in its freshness record and XFS_IOC_COMMIT_RANGE compares.
    /// </summary>
    public (uint First, uint Second) FixedFileSystemId
    {
        get
        {
            Span<byte> u = stackalloc byte[16];
            _mount.Superblock.Uuid.TryWriteBytes(u, bigEndian: true, out _);
            return (((uint)System.Buffers.Binary.BinaryPrimitives.ReadUInt16BigEndian(u[8..]) << 16) | System.Buffers.Binary.BinaryPrimitives.ReadUInt16BigEndian(u[4..]),
                System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(u));
        }
    }

    private static ExchangeFreshness FreshnessOf(Inode node)
    {
        var a = node.Attributes;
        return new ExchangeFreshness(node.Number, a.Generation, a.ModifyTime.Seconds, a.ModifyTime.Nanoseconds, a.ChangeTime.Seconds, a.ChangeTime.Nanoseconds);
    }

    private static readonly byte[] CapabilityName = "capability"u8.ToArray();

    /// <summary>
    /// The setuid and setgid bits of <paramref name="mode"/> a change by a caller takes away (the kernel's
    /// setattr_should_drop_suidgid, for a write, truncate or chown): setuid, and setgid when the file is
    /// group-executable or when the caller, not privileged, is not in the file's group <paramref name="gid"/>
    /// (<paramref name="callerInGroup"/>; unknown counts as in the group).
    /// </summary>
    public static ushort SetuidSetgidToDrop(uint mode, uint gid, bool callerPrivileged, Func<uint, bool>? callerInGroup)
    {
        ushort kill = (ushort)(mode & ModeSetuid);
        if ((mode & ModeSetgid) != 0 && ((mode & 0x8) != 0 || (!callerPrivileged && callerInGroup?.Invoke(gid) == false)))
            kill |= ModeSetgid;
        return kill;
    }

    /// <summary>
    /// file_remove_privs of a regular file: security.capability goes when it has a value (cap_inode_need_killpriv, for
    /// every caller), setuid and setgid as setattr_should_drop_suidgid says for a caller without CAP_FSETID. The
    /// attribute's removal and the mode change are one transaction with the ctime; nothing is logged when there is
    /// nothing to take. Under the change lock.
    /// </summary>
    private void RemovePrivileges(VolumeWriteState w, ulong inode, bool privileged, Func<uint, bool>? callerInGroup)
    {
        var current = _inodes.Get(inode);
        ushort kill = privileged ? (ushort)0 : SetuidSetgidToDrop(current.Attributes.Mode, current.Attributes.Gid, callerPrivileged: false, callerInGroup);
        bool capability = current.HasAttrFork && _attributes.TryGet(current, XattrNamespace.Secure, CapabilityName, out var value) && value.Length > 0;
        if (kill == 0 && !capability) return;
        // xfs_attr_set's removal: the owner's dquots are reserved what it may allocate (unforced, not a trusted attribute).
        if (capability) ReserveQuota(w, current, w.Reservations.AttrRemoveSpaceBlocks);
        using var tx = Begin(w, capability ? TransactionKind.AttrRm : TransactionKind.Ichange, capability ? AttrReservation(w, current, 0) : 0);
        var update = new InodeUpdate(current, _mount.Superblock);
        if (capability)
            new AttributeEditor(tx, update, w.FileSpace, node => MoveLocalData(tx, w, node)).Remove(XattrNamespace.Secure, CapabilityName);
        update.Mode = (ushort)(update.Mode & ~kill);
        update.Touch(Now(), modified: false);
        update.Log(tx, _inodes);
        tx.Commit();
        AfterCommit(w);
    }
}

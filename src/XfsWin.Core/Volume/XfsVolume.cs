using XfsWin.Attributes;
using XfsWin.Device;
using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

/// <summary>
/// An opened XFS volume: the POSIX-style API every host (CLI, FUSE, WinFsp) uses.
/// Thread-safe: concurrent calls are normal. Inode numbers are the XFS inode numbers.
/// Every method throws <see cref="XfsException"/> (or <see cref="XfsCorruptionException"/>) on failure.
/// </summary>
public sealed partial class XfsVolume : IDisposable
{
    private const int MaxSymlinkHops = 40;
    private readonly IBlockDevice _device;
    private readonly bool _ownsDevice;
    private readonly MountContext _mount;
    private readonly InodeCache _inodes;
    private readonly DirectoryReader _directories;
    private readonly AttributeReader _attributes;
    private readonly ExtentMapCache _maps;
    // Spare batches for reads that meet several extents (see ReadCore).
    private readonly SegmentReadPool _segmentReads = new();
    private readonly AgSummary _agSummary;
    private VolumeInfo _info;

    private XfsVolume(IBlockDevice device, bool ownsDevice, MountContext mount, AgSummary agSummary, Journal.LogRecoveryResult recovery,
        IReadOnlyList<string> warnings, IReadOnlyList<string> readOnlyReasons)
    {
        _device = device;
        _ownsDevice = ownsDevice;
        _mount = mount;
        _inodes = new InodeCache(mount);
        _maps = new ExtentMapCache(mount);
        _directories = new DirectoryReader(mount, _maps);
        _attributes = new AttributeReader(mount, _maps);
        _agSummary = agSummary;
        var sb = mount.Superblock;
        _info = new VolumeInfo
        {
            Label = sb.Label,
            Uuid = sb.Uuid,
            FormatVersion = sb.IsV5 ? 5 : 4,
            BlockSize = (int)sb.BlockSize,
            SectorSize = sb.SectorSize,
            InodeSize = sb.InodeSize,
            DirectoryBlockSize = sb.DirectoryBlockSize,
            AgCount = sb.AgCount,
            AgBlocks = sb.AgBlocks,
            DataBlocks = sb.DataBlocks,
            FreeBlocks = agSummary.FreeBlocks,
            InodeCount = agSummary.Inodes,
            FreeInodes = agSummary.FreeInodes,
            RootInode = sb.RootIno,
            RealtimeBlocks = sb.RtBlocks,
            LogBlocks = sb.LogBlocks,
            ExternalLog = sb.LogStart == 0,
            LogState = recovery.State,
            LogHeadLsn = recovery.State is LogState.External or LogState.Unknown ? 0 : recovery.HeadLsn,
            UnfinishedLogIntents = recovery.UnfinishedIntents,
            UnlinkedInodesAtCrash = recovery.UnlinkedInodes,
            Features = sb.FeatureNames(),
            IoMode = device.IoMode,
            ReadOnlyReasons = readOnlyReasons,
            Warnings = warnings,
        };
    }

    /// <summary>Opens a source: an image file or disk path, optionally with a partition suffix (<c>disk.img@2</c>).</summary>
    public static XfsVolume Open(string source, VolumeOpenOptions? options = null)
    {
        options ??= new VolumeOpenOptions();
        if (options.Writable) return OpenWritable(source, options);
        // In-place log replay writes; the write gate decides whether it may.
        var device = PartitionSpec.Open(source, options.Partition, writable: options.Replay == LogReplayMode.InPlace);
        try
        {
            return OpenDevice(device, options, ownsDevice: true);
        }
        catch
        {
            device.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Opens a volume on a device the caller made (it is disposed with the volume when <paramref name="ownsDevice"/>).
    /// With <see cref="VolumeOpenOptions.Writable"/> the device must be writable and the open is the same read-write
    /// open a path gets (write gate, in-place replay, our log); an external log is then named by
    /// <see cref="VolumeOpenOptions.LogDevice"/> and always owned by the volume.
    /// </summary>
    public static XfsVolume Open(IBlockDevice device, VolumeOpenOptions? options = null, bool ownsDevice = true)
    {
        ArgumentNullException.ThrowIfNull(device);
        options ??= new VolumeOpenOptions();
        if (!options.Writable) return OpenDevice(device, options, ownsDevice);
        IBlockDevice? logDevice = options.LogDevice is null ? null : PartitionSpec.Open(options.LogDevice, null, writable: true);
        try
        {
            var volume = OpenWritable(device, logDevice, options, ownsDevices: ownsDevice);
            // A caller-kept data device with an external log we opened: the volume closes the log with itself.
            if (!ownsDevice && logDevice is not null) volume._ownedLogDevice = logDevice;
            return volume;
        }
        catch
        {
            logDevice?.Dispose();
            throw;
        }
    }

    private IBlockDevice? _ownedLogDevice;

    private static XfsVolume OpenDevice(IBlockDevice device, VolumeOpenOptions options, bool ownsDevice)
    {
        if (device.Length < 512)
            throw new XfsException(XfsError.NotXfs, $"the source is only {device.Length} bytes: not an XFS volume");
        var sector = new byte[Math.Max(512, Math.Min(device.SectorSize, 4096))];
        device.Read(0, sector.AsSpan(0, Math.Min(sector.Length, (int)Math.Min(device.Length, sector.Length))));
        var view = new SuperblockView(sector);
        if (view.MagicNumber != SuperblockView.Magic)
            throw new XfsException(XfsError.NotXfs, "no XFS superblock at the start of the source: it is not an XFS volume (for a whole disk, name a partition: disk.img@N; `xfswin info` lists them)");
        if (view.SectSize > sector.Length && view.SectSize <= 32768 && view.SectSize <= device.Length)
        {
            sector = new byte[view.SectSize];
            device.Read(0, sector);
        }
        var check = Superblock.Verify(sector);
        if (!check.IsOk) throw new XfsCorruptionException("primary superblock", 0, check.ToString());
        var sb = Superblock.Decode(sector);
        CheckReadable(sb, device.Length);

        var warnings = new List<string>();
        var readOnly = new List<string>();
        if (!options.Writable) readOnly.Add("opened read-only (mount with -o rw to write)");
        // What writing would be refused for, by name, from the one list the write gate keeps (`xfswin info` shows it).
        var refusal = WriteGate.Check(sector, WritePurpose.Modify);
        if (refusal is not null) readOnly.Add(refusal.Message);

        var (effective, recovery) = PrepareLog(device, sb, options, warnings);
        if (recovery.State is LogState.ReplayedInMemory or LogState.ReplayedInPlace)
        {
            // The log may have changed the geometry (a logged grow): from here on only the replayed superblock counts.
            sb = LogRecovery.ReadReplayedSuperblock(effective);
            CheckReadable(sb, effective.Length);
        }
        if (sb.RtBlocks > 0) warnings.Add($"the volume has a realtime section ({sb.RtBlocks} blocks) on another device; files stored there cannot be read");
        if (sb.HasAsciiCi) warnings.Add("ascii-ci (case-insensitive names) volume");
        var mount = new MountContext(effective, sb, options.MetadataCacheBytes);
        var summary = AgSummary.Read(mount, warnings);
        return new XfsVolume(device, ownsDevice, mount, summary, recovery, warnings, readOnly);
    }

    /// <summary>Refuses to read volumes whose contents this build could show wrongly.</summary>
    private static void CheckReadable(Superblock sb, long deviceLength)
    {
        uint unknownIncompat = sb.Incompat & ~SuperblockFeatures.IncompatKnown;
        if (unknownIncompat != 0)
        {
            int bit = System.Numerics.BitOperations.TrailingZeroCount(unknownIncompat);
            throw new XfsException(XfsError.Unsupported,
                $"this volume uses an incompatible feature XfsWin does not know ({SuperblockFeatures.IncompatName(bit)}); " +
                "reading it could show wrong data, so it was not opened. Use a newer XfsWin or Linux.");
        }
        if ((sb.Incompat & SuperblockFeatures.IncompatNeedsRepair) != 0)
            throw new XfsException(XfsError.NeedsRepair, "the volume is marked as needing repair (NEEDSREPAIR): run xfs_repair on it from Linux first.");
        if ((sb.Incompat & SuperblockFeatures.IncompatZoned) != 0)
            throw new XfsException(XfsError.Unsupported, "zoned realtime volumes are not supported yet.");
        if (sb.InodeSize > (int)sb.BlockSize)
            throw new XfsException(XfsError.Unsupported, "inodes larger than a block are not supported.");
        long needed = (long)(sb.DataBlocks << sb.BlockLog);
        if (deviceLength < needed)
            throw new XfsException(XfsError.IoError, $"the source holds {deviceLength} bytes but the volume is {needed} bytes: the image is truncated. Copy the whole disk or partition.");
    }

    public VolumeInfo Info => _info;

    public ulong RootInode => _mount.Superblock.RootIno;

    /// <summary>
    /// True when this open cannot write: opened read-only, or a read-write open that found corruption or was shut down
    /// by a write or flush the device failed (<see cref="ShutdownReason"/>).
    /// </summary>
    public bool IsReadOnly => _write is null || _write.Unmounted || !_mount.Health.IsHealthy || ShutdownReason is not null;

    /// <summary>The device failure that shut a read-write open down (every later change fails with EIO), or null.</summary>
    public Exception? ShutdownReason => _write is null ? null : _write.Shutdown.Reason ?? _write.Log.ShutdownReason;

    /// <summary>False once any corruption was found; the volume then stays read-only.</summary>
    public bool IsHealthy => _mount.Health.IsHealthy;

    /// <summary>The first corruption found, if any.</summary>
    public XfsCorruptionException? FirstCorruption => _mount.Health.FirstCorruption;

    internal MountContext Mount => _mount;

    public InodeAttributes GetAttributes(ulong inode)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            return _inodes.Get(inode).Attributes;
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    /// <summary>Looks a name up in a directory by hash (not by scanning). False when absent.</summary>
    public bool TryLookup(ulong directoryInode, ReadOnlySpan<byte> name, out ulong inode)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        if (name.Length > 255) throw new XfsException(XfsError.NameTooLong, "names are at most 255 bytes in XFS");
        try
        {
            var dir = _inodes.Get(directoryInode);
            if (dir.Size <= ChildrenReadAheadMaxDirectoryBytes && Volatile.Read(ref dir.ChildrenReadAhead) == 0 &&
                Interlocked.Exchange(ref dir.ChildrenReadAhead, 1) == 0)
                StartChildrenReadAhead(dir);
            return _directories.TryLookup(dir, name, out inode);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, directoryInode);
        }
    }

    /// <summary>Directories up to this size (about 30,000 entries) have their children read ahead on the first lookup.</summary>
    private const long ChildrenReadAheadMaxDirectoryBytes = 1L << 20;

    private int _disposed;
    private int _readAheadTasks;
    // One thread plans children read-ahead (it lists a directory, waiting for the block reads it
    // starts on the buffer cache's own read-ahead threads, so it must not share them).
    private readonly BackgroundWorkers _readAheadPlanner = new("xfswin-planner", 1);

    /// <summary>Whether <paramref name="inode"/> is decoded in the inode cache (tests of read-ahead).</summary>
    internal bool IsInodeCached(ulong inode) => _inodes.IsCached(inode);

    /// <summary>The data fork's extents of <paramref name="inode"/> in file order (tests that need a given layout).</summary>
    internal List<Format.BmbtRecord> DataExtents(ulong inode)
    {
        using var readScope = new ReadScope(this);
        var extents = new List<Format.BmbtRecord>();
        var ino = _inodes.Get(inode);
        if (ino.DataFormat is ForkFormat.Extents or ForkFormat.Btree)
            _maps.Get(ino, ForkKind.Data).Walk(0, e =>
            {
                extents.Add(e);
                return true;
            });
        return extents;
    }

    /// <summary>Waits until no background read-ahead is planning or reading (or the timeout passed); true when idle.</summary>
    internal bool WaitForReadAhead(TimeSpan timeout)
    {
        var deadline = Environment.TickCount64 + (long)timeout.TotalMilliseconds;
        while (Volatile.Read(ref _readAheadTasks) > 0 || _mount.Buffers.ReadAheadsInFlight > 0)
        {
            if (Environment.TickCount64 >= deadline) return false;
            Thread.Sleep(1);
        }
        return true;
    }

    /// <summary>
    /// The first lookup in a directory starts a background read of the inode clusters its entries
    /// live in. Lookups come in bursts per directory (ls -l, stat of many files, du, tar, a file
    /// manager's view), and inodes created together sit together on disk: a few large reads then
    /// replace one synchronous cluster read per lookup. Errors are ignored here; the lookups that
    /// need the blocks read them again and report what is wrong.
    /// </summary>
    private void StartChildrenReadAhead(Inode dir)
    {
        // Read-ahead plans from mappings read without the change lock: on a read-write open a change could free what it
        // reads, so it runs on read-only opens only.
        if (!dir.IsDirectory || Volatile.Read(ref _disposed) != 0 || _write is not null) return;
        Interlocked.Increment(ref _readAheadTasks);
        if (!_readAheadPlanner.TryQueue(PlanChildrenReadAhead)) Interlocked.Decrement(ref _readAheadTasks);

        void PlanChildrenReadAhead()
        {
            try
            {
                if (Volatile.Read(ref _disposed) != 0) return;
                var collector = new ChildCollector { Inodes = [] };
                _directories.Enumerate(dir, 0, ref collector);
                _inodes.ReadAhead(collector.Inodes);
                if (Volatile.Read(ref _disposed) == 0) _inodes.Preload(collector.Inodes);
            }
            finally
            {
                Interlocked.Decrement(ref _readAheadTasks);
            }
        }
    }

    private struct ChildCollector : IDirectoryVisitor
    {
        public List<ulong> Inodes;

        public readonly bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            if (!name.SequenceEqual("."u8) && !name.SequenceEqual(".."u8)) Inodes.Add(inode);
            return true;
        }
    }

    /// <summary>Resolves a '/'-separated path from the root. Symlinks in the middle are followed (within the volume); the last one only when asked.</summary>
    public ulong ResolvePath(string path, bool followFinalSymlink = false)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        ArgumentNullException.ThrowIfNull(path);
        try
        {
            return ResolvePathCore(path, followFinalSymlink);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, RootInode);
        }
    }

    private ulong ResolvePathCore(string path, bool followFinalSymlink)
    {
        var pending = new Stack<string>(Split(path).Reverse());
        var trail = new List<ulong> { RootInode };
        int hops = 0;
        while (pending.Count > 0)
        {
            string part = pending.Pop();
            ulong current = trail[^1];
            if (part == ".") continue;
            if (part == "..")
            {
                if (trail.Count > 1) trail.RemoveAt(trail.Count - 1);
                continue;
            }
            var dir = _inodes.Get(current);
            if (!dir.IsDirectory) throw new XfsException(XfsError.NotADirectory, $"'{path}': a component before '{part}' is not a directory");
            var nameBytes = System.Text.Encoding.UTF8.GetBytes(part);
            if (nameBytes.Length > 255) throw new XfsException(XfsError.NameTooLong, $"'{part}' is longer than 255 bytes");
            if (!_directories.TryLookup(dir, nameBytes, out ulong child))
                throw new XfsException(XfsError.NotFound, $"'{path}' not found: no '{part}' in its directory");
            var childInode = _inodes.Get(child);
            if (childInode.IsSymlink && (pending.Count > 0 || followFinalSymlink))
            {
                if (++hops > MaxSymlinkHops) throw new XfsException(XfsError.SymlinkLoop, $"'{path}': too many levels of symbolic links");
                string target = System.Text.Encoding.UTF8.GetString(SymlinkReader.Read(_mount, childInode));
                if (target.StartsWith('/')) trail.RemoveRange(1, trail.Count - 1);
                foreach (var t in Split(target).Reverse()) pending.Push(t);
                continue;
            }
            trail.Add(child);
        }
        return trail[^1];
    }

    private static IEnumerable<string> Split(string path) =>
        path.Split('/', StringSplitOptions.RemoveEmptyEntries);

    /// <summary>
    /// Enumerates entries from <paramref name="cookie"/> (0 = from the start, including "." and "..").
    /// Each entry carries the cookie that resumes just after it; cookies are stable XFS directory
    /// offsets, valid across calls while the directory is unchanged.
    /// </summary>
    public void ReadDirectory<TVisitor>(ulong directoryInode, long cookie, ref TVisitor visitor)
        where TVisitor : IDirectoryVisitor
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            _directories.Enumerate(_inodes.Get(directoryInode), cookie, ref visitor);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, directoryInode);
        }
    }

    /// <summary>All entries (convenience; allocates). Includes "." and "..". File types are filled in even where the volume does not record them.</summary>
    public IReadOnlyList<DirectoryEntry> ListDirectory(ulong directoryInode)
    {
        var collector = new Collector { Entries = [] };
        ReadDirectory(directoryInode, 0, ref collector);
        var list = collector.Entries;
        for (int i = 0; i < list.Count; i++)
        {
            if (list[i].FileType == XfsFileType.Unknown)
                list[i] = list[i] with { FileType = _inodes.Get(list[i].Inode).FileType };
        }
        return list;
    }

    private struct Collector : IDirectoryVisitor
    {
        public List<DirectoryEntry> Entries;
        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            Entries.Add(new DirectoryEntry(name.ToArray(), inode, fileType, nextCookie));
            return true;
        }
    }

    /// <summary>Reads file data at <paramref name="offset"/>; returns bytes read (0 at or past EOF). Holes and unwritten extents read as zeros.</summary>
    public int Read(ulong inode, long offset, Span<byte> destination)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            if (_write is null) return ReadCore(inode, offset, destination);
            // Writes that change only file bytes run beside reads: this file's data lock keeps them whole to this read.
            using var dataLock = _write.Changes.ReadFileData(inode);
            return ReadCore(inode, offset, destination);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    /// <summary>
    /// The read itself: holes and unwritten extents are zeroed; a read that meets one extent reads it in place, one
    /// that meets several reads them concurrently (<see cref="SegmentReadBatch"/>).
    /// </summary>
    private unsafe int ReadCore(ulong inode, long offset, Span<byte> destination)
    {
        var (_, map, length) = PrepareRead(inode, offset, destination.Length);
        var data = _write?.Data;
        SegmentReadBatch? batch = null;
        ReadSegment first = default;
        int firstAt = -1;
        try
        {
            for (int at = 0; at < length;)
            {
                var segment = NextSegment(map, offset + at, length - at);
                if (segment.IsZeros) destination.Slice(at, segment.Length).Clear();
                else if (firstAt < 0)
                {
                    first = segment;
                    firstAt = at;
                }
                else
                {
                    if (batch is null)
                    {
                        batch = _segmentReads.Rent();
                        batch.Start(_mount.Device, data);
                        batch.Add(first.DiskOffset, firstAt, first.Length);
                    }
                    batch.Add(segment.DiskOffset, at, segment.Length);
                }
                at += segment.Length;
            }
        }
        catch
        {
            if (batch is not null) _segmentReads.Return(batch);
            throw;
        }
        if (batch is not null)
        {
            fixed (byte* buffer = destination) batch.Run(buffer);
        }
        else if (firstAt >= 0)
        {
            var target = destination.Slice(firstAt, first.Length);
            if (data is not null) data.Read(first.DiskOffset, target);
            else _mount.Device.Read(first.DiskOffset, target);
        }
        return length;
    }

    public async ValueTask<int> ReadAsync(ulong inode, long offset, Memory<byte> destination, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        // A read-write open reads holding the change lock shared (see ReadScope): synchronously, as a lock is not held across an await.
        if (_write is not null) return Read(inode, offset, destination.Span);
        try
        {
            return await ReadAsyncCore(inode, offset, destination, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    private async ValueTask<int> ReadAsyncCore(ulong inode, long offset, Memory<byte> destination, CancellationToken cancellationToken)
    {
        var (_, map, length) = PrepareRead(inode, offset, destination.Length);
        var dest = destination[..length];
        long pos = offset;
        while (dest.Length > 0)
        {
            var segment = NextSegment(map, pos, dest.Length);
            if (segment.IsZeros)
                dest.Span[..segment.Length].Clear();
            else
                await _mount.Device.ReadAsync(segment.DiskOffset, dest[..segment.Length], cancellationToken).ConfigureAwait(false);
            dest = dest[segment.Length..];
            pos += segment.Length;
        }
        return length;
    }

    /// <summary>
    /// lseek(2)'s SEEK_DATA (<paramref name="data"/> true) and SEEK_HOLE as the kernel's XFS answers
    /// them from the extent map: written extents are data; holes, unwritten (preallocated) extents
    /// and the end of the file are holes. Returns false where POSIX says ENXIO: an offset at or past
    /// the end of the file, or no data after it.
    /// </summary>
    public bool TrySeekDataOrHole(ulong inode, long offset, bool data, out long result)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            return TrySeekCore(inode, offset, data, out result);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    private bool TrySeekCore(ulong inode, long offset, bool data, out long result)
    {
        result = 0;
        if (offset < 0) throw new XfsException(XfsError.InvalidArgument, "negative file offset");
        var ino = _inodes.Get(inode);
        if (!ino.IsRegular) throw new XfsException(XfsError.InvalidArgument, $"inode {inode} is not a regular file");
        if (offset >= ino.Size) return false;
        var map = _maps.Get(ino, ForkKind.Data);
        var blockLog = _mount.Superblock.BlockLog;
        long pos = offset;
        while (pos < ino.Size)
        {
            bool found = map.TryFind((ulong)(pos >> blockLog), out var ext, out ulong next);
            bool isData = found && !ext.Unwritten;
            if (isData == data)
            {
                result = pos;
                return true;
            }
            if (found)
                pos = (long)(ext.FileEnd << blockLog);
            else if (next == ulong.MaxValue)
                break;
            else
                pos = (long)(next << blockLog);
        }
        if (data) return false;
        result = ino.Size; // the end of the file is a hole
        return true;
    }

    /// <summary>A stretch of a read: bytes from one place on disk, or zeros (hole or unwritten extent).</summary>
    private readonly record struct ReadSegment(long DiskOffset, int Length)
    {
        public bool IsZeros => DiskOffset < 0;
    }

    /// <summary>The longest stretch from file byte <paramref name="pos"/> that one extent (or one hole) covers.</summary>
    private ReadSegment NextSegment(ExtentMap map, long pos, int remaining)
    {
        var sb = _mount.Superblock;
        if (map.TryFind((ulong)(pos >> sb.BlockLog), out var ext, out ulong next))
        {
            int n = (int)Math.Min(remaining, (long)(ext.FileEnd << sb.BlockLog) - pos);
            return ext.Unwritten
                ? new ReadSegment(-1, n)
                : new ReadSegment(sb.FsbToByte(ext.StartBlock) + (pos - (long)(ext.FileOffset << sb.BlockLog)), n);
        }
        long holeEnd = next == ulong.MaxValue ? long.MaxValue : (long)(next << sb.BlockLog);
        return new ReadSegment(-1, (int)Math.Min(remaining, holeEnd - pos));
    }

    private (Inode Inode, ExtentMap Map, int Length) PrepareRead(ulong inode, long offset, int requested)
    {
        if (offset < 0) throw new XfsException(XfsError.InvalidArgument, "negative file offset");
        var ino = _inodes.Get(inode);
        if (ino.IsDirectory) throw new XfsException(XfsError.IsADirectory, $"inode {inode} is a directory");
        if (!ino.IsRegular) throw new XfsException(XfsError.InvalidArgument, $"inode {inode} is not a regular file");
        if ((ino.Attributes.Flags & DinodeView.FlagRealtime) != 0)
            throw new XfsException(XfsError.Unsupported, $"inode {inode} stores its data on the realtime device, which XfsWin cannot read yet");
        if (offset >= ino.Size || requested == 0) return (ino, null!, 0);
        int length = (int)Math.Min(requested, ino.Size - offset);
        var map = _maps.Get(ino, ForkKind.Data);
        return (ino, map, length);
    }

    /// <summary>The target of a symlink, as stored (bytes, not NUL-terminated).</summary>
    public byte[] ReadLink(ulong inode)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            return SymlinkReader.Read(_mount, _inodes.Get(inode));
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    /// <summary>Extended attributes of an inode, parent pointers excluded unless asked.</summary>
    public IReadOnlyList<XattrEntry> ListXattrs(ulong inode, bool includeParentPointers = false)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            return _attributes.List(_inodes.Get(inode), includeParentPointers);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    /// <summary>Value of one extended attribute; false when absent.</summary>
    public bool TryGetXattr(ulong inode, XattrNamespace ns, ReadOnlySpan<byte> name, out byte[] value)
    {
        ThrowIfDisposed();
        using var readScope = new ReadScope(this);
        try
        {
            return _attributes.TryGet(_inodes.Get(inode), ns, name, out value);
        }
        catch (Exception e) when (IsMalformedData(e))
        {
            throw Malformed(e, inode);
        }
    }

    /// <summary>
    /// Exceptions that only metadata shaped in a way no verifier anticipated can provoke (an index, length or
    /// count read from disk that is out of range). They are turned into corruption errors (the volume goes
    /// unhealthy) instead of escaping as crashes. Anything else is not the disk's fault: our own bugs
    /// (<see cref="InvalidOperationException"/>, <see cref="NullReferenceException"/>, ...), use after
    /// <see cref="Dispose"/> and exceptions thrown by a caller's visitor surface as what they are, with the
    /// volume's health untouched.
    /// </summary>
    private static bool IsMalformedData(Exception e) =>
        e is IndexOutOfRangeException or ArgumentOutOfRangeException or OverflowException
            or ArgumentException and not ArgumentNullException;

    /// <summary>
    /// On a read-write open, reads hold the volume's change lock shared for their duration (see
    /// <see cref="VolumeChangeLock"/>): side by side with other reads, never inside a change. Read-only opens take nothing.
    /// </summary>
    private readonly ref struct ReadScope
    {
        private readonly VolumeChangeLock? _lock;

        public ReadScope(XfsVolume volume)
        {
            _lock = volume._write?.Changes;
            _lock?.EnterRead();
        }

        public void Dispose() => _lock?.ExitRead();
    }

    private void ThrowIfDisposed() => ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);

    private XfsCorruptionException Malformed(Exception e, ulong inode) =>
        _mount.Corrupt($"metadata reached from inode {inode}", 0, $"malformed structure ({e.GetType().Name}: {e.Message})");

    /// <summary>statfs(2) figures, computed as the Linux kernel reports them (xfs_fs_statfs).</summary>
    public FileSystemStats GetStats()
    {
        ThrowIfDisposed();
        var sb = _mount.Superblock;
        ulong logBlocks = sb.LogStart != 0 ? sb.LogBlocks : 0;
        ulong total = sb.DataBlocks - logBlocks;
        // The kernel keeps 8 blocks per AG out of reach (AGFL refill reserve plus 4), never reported free.
        ulong setAside = (ulong)sb.AgCount * 8;
        // A read-write open counts as it changes the volume (the in-core counters); a read-only one
        // reports what the AG headers said at open.
        var w = _write;
        ulong freeBlocks = w is null ? _agSummary.FreeBlocks : (ulong)Math.Max(0, w.FileSpace.Allocator.FreeBlocks);
        ulong inodes = w is null ? _agSummary.Inodes : (ulong)Math.Max(0, Volatile.Read(ref w.InodeCount));
        ulong freeInodes = w is null ? _agSummary.FreeInodes : (ulong)Math.Max(0, Volatile.Read(ref w.FreeInodes));
        ulong free = freeBlocks > setAside ? freeBlocks - setAside : 0;
        ulong files = inodes + (free << sb.InoPBlog);
        if (sb.ImaxPct > 0)
        {
            // Inode space is capped at imax_pct of the data blocks (the kernel's m_maxicount: in whole inode chunks
            // as a mount computes it, exact after an online grow, as growfs computes it).
            files = Math.Min(files, (ulong)(w?.MaxInodes ?? VolumeWriteState.MaxInodesOf(sb, wholeChunks: true)));
        }
        files = Math.Max(files, inodes);
        ulong usedInodes = inodes - Math.Min(freeInodes, inodes);
        return new FileSystemStats((int)sb.BlockSize, total, free, files, files - usedInodes, 255);
    }

    public void Dispose()
    {
        // Background read-ahead must not touch the devices once they are closed.
        if (Interlocked.Exchange(ref _disposed, 1) != 0) return;
        try
        {
            // A read-write open unmounts cleanly first (superblock counters, writeback, unmount record); a device that
            // fails then shuts it down, and the error (EIO) is the caller's after everything is released.
            FinishWriting();
        }
        finally
        {
            _readAheadPlanner.Dispose();
            WaitForReadAhead(TimeSpan.FromSeconds(10));
            _segmentReads.Dispose();
            _mount.Buffers.Dispose();
            if (_ownsDevice) _device.Dispose();
            _ownedLogDevice?.Dispose();
            if (!ReferenceEquals(_mount.Device, _device)) _mount.Device.Dispose();
        }
    }
}

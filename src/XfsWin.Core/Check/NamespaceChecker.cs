using System.Buffers.Binary;
using System.Collections.Concurrent;
using XfsWin.Format;
using XfsWin.Attributes;
using XfsWin.Directories;
using XfsWin.Inodes;
using XfsWin.Volume;

namespace XfsWin.Check;

/// <summary>
/// The namespace: walks every directory from the root (and the metadata directory root) level by
/// level, directories of a level in parallel: block, leaf and node directories listed from the blocks their layout check
/// reads (<see cref="DirectoryLayoutChecker"/>: the hash entries against the data entries too), short-form ones and
/// those whose layout shows a problem through <see cref="DirectoryReader"/>. Checks each entry (name, target inode in
/// use, file type), "." and "..", that each
/// directory is named exactly once (no loops, no second parents), then link counts against the
/// entries, that every in-use inode was reached, leaf and node attribute forks (every attribute where a lookup by its
/// name finds it and every remote value read back, in the walk of the fork's layout, <see cref="AttributeLayoutChecker"/>;
/// short-form and empty forks are checked by the inode scan) and, where enabled, parent pointers against the entries.
/// </summary>
internal sealed class NamespaceChecker
{
    private readonly CheckContext _cx;
    private readonly InodeEntry[] _inodes;
    private readonly ulong[] _numbers;
    private readonly InodeCache _cache;
    private readonly DirectoryReader _directories;
    private readonly AttributeReader _attributes;
    private readonly int[] _entriesNaming;
    private readonly int[] _subdirectories;
    private readonly ulong[] _parent;
    private readonly bool _parentPointers;
    private long _entries, _directoriesWalked;

    private readonly Extents.ExtentMapCache _maps;
    private readonly DirectoryLayoutChecker _layout;

    public NamespaceChecker(CheckContext cx, InodeEntry[] inodes, InodeCache cache, DirectoryReader directories, AttributeReader attributes,
        Extents.ExtentMapCache maps)
    {
        _cx = cx;
        _maps = maps;
        _layout = new DirectoryLayoutChecker(cx);
        _inodes = inodes;
        _numbers = inodes.Select(i => i.Ino).ToArray();
        _cache = cache;
        _directories = directories;
        _attributes = attributes;
        _entriesNaming = new int[inodes.Length];
        _subdirectories = new int[inodes.Length];
        _parent = new ulong[inodes.Length];
        _parentPointers = cx.Sb.HasParentPointers;
    }

    public long Entries => Interlocked.Read(ref _entries);
    public long DirectoriesWalked => Interlocked.Read(ref _directoriesWalked);

    private int IndexOf(ulong ino) => Array.BinarySearch(_numbers, ino);

    private static bool IsDirectory(ushort mode) => (mode & 0xF000) == 0x4000;

    /// <summary>Walks from <paramref name="roots"/>; inodes in <paramref name="unnamed"/> (quota, realtime metadata) need no entry.</summary>
    public void Run(IReadOnlyList<ulong> roots, IReadOnlySet<ulong> unnamed, ParallelOptions parallel, Action<long>? progress)
    {
        var level = new List<int>();
        foreach (ulong root in roots)
        {
            int i = IndexOf(root);
            if (i < 0)
            {
                _cx.Report($"root directory (inode {root})", null, null, "the root directory inode is not in use");
                continue;
            }
            if (!IsDirectory(_inodes[i].Mode))
            {
                _cx.ReportAt($"inode {root}", _cx.Sb.InodeToByte(root), "the root inode is not a directory");
                continue;
            }
            _parent[i] = root;
            level.Add(i);
        }
        while (level.Count > 0)
        {
            var next = new ConcurrentBag<int>();
            Parallel.ForEach(level, parallel, i => WalkDirectory(i, next));
            progress?.Invoke(DirectoriesWalked);
            level = [.. next.Order()];
        }
        // Attribute forks and symlinks, in batches of neighbouring inodes: the clusters a batch needs are read ahead
        // together (neighbours merged into reads of up to 1 MiB) before its inodes are decoded one by one.
        const int Batch = 2048;
        Parallel.For(0, (_inodes.Length + Batch - 1) / Batch, parallel, b =>
        {
            int from = b * Batch, to = Math.Min(_inodes.Length, from + Batch);
            var wanted = new List<ulong>();
            for (int i = from; i < to; i++)
            {
                var e = _inodes[i];
                if (!e.Unusable && ((e.HasAttrFork && e.ScannedAttrParents == InodeEntry.AttrNotChecked) || (e.Mode & 0xF000) == 0xA000)) wanted.Add(e.Ino);
            }
            if (wanted.Count == 0) return;
            _cache.ReadAhead(wanted);
            for (int i = from; i < to; i++)
            {
                CheckAttributes(i);
                if ((_inodes[i].Mode & 0xF000) == 0xA000) CheckSymlink(i);
            }
        });
        for (int i = 0; i < _inodes.Length; i++)
        {
            var e = _inodes[i];
            if (e.Unusable) continue;
            long where = _cx.Sb.InodeToByte(e.Ino);
            bool named = IsDirectory(e.Mode) ? _parent[i] != 0 : _entriesNaming[i] > 0;
            if (!named)
            {
                // An unnamed inode with no links after a replay was open when the system stopped: the kernel frees it at mount.
                if (!unnamed.Contains(e.Ino) && !(_cx.UnlinkedExpected && e.Nlink == 0))
                    _cx.ReportAt($"inode {e.Ino}", where, "in use but no directory names it (disconnected; xfs_repair would move it to lost+found)");
                continue;
            }
            long expected = IsDirectory(e.Mode) ? 2L + _subdirectories[i] : _entriesNaming[i];
            if (e.Nlink != expected)
                _cx.ReportAt($"inode {e.Ino}", where, $"link count {e.Nlink}, but {expected} {(IsDirectory(e.Mode) ? "expected from its subdirectories" : "directory entries name it")}");
        }
    }

    private readonly struct Collector(DirectoryListing into) : IDirectoryVisitor
    {
        public bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie)
        {
            into.Add(name, inode, fileType);
            return into.Entries.Count < DirectoryListing.MaxEntries;
        }
    }

    private void WalkDirectory(int index, ConcurrentBag<int> next)
    {
        _cx.Cancel.ThrowIfCancellationRequested();
        ulong dirIno = _inodes[index].Ino;
        string name = $"directory inode {dirIno}";
        Interlocked.Increment(ref _directoriesWalked);
        if (_inodes[index].Unusable) return;
        Inode dir;
        var listing = new DirectoryListing();
        try
        {
            dir = _cache.Get(dirIno);
            // Block, leaf and node form: one read of every directory block serves both the layout (the blocks' own
            // structure; the hash entries against the data entries in one pass, every data entry named by exactly one
            // live hash entry of its name's hash; no entry looked up again by its name) and the entries. A directory
            // whose layout shows a problem, or whose size contradicts its form, is listed again through
            // DirectoryReader, as a reader would see it, so that its entries count exactly as a reader finds them.
            bool listed = dir.DataFormat is Format.ForkFormat.Extents or Format.ForkFormat.Btree
                && _layout.Check(dir, _maps.Get(dir, Extents.ForkKind.Data), listing) && dir.Size > dir.DataForkSize;
            if (!listed)
            {
                listing.Clear();
                var collector = new Collector(listing);
                _directories.Enumerate(dir, 0, ref collector);
            }
        }
        catch (XfsCorruptionException e)
        {
            _cx.Report(e);
            return;
        }
        catch (Exception e) when (e is XfsException or InvalidOperationException or IndexOutOfRangeException or ArgumentException or OverflowException)
        {
            _cx.ReportAt(name, _cx.Sb.InodeToByte(dirIno), $"unreadable: {e.Message}");
            return;
        }
        long where = dir.ByteOffset;
        bool sawDot = false, sawDotDot = false;
        var entries = listing.Entries;
        var seenNames = new HashSet<int>(listing);
        var named = new List<int>(entries.Count);
        for (int k = 0; k < entries.Count; k++)
        {
            var entry = entries[k];
            Interlocked.Increment(ref _entries);
            var n = listing.Name(entry);
            if (n.SequenceEqual("."u8))
            {
                sawDot = true;
                if (entry.Ino != dirIno) _cx.ReportAt(name, where, $"\".\" names inode {entry.Ino}, not itself");
                if (_cx.Sb.HasFtype && entry.Type != Format.XfsFileType.Directory) _cx.ReportAt(name, where, $"\".\" has file type {entry.Type}");
                continue;
            }
            if (n.SequenceEqual(".."u8))
            {
                sawDotDot = true;
                if (entry.Ino != _parent[index]) _cx.ReportAt(name, where, $"\"..\" names inode {entry.Ino}, but its parent is {_parent[index]}");
                if (_cx.Sb.HasFtype && entry.Type != Format.XfsFileType.Directory) _cx.ReportAt(name, where, $"\"..\" has file type {entry.Type}");
                continue;
            }
            if (!seenNames.Add(k)) _cx.ReportAt(name, where, $"{EntryName(n)} appears twice");
            named.Add(k);
        }
        if (!sawDot || !sawDotDot) _cx.ReportAt(name, where, $"no \"{(sawDot ? ".." : ".")}\" entry");
        // A big directory's entries (parent pointers looked up in the children) are shared out between threads.
        if (_parentPointers && named.Count >= ParallelEntriesThreshold)
            Parallel.For(0, named.Count, new ParallelOptions { CancellationToken = _cx.Cancel }, i => CheckEntry(dir, index, listing, named[i], next));
        else
            foreach (int k in named) CheckEntry(dir, index, listing, k, next);
    }

    private const int ParallelEntriesThreshold = 4096;

    private static string EntryName(ReadOnlySpan<byte> n) => $"entry \"{System.Text.Encoding.UTF8.GetString(n)}\"";

    private void CheckEntry(Inode dir, int dirIndex, DirectoryListing listing, int k, ConcurrentBag<int> next)
    {
        var entry = listing.Entries[k];
        ulong dirIno = dir.Number;
        var n = listing.Name(entry);
        if (n.Length == 0 || n.IndexOfAny((byte)'/', (byte)0) >= 0)
            _cx.ReportAt($"directory inode {dirIno}", dir.ByteOffset, $"{EntryName(n)}: invalid name");
        int target = _cx.Sb.IsValidInode(entry.Ino) ? IndexOf(entry.Ino) : -1;
        if (target < 0)
        {
            _cx.ReportAt($"directory inode {dirIno}", dir.ByteOffset,
                $"{EntryName(n)} names inode {entry.Ino}, which is {(_cx.Sb.IsValidInode(entry.Ino) ? "free" : "outside the volume")}");
            return;
        }
        var t = _inodes[target];
        if (_cx.Sb.HasFtype && entry.Type != Inode.FileTypeOf(t.Mode))
            _cx.ReportAt($"directory inode {dirIno}", dir.ByteOffset, $"{EntryName(n)}: file type {entry.Type} in the entry, {Inode.FileTypeOf(t.Mode)} in inode {entry.Ino}");
        Interlocked.Increment(ref _entriesNaming[target]);
        if (_parentPointers && !t.Unusable) CheckParentPointer(t.Ino, n, dirIno, _inodes[dirIndex].Generation);
        if (IsDirectory(t.Mode))
        {
            Interlocked.Increment(ref _subdirectories[dirIndex]);
            ulong previous = Interlocked.CompareExchange(ref _parent[target], dirIno, 0);
            if (previous != 0)
                _cx.ReportAt($"directory inode {dirIno}", dir.ByteOffset,
                    $"{EntryName(n)} names directory {entry.Ino}, which already has parent {previous} (a second link to a directory, or a loop)");
            else
                next.Add(target);
        }
    }

    /// <summary>The child must hold a parent pointer named like the entry, whose value is this directory's number and generation.</summary>
    private void CheckParentPointer(ulong child, ReadOnlySpan<byte> entryName, ulong dir, uint dirGeneration)
    {
        try
        {
            var inode = _cache.Get(child);
            if (!_attributes.TryGet(inode, XattrNamespace.Parent, entryName, out var value))
            {
                _cx.ReportAt($"inode {child}", inode.ByteOffset, $"no parent pointer for {EntryName(entryName)} in directory {dir}");
                return;
            }
            if (value.Length != 12)
            {
                _cx.ReportAt($"inode {child}", inode.ByteOffset, $"parent pointer for {EntryName(entryName)} has a {value.Length}-byte value");
                return;
            }
            ulong parent = BinaryPrimitives.ReadUInt64BigEndian(value);
            uint gen = BinaryPrimitives.ReadUInt32BigEndian(value.AsSpan(8));
            // Several links may share one name in different directories; the lookup returns one of them. A directory has
            // one name only.
            var entry = _inodes[IndexOf(child)];
            if ((parent != dir || gen != dirGeneration) && (IsDirectory(entry.Mode) || entry.Nlink <= 1))
                _cx.ReportAt($"inode {child}", inode.ByteOffset, $"parent pointer for {EntryName(entryName)} names directory {parent} (generation {gen}), not {dir} ({dirGeneration})");
        }
        catch (XfsCorruptionException e)
        {
            _cx.Report(e);
        }
    }

    /// <summary>A symlink's target: its remote blocks (header, CRC, bytes), a length of 1 to 1024 bytes, no NUL byte (xfs_repair's rules).</summary>
    private void CheckSymlink(int index)
    {
        var e = _inodes[index];
        if (e.Unusable) return;
        try
        {
            var inode = _cache.GetTransient(e.Ino);
            if (inode.Size == 0 || inode.Size > SymlinkReader.MaxLength)
            {
                _cx.ReportAt($"inode {e.Ino}", inode.ByteOffset, $"symlink of {inode.Size} bytes");
                return;
            }
            var target = SymlinkReader.Read(_cx.Mount, inode,
                (offset, block) => _cx.CheckLsn($"symlink block of inode {inode.Number}", offset, block, RemoteBlockHeader.OffLsn));
            if (target.AsSpan().IndexOf((byte)0) >= 0) _cx.ReportAt($"inode {e.Ino}", inode.ByteOffset, "symlink target holds a NUL byte");
        }
        catch (XfsCorruptionException ex)
        {
            _cx.Report(ex);
        }
        catch (Exception ex) when (ex is XfsException or InvalidOperationException or IndexOutOfRangeException or ArgumentException or OverflowException)
        {
            _cx.ReportAt($"inode {e.Ino}", _cx.Sb.InodeToByte(e.Ino), $"symlink unreadable: {ex.Message}");
        }
    }

    private void CheckAttributes(int index)
    {
        var e = _inodes[index];
        if (e.Unusable || !e.HasAttrFork) return;
        if (e.ScannedAttrParents != InodeEntry.AttrNotChecked)
        {
            // A short-form or empty fork, checked by the inode scan.
            CheckParentCount(index, e.ScannedAttrParents, _cx.Sb.InodeToByte(e.Ino));
            return;
        }
        try
        {
            var inode = _cache.GetTransient(e.Ino);
            if (!inode.HasAttrFork) return;
            // Leaf and node forms: the layout walk also counts the parent pointers and reads the remote values back; only
            // a fork it cannot vouch for is listed and looked up by name again (which reports what is wrong).
            int parents = -1;
            if (inode.AttrFormat is Format.ForkFormat.Extents or Format.ForkFormat.Btree)
                parents = new AttributeLayoutChecker(_cx).Check(inode, _maps.Get(inode, Extents.ForkKind.Attr), _attributes);
            if (parents < 0)
            {
                parents = inode.AttrFormat == Format.ForkFormat.Local
                    ? AttributeLayoutChecker.CheckShortform(_cx, inode.Number, inode.ByteOffset, inode.AttrFork)
                    : CheckListedAttributes(inode);
            }
            CheckParentCount(index, parents, inode.ByteOffset);
        }
        catch (XfsCorruptionException ex)
        {
            _cx.Report(ex);
        }
        catch (Exception ex) when (ex is XfsException or InvalidOperationException or IndexOutOfRangeException or ArgumentException or OverflowException)
        {
            _cx.ReportAt($"attributes of inode {e.Ino}", _cx.Sb.InodeToByte(e.Ino), $"unreadable: {ex.Message}");
        }
    }

    /// <summary>With parent pointers: a named inode holds one per directory entry naming it (a directory one).</summary>
    private void CheckParentCount(int index, int parents, long where)
    {
        var e = _inodes[index];
        if (parents < 0) return; // the fork's layout is broken (reported)
        if (_parentPointers && (IsDirectory(e.Mode) ? _parent[index] != 0 && e.Ino != _parent[index] : _entriesNaming[index] > 0))
        {
            int expected = IsDirectory(e.Mode) ? 1 : Volatile.Read(ref _entriesNaming[index]);
            if (parents != expected)
                _cx.ReportAt($"attributes of inode {e.Ino}", where, $"{parents} parent pointers, but {expected} directory entries name it");
        }
    }

    /// <summary>
    /// Leaf and node attribute forks: every listed attribute read back through a lookup by its name hash (remote values
    /// included), its value of the recorded length. Returns the parent pointers listed.
    /// </summary>
    private int CheckListedAttributes(Inode inode)
    {
        var list = _attributes.List(inode, includeParentPointers: true);
        int parents = 0;
        foreach (var a in list)
        {
            if (a.Namespace == XattrNamespace.Parent)
            {
                parents++;
                continue;
            }
            if (a.Name.Length == 0) _cx.ReportAt($"inode {inode.Number}", inode.ByteOffset, "attribute with an empty name");
            if (!_attributes.TryGet(inode, a.Namespace, a.Name, out var value))
                _cx.ReportAt($"attributes of inode {inode.Number}", inode.ByteOffset, $"attribute {a.LinuxName} is listed but not found by its name hash");
            else if (value.Length != a.ValueLength)
                _cx.ReportAt($"attributes of inode {inode.Number}", inode.ByteOffset, $"attribute {a.LinuxName}: value of {value.Length} bytes, {a.ValueLength} recorded");
        }
        return parents;
    }
}

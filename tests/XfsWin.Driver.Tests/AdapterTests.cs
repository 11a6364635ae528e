using System.Buffers.Binary;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text;
using XfsWin.Driver.Semantics;
using XfsWin.Driver.Tests.Images;
using XfsWin.Volume;
using A = XfsWin.Driver.Semantics.AccessRights;

namespace XfsWin.Driver.Tests;

/// <summary>Packs entries the way FspFileSystemAddDirInfo does, into a buffer of WinFsp's size.</summary>
public struct PackingSink(byte[] buffer) : IDirInfoSink
{
    public readonly byte[] Buffer = buffer;
    public int Used;
    public bool Ended;

    public bool Add(in FileInformation info, ReadOnlySpan<char> name, ulong nextOffset)
    {
        Span<byte> record = stackalloc byte[DirInfoLayout.MaxEntrySize];
        DirInfoLayout.Write(record, info, name, nextOffset);
        return DirInfoLayout.Append(record, Buffer, ref Used);
    }

    public void End() => Ended = DirInfoLayout.AppendEnd(Buffer, ref Used);

    /// <summary>Reads the packed records back: what the WinFsp kernel driver would see.</summary>
    public readonly List<(string Name, FileInformation Info, ulong NextOffset)> Entries()
    {
        var list = new List<(string, FileInformation, ulong)>();
        int p = 0;
        while (p + 2 <= Used)
        {
            int size = BinaryPrimitives.ReadUInt16LittleEndian(Buffer.AsSpan(p));
            if (size == 0) break;
            var info = MemoryMarshal.Read<FileInformation>(Buffer.AsSpan(p + DirInfoLayout.FileInfoOffset));
            ulong next = BinaryPrimitives.ReadUInt64LittleEndian(Buffer.AsSpan(p + DirInfoLayout.NextOffsetOffset));
            string name = new(MemoryMarshal.Cast<byte, char>(Buffer.AsSpan(p + DirInfoLayout.NameOffset, size - DirInfoLayout.NameOffset)));
            list.Add((name, info, next));
            p += (size + 7) & ~7;
        }
        return list;
    }
}

[Collection(DriverImageCollection.Name)]
public class AdapterTests(DriverImage image)
{
    private readonly XfsWindowsFileSystem _fs = image.Adapter();

    private OpenFile Open(string path, XfsWindowsFileSystem? fs = null)
    {
        int status = (fs ?? _fs).Open(path, 0, 0, out var file, out _);
        Assert.True(status == NtStatus.Success, $"open {path}: {NtStatus.Describe(status)}");
        return file!;
    }

    private static ulong FileTime(long ns) => (ulong)(ns / 100 + 116444736000000000L);

    [Fact]
    public void VolumeInfoComesFromTheSuperblock()
    {
        Assert.Equal(NtStatus.Success, _fs.GetVolumeInfo(out var info));
        var stats = image.Volume.GetStats();
        Assert.Equal("XFSWINTEST", info.Label);
        Assert.Equal((ulong)stats.BlockSize * stats.TotalBlocks, info.TotalSize);
        Assert.Equal((ulong)stats.BlockSize * stats.FreeBlocks, info.FreeSize);
        // The kernel's statfs keeps its reserve pool and allocation set-aside out of f_bfree; the superblock counter includes them.
        double kernelFree = image.KernelFreeBlocks * image.KernelBlockSize;
        Assert.InRange(info.FreeSize, kernelFree, kernelFree + 0.1 * info.TotalSize);
        var uuid = image.Uuid.ToString("N");
        Assert.Equal(Convert.ToUInt32(uuid[..8], 16), _fs.VolumeSerialNumber);
        Assert.Equal(((ushort)512, (ushort)8), _fs.Geometry);
    }

    [Fact]
    public void OpenAndReadMatchTheKernel()
    {
        foreach (var path in new[] { "hello.txt", "pattern.bin", "sparse.bin", "dir/sub/inner.txt" })
        {
            var k = image[path];
            var file = Open("\\" + path.Replace('/', '\\'));
            Assert.Equal(k.Inode, file.Inode);
            var data = new byte[k.Size];
            int total = 0;
            // WinFsp reads in chunks of at most 64 KiB at arbitrary offsets.
            while (total < data.Length)
            {
                int chunk = Math.Min(65536 - 7, data.Length - total);
                Assert.Equal(NtStatus.Success, _fs.Read(file, data.AsSpan(total, chunk), (ulong)total, out int n));
                Assert.True(n > 0);
                total += n;
            }
            Assert.Equal(k.Sha256, Convert.ToHexString(SHA256.HashData(data)).ToLowerInvariant());
            Assert.Equal(NtStatus.EndOfFile, _fs.Read(file, new byte[10], (ulong)k.Size, out int atEnd));
            Assert.Equal(0, atEnd);
            _fs.Close(file);
        }
    }

    [Fact]
    public void FileInformationMatchesTheKernel()
    {
        var k = image["hello.txt"];
        Assert.Equal(NtStatus.Success, _fs.Open(@"\hello.txt", 0, 0, out var file, out var info));
        Assert.Equal(k.Inode, info.IndexNumber);
        Assert.Equal(2u, info.HardLinks);
        Assert.Equal((ulong)k.Size, info.FileSize);
        Assert.Equal((ulong)k.Blocks * 512, info.AllocationSize); // st_blocks counts both forks, as AllocatedBytes does
        Assert.Equal(FileTime(k.MtimeNs), info.LastWriteTime);
        Assert.Equal(FileTime(k.CtimeNs), info.ChangeTime);
        Assert.Equal(FileTime(k.AtimeNs), info.LastAccessTime);
        Assert.Equal((ulong)(k.Birth * 10_000_000L + 116444736000000000L), info.CreationTime / 10_000_000 * 10_000_000);
        Assert.Equal((uint)WindowsFileAttributes.Normal, info.FileAttributes);
        Assert.Equal(0u, info.ReparseTag);
        // EaSize counts the user.* xattrs that are valid EA names: "color" and "big", not "bad:name".
        Assert.Equal(ExtendedAttributes.PackedSize(5, 4) + ExtendedAttributes.PackedSize(3, 3000), info.EaSize);
        Assert.Equal(NtStatus.Success, _fs.GetFileInfo(file!, out var again));
        Assert.Equal(info, again);

        Assert.Equal(NtStatus.Success, _fs.Open(@"\readonly.txt", 0, 0, out _, out var ro));
        Assert.Equal((uint)WindowsFileAttributes.ReadOnly, ro.FileAttributes);
        Assert.Equal(NtStatus.Success, _fs.Open(@"\dir", 0, 0, out _, out var dir));
        Assert.Equal((uint)WindowsFileAttributes.Directory, dir.FileAttributes);
        Assert.Equal(0ul, dir.FileSize);
        Assert.Equal(NtStatus.Success, _fs.Open(@"\sparse.bin", 0, 0, out _, out var sparse));
        Assert.Equal(8ul << 20, sparse.FileSize);
        Assert.True(sparse.AllocationSize < sparse.FileSize);
    }

    [Fact]
    public void MissingPathsGiveTheNtfsStatuses()
    {
        Assert.Equal(NtStatus.ObjectNameNotFound, _fs.Open(@"\nothing", 0, 0, out _, out _));
        Assert.Equal(NtStatus.ObjectPathNotFound, _fs.Open(@"\nodir\x", 0, 0, out _, out _));
        Assert.Equal(NtStatus.ObjectPathNotFound, _fs.Open(@"\hello.txt\x", 0, 0, out _, out _));
        Assert.Equal(NtStatus.ObjectNameNotFound, _fs.Open(@"\hello.txt:stream", 0, 0, out _, out _));
        Assert.Equal(NtStatus.NotADirectory, _fs.Open(@"\hello.txt", XfsWindowsFileSystem.FileDirectoryFile, 0, out _, out _));
        Assert.Equal(NtStatus.FileIsADirectory, _fs.Open(@"\dir", XfsWindowsFileSystem.FileNonDirectoryFile, 0, out _, out _));
        Assert.Equal(NtStatus.MediaWriteProtected, _fs.Create(@"\new", 0, 0, 0, default, 0, default, out _, out _));
        var file = Open(@"\hello.txt");
        Assert.Equal(NtStatus.MediaWriteProtected, _fs.Write(file, [1], 0, false, false, out _, out _));
        Assert.Equal(NtStatus.MediaWriteProtected, _fs.SetFileSize(file, 0, false, out _));
        Assert.Equal(NtStatus.MediaWriteProtected, _fs.Rename(file, @"\hello.txt", @"\x", false));
        Assert.Equal(NtStatus.MediaWriteProtected, _fs.SetDelete(file, @"\hello.txt", true));
        Assert.Equal(NtStatus.MediaWriteProtected, _fs.SetVolumeLabel("x", out _));
    }

    [Fact]
    public void EveryNameIsReachableByItsWindowsForm()
    {
        var k = image["names"];
        var dir = Open(@"\names");
        var listed = ListAll(_fs, dir, 4096, useOffsets: true).Select(e => e.Name).Where(n => n is not ("." or "..")).ToList();
        Assert.Equal(k.Children.Select(c => WindowsNames.EncodeToString(c)), listed);
        foreach (var child in k.Children)
        {
            string windows = WindowsNames.EncodeToString(child);
            Assert.DoesNotContain(windows, c => c < 0x80 && WindowsNames.IsForbiddenAscii(c));
            var file = Open(@"\names\" + windows);
            Assert.Equal(image.Entries[Encoding.Latin1.GetString([.. "names/"u8, .. child])].Inode, file.Inode);
            var content = new byte[child.Length];
            Assert.Equal(NtStatus.Success, _fs.Read(file, content, 0, out int n));
            Assert.Equal(child, content[..n]); // each file holds its own name
        }
        Assert.Contains("a\uF03Ab", listed);
        Assert.Contains("trail\uF02E", listed);
        Assert.Contains("\uF0FF\uF0FE", listed);
        Assert.Contains("\uF0EF\uF081\uF081", listed);
    }

    [Fact]
    public void CaseSensitiveByDefaultAndCaseInsensitiveByOption()
    {
        ulong upper = image["names/Case"].Inode, lower = image["names/case"].Inode;
        Assert.Equal(upper, Open(@"\names\Case").Inode);
        Assert.Equal(lower, Open(@"\names\case").Inode);
        Assert.Equal(NtStatus.ObjectNameNotFound, _fs.Open(@"\names\CASE", 0, 0, out _, out _));
        Assert.Equal(NtStatus.ObjectNameNotFound, _fs.Open(@"\names\case2", 0, 0, out _, out _));

        var ci = image.Adapter(new MountOptions { CaseInsensitive = true, IdMapping = IdMappingMode.Unix });
        Assert.Equal(upper, Open(@"\names\Case", ci).Inode); // exact matches win
        Assert.Equal(lower, Open(@"\names\case", ci).Inode);
        Assert.Equal(image["names/CASE2"].Inode, Open(@"\names\case2", ci).Inode);
        // "CASE" equals both ignoring case: the first one in directory order (the kernel's readdir order) wins.
        var order = image["names"].Children.Select(c => Encoding.UTF8.GetString(c)).ToList();
        ulong first = order.IndexOf("Case") < order.IndexOf("case") ? upper : lower;
        var opened = Open(@"\names\CASE", ci);
        Assert.Equal(first, opened.Inode);
        Assert.Equal(first == upper ? @"\names\Case" : @"\names\case", opened.NormalizedPath);
        Assert.Equal(@"\names\CASE2", Open(@"\NAMES\case2", ci).NormalizedPath);
        Assert.Equal(@"\", Open(@"\", ci).NormalizedPath);
        Assert.Null(Open(@"\names\Case").NormalizedPath); // case-sensitive mounts do not normalize
        Assert.Equal(NtStatus.Success, ci.GetDirInfoByName(Open(@"\names", ci), "CASE", out _, new char[255], out int n));
        Assert.Equal(4, n);
    }

    [Fact]
    public void SecurityDescriptorsCarryOwnerGroupAndMode()
    {
        var k = image["odd.txt"]; // 1000:1000, mode 0577
        Assert.Equal(NtStatus.Success, _fs.GetSecurityByName(@"\odd.txt", out uint attributes, out var sdBytes));
        Assert.Equal((uint)WindowsFileAttributes.ReadOnly, attributes);
        var sd = SecurityDescriptors.Parse(sdBytes);
        Assert.Equal(Sid.UnixUser(k.Uid), sd.Owner);
        Assert.Equal(Sid.UnixGroup(k.Gid), sd.Group);
        var deny = Assert.Single(sd.Dacl!, a => a.Type == AceType.AccessDenied);
        Assert.Equal(Sid.UnixUser(1000), deny.Sid);
        Assert.Equal(A.WriteData | A.AppendData, deny.Mask);
        Assert.Equal(Sid.World, sd.Dacl![^1].Sid);
        Assert.True(sd.Dacl![^1].Mask.HasFlag(A.WriteData));

        var file = Open(@"\odd.txt");
        Assert.Equal(NtStatus.Success, _fs.GetSecurity(file, out var again));
        Assert.Equal(sdBytes, again);

        // Default mapping: every owner is the mounting user; groups stay Unix groups.
        var user = image.Adapter(mode: IdMappingMode.MountingUser);
        Assert.Equal(NtStatus.Success, user.GetSecurityByName(@"\hello.txt", out _, out var mine));
        Assert.Equal(DriverImage.MountingUser, SecurityDescriptors.Parse(mine).Owner);
        Assert.Equal(Sid.UnixGroup(0), SecurityDescriptors.Parse(mine).Group);
    }

    [Fact]
    public void PosixAclsSetByTheKernelAppearAsAces()
    {
        Assert.True(image["acl.txt"].Xattrs.ContainsKey("system.posix_acl_access"));
        Assert.Equal(NtStatus.Success, _fs.GetSecurity(Open(@"\acl.txt"), out var bytes));
        var dacl = SecurityDescriptors.Parse(bytes).Dacl!;
        var user = Assert.Single(dacl, a => a.Sid == Sid.UnixUser(1234) && a.Type == AceType.AccessAllowed);
        Assert.Equal(A.ReadData | A.Execute | A.WriteData, user.Mask & (A.ReadData | A.Execute | A.WriteData));
        var group = Assert.Single(dacl, a => a.Sid == Sid.UnixGroup(2345) && a.Type == AceType.AccessAllowed);
        Assert.True(group.Mask.HasFlag(A.WriteData));
        Assert.False(group.Mask.HasFlag(A.Execute));
        var world = dacl[^1];
        Assert.Equal(Sid.World, world.Sid);
        Assert.Equal(SecurityDescriptors.DefaultRights, world.Mask); // other ---
    }

    [Fact]
    public void SymlinksAreSymlinkReparsePoints()
    {
        var buffer = new byte[1024];
        (string, string, uint) Link(string path, out FileInformation info)
        {
            Assert.Equal(NtStatus.Success, _fs.Open(path, 0, 0, out var f, out info));
            Assert.Equal(NtStatus.Success, _fs.GetReparsePoint(f!, buffer, out int size));
            return ReparseData.ParseSymlink(buffer.AsSpan(0, size));
        }

        Assert.Equal(("hello.txt", "hello.txt", 1u), Link(@"\rel", out var rel));
        Assert.Equal(ReparseTags.Symlink, rel.ReparseTag);
        Assert.Equal((uint)WindowsFileAttributes.ReparsePoint, rel.FileAttributes);
        Assert.Equal(("dir", "dir", 1u), Link(@"\dirlink", out var dirlink));
        Assert.Equal((uint)(WindowsFileAttributes.ReparsePoint | WindowsFileAttributes.Directory), dirlink.FileAttributes);
        Assert.Equal((@"dir\sub", @"dir\sub", 1u), Link(@"\abs", out var abs));
        Assert.True(abs.IsDirectory);
        Assert.Equal((@"..\..\hello.txt", @"..\..\hello.txt", 1u), Link(@"\dir\sub\uplink", out var up));
        Assert.False(up.IsDirectory);
        Assert.Equal((@"..\..\hello.txt", @"..\..\hello.txt", 1u), Link(@"\dir\sub\abslink", out _));
        Link(@"\dangling", out var dangling);
        Assert.False(dangling.IsDirectory);
        Link(@"\loop1", out var loop);
        Assert.False(loop.IsDirectory);

        var mp = image.Adapter(new MountOptions { AbsoluteSymlinks = AbsoluteSymlinkMode.MountPoint, IdMapping = IdMappingMode.Unix });
        Assert.Equal(NtStatus.Success, mp.Open(@"\dir\sub\abslink", 0, 0, out var f, out _));
        Assert.Equal(NtStatus.Success, mp.GetReparsePoint(f!, buffer, out int size));
        Assert.Equal((@"\??\X:\hello.txt", @"X:\hello.txt", 0u), ReparseData.ParseSymlink(buffer.AsSpan(0, size)));

        Assert.Equal(NtStatus.NotAReparsePoint, _fs.GetReparsePoint(Open(@"\hello.txt"), buffer, out _));
        Assert.Equal(NtStatus.BufferTooSmall, _fs.GetReparsePoint(Open(@"\rel"), new byte[10], out int needed));
        Assert.Equal(ReparseData.SymlinkSize("hello.txt", "hello.txt"), needed);
    }

    [Fact]
    public void IntermediateSymlinksStopTheWalkWithTheirIndex()
    {
        Assert.Equal(NtStatus.Reparse, _fs.GetSecurityByName(@"\dirlink\sub\inner.txt", out uint index, out _));
        Assert.Equal(1u, index);
        Assert.Equal(NtStatus.Reparse, _fs.GetSecurityByName(@"\dir\sub\uplink\x", out index, out _));
        Assert.Equal((uint)@"\dir\sub\".Length, index);
        // The link itself, last in the path, is opened as a reparse point.
        Assert.Equal(NtStatus.Success, _fs.GetSecurityByName(@"\dirlink", out uint attributes, out _));
        Assert.True((attributes & (uint)WindowsFileAttributes.ReparsePoint) != 0);
        var buffer = new byte[256];
        Assert.Equal(NtStatus.Success, _fs.GetReparsePointByName(@"\dir\sub\uplink", buffer, out int size));
        Assert.Equal(@"..\..\hello.txt", ReparseData.ParseSymlink(buffer.AsSpan(0, size)).SubstituteName);
        Assert.Equal(NtStatus.NotAReparsePoint, _fs.GetReparsePointByName(@"\dir", buffer, out _));
    }

    [Fact]
    public void SpecialFilesAreWslReparsePointsWithLxEas()
    {
        var buffer = new byte[64];
        foreach (var (path, tag) in new[] { ("fifo", ReparseTags.LxFifo), ("chr", ReparseTags.LxCharDevice), ("blk", ReparseTags.LxBlockDevice), ("sock", ReparseTags.AfUnix) })
        {
            Assert.Equal(NtStatus.Success, _fs.Open("\\" + path, 0, 0, out var f, out var info));
            Assert.Equal(tag, info.ReparseTag);
            Assert.Equal(0ul, info.FileSize);
            Assert.Equal(NtStatus.Success, _fs.GetReparsePoint(f!, buffer, out int size));
            Assert.Equal(8, size);
            Assert.Equal(tag, BinaryPrimitives.ReadUInt32LittleEndian(buffer));
        }
        var chr = image["chr"];
        var eas = GetEas(Open(@"\chr"));
        Assert.Equal(chr.Mode, BinaryPrimitives.ReadUInt32LittleEndian(eas["$LXMOD"]));
        Assert.Equal(chr.RdevMajor, BinaryPrimitives.ReadUInt32LittleEndian(eas["$LXDEV"]));
        Assert.Equal(chr.RdevMinor, BinaryPrimitives.ReadUInt32LittleEndian(eas["$LXDEV"].AsSpan(4)));

        var plain = image.Adapter(new MountOptions { LxSpecialFiles = false, IdMapping = IdMappingMode.Unix });
        Assert.Equal(NtStatus.Success, plain.Open(@"\fifo", 0, 0, out _, out var asFile));
        Assert.Equal(0u, asFile.ReparseTag);
        // --no-lx: no $LX* EAs either; the user.* ones stay.
        var plainEas = new byte[8192];
        Assert.Equal(NtStatus.Success, plain.GetEa(Open(@"\hello.txt", plain), plainEas, out int plainUsed));
        var names = ExtendedAttributes.Parse(plainEas.AsSpan(0, plainUsed)).Select(e => e.Name).ToList();
        Assert.Contains("color", names);
        Assert.DoesNotContain(names, n => n.StartsWith("$LX", StringComparison.Ordinal));
    }

    private Dictionary<string, byte[]> GetEas(OpenFile file, int bufferSize = 8192)
    {
        var buffer = new byte[bufferSize];
        Assert.Equal(NtStatus.Success, _fs.GetEa(file, buffer, out int used));
        return ExtendedAttributes.Parse(buffer.AsSpan(0, used)).ToDictionary(e => e.Name, e => e.Value);
    }

    [Fact]
    public void UserXattrsAreEas()
    {
        var k = image["hello.txt"];
        var eas = GetEas(Open(@"\hello.txt"));
        Assert.Equal(k.Xattrs["user.color"], eas["color"]);
        Assert.Equal(k.Xattrs["user.big"], eas["big"]);
        Assert.False(eas.ContainsKey("bad:name"));
        Assert.Equal(k.Uid, BinaryPrimitives.ReadUInt32LittleEndian(eas["$LXUID"]));
        Assert.Equal(k.Mode, BinaryPrimitives.ReadUInt32LittleEndian(eas["$LXMOD"]));

        // A buffer too small for everything holds whole entries only, still well-formed.
        var small = GetEas(Open(@"\hello.txt"), 64);
        Assert.True(small.Count < eas.Count);
        Assert.All(small, kv => Assert.Equal(eas[kv.Key], kv.Value));

        var none = image.Adapter(new MountOptions { ExtendedAttributes = false, IdMapping = IdMappingMode.Unix });
        Assert.Equal(NtStatus.EasNotSupported, none.GetEa(Open(@"\hello.txt", none), new byte[100], out _));
    }

    internal static List<(string Name, FileInformation Info, ulong NextOffset)> ListAll(XfsWindowsFileSystem fs, OpenFile dir, int bufferSize, bool useOffsets, List<int>? batches = null)
    {
        var all = new List<(string, FileInformation, ulong)>();
        string? lastName = null;
        ulong lastOffset = 0;
        for (int guard = 0; guard < 1_000_000; guard++)
        {
            var sink = new PackingSink(new byte[bufferSize]);
            var marker = all.Count == 0 ? DirectoryMarker.None
                : useOffsets ? new DirectoryMarker(lastOffset) : new DirectoryMarker(lastName);
            Assert.Equal(NtStatus.Success, fs.ReadDirectory(dir, marker, ref sink));
            var batch = sink.Entries();
            batches?.Add(batch.Count);
            all.AddRange(batch);
            if (sink.Ended) return all;
            Assert.NotEmpty(batch);
            (lastName, _, lastOffset) = batch[^1];
        }
        throw new InvalidOperationException("listing did not end");
    }

    [Fact]
    public void SubdirectoriesListDotsAndTheRootDoesNot()
    {
        var root = ListAll(_fs, Open(@"\"), 65536, useOffsets: true).Select(e => e.Name).ToList();
        Assert.DoesNotContain(".", root);
        Assert.DoesNotContain("..", root);
        Assert.Equal(image[""].Children.Select(c => WindowsNames.EncodeToString(c)).Order(), root.Order());

        var sub = ListAll(_fs, Open(@"\dir\sub"), 65536, useOffsets: true);
        Assert.Equal(".", sub[0].Name);
        Assert.Equal(image["dir/sub"].Inode, sub[0].Info.IndexNumber);
        Assert.Equal("..", sub[1].Name);
        Assert.Equal(image["dir"].Inode, sub[1].Info.IndexNumber);
        var links = sub.ToDictionary(e => e.Name, e => e.Info);
        Assert.Equal(ReparseTags.Symlink, links["uplink"].ReparseTag);
        Assert.Equal(image["dir/sub/inner.txt"].Inode, links["inner.txt"].IndexNumber);

        var hidden = image.Adapter(new MountOptions { HideDotFiles = true, IdMapping = IdMappingMode.Unix });
        var withHidden = ListAll(hidden, Open(@"\", hidden), 65536, useOffsets: true).ToDictionary(e => e.Name, e => e.Info);
        Assert.True((withHidden[".hidden"].FileAttributes & (uint)WindowsFileAttributes.Hidden) != 0);
        Assert.True((withHidden["hello.txt"].FileAttributes & (uint)WindowsFileAttributes.Hidden) == 0);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void HugeDirectoryResumesFromMarkersWithoutRescanning(bool useOffsets)
    {
        var k = image["big"];
        Assert.Equal(100_000, k.Children.Count);
        var dir = Open(@"\big");
        var batches = new List<int>();
        long visitedBefore = _fs.EntriesVisited;
        var all = ListAll(_fs, dir, 16 * 1024, useOffsets, batches);
        long visited = _fs.EntriesVisited - visitedBefore;

        Assert.Equal(100_002, all.Count);
        Assert.Equal(k.Children.Select(c => Encoding.ASCII.GetString(c)), all.Skip(2).Select(e => e.Name)); // kernel readdir order
        Assert.Equal(all.Count, all.Select(e => e.Name).Distinct().Count());
        Assert.True(batches.Count > 500, $"a 16 KiB buffer holds about 128 entries; got {batches.Count} batches");
        // Each batch may look at one entry that did not fit; nothing is read twice beyond that.
        Assert.InRange(visited, all.Count, all.Count + batches.Count);

        // A marker this open did not return (a fresh open, restarting mid-way) is found and resumed after.
        var other = Open(@"\big");
        var sink = new PackingSink(new byte[4096]);
        var middle = all[50_000];
        var marker = useOffsets ? new DirectoryMarker(middle.NextOffset) : new DirectoryMarker(middle.Name);
        Assert.Equal(NtStatus.Success, _fs.ReadDirectory(other, marker, ref sink));
        Assert.Equal(all[50_001].Name, sink.Entries()[0].Name);

        Assert.Equal(NtStatus.Success, _fs.GetDirInfoByName(dir, "f054321", out var info, new char[255], out int n));
        Assert.Equal(7, n);
        Assert.Equal(image.Volume.ResolvePath("big/f054321"), info.IndexNumber);
        Assert.Equal(NtStatus.ObjectNameNotFound, _fs.GetDirInfoByName(dir, "f100000", out _, new char[255], out _));
    }
}

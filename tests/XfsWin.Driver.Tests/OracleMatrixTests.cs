using System.Security.Cryptography;
using System.Text;
using XfsWin.Driver.Semantics;
using XfsWin.TestSupport;
using XfsWin.Volume;

namespace XfsWin.Driver.Tests;

/// <summary>
/// Walks every image of the oracle matrix (scripts/oracles: V4 and V5, 1 KiB and 64 KiB blocks,
/// 64 KiB directory blocks, rmap/nrext64, mkfs 6.13 features) through the adapter as WinFsp would and
/// compares each file, listing, link, EA and ACL with what the kernel (or the V4 protofile) recorded.
/// </summary>
public class OracleMatrixTests
{
    public static TheoryData<string> Images() => [.. OracleImages.All];

    /// <summary>Directories bigger than this are listed in full but only a sample of their children is opened.</summary>
    private const int OpenSampleLimit = 500;
    private const long HashLimit = 4L << 20;

    private static string WindowsPath(byte[] path)
    {
        if (path.Length == 0) return @"\";
        var sb = new StringBuilder();
        foreach (var range in path.AsSpan().Split((byte)'/'))
            sb.Append('\\').Append(WindowsNames.EncodeToString(path.AsSpan()[range]));
        return sb.ToString();
    }

    private static ulong ExpectedFileTime(ManifestTime t) =>
        (ulong)Math.Max(0, (t.Seconds + 11644473600L) * 10_000_000L + t.Nanoseconds / 100);

    [Theory]
    [MemberData(nameof(Images))]
    public void EveryEntryLooksOnWindowsAsTheKernelReportedIt(string name)
    {
        var image = OracleImages.Ensure(name);
        var manifest = image.Manifest;
        using var volume = XfsVolume.Open(image.ImagePath);
        var options = new MountOptions { IdMapping = IdMappingMode.Unix };
        var fs = new XfsWindowsFileSystem(volume, options, options.CreateIdentityMap(Sid.Parse("S-1-5-21-1-2-3-1001")), "X:");

        var sampled = new HashSet<string>(StringComparer.Ordinal);
        foreach (var dir in manifest.Entries.Where(e => e.IsDirectory && e.Children is { Count: > OpenSampleLimit }))
            for (int i = 0; i < dir.Children!.Count; i += dir.Children.Count / 50)
                sampled.Add(Convert.ToHexString([.. dir.Path, .. (dir.Path.Length > 0 ? "/"u8 : []), .. dir.Children[i].Name]));

        var buffer = new byte[256 * 1024];
        int files = 0, links = 0, dirs = 0;
        foreach (var e in manifest.Entries)
        {
            int slash = Array.LastIndexOf(e.Path, (byte)'/');
            var parent = slash < 0 ? manifest.Root : manifest.Find(e.Path.AsSpan(0, slash))!;
            if (e.Path.Length > 0 && parent.Children!.Count > OpenSampleLimit && !sampled.Contains(Convert.ToHexString(e.Path)))
                continue;
            string path = WindowsPath(e.Path);
            string where = $"{name}:{e.Printable}";

            Assert.True(fs.Open(path, 0, 0, out var file, out var info) == NtStatus.Success, $"{where}: cannot open {path}");
            Assert.Equal(e.Ino, info.IndexNumber);
            Assert.Equal(e.Nlink, info.HardLinks);
            if (e.Mtime is { } mtime) Assert.Equal(ExpectedFileTime(mtime), info.LastWriteTime);
            if (e.Ctime is { } ctime) Assert.Equal(ExpectedFileTime(ctime), info.ChangeTime);
            if (e.Btime is { } btime && e.BtimeKnown) Assert.Equal(ExpectedFileTime(btime), info.CreationTime);
            Assert.Equal(e.IsDirectory, (info.FileAttributes & (uint)WindowsFileAttributes.Directory) != 0 && info.ReparseTag == 0);

            uint expectedTag = e.Type switch
            {
                "symlink" => ReparseTags.Symlink,
                "fifo" => ReparseTags.LxFifo,
                "chardev" => ReparseTags.LxCharDevice,
                "blockdev" => ReparseTags.LxBlockDevice,
                "socket" => ReparseTags.AfUnix,
                _ => 0,
            };
            Assert.True(expectedTag == info.ReparseTag, $"{where}: reparse tag 0x{info.ReparseTag:X} for a {e.Type}");

            switch (e.Type)
            {
                case "file":
                    files++;
                    Assert.Equal((ulong)e.Size, info.FileSize);
                    if (e.Blocks is { } blocks) Assert.Equal((ulong)blocks * 512, info.AllocationSize);
                    Assert.Equal((e.Mode & 0x80) == 0, (info.FileAttributes & (uint)WindowsFileAttributes.ReadOnly) != 0);
                    if (e.Size <= HashLimit && e.Sha256 is not null)
                    {
                        using var sha = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
                        ulong offset = 0;
                        while (fs.Read(file!, buffer.AsSpan(0, 65536), offset, out int n) == NtStatus.Success)
                        {
                            sha.AppendData(buffer, 0, n);
                            offset += (ulong)n;
                        }
                        Assert.Equal((ulong)e.Size, offset);
                        Assert.True(e.Sha256 == Convert.ToHexString(sha.GetHashAndReset()).ToLowerInvariant(), $"{where}: content differs");
                    }
                    break;
                case "symlink":
                    links++;
                    Assert.Equal(NtStatus.Success, fs.GetReparsePoint(file!, buffer, out int size));
                    var (substitute, _, flags) = ReparseData.ParseSymlink(buffer.AsSpan(0, size));
                    Assert.Equal(ReparseData.SymlinkFlagRelative, flags);
                    Assert.Equal(ExpectedLinkPath(e.Target!, e.Path.Count(b => b == '/')), substitute);
                    break;
                case "dir":
                    dirs++;
                    var listed = AdapterTests.ListAll(fs, file!, 65536, useOffsets: true);
                    var expected = e.Children!.Select(c => (WindowsNames.EncodeToString(c.Name), c.Ino)).ToList();
                    if (e.Path.Length > 0)
                    {
                        expected.Add((".", e.Ino));
                        expected.Add(("..", parent.Ino));
                    }
                    Assert.Equal(expected.OrderBy(x => x.Item1, StringComparer.Ordinal),
                        listed.Select(x => (x.Name, x.Info.IndexNumber)).OrderBy(x => x.Name, StringComparer.Ordinal));
                    break;
            }

            // user.* xattrs that are valid EA names appear as EAs with the same values.
            var userXattrs = e.Xattrs.Where(x => x.Key.StartsWith("user.", StringComparison.Ordinal) &&
                                                 ExtendedAttributes.IsValidEaName(Encoding.UTF8.GetBytes(x.Key[5..])) &&
                                                 !x.Key.StartsWith("user.$LX", StringComparison.Ordinal)).ToList();
            Assert.Equal(NtStatus.Success, fs.GetEa(file!, buffer, out int eaBytes));
            var eas = ExtendedAttributes.Parse(buffer.AsSpan(0, eaBytes)).ToDictionary(x => x.Name, x => x.Value);
            foreach (var x in userXattrs.Where(x => x.Value.Length <= ExtendedAttributes.MaxValueLength))
                Assert.True(eas.TryGetValue(x.Key[5..], out var v) && v.AsSpan().SequenceEqual(x.Value), $"{where}: EA {x.Key[5..]} missing or different");
            Assert.Equal(e.Uid, BitConverter.ToUInt32(eas["$LXUID"]));
            Assert.Equal(e.Mode, BitConverter.ToUInt32(eas["$LXMOD"]));

            // Owner, group and POSIX ACL entries in the security descriptor.
            Assert.Equal(NtStatus.Success, fs.GetSecurity(file!, out var sdBytes));
            var sd = SecurityDescriptors.Parse(sdBytes);
            Assert.Equal(Sid.UnixUser(e.Uid), sd.Owner);
            Assert.Equal(Sid.UnixGroup(e.Gid), sd.Group);
            if (e.Xattrs.TryGetValue("system.posix_acl_access", out var acl))
                foreach (var (tag, id) in LinuxAclNamedEntries(acl))
                    Assert.Contains(sd.Dacl!, a => a.Type == AceType.AccessAllowed && a.Sid == (tag == 2 ? Sid.UnixUser(id) : Sid.UnixGroup(id)));
            fs.Close(file!);
        }
        Assert.True(files > 0 && dirs > 0, $"{name}: nothing was checked");
        if (OracleImages.KernelFilled.Contains(name)) Assert.True(links > 0, $"{name}: no symlinks were checked");
    }

    /// <summary>Named user (tag 2) and group (tag 8) entries of a Linux ACL xattr (little-endian posix_acl_xattr).</summary>
    private static IEnumerable<(uint Tag, uint Id)> LinuxAclNamedEntries(byte[] value)
    {
        for (int p = 4; p + 8 <= value.Length; p += 8)
        {
            ushort tag = BitConverter.ToUInt16(value, p);
            if (tag is 2 or 8) yield return (tag, BitConverter.ToUInt32(value, p + 4));
        }
    }

    /// <summary>What the symlink's substitute name must be: components mapped, absolute targets relative to the root.</summary>
    private static string ExpectedLinkPath(byte[] target, int parentDepth)
    {
        var parts = new List<string>();
        bool absolute = target.Length > 0 && target[0] == '/';
        if (absolute) for (int i = 0; i < parentDepth; i++) parts.Add("..");
        foreach (var range in target.AsSpan().Split((byte)'/'))
            if (!target.AsSpan()[range].IsEmpty) parts.Add(WindowsNames.EncodeToString(target.AsSpan()[range]));
        return parts.Count == 0 ? "." : string.Join('\\', parts);
    }
}

using System.Buffers;
using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;
using XfsWin.Directories;
using XfsWin.Format;
using XfsWin.Volume;

namespace XfsWin.TestSupport;

/// <summary>One way XfsWin's view differs from the manifest. <see cref="Error"/> is set when an API call threw.</summary>
public sealed record TreeDifference(string Path, string Field, string Expected, string Actual, Exception? Error = null)
{
    public override string ToString() =>
        Error is null
            ? $"{Path}: {Field}: expected {Expected}, actual {Actual}"
            : $"{Path}: {Field}: {Error.GetType().Name}: {Error.Message}";
}

public sealed record TreeComparisonOptions
{
    /// <summary>Directory entries carry file types (false for ftype=0 V4 volumes: Unknown is then accepted too).</summary>
    public bool DirectoryFileTypes { get; init; } = true;

    /// <summary>Read every regular file and compare its SHA-256.</summary>
    public bool CompareContents { get; init; } = true;

    /// <summary>Look every directory entry up by name (TryLookup) besides listing it.</summary>
    public bool CheckLookups { get; init; } = true;

    /// <summary>Stop collecting after this many differences (the count still goes on).</summary>
    public int MaxDifferences { get; init; } = 10_000;
}

public sealed class TreeComparison
{
    internal readonly List<TreeDifference> List = [];

    public IReadOnlyList<TreeDifference> Differences => List;
    public int TotalDifferences { get; internal set; }
    public int EntriesCompared { get; internal set; }
    public long ContentBytesRead { get; internal set; }
    public int LookupsChecked { get; internal set; }
    public bool Identical => TotalDifferences == 0;

    /// <summary>A readable report: counts per field, then the first <paramref name="max"/> differences.</summary>
    public string Format(int max = 200)
    {
        var sb = new StringBuilder();
        sb.Append(TotalDifferences).Append(" difference(s) over ").Append(EntriesCompared).Append(" entries");
        sb.Append(" (by field: ");
        sb.Append(string.Join(", ", List.GroupBy(d => d.Field).OrderByDescending(g => g.Count()).Select(g => $"{g.Key}={g.Count()}")));
        sb.Append(")\n");
        // Up to 20 of each kind first, so a rare kind is not hidden behind thousands of a common one.
        var shown = List.GroupBy(d => d.Field).SelectMany(g => g.Take(20)).Take(max).ToList();
        foreach (var d in shown)
            sb.Append("  ").Append(d).Append('\n');
        if (TotalDifferences > shown.Count)
            sb.Append("  ... ").Append(TotalDifferences - shown.Count).Append(" more\n");
        return sb.ToString();
    }
}

/// <summary>
/// Compares everything <see cref="XfsVolume"/> reports with a manifest of what the kernel reported:
/// for every manifest entry its attributes (read by inode number, so a broken directory does not hide the
/// inodes below it), file contents, link targets and xattrs; for every directory its full listing
/// ("." is the directory itself, ".." its parent, the root's ".." the root) and a lookup of every name.
/// Every difference is collected with its path; exceptions from the volume are differences too.
/// </summary>
public static class TreeComparer
{
    public static TreeComparison Compare(XfsVolume volume, KernelManifest manifest, TreeComparisonOptions? options = null,
        CancellationToken cancellationToken = default)
    {
        options ??= new TreeComparisonOptions();
        var result = new TreeComparison();
        var ctx = new Context(volume, manifest, options, result);

        ctx.Try("/", "root inode", () => ctx.Check("/", "root inode", manifest.Root.Ino, volume.RootInode));

        var inoByPath = new Dictionary<string, ulong>(manifest.Entries.Count, StringComparer.Ordinal);
        foreach (var e in manifest.Entries)
            inoByPath[Convert.ToHexString(e.Path)] = e.Ino;

        foreach (var entry in manifest.Entries)
        {
            cancellationToken.ThrowIfCancellationRequested();
            result.EntriesCompared++;
            CompareAttributes(ctx, entry);
            switch (entry.Type)
            {
                case "file" when options.CompareContents:
                    CompareContents(ctx, entry, cancellationToken);
                    break;
                case "symlink":
                    ctx.Try(entry.Printable, "readlink", () =>
                        ctx.CheckBytes(entry.Printable, "symlink target", entry.Target ?? [], volume.ReadLink(entry.Ino)));
                    break;
                case "dir":
                    var parentIno = entry.Path.Length == 0 ? entry.Ino : inoByPath[Convert.ToHexString(ParentPath(entry.Path))];
                    CompareDirectory(ctx, entry, parentIno);
                    break;
            }
            CompareXattrs(ctx, entry);
        }
        return result;
    }

    private static byte[] ParentPath(byte[] path)
    {
        var slash = Array.LastIndexOf(path, (byte)'/');
        return slash < 0 ? [] : path[..slash];
    }

    public static XfsFileType ToFileType(string manifestType) => manifestType switch
    {
        "file" => XfsFileType.RegularFile,
        "dir" => XfsFileType.Directory,
        "symlink" => XfsFileType.Symlink,
        "chardev" => XfsFileType.CharacterDevice,
        "blockdev" => XfsFileType.BlockDevice,
        "fifo" => XfsFileType.Fifo,
        "socket" => XfsFileType.Socket,
        _ => throw new InvalidDataException($"manifest type '{manifestType}' is unknown"),
    };

    private static void CompareAttributes(Context ctx, ManifestEntry e)
    {
        var p = e.Printable;
        ctx.Try(p, "getattr", () =>
        {
            var a = ctx.Volume.GetAttributes(e.Ino);
            ctx.Check(p, "ino", e.Ino, a.Inode);
            ctx.Check(p, "type", ToFileType(e.Type), a.FileType);
            ctx.Check(p, "mode", $"0{Convert.ToString(e.Mode, 8)}", $"0{Convert.ToString(a.Mode, 8)}");
            ctx.Check(p, "nlink", e.Nlink, a.LinkCount);
            ctx.Check(p, "uid", e.Uid, a.Uid);
            ctx.Check(p, "gid", e.Gid, a.Gid);
            ctx.Check(p, "size", e.Size, a.Size);
            if (e.Blocks is { } blocks)
                ctx.Check(p, "allocated bytes (st_blocks*512)", blocks * 512, a.AllocatedBytes);
            CheckTime(ctx, p, "atime", e.Atime, a.AccessTime);
            CheckTime(ctx, p, "mtime", e.Mtime, a.ModifyTime);
            CheckTime(ctx, p, "ctime", e.Ctime, a.ChangeTime);
            if (e.BtimeKnown)
                ctx.Check(p, "crtime", e.Btime?.ToString() ?? "none", a.CreationTime is { } c ? $"{c.Seconds}.{c.Nanoseconds:D9}" : "none");
            ctx.Check(p, "rdev major", e.RdevMajor, a.DeviceMajor);
            ctx.Check(p, "rdev minor", e.RdevMinor, a.DeviceMinor);
        });
    }

    private static void CheckTime(Context ctx, string path, string field, ManifestTime? expected, XfsTimestamp actual)
    {
        if (expected is not { } t)
            return;
        if (actual.Seconds != t.Seconds || actual.Nanoseconds != t.Nanoseconds)
            ctx.Add(new TreeDifference(path, field, t.ToString(), $"{actual.Seconds}.{actual.Nanoseconds:D9}"));
    }

    private static void CompareContents(Context ctx, ManifestEntry e, CancellationToken ct)
    {
        ctx.Try(e.Printable, "read", () =>
        {
            var buffer = ArrayPool<byte>.Shared.Rent(1 << 20);
            try
            {
                using var sha = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
                long offset = 0;
                while (true)
                {
                    ct.ThrowIfCancellationRequested();
                    var n = ctx.Volume.Read(e.Ino, offset, buffer.AsSpan(0, 1 << 20));
                    if (n < 0 || n > 1 << 20)
                        throw new InvalidOperationException($"Read returned {n} for a 1 MiB buffer");
                    if (n == 0)
                        break;
                    sha.AppendData(buffer, 0, n);
                    offset += n;
                    if (offset > e.Size)
                        break;
                }
                ctx.Result.ContentBytesRead += offset;
                ctx.Check(e.Printable, "bytes read until Read returned 0", e.Size, offset);
                if (e.Sha256 is not null)
                    ctx.Check(e.Printable, "content sha256", e.Sha256, Convert.ToHexStringLower(sha.GetHashAndReset()));
            }
            finally
            {
                ArrayPool<byte>.Shared.Return(buffer);
            }
        });
    }

    private static void CompareDirectory(Context ctx, ManifestEntry dir, ulong parentIno)
    {
        var p = dir.Printable;
        var expected = dir.Children ?? [];
        ctx.Try(p, "readdir", () =>
        {
            var listing = ctx.Volume.ListDirectory(dir.Ino);
            var dots = listing.Where(x => x.Name.AsSpan().SequenceEqual("."u8)).ToList();
            var dotdots = listing.Where(x => x.Name.AsSpan().SequenceEqual(".."u8)).ToList();
            ctx.Check(p, "count of '.' entries", 1, dots.Count);
            ctx.Check(p, "count of '..' entries", 1, dotdots.Count);
            if (dots.Count == 1)
            {
                ctx.Check(p, "'.' inode", dir.Ino, dots[0].Inode);
                CheckEntryType(ctx, p + "/.", XfsFileType.Directory, dots[0].FileType);
            }
            if (dotdots.Count == 1)
            {
                ctx.Check(p, "'..' inode", parentIno, dotdots[0].Inode);
                CheckEntryType(ctx, p + "/..", XfsFileType.Directory, dotdots[0].FileType);
            }

            var actual = new Dictionary<string, DirectoryEntry>(listing.Count, StringComparer.Ordinal);
            foreach (var x in listing)
            {
                if (x.Name.AsSpan().SequenceEqual("."u8) || x.Name.AsSpan().SequenceEqual(".."u8))
                    continue;
                if (!actual.TryAdd(Convert.ToHexString(x.Name), x))
                    ctx.Add(new TreeDifference(Join(p, x.Name), "directory entry", "listed once", "listed twice"));
            }
            var types = ctx.TypeByIno;
            foreach (var (name, ino) in expected)
            {
                var key = Convert.ToHexString(name);
                var childPath = Join(p, name);
                if (!actual.Remove(key, out var got))
                {
                    ctx.Add(new TreeDifference(childPath, "directory entry", $"present (ino {ino})", "missing"));
                    continue;
                }
                ctx.Check(childPath, "entry inode", ino, got.Inode);
                if (types.TryGetValue(ino, out var t))
                    CheckEntryType(ctx, childPath, t, got.FileType);
            }
            foreach (var extra in actual.Values)
                ctx.Add(new TreeDifference(Join(p, extra.Name), "directory entry", "absent", $"present (ino {extra.Inode})"));
        });

        if (!ctx.Options.CheckLookups)
            return;
        foreach (var (name, ino) in expected)
        {
            ctx.Try(Join(p, name), "lookup", () =>
            {
                ctx.Result.LookupsChecked++;
                if (!ctx.Volume.TryLookup(dir.Ino, name, out var found))
                    ctx.Add(new TreeDifference(Join(p, name), "lookup", $"ino {ino}", "not found"));
                else
                    ctx.Check(Join(p, name), "lookup inode", ino, found);
            });
        }
    }

    private static void CheckEntryType(Context ctx, string path, XfsFileType expected, XfsFileType actual)
    {
        if (actual == expected)
            return;
        if (!ctx.Options.DirectoryFileTypes && actual == XfsFileType.Unknown)
            return;
        ctx.Add(new TreeDifference(path, "entry file type", expected.ToString(), actual.ToString()));
    }

    // As root the kernel lists an ACL twice: as system.posix_acl_* (Linux xattr form) and as the raw
    // on-disk attribute trusted.SGI_ACL_* (XFS form). XfsWin names it system.posix_acl_* only
    // (XattrNames.ToLinuxName); its value must be exactly one of the two forms the kernel showed.
    private static readonly (string System, string Trusted)[] AclAliases =
        [("system.posix_acl_access", "trusted.SGI_ACL_FILE"), ("system.posix_acl_default", "trusted.SGI_ACL_DEFAULT")];

    private static void CompareXattrs(Context ctx, ManifestEntry e)
    {
        var p = e.Printable;
        var expected = new Dictionary<string, byte[]>(e.Xattrs, StringComparer.Ordinal);
        var onDiskAcl = new Dictionary<string, byte[]>(StringComparer.Ordinal);
        foreach (var (sys, trusted) in AclAliases)
        {
            if (expected.ContainsKey(sys) && expected.Remove(trusted, out var raw))
                onDiskAcl[sys] = raw;
        }
        ctx.Try(p, "listxattr", () =>
        {
            var list = ctx.Volume.ListXattrs(e.Ino);
            var seen = new HashSet<string>(StringComparer.Ordinal);
            foreach (var x in list)
            {
                var name = x.LinuxName;
                if (!seen.Add(name))
                {
                    ctx.Add(new TreeDifference(p, $"xattr {name}", "listed once", "listed twice"));
                    continue;
                }
                if (!expected.TryGetValue(name, out var want))
                {
                    ctx.Add(new TreeDifference(p, $"xattr {name}", "absent", $"present ({x.ValueLength} bytes)"));
                    continue;
                }
                ctx.Try(p, $"getxattr {name}", () =>
                {
                    if (!ctx.Volume.TryGetXattr(e.Ino, x.Namespace, x.Name, out var value))
                    {
                        ctx.Add(new TreeDifference(p, $"xattr {name}", $"{want.Length} bytes", "TryGetXattr found nothing for a listed name"));
                        return;
                    }
                    if (value.Length != x.ValueLength)
                        ctx.Add(new TreeDifference(p, $"xattr {name} length", $"ListXattrs said {x.ValueLength}", $"{value.Length}"));
                    if (onDiskAcl.TryGetValue(name, out var raw))
                    {
                        if (!value.AsSpan().SequenceEqual(want) && !value.AsSpan().SequenceEqual(raw))
                        {
                            ctx.Add(new TreeDifference(p, $"xattr {name} (ACL)",
                                $"{Convert.ToHexString(want)} (Linux form) or {Convert.ToHexString(raw)} (on-disk form) = {PosixAcl.Describe(want)}",
                                $"{Convert.ToHexString(value)} = {PosixAcl.Describe(value) ?? "unparsable"}"));
                        }
                    }
                    else
                    {
                        ctx.CheckBytes(p, $"xattr {name} value", want, value);
                    }
                });
            }
            foreach (var name in expected.Keys)
            {
                if (!seen.Contains(name))
                    ctx.Add(new TreeDifference(p, $"xattr {name}", $"present ({expected[name].Length} bytes)", "absent"));
            }
        });
    }

    private static string Join(string dirPrintable, byte[] name)
    {
        var n = Encoding.UTF8.GetString(name).Replace("\n", "\\n", StringComparison.Ordinal);
        return dirPrintable == "/" ? "/" + n : dirPrintable + "/" + n;
    }

    private sealed class Context(XfsVolume volume, KernelManifest manifest, TreeComparisonOptions options, TreeComparison result)
    {
        private Dictionary<ulong, XfsFileType>? _types;

        public XfsVolume Volume { get; } = volume;
        public TreeComparisonOptions Options { get; } = options;
        public TreeComparison Result { get; } = result;

        public Dictionary<ulong, XfsFileType> TypeByIno => _types ??= BuildTypes();

        private Dictionary<ulong, XfsFileType> BuildTypes()
        {
            var d = new Dictionary<ulong, XfsFileType>();
            foreach (var e in manifest.Entries)
                d[e.Ino] = ToFileType(e.Type);
            return d;
        }

        public void Add(TreeDifference d)
        {
            Result.TotalDifferences++;
            if (Result.List.Count < Options.MaxDifferences)
                Result.List.Add(d);
        }

        public void Check<T>(string path, string field, T expected, T actual)
        {
            if (!EqualityComparer<T>.Default.Equals(expected, actual))
                Add(new TreeDifference(path, field, expected?.ToString() ?? "null", actual?.ToString() ?? "null"));
        }

        public void CheckBytes(string path, string field, byte[] expected, byte[] actual)
        {
            if (!expected.AsSpan().SequenceEqual(actual))
                Add(new TreeDifference(path, field, Show(expected), Show(actual)));
        }

        private static string Show(byte[] b) =>
            b.Length <= 64 ? $"[{b.Length}] {Convert.ToHexString(b)}" : $"[{b.Length}] {Convert.ToHexString(b, 0, 32)}... sha256 {Convert.ToHexStringLower(SHA256.HashData(b))[..16]}";

        /// <summary>Runs one API call; any exception becomes a difference (never lost, never fatal to the walk).</summary>
        public void Try(string path, string operation, Action action)
        {
            try
            {
                action();
            }
            catch (OperationCanceledException)
            {
                throw;
            }
            catch (Exception ex)
            {
                Add(new TreeDifference(path, operation, "success", ex.GetType().Name + ": " + ex.Message, ex));
            }
        }
    }
}

/// <summary>
/// POSIX ACL values in either form: Linux's xattr form (what getxattr(2) returns: le32 version 2, then
/// 8-byte entries le16 tag, le16 perm, le32 id) or XFS's on-disk form (be32 count, then 12-byte
/// entries be32 tag, be32 id, be16 perm, 2 pad bytes). Either is described canonically so the two compare.
/// </summary>
public static class PosixAcl
{
    private const int AclUser = 0x02, AclGroup = 0x08;

    /// <summary>Linux's xattr form of the entries (tag, permissions, id), in the order given: what setxattr(2) takes.</summary>
    public static byte[] LinuxXattr(IReadOnlyList<(ushort Tag, ushort Perm, uint Id)> entries)
    {
        var bytes = new byte[4 + 8 * entries.Count];
        BinaryPrimitives.WriteUInt32LittleEndian(bytes, 2);
        for (int i = 0; i < entries.Count; i++)
        {
            var e = bytes.AsSpan(4 + 8 * i);
            BinaryPrimitives.WriteUInt16LittleEndian(e, entries[i].Tag);
            BinaryPrimitives.WriteUInt16LittleEndian(e[2..], entries[i].Perm);
            BinaryPrimitives.WriteUInt32LittleEndian(e[4..], entries[i].Id);
        }
        return bytes;
    }

    public static string? Describe(ReadOnlySpan<byte> v)
    {
        var entries = new List<(int Tag, int Perm, long Id)>();
        if (v.Length >= 4 && (v.Length - 4) % 8 == 0 && BinaryPrimitives.ReadUInt32LittleEndian(v) == 2)
        {
            for (var o = 4; o < v.Length; o += 8)
                entries.Add((BinaryPrimitives.ReadUInt16LittleEndian(v[o..]), BinaryPrimitives.ReadUInt16LittleEndian(v[(o + 2)..]),
                    BinaryPrimitives.ReadUInt32LittleEndian(v[(o + 4)..])));
        }
        else if (v.Length >= 4 && (v.Length - 4) % 12 == 0 && BinaryPrimitives.ReadUInt32BigEndian(v) == (uint)(v.Length - 4) / 12)
        {
            for (var o = 4; o < v.Length; o += 12)
                entries.Add(((int)BinaryPrimitives.ReadUInt32BigEndian(v[o..]), BinaryPrimitives.ReadUInt16BigEndian(v[(o + 8)..]),
                    BinaryPrimitives.ReadUInt32BigEndian(v[(o + 4)..])));
        }
        else
        {
            return null;
        }
        return string.Join(",", entries
            .Select(e => (e.Tag, e.Perm, Id: e.Tag is AclUser or AclGroup ? e.Id : -1))
            .Order()
            .Select(e => $"{e.Tag:x}:{Convert.ToString(e.Perm, 8)}:{e.Id}"));
    }
}

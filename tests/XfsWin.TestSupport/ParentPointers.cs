using System.Globalization;
using System.Text.RegularExpressions;

namespace XfsWin.TestSupport;

/// <summary>
/// The parent pointers of a volume mounted by the kernel, as the kernel itself reports them: every inode the kernel's
/// bulkstat lists (the root aside) is asked for its parents through its handle (<c>xfs_io -c 'parent -p INO GEN'</c>
/// on the mount point, which works for every file type), and answers with the paths its parent pointers spell.
/// Inode numbers and generations differ between two volumes given the same operations; the paths do not.
/// </summary>
public static partial class ParentPointers
{
    /// <summary>One inode's parent pointers as paths relative to the mount point, sorted.</summary>
    public sealed record InodeParents(ulong Ino, IReadOnlyList<string> Paths)
    {
        public override string ToString() => $"{Ino}: {string.Join(" | ", Paths)}";
    }

    /// <summary>The parent pointers of every allocated inode but the root, as the kernel mounted at <paramref name="mountPoint"/> lists them.</summary>
    public static List<InodeParents> List(string mountPoint)
    {
        // The root's number depends on the geometry (128 with 512-byte inodes, 64 with 2 KiB ones): the mount point's.
        ulong rootIno = ulong.Parse(Shell.RunChecked("stat", "-c", "%i", mountPoint).StandardOutput.Trim(), CultureInfo.InvariantCulture);
        string io = OracleImages.Tool("xfs_io", "6.13");
        var bulk = Shell.RunChecked(io, "-c", "bulkstat", mountPoint).StandardOutput;
        var result = new List<InodeParents>();
        foreach (Match m in BulkstatRecord().Matches(bulk))
        {
            ulong ino = ulong.Parse(m.Groups[1].Value, CultureInfo.InvariantCulture);
            if (ino == rootIno) continue;
            uint gen = uint.Parse(m.Groups[2].Value, NumberStyles.HexNumber, CultureInfo.InvariantCulture);
            var r = Shell.Run(io, "-c", $"parent -p {ino} {gen}", mountPoint);
            string text = r.StandardOutput + r.StandardError;
            var paths = text.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
                .Select(p => p.StartsWith(mountPoint, StringComparison.Ordinal) ? p[mountPoint.Length..] : "?" + p)
                .Order(StringComparer.Ordinal).ToList();
            result.Add(new InodeParents(ino, paths));
        }
        return result;
    }

    /// <summary>
    /// The differences between the parent pointers of two kernel mounts (paths only, as multisets of per-inode path
    /// sets), and between each mount's parent pointers and its own directory tree (every name of an inode, and only
    /// those, has a parent pointer); empty when they agree.
    /// </summary>
    public static List<string> Compare(string expectedMount, string actualMount)
    {
        var problems = new List<string>();
        var expected = List(expectedMount);
        var actual = List(actualMount);
        problems.AddRange(AgainstTree(actualMount, actual).Select(p => "ours: " + p));
        static List<string> Keys(List<InodeParents> l) => l.Select(i => string.Join(" | ", i.Paths)).Order(StringComparer.Ordinal).ToList();
        var e = Keys(expected);
        var a = Keys(actual);
        foreach (var k in e.Except(a)) problems.Add($"the kernel's volume has an inode with parent pointers {k}, ours has none like it");
        foreach (var k in a.Except(e))
            problems.Add($"our volume has an inode with parent pointers {k} (inodes {string.Join(", ", actual.Where(i => string.Join(" | ", i.Paths) == k).Select(i => i.Ino))}), the kernel's has none like it");
        if (problems.Count == 0 && !e.SequenceEqual(a)) problems.Add("the same parent pointer sets, different multiplicities");
        return problems;
    }

    /// <summary>Each inode's parent pointers spell exactly its names in the tree at <paramref name="mountPoint"/>.</summary>
    public static List<string> AgainstTree(string mountPoint, List<InodeParents> parents)
    {
        var names = new Dictionary<ulong, List<string>>();
        var find = Shell.RunChecked("find", mountPoint, "-mindepth", "1", "-printf", "%i %P\\n").StandardOutput;
        foreach (var line in find.Split('\n', StringSplitOptions.RemoveEmptyEntries))
        {
            int space = line.IndexOf(' ', StringComparison.Ordinal);
            ulong ino = ulong.Parse(line[..space], CultureInfo.InvariantCulture);
            if (!names.TryGetValue(ino, out var list)) names[ino] = list = new();
            list.Add("/" + line[(space + 1)..]);
        }
        var problems = new List<string>();
        foreach (var p in parents)
        {
            var tree = names.TryGetValue(p.Ino, out var l) ? l.Order(StringComparer.Ordinal).ToList() : new List<string>();
            if (!tree.SequenceEqual(p.Paths))
                problems.Add($"inode {p.Ino}: parent pointers {string.Join(" | ", p.Paths)}, names in the tree {string.Join(" | ", tree)}");
        }
        foreach (var ino in names.Keys.Except(parents.Select(p => p.Ino)))
            problems.Add($"inode {ino} ({string.Join(" | ", names[ino])}) is not in bulkstat");
        return problems;
    }

    [GeneratedRegex(@"bs_ino = (\d+)[\s\S]*?bs_gen = 0x([0-9a-f]+)")]
    private static partial Regex BulkstatRecord();
}

using System.Text;
using System.Text.RegularExpressions;
using Xunit;
using XfsWin.TestSupport;

namespace XfsWin.Tests.Architecture;

/// <summary>
/// The engine's layers depend only downward (docs/architecture.md). Every file of src/XfsWin.Core lives in
/// the namespace of its folder, and may name only its own layer, the root namespace and layers below it:
/// by <c>using</c> directives, by fully qualified names (<c>XfsWin.Journal.LogState</c>) and by names
/// qualified with a layer (<c>Journal.LogState</c> from inside <c>XfsWin.Volume</c>).
/// </summary>
public sealed partial class LayeringTests
{
    /// <summary>
    /// Each folder of the engine and its rank; a layer may use only layers of a lower rank. Layers of the
    /// same rank may not use each other. A new folder must be placed here.
    /// </summary>
    public static readonly IReadOnlyDictionary<string, int> LayerRanks = new Dictionary<string, int>(StringComparer.Ordinal)
    {
        ["Device"] = 1,
        ["Format"] = 2,
        ["Metadata"] = 3,     // buffers, health, the write gate
        ["Journal"] = 4,      // log formats, replay, log writing
        ["Btree"] = 5,
        ["Allocation"] = 6,
        ["Inodes"] = 7,
        ["Extents"] = 8,
        ["Directories"] = 9,  // and symlinks
        ["Attributes"] = 10,
        ["Volume"] = 11,      // the API hosts use; orchestration that needs every layer below
        ["Mkfs"] = 12,        // tools built on the engine
        ["Check"] = 12,
        ["Admin"] = 13,       // grow, label and UUID changes: reuse mkfs's AG header writers
    };

    private static string CoreDirectory => Path.Combine(OracleImages.RepoRoot, "src", "XfsWin.Core");

    [Fact]
    public void Every_layer_of_the_engine_depends_only_on_layers_below_it()
    {
        var sources = Directory.EnumerateFiles(CoreDirectory, "*.cs", SearchOption.AllDirectories)
            .Where(f => !IsBuildOutput(f))
            .Select(f => (Path.GetRelativePath(CoreDirectory, f).Replace('\\', '/'), File.ReadAllText(f)))
            .ToList();
        Assert.True(sources.Count > 50, $"only {sources.Count} source files found under {CoreDirectory}");
        var problems = FindViolations(sources);
        Assert.True(problems.Count == 0, "layering violations:\n" + string.Join("\n", problems));
    }

    [Fact]
    public void The_rule_reports_upward_uses_in_every_form_and_misplaced_namespaces()
    {
        var sources = new List<(string, string)>
        {
            ("Format/Thing.cs", "namespace XfsWin.Format;\npublic enum Thing { A }\n"),
            ("Inodes/Reader.cs", "namespace XfsWin.Inodes;\npublic sealed class Reader { }\n"),
            ("Volume/Api.cs", "namespace XfsWin.Volume;\npublic sealed class Api { }\n"),
            ("Journal/Fine.cs", "using XfsWin.Format;\nusing XfsWin.Device;\nnamespace XfsWin.Journal;\n// Inodes.Reader in a comment\n" +
                                "class Fine { string S = \"XfsWin.Volume.Api\"; Thing T; }\n"),
            ("Journal/UsesUp.cs", "using XfsWin.Inodes;\nnamespace XfsWin.Journal;\nclass UsesUp { }\n"),
            ("Journal/Qualified.cs", "namespace XfsWin.Journal;\nclass Qualified { XfsWin.Volume.Api A; }\n"),
            ("Journal/Relative.cs", "namespace XfsWin.Journal;\nclass Relative { Inodes.Reader R; object Device => null; void M() { _ = Device.ToString(); } }\n"),
            ("Inodes/Alias.cs", "using Api = XfsWin.Volume.Api;\nnamespace XfsWin.Inodes;\nclass Alias { }\n"),
            ("Inodes/Misplaced.cs", "namespace XfsWin.Extents;\nclass Misplaced { }\n"),
            ("Fuse/Hook.cs", "namespace XfsWin.Fuse;\nclass Hook { }\n"),
        };
        var problems = FindViolations(sources);
        Assert.DoesNotContain(problems, p => p.StartsWith("Journal/Fine.cs", StringComparison.Ordinal));
        Assert.Contains(problems, p => p.StartsWith("Journal/UsesUp.cs", StringComparison.Ordinal) && p.Contains("Inodes", StringComparison.Ordinal));
        Assert.Contains(problems, p => p.StartsWith("Journal/Qualified.cs", StringComparison.Ordinal) && p.Contains("Volume", StringComparison.Ordinal));
        Assert.Contains(problems, p => p.StartsWith("Journal/Relative.cs", StringComparison.Ordinal) && p.Contains("Inodes", StringComparison.Ordinal));
        Assert.DoesNotContain(problems, p => p.StartsWith("Journal/Relative.cs", StringComparison.Ordinal) && p.Contains("uses Device", StringComparison.Ordinal));
        Assert.Contains(problems, p => p.StartsWith("Inodes/Alias.cs", StringComparison.Ordinal) && p.Contains("Volume", StringComparison.Ordinal));
        Assert.Contains(problems, p => p.StartsWith("Inodes/Misplaced.cs", StringComparison.Ordinal) && p.Contains("namespace", StringComparison.Ordinal));
        Assert.Contains(problems, p => p.StartsWith("Fuse/Hook.cs", StringComparison.Ordinal) && p.Contains("not a known layer", StringComparison.Ordinal));
        Assert.Equal(6, problems.Count);
    }

    private static bool IsBuildOutput(string path)
    {
        var parts = path.Split(Path.DirectorySeparatorChar, Path.AltDirectorySeparatorChar);
        return parts.Contains("obj") || parts.Contains("bin");
    }

    /// <summary>Every breach of the rule in <paramref name="sources"/> (paths relative to the engine's folder), one line each.</summary>
    internal static List<string> FindViolations(IReadOnlyList<(string Path, string Text)> sources)
    {
        var problems = new List<string>();
        // The type names each layer declares, to tell "Journal.LogState" (a layer-qualified type) from "Device.Read" (a member).
        var declared = new Dictionary<string, HashSet<string>>(StringComparer.Ordinal);
        foreach (var (path, text) in sources)
        {
            string layer = LayerOf(path);
            if (layer.Length == 0) continue;
            if (!declared.TryGetValue(layer, out var names)) declared[layer] = names = new HashSet<string>(StringComparer.Ordinal);
            foreach (Match m in TypeDeclaration().Matches(StripCommentsAndStrings(text))) names.Add(m.Groups[1].Value);
        }

        foreach (var (path, text) in sources)
        {
            string layer = LayerOf(path);
            string code = StripCommentsAndStrings(text);
            var namespaces = NamespaceDeclaration().Matches(code).Select(m => m.Groups[1].Value).ToList();
            string expected = layer.Length == 0 ? "XfsWin" : "XfsWin." + layer;
            if (namespaces.Count == 0 || namespaces.Any(n => n != expected))
                problems.Add($"{path}: declares namespace {string.Join(", ", namespaces.DefaultIfEmpty("(none)"))}; files in this folder belong to {expected}");
            if (layer.Length == 0) continue;
            if (!LayerRanks.TryGetValue(layer, out int rank))
            {
                problems.Add($"{path}: folder {layer} is not a known layer: place it in LayeringTests.LayerRanks");
                continue;
            }
            code = NamespaceDeclaration().Replace(code, "");
            var used = new SortedDictionary<string, string>(StringComparer.Ordinal);
            foreach (Match m in QualifiedLayerName().Matches(code)) used.TryAdd(m.Groups[1].Value, m.Value.Trim());
            foreach (Match m in RelativeLayerName().Matches(code))
            {
                string target = m.Groups[1].Value;
                if (declared.TryGetValue(target, out var names) && names.Contains(m.Groups[2].Value))
                    used.TryAdd(target, m.Value);
            }
            foreach (var (target, evidence) in used)
            {
                if (target == layer) continue;
                if (!LayerRanks.TryGetValue(target, out int targetRank))
                    continue; // XfsWin.X for an X that is no layer of the engine (another assembly): not the engine's concern.
                if (targetRank >= rank)
                    problems.Add($"{path}: layer {layer} (rank {rank}) uses {target} (rank {targetRank}): \"{evidence}\"");
            }
        }
        return problems;
    }

    /// <summary>The layer a file belongs to: its top folder, or "" for files at the root of the engine.</summary>
    private static string LayerOf(string relativePath)
    {
        int slash = relativePath.IndexOf('/', StringComparison.Ordinal);
        return slash < 0 ? "" : relativePath[..slash];
    }

    /// <summary>Replaces comments and string and character literals with spaces, so that only code is searched.</summary>
    internal static string StripCommentsAndStrings(string text)
    {
        var sb = new StringBuilder(text.Length);
        int i = 0;
        while (i < text.Length)
        {
            char c = text[i];
            char next = i + 1 < text.Length ? text[i + 1] : '\0';
            if (c == '/' && next == '/')
            {
                while (i < text.Length && text[i] != '\n') i++;
            }
            else if (c == '/' && next == '*')
            {
                int end = text.IndexOf("*/", i + 2, StringComparison.Ordinal);
                i = end < 0 ? text.Length : end + 2;
                sb.Append(' ');
            }
            else if (c == '"' && i + 2 < text.Length && next == '"' && text[i + 2] == '"')
            {
                int end = text.IndexOf("\"\"\"", i + 3, StringComparison.Ordinal);
                i = end < 0 ? text.Length : end + 3;
                sb.Append("\"\"");
            }
            else if (c == '"' || c == '\'')
            {
                bool verbatim = i > 0 && (text[i - 1] == '@' || (text[i - 1] == '$' && i > 1 && text[i - 2] == '@'));
                i++;
                while (i < text.Length && text[i] != c)
                {
                    if (text[i] == '\\' && !verbatim) i++;
                    else if (verbatim && text[i] == '"' && i + 1 < text.Length && text[i + 1] == '"') i++;
                    if (text[i] == '\n' && !verbatim) break;
                    i++;
                }
                i++;
                sb.Append(c).Append(c);
            }
            else
            {
                sb.Append(c);
                i++;
            }
        }
        return sb.ToString();
    }

    [GeneratedRegex(@"^\s*namespace\s+([\w.]+)", RegexOptions.Multiline)]
    private static partial Regex NamespaceDeclaration();

    [GeneratedRegex(@"\b(?:class|struct|interface|enum|record(?:\s+struct|\s+class)?|delegate\s+[\w<>\[\],?.]+)\s+([A-Z]\w*)")]
    private static partial Regex TypeDeclaration();

    /// <summary><c>using XfsWin.X;</c>, <c>using static XfsWin.X.T;</c>, <c>using A = XfsWin.X.T;</c> and <c>XfsWin.X.T</c> anywhere in code.</summary>
    [GeneratedRegex(@"(?<![\w.])(?:global::)?XfsWin\.(\w+)")]
    private static partial Regex QualifiedLayerName();

    /// <summary><c>X.T</c> not preceded by a member access: a name qualified with a layer (checked against the types that layer declares).</summary>
    [GeneratedRegex(@"(?<![\w.])([A-Z]\w*)\.([A-Z]\w*)")]
    private static partial Regex RelativeLayerName();
}

using System.Text;
using System.Text.Json;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>info, ls, stat, cat and exit codes, checked against the kernel's view of the same image.</summary>
public class CommandTests
{
    private static string Tree => FixtureImages.Tree;

    private static string[] Lstat(string path) =>
        Sh.Check("python3", "-c",
            "import os,sys; s=os.lstat(sys.argv[1]); print(s.st_ino,s.st_mode,s.st_nlink,s.st_uid,s.st_gid,s.st_size,s.st_atime_ns,s.st_mtime_ns,s.st_ctime_ns,os.major(s.st_rdev),os.minor(s.st_rdev))",
            path).Split(' ', StringSplitOptions.TrimEntries);

    [Fact]
    public void Info_shows_the_volume_as_xfs_db_sees_it()
    {
        var r = Xfswin.Ok("info", Tree, "--json");
        using var doc = JsonDocument.Parse(r.Out);
        var v = doc.RootElement.GetProperty("volume");
        string sb = Sh.Check("xfs_db", "-r", "-c", "sb 0", "-c", "print uuid fname blocksize agcount dblocks rootino", Tree);
        Assert.Contains($"uuid = {v.GetProperty("uuid").GetString()}", sb, StringComparison.Ordinal);
        Assert.Contains("fname = \"cli-tree", sb, StringComparison.Ordinal);
        Assert.Equal("cli-tree", v.GetProperty("label").GetString());
        Assert.Contains($"agcount = {v.GetProperty("agCount").GetUInt32()}", sb, StringComparison.Ordinal);
        Assert.Contains($"dblocks = {v.GetProperty("dataBlocks").GetUInt64()}", sb, StringComparison.Ordinal);
        Assert.Contains($"rootino = {v.GetProperty("rootInode").GetUInt64()}", sb, StringComparison.Ordinal);
        var text = Xfswin.Ok("info", Tree);
        Assert.Contains("label:            cli-tree", text.Out, StringComparison.Ordinal);
        Assert.Contains("bigtime", text.Out, StringComparison.Ordinal);
    }

    [Fact]
    public void Ls_lists_the_same_names_as_the_kernel()
    {
        using var m = new LoopMount(Tree);
        foreach (string dir in new[] { "/dir", "/many", "/dir/sub" })
        {
            var ours = Xfswin.Ok("ls", Tree, dir).Out.Split('\n', StringSplitOptions.RemoveEmptyEntries);
            var kernel = Directory.EnumerateFileSystemEntries(m.Path + dir).Select(Path.GetFileName)
                .OrderBy(n => Encoding.UTF8.GetBytes(n!), ByteArrayOrder.Instance).ToArray();
            Assert.Equal(kernel, ours);
        }
    }

    [Fact]
    public void Ls_json_recursive_matches_lstat_of_the_kernel_mount()
    {
        using var m = new LoopMount(Tree);
        var r = Xfswin.Ok("ls", Tree, "/dir", "-R", "--json");
        using var doc = JsonDocument.Parse(r.Out);
        var entries = doc.RootElement.EnumerateArray().ToList();
        var kernelPaths = Sh.Check("find", m.Path + "/dir", "-mindepth", "1").Split('\n', StringSplitOptions.RemoveEmptyEntries)
            .Select(p => p[m.Path.Length..]).Order(StringComparer.Ordinal).ToList();
        Assert.Equal(kernelPaths, entries.Select(e => e.GetProperty("path").GetString()!).Order(StringComparer.Ordinal).ToList());
        foreach (var e in entries)
        {
            var s = Lstat(m.Path + e.GetProperty("path").GetString());
            Assert.Equal(s[0], e.GetProperty("inode").GetUInt64().ToString());
            Assert.Equal(Convert.ToString(long.Parse(s[1]), 8), e.GetProperty("mode").GetString());
            Assert.Equal(s[2], e.GetProperty("links").GetUInt32().ToString());
            Assert.Equal(s[3], e.GetProperty("uid").GetUInt32().ToString());
            Assert.Equal(s[4], e.GetProperty("gid").GetUInt32().ToString());
            Assert.Equal(s[5], e.GetProperty("size").GetInt64().ToString());
            var mt = e.GetProperty("mtime");
            Assert.Equal(long.Parse(s[7]), mt.GetProperty("seconds").GetInt64() * 1_000_000_000L + mt.GetProperty("nanoseconds").GetUInt32());
        }
    }

    [Fact]
    public void Ls_long_shows_mode_owner_and_symlink_target()
    {
        var r = Xfswin.Ok("ls", "-l", Tree);
        Assert.Contains("-rwsr-xr-x   2 65534   100     12582917 2020-01-02 03:04:05.999999999 +0000 big.bin", r.Out, StringComparison.Ordinal);
        Assert.Contains("rel-link -> dir/hello.txt", r.Out, StringComparison.Ordinal);
        Assert.Contains("drwxrwxrwt", r.Out, StringComparison.Ordinal);
        Assert.Contains("crw-r--r--   1     0     0         1, 3", r.Out, StringComparison.Ordinal);
        Assert.Contains("latin1-\\xe9-name", r.Out, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("/big.bin")]
    [InlineData("/rel-link")]
    [InlineData("/blockdev")]
    [InlineData("/dir/sub")]
    [InlineData("/empty")]
    public void Stat_json_matches_lstat_of_the_kernel_mount(string path)
    {
        using var m = new LoopMount(Tree);
        var s = Lstat(m.Path + path);
        using var doc = JsonDocument.Parse(Xfswin.Ok("stat", Tree, path, "--json").Out);
        var j = doc.RootElement;
        Assert.Equal(s[0], j.GetProperty("inode").GetUInt64().ToString());
        Assert.Equal(Convert.ToString(long.Parse(s[1]), 8), j.GetProperty("mode").GetString());
        Assert.Equal(s[2], j.GetProperty("links").GetUInt32().ToString());
        Assert.Equal(s[3], j.GetProperty("uid").GetUInt32().ToString());
        Assert.Equal(s[4], j.GetProperty("gid").GetUInt32().ToString());
        Assert.Equal(s[5], j.GetProperty("size").GetInt64().ToString());
        foreach (var (field, index) in new[] { ("atime", 6), ("mtime", 7), ("ctime", 8) })
        {
            var t = j.GetProperty(field);
            Assert.Equal(long.Parse(s[index]), t.GetProperty("seconds").GetInt64() * 1_000_000_000L + t.GetProperty("nanoseconds").GetUInt32());
        }
        if (path == "/blockdev")
        {
            Assert.Equal(s[9], j.GetProperty("deviceMajor").GetUInt32().ToString());
            Assert.Equal(s[10], j.GetProperty("deviceMinor").GetUInt32().ToString());
        }
    }

    [Fact]
    public void Stat_shows_xattrs_and_acls_like_getfacl()
    {
        using var m = new LoopMount(Tree);
        var r = Xfswin.Ok("stat", Tree, "/dir/sub/lines.txt");
        string getfacl = Sh.Check("getfacl", "-n", "-c", "-E", m.Path + "/dir/sub/lines.txt");
        string expected = string.Join(",", getfacl.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Trim()));
        Assert.Contains($"   ACL: {expected}", r.Out, StringComparison.Ordinal);
        Assert.Contains("Xattr: user.large (3000 bytes)", r.Out, StringComparison.Ordinal);
        Assert.Contains("Xattr: trusted.secret (6 bytes)", r.Out, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("/big.bin")]
    [InlineData("/sparse.bin")]
    [InlineData("/rel-link")]
    [InlineData("/dir/sub/lines.txt")]
    [InlineData("/empty")]
    public void Cat_writes_the_same_bytes_the_kernel_reads(string path)
    {
        using var m = new LoopMount(Tree);
        var r = Xfswin.Ok("cat", Tree, path);
        byte[] kernel = File.ReadAllBytes(m.Path + path);
        Assert.Equal(kernel.Length, r.Stdout.Length);
        Assert.True(kernel.AsSpan().SequenceEqual(r.Stdout), $"cat {path}: content differs from the kernel's");
        Assert.Equal("", r.Err);
    }

    [Fact]
    public void Cat_progress_goes_to_stderr_only_when_asked()
    {
        var quiet = Xfswin.Ok("cat", Tree, "/big.bin");
        Assert.Equal("", quiet.Err);
        var shown = Xfswin.Ok("cat", "--progress", Tree, "/big.bin");
        Assert.Contains("/big.bin: [####################] 12.0 MiB / 12.0 MiB (100%)", shown.Err, StringComparison.Ordinal);
        Assert.Contains("/s", shown.Err, StringComparison.Ordinal);
    }

    /// <summary>
    /// check's progress: none on a pipe unless asked; forced there, one plain line per finished phase; on a terminal
    /// the live Spectre.Console display on stderr. stdout holds the report alone in every case.
    /// </summary>
    [Fact]
    public void Check_progress_is_live_on_a_terminal_plain_when_forced_and_never_on_stdout()
    {
        var quiet = Xfswin.Ok("check", Tree);
        Assert.Equal("", quiet.Err);
        Assert.Contains("no problems found", quiet.Out, StringComparison.Ordinal);

        var forced = Xfswin.Ok("check", "--progress", Tree);
        // Tests running beside this one loop-mount the same image read-only at times, which check reports in a note of
        // its own: the lines compared are the rest.
        static int Lines(string output) => output.Split('\n').Count(l => !l.StartsWith("note: mounted read-only", StringComparison.Ordinal));
        Assert.Equal(Lines(quiet.Out), Lines(forced.Out));
        foreach (var phase in new[] { "allocation groups", "inodes", "block usage", "directories" })
            Assert.Contains($"check: {phase}: done\n", forced.Err.Replace("\r\n", "\n"), StringComparison.Ordinal);

        var error = new StringWriter();
        var output = new StringWriter();
        int code = Program.Run(["check", Tree], new CliConsole { Out = output, Error = error, StdoutStream = Stream.Null, StderrIsTerminal = true });
        Assert.Equal(0, code);
        Assert.Contains("no problems found", output.ToString(), StringComparison.Ordinal);
        string live = error.ToString();
        foreach (var phase in new[] { "check: allocation groups", "check: inodes", "check: directories" })
            Assert.Contains(phase, live, StringComparison.Ordinal);
        Assert.Contains("100%", live, StringComparison.Ordinal);
        Assert.DoesNotContain("check:", output.ToString(), StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(2, "ls", "TREE", "/no/such/dir")]
    [InlineData(2, "cat", "TREE", "/dir/missing.txt")]
    [InlineData(2, "ls", "/nonexistent/disk.img")]
    [InlineData(1, "cat", "TREE", "/dir")]
    [InlineData(1, "cat", "TREE", "/fifo")]
    [InlineData(1, "ls", "TREE", "/big.bin/x")]
    [InlineData(1, "frobnicate")]
    [InlineData(1, "ls")]
    [InlineData(1, "info", "TREE", "--no-such-option")]
    [InlineData(4, "cat", "MALICIOUS", "/d/loop1")]
    public void Errors_have_documented_exit_codes_and_messages(int code, params string[] args)
    {
        args = args.Select(a => a switch { "TREE" => Tree, "MALICIOUS" => FixtureImages.Malicious, _ => a }).ToArray();
        var r = Xfswin.Run(args);
        Assert.True(code == r.Code, $"expected exit {code}: {r}");
        Assert.NotEqual("", r.Err.Trim());
        Assert.DoesNotContain("   at ", r.Err, StringComparison.Ordinal); // no stack traces
    }

    [Fact]
    public void Not_xfs_source_exits_7()
    {
        using var dir = new TempDir();
        string img = Path.Combine(dir.Path, "zeros.img");
        Sh.Check("truncate", "-s", "4M", img);
        var r = Xfswin.Run("ls", img);
        Assert.Equal(ExitCodes.NotXfs, r.Code);
        Assert.Contains("not an XFS volume", r.Err, StringComparison.Ordinal);
    }

    [Fact]
    public void Corrupt_metadata_exits_3_with_the_structure_named()
    {
        using var dir = new TempDir();
        string img = FixtureImages.CopyToTemp(Tree, dir);
        using (var m = new LoopMount(Tree))
        {
            string ino = Lstat(m.Path + "/dir/sub")[0];
            Sh.Check("xfs_db", "-x", "-c", $"inode {ino}", "-c", "write -d core.magic 0", img);
        }
        var r = Xfswin.Run("ls", img, "/dir/sub");
        Assert.True(r.Code == ExitCodes.Corrupt, r.ToString());
        Assert.Contains("corrupt", r.Err, StringComparison.OrdinalIgnoreCase);
        Assert.Contains("xfs_repair", r.Err, StringComparison.Ordinal);
    }

    [Fact]
    public void Partitions_are_listed_and_opened_by_suffix_or_option()
    {
        string mbr = Path.Combine(FixtureImages.Disks, "mbr.img");
        var info = Xfswin.Ok("info", mbr, "--json");
        using var doc = JsonDocument.Parse(info.Out);
        var parts = doc.RootElement.GetProperty("partitionTable").GetProperty("partitions").EnumerateArray().ToList();
        Assert.Equal([2, 6], parts.Where(p => p.GetProperty("holdsXfs").GetBoolean()).Select(p => p.GetProperty("number").GetInt32()));
        Assert.Equal("mbr-p6", parts.Single(p => p.GetProperty("number").GetInt32() == 6).GetProperty("label").GetString());
        Assert.Contains("XFS volumes: " + mbr + "@2, " + mbr + "@6", Xfswin.Ok("info", mbr).Out, StringComparison.Ordinal);

        Assert.Equal("in partition mbr-p6\n", Encoding.UTF8.GetString(Xfswin.Ok("cat", mbr + "@6", "/where.txt").Stdout));
        Assert.Equal("in partition mbr-p2\n", Encoding.UTF8.GetString(Xfswin.Ok("cat", "--partition", "2", mbr, "/where.txt").Stdout));
        string gpt4k = Path.Combine(FixtureImages.Disks, "gpt4k.img");
        Assert.Equal("where.txt\n", Xfswin.Ok("ls", gpt4k + "@2").Out);
        Assert.Contains("label:            gpt4k-p2", Xfswin.Ok("info", gpt4k + "@2").Out, StringComparison.Ordinal);

        var whole = Xfswin.Run("ls", mbr);
        Assert.Equal(ExitCodes.NotXfs, whole.Code);
        Assert.Contains($"XFS is on {mbr}@2, {mbr}@6", whole.Err, StringComparison.Ordinal);
        var missing = Xfswin.Run("ls", mbr + "@9");
        Assert.Equal(ExitCodes.NotFound, missing.Code);
        Assert.Contains("partitions: 1, 2, 5, 6, 7", missing.Err, StringComparison.Ordinal);
        var container = Xfswin.Run("ls", "-p", "3", mbr);
        Assert.Equal(ExitCodes.Usage, container.Code);
        Assert.Contains("extended partition", container.Err, StringComparison.Ordinal);
        var swap = Xfswin.Run("ls", mbr + "@5");
        Assert.Equal(ExitCodes.NotXfs, swap.Code);
    }

    [Fact]
    public void Help_lists_every_command()
    {
        var r = Xfswin.Run("--help");
        Assert.Equal(0, r.Code);
        foreach (var c in Program.Commands) Assert.Contains(c.Name, r.Out, StringComparison.Ordinal);
    }

    private sealed class ByteArrayOrder : IComparer<byte[]>
    {
        public static readonly ByteArrayOrder Instance = new();
        public int Compare(byte[]? x, byte[]? y) => x.AsSpan().SequenceCompareTo(y);
    }
}

/// <summary>Raw-args rows of the command table (how mount and recover plug in).</summary>
public class CommandTableTests
{
    [Fact]
    public void Raw_commands_get_every_token_after_their_name_unchanged()
    {
        string[]? seen = null;
        var table = Program.Commands.Append(CliCommandEntry.Raw("fake", "a raw-args command", a => { seen = a; return 42; })).ToList();
        var output = new StringWriter();
        var console = new CliConsole { Out = output, Error = new StringWriter(), StdoutStream = new MemoryStream() };
        Assert.Equal(42, Program.Run(["fake", "--weird", "-x", "disk.img@2", "--", "z"], console, table));
        Assert.NotNull(seen);
        Assert.Equal(["--weird", "-x", "disk.img@2", "--", "z"], seen!);

        Assert.Equal(0, Program.Run(["--help"], console, table));
        Assert.Contains("fake", output.ToString(), StringComparison.Ordinal);
        Assert.Contains("a raw-args command", output.ToString(), StringComparison.Ordinal);
    }
}

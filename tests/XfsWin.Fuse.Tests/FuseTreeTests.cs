namespace XfsWin.Fuse.Tests;

/// <summary>One image, mounted twice: by the kernel's XFS (the oracle) and by xfswin through FUSE.</summary>
public sealed class TreeMounts : IDisposable
{
    public TreeMounts()
    {
        var image = TestImages.Tree;
        Kernel = new KernelMount(image);
        try
        {
            Fuse = new FuseMount(image);
        }
        catch
        {
            Kernel.Dispose();
            throw;
        }
    }

    internal KernelMount Kernel { get; }
    internal FuseMount Fuse { get; }

    public string K => Kernel.MountPoint;
    public string F => Fuse.MountPoint;

    public void Dispose()
    {
        Fuse.Dispose();
        Kernel.Dispose();
    }
}

/// <summary>
/// The tree seen through the kernel VFS over our FUSE host must be the tree the kernel's own XFS
/// shows: names, types, modes, owners, sizes, link counts, inode numbers, times to the
/// nanosecond, content, link targets, device numbers, xattrs, directory order. Real tools do the
/// looking.
/// </summary>
public sealed class FuseTreeTests(TreeMounts mounts) : IClassFixture<TreeMounts>
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    /// <summary>Runs the same script in both mounts (cd'ed into each) and returns both outputs.</summary>
    private (string Kernel, string Fuse) Both(string script) =>
        (Shell.Bash($"cd {Q(mounts.K)}\n{script}"), Shell.Bash($"cd {Q(mounts.F)}\n{script}"));

    private void AssertSameOutput(string script, int minimumLines)
    {
        var (kernel, fuse) = Both(script);
        var k = kernel.Split('\n');
        var f = fuse.Split('\n');
        Assert.True(k.Length >= minimumLines, $"the oracle printed only {k.Length} lines for:\n{script}\n{Cut(kernel, 3000)}");
        for (var i = 0; i < Math.Min(k.Length, f.Length); i++)
            Assert.True(k[i] == f[i], $"line {i + 1} differs for:\n{script}\nkernel: {Cut(k[i], 600)}\nfuse:   {Cut(f[i], 600)}");
        Assert.Equal(k.Length, f.Length);
    }

    private static string Cut(string s, int max) => s.Length <= max ? s : s[..max] + "...";

    [Fact]
    public void Manifest_of_the_fuse_mount_equals_the_kernels()
    {
        var kernel = ManifestComparison.Take(mounts.K);
        var fuse = ManifestComparison.Take(mounts.F);
        Assert.True(kernel.Entries.Count > 6000, $"the kernel manifest has only {kernel.Entries.Count} entries");
        var diffs = ManifestComparison.Differences(kernel, fuse);
        Assert.True(diffs.Count == 0, ManifestComparison.Format(diffs));
    }

    /// <summary>The same with readdirplus offered: listings then carry attributes from FuseHost's readdirplus path.</summary>
    [Fact]
    public void Manifest_with_readdirplus_equals_the_kernels()
    {
        using var plus = new FuseMount(TestImages.Tree, "-o", "readdirplus=yes");
        var diffs = ManifestComparison.Differences(ManifestComparison.Take(mounts.K), ManifestComparison.Take(plus.MountPoint));
        Assert.True(diffs.Count == 0, ManifestComparison.Format(diffs));
        AssertSameOutputIn(plus.MountPoint, "ls -l -a --time-style=full-iso dirs/block modes xattrs special | LC_ALL=C sort", minimumLines: 80);
    }

    private void AssertSameOutputIn(string fuseRoot, string script, int minimumLines)
    {
        var kernel = Shell.Bash($"cd {Q(mounts.K)}\n{script}");
        var fuse = Shell.Bash($"cd {Q(fuseRoot)}\n{script}");
        Assert.True(kernel.Split('\n').Length >= minimumLines, $"the oracle printed too little for:\n{script}\n{Cut(kernel, 3000)}");
        Assert.Equal(kernel, fuse);
    }

    [Fact]
    public void Every_inode_has_the_same_metadata_as_under_the_kernel()
    {
        // path, type, mode, uid, gid, size, nlink, inode number, 512-byte blocks, atime, mtime, ctime (ns), link target
        AssertSameOutput("find . -printf '%p|%y|%#m|%U|%G|%s|%n|%i|%b|%A@|%T@|%C@|%l\\n' | LC_ALL=C sort", minimumLines: 6400);
    }

    [Fact]
    public void Stat_reports_the_same_fields_including_device_numbers()
    {
        AssertSameOutput("find . -path ./dirs/node -prune -o -print0 | LC_ALL=C sort -z | xargs -0 stat --printf '%n|%F|%a|%u|%g|%s|%h|%i|%b|%t:%T|%x|%y|%z\\n'", minimumLines: 420);
    }

    [Fact]
    public void Birth_times_are_the_kernels_to_the_nanosecond()
    {
        // stat's %w asks statx(2) for STATX_BTIME: FUSE turns that into FUSE_STATX, which libfuse
        // 3.14 does not know and the host answers itself. The kernel's XFS reports di_crtime.
        const string script = "find . -path ./dirs/node -prune -o -print0 | LC_ALL=C sort -z | xargs -0 stat --printf '%n|%w|%W|%F|%s|%i|%h\\n'";
        AssertSameOutput(script, minimumLines: 420);
        var (kernel, _) = Both("stat --printf '%w' small.txt");
        Assert.True(kernel.Length > 20 && kernel != "-", $"the oracle reports no birth time: '{kernel}'");
    }

    [Fact]
    public void Directory_listings_come_in_the_same_order()
    {
        // ls -f: raw readdir order, which follows XFS directory offsets in both.
        AssertSameOutput("for d in . dirs/short dirs/block dirs/leaf dirs/node special xattrs modes; do echo \"== $d\"; ls -f -a \"$d\"; done", minimumLines: 6000);
    }

    [Fact]
    public void File_contents_hash_the_same()
    {
        AssertSameOutput("find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum", minimumLines: 6390);
    }

    [Fact]
    public void Reads_at_odd_offsets_and_sizes_match()
    {
        AssertSameOutput("""
            for f in random.bin sparse.bin fragmented.bin unwritten.bin; do
              for spec in "bs=1 skip=0 count=1" "bs=1000 skip=7 count=13" "bs=4095 skip=3 count=5" "bs=65537 skip=11 count=3" "bs=1M skip=1 count=1"; do
                echo "$f $spec $(dd if=$f $spec status=none | sha256sum)"
              done
            done
            echo "sparse middle: $(dd if=sparse.bin bs=1 skip=50000000 count=6 status=none)"
            echo "sparse end: $(tail -c 3 sparse.bin)"
            """, minimumLines: 22);
    }

    [Fact]
    public void Extended_attributes_match_getfattr()
    {
        AssertSameOutput("getfattr -R -d -m - -h -e base64 . 2>&1 | LC_ALL=C sort", minimumLines: 130);
    }

    [Fact]
    public void Acls_read_back_the_same()
    {
        AssertSameOutput("getfacl -n xattrs/acl xattrs/acl-dir", minimumLines: 10);
    }

    [Fact]
    public void Tar_of_the_tree_is_byte_identical()
    {
        AssertSameOutput("tar c --sort=name --format=posix --pax-option=delete=atime,delete=ctime --numeric-owner --acls --xattrs --xattrs-include='*' . 2>/dev/null | sha256sum; echo tar-exit=${PIPESTATUS[0]}", minimumLines: 2);
    }

    [Fact]
    public void Cp_a_from_the_fuse_mount_then_diff_r_against_the_kernel_finds_nothing()
    {
        var copy = Shell.MakeTempDirectory("xfswin-cp");
        try
        {
            Shell.Bash($"cp -a {Q(mounts.F)}/. {Q(copy)}/");
            var diff = Shell.Run("diff", ["-r", "--no-dereference", "-x", "special", mounts.K, copy]);
            Assert.True(diff.ExitCode == 0, "diff -r found differences:\n" + diff.Both);
            var direct = Shell.Run("diff", ["-r", "--no-dereference", "-x", "special", mounts.K, mounts.F]);
            Assert.True(direct.ExitCode == 0, "diff -r between the mounts found differences:\n" + direct.Both);
            // cp -a kept what it could: modes, owners, times, links, xattrs. Compare the copy's view too.
            var k = Shell.Bash($"cd {Q(mounts.K)} && find . -path ./special/socket -prune -o -printf '%p|%y|%#m|%U|%G|%T@|%l\\n' | LC_ALL=C sort");
            var c = Shell.Bash($"cd {Q(copy)} && find . -path ./special/socket -prune -o -printf '%p|%y|%#m|%U|%G|%T@|%l\\n' | LC_ALL=C sort");
            Assert.Equal(k, c);
        }
        finally
        {
            Shell.Run("rm", ["-rf", copy]);
        }
    }

    [Fact]
    public void Find_newer_and_du_agree()
    {
        AssertSameOutput("""
            find . -newer reference-time | LC_ALL=C sort
            echo ---
            du -s --block-size=1 .
            du -s --apparent-size --block-size=1 .
            du -a --block-size=1 xattrs modes dirs/short | LC_ALL=C sort
            """, minimumLines: 20);
    }

    [Fact]
    public void Statfs_reports_the_kernel_figures()
    {
        // block size, total, free and available blocks, total and free inodes, longest name
        AssertSameOutput("stat -f --printf '%S %b %f %a %c %d %l\\n' .", minimumLines: 1);
    }

    [Fact]
    public void Lookups_in_a_huge_directory_and_missing_names()
    {
        AssertSameOutput("""
            stat --printf '%i %s\n' dirs/node/n1 dirs/node/n3000 dirs/node/n6000
            for n in dirs/node/n6001 dirs/node/N1 'dirs/node/n1 ' nothing/here; do
              if stat "$n" >/dev/null 2>&1; then echo "$n exists"; else echo "$n: $(stat "$n" 2>&1 | sed 's/.*: //')"; fi
            done
            cat deep/a/b/c/d/e/f/g/h/leaf.txt 'Ünïcödé dïr/ñ.txt' 'héllo wörld.txt'
            readlink link-short link-long link-dangling link-dir
            ls link-dir/ | head -3
            """, minimumLines: 12);
    }

    [Fact]
    public void The_mount_is_read_only()
    {
        var r = Shell.Run("bash", ["-c", $"echo x > {Q(mounts.F)}/small.txt"]);
        Assert.NotEqual(0, r.ExitCode);
        Assert.Contains("Read-only file system", r.Stderr, StringComparison.Ordinal);
        r = Shell.Run("mkdir", [$"{mounts.F}/newdir"]);
        Assert.Contains("Read-only file system", r.Stderr, StringComparison.Ordinal);
        r = Shell.Run("setfattr", ["-n", "user.x", "-v", "1", $"{mounts.F}/small.txt"]);
        Assert.Contains("Read-only file system", r.Stderr, StringComparison.Ordinal);
    }

    [Fact]
    public void Mount_table_names_the_source_and_type()
    {
        var line = File.ReadLines("/proc/self/mountinfo").Single(l => l.Split(' ')[4] == mounts.F);
        Assert.Contains(" - fuse.xfswin ", line, StringComparison.Ordinal);
        Assert.Contains(TestImages.Tree, line, StringComparison.Ordinal);
        Assert.Contains(" ro,", line, StringComparison.Ordinal);
    }
}

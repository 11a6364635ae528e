using System.Diagnostics;
using XfsWin.TestSupport;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The FUSE host on arm64: xfswin published for linux-arm64 and run by qemu-user on this machine,
/// against libfuse3 for arm64 (Debian multiarch) and this machine's kernel FUSE, must serve the same
/// tree as the kernel's XFS: every field of struct stat passes through the arm64 layout on its way
/// to the kernel (NativeStatArm64). scripts/install-deps.sh installs qemu-user and the arm64 libraries.
/// </summary>
public sealed class Arm64Tests(Arm64Tests.Build build) : IClassFixture<Arm64Tests.Build>
{
    private static string Q(string s) => MountCommandProcessTests.Quote(s);

    /// <summary>Everything stat reports (but the device), content, link targets and xattrs; sorted.</summary>
    private const string Walk = """
        find . -printf '%p %y %m %s %n %U %G %i %b %T@ %C@ %A@ %l\n' | LC_ALL=C sort
        find . \( -type b -o -type c \) -print0 | LC_ALL=C sort -z | xargs -0 -r stat -c '%n %t %T'
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
        { getfattr -R -d -m - --absolute-names . 2>/dev/null || true; } | LC_ALL=C sort | sha256sum
        """;

    /// <summary>
    /// A self-contained linux-arm64 build of this tree's xfswin (made once for this class's tests, deleted after them),
    /// made from a copy of the sources: building the engine for one framework and another runtime in place would
    /// rewrite the object files the other test assemblies' builds use.
    /// </summary>
    public sealed class Build : IDisposable
    {
        private readonly Lazy<string> _published;
        private string? _work;

        public Build() => _published = new Lazy<string>(Publish);

        /// <summary>The published xfswin program.</summary>
        public string Program => _published.Value;

        private string Publish()
        {
            var work = _work = Shell.MakeTempDirectory("xfswin-arm64");
            var root = OracleImages.RepoRoot;
            Shell.Bash($"tar -C {Q(root)} --exclude=bin --exclude=obj -cf - src driver Directory.Build.props Directory.Packages.props global.json .editorconfig | tar -C {Q(work)} -xf -");
            // One target framework: the engine also builds for net8.0, whose arm64 packs are not needed here.
            var r = Shell.Run("dotnet", ["publish", Path.Combine(work, "src", "XfsWin.Cli", "XfsWin.Cli.csproj"), "-c", "Release",
                "-r", "linux-arm64", "--self-contained", "true", "-p:TargetFrameworks=net10.0", "-o", Path.Combine(work, "app")],
                // Only tells a hang from a slow machine: a CI run compiles this beside every other test assembly on 2 cores
                // (over 5 minutes seen under that load).
                timeout: TimeSpan.FromMinutes(30));
            Assert.True(r.ExitCode == 0, "publishing xfswin for linux-arm64 failed:\n" + r.Both);
            return Path.Combine(work, "app", "xfswin");
        }

        /// <summary>The copy of the sources and the build (some hundred megabytes) go with the tests that used them.</summary>
        public void Dispose()
        {
            if (_work is not null && Directory.Exists(_work)) Directory.Delete(_work, recursive: true);
        }
    }

    [Fact]
    public void The_arm64_build_under_qemu_serves_the_same_tree_as_the_kernel()
    {
        Assert.True(File.Exists("/usr/lib/aarch64-linux-gnu/libfuse3.so.3"), "libfuse3 for arm64 is missing: run scripts/install-deps.sh");
        var xfswin = build.Program;
        var image = TestImages.Tree;
        string expected;
        using (var k = new KernelMount(image))
            expected = Shell.Bash($"cd {Q(k.MountPoint)}\n{Walk}");
        Assert.True(expected.Length > 100000, "the walk read little");

        var mountPoint = Shell.MakeTempDirectory("xfswin-arm64-mnt");
        var psi = new ProcessStartInfo("qemu-aarch64") { RedirectStandardError = true, RedirectStandardOutput = true, UseShellExecute = false };
        foreach (var a in new[] { xfswin, "mount", "-f", image, mountPoint })
            psi.ArgumentList.Add(a);
        // qemu-user does not see code the JIT writes through a second mapping of the same memory
        // (.NET's W^X scheme) and runs stale translations: one mapping, as on real arm64 hardware.
        psi.Environment["DOTNET_EnableWriteXorExecute"] = "0";
        using var server = Process.Start(psi)!;
        var stderr = new System.Text.StringBuilder();
        server.ErrorDataReceived += (_, e) => { lock (stderr) stderr.AppendLine(e.Data); };
        server.BeginErrorReadLine();
        server.BeginOutputReadLine();
        try
        {
            var sw = Stopwatch.StartNew();
            while (!Shell.IsMounted(mountPoint, "fuse.xfswin"))
            {
                Assert.False(server.HasExited, $"the arm64 server ended ({(server.HasExited ? server.ExitCode : 0)}): {stderr}");
                // The JIT under qemu-user on a loaded machine is slow; the limit only tells a hang.
                Assert.True(sw.Elapsed < TimeSpan.FromMinutes(10), $"the arm64 server did not mount within 10 minutes: {stderr}");
                Thread.Sleep(100);
            }
            var actual = Shell.Bash($"cd {Q(mountPoint)}\n{Walk}");
            Assert.True(expected == actual, $"the arm64 build served another tree than the kernel's XFS; server: {stderr}");
            Assert.DoesNotContain("Exception", stderr.ToString(), StringComparison.Ordinal);
        }
        finally
        {
            Shell.UnmountFuse(mountPoint);
            if (!server.WaitForExit(TimeSpan.FromSeconds(30)))
                server.Kill();
            Directory.Delete(mountPoint);
        }
        Assert.Equal(0, server.ExitCode);
    }

    /// <summary>
    /// Background mode starts the program again. Where the kernel cannot run an arm64 program by
    /// itself (no binfmt handler for qemu), that start fails: a clear message naming the way out,
    /// no crash. Where it can, the background mount works.
    /// </summary>
    [Fact]
    public void Background_mode_under_qemu_mounts_or_says_to_mount_in_the_foreground()
    {
        var xfswin = build.Program;
        var mountPoint = Shell.MakeTempDirectory("xfswin-arm64-bg");
        try
        {
            var r = Shell.Run("qemu-aarch64", [xfswin, "mount", TestImages.Tree, mountPoint],
                environment: new Dictionary<string, string> { ["DOTNET_EnableWriteXorExecute"] = "0" }, timeout: TimeSpan.FromMinutes(10));
            if (File.Exists("/proc/sys/fs/binfmt_misc/qemu-aarch64"))
            {
                Assert.True(r.ExitCode == 0, r.Both);
                Assert.True(Shell.IsMounted(mountPoint, "fuse.xfswin"), r.Both);
                Assert.Equal("hello, xfs\n", File.ReadAllText(Path.Combine(mountPoint, "small.txt")));
            }
            else
            {
                Assert.Equal(1, r.ExitCode);
                Assert.Contains("cannot start the background server", r.Stderr, StringComparison.Ordinal);
                Assert.Contains("mount in the foreground with -f", r.Stderr, StringComparison.Ordinal);
                Assert.DoesNotContain("Unhandled exception", r.Both, StringComparison.Ordinal);
                Assert.False(Shell.IsMounted(mountPoint, "fuse.xfswin"));
            }
        }
        finally
        {
            Shell.UnmountFuse(mountPoint);
            Directory.Delete(mountPoint);
        }
    }
}

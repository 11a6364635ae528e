using System.Reflection;
using System.Runtime.InteropServices;
using System.Text;
using XfsWin.Fuse.Interop;

namespace XfsWin.Fuse.Tests;

/// <summary>
/// The oracle for the binding's structure layouts: a C program compiled by gcc against the
/// installed libfuse3 headers prints sizeof/offsetof of every field the C# declarations name,
/// and the values of the constants; the test compares them one by one.
/// </summary>
public sealed class NativeLayoutTests
{
    // C# declaration -> C type. Every public instance field of the C# struct is looked up in C by
    // its name (st_atim_sec stands for st_atim.tv_sec).
    private static readonly (Type Managed, string Native)[] Structs =
    [
        (typeof(NativeStat), "struct stat"),
        (typeof(NativeStatvfs), "struct statvfs"),
        (typeof(FuseEntryParam), "struct fuse_entry_param"),
        (typeof(FuseFileInfo), "struct fuse_file_info"),
        (typeof(FuseConnInfo), "struct fuse_conn_info"),
        (typeof(FuseArgs), "struct fuse_args"),
        (typeof(FuseContext), "struct fuse_ctx"),
        (typeof(FuseForgetData), "struct fuse_forget_data"),
        (typeof(FuseLowLevelOps), "struct fuse_lowlevel_ops"),
        (typeof(FuseMemBuf), "struct fuse_buf"),
        (typeof(FuseCustomIo), "struct fuse_custom_io"),
    ];

    // On arm64 struct stat is shorter (and so fuse_entry_param); every other structure is the same
    // declaration on both, checked against the aarch64 cross compiler too.
    private static readonly (Type Managed, string Native)[] Arm64Structs =
    [
        .. Structs.Select(s => s.Managed == typeof(NativeStat) ? (typeof(NativeStatArm64), s.Native)
            : s.Managed == typeof(FuseEntryParam) ? (typeof(FuseEntryParamArm64), s.Native) : s),
    ];

    // The io_uring transport's structures, checked against the kernel's UAPI headers (a separate
    // program: <linux/fuse.h> does not mix with libfuse's headers).
    private static readonly (Type Managed, string Native)[] KernelStructs =
    [
        (typeof(IoSqringOffsets), "struct io_sqring_offsets"),
        (typeof(IoCqringOffsets), "struct io_cqring_offsets"),
        (typeof(IoUringParams), "struct io_uring_params"),
        (typeof(IoUringSqe), "struct io_uring_sqe"),
        (typeof(IoUringCqe), "struct io_uring_cqe"),
        (typeof(IoVec), "struct iovec"),
        (typeof(FuseInHeader), "struct fuse_in_header"),
        (typeof(FuseOutHeader), "struct fuse_out_header"),
        (typeof(FuseInitIn), "struct fuse_init_in"),
        (typeof(FuseInitOut), "struct fuse_init_out"),
    ];

    // FUSE over io_uring (protocol 7.42, Linux 6.14) is newer than the kernel headers many systems
    // install (this one's are 7.38). These structures are checked against the headers when they
    // have them, and always against the values of the kernel's include/uapi/linux/fuse.h, pinned here.
    private static readonly (Type Managed, string Native)[] UringStructs =
    [
        (typeof(FuseUringEntInOut), "struct fuse_uring_ent_in_out"),
        (typeof(FuseUringReqHeader), "struct fuse_uring_req_header"),
        (typeof(FuseUringCmdReq), "struct fuse_uring_cmd_req"),
    ];

    private static readonly Dictionary<string, long> PinnedUringLayout = new()
    {
        ["FuseUringEntInOut.sizeof"] = 32,
        ["FuseUringEntInOut.flags"] = 0,
        ["FuseUringEntInOut.commit_id"] = 8,
        ["FuseUringEntInOut.payload_sz"] = 16,
        ["FuseUringEntInOut.padding"] = 20,
        ["FuseUringEntInOut.reserved"] = 24,
        ["FuseUringReqHeader.sizeof"] = 288,   // 128 (FUSE_URING_IN_OUT_HEADER_SZ) + 128 (FUSE_URING_OP_IN_OUT_SZ) + 32
        ["FuseUringReqHeader.in_out"] = 0,
        ["FuseUringReqHeader.op_in"] = 128,
        ["FuseUringReqHeader.ring_ent_in_out"] = 256,
        ["FuseUringCmdReq.sizeof"] = 24,
        ["FuseUringCmdReq.flags"] = 0,
        ["FuseUringCmdReq.commit_id"] = 8,
        ["FuseUringCmdReq.qid"] = 16,
    };

    // FUSE_STATX (protocol 7.39) is newer than this machine's headers too: pinned from the kernel's
    // include/uapi/linux/fuse.h (fuse_statx is bit for bit struct statx).
    private static readonly Dictionary<string, long> PinnedStatxLayout = new()
    {
        ["FuseSxTime.sizeof"] = 16, ["FuseSxTime.tv_sec"] = 0, ["FuseSxTime.tv_nsec"] = 8, ["FuseSxTime.reserved"] = 12,
        ["FuseStatxIn.sizeof"] = 24, ["FuseStatxIn.getattr_flags"] = 0, ["FuseStatxIn.reserved"] = 4, ["FuseStatxIn.fh"] = 8,
        ["FuseStatxIn.sx_flags"] = 16, ["FuseStatxIn.sx_mask"] = 20,
        ["FuseStatx.sizeof"] = 256, ["FuseStatx.mask"] = 0, ["FuseStatx.blksize"] = 4, ["FuseStatx.attributes"] = 8,
        ["FuseStatx.nlink"] = 16, ["FuseStatx.uid"] = 20, ["FuseStatx.gid"] = 24, ["FuseStatx.mode"] = 28, ["FuseStatx.ino"] = 32,
        ["FuseStatx.size"] = 40, ["FuseStatx.blocks"] = 48, ["FuseStatx.attributes_mask"] = 56, ["FuseStatx.atime"] = 64,
        ["FuseStatx.btime"] = 80, ["FuseStatx.ctime"] = 96, ["FuseStatx.mtime"] = 112, ["FuseStatx.rdev_major"] = 128,
        ["FuseStatx.rdev_minor"] = 132, ["FuseStatx.dev_major"] = 136, ["FuseStatx.dev_minor"] = 140,
        ["FuseStatxOut.sizeof"] = 288, ["FuseStatxOut.attr_valid"] = 0, ["FuseStatxOut.attr_valid_nsec"] = 8,
        ["FuseStatxOut.flags"] = 12, ["FuseStatxOut.stat"] = 32,
    };

    [Fact]
    public void Fuse_statx_structures_match_the_kernels_definitions()
    {
        foreach (var managed in new[] { typeof(FuseSxTime), typeof(FuseStatxIn), typeof(FuseStatx), typeof(FuseStatxOut) })
            AssertLayout(managed, PinnedStatxLayout, "include/uapi/linux/fuse.h");
        // struct statx, as glibc declares it, is the same layout (the kernel copies one into the other).
        var glibc = CompileC("""
            #define _GNU_SOURCE
            #include <stdio.h>
            #include <stddef.h>
            #include <sys/stat.h>
            int main(void) {
              printf("sizeof %zu\nbtime %zu\nmtime %zu\nrdev_major %zu\nmode %zu\n", sizeof(struct statx),
                offsetof(struct statx, stx_btime), offsetof(struct statx, stx_mtime), offsetof(struct statx, stx_rdev_major),
                offsetof(struct statx, stx_mode));
              return 0;
            }
            """, []);
        Assert.Equal(glibc["sizeof"], Marshal.SizeOf<FuseStatx>());
        Assert.Equal(glibc["btime"], (long)Marshal.OffsetOf<FuseStatx>(nameof(FuseStatx.btime)));
        Assert.Equal(glibc["mtime"], (long)Marshal.OffsetOf<FuseStatx>(nameof(FuseStatx.mtime)));
        Assert.Equal(glibc["rdev_major"], (long)Marshal.OffsetOf<FuseStatx>(nameof(FuseStatx.rdev_major)));
        Assert.Equal(glibc["mode"], (long)Marshal.OffsetOf<FuseStatx>(nameof(FuseStatx.mode)));
    }

    // C# constant -> C expression, for the kernel-header program.
    private static readonly (string Name, long Value, string C)[] KernelConstants =
    [
        .. typeof(IoUringConstants).GetFields(BindingFlags.Public | BindingFlags.Static).Where(f => f.IsLiteral)
            .Select(f => (f.Name, Convert.ToInt64(f.GetRawConstantValue(), System.Globalization.CultureInfo.InvariantCulture), f.Name)),
        ("FUSE_INIT", FuseUringConstants.FUSE_INIT, "FUSE_INIT"),
        ("FUSE_FORGET", FuseUringConstants.FUSE_FORGET, "FUSE_FORGET"),
        ("FUSE_READ", FuseUringConstants.FUSE_READ, "FUSE_READ"),
        ("FUSE_WRITE", FuseUringConstants.FUSE_WRITE, "FUSE_WRITE"),
        ("FUSE_INTERRUPT", FuseUringConstants.FUSE_INTERRUPT, "FUSE_INTERRUPT"),
        ("FUSE_BATCH_FORGET", FuseUringConstants.FUSE_BATCH_FORGET, "FUSE_BATCH_FORGET"),
        ("FUSE_INIT_EXT", FuseUringConstants.FUSE_INIT_EXT, "FUSE_INIT_EXT"),
        ("FUSE_MAX_PAGES", FuseUringConstants.FUSE_MAX_PAGES, "FUSE_MAX_PAGES"),
        ("FUSE_HANDLE_KILLPRIV_V2", FuseUringConstants.FUSE_HANDLE_KILLPRIV_V2, "FUSE_HANDLE_KILLPRIV_V2"),
        ("FUSE_WRITE_KILL_SUIDGID", FuseUringTransport.FuseWriteKillSuidgid, "FUSE_WRITE_KILL_SUIDGID"),
        ("FATTR_KILL_SUIDGID", FuseConstants.FUSE_SET_ATTR_KILL_SUID, "FATTR_KILL_SUIDGID"),
        ("FUSE_URING_IN_OUT_HEADER_SZ", FuseUringReqHeader.InOutSize, "FUSE_URING_IN_OUT_HEADER_SZ"),
        ("FUSE_URING_OP_IN_OUT_SZ", FuseUringReqHeader.OpInSize, "FUSE_URING_OP_IN_OUT_SZ"),
        ("FUSE_OVER_IO_URING", (long)FuseUringConstants.FUSE_OVER_IO_URING_FLAGS2 << 32, "FUSE_OVER_IO_URING"),
        ("FUSE_IO_URING_CMD_REGISTER", FuseUringConstants.FUSE_IO_URING_CMD_REGISTER, "FUSE_IO_URING_CMD_REGISTER"),
        ("FUSE_IO_URING_CMD_COMMIT_AND_FETCH", FuseUringConstants.FUSE_IO_URING_CMD_COMMIT_AND_FETCH, "FUSE_IO_URING_CMD_COMMIT_AND_FETCH"),
    ];

    // Constants that only headers of protocol 7.42 and later define (checked against the values above otherwise).
    private static readonly HashSet<string> UringOnlyConstants =
    [
        "FUSE_URING_IN_OUT_HEADER_SZ", "FUSE_URING_OP_IN_OUT_SZ", "FUSE_OVER_IO_URING",
        "FUSE_IO_URING_CMD_REGISTER", "FUSE_IO_URING_CMD_COMMIT_AND_FETCH",
    ];

    private static readonly Lazy<Dictionary<string, long>> Native = new(() => CompileAndRun(LayoutTarget.Host, Structs));
    private static readonly Lazy<Dictionary<string, long>> Kernel = new(() => CompileAndRunKernelProbe(LayoutTarget.Host));
    private static readonly Lazy<Dictionary<string, long>> NativeArm64 = new(() => CompileAndRun(LayoutTarget.Arm64, Arm64Structs));
    private static readonly Lazy<Dictionary<string, long>> KernelArm64 = new(() => CompileAndRunKernelProbe(LayoutTarget.Arm64));

    private static string CField(string managedField) => managedField switch
    {
        "st_atim_sec" => "st_atim.tv_sec",
        "st_atim_nsec" => "st_atim.tv_nsec",
        "st_mtim_sec" => "st_mtim.tv_sec",
        "st_mtim_nsec" => "st_mtim.tv_nsec",
        "st_ctim_sec" => "st_ctim.tv_sec",
        "st_ctim_nsec" => "st_ctim.tv_nsec",
        _ => managedField,
    };

    private static IEnumerable<FieldInfo> LayoutFields(Type t) =>
        t.GetFields(BindingFlags.Public | BindingFlags.Instance).Where(f => f.Name != "bits"); // bit-field word: checked bit by bit

    private static Dictionary<string, long> CompileAndRun(LayoutTarget target, (Type Managed, string Native)[] structs)
    {
        var c = new StringBuilder();
        c.AppendLine("#define FUSE_USE_VERSION 312");
        c.AppendLine("#define _GNU_SOURCE\n#include <fuse_lowlevel.h>");
        c.AppendLine("#include <sys/stat.h>\n#include <sys/statvfs.h>\n#include <stddef.h>\n#include <stdio.h>\n#include <string.h>");
        c.AppendLine("#include <fcntl.h>\n#include <linux/falloc.h>\n#include <sys/xattr.h>\n#include <linux/fs.h>");
        c.AppendLine("int main(void) {");
        foreach (var (managed, native) in structs)
        {
            c.AppendLine($"  printf(\"{managed.Name}.sizeof %zu\\n\", sizeof({native}));");
            foreach (var f in LayoutFields(managed))
                c.AppendLine($"  printf(\"{managed.Name}.{f.Name} %zu\\n\", offsetof({native}, {CField(f.Name)}));");
        }
        // The one-bit flags of fuse_file_info: set each in C and print the word holding them.
        foreach (var bit in new[] { "writepage", "direct_io", "keep_cache", "flush", "nonseekable", "flock_release", "cache_readdir", "noflush" })
        {
            c.AppendLine($"  {{ struct fuse_file_info fi; unsigned w; memset(&fi, 0, sizeof fi); fi.{bit} = 1;");
            c.AppendLine($"    memcpy(&w, (char*)&fi + {FuseFileInfo.BitsOffset}, 4); printf(\"bit.{bit} %u\\n\", w); }}");
        }
        foreach (var k in typeof(FuseConstants).GetFields(BindingFlags.Public | BindingFlags.Static).Where(f => f.IsLiteral))
            c.AppendLine($"  printf(\"const.{k.Name} %llu\\n\", (unsigned long long)({k.Name}));");
        c.AppendLine("  return 0;\n}");

        var cflags = Shell.Run("pkg-config", ["--cflags", "fuse3"]);
        Assert.True(cflags.ExitCode == 0, "pkg-config cannot find fuse3: install libfuse3-dev (apt-get install libfuse3-dev). " + cflags.Both);
        return CompileC(c.ToString(), cflags.Stdout.Split(' ', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries), target);
    }

    /// <summary>The same for the kernel's UAPI headers: io_uring, the FUSE wire format, and the libc constants the transport uses.</summary>
    private static Dictionary<string, long> CompileAndRunKernelProbe(LayoutTarget target)
    {
        var c = new StringBuilder();
        c.AppendLine("#define _GNU_SOURCE\n#include <linux/fuse.h>\n#include <linux/io_uring.h>\n#include <sys/uio.h>\n#include <sys/mman.h>\n#include <sys/syscall.h>");
        c.AppendLine("#include <sched.h>\n#include <fcntl.h>");
        c.AppendLine("#include <sys/eventfd.h>\n#include <poll.h>\n#include <errno.h>\n#include <stddef.h>\n#include <stdio.h>");
        c.AppendLine("int main(void) {");
        void Print(Type managed, string native)
        {
            c.AppendLine($"  printf(\"{managed.Name}.sizeof %zu\\n\", sizeof({native}));");
            foreach (var f in LayoutFields(managed))
                c.AppendLine($"  printf(\"{managed.Name}.{f.Name} %zu\\n\", offsetof({native}, {f.Name}));");
        }
        foreach (var (managed, native) in KernelStructsOf(target))
            Print(managed, native);
        foreach (var (name, _, expr) in KernelConstantsOf(target).Where(k => !UringOnlyConstants.Contains(k.Name)))
            c.AppendLine($"  printf(\"const.{name} %lld\\n\", (long long)({expr}));");
        c.AppendLine(target == LayoutTarget.Host ? "#ifdef FUSE_URING_IN_OUT_HEADER_SZ\n  printf(\"has_uring 1\\n\");" : "#if 0");
        foreach (var (managed, native) in UringStructs)
            Print(managed, native);
        foreach (var (name, _, expr) in KernelConstants.Where(k => UringOnlyConstants.Contains(k.Name)))
            c.AppendLine($"  printf(\"const.{name} %lld\\n\", (long long)({expr}));");
        c.AppendLine("#else\n  printf(\"has_uring 0\\n\");\n#endif");
        c.AppendLine("  return 0;\n}");
        return CompileC(c.ToString(), [], target);
    }

    // The FUSE wire format and io_uring are declared with fixed-width types, the same on every
    // architecture (and the cross compiler's kernel headers are older than the machine's): on arm64
    // the probe checks what the C library and the architecture decide.
    private static readonly HashSet<Type> LibcKernelStructs = [typeof(IoVec)];

    private static IEnumerable<(Type Managed, string Native)> KernelStructsOf(LayoutTarget target) =>
        target == LayoutTarget.Host ? KernelStructs : KernelStructs.Where(s => LibcKernelStructs.Contains(s.Managed));

    private static IEnumerable<(string Name, long Value, string C)> KernelConstantsOf(LayoutTarget target) =>
        KernelConstants.Where(k => target == LayoutTarget.Host ||
            !(k.Name.StartsWith("IORING_", StringComparison.Ordinal) || k.Name.StartsWith("FUSE_", StringComparison.Ordinal) ||
              k.Name.StartsWith("__NR_io_uring", StringComparison.Ordinal)));

    /// <summary>
    /// Where a probe is compiled and run: this machine, or arm64 (the aarch64 cross compiler with its
    /// own glibc and kernel headers, the program run by qemu-user; scripts/install-deps.sh installs both).
    /// </summary>
    internal sealed record LayoutTarget(string Compiler, string[] Runner, Architecture Architecture)
    {
        public static readonly LayoutTarget Host = new("gcc", [], RuntimeInformation.ProcessArchitecture);
        public static readonly LayoutTarget Arm64 = new("aarch64-linux-gnu-gcc", ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"], Architecture.Arm64);
    }

    private static Dictionary<string, long> CompileC(string source, IEnumerable<string> cflags, LayoutTarget? target = null)
    {
        target ??= LayoutTarget.Host;
        var dir = Shell.MakeTempDirectory("xfswin-layout");
        try
        {
            File.WriteAllText(Path.Combine(dir, "layout.c"), source);
            var args = cflags.ToList();
            args.AddRange(["-Wall", "-Werror", "-o", Path.Combine(dir, "layout"), Path.Combine(dir, "layout.c")]);
            var cc = Shell.Run(target.Compiler, args);
            Assert.True(cc.ExitCode == 0, $"{target.Compiler} failed on the layout probe (scripts/install-deps.sh installs it):\n" + cc.Both + "\n" + source);
            var run = target.Runner.Length == 0
                ? Shell.Run(Path.Combine(dir, "layout"), [])
                : Shell.Run(target.Runner[0], [.. target.Runner[1..], Path.Combine(dir, "layout")]);
            Assert.True(run.ExitCode == 0, $"the layout probe failed ({string.Join(' ', target.Runner)}): {run.Both}");
            return run.Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries)
                .Select(l => l.Split(' '))
                .ToDictionary(p => p[0], p => long.Parse(p[1], System.Globalization.CultureInfo.InvariantCulture));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    private static TheoryData<string> NamesOf((Type Managed, string Native)[] structs) => [.. structs.Select(s => s.Managed.Name)];

    public static TheoryData<string> StructNames() => NamesOf(Structs);

    [Theory]
    [MemberData(nameof(StructNames))]
    public void Struct_size_and_every_field_offset_match_gcc(string name)
    {
        var managed = Structs.Single(s => s.Managed.Name == name).Managed;
        AssertLayout(managed, Native.Value, "gcc");
    }

    public static TheoryData<string> KernelStructNames() => NamesOf(KernelStructs);

    [Theory]
    [MemberData(nameof(KernelStructNames))]
    public void Kernel_struct_size_and_every_field_offset_match_gcc(string name)
    {
        var managed = KernelStructs.Single(s => s.Managed.Name == name).Managed;
        AssertLayout(managed, Kernel.Value, "gcc (kernel headers)");
    }

    [Fact]
    public void Io_uring_and_fuse_wire_constants_match_the_kernel_headers()
    {
        var native = Kernel.Value;
        foreach (var (name, value, _) in KernelConstants.Where(k => !UringOnlyConstants.Contains(k.Name) || native["has_uring"] == 1))
            Assert.True(value == native[$"const.{name}"], $"{name}: C# {value}, header {native[$"const.{name}"]}");
    }

    /// <summary>
    /// FUSE's io_uring structures: against the installed headers when they are new enough, and in
    /// any case against the kernel's own definitions (include/uapi/linux/fuse.h, 7.42 and later).
    /// </summary>
    [Fact]
    public void Fuse_uring_structures_match_the_kernels_definitions()
    {
        foreach (var (managed, _) in UringStructs)
        {
            AssertLayout(managed, PinnedUringLayout, "include/uapi/linux/fuse.h");
            if (Kernel.Value["has_uring"] == 1)
                AssertLayout(managed, Kernel.Value, "gcc (kernel headers)");
        }
        Assert.Equal(FuseUringReqHeader.Size, FuseUringReqHeader.InOutSize + FuseUringReqHeader.OpInSize + FuseUringEntInOut.Size);
        Assert.Equal(1UL << 41, (ulong)FuseUringConstants.FUSE_OVER_IO_URING_FLAGS2 << 32);
        Assert.Equal(1u, FuseUringConstants.FUSE_IO_URING_CMD_REGISTER);
        Assert.Equal(2u, FuseUringConstants.FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
        // The command must fit the 80-byte command area of a 128-byte submission entry.
        Assert.True(FuseUringCmdReq.Size <= IoUringSqe.CmdSize);
        Assert.Equal(IoUringSqe.Size128, IoUringSqe.CmdOffset + IoUringSqe.CmdSize);
    }

    private static void AssertLayout(Type managed, Dictionary<string, long> native, string source)
    {
        var name = managed.Name;
        Assert.True(native[$"{name}.sizeof"] == Marshal.SizeOf(managed), $"{name}: C# size {Marshal.SizeOf(managed)}, {source} says {native[$"{name}.sizeof"]}");
        var fields = LayoutFields(managed).ToList();
        Assert.NotEmpty(fields);
        foreach (var f in fields)
            Assert.True(native[$"{name}.{f.Name}"] == (long)Marshal.OffsetOf(managed, f.Name),
                $"{name}.{f.Name}: C# offset {Marshal.OffsetOf(managed, f.Name)}, {source} says {native[$"{name}.{f.Name}"]}");
    }

    [Fact]
    public void Declared_size_constants_match_the_structs()
    {
        Assert.Equal(NativeStat.Size, Marshal.SizeOf<NativeStat>());
        Assert.Equal(NativeStatvfs.Size, Marshal.SizeOf<NativeStatvfs>());
        Assert.Equal(FuseEntryParam.Size, Marshal.SizeOf<FuseEntryParam>());
        Assert.Equal(FuseFileInfo.Size, Marshal.SizeOf<FuseFileInfo>());
        Assert.Equal(FuseConnInfo.Size, Marshal.SizeOf<FuseConnInfo>());
        Assert.Equal(FuseLowLevelOps.Size, Marshal.SizeOf<FuseLowLevelOps>());
        Assert.Equal(FuseLowLevelOps.PointerCount, typeof(FuseLowLevelOps).GetFields(BindingFlags.Public | BindingFlags.Instance).Length);
        Assert.Equal(FuseMemBuf.Size, Marshal.SizeOf<FuseMemBuf>());
        Assert.Equal(FuseCustomIo.Size, Marshal.SizeOf<FuseCustomIo>());
        Assert.Equal(IoUringParams.Size, Marshal.SizeOf<IoUringParams>());
        Assert.Equal(IoUringSqe.Size, Marshal.SizeOf<IoUringSqe>());
        Assert.Equal(IoUringCqe.Size, Marshal.SizeOf<IoUringCqe>());
        Assert.Equal(FuseInHeader.Size, Marshal.SizeOf<FuseInHeader>());
        Assert.Equal(FuseOutHeader.Size, Marshal.SizeOf<FuseOutHeader>());
        Assert.Equal(FuseInitIn.Size, Marshal.SizeOf<FuseInitIn>());
        Assert.Equal(FuseInitOut.Size, Marshal.SizeOf<FuseInitOut>());
        Assert.Equal(FuseUringReqHeader.Size, Marshal.SizeOf<FuseUringReqHeader>());
        Assert.Equal(FuseUringEntInOut.Size, Marshal.SizeOf<FuseUringEntInOut>());
        Assert.Equal(FuseUringCmdReq.Size, Marshal.SizeOf<FuseUringCmdReq>());
    }

    [Fact]
    public void File_info_flag_bits_match_gcc_bitfield_allocation() => AssertFileInfoBits(Native.Value);

    private static void AssertFileInfoBits(Dictionary<string, long> native)
    {
        Assert.Equal(FuseFileInfo.WritePageBit, (uint)native["bit.writepage"]);
        Assert.Equal(FuseFileInfo.DirectIoBit, (uint)native["bit.direct_io"]);
        Assert.Equal(FuseFileInfo.KeepCacheBit, (uint)native["bit.keep_cache"]);
        Assert.Equal(FuseFileInfo.FlushBit, (uint)native["bit.flush"]);
        Assert.Equal(FuseFileInfo.NonSeekableBit, (uint)native["bit.nonseekable"]);
        Assert.Equal(FuseFileInfo.FlockReleaseBit, (uint)native["bit.flock_release"]);
        Assert.Equal(FuseFileInfo.CacheReaddirBit, (uint)native["bit.cache_readdir"]);
        Assert.Equal(FuseFileInfo.NoFlushBit, (uint)native["bit.noflush"]);
    }

    [Fact]
    public void Constants_match_the_headers() => AssertFuseConstants(Native.Value);

    private static void AssertFuseConstants(Dictionary<string, long> native)
    {
        var constants = typeof(FuseConstants).GetFields(BindingFlags.Public | BindingFlags.Static).Where(f => f.IsLiteral).ToList();
        Assert.NotEmpty(constants);
        foreach (var k in constants)
            Assert.True(Convert.ToUInt64(k.GetRawConstantValue(), System.Globalization.CultureInfo.InvariantCulture) == (ulong)native[$"const.{k.Name}"],
                $"{k.Name}: C# {k.GetRawConstantValue()}, header {native[$"const.{k.Name}"]}");
    }

    [Theory]
    [InlineData("a")]
    [InlineData("abcdefgh")]
    [InlineData("a name of 21 bytes!!!")]
    public unsafe void Directory_entry_sizes_match_what_libfuse_packs(string name)
    {
        // libfuse answers the size an entry needs when given no buffer: the host's own arithmetic
        // (used to stop before the reply buffer overflows) must agree with it.
        var z = Encoding.UTF8.GetBytes(name + "\0");
        var length = z.Length - 1;
        fixed (byte* pz = z)
        {
            Assert.Equal((nuint)FuseHost.Align8(FuseHost.DirentPlusNameOffset + length),
                FuseNative.fuse_add_direntry_plus(0, null, 0, pz, null, 0));
            NativeStat st = default;
            Assert.Equal((nuint)FuseHost.Align8(FuseHost.DirentNameOffset + length),
                FuseNative.fuse_add_direntry(0, null, 0, pz, &st, 0));
        }
    }

    public static TheoryData<string> Arm64StructNames() => NamesOf(Arm64Structs);

    /// <summary>The same structures as libfuse and glibc lay them out on arm64 (aarch64 cross compiler, run under qemu-user).</summary>
    [Theory]
    [MemberData(nameof(Arm64StructNames))]
    public void Arm64_struct_size_and_every_field_offset_match_the_aarch64_compiler(string name)
    {
        var managed = Arm64Structs.Single(s => s.Managed.Name == name).Managed;
        AssertLayout(managed, NativeArm64.Value, "aarch64-linux-gnu-gcc");
    }

    [Fact]
    public void Arm64_file_info_bits_kernel_structures_and_constants_match_the_aarch64_headers()
    {
        AssertFileInfoBits(NativeArm64.Value);
        AssertFuseConstants(NativeArm64.Value);
        var kernel = KernelArm64.Value;
        foreach (var (managed, _) in KernelStructsOf(LayoutTarget.Arm64))
            AssertLayout(managed, kernel, "aarch64-linux-gnu-gcc");
        var constants = KernelConstantsOf(LayoutTarget.Arm64).ToList();
        Assert.Contains(constants, k => k.Name == "EFD_NONBLOCK");
        Assert.Contains(constants, k => k.Name == "MAP_POPULATE");
        foreach (var (name, value, _) in constants)
            Assert.True(value == kernel[$"const.{name}"], $"{name}: C# {value}, arm64 header {kernel[$"const.{name}"]}");
    }
}

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
        (typeof(FuseLoopConfigV1), "struct fuse_loop_config_v1"),
        (typeof(FuseLowLevelOps), "struct fuse_lowlevel_ops"),
    ];

    private static readonly Lazy<Dictionary<string, long>> Native = new(CompileAndRun);

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

    private static Dictionary<string, long> CompileAndRun()
    {
        var c = new StringBuilder();
        c.AppendLine("#define FUSE_USE_VERSION 312");
        c.AppendLine("#include <fuse_lowlevel.h>");
        c.AppendLine("#include <sys/stat.h>\n#include <sys/statvfs.h>\n#include <stddef.h>\n#include <stdio.h>\n#include <string.h>");
        c.AppendLine("int main(void) {");
        foreach (var (managed, native) in Structs)
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

        var dir = Shell.MakeTempDirectory("xfswin-layout");
        try
        {
            File.WriteAllText(Path.Combine(dir, "layout.c"), c.ToString());
            var cflags = Shell.Run("pkg-config", ["--cflags", "fuse3"]);
            Assert.True(cflags.ExitCode == 0, "pkg-config cannot find fuse3: install libfuse3-dev (apt-get install libfuse3-dev). " + cflags.Both);
            var args = cflags.Stdout.Split(' ', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList();
            args.AddRange(["-Wall", "-Werror", "-o", Path.Combine(dir, "layout"), Path.Combine(dir, "layout.c")]);
            var cc = Shell.Run("gcc", args);
            Assert.True(cc.ExitCode == 0, "gcc failed on the layout probe:\n" + cc.Both + "\n" + c);
            var run = Shell.Run(Path.Combine(dir, "layout"), []);
            Assert.Equal(0, run.ExitCode);
            return run.Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries)
                .Select(l => l.Split(' '))
                .ToDictionary(p => p[0], p => long.Parse(p[1], System.Globalization.CultureInfo.InvariantCulture));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    public static TheoryData<string> StructNames()
    {
        var data = new TheoryData<string>();
        foreach (var (managed, _) in Structs)
            data.Add(managed.Name);
        return data;
    }

    [Theory]
    [MemberData(nameof(StructNames))]
    public void Struct_size_and_every_field_offset_match_gcc(string name)
    {
        var managed = Structs.Single(s => s.Managed.Name == name).Managed;
        var native = Native.Value;
        Assert.Equal(native[$"{name}.sizeof"], Marshal.SizeOf(managed));
        var fields = LayoutFields(managed).ToList();
        Assert.NotEmpty(fields);
        foreach (var f in fields)
            Assert.True(native[$"{name}.{f.Name}"] == (long)Marshal.OffsetOf(managed, f.Name),
                $"{name}.{f.Name}: C# offset {Marshal.OffsetOf(managed, f.Name)}, gcc says {native[$"{name}.{f.Name}"]}");
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
    }

    [Fact]
    public void File_info_flag_bits_match_gcc_bitfield_allocation()
    {
        var native = Native.Value;
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
    public void Constants_match_the_headers()
    {
        var native = Native.Value;
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
}

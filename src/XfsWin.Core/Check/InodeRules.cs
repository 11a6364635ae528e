using XfsWin.Format;

namespace XfsWin.Check;

/// <summary>
/// The rules an in-use inode's core must keep beyond what reading it needs: those of the kernel's inode verifier
/// (<see cref="DinodeView.VerifyRules"/>), then xfs_repair's own (a directory size inside the data space, the attribute
/// format of an inode without an attribute fork, a realtime file's extent size hint in whole realtime extents, flags only
/// directories or only regular files may carry, flags no version defines, the realtime bitmap flag elsewhere than on
/// the bitmap). A pure function of the inode's bytes and the volume.
/// </summary>
internal static class InodeRules
{
    // di_flags
    private const ushort Realtime = 0x1, NewRtBitmap = 0x4, RtInherit = 0x100, ProjInherit = 0x200, NoSymlinks = 0x400, ExtSize = 0x800,
        ExtSzInherit = 0x1000, AllFlags = 0x7FFF;
    // di_flags2
    private const ulong Dax = 0x1, AllFlags2 = 0x3F;

    /// <summary>The first rule the in-use inode <paramref name="raw"/> breaks, or null.</summary>
    public static string? Problem(ReadOnlySpan<byte> raw, ulong ino, CheckContext cx)
    {
        var kernel = DinodeView.VerifyRules(raw, cx.Sb);
        if (!kernel.IsOk) return kernel.Problem;
        var d = new DinodeView(raw);
        int type = d.Mode & 0xF000;
        bool dir = type == 0x4000, reg = type == 0x8000;
        ushort flags = d.Flags;
        // Directory data lives below the leaf offset: xfs_repair counts a larger size as a bad directory size.
        if (dir && d.Size > (ulong)Dir2Space.LeafOffset) return $"directory size {(long)d.Size} past the {Dir2Space.LeafOffset >> 30} GiB data space";
        // The kernel also accepts format 0 (a fresh inode of a new cluster); xfs_repair wants the empty extent list.
        if (d.ForkOffset == 0 && d.AttrFormat != ForkFormat.Extents) return $"no attribute fork but attribute format {(int)d.AttrFormat}";
        ulong unit = (flags & Realtime) != 0 ? Math.Max(1u, cx.RtExtSize) : 1;
        if (d.ExtSize % unit != 0) return $"extent size hint {d.ExtSize} is not a multiple of the realtime extent";

        if ((flags & ~AllFlags) != 0) return $"unknown inode flags 0x{flags:x4}";
        if ((flags & NewRtBitmap) != 0 && ino != cx.RealtimeBitmapIno) return "rt bitmap flag on another inode";
        if ((flags & (RtInherit | ExtSzInherit | ProjInherit | NoSymlinks)) != 0 && !dir) return "directory flags on a non-directory";
        if ((flags & (Realtime | ExtSize)) != 0 && !reg) return "file flags on a non-file";

        if (d.Version < 3) return null;
        ulong flags2 = d.Flags2;
        if ((flags2 & ~AllFlags2) != 0) return $"unknown inode flags2 0x{flags2:x}";
        // Reflink and DAX together are allowed (the kernel shares blocks of DAX files since 6.0; xfs_repair 6.13 accepts it).
        if ((flags2 & Dax) != 0 && !(reg || dir)) return "DAX flag on neither a file nor a directory";
        return null;
    }
}

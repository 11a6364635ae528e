using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// Intent and done items (host order, one region each). An intent promises a deferred change (free
/// extents, rmap/refcount/bmap updates, an xattr operation, an extent exchange); its done item says
/// the change is in the log. All share: u16 type, u16 size, u32 nextents (or pad), u64 id at 8.
/// </summary>
public static class IntentLogFormat
{
    public const int OffType = 0, OffSize = 2, OffCount = 4, OffId = 8, OffExtents = 16;
    /// <summary>EFI/EFD extents: u64 start, u32 len, u32 pad (x86-64); packed i386 form has 12-byte extents.</summary>
    public const int EfiExtentSize = 16, EfiExtentSize32 = 12;
    /// <summary>RUI map_extent: owner, startblock, startoff (u64), len, flags (u32).</summary>
    public const int RuiExtentSize = 32;
    /// <summary>CUI phys_extent: startblock (u64), len, flags (u32).</summary>
    public const int CuiExtentSize = 16;
    public const int BuiSize = 48, DoneSize = 16, AttriSize = 40, XmiSize = 88;

    public static uint Count(ReadOnlySpan<byte> b) => BinaryPrimitives.ReadUInt32LittleEndian(b[OffCount..]);
    public static ulong Id(ReadOnlySpan<byte> b) => BinaryPrimitives.ReadUInt64LittleEndian(b[OffId..]);

    /// <summary>The intent type a done item finishes, or 0 when <paramref name="type"/> is not a done item.</summary>
    public static ushort IntentOf(ushort type) => type switch
    {
        LogItemType.Efd => LogItemType.Efi,
        LogItemType.EfdRt => LogItemType.EfiRt,
        LogItemType.Rud => LogItemType.Rui,
        LogItemType.RudRt => LogItemType.RuiRt,
        LogItemType.Cud => LogItemType.Cui,
        LogItemType.CudRt => LogItemType.CuiRt,
        LogItemType.Bud => LogItemType.Bui,
        LogItemType.Attrd => LogItemType.Attri,
        LogItemType.Xmd => LogItemType.Xmi,
        _ => 0,
    };

    public static bool IsIntent(ushort type) => type is LogItemType.Efi or LogItemType.EfiRt or LogItemType.Rui or LogItemType.RuiRt
        or LogItemType.Cui or LogItemType.CuiRt or LogItemType.Bui or LogItemType.Attri or LogItemType.Xmi;

    /// <summary>Checks an intent or done item's first region length as the kernel does; null when valid.</summary>
    public static string? CheckLength(ushort type, ReadOnlySpan<byte> b)
    {
        if (b.Length < DoneSize) return $"{LogItemType.Name(type)} item of {b.Length} bytes is shorter than {DoneSize}";
        long n = Count(b);
        return type switch
        {
            LogItemType.Efi or LogItemType.EfiRt or LogItemType.Efd or LogItemType.EfdRt =>
                b.Length == OffExtents + EfiExtentSize * n || b.Length == OffExtents + EfiExtentSize32 * n ? null
                    : $"{LogItemType.Name(type)} length {b.Length} does not match {n} extents",
            LogItemType.Rui or LogItemType.RuiRt => b.Length == OffExtents + RuiExtentSize * n ? null : $"RUI length {b.Length} does not match {n} extents",
            LogItemType.Cui or LogItemType.CuiRt => b.Length == OffExtents + CuiExtentSize * n ? null : $"CUI length {b.Length} does not match {n} extents",
            LogItemType.Bui => b.Length == BuiSize && n == 1 ? null : $"BUI length {b.Length} with {n} extents (must be {BuiSize} with 1)",
            LogItemType.Attri => b.Length == AttriSize ? null : $"ATTRI format length {b.Length} (must be {AttriSize})",
            LogItemType.Xmi => b.Length == XmiSize ? null : $"XMI length {b.Length} (must be {XmiSize})",
            _ => b.Length == DoneSize ? null : $"{LogItemType.Name(type)} length {b.Length} (must be {DoneSize})",
        };
    }
}

using System.Buffers.Binary;

namespace XfsWin.Journal;

/// <summary>
/// An intent log recovery found without its done item: its type, id, the LSN of the transaction that logged it (its
/// place in the AIL, holding the tail until it is finished) and its regions as logged.
/// </summary>
public sealed record RecoveredIntent(ushort Type, ulong Id, ulong Lsn, byte[][] Regions)
{
    public string Kind => LogItemType.Name(Type);

    /// <summary>The intent as a log item (what the AIL holds and its done item names).</summary>
    public IntentLogItem Item => IntentLogItem.FromLog(Regions);

    /// <summary>The extents of an EFI (16-byte or packed 12-byte form).</summary>
    public IntentExtent[] ExtentFreeExtents()
    {
        var b = Regions[0];
        int n = (int)IntentLogFormat.Count(b);
        int size = b.Length == IntentLogFormat.OffExtents + IntentLogFormat.EfiExtentSize * n ? IntentLogFormat.EfiExtentSize : IntentLogFormat.EfiExtentSize32;
        var extents = new IntentExtent[n];
        for (int i = 0; i < n; i++)
        {
            var e = b.AsSpan(IntentLogFormat.OffExtents + size * i);
            extents[i] = new IntentExtent(BinaryPrimitives.ReadUInt64LittleEndian(e), BinaryPrimitives.ReadUInt32LittleEndian(e[8..]));
        }
        return extents;
    }

    /// <summary>The map extents of an RUI, or the one of a BUI.</summary>
    public IntentMapExtent[] MapExtents()
    {
        var b = Regions[0];
        int n = (int)IntentLogFormat.Count(b);
        var maps = new IntentMapExtent[n];
        for (int i = 0; i < n; i++)
        {
            var e = b.AsSpan(IntentLogFormat.OffExtents + IntentLogFormat.RuiExtentSize * i);
            maps[i] = new IntentMapExtent(BinaryPrimitives.ReadUInt64LittleEndian(e), BinaryPrimitives.ReadUInt64LittleEndian(e[8..]),
                BinaryPrimitives.ReadUInt64LittleEndian(e[16..]), BinaryPrimitives.ReadUInt32LittleEndian(e[24..]), BinaryPrimitives.ReadUInt32LittleEndian(e[28..]));
        }
        return maps;
    }

    /// <summary>The physical extents of a CUI.</summary>
    public IntentPhysExtent[] PhysExtents()
    {
        var b = Regions[0];
        int n = (int)IntentLogFormat.Count(b);
        var extents = new IntentPhysExtent[n];
        for (int i = 0; i < n; i++)
        {
            var e = b.AsSpan(IntentLogFormat.OffExtents + IntentLogFormat.CuiExtentSize * i);
            extents[i] = new IntentPhysExtent(BinaryPrimitives.ReadUInt64LittleEndian(e), BinaryPrimitives.ReadUInt32LittleEndian(e[8..]), BinaryPrimitives.ReadUInt32LittleEndian(e[12..]));
        }
        return extents;
    }
}

/// <summary>An extent of an EFI/EFD: filesystem block and length.</summary>
public readonly record struct IntentExtent(ulong StartBlock, uint Length);

/// <summary>An rmap or bmap update (xfs_map_extent): owner, physical start, file offset, length, flags.</summary>
public readonly record struct IntentMapExtent(ulong Owner, ulong StartBlock, ulong StartOffset, uint Length, uint Flags);

/// <summary>A refcount update (xfs_phys_extent): physical start, length, flags.</summary>
public readonly record struct IntentPhysExtent(ulong StartBlock, uint Length, uint Flags);

/// <summary>
/// An intent or done item (EFI/EFD, RUI/RUD, CUI/CUD, BUI/BUD, XMI/XMD, ATTRI/ATTRD) in its log format, built by the
/// encoders here as the kernel lays them out (host order, the x86-64 sizes <see cref="IntentLogFormat.CheckLength"/>
/// accepts). An intent and its done item share the id; recovery finishes intents that have no done item.
/// </summary>
public sealed class IntentLogItem : JournalItem
{
    private readonly byte[][] _regions;

    private IntentLogItem(ushort type, ulong id, byte[][] regions)
    {
        ItemType = type;
        Id = id;
        _regions = regions;
    }

    public ushort ItemType { get; }
    public ulong Id { get; }
    public override LogItemKey Key => new(ItemType, (long)Id, 0);
    public ReadOnlySpan<byte> FormatRegion => _regions[0];

    public override int RegionCount => _regions.Length;
    public override int FormattedBytes { get { int n = 0; foreach (var r in _regions) n += r.Length; return n; } }
    public override void Format(List<ReadOnlyMemory<byte>> regions, LogFormatArena arena) { foreach (var r in _regions) regions.Add(r); }

    /// <summary>An intent or done item as the log holds it (its regions as logged; the first names type and id).</summary>
    public static IntentLogItem FromLog(byte[][] regions)
    {
        ArgumentNullException.ThrowIfNull(regions);
        if (regions.Length == 0 || regions[0].Length < IntentLogFormat.DoneSize) throw new ArgumentException("an intent item needs its format region", nameof(regions));
        ushort type = BinaryPrimitives.ReadUInt16LittleEndian(regions[0]);
        return new IntentLogItem(type, IntentLogFormat.Id(regions[0]), regions.Select(r => (byte[])r.Clone()).ToArray());
    }

    /// <summary>Intents are logged once; a second item with the same type and id is a bug of the caller.</summary>
    public override void MergeNewer(JournalItem newer) =>
        throw new InvalidOperationException($"{Key} was logged twice in one checkpoint");

    public override JournalItem Snapshot() => this;

    private static byte[] Header(ushort type, int length, ushort regionCount, uint count, ulong id)
    {
        var b = new byte[length];
        BinaryPrimitives.WriteUInt16LittleEndian(b, type);
        BinaryPrimitives.WriteUInt16LittleEndian(b.AsSpan(IntentLogFormat.OffSize), regionCount);
        BinaryPrimitives.WriteUInt32LittleEndian(b.AsSpan(IntentLogFormat.OffCount), count);
        BinaryPrimitives.WriteUInt64LittleEndian(b.AsSpan(IntentLogFormat.OffId), id);
        return b;
    }

    /// <summary>EFI (free extents) or EFD (extents freed): xfs_efi_log_format / xfs_efd_log_format, 16-byte extents.</summary>
    public static IntentLogItem ExtentFree(bool done, ulong id, ReadOnlySpan<IntentExtent> extents, bool realtime = false)
    {
        ushort type = (done, realtime) switch
        {
            (false, false) => LogItemType.Efi, (true, false) => LogItemType.Efd,
            (false, true) => LogItemType.EfiRt, _ => LogItemType.EfdRt,
        };
        var b = Header(type, IntentLogFormat.OffExtents + IntentLogFormat.EfiExtentSize * extents.Length, 1, (uint)extents.Length, id);
        for (int i = 0; i < extents.Length; i++)
        {
            var e = b.AsSpan(IntentLogFormat.OffExtents + IntentLogFormat.EfiExtentSize * i);
            BinaryPrimitives.WriteUInt64LittleEndian(e, extents[i].StartBlock);
            BinaryPrimitives.WriteUInt32LittleEndian(e[8..], extents[i].Length);
        }
        return new IntentLogItem(type, id, [b]);
    }

    /// <summary>RUI: rmap updates (xfs_rui_log_format, 32-byte map extents).</summary>
    public static IntentLogItem RmapUpdate(ulong id, ReadOnlySpan<IntentMapExtent> maps, bool realtime = false)
    {
        ushort type = realtime ? LogItemType.RuiRt : LogItemType.Rui;
        var b = Header(type, IntentLogFormat.OffExtents + IntentLogFormat.RuiExtentSize * maps.Length, 1, (uint)maps.Length, id);
        for (int i = 0; i < maps.Length; i++) WriteMap(b.AsSpan(IntentLogFormat.OffExtents + IntentLogFormat.RuiExtentSize * i), maps[i]);
        return new IntentLogItem(type, id, [b]);
    }

    /// <summary>CUI: refcount updates (xfs_cui_log_format, 16-byte physical extents).</summary>
    public static IntentLogItem RefcountUpdate(ulong id, ReadOnlySpan<IntentPhysExtent> extents, bool realtime = false)
    {
        ushort type = realtime ? LogItemType.CuiRt : LogItemType.Cui;
        var b = Header(type, IntentLogFormat.OffExtents + IntentLogFormat.CuiExtentSize * extents.Length, 1, (uint)extents.Length, id);
        for (int i = 0; i < extents.Length; i++)
        {
            var e = b.AsSpan(IntentLogFormat.OffExtents + IntentLogFormat.CuiExtentSize * i);
            BinaryPrimitives.WriteUInt64LittleEndian(e, extents[i].StartBlock);
            BinaryPrimitives.WriteUInt32LittleEndian(e[8..], extents[i].Length);
            BinaryPrimitives.WriteUInt32LittleEndian(e[12..], extents[i].Flags);
        }
        return new IntentLogItem(type, id, [b]);
    }

    /// <summary>BUI: one bmap update whose owner is the inode (xfs_bui_log_format).</summary>
    public static IntentLogItem BmapUpdate(ulong id, IntentMapExtent map)
    {
        var b = Header(LogItemType.Bui, IntentLogFormat.BuiSize, 1, 1, id);
        WriteMap(b.AsSpan(IntentLogFormat.OffExtents), map);
        return new IntentLogItem(LogItemType.Bui, id, [b]);
    }

    /// <summary>RUD, CUD, BUD, ATTRD or XMD: the 16-byte done item naming the intent's id.</summary>
    public static IntentLogItem Done(ushort doneType, ulong intentId)
    {
        if (IntentLogFormat.IntentOf(doneType) == 0 || doneType is LogItemType.Efd or LogItemType.EfdRt)
            throw new ArgumentException($"{LogItemType.Name(doneType)} is not a 16-byte done item", nameof(doneType));
        return new IntentLogItem(doneType, intentId, [Header(doneType, IntentLogFormat.DoneSize, 1, 0, intentId)]);
    }

    /// <summary>XMI: an extent exchange between two files (xfs_xmi_log_format).</summary>
    public static IntentLogItem ExchangeMapping(ulong id, ulong inode1, ulong inode2, uint gen1, uint gen2, ulong startOffset1, ulong startOffset2,
        ulong blockCount, ulong flags, long size1, long size2)
    {
        var b = Header(LogItemType.Xmi, IntentLogFormat.XmiSize, 1, 0, id);
        var s = b.AsSpan();
        BinaryPrimitives.WriteUInt64LittleEndian(s[16..], inode1);
        BinaryPrimitives.WriteUInt64LittleEndian(s[24..], inode2);
        BinaryPrimitives.WriteUInt32LittleEndian(s[32..], gen1);
        BinaryPrimitives.WriteUInt32LittleEndian(s[36..], gen2);
        BinaryPrimitives.WriteUInt64LittleEndian(s[40..], startOffset1);
        BinaryPrimitives.WriteUInt64LittleEndian(s[48..], startOffset2);
        BinaryPrimitives.WriteUInt64LittleEndian(s[56..], blockCount);
        BinaryPrimitives.WriteUInt64LittleEndian(s[64..], flags);
        BinaryPrimitives.WriteInt64LittleEndian(s[72..], size1);
        BinaryPrimitives.WriteInt64LittleEndian(s[80..], size2);
        return new IntentLogItem(LogItemType.Xmi, id, [b]);
    }

    /// <summary>
    /// ATTRI: an xattr or parent-pointer operation (xfs_attri_log_format) followed by its name, value and, for
    /// parent-pointer replace, new name and new value regions, each padded to 4 bytes.
    /// </summary>
    public static IntentLogItem AttrIntent(ulong id, ulong ino, uint generation, uint opFlags, uint attrFilter,
        ReadOnlySpan<byte> name, ReadOnlySpan<byte> value, ReadOnlySpan<byte> newName = default, ReadOnlySpan<byte> newValue = default)
    {
        var regions = new List<byte[]>();
        bool pptrReplace = opFlags == 6;
        int count = 2 + (pptrReplace ? 1 : 0) + (value.Length > 0 || opFlags is 4 or 5 ? 1 : 0) + (pptrReplace ? 1 : 0);
        var b = Header(LogItemType.Attri, IntentLogFormat.AttriSize, (ushort)count, generation, id);
        var s = b.AsSpan();
        BinaryPrimitives.WriteUInt64LittleEndian(s[16..], ino);
        BinaryPrimitives.WriteUInt32LittleEndian(s[24..], opFlags);
        if (pptrReplace)
        {
            BinaryPrimitives.WriteUInt16LittleEndian(s[28..], (ushort)name.Length);
            BinaryPrimitives.WriteUInt16LittleEndian(s[30..], (ushort)newName.Length);
        }
        else BinaryPrimitives.WriteUInt32LittleEndian(s[28..], (uint)name.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(s[32..], (uint)value.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(s[36..], attrFilter);
        regions.Add(b);
        regions.Add(Padded(name));
        if (pptrReplace) regions.Add(Padded(newName));
        if (value.Length > 0 || opFlags is 4 or 5) regions.Add(Padded(value));
        if (pptrReplace) regions.Add(Padded(newValue));
        return new IntentLogItem(LogItemType.Attri, id, regions.ToArray());
    }

    private static byte[] Padded(ReadOnlySpan<byte> data)
    {
        var r = new byte[(data.Length + 3) & ~3];
        data.CopyTo(r);
        return r;
    }

    private static void WriteMap(Span<byte> e, IntentMapExtent m)
    {
        BinaryPrimitives.WriteUInt64LittleEndian(e, m.Owner);
        BinaryPrimitives.WriteUInt64LittleEndian(e[8..], m.StartBlock);
        BinaryPrimitives.WriteUInt64LittleEndian(e[16..], m.StartOffset);
        BinaryPrimitives.WriteUInt32LittleEndian(e[24..], m.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(e[28..], m.Flags);
    }
}

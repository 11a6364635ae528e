namespace XfsWin.Journal;

/// <summary>XFS_LI_* item types: the host-order u16 that starts every item's first region.</summary>
public static class LogItemType
{
    public const ushort Efi = 0x1236, Efd = 0x1237, Iunlink = 0x1238, Inode = 0x123B, Buf = 0x123C, Dquot = 0x123D,
        QuotaOff = 0x123E, Icreate = 0x123F, Rui = 0x1240, Rud = 0x1241, Cui = 0x1242, Cud = 0x1243, Bui = 0x1244,
        Bud = 0x1245, Attri = 0x1246, Attrd = 0x1247, Xmi = 0x1248, Xmd = 0x1249, EfiRt = 0x124A, EfdRt = 0x124B,
        RuiRt = 0x124C, RudRt = 0x124D, CuiRt = 0x124E, CudRt = 0x124F;

    /// <summary>XLOG_MAX_REGIONS_IN_ITEM.</summary>
    public const int MaxRegionsInItem = 257;

    public static string Name(ushort type) => type switch
    {
        Efi => "EFI", Efd => "EFD", Inode => "inode", Buf => "buffer", Dquot => "dquot", QuotaOff => "quotaoff",
        Icreate => "icreate", Rui => "RUI", Rud => "RUD", Cui => "CUI", Cud => "CUD", Bui => "BUI", Bud => "BUD",
        Attri => "ATTRI", Attrd => "ATTRD", Xmi => "XMI", Xmd => "XMD", EfiRt => "EFI (realtime)", EfdRt => "EFD (realtime)",
        RuiRt => "RUI (realtime)", RudRt => "RUD (realtime)", CuiRt => "CUI (realtime)", CudRt => "CUD (realtime)",
        _ => $"unknown item type 0x{type:x4}",
    };
}

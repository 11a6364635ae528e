namespace XfsWin.Format;

/// <summary>
/// xfs_refcount_rec: start block (u32), block count (u32), reference count (u32), 12 bytes big-endian; the key is
/// the start block alone (4 bytes). Records of the copy-on-write staging domain carry <see cref="CowFlag"/> in
/// their start block, so they sort after every shared-extent record.
/// </summary>
public static class RefcountRecord
{
    public const int Size = 12, KeySize = 4;
    public const uint CowFlag = 0x80000000;
}

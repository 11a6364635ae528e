namespace XfsWin.Journal;

/// <summary>
/// Writes logged items back in place when the log needs space or unmounts (the AIL push). The buffer layer
/// implements it; <see cref="DeviceImageWriteback"/> writes the images the items carry.
/// Lock order: <see cref="MountedLog"/> calls this under its lock; an implementation takes buffer and inode locks
/// inside it and must not call back into the log.
/// </summary>
public interface ILogWriteback
{
    /// <summary>
    /// Writes each item's metadata in place with its <see cref="JournalItem.Lsn"/> stamped (V5) and its CRC computed:
    /// the state the item's checkpoint logged, or a later one only if that later state's checkpoint is also in the
    /// log. Cancelled buffers are not written. Intents and done items have nothing to write.
    /// </summary>
    void WriteBack(IReadOnlyList<JournalItem> items);

    /// <summary>Makes everything written back durable (a cache flush of the data device). The tail moves only after this.</summary>
    void Flush();
}

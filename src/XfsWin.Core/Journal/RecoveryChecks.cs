using System.Buffers.Binary;
using XfsWin.Device;
using XfsWin.Format;

namespace XfsWin.Journal;

/// <summary>
/// Post-replay work the kernel does at mount that needs the write path: freeing unlinked-but-open
/// inodes and removing leftover copy-on-write staging extents. These checks find whether any is due.
/// </summary>
public static class RecoveryChecks
{
    private const int RefcountPtrSize = 4;

    /// <summary>Counts inodes on every AGI unlinked bucket chain (following di_next_unlinked).</summary>
    public static int CountUnlinkedInodes(IBlockDevice device, Superblock sb, List<string> warnings)
    {
        int count = 0;
        var agi = new byte[sb.SectorSize];
        var inode = new byte[sb.InodeSize];
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            device.Read(AgiOffset(sb, ag), agi);
            if (BinaryPrimitives.ReadUInt32BigEndian(agi) != AgiView.Magic)
            {
                warnings.Add($"AGI {ag} has a bad magic after replay; its unlinked list was not checked");
                continue;
            }
            for (int b = 0; b < AgiView.UnlinkedBuckets; b++)
            {
                uint agino = BinaryPrimitives.ReadUInt32BigEndian(agi.AsSpan(AgiView.OffUnlinked + 4 * b));
                int guard = 0;
                while (agino != AgiView.NullAgino && guard++ < 1_000_000)
                {
                    count++;
                    ulong ino = ((ulong)ag << sb.AgInoLog) | agino;
                    if (!sb.IsValidInode(ino)) break;
                    device.Read(sb.InodeToByte(ino), inode);
                    agino = BinaryPrimitives.ReadUInt32BigEndian(inode.AsSpan(DinodeView.OffNextUnlinked));
                }
            }
        }
        return count;
    }

    /// <summary>
    /// AGs whose refcount btree still holds CoW staging records. Those sort last, so following the
    /// rightmost path of each tree to its last record is enough.
    /// </summary>
    public static List<uint> AgsWithLeftoverCow(IBlockDevice device, Superblock sb)
    {
        var ags = new List<uint>();
        if (!sb.HasReflink) return ags;
        var agf = new byte[sb.SectorSize];
        var block = new byte[sb.BlockSize];
        for (uint ag = 0; ag < sb.AgCount; ag++)
        {
            device.Read(AgfOffset(sb, ag), agf);
            if (BinaryPrimitives.ReadUInt32BigEndian(agf) != AgfView.Magic) continue;
            uint bno = BinaryPrimitives.ReadUInt32BigEndian(agf.AsSpan(AgfView.OffRefcountRoot));
            for (int depth = 0; depth < 16 && bno != 0 && bno < sb.AgBlocks; depth++)
            {
                device.Read(sb.AgBlockToByte(ag, bno), block);
                if (BinaryPrimitives.ReadUInt32BigEndian(block) != BtreeMagic.RefcountV5) break;
                ushort level = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BtreeBlockView.OffLevel));
                ushort numrecs = BinaryPrimitives.ReadUInt16BigEndian(block.AsSpan(BtreeBlockView.OffNumrecs));
                if (numrecs == 0) break;
                const int hdr = BtreeBlockView.ShortOffCrc + 4;
                if (level == 0)
                {
                    uint start = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(hdr + (numrecs - 1) * RefcountRecord.Size));
                    if ((start & RefcountRecord.CowFlag) != 0) ags.Add(ag);
                    break;
                }
                int maxrecs = (block.Length - hdr) / (RefcountRecord.KeySize + RefcountPtrSize);
                if (numrecs > maxrecs) break;
                bno = BinaryPrimitives.ReadUInt32BigEndian(block.AsSpan(hdr + maxrecs * RefcountRecord.KeySize + (numrecs - 1) * RefcountPtrSize));
            }
        }
        return ags;
    }

    public static long AgiOffset(Superblock sb, uint agno) => sb.AgBlockToByte(agno, 0) + 2L * sb.SectorSize;
    public static long AgfOffset(Superblock sb, uint agno) => sb.AgBlockToByte(agno, 0) + sb.SectorSize;
}

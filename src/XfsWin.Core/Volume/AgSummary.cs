using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Volume;

/// <summary>
/// Free-space and inode counters summed from every AGF and AGI, as the kernel does at mount when
/// superblock counters are maintained lazily. Each header is verified on the way.
/// </summary>
internal readonly record struct AgSummary(ulong FreeBlocks, ulong Inodes, ulong FreeInodes)
{
    public static AgSummary Read(MountContext mount, List<string> warnings)
    {
        var sb = mount.Superblock;
        ulong free = 0, inodes = 0, freeInodes = 0;
        var sector = new byte[sb.SectorSize];
        try
        {
            for (uint agno = 0; agno < sb.AgCount; agno++)
            {
                long agStart = sb.AgBlockToByte(agno, 0);
                mount.Device.Read(agStart + sb.SectorSize, sector);
                var agfCheck = AgfView.Verify(sector, sb, agno);
                if (!agfCheck.IsOk) throw mount.Corrupt($"AGF of AG {agno}", agStart + sb.SectorSize, agfCheck.ToString());
                var agf = new AgfView(sector);
                free += (ulong)agf.FreeBlocks + agf.FlCount + System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(sector.AsSpan(AgfView.OffBtreeblks));
                mount.Device.Read(agStart + 2L * sb.SectorSize, sector);
                var agiCheck = AgiView.Verify(sector, sb, agno);
                if (!agiCheck.IsOk) throw mount.Corrupt($"AGI of AG {agno}", agStart + 2L * sb.SectorSize, agiCheck.ToString());
                var agi = new AgiView(sector);
                inodes += agi.Count;
                freeInodes += agi.FreeCount;
            }
        }
        catch (XfsCorruptionException e)
        {
            warnings.Add($"allocation group headers are damaged ({e.Message}); free space figures come from the superblock");
            return new AgSummary(sb.Fdblocks, sb.Icount, sb.Ifree);
        }
        return new AgSummary(free, inodes, freeInodes);
    }
}

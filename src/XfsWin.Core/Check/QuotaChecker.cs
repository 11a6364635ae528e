using XfsWin.Directories;
using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;

namespace XfsWin.Check;

/// <summary>
/// Quota counts against the dquots, as xfs_repair's quotacheck does: for every quota type the superblock says is
/// accounted and checked (sb_qflags *_CHKD, with the quota feature bit) and whose quota file exists, the usage of
/// every id is counted from the in-use inodes (one inode and di_nblocks blocks per file, by uid, gid and project id;
/// the quota files themselves and metadata directory inodes not counted) and compared with the dquot records of the
/// quota file, each of which must be valid (magic, version, type, the id of its place, CRC) and hold exactly that
/// usage; an id with usage but no dquot is a problem too.
/// </summary>
internal sealed class QuotaChecker(CheckContext cx, InodeCache inodes, ExtentMapCache maps, DirectoryReader directories)
{
    // sb_qflags bits.
    private const ushort UquotaAcct = 0x0001, UquotaChkd = 0x0004, PquotaAcct = 0x0008, OquotaChkd = 0x0020,
        GquotaAcct = 0x0040, GquotaChkd = 0x0100, PquotaChkd = 0x0400;

    private sealed class Usage
    {
        public ulong Blocks, RtBlocks, Inodes;
        public bool OnDisk;
    }

    private readonly record struct QuotaFile(byte Type, string Name, ulong Ino);

    public void Run(byte[] primary, IReadOnlyList<InodeEntry> inUse)
    {
        var sb = new SuperblockView(primary);
        var s = cx.Sb;
        if ((s.VersionNum & SuperblockFeatures.VersionQuota) == 0) return;
        ushort q = sb.Qflags;
        var files = new List<QuotaFile>();
        ulong uquot = sb.UquotIno, gquot = sb.GquotIno, pquot = s.IsV5 ? sb.PquotIno : 0;
        if (!s.IsV5)
        {
            // V4: one file for group or project quota, one CHKD flag for both (xfs_sb_quota_from_disk).
            if ((q & OquotaChkd) != 0) q |= (q & PquotaAcct) != 0 ? PquotaChkd : GquotaChkd;
            if ((q & PquotaAcct) != 0) (pquot, gquot) = (gquot, 0);
        }
        if (s.HasMetadir)
        {
            uquot = MetadirQuotaFile("user");
            gquot = MetadirQuotaFile("group");
            pquot = MetadirQuotaFile("project");
        }
        if ((q & UquotaChkd) != 0 && Valid(uquot)) files.Add(new(DquotView.TypeUser, "user quota", uquot));
        if ((q & GquotaChkd) != 0 && Valid(gquot)) files.Add(new(DquotView.TypeGroup, "group quota", gquot));
        if ((q & PquotaChkd) != 0 && Valid(pquot)) files.Add(new(DquotView.TypeProject, "project quota", pquot));
        if (files.Count == 0) return;

        var quotaInodes = new HashSet<ulong> { sb.UquotIno, sb.GquotIno, s.IsV5 ? sb.PquotIno : 0, uquot, gquot, pquot };
        foreach (var file in files)
        {
            var usage = new Dictionary<uint, Usage>();
            foreach (var e in inUse)
            {
                if (e.Unusable || e.Metadata || quotaInodes.Contains(e.Ino)) continue;
                uint id = file.Type switch { DquotView.TypeUser => e.Uid, DquotView.TypeGroup => e.Gid, _ => e.ProjectId };
                if (!usage.TryGetValue(id, out var u)) usage[id] = u = new Usage();
                u.Inodes++;
                // Realtime files: their data blocks count as realtime blocks (not told apart here from bmbt blocks).
                if (e.Realtime) u.RtBlocks += e.Nblocks; else u.Blocks += e.Nblocks;
            }
            CheckFile(file, usage);
        }
    }

    private bool Valid(ulong ino) => ino != 0 && ino != ulong.MaxValue && cx.Sb.IsValidInode(ino);

    /// <summary>The quota file of <paramref name="name"/> under the metadata directory's "quota" directory, or 0.</summary>
    private ulong MetadirQuotaFile(string name)
    {
        try
        {
            var root = inodes.Get(cx.Sb.MetadirIno);
            if (!directories.TryLookup(root, "quota"u8, out ulong dir)) return 0;
            var quota = inodes.Get(dir);
            return quota.IsDirectory && directories.TryLookup(quota, System.Text.Encoding.ASCII.GetBytes(name), out ulong ino) ? ino : 0;
        }
        catch (XfsCorruptionException e)
        {
            cx.Report(e);
            return 0;
        }
    }

    private void CheckFile(QuotaFile file, Dictionary<uint, Usage> usage)
    {
        var sb = cx.Sb;
        string structure = $"{file.Name} file (inode {file.Ino})";
        Inode inode;
        ExtentMap map;
        try
        {
            inode = inodes.Get(file.Ino);
            map = maps.Get(inode, ForkKind.Data);
        }
        catch (XfsCorruptionException e)
        {
            cx.Report(e);
            return;
        }
        if (!inode.IsRegular)
        {
            cx.ReportAt(structure, inode.ByteOffset, "is not a regular file");
            return;
        }
        int perBlock = DquotView.PerBlock(sb.BlockSize);
        var block = new byte[sb.BlockSize];
        int reported = 0;
        void Report(long at, string message)
        {
            if (reported++ < 100) cx.ReportAt(structure, at, message);
        }
        try
        {
            map.Walk(0, ext =>
            {
                if (ext.Unwritten) return true;
                for (ulong b = 0; b < ext.BlockCount; b++)
                {
                    cx.Cancel.ThrowIfCancellationRequested();
                    long offset = sb.FsbToByte(ext.StartBlock + b);
                    if (!sb.IsValidFsb(ext.StartBlock + b) || !cx.TryRead(offset, block, structure)) continue;
                    ulong firstId = (ext.FileOffset + b) * (ulong)perBlock;
                    for (int i = 0; i < perBlock && firstId + (ulong)i <= uint.MaxValue; i++)
                    {
                        uint id = (uint)(firstId + (ulong)i);
                        var record = block.AsSpan(i * DquotView.Size, DquotView.Size);
                        var verdict = VerifyRecord(record, file.Type, id);
                        if (!verdict.IsOk)
                        {
                            Report(offset + i * DquotView.Size, $"dquot of id {id}: {verdict}");
                            continue;
                        }
                        var d = new DquotView(record);
                        usage.TryGetValue(id, out var u);
                        if (u is not null) u.OnDisk = true;
                        if (d.BlockCount != (u?.Blocks ?? 0)) Report(offset + i * DquotView.Size, $"id {id} has bcount {d.BlockCount}, counted {u?.Blocks ?? 0}");
                        if (d.RealtimeBlockCount != (u?.RtBlocks ?? 0)) Report(offset + i * DquotView.Size, $"id {id} has rtbcount {d.RealtimeBlockCount}, counted {u?.RtBlocks ?? 0}");
                        if (d.InodeCount != (u?.Inodes ?? 0)) Report(offset + i * DquotView.Size, $"id {id} has icount {d.InodeCount}, counted {u?.Inodes ?? 0}");
                    }
                }
                return true;
            });
        }
        catch (XfsCorruptionException e)
        {
            cx.Report(e);
            return;
        }
        foreach (var (id, u) in usage.OrderBy(p => p.Key))
        {
            if (!u.OnDisk)
                Report(inode.ByteOffset, $"no dquot for id {id}, which owns {u.Inodes} inode(s) and {u.Blocks} block(s)");
        }
    }

    /// <summary>
    /// xfs_dqblk_verify, with xfs_repair's allowance on V4: the one file of group or project quota may hold the other
    /// type's default dquot (id 0) after a switch between them.
    /// </summary>
    private VerifyResult VerifyRecord(ReadOnlySpan<byte> record, byte type, uint id)
    {
        var verdict = DquotView.Verify(record, type, id, cx.Sb);
        if (!verdict.IsOk && !cx.Sb.IsV5 && id == 0 && type != DquotView.TypeUser)
        {
            byte other = type == DquotView.TypeGroup ? DquotView.TypeProject : DquotView.TypeGroup;
            var second = DquotView.Verify(record, other, id, cx.Sb);
            if (second.IsOk) return second;
        }
        return verdict;
    }
}

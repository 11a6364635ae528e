using XfsWin.Format;
using XfsWin.Journal;
using XfsWin.Metadata;

namespace XfsWin.Volume;

public sealed partial class XfsVolume
{
    /// <summary>
    /// Relabels the volume while it is open read-write, as the kernel's FS_IOC_SETFSLABEL does on a mounted volume:
    /// holding the change lock exclusively, every secondary superblock is read and verified first (a bad one refuses the change
    /// before anything is written); then one transaction logs the primary superblock's sb_fname together with the
    /// in-core counters (the kernel's xfs_sync_sb_buf), the log is forced and everything committed is written in
    /// place; then each secondary superblock gets the new sb_fname (its other fields kept, its CRC restamped) and the
    /// device is flushed (the kernel's xfs_update_secondary_sbs). A crash before the commit is durable leaves the old
    /// label everywhere; after it, the log replay gives the primary the new one, and xfs_repair does not compare the
    /// secondaries' labels. An empty label clears it. A label of more than 12 UTF-8 bytes or with a NUL is
    /// <see cref="XfsError.InvalidArgument"/>, with nothing written.
    /// </summary>
    /// <remarks>
    /// Secondary superblocks are written to the device directly: nothing on a mounted volume reads them through the
    /// buffer cache (online grow clears the cache before it reads them from the device).
    /// </remarks>
    public void SetLabel(string label)
    {
        byte[] field = Superblock.LabelBytes(label);
        var w = Writer();
        using (w.Changes.Change())
        {
            if (w.Unmounted) throw new ObjectDisposedException(nameof(XfsVolume));
            var sb = _mount.Superblock;
            var secondaries = ReadSecondarySuperblocks(w, sb);

            using (var tx = Begin(w, TransactionKind.Sb))
            {
                var verifier = new SuperblockBufferVerifier(sb);
                var buffer = tx.Read(0, sb.SectorSize, 0, verifier, verifier.ForWrite(), BufType.Superblock);
                field.CopyTo(buffer.Contents.AsSpan(SuperblockView.OffFname, Superblock.MaxLabelBytes));
                tx.LogRange(buffer, SuperblockView.OffFname, SuperblockView.OffFname + Superblock.MaxLabelBytes - 1);
                LogCounters(w, tx, buffer);
                tx.Commit();
            }
            w.Log.PushAll();

            foreach (var (at, sector) in secondaries)
            {
                new SuperblockWriter(sector).Fname = field;
                if (sb.IsV5) new SuperblockWriter(sector).StampCrc(sb.SectorSize);
                w.Access.Data.Write(at, sector);
            }
            w.Access.Data.Flush();

            sb.Relabeled(label);
            _info = _info with { Label = label };
        }
    }

    /// <summary>Every secondary superblock the device holds, read and verified (corruption names the AG and refuses).</summary>
    private List<(long At, byte[] Sector)> ReadSecondarySuperblocks(VolumeWriteState w, Superblock sb)
    {
        var device = w.Access.Data;
        var sectors = new List<(long, byte[])>();
        for (uint agno = 1; agno < sb.AgCount; agno++)
        {
            long at = sb.AgBlockToByte(agno, 0);
            if (at + sb.SectorSize > device.Length) continue;
            var sector = new byte[sb.SectorSize];
            device.Read(at, sector);
            var check = Superblock.Verify(sector);
            if (!check.IsOk)
                throw _mount.Health.Record(new XfsCorruptionException($"superblock of AG {agno}", at,
                    check + ": the label was not changed; run xfs_repair from Linux"));
            sectors.Add((at, sector));
        }
        return sectors;
    }
}

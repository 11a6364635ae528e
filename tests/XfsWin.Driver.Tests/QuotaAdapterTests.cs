using XfsWin.Driver.Semantics;
using XfsWin.TestSupport;
using XfsWin.Volume;
using A = XfsWin.Driver.Semantics.AccessRights;

namespace XfsWin.Driver.Tests;

/// <summary>
/// Quota limits through the Windows adapter, on a volume whose limits the kernel set (user-mode Linux 6.1 with XFS quota,
/// tests/XfsWin.Core.Tests/Volume/quota-guest.sh "limits": user 1000 may hold 1 MiB, 256 blocks): a WriteFile that would
/// pass a limit is refused whole with STATUS_DISK_QUOTA_EXCEEDED and writes nothing (NTFS's answer; Linux's write(2) ends
/// short instead), and giving a file away (SetSecurity's owner or group, the $LXUID/$LXGID EAs) is held to the new owner's
/// limits. xfs_repair -n, which checks every dquot's counts, judges the volume after.
/// </summary>
public sealed class QuotaAdapterTests : IDisposable
{
    private const int Block = 4096;
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-winquota.").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private static void KernelSetsLimits(string image)
    {
        string uml = Path.Combine(OracleImages.RepoRoot, "tests", "XfsWin.Core.Tests", "Journal", "uml.sh");
        string guest = Path.Combine(OracleImages.RepoRoot, "tests", "XfsWin.Core.Tests", "Volume", "quota-guest.sh");
        var r = Shell.Run("bash", [uml, "run", image, "--", guest, "limits", "uquota,gquota,pquota"], TimeSpan.FromMinutes(10),
            new Dictionary<string, string> { ["XFSWIN_CACHE"] = OracleImages.CacheRoot });
        Assert.True(r.ExitCode == 0, $"quota-guest.sh limits failed ({r.ExitCode}):\n{r.StandardOutput}\n{r.StandardError}");
    }

    [Fact]
    public void A_write_past_a_limit_is_refused_whole_and_a_give_away_is_held_to_the_new_owners_limits()
    {
        string image = Path.Combine(_dir, "limits.img");
        Shell.RunChecked("truncate", "-s", "300M", image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs", "6.1"), "-f", "-q", image);
        KernelSetsLimits(image);

        using (var volume = XfsVolume.Open(image, new VolumeOpenOptions { Writable = true }))
        {
            Assert.False(volume.IsReadOnly, string.Join("; ", volume.Info.ReadOnlyReasons));
            var options = new MountOptions { ReadWrite = true, IdMapping = IdMappingMode.Unix, CreatorUid = 1000, CreatorGid = 1000 };
            var fs = new XfsWindowsFileSystem(volume, options, options.CreateIdentityMap(Sid.Parse("S-1-5-21-1000-2000-3000-1001")), "X:");

            // User 1000 writes 200 blocks, then a WriteFile of 100 more: refused whole, the file as it was.
            Assert.Equal(NtStatus.Success, fs.Create(@"\w\f", 0, 0, 0, null, 0, default, out var f, out _));
            Assert.Equal(NtStatus.Success, fs.Write(f!, new byte[200 * Block], 0, false, false, out int n, out _));
            Assert.Equal(200 * Block, n);
            var more = new byte[100 * Block];
            Array.Fill(more, (byte)0x77);
            Assert.Equal(NtStatus.DiskQuotaExceeded, fs.Write(f!, more, 200 * Block, false, false, out n, out _));
            Assert.Equal(0, n);
            var a = volume.GetAttributes(f!.Inode);
            Assert.Equal(200L * Block, a.Size);
            Assert.Equal(200L * Block, a.AllocatedBytes);
            // Appending (WriteToEndOfFile) the same: refused whole. What fits still goes.
            Assert.Equal(NtStatus.DiskQuotaExceeded, fs.Write(f, more, 0, true, false, out n, out _));
            Assert.Equal(NtStatus.Success, fs.Write(f, more.AsSpan(0, 50 * Block), 0, true, false, out n, out _));
            Assert.Equal(50 * Block, n);
            Assert.Equal(250L * Block, volume.GetAttributes(f.Inode).Size);
            fs.Cleanup(f, f.Path, 0);
            fs.Close(f);

            // Root's 2 MiB file given to user 1000 (1 MiB hard limit): refused by SetSecurity and by $LXUID, owner unchanged.
            ulong w = volume.ResolvePath("/w");
            ulong big = volume.CreateNode(w, "big"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal(512 * Block, volume.Write(big, 0, new byte[512 * Block]));
            ulong small = volume.CreateNode(w, "small"u8, 0x81A4, 0, 0).Inode;
            Assert.Equal(Block, volume.Write(small, 0, new byte[Block]));
            Assert.Equal(NtStatus.Success, fs.Open(@"\w\big", 0, 0, out var bigFile, out _));
            var dacl = new List<Ace> { new(AceType.AccessAllowed, A.ReadData | A.WriteData, Sid.UnixUser(1000)) };
            Assert.Equal(NtStatus.DiskQuotaExceeded, fs.SetSecurity(bigFile!, XfsWindowsFileSystem.SecurityOwner,
                SecurityDescriptors.Serialize(Sid.UnixUser(1000), Sid.UnixGroup(0), dacl)));
            Assert.Equal(NtStatus.DiskQuotaExceeded, fs.SetEa(bigFile!, ReadWriteAdapterTests.Eas(("$LXUID", ReadWriteAdapterTests.U32(1000))), out _));
            Assert.Equal(0u, volume.GetAttributes(big).Uid);
            fs.Cleanup(bigFile!, bigFile!.Path, 0);
            fs.Close(bigFile);
            // A file that fits moves (the new owner charged its block), by SetSecurity and by $LXGID.
            Assert.Equal(NtStatus.Success, fs.Open(@"\w\small", 0, 0, out var smallFile, out _));
            Assert.Equal(NtStatus.Success, fs.SetSecurity(smallFile!, XfsWindowsFileSystem.SecurityOwner,
                SecurityDescriptors.Serialize(Sid.UnixUser(1000), Sid.UnixGroup(0), dacl)));
            Assert.Equal(NtStatus.Success, fs.SetEa(smallFile!, ReadWriteAdapterTests.Eas(("$LXGID", ReadWriteAdapterTests.U32(1000))), out _));
            Assert.Equal((1000u, 1000u), (volume.GetAttributes(small).Uid, volume.GetAttributes(small).Gid));
            fs.Cleanup(smallFile!, smallFile!.Path, 0);
            fs.Close(smallFile);
        }

        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
    }
}

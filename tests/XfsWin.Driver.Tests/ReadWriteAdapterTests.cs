using System.Buffers.Binary;
using System.Text;
using XfsWin.Driver.Semantics;
using XfsWin.TestSupport;
using XfsWin.Volume;
using A = XfsWin.Driver.Semantics.AccessRights;

namespace XfsWin.Driver.Tests;

/// <summary>
/// The adapter on a read-write volume, called as WinFsp calls it: creates, writes (to EOF, constrained paging I/O),
/// overwrite and supersede, sizes, times and read-only, renames, delete-on-close and POSIX delete, reparse points,
/// security descriptors and EAs. Then the volume is closed cleanly, the kernel mounts it and must show exactly the
/// expected tree, and xfs_repair -n (6.1 and 6.13) must find nothing.
/// </summary>
public sealed class ReadWriteAdapterTests : IDisposable
{
    private static readonly Sid MountingUser = Sid.Parse("S-1-5-21-1000-2000-3000-1001");
    private const uint CreatorUid = 1234, CreatorGid = 2345;
    private readonly string _dir = Directory.CreateTempSubdirectory("xfswin-winrw.").FullName;
    private readonly string _image;

    public ReadWriteAdapterTests()
    {
        _image = Path.Combine(_dir, "rw.img");
        Shell.RunChecked("truncate", "-s", "320M", _image);
        Shell.RunChecked(OracleImages.Tool("mkfs.xfs"), "-q", "-f", "-L", "WINRW", _image);
        using var mount = LoopMount.Mount(_image, readOnly: false);
        string m = mount.MountPoint;
        File.WriteAllText(Path.Combine(m, "keep.txt"), "kernel data\n");
        File.WriteAllText(Path.Combine(m, "old.txt"), "old contents\n");
        File.WriteAllText(Path.Combine(m, "victim.txt"), "victim\n");
        File.WriteAllText(Path.Combine(m, "held.txt"), "held\n");
        Directory.CreateDirectory(Path.Combine(m, "tree"));
        File.WriteAllText(Path.Combine(m, "tree", "a.txt"), "in tree\n");
        Shell.RunChecked("chmod", "644", Path.Combine(m, "old.txt"));
        Shell.RunChecked("sync");
    }

    public void Dispose()
    {
        try { Directory.Delete(_dir, recursive: true); }
        catch (IOException) { /* a failed test may leave the mount point busy; the temp dir goes with the machine */ }
    }

    private static XfsWindowsFileSystem Adapter(XfsVolume volume, bool caseInsensitive = false)
    {
        var options = new MountOptions
        {
            ReadWrite = true, IdMapping = IdMappingMode.Unix, CaseInsensitive = caseInsensitive,
            CreatorUid = CreatorUid, CreatorGid = CreatorGid,
        };
        return new XfsWindowsFileSystem(volume, options, options.CreateIdentityMap(MountingUser), "X:");
    }

    private static OpenFile Open(XfsWindowsFileSystem fs, string path)
    {
        int status = fs.Open(path, 0, 0, out var file, out _);
        Assert.True(status == NtStatus.Success, $"open {path}: {NtStatus.Describe(status)}");
        return file!;
    }

    private static OpenFile Create(XfsWindowsFileSystem fs, string path, bool directory = false, byte[]? sd = null, uint attributes = 0)
    {
        int status = fs.Create(path, directory ? XfsWindowsFileSystem.FileDirectoryFile : 0, 0, attributes, sd, 0, default, out var file, out _);
        Assert.True(status == NtStatus.Success, $"create {path}: {NtStatus.Describe(status)}");
        return file!;
    }

    private static void Close(XfsWindowsFileSystem fs, OpenFile file, bool delete = false)
    {
        fs.Cleanup(file, file.Path, delete ? XfsWindowsFileSystem.CleanupDelete : 0);
        fs.Close(file);
    }

    private static void Write(XfsWindowsFileSystem fs, OpenFile file, string text, ulong offset = 0, bool toEnd = false)
    {
        var bytes = Encoding.UTF8.GetBytes(text);
        Assert.Equal(NtStatus.Success, fs.Write(file, bytes, offset, toEnd, false, out int n, out var info));
        Assert.Equal(bytes.Length, n);
        Assert.Equal(info.FileSize, (ulong)fs.Volume.GetAttributes(file.Inode).Size);
    }

    private static byte[] Symlink(string substitute, bool relative)
    {
        var buffer = new byte[ReparseData.SymlinkSize(substitute, substitute)];
        Assert.Equal(buffer.Length, ReparseData.WriteSymlink(buffer, substitute, substitute, relative));
        return buffer;
    }

    private static byte[] Empty(uint tag)
    {
        var buffer = new byte[ReparseData.HeaderSize];
        ReparseData.WriteEmpty(buffer, tag);
        return buffer;
    }

    internal static byte[] Eas(params (string Name, byte[] Value)[] entries)
    {
        var buffer = new byte[4096];
        int used = 0;
        foreach (var (name, value) in entries) Assert.True(ExtendedAttributes.Append(buffer, ref used, Encoding.ASCII.GetBytes(name), value));
        ExtendedAttributes.Finish(buffer, used);
        return buffer[..used];
    }

    internal static byte[] U32(uint v)
    {
        var b = new byte[4];
        BinaryPrimitives.WriteUInt32LittleEndian(b, v);
        return b;
    }

    /// <summary>The user.* xattrs of an inode as (name, value) text, by name.</summary>
    private static (string, string)[] UserXattrs(XfsVolume volume, ulong inode) =>
        volume.ListXattrs(inode).Where(x => x.Namespace == XfsWin.Attributes.XattrNamespace.User)
            .Select(x => (Encoding.ASCII.GetString(x.Name), volume.TryGetXattr(inode, x.Namespace, x.Name, out var v) ? Encoding.UTF8.GetString(v) : "?"))
            .OrderBy(p => p.Item1, StringComparer.Ordinal).ToArray();

    private static ulong FileTime(DateTime utc) => (ulong)utc.ToFileTimeUtc();

    private static readonly DateTime WriteTime = new(2020, 1, 2, 3, 4, 5, DateTimeKind.Utc);
    private static readonly DateTime AccessTime = new(2021, 6, 7, 8, 9, 10, DateTimeKind.Utc);

    /// <summary>
    /// Files and directories created from Windows in a directory with a default POSIX ACL get what the kernel gives a
    /// Linux program creating them with the same mode: the mode the default ACL allows, the access ACL, and for a
    /// directory the default ACL too.
    /// </summary>
    [Fact]
    public void CreatesInADirectoryWithADefaultAclInheritItAsOnLinux()
    {
        using (var mount = LoopMount.Mount(_image, readOnly: false))
        {
            string shared = Path.Combine(mount.MountPoint, "shared");
            Directory.CreateDirectory(shared);
            Shell.RunChecked("setfacl", "-d", "-m", "u::rwx,u:1000:rw-,g::r-x,g:100:rwx,m::rwx,o::---", shared);
            // What the kernel gives a file created with 0644 and a directory with 0755 (the Windows defaults).
            Shell.RunChecked("python3", "-c", "import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)); os.mkdir(sys.argv[2], 0o755)",
                Path.Combine(shared, "by-linux.txt"), Path.Combine(shared, "by-linux-dir"));
        }
        using (var volume = XfsVolume.Open(_image, new VolumeOpenOptions { Writable = true }))
        {
            var fs = Adapter(volume);
            Close(fs, Create(fs, @"\shared\by-windows.txt"));
            Close(fs, Create(fs, @"\shared\by-windows-dir", directory: true));
        }
        using (var mount = LoopMount.Mount(_image, readOnly: true))
        {
            string Acl(string rel)
            {
                string path = Path.Combine(mount.MountPoint, "shared", rel);
                return Shell.RunChecked("stat", "-c", "%a", path).StandardOutput.Trim() + " " +
                       string.Join(",", Shell.RunChecked("getfacl", "-n", "-p", "--omit-header", path).StandardOutput.Split('\n', StringSplitOptions.RemoveEmptyEntries));
            }
            string file = Acl("by-linux.txt"), dir = Acl("by-linux-dir");
            Assert.Contains("user:1000:rw-", file);
            Assert.Contains("default:group:100:rwx", dir);
            Assert.Equal(file, Acl("by-windows.txt"));
            Assert.Equal(dir, Acl("by-windows-dir"));
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", _image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
    }

    /// <summary>
    /// A directory's default POSIX ACL shows in its security descriptor as inherit-only ACEs (CREATOR OWNER, CREATOR
    /// GROUP, named SIDs, Everyone), and SetSecurity turns the ACEs children inherit back into a default ACL: the
    /// descriptor of a directory Linux gave a default ACL, set on a plain directory, gives it the same default ACL
    /// (getfacl on the kernel's mount); an ACE for this folder, subfolders and files becomes an access and a default
    /// entry; a DACL without inheritable ACEs removes the default ACL. Files created there from Linux afterwards get
    /// what the default ACL says, and xfs_repair finds nothing.
    /// </summary>
    [Fact]
    public void DefaultAclsAreInheritableAcesBothWays()
    {
        const string Default = "u::rwx,u:1000:rw-,g::r-x,g:100:rwx,m::rwx,o::---";
        using (var mount = LoopMount.Mount(_image, readOnly: false))
        {
            foreach (var dir in new[] { "linux-default", "plain", "edited", "cleared" })
                Directory.CreateDirectory(Path.Combine(mount.MountPoint, dir));
            Shell.RunChecked("chmod", "750", Path.Combine(mount.MountPoint, "edited"));
            Shell.RunChecked("setfacl", "-d", "-m", Default, Path.Combine(mount.MountPoint, "linux-default"));
            Shell.RunChecked("setfacl", "-d", "-m", Default, Path.Combine(mount.MountPoint, "cleared"));
        }
        using (var volume = XfsVolume.Open(_image, new VolumeOpenOptions { Writable = true }))
        {
            var fs = Adapter(volume);
            var linux = Open(fs, @"\linux-default");
            Assert.Equal(NtStatus.Success, fs.GetSecurity(linux, out var shown));
            var dacl = SecurityDescriptors.Parse(shown).Dacl!;
            var inheritable = dacl.Where(ace => ace.Flags == SecurityDescriptors.InheritableFlags).ToList();
            const A Rwx = A.ReadData | A.WriteData | A.Execute;
            Assert.Equal(Rwx, inheritable.Single(ace => ace.Sid == Sid.CreatorOwner && ace.Type == AceType.AccessAllowed).Mask & Rwx);
            Assert.Equal(A.ReadData | A.WriteData, inheritable.Single(ace => ace.Sid == Sid.UnixUser(1000) && ace.Type == AceType.AccessAllowed).Mask & Rwx);
            // Named user 1000 is refused the execute bit a group entry would otherwise give it (POSIX picks one entry).
            Assert.Equal(A.Execute, inheritable.Single(ace => ace.Sid == Sid.UnixUser(1000) && ace.Type == AceType.AccessDenied).Mask & Rwx);
            Assert.Equal(A.ReadData | A.Execute, inheritable.Single(ace => ace.Sid == Sid.CreatorGroup && ace.Type == AceType.AccessAllowed).Mask & Rwx);
            Assert.Equal(Rwx, inheritable.Single(ace => ace.Sid == Sid.UnixGroup(100) && ace.Type == AceType.AccessAllowed).Mask & Rwx);
            Assert.Equal((A)0, inheritable.Single(ace => ace.Sid == Sid.World).Mask & Rwx);
            // The directory's own access is its mode alone (no access ACL): no other ACE names user 1000 or group 100.
            Assert.DoesNotContain(dacl, ace => ace.Flags == 0 && (ace.Sid == Sid.UnixUser(1000) || ace.Sid == Sid.UnixGroup(100)));
            Close(fs, linux);

            // The whole descriptor set on another directory: the same default ACL.
            var plain = Open(fs, @"\plain");
            Assert.Equal(NtStatus.Success, fs.GetSecurity(plain, out var plainSd));
            var plainOwn = SecurityDescriptors.Parse(plainSd);
            var copied = plainOwn.Dacl!.Concat(inheritable).ToList();
            Assert.Equal(NtStatus.Success, fs.SetSecurity(plain, XfsWindowsFileSystem.SecurityDacl, SecurityDescriptors.Serialize(plainOwn.Owner!, plainOwn.Group!, copied)));
            Close(fs, plain);

            // What Explorer writes for "user 1000: read and execute, this folder, subfolders and files" and "CREATOR
            // OWNER: full control, subfolders and files only" on a 0750 directory.
            var edited = Open(fs, @"\edited");
            Assert.Equal(NtStatus.Success, fs.GetSecurity(edited, out var editedSd));
            var editedOwn = SecurityDescriptors.Parse(editedSd);
            var editedDacl = editedOwn.Dacl!.ToList();
            editedDacl.Add(new Ace(AceType.AccessAllowed, A.ReadData | A.Execute | A.ReadAttributes | A.Synchronize, Sid.UnixUser(1000),
                SecurityDescriptors.ObjectInheritAce | SecurityDescriptors.ContainerInheritAce));
            editedDacl.Add(new Ace(AceType.AccessAllowed, (A)0x1F01FF, Sid.CreatorOwner, SecurityDescriptors.InheritableFlags));
            Assert.Equal(NtStatus.Success, fs.SetSecurity(edited, XfsWindowsFileSystem.SecurityDacl, SecurityDescriptors.Serialize(editedOwn.Owner!, editedOwn.Group!, editedDacl)));
            Close(fs, edited);

            // The directory's own ACEs only: its default ACL goes.
            var cleared = Open(fs, @"\cleared");
            Assert.Equal(NtStatus.Success, fs.GetSecurity(cleared, out var clearedSd));
            var clearedOwn = SecurityDescriptors.Parse(clearedSd);
            Assert.Contains(clearedOwn.Dacl!, ace => ace.Flags == SecurityDescriptors.InheritableFlags);
            var own = clearedOwn.Dacl!.Where(ace => ace.Flags == 0).ToList();
            Assert.Equal(NtStatus.Success, fs.SetSecurity(cleared, XfsWindowsFileSystem.SecurityDacl, SecurityDescriptors.Serialize(clearedOwn.Owner!, clearedOwn.Group!, own)));
            Assert.Equal(NtStatus.Success, fs.GetSecurity(cleared, out var afterClear));
            Assert.DoesNotContain(SecurityDescriptors.Parse(afterClear).Dacl!, ace => (ace.Flags & SecurityDescriptors.InheritOnlyAce) != 0);
            Close(fs, cleared);
        }
        using (var mount = LoopMount.Mount(_image, readOnly: false))
        {
            string Facl(string rel, params string[] options) =>
                string.Join(",", Shell.RunChecked("getfacl", [.. options, "-n", "-p", "--omit-header", Path.Combine(mount.MountPoint, rel)]).StandardOutput
                    .Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(line => line.Split('\t')[0]));
            string linuxDefault = Facl("linux-default", "-d");
            Assert.Equal("user::rwx,user:1000:rw-,group::r-x,group:100:rwx,mask::rwx,other::---", linuxDefault);
            Assert.Equal(linuxDefault, Facl("plain", "-d"));
            Assert.Equal("user::rwx,user:1000:r-x,group::r-x,mask::r-x,other::---", Facl("edited", "-a"));
            Assert.Equal("user::rwx,user:1000:r-x,group::r-x,mask::r-x,other::---", Facl("edited", "-d"));
            Assert.Equal("", Facl("cleared", "-d"));
            // The kernel applies what we stored: a file made in "plain" gets the default ACL's entries.
            Shell.RunChecked("python3", "-c", "import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o666))", Path.Combine(mount.MountPoint, "plain", "new.txt"));
            Assert.Equal("user::rw-,user:1000:rw-,group::r-x,group:100:rwx,mask::rw-,other::---", Facl(Path.Combine("plain", "new.txt"), "-a"));
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair"), "-n", _image);
        Assert.True(repair.ExitCode == 0, repair.StandardOutput + repair.StandardError);
    }

    [Fact]
    public void WindowsChangesAreWhatTheKernelAndXfsRepairSee()
    {
        var pattern = new byte[200_000];
        for (int i = 0; i < pattern.Length; i++) pattern[i] = (byte)(i * 13 + 5);

        using (var volume = XfsVolume.Open(_image, new VolumeOpenOptions { Writable = true }))
        {
            var fs = Adapter(volume);
            Assert.Equal(NtStatus.Success, fs.GetVolumeInfo(out var before));

            // A directory whose descriptor names the mounting user, a Unix group and rwxr-xr-x.
            var dacl = new List<Ace>
            {
                new(AceType.AccessAllowed, (A)0x1F01FF, MountingUser),
                new(AceType.AccessAllowed, A.ReadData | A.Execute | A.ReadAttributes | A.Synchronize, Sid.UnixGroup(100)),
                new(AceType.AccessAllowed, A.ReadData | A.Execute | A.ReadAttributes | A.Synchronize, Sid.World),
            };
            var docs = Create(fs, @"\docs", directory: true, sd: SecurityDescriptors.Serialize(MountingUser, Sid.UnixGroup(100), dacl));
            Assert.True(docs.Information.IsDirectory);
            Close(fs, docs);
            // A token's default DACL (owner, SYSTEM and Administrators with full control): the owner alone, execute kept.
            var tokenDacl = new List<Ace>
            {
                new(AceType.AccessAllowed, (A)0x1F01FF, MountingUser),
                new(AceType.AccessAllowed, (A)0x1F01FF, Sid.LocalSystem),
                new(AceType.AccessAllowed, (A)0x1F01FF, Sid.Administrators),
            };
            Close(fs, Create(fs, @"\docs\tool.exe", sd: SecurityDescriptors.Serialize(MountingUser, Sid.UnixGroup(100), tokenDacl)));

            // Write, write to end of file, constrained (paging) writes that never move EOF.
            var a = Create(fs, @"\docs\a.txt");
            Write(fs, a, "hello ");
            Write(fs, a, "world", ulong.MaxValue, toEnd: true);
            Assert.Equal(NtStatus.Success, fs.Write(a, "WORLD!!!!"u8, 6, false, true, out int cut, out var afterCut));
            Assert.Equal(5, cut);
            Assert.Equal(11ul, afterCut.FileSize);
            Assert.Equal(NtStatus.Success, fs.Write(a, "x"u8, 100, false, true, out int none, out _));
            Assert.Equal(0, none);
            Assert.Equal(NtStatus.Success, fs.SetBasicInfo(a, (uint)WindowsFileAttributes.ReadOnly, 0, FileTime(AccessTime), FileTime(WriteTime), 0, out var basic));
            Assert.Equal((uint)WindowsFileAttributes.ReadOnly, basic.FileAttributes & (uint)WindowsFileAttributes.ReadOnly);
            Assert.Equal(FileTime(WriteTime), basic.LastWriteTime);
            Close(fs, a);

            // WinFsp writes at most 64 KiB at a time; then the size goes down, and allocation is set past EOF.
            var big = Create(fs, @"\docs\big.bin");
            for (int off = 0; off < pattern.Length; off += 65536 - 7)
            {
                int len = Math.Min(65536 - 7, pattern.Length - off);
                Assert.Equal(NtStatus.Success, fs.Write(big, pattern.AsSpan(off, len), (ulong)off, false, false, out int n, out _));
                Assert.Equal(len, n);
            }
            Assert.Equal(NtStatus.Success, fs.SetFileSize(big, 150_000, false, out var sized));
            Assert.Equal(150_000ul, sized.FileSize);
            Assert.Equal(NtStatus.Success, fs.SetFileSize(big, 400_000, true, out var allocated));
            Assert.Equal(150_000ul, allocated.FileSize);
            Assert.True(allocated.AllocationSize >= 400_000, $"allocation {allocated.AllocationSize}");
            Assert.Equal(NtStatus.Success, fs.SetFileSize(big, 100_000, true, out var cutByAllocation));
            Assert.Equal(100_000ul, cutByAllocation.FileSize);
            var readBack = new byte[100_000];
            Assert.Equal(NtStatus.Success, fs.Read(big, readBack, 0, out int got));
            Assert.Equal(100_000, got);
            Assert.Equal(pattern.AsSpan(0, 100_000).ToArray(), readBack);
            Close(fs, big);

            // Overwrite (FILE_OVERWRITE) keeps attributes; supersede with READONLY replaces them.
            var keep = Open(fs, @"\keep.txt");
            Assert.Equal(NtStatus.Success, fs.Overwrite(keep, 0, false, 0, default, out var emptied));
            Assert.Equal(0ul, emptied.FileSize);
            Write(fs, keep, "overwritten\n");
            Close(fs, keep);
            var old = Open(fs, @"\old.txt");
            Assert.Equal(NtStatus.Success, fs.Overwrite(old, (uint)WindowsFileAttributes.ReadOnly, true, 0, default, out var superseded));
            Assert.NotEqual(0u, superseded.FileAttributes & (uint)WindowsFileAttributes.ReadOnly);
            Write(fs, old, "superseded\n");
            // Clearing read-only gives the owner write back (0444 -> 0644).
            Assert.Equal(NtStatus.Success, fs.SetBasicInfo(old, (uint)WindowsFileAttributes.Normal, 0, 0, 0, 0, out var writable));
            Assert.Equal(0u, writable.FileAttributes & (uint)WindowsFileAttributes.ReadOnly);
            Close(fs, old);

            // Renames: plain, refused without replace, replacing a file, a directory into another.
            var ren = Open(fs, @"\docs\a.txt");
            Assert.Equal(NtStatus.Success, fs.Rename(ren, @"\docs\a.txt", @"\docs\b.txt", false));
            Close(fs, ren);
            var victim = Open(fs, @"\victim.txt");
            Assert.Equal(NtStatus.ObjectNameCollision, fs.Rename(victim, @"\victim.txt", @"\keep.txt", false));
            Assert.Equal(NtStatus.AccessDenied, fs.Rename(victim, @"\victim.txt", @"\docs", true));
            var replacedOpen = Open(fs, @"\keep.txt");
            Assert.Equal(NtStatus.Success, fs.Rename(victim, @"\victim.txt", @"\keep.txt", true));
            // POSIX rename: the replaced file stays readable through the open that had it.
            var stillThere = new byte[64];
            Assert.Equal(NtStatus.Success, fs.Read(replacedOpen, stillThere, 0, out int replacedLength));
            Assert.Equal("overwritten\n", Encoding.UTF8.GetString(stillThere, 0, replacedLength));
            Close(fs, replacedOpen);
            Close(fs, victim);
            var tree = Open(fs, @"\tree");
            Assert.Equal(NtStatus.Success, fs.Rename(tree, @"\tree", @"\docs\tree", false));
            Close(fs, tree);

            // Delete-on-close; a non-empty directory refuses; POSIX delete while another open reads and writes.
            var temp = Create(fs, @"\temp.txt");
            Write(fs, temp, "temporary");
            Assert.Equal(NtStatus.Success, fs.SetDelete(temp, @"\temp.txt", true));
            Close(fs, temp, delete: true);
            Assert.Equal(NtStatus.ObjectNameNotFound, fs.Open(@"\temp.txt", 0, 0, out _, out _));
            var docsAgain = Open(fs, @"\docs");
            Assert.Equal(NtStatus.DirectoryNotEmpty, fs.SetDelete(docsAgain, @"\docs", true));
            Close(fs, docsAgain);
            var h1 = Open(fs, @"\held.txt");
            var h2 = Open(fs, @"\held.txt");
            Assert.Equal(NtStatus.Success, fs.SetDelete(h1, @"\held.txt", true));
            Close(fs, h1, delete: true);
            Assert.Equal(NtStatus.ObjectNameNotFound, fs.Open(@"\held.txt", 0, 0, out _, out _));
            Write(fs, h2, "still open\n", 0);
            var held = new byte[64];
            Assert.Equal(NtStatus.Success, fs.Read(h2, held, 0, out int heldLength));
            Assert.Equal("still open\n", Encoding.UTF8.GetString(held, 0, heldLength));
            Close(fs, h2);

            // Symlinks as CreateSymbolicLink makes them (a file or directory, then the reparse point), LX special files.
            var link = Create(fs, @"\link");
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(link, @"\link", Symlink(@"docs\b.txt", relative: true)));
            Assert.Equal(ReparseTags.Symlink, link.Information.ReparseTag);
            Close(fs, link);
            var dirLink = Create(fs, @"\dirlink", directory: true);
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(dirLink, @"\dirlink", Symlink("docs", relative: true)));
            Assert.True(dirLink.Information.IsDirectory);
            Close(fs, dirLink);
            var abs = Create(fs, @"\docs\abs");
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(abs, @"\docs\abs", Symlink(@"\??\X:\docs\big.bin", relative: false)));
            Close(fs, abs);
            var rooted = Create(fs, @"\rooted");
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(rooted, @"\rooted", Symlink(@"\docs\b.txt", relative: true)));
            Close(fs, rooted);
            var outside = Create(fs, @"\outside");
            Assert.Equal(NtStatus.IoReparseDataInvalid, fs.SetReparsePoint(outside, @"\outside", Symlink(@"\??\C:\Windows", relative: false)));
            Close(fs, outside, delete: true);
            var unlinkMe = Create(fs, @"\unlinkme");
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(unlinkMe, @"\unlinkme", Symlink("keep.txt", relative: true)));
            Assert.Equal(NtStatus.Success, fs.DeleteReparsePoint(unlinkMe, @"\unlinkme", Empty(ReparseTags.Symlink)));
            Assert.Equal(0u, unlinkMe.Information.ReparseTag);
            Close(fs, unlinkMe);
            var fifo = Create(fs, @"\fifo");
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(fifo, @"\fifo", Empty(ReparseTags.LxFifo)));
            Close(fs, fifo);
            var chr = Create(fs, @"\chr");
            var dev = new byte[8];
            BinaryPrimitives.WriteUInt32LittleEndian(dev, 1);
            BinaryPrimitives.WriteUInt32LittleEndian(dev.AsSpan(4), 3);
            Assert.Equal(NtStatus.Success, fs.SetEa(chr, Eas(("$LXMOD", U32(0x21A0)), ("$LXDEV", dev)), out _));
            Assert.Equal(NtStatus.Success, fs.SetReparsePoint(chr, @"\chr", Empty(ReparseTags.LxCharDevice)));
            Assert.Equal(ReparseTags.LxCharDevice, chr.Information.ReparseTag);
            Close(fs, chr);

            // SetSecurity: a named user becomes a POSIX ACL (trusted SGI_ACL_FILE).
            var b = Open(fs, @"\docs\b.txt");
            var namedDacl = new List<Ace>
            {
                new(AceType.AccessAllowed, A.ReadData | A.WriteData, Sid.UnixUser(CreatorUid)),
                new(AceType.AccessAllowed, A.ReadData, Sid.UnixUser(555)),
                new(AceType.AccessAllowed, A.ReadData, Sid.UnixGroup(CreatorGid)),
            };
            Assert.Equal(NtStatus.Success, fs.SetSecurity(b, XfsWindowsFileSystem.SecurityDacl,
                SecurityDescriptors.Serialize(Sid.UnixUser(CreatorUid), Sid.UnixGroup(CreatorGid), namedDacl)));
            Assert.True(volume.TryGetXattr(b.Inode, XfsWin.Attributes.XattrNamespace.Trusted, "SGI_ACL_FILE"u8, out _));
            // Owner and group SIDs to uid/gid, the DACL to rw-r----- (an ACL set above goes again).
            var bDacl = new List<Ace>
            {
                new(AceType.AccessAllowed, A.ReadData | A.WriteData | A.AppendData, Sid.UnixUser(4321)),
                new(AceType.AccessAllowed, A.ReadData, Sid.UnixGroup(99)),
                new(AceType.AccessAllowed, A.ReadAttributes, Sid.World),
            };
            Assert.Equal(NtStatus.Success, fs.SetSecurity(b, XfsWindowsFileSystem.SecurityOwner | XfsWindowsFileSystem.SecurityGroup | XfsWindowsFileSystem.SecurityDacl,
                SecurityDescriptors.Serialize(Sid.UnixUser(4321), Sid.UnixGroup(99), bDacl)));
            Assert.Equal(NtStatus.InvalidOwner, fs.SetSecurity(b, XfsWindowsFileSystem.SecurityOwner,
                SecurityDescriptors.Serialize(Sid.Parse("S-1-5-21-9-9-9-500"), Sid.UnixGroup(99), bDacl)));
            Assert.Equal(NtStatus.Success, fs.GetSecurity(b, out var shown));
            var parsed = SecurityDescriptors.Parse(shown);
            Assert.Equal(Sid.UnixUser(4321), parsed.Owner);
            Assert.Equal(Sid.UnixGroup(99), parsed.Group);
            Close(fs, b);

            // EAs at create become user.* xattrs; a refused name creates nothing.
            Assert.Equal(NtStatus.InvalidEaName, fs.Create(@"\badea", 0, 0, 0, default, 0, Eas(("ok", "1"u8.ToArray()), ("bad*name", "2"u8.ToArray())), out _, out _));
            Assert.Equal(NtStatus.ObjectNameNotFound, fs.Open(@"\badea", 0, 0, out _, out _));
            Assert.Equal(NtStatus.Success, fs.Create(@"\withea", 0, 0, 0, default, 0,
                Eas(("colour", "red"u8.ToArray()), ("Shape", "round"u8.ToArray()), ("Gone", "x"u8.ToArray())), out var withEa, out var withEaInfo));
            Assert.Equal(ExtendedAttributes.PackedSize(6, 3) + ExtendedAttributes.PackedSize(5, 5) + ExtendedAttributes.PackedSize(4, 1), withEaInfo.EaSize);
            // Listed in the order they were set (NtQueryEaFile's EA indexes count on it).
            var created = new byte[4096];
            Assert.Equal(NtStatus.Success, fs.GetEa(withEa!, created, out int createdBytes));
            Assert.Equal(["colour", "Shape", "Gone", "$LXUID", "$LXGID", "$LXMOD"], ExtendedAttributes.Parse(created.AsSpan(0, createdBytes)).Select(e => e.Name));
            // SetEa: EA names are case-insensitive (the new spelling replaces the old), an empty value removes one,
            // a refused name changes nothing.
            Assert.Equal(NtStatus.Success, fs.SetEa(withEa!, Eas(("COLOUR", "blue"u8.ToArray()), ("gone", []), ("size", "9"u8.ToArray())), out var setInfo));
            Assert.Equal(NtStatus.InvalidEaName, fs.SetEa(withEa!, Eas(("size", "10"u8.ToArray()), ("a:b", "1"u8.ToArray())), out _));
            Assert.Equal(new[] { ("COLOUR", "blue"), ("Shape", "round"), ("size", "9") }, UserXattrs(volume, withEa!.Inode));
            Assert.Equal(ExtendedAttributes.PackedSize(6, 4) + ExtendedAttributes.PackedSize(5, 5) + ExtendedAttributes.PackedSize(4, 1), setInfo.EaSize);
            var listed = new byte[4096];
            Assert.Equal(NtStatus.Success, fs.GetEa(withEa!, listed, out int eaBytes));
            Assert.Equal(new[] { "$LXGID", "$LXMOD", "$LXUID", "COLOUR", "Shape", "size" },
                ExtendedAttributes.Parse(listed.AsSpan(0, eaBytes)).Select(e => e.Name).Order(StringComparer.Ordinal));
            Write(fs, withEa!, "data");
            Close(fs, withEa!);
            // EAs on a directory.
            var eaDir = Open(fs, @"\docs");
            Assert.Equal(NtStatus.Success, fs.SetEa(eaDir, Eas(("Aname1", "first"u8.ToArray())), out var dirInfo));
            Assert.Equal(ExtendedAttributes.PackedSize(6, 5), dirInfo.EaSize);
            Close(fs, eaDir);
            // Overwrite with EAs replaces the EAs Windows sees; other xattrs (here a Linux-only name) stay.
            var eaFile = Open(fs, @"\withea");
            volume.SetXattr(eaFile.Inode, XfsWin.Attributes.XattrNamespace.User, "linux:only"u8, "kept"u8);
            Assert.Equal(NtStatus.Success, fs.Overwrite(eaFile, 0, false, 0, Eas(("shape", "square"u8.ToArray())), out var overwritten));
            Assert.Equal(0ul, overwritten.FileSize);
            Assert.Equal(ExtendedAttributes.PackedSize(5, 6), overwritten.EaSize);
            Assert.Equal(new[] { ("linux:only", "kept"), ("shape", "square") }, UserXattrs(volume, eaFile.Inode));
            Close(fs, eaFile);

            // The label: at most 12 UTF-8 bytes, online; GetVolumeInfo shows it.
            Assert.Equal(NtStatus.Success, fs.SetVolumeLabel("TWELVE_BYTES", out var twelve));
            Assert.Equal("TWELVE_BYTES", twelve.Label);
            Assert.Equal(NtStatus.InvalidVolumeLabel, fs.SetVolumeLabel("THIRTEEN_CHRS", out _));
            Assert.Equal(NtStatus.InvalidVolumeLabel, fs.SetVolumeLabel("ééééééé", out _));
            Assert.Equal(NtStatus.InvalidVolumeLabel, fs.SetVolumeLabel("tab\there", out _));
            Assert.Equal(NtStatus.Success, fs.SetVolumeLabel("Données", out var relabeled));
            Assert.Equal("Données", relabeled.Label);
            Assert.Equal(NtStatus.Success, fs.GetVolumeInfo(out var relabeledInfo));
            Assert.Equal("Données", relabeledInfo.Label);
            Assert.Equal("Données", volume.Info.Label);

            // Names XFS cannot hold, streams, collisions (also in another case on a case-insensitive mount).
            Assert.Equal(NtStatus.ObjectNameInvalid, fs.Create("\\bad\uD800x", 0, 0, 0, default, 0, default, out _, out _));
            Assert.Equal(NtStatus.ObjectNameInvalid, fs.Create(@"\docs\b.txt:stream", 0, 0, 0, default, 0, default, out _, out _));
            Assert.Equal(NtStatus.ObjectNameInvalid, fs.Create("\\" + new string('é', 200), 0, 0, 0, default, 0, default, out _, out _));
            Assert.Equal(NtStatus.ObjectNameCollision, fs.Create(@"\docs", XfsWindowsFileSystem.FileDirectoryFile, 0, 0, default, 0, default, out _, out _));
            Assert.Equal(NtStatus.ObjectPathNotFound, fs.Create(@"\nodir\x", 0, 0, 0, default, 0, default, out _, out _));
            Assert.Equal(NtStatus.ObjectNameCollision, Adapter(volume, caseInsensitive: true).Create(@"\DOCS\B.TXT", 0, 0, 0, default, 0, default, out _, out _));

            Assert.Equal(NtStatus.Success, fs.Flush(null, out _));
            Assert.Equal(NtStatus.Success, fs.GetVolumeInfo(out var after));
            var stats = volume.GetStats();
            Assert.Equal((ulong)stats.BlockSize * stats.FreeBlocks, after.FreeSize);
            Assert.True(after.FreeSize < before.FreeSize, $"free {before.FreeSize} -> {after.FreeSize}");
        }

        // The kernel's view after a clean unmount.
        using (var mount = LoopMount.Mount(_image, readOnly: true))
        {
            string m = mount.MountPoint;
            var names = new List<string>();
            void Walk(string dir)
            {
                foreach (var entry in new DirectoryInfo(dir).EnumerateFileSystemInfos("*", SearchOption.TopDirectoryOnly))
                {
                    names.Add(Path.GetRelativePath(m, entry.FullName));
                    if (entry is DirectoryInfo && entry.LinkTarget is null) Walk(entry.FullName);
                }
            }
            Walk(m);
            names.Sort(StringComparer.Ordinal);
            var expected = new List<string>
            {
                "chr", "dirlink", "docs", "docs/abs", "docs/b.txt", "docs/big.bin", "docs/tool.exe", "docs/tree", "docs/tree/a.txt",
                "fifo", "keep.txt", "link", "old.txt", "rooted", "unlinkme", "withea",
            };
            Assert.Equal(expected.Order(StringComparer.Ordinal), names);

            string Stat(string rel, string format) => Shell.RunChecked("stat", "-c", format, Path.Combine(m, rel)).StandardOutput.Trim();
            Assert.Equal($"directory 755 {CreatorUid} 100", Stat("docs", "%F %a %u %g"));
            Assert.Contains("user.Aname1=\"first\"", Shell.RunChecked("getfattr", "--absolute-names", "-d", Path.Combine(m, "docs")).StandardOutput);
            Assert.Equal($"regular file 640 4321 99 11", Stat("docs/b.txt", "%F %a %u %g %s"));
            Assert.Equal("hello WORLD", File.ReadAllText(Path.Combine(m, "docs/b.txt")));
            Assert.Equal($"{new DateTimeOffset(WriteTime).ToUnixTimeSeconds()} {new DateTimeOffset(AccessTime).ToUnixTimeSeconds()}", Stat("docs/b.txt", "%Y %X"));
            Assert.Equal($"regular file 644 {CreatorUid} {CreatorGid} 100000", Stat("docs/big.bin", "%F %a %u %g %s"));
            Assert.Equal($"regular empty file 700 {CreatorUid} 100", Stat("docs/tool.exe", "%F %a %u %g"));
            Assert.Equal(pattern.AsSpan(0, 100_000).ToArray(), File.ReadAllBytes(Path.Combine(m, "docs/big.bin")));
            Assert.Equal("victim\n", File.ReadAllText(Path.Combine(m, "keep.txt")));
            Assert.Equal("superseded\n", File.ReadAllText(Path.Combine(m, "old.txt")));
            Assert.Equal("644", Stat("old.txt", "%a"));
            Assert.Equal("in tree\n", File.ReadAllText(Path.Combine(m, "docs/tree/a.txt")));
            Assert.Equal("symbolic link", Stat("link", "%F"));
            Assert.Equal("docs/b.txt", new FileInfo(Path.Combine(m, "link")).LinkTarget);
            Assert.Equal("docs", new FileInfo(Path.Combine(m, "dirlink")).LinkTarget);
            Assert.Equal("/docs/big.bin", new FileInfo(Path.Combine(m, "docs/abs")).LinkTarget);
            Assert.Equal("/docs/b.txt", new FileInfo(Path.Combine(m, "rooted")).LinkTarget);
            Assert.Equal($"regular empty file 0 {CreatorUid} {CreatorGid}", Stat("unlinkme", "%F %s %u %g"));
            Assert.Equal("fifo 644", Stat("fifo", "%F %a"));
            Assert.Equal("character special file 640 1 3", Stat("chr", "%F %a %t %T"));
            var attrs = Shell.RunChecked("getfattr", "--absolute-names", "-d", "-m", "^user\\.", Path.Combine(m, "withea")).StandardOutput;
            Assert.Equal(["user.linux:only=\"kept\"", "user.shape=\"square\""],
                attrs.Split('\n').Where(l => l.StartsWith("user.", StringComparison.Ordinal)).Order(StringComparer.Ordinal));
            // The ACL the first SetSecurity wrote went with the second (no named users left).
            Assert.DoesNotContain("user:555", Shell.RunChecked("getfacl", "-n", Path.Combine(m, "docs/b.txt")).StandardOutput);
            // The kernel's own label ioctl (FS_IOC_GETFSLABEL) on the mounted volume.
            Assert.Equal("label = \"Données\"", Shell.RunChecked(OracleImages.Tool("xfs_io"), "-r", "-c", "label", m).StandardOutput.Trim());
        }

        // The label in the primary (xfs_admin) and in every secondary superblock (xfs_db).
        Assert.Equal("label = \"Données\"", Shell.RunChecked(OracleImages.Tool("xfs_admin"), "-l", _image).StandardOutput.Trim());
        int agCount = int.Parse(Shell.RunChecked(OracleImages.Tool("xfs_db"), "-r", "-c", "sb 0", "-c", "print agcount", _image).StandardOutput.Split('=')[1].Trim());
        Assert.True(agCount > 1);
        for (int ag = 1; ag < agCount; ag++)
            Assert.Equal(@"fname = ""Donn\303\251es\000\000\000\000""", Shell.RunChecked(OracleImages.Tool("xfs_db"), "-r", "-c", $"sb {ag}", "-c", "print fname", _image).StandardOutput.Trim());

        foreach (var version in new[] { "6.1", "6.13" })
        {
            var repair = Shell.Run(OracleImages.Tool("xfs_repair", version), "-n", _image);
            Assert.True(repair.ExitCode == 0, $"xfs_repair {version} -n: exit {repair.ExitCode}\n{repair.StandardOutput}\n{repair.StandardError}");
        }
    }
}

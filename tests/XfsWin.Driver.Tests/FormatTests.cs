using System.Buffers.Binary;
using System.Text;
using XfsWin.Driver.Semantics;

namespace XfsWin.Driver.Tests;

public class FormatTests
{
    [Theory]
    [InlineData("hello.txt", 0, "hello.txt", true)]
    [InlineData("../../etc/passwd", 3, @"..\..\etc\passwd", true)]
    [InlineData("/dir/sub", 0, @"dir\sub", true)]
    [InlineData("/hello.txt", 2, @"..\..\hello.txt", true)]
    [InlineData("/", 1, "..", true)]
    [InlineData("a//b/./c", 0, @"a\b\.\c", true)]
    [InlineData("we:ird", 0, "we\uF03Aird", true)]
    public void SymlinkTargetsTranslateAgainstTheVolumeRoot(string target, int depth, string expected, bool relative)
    {
        var (path, rel) = ReparseData.TranslateTarget(Encoding.UTF8.GetBytes(target), depth, AbsoluteSymlinkMode.VolumeRoot, "X:");
        Assert.Equal(expected, path);
        Assert.Equal(relative, rel);
    }

    [Fact]
    public void AbsoluteTargetsCanPointAtTheMountPoint()
    {
        var (path, rel) = ReparseData.TranslateTarget("/usr/lib"u8, 4, AbsoluteSymlinkMode.MountPoint, "X:");
        Assert.Equal(@"\??\X:\usr\lib", path);
        Assert.False(rel);
        Assert.Equal((@"\??\X:\", false), ReparseData.TranslateTarget("/"u8, 0, AbsoluteSymlinkMode.MountPoint, "X:"));
    }

    [Fact]
    public void SymlinkReparseBufferLayout()
    {
        var buffer = new byte[200];
        int size = ReparseData.WriteSymlink(buffer, @"..\a", @"..\a", relative: true);
        Assert.Equal(20 + 2 * 8, size);
        Assert.Equal(0xA000000Cu, BinaryPrimitives.ReadUInt32LittleEndian(buffer));
        Assert.Equal(size - 8, BinaryPrimitives.ReadUInt16LittleEndian(buffer.AsSpan(4)));
        Assert.Equal(0, BinaryPrimitives.ReadUInt16LittleEndian(buffer.AsSpan(8)));   // substitute offset
        Assert.Equal(8, BinaryPrimitives.ReadUInt16LittleEndian(buffer.AsSpan(10)));  // substitute length
        Assert.Equal(8, BinaryPrimitives.ReadUInt16LittleEndian(buffer.AsSpan(12)));  // print offset
        Assert.Equal(8, BinaryPrimitives.ReadUInt16LittleEndian(buffer.AsSpan(14)));  // print length
        Assert.Equal(1u, BinaryPrimitives.ReadUInt32LittleEndian(buffer.AsSpan(16))); // SYMLINK_FLAG_RELATIVE
        Assert.Equal((@"..\a", @"..\a", 1u), ReparseData.ParseSymlink(buffer.AsSpan(0, size)));
        Assert.Equal(-size, ReparseData.WriteSymlink(new byte[size - 1], @"..\a", @"..\a", true));
    }

    [Fact]
    public void SpecialFilesUseWslTags()
    {
        Assert.Equal(0x80000024u, ReparseTags.ForFileType(Format.XfsFileType.Fifo, true));
        Assert.Equal(0x80000025u, ReparseTags.ForFileType(Format.XfsFileType.CharacterDevice, true));
        Assert.Equal(0x80000026u, ReparseTags.ForFileType(Format.XfsFileType.BlockDevice, true));
        Assert.Equal(0x80000023u, ReparseTags.ForFileType(Format.XfsFileType.Socket, true));
        Assert.Equal(0u, ReparseTags.ForFileType(Format.XfsFileType.Fifo, false));
        Assert.Equal(0u, ReparseTags.ForFileType(Format.XfsFileType.RegularFile, true));
        var b = new byte[8];
        Assert.Equal(8, ReparseData.WriteEmpty(b, ReparseTags.LxFifo));
        Assert.Equal(ReparseTags.LxFifo, BinaryPrimitives.ReadUInt32LittleEndian(b));
        Assert.Equal(0u, BinaryPrimitives.ReadUInt32LittleEndian(b.AsSpan(4)));
    }

    [Fact]
    public void EasPackLikeFspFileSystemAddEa()
    {
        var buffer = new byte[64];
        int used = 0;
        Assert.True(ExtendedAttributes.Append(buffer, ref used, "A"u8, "xyz"u8));  // 8+1+1+3 = 13
        Assert.Equal(13, used);
        Assert.True(ExtendedAttributes.Append(buffer, ref used, "BB"u8, []));      // starts at 16
        Assert.Equal(16 + 11, used);
        Assert.Equal(16u, BinaryPrimitives.ReadUInt32LittleEndian(buffer));
        Assert.False(ExtendedAttributes.Append(buffer, ref used, "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"u8, "v"u8));
        Assert.Equal(27, used);
        ExtendedAttributes.Finish(buffer, used);
        Assert.Equal(0u, BinaryPrimitives.ReadUInt32LittleEndian(buffer.AsSpan(16)));
        var list = ExtendedAttributes.Parse(buffer.AsSpan(0, used));
        Assert.Equal(["A", "BB"], list.Select(e => e.Name));
        Assert.Equal("xyz"u8.ToArray(), list[0].Value);
        Assert.Equal(18u, ExtendedAttributes.PackedSize(1, 12));
        Assert.True(ExtendedAttributes.IsValidEaName("user_attr.1"u8));
        Assert.False(ExtendedAttributes.IsValidEaName("a:b"u8));
        Assert.False(ExtendedAttributes.IsValidEaName([]));
        Assert.False(ExtendedAttributes.IsValidEaName("é"u8));
    }

    [Fact]
    public void DirInfoRecordsPackAtEightByteAlignmentAndEndWithZero()
    {
        var info = new FileInformation { FileAttributes = 0x10, IndexNumber = 42, FileSize = 7 };
        Span<byte> record = stackalloc byte[DirInfoLayout.MaxEntrySize];
        int size = DirInfoLayout.Write(record, info, "abc", 0x1234);
        Assert.Equal(104 + 6, size);
        Assert.Equal(size, BinaryPrimitives.ReadUInt16LittleEndian(record));
        Assert.Equal(0x10u, BinaryPrimitives.ReadUInt32LittleEndian(record[8..]));
        Assert.Equal(42ul, BinaryPrimitives.ReadUInt64LittleEndian(record[(8 + 56)..]));
        Assert.Equal(0x1234ul, BinaryPrimitives.ReadUInt64LittleEndian(record[80..]));
        Assert.Equal('a', (char)record[104]);

        var buffer = new byte[250];
        int used = 0;
        Assert.True(DirInfoLayout.Append(record, buffer, ref used));
        Assert.Equal(112, used);
        Assert.True(DirInfoLayout.Append(record, buffer, ref used));
        Assert.Equal(224, used);
        Assert.False(DirInfoLayout.Append(record, buffer, ref used));
        Assert.Equal(224, used);
        Assert.True(DirInfoLayout.AppendEnd(buffer, ref used));
        Assert.Equal(226, used);
    }

    [Fact]
    public void EveryEngineErrorMapsToAFailureStatus()
    {
        foreach (var error in Enum.GetValues<XfsError>().Where(e => e != XfsError.None))
            Assert.True(NtStatus.FromXfsError(error) < 0, $"{error} must be a failure");
        Assert.Equal(NtStatus.ObjectNameNotFound, NtStatus.FromXfsError(XfsError.NotFound));
        Assert.Equal(NtStatus.ObjectPathNotFound, NtStatus.FromXfsError(XfsError.NotFound, inLastComponent: false));
        Assert.Equal(NtStatus.FileCorruptError, NtStatus.FromXfsError(XfsError.Corrupt));
        Assert.Equal(NtStatus.MediaWriteProtected, NtStatus.FromXfsError(XfsError.ReadOnly));
        Assert.Equal(NtStatus.IoDeviceError, NtStatus.FromXfsError(XfsError.IoError));
        Assert.Equal(NtStatus.NonexistentEaEntry, NtStatus.FromXfsError(XfsError.NoAttribute));
        Assert.Equal(NtStatus.UnrecognizedVolume, NtStatus.FromXfsError(XfsError.NotXfs));
        Assert.Equal(unchecked((int)0xC000007F), NtStatus.FromXfsError(XfsError.NoSpace));
        Assert.Equal(unchecked((int)0xC0000044), NtStatus.FromXfsError(XfsError.QuotaExceeded)); // STATUS_DISK_QUOTA_EXCEEDED
        Assert.Equal(NtStatus.FileCorruptError, NtStatus.FromException(new XfsCorruptionException("inode", 4096, "bad magic")));
        Assert.Equal(unchecked((int)0xC0000102), NtStatus.FileCorruptError);
        Assert.Equal(unchecked((int)0xC00000A2), NtStatus.MediaWriteProtected);
        Assert.Equal(unchecked((int)0xC0000034), NtStatus.ObjectNameNotFound);
        Assert.Equal(unchecked((int)0xC000003A), NtStatus.ObjectPathNotFound);
    }

    [Fact]
    public void SerialNumberIsTheFirstEightHexDigitsOfTheUuid()
    {
        Assert.Equal(0x1a2b3c4du, XfsWindowsFileSystem.SerialNumber(Guid.Parse("1a2b3c4d-0000-4000-8000-000000000001")));
    }
}

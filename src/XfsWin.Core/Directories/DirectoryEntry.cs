using XfsWin.Format;

namespace XfsWin.Directories;

/// <summary>One directory entry; <see cref="NextCookie"/> resumes enumeration just after it.</summary>
public readonly record struct DirectoryEntry(byte[] Name, ulong Inode, XfsFileType FileType, long NextCookie)
{
    public string NameString => System.Text.Encoding.UTF8.GetString(Name);
}

/// <summary>
/// Receives directory entries without allocation. Return false to stop. The name span is valid only
/// during the call.
/// </summary>
public interface IDirectoryVisitor
{
    bool Visit(ReadOnlySpan<byte> name, ulong inode, XfsFileType fileType, long nextCookie);
}

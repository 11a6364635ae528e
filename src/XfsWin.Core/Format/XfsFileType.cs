namespace XfsWin.Format;

/// <summary>File types as XFS records them (directory ftype values, XFS_DIR3_FT_*).</summary>
public enum XfsFileType : byte
{
    Unknown = 0,
    RegularFile = 1,
    Directory = 2,
    CharacterDevice = 3,
    BlockDevice = 4,
    Fifo = 5,
    Socket = 6,
    Symlink = 7,
    Whiteout = 8,
}

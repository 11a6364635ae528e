namespace XfsWin.Driver.Semantics;

/// <summary>
/// The NTSTATUS values the driver returns (ntstatus.h), and the translation of every engine error.
/// Kept as plain ints so the semantic layer carries no Windows types.
/// </summary>
public static class NtStatus
{
    public const int Success = 0;
    public const int Reparse = 0x00000104;
    public const int BufferOverflow = unchecked((int)0x80000005);
    public const int NoMoreFiles = unchecked((int)0x80000006);
    public const int StoppedOnSymlink = unchecked((int)0x8000002D);
    public const int InvalidDeviceRequest = unchecked((int)0xC0000010);
    public const int InvalidParameter = unchecked((int)0xC000000D);
    public const int NotSameDevice = unchecked((int)0xC00000D4); // STATUS_NOT_SAME_DEVICE
    public const int EndOfFile = unchecked((int)0xC0000011);
    public const int AccessDenied = unchecked((int)0xC0000022);
    public const int BufferTooSmall = unchecked((int)0xC0000023);
    public const int DiskCorruptError = unchecked((int)0xC0000032);
    public const int ObjectNameInvalid = unchecked((int)0xC0000033);
    public const int ObjectNameNotFound = unchecked((int)0xC0000034);
    public const int ObjectNameCollision = unchecked((int)0xC0000035);
    public const int ObjectPathNotFound = unchecked((int)0xC000003A);
    public const int EasNotSupported = unchecked((int)0xC000004F);
    public const int NonexistentEaEntry = unchecked((int)0xC0000051);
    public const int NoEasOnFile = unchecked((int)0xC0000052);
    public const int InsufficientResources = unchecked((int)0xC000009A);
    public const int MediaWriteProtected = unchecked((int)0xC00000A2);
    public const int FileIsADirectory = unchecked((int)0xC00000BA);
    public const int NotSupported = unchecked((int)0xC00000BB);
    public const int FileCorruptError = unchecked((int)0xC0000102);
    public const int NotADirectory = unchecked((int)0xC0000103);
    public const int UnrecognizedVolume = unchecked((int)0xC000014F);
    public const int IoDeviceError = unchecked((int)0xC0000185);
    public const int NotAReparsePoint = unchecked((int)0xC0000275);
    public const int ReparsePointNotResolved = unchecked((int)0xC0000280);
    public const int DiskFull = unchecked((int)0xC000007F);
    public const int DiskQuotaExceeded = unchecked((int)0xC0000044);
    public const int DllNotFound = unchecked((int)0xC0000135);
    public const int UnexpectedError = unchecked((int)0xC00000E5); // STATUS_INTERNAL_ERROR
    public const int DirectoryNotEmpty = unchecked((int)0xC0000101);
    public const int TooManyLinks = unchecked((int)0xC0000265);
    public const int FileTooLarge = unchecked((int)0xC0000904);
    public const int InvalidOwner = unchecked((int)0xC000005A);
    public const int InvalidPrimaryGroup = unchecked((int)0xC000005B);
    public const int CannotDelete = unchecked((int)0xC0000121);
    public const int IoReparseTagMismatch = unchecked((int)0xC0000277);
    public const int IoReparseDataInvalid = unchecked((int)0xC0000278);
    public const int InvalidSecurityDescriptor = unchecked((int)0xC0000079);
    public const int InvalidVolumeLabel = unchecked((int)0xC0000086);
    public const int InvalidEaName = unchecked((int)0x80000013);

    public static bool IsSuccess(int status) => status >= 0;

    /// <summary>
    /// Translates an engine error. <paramref name="inLastComponent"/> distinguishes a missing file
    /// (STATUS_OBJECT_NAME_NOT_FOUND) from a missing or non-directory intermediate component
    /// (STATUS_OBJECT_PATH_NOT_FOUND), as NTFS does.
    /// </summary>
    public static int FromXfsError(XfsError error, bool inLastComponent = true) => error switch
    {
        XfsError.None => Success,
        XfsError.NotFound => inLastComponent ? ObjectNameNotFound : ObjectPathNotFound,
        XfsError.NotADirectory => inLastComponent ? NotADirectory : ObjectPathNotFound,
        XfsError.IsADirectory => FileIsADirectory,
        XfsError.NotASymlink => NotAReparsePoint,
        XfsError.NameTooLong => ObjectNameInvalid,
        XfsError.InvalidArgument => InvalidParameter,
        XfsError.Corrupt => FileCorruptError,
        XfsError.IoError => IoDeviceError,
        XfsError.ReadOnly => MediaWriteProtected,
        XfsError.Unsupported => NotSupported,
        XfsError.NoAttribute => NonexistentEaEntry,
        XfsError.SymlinkLoop => ReparsePointNotResolved,
        XfsError.NotXfs => UnrecognizedVolume,
        XfsError.NeedsRepair => DiskCorruptError,
        XfsError.Exists => ObjectNameCollision,
        XfsError.NotEmpty => DirectoryNotEmpty,
        XfsError.NoSpace => DiskFull,
        XfsError.TooManyLinks => TooManyLinks,
        XfsError.NotPermitted => AccessDenied,
        XfsError.FileTooLarge => FileTooLarge,
        XfsError.WouldLoop => InvalidParameter,
        XfsError.CrossDevice => NotSameDevice,
        XfsError.QuotaExceeded => DiskQuotaExceeded,
        _ => IoDeviceError,
    };

    /// <summary>Translates any exception that reached a callback; never lets one cross into native code.</summary>
    public static int FromException(Exception exception) => exception switch
    {
        XfsException x => FromXfsError(x.Error),
        OutOfMemoryException => InsufficientResources,
        ArgumentException => InvalidParameter,
        IOException => IoDeviceError,
        _ => UnexpectedError,
    };

    public static string Describe(int status) => $"NTSTATUS 0x{unchecked((uint)status):X8}";
}

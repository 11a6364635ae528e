namespace XfsWin.Volume;

/// <summary>renameat2(2) flags.</summary>
[Flags]
public enum RenameFlags
{
    None = 0,
    /// <summary>RENAME_NOREPLACE: fail with <see cref="XfsError.Exists"/> when the target name exists.</summary>
    NoReplace = 1,
    /// <summary>RENAME_EXCHANGE: swap the two names atomically (both must exist).</summary>
    Exchange = 2,
    /// <summary>RENAME_WHITEOUT: leave a whiteout (a 0/0 character device) at the source name.</summary>
    Whiteout = 4,
}

/// <summary>fallocate(2) modes.</summary>
public enum FallocateMode
{
    /// <summary>Allocate (unwritten) blocks and extend the size past EOF.</summary>
    Allocate,
    /// <summary>FALLOC_FL_KEEP_SIZE: allocate without changing the size.</summary>
    KeepSize,
    /// <summary>FALLOC_FL_PUNCH_HOLE | KEEP_SIZE: free the range, which reads as zeros.</summary>
    PunchHole,
    /// <summary>FALLOC_FL_ZERO_RANGE: the range reads as zeros and stays allocated.</summary>
    ZeroRange,
    /// <summary>FALLOC_FL_COLLAPSE_RANGE: remove the range, shifting what follows down.</summary>
    CollapseRange,
    /// <summary>FALLOC_FL_INSERT_RANGE: insert a hole, shifting what follows up.</summary>
    InsertRange,
}

/// <summary>setxattr(2) flags.</summary>
public enum XattrSetMode
{
    /// <summary>Create or replace.</summary>
    Any,
    /// <summary>XATTR_CREATE: fail with <see cref="XfsError.Exists"/> when the attribute exists.</summary>
    Create,
    /// <summary>XATTR_REPLACE: fail with <see cref="XfsError.NoAttribute"/> when it does not.</summary>
    Replace,
}

namespace XfsWin.Fuse;

/// <summary>FUSE cannot be used on this machine (no /dev/fuse, no libfuse3); the message says how to fix it.</summary>
public sealed class FuseUnavailableException : Exception
{
    public FuseUnavailableException(string message, Exception? inner = null) : base(message, inner) { }
}

/// <summary>The kernel or libfuse refused the mount; the message names the mount point and what to check.</summary>
public sealed class FuseMountException : Exception
{
    public FuseMountException(string message) : base(message) { }
}

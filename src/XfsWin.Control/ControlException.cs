namespace XfsWin.Control;

/// <summary>An operation refused for a reason the client can act on; becomes an error reply with <see cref="Code"/>.</summary>
public sealed class ControlException(string code, string message) : Exception(message)
{
    public string Code { get; } = code;
}

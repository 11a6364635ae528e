namespace XfsWin.Attributes;

/// <summary>Extended attribute namespaces as XFS stores them (flag bits of each entry).</summary>
public enum XattrNamespace
{
    User,
    Trusted,  // XFS_ATTR_ROOT
    Secure,   // XFS_ATTR_SECURE
    /// <summary>Parent pointers (XFS_ATTR_PARENT): file-system metadata, never shown as user xattrs.</summary>
    Parent,
}

public sealed record XattrEntry(XattrNamespace Namespace, byte[] Name, int ValueLength)
{
    /// <summary>The name as Linux tools show it: "user.foo", "trusted.foo", "security.foo", "system.posix_acl_access".</summary>
    public string LinuxName => XattrNames.ToLinuxName(Namespace, Name);
}

public static class XattrNames
{
    public static string ToLinuxName(XattrNamespace ns, ReadOnlySpan<byte> name)
    {
        var text = System.Text.Encoding.UTF8.GetString(name);
        return ns switch
        {
            XattrNamespace.User => "user." + text,
            // POSIX ACLs live in the trusted (root) namespace as SGI_ACL_FILE / SGI_ACL_DEFAULT.
            XattrNamespace.Trusted when text == "SGI_ACL_FILE" => "system.posix_acl_access",
            XattrNamespace.Trusted when text == "SGI_ACL_DEFAULT" => "system.posix_acl_default",
            XattrNamespace.Trusted => "trusted." + text,
            XattrNamespace.Secure => "security." + text,
            _ => "parent." + text,
        };
    }

    /// <summary>Parses a Linux xattr name into namespace and on-disk name; false for names XFS cannot hold.</summary>
    public static bool TryParseLinuxName(string linuxName, out XattrNamespace ns, out byte[] name)
    {
        (ns, var rest) = linuxName switch
        {
            "system.posix_acl_access" => (XattrNamespace.Trusted, "SGI_ACL_FILE"),
            "system.posix_acl_default" => (XattrNamespace.Trusted, "SGI_ACL_DEFAULT"),
            _ when linuxName.StartsWith("user.", StringComparison.Ordinal) => (XattrNamespace.User, linuxName[5..]),
            _ when linuxName.StartsWith("trusted.", StringComparison.Ordinal) => (XattrNamespace.Trusted, linuxName[8..]),
            _ when linuxName.StartsWith("security.", StringComparison.Ordinal) => (XattrNamespace.Secure, linuxName[9..]),
            _ => (XattrNamespace.User, (string?)null),
        };
        name = rest is null ? [] : System.Text.Encoding.UTF8.GetBytes(rest);
        return rest is { Length: > 0 };
    }
}

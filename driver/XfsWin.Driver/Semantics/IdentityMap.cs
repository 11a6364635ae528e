namespace XfsWin.Driver.Semantics;

/// <summary>How uids and gids that no explicit map entry covers become SIDs.</summary>
public enum IdMappingMode
{
    /// <summary>
    /// Every uid is owned by the mounting user (so the owner permission bits apply to them);
    /// gids become Unix Group SIDs (S-1-22-2-gid). The default: a removable Linux disk is
    /// usable by whoever mounted it, and the mode bits still decide what they may do.
    /// </summary>
    MountingUser,

    /// <summary>uids become S-1-22-1-uid and gids S-1-22-2-gid (Samba / NFS "Unix User/Group").</summary>
    Unix,

    /// <summary>
    /// WinFsp's POSIX mapping (FspPosixMapUidToSid): 0..0x1FF and 1000 → S-1-5-id, 0x200..999 →
    /// S-1-5-32-id, 0x1000*X+RID → S-1-5-X-RID, 0x10000+0x100*X+Y → S-1-X-Y, 0x30000+RID → local
    /// account domain, 0x60000+RID → S-1-16-RID, 0x100000+RID → primary domain; others unmapped.
    /// </summary>
    WinFspPosix,
}

/// <summary>
/// Maps XFS uids and gids to SIDs. Explicit entries win; the rest follow <see cref="Mode"/>.
/// Immutable and safe to share between threads; SIDs are cached per id.
/// </summary>
public sealed class IdentityMap
{
    private readonly Dictionary<uint, Sid> _users;
    private readonly Dictionary<uint, Sid> _groups;
    private readonly System.Collections.Concurrent.ConcurrentDictionary<uint, Sid> _userCache = new();
    private readonly System.Collections.Concurrent.ConcurrentDictionary<uint, Sid> _groupCache = new();

    public IdentityMap(IdMappingMode mode, Sid mountingUser, Sid? accountDomain = null, Sid? primaryDomain = null,
        IReadOnlyDictionary<uint, Sid>? users = null, IReadOnlyDictionary<uint, Sid>? groups = null)
    {
        Mode = mode;
        MountingUser = mountingUser;
        AccountDomain = accountDomain ?? DomainOf(mountingUser);
        PrimaryDomain = primaryDomain;
        _users = users is null ? [] : new Dictionary<uint, Sid>(users);
        _groups = groups is null ? [] : new Dictionary<uint, Sid>(groups);
    }

    public IdMappingMode Mode { get; }
    public Sid MountingUser { get; }
    /// <summary>The local SAM domain (S-1-5-21-X-Y-Z) used by <see cref="IdMappingMode.WinFspPosix"/> for 0x30000+RID.</summary>
    public Sid? AccountDomain { get; }
    public Sid? PrimaryDomain { get; }

    public Sid OwnerSid(uint uid) => _userCache.GetOrAdd(uid, static (id, self) =>
        self._users.TryGetValue(id, out var sid) ? sid : self.Mode switch
        {
            IdMappingMode.MountingUser => self.MountingUser,
            IdMappingMode.Unix => Sid.UnixUser(id),
            _ => self.PosixSid(id),
        }, this);

    public Sid GroupSid(uint gid) => _groupCache.GetOrAdd(gid, static (id, self) =>
        self._groups.TryGetValue(id, out var sid) ? sid : self.Mode switch
        {
            IdMappingMode.WinFspPosix => self.PosixSid(id),
            _ => Sid.UnixGroup(id),
        }, this);

    /// <summary>The uid new files get, and what the mounting user's SID maps back to (<c>--uid</c>; default 1000).</summary>
    public uint CreatorUid { get; init; } = 1000;

    /// <summary>The gid new files get (<c>--gid</c>; default 1000).</summary>
    public uint CreatorGid { get; init; } = 1000;

    /// <summary>
    /// The uid a SID stands for when Windows sets an owner: an explicit map entry, S-1-22-1-uid, the mounting
    /// user (<see cref="CreatorUid"/>), or in <see cref="IdMappingMode.WinFspPosix"/> the inverse of that mapping.
    /// Null when no uid maps to it.
    /// </summary>
    public uint? UidOf(Sid sid)
    {
        foreach (var (id, mapped) in _users) if (mapped == sid) return id;
        if (sid.Authority == 22 && sid.SubAuthorityCount == 2 && sid.SubAuthority(0) == 1) return sid.SubAuthority(1);
        if (sid == MountingUser) return CreatorUid;
        return Mode == IdMappingMode.WinFspPosix ? PosixId(sid) : null;
    }

    /// <summary>The gid a SID stands for: an explicit map entry, S-1-22-2-gid, or the inverse POSIX mapping. Null when none.</summary>
    public uint? GidOf(Sid sid)
    {
        foreach (var (id, mapped) in _groups) if (mapped == sid) return id;
        if (sid.Authority == 22 && sid.SubAuthorityCount == 2 && sid.SubAuthority(0) == 2) return sid.SubAuthority(1);
        if (sid == MountingUser) return CreatorGid;
        return Mode == IdMappingMode.WinFspPosix ? PosixId(sid) : null;
    }

    private uint? PosixId(Sid sid)
    {
        int n = sid.SubAuthorityCount;
        if (sid.Authority == 5 && n == 1 && (sid.SubAuthority(0) < 0x200 || sid.SubAuthority(0) == 1000)) return sid.SubAuthority(0);
        if (sid.Authority == 5 && n == 2 && sid.SubAuthority(0) == 32 && sid.SubAuthority(1) is >= 0x200 and < 1000) return sid.SubAuthority(1);
        if (n >= 1 && AccountDomain is { } d && IsIn(sid, d) && sid.SubAuthority(n - 1) < 0x10000) return 0x30000 + sid.SubAuthority(n - 1);
        if (n >= 1 && PrimaryDomain is { } p && IsIn(sid, p)) return 0x100000 + sid.SubAuthority(n - 1);
        if (sid.Authority == 16 && n == 1 && sid.SubAuthority(0) < 0x10000) return 0x60000 + sid.SubAuthority(0);
        if (sid.Authority == 5 && n == 2 && sid.SubAuthority(0) is > 0 and < 0x100 && sid.SubAuthority(1) < 0x1000)
            return sid.SubAuthority(0) << 12 | sid.SubAuthority(1);
        if (sid.Authority < 0x100 && n == 1 && sid.SubAuthority(0) < 0x100 && sid.Authority != 5 && sid.Authority != 16)
            return 0x10000 + ((uint)sid.Authority << 8) + sid.SubAuthority(0);
        return null;
    }

    private static bool IsIn(Sid sid, Sid domain)
    {
        if (sid.Authority != domain.Authority || sid.SubAuthorityCount != domain.SubAuthorityCount + 1) return false;
        for (int i = 0; i < domain.SubAuthorityCount; i++) if (sid.SubAuthority(i) != domain.SubAuthority(i)) return false;
        return true;
    }

    /// <summary>The domain part (S-1-5-21-X-Y-Z) of an account SID S-1-5-21-X-Y-Z-RID, or null.</summary>
    public static Sid? DomainOf(Sid account) =>
        account.Authority == 5 && account.SubAuthorityCount == 5 && account.SubAuthority(0) == 21
            ? new Sid(5, 21, account.SubAuthority(1), account.SubAuthority(2), account.SubAuthority(3))
            : null;

    private Sid PosixSid(uint id)
    {
        if (id < 0x200 || id == 1000) return new Sid(5, id);
        if (id < 1000) return new Sid(5, 32, id);
        if (id is >= 0x30000 and < 0x40000)
            return AccountDomain is { } d ? Append(d, id - 0x30000) : Sid.Unmapped;
        if (id is >= 0x100000 and < 0xFF000000)
            return PrimaryDomain is { } p ? Append(p, id - 0x100000) : Sid.Unmapped;
        if (id is >= 0x60000 and < 0x70000) return new Sid(16, id - 0x60000);
        if (id is >= 0x10000 and < 0x11000) return new Sid((id - 0x10000) >> 8, (id - 0x10000) & 0xFF);
        if (id != 65534 && id is >= 0x1000 and < 0x100000) return new Sid(5, id >> 12, id & 0xFFF);
        return Sid.Unmapped;
    }

    private static Sid Append(Sid domain, uint rid)
    {
        var subs = new uint[domain.SubAuthorityCount + 1];
        for (int i = 0; i < domain.SubAuthorityCount; i++) subs[i] = domain.SubAuthority(i);
        subs[^1] = rid;
        return new Sid(domain.Authority, subs);
    }
}

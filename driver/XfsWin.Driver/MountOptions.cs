using System.Globalization;
using XfsWin.Driver.Semantics;
using XfsWin.Journal;
using XfsWin.Volume;

namespace XfsWin.Driver;

/// <summary>Everything that shapes how an XFS volume looks from Windows. Platform-neutral.</summary>
public sealed record MountOptions
{
    /// <summary>Partition number on a disk or disk image (1-based), appended to the source as "@N".</summary>
    public int? Partition { get; init; }

    /// <summary>Log replay: in memory (default, the device is never written) or in place (<c>--replay=place</c>).</summary>
    public LogReplayMode Replay { get; init; } = LogReplayMode.Memory;

    /// <summary>The external log device (<c>--log-device</c>) of a volume made with mkfs -l logdev=, or null.</summary>
    public string? LogDevice { get; init; }

    /// <summary>
    /// Case-insensitive lookups (<c>--case-insensitive</c>). Exact byte matches always win; otherwise the
    /// entry that comes first in directory order among those equal ignoring case is opened.
    /// </summary>
    public bool CaseInsensitive { get; init; }

    /// <summary>Give names starting with '.' the hidden attribute (<c>--hide-dot-files</c>).</summary>
    public bool HideDotFiles { get; init; }

    /// <summary>FILE_FS_ATTRIBUTE_INFORMATION file system name: "XFS" or "NTFS" (<c>--fs-name</c>).</summary>
    public string FileSystemName { get; init; } = "XFS";

    public AbsoluteSymlinkMode AbsoluteSymlinks { get; init; } = AbsoluteSymlinkMode.VolumeRoot;

    /// <summary>WSL interop (default): fifos, devices and sockets as WSL reparse points, and the synthesized $LX* EAs; off (--no-lx): empty files, no $LX* EAs.</summary>
    public bool LxSpecialFiles { get; init; } = true;

    /// <summary>Expose user.* xattrs as EAs (and WSL's $LXUID/$LXGID/$LXMOD/$LXDEV).</summary>
    public bool ExtendedAttributes { get; init; } = true;

    public IdMappingMode IdMapping { get; init; } = IdMappingMode.MountingUser;

    /// <summary>uid → SID string, e.g. 1000=S-1-5-21-1-2-3-1001 (<c>--uid-map</c>, repeatable).</summary>
    public IReadOnlyDictionary<uint, string> UidMap { get; init; } = new Dictionary<uint, string>();

    /// <summary>gid → SID string (<c>--gid-map</c>, repeatable).</summary>
    public IReadOnlyDictionary<uint, string> GidMap { get; init; } = new Dictionary<uint, string>();

    /// <summary>The mounting user's SID; on Windows the process token's user when not given.</summary>
    public string? MountingUserSid { get; init; }

    /// <summary>
    /// Directory markers as XFS cookies (WinFsp DirectoryMarkerAsNextOffset; default) instead of the
    /// last name returned. Both resume without rescanning.
    /// </summary>
    public bool MarkersAsOffsets { get; init; } = true;

    /// <summary>UNC prefix (\server\share) to mount as a network drive instead of a disk.</summary>
    public string? UncPrefix { get; init; }

    /// <summary>Mount read-write (<c>-o rw</c> or <c>--rw</c>); read-only otherwise.</summary>
    public bool ReadWrite { get; init; }

    /// <summary>The uid of what Windows creates, and what the mounting user's SID maps back to (<c>--uid</c>, default 1000).</summary>
    public uint CreatorUid { get; init; } = 1000;

    /// <summary>The gid of what Windows creates (<c>--gid</c>, default 1000).</summary>
    public uint CreatorGid { get; init; } = 1000;

    /// <summary>How long WinFsp may cache file information (ms).</summary>
    public uint FileInfoTimeoutMs { get; init; } = 1000;

    /// <summary>WinFsp debug log mask (<c>--debug</c>: all requests to stderr).</summary>
    public uint DebugLog { get; init; }

    public IdentityMap CreateIdentityMap(Sid mountingUser)
    {
        var user = MountingUserSid is null ? mountingUser : Sid.Parse(MountingUserSid);
        return new IdentityMap(IdMapping, user,
            users: UidMap.ToDictionary(kv => kv.Key, kv => Sid.Parse(kv.Value)),
            groups: GidMap.ToDictionary(kv => kv.Key, kv => Sid.Parse(kv.Value)))
        {
            CreatorUid = CreatorUid,
            CreatorGid = CreatorGid,
        };
    }

    /// <summary>
    /// Parses the driver's options (used by the service and launcher command lines):
    /// <c>--partition N --replay=memory|place|none --case-insensitive --hide-dot-files --fs-name XFS|NTFS
    /// --absolute-symlinks=root|mountpoint --no-lx --no-ea --id-map=user|unix|posix --uid-map U=SID
    /// --gid-map G=SID --owner SID --name-markers --unc \server\share --file-info-timeout MS --debug</c>.
    /// Throws <see cref="ArgumentException"/> naming the bad option.
    /// </summary>
    public static MountOptions Parse(IReadOnlyList<string> args)
    {
        var o = new MountOptions();
        var uids = new Dictionary<uint, string>();
        var gids = new Dictionary<uint, string>();
        for (int i = 0; i < args.Count; i++)
        {
            string arg = args[i], name = arg, value = "";
            int eq = arg.IndexOf('=');
            bool inlineValue = arg.StartsWith("--", StringComparison.Ordinal) && eq > 0;
            if (inlineValue) { name = arg[..eq]; value = arg[(eq + 1)..]; }
            string Next() => inlineValue ? value
                : i + 1 < args.Count ? args[++i]
                : throw new ArgumentException($"option {name} needs a value");
            switch (name)
            {
                case "--partition":
                    o = o with { Partition = int.TryParse(Next(), NumberStyles.None, CultureInfo.InvariantCulture, out var p) && p > 0
                        ? p : throw new ArgumentException("--partition needs a partition number starting at 1") };
                    break;
                case "--log-device": o = o with { LogDevice = Next() }; break;
                case "--replay":
                    o = o with { Replay = Next() switch
                    {
                        "memory" => LogReplayMode.Memory,
                        "place" => LogReplayMode.InPlace,
                        "none" => LogReplayMode.None,
                        var v => throw new ArgumentException($"--replay={v}: use memory (default), place or none"),
                    } };
                    break;
                case "-o":
                    foreach (var word in Next().Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
                        o = word switch
                        {
                            "rw" => o with { ReadWrite = true },
                            "ro" => o with { ReadWrite = false },
                            _ => throw new ArgumentException($"-o {word}: the Windows mount takes -o rw or -o ro; other settings are --options"),
                        };
                    break;
                case "--rw": o = o with { ReadWrite = true }; break;
                case "--ro": o = o with { ReadWrite = false }; break;
                case "--uid": o = o with { CreatorUid = ParseId(Next(), name) }; break;
                case "--gid": o = o with { CreatorGid = ParseId(Next(), name) }; break;
                case "--id-map-file": LoadMapFile(Next(), uids, gids); break;
                case "--case-insensitive": o = o with { CaseInsensitive = true }; break;
                case "--hide-dot-files": o = o with { HideDotFiles = true }; break;
                case "--fs-name":
                    var fsName = Next();
                    o = o with { FileSystemName = fsName is "XFS" or "NTFS" ? fsName : throw new ArgumentException($"--fs-name {fsName}: use XFS or NTFS") };
                    break;
                case "--absolute-symlinks":
                    o = o with { AbsoluteSymlinks = Next() switch
                    {
                        "root" => AbsoluteSymlinkMode.VolumeRoot,
                        "mountpoint" => AbsoluteSymlinkMode.MountPoint,
                        var v => throw new ArgumentException($"--absolute-symlinks={v}: use root or mountpoint"),
                    } };
                    break;
                case "--no-lx": o = o with { LxSpecialFiles = false }; break;
                case "--no-ea": o = o with { ExtendedAttributes = false }; break;
                case "--id-map":
                    o = o with { IdMapping = Next() switch
                    {
                        "user" => IdMappingMode.MountingUser,
                        "unix" => IdMappingMode.Unix,
                        "posix" => IdMappingMode.WinFspPosix,
                        var v => throw new ArgumentException($"--id-map={v}: use user, unix or posix"),
                    } };
                    break;
                case "--uid-map": AddMap(uids, name, Next()); break;
                case "--gid-map": AddMap(gids, name, Next()); break;
                case "--owner": o = o with { MountingUserSid = Sid.Parse(Next()).ToString() }; break;
                case "--name-markers": o = o with { MarkersAsOffsets = false }; break;
                case "--unc": o = o with { UncPrefix = Next() }; break;
                case "--file-info-timeout":
                    o = o with { FileInfoTimeoutMs = uint.TryParse(Next(), NumberStyles.None, CultureInfo.InvariantCulture, out var t) ? t
                        : throw new ArgumentException("--file-info-timeout needs milliseconds") };
                    break;
                case "--debug": o = o with { DebugLog = uint.MaxValue }; break;
                default: throw new ArgumentException($"unknown mount option '{arg}'");
            }
        }
        return o with { UidMap = uids, GidMap = gids };
    }

    /// <summary>Whether an option (without "=value") takes the next word as its value.</summary>
    public static bool TakesValue(string option) => option is "-o" or "--partition" or "--replay" or "--log-device" or "--fs-name" or "--absolute-symlinks"
        or "--id-map" or "--uid-map" or "--gid-map" or "--owner" or "--unc" or "--file-info-timeout" or "--uid" or "--gid" or "--id-map-file";

    private static uint ParseId(string text, string option) =>
        uint.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out uint id) && id != uint.MaxValue
            ? id : throw new ArgumentException($"{option} {text}: expected a number from 0 to 4294967294");

    /// <summary>
    /// Reads an identity map file: one mapping per line, <c>uid 1000 S-1-5-21-…-1001</c> or <c>gid 100 S-1-5-32-545</c>;
    /// <c>#</c> starts a comment. Entries work both ways (uid → SID for what Windows shows, SID → uid when Windows sets an owner).
    /// </summary>
    public static void LoadMapFile(string path, Dictionary<uint, string> uids, Dictionary<uint, string> gids)
    {
        string[] lines;
        try { lines = File.ReadAllLines(path); }
        catch (IOException e) { throw new ArgumentException($"--id-map-file {path}: {e.Message}"); }
        catch (UnauthorizedAccessException e) { throw new ArgumentException($"--id-map-file {path}: {e.Message}"); }
        for (int n = 0; n < lines.Length; n++)
        {
            string line = lines[n];
            int hash = line.IndexOf('#');
            if (hash >= 0) line = line[..hash];
            var words = line.Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries);
            if (words.Length == 0) continue;
            string where = $"{path} line {n + 1}";
            if (words.Length != 3 || words[0] is not ("uid" or "gid"))
                throw new ArgumentException($"{where}: expected 'uid ID SID' or 'gid ID SID'");
            uint id = ParseId(words[1], where);
            string sid;
            try { sid = Sid.Parse(words[2]).ToString(); }
            catch (FormatException) { throw new ArgumentException($"{where}: '{words[2]}' is not a SID (S-1-…)"); }
            (words[0] == "uid" ? uids : gids)[id] = sid;
        }
    }

    private static void AddMap(Dictionary<uint, string> map, string option, string text)
    {
        int eq = text.IndexOf('=');
        if (eq <= 0 || !uint.TryParse(text.AsSpan(0, eq), NumberStyles.None, CultureInfo.InvariantCulture, out uint id))
            throw new ArgumentException($"{option} {text}: expected ID=SID, for example 1000=S-1-5-21-1-2-3-1001");
        map[id] = Sid.Parse(text[(eq + 1)..]).ToString();
    }

    /// <summary>The source string XfsVolume.Open understands (partition as "@N").</summary>
    public string VolumeSource(string source) => Partition is { } p ? $"{source}@{p}" : source;
}

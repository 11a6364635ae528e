using System.Globalization;

namespace XfsWin.Mkfs;

/// <summary>
/// Parses mkfs.xfs's command line: <c>-b size=4096 -d agcount=8,su=64k,sw=4 -m rmapbt=0 -L label -f TARGET</c>.
/// Numbers take mkfs.xfs's suffixes (k, m, g, t, p, e as powers of 1024; b for blocks, s for sectors).
/// Unknown options and sub-options are refused by name.
/// </summary>
public static class MkfsOptionParser
{
    public static MkfsOptions Parse(IReadOnlyList<string> args)
    {
        ArgumentNullException.ThrowIfNull(args);
        var o = new MkfsOptions();
        // Suffixes b and s depend on sizes that may come later on the line: resolve them at the end.
        var pending = new List<Func<MkfsOptions, MkfsOptions>>();
        for (int i = 0; i < args.Count; i++)
        {
            string a = args[i];
            string Value()
            {
                if (i + 1 >= args.Count) throw new MkfsUsageException($"option {a} needs a value");
                return args[++i];
            }
            switch (a)
            {
                case "-f": o = o with { Force = true }; break;
                case "-K": o = o with { NoDiscard = true }; break;
                case "-N": o = o with { DryRun = true }; break;
                case "-q": o = o with { Quiet = true }; break;
                case "--unsupported": o = o with { Unsupported = true }; break;
                case "-L":
                    o = o with { Label = Value() };
                    break;
                case "-b" or "-s" or "-d" or "-i" or "-l" or "-m" or "-n":
                    foreach (var (key, value) in SubOptions(Value()))
                        o = ApplySubOption(o, a[1], key, value, pending);
                    break;
                case "-r" or "-p" or "-c":
                    throw new MkfsUsageException($"option {a} is not supported by xfswin mkfs (realtime sections, prototype files and config files are not made here)");
                default:
                    if (a.StartsWith('-') && a.Length > 1) throw new MkfsUsageException($"unknown option {a}");
                    if (o.Target is not null) throw new MkfsUsageException($"more than one target given ('{o.Target}' and '{a}')");
                    o = o with { Target = a };
                    break;
            }
        }
        foreach (var p in pending) o = p(o);
        return o;
    }

    private static IEnumerable<(string Key, string? Value)> SubOptions(string text)
    {
        foreach (var part in text.Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            int eq = part.IndexOf('=');
            yield return eq < 0 ? (part, null) : (part[..eq], part[(eq + 1)..]);
        }
    }

    private static MkfsOptions ApplySubOption(MkfsOptions o, char opt, string key, string? value, List<Func<MkfsOptions, MkfsOptions>> pending)
    {
        string name = $"-{opt} {key}";
        string V() => value ?? throw new MkfsUsageException($"{name} needs a value ({name}=...)");
        bool Flag() => value is null || ParseBool(name, value);
        int Int() => checked((int)ParseInteger(name, V()));
        switch (opt, key)
        {
            case ('b', "size"): return o with { BlockSize = checked((int)ParseSize(name, V(), null)) };
            case ('s', "size"): return o with { SectorSize = checked((int)ParseSize(name, V(), null)) };
            case ('d', "size"): Defer(pending, name, V(), (x, n) => x with { DataSizeBytes = n }); return o;
            case ('d', "agcount"): return o with { AgCount = ParseInteger(name, V()) };
            case ('d', "agsize"): Defer(pending, name, V(), (x, n) => x with { AgSizeBytes = n }); return o;
            case ('d', "su"): Defer(pending, name, V(), (x, n) => x with { StripeUnitBytes = n }); return o;
            case ('d', "sw"): return o with { StripeWidthMultiplier = ParseInteger(name, V()) };
            case ('d', "sunit"): return o with { StripeUnitSectors = ParseInteger(name, V()) };
            case ('d', "swidth"): return o with { StripeWidthSectors = ParseInteger(name, V()) };
            case ('d', "file"): return o with { DataIsFile = Flag() };
            case ('d', "name"): return o with { Target = V() };
            case ('d', "concurrency"): return o with { DataConcurrency = ParseConcurrency(name, value) };
            case ('d', "noalign"): return Flag() ? o with { StripeUnitSectors = 0, StripeWidthSectors = 0 } : o;
            case ('i', "size"): return o with { InodeSize = checked((int)ParseSize(name, V(), null)) };
            case ('i', "maxpct"): return o with { InodeMaxPct = Int() };
            case ('i', "sparse"): return o with { SparseInodes = Flag() };
            case ('i', "nrext64"): return o with { Nrext64 = Flag() };
            case ('i', "exchange"): return o with { Exchange = Flag() };
            case ('i', "align"): return o with { InodeAlign = Flag() };
            case ('i', "attr"): return o with { AttrVersion = Int() };
            case ('i', "projid32bit"): return o with { ProjId32 = Flag() };
            case ('l', "size"): Defer(pending, name, V(), (x, n) => x with { LogSizeBytes = n }); return o;
            case ('l', "internal"):
                Conflict(o.LogDevice is not null, "logdev", key);
                Conflict(o.LogSectorSize is not null, "sectsize", key);
                return o with { LogInternal = Flag() };
            case ('l', "logdev") or ('l', "name"):
                Conflict(o.LogInternal is not null, "internal", key);
                Conflict(o.LogAgNumber is not null, "agnum", key);
                return o with { LogDevice = V() };
            case ('l', "file"):
                Conflict(o.LogInternal is not null, "internal", key);
                return o with { LogIsFile = Flag() };
            case ('l', "sectsize"):
                Conflict(o.LogInternal is not null, "internal", key);
                return o with { LogSectorSize = checked((int)ParseSize(name, V(), null)) };
            case ('l', "su"): Defer(pending, name, V(), (x, n) => x with { LogStripeUnitBytes = n }); return o;
            case ('l', "sunit"): return o with { LogStripeUnitSectors = ParseInteger(name, V()) };
            case ('l', "version"): return o with { LogVersion = Int() };
            case ('l', "lazy-count"): return o with { LazyCount = Flag() };
            case ('l', "agnum"):
                Conflict(o.LogDevice is not null, "logdev", key);
                return o with { LogAgNumber = ParseInteger(name, V()) };
            case ('l', "concurrency"): return o with { LogConcurrency = ParseConcurrency(name, value) };
            case ('m', "crc"): return o with { Crc = Flag() };
            case ('m', "finobt"): return o with { Finobt = Flag() };
            case ('m', "rmapbt"): return o with { Rmapbt = Flag() };
            case ('m', "reflink"): return o with { Reflink = Flag() };
            case ('m', "bigtime"): return o with { Bigtime = Flag() };
            case ('m', "inobtcount"): return o with { InobtCount = Flag() };
            case ('m', "metadir"): return o with { Metadir = Flag() };
            case ('m', "uuid"):
                if (!Guid.TryParse(V(), out var uuid)) throw new MkfsUsageException($"{name}: '{value}' is not a UUID");
                return o with { Uuid = uuid };
            case ('n', "size"): return o with { DirBlockSize = checked((int)ParseSize(name, V(), null)) };
            case ('n', "ftype"): return o with { Ftype = Flag() };
            case ('n', "parent"): return o with { Parent = Flag() };
            case ('n', "version"):
                if (V() != "2") throw new MkfsUsageException($"{name}: only directory version 2 exists");
                return o;
            default:
                throw new MkfsUsageException($"unknown sub-option '{key}' for -{opt}");
        }
    }

    /// <summary>mkfs.xfs's sub-option conflicts: the one given first is named first.</summary>
    private static void Conflict(bool earlierGiven, string earlier, string later)
    {
        if (earlierGiven) throw new MkfsUsageException($"Cannot specify both -l {earlier} and -l {later}");
    }

    private static void Defer(List<Func<MkfsOptions, MkfsOptions>> pending, string name, string text, Func<MkfsOptions, long, MkfsOptions> set) =>
        pending.Add(x => set(x, ParseSize(name, text, x)));

    private static int ParseConcurrency(string name, string? value) => value switch
    {
        null or "" => Environment.ProcessorCount,
        "nr_cpus" => Environment.ProcessorCount,
        _ => checked((int)ParseInteger(name, value)),
    };

    private static bool ParseBool(string name, string value) => value switch
    {
        "1" => true,
        "0" => false,
        _ => throw new MkfsUsageException($"Invalid value {value} for {name} option. Value must be 0 or 1."),
    };

    private static long ParseInteger(string name, string value) =>
        long.TryParse(value, NumberStyles.Integer, CultureInfo.InvariantCulture, out long n) && n >= 0
            ? n
            : throw new MkfsUsageException($"Invalid value {value} for {name} option.");

    /// <summary>mkfs.xfs's cvtnum: a number with an optional unit suffix; b and s need the block and sector sizes.</summary>
    public static long ParseSize(string name, string value, MkfsOptions? sizes)
    {
        if (string.IsNullOrEmpty(value)) throw new MkfsUsageException($"{name} needs a value");
        int end = 0;
        while (end < value.Length && char.IsAsciiDigit(value[end])) end++;
        if (end == 0 || !long.TryParse(value.AsSpan(0, end), NumberStyles.None, CultureInfo.InvariantCulture, out long n))
            throw new MkfsUsageException($"Invalid value {value} for {name} option.");
        string suffix = value[end..];
        if (suffix.EndsWith("iB", StringComparison.Ordinal)) suffix = suffix[..^2];
        long mult = suffix.ToLowerInvariant() switch
        {
            "" => 1,
            "k" => 1L << 10,
            "m" => 1L << 20,
            "g" => 1L << 30,
            "t" => 1L << 40,
            "p" => 1L << 50,
            "e" => 1L << 60,
            "b" => sizes is null ? throw new MkfsUsageException($"{name}: a size in blocks ('b') cannot be used here") : sizes.BlockSize ?? 4096,
            "s" => sizes is null ? throw new MkfsUsageException($"{name}: a size in sectors ('s') cannot be used here") : sizes.SectorSize ?? 512,
            _ => throw new MkfsUsageException($"Invalid value {value} for {name} option: unknown unit '{suffix}'."),
        };
        try
        {
            return checked(n * mult);
        }
        catch (OverflowException)
        {
            throw new MkfsUsageException($"Invalid value {value} for {name} option: too large.");
        }
    }
}

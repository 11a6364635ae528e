using XfsWin.Mkfs;

using XfsWin.Cli.Output;

namespace XfsWin.Cli.Commands;

/// <summary>
/// <c>xfswin mkfs [options] TARGET</c>: makes a new XFS volume as mkfs.xfs 6.13 makes it, with its option
/// names and defaults. TARGET is an image file (created or extended with -d size=), a block device, or a
/// partition (<c>disk.img@2</c>). Exit codes: 0 made (or printed with -N), 1 bad options, 2 target not
/// found, 4 refused (an existing file system or partition table without -f), 5 I/O error.
/// </summary>
public static class MkfsCommand
{
    public const string Description = "Make a new XFS volume (mkfs.xfs's options and defaults, xfsprogs 6.13)";

    public const string Usage =
        "usage: xfswin mkfs [options] TARGET\n" +
        "  TARGET: an image file (made or extended to -d size=), a block device, or a partition (disk.img@2)\n" +
        "  -b size=BYTES                  block size (default 4096)\n" +
        "  -s size=BYTES                  sector size (default: the device's; 512 for image files)\n" +
        "  -d size=,agcount=,agsize=,su=,sw=,sunit=,swidth=,file,concurrency=\n" +
        "  -i size=,maxpct=,sparse=,nrext64=,exchange=,align=\n" +
        "  -l size=,internal=,logdev=,sectsize=,file,su=,sunit=,version=,lazy-count=,agnum=,concurrency=\n" +
        "  -m crc=,finobt=,rmapbt=,reflink=,bigtime=,inobtcount=,metadir=,uuid=\n" +
        "  -n size=,ftype=,parent=\n" +
        "  -L LABEL   -f (overwrite what TARGET holds)   -K (no discard)   -N (print, write nothing)   -q (quiet)\n" +
        "  Sizes take k, m, g, t suffixes (powers of 1024). See docs/cli.md.";

    public static int Run(string[] args) => Run(args, Console.Out, Console.Error, !Console.IsErrorRedirected);

    public static int Run(string[] args, TextWriter stdout, TextWriter stderr, bool interactive = false)
    {
        if (args.Length == 0 || args is ["-h"] or ["--help"])
        {
            (args.Length == 0 ? stderr : stdout).WriteLine(Usage);
            return args.Length == 0 ? ExitCodes.Usage : ExitCodes.Ok;
        }
        MkfsOptions options;
        try
        {
            options = MkfsOptionParser.Parse(args);
        }
        catch (MkfsUsageException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            stderr.WriteLine(Usage);
            return ExitCodes.Usage;
        }
        if (options.Target is null)
        {
            stderr.WriteLine("xfswin mkfs: no target given");
            stderr.WriteLine(Usage);
            return ExitCodes.Usage;
        }

        try
        {
            return Make(options, stdout, stderr, interactive);
        }
        catch (MkfsUsageException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            return ExitCodes.Usage;
        }
        catch (XfsException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            return ExitCodes.FromError(e.Error);
        }
        catch (UnauthorizedAccessException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message} (writing a device needs administrator/root rights)");
            return ExitCodes.Refused;
        }
        catch (IOException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Message}");
            return ExitCodes.IoError;
        }
    }

    private static int Make(MkfsOptions o, TextWriter stdout, TextWriter stderr, bool interactive)
    {
        // The plan creates and changes nothing: -N prints it and stops.
        var plan = MkfsRun.Plan(o);
        if (o.LogVersion == 1 && plan.Geometry.LogVersion == 2) stderr.WriteLine("log stripe unit specified, using v2 logs");
        if (!o.Quiet || o.DryRun) stdout.Write(MkfsSummary.Format(plan.Geometry, o.Target!, o.LogDevice));
        else if (!plan.Geometry.Crc) stdout.WriteLine(MkfsSummary.V4Deprecation);
        stdout.Flush();
        if (o.DryRun) return ExitCodes.Ok;

        using var bar = CliProgress.Start(stderr, interactive && !o.Quiet ? ProgressMode.Live : ProgressMode.Off, "mkfs");
        try
        {
            MkfsRun.Write(plan, bar.For<MkfsProgress>(v => (v.Stage, v.Done, v.Total)), DateTimeOffset.UtcNow);
        }
        catch (MkfsRefusedException e)
        {
            stderr.WriteLine($"xfswin mkfs: {e.Target} holds {e.Found}; nothing was written. Use -f to overwrite it.");
            return ExitCodes.Refused;
        }
        bar.Finish();
        return ExitCodes.Ok;
    }
}

using System.CommandLine;
using XfsWin.Cli.Output;
using XfsWin.Format;
using XfsWin.Volume;

namespace XfsWin.Cli.Commands;

/// <summary><c>xfswin cat SOURCE PATH</c>: a file's bytes to stdout, at disk speed.</summary>
public static class CatCommand
{
    public const string Description = "Write a file's contents to stdout (symlinks followed)";

    public static Command Build(CliConsole console)
    {
        var source = CommandSupport.SourceArgument();
        var path = new Argument<string>("PATH") { Description = "Path of a regular file inside the volume" };
        var partition = CommandSupport.PartitionOption();
        var progress = CommandSupport.ProgressOption();
        var noProgress = CommandSupport.NoProgressOption();
        var command = new Command("cat", Description) { source, path, partition, progress, noProgress };
        command.SetAction(parse => CommandSupport.Run(console, "cat", () =>
        {
            using var volume = CommandSupport.OpenVolume(parse.GetValue(source)!, parse.GetValue(partition));
            string p = CommandSupport.NormalizeVolumePath(parse.GetValue(path));
            ulong inode = volume.ResolvePath(p, followFinalSymlink: true);
            var a = volume.GetAttributes(inode);
            if (a.FileType == XfsFileType.Directory)
                throw new XfsException(XfsError.IsADirectory, $"'{p}' is a directory: use `xfswin ls` to list it or `xfswin extract` to copy it out");
            if (a.FileType != XfsFileType.RegularFile)
                throw new XfsException(XfsError.InvalidArgument, $"'{p}' is a {Formatting.TypeName(a.FileType)}, not a regular file: it has no contents to print");
            // Progress only makes sense when stdout goes to a file or pipe, not over the data on a terminal.
            bool show = CommandSupport.ProgressFlag(parse, progress, noProgress) ?? (console.StderrIsTerminal && !console.StdoutIsTerminal);
            var bar = CliProgress.Start(console.Error, show ? (console.StderrIsTerminal ? ProgressMode.Live : ProgressMode.Plain) : ProgressMode.Off, p, a.Size);
            console.Out.Flush();
            using var copy = new FileCopy();
            try
            {
                copy.Copy(volume, inode, a.Size, console.StdoutStream, bar);
                console.StdoutStream.Flush();
            }
            catch (IOException e) when (e is not XfsException)
            {
                throw new IOException($"writing to stdout failed ({e.Message}); is the disk it goes to full, or was the pipe closed?", e);
            }
            bar.Finish();
            return ExitCodes.Ok;
        }));
        return command;
    }
}
